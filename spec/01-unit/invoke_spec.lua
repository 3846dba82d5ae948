-- spec/01-unit/invoke_spec.lua - invoke in the pure interpreter: a state
-- that runs another chart as a child execution (README "Invoking a chart"):
-- the spawn it asks for, the Returned event the parent gets back, a fan-out
-- joined like regions, cancel and suspend reaching invoked children, the
-- reports harel's way (dialect = "harel"), and the charts chart.define refuses.
local lu = require "luaunit"
local ms = require "mongostore"
local chart = require "mongostore.chart"
local runtime = require "mongostore.runtime"

local n = 0
local function ev(kind, data)
  n = n + 1
  return { id = "e" .. n, kind = kind, data = data or {} }
end

local function exe_of(c, fields)
  local f = { definition_id = c.id, id = "p" .. n }
  n = n + 1
  for k, v in pairs(fields or {}) do f[k] = v end
  return ms.execution(f)
end

local function started(c, context, extra)
  local fields = { context = context or {} }
  for k, v in pairs(extra or {}) do fields[k] = v end
  local exe = exe_of(c, fields)
  local fx = runtime.apply(c, exe, ev("Start"), 1)
  return exe, fx
end

-- The child chart: it charges the amount it was given and ends "paid",
-- or "declined" on Decline.
local function pay_chart(dialect)
  return chart.define{ id = "pay", dialect = dialect, carry = dialect == "harel" and { "receipt" } or nil,
    initial = "Charging",
    states = { { "Charging" }, { "Paid", final = "paid" }, { "Declined", final = "declined" } },
    transitions = {
      { from = "Charging", on = "Ok", to = "Paid",
        action = function(ctx) ctx.receipt = "r-" .. tostring(ctx.amount) end },
      { from = "Charging", on = "Decline", to = "Declined" },
    },
  }
end

local function order_chart(dialect)
  return chart.define{ id = "order", dialect = dialect, initial = "Paying",
    states = {
      { "Paying", invoke = "pay", with = { amount = "total" }, timeout = 60 },
      { "Done", final = "success" }, { "Failed", final = "failed" }, { "Gave_up", final = "gave_up" },
    },
    transitions = {
      { from = "Paying", on = "Returned", to = "Done", where = function(d) return d.outcome == "paid" end,
        action = function(ctx, e) ctx.receipt = e.data.receipt end },
      { from = "Paying", on = "Returned", to = "Failed" },
      { from = "Paying", on = "Timeout", to = "Gave_up" },
    },
  }
end

-- Runs the child a spawn asks for through events, returns its Finished.
local function run_child(c, spawn, parent_id, kinds)
  local context = {}
  for k, v in pairs(spawn.context) do if k ~= "__invoke_fqn__" then context[k] = v end end
  local child = ms.execution{ id = spawn.child_id, definition_id = c.id, parent_id = parent_id,
                              child_id = spawn.child_id, context = context }
  local fx = runtime.apply(c, child, ev("Start"), 1)
  for _, k in ipairs(kinds) do fx = runtime.apply(c, child, ev(k), 2) end
  return fx.emits[#fx.emits], child
end

TestInvoke = {}

function TestInvoke:test_entering_spawns_one_child_of_the_other_chart_with_what_with_names()
  local exe, fx = started(order_chart(), { total = 5, secret = "x" })
  lu.assertEquals(exe.status, "RUNNING")
  lu.assertEquals(exe.active_path, "Paying")
  lu.assertEquals(#fx.spawns, 1)
  local s = fx.spawns[1]
  lu.assertEquals(s.child_id, exe.id .. ":Paying:0")
  lu.assertEquals(s.root_path, "")
  lu.assertEquals(s.context, { amount = 5, __invoke_fqn__ = "pay" })
  lu.assertTrue(exe.children[s.child_id].submachine)
  lu.assertFalse(exe.children[s.child_id].finished)
end

function TestInvoke:test_the_childs_result_comes_back_as_returned()
  local order, pay = order_chart(), pay_chart()
  local exe, fx = started(order, { total = 5 })
  local finished = run_child(pay, fx.spawns[1], exe.id, { "Ok" })
  lu.assertEquals(finished.target_id, exe.id)
  lu.assertEquals(finished.event.kind, "Finished")
  local fx2 = runtime.apply(order, exe, finished.event, 3)
  lu.assertEquals(exe.active_path, "Done")
  lu.assertEquals(exe.status, "DONE")
  lu.assertEquals(exe.outcome, "success")
  lu.assertEquals(exe.context.receipt, "r-5")
  lu.assertNil(exe.children[fx.spawns[1].child_id], "a child that returned is spent")
  lu.assertEquals(#fx2.spawns, 0)
  -- the state's timer went with it
  lu.assertEquals(fx2.timers, { { action = "cancel", path = "Paying" } })
end

function TestInvoke:test_the_outcome_picks_the_transition()
  local order, pay = order_chart(), pay_chart()
  local exe, fx = started(order, { total = 5 })
  local finished = run_child(pay, fx.spawns[1], exe.id, { "Decline" })
  runtime.apply(order, exe, finished.event, 3)
  lu.assertEquals(exe.active_path, "Failed")
  lu.assertEquals(exe.outcome, "failed")
end

function TestInvoke:test_a_returned_no_transition_takes_leaves_the_parent_waiting()
  local order = chart.define{ id = "o2", initial = "Paying",
    states = { { "Paying", invoke = "pay" }, { "Done", final = true } },
    transitions = { { from = "Paying", on = "Returned", to = "Done", where = function(d) return d.outcome == "paid" end } },
  }
  local exe, fx = started(order)
  local cid = fx.spawns[1].child_id
  runtime.apply(order, exe, { id = "f", kind = "Finished", data = { child_id = cid, outcome = "declined" } }, 2)
  lu.assertEquals(exe.active_path, "Paying")
  lu.assertEquals(exe.status, "RUNNING")
  lu.assertTrue(exe.children[cid].finished)
end

function TestInvoke:test_a_finished_from_an_earlier_entry_is_spent()
  local c = chart.define{ id = "o3", initial = "Paying",
    states = { { "Paying", invoke = "pay" }, { "Wait" }, { "Done", final = true } },
    transitions = {
      { from = "Paying", on = "Returned", to = "Done" },
      { from = "Paying", on = "Retry", to = "Wait" },
      { from = "Wait", on = "Again", to = "Paying" },
    },
  }
  local exe, fx = started(c)
  local first = fx.spawns[1].child_id
  local fx2 = runtime.apply(c, exe, ev("Retry"), 2)
  -- leaving before the child returned tells it to stop
  lu.assertEquals(#fx2.emits, 1)
  lu.assertEquals(fx2.emits[1].target_id, first)
  lu.assertEquals(fx2.emits[1].event.kind, "Cancel")
  local fx3 = runtime.apply(c, exe, ev("Again"), 3)
  local second = fx3.spawns[1].child_id
  lu.assertEquals(second, exe.id .. ":Paying:1")
  runtime.apply(c, exe, { id = "f1", kind = "Finished", data = { child_id = first, outcome = "paid" } }, 4)
  lu.assertEquals(exe.active_path, "Paying", "the first child's Finished is not this entry's")
  runtime.apply(c, exe, { id = "f2", kind = "Finished", data = { child_id = second, outcome = "paid" } }, 5)
  lu.assertEquals(exe.active_path, "Done")
end

function TestInvoke:test_the_parents_events_are_not_broadcast_to_an_invoked_child()
  local c = chart.define{ id = "o4", initial = "Paying",
    states = { { "Paying", invoke = "pay" }, { "Done", final = true } },
    transitions = { { from = "Paying", on = "Returned", to = "Done" } },
  }
  local exe = started(c)
  local fx = runtime.apply(c, exe, ev("Ok"), 2)
  lu.assertEquals(#fx.emits, 0)
  lu.assertEquals(exe.active_path, "Paying")
end

function TestInvoke:test_cancel_suspend_and_terminate_reach_the_invoked_child()
  local order = order_chart()
  for _, kind in ipairs { "Cancel", "Suspend", "Terminate" } do
    local exe, fx = started(order, { total = 1 })
    local cid = fx.spawns[1].child_id
    local fx2 = runtime.apply(order, exe, ev(kind), 2)
    local to = {}
    for _, e in ipairs(fx2.emits) do to[#to + 1] = e.target_id .. " " .. e.event.kind end
    lu.assertEquals(to, { cid .. " " .. kind }, kind)
  end
end

function TestInvoke:test_a_failed_parent_terminates_its_invoked_child()
  local c = chart.define{ id = "o5", initial = "Paying",
    states = { { "Paying", invoke = "pay", on_activity = function() error("boom") end }, { "Done", final = true } },
    transitions = { { from = "Paying", on = "Returned", to = "Done" } },
  }
  local exe, fx = started(c)
  local fx2 = runtime.apply(c, exe, ev("Poke"), 2)
  lu.assertEquals(exe.status, "FAILED")
  lu.assertEquals(fx2.emits[1].target_id, fx.spawns[1].child_id)
  lu.assertEquals(fx2.emits[1].event.kind, "Terminate")
end

------------------------------------------------------------------------

TestInvokeEach = {}

local function batch_chart(with)
  return chart.define{ id = "batch", initial = "Each",
    states = {
      { "Each", invoke = "pay", each = "lines", as = "line", with = with },
      { "Done", final = "success" }, { "Partial", final = "partial" },
    },
    transitions = { { from = "Each", join = "all", to = "Done", else_to = "Partial" } },
  }
end

function TestInvokeEach:test_one_child_per_entry_with_its_own_slice()
  local c = batch_chart({ amount = "line", currency = "currency", missing = "nothing" })
  local exe, fx = started(c, { lines = ms.array{ 10, 20, 30 }, currency = "EUR" })
  lu.assertEquals(exe.active_path, "Each")
  lu.assertEquals(#fx.spawns, 3)
  for i, s in ipairs(fx.spawns) do
    lu.assertEquals(s.child_id, string.format("%s:Each:0:%d", exe.id, i - 1))
    lu.assertEquals(s.context.amount, i * 10)
    lu.assertEquals(s.context.currency, "EUR")
    lu.assertEquals(s.context.missing, ms.null, "a fan-out child gets every key with names, null when unset")
    lu.assertEquals(s.context.__invoke_fqn__, "pay")
    lu.assertEquals(exe.children[s.child_id].key, "Each:" .. (i - 1))
  end
end

function TestInvokeEach:test_without_with_each_child_gets_its_entry_under_as()
  local exe, fx = started(batch_chart(nil), { lines = ms.array{ { sku = "a" } } })
  lu.assertEquals(fx.spawns[1].context, { line = { sku = "a" }, __invoke_fqn__ = "pay" })
  lu.assertEquals(exe.status, "RUNNING")
end

function TestInvokeEach:test_the_join_waits_for_every_child_and_reads_their_verdicts()
  local c = batch_chart({ amount = "line" })
  local exe, fx = started(c, { lines = ms.array{ 1, 2 } })
  runtime.apply(c, exe, { id = "f0", kind = "Finished",
    data = { child_id = fx.spawns[1].child_id, outcome = "success", status = "DONE", result = { amount = 1 } } }, 2)
  lu.assertEquals(exe.active_path, "Each")
  runtime.apply(c, exe, { id = "f1", kind = "Finished",
    data = { child_id = fx.spawns[2].child_id, outcome = "success", status = "DONE", result = { amount = 2 } } }, 3)
  lu.assertEquals(exe.active_path, "Done")
  lu.assertEquals(exe.context.region_results["Each:1"], { outcome = "success", context = { amount = 2 } })
  exe, fx = started(c, { lines = ms.array{ 1, 2 } })
  for i, s in ipairs(fx.spawns) do
    runtime.apply(c, exe, { id = "g" .. i, kind = "Finished",
      data = { child_id = s.child_id, outcome = i == 1 and "success" or "declined" } }, 2)
  end
  lu.assertEquals(exe.active_path, "Partial")
end

function TestInvokeEach:test_an_empty_list_joins_at_once_and_a_non_list_fails()
  local c = batch_chart({ amount = "line" })
  local exe, fx = started(c, { lines = ms.array{} })
  lu.assertEquals(#fx.spawns, 0)
  lu.assertEquals(exe.active_path, "Done")
  exe = started(c, { lines = "not a list" })
  lu.assertEquals(exe.status, "FAILED")
  lu.assertStrContains(exe.error, "context.lines must be a list")
end

function TestInvokeEach:test_leaving_cancels_the_children_still_running()
  local c = chart.define{ id = "b2", initial = "Each",
    states = { { "Each", invoke = "pay", each = "lines", as = "line" }, { "Done", final = true }, { "Stop", final = true } },
    transitions = { { from = "Each", to = "Done" }, { from = "Each", on = "Abort", to = "Stop" } },
  }
  local exe, fx = started(c, { lines = ms.array{ 1, 2, 3 } })
  runtime.apply(c, exe, { id = "f", kind = "Finished", data = { child_id = fx.spawns[2].child_id, outcome = "success" } }, 2)
  local fx2 = runtime.apply(c, exe, ev("Abort"), 3)
  local to = {}
  for _, e in ipairs(fx2.emits) do to[#to + 1] = e.target_id .. " " .. e.event.kind end
  lu.assertEquals(to, { fx.spawns[1].child_id .. " Cancel", fx.spawns[3].child_id .. " Cancel" })
  lu.assertEquals(exe.active_path, "Stop")
end

------------------------------------------------------------------------

TestInvokeCarry = {}

-- dialect = "harel": a child reports its outcome and the keys
-- it carries, flat; the parent's region_results hold the same.
function TestInvokeCarry:test_a_child_reports_its_carried_keys_beside_the_outcome()
  local pay = pay_chart("harel")
  local finished, child = run_child(pay, { child_id = "o:Paying:0", context = { amount = 7 } }, "o", { "Ok" })
  lu.assertEquals(child.context.amount, 7)
  lu.assertEquals(finished.event.data, { child_id = "o:Paying:0", outcome = "paid", receipt = "r-7" })
end

function TestInvokeCarry:test_the_parent_reads_a_carried_report()
  local order = order_chart("harel")
  local exe, fx = started(order, { total = 7 })
  runtime.apply(order, exe, { id = "f", kind = "Finished",
    data = { child_id = fx.spawns[1].child_id, outcome = "paid", receipt = "r-7" } }, 2)
  lu.assertEquals(exe.context.receipt, "r-7")
  lu.assertEquals(exe.active_path, "Done")
end

function TestInvokeCarry:test_region_results_are_set_only_when_a_child_reported_something()
  local c = chart.define{ id = "b3", dialect = "harel", initial = "Each",
    states = { { "Each", invoke = "pay", each = "lines", as = "line" }, { "Done", final = true } },
    transitions = { { from = "Each", to = "Done" } },
  }
  local exe, fx = started(c, { lines = ms.array{ 1, 2 } })
  for i, s in ipairs(fx.spawns) do
    runtime.apply(c, exe, { id = "h" .. i, kind = "Finished", data = { child_id = s.child_id, outcome = ms.null } }, 2)
  end
  lu.assertEquals(exe.active_path, "Done")
  lu.assertNil(exe.context.region_results)
  exe, fx = started(c, { lines = ms.array{ 1 } })
  runtime.apply(c, exe, { id = "k", kind = "Finished", data = { child_id = fx.spawns[1].child_id, outcome = "ok",
    total = 3 } }, 2)
  lu.assertEquals(exe.context.region_results, { ["Each:0"] = { outcome = "ok", total = 3 } })
end

function TestInvokeCarry:test_an_orthogonal_with_passes_only_its_keys_to_the_regions()
  local c = chart.define{ id = "f1", initial = "Fork",
    states = {
      { "Fork", orthogonal = true, with = { n = "count" }, states = {
        { "A", initial = "A1", states = { { "A1" } } }, { "B", initial = "B1", states = { { "B1" } } } } },
    },
  }
  local _, fx = started(c, { count = 2, other = "x" })
  lu.assertEquals(#fx.spawns, 2)
  for _, s in ipairs(fx.spawns) do lu.assertEquals(s.context, { n = 2 }) end
end

-- A fork with a way out on Go, in either dialect.
local function fork_chart(dialect)
  return chart.define{ id = "fork_" .. dialect, dialect = dialect, initial = "Work",
    states = {
      { "Work", orthogonal = true, states = {
        { "A", initial = "A1", states = { { "A1" }, { "A2", final = "success" } },
          transitions = { { from = "A1", on = "Go", to = "A2" } } },
        { "B", initial = "B1", states = { { "B1" } } } } },
      { "Done", final = true },
    },
    transitions = { { from = "Work", on = "Go", to = "Done" } },
  }
end

function TestInvokeCarry:test_under_harel_a_domain_event_goes_to_the_live_regions_first()
  local c = fork_chart("harel")
  local exe, fx = started(c)
  lu.assertEquals(#fx.spawns, 2)
  local before = exe.processed_events
  local go = ev("Go")
  local fx2 = runtime.apply(c, exe, go, 2)
  lu.assertEquals(exe.active_path, "Work", "the parent's own Go waits while regions run")
  lu.assertEquals(exe.processed_events, before, "the parent does not count an event its regions take")
  lu.assertEquals(#fx2.emits, 2)
  for i, e in ipairs(fx2.emits) do
    lu.assertEquals(e.target_id, fx.spawns[i].child_id)
    lu.assertEquals(e.event.id, go.id, "a region gets the event with its own id")
    lu.assertEquals(e.event.kind, "Go")
  end
  -- the mongostore dialect: the parent's transition wins, the regions are cancelled
  c = fork_chart("mongostore")
  exe = started(c)
  fx2 = runtime.apply(c, exe, ev("Go"), 2)
  lu.assertEquals(exe.active_path, "Done")
  lu.assertEquals(fx2.emits[1].event.kind, "Cancel")
end

function TestInvokeCarry:test_under_harel_a_finished_region_rests_on_its_final_state()
  for dialect, want in pairs { harel = "Work.A.A2", mongostore = "Work.A" } do
    local c = fork_chart(dialect)
    local region = ms.execution{ id = "p:Work.A:0", definition_id = c.id, root_path = "Work.A", parent_id = "p",
                                 child_id = "p:Work.A:0" }
    runtime.apply(c, region, ev("Start"), 1)
    runtime.apply(c, region, ev("Go"), 2)
    lu.assertEquals(region.status, "DONE", dialect)
    lu.assertEquals(region.outcome, "success", dialect)
    lu.assertEquals(region.active_path, want, dialect)
  end
end

------------------------------------------------------------------------

TestInvokeDefine = {}

local function refused(fragment, def)
  local ok, err = pcall(chart.define, def)
  lu.assertFalse(ok, "accepted: " .. fragment)
  lu.assertStrContains(tostring(err), fragment)
end

function TestInvokeDefine:test_bad_invokes_are_refused_naming_the_state()
  local function one(state, transitions)
    return { id = "bad", initial = "S", states = { state, { "T", final = true } },
             transitions = transitions or { { from = "S", on = "Returned", to = "T" } } }
  end
  refused("state S: invoke must be a chart id", one{ "S", invoke = 5 })
  refused("state S: invoke must be a chart id", one{ "S", invoke = "" })
  refused("state S: an invoke state is a leaf", one{ "S", invoke = "pay", initial = "X", states = { { "X" } } })
  refused("state S: an invoke state is a leaf", one{ "S", invoke = "pay", final = "x" })
  refused("state S: with must map child keys to parent keys", one{ "S", invoke = "pay", with = { 1, 2 } })
  refused("state S: with must map child keys to parent keys", one{ "S", invoke = "pay", with = "x" })
  refused("state S: each and as go together", one{ "S", invoke = "pay", each = "xs" })
  refused("state S: each and as go together", one{ "S", invoke = "pay", as = "x" })
  refused("state S: each belongs to an invoke", one({ "S", each = "xs", as = "x" }, { { from = "S", on = "Go", to = "T" } }))
  refused("state S: with belongs to an invoke or an orthogonal state",
    one({ "S", with = { a = "b" } }, { { from = "S", on = "Go", to = "T" } }))
  refused("an invoke state waits for its child", one({ "S", invoke = "pay" }, { { from = "S", to = "T" } }))
  refused("join is only for an orthogonal state or an invoke with each",
    one({ "S", invoke = "pay" }, { { from = "S", join = "all", to = "T" } }))
  refused("carry must be a non-empty list", one{ "S", invoke = "pay", carry = {} })
  refused("dialect must be", { id = "r", dialect = "xstate", initial = "S", states = { { "S" } } })
  refused("chart r: carry must be a non-empty list", { id = "r", carry = { 1 }, initial = "S", states = { { "S" } } })
end

function TestInvokeDefine:test_returned_is_reserved()
  lu.assertTrue(chart.RESERVED.Returned)
  lu.assertFalse(chart.is_external(order_chart(), "Returned"))
end

