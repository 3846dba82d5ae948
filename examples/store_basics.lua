-- examples/store_basics.lua - the Execution store by hand: an order is
-- created, advanced by events with one atomic commit each (outbox, timers,
-- dedupe mark, trace), its queued events relayed, its timer swept, and a
-- stale writer refused. Run it with `make demo` (starts the bundled test
-- server unless MONGOSTORE_URI is set).
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local ms = require "mongostore"

local uri = os.getenv("MONGOSTORE_URI") or "mongodb://127.0.0.1:27017"
local store = assert(ms.connect(uri, { db = "mongostore_demo_" .. ms.uuid():sub(1, 8), wait = 30 }))
print("connected: " .. tostring(store))

-- A new order: version 0 until its first commit inserts it.
local order = ms.execution{ definition_id = "order", context = { items = { "book", "lamp" }, total = 59.90 } }
order.status = "RUNNING"
order.active_path = "Cart"
assert(store:save(order))
print(("created %s at version %d"):format(order.id, order.version))

-- Event PlaceOrder: move to AwaitingPayment, ask the payment service, arm a
-- 15-minute payment timeout, mark the event handled, all in one commit.
local now = ms.now()
order.active_path = "AwaitingPayment"
assert(store:commit(order, {
  emits = { { target_id = "payments", event = { kind = "Charge", data = { order = order.id, amount = 59.90 } } } },
  processed_event_id = "evt-place-1",
  timers = { { action = "schedule", path = "AwaitingPayment", fire_at = now + 900 } },
  trace = { event = "PlaceOrder", from = "Cart", to = "AwaitingPayment" },
}))
print(("PlaceOrder committed: version %d"):format(order.version))

-- The same event delivered again is recognised, in the same round trip as the load.
local again, seen = store:load_for_event(order.id, "evt-place-1")
print(("redelivery of evt-place-1: already processed = %s (version %d)"):format(tostring(seen), again.version))

-- The relay hands queued events on and acks each one.
for _, entry in ipairs(store:pending_outbox()) do
  print(("relay: seq %d -> %s: %s %s"):format(entry.seq, entry.target_id, entry.event.kind, entry.event.id))
  store:ack_outbox(entry.seq)
end

-- Half an hour later the sweep finds the payment timeout due.
for _, t in ipairs(store:due_timers(now + 1800)) do
  print(("timer due: %s %s at %.1f"):format(t.execution_id, t.path, t.fire_at))
  store:delete_timer(t.execution_id, t.path, t.fire_at)
end

-- A writer holding an old copy loses the compare-and-set and writes nothing.
local stale = store:load(order.id)
order.status = "CANCELLED"
order.active_path = "Cancelled"
assert(store:commit(order, { trace = { event = "Timeout", from = "AwaitingPayment", to = "Cancelled" } }))
stale.context.note = "too late"
local ok, err, code, detail = store:commit(stale, { emits = { { target_id = "mailer", event = { kind = "Thanks" } } } })
print(("stale writer: ok=%s code=%s found=%s (%s)"):format(tostring(ok), code, tostring(detail and detail.found), err))
assert(not ok and code == "conflict" and #store:pending_outbox() == 0)

for _, step in ipairs(store:read_trace(order.id)) do
  print(("trace %d: %s %s -> %s"):format(step.index, step.event, step.from, step.to))
end
local page = store:list_executions{ definition_id = "order", status = { "CANCELLED", "DONE" } }
for _, s in ipairs(page.items) do
  print(("listed: %s %s %s v%d"):format(s.id, s.status, s.active_path, s.version))
end
store:close()
print("demo finished")
