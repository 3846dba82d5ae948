-- spec/03-engine/invoke_spec.lua - invoke against the server: an order
-- invokes a payment chart as a child execution (the spawn relay creates it
-- with the other chart's id), the payment's result comes back to the order,
-- a fan-out runs one child per line and joins them, cancel of the parent
-- reaches its invoked children, and a target chart registered late is
-- created once it is.
local lu = require "luaunit"
local ms = require "mongostore"
local chart = require "mongostore.chart"
local C = require "fixtures.charts"

local function pay_chart()
  return chart.define{ id = "payment", initial = "Charging",
    states = { { "Charging", on_enter = function(ctx) ctx.attempts = (ctx.attempts or 0) + 1 end },
               { "Paid", final = "success" }, { "Declined", final = "declined" } },
    transitions = {
      { from = "Charging", on = "Approve", to = "Paid", action = function(ctx) ctx.receipt = "r-" .. ctx.amount end },
      { from = "Charging", on = "Decline", to = "Declined" },
      -- small amounts settle at once
      { from = "Charging", to = "Paid", where = function(_, ctx) return ctx.amount < 10 end,
        action = function(ctx) ctx.receipt = "auto-" .. ctx.amount end },
    },
  }
end

local function order_chart()
  return chart.define{ id = "inv_order", initial = "Paying",
    states = {
      { "Paying", invoke = "payment", with = { amount = "total" } },
      { "Shipping", invoke = "payment", each = "parcels", as = "parcel", with = { amount = "parcel" } },
      { "Done", final = "success" }, { "Unpaid", final = "unpaid" }, { "Lost", final = "lost" },
    },
    transitions = {
      { from = "Paying", on = "Returned", to = "Shipping", where = function(d) return d.outcome == "success" end,
        action = function(ctx, e) ctx.receipt = e.data.receipt end },
      { from = "Paying", on = "Returned", to = "Unpaid" },
      { from = "Shipping", join = "all", to = "Done", else_to = "Lost" },
    },
  }
end

TestInvokeEngine = {}

function TestInvokeEngine:setUp()
  self.store = C.store()
  self.engine = C.engine(self.store, { charts = { pay_chart(), order_chart() } })
end

function TestInvokeEngine:tearDown()
  if self.store then self.store:close() end
end

function TestInvokeEngine:test_the_child_runs_the_invoked_chart_and_its_result_returns()
  local e, s = self.engine, self.store
  lu.assertEquals(e:start("inv_order", { id = "o1", context = { total = 50, parcels = ms.array{ 1, 2, 3 } } }), "o1")
  C.drain(e)
  local cid = "o1:Paying:0"
  local child = C.load(s, cid)
  lu.assertEquals(child.definition_id, "payment")
  lu.assertEquals(child.definition_fqn, "payment")
  lu.assertEquals(child.parent_id, "o1")
  lu.assertEquals(child.context.amount, 50)
  lu.assertNil(child.context.__invoke_fqn__, "the chart's name is not part of the child's context")
  lu.assertNil(child.context.parcels, "a child starts with what `with` names only")
  lu.assertEquals(child.active_path, "Charging")
  -- the parent's own events do not reach an invoked child
  lu.assertTrue(e:send("o1", { kind = "Approve", id = "wrong-target" }))
  C.drain(e)
  lu.assertEquals(C.load(s, cid).active_path, "Charging")
  lu.assertTrue(e:send(cid, { kind = "Approve", id = "approve-1" }))
  C.drain(e)
  local parent = C.load(s, "o1")
  lu.assertEquals(parent.context.receipt, "r-50")
  lu.assertEquals(parent.status, "DONE")
  lu.assertEquals(parent.outcome, "success")
  lu.assertEquals(parent.active_path, "Done")
  -- the fan-out: one child per parcel, each settled at once, then the join
  for i = 0, 2 do
    local c = C.load(s, "o1:Shipping:0:" .. i)
    lu.assertEquals(c.definition_id, "payment")
    lu.assertEquals(c.context.amount, i + 1)
    lu.assertEquals(c.outcome, "success")
  end
  lu.assertEquals(parent.context.region_results["Shipping:2"].context.receipt, "auto-3")
  C.applied_once(s, "o1")
  lu.assertEquals(C.trace(s, "o1"), { "Start", "Approve", "Finished", "Finished", "Finished", "Finished" })
end

function TestInvokeEngine:test_a_declined_payment_routes_on_its_outcome()
  local e, s = self.engine, self.store
  e:start("inv_order", { id = "o2", context = { total = 99, parcels = ms.array{} } })
  C.drain(e)
  lu.assertTrue(e:send("o2:Paying:0", { kind = "Decline" }))
  C.drain(e)
  local parent = C.load(s, "o2")
  lu.assertEquals(parent.active_path, "Unpaid")
  lu.assertEquals(parent.outcome, "unpaid")
end

function TestInvokeEngine:test_cancel_reaches_the_invoked_child()
  local e, s = self.engine, self.store
  e:start("inv_order", { id = "o3", context = { total = 99, parcels = ms.array{} } })
  C.drain(e)
  lu.assertEquals(C.load(s, "o3:Paying:0").status, "RUNNING")
  lu.assertTrue(e:cancel("o3"))
  C.drain(e)
  lu.assertEquals(C.load(s, "o3").status, "CANCELLED")
  lu.assertEquals(C.load(s, "o3:Paying:0").status, "CANCELLED")
end

function TestInvokeEngine:test_suspend_and_resume_reach_the_fan_out_children()
  local e, s = self.engine, self.store
  e:start("inv_order", { id = "o4", context = { total = 5, parcels = ms.array{ 40, 50 } } })
  C.drain(e)
  lu.assertEquals(C.load(s, "o4").active_path, "Shipping")
  lu.assertTrue(e:suspend("o4"))
  C.drain(e)
  lu.assertEquals(C.load(s, "o4:Shipping:0:0").status, "SUSPENDED")
  lu.assertEquals(C.load(s, "o4:Shipping:0:1").status, "SUSPENDED")
  lu.assertTrue(e:send("o4:Shipping:0:0", { kind = "Approve" }))
  C.drain(e)
  lu.assertEquals(C.load(s, "o4:Shipping:0:0").active_path, "Charging", "held while suspended")
  lu.assertTrue(e:resume("o4"))
  C.drain(e)
  lu.assertEquals(C.load(s, "o4:Shipping:0:0").outcome, "success")
  lu.assertTrue(e:send("o4:Shipping:0:1", { kind = "Decline" }))
  C.drain(e)
  local parent = C.load(s, "o4")
  lu.assertEquals(parent.active_path, "Lost")
end

function TestInvokeEngine:test_an_unregistered_chart_waits_until_it_is_registered()
  local s = self.store
  local e = C.engine(s, { charts = { order_chart() } })
  e:start("inv_order", { id = "o5", context = { total = 5, parcels = ms.array{} } })
  C.drain(e)
  lu.assertNil((s:load("o5:Paying:0")))
  C.drain(e)
  local logged = 0
  for _, m in ipairs(e.spec_logs) do
    if m:find("invoke of chart 'payment', which is not registered", 1, true) then logged = logged + 1 end
  end
  lu.assertEquals(logged, 1, "said once, however many passes find it waiting")
  e:register(pay_chart())
  lu.assertTrue(C.wait_for(function() return C.load(s, "o5").status == "DONE" end, e, 10))
  lu.assertEquals(C.load(s, "o5").context.receipt, "auto-5")
end
