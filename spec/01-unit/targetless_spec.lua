-- spec/01-unit/targetless_spec.lua - transitions without `to` (SCXML's
-- targetless transition, UML's internal one), without a server: chart.define
-- takes one on an event and refuses an automatic one or a join without a
-- target; runtime.apply runs its action and leaves the configuration as it
-- is (no exit or entry hook, no timer re-armed, history kept), outcome
-- "transition"; an inner state's own transition still wins over it; the
-- diagrams list it inside its state.
local lu = require "luaunit"
local ms = require "mongostore"
local chart = require "mongostore.chart"
local runtime = require "mongostore.runtime"
local diagram = require "mongostore.diagram"

local seq = 0
local function event(kind, data)
  seq = seq + 1
  return { id = "evt-" .. seq, kind = kind, data = data or {} }
end

local function count(context) context.ticks = (context.ticks or 0) + 1 end

-- Work (timeout 60) holds A (timeout 30) and B; Tick is counted in every state
-- of Work by one transition, A takes Go to B, and B handles Tick itself.
local function order_chart(log)
  local function rec(label) return function() log[#log + 1] = label end end
  return chart.define{
    id = "targetless", initial = "Work",
    states = {
      { "Work", initial = "A", timeout = 60, on_enter = rec("enter Work"), on_exit = rec("exit Work"),
        states = {
          { "A", timeout = 30, on_enter = rec("enter A"), on_exit = rec("exit A") },
          { "B", on_enter = rec("enter B"), on_exit = rec("exit B") },
          { "C" },
        } },
      { "Done", final = "success" },
    },
    transitions = {
      { from = "Work", on = "Tick", action = count },
      { from = "Work", on = "Quiet" },
      { from = "Work.A", on = "Go", to = "Work.B" },
      { from = "Work.B", on = "Tick", to = "Work.C" },
      { from = "Work.C", on = "Go", to = "Work.A" },
      { from = "Work", on = { "Finish", "Timeout" }, to = "Done" },
    },
  }
end

local function started(c)
  local exe = ms.execution{ definition_id = c.id, id = "exe-" .. c.id }
  runtime.apply(c, exe, event("Start"), 0)
  return exe
end

TestTargetless = {}

function TestTargetless:test_define_takes_one_on_an_event_and_refuses_the_others()
  lu.assertTrue(chart.is_chart(order_chart({})))
  local function define(t)
    return chart.define{ id = "bad", initial = "S", states = { { "S" }, { "T", final = true } },
                         transitions = { t, { from = "S", on = "Go", to = "T" } } }
  end
  lu.assertErrorMsgContains("needs a target (to); only a transition on an event may go without one",
    define, { from = "S", action = count })
  lu.assertErrorMsgContains("join", chart.define, {
    id = "bad2", initial = "P",
    states = { { "P", orthogonal = true, states = { { "R1", initial = "X", states = { { "X", final = true } } } } },
               { "Q", final = true } },
    transitions = { { from = "P", join = "all" } } })
  lu.assertErrorMsgContains("a final state has no way out", chart.define, {
    id = "bad3", initial = "S", states = { { "S" }, { "T", final = true } },
    transitions = { { from = "S", on = "Go", to = "T" }, { from = "T", on = "Tick" } } })
end

function TestTargetless:test_its_action_runs_and_nothing_is_exited_entered_or_rearmed()
  local log = {}
  local c = order_chart(log)
  local exe = started(c)
  lu.assertEquals(exe.active_path, "Work.A")
  local before = #log
  local fx = runtime.apply(c, exe, event("Tick"), 10)
  lu.assertEquals(fx.outcome, "transition")
  lu.assertEquals(exe.context.ticks, 1)
  lu.assertEquals(exe.active_path, "Work.A")
  lu.assertEquals(fx.from, "Work.A")
  lu.assertEquals(fx.to, "Work.A")
  lu.assertEquals(#log, before, "no hook ran: " .. table.concat(log, ", ", before + 1))
  lu.assertEquals(fx.timers, {}, "no timer was armed again or cancelled")
  lu.assertEquals(exe.status, "RUNNING")
  -- a transition without an action: taken all the same (the event is consumed)
  fx = runtime.apply(c, exe, event("Quiet"), 11)
  lu.assertEquals(fx.outcome, "transition")
  lu.assertEquals(exe.active_path, "Work.A")
  lu.assertEquals(fx.timers, {})
end

function TestTargetless:test_an_event_counted_in_every_state_needs_no_self_transition()
  local c = order_chart({})
  local exe = started(c)
  runtime.apply(c, exe, event("Tick"), 1)
  runtime.apply(c, exe, event("Go"), 2)
  lu.assertEquals(exe.active_path, "Work.B")
  -- B's own Tick is inner: it wins over Work's, as any inner transition does
  runtime.apply(c, exe, event("Tick"), 3)
  lu.assertEquals(exe.active_path, "Work.C")
  lu.assertEquals(exe.context.ticks, 1)
  runtime.apply(c, exe, event("Tick"), 4)
  runtime.apply(c, exe, event("Tick"), 5)
  lu.assertEquals(exe.active_path, "Work.C")
  lu.assertEquals(exe.context.ticks, 3)
  runtime.apply(c, exe, event("Finish"), 6)
  lu.assertEquals(exe.status, "DONE")
end

function TestTargetless:test_a_raising_action_fails_the_execution_as_any_action_does()
  local c = chart.define{ id = "raises", initial = "S", states = { { "S" }, { "T", final = true } },
                          transitions = { { from = "S", on = "Boom", action = function() error("no", 0) end },
                                          { from = "S", on = "Go", to = "T" } } }
  local exe = started(c)
  local fx = runtime.apply(c, exe, event("Boom"), 1)
  lu.assertEquals(fx.outcome, "failed")
  lu.assertEquals(exe.status, "FAILED")
  lu.assertStrContains(fx.failed, "no")
end

function TestTargetless:test_diagrams_list_it_inside_its_state()
  local c = order_chart({})
  local mermaid = diagram.to_mermaid(c)
  local dot = diagram.to_dot(c)
  lu.assertStrContains(dot, "Tick / action (internal)")
  lu.assertStrContains(dot, "Quiet (internal)")
  lu.assertStrContains(mermaid, "internal")
  -- no edge stands for it
  lu.assertNil(dot:find('label="Tick / action', 1, true))
  -- and a trace through it colours without error
  local exe = started(c)
  local fx = runtime.apply(c, exe, event("Tick"), 1)
  local out = diagram.to_dot(c, { executions = { exe }, traces = { { { from = fx.from, to = fx.to, event = "Tick" } } } })
  lu.assertStrContains(out, "digraph")
end
