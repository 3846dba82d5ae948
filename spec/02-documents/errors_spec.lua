-- spec/02-documents/errors_spec.lua - failures of the document API as nil, message,
-- code[, detail]: duplicate keys with the key in the message, documents over the
-- server's limit, bad input refused with nothing written (raw reads), server errors
-- with the server's code in detail, and through tools/fault-proxy a reset connection
-- (network), a silent server (timeout) and no server at all (unavailable); the URI's
-- password never in a message.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local rawdb = require "helpers.rawdb"
local F = require "helpers.faults"

local ok = require("helpers").ok

local function result(...) return { n = select("#", ...), ... } end

TestDocErrors = {}

function TestDocErrors:setUp()
  self.name = helper.fresh_db("docerr")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  self.c = ok(self.db:collection("things"))
end

function TestDocErrors:tearDown()
  if self.db then self.db:close() end
  if self.proxy then self.proxy.stop() end
end

function TestDocErrors:test_duplicate_key_names_the_key()
  ok(self.c:insert_one({ _id = "k-1" }))
  local r = result(self.c:insert_one({ _id = "k-1", other = 1 }))
  lu.assertNil(r[1])
  lu.assertEquals(r[3], "duplicate")
  lu.assertStrContains(r[2], "insert_one things")
  lu.assertStrContains(r[2], "k-1")
  lu.assertEquals(r[4].server_code, 11000)
  lu.assertTrue(ms.is_array(r[4].labels))
  -- an update into a unique key
  ok(self.c:create_index({ u = 1 }, { unique = true }))
  ok(self.c:insert_one({ _id = 1, u = "one" }))
  ok(self.c:insert_one({ _id = 2, u = "two" }))
  r = result(self.c:update_one({ _id = 2 }, { ["$set"] = { u = "one" } }))
  lu.assertEquals({ r[1], r[3] }, { nil, "duplicate" }, r[2])
  lu.assertStrContains(r[2], "one")
  r = result(self.c:find_one_and_update({ _id = 2 }, { ["$set"] = { u = "one" } }))
  lu.assertEquals({ r[1], r[3] }, { nil, "duplicate" }, r[2])
  r = result(self.c:replace_one({ _id = 2 }, { u = "one" }))
  lu.assertEquals({ r[1], r[3] }, { nil, "duplicate" }, r[2])
  local two
  for _, d in ipairs(rawdb.docs(self.name, "things")) do if d._id == 2 then two = d end end
  lu.assertEquals(two, { _id = 2, u = "two" })
end

function TestDocErrors:test_too_large_writes_nothing()
  local max = ok(self.db:info()).max_bson_size
  local big = string.rep("x", max)
  for what, call in pairs {
    insert_one = function() return self.c:insert_one({ _id = "big", s = big }) end,
    insert_many = function() return self.c:insert_many({ { _id = "ok" }, { _id = "big", s = big } }) end,
    replace_one = function() return self.c:replace_one({ _id = "x" }, { s = big }, { upsert = true }) end,
    bulk_write = function() return self.c:bulk_write({ { insert_one = { _id = "ok" } }, { insert_one = { s = big } } }) end,
  } do
    local r = result(call())
    lu.assertNil(r[1], what)
    lu.assertEquals(r[3], "too_large", what .. ": " .. tostring(r[2]))
  end
  lu.assertEquals(rawdb.count(self.name, "things"), 0)
end

function TestDocErrors:test_invalid_input_writes_nothing()
  for what, call in pairs {
    function_value = function() return self.c:insert_one({ f = function() end }) end,
    cycle = function()
      local t = {}
      t.self = t
      return self.c:insert_one({ t = t })
    end,
    nul_key = function() return self.c:insert_one({ ["a\0b"] = 1 }) end,
    empty_key = function() return self.c:insert_one({ [""] = 1 }) end,
    bad_utf8 = function() return self.c:insert_one({ s = "\255\254" }) end,
    nan = function() return self.c:insert_one({ n = 0 / 0 }) end,
    dollar_top = function() return self.c:insert_one({ ["$set"] = { a = 1 } }) end,
    update_without_operator = function() return self.c:update_one({}, { a = 1 }, { upsert = true }) end,
    replace_with_operator = function() return self.c:replace_one({}, { ["$set"] = { a = 1 } }, { upsert = true }) end,
    bad_filter = function() return self.c:update_many({ f = function() end }, { ["$set"] = { a = 1 } }, { upsert = true }) end,
    negative_limit = function() return self.c:find({}, { limit = -1 }) end,
    fraction_skip = function() return self.c:find({}, { skip = 1.5 }) end,
    sort_without_order = function() return self.c:find_one_and_delete({}, { sort = { a = 1, b = 1 } }) end,
    sort_bad_pairs = function() return self.c:find({}, { sort = { { 1, 1 } } }) end,
    mixed_table = function() return self.c:insert_one({ 1, 2, x = 3 }) end,
    bad_collection = function() return self.db:collection("a$b") end,
    empty_collection = function() return self.db:collection("") end,
    distinct_empty = function() return self.c:distinct("") end,
  } do
    local r = result(call())
    lu.assertNil(r[1], what)
    lu.assertEquals(r[3], "invalid", what .. ": " .. tostring(r[2]))
    lu.assertIsString(r[2], what)
  end
  lu.assertEquals(rawdb.count(self.name, "things"), 0)
end

function TestDocErrors:test_server_errors_carry_the_server_code()
  ok(self.c:insert_one({ _id = 1, s = "text" }))
  local r = result(self.c:update_one({ _id = 1 }, { ["$inc"] = { s = 1 } }))
  lu.assertNil(r[1])
  lu.assertEquals(r[3], "server", r[2])
  lu.assertIsNumber(r[4].server_code)
  lu.assertTrue(r[4].server_code > 0)
  lu.assertStrContains(r[2], "update_one things")
  r = result(self.db:command({ no_such_command_here = 1 }))
  lu.assertEquals({ r[1], r[3] }, { nil, "server" }, r[2])
  lu.assertIsNumber(r[4].server_code)
  lu.assertEquals(rawdb.docs(self.name, "things"), { { _id = 1, s = "text" } })
end

function TestDocErrors:test_no_server_is_unavailable_and_the_password_stays_out()
  -- a port nothing listens on (the proxy, started then stopped)
  local p = F.start_proxy(helper.uri())
  local uri = p.uri("serverSelectionTimeoutMS=300&connectTimeoutMS=300")
  p.stop()
  local secret = "s3cr3t-pw-" .. ms.uuid():sub(1, 8)
  local with_pw = uri:gsub("^mongodb://", "mongodb://someone:" .. secret .. "@")
  local r = result(ms.database(with_pw, { db = self.name, wait = 0 }))
  lu.assertNil(r[1])
  lu.assertTrue(r[3] == "unavailable" or r[3] == "network", tostring(r[3]) .. ": " .. tostring(r[2]))
  lu.assertNotStrContains(r[2], secret)
  -- a malformed URI that holds the password: not quoted
  r = result(ms.database("mongodb://someone:" .. secret .. "@127.0.0.1:notaport/", { db = self.name, wait = 0 }))
  lu.assertEquals(r[3], "invalid")
  lu.assertNotStrContains(r[2], secret)
end

local PROXY_OPTS = "retryReads=false&retryWrites=false&socketTimeoutMS=300&serverSelectionTimeoutMS=3000"
  .. "&connectTimeoutMS=1000"

-- waits until the handle answers through the proxy again
local function settle(c)
  local deadline = ms.now() + 15
  while true do
    local n, err = c:count({})
    if n then return n end
    if ms.now() > deadline then error("no answer through the proxy: " .. tostring(err), 2) end
    ms.sleep(0.05)
  end
end

function TestDocErrors:test_reset_is_network_and_silence_is_timeout()
  self.proxy = F.start_proxy(helper.uri())
  local db = ok(ms.database(self.proxy.uri(PROXY_OPTS), { db = self.name, wait = 5 }))
  local c = ok(db:collection("things"))
  ok(c:insert_many({ { _id = 1 }, { _id = 2 }, { _id = 3 } }))
  local calls = {
    insert_one = function() return c:insert_one({ _id = 10 }) end,
    find_one = function() return c:find_one({ _id = 1 }) end,
    find = function() return c:find({}) end,
    count = function() return c:count({}) end,
    update_one = function() return c:update_one({ _id = 1 }, { ["$set"] = { x = 1 } }) end,
    delete_one = function() return c:delete_one({ _id = 2 }) end,
    bulk_write = function() return c:bulk_write({ { insert_one = { _id = 11 } } }) end,
    find_one_and_update = function() return c:find_one_and_update({ _id = 1 }, { ["$set"] = { y = 1 } }) end,
    aggregate = function() return c:aggregate({ { ["$match"] = {} } }) end,
    -- (the proxy lets monitoring's hello and ping through: count is the command here)
    command = function() return db:command({ { "count", "things" } }) end,
  }
  local names = {}
  for name in pairs(calls) do names[#names + 1] = name end
  table.sort(names)
  local before = rawdb.docs(self.name, "things")
  local got, want = {}, {}
  for _, name in ipairs(names) do
    settle(c)
    self.proxy.bump("reset_next", 1)
    local r = result(calls[name]())
    got[name] = r[1] == nil and r[3] or "succeeded"
    want[name] = "network"
  end
  lu.assertEquals(got, want)
  lu.assertEquals(rawdb.docs(self.name, "things"), before, "nothing reached the server")
  settle(c)
  self.proxy.set { blackhole = 1 }
  local r = result(c:find_one({ _id = 1 }))
  lu.assertEquals({ r[1], r[3] }, { nil, "timeout" }, r[2])
  r = result(c:insert_one({ _id = 12 }))
  lu.assertEquals({ r[1], r[3] }, { nil, "timeout" }, r[2])
  self.proxy.set {}
  settle(c)
  lu.assertEquals(rawdb.docs(self.name, "things"), before)
  db:close()
end

-- A write conflict inside a transaction carries the TransientTransactionError label:
-- code "transient", the label in detail (servers with transactions only).
function TestDocErrors:test_a_write_conflict_in_a_transaction_is_transient()
  if not ok(self.db:info()).transactions then
    return lu.skip("the server has no transactions (mongo-java-server)")
  end
  ok(self.c:insert_one({ _id = "hot", n = 0 }))
  local s1, s2 = ok(self.db:session()), ok(self.db:session())
  ok(s1:start_transaction())
  ok(s2:start_transaction())
  ok(self.c:update_one({ _id = "hot" }, { ["$inc"] = { n = 1 } }, { session = s1 }))
  local r = result(self.c:update_one({ _id = "hot" }, { ["$inc"] = { n = 10 } }, { session = s2 }))
  lu.assertNil(r[1])
  lu.assertEquals(r[3], "transient", r[2])
  lu.assertStrContains(r[2], "update_one things")
  local labels = {}
  for _, l in ipairs(r[4].labels) do labels[l] = true end
  lu.assertTrue(labels.TransientTransactionError, r[2])
  lu.assertIsNumber(r[4].server_code)
  s2:abort()
  ok(s1:commit())
  s1:close()
  s2:close()
  lu.assertEquals(rawdb.docs(self.name, "things"), { { _id = "hot", n = 1 } })
end
