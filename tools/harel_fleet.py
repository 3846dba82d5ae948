"""A harel worker of a mixed fleet (spec/03-engine/mixed_fleet_spec.lua): harel
0.9.0's own DSL loader, MongoStore (default prefix "harel") and inline
DurableRunner, driving the executions of one .stm chart beside mongostore's.

usage: harel_fleet.py run  <uri> <db> <chart.stm> <plan.json>   create, send, then work (below)
       harel_fleet.py dump <uri> <db> [marks.json]              print every execution and what is pending

plan.json: {"start": T, "deadline": seconds, "me": name,
            "create": [{"id": ..., "context": {...}}, ...],
            "send": [{"target": id, "kind": ..., "id": event id, "data": {...}}, ...],
            "wait": [root ids]}
`run` waits until time T, creates its executions, sends its events (waiting for a
target another process creates), then loops recover + fire_due_timers until every
id of "wait" is DONE and nothing is pending, or the deadline. It prints one JSON
line: {"me", "ok", "created", "sent", "conflicts", "timers", "passes", "error"?}.
`dump` with marks.json ({execution id: [event ids]}) also says, through the
store's dedupe check, which of those events each execution has marked handled.
Nothing here reimplements harel: every read and write goes through its classes.
"""

import json
import sys
import time

from harel.dsl import definition_from_dsl_file, parse
from harel.engine.durable import DurableRunner
from harel.engine.execution import Status
from harel.engine.store import StoreConflict
from harel.engine.store.mongo import MongoStore
from harel.spec.states import Event


def out(doc):
    sys.stdout.buffer.write(json.dumps(doc, ensure_ascii=False, sort_keys=True).encode("utf-8") + b"\n")
    sys.stdout.flush()


def idle(store, wait):
    for eid in wait:
        exe = store.load(eid)
        if exe is None or exe.status is not Status.DONE:
            return False
    return not store.pending_outbox() and not store.pending_spawns()


def send(runner, store, ev, deadline, stats):
    event = Event(kind=ev["kind"], id=ev["id"], data=ev.get("data") or {})
    while time.time() < deadline:
        if store.load(ev["target"]) is None:
            time.sleep(0.01)  # created by another process, maybe not yet
            continue
        try:
            runner.process(ev["target"], event)
            return True
        except StoreConflict:
            stats["conflicts"] += 1
            # the event may be committed already and the conflict come from the relay
            # that followed it (a child another worker created first): never send it
            # again then, or a live region would get it as a broadcast
            if store.is_processed(ev["target"], event.id):
                return True
    return False


def run(uri, db, chart, plan_path):
    with open(plan_path, encoding="utf-8") as f:
        plan = json.load(f)
    # every machine of the file: the first is the root's, the others are invoked
    with open(chart, encoding="utf-8") as f:
        names = list(parse(f.read()).machines)
    definitions = {}
    for name in names:
        d = definition_from_dsl_file(chart, name)
        definitions[d.id] = d
    definition = definitions[names[0]]
    store = MongoStore.from_url(uri, db_name=db, connect_retries=5)
    runner = DurableRunner(store, definitions, trace=True, execution="inline")
    stats = {"me": plan.get("me"), "created": 0, "sent": 0, "conflicts": 0, "timers": 0, "passes": 0}
    try:
        while time.time() < plan.get("start", 0):
            time.sleep(0.005)
        deadline = time.time() + plan.get("deadline", 60)
        for c in plan.get("create", []):
            while True:
                try:
                    runner.create(definition.id, context=c.get("context") or {}, execution_id=c["id"])
                    break
                except StoreConflict:
                    # the Start committed; a relay after it lost to another worker
                    stats["conflicts"] += 1
                    if store.load(c["id"]) is not None:
                        break
            stats["created"] += 1
        for ev in plan.get("send", []):
            if not send(runner, store, ev, deadline, stats):
                stats["error"] = "send " + ev["id"] + ": its target never appeared"
                break
            stats["sent"] += 1
        wait = plan.get("wait", [])
        while time.time() < deadline:
            stats["passes"] += 1
            try:
                runner.recover(definition.id)
                stats["timers"] += runner.fire_due_timers()
            except StoreConflict:
                stats["conflicts"] += 1  # another worker got there first: look again
                continue
            if idle(store, wait):
                break
            time.sleep(0.02)
        stats["ok"] = "error" not in stats and idle(store, wait)
        out(stats)
    finally:
        store.close()


def dump(uri, db, marks_path=None):
    marks = {}
    if marks_path is not None:
        with open(marks_path, encoding="utf-8") as f:
            marks = json.load(f)
    store = MongoStore.from_url(uri, db_name=db, connect_retries=5)
    try:
        exes, cursor = {}, None
        while True:
            page = store.list_executions(limit=100, cursor=cursor)
            for s in page.items:
                exe = store.load(s.id)
                trace = store.read_trace(s.id)
                exes[s.id] = {
                    "status": exe.status.value,
                    "outcome": exe.outcome,
                    "active_path": exe.active_path,
                    "context": exe.context,
                    "processed_events": exe.processed_events,
                    "parent_id": exe.parent_id,
                    "definition_id": exe.definition_id,
                    "definition_fqn": exe.definition_fqn,
                    "children": {k: v.model_dump(mode="json") for k, v in exe.children.items()},
                    "deferred": len(exe.deferred),
                    "version": exe.version,
                    # harel's steps say event_kind, mongostore's say event: who applied each
                    "steps": [{"by": "harel" if "event_kind" in st else "mongostore",
                               "kind": st.get("event_kind", st.get("event")),
                               "event_id": st.get("event_id")} for st in trace],
                }
            cursor = page.next_cursor
            if cursor is None:
                break
        out({
            "executions": exes,
            "outbox": [{"seq": e.seq, "target_id": e.target_id, "kind": e.event.kind} for e in store.pending_outbox()],
            "spawns": [s.child_id for s in store.pending_spawns()],
            "timers": [list(t) for t in store.due_timers(float("inf"))],
            "marked": {eid: {ev: store.is_processed(eid, ev) for ev in evs} for eid, evs in marks.items()},
        })
    finally:
        store.close()


def main(argv):
    if len(argv) == 5 and argv[0] == "run":
        run(*argv[1:])
    elif len(argv) in (3, 4) and argv[0] == "dump":
        dump(*argv[1:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
