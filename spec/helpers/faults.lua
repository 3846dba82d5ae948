-- spec/helpers/faults.lua - what the fault and crash specs share: the
-- fault proxy (tools/fault-proxy) and a private test server driven from Lua,
-- a deterministic workload (hop chains through the outbox, forks, timers,
-- orders, counters) run by worker processes, and its exact expected outcome.
local ms = require "mongostore"
local chart = require "mongostore.chart"
local helper = require "helpers"

local M = {}

local function sh(cmd)
  local f = assert(io.popen(cmd, "r"))
  local out = f:read("a")
  local ok, _, status = f:close()
  return out, ok, status
end

local function read_file(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end
M.read_file = read_file

local function write_atomic(path, text)
  local tmp = path .. ".tmp"
  local f = assert(io.open(tmp, "w"))
  f:write(text)
  f:close()
  assert(os.rename(tmp, path))
end

function M.tmpdir(tag)
  local out = sh("mktemp -d " .. helper.shell_quote((os.getenv("TMPDIR") or "/tmp") .. "/mst-" .. tag .. ".XXXXXX"))
  return (out:gsub("%s+$", ""))
end

-- python3 without a version manager's shim, and never with a sanitizer preloaded
local function python()
  local f = io.open("/usr/bin/python3", "r")
  if f then f:close(); return "env -u LD_PRELOAD /usr/bin/python3" end
  return "env -u LD_PRELOAD python3"
end

-- The URI with its host:port replaced, and `extra` query options appended.
function M.retarget(uri, hostport, extra)
  local scheme_less = assert(uri:match("^mongodb://(.*)$"), "retarget: not a mongodb:// URI")
  local creds, rest = scheme_less:match("^([^/@]*@)(.*)$")
  if not creds then creds, rest = "", scheme_less end
  local tail = rest:match("^[^/?]*(.*)$")
  if extra and extra ~= "" then
    if tail:find("?", 1, true) then tail = tail .. "&" .. extra
    elseif tail == "" or tail == "/" then tail = "/?" .. extra
    else tail = tail .. "?" .. extra end
  end
  return "mongodb://" .. creds .. hostport .. tail
end

function M.hostport(uri)
  local rest = assert(uri:match("^mongodb://(.*)$"))
  rest = rest:match("^[^/@]*@(.*)$") or rest
  return rest:match("^([^/?]*)")
end

------------------------------------------------------------------------
-- The fault proxy

-- Starts tools/fault-proxy in front of upstream_uri; returns a handle:
-- h.port, h.pid, h.uri(extra_query), h.set{ key = value, ... } (the whole
-- control state: keys left out go back to their defaults), h.stats(), h.stop().
function M.start_proxy(upstream_uri, seed)
  local dir = M.tmpdir("proxy")
  local control, stats, portfile = dir .. "/control", dir .. "/stats", dir .. "/port"
  write_atomic(control, "")
  local cmd = string.format("%s %s --uri %s --control %s --stats %s %s >%s 2>%s/log & echo $!",
    python(), helper.shell_quote(helper.root() .. "/tools/fault-proxy"), helper.shell_quote(upstream_uri),
    helper.shell_quote(control), helper.shell_quote(stats), seed and ("--seed " .. seed) or "",
    helper.shell_quote(portfile), helper.shell_quote(dir))
  local pid = sh(cmd):match("(%d+)")
  assert(pid, "fault-proxy did not start")
  local port
  local deadline = ms.now() + 15
  repeat
    port = (read_file(portfile) or ""):match("^(%d+)\n")
    if not port then ms.sleep(0.02) end
  until port or ms.now() > deadline
  assert(port, "fault-proxy printed no port: " .. tostring(read_file(dir .. "/log")))
  local h = { pid = pid, port = tonumber(port), dir = dir }
  local state = {}
  function h.uri(extra) return M.retarget(upstream_uri, "127.0.0.1:" .. port, extra) end
  function h.set(kv)
    state = kv
    local lines = {}
    for k, v in pairs(kv) do lines[#lines + 1] = k .. "=" .. tostring(v) end
    table.sort(lines)
    write_atomic(control, table.concat(lines, "\n") .. "\n")
    -- the proxy polls every 10 ms: give it a few ticks
    ms.sleep(0.05)
  end
  -- Bumps a one-shot counter (reset_next, lose_next, reset_all) by n.
  function h.bump(key, n, extra)
    local kv = {}
    for k, v in pairs(state) do kv[k] = v end
    for k, v in pairs(extra or {}) do kv[k] = v end
    kv[key] = (tonumber(state[key]) or 0) + (n or 1)
    h.set(kv)
  end
  function h.stats()
    local text = read_file(stats)
    if not text then return {} end
    return ms.json.decode(text) or {}
  end
  function h.log() return read_file(dir .. "/log") or "" end
  function h.stop()
    if h.stopped then return end
    h.stopped = true
    os.execute("kill -TERM " .. pid .. " 2>/dev/null")
    local t = ms.now() + 5
    while ms.now() < t and os.execute("kill -0 " .. pid .. " 2>/dev/null") do ms.sleep(0.02) end
    os.execute("kill -KILL " .. pid .. " 2>/dev/null")
    h.final_stats = h.stats()
    os.execute("rm -rf " .. helper.shell_quote(dir))
  end
  return h
end

------------------------------------------------------------------------
-- A private server (its PID is ours to SIGSTOP)

-- The same kind of server as the suite's (SecantusDB on its pass, else
-- mongo-java-server), started by its own launcher in a fresh directory.
function M.start_server()
  local dir = M.tmpdir("server")
  local launcher = os.getenv("MONGOSTORE_TEST_SERVER") == "secantus" and "secantus-server" or "test-server"
  local tool = helper.shell_quote(helper.root() .. "/tools/" .. launcher)
  local out, ok = sh(tool .. " start " .. helper.shell_quote(dir) .. " 2>&1")
  local uri = out:match("(mongodb://%S+)")
  if not (ok and uri) then return nil, "tools/" .. launcher .. " start failed: " .. out end
  local pid = assert((read_file(dir .. "/server.pid") or ""):match("(%d+)"), "no server.pid")
  local h = { uri = uri, pid = pid, dir = dir }
  function h.freeze() return os.execute("kill -STOP " .. pid) end
  function h.thaw() return os.execute("kill -CONT " .. pid) end
  function h.stop()
    if h.stopped then return end
    h.stopped = true
    h.thaw()
    sh(tool .. " stop " .. helper.shell_quote(dir) .. " 2>&1")
    os.execute("rm -rf " .. helper.shell_quote(dir))
  end
  return h
end

------------------------------------------------------------------------
-- The workload's charts

-- hop: every Hop is counted and passed on to context.peer with n - 1, so a
-- chain of length L started at each of E executions in a ring visits every
-- execution exactly L times. Poke is counted. context.delay makes each
-- step slow, so a kill lands between a load and its commit more often.
function M.hop_chart()
  return chart.define{
    id = "hop", initial = "Live",
    states = { { "Live" }, { "Stopped", final = "success" } },
    transitions = {
      { from = "Live", to = "Live", on = "Hop", action = function(context, event, act)
          if context.delay then ms.sleep(context.delay) end
          context.hops = (context.hops or 0) + 1
          local n = event.data.n
          if n > 1 then act.emit(context.peer, "Hop", { n = n - 1 }) end
        end },
      { from = "Live", to = "Live", on = "Poke", action = function(context)
          context.pokes = (context.pokes or 0) + 1
        end },
      { from = "Live", to = "Stopped", on = "Stop" },
    },
  }
end

-- pair: Begin forks regions A and B; one Go (passed on to both regions)
-- finishes both; the join goes to Done. One event reaches the regions, so
-- how many commits each child makes does not depend on timing (with GoA and
-- GoB, whether GoB still reaches the finished region A would).
function M.pair_chart()
  local C = require "fixtures.charts"
  return chart.define{
    id = "pair", initial = "Idle",
    states = {
      { "Idle" },
      { "Fork", orthogonal = true, states = {
          { "A", initial = "A1", states = { { "A1", on_enter = C.count("a1") }, { "A2", final = "success" } },
            transitions = { { from = "A1", to = "A2", on = "Go" } } },
          { "B", initial = "B1", states = { { "B1", on_enter = C.count("b1") }, { "B2", final = "success" } },
            transitions = { { from = "B1", to = "B2", on = "Go" } } } } },
      { "Done", final = "success", on_enter = C.count("done") },
      { "Failed", final = "failed" },
    },
    transitions = {
      { from = "Idle", to = "Fork", on = "Begin" },
      { from = "Fork", join = "all", to = "Done", else_to = "Failed" },
    },
  }
end

function M.charts()
  local C = require "fixtures.charts"
  return { M.hop_chart(), M.pair_chart(), C.timed(), C.order() }
end

------------------------------------------------------------------------
-- The workload: fixed ids and events, outcomes that do not depend on timing

M.DEFAULT = { hops = 12, ring = 16, forks = 6, orders = 6, timed = 4, pokes = 12, delay = 0 }

-- Every execution to start, and every caller event, grouped by the
-- execution they go to (sent in this order): { id, chart, context, events }.
function M.workload(p)
  local items = {}
  for i = 1, p.ring do
    local ctx = { peer = "h-" .. (i % p.ring + 1) }
    if p.delay > 0 then ctx.delay = p.delay end
    local events = { { kind = "Hop", id = "hop-start-" .. i, data = { n = p.hops } } }
    for j = 1, p.pokes do events[#events + 1] = { kind = "Poke", id = "poke-" .. i .. "-" .. j } end
    items[#items + 1] = { id = "h-" .. i, chart = "hop", context = ctx, events = events }
  end
  for i = 1, p.forks do
    local id = "f-" .. i
    items[#items + 1] = { id = id, chart = "pair", context = {}, events = {
      { kind = "Begin", id = id .. "-begin" }, { kind = "Go", id = id .. "-go" } } }
  end
  for i = 1, p.orders do
    local id = "o-" .. i
    items[#items + 1] = { id = id, chart = "order", context = { total = 10 * i, payment_timeout = 3600 }, events = {
      { kind = "PlaceOrder", id = id .. "-place" }, { kind = "Paid", id = id .. "-paid", data = { amount = 10 * i } },
      { kind = "Picked", id = id .. "-picked" }, { kind = "Packed", id = id .. "-packed" },
      { kind = "Go", id = id .. "-go" } } }
  end
  for i = 1, p.timed do
    -- nothing races the timer: Timeout is the only event after Begin
    local id = "t-" .. i
    items[#items + 1] = { id = id, chart = "timed", context = { wait = 0.3 }, events = {
      { kind = "Begin", id = id .. "-begin" } } }
  end
  return items
end

function M.params_env(p)
  local parts = {}
  for k, v in pairs(p) do parts[#parts + 1] = k .. "=" .. tostring(v) end
  table.sort(parts)
  return table.concat(parts, ",")
end

function M.params_from_env(s)
  local p = {}
  for k, v in pairs(M.DEFAULT) do p[k] = v end
  for k, v in (s or ""):gmatch("([%w_]+)=([^,]+)") do p[k] = tonumber(v) end
  return p
end

-- What every execution must end as, by id (children included):
-- { status, outcome, active_path, version, context checks }.
function M.expected(p)
  local out = {}
  for i = 1, p.ring do
    out["h-" .. i] = { status = "RUNNING", active_path = "Live", version = 1 + p.hops + p.pokes,
                       context = { hops = p.hops, pokes = p.pokes } }
  end
  for i = 1, p.forks do
    local id = "f-" .. i
    -- Start, Begin, Go, two Finished
    out[id] = { status = "DONE", outcome = "success", active_path = "Done", version = 5, context = { done = 1 } }
    -- Start, Go (passed on by the parent)
    out[id .. ":Fork.A:0"] = { status = "DONE", outcome = "success", active_path = "Fork.A", version = 2, context = { a1 = 1 } }
    out[id .. ":Fork.B:0"] = { status = "DONE", outcome = "success", active_path = "Fork.B", version = 2, context = { b1 = 1 } }
  end
  for i = 1, p.orders do
    local id = "o-" .. i
    -- Start, PlaceOrder, Paid, Picked, Packed, Go, two Finished
    out[id] = { status = "DONE", outcome = "success", version = 8, context = { attempts = 1 } }
    out[id .. ":Fork.A:0"] = { status = "DONE", outcome = "success", version = 2 }
    out[id .. ":Fork.B:0"] = { status = "DONE", outcome = "success", version = 2 }
  end
  for i = 1, p.timed do
    out["t-" .. i] = { status = "RUNNING", active_path = "TimedOut", version = 3, context = { timeouts = 1, waits = 1 } }
  end
  return out
end

------------------------------------------------------------------------
-- Worker processes

-- A worker: writes its pid, connects (retrying: the proxy may refuse or
-- reset), starts every execution of the workload (idempotent: same ids),
-- sends the caller events of its shard (and, with DUP=1, of the next
-- worker's shard too, so the same event ids come from two processes),
-- retrying each until the engine says it is applied, and runs the engine's
-- worker loop until its sends are done and nothing is pending. MODE=recover
-- only drains with engine:recover(). It counts every error the engine
-- returned and every message it logged.
M.WORKER = [[
  local ms = require "mongostore"
  local engine_mod = require "mongostore.engine"
  local F = require "helpers.faults"
  local pid = io.popen("echo $PPID"):read("l")
  local f = assert(io.open(os.getenv("PIDFILE"), "w"))
  f:write(pid, "\n")
  f:close()
  local p = F.params_from_env(os.getenv("PARAMS"))
  local w, nw = tonumber(os.getenv("W")), tonumber(os.getenv("NW"))
  local dup = os.getenv("DUP") == "1"
  local deadline = ms.now() + tonumber(os.getenv("DEADLINE") or "60")
  local errors, logs, first_logs, first_errors = {}, 0, {}, {}
  local function note(code, msg)
    code = tostring(code)
    errors[code] = (errors[code] or 0) + 1
    if not first_errors[code] then first_errors[code] = tostring(msg) end
  end
  local store, err, code
  repeat
    store, err, code = ms.connect(os.getenv("URI"), { db = os.getenv("DB"), wait = 2 })
    if not store then note(code, err); ms.sleep(0.1) end
  until store or ms.now() > deadline
  if not store then print("ERROR connect: " .. tostring(err)); os.exit(3) end
  local externals = 0
  local engine = engine_mod.new{
    store = store, charts = F.charts(), trace = true, lease = 1, max_attempts = 100000,
    on_external = function() externals = externals + 1 end,
    log = function(msg)
      logs = logs + 1
      if #first_logs < 5 then first_logs[#first_logs + 1] = msg end
    end,
  }
  local recover = os.getenv("MODE") == "recover"
  local items = recover and {} or F.workload(p)
  local function retry(what, fn)
    while true do
      local ok, e, c = fn()
      if ok ~= nil then return ok end
      note(c, e)
      if ms.now() > deadline then print("ERROR " .. what .. ": " .. tostring(e)); os.exit(4) end
      ms.sleep(0.02)
    end
  end
  for _, it in ipairs(items) do
    retry("start " .. it.id, function()
      local ctx = {}
      for k, v in pairs(it.context) do ctx[k] = v end
      return engine:start(it.chart, { id = it.id, context = ctx })
    end)
  end
  local sends = {}
  for i, it in ipairs(items) do
    local shard = (i - 1) % nw
    if shard == w or (dup and shard == (w + 1) % nw) then
      for _, ev in ipairs(it.events) do sends[#sends + 1] = { it.id, ev } end
    end
  end
  local next_send, sent, finished = 1, 0, false
  local function idle()
    local o, s, t = store:pending_outbox(), store:pending_spawns(), store:due_timers(ms.now() + 60)
    return o and s and t and #o == 0 and #s == 0 and #t == 0
  end
  if recover then
    -- what a restarted process does first: drain what crashes left behind
    repeat
      engine:recover()
      finished = idle()
      if not finished then ms.sleep(0.05) end
    until finished or ms.now() > deadline
  end
  if not recover then engine:run{ idle_sleep = 0.02, sweep_interval = 0.05, stop = function()
    -- a few of this worker's sends per pass, between the relays' passes
    for _ = 1, 3 do
      local s = sends[next_send]
      if not s then break end
      local ev = { kind = s[2].kind, id = s[2].id, data = s[2].data or {} }
      local ok, e, c = engine:send(s[1], ev)
      if ok then next_send, sent = next_send + 1, sent + 1 else note(c, e) end
    end
    if ms.now() > deadline then return true end
    finished = next_send > #sends and idle()
    return finished
  end } end
  local parts = {}
  for k, n in pairs(errors) do parts[#parts + 1] = k .. "=" .. n end
  table.sort(parts)
  print(string.format("SUMMARY sent=%d errors=%s logs=%d externals=%d", sent, table.concat(parts, ","), logs, externals))
  for _, m in ipairs(first_logs) do print("LOG " .. m) end
  for c, m in pairs(first_errors) do print("ERRMSG " .. c .. ": " .. m) end
  if not finished then print("ERROR still busy at the deadline"); os.exit(2) end
  print("IDLE")
  local d = io.open(os.getenv("PIDFILE") .. ".done", "w")
  d:write("IDLE\n")
  d:close()
  store:close()
]]

-- Starts a worker process (bounded by `timeout`, so a hung worker ends and
-- is reported instead of hanging the spec). env: URI, DB, W, NW, PARAMS, DUP.
function M.spawn_worker(env, limit)
  local pidfile = os.tmpname()
  os.remove(pidfile)
  env.PIDFILE = pidfile
  local pre = string.format("package.path=%q..package.path;", helper.lua_path())
  local envs = ""
  for k, v in pairs(env) do envs = envs .. k .. "=" .. helper.shell_quote(v) .. " " end
  local cmd = string.format("%stimeout -s KILL %d %s -e %s 2>&1", envs, limit or 120, helper.lua_command(),
    helper.shell_quote(pre .. M.WORKER))
  local f = assert(io.popen(cmd, "r"))
  local h = { pidfile = pidfile }
  function h.pid()
    local deadline = ms.now() + 20
    repeat
      local s = read_file(pidfile)
      local pid = s and s:match("^(%d+)\n")
      if pid then return pid end
      ms.sleep(0.01)
    until ms.now() > deadline
    return nil
  end
  function h.done() return read_file(pidfile .. ".done") ~= nil end
  function h.wait()
    local out = f:read("a")
    local ok, how, status = f:close()
    os.remove(pidfile)
    os.remove(pidfile .. ".done")
    return out, ok and 0 or status, how
  end
  return h
end

-- Parses a worker's SUMMARY line: sent, errors (code -> n), logs, externals.
function M.summary(out)
  local sent, errs, logs, ext = out:match("SUMMARY sent=(%d+) errors=(%S*) logs=(%d+) externals=(%d+)")
  if not sent then return nil end
  local errors = {}
  for k, n in errs:gmatch("([%w_]+)=(%d+)") do errors[k] = tonumber(n) end
  return { sent = tonumber(sent), errors = errors, logs = tonumber(logs), externals = tonumber(ext) }
end

------------------------------------------------------------------------
-- Checks

-- The final state of every execution of the database, read behind the
-- library's back (rawdb), by id: { status, outcome, active_path, version,
-- context, trace_ids, outbox, spawns }.
function M.snapshot(db)
  local raw = require "helpers.rawdb"
  local out = {}
  for _, d in ipairs(raw.docs(db)) do
    local data = type(d.data) == "string" and assert(ms.json.decode(d.data)) or d.data
    local ids = {}
    for _, s in ipairs(d.trace or {}) do ids[#ids + 1] = s.event_id end
    out[d._id] = {
      status = data.status, outcome = data.outcome ~= ms.null and data.outcome or nil,
      active_path = data.active_path, version = d.version, context = data.context,
      trace_ids = ids, outbox = #(d.outbox or {}), spawns = #(d.spawns or {}),
      timers = d.timers,
    }
  end
  return out
end

-- The same snapshot of a database on another server than the suite's
-- (rawdb reads MONGOSTORE_TEST_URI): taken in a child process, as JSON.
function M.snapshot_via(uri, db)
  local h = helper.spawn([[
    local ms = require "mongostore"
    local F = require "helpers.faults"
    io.write("SNAPSHOT ", assert(ms.json.encode(F.snapshot(os.getenv("DB")))), "\n")
  ]], { MONGOSTORE_TEST_URI = uri, DB = db })
  local out, status = h.wait()
  local text = out:match("SNAPSHOT ([^\n]*)")
  assert(status == 0 and text, "snapshot failed: " .. out)
  return assert(ms.json.decode(text))
end

-- Compares a snapshot with M.expected(p); returns a list of differences
-- (empty when every execution is exactly as expected) and the sum of the
-- versions (the events applied).
function M.differences(snap, p)
  local diffs, applied = {}, 0
  local function diff(fmt, ...) diffs[#diffs + 1] = string.format(fmt, ...) end
  local want = M.expected(p)
  for id, e in pairs(want) do
    local s = snap[id]
    if not s then
      diff("%s: missing", id)
    else
      for _, k in ipairs { "status", "outcome", "active_path", "version" } do
        if e[k] ~= nil and s[k] ~= e[k] then diff("%s: %s is %s, expected %s", id, k, tostring(s[k]), tostring(e[k])) end
      end
      for ck, cv in pairs(e.context or {}) do
        if s.context[ck] ~= cv then diff("%s: context.%s is %s, expected %s", id, ck, tostring(s.context[ck]), tostring(cv)) end
      end
      local seen = {}
      for _, eid in ipairs(s.trace_ids) do
        if seen[eid] then diff("%s: event %s applied twice", id, eid) end
        seen[eid] = true
      end
      if #s.trace_ids ~= s.version then diff("%s: %d trace steps for version %d", id, #s.trace_ids, s.version) end
      if s.outbox ~= 0 then diff("%s: %d outbox entries left", id, s.outbox) end
      if s.spawns ~= 0 then diff("%s: %d spawns left", id, s.spawns) end
      applied = applied + (s.version or 0)
    end
  end
  for id in pairs(snap) do
    if not want[id] then diff("%s: an execution nobody asked for", id) end
  end
  table.sort(diffs)
  return diffs, applied
end

function M.count(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n
end

return M
