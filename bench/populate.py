"""bench/populate.py - fills a collection with many executions for
bench/latency.lua, fast: it clones documents that mongostore itself wrote.

usage: python bench/populate.py <uri> <template_db> <template_coll> <db> <coll>
                                <first> <last> <template_id>... [--procs P]

Inserts clones number first..last (ids "x" + 12 digits) into db.coll. Clone
number i is a byte-for-byte copy of template i % len(templates) (the
templates are read raw, as mongostore stored them, so every field keeps its
BSON type and whatever fields the store writes today) with the template's id
replaced by the clone's wherever it occurs: in _id, inside the data JSON, in
the dedupe marks. The template ids must be 13 characters long, as the clone
ids are, so the substitution keeps every length in the document valid.

P processes (default 4) insert their ranges at once with unordered
insert_many batches of 5,000. Prints "inserted <n> in <s> s" on stderr.
"""

import multiprocessing
import sys
import time

BATCH = 5000


def clone_id(i):
    return "x%012d" % i


def insert_range(args):
    uri, db, coll, lo, hi, templates = args
    import pymongo
    from bson.raw_bson import RawBSONDocument

    client = pymongo.MongoClient(uri)
    c = client[db][coll]
    batch = []
    for i in range(lo, hi + 1):
        tid, raw = templates[i % len(templates)]
        batch.append(RawBSONDocument(raw.replace(tid, clone_id(i).encode())))
        if len(batch) == BATCH:
            c.insert_many(batch, ordered=False)
            batch = []
    if batch:
        c.insert_many(batch, ordered=False)
    client.close()
    return hi - lo + 1


def main(argv):
    procs = 4
    if "--procs" in argv:
        k = argv.index("--procs")
        procs = int(argv[k + 1])
        argv = argv[:k] + argv[k + 2:]
    if len(argv) < 8:
        sys.exit(__doc__)
    uri, tdb, tcoll, db, coll, first, last = argv[:7]
    first, last = int(first), int(last)
    ids = argv[7:]
    import pymongo
    from bson.codec_options import CodecOptions
    from bson.raw_bson import RawBSONDocument

    client = pymongo.MongoClient(uri)
    raw = client[tdb].get_collection(tcoll, codec_options=CodecOptions(document_class=RawBSONDocument))
    templates = []
    for tid in ids:
        if len(tid) != 13:
            sys.exit(f"template id {tid!r} must be 13 characters long")
        doc = raw.find_one({"_id": tid})
        if doc is None:
            sys.exit(f"template {tid!r} not found in {tdb}.{tcoll}")
        templates.append((tid.encode(), bytes(doc.raw)))
    client.close()
    if last < first:
        return

    t0 = time.time()
    n = last - first + 1
    procs = max(1, min(procs, n // BATCH + 1))
    step = -(-n // procs)
    ranges = [(uri, db, coll, lo, min(lo + step - 1, last), templates) for lo in range(first, last + 1, step)]
    if len(ranges) == 1:
        done = insert_range(ranges[0])
    else:
        with multiprocessing.get_context("fork").Pool(len(ranges)) as pool:
            done = sum(pool.map(insert_range, ranges))
    print(f"populate: inserted {done} into {db}.{coll} in {time.time() - t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
