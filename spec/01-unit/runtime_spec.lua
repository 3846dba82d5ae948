-- spec/01-unit/runtime_spec.lua - the pure interpreter without a server:
-- runtime.apply(chart, exe, event, now, opts) advances an Execution in memory
-- and returns the step's effects (emits, spawns, timers, from/to, actions,
-- failed). These specs follow README.md "Statecharts and the engine".
local lu = require "luaunit"
local ms = require "mongostore"
local chart = require "mongostore.chart"
local runtime = require "mongostore.runtime"
local execution = require "mongostore.execution"

------------------------------------------------------------------------
-- helpers

local seq = 0
local function next_id(prefix)
  seq = seq + 1
  return string.format("%s-%d", prefix or "x", seq)
end

local function new_exe(c, fields)
  local f = { definition_id = c.id, id = next_id("exe") }
  for k, v in pairs(fields or {}) do f[k] = v end
  return ms.execution(f)
end

local function event(kind, data, id)
  return { id = id or next_id("evt"), kind = kind, data = data or {} }
end

-- Applies an event of `kind` at `now` (default 0).
local function send(c, exe, kind, data, now, opts)
  return runtime.apply(c, exe, event(kind, data), now or 0, opts)
end

local function start(c, exe, data, now)
  return runtime.apply(c, exe, event("Start", data), now or 0)
end

local function started(c, fields, now)
  local exe = new_exe(c, fields)
  local fx = start(c, exe, nil, now)
  return exe, fx
end

-- A hook that appends `label` to `log`.
local function rec(log, label)
  return function() log[#log + 1] = label end
end

-- The timer ops of a step keyed by path.
local function timers_by_path(fx)
  local out = {}
  for _, t in ipairs(fx.timers) do
    lu.assertNil(out[t.path], "two timer ops for one path in one step: " .. t.path)
    out[t.path] = t
  end
  return out
end

local function count(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n
end

-- A snapshot of what a step could change on an execution.
local function snapshot(exe)
  return {
    status = exe.status, active_path = exe.active_path, outcome = exe.outcome, error = exe.error,
    processed_events = exe.processed_events, history = runtime.copy(exe.history),
    context = runtime.copy(exe.context), deferred = #exe.deferred,
  }
end

local function assert_no_effects(fx)
  lu.assertEquals(#fx.emits, 0)
  lu.assertEquals(#fx.spawns, 0)
  lu.assertNil(fx.failed)
end

------------------------------------------------------------------------
-- Start

TestRuntimeStart = {}

local function nested_chart(log)
  return chart.define{
    id = "nested", initial = "P",
    states = {
      { "P", initial = "Q", on_enter = rec(log, "enter P"), on_exit = rec(log, "exit P"),
        states = {
          { "Q", initial = "L", on_enter = rec(log, "enter Q"), on_exit = rec(log, "exit Q"),
            states = { { "L", on_enter = rec(log, "enter L"), on_exit = rec(log, "exit L") },
                       { "M", on_enter = rec(log, "enter M") } },
            transitions = { { from = "L", to = "M", on = "Go" }, { from = "M", to = "L", on = "Go" } } },
        } },
    },
  }
end

function TestRuntimeStart:test_start_enters_initial_down_to_a_leaf_outermost_first()
  local log = {}
  local c = nested_chart(log)
  local exe = new_exe(c)
  lu.assertEquals(exe.status, "PENDING")
  local fx = start(c, exe, nil, 5)
  lu.assertEquals(exe.status, "RUNNING")
  lu.assertEquals(exe.active_path, "P.Q.L")
  lu.assertEquals(log, { "enter P", "enter Q", "enter L" })
  lu.assertEquals(fx.actions, { "on_enter P", "on_enter P.Q", "on_enter P.Q.L" })
  lu.assertNil(fx.from)
  lu.assertEquals(fx.to, "P.Q.L")
  lu.assertNil(fx.failed)
  lu.assertEquals(exe.updated_at, 5)
end

function TestRuntimeStart:test_start_on_a_non_pending_execution_is_a_no_op()
  local log = {}
  local c = nested_chart(log)
  local exe = started(c)
  send(c, exe, "Go")
  lu.assertEquals(exe.active_path, "P.Q.M")
  local before = snapshot(exe)
  local n = #log
  local fx = start(c, exe, { extra = 1 })
  lu.assertEquals(snapshot(exe), before)
  lu.assertEquals(#log, n)
  lu.assertEquals(fx.actions, {})
  assert_no_effects(fx)
  lu.assertEquals(fx.timers, {})
  lu.assertNil(exe.context.extra)
  -- nor on a finished one
  exe.status = "DONE"
  fx = start(c, exe)
  assert_no_effects(fx)
  lu.assertEquals(exe.status, "DONE")
  lu.assertEquals(exe.active_path, "P.Q.M")
  lu.assertEquals(#log, n)
end

function TestRuntimeStart:test_start_data_seeds_the_context()
  local seen
  local c = chart.define{ id = "seed", initial = "A",
    states = { { "A", on_enter = function(ctx) seen = ctx.total end }, { "B" } },
    transitions = { { from = "A", to = "B", on = "Go" } } }
  local exe = new_exe(c, { context = { keep = "me", total = 1 } })
  start(c, exe, { total = 30, who = "alice" })
  lu.assertEquals(exe.context.total, 30)
  lu.assertEquals(exe.context.who, "alice")
  lu.assertEquals(exe.context.keep, "me")
  lu.assertEquals(seen, 30, "the context is seeded before the first on_enter runs")
end

------------------------------------------------------------------------
-- Transitions

TestRuntimeTransitions = {}

function TestRuntimeTransitions:test_exits_innermost_first_then_action_then_entries_outermost_first()
  local log = {}
  local function st(name, extra)
    local s = { name, on_enter = rec(log, "enter " .. name), on_exit = rec(log, "exit " .. name) }
    for k, v in pairs(extra or {}) do s[k] = v end
    return s
  end
  local c = chart.define{ id = "uml", initial = "A",
    states = {
      st("A", { initial = "A1", states = { st("A1", { initial = "A1a", states = { st("A1a") } }), st("A2") } }),
      st("B", { initial = "B1", states = { st("B1", { initial = "B1a", states = { st("B1a") } }) } }),
    },
    transitions = {
      { from = "A.A1.A1a", to = "B.B1", on = "Go", action = rec(log, "action") },
      { from = "B.B1.B1a", to = "A", on = "Back" },
      { from = "B.B1.B1a", to = "A.A2", on = "Two" },
    } }
  local exe = started(c)
  for i = #log, 1, -1 do log[i] = nil end
  local fx = send(c, exe, "Go")
  lu.assertEquals(log, { "exit A1a", "exit A1", "exit A", "action", "enter B", "enter B1", "enter B1a" })
  lu.assertEquals(exe.active_path, "B.B1.B1a")
  lu.assertEquals(fx.from, "A.A1.A1a")
  lu.assertEquals(fx.to, "B.B1.B1a")
  lu.assertEquals(exe.processed_events, 1)
end

function TestRuntimeTransitions:test_transition_inside_a_composite_does_not_leave_it()
  local log = {}
  local function st(name, extra)
    local s = { name, on_enter = rec(log, "enter " .. name), on_exit = rec(log, "exit " .. name) }
    for k, v in pairs(extra or {}) do s[k] = v end
    return s
  end
  local c = chart.define{ id = "local", initial = "A",
    states = { st("A", { initial = "A1", states = { st("A1", { initial = "A1a", states = { st("A1a") } }), st("A2") },
                         transitions = { { from = "A1.A1a", to = "A2", on = "Go", action = rec(log, "action") },
                                         { from = "A2", to = "A1", on = "Back" } } }) } }
  local exe = started(c)
  for i = #log, 1, -1 do log[i] = nil end
  send(c, exe, "Go")
  lu.assertEquals(log, { "exit A1a", "exit A1", "action", "enter A2" })
  lu.assertEquals(exe.active_path, "A.A2")
end

function TestRuntimeTransitions:test_transition_from_a_composite_exits_the_active_leaf()
  local log = {}
  local function st(name, extra)
    local s = { name, on_enter = rec(log, "enter " .. name), on_exit = rec(log, "exit " .. name) }
    for k, v in pairs(extra or {}) do s[k] = v end
    return s
  end
  local c = chart.define{ id = "outer", initial = "A",
    states = { st("A", { initial = "A1", states = { st("A1"), st("A2") },
                         transitions = { { from = "A1", to = "A2", on = "Next" }, { from = "A2", to = "A1", on = "Next" } } }),
               st("B") },
    transitions = { { from = "A", to = "B", on = "Leave" }, { from = "B", to = "A", on = "Back" } } }
  local exe = started(c)
  send(c, exe, "Next")
  for i = #log, 1, -1 do log[i] = nil end
  send(c, exe, "Leave")
  lu.assertEquals(log, { "exit A2", "exit A", "enter B" })
  lu.assertEquals(exe.active_path, "B")
end

function TestRuntimeTransitions:test_self_transition_exits_and_reenters_and_rearms_its_timer()
  local log = {}
  local c = chart.define{ id = "self", initial = "S",
    states = { { "S", timeout = 10, on_enter = rec(log, "enter S"), on_exit = rec(log, "exit S") }, { "T" } },
    transitions = { { from = "S", to = "S", on = "Again", action = rec(log, "action") },
                    { from = "S", to = "T", on = "Go" } } }
  local exe, fx0 = started(c, nil, 100)
  lu.assertEquals(fx0.timers, { { action = "schedule", path = "S", fire_at = 110 } })
  for i = #log, 1, -1 do log[i] = nil end
  local fx = send(c, exe, "Again", nil, 105)
  lu.assertEquals(log, { "exit S", "action", "enter S" })
  lu.assertEquals(exe.active_path, "S")
  lu.assertEquals(fx.timers, { { action = "schedule", path = "S", fire_at = 115 } })
end

function TestRuntimeTransitions:test_guards_choose_among_transitions()
  local seen = {}
  local c = chart.define{ id = "guards", initial = "A",
    states = { { "A" }, { "Big" }, { "Vip" }, { "Other" } },
    transitions = {
      { from = "A", to = "Big", on = "Pay", where = function(data, ctx, ev)
          seen[#seen + 1] = { data = data, ctx = ctx, kind = ev and ev.kind }
          return data.amount > 100 end },
      { from = "A", to = "Vip", on = "Pay", where = function(_, ctx) return ctx.vip == true end },
      { from = "A", to = "Other", on = "Pay" },
      { from = "Big", to = "A", on = "Back" }, { from = "Vip", to = "A", on = "Back" },
      { from = "Other", to = "A", on = "Back" },
    } }
  local exe = started(c)
  send(c, exe, "Pay", { amount = 500 })
  lu.assertEquals(exe.active_path, "Big")
  lu.assertEquals(seen[1].data, { amount = 500 })
  lu.assertIs(seen[1].ctx, exe.context)
  lu.assertEquals(seen[1].kind, "Pay")
  send(c, exe, "Back")
  send(c, exe, "Pay", { amount = 5 })
  lu.assertEquals(exe.active_path, "Other", "no guard held: the unguarded transition")
  send(c, exe, "Back")
  exe.context.vip = true
  send(c, exe, "Pay", { amount = 5 })
  lu.assertEquals(exe.active_path, "Vip", "the guard over the context")
  send(c, exe, "Back")
  send(c, exe, "Pay", { amount = 500 })
  lu.assertEquals(exe.active_path, "Big", "the first declared enabled transition wins")
end

function TestRuntimeTransitions:test_a_false_guard_leaves_the_event_unhandled()
  local acts = {}
  local c = chart.define{ id = "guard-no", initial = "A",
    states = { { "A", on_activity = function(_, ev) acts[#acts + 1] = ev.kind end }, { "B" } },
    transitions = { { from = "A", to = "B", on = "Pay", where = function(d) return d.ok end } } }
  local exe = started(c)
  send(c, exe, "Pay", { ok = false })
  lu.assertEquals(exe.active_path, "A")
  lu.assertEquals(acts, { "Pay" })
  send(c, exe, "Pay", { ok = true })
  lu.assertEquals(exe.active_path, "B")
end

function TestRuntimeTransitions:test_innermost_transition_wins()
  local c = chart.define{ id = "inner", initial = "P",
    states = { { "P", initial = "X", states = { { "X" }, { "Y" } },
                 transitions = { { from = "X", to = "Y", on = "Go" }, { from = "Y", to = "X", on = "Go" } } },
               { "Out" } },
    transitions = { { from = "P", to = "Out", on = "Go" }, { from = "Out", to = "P", on = "Back" } } }
  local exe = started(c)
  send(c, exe, "Go")
  lu.assertEquals(exe.active_path, "P.Y")
end

function TestRuntimeTransitions:test_on_a_list_of_kinds()
  local c = chart.define{ id = "multi", initial = "A", states = { { "A" }, { "B" } },
    transitions = { { from = "A", to = "B", on = { "X", "Y" } }, { from = "B", to = "A", on = "Back" } } }
  local exe = started(c)
  send(c, exe, "Y")
  lu.assertEquals(exe.active_path, "B")
  send(c, exe, "Back")
  send(c, exe, "X")
  lu.assertEquals(exe.active_path, "B")
  send(c, exe, "Back")
  send(c, exe, "Z")
  lu.assertEquals(exe.active_path, "A")
end

function TestRuntimeTransitions:test_automatic_transitions_chain()
  local log = {}
  local c = chart.define{ id = "auto", initial = "A",
    states = { { "A", on_enter = rec(log, "enter A"), on_exit = rec(log, "exit A") },
               { "B", on_enter = rec(log, "enter B"), on_exit = rec(log, "exit B") },
               { "C", on_enter = rec(log, "enter C") }, { "D" } },
    transitions = { { from = "A", to = "B" }, { from = "B", to = "C" }, { from = "C", to = "D", on = "Go" } } }
  local exe = started(c)
  lu.assertEquals(exe.active_path, "C")
  lu.assertEquals(exe.status, "RUNNING")
  lu.assertEquals(log, { "enter A", "exit A", "enter B", "exit B", "enter C" })
end

function TestRuntimeTransitions:test_guarded_automatic_transition_waits_for_the_context()
  local c = chart.define{ id = "auto-guard", initial = "A", states = { { "A" }, { "B" }, { "C" } },
    transitions = { { from = "A", to = "B", where = function(_, ctx) return ctx.ready end },
                    { from = "A", to = "C", on = "Poke" }, { from = "C", to = "A", on = "Back" },
                    { from = "B", to = "A", on = "Back" } } }
  local exe = started(c)
  lu.assertEquals(exe.active_path, "A")
  exe.context.ready = true
  send(c, exe, "Nothing")
  lu.assertEquals(exe.active_path, "B", "after an event, the automatic transition is checked again")
end

function TestRuntimeTransitions:test_selector_maps_keys_to_targets()
  local got
  local c = chart.define{ id = "sel", initial = "A", states = { { "A" }, { "L" }, { "R" } },
    transitions = {
      { from = "A", on = "Decide", select = function(ctx, ev) got = { ctx = ctx, kind = ev.kind }; return ev.data.choice end,
        to = { left = "L", right = "R" } },
      { from = "L", to = "A", on = "Back" }, { from = "R", to = "A", on = "Back" } } }
  local exe = started(c)
  send(c, exe, "Decide", { choice = "right" })
  lu.assertEquals(exe.active_path, "R")
  lu.assertIs(got.ctx, exe.context)
  lu.assertEquals(got.kind, "Decide")
  send(c, exe, "Back")
  send(c, exe, "Decide", { choice = "left" })
  lu.assertEquals(exe.active_path, "L")
end

function TestRuntimeTransitions:test_an_unmapped_selector_key_fails_the_execution()
  local c = chart.define{ id = "sel-bad", initial = "A", states = { { "A" }, { "L" } },
    transitions = { { from = "A", on = "Decide", select = function() return "sideways" end, to = { left = "L" } },
                    { from = "L", to = "A", on = "Back" } } }
  local exe = started(c)
  local fx = send(c, exe, "Decide", nil, 7)
  lu.assertEquals(exe.status, "FAILED")
  lu.assertStrMatches(exe.error, "^error: .*sideways.*")
  lu.assertEquals(fx.failed, exe.error)
  lu.assertEquals(exe.finished_at, 7)
end

------------------------------------------------------------------------
-- Sinks, finals, history

TestRuntimeFinish = {}

function TestRuntimeFinish:test_a_sink_leaf_finishes_its_parent()
  local log = {}
  local c = chart.define{ id = "sink", initial = "P",
    states = { { "P", initial = "P1", on_exit = rec(log, "exit P"),
                 states = { { "P1" }, { "P2", on_enter = rec(log, "enter P2"), on_exit = rec(log, "exit P2") } },
                 transitions = { { from = "P1", to = "P2", on = "Go" } } },
               { "Next", on_enter = rec(log, "enter Next") }, { "End" } },
    transitions = { { from = "P", to = "Next" }, { from = "Next", to = "End", on = "Go" } } }
  local exe = started(c)
  lu.assertEquals(exe.active_path, "P.P1",
    "P's automatic transition must wait until its child finishes P (README: the sink finishes its parent, " ..
    "and the parent then takes its automatic transition)")
  send(c, exe, "Go")
  lu.assertEquals(exe.active_path, "Next")
  lu.assertEquals(exe.status, "RUNNING")
  lu.assertEquals(log, { "enter P2", "exit P2", "exit P", "enter Next" })
end

function TestRuntimeFinish:test_a_finished_composite_waits_for_its_own_events()
  local c = chart.define{ id = "sink-wait", initial = "P",
    states = { { "P", initial = "P1", states = { { "P1" }, { "P2" } },
                 transitions = { { from = "P1", to = "P2", on = "Go" } } }, { "Next" } },
    transitions = { { from = "P", to = "Next", on = "Proceed" }, { from = "Next", to = "P", on = "Back" } } }
  local exe = started(c)
  send(c, exe, "Go")
  lu.assertEquals(exe.active_path, "P")
  lu.assertEquals(exe.status, "RUNNING")
  send(c, exe, "Proceed")
  lu.assertEquals(exe.active_path, "Next")
end

function TestRuntimeFinish:test_sinks_bubble_up_to_done()
  local c = chart.define{ id = "sink-up", initial = "P",
    states = { { "P", initial = "Q", states = { { "Q", initial = "Q1",
      states = { { "Q1" }, { "Q2", final = "shipped" } }, transitions = { { from = "Q1", to = "Q2", on = "Go" } } } } } } }
  local exe = started(c)
  send(c, exe, "Go", nil, 9)
  lu.assertEquals(exe.status, "DONE")
  lu.assertEquals(exe.outcome, "shipped")
  lu.assertEquals(exe.finished_at, 9)
end

function TestRuntimeFinish:test_final_at_root_is_done_with_its_outcome()
  local log = {}
  local c = chart.define{ id = "final", initial = "A",
    states = { { "A" }, { "Done", final = "success", on_enter = rec(log, "enter Done") }, { "Nope", final = true } },
    transitions = { { from = "A", to = "Done", on = "Finish" }, { from = "A", to = "Nope", on = "Drop" } } }
  local exe = started(c)
  local fx = send(c, exe, "Finish", nil, 42)
  lu.assertEquals(exe.status, "DONE")
  lu.assertEquals(exe.outcome, "success")
  lu.assertEquals(exe.finished_at, 42)
  lu.assertEquals(log, { "enter Done" })
  lu.assertEquals(#fx.emits, 0, "a top-level execution reports to no parent")
  -- events after the end change nothing
  local before = snapshot(exe)
  send(c, exe, "Drop")
  lu.assertEquals(snapshot(exe), before)

  local exe2 = started(c)
  send(c, exe2, "Drop")
  lu.assertEquals(exe2.status, "DONE")
  lu.assertNil(exe2.outcome)
end

function TestRuntimeFinish:test_deep_history_by_default()
  local c = chart.define{ id = "hist", initial = "W",
    states = { { "W", initial = "W1",
                 states = { { "W1", initial = "a", states = { { "a" }, { "b" } },
                              transitions = { { from = "a", to = "b", on = "Next" }, { from = "b", to = "a", on = "Next" } } },
                            { "W2" } },
                 transitions = { { from = "W1", to = "W2", on = "Two" }, { from = "W2", to = "W1", on = "One" } } },
               { "Out" } },
    transitions = { { from = "W", to = "Out", on = "Leave" }, { from = "Out", to = "W", on = "Back" } } }
  local exe = started(c)
  send(c, exe, "Next")
  lu.assertEquals(exe.active_path, "W.W1.b")
  send(c, exe, "Leave")
  lu.assertEquals(exe.active_path, "Out")
  send(c, exe, "Back")
  lu.assertEquals(exe.active_path, "W.W1.b", "the same nested state as when W was left")
end

function TestRuntimeFinish:test_history_false_enters_at_initial()
  local c = chart.define{ id = "nohist", initial = "W",
    states = { { "W", initial = "a", history = false, states = { { "a" }, { "b" } },
                 transitions = { { from = "a", to = "b", on = "Next" }, { from = "b", to = "a", on = "Next" } } },
               { "Out" } },
    transitions = { { from = "W", to = "Out", on = "Leave" }, { from = "Out", to = "W", on = "Back" } } }
  local exe = started(c)
  send(c, exe, "Next")
  lu.assertEquals(exe.active_path, "W.b")
  send(c, exe, "Leave")
  send(c, exe, "Back")
  lu.assertEquals(exe.active_path, "W.a")
end

------------------------------------------------------------------------
-- Deferred events, activities, emits

TestRuntimeEvents = {}

function TestRuntimeEvents:test_deferred_events_are_held_and_redelivered()
  local c = chart.define{ id = "defer", initial = "A",
    states = { { "A", defer = { "Pay" } }, { "B" }, { "C" }, { "D" } },
    transitions = { { from = "A", to = "B", on = "Go" }, { from = "B", to = "C", on = "Pay" },
                    { from = "C", to = "D", on = "Pay" } } }
  local exe = started(c)
  local pay = event("Pay", { amount = 3 })
  runtime.apply(c, exe, pay, 1)
  lu.assertEquals(exe.active_path, "A")
  lu.assertEquals(#exe.deferred, 1)
  lu.assertEquals(exe.deferred[1].id, pay.id)
  send(c, exe, "Go", nil, 2)
  lu.assertEquals(exe.active_path, "C", "the held Pay was delivered on entering B")
  lu.assertEquals(#exe.deferred, 0)
end

function TestRuntimeEvents:test_deferred_events_keep_their_order()
  local seen = {}
  local c = chart.define{ id = "defer-order", initial = "A",
    states = { { "A", defer = { "Item" } }, { "B" } },
    transitions = { { from = "A", to = "B", on = "Go" },
                    { from = "B", to = "B", on = "Item", action = function(_, ev) seen[#seen + 1] = ev.data.n end } } }
  local exe = started(c)
  for n = 1, 3 do send(c, exe, "Item", { n = n }) end
  lu.assertEquals(#exe.deferred, 3)
  send(c, exe, "Go")
  lu.assertEquals(seen, { 1, 2, 3 })
  lu.assertEquals(#exe.deferred, 0)
end

function TestRuntimeEvents:test_events_not_deferred_are_dropped()
  local c = chart.define{ id = "nodefer", initial = "A", states = { { "A" }, { "B" }, { "C" } },
    transitions = { { from = "A", to = "B", on = "Go" }, { from = "B", to = "C", on = "Pay" } } }
  local exe = started(c)
  send(c, exe, "Pay")
  lu.assertEquals(#exe.deferred, 0)
  send(c, exe, "Go")
  lu.assertEquals(exe.active_path, "B")
end

function TestRuntimeEvents:test_on_activity_runs_for_unhandled_events()
  local got = {}
  local c = chart.define{ id = "activity", initial = "A",
    states = { { "A", on_activity = function(ctx, ev, act)
                   got[#got + 1] = { kind = ev.kind, data = ev.data, ctx = ctx }
                   ctx.pings = (ctx.pings or 0) + 1
                   act.emit("watcher", "Seen", { kind = ev.kind })
                 end }, { "B" } },
    transitions = { { from = "A", to = "B", on = "Go" } } }
  local exe = started(c)
  local fx = send(c, exe, "Ping", { n = 1 })
  lu.assertEquals(exe.active_path, "A")
  lu.assertEquals(#got, 1)
  lu.assertEquals(got[1].kind, "Ping")
  lu.assertEquals(got[1].data, { n = 1 })
  lu.assertIs(got[1].ctx, exe.context)
  lu.assertEquals(exe.context.pings, 1)
  lu.assertEquals(#fx.emits, 1)
  lu.assertEquals(fx.emits[1].target_id, "watcher")
  lu.assertEquals(fx.emits[1].event.kind, "Seen")
  lu.assertEquals(exe.processed_events, 1)
  -- a handled event does not run it
  send(c, exe, "Go")
  lu.assertEquals(#got, 1)
end

function TestRuntimeEvents:test_act_emit_queues_events()
  local c = chart.define{ id = "emit", initial = "A",
    states = { { "A", on_enter = function(_, _, act)
                   act.emit("payments", "Charge", { amount = 42 })
                   act.emit(nil, "Audit")
                 end }, { "B" } },
    transitions = { { from = "A", to = "B", on = "Go" } } }
  local exe = new_exe(c)
  local fx = start(c, exe)
  lu.assertEquals(#fx.emits, 2)
  lu.assertEquals(fx.emits[1].target_id, "payments")
  lu.assertEquals(fx.emits[1].event.kind, "Charge")
  lu.assertEquals(fx.emits[1].event.data, { amount = 42 })
  -- ids from the execution, the version and the position (emitted_ids_spec)
  lu.assertEquals(fx.emits[1].event.id, "emit:" .. exe.id .. ":0:1")
  lu.assertNil(fx.emits[2].target_id)
  lu.assertEquals(fx.emits[2].event.kind, "Audit")
  lu.assertEquals(fx.emits[2].event.data, {})
  lu.assertNotEquals(fx.emits[1].event.id, fx.emits[2].event.id)
end

function TestRuntimeEvents:test_act_emit_rejects_bad_arguments()
  local c = chart.define{ id = "emit-bad", initial = "A",
    states = { { "A", on_activity = function(_, ev, act) act.emit(ev.data.target, ev.data.kind, ev.data.data) end },
               { "B" } },
    transitions = { { from = "A", to = "B", on = "Go" } } }
  local exe = started(c)
  local fx = send(c, exe, "Try", { target = "", kind = "K" })
  lu.assertEquals(exe.status, "FAILED")
  lu.assertStrContains(exe.error, "target_id")
  lu.assertEquals(#fx.emits, 0)
end

function TestRuntimeEvents:test_act_idempotency_key_and_where()
  local keys, acts = {}, {}
  local function hook(_, _, act) keys[#keys + 1] = act.idempotency_key; acts[#acts + 1] = act end
  local c = chart.define{ id = "keys", initial = "P",
    states = { { "P", initial = "Q", on_enter = hook, states = { { "Q", on_enter = hook, on_exit = hook }, { "R", on_enter = hook } },
                 transitions = { { from = "Q", to = "R", on = "Go", action = hook } } } } }
  local exe = new_exe(c, { id = "k-1", parent_id = "boss" })
  start(c, exe, nil, 3)
  lu.assertEquals(keys, { "k-1:0:0", "k-1:0:1" })
  lu.assertEquals(acts[1].execution_id, "k-1")
  lu.assertEquals(acts[1].parent_id, "boss")
  lu.assertEquals(acts[1].now, 3)
  execution.set_version(exe, 7)
  keys = {}
  send(c, exe, "Go")
  lu.assertEquals(keys, { "k-1:7:0", "k-1:7:1", "k-1:7:2" })
end

function TestRuntimeEvents:test_the_same_event_at_the_same_version_gives_the_same_keys()
  local keys = {}
  local c = chart.define{ id = "keys2", initial = "A",
    states = { { "A", on_activity = function(_, _, act) keys[#keys + 1] = act.idempotency_key end },
               { "B" } },
    transitions = { { from = "A", to = "B", on = "Go" } } }
  local e1 = started(c, { id = "same" })
  local e2 = started(c, { id = "same" })
  local ev = event("Ping")
  runtime.apply(c, e1, ev, 1)
  runtime.apply(c, e2, ev, 2)
  lu.assertEquals(keys[1], keys[2])
end

------------------------------------------------------------------------
-- Timers

TestRuntimeTimers = {}

local function timer_chart()
  return chart.define{ id = "timers", initial = "A",
    states = { { "A" }, { "Wait", timeout = 10 }, { "Ctx", timeout = { context = "delay" } }, { "Late" } },
    transitions = {
      { from = "A", to = "Wait", on = "Go" }, { from = "A", to = "Ctx", on = "GoCtx" },
      { from = "Wait", to = "A", on = "Back" }, { from = "Ctx", to = "A", on = "Back" },
      { from = "Wait", to = "Late", on = "Timeout" }, { from = "Ctx", to = "Late", on = "Timeout" },
      { from = "Late", to = "A", on = "Back" },
    } }
end

function TestRuntimeTimers:test_entering_schedules_and_leaving_cancels()
  local c = timer_chart()
  local exe = started(c)
  local fx = send(c, exe, "Go", nil, 100)
  lu.assertEquals(fx.timers, { { action = "schedule", path = "Wait", fire_at = 110 } })
  fx = send(c, exe, "Back", nil, 104)
  lu.assertEquals(#fx.timers, 1)
  lu.assertEquals(fx.timers[1].action, "cancel")
  lu.assertEquals(fx.timers[1].path, "Wait")
end

function TestRuntimeTimers:test_timeout_from_the_context()
  local c = timer_chart()
  local exe = started(c, { context = { delay = 25 } })
  local fx = send(c, exe, "GoCtx", nil, 100)
  lu.assertEquals(fx.timers, { { action = "schedule", path = "Ctx", fire_at = 125 } })
end

function TestRuntimeTimers:test_timeout_from_the_context_set_by_on_enter()
  local c = chart.define{ id = "backoff-ctx", initial = "A",
    states = { { "A" }, { "W", timeout = { context = "delay" }, on_enter = function(ctx) ctx.delay = 3 end } },
    transitions = { { from = "A", to = "W", on = "Go" }, { from = "W", to = "A", on = "Timeout" } } }
  local exe = started(c)
  local fx = send(c, exe, "Go", nil, 50)
  lu.assertEquals(fx.timers, { { action = "schedule", path = "W", fire_at = 53 } })
end

function TestRuntimeTimers:test_missing_context_timeout_fails()
  local c = timer_chart()
  local exe = started(c)
  local fx = send(c, exe, "GoCtx", nil, 100)
  lu.assertEquals(exe.status, "FAILED")
  lu.assertStrContains(exe.error, "delay")
  for _, t in ipairs(fx.timers) do lu.assertEquals(t.action, "cancel") end
end

function TestRuntimeTimers:test_timeout_fires_its_transition()
  local c = timer_chart()
  local exe = started(c)
  send(c, exe, "Go", nil, 100)
  local fx = runtime.apply(c, exe, execution.timeout_event(exe.id, "Wait", 110), 110, { armed = 110 })
  lu.assertEquals(exe.active_path, "Late")
  lu.assertEquals(timers_by_path(fx).Wait.action, "cancel")
end

function TestRuntimeTimers:test_timeout_event_id()
  local ev = execution.timeout_event("e-1", "A.B", 110)
  lu.assertEquals(ev.kind, "Timeout")
  lu.assertEquals(ev.id, "timeout:e-1:A.B:110.0") -- fire_at as Python writes a float (timeout_event_spec)
  lu.assertEquals(ev.data, { path = "A.B", fire_at = 110 })
end

function TestRuntimeTimers:test_stale_timeout_for_a_state_left_changes_nothing()
  local c = timer_chart()
  local exe = started(c)
  send(c, exe, "Go", nil, 100)
  send(c, exe, "Back", nil, 101)
  local before = snapshot(exe)
  local fx = runtime.apply(c, exe, execution.timeout_event(exe.id, "Wait", 110), 110)
  lu.assertEquals(snapshot(exe), before)
  assert_no_effects(fx)
  for _, t in ipairs(fx.timers) do lu.assertEquals(t.action, "cancel") end
end

function TestRuntimeTimers:test_stale_timeout_after_a_state_was_left_and_entered_again()
  local c = timer_chart()
  local exe = started(c)
  send(c, exe, "Go", nil, 100)
  send(c, exe, "Back", nil, 101)
  send(c, exe, "Go", nil, 102)  -- armed again for 112
  local before = snapshot(exe)
  local fx = runtime.apply(c, exe, execution.timeout_event(exe.id, "Wait", 110), 110, { armed = 112 })
  lu.assertEquals(snapshot(exe), before)
  assert_no_effects(fx)
  -- the live timer (112) must stay armed: a cancel for its path would disarm it
  for _, t in ipairs(fx.timers) do
    lu.assertNotEquals(t.path, "Wait", "a stale Timeout disarmed the state's current timer")
  end
end

function TestRuntimeTimers:test_a_timeout_that_reenters_its_state_rearms_it()
  local c = chart.define{ id = "tick", initial = "S",
    states = { { "S", timeout = 10 }, { "T" } },
    transitions = { { from = "S", to = "S", on = "Timeout" }, { from = "S", to = "T", on = "Stop" } } }
  local exe = started(c, nil, 100)
  local fx = runtime.apply(c, exe, execution.timeout_event(exe.id, "S", 110), 110, { armed = 110 })
  lu.assertEquals(exe.active_path, "S")
  lu.assertEquals(fx.timers, { { action = "schedule", path = "S", fire_at = 120 } })
end

function TestRuntimeTimers:test_a_timeout_nobody_handles_changes_nothing()
  local c = chart.define{ id = "unhandled-timeout", initial = "S",
    states = { { "S", timeout = 10 }, { "T" } }, transitions = { { from = "S", to = "T", on = "Stop" } } }
  local exe = started(c, nil, 100)
  local before = snapshot(exe)
  local fx = runtime.apply(c, exe, execution.timeout_event(exe.id, "S", 110), 110, { armed = 110 })
  lu.assertEquals(snapshot(exe), before)
  assert_no_effects(fx)
end

-- A composite with a budget whose child also handles its own Timeout: each
-- Timeout resolves at the level of the state that timed out.
local function budget_chart()
  return chart.define{ id = "budget", initial = "Job",
    states = { { "Job", timeout = 60, initial = "Work",
                 states = { { "Work", timeout = 5 }, { "Retry" } },
                 transitions = { { from = "Work", to = "Retry", on = "Timeout" }, { from = "Retry", to = "Work", on = "Go" } } },
               { "Failed", final = "failed" } },
    transitions = { { from = "Job", to = "Failed", on = "Timeout" } } }
end

function TestRuntimeTimers:test_timeout_resolves_from_the_timed_out_state_upward()
  local c = budget_chart()
  local exe, fx0 = started(c, nil, 0)
  local t0 = timers_by_path(fx0)
  lu.assertEquals(t0.Job.fire_at, 60)
  lu.assertEquals(t0["Job.Work"].fire_at, 5)
  -- the inner state's timer: its own transition
  local fx = runtime.apply(c, exe, execution.timeout_event(exe.id, "Job.Work", 5), 5, { armed = 5 })
  lu.assertEquals(exe.active_path, "Job.Retry")
  lu.assertNil(timers_by_path(fx).Job, "the composite's budget is not touched by an inner transition")
  send(c, exe, "Go", nil, 6)
  lu.assertEquals(exe.active_path, "Job.Work")
  -- the composite's timer while the inner state (with its own Timeout transition) is active
  fx = runtime.apply(c, exe, execution.timeout_event(exe.id, "Job", 60), 60, { armed = 60 })
  lu.assertEquals(exe.active_path, "Failed")
  lu.assertEquals(exe.status, "DONE")
  lu.assertEquals(exe.outcome, "failed")
  lu.assertEquals(timers_by_path(fx)["Job.Work"].action, "cancel")
end

function TestRuntimeTimers:test_an_inner_timeout_without_its_own_transition_bubbles_up()
  local c = chart.define{ id = "bubble", initial = "Job",
    states = { { "Job", initial = "Work", states = { { "Work", timeout = 5 }, { "Other" } },
                 transitions = { { from = "Work", to = "Other", on = "Go" }, { from = "Other", to = "Work", on = "Go" } } },
               { "Failed", final = "failed" } },
    transitions = { { from = "Job", to = "Failed", on = "Timeout" } } }
  local exe = started(c, nil, 0)
  runtime.apply(c, exe, execution.timeout_event(exe.id, "Job.Work", 5), 5, { armed = 5 })
  lu.assertEquals(exe.status, "DONE")
  lu.assertEquals(exe.outcome, "failed")
end

-- Attempt -> Backoff (timeout) -> Attempt on Timeout; Attempt -> Done on Ok;
-- the composite's budget -> Failed.
local function retry_chart()
  return chart.define{ id = "retry", initial = "Job",
    states = {
      { "Job", timeout = 60, initial = "Attempt",
        states = { { "Attempt", on_enter = function(ctx) ctx.attempts = (ctx.attempts or 0) + 1 end },
                   { "Backoff", timeout = 5 } },
        transitions = { { from = "Attempt", to = "Backoff", on = "Err" },
                        { from = "Backoff", to = "Attempt", on = "Timeout" },
                        { from = "Attempt", to = "Done", on = "Ok" } } },
      { "Done", final = "success" },
      { "Failed", final = "failed" },
    },
    transitions = { { from = "Job", to = "Failed", on = "Timeout" } } }
end

function TestRuntimeTimers:test_retry_with_backoff_succeeds()
  local c = retry_chart()
  local exe, fx = started(c, nil, 0)
  lu.assertEquals(exe.active_path, "Job.Attempt")
  lu.assertEquals(timers_by_path(fx).Job.fire_at, 60)
  fx = send(c, exe, "Err", nil, 1)
  lu.assertEquals(exe.active_path, "Job.Backoff")
  lu.assertEquals(fx.timers, { { action = "schedule", path = "Job.Backoff", fire_at = 6 } })
  fx = runtime.apply(c, exe, execution.timeout_event(exe.id, "Job.Backoff", 6), 6, { armed = 6 })
  lu.assertEquals(exe.active_path, "Job.Attempt")
  lu.assertEquals(exe.context.attempts, 2)
  lu.assertEquals(fx.timers, { { action = "cancel", path = "Job.Backoff" } })
  fx = send(c, exe, "Err", nil, 7)
  lu.assertEquals(fx.timers, { { action = "schedule", path = "Job.Backoff", fire_at = 12 } })
  runtime.apply(c, exe, execution.timeout_event(exe.id, "Job.Backoff", 12), 12, { armed = 12 })
  lu.assertEquals(exe.context.attempts, 3)
  fx = send(c, exe, "Ok", nil, 13)
  lu.assertEquals(exe.status, "DONE")
  lu.assertEquals(exe.outcome, "success")
  lu.assertEquals(timers_by_path(fx).Job.action, "cancel")
end

function TestRuntimeTimers:test_retry_budget_timeout_fails_it()
  local c = retry_chart()
  local exe = started(c, nil, 0)
  send(c, exe, "Err", nil, 55)
  lu.assertEquals(exe.active_path, "Job.Backoff")
  local fx = runtime.apply(c, exe, execution.timeout_event(exe.id, "Job", 60), 60, { armed = 60 })
  lu.assertEquals(exe.active_path, "Failed")
  lu.assertEquals(exe.status, "DONE")
  lu.assertEquals(exe.outcome, "failed")
  local t = timers_by_path(fx)
  lu.assertEquals(t["Job.Backoff"].action, "cancel")
  lu.assertEquals(t.Job.action, "cancel")
end

------------------------------------------------------------------------
-- Orthogonal states

TestRuntimeOrthogonal = {}

local function fork_chart(join, log)
  log = log or {}
  return chart.define{ id = "fork", initial = "Idle",
    states = {
      { "Idle" },
      { "Fork", orthogonal = true, on_exit = rec(log, "exit Fork"), states = {
          { "A", initial = "A1", states = { { "A1" }, { "A2", final = "success" }, { "A3", final = "failed" } },
            transitions = { { from = "A1", to = "A2", on = "GoA" }, { from = "A1", to = "A3", on = "FailA" } } },
          { "B", initial = "B1", states = { { "B1" }, { "B2", final = "success" } },
            transitions = { { from = "B1", to = "B2", on = "GoB" } } } } },
      { "Done", final = "success" },
      { "Bad", final = "bad" },
    },
    transitions = {
      { from = "Idle", to = "Fork", on = "Go" },
      { from = "Fork", join = join or "all", to = "Done", else_to = "Bad" },
      { from = "Fork", to = "Idle", on = "Abort" },
    } }
end

local function finished(cid, outcome, result)
  return event("Finished", { child_id = cid, outcome = outcome, status = "DONE", result = result or {} })
end

function TestRuntimeOrthogonal:test_entering_forks_one_spawn_per_region_and_parks()
  local c = fork_chart()
  local exe = started(c, { id = "p1", context = { total = 30, nested = { a = 1 } } })
  local fx = send(c, exe, "Go")
  lu.assertEquals(exe.active_path, "Fork")
  lu.assertEquals(exe.status, "RUNNING")
  lu.assertEquals(#fx.spawns, 2)
  local by = {}
  for _, s in ipairs(fx.spawns) do by[s.root_path] = s end
  lu.assertEquals(by["Fork.A"].child_id, "p1:Fork.A:0")
  lu.assertEquals(by["Fork.B"].child_id, "p1:Fork.B:0")
  lu.assertEquals(by["Fork.A"].context, { total = 30, nested = { a = 1 } })
  lu.assertNotIs(by["Fork.A"].context, exe.context, "a child gets a copy of the context")
  lu.assertNotIs(by["Fork.A"].context.nested, exe.context.nested)
  lu.assertNotIs(by["Fork.A"].context, by["Fork.B"].context)
  lu.assertEquals(count(exe.children), 2)
  lu.assertFalse(exe.children["p1:Fork.A:0"].finished)
  lu.assertEquals(exe.children["p1:Fork.A:0"].root_path, "Fork.A")
  lu.assertFalse(exe.children["p1:Fork.B:0"].finished)
end

function TestRuntimeOrthogonal:test_join_all_goes_to_target_with_region_results()
  local c = fork_chart("all")
  local exe = started(c, { id = "p2" })
  send(c, exe, "Go")
  send(c, exe, "Finished", nil)  -- no child_id: ignored
  runtime.apply(c, exe, finished("p2:Fork.A:0", "success", { a = 1 }), 1)
  lu.assertTrue(exe.children["p2:Fork.A:0"].finished)
  lu.assertEquals(exe.children["p2:Fork.A:0"].outcome, "success")
  lu.assertEquals(exe.active_path, "Fork", "join all waits for every region")
  runtime.apply(c, exe, finished("p2:Fork.B:0", "success", { b = 2 }), 2)
  lu.assertEquals(exe.status, "DONE")
  lu.assertEquals(exe.outcome, "success")
  lu.assertEquals(exe.active_path, "Done")
  local rr = exe.context.region_results
  lu.assertNotNil(rr)
  lu.assertEquals(count(rr), 2)
end

-- README: region_results[region] = { outcome, context }; the region is keyed
-- by its path, as harel does (ChildState.key = the region's full path).
function TestRuntimeOrthogonal:test_region_results_are_keyed_by_region_path()
  local c = fork_chart("all")
  local exe = started(c, { id = "p2k" })
  send(c, exe, "Go")
  runtime.apply(c, exe, finished("p2k:Fork.A:0", "success", { a = 1 }), 1)
  runtime.apply(c, exe, finished("p2k:Fork.B:0", "success", { b = 2 }), 2)
  lu.assertEquals(exe.context.region_results, {
    ["Fork.A"] = { outcome = "success", context = { a = 1 } },
    ["Fork.B"] = { outcome = "success", context = { b = 2 } },
  })
end

function TestRuntimeOrthogonal:test_join_with_a_failed_region_goes_to_else()
  local c = fork_chart("all")
  local exe = started(c, { id = "p3" })
  send(c, exe, "Go")
  runtime.apply(c, exe, finished("p3:Fork.A:0", "failed"), 1)
  lu.assertEquals(exe.active_path, "Fork")
  runtime.apply(c, exe, finished("p3:Fork.B:0", "success"), 2)
  lu.assertEquals(exe.active_path, "Bad")
  lu.assertEquals(exe.outcome, "bad")
end

function TestRuntimeOrthogonal:test_region_without_outcome_counts_as_success()
  local c = fork_chart("all")
  local exe = started(c, { id = "p3n" })
  send(c, exe, "Go")
  runtime.apply(c, exe, finished("p3n:Fork.A:0", ms.null), 1)
  runtime.apply(c, exe, finished("p3n:Fork.B:0", nil), 2)
  lu.assertEquals(exe.active_path, "Done")
end

function TestRuntimeOrthogonal:test_join_any_opens_on_the_first_and_cancels_the_rest()
  local log = {}
  local c = fork_chart("any", log)
  local exe = started(c, { id = "p4" })
  send(c, exe, "Go")
  local fx = runtime.apply(c, exe, finished("p4:Fork.B:0", "success", { b = 1 }), 1)
  lu.assertEquals(exe.active_path, "Done")
  lu.assertEquals(exe.status, "DONE")
  lu.assertEquals(log, { "exit Fork" })
  lu.assertEquals(#fx.emits, 1)
  lu.assertEquals(fx.emits[1].target_id, "p4:Fork.A:0")
  lu.assertEquals(fx.emits[1].event.kind, "Cancel")
end

function TestRuntimeOrthogonal:test_leaving_the_fork_cancels_live_regions_and_reentry_uses_the_next_seq()
  local c = fork_chart("all")
  local exe = started(c, { id = "p5" })
  send(c, exe, "Go")
  runtime.apply(c, exe, finished("p5:Fork.A:0", "success"), 1)
  local fx = send(c, exe, "Abort")
  lu.assertEquals(exe.active_path, "Idle")
  lu.assertEquals(#fx.emits, 1, "only the live region is cancelled")
  lu.assertEquals(fx.emits[1].target_id, "p5:Fork.B:0")
  lu.assertEquals(fx.emits[1].event.kind, "Cancel")
  lu.assertEquals(exe.invoke_seq.Fork, 1)
  fx = send(c, exe, "Go")
  local ids = {}
  for _, s in ipairs(fx.spawns) do ids[#ids + 1] = s.child_id end
  table.sort(ids)
  lu.assertEquals(ids, { "p5:Fork.A:1", "p5:Fork.B:1" })
  lu.assertNil(exe.children["p5:Fork.A:0"], "the old children are replaced")
  -- a Finished from the old generation changes nothing
  runtime.apply(c, exe, finished("p5:Fork.B:0", "success"), 3)
  lu.assertEquals(exe.active_path, "Fork")
  runtime.apply(c, exe, finished("p5:Fork.A:1", "success"), 4)
  runtime.apply(c, exe, finished("p5:Fork.B:1", "success"), 5)
  lu.assertEquals(exe.active_path, "Done")
end

function TestRuntimeOrthogonal:test_an_automatic_transition_out_of_a_fork_is_a_join_all()
  local c = chart.define{ id = "auto-join", initial = "F",
    states = { { "F", orthogonal = true, states = {
        { "A", initial = "A1", states = { { "A1" }, { "A2", final = "success" } }, transitions = { { from = "A1", to = "A2", on = "Go" } } },
        { "B", initial = "B1", states = { { "B1" }, { "B2", final = "success" } }, transitions = { { from = "B1", to = "B2", on = "Go" } } } } },
      { "Done", final = "success" } },
    transitions = { { from = "F", to = "Done" } } }
  local exe = started(c, { id = "aj" })
  lu.assertEquals(exe.active_path, "F")
  runtime.apply(c, exe, finished("aj:F.A:0", "success"), 1)
  lu.assertEquals(exe.active_path, "F")
  runtime.apply(c, exe, finished("aj:F.B:0", "success"), 2)
  lu.assertEquals(exe.active_path, "Done")
  lu.assertEquals(exe.status, "DONE")
end

function TestRuntimeOrthogonal:test_a_fork_timeout_leaves_it_and_cancels_the_regions()
  local c = chart.define{ id = "fork-timeout", initial = "F",
    states = { { "F", orthogonal = true, timeout = 30, states = {
        { "A", initial = "A1", states = { { "A1" }, { "A2", final = "success" } }, transitions = { { from = "A1", to = "A2", on = "Go" } } },
        { "B", initial = "B1", states = { { "B1" }, { "B2", final = "success" } }, transitions = { { from = "B1", to = "B2", on = "Go" } } } } },
      { "Done", final = "success" }, { "Late", final = "late" } },
    transitions = { { from = "F", to = "Done" }, { from = "F", to = "Late", on = "Timeout" } } }
  local exe, fx = started(c, { id = "ft" }, 100)
  lu.assertEquals(timers_by_path(fx).F.fire_at, 130)
  runtime.apply(c, exe, finished("ft:F.A:0", "success"), 101)
  fx = runtime.apply(c, exe, execution.timeout_event(exe.id, "F", 130), 130, { armed = 130 })
  lu.assertEquals(exe.status, "DONE")
  lu.assertEquals(exe.outcome, "late")
  lu.assertEquals(#fx.emits, 1)
  lu.assertEquals(fx.emits[1].target_id, "ft:F.B:0")
  lu.assertEquals(fx.emits[1].event.kind, "Cancel")
end

function TestRuntimeOrthogonal:test_finished_while_suspended_joins_on_resume()
  local c = fork_chart("all")
  local exe = started(c, { id = "pj" })
  send(c, exe, "Go")
  send(c, exe, "Suspend")
  runtime.apply(c, exe, finished("pj:Fork.A:0", "success"), 1)
  runtime.apply(c, exe, finished("pj:Fork.B:0", "success"), 2)
  lu.assertEquals(exe.status, "SUSPENDED")
  lu.assertEquals(exe.active_path, "Fork")
  send(c, exe, "Resume")
  lu.assertEquals(exe.active_path, "Done")
  lu.assertEquals(exe.status, "DONE")
end

function TestRuntimeOrthogonal:test_unhandled_domain_event_goes_to_each_live_region()
  local c = fork_chart("all")
  local exe = started(c, { id = "p6" })
  send(c, exe, "Go")
  runtime.apply(c, exe, finished("p6:Fork.B:0", "success"), 1)
  local ev = { id = "e-9", kind = "GoA", data = { x = 1 } }
  local fx = runtime.apply(c, exe, ev, 2)
  lu.assertEquals(exe.active_path, "Fork")
  lu.assertEquals(#fx.emits, 1, "only the live region gets it")
  lu.assertEquals(fx.emits[1].target_id, "p6:Fork.A:0")
  lu.assertEquals(fx.emits[1].event.id, "e-9@p6:Fork.A:0")
  lu.assertEquals(fx.emits[1].event.kind, "GoA")
  lu.assertEquals(fx.emits[1].event.data, { x = 1 })
end

function TestRuntimeOrthogonal:test_a_domain_event_to_all_regions()
  local c = fork_chart("all")
  local exe = started(c, { id = "p6b" })
  send(c, exe, "Go")
  local fx = runtime.apply(c, exe, { id = "e-10", kind = "Hello", data = {} }, 2)
  local got = {}
  for _, e in ipairs(fx.emits) do got[e.target_id] = e.event.id end
  lu.assertEquals(got, { ["p6b:Fork.A:0"] = "e-10@p6b:Fork.A:0", ["p6b:Fork.B:0"] = "e-10@p6b:Fork.B:0" })
end

function TestRuntimeOrthogonal:test_an_event_the_parent_handles_is_not_forwarded()
  local c = fork_chart("all")
  local exe = started(c, { id = "p6c" })
  send(c, exe, "Go")
  local fx = send(c, exe, "Abort")
  for _, e in ipairs(fx.emits) do lu.assertEquals(e.event.kind, "Cancel") end
end

function TestRuntimeOrthogonal:test_a_region_child_runs_to_its_final_and_reports_finished()
  local c = fork_chart("all")
  local child = new_exe(c, { id = "p7:Fork.A:0", root_path = "Fork.A", parent_id = "p7", child_id = "p7:Fork.A:0",
                             context = { total = 30 } })
  local fx = start(c, child)
  lu.assertEquals(child.status, "RUNNING")
  lu.assertEquals(child.active_path, "Fork.A.A1")
  lu.assertEquals(#fx.emits, 0)
  child.context.picked = true
  fx = send(c, child, "GoA", nil, 8)
  lu.assertEquals(child.status, "DONE")
  lu.assertEquals(child.outcome, "success")
  lu.assertEquals(#fx.emits, 1)
  local em = fx.emits[1]
  lu.assertEquals(em.target_id, "p7")
  lu.assertEquals(em.event.kind, "Finished")
  lu.assertEquals(em.event.data.child_id, "p7:Fork.A:0")
  lu.assertEquals(em.event.data.outcome, "success")
  lu.assertEquals(em.event.data.result.picked, true)
  lu.assertEquals(em.event.data.result.total, 30)
  -- and the parent records it
  local parent = started(c, { id = "p7" })
  send(c, parent, "Go")
  runtime.apply(c, parent, em.event, 9)
  lu.assertTrue(parent.children["p7:Fork.A:0"].finished)
  lu.assertEquals(parent.children["p7:Fork.A:0"].outcome, "success")
end

function TestRuntimeOrthogonal:test_region_runs_its_own_root_hooks_and_timer()
  local log = {}
  local c = chart.define{ id = "region-hooks", initial = "F",
    states = { { "F", orthogonal = true, states = {
      { "R", initial = "R1", timeout = 30, on_enter = rec(log, "enter R"), on_exit = rec(log, "exit R"),
        states = { { "R1" }, { "R2", final = "success" } }, transitions = { { from = "R1", to = "R2", on = "Go" } } } } },
      { "Done", final = "success" } },
    transitions = { { from = "F", to = "Done" } } }
  local child = new_exe(c, { id = "q:F.R:0", root_path = "F.R", parent_id = "q", child_id = "q:F.R:0" })
  local fx = start(c, child, nil, 100)
  lu.assertEquals(log, { "enter R" })
  lu.assertEquals(timers_by_path(fx)["F.R"].fire_at, 130)
  fx = send(c, child, "Go", nil, 101)
  lu.assertEquals(log, { "enter R", "exit R" })
  lu.assertEquals(timers_by_path(fx)["F.R"].action, "cancel")
  lu.assertEquals(child.status, "DONE")
end

function TestRuntimeOrthogonal:test_region_timeout_on_its_root()
  local c = chart.define{ id = "region-timeout", initial = "F",
    states = { { "F", orthogonal = true, states = {
      { "R", initial = "R1", timeout = 30, states = { { "R1" }, { "R2", final = "success" }, { "Slow", final = "late" } },
        transitions = { { from = "R1", to = "R2", on = "Go" }, { from = "R", to = "Slow", on = "Timeout" } } } } },
      { "Done", final = "success" } },
    transitions = { { from = "F", to = "Done" } } }
  local child = new_exe(c, { id = "q2:F.R:0", root_path = "F.R", parent_id = "q2", child_id = "q2:F.R:0" })
  start(c, child, nil, 100)
  runtime.apply(c, child, execution.timeout_event(child.id, "F.R", 130), 130, { armed = 130 })
  lu.assertEquals(child.status, "DONE")
  lu.assertEquals(child.outcome, "late")
end

------------------------------------------------------------------------
-- Failures

TestRuntimeFailure = {}

local function failing_chart(err_value)
  return chart.define{ id = "fail", initial = "A",
    states = { { "A", timeout = 10 },
               { "B", on_enter = function(_, _, act) act.emit("x", "Before") error(err_value, 0) end } },
    transitions = { { from = "A", to = "B", on = "Go", action = function(_, _, act) act.emit("y", "InAction") end } } }
end

function TestRuntimeFailure:test_an_action_that_raises_fails_the_execution()
  local c = failing_chart("boom")
  local exe = started(c, nil, 100)
  local fx = send(c, exe, "Go", nil, 101)
  lu.assertEquals(exe.status, "FAILED")
  lu.assertStrMatches(exe.error, "^error: boom.*")
  lu.assertEquals(fx.failed, exe.error)
  lu.assertEquals(exe.finished_at, 101)
  lu.assertEquals(fx.emits, {}, "no emit of the failed step is kept")
  lu.assertEquals(fx.spawns, {})
  for _, t in ipairs(fx.timers) do lu.assertEquals(t.action, "cancel") end
  lu.assertEquals(timers_by_path(fx).A.action, "cancel")
end

function TestRuntimeFailure:test_a_plain_lua_error_with_position()
  local c = chart.define{ id = "fail-pos", initial = "A",
    states = { { "A", on_activity = function() error("bad thing") end }, { "B" } },
    transitions = { { from = "A", to = "B", on = "Go" } } }
  local exe = started(c)
  send(c, exe, "Poke")
  lu.assertEquals(exe.status, "FAILED")
  lu.assertStrMatches(exe.error, "^error: .*bad thing.*")
end

function TestRuntimeFailure:test_a_table_error_gives_type_and_message()
  local c = failing_chart({ type = "PaymentError", message = "card declined" })
  local exe = started(c)
  send(c, exe, "Go")
  lu.assertEquals(exe.status, "FAILED")
  lu.assertStrMatches(exe.error, "^PaymentError: card declined.*")
end

-- README: error = "<type>: <message>"
function TestRuntimeFailure:test_the_error_is_exactly_type_and_message()
  local c = failing_chart({ type = "PaymentError", message = "card declined" })
  local exe = started(c)
  send(c, exe, "Go")
  lu.assertEquals(exe.error, "PaymentError: card declined")
end

function TestRuntimeFailure:test_a_failing_guard_or_selector_fails_it()
  local c = chart.define{ id = "fail-guard", initial = "A", states = { { "A" }, { "B" } },
    transitions = { { from = "A", to = "B", on = "G", where = function() error({ type = "GuardError", message = "no" }) end },
                    { from = "A", on = "S", select = function() error("sel", 0) end, to = { x = "B" } } } }
  local exe = started(c)
  send(c, exe, "G")
  lu.assertEquals(exe.status, "FAILED")
  lu.assertStrMatches(exe.error, "^GuardError: no.*")
  exe = started(c)
  send(c, exe, "S")
  lu.assertEquals(exe.status, "FAILED")
  lu.assertStrMatches(exe.error, "^error: sel.*")
end

function TestRuntimeFailure:test_a_failing_on_enter_at_start()
  local c = chart.define{ id = "fail-start", initial = "A",
    states = { { "A", timeout = 5, on_enter = function() error("nope", 0) end }, { "B" } },
    transitions = { { from = "A", to = "B", on = "Go" } } }
  local exe = new_exe(c)
  local fx = start(c, exe, nil, 10)
  lu.assertEquals(exe.status, "FAILED")
  for _, t in ipairs(fx.timers) do lu.assertEquals(t.action, "cancel") end
end

function TestRuntimeFailure:test_a_failed_fork_keeps_no_spawn_and_terminates_live_children()
  local c = chart.define{ id = "fail-fork", initial = "Idle",
    states = { { "Idle" },
      { "Fork", orthogonal = true, states = {
          { "A", initial = "A1", states = { { "A1" }, { "A2", final = "success" } }, transitions = { { from = "A1", to = "A2", on = "Go" } } } } },
      { "Done", on_enter = function() error("late", 0) end } },
    transitions = { { from = "Idle", to = "Fork", on = "Go" }, { from = "Fork", to = "Done", on = "Skip" },
                    { from = "Fork", to = "Idle", on = "Abort" },
                    { from = "Done", to = "Idle", on = "Again" } } }
  local exe = started(c, { id = "ff" })
  send(c, exe, "Go")
  local fx = send(c, exe, "Skip")
  lu.assertEquals(exe.status, "FAILED")
  lu.assertEquals(#fx.spawns, 0)
  for _, e in ipairs(fx.emits) do
    lu.assertEquals(e.target_id, "ff:Fork.A:0")
    lu.assertNotEquals(e.event.kind, "Finished")
  end
end

function TestRuntimeFailure:test_a_failed_region_reports_to_its_parent()
  local c = chart.define{ id = "fail-region", initial = "F",
    states = { { "F", orthogonal = true, states = {
      { "R", initial = "R1", states = { { "R1", on_activity = function() error("region broke", 0) end }, { "R2" } },
        transitions = { { from = "R1", to = "R2", on = "Go" } } } } },
      { "Done", final = "success" } },
    transitions = { { from = "F", to = "Done" } } }
  local child = new_exe(c, { id = "z:F.R:0", root_path = "F.R", parent_id = "z", child_id = "z:F.R:0" })
  start(c, child)
  local fx = send(c, child, "Poke")
  lu.assertEquals(child.status, "FAILED")
  lu.assertEquals(#fx.emits, 1)
  lu.assertEquals(fx.emits[1].target_id, "z")
  lu.assertEquals(fx.emits[1].event.kind, "Finished")
  lu.assertEquals(fx.emits[1].event.data.outcome, "failed")
end

------------------------------------------------------------------------
-- Control events

TestRuntimeControl = {}

function TestRuntimeControl:test_cooperative_cancel_takes_the_cancel_transition()
  local log = {}
  local c = chart.define{ id = "coop", initial = "Work",
    states = { { "Work", timeout = 10, on_exit = rec(log, "exit Work") },
               { "Cleanup", on_enter = rec(log, "enter Cleanup") }, { "Cancelled", final = "cancelled" } },
    transitions = { { from = "Work", to = "Cleanup", on = "Cancel" }, { from = "Cleanup", to = "Cancelled", on = "Cleaned" } } }
  local exe = started(c, nil, 0)
  local fx = send(c, exe, "Cancel", nil, 1)
  lu.assertEquals(exe.status, "RUNNING")
  lu.assertEquals(exe.active_path, "Cleanup")
  lu.assertEquals(log, { "exit Work", "enter Cleanup" })
  lu.assertEquals(timers_by_path(fx).Work.action, "cancel")
  send(c, exe, "Cleaned", nil, 2)
  lu.assertEquals(exe.status, "DONE")
  lu.assertEquals(exe.outcome, "cancelled")
end

function TestRuntimeControl:test_cooperative_cancel_from_an_enclosing_state()
  local c = chart.define{ id = "coop2", initial = "P",
    states = { { "P", initial = "X", states = { { "X" }, { "Y" } }, transitions = { { from = "X", to = "Y", on = "Go" } } },
               { "Cancelled", final = "cancelled" } },
    transitions = { { from = "P", to = "Cancelled", on = "Cancel" } } }
  local exe = started(c)
  send(c, exe, "Cancel")
  lu.assertEquals(exe.status, "DONE")
  lu.assertEquals(exe.outcome, "cancelled")
end

function TestRuntimeControl:test_cancel_without_a_cancel_transition_terminates()
  local log = {}
  local c = chart.define{ id = "nocoop", initial = "P",
    states = { { "P", timeout = 100, initial = "Work", on_exit = rec(log, "exit P"),
                 states = { { "Work", timeout = 10 }, { "Other" } },
                 transitions = { { from = "Work", to = "Other", on = "Go" } } }, { "End" } },
    transitions = { { from = "P", to = "End", on = "Finish" } } }
  local exe = started(c, nil, 0)
  local fx = send(c, exe, "Cancel", nil, 5)
  lu.assertEquals(exe.status, "CANCELLED")
  lu.assertEquals(exe.finished_at, 5)
  local t = timers_by_path(fx)
  lu.assertEquals(t["P.Work"].action, "cancel")
  lu.assertEquals(t.P.action, "cancel")
  lu.assertEquals(log, {}, "a forced cancel runs no hooks")
  -- finished: later events change nothing
  send(c, exe, "Go")
  lu.assertEquals(exe.status, "CANCELLED")
  lu.assertEquals(exe.active_path, "P.Work")
end

function TestRuntimeControl:test_cancel_after_done_is_a_no_op()
  local c = chart.define{ id = "cdone", initial = "A", states = { { "A" }, { "E", final = "success" } },
    transitions = { { from = "A", to = "E", on = "Go" } } }
  local exe = started(c)
  send(c, exe, "Go")
  send(c, exe, "Cancel")
  lu.assertEquals(exe.status, "DONE")
  lu.assertEquals(exe.outcome, "success")
end

function TestRuntimeControl:test_cancel_while_forked_reaches_the_regions()
  local c = fork_chart("all")
  local exe = started(c, { id = "pc" })
  send(c, exe, "Go")
  local fx = send(c, exe, "Cancel")
  lu.assertEquals(exe.status, "CANCELLED")
  local targets = {}
  for _, e in ipairs(fx.emits) do targets[e.target_id] = e.event.kind end
  lu.assertNotNil(targets["pc:Fork.A:0"])
  lu.assertNotNil(targets["pc:Fork.B:0"])
end

function TestRuntimeControl:test_terminate()
  local log = {}
  local c = chart.define{ id = "term", initial = "A",
    states = { { "A", timeout = 10, on_exit = rec(log, "exit A") }, { "Cleanup" } },
    transitions = { { from = "A", to = "Cleanup", on = "Cancel" } } }
  local exe = started(c, nil, 0)
  local fx = send(c, exe, "Terminate", nil, 3)
  lu.assertEquals(exe.status, "CANCELLED", "Terminate ignores the Cancel transition")
  lu.assertEquals(exe.finished_at, 3)
  lu.assertEquals(timers_by_path(fx).A.action, "cancel")
  lu.assertEquals(log, {})
end

function TestRuntimeControl:test_terminate_while_forked_terminates_the_regions()
  local c = fork_chart("all")
  local exe = started(c, { id = "pt" })
  send(c, exe, "Go")
  local fx = send(c, exe, "Terminate")
  lu.assertEquals(exe.status, "CANCELLED")
  local targets = {}
  for _, e in ipairs(fx.emits) do targets[e.target_id] = e.event.kind end
  lu.assertEquals(targets, { ["pt:Fork.A:0"] = "Terminate", ["pt:Fork.B:0"] = "Terminate" })
end

function TestRuntimeControl:test_terminated_region_reports_finished_as_cancelled()
  local c = fork_chart("all")
  local child = new_exe(c, { id = "pr:Fork.A:0", root_path = "Fork.A", parent_id = "pr", child_id = "pr:Fork.A:0" })
  start(c, child)
  local fx = send(c, child, "Terminate")
  lu.assertEquals(child.status, "CANCELLED")
  lu.assertEquals(#fx.emits, 1)
  lu.assertEquals(fx.emits[1].event.kind, "Finished")
  lu.assertEquals(fx.emits[1].event.data.outcome, "cancelled")
end

function TestRuntimeControl:test_cooperative_cancel_out_of_a_fork_cancels_each_region_once()
  local c = chart.define{ id = "coop-fork", initial = "F",
    states = { { "F", orthogonal = true, states = {
        { "A", initial = "A1", states = { { "A1" }, { "A2", final = "success" } }, transitions = { { from = "A1", to = "A2", on = "Go" } } },
        { "B", initial = "B1", states = { { "B1" }, { "B2", final = "success" } }, transitions = { { from = "B1", to = "B2", on = "Go" } } } } },
      { "Cleanup" }, { "Done", final = "success" }, { "Cancelled", final = "cancelled" } },
    transitions = { { from = "F", to = "Done" }, { from = "F", to = "Cleanup", on = "Cancel" },
                    { from = "Cleanup", to = "Cancelled", on = "Cleaned" } } }
  local exe = started(c, { id = "cf" })
  local fx = send(c, exe, "Cancel")
  lu.assertEquals(exe.status, "RUNNING")
  lu.assertEquals(exe.active_path, "Cleanup")
  local per = {}
  for _, e in ipairs(fx.emits) do
    lu.assertEquals(e.event.kind, "Cancel")
    per[e.target_id] = (per[e.target_id] or 0) + 1
  end
  lu.assertEquals(per, { ["cf:F.A:0"] = 1, ["cf:F.B:0"] = 1 })
end

local function suspend_chart()
  return chart.define{ id = "susp", initial = "A", states = { { "A" }, { "B" }, { "C" } },
    transitions = { { from = "A", to = "B", on = "X" }, { from = "B", to = "C", on = "Y" }, { from = "C", to = "A", on = "Z" } } }
end

function TestRuntimeControl:test_suspend_holds_events_and_resume_delivers_them_in_order()
  local c = suspend_chart()
  local exe = started(c)
  send(c, exe, "Suspend")
  lu.assertEquals(exe.status, "SUSPENDED")
  send(c, exe, "Y")  -- in A, Y is not handled: in order it changes nothing
  send(c, exe, "X")
  lu.assertEquals(exe.active_path, "A")
  lu.assertEquals(#exe.deferred, 2)
  lu.assertEquals(exe.deferred[1].kind, "Y")
  lu.assertEquals(exe.deferred[2].kind, "X")
  send(c, exe, "Resume")
  lu.assertEquals(exe.status, "RUNNING")
  lu.assertEquals(exe.active_path, "B", "Y then X: Y unhandled in A, then X to B")
  lu.assertEquals(#exe.deferred, 0)
end

function TestRuntimeControl:test_resume_without_suspend_and_suspend_twice()
  local c = suspend_chart()
  local exe = started(c)
  send(c, exe, "Resume")
  lu.assertEquals(exe.status, "RUNNING")
  send(c, exe, "Suspend")
  send(c, exe, "Suspend")
  lu.assertEquals(exe.status, "SUSPENDED")
  send(c, exe, "X")
  send(c, exe, "Resume")
  lu.assertEquals(exe.active_path, "B")
end

function TestRuntimeControl:test_suspend_while_forked_reaches_the_regions()
  local c = fork_chart("all")
  local exe = started(c, { id = "ps" })
  send(c, exe, "Go")
  local fx = send(c, exe, "Suspend")
  lu.assertEquals(#fx.emits, 2)
  for _, e in ipairs(fx.emits) do lu.assertEquals(e.event.kind, "Suspend") end
  fx = send(c, exe, "Resume")
  lu.assertEquals(#fx.emits, 2)
  for _, e in ipairs(fx.emits) do lu.assertEquals(e.event.kind, "Resume") end
end

-- A SetState that arrives while suspended is either refused (harel: only a
-- RUNNING execution may be repositioned) or applied as a SetState on Resume;
-- it is never replayed as a domain event.
function TestRuntimeControl:test_set_state_while_suspended_is_not_replayed_as_a_domain_event()
  local seen = {}
  local c = chart.define{ id = "susp-set", initial = "A",
    states = { { "A", on_activity = function(_, ev) seen[#seen + 1] = ev.kind end }, { "B" }, { "C" } },
    transitions = { { from = "A", to = "B", on = "X" }, { from = "B", to = "C", on = "Y" } } }
  local exe = started(c)
  send(c, exe, "Suspend")
  send(c, exe, "SetState", { path = "C" })
  send(c, exe, "Resume")
  lu.assertEquals(exe.status, "RUNNING")
  lu.assertEquals(seen, {}, "the held SetState reached on_activity as if it were a domain event")
  lu.assertTrue(exe.active_path == "A" or exe.active_path == "C", "active_path " .. tostring(exe.active_path))
end

function TestRuntimeControl:test_timeout_while_suspended_fires_on_resume()
  local c = timer_chart()
  local exe = started(c)
  send(c, exe, "Go", nil, 100)
  send(c, exe, "Suspend", nil, 105)
  runtime.apply(c, exe, execution.timeout_event(exe.id, "Wait", 110), 110, { armed = 110 })
  lu.assertEquals(exe.active_path, "Wait")
  send(c, exe, "Resume", nil, 120)
  lu.assertEquals(exe.active_path, "Late")
end

function TestRuntimeControl:test_reset_starts_again_from_scratch()
  local log = {}
  local c = chart.define{ id = "reset", initial = "A",
    states = { { "A", timeout = 10, on_enter = rec(log, "enter A") },
               { "W", initial = "W1", states = { { "W1" }, { "W2" } }, transitions = { { from = "W1", to = "W2", on = "Next" } } },
               { "E", final = "success" } },
    transitions = { { from = "A", to = "W", on = "Go" }, { from = "W", to = "E", on = "Finish" },
                    { from = "W", to = "A", on = "Back" } } }
  local exe = started(c, nil, 0)
  send(c, exe, "Go", nil, 1)
  send(c, exe, "Next", nil, 2)
  exe.context.scratch = 1
  local fx = send(c, exe, "Reset", { fresh = true }, 3)
  lu.assertEquals(exe.status, "RUNNING")
  lu.assertEquals(exe.active_path, "A")
  lu.assertNil(exe.context.scratch)
  lu.assertEquals(exe.context.fresh, true)
  lu.assertEquals(#log, 2)
  lu.assertEquals(timers_by_path(fx).A, { action = "schedule", path = "A", fire_at = 13 })
  -- history is gone: W is entered at its initial state again
  send(c, exe, "Go", nil, 4)
  lu.assertEquals(exe.active_path, "W.W1")
  -- and from DONE
  send(c, exe, "Finish", nil, 5)
  lu.assertEquals(exe.status, "DONE")
  send(c, exe, "Reset", nil, 6)
  lu.assertEquals(exe.status, "RUNNING")
  lu.assertEquals(exe.active_path, "A")
  lu.assertNil(exe.outcome)
  lu.assertNil(exe.finished_at)
end

function TestRuntimeControl:test_reset_while_forked_cancels_the_regions()
  local c = fork_chart("all")
  local exe = started(c, { id = "prr" })
  send(c, exe, "Go")
  local fx = send(c, exe, "Reset")
  lu.assertEquals(exe.active_path, "Idle")
  lu.assertEquals(count(exe.children), 0)
  lu.assertEquals(#fx.emits, 2)
  for _, e in ipairs(fx.emits) do lu.assertEquals(e.event.kind, "Cancel") end
  fx = send(c, exe, "Go")
  lu.assertEquals(fx.spawns[1].child_id:sub(-2), ":1")
end

function TestRuntimeControl:test_set_state_parks_on_a_leaf_without_hooks()
  local log = {}
  local c = chart.define{ id = "setstate", initial = "A",
    states = { { "A", on_exit = rec(log, "exit A") },
               { "P", initial = "P1", on_enter = rec(log, "enter P"),
                 states = { { "P1" }, { "P2", on_enter = rec(log, "enter P2") } },
                 transitions = { { from = "P1", to = "P2", on = "Go" }, { from = "P2", to = "P1", on = "Go" } } } },
    transitions = { { from = "A", to = "P", on = "Go" } } }
  local exe = started(c)
  local fx = send(c, exe, "SetState", { path = "P.P2" })
  lu.assertEquals(exe.active_path, "P.P2")
  lu.assertEquals(exe.status, "RUNNING")
  lu.assertEquals(log, {})
  lu.assertEquals(fx.actions, {})
  send(c, exe, "Go")
  lu.assertEquals(exe.active_path, "P.P1")
  -- a composite, an unknown path: refused
  send(c, exe, "SetState", { path = "P" })
  lu.assertEquals(exe.active_path, "P.P1")
  send(c, exe, "SetState", { path = "Nope" })
  lu.assertEquals(exe.active_path, "P.P1")
end

function TestRuntimeControl:test_set_state_refuses_a_region_leaf_and_a_finished_execution()
  local c = fork_chart("all")
  local exe = started(c)
  send(c, exe, "SetState", { path = "Fork.A.A1" })
  lu.assertEquals(exe.active_path, "Idle")
  exe.status = "DONE"
  send(c, exe, "SetState", { path = "Done" })
  lu.assertEquals(exe.active_path, "Idle")
end

function TestRuntimeControl:test_events_are_counted()
  local c = suspend_chart()
  local exe = started(c)
  lu.assertEquals(exe.processed_events, 0)
  send(c, exe, "X")
  send(c, exe, "Nope")
  lu.assertEquals(exe.processed_events, 2)
end
