"""spec/helpers/bsontypes.py - the pymongo side of spec/02-documents/bson_roundtrip_spec.lua:
writes a document holding every BSON type (the legacy undefined, symbol and
DBPointer spliced in as raw elements, since pymongo no longer writes them),
and reads documents back as their raw bytes (RawBSONDocument), so the spec
compares bytes and not what a driver made of them.

usage: python bsontypes.py URI DB COLL OP [ARG]; prints one line.
  write ID    insert the every-type document with _id ID (less the fields
              named in BSONTYPES_SKIP, comma-separated); prints its bytes as
              the server returns them, in hex
  bytes ID    the every-type document's bytes as pymongo encodes them, in
              hex, with no server (URI, DB and COLL are not used)
  raw ID      the bytes of the document with _id ID, in hex ("none" if absent)
  types ID    the Python type pymongo reads each field of _id ID as, as JSON
  insert HEX  insert the document whose bytes are HEX, as they are
  ejson ID    the every-type document as pymongo's canonical Extended JSON,
              with no server
  from_ejson TEXT
              the bytes pymongo encodes the canonical Extended JSON TEXT
              as, in hex, with no server
"""

import json
import os
import struct
import sys
import uuid

import pymongo
import pymongo.common
from bson import encode
from bson.binary import Binary
from bson.code import Code
from bson.codec_options import CodecOptions
from bson.datetime_ms import DatetimeMS
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.raw_bson import RawBSONDocument
from bson.regex import Regex
from bson.timestamp import Timestamp

# mongo-java-server reports wire version 8, below what a current pymongo takes
pymongo.common.MIN_SUPPORTED_WIRE_VERSION = min(pymongo.common.MIN_SUPPORTED_WIRE_VERSION, 6)


def every_type(doc_id):
    doc = {
        "_id": doc_id,
        "double": 1.5,
        "double_integral": 2.0,
        "double_negative_zero": -0.0,
        "double_big": 1e300,
        "double_nan": float("nan"),
        "double_inf": float("inf"),
        "string": "h\u00e9llo \u2603",
        "string_empty": "",
        "document": {"z": 1, "a": 2.0, "m": "x", "n": {"k": Int64(3)}},
        "array": [1, 2.0, Int64(3), "four", [5, 6.0], {"seven": 7}],
        "array_empty": [],
        "document_empty": {},
        "binary": Binary(b"\x00\x01\xfe\xff", 0),
        "binary_function": Binary(b"fn", 1),
        "binary_old": Binary(b"old", 2),
        "binary_uuid": Binary(uuid.UUID("12345678-1234-5678-1234-567812345678").bytes, 4),
        "binary_md5": Binary(b"\x11" * 16, 5),
        "binary_user": Binary(b"user", 0x80),
        "objectid": ObjectId("65a1b2c3d4e5f60718293a4b"),
        "true": True,
        "false": False,
        "date": DatetimeMS(1700000000123),
        "date_before_1970": DatetimeMS(-86400001),
        "null": None,
        "regex": Regex("^a.*b$", "imx"),
        "regex_plain": Regex("x", ""),
        "code": Code("function () { return 1; }"),
        "code_with_scope": Code("function () { return a; }", {"a": 1, "b": [2.5]}),
        "int32": 7,
        "int32_min": -(2 ** 31),
        "int32_max": 2 ** 31 - 1,
        "timestamp": Timestamp(1700000000, 5),
        "int64": Int64(7),
        "int64_big": Int64(2 ** 53 + 1),
        "int64_min": Int64(-(2 ** 63)),
        "int64_max": Int64(2 ** 63 - 1),
        "decimal": Decimal128("1.10"),
        "decimal_exp": Decimal128("-1.5E-20"),
        "decimal_nan": Decimal128("NaN"),
        "minkey": MinKey(),
        "maxkey": MaxKey(),
        "nested": {"deep": [{"x": 1}, {"x": 2.5, "y": [Int64(1), 2]}]},
    }
    elements = [(k, encode({k: v})[4:-1]) for k, v in doc.items()]
    elements.append(("undefined", b"\x06undefined\x00"))
    elements.append(("symbol", b"\x0esymbol\x00" + struct.pack("<i", 4) + b"sym\x00"))
    elements.append(("dbpointer", b"\x0cdbpointer\x00" + struct.pack("<i", 5) + b"coll\x00"
                     + bytes.fromhex("65a1b2c3d4e5f60718293a4c")))
    return elements


def document(elements, skip=()):
    body = b"".join(e for k, e in elements if k not in skip)
    return struct.pack("<i", len(body) + 5) + body + b"\x00"


def main():
    uri, db_name, coll_name, op = sys.argv[1:5]
    arg = sys.argv[5] if len(sys.argv) > 5 else None
    skip = [k for k in os.environ.get("BSONTYPES_SKIP", "").split(",") if k]
    if op == "bytes":
        sys.stdout.write(document(every_type(arg), skip).hex() + "\n")
        sys.stdout.flush()
        return
    if op in ("ejson", "from_ejson"):
        from bson import json_util
        from bson import decode
        if op == "ejson":
            doc = decode(document(every_type(arg), skip))
            out = json_util.dumps(doc, json_options=json_util.CANONICAL_JSON_OPTIONS)
        else:
            out = encode(json_util.loads(arg, json_options=json_util.CANONICAL_JSON_OPTIONS)).hex()
        sys.stdout.write(out + "\n")
        sys.stdout.flush()
        return
    client = pymongo.MongoClient(uri, serverSelectionTimeoutMS=10000)
    coll = client[db_name].get_collection(coll_name, codec_options=CodecOptions(document_class=RawBSONDocument))
    if op == "write":
        coll.insert_one(RawBSONDocument(document(every_type(arg), skip)))
        op = "raw"
    if op == "raw":
        doc = coll.find_one({"_id": arg})
        out = "none" if doc is None else doc.raw.hex()
    elif op == "types":
        plain = coll.with_options(codec_options=CodecOptions())
        doc = plain.find_one({"_id": arg})
        out = json.dumps({k: type(v).__name__ for k, v in doc.items()}, sort_keys=True)
    elif op == "insert":
        coll.insert_one(RawBSONDocument(bytes.fromhex(arg)))
        out = "ok"
    else:
        raise SystemExit("bsontypes: unknown op " + op)
    sys.stdout.write(out + "\n")
    sys.stdout.flush()
    os._exit(0)  # skip the client's slow shutdown of its monitor threads


if __name__ == "__main__":
    main()
