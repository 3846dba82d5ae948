-- examples/order.lua - the order chart (examples/order_chart.lua) run
-- durably against MongoDB: three orders take different paths (paid and
-- fulfilled through an orthogonal fork, declined until given up, timed out),
-- a worker relays their events and fires their timers, and each execution's
-- trace is printed. `make demo` runs it (with the bundled test server unless
-- MONGOSTORE_URI is set).
package.path = "lua/?.lua;lua/?/init.lua;examples/?.lua;" .. package.path
local ms = require "mongostore"
local engine_mod = require "mongostore.engine"

local order = require "order_chart"

local uri = os.getenv("MONGOSTORE_URI") or "mongodb://127.0.0.1:27017"
local store = assert(ms.connect(uri, { db = "mongostore_orders_" .. ms.uuid():sub(1, 8), wait = 30 }))
local charged = 0
local engine = engine_mod.new{
  store = store, charts = { order }, trace = true,
  -- Charge is external (no target execution): count the payment requests
  on_external = function(entry) if entry.event.kind == "Charge" then charged = charged + 1 end end,
}

local function drain() while engine:step() > 0 do end end

-- o-1: paid, picked, packed, both regions go, joined: Done
assert(engine:start("order", { id = "o-1", context = { total = 30, payment_timeout = 900 } }))
for _, kind in ipairs { "PlaceOrder", "Paid", "Picked", "Packed" } do
  assert(engine:send("o-1", { kind = kind, data = { amount = 30 } }))
  drain()
end
assert(engine:send("o-1", { kind = "Go", id = "go-1" }))  -- a parent with live regions passes it on
assert(engine:send("o-1", { kind = "Go", id = "go-1" }))  -- the same id again: applied once
drain()

-- o-2: declined three times: the selector gives up
assert(engine:start("order", { id = "o-2", context = { total = 12, payment_timeout = 900 } }))
assert(engine:send("o-2", { kind = "PlaceOrder" }))
for _ = 1, 3 do assert(engine:send("o-2", { kind = "Declined" })) end
drain()

-- o-3: nobody pays within its (short) timeout: the timer sweep cancels it
assert(engine:start("order", { id = "o-3", context = { total = 5, payment_timeout = 0.3 } }))
assert(engine:send("o-3", { kind = "PlaceOrder" }))
local deadline = ms.now() + 10
repeat
  engine:run{ idle_sleep = 0.05, sweep_interval = 0.1,
              stop = function() return ms.now() > deadline or store:load("o-3").status ~= "RUNNING" end }
until ms.now() > deadline or store:load("o-3").status ~= "RUNNING"

for _, id in ipairs { "o-1", "o-2", "o-3" } do
  local exe = store:load(id)
  print(("%s: %s %s at %s (version %d)"):format(id, exe.status, tostring(exe.outcome), exe.active_path, exe.version))
  for _, step in ipairs(store:read_trace(id)) do
    print(("  %2d  %-10s %-24s -> %-24s %s"):format(step.index, step.event, step.from or "-", step.to or "-",
                                                    step.status))
  end
end
print(("payment requests sent: %d"):format(charged))
store:close()
