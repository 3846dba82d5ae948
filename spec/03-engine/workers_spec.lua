-- spec/03-engine/workers_spec.lua - workers under contention: a delivery whose
-- commit loses to a concurrent writer reloads and applies the event once;
-- four worker processes sharing one database, each given the same events,
-- end in the same states as one process does, every event applied once.
local lu = require "luaunit"
local ms = require "mongostore"
local chart = require "mongostore.chart"
local helper = require "helpers"
local C = require "fixtures.charts"

------------------------------------------------------------------------
-- A store conflict in the middle of a delivery

-- Called (and cleared, unless it says to stay) by the Working state's
-- on_enter: it writes the same execution through another store handle, so
-- the engine's commit of the step loses the version check.
local interfere

local conflicted = chart.define{
  id = "conflicted", initial = "Idle",
  states = {
    { "Idle" },
    { "Working", on_enter = function(context, _, act)
        context.entered = (context.entered or 0) + 1
        act.emit(nil, "Notify", { key = act.idempotency_key })
        local f = interfere
        if f then f(act.execution_id) end
      end },
    { "Done", final = "success" },
  },
  transitions = {
    { from = "Idle", to = "Working", on = "Begin" },
    { from = "Working", to = "Done", on = "Finish" },
  },
}

TestConflicts = {}

function TestConflicts:setUp()
  self.store, self.db = C.store()
  self.other = C.store(self.db)
  interfere = nil
end

function TestConflicts:tearDown()
  interfere = nil
  if self.store then self.store:close() end
  if self.other then self.other:close() end
end

-- An interference that writes `times` times, then stops.
function TestConflicts:interference(times)
  local n = 0
  return function(id)
    if n >= times then return end
    n = n + 1
    local exe = assert(self.other:load(id))
    exe.context.others = (exe.context.others or 0) + 1
    assert(self.other:save(exe))
  end
end

function TestConflicts:test_delivery_reprocesses_after_a_conflict()
  local e = C.engine(self.store, { charts = { conflicted } })
  e:start("conflicted", { id = "c" })
  lu.assertEquals(C.load(self.store, "c").version, 1)
  interfere = self:interference(1)
  lu.assertTrue(e:send("c", { kind = "Begin", id = "begin" }))
  local exe = C.load(self.store, "c")
  lu.assertEquals(exe.active_path, "Working")
  lu.assertEquals(exe.context.others, 1, "the concurrent write is kept")
  lu.assertEquals(exe.context.entered, 1, "the losing attempt's changes are not")
  lu.assertEquals(exe.version, 3, "Start, the concurrent save, the event")
  lu.assertEquals(exe.processed_events, 1)
  lu.assertEquals(C.trace_counts(self.store, "c").begin, 1)
  lu.assertTrue(self.store:is_processed("c", "begin"))
  -- one Notify, from the attempt that won (its key names the version it saw)
  C.drain(e)
  lu.assertEquals(#e.spec_externals, 1)
  lu.assertEquals(e.spec_externals[1].event.data.key, "c:2:0")
  -- the same event again is a duplicate
  lu.assertTrue(e:send("c", { kind = "Begin", id = "begin" }))
  lu.assertEquals(C.load(self.store, "c").version, 3)
end

function TestConflicts:test_several_conflicts_in_a_row()
  local e = C.engine(self.store, { charts = { conflicted } })
  e:start("conflicted", { id = "c" })
  interfere = self:interference(5)
  lu.assertTrue(e:send("c", { kind = "Begin", id = "begin" }))
  local exe = C.load(self.store, "c")
  lu.assertEquals(exe.context.others, 5)
  lu.assertEquals(exe.context.entered, 1)
  lu.assertEquals(exe.version, 7)
  C.drain(e)
  lu.assertEquals(#e.spec_externals, 1)
end

-- More conflicts than the engine's bound: the send fails with "conflict" and
-- nothing of the event is applied; sent again later it applies once.
function TestConflicts:test_conflicts_beyond_the_bound_leave_the_event_unapplied()
  local e = C.engine(self.store, { charts = { conflicted }, max_conflicts = 3 })
  e:start("conflicted", { id = "c" })
  interfere = self:interference(3)
  local ok, err, code = e:send("c", { kind = "Begin", id = "begin" })
  lu.assertNil(ok)
  lu.assertEquals(code, "conflict", tostring(err))
  local exe = C.load(self.store, "c")
  lu.assertEquals(exe.active_path, "Idle")
  lu.assertNil(exe.context.entered)
  lu.assertFalse(self.store:is_processed("c", "begin"))
  lu.assertEquals(#assert(self.store:pending_outbox()), 0)

  lu.assertTrue(e:send("c", { kind = "Begin", id = "begin" }))
  exe = C.load(self.store, "c")
  lu.assertEquals(exe.active_path, "Working")
  lu.assertEquals(exe.context.entered, 1)
  lu.assertEquals(exe.context.others, 3)
  lu.assertEquals(C.trace_counts(self.store, "c").begin, 1)
end

-- The same through the relay: an outbox entry whose delivery conflicts is
-- delivered once, and acked.
function TestConflicts:test_relayed_delivery_survives_a_conflict()
  local e = C.engine(self.store, { charts = { conflicted } })
  e:start("conflicted", { id = "c" })
  -- queue Begin for c in another execution's outbox
  local src = ms.execution{ definition_id = "conflicted", id = "src" }
  assert(self.store:commit(src, { emits = { { target_id = "c", event = { id = "relayed", kind = "Begin" } } } }))
  interfere = self:interference(2)
  C.drain(e)
  local exe = C.load(self.store, "c")
  lu.assertEquals(exe.active_path, "Working")
  lu.assertEquals(exe.context.entered, 1)
  lu.assertEquals(exe.context.others, 2)
  lu.assertEquals(C.trace_counts(self.store, "c").relayed, 1)
  lu.assertEquals(#assert(self.store:pending_outbox()), 0)
end

------------------------------------------------------------------------
-- Four worker processes, the same events

-- Every process starts the same executions and sends the same events with
-- the same ids, in the same order, then runs the worker loop until nothing is
-- left to do (no outbox, no spawns, no timer due within a minute).
local WORKER = [[
  local ms = require "mongostore"
  local C = require "fixtures.charts"
  local store = C.store(os.getenv("DB"))
  local engine = C.engine(store)
  local me = os.getenv("ME")
  local start = tonumber(os.getenv("START"))
  while ms.now() < start do ms.sleep(0.005) end
  local function check(ok, err, code, what)
    if not ok then print("ERROR " .. what .. ": " .. tostring(err) .. " (" .. tostring(code) .. ")"); os.exit(2) end
  end
  local starts = {
    { "flat", "f-1" }, { "flat", "f-2" }, { "flat", "f-3" },
    { "fork", "p-1" }, { "fork", "p-2" }, { "quick", "q-1" },
    { "timed", "t-1", { wait = 0.3 } }, { "timed", "t-2", { wait = 0.3 } },
    { "retry", "r-1", { budget = 600, attempt_t = 600, backoff = 0.2 } },
    { "coop", "c-1" }, { "plain", "s-1" }, { "fork", "k-1" },
  }
  for _, s in ipairs(starts) do
    local id, err, code = engine:start(s[1], { id = s[2], context = s[3] })
    check(id == s[2], err, code, "start " .. s[2])
  end
  local events = {
    { "f-1", "Begin", "e1" }, { "f-1", "Finish", "e2" },
    { "f-2", "Begin", "e3" },
    { "p-1", "Begin", "e4" }, { "p-1", "GoA", "e5" }, { "p-1", "GoB", "e6" },
    { "p-2", "Begin", "e7" }, { "p-2", "GoA", "e8" }, { "p-2", "FailB", "e9" },
    { "q-1", "Begin", "e10" }, { "q-1", "Go", "e11" },
    { "t-1", "Begin", "e12" },
    { "t-2", "Begin", "e13" }, { "t-2", "Leave", "e14" },
    { "r-1", "Fail", "e15" },
    { "c-1", "Cancel", "e16" },
    { "s-1", "Suspend", "e17" }, { "s-1", "Step", "e18" }, { "s-1", "Step", "e19" }, { "s-1", "Resume", "e20" },
    { "k-1", "Begin", "e21" }, { "k-1", "Terminate", "e22" },
    { "f-3", "Begin", "e23" }, { "f-3", "Begin", "e24" }, { "f-3", "Finish", "e25" },
  }
  for _, ev in ipairs(events) do
    check(engine:send(ev[1], { kind = ev[2], id = ev[3] }), nil, nil, "send " .. ev[3])
  end
  local deadline = ms.now() + 40
  local function idle()
    local o, s, t = store:pending_outbox(), store:pending_spawns(), store:due_timers(ms.now() + 60)
    return o and s and t and #o == 0 and #s == 0 and #t == 0
  end
  engine:run{ idle_sleep = 0.02, sweep_interval = 0.05,
              stop = function() return ms.now() > deadline or idle() end }
  if not idle() then print("ERROR " .. me .. " still busy at its deadline"); os.exit(2) end
  for _, msg in ipairs(engine.spec_logs) do print("LOG " .. msg) end
  print("IDLE " .. me)
  store:close()
]]

-- A comparable picture of every execution in a database: the Timeout ids
-- (which hold a fire time) are reduced to their path.
local function snapshot(store)
  local out = {}
  local page = assert(store:list_executions{ limit = 1000 })
  for _, s in ipairs(page.items) do
    local exe = C.load(store, s.id)
    local ctx = exe.context
    local steps, ids = {}, {}
    for _, step in ipairs(assert(store:read_trace(s.id))) do
      -- fire times differ between runs, and so do the uuids of events sent without an id
      local eid = step.event_id:gsub("^(timeout:.*:)[0-9.]+$", "%1<t>"):gsub("^%x+$", function(h)
        return #h == 32 and "<uuid>" or h
      end)
      steps[#steps + 1] = table.concat({ step.event, eid, tostring(step.from), tostring(step.to), step.status }, " ")
      ids[#ids + 1] = step.event_id
    end
    out[s.id] = {
      status = exe.status, outcome = exe.outcome, active_path = exe.active_path, version = exe.version,
      processed_events = exe.processed_events, context = ctx, steps = steps, ids = ids,
      parent_id = exe.parent_id,
    }
  end
  return out
end

local function run_workers(db, n)
  local start = string.format("%.6f", ms.now() + 0.5)
  local procs = {}
  for p = 1, n do
    procs[p] = helper.spawn(WORKER, { DB = db, ME = "w" .. p, START = start, MONGOSTORE_TEST_URI = helper.uri() })
  end
  local outs = {}
  for p = 1, n do
    local out, status = procs[p].wait()
    outs[p] = out
    lu.assertEquals(status, 0, "worker w" .. p .. " failed:\n" .. out)
    lu.assertNil(out:find("ERROR", 1, true), out)
    lu.assertStrContains(out, "IDLE w" .. p)
  end
  return outs
end

TestWorkers = {}

function TestWorkers:setUp()
  self.stores = {}
end

function TestWorkers:tearDown()
  for _, s in ipairs(self.stores) do s:close() end
end

function TestWorkers:test_four_workers_end_where_one_does_with_every_event_applied_once()
  local db1, db4 = helper.fresh_db("one"), helper.fresh_db("four")
  run_workers(db1, 1)
  run_workers(db4, 4)
  local s1, s4 = C.store(db1), C.store(db4)
  self.stores = { s1, s4 }
  local one, four = snapshot(s1), snapshot(s4)

  -- the single run went where the events lead
  lu.assertEquals(one["f-1"].status, "DONE")
  lu.assertEquals(one["f-2"].active_path, "Working")
  lu.assertEquals(one["f-3"].status, "DONE")
  lu.assertEquals(one["f-3"].context.worked, 1)
  lu.assertEquals(one["p-1"].outcome, "success")
  lu.assertEquals(one["p-2"].outcome, "failed")
  lu.assertEquals(one["p-2"].active_path, "Failed")
  lu.assertEquals(one["q-1"].outcome, "success")
  lu.assertEquals(one["t-1"].active_path, "TimedOut")
  lu.assertEquals(one["t-1"].context.timeouts, 1)
  lu.assertEquals(one["t-2"].active_path, "Other")
  lu.assertEquals(one["r-1"].active_path, "Job.Attempt")
  lu.assertEquals(one["r-1"].context.attempts, 2)
  lu.assertEquals(one["c-1"].outcome, "aborted")
  lu.assertEquals(one["s-1"].active_path, "Working")
  lu.assertEquals(one["s-1"].context.worked, 2)
  lu.assertEquals(one["k-1"].status, "CANCELLED")
  lu.assertEquals(one["k-1:Fork.A:0"].status, "CANCELLED")
  lu.assertNotNil(one["p-1:Fork.B:0"])

  -- the four-process run ended in exactly the same place, execution by execution
  local ids = {}
  for id in pairs(one) do ids[#ids + 1] = id end
  table.sort(ids)
  local ids4 = {}
  for id in pairs(four) do ids4[#ids4 + 1] = id end
  table.sort(ids4)
  lu.assertEquals(ids4, ids, "the same executions exist")
  for _, id in ipairs(ids) do
    local a, b = one[id], four[id]
    for _, field in ipairs { "status", "outcome", "active_path", "version", "processed_events", "parent_id" } do
      lu.assertEquals(b[field], a[field], id .. "." .. field)
    end
    lu.assertEquals(b.context, a.context, id .. ".context")
    -- the same events applied; events from different senders (two regions'
    -- Finished) may be applied in either order when several workers relay at
    -- once, and which of them completes the join then differs, so the steps
    -- are compared as a set of (kind, event id), and the end state above
    local function applied(steps)
      local out = {}
      for i, st in ipairs(steps) do out[i] = st:match("^(%S+ %S+)") end
      table.sort(out)
      return out
    end
    lu.assertEquals(applied(b.steps), applied(a.steps), id .. ": the events applied differ")
    -- every event applied exactly once: one trace step (one commit) per event id
    local seen = {}
    for _, eid in ipairs(b.ids) do
      lu.assertNil(seen[eid], id .. ": event " .. eid .. " applied twice")
      seen[eid] = true
    end
    lu.assertEquals(b.version, #b.ids, id .. ": a commit without a trace step")
  end
  for _, s in ipairs { s1, s4 } do
    lu.assertEquals(#assert(s:pending_outbox()), 0)
    lu.assertEquals(#assert(s:pending_spawns()), 0)
  end
end
