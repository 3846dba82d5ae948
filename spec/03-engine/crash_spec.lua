-- spec/03-engine/crash_spec.lua - a worker process killed with SIGKILL in the
-- middle of relaying spawns, outbox entries and timers: what it left is
-- finished by another worker that was running beside it, or by a new process
-- that runs engine:recover(), and no event is applied twice.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local C = require "fixtures.charts"

local FORKS = 12
local TIMED = 4
local DELAY = 0.04 -- each region's entry sleeps this long: ~1 s of spawn work

-- A worker: writes its pid to PIDFILE, then either runs the worker loop
-- until nothing is left (MODE=run) or drains with recover() (MODE=recover).
local WORKER = [[
  local ms = require "mongostore"
  local C = require "fixtures.charts"
  local pid = io.popen("echo $PPID"):read("l")
  local store = C.store(os.getenv("DB"))
  local engine = C.engine(store)
  local f = assert(io.open(os.getenv("PIDFILE"), "w"))
  f:write(pid, "\n")
  f:close()
  local function idle()
    local o, s, t = store:pending_outbox(), store:pending_spawns(), store:due_timers(ms.now() + 60)
    return o and s and t and #o == 0 and #s == 0 and #t == 0
  end
  if os.getenv("MODE") == "recover" then
    local deadline = ms.now() + 40
    repeat
      engine:recover()
      if not idle() then ms.sleep(0.05) end
    until idle() or ms.now() > deadline
  else
    local deadline = ms.now() + 40
    engine:run{ idle_sleep = 0.02, sweep_interval = 0.05,
                stop = function() return ms.now() > deadline or idle() end }
  end
  if not idle() then print("ERROR still busy at the deadline"); os.exit(2) end
  for _, msg in ipairs(engine.spec_logs) do print("LOG " .. msg) end
  print("IDLE")
  store:close()
]]

TestCrash = {}

function TestCrash:setUp()
  self.store, self.db = C.store()
  self.engine = C.engine(self.store)
  self.pidfiles = {}
end

function TestCrash:tearDown()
  if self.store then self.store:close() end
  for _, p in ipairs(self.pidfiles) do os.remove(p) end
end

-- Queues the work: FORKS slow forks (Begin, GoA, GoB: two spawns and four
-- forwarded events each, none relayed yet) and TIMED short timers.
function TestCrash:queue_work()
  local e = self.engine
  for i = 1, FORKS do
    local id = "s-" .. i
    lu.assertEquals(e:start("slow_fork", { id = id, context = { delay = DELAY } }), id)
    lu.assertTrue(e:send(id, { kind = "Begin", id = id .. "-begin" }))
    lu.assertTrue(e:send(id, { kind = "GoA", id = id .. "-go-a" }))
    lu.assertTrue(e:send(id, { kind = "GoB", id = id .. "-go-b" }))
  end
  for i = 1, TIMED do
    local id = "t-" .. i
    e:start("timed", { id = id, context = { wait = 0.3 } })
    lu.assertTrue(e:send(id, { kind = "Begin", id = id .. "-begin" }))
  end
  lu.assertEquals(#assert(self.store:pending_spawns()), 2 * FORKS)
  lu.assertEquals(#assert(self.store:pending_outbox()), 4 * FORKS)
end

function TestCrash:worker(mode, name)
  local pidfile = os.tmpname()
  os.remove(pidfile)
  self.pidfiles[#self.pidfiles + 1] = pidfile
  local h = helper.spawn(WORKER, { DB = self.db, MODE = mode, PIDFILE = pidfile, MONGOSTORE_TEST_URI = helper.uri() })
  h.name, h.pidfile = name, pidfile
  return h
end

local function read_pid(h)
  local pid
  local deadline = ms.now() + 20
  repeat
    local f = io.open(h.pidfile, "r")
    if f then
      pid = f:read("l")
      f:close()
    end
    if not (pid and pid:match("^%d+$")) then pid = nil; ms.sleep(0.01) end
  until pid or ms.now() > deadline
  assert(pid, h.name .. " never wrote its pid")
  return pid
end

-- Waits until the worker has done some of the work (children exist), then
-- kills it with SIGKILL. Returns how much was still pending at that moment.
function TestCrash:kill_mid_run(h)
  local pid = read_pid(h)
  local store = self.store
  local started = C.wait_for(function()
    return #assert(store:pending_spawns()) <= 2 * FORKS - 3
  end, nil, 20)
  lu.assertTrue(started, h.name .. " never started working")
  lu.assertTrue(os.execute("kill -9 " .. pid), "kill -9 " .. pid)
  local out, status = h.wait()
  lu.assertNotEquals(status, 0, h.name .. " was not killed:\n" .. out)
  lu.assertNil(out:find("IDLE", 1, true), h.name .. " finished before it was killed")
  return #assert(store:pending_spawns()) + #assert(store:pending_outbox())
end

function TestCrash:check_everything_done_once()
  local store = self.store
  lu.assertEquals(#assert(store:pending_spawns()), 0)
  lu.assertEquals(#assert(store:pending_outbox()), 0)
  local function once(id)
    local exe = C.load(store, id)
    local counts = C.trace_counts(store, id)
    for eid, n in pairs(counts) do lu.assertEquals(n, 1, id .. ": event " .. eid .. " applied " .. n .. " times") end
    local _, ids = C.trace(store, id)
    lu.assertEquals(exe.version, #ids, id .. ": a commit without a trace step")
    return exe
  end
  for i = 1, FORKS do
    local id = "s-" .. i
    local parent = once(id)
    lu.assertEquals(parent.status, "DONE", id)
    lu.assertEquals(parent.outcome, "success", id)
    lu.assertEquals(parent.context.done, 1, id)
    -- Start, Begin, GoA, GoB, two Finished
    lu.assertEquals(parent.version, 6, id)
    for _, region in ipairs { "A", "B" } do
      local cid = id .. ":Fork." .. region .. ":0"
      local child = once(cid)
      lu.assertEquals(child.status, "DONE", cid)
      lu.assertEquals(child.outcome, "success", cid)
      -- Start, GoA, GoB
      lu.assertEquals(child.version, 3, cid)
      lu.assertEquals(child.context[region:lower() .. "1"], 1, cid .. ": its entry ran in more than one commit")
    end
  end
  for i = 1, TIMED do
    local id = "t-" .. i
    local exe = once(id)
    lu.assertEquals(exe.active_path, "TimedOut", id)
    lu.assertEquals(exe.context.timeouts, 1, id)
  end
end

function TestCrash:test_killed_workers_work_is_finished_by_another_worker()
  self:queue_work()
  local victim = self:worker("run", "victim")
  local other = self:worker("run", "other")
  local pending = self:kill_mid_run(victim)
  lu.assertTrue(pending > 0, "the victim had finished everything before the kill: the test proves nothing")
  local out, status = other.wait()
  lu.assertEquals(status, 0, out)
  lu.assertStrContains(out, "IDLE")
  self:check_everything_done_once()
end

function TestCrash:test_killed_workers_work_is_finished_on_restart()
  self:queue_work()
  local victim = self:worker("run", "victim")
  local pending = self:kill_mid_run(victim)
  lu.assertTrue(pending > 0, "the victim had finished everything before the kill: the test proves nothing")
  -- nobody else is running: the restarted process recovers it
  local restarted = self:worker("recover", "restarted")
  local out, status = restarted.wait()
  lu.assertEquals(status, 0, out)
  lu.assertStrContains(out, "IDLE")
  self:check_everything_done_once()
end
