-- spec/03-engine/timers_spec.lua - durable timers through the engine: armed on
-- entry and cancelled on exit in the same commit, fired by the sweep as a
-- Timeout with its fixed id, stale Timeouts ignored, a second sweep of the
-- same timer harmless, a Timeout resolved from the state that timed out
-- upward, and a retry-with-backoff composite inside a budget.
local lu = require "luaunit"
local ms = require "mongostore"
local runtime = require "mongostore.runtime"
local C = require "fixtures.charts"

TestTimers = {}

function TestTimers:setUp()
  self.store, self.db = C.store()
  self.engine = C.engine(self.store)
end

function TestTimers:tearDown()
  if self.store then self.store:close() end
  if self.store2 then self.store2:close() end
end

local function the_timer(store, id, path)
  for _, t in ipairs(assert(store:due_timers(ms.now() + 1e9))) do
    if t.execution_id == id and t.path == path then return t end
  end
  return nil
end

function TestTimers:test_timer_is_armed_on_entry_and_cancelled_on_exit()
  local e, s = self.engine, self.store
  e:start("timed", { id = "t", context = { wait = 60 } })
  lu.assertEquals(C.timers(s, "t"), {})
  local before = ms.now()
  lu.assertTrue(e:send("t", { kind = "Begin", id = "begin" }))
  local after = ms.now()
  local timers = C.timers(s, "t")
  lu.assertNotNil(timers.Waiting, "entering Waiting arms its timer")
  lu.assertTrue(timers.Waiting >= before + 60 - 0.001 and timers.Waiting <= after + 60 + 0.001,
    "fire_at is entry time + context.wait: " .. tostring(timers.Waiting))
  -- not due yet: the sweep leaves it
  lu.assertEquals(e:sweep(), 0)
  lu.assertEquals(C.load(s, "t").active_path, "Waiting")

  lu.assertTrue(e:send("t", { kind = "Leave", id = "leave" }))
  lu.assertEquals(C.timers(s, "t"), {}, "leaving Waiting cancels its timer")
  lu.assertTrue(e:send("t", { kind = "Back", id = "back" }))
  local rearmed = C.timers(s, "t").Waiting
  lu.assertNotNil(rearmed, "entering again arms it again")
  lu.assertTrue(rearmed >= timers.Waiting)
  lu.assertTrue(e:send("t", { kind = "Leave", id = "leave-2" }))
  lu.assertTrue(e:send("t", { kind = "Finish", id = "finish" }))
  local exe = C.load(s, "t")
  lu.assertEquals(exe.status, "DONE")
  lu.assertEquals(C.timers(s, "t"), {})
end

function TestTimers:test_self_transition_rearms_the_timer()
  local e, s = self.engine, self.store
  e:start("timed", { id = "t", context = { wait = 60 } })
  e:send("t", { kind = "Begin", id = "begin" })
  local first = C.timers(s, "t").Waiting
  ms.sleep(0.01)
  lu.assertTrue(e:send("t", { kind = "Poke", id = "poke" }))
  local second = C.timers(s, "t").Waiting
  lu.assertNotNil(second)
  lu.assertTrue(second > first, "a self-transition re-arms with a later fire_at")
  lu.assertEquals(C.load(s, "t").context.waits, 2)
end

function TestTimers:test_due_timer_fires_its_transition_through_step()
  local e, s = self.engine, self.store
  e:start("timed", { id = "t", context = { wait = 0.3 } })
  e:send("t", { kind = "Begin", id = "begin" })
  local t = the_timer(s, "t", "Waiting")
  lu.assertNotNil(t)
  local fired = C.wait_for(function() return C.load(s, "t").active_path == "TimedOut" end, e)
  lu.assertTrue(fired, "the due timer never fired")
  local exe = C.load(s, "t")
  lu.assertEquals(exe.status, "RUNNING")
  lu.assertEquals(exe.context.timeouts, 1)
  lu.assertEquals(C.timers(s, "t"), {}, "the fired timer is gone")
  -- the Timeout carries its fixed id
  local kinds, ids = C.trace(s, "t")
  lu.assertEquals(kinds[#kinds], "Timeout")
  lu.assertEquals(ids[#ids], runtime.timeout_event("t", "Waiting", t.fire_at).id)
  lu.assertStrMatches(ids[#ids], "timeout:t:Waiting:[0-9.]+")
end

function TestTimers:test_due_timer_fires_through_run()
  local e, s = self.engine, self.store
  e:start("timed", { id = "t", context = { wait = 0.2 } })
  e:send("t", { kind = "Begin", id = "begin" })
  local deadline = ms.now() + 15
  e:run{ idle_sleep = 0.02, sweep_interval = 0.05,
         stop = function() return ms.now() > deadline or C.load(s, "t").active_path == "TimedOut" end }
  lu.assertEquals(C.load(s, "t").active_path, "TimedOut")
  lu.assertEquals(C.load(s, "t").context.timeouts, 1)
end

-- The state was left after the sweep read the timer: its Timeout changes nothing.
function TestTimers:test_stale_timeout_for_a_state_left_is_a_no_op()
  local e, s = self.engine, self.store
  e:start("timed", { id = "t", context = { wait = 60 } })
  e:send("t", { kind = "Begin", id = "begin" })
  local t = the_timer(s, "t", "Waiting")
  e:send("t", { kind = "Leave", id = "leave" })
  local before = C.load(s, "t")
  -- what a sweep that read the timer before the Leave delivers
  lu.assertTrue(e:deliver("t", runtime.timeout_event("t", t.path, t.fire_at), t.path))
  local exe = C.load(s, "t")
  lu.assertEquals(exe.active_path, "Other")
  lu.assertEquals(exe.status, "RUNNING")
  lu.assertNil(exe.context.timeouts)
  lu.assertEquals(exe.processed_events, before.processed_events)
  lu.assertEquals(C.timers(s, "t"), {})
end

-- The state was re-armed (a self-transition) after the sweep read the timer:
-- the old Timeout changes nothing, and the new timer stays armed.
function TestTimers:test_stale_timeout_for_a_rearmed_state_is_a_no_op()
  local e, s = self.engine, self.store
  e:start("timed", { id = "t", context = { wait = 60 } })
  e:send("t", { kind = "Begin", id = "begin" })
  local old = the_timer(s, "t", "Waiting")
  ms.sleep(0.01)
  e:send("t", { kind = "Poke", id = "poke" })
  local new = C.timers(s, "t").Waiting
  lu.assertTrue(new > old.fire_at)
  local before = C.load(s, "t")
  lu.assertTrue(e:deliver("t", runtime.timeout_event("t", old.path, old.fire_at), old.path))
  local exe = C.load(s, "t")
  lu.assertEquals(exe.active_path, "Waiting")
  lu.assertNil(exe.context.timeouts)
  lu.assertEquals(exe.context.waits, 2)
  lu.assertEquals(exe.processed_events, before.processed_events)
  lu.assertEquals(C.timers(s, "t").Waiting, new, "a stale Timeout disarmed the re-armed timer")
  -- and the sweep's delete of the old timer leaves the new one alone
  s:delete_timer("t", old.path, old.fire_at)
  lu.assertEquals(C.timers(s, "t").Waiting, new)
end

-- Left and entered again since: same thing.
function TestTimers:test_stale_timeout_after_leaving_and_reentering_is_a_no_op()
  local e, s = self.engine, self.store
  e:start("timed", { id = "t", context = { wait = 60 } })
  e:send("t", { kind = "Begin", id = "begin" })
  local old = the_timer(s, "t", "Waiting")
  ms.sleep(0.01)
  e:send("t", { kind = "Leave", id = "leave" })
  e:send("t", { kind = "Back", id = "back" })
  local new = C.timers(s, "t").Waiting
  lu.assertTrue(new > old.fire_at)
  lu.assertTrue(e:deliver("t", runtime.timeout_event("t", old.path, old.fire_at), old.path))
  local exe = C.load(s, "t")
  lu.assertEquals(exe.active_path, "Waiting")
  lu.assertNil(exe.context.timeouts)
  lu.assertEquals(C.timers(s, "t").Waiting, new, "a stale Timeout disarmed the re-armed timer")
end

-- Two sweepers that both read the same due timer: the Timeout applies once.
function TestTimers:test_double_sweep_is_idempotent()
  local e, s = self.engine, self.store
  e:start("timed", { id = "t", context = { wait = 0.2 } })
  e:send("t", { kind = "Begin", id = "begin" })
  local due = C.wait_for(function()
    local list = assert(s:due_timers(ms.now()))
    return #list > 0 and list or nil
  end)
  lu.assertNotNil(due, "the timer never became due")
  lu.assertEquals(#due, 1)
  local snapshot = due[1]

  -- a second worker with its own store handle
  self.store2 = C.store(self.db)
  local e2 = C.engine(self.store2)
  local now = ms.now()
  lu.assertEquals(e:sweep(now), 1)
  local exe = C.load(s, "t")
  lu.assertEquals(exe.active_path, "TimedOut")
  local version = exe.version
  -- the second sweep of the same moment finds nothing
  lu.assertEquals(e2:sweep(now), 0)
  -- a sweeper that read the timer before the first deleted it delivers the same event
  local ev = runtime.timeout_event(snapshot.execution_id, snapshot.path, snapshot.fire_at)
  local ok, how = e2:deliver(snapshot.execution_id, ev, snapshot.path)
  lu.assertTrue(ok)
  lu.assertEquals(how, "duplicate")
  self.store2:delete_timer(snapshot.execution_id, snapshot.path, snapshot.fire_at)
  exe = C.load(s, "t")
  lu.assertEquals(exe.version, version)
  lu.assertEquals(exe.context.timeouts, 1)
  lu.assertEquals(exe.active_path, "TimedOut")
  local kinds = C.trace(s, "t")
  local n = 0
  for _, k in ipairs(kinds) do if k == "Timeout" then n = n + 1 end end
  lu.assertEquals(n, 1)
end

-- Timer fired and taken again: TimedOut -Again-> Waiting arms a fresh timer,
-- which fires again (a new Timeout id, not a duplicate of the first).
function TestTimers:test_timer_rearmed_after_firing_fires_again()
  local e, s = self.engine, self.store
  e:start("timed", { id = "t", context = { wait = 0.2 } })
  e:send("t", { kind = "Begin", id = "begin" })
  lu.assertTrue(C.wait_for(function() return C.load(s, "t").context.timeouts == 1 end, e))
  e:send("t", { kind = "Again", id = "again" })
  lu.assertEquals(C.load(s, "t").active_path, "Waiting")
  lu.assertTrue(C.wait_for(function() return C.load(s, "t").context.timeouts == 2 end, e))
  local _, ids = C.trace(s, "t")
  local timeouts = {}
  for _, id in ipairs(ids) do if id:find("^timeout:") then timeouts[#timeouts + 1] = id end end
  lu.assertEquals(#timeouts, 2)
  lu.assertNotEquals(timeouts[1], timeouts[2])
end

-- The composite's budget fires while the inner Attempt (which has its own
-- Timeout transition) is active: it resolves at Job, not at Attempt.
function TestTimers:test_timeout_resolves_from_the_state_that_timed_out()
  local e, s = self.engine, self.store
  e:start("retry", { id = "r", context = { budget = 0.3, attempt_t = 600, backoff = 600 } })
  local exe = C.load(s, "r")
  lu.assertEquals(exe.active_path, "Job.Attempt")
  local timers = C.timers(s, "r")
  lu.assertNotNil(timers.Job)
  lu.assertNotNil(timers["Job.Attempt"])
  lu.assertTrue(C.wait_for(function() return C.load(s, "r").status == "DONE" end, e))
  exe = C.load(s, "r")
  lu.assertEquals(exe.active_path, "GaveUp")
  lu.assertEquals(exe.outcome, "failed")
  lu.assertEquals(exe.context.attempts, 1, "the budget's Timeout was taken by Attempt's transition")
  lu.assertNil(exe.context.backoffs)
  lu.assertEquals(C.timers(s, "r"), {}, "leaving Job cancels the inner timers too")
end

-- And the inner state's own timeout takes the inner transition.
function TestTimers:test_inner_timeout_takes_the_inner_transition()
  local e, s = self.engine, self.store
  e:start("retry", { id = "r", context = { budget = 600, attempt_t = 0.2, backoff = 600 } })
  lu.assertTrue(C.wait_for(function() return C.load(s, "r").active_path == "Job.Backoff" end, e))
  local exe = C.load(s, "r")
  lu.assertEquals(exe.status, "RUNNING")
  lu.assertEquals(exe.context.backoffs, 1)
  local timers = C.timers(s, "r")
  lu.assertNotNil(timers.Job, "the budget keeps running")
  lu.assertNotNil(timers["Job.Backoff"])
  lu.assertNil(timers["Job.Attempt"])
end

-- A timed state without a Timeout transition of its own: its Timeout is
-- handled by the enclosing composite's transition.
function TestTimers:test_timeout_resolves_upward_to_an_enclosing_transition()
  local e, s = self.engine, self.store
  e:start("nested_timeout", { id = "n", context = { wait = 0.2 } })
  lu.assertEquals(C.load(s, "n").active_path, "Box.Quiet")
  lu.assertTrue(C.wait_for(function() return C.load(s, "n").status == "DONE" end, e))
  local exe = C.load(s, "n")
  lu.assertEquals(exe.active_path, "BoxTimedOut")
  lu.assertEquals(exe.outcome, "timeout")
end

function TestTimers:test_retry_with_backoff_succeeds()
  local e, s = self.engine, self.store
  e:start("retry", { id = "r", context = { budget = 600, attempt_t = 600, backoff = 0.2 } })
  for n = 1, 2 do
    lu.assertTrue(e:send("r", { kind = "Fail", id = "fail-" .. n }))
    lu.assertEquals(C.load(s, "r").active_path, "Job.Backoff")
    lu.assertTrue(C.wait_for(function() return C.load(s, "r").active_path == "Job.Attempt" end, e),
      "backoff " .. n .. " never ended")
    lu.assertEquals(C.load(s, "r").context.attempts, n + 1)
  end
  lu.assertTrue(e:send("r", { kind = "Ok", id = "ok" }))
  local exe = C.load(s, "r")
  lu.assertEquals(exe.status, "DONE")
  lu.assertEquals(exe.outcome, "success")
  lu.assertEquals(exe.active_path, "Succeeded")
  lu.assertEquals(exe.context.attempts, 3)
  lu.assertEquals(exe.context.backoffs, 2)
  lu.assertEquals(C.timers(s, "r"), {}, "success cancels the budget")
  -- each attempt asked once (the external Request of each on_enter)
  C.drain(e)
  local requests = {}
  for _, entry in ipairs(e.spec_externals) do
    if entry.event.kind == "Request" then requests[#requests + 1] = entry.event.data.attempt end
  end
  lu.assertEquals(requests, { 1, 2, 3 })
end

-- Attempts that keep timing out and backing off until the budget runs out.
function TestTimers:test_retry_budget_timeout_fails_it()
  local e, s = self.engine, self.store
  e:start("retry", { id = "r", context = { budget = 1.0, attempt_t = 0.2, backoff = 0.2 } })
  lu.assertTrue(C.wait_for(function() return C.load(s, "r").status == "DONE" end, e, 20))
  local exe = C.load(s, "r")
  lu.assertEquals(exe.outcome, "failed")
  lu.assertEquals(exe.active_path, "GaveUp")
  lu.assertTrue(exe.context.attempts >= 1)
  lu.assertEquals(C.timers(s, "r"), {})
  -- the timers of a finished execution are all gone: nothing fires later
  lu.assertEquals(e:sweep(ms.now() + 3600), 0)
  lu.assertEquals(C.load(s, "r").version, exe.version)
end

-- While suspended, a Leave and then the Timeout are held; on resume the Leave
-- is taken first, so the held Timeout is for a state left: a no-op.
function TestTimers:test_held_timeout_for_a_state_left_on_resume_is_a_no_op()
  local e, s = self.engine, self.store
  e:start("timed", { id = "t", context = { wait = 0.2 } })
  e:send("t", { kind = "Begin", id = "begin" })
  lu.assertTrue(e:suspend("t"))
  lu.assertTrue(e:send("t", { kind = "Leave", id = "leave" }))
  lu.assertTrue(C.wait_for(function() return C.timers(s, "t").Waiting == nil end, e), "the timer never fired")
  local exe = C.load(s, "t")
  lu.assertEquals(exe.status, "SUSPENDED")
  lu.assertEquals(#exe.deferred, 2, "the Leave and the Timeout are held")
  lu.assertTrue(e:resume("t"))
  exe = C.load(s, "t")
  lu.assertEquals(exe.status, "RUNNING")
  lu.assertEquals(exe.active_path, "Other")
  lu.assertNil(exe.context.timeouts)
  lu.assertEquals(#exe.deferred, 0)
end

-- An execution that keeps sending itself events keeps the worker busy every
-- pass; the sweep still runs at least every sweep_interval.
local chart = require "mongostore.chart"
local pinger = chart.define{
  id = "pinger", initial = "Ping",
  states = { { "Ping" } , { "Never", final = true } },
  transitions = {
    { from = "Ping", to = "Ping", on = "Tick", action = function(context, _, act)
        context.ticks = (context.ticks or 0) + 1
        act.emit(act.execution_id, "Tick", {})
      end },
    { from = "Ping", to = "Never", on = "Stop" },
  },
}

function TestTimers:test_timers_fire_under_sustained_load()
  local s = self.store
  local e = C.engine(s, { charts = { pinger } })
  e:start("pinger", { id = "busy" })
  lu.assertTrue(e:send("busy", { kind = "Tick", id = "tick-0" }))
  e:start("timed", { id = "t", context = { wait = 0.3 } })
  e:send("t", { kind = "Begin", id = "begin" })
  local deadline = ms.now() + 20
  local busy_passes = 0
  e:run{ idle_sleep = 0.02, sweep_interval = 0.1,
         stop = function()
           if #assert(s:pending_outbox()) > 0 then busy_passes = busy_passes + 1 end
           return ms.now() > deadline or C.load(s, "t").active_path == "TimedOut"
         end }
  lu.assertEquals(C.load(s, "t").active_path, "TimedOut", "the timer never fired while the worker was busy")
  lu.assertTrue(C.load(s, "busy").context.ticks > 1, "the load kept going")
  lu.assertTrue(busy_passes > 1)
end
