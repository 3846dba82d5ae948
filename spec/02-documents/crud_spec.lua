-- spec/02-documents/crud_spec.lua - the Collection's single-document calls against a
-- real server: what each returns, and what the server then holds (read behind the
-- library's back with pymongo, spec/helpers/rawdb.lua).
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local rawdb = require "helpers.rawdb"

local ok = require("helpers").ok

local function ids(list)
  local out = {}
  for i, d in ipairs(list) do out[i] = d._id end
  return out
end

TestCrud = {}

function TestCrud:setUp()
  self.name = helper.fresh_db("crud")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  self.c = ok(self.db:collection("articles"))
end

function TestCrud:tearDown()
  if self.db then self.db:close() end
end

function TestCrud:test_database_on_the_connect_pool()
  -- a Store and a Database of one URI and wait share the process's pool:
  -- the store's command counts see the database's commands
  local store = helper.connect({ wait = 10 })
  local before = ok(store:stats()).insert
  ok(self.c:insert_one({ _id = 1 }))
  lu.assertEquals(ok(store:stats()).insert, before + 1)
  store:close()
  lu.assertStrContains(tostring(self.db), self.name)
end

function TestCrud:test_database_name_from_the_uri()
  local uri = helper.uri():gsub("/?$", "") .. "/" .. self.name
  if uri:find("?", 1, true) then return lu.skip("the test URI carries options") end
  local db = ok(ms.database(uri, { wait = 10 }))
  ok(db:collection("x"):insert_one({ _id = "u" }))
  lu.assertEquals(rawdb.count(self.name, "x"), 1)
  db:close()
end

function TestCrud:test_insert_one_returns_the_id()
  local r = ok(self.c:insert_one({ _id = "a1", title = "hello" }))
  lu.assertEquals(r, { inserted_id = "a1" })
  local raw = rawdb.docs(self.name, "articles")
  lu.assertEquals(#raw, 1)
  lu.assertEquals(raw[1]._id, "a1")
  lu.assertEquals(raw[1].title, "hello")
end

function TestCrud:test_insert_one_makes_an_objectid_first()
  local r = ok(self.c:insert_one({ title = "no id" }))
  lu.assertNotNil(r.inserted_id)
  lu.assertEquals(#tostring(r.inserted_id), 24)
  local doc = ok(self.c:find_one({ _id = r.inserted_id }))
  lu.assertEquals(tostring(doc._id), tostring(r.inserted_id))
  lu.assertEquals(doc.title, "no id")
  -- the _id is the document's first field, as every driver writes it
  local raw = rawdb.docs(self.name, "articles")
  lu.assertEquals(rawdb.keys(raw[1])[1], "_id")
  lu.assertEquals(raw[1]._id, { other = "ObjectId", text = tostring(r.inserted_id) })
end

function TestCrud:test_find_one_projection_and_sort()
  for i = 1, 5 do ok(self.c:insert_one({ _id = i, n = i % 3, s = "v" .. i, big = string.rep("x", 10) })) end
  local d = ok(self.c:find_one({ n = 1 }, { sort = { { "_id", -1 } }, projection = { s = 1 } }))
  lu.assertEquals(d, { _id = 4, s = "v4" })
  d = ok(self.c:find_one({ n = 1 }, { sort = { _id = 1 }, projection = { big = 0, n = 0 } }))
  lu.assertEquals(d, { _id = 1, s = "v1" })
  lu.assertNil(self.c:find_one({ n = 7 }))
  -- nil filter: any document
  lu.assertNotNil(ok(self.c:find_one()))
end

function TestCrud:test_find_with_skip_limit_sort()
  for i = 1, 10 do ok(self.c:insert_one({ _id = i, g = i % 2 })) end
  local got = ok(ok(self.c:find({ g = 0 }, { sort = { { "_id", -1 } }, skip = 1, limit = 3 })):all())
  lu.assertEquals(ids(got), { 8, 6, 4 })
  lu.assertEquals(ok(self.c:count({ g = 0 })), 5)
  lu.assertEquals(ok(self.c:count()), 10)
  lu.assertEquals(ok(self.c:count({ g = 1 }, { skip = 1, limit = 2 })), 2)
end

function TestCrud:test_find_with_hint()
  for i = 1, 4 do ok(self.c:insert_one({ _id = i, k = i })) end
  ok(self.c:create_index({ k = 1 }, { name = "k_idx" }))
  lu.assertEquals(ids(ok(ok(self.c:find({}, { hint = "k_idx", sort = { k = 1 } })):all())), { 1, 2, 3, 4 })
  lu.assertEquals(ids(ok(ok(self.c:find({}, { hint = { k = 1 }, sort = { k = 1 } })):all())), { 1, 2, 3, 4 })
end

function TestCrud:test_update_one_many_and_upsert()
  for i = 1, 4 do ok(self.c:insert_one({ _id = i, tag = i <= 2 and "a" or "b", n = 0 })) end
  lu.assertEquals(ok(self.c:update_one({ tag = "a" }, { ["$inc"] = { n = 1 } })), { matched = 1, modified = 1 })
  lu.assertEquals(ok(self.c:update_many({ tag = "b" }, { ["$set"] = { n = 5 } })), { matched = 2, modified = 2 })
  -- matched but unchanged
  lu.assertEquals(ok(self.c:update_many({ tag = "b" }, { ["$set"] = { n = 5 } })), { matched = 2, modified = 0 })
  local r = ok(self.c:update_one({ _id = 9 }, { ["$set"] = { tag = "c" } }, { upsert = true }))
  lu.assertEquals(r, { matched = 0, modified = 0, upserted_id = 9 })
  local raw = rawdb.docs(self.name, "articles")
  lu.assertEquals(#raw, 5)
  lu.assertEquals(raw[5], { _id = 9, tag = "c" })
  lu.assertEquals(raw[3].n, 5)
end

function TestCrud:test_replace_one()
  ok(self.c:insert_one({ _id = 1, a = 1, b = 2 }))
  lu.assertEquals(ok(self.c:replace_one({ _id = 1 }, { c = 3 })), { matched = 1, modified = 1 })
  lu.assertEquals(rawdb.docs(self.name, "articles")[1], { _id = 1, c = 3 })
  local r = ok(self.c:replace_one({ _id = 2 }, { d = 4 }, { upsert = true }))
  lu.assertEquals(r.matched, 0)
  lu.assertEquals(r.upserted_id, 2)
end

function TestCrud:test_delete_one_and_many()
  for i = 1, 5 do ok(self.c:insert_one({ _id = i, odd = i % 2 == 1 })) end
  lu.assertEquals(ok(self.c:delete_one({ odd = true })), { deleted = 1 })
  lu.assertEquals(ok(self.c:delete_many({ odd = true })), { deleted = 2 })
  lu.assertEquals(ok(self.c:delete_many({ odd = true })), { deleted = 0 })
  lu.assertEquals(rawdb.count(self.name, "articles"), 2)
end

function TestCrud:test_find_one_and_update()
  ok(self.c:insert_one({ _id = 1, n = 1 }))
  ok(self.c:insert_one({ _id = 2, n = 1 }))
  local before = ok(self.c:find_one_and_update({ n = 1 }, { ["$inc"] = { n = 10 } }, { sort = { _id = -1 } }))
  lu.assertEquals(before, { _id = 2, n = 1 })
  local after = ok(self.c:find_one_and_update({ _id = 1 }, { ["$inc"] = { n = 10 } },
    { new = true, projection = { n = 1, _id = 0 } }))
  lu.assertEquals(after, { n = 11 })
  lu.assertNil(self.c:find_one_and_update({ _id = 3 }, { ["$set"] = { n = 0 } }))
  local up = ok(self.c:find_one_and_update({ _id = 3 }, { ["$set"] = { n = 0 } }, { upsert = true, new = true }))
  lu.assertEquals(up, { _id = 3, n = 0 })
  lu.assertEquals(rawdb.count(self.name, "articles"), 3)
end

function TestCrud:test_find_one_and_delete()
  for i = 1, 3 do ok(self.c:insert_one({ _id = i, k = "x" })) end
  lu.assertEquals(ok(self.c:find_one_and_delete({ k = "x" }, { sort = { { "_id", -1 } } })), { _id = 3, k = "x" })
  lu.assertNil(self.c:find_one_and_delete({ k = "none" }))
  lu.assertEquals(rawdb.count(self.name, "articles"), 2)
end

function TestCrud:test_aggregate_and_distinct()
  for i = 1, 6 do ok(self.c:insert_one({ _id = i, g = "g" .. (i % 3), v = i })) end
  local rows = ok(ok(self.c:aggregate({
    { ["$group"] = { _id = "$g", total = { ["$sum"] = "$v" } } },
    { ["$sort"] = { _id = 1 } },
  })):all())
  lu.assertEquals(rows, { { _id = "g0", total = 9 }, { _id = "g1", total = 5 }, { _id = "g2", total = 7 } })
  local vals = ok(self.c:distinct("g"))
  table.sort(vals)
  lu.assertEquals(vals, { "g0", "g1", "g2" })
  lu.assertTrue(ms.is_array(vals))
  local some = ok(self.c:distinct("g", { v = { ["$gt"] = 4 } }))
  table.sort(some)
  lu.assertEquals(some, { "g0", "g2" })
  lu.assertEquals(#ok(self.c:distinct("nothing")), 0)
end

function TestCrud:test_command_and_list_collections()
  ok(self.c:insert_one({ _id = 1 }))
  ok(self.db:collection("other"):insert_one({ _id = 1 }))
  local r = ok(self.db:command({ ping = 1 }))
  lu.assertEquals(r.ok, 1)
  r = ok(self.db:command({ { "count", "articles" }, { "query", {} } }))
  lu.assertEquals(r.n, 1)
  local names = {}
  for _, e in ipairs(ok(self.db:list_collections())) do names[#names + 1] = e.name end
  table.sort(names)
  lu.assertEquals(names, { "articles", "other" })
  -- a command of several keys given as a table has no order: refused, nothing sent
  local v, err, code = self.db:command({ count = "articles", query = {} })
  lu.assertNil(v)
  lu.assertEquals(code, "invalid")
  lu.assertStrContains(err, "pairs")
end

function TestCrud:test_info()
  local i = ok(self.db:info())
  lu.assertIsNumber(i.wire_version)
  lu.assertTrue(i.wire_version >= 6)
  lu.assertIsBoolean(i.transactions)
  lu.assertEquals(i.max_bson_size, rawdb.max_bson_size())
  lu.assertTrue(i.replica_set == false or type(i.replica_set) == "string")
end

function TestCrud:test_drop()
  ok(self.c:insert_one({ _id = 1 }))
  lu.assertTrue(ok(self.c:drop()))
  lu.assertEquals(rawdb.count(self.name, "articles"), 0)
  lu.assertTrue(ok(self.c:drop()), "dropping what is not there is fine")
end

function TestCrud:test_from_coroutines()
  local cos = {}
  for n = 1, 3 do
    cos[n] = coroutine.wrap(function()
      for i = 1, 5 do
        ok(self.c:insert_one({ _id = n * 100 + i }))
        coroutine.yield(i)
      end
      local cur = ok(self.c:find({ _id = { ["$gte"] = n * 100, ["$lt"] = n * 100 + 100 } }, { batch_size = 2 }))
      local seen = 0
      while true do
        local d = cur:next()
        if not d then break end
        seen = seen + 1
        coroutine.yield(d._id)
      end
      return "done", seen
    end)
  end
  local finished = {}
  while #finished < 3 do
    for n = 1, 3 do
      if not finished[n] then
        local a, b = cos[n]()
        if a == "done" then finished[n] = b; finished[#finished + 1] = b end
      end
    end
  end
  lu.assertEquals(rawdb.count(self.name, "articles"), 15)
  for n = 1, 3 do lu.assertEquals(finished[n], 5) end
end

function TestCrud:test_closed_database()
  local cur = ok(self.c:find({}))
  self.db:close()
  self.db:close()
  for _, call in ipairs {
    function() return self.c:insert_one({ _id = 1 }) end,
    function() return self.c:find_one({}) end,
    function() return self.c:find({}) end,
    function() return self.c:count({}) end,
    function() return self.c:update_one({}, { ["$set"] = { a = 1 } }) end,
    function() return self.c:delete_many({}) end,
    function() return self.c:bulk_write({ { insert_one = {} } }) end,
    function() return self.c:list_indexes() end,
    function() return self.db:command({ ping = 1 }) end,
    function() return self.db:collection("x") end,
    function() return self.db:info() end,
    function() return cur:next() end,
  } do
    local v, err, code = call()
    lu.assertNil(v)
    lu.assertEquals(code, "closed", err)
    lu.assertStrContains(err, "closed")
  end
  self.db = nil
end

