-- spec/03-engine/sweep_batch_spec.lua - the sweep fires a page of due timers
-- together: one find loads every execution with its armed timers, the
-- Timeouts land in bulk writes (each commit disarming its timer and setting
-- the mark to the earliest timer it leaves), one bulk write removes the index
-- entries no commit disarmed. Many timers on many executions cost a bounded number of round
-- trips; every timer fires once; a Timeout whose timer was re-armed or left
-- is not applied (also when an earlier Timeout of the same sweep did it); a
-- timer whose delivery fails stays for the next sweep, one that nobody can
-- apply is removed. The results match the one-timer-at-a-time sweep.
local lu = require "luaunit"
local ms = require "mongostore"
local chart = require "mongostore.chart"
local engine_mod = require "mongostore.engine"
local execution = require "mongostore.execution"
local helper = require "helpers"
local C = require "fixtures.charts"

-- Outer (timeout context.outer) holds Inner (timeout context.inner).
-- Outer's Timeout re-enters Outer, which re-arms both; Inner's Timeout
-- leaves Inner for Rested.
local function nest()
  return chart.define{
    id = "nest", initial = "Outer",
    states = {
      { "Outer", initial = "Inner", timeout = { context = "outer" },
        states = {
          { "Inner", timeout = { context = "inner" }, on_enter = C.count("inner_entries") },
          { "Rested", on_enter = C.count("rested") },
        },
        transitions = { { from = "Inner", to = "Rested", on = "Timeout" } } },
    },
    transitions = {
      { from = "Outer", to = "Outer", on = "Timeout", action = function(context)
          context.outer_timeouts = (context.outer_timeouts or 0) + 1
        end },
    },
  }
end

-- A timed chart the sweeping engine does not know.
local function elsewhere()
  return chart.define{ id = "timed_elsewhere", initial = "Idle",
                       states = { { "Idle" }, { "Waiting", timeout = { context = "wait" } }, { "TimedOut" } },
                       transitions = { { from = "Idle", to = "Waiting", on = "Begin" },
                                       { from = "Waiting", to = "TimedOut", on = "Timeout" } } }
end

-- An engine over store with a clock the spec moves (clock.t).
local function new_engine(store, clock, opts)
  opts = opts or {}
  local logs = {}
  local charts = { C.timed(), nest() }
  for _, c in ipairs(opts.charts or {}) do charts[#charts + 1] = c end
  local e = engine_mod.new{ store = store, charts = charts, trace = opts.trace ~= false, sweep_batch = opts.sweep_batch,
                            now = clock and function() return clock.t end or nil,
                            log = function(msg) logs[#logs + 1] = msg end }
  e.spec_logs = logs
  return e
end

-- The sweep as it was, one timer after another: the reference the batched
-- sweep must agree with.
local function sweep_one_by_one(e, now)
  local n = 0
  for _, t in ipairs(assert(e.store:due_timers(now))) do
    local ev = execution.timeout_event(t.execution_id, t.path, t.fire_at)
    local ok, _, code = e:deliver(t.execution_id, ev, t.path)
    if ok or code == "not_found" or code == "invalid" then
      assert(e.store:delete_timer(t.execution_id, t.path, t.fire_at))
      n = n + 1
    end
  end
  return n
end

-- What an execution looks like afterwards, for comparing two runs.
local function outcome(store, id)
  local exe = C.load(store, id)
  local kinds = C.trace(store, id)
  return { status = exe.status, active_path = exe.active_path, context = exe.context, timers = C.timers(store, id),
           trace = kinds, version = exe.version }
end

local function count_of(list, v)
  local n = 0
  for _, x in ipairs(list) do if x == v then n = n + 1 end end
  return n
end

TestSweepBatch = {}

function TestSweepBatch:tearDown()
  for _, s in ipairs(self.stores or {}) do s:close() end
end

function TestSweepBatch:store()
  local s, db = C.store()
  self.stores = self.stores or {}
  self.stores[#self.stores + 1] = s
  return s, db
end

local N = 60

function TestSweepBatch:test_one_sweep_fires_many_timers_in_a_bounded_number_of_round_trips()
  local cost = {}
  for _, how in ipairs { "one_by_one", "batched" } do
    local s = self:store()
    -- no trace: a traced commit also takes its step's index from a counter
    -- of its execution, one round trip per execution whatever the sweep does
    local e = new_engine(s, nil, { trace = false })
    for i = 1, N do
      assert(e:start("timed", { id = "t-" .. i, context = { wait = 10 } }))
      assert(e:send("t-" .. i, { kind = "Begin", id = "begin-" .. i }))
    end
    local due = assert(s:due_timers(ms.now() + 100))
    lu.assertEquals(#due, N)
    local now = ms.now() + 100
    local got = C.commands(s, function()
      lu.assertEquals(how == "batched" and e:sweep(now) or sweep_one_by_one(e, now), N)
    end)
    cost[how] = got.total
    for _, t in ipairs(due) do
      local id = t.execution_id
      local exe = C.load(s, id)
      lu.assertEquals(exe.active_path, "TimedOut", id)
      lu.assertEquals(exe.context.timeouts, 1, id .. " fired once")
      lu.assertEquals(C.timers(s, id), {}, id .. ": the fired timer is gone")
      -- its Timeout is marked handled: delivered again, it is a duplicate
      local ok, said = e:deliver(id, execution.timeout_event(id, t.path, t.fire_at), t.path)
      lu.assertEquals({ ok, said }, { true, "duplicate" }, id)
    end
    local left, read = s:due_timers(now)
    lu.assertEquals(#left, 0, "nothing is left in the index")
    if how == "batched" then
      -- each Timeout's commit set the mark past the timers it left: the
      -- next sweep reads no document at all (one by one, each is read once
      -- more and its mark raised)
      lu.assertEquals(read, 0, "the fired executions' marks were left low")
    end
    lu.assertEquals(e:sweep(now), 0, "a second sweep finds nothing")
    lu.assertEquals(e.spec_logs, {})
  end
  print(string.format("one sweep of %d due timers on %d executions: %d round trips one timer at a time, %d batched",
    N, N, cost.one_by_one, cost.batched))
  lu.assertTrue(cost.batched <= 4, "batched: " .. cost.batched .. " round trips")
  lu.assertTrue(cost.batched * 10 <= cost.one_by_one, "batched: " .. cost.batched .. ", one by one: " .. cost.one_by_one)
end

function TestSweepBatch:test_a_sweep_reads_page_after_page_until_nothing_is_due()
  local s = self:store()
  local e = new_engine(s, nil, { sweep_batch = 7 })
  for i = 1, 20 do
    assert(e:start("timed", { id = "p-" .. i, context = { wait = 10 } }))
    assert(e:send("p-" .. i, { kind = "Begin" }))
  end
  local now = ms.now() + 100
  lu.assertEquals(e:sweep(now), 20)
  for i = 1, 20 do lu.assertEquals(C.load(s, "p-" .. i).context.timeouts, 1) end
  lu.assertEquals(#assert(s:due_timers(now)), 0)
end

-- Two timers of one execution due in the same sweep: the second Timeout is
-- checked against the timers the first left, in memory, as the one-by-one
-- sweep checks it against the stored ones after the first commit.
function TestSweepBatch:test_two_timers_of_one_execution_in_one_sweep_agree_with_one_by_one()
  local cases = {
    -- Outer first: its Timeout re-enters Outer and re-arms Inner, so Inner's
    -- Timeout, due in the same sweep, is stale and changes nothing
    { outer = 10, inner = 20, path = "Outer.Inner", outer_timeouts = 1, inner_entries = 2, rested = nil,
      armed = { Outer = 1040, ["Outer.Inner"] = 1050 } },
    -- Inner first: Rested, then Outer's Timeout still applies and re-enters
    { outer = 20, inner = 10, path = "Outer.Inner", outer_timeouts = 1, inner_entries = 2, rested = 1,
      armed = { Outer = 1050, ["Outer.Inner"] = 1040 } },
  }
  for k, case in ipairs(cases) do
    local got = {}
    for _, how in ipairs { "batched", "one_by_one" } do
      local s = self:store()
      local clock = { t = 1000 }
      local e = new_engine(s, clock)
      assert(e:start("nest", { id = "n", context = { outer = case.outer, inner = case.inner } }))
      lu.assertEquals(C.timers(s, "n"), { Outer = 1000 + case.outer, ["Outer.Inner"] = 1000 + case.inner })
      clock.t = 1030
      if how == "batched" then
        lu.assertEquals(e:sweep(1030), 2)
      else
        lu.assertEquals(sweep_one_by_one(e, 1030), 2)
      end
      got[how] = outcome(s, "n")
      C.applied_once(s, "n")
    end
    local b = got.batched
    lu.assertEquals(b.active_path, case.path, "case " .. k)
    lu.assertEquals(b.context.outer_timeouts, case.outer_timeouts, "case " .. k)
    lu.assertEquals(b.context.inner_entries, case.inner_entries, "case " .. k)
    lu.assertEquals(b.context.rested, case.rested, "case " .. k)
    lu.assertEquals(b.timers, case.armed, "case " .. k .. ": the re-armed timers stay")
    lu.assertEquals(count_of(b.trace, "Timeout"), 2, "case " .. k .. ": both Timeouts are marked handled")
    lu.assertEquals(got.batched, got.one_by_one, "case " .. k .. ": the batched sweep agrees with one by one")
  end
end

-- What a sweep that read the timers before a Leave or a Poke delivers,
-- together with a Timeout that is still armed: only that one applies.
function TestSweepBatch:test_stale_timeouts_in_a_batch_are_not_applied()
  local s = self:store()
  local e = new_engine(s)
  local stale = {}
  for _, id in ipairs { "left", "rearmed", "fresh" } do
    assert(e:start("timed", { id = id, context = { wait = 60 } }))
    assert(e:send(id, { kind = "Begin" }))
    stale[id] = C.timers(s, id).Waiting
  end
  ms.sleep(0.01)
  assert(e:send("left", { kind = "Leave" }))
  assert(e:send("rearmed", { kind = "Poke" }))
  local rearmed = C.timers(s, "rearmed").Waiting
  lu.assertTrue(rearmed > stale.rearmed)
  local items = {}
  for _, id in ipairs { "left", "rearmed", "fresh" } do
    items[#items + 1] = { id = id, event = execution.timeout_event(id, "Waiting", stale[id]), timer_path = "Waiting" }
  end
  local res = e:deliver_many(items)
  for i = 1, 3 do lu.assertTrue(res[i].ok, items[i].id .. ": " .. tostring(res[i].message)) end
  lu.assertEquals(res[1].result.outcome, "ignored")
  lu.assertEquals(res[2].result.outcome, "ignored")
  lu.assertEquals(res[3].result.outcome, "transition")
  lu.assertEquals(C.load(s, "left").active_path, "Other")
  lu.assertNil(C.load(s, "left").context.timeouts)
  lu.assertEquals(C.load(s, "rearmed").active_path, "Waiting")
  lu.assertNil(C.load(s, "rearmed").context.timeouts)
  lu.assertEquals(C.timers(s, "rearmed").Waiting, rearmed, "the re-armed timer stays armed")
  lu.assertEquals(C.load(s, "fresh").active_path, "TimedOut")
  lu.assertEquals(C.load(s, "fresh").context.timeouts, 1)
  -- the same batch again: every one a duplicate, nothing changes
  local versions = {}
  for _, id in ipairs { "left", "rearmed", "fresh" } do versions[id] = C.load(s, id).version end
  res = e:deliver_many(items)
  for i = 1, 3 do lu.assertEquals(res[i].how, "duplicate", items[i].id) end
  for _, id in ipairs { "left", "rearmed", "fresh" } do lu.assertEquals(C.load(s, id).version, versions[id]) end
end

-- One execution whose stored data cannot be read: its timer's delivery
-- fails and the timer stays for the next sweep (logged); one whose chart
-- this engine does not know is removed (logged), so it cannot fire for
-- ever; the others fire.
function TestSweepBatch:test_a_failed_timer_stays_an_unappliable_one_goes_the_others_fire()
  local s, db = self:store()
  local other = elsewhere()
  local starter = new_engine(s, nil, { charts = { other } })
  for i = 1, 5 do
    assert(starter:start("timed", { id = "ok-" .. i, context = { wait = 10 } }))
    assert(starter:send("ok-" .. i, { kind = "Begin" }))
  end
  assert(starter:start("timed", { id = "broken", context = { wait = 10 } }))
  assert(starter:send("broken", { kind = "Begin" }))
  assert(starter:start("timed_elsewhere", { id = "unknown", context = { wait = 10 } }))
  assert(starter:send("unknown", { kind = "Begin" }))
  local raw = assert(ms.database(helper.uri(), { db = db }))
  assert(raw:collection("executions"):update_one({ _id = "broken" }, { ["$set"] = { data = "{not json" } }))
  raw:close()

  local e = new_engine(s) -- knows timed and nest, not timed_elsewhere
  local now = ms.now() + 100
  lu.assertEquals(e:sweep(now), 6, "five fired and one removed")
  for i = 1, 5 do lu.assertEquals(C.load(s, "ok-" .. i).context.timeouts, 1) end
  local left = {}
  for _, t in ipairs(assert(s:due_timers(now))) do left[#left + 1] = t.execution_id end
  lu.assertEquals(left, { "broken" }, "the timer that failed stays; the unappliable one is gone")
  local logged = table.concat(e.spec_logs, "\n")
  lu.assertStrContains(logged, "timer broken Waiting: ")
  lu.assertStrContains(logged, "not readable")
  lu.assertStrContains(logged, "timer unknown Waiting: ")
  lu.assertStrContains(logged, "no chart 'timed_elsewhere' is registered")
  -- the next sweep tries the failed one again, and only it
  e.spec_logs[#e.spec_logs + 1] = "--"
  lu.assertEquals(e:sweep(now), 0)
  lu.assertStrContains(e.spec_logs[#e.spec_logs], "timer broken Waiting: ")
  lu.assertEquals(#assert(s:due_timers(now)), 1)
end
