-- spec/engine/charts.lua - the charts the engine specs share, and the small
-- helpers they use to drive an engine against the real server: a fresh
-- store per test, a reconnect to the same database (a "restart"), bounded
-- polling, and readers for trace, timers and the relays' queues.
local ms = require "mongostore"
local chart = require "mongostore.chart"
local engine_mod = require "mongostore.engine"
local helper = require "helper"

local M = {}

-- on_enter hook that counts its runs in context[key]: a step applied twice,
-- or a hook whose effect survived a discarded attempt, shows in the count.
local function count(key)
  return function(context) context[key] = (context[key] or 0) + 1 end
end
M.count = count

-- Flat: Idle -Begin-> Working -Finish-> Done, with entry counts.
function M.flat()
  return chart.define{
    id = "flat", initial = "Idle",
    states = {
      { "Idle" },
      { "Working", on_enter = count("worked") },
      { "Done", final = "success", on_enter = count("done") },
    },
    transitions = {
      { from = "Idle", to = "Working", on = "Begin" },
      { from = "Working", to = "Done", on = "Finish" },
    },
  }
end

-- Fork: Idle -Begin-> Fork (regions A and B) -join all-> Done / else Failed.
-- A1 -GoA-> A2 (success), B1 -GoB-> B2 (success), B1 -FailB-> B3 (failed).
-- Region A cleans up cooperatively on Cancel (-> AAborted, outcome
-- "aborted"); region B has no Cancel transition, so Cancel terminates it.
-- The parent has no Cancel transition either (see fork_coop for one).
local function fork_def(id, extra_transitions, extra_states)
  local states = {
    { "Idle" },
    { "Fork", orthogonal = true, states = {
        { "A", initial = "A1",
          states = { { "A1", on_enter = count("a1") }, { "A2", final = "success" }, { "AAborted", final = "aborted" } },
          transitions = { { from = "A1", to = "A2", on = "GoA" }, { from = "A1", to = "AAborted", on = "Cancel" } } },
        { "B", initial = "B1",
          states = { { "B1", on_enter = count("b1") }, { "B2", final = "success" }, { "B3", final = "failed" } },
          transitions = { { from = "B1", to = "B2", on = "GoB" }, { from = "B1", to = "B3", on = "FailB" } } } } },
    { "Done", final = "success", on_enter = count("done") },
    { "Failed", final = "failed" },
  }
  for _, s in ipairs(extra_states or {}) do states[#states + 1] = s end
  local transitions = {
    { from = "Idle", to = "Fork", on = "Begin" },
    { from = "Fork", join = "all", to = "Done", else_to = "Failed" },
  }
  for _, t in ipairs(extra_transitions or {}) do transitions[#transitions + 1] = t end
  return chart.define{ id = id, initial = "Idle", states = states, transitions = transitions }
end

function M.fork() return fork_def("fork") end

-- The fork chart with a modelled Cancel on the parent: Fork -Cancel-> Stopped.
function M.fork_coop()
  return fork_def("fork_coop", { { from = "Fork", to = "Stopped", on = "Cancel" } },
    { { "Stopped", final = "stopped", on_enter = count("stopped") } })
end

-- A fork whose region Quick starts in a final state: it finishes in its own
-- first commit, before the parent has heard anything of it.
function M.quick()
  return chart.define{
    id = "quick", initial = "Idle",
    states = {
      { "Idle" },
      { "Fork", orthogonal = true, states = {
          { "Quick", initial = "Q", states = { { "Q", final = "success" } } },
          { "Slow", initial = "S1", states = { { "S1" }, { "S2", final = "success" } },
            transitions = { { from = "S1", to = "S2", on = "Go" } } } } },
      { "Done", final = "success", on_enter = count("done") },
      { "Failed", final = "failed" },
    },
    transitions = {
      { from = "Idle", to = "Fork", on = "Begin" },
      { from = "Fork", join = "all", to = "Done", else_to = "Failed" },
    },
  }
end

-- A timed state whose timeout comes from context.wait:
-- Idle -Begin-> Waiting; Waiting -Timeout-> TimedOut (counts "timeouts");
-- Waiting -Leave-> Other -Back-> Waiting; Waiting -Poke-> Waiting (re-arms);
-- TimedOut -Again-> Waiting; Other/TimedOut -Finish-> Done.
function M.timed()
  return chart.define{
    id = "timed", initial = "Idle",
    states = {
      { "Idle" },
      { "Waiting", timeout = { context = "wait" }, on_enter = count("waits") },
      { "Other" },
      { "TimedOut", on_enter = count("timeouts") },
      { "Done", final = "success" },
    },
    transitions = {
      { from = "Idle", to = "Waiting", on = "Begin" },
      { from = "Waiting", to = "TimedOut", on = "Timeout" },
      { from = "Waiting", to = "Other", on = "Leave" },
      { from = "Waiting", to = "Waiting", on = "Poke" },
      { from = "Other", to = "Waiting", on = "Back" },
      { from = "TimedOut", to = "Waiting", on = "Again" },
      { from = "Other", to = "Done", on = "Finish" },
      { from = "TimedOut", to = "Done", on = "Finish" },
    },
  }
end

-- Retry with backoff inside a budget: Job (timeout context.budget) holds
-- Attempt (timeout context.attempt_t, counts "attempts", emits an external
-- Request) and Backoff (timeout context.backoff). Attempt -Fail|Timeout->
-- Backoff -Timeout-> Attempt; Attempt -Ok-> Succeeded; Job -Timeout-> GaveUp.
-- The budget's Timeout must resolve at Job, not at Attempt's own Timeout.
function M.retry()
  return chart.define{
    id = "retry", initial = "Job",
    states = {
      { "Job", initial = "Attempt", timeout = { context = "budget" },
        states = {
          { "Attempt", timeout = { context = "attempt_t" },
            on_enter = function(context, _, act)
              context.attempts = (context.attempts or 0) + 1
              act.emit(nil, "Request", { attempt = context.attempts })
            end },
          { "Backoff", timeout = { context = "backoff" }, on_enter = count("backoffs") },
        },
        transitions = {
          { from = "Attempt", to = "Backoff", on = { "Fail", "Timeout" } },
          { from = "Backoff", to = "Attempt", on = "Timeout" },
        } },
      { "Succeeded", final = "success" },
      { "GaveUp", final = "failed" },
    },
    transitions = {
      { from = "Job.Attempt", to = "Succeeded", on = "Ok" },
      { from = "Job", to = "GaveUp", on = "Timeout" },
    },
  }
end

-- A timed state with no Timeout transition of its own inside a composite
-- that has one: the Timeout resolves upward from the state that timed out.
function M.nested_timeout()
  return chart.define{
    id = "nested_timeout", initial = "Box",
    states = {
      { "Box", initial = "Quiet",
        states = { { "Quiet", timeout = { context = "wait" } }, { "Loud" } },
        transitions = { { from = "Quiet", to = "Loud", on = "Shout" } } },
      { "BoxTimedOut", final = "timeout" },
    },
    transitions = { { from = "Box", to = "BoxTimedOut", on = "Timeout" } },
  }
end

-- Cooperative cancel: Working -Cancel-> Aborting (its on_enter counts and
-- emits a Cleanup to nobody) -> Aborted automatically; Working -Finish-> Done.
function M.coop()
  return chart.define{
    id = "coop", initial = "Working",
    states = {
      { "Working", timeout = 3600 },
      { "Aborting", on_enter = function(context, _, act)
          context.cleanups = (context.cleanups or 0) + 1
          act.emit(nil, "Cleanup", {})
        end },
      { "Aborted", final = "aborted" },
      { "Done", final = "success" },
    },
    transitions = {
      { from = "Working", to = "Aborting", on = "Cancel" },
      { from = "Aborting", to = "Aborted" },
      { from = "Working", to = "Done", on = "Finish" },
    },
  }
end

-- No Cancel transition anywhere: Cancel terminates. Working has a timer so
-- the spec can check that stopping disarms it.
function M.plain()
  return chart.define{
    id = "plain", initial = "Working",
    states = {
      { "Working", timeout = 3600, on_enter = count("worked") },
      { "Next", on_enter = count("next") },
      { "Done", final = "success" },
    },
    transitions = {
      { from = "Working", to = "Next", on = "Step" },
      { from = "Next", to = "Working", on = "Step" },
      { from = "Next", to = "Done", on = "Finish" },
    },
  }
end

-- The fork chart with slow region entries (each sleeps context.delay
-- seconds): a worker relaying many of them is busy long enough to be killed
-- in the middle of its work.
function M.slow_fork()
  local function slow(key)
    return function(context)
      if context.delay then ms.sleep(context.delay) end
      context[key] = (context[key] or 0) + 1
    end
  end
  return chart.define{
    id = "slow_fork", initial = "Idle",
    states = {
      { "Idle" },
      { "Fork", orthogonal = true, states = {
          { "A", initial = "A1", states = { { "A1", on_enter = slow("a1") }, { "A2", final = "success" } },
            transitions = { { from = "A1", to = "A2", on = "GoA" } } },
          { "B", initial = "B1", states = { { "B1", on_enter = slow("b1") }, { "B2", final = "success" } },
            transitions = { { from = "B1", to = "B2", on = "GoB" } } } } },
      { "Done", final = "success", on_enter = count("done") },
      { "Failed", final = "failed" },
    },
    transitions = {
      { from = "Idle", to = "Fork", on = "Begin" },
      { from = "Fork", join = "all", to = "Done", else_to = "Failed" },
    },
  }
end

function M.all()
  return { M.flat(), M.fork(), M.fork_coop(), M.quick(), M.timed(), M.retry(), M.nested_timeout(),
           M.coop(), M.plain(), M.slow_fork() }
end

------------------------------------------------------------------------
-- Driving

-- A store on a fresh database (or on db, to "restart" against the same one).
function M.store(db)
  local store, name = helper.connect(db and { db = db } or nil)
  return store, name
end

-- An engine over store with every shared chart (plus extra ones), tracing,
-- external events swallowed and logging kept in a list.
function M.engine(store, opts)
  opts = opts or {}
  local logs = {}
  local charts = M.all()
  for _, c in ipairs(opts.charts or {}) do charts[#charts + 1] = c end
  local externals = {}
  local e = engine_mod.new{
    store = store, charts = charts, trace = true,
    on_external = function(entry) externals[#externals + 1] = entry end,
    log = function(msg) logs[#logs + 1] = msg end,
    max_conflicts = opts.max_conflicts,
    max_event_bytes = opts.max_event_bytes,
    -- a killed worker's claims hold its entries for the lease: keep it short
    -- here, so recovery in the crash specs does not wait out the default
    lease = opts.lease or 1,
  }
  e.spec_logs, e.spec_externals = logs, externals
  return e
end

-- Relays until a pass handles nothing (bounded).
function M.drain(engine)
  for _ = 1, 200 do
    if engine:step() == 0 then return end
  end
  error("drain: the engine still had work after 200 passes")
end

-- Polls fn() (after running the engine's passes, when given one) until it
-- returns a true value or the deadline passes; returns its last value.
function M.wait_for(fn, engine, seconds)
  local deadline = ms.now() + (seconds or 15)
  while true do
    if engine then engine:step() end
    local v = fn()
    if v then return v end
    if ms.now() > deadline then return v end
    ms.sleep(0.02)
  end
end

-- The execution, which must exist.
function M.load(store, id)
  local exe, err, code = store:load(id)
  assert(exe, "load " .. id .. ": " .. tostring(err) .. " (" .. tostring(code) .. ")")
  return exe
end

-- Timers armed for an execution: path -> fire_at.
function M.timers(store, id)
  local out = {}
  for _, t in ipairs(assert(store:due_timers(ms.now() + 1e9))) do
    if t.execution_id == id then out[t.path] = t.fire_at end
  end
  return out
end

-- The trace's event kinds and event ids, in order.
function M.trace(store, id)
  local kinds, ids = {}, {}
  for _, s in ipairs(assert(store:read_trace(id))) do
    kinds[#kinds + 1] = s.event
    ids[#ids + 1] = s.event_id
  end
  return kinds, ids
end

-- How often each event id appears in an execution's trace.
function M.trace_counts(store, id)
  local counts = {}
  for _, s in ipairs(assert(store:read_trace(id))) do
    counts[s.event_id] = (counts[s.event_id] or 0) + 1
  end
  return counts
end

-- The ids of an execution's children (from its children map), sorted.
function M.children(exe)
  local out = {}
  for cid in pairs(exe.children) do out[#out + 1] = cid end
  table.sort(out)
  return out
end

-- The child of a fork for a region path (e.g. "Fork.A").
function M.child(exe, region)
  for cid, ch in pairs(exe.children) do
    if ch.root_path == region then return cid end
  end
  return nil
end

return M
