-- spec/02-documents/session_spec.lua - sessions and db:transaction on every
-- test server: where the server has no transactions (mongo-java-server)
-- db:transaction is unavailable and runs nothing; everywhere, wrong
-- arguments raise and a value that is not a session of this handle is
-- refused. What transactions do is spec/05-secantus/transaction_spec.lua.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local rawdb = require "helpers.rawdb"

local SERVER = os.getenv("MONGOSTORE_TEST_SERVER") or "other"

local ok = require("helpers").ok

TestSessions = {}

function TestSessions:setUp()
  self.name = helper.fresh_db("session")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  self.c = self.db:collection("things")
  ok(self.c:insert_one({ _id = "seed" }))
  self.has_tx = ok(self.db:info()).transactions
end

function TestSessions:tearDown()
  if self.db then self.db:close() end
end

function TestSessions:test_info_tells_the_truth_about_the_server()
  lu.assertIsBoolean(self.has_tx)
  if SERVER == "java" then lu.assertFalse(self.has_tx, "mongo-java-server has no transactions") end
  if SERVER == "secantus" then lu.assertTrue(self.has_tx, "SecantusDB is a replica set with transactions") end
end

function TestSessions:test_transaction_unavailable_runs_nothing()
  if self.has_tx then lu.skip("the " .. SERVER .. " server has transactions (transaction_spec covers them)") end
  local ran = false
  local v, err, code = self.db:transaction(function(s)
    ran = true
    ok(self.c:insert_one({ _id = "never" }, { session = s }))
  end)
  lu.assertNil(v)
  lu.assertEquals(code, "unavailable")
  lu.assertStrContains(err, "transaction")
  lu.assertFalse(ran, "fn ran on a server without transactions")
  lu.assertEquals(rawdb.count(self.name, "things"), 1)
  -- every option is checked all the same
  v, err, code = self.db:transaction(function() ran = true end, { timeout = 5, read_concern = "majority",
                                                                write_concern = { w = 1 } })
  lu.assertEquals({ v, code, ran }, { nil, "unavailable", false }, err)
end

function TestSessions:test_session_without_server_support()
  local s, err, code = self.db:session()
  if self.has_tx then
    lu.assertNotNil(s, err)
    lu.assertStrContains(tostring(s), "mongostore.Session")
    lu.assertFalse(s:in_transaction())
    lu.assertTrue(s:close())
    lu.assertStrContains(tostring(s), "closed")
  else
    -- mongo-java-server reports no logical sessions
    lu.assertNil(s)
    lu.assertEquals(code, "unavailable", err)
  end
end

function TestSessions:test_wrong_arguments_raise()
  lu.assertErrorMsgContains("fn must be a function", self.db.transaction, self.db, nil)
  lu.assertErrorMsgContains("fn must be a function", self.db.transaction, self.db, "insert")
  lu.assertErrorMsgContains("opts must be a table", self.db.transaction, self.db, function() end, 5)
  lu.assertErrorMsgContains("unknown option retries", self.db.transaction, self.db, function() end,
    { retries = 3 })
  for _, t in ipairs { 0, -1, 0 / 0, "10" } do
    lu.assertErrorMsgContains("opts.timeout", self.db.transaction, self.db, function() end, { timeout = t })
  end
end

function TestSessions:test_not_a_session_refused()
  -- another kind of handle: refused
  for _, bad in ipairs { self.db, self.c, self.c:find({}) } do
    local v, err, code = self.c:insert_one({ _id = "x" }, { session = bad })
    lu.assertNil(v)
    lu.assertEquals(code, "invalid")
    lu.assertStrContains(err, "session")
    v, err, code = self.c:find_one({ _id = "seed" }, { session = bad })
    lu.assertEquals({ v, code }, { nil, "invalid" }, err)
  end
  -- not a handle at all: a mistake in the code, which raises
  for _, bad in ipairs { {}, "session", 42, true } do
    lu.assertErrorMsgContains("opts.session", self.c.insert_one, self.c, { _id = "x" }, { session = bad })
  end
  lu.assertEquals(rawdb.count(self.name, "things"), 1)
end

function TestSessions:test_closed_database()
  self.db:close()
  local v, err, code = self.db:transaction(function() error("must not run") end)
  lu.assertNil(v)
  lu.assertEquals(code, "closed", err)
  v, err, code = self.db:session()
  lu.assertNil(v, err)
  lu.assertEquals(code, "closed", err)
  self.db = nil
end
