"""harel's own Python MongoStore, driven from the command line, for the
interoperation specs (spec/02-store/interop_spec.lua). Nothing here reimplements
the store: every read and write goes through harel.engine.store.mongo.

usage: harel_interop.py write   <uri> <db> <id>   commit the execution below (with an emit,
                                                  a timer, a spawn and a trace step); print its JSON
       harel_interop.py read    <uri> <db> <id>   print the loaded Execution's JSON, or null
       harel_interop.py list    <uri> <db> [definition_id]   print a list_executions page
       harel_interop.py pending <uri> <db> <id>   print pending outbox and spawns, every
                                                  timer, and the trace of <id>; a part harel
                                                  cannot read shows as {"error": "..."}
       harel_interop.py commit  <uri> <db> <id> <json>  load <id>, apply the changes <json> names
                                                  ({"status", "outcome", "active_path", "timers":
                                                  [[action, path, fire_at]], "event_id"}) and commit
                                                  it through harel's MongoStore.commit; print the
                                                  committed Execution's JSON

Output is JSON on stdout, one document per run. Collections use harel's
default prefix: harel_executions and harel_counters.
"""

import json
import sys
from datetime import datetime, timezone

from harel.engine.execution import ChildState, Execution, Status
from harel.engine.store._base import TimerOp
from harel.engine.store.mongo import MongoStore
from harel.spec.states import Event

# What `write` commits; the Lua spec checks these values field by field.
CONTEXT = {
    "text": "plain",
    "unicode": "h\u00e9llo \u2014 \u65e5\u672c\u8a9e \U0001f389",
    "escapes": 'quote" backslash\\ newline\n tab\t nul\x00',
    "nested": {"a": {"b": {"c": [1, 2, {"d": "deep"}]}}},
    "list": [1, "two", 3.5, True, None, {"k": "v"}, [9]],
    "empty_list": [],
    "empty_dict": {},
    "nothing": None,
    "yes": True,
    "no": False,
    "big": 2**53 + 1,
    "big_negative": -(2**53 + 1),
    "int64_max": 2**63 - 1,
    "float": 0.1,
    "float_negative": -2.5,
    "float_integral": 1.0,
    "float_huge": 1e300,
    "dotted.key": 1,
    "$dollar": 2,
}
DEFERRED_TIME = datetime(2025, 11, 30, 12, 0, 0, 500000, tzinfo=timezone.utc)  # 1764504000.5
TIMER = TimerOp("schedule", "Order.Processing.Waiting", 1764504100.25)


def out(text):
    sys.stdout.buffer.write(text.encode("utf-8") + b"\n")


def write(store, exe_id):
    exe = Execution(
        id=exe_id,
        definition_id="order",
        definition_fqn="shop.order",
        status=Status.RUNNING,
        active_path="Order.Processing.Waiting",
        history={"Order": "Order.Processing", "Order.Processing": "Order.Processing.Waiting"},
        context=CONTEXT,
        processed_events=3,
        priority=2,
        deferred=[Event(id="evt-deferred", kind="Payment", created_time=DEFERRED_TIME,
                        data={"amount": 12.5, "currency": "EUR"})],
        children={"child-1": ChildState(root_path="Order.Fork.A", finished=True, outcome="ok",
                                        result={"x": 1}, key="A")},
        invoke_seq={"Order.Fork": 1},
        created_at=1764504000.25,
        updated_at=1764504001.75,
    )
    emit = ("target-1", Event(id="evt-emit", kind="Shipped", data={"n": 1, "tags": ["a"]}))
    spawn = ("child-2", "Order.Fork.B", {"seed": 1, "tags": ["b"]})
    store.commit(exe, [emit], processed_event_id="evt-processed", timers=(TIMER,), spawns=(spawn,),
                 trace={"event": "Pay", "from": "Order.Processing", "to": "Order.Processing.Waiting"})
    out(exe.model_dump_json())


def read(store, exe_id):
    exe = store.load(exe_id)
    out(exe.model_dump_json() if exe is not None else "null")


def list_(store, definition_id=None):
    out(store.list_executions(definition_id=definition_id).model_dump_json())


def pending(store, exe_id):
    # Each part on its own, so one that harel cannot read does not hide the others.
    def part(fn):
        try:
            return fn()
        except Exception as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}

    out(json.dumps({
        "outbox": part(lambda: [{"seq": e.seq, "target_id": e.target_id, "event": e.event.model_dump(mode="json")}
                                for e in store.pending_outbox()]),
        "spawns": part(lambda: [vars(s) for s in store.pending_spawns()]),
        "timers": part(lambda: [list(t) for t in store.due_timers(float("inf"))]),
        "trace": part(lambda: store.read_trace(exe_id)),
    }, ensure_ascii=False))


def commit(store, exe_id, changes_json):
    changes = json.loads(changes_json)
    exe = store.load(exe_id)
    if exe is None:
        raise SystemExit("harel_interop: no execution %r" % exe_id)
    if "status" in changes:
        exe.status = Status(changes["status"])
    for name in ("outcome", "active_path"):
        if name in changes:
            setattr(exe, name, changes[name])
    timers = tuple(TimerOp(a, p, float(f)) for a, p, f in changes.get("timers", []))
    store.commit(exe, [], processed_event_id=changes.get("event_id"), timers=timers)
    out(exe.model_dump_json())


COMMANDS = {"write": (write, 1, 1), "read": (read, 1, 1), "list": (list_, 0, 1), "pending": (pending, 1, 1),
            "commit": (commit, 2, 2)}


def main(argv):
    cmd = COMMANDS.get(argv[0]) if argv else None
    if cmd is None or not cmd[1] <= len(argv) - 3 <= cmd[2]:
        sys.exit(__doc__)
    fn, uri, db, rest = cmd[0], argv[1], argv[2], argv[3:]
    store = MongoStore.from_url(uri, db_name=db, connect_retries=5)
    try:
        fn(store, *rest)
    finally:
        store.close()


if __name__ == "__main__":
    main(sys.argv[1:])
