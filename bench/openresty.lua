-- bench/openresty.lua <uri> [--seconds S] [--connections C] [--burst S] [--burst-connections C] [--timeout S]
--                           [--db NAME]
-- The OpenResty load rows: the example server (examples/openresty, real
-- nginx, 2 workers) driven by wrk over HTTP, each figure checked against the
-- database afterwards (nothing lost, nothing applied twice):
--   create      POST /executions, unique ids: creates/s; every 201 is one execution
--   events      POST /executions/{id}/events (PlaceOrder) over 1,000 executions: events/s;
--               every 202 is one applied event
--   hot.send    C connections sending to one execution: events/s and the
--               answers that were not 202 (409 conflicts); its version counts
--               every accepted event once
--   hot.inbox   the same execution's events through the inbox (msngx.enqueue):
--               enqueues/s, and how fast nginx's own worker drains them, side
--               by side with a second nginx configured with inbox_group = 1
--               (one commit per event, as before the group commit)
--   timers      a burst of orders with a payment timeout of --timeout seconds
--               (created and placed for --burst seconds over
--               --burst-connections connections, each its own wrk thread so
--               that an order's create comes before its PlaceOrder): how late
--               each Timeout fired after its due time (p50, p99, max), fired/due
-- Each row's executions are deleted once it is checked: mongo-java-server
-- answers a commit's update (a filter of more than _id) by scanning the
-- collection, so rows run on what earlier rows left would measure the
-- collection's size, not the row.
-- Prints "RESULT openresty.<key> <value>" lines (bench/run.sh --openresty).
local here = arg[0]:match("^(.*)/bench/[^/]*$") or "."
package.path = here .. "/spec/?.lua;" .. here .. "/spec/?/init.lua;" .. here .. "/lua/?.lua;" .. here
  .. "/lua/?/init.lua;" .. package.path
package.cpath = here .. "/?.so;" .. package.cpath

local ms = require "mongostore"
local H = require "helpers.ngx"

local uri = arg[1]
if not uri or uri:sub(1, 1) == "-" then
  io.stderr:write("usage: lua5.4 bench/openresty.lua <uri> [--seconds S] [--connections C] [--burst S]\n")
  os.exit(2)
end
local opts = { seconds = 5, connections = 64, burst = 10, ["burst-connections"] = 16, timeout = 5,
               db = "msbench_ngx_" .. tostring(os.time()) }
for i = 2, #arg, 2 do
  local k = arg[i]:match("^%-%-(.+)$")
  if not k or opts[k] == nil then io.stderr:write("openresty.lua: unknown option ", arg[i], "\n") os.exit(2) end
  opts[k] = k == "db" and arg[i + 1] or tonumber(arg[i + 1])
end

local function result(key, value)
  if type(value) == "number" and value % 1 ~= 0 then value = string.format("%.3f", value) end
  io.stdout:write(string.format("RESULT openresty.%s %s\n", key, tostring(value)))
  io.stdout:flush()
end

local function sh(cmd)
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("a")
  p:close()
  return out
end

if sh("command -v wrk"):match("^%s*$") then
  result("missing", "wrk")
  io.stderr:write("openresty.lua: wrk is not installed (tools/deps.sh bench installs it)\n")
  os.exit(0)
end

-- wrk's script: the request each call makes (a Lua chunk that sets
-- `request`), and a response counter that prints "STATUS <code> <n>".
local WRK_COMMON = [[
local counts = {}
local threads = {}
function setup(thread)
  thread:set("tid", #threads + 1)
  threads[#threads + 1] = thread
end
function init(args)
  n = 0
  statuses = {}
end
function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end
function done(summary, latency, requests)
  local total = {}
  for _, t in ipairs(threads) do
    local s = t:get("statuses")
    for code, c in pairs(s or {}) do total[code] = (total[code] or 0) + c end
  end
  for code, c in pairs(total) do io.write("STATUS ", code, " ", c, "\n") end
  io.write(string.format("LATENCY %.3f %.3f\n", latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
]]

-- threads: wrk's threads (default 2, at most the connections); with one
-- connection a thread, each connection's requests go in the order made.
local function wrk(script, seconds, connections, path, threads)
  local f = os.tmpname()
  local fh = assert(io.open(f, "w"))
  -- every request carries the example's write token (mongostore.ngx_access)
  fh:write(string.format('HDR = { ["Content-Type"] = "application/json", Authorization = %q }\n',
    "Bearer " .. H.WRITE_TOKEN), WRK_COMMON, script)
  fh:close()
  threads = math.min(threads or 2, connections)
  local out = sh(string.format("wrk -t%d -c%d -d%ds --timeout 10s -s %s %s%s", threads, connections, seconds, f,
    H.base_url, path or "/"))
  os.remove(f)
  local got = { statuses = {}, total = 0 }
  for code, c in out:gmatch("STATUS (%d+) (%d+)") do
    got.statuses[tonumber(code)] = tonumber(c)
    got.total = got.total + tonumber(c)
  end
  got.p50, got.p99 = out:match("LATENCY ([%d.]+) ([%d.]+)")
  got.p50, got.p99 = tonumber(got.p50), tonumber(got.p99)
  got.out = out
  return got
end

local ENQUEUE = [[
        location = /_enqueue {
            content_by_lua_block {
                local msngx = require "mongostore.ngx"
                local core = require "mongostore.core"
                ngx.req.read_body()
                local req = core.json_decode(ngx.req.get_body_data() or "")
                local ok, how, code = msngx.enqueue(req.id, req.event)
                if not ok then ngx.status = code == "invalid" and 400 or 503 end
                ngx.say(how)
            }
        }
]]

local server = H.start{ workers = 2, db = opts.db, uri = uri, locations = ENQUEUE }
H.base_url = server.base
local store = assert(ms.connect(uri, { db = opts.db, wait = 10 }))
local db = assert(ms.database(uri, { db = opts.db, wait = 10 })) -- the raw documents, for the checks
local exes = assert(db:collection("executions"))

local function count(filter)
  return assert(exes:count(filter or {}))
end

-- a checked row's executions go, so that the next row's commits do not pay
-- for them (see above)
local function forget(prefix)
  assert(exes:delete_many({ _id = { ["$regex"] = "^" .. prefix } }))
end

local ok_all = true
local function check(name, cond, detail)
  result("check." .. name, cond and "ok" or ("FAILED " .. tostring(detail)))
  if not cond then ok_all = false end
end

-- creates
local create = wrk([[
request = function()
  n = n + 1
  local body = string.format('{"chart":"order","id":"c-%d-%d","context":{"total":30}}', wrk.thread:get("tid"), n)
  return wrk.format("POST", "/executions", HDR, body)
end
]], opts.seconds, opts.connections)
local created = create.statuses[201] or 0
result("create.per_s", created / opts.seconds)
result("create.p50_ms", create.p50)
result("create.p99_ms", create.p99)
result("create.other", create.total - created)
-- a request still in flight when wrk stops is carried out but not counted:
-- what the database holds is between the answers counted and that plus the
-- connections; anything else is a loss or a double
local function within(stored, answered, what)
  check(what, stored >= answered and stored <= answered + opts.connections,
        string.format("%d stored vs %d answered (+ at most %d in flight)", stored, answered, opts.connections))
end
within(count({ _id = { ["$regex"] = "^c-" } }), created, "create")
forget("c-")

-- events over 1,000 executions
for i = 1, 1000 do
  local status = server:post("/executions", { chart = "order", id = "e-" .. i, context = { total = 30 } })
  assert(status == 201, "could not create e-" .. i)
end
local events = wrk([[
request = function()
  n = n + 1
  local id = "e-" .. ((n * 7 + wrk.thread:get("tid")) % 1000 + 1)
  local body = string.format('{"kind":"Paid","data":{},"id":"ev-%d-%d"}', wrk.thread:get("tid"), n)
  return wrk.format("POST", "/executions/" .. id .. "/events", HDR, body)
end
]], opts.seconds, opts.connections)
local applied = events.statuses[202] or 0
result("events.per_s", applied / opts.seconds)
result("events.p50_ms", events.p50)
result("events.p99_ms", events.p99)
result("events.other", events.total - applied)
local versions = 0
for d in assert(exes:find({ _id = { ["$regex"] = "^e-" } }, { projection = { version = 1 } })):each() do
  versions = versions + (tonumber(tostring(d.version)) or 0) - 1 -- version 1 is the create
end
within(versions, applied, "events")
forget("e-")

-- one hot execution, sent to directly
assert(server:post("/executions", { chart = "order", id = "hot-1", context = { total = 30 } }) == 201)
local hot = wrk([[
request = function()
  n = n + 1
  local body = string.format('{"kind":"Paid","data":{},"id":"h-%d-%d"}', wrk.thread:get("tid"), n)
  return wrk.format("POST", "/executions/hot-1/events", HDR, body)
end
]], opts.seconds, opts.connections)
local hot_ok = hot.statuses[202] or 0
result("hot.send.per_s", hot_ok / opts.seconds)
result("hot.send.conflicts", hot.statuses[409] or 0)
result("hot.send.other", hot.total - hot_ok - (hot.statuses[409] or 0))
result("hot.send.p99_ms", hot.p99)
local hv = assert(store:load("hot-1")).version
within(hv - 1, hot_ok, "hot.send")
forget("hot-1")

-- the same through the inbox: this nginx (inbox_group left at its default)
-- and, side by side, one configured with inbox_group = 1, one commit per
-- event; the same enqueue load on each, timed from the first enqueue until
-- its inbox is empty and the execution holds every event
local function inbox_row(key, srv, sstore, sdb, id)
  assert(srv:post("/executions", { chart = "order", id = id, context = { total = 30 } }) == 201)
  H.base_url = srv.base
  local t0 = ms.now()
  local inbox = wrk(string.format([[
request = function()
  n = n + 1
  local body = string.format('{"id":"%s","event":{"kind":"Paid","data":{},"id":"q-%%d-%%d"}}', wrk.thread:get("tid"), n)
  return wrk.format("POST", "/_enqueue", HDR, body)
end
]], id), opts.seconds, opts.connections)
  H.base_url = server.base
  local queued = inbox.statuses[200] or 0
  result(key .. ".enqueued_per_s", queued / opts.seconds)
  local drained_at
  local deadline = ms.now() + 600
  local inbox_coll = assert(sdb:collection("inbox"))
  while ms.now() < deadline do
    local v = assert(sstore:load(id)).version
    if v - 1 >= queued and assert(inbox_coll:count({})) == 0 then
      drained_at = ms.now()
      break
    end
    ms.sleep(0.1)
  end
  if drained_at then
    result(key .. ".applied_per_s", queued / (drained_at - t0))
    result(key .. ".drain_s", drained_at - t0)
  end
  local v2 = assert(sstore:load(id)).version
  check(key .. ".drained", drained_at ~= nil, "the inbox did not drain in 600 s")
  within(v2 - 1, queued, key)
  return drained_at and queued / (drained_at - t0)
end
local grouped = inbox_row("hot.inbox", server, store, db, "hot-2")
forget("hot-2")
do
  local one_db = opts.db .. "_g1"
  local one = H.start{ workers = 2, db = one_db, uri = uri, locations = ENQUEUE, configure = "inbox_group = 1," }
  local ostore = assert(ms.connect(uri, { db = one_db, wait = 10 }))
  local odb = assert(ms.database(uri, { db = one_db, wait = 10 }))
  local single = inbox_row("hot.inbox1", one, ostore, odb, "hot-3")
  if grouped and single then result("hot.inbox.ratio", grouped / single) end
  result("errors.inbox1", #one:errors({ "conflict", "too many calls", "timed out" }))
  ostore:close()
  odb:close()
  one:stop()
end

-- timer lag after a burst: orders created and placed with a short payment timeout
local burst = wrk(string.format([[
request = function()
  n = n + 1
  local k = math.floor((n + 1) / 2)
  local id = string.format("t-%%d-%%d", wrk.thread:get("tid"), k)
  if n %% 2 == 1 then
    return wrk.format("POST", "/executions", HDR,
      string.format('{"chart":"order","id":"%%s","context":{"total":30,"payment_timeout":%s}}', id))
  end
  return wrk.format("POST", "/executions/" .. id .. "/events", HDR,
    string.format('{"kind":"PlaceOrder","data":{},"id":"po-%%s"}', id))
end
]], tostring(opts.timeout)), opts.burst, opts["burst-connections"], nil, opts["burst-connections"])
result("timers.timeout_s", opts.timeout)
result("timers.burst_connections", opts["burst-connections"])
result("timers.burst_requests", burst.total)
result("timers.burst_per_s", burst.total / opts.burst)
-- wait until no timer is armed any more (or 120 s past the last due time),
-- then read when each timer fired
local placed, lags = 0, {}
local wait_until = ms.now() + opts.timeout + 120
local ids = {}
for d in assert(exes:find({ _id = { ["$regex"] = "^t-" } }, { projection = { _id = 1 } })):each() do
  ids[#ids + 1] = d._id
end
repeat
  ms.sleep(0.5)
  local armed = 0
  for _, t in ipairs(assert(store:due_timers(ms.now() + 1e9))) do
    if t.execution_id:sub(1, 2) == "t-" then armed = armed + 1 end
  end
until armed == 0 or ms.now() > wait_until
for _, id in ipairs(ids) do
  local d = { _id = id }
  local steps = store:read_trace(d._id) or {}
  local placed_at, fired_at
  for _, s in ipairs(steps) do
    if s.event == "PlaceOrder" then placed_at = s.at end
    if s.event == "Timeout" then fired_at = s.at end
  end
  if placed_at then
    placed = placed + 1
    if fired_at then lags[#lags + 1] = fired_at - (placed_at + opts.timeout) end
  end
end
table.sort(lags)
local function pct(p) return lags[math.max(1, math.ceil(#lags * p))] end
result("timers.due", placed)
result("timers.fired", #lags)
if #lags > 0 then
  result("timers.lag_p50_s", pct(0.5))
  result("timers.lag_p99_s", pct(0.99))
  result("timers.lag_max_s", lags[#lags])
end
check("timers", #lags == placed, string.format("%d fired of %d due", #lags, placed))
result("errors", #server:errors({ "conflict", "too many calls", "timed out" }))

store:close()
server:stop()
if not ok_all then os.exit(1) end
