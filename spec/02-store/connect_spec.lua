-- spec/02-store/connect_spec.lua - connect: waiting for a server that starts
-- late, unreachable and malformed URIs, passwords kept out of messages,
-- collection names with a prefix, indexes made idempotently, and close.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local raw = require "helpers.rawdb"

local function sh(cmd)
  local f = assert(io.popen(cmd, "r"))
  local out = f:read("a")
  local ok, _, status = f:close()
  return out, ok and 0 or status
end

-- A loopback port nobody listens on (bound by the kernel, then released).
local function free_port()
  local out, status = sh([[env -u LD_PRELOAD python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()']])
  assert(status == 0, "cannot pick a free port: " .. out)
  return assert(tonumber(out:match("%d+")))
end

local function alive(pid)
  local _, status = sh("kill -0 " .. pid .. " 2>/dev/null")
  return status == 0
end

local function elapsed_since(t0) return ms.now() - t0 end

local PASSWORD = "s3cretpw"

local function assert_no_password(msg, ...)
  lu.assertIsString(msg)
  lu.assertNil(msg:find(PASSWORD, 1, true), "the password appears in: " .. msg)
  for _, other in ipairs { ... } do
    lu.assertNil(msg:find(other, 1, true), "the password appears in: " .. msg)
  end
end

TestConnect = {}

function TestConnect:setUp()
  self.stores = {}
end

function TestConnect:tearDown()
  for _, s in ipairs(self.stores) do s:close() end
  if self.server_pid then
    sh("kill -TERM " .. self.server_pid .. " 2>/dev/null")
    for _ = 1, 100 do
      if not alive(self.server_pid) then break end
      ms.sleep(0.1)
    end
    if alive(self.server_pid) then sh("kill -KILL " .. self.server_pid .. " 2>/dev/null") end
    self.server_pid = nil
  end
  if self.tmpdir then sh("rm -rf " .. helper.shell_quote(self.tmpdir)) end
end

function TestConnect:keep(store)
  self.stores[#self.stores + 1] = store
  return store
end

function TestConnect:test_connect_gives_a_working_store()
  local db = helper.fresh_db("connect")
  local store, err, code = ms.connect(helper.uri(), { db = db, wait = 10 })
  lu.assertNotNil(store, tostring(err) .. " " .. tostring(code))
  self:keep(store)
  local exe = ms.execution { definition_id = "d" }
  lu.assertTrue(store:save(exe))
  lu.assertEquals(store:load(exe.id).version, 1)
  lu.assertNotNil(raw.doc(db, exe.id), "the store did not write to opts.db")
end

-- Starts the bundled test server on `port` after `delay` seconds, in the
-- background; returns its pid. Skips when the server cannot be run here.
function TestConnect:start_server_later(port, delay)
  local root = helper.root()
  local _, fetched = sh("env -u LD_PRELOAD " .. helper.shell_quote(root .. "/tools/test-server") .. " fetch >/dev/null 2>&1")
  local _, has_java = sh("command -v java >/dev/null 2>&1")
  if fetched ~= 0 or has_java ~= 0 then
    lu.skip("needs java and the mongo-java-server jars (tools/test-server fetch) to start a server late")
  end
  local cache = os.getenv("MONGOSTORE_CACHE")
  if not cache or cache == "" then
    cache = os.getenv("HOME") .. "/.cache/mongostore/mongo-java-server-1.47.0"
  end
  self.tmpdir = os.tmpname()
  os.remove(self.tmpdir)
  sh("mkdir -p " .. helper.shell_quote(self.tmpdir))
  self.server_log = self.tmpdir .. "/server.log"
  -- java runs Launcher.java straight from source; exec keeps the pid
  local cmd = string.format(
    "(sleep %d; exec env -u LD_PRELOAD java -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xss512k -cp %s %s 127.0.0.1 %d) </dev/null >%s 2>&1 & echo $!",
    delay, helper.shell_quote(cache .. "/jars/*"), helper.shell_quote(root .. "/tools/mongo-server/Launcher.java"),
    port, helper.shell_quote(self.server_log))
  local out = sh(cmd)
  self.server_pid = assert(out:match("%d+"), "no pid from: " .. out)
  return self.server_pid
end

function TestConnect:test_connect_waits_for_a_server_that_starts_late()
  local port = free_port()
  local uri = "mongodb://127.0.0.1:" .. port
  self:start_server_later(port, 4)
  local db = helper.fresh_db("late")
  -- nothing listens yet: a short wait fails
  local early, _, early_code = ms.connect(uri, { db = db, wait = 0.5 })
  if early then self:keep(early) end
  lu.assertNil(early, "connected before the server started")
  lu.assertTrue(early_code == "unavailable" or early_code == "network", tostring(early_code))
  -- a long wait outlasts the late start
  local store, err, code = ms.connect(uri, { db = db, wait = 90 })
  if not store then
    local f = io.open(self.server_log)
    local log = f and f:read("a") or ""
    if f then f:close() end
    lu.fail("connect did not wait for the late server: " .. tostring(err) .. " (" .. tostring(code) .. ")\n" .. log)
  end
  self:keep(store)
  local exe = ms.execution { definition_id = "late", context = { ok = true } }
  lu.assertTrue(store:save(exe))
  lu.assertEquals(store:load(exe.id).context, { ok = true })
end

function TestConnect:test_unreachable_uri_fails_within_wait()
  local port = free_port()
  local t0 = ms.now()
  local store, msg, code = ms.connect("mongodb://127.0.0.1:" .. port, { db = "x", wait = 1 })
  local took = elapsed_since(t0)
  if store then self:keep(store) end
  lu.assertNil(store)
  lu.assertIsString(msg)
  lu.assertTrue(#msg > 0)
  lu.assertTrue(code == "unavailable" or code == "network", "code " .. tostring(code) .. ": " .. msg)
  lu.assertStrContains(msg:lower(), "connect")
  lu.assertTrue(took < 20, string.format("wait = 1 took %.1f s", took))
end

function TestConnect:test_blackholed_host_does_not_hang_past_wait()
  -- a non-routable address with a long connect timeout in the URI: wait bounds it
  local t0 = ms.now()
  local store, msg, code = ms.connect("mongodb://10.255.255.1:27017/?connectTimeoutMS=60000", { db = "x", wait = 1 })
  local took = elapsed_since(t0)
  if store then self:keep(store) end
  lu.assertNil(store)
  lu.assertTrue(code == "unavailable" or code == "network" or code == "timeout",
    "code " .. tostring(code) .. ": " .. tostring(msg))
  lu.assertTrue(took < 20, string.format("wait = 1 took %.1f s", took))
end

function TestConnect:test_malformed_uris_are_invalid_at_once()
  local bad = {
    "", "not a uri", "mongodb://", "http://127.0.0.1:27017", "mongodb://127.0.0.1:notaport",
    "mongodb://127.0.0.1:99999",
  }
  for _, uri in ipairs(bad) do
    local t0 = ms.now()
    local ok, store, msg, code = pcall(ms.connect, uri, { db = "x", wait = 30 })
    local took = elapsed_since(t0)
    lu.assertTrue(ok, "connect raised for " .. uri .. ": " .. tostring(store))
    if store then self:keep(store) end
    lu.assertNil(store, "connected with " .. uri)
    lu.assertIsString(msg)
    lu.assertEquals(code, "invalid", uri .. ": " .. tostring(msg))
    lu.assertTrue(took < 25, string.format("%q was retried for %.1f s", uri, took))
  end
end

function TestConnect:test_password_never_appears_in_a_message()
  local port = free_port()
  local cases = {
    -- unreachable
    { uri = "mongodb://user:" .. PASSWORD .. "@127.0.0.1:" .. port .. "/?serverSelectionTimeoutMS=500", wait = 0.5 },
    -- malformed in several ways
    { uri = "mongodb://user:" .. PASSWORD .. "@127.0.0.1:notaport", wait = 0.5 },
    { uri = "mongodb://user:" .. PASSWORD .. "@/", wait = 0.5 },
    { uri = "mongodb://user:" .. PASSWORD .. "@127.0.0.1:" .. port .. "/?authMechanism=NOPE", wait = 0.5 },
    { uri = "mongodb://user:" .. PASSWORD .. "@127.0.0.1:" .. port .. "/?tls=maybe", wait = 0.5 },
  }
  for _, c in ipairs(cases) do
    local ok, store, msg, code = pcall(ms.connect, c.uri, { db = "x", wait = c.wait })
    lu.assertTrue(ok, "connect raised")
    if not ok then assert_no_password(tostring(store)) end
    if store then self:keep(store) end
    lu.assertNil(store)
    assert_no_password(msg)
    lu.assertIsString(code)
  end
  -- a percent-encoded password, in either form
  local store, msg = ms.connect("mongodb://user:s3cret%21pw@127.0.0.1:" .. port, { db = "x", wait = 0.5 })
  if store then self:keep(store) end
  lu.assertNil(store)
  assert_no_password(msg, "s3cret%21pw", "s3cret!pw")
end

function TestConnect:test_password_hidden_when_a_real_server_refuses_it()
  -- credentials sent to the test server: it may refuse them or ignore them,
  -- but no message may carry the password
  local base = helper.uri()
  local with_creds = base:gsub("^mongodb://", "mongodb://user:" .. PASSWORD .. "@", 1)
  if with_creds == base or base:find("@", 1, true) then
    lu.skip("MONGOSTORE_TEST_URI already carries credentials")
  end
  local ok, store, msg, code = pcall(ms.connect, with_creds, { db = helper.fresh_db("cred"), wait = 2 })
  lu.assertTrue(ok, "connect raised: " .. tostring(store))
  if store then
    self:keep(store)
    local exe = ms.execution { definition_id = "d" }
    local sok, smsg = store:save(exe)
    if not sok then assert_no_password(smsg) end
  else
    assert_no_password(msg)
    lu.assertIsString(code)
  end
end

function TestConnect:test_collections_with_and_without_prefix()
  local db = helper.fresh_db("prefix")
  local plain = self:keep((helper.connect { db = db }))
  local harel = self:keep((helper.connect { db = db, prefix = "harel" }))
  local a = ms.execution { definition_id = "d", id = "in-plain" }
  local b = ms.execution { definition_id = "d", id = "in-harel" }
  lu.assertTrue(plain:commit(a, { emits = { { target_id = "t", event = { kind = "K" } } } }))
  lu.assertTrue(harel:commit(b, { emits = { { target_id = "t", event = { kind = "K" } } } }))
  local names = raw.collections(db)
  local has = {}
  for _, n in ipairs(names) do has[n] = true end
  lu.assertTrue(has.executions, table.concat(names, ","))
  lu.assertTrue(has.counters, table.concat(names, ","))
  lu.assertTrue(has.harel_executions, table.concat(names, ","))
  lu.assertTrue(has.harel_counters, table.concat(names, ","))
  lu.assertNotNil(raw.doc(db, "in-plain", "executions"))
  lu.assertNil(raw.doc(db, "in-harel", "executions"))
  lu.assertNotNil(raw.doc(db, "in-harel", "harel_executions"))
  lu.assertNil(raw.doc(db, "in-plain", "harel_executions"))
  -- each store sees only its own collections
  lu.assertNil(plain:load("in-harel"))
  lu.assertNil(harel:load("in-plain"))
  lu.assertEquals(#plain:pending_outbox(), 1)
  lu.assertEquals(#harel:pending_outbox(), 1)
end

local function index_keys(db)
  local out = {}
  for _, ix in ipairs(raw.indexes(db, "executions")) do
    local fields = raw.keys(ix.key)
    out[#out + 1] = table.concat(fields, "+")
  end
  table.sort(out)
  return out
end

function TestConnect:test_indexes_are_created_at_connect_idempotently()
  local db = helper.fresh_db("idx")
  self:keep((helper.connect { db = db }))
  local first = index_keys(db)
  local has = {}
  for _, k in ipairs(first) do has[k] = true end
  lu.assertTrue(#first >= 2, "no index besides _id: " .. table.concat(first, ", "))
  lu.assertTrue(has["outbox.seq"], "no index on outbox.seq: " .. table.concat(first, ", "))
  lu.assertTrue(has["spawns.seq"], "no index on spawns.seq: " .. table.concat(first, ", "))
  -- connecting again to the same database is fine and changes nothing
  self:keep((helper.connect { db = db }))
  self:keep((helper.connect { db = db }))
  lu.assertEquals(index_keys(db), first)
end

function TestConnect:test_close_is_idempotent_and_a_closed_store_says_so()
  local store = helper.connect()
  store:close()
  store:close()
  for _, call in ipairs {
    function() return store:load("x") end,
    function() return store:save(ms.execution { definition_id = "d" }) end,
    function() return store:pending_outbox() end,
    function() return store:is_processed("x", "e") end,
  } do
    local ok, r1, r2, r3 = pcall(call)
    lu.assertTrue(ok, "a closed store raised: " .. tostring(r1))
    lu.assertNil(r1)
    lu.assertIsString(r2)
    lu.assertEquals(r3, "closed")
  end
end

function TestConnect:test_argument_errors_raise()
  lu.assertError(ms.connect)
  lu.assertError(ms.connect, {})
  lu.assertError(ms.connect, helper.uri(), "opts")
  lu.assertError(ms.connect, helper.uri(), { db = {} })
end

-- A failed connect gives its pooled client back at once: with maxPoolSize=1
-- the next connect to the same URI gets it (and fails or succeeds on its
-- own), rather than waiting for good for a client only garbage collection
-- would have returned. Run in a child process with the collector stopped,
-- under a timeout, since the bug is a hang.
function TestConnect:test_a_failed_connect_returns_its_pooled_client()
  local uri = "mongodb://127.0.0.1:" .. free_port() .. "/?maxPoolSize=1&serverSelectionTimeoutMS=200"
  local lua = os.getenv("MONGOSTORE_LUA") or "lua5.4"
  local root = helper.root()
  local script = string.format([[
package.path = %q .. "/lua/?.lua;" .. %q .. "/lua/?/init.lua;" .. package.path
collectgarbage("stop")
local ms = require "mongostore"
for i = 1, 3 do
  local s, _, code = ms.connect(%q, { db = "x", wait = 0 })
  io.write("store ", i, " ", tostring(s ~= nil), " ", tostring(code), "\n")
  local db, _, dcode = ms.database(%q, { db = "x", wait = 0 })
  io.write("database ", i, " ", tostring(db ~= nil), " ", tostring(dcode), "\n")
end
io.write("done\n")
]], root, root, uri, uri)
  local file = os.tmpname()
  local f = assert(io.open(file, "w"))
  f:write(script)
  f:close()
  local t0 = ms.now()
  local out = sh("timeout -k 2 20 " .. lua .. " " .. file .. " 2>&1")
  os.remove(file)
  lu.assertStrContains(out, "done", false, "a connect after a failed one hung: " .. out)
  for i = 1, 3 do
    lu.assertStrContains(out, "store " .. i .. " false unavailable")
    lu.assertStrContains(out, "database " .. i .. " false unavailable")
  end
  lu.assertTrue(elapsed_since(t0) < 15)
end
