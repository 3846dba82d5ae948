#!/usr/bin/env python3
"""Reads a JSON list of OPTIMADE filters on stdin and prints, as a JSON list,
whether the optimade package's Lark grammar (filter language v1.1) parses
each one: true when it parses, false when it refuses it as a syntax error.
Used by spec/02-records/optimade_interop_spec.lua."""
import json
import sys

from lark.exceptions import LarkError
from optimade.filterparser import LarkParser
from optimade.server.exceptions import BadRequest


def main():
    filters = json.load(sys.stdin)
    parser = LarkParser(version=(1, 1, 0))
    out = []
    for text in filters:
        try:
            parser.parse(text)
            out.append(True)
        except (BadRequest, LarkError):
            out.append(False)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
