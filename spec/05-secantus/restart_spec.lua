-- spec/05-secantus/restart_spec.lua - the server dies under a multi-worker run:
-- SecantusDB (--sync-on-commit) is kill -9'ed and restarted on the same port
-- twice while worker processes run forks, outbox traffic and timers; the
-- workers reconnect on their own and finish, and every execution ends where a
-- run without kills ends, each event applied exactly once.
-- Needs a server this spec can kill and restart: runs on SecantusDB only.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"

local SERVER = os.getenv("MONGOSTORE_TEST_SERVER") or "other"
local COPIES = tonumber(os.getenv("RESTART_SPEC_COPIES") or "") or 4
local WORKERS = tonumber(os.getenv("RESTART_SPEC_WORKERS") or "") or 3
local KILLS = tonumber(os.getenv("RESTART_SPEC_KILLS") or "") or 2

-- Worker w1 starts COPIES sets of executions; every worker sends the same
-- events with the same ids to them, then runs the worker loop until nothing
-- is left. A call that fails because the server is away (network, timeout,
-- unavailable) is retried with the same ids: that is the client's part; the
-- engine and the store must do the rest on their own.
local WORKER = [[
  local ms = require "mongostore"
  local C = require "fixtures.charts"
  local me, copies = os.getenv("ME"), tonumber(os.getenv("COPIES"))
  local deadline = ms.now() + tonumber(os.getenv("BUDGET"))
  local retried = {}
  local TRANSIENT = { network = true, timeout = true, unavailable = true, pending = true }
  local function retry(what, fn)
    while true do
      local ok, err, code = fn()
      if ok then return ok end
      if not TRANSIENT[code] then
        print("ERROR " .. what .. ": " .. tostring(err) .. " (" .. tostring(code) .. ")"); os.exit(2)
      end
      if ms.now() > deadline then
        print("ERROR " .. what .. ": still " .. tostring(code) .. " at the deadline: " .. tostring(err)); os.exit(2)
      end
      retried[code] = (retried[code] or 0) + 1
      ms.sleep(0.1)
    end
  end
  local store = retry("connect", function()
    return ms.connect(os.getenv("MONGOSTORE_TEST_URI"), { db = os.getenv("DB"), wait = 30 })
  end)
  local engine = C.engine(store)
  local start = tonumber(os.getenv("START"))
  while ms.now() < start do ms.sleep(0.005) end
  local starts = {
    { "flat", "f-1" }, { "flat", "f-2" }, { "fork", "p-1" }, { "fork", "p-2" }, { "quick", "q-1" },
    { "timed", "t-1", { wait = 0.3 } }, { "timed", "t-2", { wait = 0.3 } },
    { "retry", "r-1", { budget = 600, attempt_t = 600, backoff = 0.2 } },
    { "coop", "c-1" }, { "plain", "s-1" }, { "fork", "k-1" },
  }
  local events = {
    { "f-1", "Begin" }, { "f-1", "Finish" }, { "f-2", "Begin" },
    { "p-1", "Begin" }, { "p-1", "GoA" }, { "p-1", "GoB" },
    { "p-2", "Begin" }, { "p-2", "GoA" }, { "p-2", "FailB" },
    { "q-1", "Begin" }, { "q-1", "Go" },
    { "t-1", "Begin" }, { "t-2", "Begin" }, { "t-2", "Leave" },
    { "r-1", "Fail" }, { "c-1", "Cancel" },
    { "s-1", "Suspend" }, { "s-1", "Step" }, { "s-1", "Step" }, { "s-1", "Resume" },
    { "k-1", "Begin" }, { "k-1", "Terminate" },
  }
  -- w1 starts the executions; the others wait until they exist (the same
  -- starts from several processes at once are concurrent_start_spec's)
  local last = starts[#starts][2] .. "-" .. copies
  if me ~= "w1" then
    retry("wait for " .. last, function()
      local exe, err, code = store:load(last)
      if exe == nil and err == nil then return nil, "not started yet", "pending" end
      return exe, err, code
    end)
  end
  for c = 1, copies do
    if me == "w1" then
      for _, s in ipairs(starts) do
        local id = s[2] .. "-" .. c
        retry("start " .. id, function()
          local got, err, code = engine:start(s[1], { id = id, context = s[3] })
          if got ~= nil and got ~= id then return nil, "started " .. tostring(got), "wrong" end
          return got, err, code
        end)
      end
    end
    for i, ev in ipairs(events) do
      local id = ev[1] .. "-" .. c
      retry("send " .. id, function() return engine:send(id, { kind = ev[2], id = "e" .. i .. "-" .. c }) end)
    end
  end
  print("SENT " .. me)
  io.stdout:flush()
  local function idle()
    local o, s, t = store:pending_outbox(), store:pending_spawns(), store:due_timers(ms.now() + 60)
    return o and s and t and #o == 0 and #s == 0 and #t == 0
  end
  engine:run{ idle_sleep = 0.02, sweep_interval = 0.05,
              stop = function() return ms.now() > deadline or idle() end }
  if not idle() then print("ERROR " .. me .. " still busy at its deadline"); os.exit(2) end
  local errors = 0
  for _, msg in ipairs(engine.spec_logs) do
    errors = errors + 1
    if errors <= 20 then print("LOG " .. msg) end
  end
  local r = {}
  for code, n in pairs(retried) do r[#r + 1] = code .. "=" .. n end
  table.sort(r)
  print(string.format("IDLE %s retried{%s} logged=%d", me, table.concat(r, ","), errors))
  store:close()
]]

local server_dir, uri
local function sh(cmd)
  local f = assert(io.popen(cmd .. " 2>&1", "r"))
  local out = f:read("a")
  local ok = f:close()
  return ok, (out:gsub("%s+$", ""))
end
local function server(cmd)
  local ok, out = sh(helper.shell_quote(helper.root() .. "/tools/secantus-server") .. " " .. cmd .. " " ..
    helper.shell_quote(server_dir) .. (cmd == "start" and " --sync-on-commit" or ""))
  assert(ok, "secantus-server " .. cmd .. " failed: " .. out)
  return out:match("(mongodb://%S+)%s*$")
end

local function connect(db)
  local store, err, code = ms.connect(uri, { db = db, wait = 30 })
  assert(store, "connect: " .. tostring(err) .. " (" .. tostring(code) .. ")")
  return store
end

-- Every execution of a database as comparable values: the ids of the events
-- the engine makes up (uuids, timeout fire times) are reduced to their shape.
local function snapshot(store)
  local out, cursor = {}, nil
  repeat
    local page = assert(store:list_executions { limit = 1000, cursor = cursor })
    for _, s in ipairs(page.items) do
      local exe = assert(store:load(s.id))
      local kinds, ids = {}, {}
      for _, step in ipairs(assert(store:read_trace(s.id))) do
        local eid = step.event_id:gsub("^(timeout:.*:)[0-9.]+$", "%1<t>"):gsub("^%x+$", function(h)
          return #h == 32 and "<uuid>" or h
        end)
        kinds[#kinds + 1] = step.event .. " " .. eid
        ids[#ids + 1] = step.event_id
      end
      table.sort(kinds)
      out[s.id] = { status = exe.status, outcome = exe.outcome, active_path = exe.active_path,
                    version = exe.version, processed_events = exe.processed_events,
                    context = exe.context, parent_id = exe.parent_id, kinds = kinds, ids = ids }
    end
    cursor = page.next_cursor
  until not cursor
  return out
end

local function run_workers(db, n, budget, during)
  local start = string.format("%.6f", ms.now() + 0.3)
  local procs = {}
  for p = 1, n do
    procs[p] = helper.spawn(WORKER, { DB = db, ME = "w" .. p, START = start, COPIES = COPIES,
      BUDGET = budget, MONGOSTORE_TEST_URI = uri })
  end
  local events = during and during() or {}
  local outs = {}
  for p = 1, n do
    local out, status = procs[p].wait()
    outs[p] = out
    lu.assertEquals(status, 0, "worker w" .. p .. " failed:\n" .. out)
    lu.assertNil(out:find("ERROR", 1, true), out)
    lu.assertStrContains(out, "IDLE w" .. p)
  end
  return outs, events
end

-- How far the run has got, read on a fresh connection (nil while the server
-- does not answer).
local function progress(db)
  local store = ms.connect(uri, { db = db, wait = 2 })
  if not store then return nil end
  local page = store:list_executions { limit = 1000 }
  if not page then store:close(); return nil end
  local n, commits = 0, 0
  for _, s in ipairs(page.items) do
    n = n + 1
    commits = commits + (s.version or 0)
  end
  store:close()
  return { executions = n, commits = commits }
end

TestRestart = {}

function TestRestart:setUp()
  if SERVER ~= "secantus" then
    lu.skip("needs a SecantusDB it can kill -9 and restart (MONGOSTORE_TEST_SERVER=secantus), not " .. SERVER)
  end
  local ok, dir = sh("mktemp -d \"${TMPDIR:-/tmp}/mongostore-restart.XXXXXX\"")
  assert(ok, dir)
  server_dir = dir
  uri = server("start")
end

function TestRestart:tearDown()
  if server_dir then
    sh(helper.shell_quote(helper.root() .. "/tools/secantus-server") .. " stop " .. helper.shell_quote(server_dir))
    sh("rm -rf " .. helper.shell_quote(server_dir))
    server_dir = nil
  end
end

function TestRestart:test_workers_survive_server_kills_with_nothing_lost_or_doubled()
  local ref_db, db = helper.fresh_db("ref"), helper.fresh_db("kill")
  local t0 = ms.now()
  run_workers(ref_db, 1, 120)
  local t1 = ms.now()
  -- the kills follow the work done, not the clock: the k-th comes once the
  -- run has made k/(KILLS+1) of the commits the reference run made, so each
  -- lands while there is work left, however fast the machine is
  local ref_total = 0
  do
    local ref = connect(ref_db)
    for _, e in pairs(snapshot(ref)) do ref_total = ref_total + e.version end
    ref:close()
  end
  local kills = {}
  local outs = run_workers(db, WORKERS, 180, function()
    for k = 1, KILLS do
      local at = math.max(1, math.floor(ref_total * k / (KILLS + 1)))
      local deadline = ms.now() + 60
      local before
      repeat
        ms.sleep(0.05)
        before = progress(db)
      until (before and before.commits >= at) or ms.now() > deadline
      server("kill9")
      local killed_at = ms.now()
      ms.sleep(1.0)
      server("restart")
      kills[k] = { before = before, down = ms.now() - killed_at }
    end
    return kills
  end)
  local t2 = ms.now()
  for k, kill in ipairs(kills) do
    local b = kill.before or {}
    print(string.format("restart_spec: kill %d at %s executions, %s commits; down %.1f s", k,
      tostring(b.executions), tostring(b.commits), kill.down))
  end
  for _, out in ipairs(outs) do
    for line in out:gmatch("[^\n]+") do
      if line:find("^IDLE") or line:find("^LOG") then print("restart_spec: " .. line) end
    end
  end
  print(string.format("restart_spec: reference run (1 worker) %.1f s, run with kills (%d workers) %.1f s",
    t1 - t0, WORKERS, t2 - t1))
  local ref_store, store = connect(ref_db), connect(db)
  local want, got = snapshot(ref_store), snapshot(store)
  local total = 0
  for _, e in pairs(got) do total = total + e.version end
  lu.assertEquals(#kills, KILLS)
  for k, kill in ipairs(kills) do
    -- a kill after the run had done all its work would prove nothing
    lu.assertNotNil(kill.before, "kill " .. k .. ": the server did not answer before it")
    lu.assertTrue(kill.before.commits < total,
      string.format("kill %d came after all %d commits were made", k, total))
  end
  local ids, ids_got = {}, {}
  for id in pairs(want) do ids[#ids + 1] = id end
  for id in pairs(got) do ids_got[#ids_got + 1] = id end
  table.sort(ids)
  table.sort(ids_got)
  lu.assertEquals(ids_got, ids, "the same executions exist")
  local lost, doubled = 0, 0
  local problems = {}
  for _, id in ipairs(ids) do
    local a, b = want[id], got[id]
    for _, field in ipairs { "status", "outcome", "active_path", "version", "processed_events", "parent_id" } do
      if b[field] ~= a[field] then
        problems[#problems + 1] = string.format("%s.%s: %s, without kills %s", id, field, tostring(b[field]), tostring(a[field]))
      end
    end
    local ok_ctx = pcall(lu.assertEquals, b.context, a.context)
    if not ok_ctx then problems[#problems + 1] = id .. ".context differs from the run without kills" end
    -- the same events, each applied exactly once (one trace step per event id)
    local count = {}
    for _, k in ipairs(b.kinds) do count[k] = (count[k] or 0) + 1 end
    for _, k in ipairs(a.kinds) do count[k] = (count[k] or 0) - 1 end
    for k, c in pairs(count) do
      if c < 0 then lost = lost - c; problems[#problems + 1] = id .. ": lost " .. k end
      if c > 0 then doubled = doubled + c; problems[#problems + 1] = id .. ": applied more often: " .. k end
    end
    local seen = {}
    for _, eid in ipairs(b.ids) do
      if seen[eid] then doubled = doubled + 1; problems[#problems + 1] = id .. ": event " .. eid .. " applied twice" end
      seen[eid] = true
    end
    if b.version ~= #b.ids then problems[#problems + 1] = id .. ": a commit without a trace step" end
  end
  print(string.format("restart_spec: %d executions, %d kills survived, %d events lost, %d doubled",
    #ids, #kills, lost, doubled))
  lu.assertEquals(#assert(store:pending_outbox()), 0)
  lu.assertEquals(#assert(store:pending_spawns()), 0)
  ref_store:close()
  store:close()
  lu.assertEquals(problems, {})
end
