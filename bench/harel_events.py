"""bench/harel_events.py - the events/s workload of bench/events.lua on
harel 0.9.0's own durable runner (harel.DurableRunner) over harel's own
MongoStore (pymongo), against the same server: N executions x 2 events on a
flat chart (create, whose Start reaches Waiting, then process of Go, which
reaches the final state Done), trace off, run by W worker processes at once,
each its own share of the executions.

usage: python bench/harel_events.py <uri> [--n N] [--workers W] [--db DB]
                                          [--label L] [--mode inline|background]

The workers are real OS processes (this script again, with --worker). Each
connects and builds its runner, says READY and waits for a go file; the wall
time runs from the earliest worker start to the latest worker end, so
connecting is not counted. Events/s = 2N / wall. The database is dropped
first, so harel starts from an empty collection, as mongostore does.

`--mode` is the runner's `execution=`: "inline" (the default here: harel runs
every store call in the calling thread, its faster mode for a sync store) or
"background" (harel's own default: its shared event loop).

Output: a human summary on stderr, "RESULT <label>.<key> <value>" lines on
stdout, the same format as bench/events.lua.
"""

import os
import subprocess
import sys
import tempfile
import time

FLAT = """
machine flat {
  initial Waiting
  state Waiting {}
  final Done success
  from Waiting to Done on Go
}
"""


def rss_kb():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def worker(uri, db, tag, count, gofile, mode):
    from harel import DurableRunner, Event, definition_from_dsl
    from harel.engine.execution import Status
    from harel.engine.store.mongo import MongoStore

    defn = definition_from_dsl(FLAT, "flat")
    store = MongoStore.from_url(uri, db_name=db, connect_retries=60)
    runner = DurableRunner(store, {defn.id: defn}, execution=mode)
    ids = [f"{tag}-{i:07d}" for i in range(1, count + 1)]
    print("READY", flush=True)
    while not os.path.exists(gofile):
        time.sleep(0.001)

    done = 0
    t0 = time.time()
    for eid in ids:
        runner.create(defn.id, {}, execution_id=eid)
        exe = runner.process(eid, Event(kind="Go", data={}))
        if exe.status is Status.DONE:
            done += 1
    t1 = time.time()
    print(f"W start {t0:.6f}\nW stop {t1:.6f}\nW events {2 * count}\nW done {done}\nW rss_kb {rss_kb()}",
          flush=True)
    store.close()


def options(argv, defaults):
    opts = dict(defaults)
    i = 0
    while i < len(argv):
        key = argv[i]
        if not key.startswith("--") or i + 1 >= len(argv):
            sys.exit(f"bad option {key}\n" + __doc__)
        opts[key[2:].replace("-", "_")] = argv[i + 1]
        i += 2
    return opts


def coordinator(uri, opts):
    import pymongo

    n, w, mode, label = int(opts["n"]), int(opts["workers"]), opts["mode"], opts["label"]
    client = pymongo.MongoClient(uri)
    client.drop_database(opts["db"])
    client.close()

    fd, gofile = tempfile.mkstemp(prefix="harel-bench-go.")
    os.close(fd)
    os.remove(gofile)
    procs = []
    for k in range(1, w + 1):
        share = n // w + (1 if k <= n % w else 0)
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", uri, opts["db"], f"w{k}", str(share),
               gofile, mode]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True))
    for k, p in enumerate(procs, 1):
        line = p.stdout.readline().strip()
        if line != "READY":
            sys.exit(f"harel worker {k} did not get ready (said {line!r})")
    open(gofile, "w").close()

    first, last, events, done, rss = float("inf"), float("-inf"), 0, 0, []
    for k, p in enumerate(procs, 1):
        got = {}
        for line in p.stdout:
            parts = line.split()
            if len(parts) == 3 and parts[0] == "W":
                got[parts[1]] = parts[2]
        if p.wait() != 0 or "stop" not in got:
            sys.exit(f"harel worker {k} failed (exit {p.returncode})")
        first = min(first, float(got["start"]))
        last = max(last, float(got["stop"]))
        events += int(got["events"])
        done += int(got["done"])
        rss.append(int(got["rss_kb"]))
    os.remove(gofile)

    wall = last - first
    eps = events / wall
    print(f"harel events ({mode}): {n} executions x 2 events, {w} worker process(es): {eps:.0f} events/s "
          f"({wall:.2f} s wall), {done}/{n} DONE, worker RSS max {max(rss)} KiB", file=sys.stderr)
    out = [("executions", n), ("workers", w), ("events", events), ("wall_s", f"{wall:.3f}"), ("eps", f"{eps:.0f}"),
           ("done", done), ("rss_kb_max", max(rss)), ("rss_kb_mean", f"{sum(rss) / len(rss):.0f}"), ("mode", mode)]
    for key, val in out:
        print(f"RESULT {label}.{key} {val}")
    if done != n:
        sys.exit(f"harel events: only {done} of {n} executions reached DONE")


def main(argv):
    if argv and argv[0] == "--worker":
        uri, db, tag, count, gofile, mode = argv[1:7]
        worker(uri, db, tag, int(count), gofile, mode)
        return
    uri = argv[0] if argv and not argv[0].startswith("--") else os.environ.get("MONGOSTORE_URI")
    if not uri:
        sys.exit(__doc__)
    rest = argv[1:] if argv and not argv[0].startswith("--") else argv
    opts = options(rest, {"n": "1000", "workers": "1", "db": "harel_bench_events", "label": "harel",
                          "mode": "inline"})
    if opts["mode"] not in ("inline", "background"):
        sys.exit("--mode must be inline or background")
    coordinator(uri, opts)


if __name__ == "__main__":
    main(sys.argv[1:])
