"""spec/helpers/stm_harel.py - reads a .stm file with harel's own DSL parser
(harel.dsl.parse, the pinned venv) and prints the program as normalized JSON:
the same shape mongostore.stm.normalize builds from the same text.

Usage: python stm_harel.py FILE.stm   (exit 0 and JSON on stdout; on a DSL
error, exit 3 and {"error": message, "line": L, "column": C} on stdout)
       python stm_harel.py --expand FILE.stm   (the machine as harel's loader
resolves it: actions through `bind`, named guards inlined, fragments' uses
expanded; the same output on an error)

The normal form keeps harel's parse result (the config dict its builder
takes) and changes only what JSON or a second parser cannot share:
ActionSpec objects become {"kind", "ref", "inputs"}, tuples become lists,
positions become [line, column], and predicate dicts (harel flattens an AND
of distinct event fields into one dict) become trees of
{"leaf": {...}}, {"guard": name}, {"all": [...]}, {"any": [...]}, {"not": p}.
"""

import json
import sys
from pathlib import Path

from harel.dsl import DslError, parse
from harel.dsl.loader import _resolve_cfg
from harel.dsl.parser import ActionSpec


def pred(d):
    parts = []
    for key, value in d.items():
        if key in ("all", "any"):
            parts.append({key: [pred(c) for c in value]})
        elif key == "not":
            parts.append({"not": pred(value)})
        elif key == "__guard__":
            parts.append({"guard": value})
        elif key == "__ref__":
            leaf = {"source": value["source"], "field": value["field"], "op": value["op"]}
            if value.get("value_ref"):
                leaf["ref"] = dict(value["value_ref"])
            else:
                leaf["value"] = conv(value["value"])
            parts.append({"leaf": leaf})
        else:
            field, _, op = key.rpartition("__")
            parts.append({"leaf": {"source": "event", "field": field, "op": op, "value": conv(value)}})
    return parts[0] if len(parts) == 1 else {"all": parts}


def trigger(d):
    out = {"type": d["type"]}
    rest = {k: v for k, v in d.items() if k != "type"}
    if rest:
        out["where"] = pred(rest)
    return out


def conv(v):
    if isinstance(v, ActionSpec):
        return {"kind": v.kind, "ref": v.ref, "inputs": conv(v.inputs)}
    if isinstance(v, (list, tuple)):
        return [conv(x) for x in v]
    if isinstance(v, dict):
        # the DSL has no null literal: a None is an absent option (a use's alias)
        return {k: conv_item(k, x) for k, x in v.items() if x is not None}
    return v


def conv_item(key, v):
    if key == "on_event":
        return trigger(v)
    if key == "when":
        return pred(v)
    if key == "args":  # a use's args: name -> (tag, payload)
        return {n: [t, pred(p) if t == "pred" else conv(p)] for n, (t, p) in v.items()}
    return conv(v)


def program(p):
    return {
        "imports": [dict({"path": path, "pos": list(pos)}, **({"alias": a} if a else {}))
                    for path, a, pos in p.imports],
        "bindings": dict(p.bindings),
        "guards": {n: pred(g) for n, g in p.guards.items()},
        "events": conv(p.events),
        "machines": conv(p.machines),
        "fragments": conv(p.fragments),
        "positions": {f"{kind} {name}": list(pos) for (kind, name), pos in p.positions.items()},
    }


def main():
    expand = sys.argv[1] == "--expand"
    text = open(sys.argv[-1], encoding="utf-8").read()
    try:
        if expand:  # imports are read relative to the file, as definition_from_dsl_file does
            out = conv(_resolve_cfg(text, None, Path(sys.argv[-1]).parent, None, None)[0])
        else:
            out = program(parse(text))
    except DslError as e:
        print(json.dumps({"error": e.message, "line": e.line, "column": e.column}))
        sys.exit(3)
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
