-- spec/02-documents/cursor_spec.lua - cursors of find and aggregate: batch_size
-- honoured (getMore commands counted by the pool's command monitoring, which
-- store:stats() reports for every handle on the same URI), next/all/each,
-- exhaustion, and the server cursor killed on close, on collection and when the
-- database closes (a getMore of its id then fails with CursorNotFound).
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"

local SERVER = os.getenv("MONGOSTORE_TEST_SERVER") or "other"

local ok = require("helpers").ok

TestCursor = {}

function TestCursor:setUp()
  self.name = helper.fresh_db("cursor")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  self.c = ok(self.db:collection("items"))
  local docs = {}
  for i = 1, 10 do docs[i] = { _id = i, pad = string.rep("p", 100) } end
  ok(self.c:insert_many(docs))
  -- a store on the same URI and wait: the same pool, so its stats count our commands
  self.store = helper.connect({ wait = 10 })
end

function TestCursor:tearDown()
  if self.store then self.store:close() end
  if self.db then self.db:close() end
end

function TestCursor:getmores()
  return ok(self.store:stats()).getMore
end

-- a getMore of a server cursor id by hand: nil, msg, code, detail once it is gone
function TestCursor:getmore(id)
  return self.db:command({ { "getMore", ms.int64(id) }, { "collection", "items" }, { "batchSize", 1 } })
end

function TestCursor:test_batch_size_is_honoured()
  local before = self:getmores()
  local cur = ok(self.c:find({}, { batch_size = 3, sort = { _id = 1 } }))
  lu.assertEquals(self:getmores(), before, "the first batch comes with the find")
  local seen = 0
  for _ = 1, 3 do
    lu.assertNotNil(ok(cur:next()))
    seen = seen + 1
  end
  lu.assertEquals(self:getmores(), before, "three documents come from the first batch")
  lu.assertNotNil(ok(cur:next()))
  lu.assertEquals(self:getmores(), before + 1)
  local rest = ok(cur:all())
  lu.assertEquals(#rest, 6)
  -- batches of 3: find (1-3), getMore (4-6), (7-9), (10)
  lu.assertEquals(self:getmores(), before + 3)
  lu.assertNil(cur:next(), "exhausted")
  lu.assertNil(cur:next(), "and stays so")
  lu.assertEquals(cur:id(), 0)
end

function TestCursor:test_all_each_and_order()
  local all = ok(ok(self.c:find({}, { sort = { { "_id", -1 } }, batch_size = 4 })):all())
  lu.assertEquals(#all, 10)
  lu.assertEquals(all[1]._id, 10)
  lu.assertEquals(all[10]._id, 1)
  lu.assertTrue(ms.is_array(all))
  local ids = {}
  local cur = ok(self.c:find({ _id = { ["$lte"] = 5 } }, { sort = { _id = 1 }, batch_size = 2 }))
  for d in cur:each() do ids[#ids + 1] = d._id end
  lu.assertEquals(ids, { 1, 2, 3, 4, 5 })
  -- each() closes the cursor when it ends
  local v, _, code = cur:next()
  lu.assertEquals({ v, code }, { nil, "closed" })
end

function TestCursor:test_break_out_of_each_closes_on_lua_5_4()
  if _VERSION ~= "Lua 5.4" then return lu.skip("a for loop closes its fourth value from Lua 5.4 on") end
  local cur = ok(self.c:find({}, { batch_size = 2 }))
  local id = cur:id()
  for d in cur:each() do
    if d._id then break end
  end
  local v, _, code = cur:next()
  lu.assertEquals({ v, code }, { nil, "closed" })
  local gone, _, gcode = self:getmore(id)
  lu.assertEquals({ gone, gcode }, { nil, "server" }, "the server cursor is killed at the break")
end

function TestCursor:test_empty_result()
  local cur = ok(self.c:find({ _id = 99 }))
  lu.assertEquals(cur:id(), 0, "nothing left on the server")
  lu.assertNil(cur:next())
  lu.assertEquals(ok(ok(self.c:find({ _id = 99 })):all()), {})
end

function TestCursor:test_limit_with_batches()
  local got = ok(ok(self.c:find({}, { limit = 5, batch_size = 2, sort = { _id = 1 } })):all())
  lu.assertEquals(#got, 5)
  lu.assertEquals(got[5]._id, 5)
end

function TestCursor:test_live_cursor_answers_a_getmore()
  -- the control of the kill specs below: a cursor still open has its id on the server
  local cur = ok(self.c:find({}, { batch_size = 2 }))
  local id = cur:id()
  lu.assertNotEquals(id, 0)
  local r = ok(self:getmore(id))
  lu.assertEquals(#r.cursor.nextBatch, 1)
  cur:close()
end

local function assert_gone(self, id, what)
  local v, err, code, detail = self:getmore(id)
  lu.assertNil(v, what .. ": the server cursor is still open")
  lu.assertEquals(code, "server", err)
  lu.assertEquals(detail.server_code, 43, err)   -- CursorNotFound
end

function TestCursor:test_close_kills_the_server_cursor()
  local cur = ok(self.c:find({}, { batch_size = 2 }))
  local id = cur:id()
  lu.assertNotEquals(id, 0)
  cur:close()
  cur:close()
  assert_gone(self, id, "close")
  local v, err, code = cur:next()
  lu.assertEquals({ v, code }, { nil, "closed" }, err)
  v, err, code = cur:all()
  lu.assertEquals({ v, code }, { nil, "closed" }, err)
end

function TestCursor:test_gc_kills_the_server_cursor()
  local id
  do
    local cur = ok(self.c:find({}, { batch_size = 2 }))
    id = cur:id()
    lu.assertNotNil(cur:next())
  end
  lu.assertNotEquals(id, 0)
  collectgarbage()
  collectgarbage()
  assert_gone(self, id, "__gc")
end

function TestCursor:test_database_close_kills_its_cursors()
  local cur = ok(self.c:find({}, { batch_size = 2 }))
  local agg = ok(self.c:aggregate({ { ["$match"] = {} } }, { batch_size = 2 }))
  local id, aid = cur:id(), agg:id()
  self.db:close()
  local v, _, code = cur:next()
  lu.assertEquals({ v, code }, { nil, "closed" })
  v, _, code = agg:next()
  lu.assertEquals({ v, code }, { nil, "closed" })
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  if id ~= 0 then assert_gone(self, id, "db:close") end
  if aid ~= 0 then assert_gone(self, aid, "db:close (aggregate)") end
  lu.assertNotEquals(id, 0)
end

function TestCursor:test_aggregate_cursor_batches()
  if SERVER == "java" then
    return lu.skip("mongo-java-server returns an aggregate's whole result in its first batch")
  end
  local before = self:getmores()
  local cur = ok(self.c:aggregate({ { ["$sort"] = { _id = 1 } } }, { batch_size = 4 }))
  local all = ok(cur:all())
  lu.assertEquals(#all, 10)
  lu.assertEquals(all[1]._id, 1)
  lu.assertEquals(self:getmores(), before + 2)   -- 4 + 4 + 2
end

function TestCursor:test_bad_query_fails_at_find()
  local v, err, code = self.c:find({ ["$nonsense"] = 1 })
  lu.assertNil(v)
  lu.assertEquals(code, "server", err)
  lu.assertStrContains(err, "find items")
  v, err, code = self.c:aggregate({ { ["$nonsense"] = 1 } })
  lu.assertNil(v)
  lu.assertEquals(code, "server", err)
end

function TestCursor:test_each_raises_on_failure()
  local cur = ok(self.c:find({}, { batch_size = 2 }))
  lu.assertNotNil(cur:next())
  lu.assertNotNil(cur:next())
  -- kill it behind the cursor's back: the next getMore fails
  ok(self.db:command({ { "killCursors", "items" }, { "cursors", ms.array { ms.int64(cur:id()) } } }))
  local ok_, err = pcall(function() for _ in cur:each() do end end)
  lu.assertFalse(ok_)
  lu.assertStrContains(tostring(err), "find items")
end
