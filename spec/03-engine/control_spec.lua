-- spec/03-engine/control_spec.lua - cancel (cooperative when the chart models a
-- Cancel transition, a terminate when it does not), terminate, suspend (events
-- held, in order) and resume (delivered), on a flat execution and through a
-- fork to its live regions.
local lu = require "luaunit"
local C = require "fixtures.charts"

TestControl = {}

function TestControl:setUp()
  self.store, self.db = C.store()
  self.engine = C.engine(self.store)
end

function TestControl:tearDown()
  if self.store then self.store:close() end
end

-- Starts a fork-chart execution and relays until both regions run.
function TestControl:forked(chart_id, id)
  local e, s = self.engine, self.store
  lu.assertEquals(e:start(chart_id, { id = id }), id)
  lu.assertTrue(e:send(id, { kind = "Begin", id = id .. "-begin" }))
  C.drain(e)
  local parent = C.load(s, id)
  lu.assertEquals(parent.active_path, "Fork")
  local a, b = C.child(parent, "Fork.A"), C.child(parent, "Fork.B")
  lu.assertEquals(C.load(s, a).status, "RUNNING")
  lu.assertEquals(C.load(s, b).status, "RUNNING")
  return a, b
end

------------------------------------------------------------------------
-- Flat

function TestControl:test_cancel_is_cooperative_when_the_chart_models_it()
  local e, s = self.engine, self.store
  e:start("coop", { id = "c" })
  lu.assertNotNil(C.timers(s, "c").Working)
  lu.assertTrue(e:cancel("c"))
  local exe = C.load(s, "c")
  -- the modelled cleanup ran: Working -Cancel-> Aborting -> Aborted (final)
  lu.assertEquals(exe.status, "DONE")
  lu.assertEquals(exe.outcome, "aborted")
  lu.assertEquals(exe.active_path, "Aborted")
  lu.assertEquals(exe.context.cleanups, 1)
  lu.assertEquals(C.timers(s, "c"), {}, "leaving Working cancels its timer")
  C.drain(e)
  local cleanups = 0
  for _, entry in ipairs(e.spec_externals) do if entry.event.kind == "Cleanup" then cleanups = cleanups + 1 end end
  lu.assertEquals(cleanups, 1)
  local kinds = C.trace(s, "c")
  lu.assertEquals(kinds, { "Start", "Cancel" })
  -- a later Cancel of a finished execution is refused and writes nothing
  local v = exe.version
  local ok, msg, code = e:cancel("c")
  lu.assertEquals({ ok, msg, code }, { nil, "cancel c: the execution is finished (DONE)", "finished" })
  exe = C.load(s, "c")
  lu.assertEquals(exe.status, "DONE")
  lu.assertEquals(exe.outcome, "aborted")
  lu.assertEquals(exe.context.cleanups, 1)
  lu.assertEquals(exe.version, v)
end

function TestControl:test_cancel_terminates_when_the_chart_has_no_cancel_transition()
  local e, s = self.engine, self.store
  e:start("plain", { id = "p" })
  lu.assertNotNil(C.timers(s, "p").Working)
  lu.assertTrue(e:cancel("p"))
  local exe = C.load(s, "p")
  lu.assertEquals(exe.status, "CANCELLED")
  lu.assertEquals(exe.active_path, "Working", "terminated where it was, no transition taken")
  lu.assertEquals(exe.context.worked, 1)
  lu.assertNil(exe.context.next)
  lu.assertNotNil(exe.finished_at)
  lu.assertEquals(C.timers(s, "p"), {}, "stopping disarms its timers")
  -- events after the end change nothing
  lu.assertTrue(e:send("p", { kind = "Step", id = "late" }))
  exe = C.load(s, "p")
  lu.assertEquals(exe.status, "CANCELLED")
  lu.assertEquals(exe.active_path, "Working")
  lu.assertNil(exe.context.next)
end

function TestControl:test_terminate_ignores_a_modelled_cancel()
  local e, s = self.engine, self.store
  e:start("coop", { id = "c" })
  lu.assertTrue(e:terminate("c"))
  local exe = C.load(s, "c")
  lu.assertEquals(exe.status, "CANCELLED")
  lu.assertEquals(exe.active_path, "Working")
  lu.assertNil(exe.context.cleanups, "terminate runs no cleanup")
  lu.assertEquals(C.timers(s, "c"), {})
  -- a DONE execution is not terminated afterwards
  e:start("flat", { id = "f" })
  e:send("f", { kind = "Begin" })
  e:send("f", { kind = "Finish" })
  local v = C.load(s, "f").version
  lu.assertEquals(select(3, e:terminate("f")), "finished")
  lu.assertEquals(C.load(s, "f").status, "DONE")
  lu.assertEquals(C.load(s, "f").version, v)
end

-- resume, suspend and terminate of a CANCELLED execution: each refused,
-- no version written, no trace step
function TestControl:test_control_on_a_cancelled_execution_writes_nothing()
  local e, s = self.engine, self.store
  e:start("plain", { id = "pc" })
  lu.assertTrue(e:cancel("pc"))
  local before = C.load(s, "pc")
  lu.assertEquals(before.status, "CANCELLED")
  local kinds = C.trace(s, "pc")
  for _, fn in ipairs { "resume", "suspend", "terminate", "cancel" } do
    local ok, msg, code = e[fn](e, "pc")
    lu.assertNil(ok, fn)
    lu.assertEquals(code, "finished", fn)
    lu.assertEquals(msg, fn .. " pc: the execution is finished (CANCELLED)")
  end
  local after = C.load(s, "pc")
  lu.assertEquals(after.version, before.version)
  lu.assertEquals(after.status, "CANCELLED")
  lu.assertEquals(C.trace(s, "pc"), kinds)
end

function TestControl:test_suspend_holds_events_and_resume_delivers_them_in_order()
  local e, s = self.engine, self.store
  e:start("plain", { id = "p" })
  lu.assertTrue(e:suspend("p"))
  lu.assertEquals(C.load(s, "p").status, "SUSPENDED")
  -- Step, Step, Finish: in order they lead Working -> Next -> Working; out of
  -- order (Finish first) they would not end where in-order delivery does
  lu.assertTrue(e:send("p", { kind = "Step", id = "s1" }))
  lu.assertTrue(e:send("p", { kind = "Step", id = "s2" }))
  lu.assertTrue(e:send("p", { kind = "Step", id = "s3" }))
  lu.assertTrue(e:send("p", { kind = "Finish", id = "f1" }))
  local exe = C.load(s, "p")
  lu.assertEquals(exe.status, "SUSPENDED")
  lu.assertEquals(exe.active_path, "Working", "a suspended execution does not move")
  lu.assertNil(exe.context.next)
  lu.assertEquals(#exe.deferred, 4, "the events are held")
  -- a held event sent again is still one event
  lu.assertTrue(e:send("p", { kind = "Step", id = "s1" }))
  lu.assertEquals(#C.load(s, "p").deferred, 4)

  lu.assertTrue(e:resume("p"))
  exe = C.load(s, "p")
  lu.assertEquals(exe.status, "DONE")
  lu.assertEquals(exe.outcome, "success")
  lu.assertEquals(exe.active_path, "Done")
  lu.assertEquals(exe.context.next, 2)
  lu.assertEquals(exe.context.worked, 2)
  lu.assertEquals(#exe.deferred, 0)
end

function TestControl:test_resume_of_a_running_execution_changes_nothing()
  local e, s = self.engine, self.store
  e:start("plain", { id = "p" })
  lu.assertTrue(e:resume("p"))
  local exe = C.load(s, "p")
  lu.assertEquals(exe.status, "RUNNING")
  lu.assertEquals(exe.active_path, "Working")
  lu.assertEquals(exe.context.worked, 1)
end

function TestControl:test_cancel_of_a_suspended_execution_terminates_it()
  local e, s = self.engine, self.store
  e:start("plain", { id = "p" })
  e:suspend("p")
  lu.assertTrue(e:cancel("p"))
  lu.assertEquals(C.load(s, "p").status, "CANCELLED")
  lu.assertEquals(C.timers(s, "p"), {})
end

function TestControl:test_control_of_an_unknown_execution_is_not_found()
  local e = self.engine
  for _, fn in ipairs { "cancel", "terminate", "suspend", "resume" } do
    local ok, err, code = e[fn](e, "nobody")
    lu.assertNil(ok, fn)
    lu.assertEquals(code, "not_found", fn .. ": " .. tostring(err))
  end
end

------------------------------------------------------------------------
-- Through a fork

-- No Cancel transition on the parent: it ends CANCELLED at once, and its live
-- regions get the Cancel to handle their own way: region A takes its own
-- Cancel transition, region B (none) is cancelled in turn.
function TestControl:test_cancel_without_a_transition_reaches_the_regions()
  local e, s = self.engine, self.store
  local a, b = self:forked("fork", "p")
  lu.assertTrue(e:cancel("p"))
  lu.assertEquals(C.load(s, "p").status, "CANCELLED")
  C.drain(e)
  local ca, cb = C.load(s, a), C.load(s, b)
  lu.assertEquals(ca.status, "DONE")
  lu.assertEquals(ca.outcome, "aborted", "region A's own Cancel transition was not taken")
  lu.assertEquals(cb.status, "CANCELLED")
  local parent = C.load(s, "p")
  lu.assertEquals(parent.status, "CANCELLED")
  lu.assertEquals(parent.active_path, "Fork")
  lu.assertNil(parent.context.done)
  lu.assertEquals(#assert(s:pending_outbox()), 0)
end

-- The parent's modelled Cancel leaves the fork, which cancels the regions:
-- region A runs its own Cancel cleanup, region B (no Cancel transition) is
-- terminated.
function TestControl:test_cooperative_cancel_reaches_the_regions()
  local e, s = self.engine, self.store
  local a, b = self:forked("fork_coop", "p")
  lu.assertTrue(e:cancel("p"))
  local parent = C.load(s, "p")
  lu.assertEquals(parent.status, "DONE")
  lu.assertEquals(parent.outcome, "stopped")
  lu.assertEquals(parent.active_path, "Stopped")
  lu.assertEquals(parent.context.stopped, 1)
  C.drain(e)
  local ca, cb = C.load(s, a), C.load(s, b)
  lu.assertEquals(ca.status, "DONE")
  lu.assertEquals(ca.outcome, "aborted", "region A's own Cancel transition was not taken")
  lu.assertEquals(cb.status, "CANCELLED")
  parent = C.load(s, "p")
  lu.assertEquals(parent.status, "DONE")
  lu.assertEquals(parent.outcome, "stopped")
  lu.assertEquals(#assert(s:pending_outbox()), 0)
end

function TestControl:test_terminate_reaches_the_regions()
  local e, s = self.engine, self.store
  local a, b = self:forked("fork_coop", "p")
  lu.assertTrue(e:terminate("p"))
  local parent = C.load(s, "p")
  lu.assertEquals(parent.status, "CANCELLED")
  lu.assertNil(parent.context.stopped, "terminate does not take the modelled Cancel")
  C.drain(e)
  local ca, cb = C.load(s, a), C.load(s, b)
  lu.assertEquals(ca.status, "CANCELLED")
  lu.assertEquals(ca.active_path, "Fork.A.A1", "a terminated region runs no cleanup")
  lu.assertEquals(cb.status, "CANCELLED")
  lu.assertEquals(C.load(s, "p").status, "CANCELLED")
end

function TestControl:test_suspend_and_resume_reach_the_regions()
  local e, s = self.engine, self.store
  local a, b = self:forked("fork", "p")
  lu.assertTrue(e:suspend("p"))
  lu.assertEquals(C.load(s, "p").status, "SUSPENDED")
  C.drain(e)
  lu.assertEquals(C.load(s, a).status, "SUSPENDED")
  lu.assertEquals(C.load(s, b).status, "SUSPENDED")

  -- events to the parent are held by the parent
  lu.assertTrue(e:send("p", { kind = "GoA", id = "go-a" }))
  -- and events sent straight to a region are held by the region
  lu.assertTrue(e:send(b, { kind = "GoB", id = "go-b" }))
  C.drain(e)
  local parent, ca, cb = C.load(s, "p"), C.load(s, a), C.load(s, b)
  lu.assertEquals(parent.status, "SUSPENDED")
  lu.assertEquals(ca.active_path, "Fork.A.A1")
  lu.assertEquals(ca.status, "SUSPENDED")
  lu.assertEquals(cb.active_path, "Fork.B.B1")
  lu.assertEquals(cb.status, "SUSPENDED")

  lu.assertTrue(e:resume("p"))
  C.drain(e)
  parent, ca, cb = C.load(s, "p"), C.load(s, a), C.load(s, b)
  lu.assertEquals(ca.status, "DONE")
  lu.assertEquals(ca.outcome, "success")
  lu.assertEquals(cb.status, "DONE")
  lu.assertEquals(cb.outcome, "success")
  lu.assertEquals(parent.status, "DONE")
  lu.assertEquals(parent.outcome, "success")
  lu.assertEquals(parent.context.done, 1)
end

function TestControl:test_suspend_of_a_region_alone_holds_only_that_region()
  local e, s = self.engine, self.store
  local a, b = self:forked("fork", "p")
  lu.assertTrue(e:suspend(a))
  lu.assertTrue(e:send("p", { kind = "GoA", id = "go-a" }))
  lu.assertTrue(e:send("p", { kind = "GoB", id = "go-b" }))
  C.drain(e)
  lu.assertEquals(C.load(s, a).status, "SUSPENDED")
  lu.assertEquals(C.load(s, a).active_path, "Fork.A.A1")
  lu.assertEquals(C.load(s, b).status, "DONE")
  lu.assertEquals(C.load(s, "p").status, "RUNNING")
  lu.assertTrue(e:resume(a))
  C.drain(e)
  lu.assertEquals(C.load(s, a).status, "DONE")
  lu.assertEquals(C.load(s, "p").status, "DONE")
  lu.assertEquals(C.load(s, "p").outcome, "success")
end

-- A timer that comes due while the execution is suspended is held like any
-- other event and taken on resume.
function TestControl:test_timeout_while_suspended_is_held_until_resume()
  local e, s = self.engine, self.store
  e:start("timed", { id = "t", context = { wait = 0.2 } })
  e:send("t", { kind = "Begin", id = "begin" })
  lu.assertTrue(e:suspend("t"))
  -- wait until the sweep has handled the timer (it is no longer armed)
  lu.assertTrue(C.wait_for(function() return C.timers(s, "t").Waiting == nil end, e))
  local exe = C.load(s, "t")
  lu.assertEquals(exe.status, "SUSPENDED")
  lu.assertEquals(exe.active_path, "Waiting")
  lu.assertNil(exe.context.timeouts)
  lu.assertTrue(e:resume("t"))
  exe = C.load(s, "t")
  lu.assertEquals(exe.status, "RUNNING")
  lu.assertEquals(exe.active_path, "TimedOut")
  lu.assertEquals(exe.context.timeouts, 1)
end
