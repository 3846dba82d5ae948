-- spec/helpers/ngx.lua - what the OpenResty specs share: a check that
-- Debian's nginx, its Lua module, lua-resty-core and mongostore's LuaJIT build
-- are there; an nginx started from examples/openresty/ (rendered into a
-- temporary prefix, on a free loopback port, with its own database), stopped
-- by its PID; and an HTTP client on curl, one request at a time (timed or
-- in the background) or many at once (curl --parallel), with raw exchanges
-- on one connection and their answers read. The specs themselves run under
-- plain Lua 5.4.
local ms = require "mongostore"
local core = require "mongostore.core"
local helper = require "helpers"

local M = {}

local q = helper.shell_quote
local root = helper.root()
M.root = root
M.shell_quote = q

local function sh(cmd)
  local f = assert(io.popen(cmd .. " 2>&1", "r"))
  local out = f:read("a")
  local ok, _, status = f:close()
  return out, ok and 0 or status
end
M.sh = sh

local function exists(path)
  local f = io.open(path, "r")
  if f then f:close() return true end
  return false
end

local function read(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end
M.read = read

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

------------------------------------------------------------------------
-- Prerequisites

-- Raises one message naming everything that is missing and how to get it.
function M.check_prerequisites()
  local missing = {}
  local function need(ok, what) if not ok then missing[#missing + 1] = what end end
  local nginx = sh("command -v nginx || ls /usr/sbin/nginx")
  need(nginx:match("nginx"), "nginx (Debian package nginx)")
  need(exists("/usr/lib/nginx/modules/ngx_http_lua_module.so") and exists("/usr/lib/nginx/modules/ndk_http_module.so"),
    "/usr/lib/nginx/modules/ngx_http_lua_module.so and ndk_http_module.so (Debian package libnginx-mod-http-lua)")
  need(exists("/usr/share/lua/5.1/resty/core.lua"), "resty.core (Debian package lua-resty-core)")
  need(exists(root .. "/build/jit/mongostore/core.so"), "build/jit/mongostore/core.so, mongostore's LuaJIT build (`make jit`)")
  need(sh("command -v curl"):match("curl"), "curl")
  if #missing > 0 then
    error("the OpenResty specs cannot run; missing:\n  - " .. table.concat(missing, "\n  - ") ..
      "\n(`make test` installs the packages and builds the LuaJIT module)", 0)
  end
end

------------------------------------------------------------------------
-- JSON

function M.encode(v)
  return assert(core.json_encode(v))
end

function M.decode(s)
  return core.json_decode(s)
end

------------------------------------------------------------------------
-- nginx

local function free_port()
  local out = sh("python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\", 0)); print(s.getsockname()[1])'")
  local port = tonumber(out:match("^(%d+)"))
  if port then return port end
  return 20000 + math.random(0, 30000)
end
M.free_port = free_port

-- A zombie (exited, not yet reaped by whoever adopted it) counts as gone.
local function alive(pid)
  local stat = read("/proc/" .. pid .. "/stat")
  if stat then return not stat:match("^%d+ %b() Z") end
  local _, status = sh("kill -0 " .. pid)
  return status == 0
end

local render = dofile(root .. "/examples/openresty/render.lua")
M.render = render

-- Runs fn() (which starts a server) with the example's config given one more
-- location, the text `probe`, put before its /ping location; returns what
-- fn returns.
function M.with_probe(probe, fn)
  local original = render.render
  render.render = function(opts)
    local conf = original(opts)
    local f = assert(io.open(conf, "r"))
    local text = f:read("a")
    f:close()
    local patched, n = text:gsub("(\n[ ]*location = /ping)", "\n" .. probe:gsub("%%", "%%%%") .. "%1", 1)
    assert(n == 1, "the example config has no /ping location to put the probe before")
    f = assert(io.open(conf, "w"))
    f:write(patched)
    f:close()
    return conf
  end
  local ok, a = pcall(fn)
  render.render = original
  if not ok then error(a, 0) end
  return a
end

local Server = {}
Server.__index = Server

-- The rendered config with a spec's additions (M.start's opts): `http`,
-- directives put before init_by_lua; `locations`, put before /ping;
-- `package_path`, entries put first in lua_package_path; `configure`, Lua
-- text (fields such as `inbox = false,`) added to msngx.configure's table;
-- `worker`, Lua text added last to msngx.start_worker's table (a field
-- given there wins over the example's own). In each, {{PORT}} is the port.
local function add_to_config(conf, opts, port)
  if not (opts.http or opts.locations or opts.package_path or opts.configure or opts.worker) then return end
  local text = assert(read(conf))
  local function at_port(t) return (t:gsub("{{PORT}}", tostring(port))) end
  local function put(pattern, add, what)
    local n
    text, n = text:gsub(pattern, function(at) return add .. at end, 1)
    assert(n == 1, "the example config has no " .. what)
  end
  if opts.http then put("\n[ ]*init_by_lua_block", "\n" .. at_port(opts.http), "init_by_lua_block") end
  if opts.locations then put("\n[ ]*location = /ping", "\n" .. at_port(opts.locations), "/ping location") end
  if opts.configure then
    put("\n[ ]*run_modules = ", "\n" .. at_port(opts.configure), "run_modules in msngx.configure")
  end
  if opts.worker then
    local n
    text, n = text:gsub("(start_worker%b{})", function(call)
      return call:sub(1, -2) .. "\n" .. at_port(opts.worker) .. "\n}"
    end, 1)
    assert(n == 1, "the example config has no start_worker{...}")
  end
  if opts.package_path then
    local entries = type(opts.package_path) == "table" and table.concat(opts.package_path, ";") or opts.package_path
    local n
    text, n = text:gsub('(lua_package_path ")', function(at) return at .. entries .. ";" end, 1)
    assert(n == 1, "the example config has no lua_package_path")
  end
  write(conf, text)
end

-- nginx started as root runs the example's workers as nobody (never as
-- root), and they read the library, the example and the specs' fixtures
-- from the checkout: when this process is root, make those readable and
-- every directory above the checkout passable (a clone made in a mktemp
-- directory is 0700). Once per process.
local opened = false
local function readable_by_workers()
  if opened then return end
  opened = true
  if not sh("id -u"):match("^0%s*$") then return end
  local abs = sh("cd " .. q(root) .. " && pwd"):gsub("%s+$", "")
  local trees = {}
  for _, t in ipairs { "lua", "examples", "build/jit", "spec" } do trees[#trees + 1] = q(abs .. "/" .. t) end
  os.execute("chmod -R a+rX " .. table.concat(trees, " ") .. " 2>/dev/null")
  local dir = abs
  while dir ~= "" and dir ~= "/" do
    os.execute("chmod a+x " .. q(dir) .. " 2>/dev/null")
    dir = dir:match("^(.*)/[^/]*$") or ""
  end
end

-- Renders the example into a fresh prefix; returns prefix, conf path.
local function new_prefix(port, opts)
  readable_by_workers()
  local prefix = (sh("mktemp -d /tmp/mongostore-ngx.XXXXXX"):gsub("%s+$", ""))
  assert(prefix:match("^/tmp/mongostore%-ngx"), "mktemp failed: " .. prefix)
  local conf = render.render{ prefix = prefix, port = port, workers = opts.workers or 2, threads = opts.threads or 8,
                              vm_pool = opts.vm_pool or tonumber(os.getenv("MONGOSTORE_NGX_VM_POOL") or ""),
                              log_level = "info", start_rate = opts.start_rate or "10000r/s",
                              start_burst = opts.start_burst or 10000 }
  add_to_config(conf, opts, port)
  return prefix, conf
end

-- The example's API tokens in the specs (mongostore.ngx_access): every
-- request of Server:request carries the write token unless told otherwise.
M.READ_TOKEN = "spec-read-token-0123456789"
M.WRITE_TOKEN = "spec-write-token-0123456789"
M.ORIGIN = "https://app.example"
M.AUTH = "Authorization: Bearer " .. M.WRITE_TOKEN

local function env_prefix(db, uri)
  return "MONGOSTORE_URI=" .. q(uri or helper.uri()) .. " MONGOSTORE_DB=" .. q(db) ..
    " MONGOSTORE_API_READ_TOKENS=" .. q(M.READ_TOKEN) .. " MONGOSTORE_API_WRITE_TOKENS=" .. q(M.WRITE_TOKEN) ..
    " MONGOSTORE_API_ORIGINS=" .. q(M.ORIGIN) .. " "
end

-- nginx -t on a rendered config: true, output | false, output.
function M.config_test(prefix, conf, db)
  local cmd = render.command(prefix, conf):gsub(" %-g 'daemon off;'$", "")
  local out, status = sh(env_prefix(db or "mst_ngx_t") .. cmd .. " -t")
  return status == 0 and out:match("test is successful") ~= nil, out
end

-- Starts nginx with the example config on a free port and its own database;
-- returns a server once /ping answers. opts: db, workers, threads, vm_pool,
-- uri (MongoDB's, default the test server's), and additions to the config:
-- http (directives), locations (location blocks), package_path (a list of
-- lua_package_path entries, such as root .. "/spec/fixtures/?.lua").
function M.start(opts)
  opts = opts or {}
  M.check_prerequisites()
  local db = opts.db or helper.fresh_db("ngx")
  local last
  for _ = 1, 5 do
    local port = free_port()
    local prefix, conf = new_prefix(port, opts)
    local ok, out = M.config_test(prefix, conf, db)
    if not ok then error("nginx -t failed on the example config:\n" .. out, 0) end
    -- a simple command in the background: $! is nginx's master itself
    local pid = sh(env_prefix(db, opts.uri) .. render.command(prefix, conf) .. " >" .. q(prefix .. "/logs/stdout.log") ..
      " 2>&1 & echo $!"):match("(%d+)")
    assert(pid, "could not start nginx")
    local s = setmetatable({ pid = pid, port = port, prefix = prefix, conf = conf, db = db,
                             base = "http://127.0.0.1:" .. port }, Server)
    s.guard = setmetatable({}, { __gc = function() s:stop() end }) -- a spec that forgets still stops it
    local deadline = ms.now() + 20
    while ms.now() < deadline do
      if not alive(pid) then break end
      local status, body = s:request("GET", "/ping")
      if status == 200 and body == "pong" then return s end
      ms.sleep(0.05)
    end
    local log = s:log()
    s:stop()
    last = string.format("nginx did not come up on port %d:\n%s", port, log:sub(-3000))
    if not log:match("Address already in use") then break end
  end
  error(last, 0)
end

function Server:log()
  return (read(self.prefix .. "/logs/error.log") or "") .. (read(self.prefix .. "/logs/stdout.log") or "")
end

-- Lines of the error log at level error or worse, or that say a Lua handler
-- failed, less the ones a spec provoked on purpose (patterns in `allow`).
function Server:errors(allow)
  local out = {}
  for line in (read(self.prefix .. "/logs/error.log") or ""):gmatch("[^\n]+") do
    local bad = line:match("%[error%]") or line:match("%[crit%]") or line:match("%[alert%]")
      or line:match("%[emerg%]") or line:match("lua entry thread aborted") or line:match("runtime error")
    if bad then
      for _, p in ipairs(allow or {}) do if line:match(p) then bad = false break end end
    end
    if bad then out[#out + 1] = line end
  end
  return out
end

-- Stops nginx by its PID (the master's; it takes its workers down with it)
-- with a graceful stop (SIGQUIT, what `nginx -s quit` sends), killed after
-- 10 s, and removes the prefix unless MONGOSTORE_KEEP_NGX is set. Returns
-- whether the graceful stop finished by itself, and the seconds it took.
function Server:stop()
  if self.stopped then return self.quit_ok, self.quit_time end
  self.stopped = true
  local pid = self.pid
  local t0, graceful = ms.now(), true
  if alive(pid) then
    sh("kill -QUIT " .. pid)
    local deadline = ms.now() + 10
    while alive(pid) and ms.now() < deadline do ms.sleep(0.02) end
    if alive(pid) then
      graceful = false
      sh("kill -KILL " .. pid)
    end
  end
  self.quit_ok, self.quit_time = graceful, ms.now() - t0
  if not os.getenv("MONGOSTORE_KEEP_NGX") then sh("rm -rf " .. q(self.prefix)) end
  return self.quit_ok, self.quit_time
end

------------------------------------------------------------------------
-- HTTP

local MARK = "\n@@CURL@@ "

-- One request: status, body (decoded when it is JSON), content type, raw body.
-- body: a table (sent as JSON) or a string (sent as it is). headers: a
-- table of name = value sent as well; by default the request carries
-- Authorization with the write token (headers.Authorization = false sends
-- none) and, with a body, Content-Type: application/json (a
-- headers["Content-Type"] replaces it, false sends none).
function Server:request(method, path, body, headers)
  headers = headers or {}
  -- HEAD: curl --head, which expects no body (-X HEAD would wait for one)
  local cmd = { "curl -sS --max-time 30", method == "HEAD" and "--head" or ("-X " .. method),
                "-w", q(MARK .. "%{http_code} %{content_type}") }
  local auth = headers.Authorization
  if auth == nil then auth = "Bearer " .. M.WRITE_TOKEN end
  if auth then cmd[#cmd + 1] = "-H " .. q("Authorization: " .. auth) end
  for k, v in pairs(headers) do
    if k ~= "Authorization" and k ~= "Content-Type" and v then cmd[#cmd + 1] = "-H " .. q(k .. ": " .. v) end
  end
  local send_type = headers["Content-Type"]
  if send_type == nil and body ~= nil then send_type = "application/json" end
  if send_type then cmd[#cmd + 1] = "-H " .. q("Content-Type: " .. send_type) end
  -- none at all: curl would add its form type to a body
  if send_type == false and body ~= nil then cmd[#cmd + 1] = "-H 'Content-Type:'" end
  if body ~= nil then
    if type(body) == "table" then body = M.encode(body) end
    local file = self.prefix .. "/body.json"
    write(file, body)
    cmd[#cmd + 1] = "--data-binary @" .. q(file)
  end
  cmd[#cmd + 1] = q(self.base .. path)
  local out = sh(table.concat(cmd, " "))
  local raw, status, ctype = out:match("^(.*)" .. MARK:gsub("%p", "%%%0") .. "(%d+) ?(.-)%s*$")
  if not raw then return nil, out end
  status = tonumber(status)
  local decoded = raw
  if ctype:match("json") then
    decoded = M.decode(raw)
    if decoded == nil then decoded = raw end
  end
  return status, decoded, ctype, raw
end

-- Sends raw bytes on one connection and returns everything the server
-- answers until it closes the connection (send "Connection: close"). The
-- write token's Authorization header is put after the request line unless
-- opts.anonymous.
function Server:raw(bytes, opts)
  if not (opts and opts.anonymous) then
    local line, rest = bytes:match("^([^\r\n]*\r\n)(.*)$")
    if line then bytes = line .. M.AUTH .. "\r\n" .. rest end
  end
  local script = [[
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=20)
s.sendall(sys.stdin.buffer.read())
data = b""
while True:
    chunk = s.recv(65536)
    if not chunk: break
    data += chunk
sys.stdout.buffer.write(data)
]]
  local file = self.prefix .. "/raw.bin"
  write(file, bytes)
  return (sh("python3 -c " .. q(script) .. " " .. self.port .. " < " .. q(file)))
end

-- The status, headers (lower-case names) and body of a raw HTTP answer,
-- the body's chunks joined when it came chunked; nil, {}, text when text
-- holds no answer's head.
function M.parse_response(text)
  local head, rest = text:match("^(.-)\r\n\r\n(.*)$")
  if not head then return nil, {}, text end
  local headers = {}
  for name, value in head:gmatch("\r\n([^:\r\n]+):%s*([^\r\n]*)") do headers[name:lower()] = value end
  if (headers["transfer-encoding"] or ""):lower():find("^chunked") then
    local body, pos = {}, 1
    while true do
      local size, at = rest:match("^(%x+)\r\n()", pos)
      if not size or tonumber(size, 16) == 0 then break end
      body[#body + 1] = rest:sub(at, at + tonumber(size, 16) - 1)
      pos = at + tonumber(size, 16) + 2
    end
    rest = table.concat(body)
  end
  return tonumber(head:match("^HTTP/1%.%d (%d+)")), headers, rest
end

-- One raw exchange (Server:raw) read by parse_response: status, headers,
-- body.
function Server:exchange(bytes, opts)
  return M.parse_response(self:raw(bytes, opts))
end

-- Server:request with the seconds it took as a third value: status,
-- decoded body, seconds.
function Server:timed(method, path, body, headers)
  local t0 = ms.now()
  local status, decoded = self:request(method, path, body, headers)
  return status, decoded, ms.now() - t0
end

-- A POST of body (a table, sent as JSON) in the background: done() says
-- whether its answer is in, answer() gives the body read (nil before).
function Server:background(path, body)
  local dir = self.prefix .. "/bg" .. tostring(math.random(1, 1e9))
  assert(os.execute("mkdir -p " .. q(dir)))
  write(dir .. "/body.json", M.encode(body))
  local rc = dir .. "/rc"
  local cmd = string.format("curl -sS --max-time 30 -H 'Content-Type: application/json' --data-binary @%s -o %s %s;"
    .. " echo $? > %s.tmp; mv %s.tmp %s", q(dir .. "/body.json"), q(dir .. "/out"), q(self.base .. path),
    q(rc), q(rc), q(rc))
  sh("sh -c " .. q(cmd) .. " >/dev/null 2>&1 &")
  return {
    done = function() return read(rc) ~= nil end,
    answer = function() return read(dir .. "/out") end,
  }
end

function Server:get(path) return self:request("GET", path) end
function Server:post(path, body) return self:request("POST", path, body or {}) end

-- Many requests at once through one curl --parallel: reqs is a list of
-- { method, path, body? }. Returns a list (in the order given) of
-- { status, time (seconds), body }, and the wall time of the whole batch.
function Server:parallel(reqs, max)
  local dir = self.prefix .. "/batch" .. tostring(math.random(1, 1e9))
  assert(os.execute("mkdir -p " .. q(dir)))
  local cfg = {}
  local function cq(s) return '"' .. s:gsub('\\', '\\\\'):gsub('"', '\\"') .. '"' end
  for i, r in ipairs(reqs) do
    if i > 1 then cfg[#cfg + 1] = "next" end
    cfg[#cfg + 1] = "url = " .. cq(self.base .. r[2])
    cfg[#cfg + 1] = "request = " .. cq(r[1])
    cfg[#cfg + 1] = "output = " .. cq(dir .. "/" .. i .. ".out")
    cfg[#cfg + 1] = "max-time = 30"
    cfg[#cfg + 1] = "header = " .. cq(M.AUTH)
    cfg[#cfg + 1] = "write-out = " .. cq("\\n@@ " .. i .. " %{http_code} %{time_total}\\n")
    if r[3] ~= nil then
      local file = dir .. "/" .. i .. ".json"
      write(file, type(r[3]) == "table" and M.encode(r[3]) or r[3])
      cfg[#cfg + 1] = "header = \"Content-Type: application/json\""
      cfg[#cfg + 1] = "data-binary = " .. cq("@" .. file)
    end
  end
  write(dir .. "/curl.cfg", table.concat(cfg, "\n") .. "\n")
  local t0 = ms.now()
  local out = sh(string.format("curl -sS --no-progress-meter --parallel --parallel-immediate --parallel-max %d -K %s",
    max or #reqs, q(dir .. "/curl.cfg")))
  local wall = ms.now() - t0
  local res = {}
  for i, code, t in out:gmatch("@@ (%d+) (%d+) ([%d%.]+)") do
    res[tonumber(i)] = { status = tonumber(code), time = tonumber(t) }
  end
  for i = 1, #reqs do
    if not res[i] then res[i] = { status = 0, time = 0, body = out:sub(1, 300) } end
    res[i].body = res[i].body or read(dir .. "/" .. i .. ".out")
  end
  sh("rm -rf " .. q(dir))
  return res, wall
end

-- A /ping loop in the background, one request after another on fresh
-- connections, until :stop(); then returns { {status, time}, ... }.
function Server:pinger()
  local file = self.prefix .. "/pings.txt"
  local stopfile = self.prefix .. "/pings.stop"
  os.remove(stopfile)
  local script = string.format(
    "while [ ! -e %s ]; do curl -s -o /dev/null --max-time 10 -w '%%{http_code} %%{time_total}\\n' %s; done > %s 2>&1",
    q(stopfile), q(self.base .. "/ping"), q(file))
  local pid = sh("sh -c " .. q(script) .. " >/dev/null 2>&1 & echo $!"):match("(%d+)")
  assert(pid, "could not start the ping loop")
  return {
    stop = function()
      write(stopfile, "")
      local deadline = ms.now() + 15
      while alive(pid) and ms.now() < deadline do ms.sleep(0.02) end
      local out = {}
      for code, t in (read(file) or ""):gmatch("(%d+) ([%d%.]+)") do
        out[#out + 1] = { status = tonumber(code), time = tonumber(t) }
      end
      return out
    end,
  }
end

------------------------------------------------------------------------
-- Raw state, read behind the library's back (pymongo, spec/helpers/rawdb.lua)

-- One Python process (pymongo) digests every document of the database's
-- executions and counters collections: { ["executions/<_id>"] = sha256 of
-- its canonical extended JSON, ... }. Two snapshots are equal when nothing
-- was written in between; M.changes names what differs.
local SNAPSHOT_PY = [==[
import hashlib, os, sys
import pymongo, pymongo.common
from bson import json_util
from bson.codec_options import CodecOptions
# mongo-java-server reports wire version 8, below what a current pymongo takes
pymongo.common.MIN_SUPPORTED_WIRE_VERSION = min(pymongo.common.MIN_SUPPORTED_WIRE_VERSION, 6)
client = pymongo.MongoClient(os.environ["SNAP_URI"], serverSelectionTimeoutMS=10000)
db = client[os.environ["SNAP_DB"]]
opts = CodecOptions(unicode_decode_error_handler="surrogateescape")
for name in ("executions", "counters"):
    for doc in db[name].with_options(codec_options=opts).find({}).sort("_id", 1):
        text = json_util.dumps(doc, sort_keys=True, json_options=json_util.CANONICAL_JSON_OPTIONS)
        key = json_util.dumps(doc.get("_id"), json_options=json_util.CANONICAL_JSON_OPTIONS)
        digest = hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()
        sys.stdout.write("%s/%s\t%s\n" % (name, key, digest))
sys.stdout.flush()
os._exit(0)
]==]

-- The Python with pymongo: MONGOSTORE_PYTHON (tools/run-suites sets it),
-- else the one tools/pyenv prints, else python3.
local snapshot_python
local function python()
  if snapshot_python then return snapshot_python end
  local py = os.getenv("MONGOSTORE_PYTHON") or ""
  if py == "" and exists(root .. "/tools/pyenv") then
    local f = io.popen("env -u LD_PRELOAD " .. q(root .. "/tools/pyenv") .. " 2>/dev/null", "r")
    py = f and (f:read("a"):match("([^\n]+)%s*$") or "") or ""
    if f then f:close() end
    if not exists(py) then py = "" end
  end
  if py == "" then py = "python3" end
  snapshot_python = q(py)
  return snapshot_python
end

function M.snapshot(db)
  local f = assert(io.popen("env -u LD_PRELOAD SNAP_URI=" .. q(helper.uri()) .. " SNAP_DB=" .. q(db) .. " " ..
    python() .. " -c " .. q(SNAPSHOT_PY) .. " 2>&1", "r"))
  local out = f:read("a")
  local ok = f:close()
  if not ok then error("snapshot failed: " .. out, 2) end
  local snap = {}
  for key, digest in out:gmatch("([^\t\n]+)\t(%x+)\n") do snap[key] = digest end
  return snap
end

-- nil when two snapshots are equal, else the documents added, removed or changed.
function M.changes(before, after)
  local out = {}
  for k, v in pairs(after) do
    if before[k] == nil then
      out[#out + 1] = "added " .. k
    elseif before[k] ~= v then
      out[#out + 1] = "changed " .. k
    end
  end
  for k in pairs(before) do if after[k] == nil then out[#out + 1] = "removed " .. k end end
  if #out == 0 then return nil end
  table.sort(out)
  return table.concat(out, "; ")
end

-- How many documents a snapshot holds in one collection.
function M.count(snap, coll)
  local n = 0
  for k in pairs(snap) do if k:sub(1, #coll + 1) == coll .. "/" then n = n + 1 end end
  return n
end

------------------------------------------------------------------------
-- Small things

-- Polls fn until it returns a truthy value (returned) or timeout seconds pass.
function M.poll(fn, timeout, interval)
  local deadline = ms.now() + (timeout or 10)
  while true do
    local v = fn()
    if v then return v end
    if ms.now() > deadline then return nil end
    ms.sleep(interval or 0.05)
  end
end

-- Waits (up to timeout seconds) until database db has no outbox entry
-- pending: the example's worker has delivered what was emitted (its
-- Charges go to its stand-in gateway), so the documents hold still and a
-- snapshot taken now is not changed by a late ack. Returns whether it did.
function M.outbox_settled(db, timeout)
  local store = assert(ms.connect(helper.uri(), { db = db, wait = 10 }))
  local done = M.poll(function()
    local entries = store:pending_outbox()
    return entries ~= nil and #entries == 0
  end, timeout or 20, 0.05)
  store:close()
  return done == true
end

-- { min, median, p95, max, n } of a list of numbers.
function M.stats(xs)
  local s = {}
  for i, x in ipairs(xs) do s[i] = x end
  table.sort(s)
  local n = #s
  if n == 0 then return { n = 0 } end
  local function at(p) return s[math.max(1, math.min(n, math.ceil(p * n)))] end
  return { n = n, min = s[1], median = at(0.5), p95 = at(0.95), max = s[n] }
end

-- Percent-encodes a query argument.
function M.urlencode(s)
  return (tostring(s):gsub("[^%w%-%._~]", function(c) return string.format("%%%02X", c:byte()) end))
end

function M.ms(x) return x and string.format("%.1f ms", x * 1000) or "-" end

return M
