"""spec/helpers/indexdb.py - the pymongo side of spec/05-secantus/index_spec.lua:
fills a collection fast with clones of documents the store itself wrote, turns
the server's profiler on and off, and explains the finds the store sent.

usage: python indexdb.py URI DB OP [ARGS...]; prints one JSON value.
  clone TEMPLATE_ID PREFIX FIRST LAST  insert clones PREFIX + %0Nd of the raw
                                       template (same length as the template id)
  profile LEVEL                        set the profiling level of DB
  drop                                 drop DB
  finds                                the find commands on `executions` the
                                       profiler recorded, oldest first
  explain FIND_JSON                    executionStats of that find, as sent
"""

import os
import sys

import pymongo
from bson import json_util
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument

BATCH = 5000


def clone(db, template_id, prefix, first, last):
    raw = db.get_collection("executions", codec_options=CodecOptions(document_class=RawBSONDocument))
    doc = raw.find_one({"_id": template_id})
    if doc is None:
        raise SystemExit("indexdb: template %r not found" % template_id)
    width = len(template_id) - len(prefix)
    if width < 1:
        raise SystemExit("indexdb: prefix %r is not shorter than the template id" % prefix)
    old, body = template_id.encode(), bytes(doc.raw)
    batch, n = [], 0
    # The id occurs in _id and inside the data JSON; an id of the same length
    # keeps every length prefix in the BSON valid.
    for i in range(first, last + 1):
        new = ("%s%0*d" % (prefix, width, i)).encode()
        batch.append(RawBSONDocument(body.replace(old, new)))
        if len(batch) == BATCH:
            n += len(raw.insert_many(batch, ordered=True).inserted_ids)
            batch = []
    if batch:
        n += len(raw.insert_many(batch, ordered=True).inserted_ids)
    return n


def finds(db):
    out = []
    for e in db["system.profile"].find({}).sort("ts", 1):
        cmd = e.get("command") or {}
        if cmd.get("find") == "executions":
            out.append({k: cmd[k] for k in ("filter", "projection", "sort", "limit") if k in cmd})
    return out


def explain(db, find):
    cmd = {"find": "executions"}
    cmd.update(find)
    r = db.command("explain", cmd, verbosity="executionStats")
    st = r["executionStats"]
    plan = r["queryPlanner"]["winningPlan"]
    stages = []
    while isinstance(plan, dict):
        stages.append(plan.get("stage"))
        if plan.get("stage") == "IXSCAN":
            stages[-1] = "IXSCAN " + plan.get("indexName", "?")
        plan = plan.get("inputStage")
    return {
        "nReturned": st["nReturned"],
        "totalDocsExamined": st["totalDocsExamined"],
        "totalKeysExamined": st["totalKeysExamined"],
        "plan": " <- ".join(s for s in stages if s),
    }


def main(argv):
    uri, dbname, op = argv[:3]
    args = argv[3:]
    client = pymongo.MongoClient(uri, serverSelectionTimeoutMS=10000)
    db = client[dbname]
    if op == "clone":
        out = clone(db, args[0], args[1], int(args[2]), int(args[3]))
    elif op == "profile_on":
        # everything recorded so far is someone else's: say how much there is
        out = len(finds(db))
        db.command("profile", 2)
    elif op == "collect":
        # profiling off, then the explain of every find recorded after the
        # first SEEN ones
        db.command("profile", 0)
        out = []
        for f in finds(db)[int(args[0]):]:
            e = explain(db, f)
            e["filter"] = json_util.dumps(f.get("filter", {}), json_options=json_util.RELAXED_JSON_OPTIONS)
            out.append(e)
    elif op == "drop":
        client.drop_database(dbname)
        out = True
    elif op == "finds":
        out = finds(db)
    elif op == "explain":
        out = explain(db, json_util.loads(args[0]))
    else:
        raise SystemExit("indexdb: unknown op " + op)
    sys.stdout.write(json_util.dumps(out, json_options=json_util.RELAXED_JSON_OPTIONS))
    sys.stdout.flush()
    # skip the client's slow shutdown of its monitor threads
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
