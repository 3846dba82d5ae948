"""bench/documents_pymongo.py - the document rows done by pymongo: the same
four operations, sizes and document shape as bench/documents.lua and
bench/documents_limit.c, one round per run (bench/run.sh interleaves them).

usage: documents_pymongo.py <uri> <db> <label> <round> [n] [updates] [bulk]

Prints "RESULT docs.<label>.r<round>.<op>_ms <ms>" per operation (wall
time) and <op>_cpu_ms (the process's CPU time over the same span), and
docs.<label>.fields / docs.<label>.version. The documents are built as Python
dicts before the clock starts (encoding them is the driver's work, inside
the timed call); decoding visits every field of every document, nested ones
too, as the Lua side does.
"""
import sys
import time
import datetime

import bson
import pymongo
from pymongo import UpdateOne

BODY = ("Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et "
        "dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut aliquip.")
TAGS = ["news", "tech", "lua", "mongodb", "bench"]
STATUS = ["draft", "published", "archived"]
BASE_DATE = 1700000000000
BIG = 5000000000
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def make_doc(i):
    # _id and bytes are int64 (bson.Int64), views and meta.words int32 (a
    # small Python int), as in the other contenders.
    return {
        "_id": bson.Int64(i),
        "title": "Article number %d about documents" % i,
        "author": "author-%d" % (i % 97),
        "body": BODY,
        "status": STATUS[i % 3],
        "views": i % 1000,
        "bytes": bson.Int64(BIG + i),
        "score": i + 0.5,
        "published": i % 2 == 0,
        "created": EPOCH + datetime.timedelta(milliseconds=BASE_DATE + i * 1000),
        "tags": [TAGS[i % 5], TAGS[(i + 1) % 5], TAGS[(i + 2) % 5]],
        "meta": {"lang": "en", "words": 100 + i % 50, "source": "feed-%d" % (i % 7)},
    }


def update_id(k, n, offset):
    return 1 + ((k - 1) * 7 + offset) % n


def make_update(k):
    return {"$set": {"score": k + 0.25, "status": "edited"}, "$inc": {"views": 1}}


def visit(value):
    """Every field of a decoded document, recursively; returns the count."""
    fields = 0
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for _key, v in items:
        fields += 1
        if isinstance(v, (dict, list)):
            fields += visit(v)
    return fields


class Clock:
    """Wall and process CPU time (ms) of each timed span, in order."""

    def __init__(self):
        self.wall, self.cpu = [], []

    def start(self):
        self.t0, self.c0 = time.perf_counter(), time.process_time()

    def stop(self):
        self.wall.append((time.perf_counter() - self.t0) * 1e3)
        self.cpu.append((time.process_time() - self.c0) * 1e3)


def round_of(db, name, n, updates, bulk):
    coll = db[name]
    coll.drop()
    clock = Clock()
    docs = [make_doc(i) for i in range(1, n + 1)]
    clock.start()
    coll.insert_many(docs, ordered=False)
    clock.stop()

    clock.start()
    fields, count = 0, 0
    for doc in coll.find({}):
        fields += visit(doc)
        count += 1
    clock.stop()
    if count != n:
        sys.exit("documents_pymongo: find returned %d documents, expected %d" % (count, n))

    clock.start()
    for k in range(1, updates + 1):
        coll.update_one({"_id": bson.Int64(update_id(k, n, 0))}, make_update(k))
    clock.stop()

    ops = [UpdateOne({"_id": bson.Int64(update_id(k, n, 3))}, make_update(k)) for k in range(1, bulk + 1)]
    clock.start()
    coll.bulk_write(ops, ordered=False)
    clock.stop()
    coll.drop()
    return clock, fields


def main():
    if not 5 <= len(sys.argv) <= 8:
        sys.exit("usage: documents_pymongo.py <uri> <db> <label> <round> [n] [updates] [bulk]")
    uri, dbname, label, rnd = sys.argv[1:5]
    n = int(sys.argv[5]) if len(sys.argv) > 5 else 10000
    updates = int(sys.argv[6]) if len(sys.argv) > 6 else 1000
    bulk = int(sys.argv[7]) if len(sys.argv) > 7 else 1000
    client = pymongo.MongoClient(uri, appname="mongostore-bench-documents")
    db = client[dbname]
    client.admin.command("ping")
    round_of(db, "warm", n // 10 + 1, updates // 10 + 1, bulk // 10 + 1)
    clock, fields = round_of(db, "docs", n, updates, bulk)
    ops = ["insert_many", "find", "update_one", "bulk_write"]
    print("documents_pymongo %s round %s: %s (%d fields decoded)" % (
        label, rnd, " ".join("%s %.1f ms (cpu %.1f)" % t for t in zip(ops, clock.wall, clock.cpu)), fields),
        file=sys.stderr)
    for op, v, c in zip(ops, clock.wall, clock.cpu):
        print("RESULT docs.%s.r%s.%s_ms %.2f" % (label, rnd, op, v))
        print("RESULT docs.%s.r%s.%s_cpu_ms %.2f" % (label, rnd, op, c))
    print("RESULT docs.%s.fields %d" % (label, fields))
    print("RESULT docs.%s.version pymongo %s (C extension: %s), Python %s" % (
        label, pymongo.__version__, "yes" if pymongo.has_c() else "no", sys.version.split()[0]))
    client.close()


if __name__ == "__main__":
    main()
