-- spec/03-engine/stm_run_spec.lua - a chart read from harel's .stm DSL
-- (spec/fixtures/stm/shipment.stm, stm.to_chart) with its actions and
-- selector in Lua runs in the engine against the server: start, send with
-- guards, `set` and a choice, a selector, a literal timeout and one from the
-- context, a fork joined on its regions' verdicts, and finals with outcomes;
-- and a chart of fragments (reuse.stm) whose instance times out to the state
-- its use named.
local lu = require "luaunit"
local ms = require "mongostore"
local stm = require "mongostore.stm"
local engine_mod = require "mongostore.engine"
local helper = require "helpers"
local C = require "fixtures.charts"

local function read(name)
  local f = assert(io.open(helper.root() .. "/spec/fixtures/stm/" .. name, "r"))
  local text = f:read("a")
  f:close()
  return text
end

-- The chart with actions that record what they were called with.
local function shipment(calls)
  return stm.to_chart(read("shipment.stm"), {
    actions = {
      -- bound in the text (`bind { charge = billing.charge }`): found by its path
      ["billing.charge"] = function(context, event, act, inputs)
        calls[#calls + 1] = { "charge", context.customer, inputs.currency, inputs.retries, act.execution_id,
                              event and event.kind }
      end,
      left_cart = function(context) calls[#calls + 1] = { "left_cart", context.items } end,
      decide = function(_, event, inputs)
        calls[#calls + 1] = { "decide", type(inputs) }
        return event.data.by == "bob" and "yes" or "no"
      end,
    },
  })
end

TestStmRun = {}

function TestStmRun:setUp()
  self.calls = {}
  self.chart = shipment(self.calls)
  self.store = C.store()
  self.engine = engine_mod.new{ store = self.store, charts = { self.chart }, trace = true,
                                log = function() end }
end

function TestStmRun:tearDown()
  if self.store then self.store:close() end
end

function TestStmRun:load(id) return C.load(self.store, id) end

-- Starts an execution and takes it to Paying with an Order.
function TestStmRun:ordered(id, context)
  local e = self.engine
  lu.assertEquals(e:start("shipment", { id = id, context = context or { total = 10, review_seconds = 60 } }), id)
  lu.assertEquals(self:load(id).active_path, "Cart")
  lu.assertTrue(e:send(id, { kind = "Order", id = id .. "-order", data = { items = 2, customer = "ann" } }))
  local exe = self:load(id)
  lu.assertEquals(exe.active_path, "Paying")
  return exe
end

function TestStmRun:test_start_send_fork_and_join_to_a_final()
  local e, id = self.engine, "s1"
  local exe = self:ordered(id)
  -- `set` copied the event's fields into the context; the exit and enter hooks ran in order
  lu.assertEquals(exe.context.items, 2)
  lu.assertEquals(exe.context.customer, "ann")
  lu.assertEquals(self.calls, { { "left_cart", nil }, { "charge", "ann", "EUR", 2, id, "Order" } })
  lu.assertNotNil(C.timers(self.store, id).Paying, "the literal timeout armed a timer on entry")

  -- the guard reads the event and the context: 5 < total 10 does not pay
  lu.assertTrue(e:send(id, { kind = "Paid", id = "p-low", data = { amount = 5.0 } }))
  lu.assertEquals(self:load(id).active_path, "Paying")
  lu.assertTrue(e:send(id, { kind = "Paid", id = "p-ok", data = { amount = 20.0 } }))
  exe = self:load(id)
  lu.assertEquals(exe.active_path, "Fulfil")
  lu.assertEquals(exe.context.paid, 20.0)
  lu.assertEquals(exe.context.route, "direct", "the choice's else branch applied its own set")
  lu.assertNil(C.timers(self.store, id).Paying, "leaving Paying cancelled its timer")
  C.drain(e)
  lu.assertEquals(#C.children(self:load(id)), 2, "each region runs as a child")

  lu.assertTrue(e:send(id, { kind = "Packed", id = "packed" }))
  lu.assertTrue(e:send(id, { kind = "Shipped", id = "shipped" }))
  C.drain(e)
  exe = self:load(id)
  lu.assertEquals(exe.status, "DONE")
  lu.assertEquals(exe.active_path, "Done")
  lu.assertEquals(exe.outcome, "success")
end

function TestStmRun:test_a_region_that_fails_takes_the_joins_else()
  local e, id = self.engine, "s2"
  self:ordered(id)
  lu.assertTrue(e:send(id, { kind = "Paid", id = "paid", data = { amount = 10 } }))
  C.drain(e)
  lu.assertTrue(e:send(id, { kind = "Lose", id = "lose" }))
  lu.assertTrue(e:send(id, { kind = "Shipped", id = "shipped" }))
  C.drain(e)
  local exe = self:load(id)
  lu.assertEquals(exe.status, "DONE")
  lu.assertEquals(exe.active_path, "Lost")
  lu.assertEquals(exe.outcome, "failure")
end

function TestStmRun:test_a_literal_timeout_fires_to_a_final()
  local e, id = self.engine, "s3"
  self:ordered(id)
  local fire_at = C.timers(self.store, id).Paying
  lu.assertNotNil(fire_at)
  lu.assertEquals(e:sweep(fire_at - 1), 0, "not due before its time")
  lu.assertEquals(self:load(id).active_path, "Paying")
  lu.assertEquals(e:sweep(fire_at + 1), 1)
  local exe = self:load(id)
  lu.assertEquals(exe.status, "DONE")
  lu.assertEquals(exe.active_path, "TimedOut")
  lu.assertEquals(exe.outcome, "expired")
end

function TestStmRun:test_a_choice_branch_a_timeout_from_the_context_and_a_selector()
  local e = self.engine
  -- a big payment goes to Review (the first `when`, with its own set)
  self:ordered("s4")
  local before = ms.now()
  lu.assertTrue(e:send("s4", { kind = "Paid", id = "big", data = { amount = 5000.0 } }))
  local exe = self:load("s4")
  lu.assertEquals(exe.active_path, "Review")
  lu.assertEquals(exe.context.route, "review")
  lu.assertEquals(exe.context.paid, 5000.0)
  local review = C.timers(self.store, "s4").Review
  lu.assertNotNil(review, "Review's timeout is read from context.review_seconds")
  lu.assertTrue(review >= before + 60 - 1 and review <= ms.now() + 60 + 1, "fire_at is entry + 60 s")
  -- the selector's "yes" branch
  lu.assertTrue(e:send("s4", { kind = "Approve", id = "ok", data = { by = "bob" } }))
  lu.assertEquals(self:load("s4").active_path, "Fulfil")
  lu.assertEquals(self.calls[#self.calls], { "decide", "table" })

  -- and its else
  self:ordered("s5")
  lu.assertTrue(e:send("s5", { kind = "Paid", id = "big", data = { amount = 2000.0 } }))
  lu.assertTrue(e:send("s5", { kind = "Approve", id = "no", data = { by = "eve" } }))
  exe = self:load("s5")
  lu.assertEquals(exe.status, "DONE")
  lu.assertEquals(exe.active_path, "Lost")
  lu.assertEquals(exe.outcome, "failure")
end

function TestStmRun:test_a_guard_that_does_not_hold_leaves_the_state()
  local e, id = self.engine, "s6"
  e:start("shipment", { id = id, context = { total = 10 } })
  lu.assertTrue(e:send(id, { kind = "Order", id = "none", data = { items = 0, customer = "ann" } }))
  local exe = self:load(id)
  lu.assertEquals(exe.active_path, "Cart")
  lu.assertNil(exe.context.items, "a transition not taken sets nothing")
end

-- The declared fields are checked against what is sent (harel checks them
-- when an event is processed and refuses the event, the execution unchanged).
function TestStmRun:test_an_event_that_breaks_its_declaration_is_refused()
  local ok, msg, code = stm.check_event(self.chart, "Order", { items = "two", customer = "ann" })
  lu.assertNil(ok)
  lu.assertStrContains(msg, "field 'items' must be int")
  lu.assertEquals(code, "invalid")
  local e, id = self.engine, "s7"
  e:start("shipment", { id = id, context = { total = 10 } })
  local before = self:load(id).version
  local sent, err, ecode = e:send(id, { kind = "Order", id = "bad", data = { items = "two", customer = "ann" } })
  lu.assertNil(sent, "engine:send refuses an event that does not fit its declaration")
  lu.assertStrContains(tostring(err), "items")
  lu.assertEquals(ecode, "invalid")
  local exe = self:load(id)
  lu.assertEquals(exe.active_path, "Cart")
  lu.assertEquals(exe.version, before, "nothing was committed")
  -- send_many checks each event the same way: the bad one refused, the
  -- execution's later event not attempted, another execution's applied
  e:start("shipment", { id = "s8", context = { total = 10 } })
  local r = e:send_many{
    { id, { kind = "Order", id = "bad-2", data = { items = "two", customer = "ann" } } },
    { id, { kind = "Order", id = "good-2", data = { items = 2, customer = "ann" } } },
    { "s8", { kind = "Order", id = "good-3", data = { items = 1, customer = "bo" } } },
  }
  lu.assertNil(r[1].ok)
  lu.assertEquals(r[1].code, "invalid")
  lu.assertStrContains(tostring(r[1].message), "items")
  lu.assertTrue(r[2].blocked)
  lu.assertEquals(r[3].how, "applied", tostring(r[3].message))
  lu.assertEquals(self:load(id).version, before, "nothing was committed")
  lu.assertEquals(self:load("s8").active_path, "Paying")
end


function TestStmRun:test_a_chart_of_fragments_times_out_to_the_state_its_use_named()
  local alerts = {}
  local c = stm.to_chart(read("reuse.stm"), { actions = {
    ["jobs.fetch"] = function() end, ["jobs.save"] = function() end,
    ["ops.alert"] = function(_, event, _, inputs) alerts[#alerts + 1] = { event and event.kind, inputs.level } end,
  } })
  local e = engine_mod.new{ store = self.store, charts = { c }, trace = true, log = function() end }
  lu.assertEquals(e:start("pipeline", { id = "r1", context = { tries = 0 } }), "r1")
  lu.assertTrue(e:send("r1", { kind = "Poke", id = "poke", data = { status = "ok" } }))
  lu.assertEquals(self:load("r1").active_path, "Save.Inner.Trying")
  local fire_at = C.timers(self.store, "r1")["Save.Inner.Trying"]
  lu.assertNotNil(fire_at, "the instance's timeout (its `wait`, forwarded as `budget`) is armed")
  lu.assertEquals(e:sweep(fire_at + 1), 1)
  local exe = self:load("r1")
  lu.assertEquals(exe.status, "DONE")
  lu.assertEquals(exe.active_path, "Failed")
  -- the first terminal with an outcome that the execution passed sets it, here and in harel
  -- (core.py: "the innermost terminal that declares an outcome sets the Execution's result"):
  -- Fetch.Worked's success, kept through Failed
  lu.assertEquals(exe.outcome, "success")
  lu.assertEquals(alerts, { { "Timeout", "high" } })
end

-- invoke.stm: checkout invokes charge with `with`, routes on the Returned
-- outcome and the carried receipt, then fans out pack over its lines and
-- joins them, then an inline machine body per address to notify. Each
-- machine is read as a chart of its own, by name; the engine registers the
-- inline body with its machine.
function TestStmRun:test_invoke_and_a_fan_out_from_stm()
  local text = read("invoke.stm")
  local charts = {}
  for _, m in ipairs { "checkout", "charge", "pack" } do charts[#charts + 1] = stm.to_chart(text, { machine = m }) end
  local e = engine_mod.new{ store = self.store, charts = charts, trace = true, log = function() end }
  lu.assertEquals(stm.submachines(charts[1])[1].id, "checkout#Notifying", "harel's id for the inline body")
  local lines = ms.array{ "a", "b" }
  lu.assertEquals(e:start("checkout", { id = "i1", context = { total = 30, customer = "ann", lines = lines,
                                                                notify = ms.array{ "ann@x" } } }), "i1")
  C.drain(e)
  local charge = self:load("i1:Paying:0")
  lu.assertEquals(charge.definition_id, "charge")
  lu.assertEquals(charge.context, { amount = 30, customer = "ann" })
  -- a declared event's fields are checked on the invoked chart too
  local ok, _, code = e:send("i1:Paying:0", { kind = "Approve", data = { receipt = 5 } })
  lu.assertNil(ok)
  lu.assertEquals(code, "invalid")
  lu.assertTrue(e:send("i1:Paying:0", { kind = "Approve", data = { receipt = "R-1" } }))
  C.drain(e)
  local exe = self:load("i1")
  lu.assertEquals(exe.active_path, "Packing")
  lu.assertEquals(exe.context.receipt, "R-1", "the carried receipt came back with Returned")
  for i, sku in ipairs { "a", "b" } do
    local cid = "i1:Packing:0:" .. (i - 1)
    lu.assertEquals(self:load(cid).context, { sku = sku, customer = "ann" })
    lu.assertTrue(e:send(cid, { kind = "Packed" }))
  end
  C.drain(e)
  exe = self:load("i1")
  lu.assertEquals(exe.active_path, "Notifying")
  -- harel's form: each child's outcome beside the keys it carries
  lu.assertEquals(exe.context.region_results, {
    ["Packing:0"] = { outcome = "success", sku = "a" }, ["Packing:1"] = { outcome = "success", sku = "b" } })
  local note = self:load("i1:Notifying:0:0")
  lu.assertEquals(note.definition_id, "checkout#Notifying")
  lu.assertEquals(note.context, { address = "ann@x" })
  lu.assertTrue(e:send("i1:Notifying:0:0", { kind = "Delivered", data = { to = "ann@x" } }))
  C.drain(e)
  exe = self:load("i1")
  lu.assertEquals(exe.status, "DONE")
  lu.assertEquals(exe.active_path, "Done")
  lu.assertEquals(exe.outcome, "success")
  lu.assertEquals(exe.context.region_results, { ["Notifying:0"] = { outcome = "success", sent_to = "ann@x" } })
  -- a declined charge routes to Unpaid
  e:start("checkout", { id = "i2", context = { total = 1, customer = "bo", lines = ms.array{} } })
  C.drain(e)
  lu.assertTrue(e:send("i2:Paying:0", { kind = "Decline" }))
  C.drain(e)
  lu.assertEquals(self:load("i2").active_path, "Unpaid")
  lu.assertEquals(self:load("i2").outcome, "failure")
end
