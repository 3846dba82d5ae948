-- spec/03-engine/targetless_spec.lua - a transition without `to` through the
-- engine and a real server: each event commits its action's context (one
-- version, its dedupe mark, a trace step from the state to itself, outcome
-- "transition"), the state is not left, so its durable timer keeps its
-- fire_at and still fires when it was due; a resent event changes nothing.
local lu = require "luaunit"
local ms = require "mongostore"
local chart = require "mongostore.chart"
local engine_mod = require "mongostore.engine"
local helper = require "helpers"
local C = require "fixtures.charts"

local entered = 0

local metered = chart.define{
  id = "metered", initial = "Trial",
  states = {
    { "Trial", timeout = 60, on_enter = function() entered = entered + 1 end },
    { "Expired", final = "expired" },
  },
  transitions = {
    -- every Use is counted where it arrives, without leaving Trial
    { from = "Trial", on = "Use", action = function(context, event)
        context.uses = (context.uses or 0) + (event.data.n or 1)
      end },
    { from = "Trial", on = "Timeout", to = "Expired" },
  },
}

TestEngineTargetless = {}

function TestEngineTargetless:setUp()
  self.store = helper.connect()
  self.engine = engine_mod.new{ store = self.store, charts = { metered }, trace = true }
  entered = 0
end

function TestEngineTargetless:tearDown()
  if self.store then self.store:close() end
end

function TestEngineTargetless:test_events_commit_the_action_and_the_timer_stays_armed()
  local e, s = self.engine, self.store
  assert(e:start("metered", { id = "m-1" }))
  lu.assertEquals(entered, 1)
  local armed = C.timers(s, "m-1").Trial
  lu.assertNotNil(armed, "entering Trial arms its timer")
  local v0 = assert(s:load("m-1")).version
  for i = 1, 3 do
    local ok, how, r = e:send("m-1", { kind = "Use", id = "use-" .. i, data = { n = i } })
    lu.assertTrue(ok, tostring(how))
    lu.assertEquals(how, "applied")
    lu.assertEquals(r, { outcome = "transition", status = "RUNNING", active_path = "Trial" })
  end
  local exe = assert(s:load("m-1"))
  lu.assertEquals(exe.context.uses, 6)
  lu.assertEquals(exe.active_path, "Trial")
  lu.assertEquals(exe.version, v0 + 3)
  lu.assertEquals(entered, 1, "Trial was not entered again")
  lu.assertEquals(C.timers(s, "m-1").Trial, armed, "the timer was not re-armed")
  -- a resend changes nothing
  local ok, how, r = e:send("m-1", { kind = "Use", id = "use-2", data = { n = 100 } })
  lu.assertTrue(ok)
  lu.assertEquals(how, "duplicate")
  lu.assertEquals(r.outcome, "duplicate")
  lu.assertEquals(assert(s:load("m-1")).context.uses, 6)
  -- the trace: from Trial to Trial, a transition each
  local steps = assert(s:read_trace("m-1"))
  local uses = 0
  for _, step in ipairs(steps) do
    if step.event == "Use" then
      uses = uses + 1
      lu.assertEquals(step.from, "Trial")
      lu.assertEquals(step.to, "Trial")
      lu.assertEquals(step.outcome, "transition")
      -- its action only: no exit or entry hook
      lu.assertEquals(step.actions, { "transition from Trial on Use" })
    end
  end
  lu.assertEquals(uses, 3, ms.json.encode(steps))
  -- the timer fires when it was due, not 60 s after the last Use
  lu.assertEquals(e:sweep(armed - 1), 0)
  lu.assertEquals(e:sweep(armed + 0.001), 1)
  exe = assert(s:load("m-1"))
  lu.assertEquals(exe.status, "DONE")
  lu.assertEquals(exe.active_path, "Expired")
  lu.assertEquals(exe.context.uses, 6)
end
