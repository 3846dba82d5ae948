-- spec/04-ngx/flow_spec.lua - the OpenResty example (examples/openresty/) under
-- Debian's nginx, driven over HTTP: the config loads (resty.core included,
-- which `nginx -t` alone does not show), /ping answers without MongoDB, an
-- order goes the whole way (PlaceOrder, Paid, Picked, Packed, Go to the live
-- regions, the join) to Done, a second one is cancelled by its payment
-- timeout, fired by the nginx worker's timer sweep, and the control actions
-- (suspend, resume, cancel) reach the engine.
local lu = require "luaunit"
local H = require "helpers.ngx"

local server

local function srv()
  if not server then server = H.start() end
  return server
end

-- Starts an order; returns its id.
local function start_order(id, context)
  local status, body = srv():post("/executions", { chart = "order", id = id, context = context })
  lu.assertEquals(status, 201, H.encode({ body }))
  lu.assertEquals(body.id, id)
  return id
end

-- expect: the outcome the answer must say (transition unless given)
local function send(id, kind, data, event_id, expect)
  local status, body = srv():post("/executions/" .. id .. "/events", { kind = kind, data = data, id = event_id })
  lu.assertEquals(status, 202, string.format("%s to %s: %s", kind, id, H.encode({ body })))
  lu.assertEquals(body.ok, true)
  lu.assertEquals(body.outcome, expect or "transition", kind .. " to " .. id)
  lu.assertEquals(type(body.status), "string")
end

-- GET /executions/{id}: execution, trace.
local function show(id)
  local status, body = srv():get("/executions/" .. id)
  lu.assertEquals(status, 200, H.encode({ body }))
  return body.execution, body.trace
end

local function wait_for(id, pred, timeout, what)
  local exe
  local ok = H.poll(function()
    exe = show(id)
    return pred(exe)
  end, timeout or 15)
  lu.assertTrue(ok ~= nil, string.format("%s: %s; last seen %s", id, what, H.encode(exe)))
  return exe
end

local function events_of(trace)
  local out = {}
  for _, step in ipairs(trace) do out[#out + 1] = step.event end
  return out
end

TestOrderFlow = {}

-- Nothing went wrong inside nginx (no Lua error, no failed handler).
function TestOrderFlow:tearDown()
  if server then lu.assertEquals(server:errors(), {}) end
end

function TestOrderFlow.teardownClass()
  if server then
    local errors = server:errors()
    pcall(server.stop, server)
    server = nil
    if #errors > 0 then print("nginx logged errors:\n" .. table.concat(errors, "\n")) end
  end
end

-- `nginx -t` passes on the rendered example, but it neither runs
-- init_by_lua nor loads resty.core: only a real start does. The example
-- starts (its init block asserts resty.core is loaded); the same config
-- without the ';;' that ends lua_package_path passes `nginx -t` and still
-- fails to start, for want of resty.core.
function TestOrderFlow:test_config_loads_resty_core()
  H.check_prerequisites()
  local s = srv()
  local ok, out = H.config_test(s.prefix, s.conf, s.db)
  lu.assertTrue(ok, out)
  lu.assertStrContains(H.read(s.conf), ';;";')

  local prefix = (H.sh("mktemp -d /tmp/mongostore-ngx-bad.XXXXXX"):gsub("%s+$", ""))
  local conf = H.render.render{ prefix = prefix, port = s.port + 1, workers = 1 }
  local text = H.read(conf)
  local broken, n = text:gsub('/%?/init%.lua;;";', '/?/init.lua";')
  lu.assertEquals(n, 1)
  local f = assert(io.open(conf, "w"))
  f:write(broken)
  f:close()
  ok, out = H.config_test(prefix, conf, s.db)
  lu.assertTrue(ok, "nginx -t is expected to pass without resty.core: " .. out)
  -- a real start: it must fail at once (before listening), naming resty.core
  local _, status = H.sh("timeout 20 " .. H.render.command(prefix, conf))
  local log = H.read(prefix .. "/logs/error.log") or ""
  H.sh("rm -rf " .. H.shell_quote(prefix))
  lu.assertNotEquals(status, 0)
  lu.assertNotEquals(status, 124, "nginx started without resty.core")
  lu.assertStrContains(log, "failed to load the 'resty.core' module")
end

function TestOrderFlow:test_ping()
  local status, body, ctype = srv():get("/ping")
  lu.assertEquals(status, 200)
  lu.assertEquals(body, "pong")
  lu.assertStrContains(ctype, "text/plain")
end

function TestOrderFlow:test_order_runs_to_done()
  local id = start_order("o-1", { total = 30, payment_timeout = 60 })
  local exe, trace = show(id)
  lu.assertEquals(exe.id, id)
  lu.assertNil(exe.dedupe, "the store's dedupe digests are not part of the API's view")
  lu.assertEquals(exe.definition_id, "order")
  lu.assertEquals(exe.status, "RUNNING")
  lu.assertEquals(exe.active_path, "Cart")
  lu.assertEquals(exe.context.total, 30)
  lu.assertEquals(events_of(trace), { "Start" })

  -- starting the same id again is the same execution: no second Start
  lu.assertEquals(start_order(id, { total = 99 }), id)
  exe = show(id)
  lu.assertEquals(exe.context.total, 30)

  send(id, "PlaceOrder")
  exe = show(id)
  lu.assertEquals(exe.active_path, "AwaitingPayment")
  lu.assertEquals(exe.context.attempts, 1)

  send(id, "Paid", {}, nil, "ignored") -- no amount: the guard keeps it waiting
  lu.assertEquals(show(id).active_path, "AwaitingPayment")
  send(id, "Paid", { amount = 30 })
  lu.assertEquals(show(id).active_path, "Fulfilling.Picking")
  send(id, "Picked")                   -- Packing is a sink: Fulfilling is finished, waiting for Packed
  lu.assertEquals(show(id).active_path, "Fulfilling")
  send(id, "Packed")
  exe = show(id)
  lu.assertEquals(exe.active_path, "Fork")
  lu.assertEquals(exe.status, "RUNNING")

  -- Go is not the parent's: it goes to each live region (the worker's
  -- relays create the regions and deliver it); the same event id twice is
  -- applied once
  send(id, "Go", nil, "go-1", "forwarded") -- to the live regions
  local status, body = srv():post("/executions/" .. id .. "/events", { kind = "Go", id = "go-1" })
  lu.assertEquals(status, 202)
  lu.assertEquals(body, { ok = true, duplicate = true })
  exe = wait_for(id, function(e) return e.status == "DONE" end, 20, "the join never finished it")
  lu.assertEquals(exe.outcome, "success")
  lu.assertEquals(exe.active_path, "Done")

  trace = select(2, show(id))
  local events = events_of(trace)
  lu.assertEquals({ table.unpack(events, 1, 7) }, { "Start", "PlaceOrder", "Paid", "Paid", "Picked", "Packed", "Go" })
  local gos, finished = 0, 0
  for _, e in ipairs(events) do
    if e == "Go" then gos = gos + 1 end
    if e == "Finished" then finished = finished + 1 end
  end
  lu.assertEquals(gos, 1)
  lu.assertEquals(finished, 2)          -- one per region
  local last = trace[#trace]
  lu.assertEquals(last.to, "Done")
  lu.assertEquals(last.status, "DONE")

  -- both regions ran as their own executions and finished with success
  local list_status, page = srv():get("/executions?definition_id=order&limit=100")
  lu.assertEquals(list_status, 200)
  local regions = {}
  for _, item in ipairs(page.items) do
    if item.parent_id == id then regions[#regions + 1] = item end
  end
  lu.assertEquals(#regions, 2)
  for _, r in ipairs(regions) do
    lu.assertEquals(r.status, "DONE")
    lu.assertEquals(r.outcome, "success")
  end

  -- an event for a finished order is still accepted, and changes nothing
  send(id, "Go", nil, "go-2", "finished")
  exe = show(id)
  lu.assertEquals(exe.status, "DONE")
  lu.assertEquals(exe.active_path, "Done")
end

-- Nobody pays: the payment timeout (0.5 s) is fired by the nginx worker's
-- sweep (ngx.timer.every), not by anything this spec does.
function TestOrderFlow:test_payment_timeout_cancels()
  local id = start_order("o-2", { total = 12, payment_timeout = 0.5 })
  send(id, "PlaceOrder")
  local t0 = require("mongostore").now()
  local exe = wait_for(id, function(e) return e.status ~= "RUNNING" end, 15, "the timeout never fired")
  local took = require("mongostore").now() - t0
  lu.assertEquals(exe.status, "DONE")
  lu.assertEquals(exe.outcome, "cancelled")
  lu.assertEquals(exe.active_path, "Cancelled")
  local _, trace = show(id)
  local last = trace[#trace]
  lu.assertEquals(last.event, "Timeout")
  lu.assertEquals(last.from, "AwaitingPayment")
  lu.assertEquals(last.to, "Cancelled")
  lu.assertStrContains(last.event_id, "timeout:" .. id .. ":AwaitingPayment:")
  lu.assertTrue(took >= 0.4, "fired early: " .. took)
  print(string.format("payment timeout 0.5 s: cancelled %.2f s after PlaceOrder", took))
end

-- POST /executions/{id}/suspend holds the events that arrive; resume
-- releases them; cancel on a chart without a Cancel transition terminates.
function TestOrderFlow:test_control_actions()
  local id = start_order("o-3", { total = 7 })
  send(id, "PlaceOrder")
  local status, body = srv():post("/executions/" .. id .. "/suspend")
  lu.assertEquals(status, 202, H.encode({ body }))
  lu.assertEquals(show(id).status, "SUSPENDED")
  send(id, "Paid", { amount = 7 }, nil, "held")
  local exe = show(id)
  lu.assertEquals(exe.status, "SUSPENDED")
  lu.assertEquals(exe.active_path, "AwaitingPayment")
  status = srv():post("/executions/" .. id .. "/resume")
  lu.assertEquals(status, 202)
  exe = wait_for(id, function(e) return e.active_path == "Fulfilling.Picking" end, 10, "resume released nothing")
  lu.assertEquals(exe.status, "RUNNING")

  status = srv():post("/executions/" .. id .. "/cancel")
  lu.assertEquals(status, 202)
  exe = show(id)
  lu.assertEquals(exe.status, "CANCELLED")

  status, body = srv():post("/executions/nobody/terminate")
  lu.assertEquals(status, 404, H.encode({ body }))
  lu.assertIsString(body.error)
end
