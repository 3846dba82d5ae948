-- spec/02-documents/model_bulk_spec.lua - bulk writes of mongostore.model:
-- insert_many attempts every document when unordered and reports each failure
-- by its index, validation failures included, never sending an invalid
-- document (Mongoose #15771); bulk_save sends every delta in one round trip,
-- leaves the written documents in sync in memory (revision bumped) and lists
-- the rest in err.failed, stale ones included (Mongoose #14763, #15800);
-- bulk_write takes model.update_one and the other constructors.
local lu = require "luaunit"
local model = require "mongostore.model"

local Q, ops = model.Q, model.ops

local articles = require "fixtures.articles"
local ok = articles.ok

TestModelBulk = {}

function TestModelBulk:setUp()
  articles.open(self, "mbulk", { indexes = { { keys = { { "title", 1 } }, unique = true } } })
end

function TestModelBulk:tearDown()
  if self.db then self.db:close() end
end

function TestModelBulk:test_seed_bulk()
  local A = self.Article
  local list = {}
  for i = 0, 2 do list[#list + 1] = A:new { title = "bulk " .. i } end
  local result = ok(A:insert_many(list))
  lu.assertEquals({ #result.inserted, #result.errors }, { 3, 0 })
  for _, d in ipairs(result.inserted) do
    lu.assertFalse(d.is_new)
    lu.assertEquals(d.rev, 0)
  end
  local docs = ok(A:find(Q.title:prefix("bulk")):all())
  for _, doc in ipairs(docs) do doc.views = doc.views + 5 end
  local before = ok(self.db:stats())
  lu.assertEquals(ok(A:bulk_save(docs)), 3)
  local after = ok(self.db:stats())
  lu.assertEquals(after.total - before.total, 1, "one round trip")
  for _, doc in ipairs(docs) do
    lu.assertEquals(doc.rev, 1)
    lu.assertEquals(doc:changes(), {})
  end
  ok(A:bulk_write { model.update_one(Q.title:eq("bulk 0"), ops.inc { views = 1 }) })
  lu.assertEquals(ok(A:find(Q.title:eq("bulk 0")):one()).views, 6)
end

-- Mongoose #15771: an unordered insert_many reports validation failures by
-- index beside the server's refusals, and sends no invalid document.
function TestModelBulk:test_insert_many_unordered_reports_every_failure()
  local A = self.Article
  ok(A:insert { title = "taken" })
  local before = ok(self.db:stats())
  local list = {
    { title = "ok 1" },
    { title = "bad", views = "many" },     -- invalid: never sent
    { title = "taken" },                    -- refused by the server: duplicate
    { title = "ok 2", nope = true },        -- invalid: unknown field
    { title = "ok 3" },
  }
  local res = ok(A:insert_many(list, { ordered = false }))
  local after = ok(self.db:stats())
  lu.assertEquals(after.insert - before.insert, 1, "one insert command for the valid ones")
  lu.assertEquals(#res.inserted, 2)
  lu.assertEquals({ res.inserted[1].title, res.inserted[2].title }, { "ok 1", "ok 3" })
  lu.assertEquals(#res.errors, 3)
  lu.assertEquals({ res.errors[1].index, res.errors[1].code, res.errors[1].detail.errors[1].field },
                  { 2, "validation", "views" })
  lu.assertEquals({ res.errors[2].index, res.errors[2].code, res.errors[2].detail.server_code }, { 3, "duplicate", 11000 })
  lu.assertEquals({ res.errors[3].index, res.errors[3].code, res.errors[3].detail.errors[1].field },
                  { 4, "validation", "nope" })
  -- one per-item shape: index, a string message, code, detail
  for _, e in ipairs(res.errors) do
    lu.assertIsString(e.message)
    lu.assertIsTable(e.detail)
    lu.assertNil(e.errors)
    lu.assertNil(e.server_code)
  end
  lu.assertEquals(ok(self.db:collection("articles"):count({ title = "bad" })), 0)
  lu.assertEquals(ok(A:count()), 3)
  -- the refused ones are still new, with nothing the model set left on them
  lu.assertTrue(list[3].is_new)
  lu.assertNil(list[3].rev)
  lu.assertNil(list[3].created_at)
end

function TestModelBulk:test_insert_many_ordered_stops_at_the_first_failure()
  local A = self.Article
  local res = ok(A:insert_many { { title = "a" }, { title = 5 }, { title = "c" } })
  lu.assertEquals(#res.inserted, 1)
  lu.assertEquals({ res.errors[1].index, res.errors[1].code }, { 2, "validation" })
  lu.assertEquals(ok(A:count()), 1, "nothing after the invalid one")
end

-- Mongoose #14763, #15800: a bulk save with stale documents writes the rest,
-- keeps them in sync, and names the stale ones (their state untouched).
function TestModelBulk:test_bulk_save_lists_stale_and_duplicate_documents()
  local A = self.Article
  for i = 1, 4 do ok(A:insert { title = "d" .. i }) end
  local docs = ok(A:find():sort { { "title", 1 } }:all())
  ok(A:update(docs[2].id, ops.inc { views = 100 }))         -- docs[2] is stale now
  for _, d in ipairs(docs) do d.views = d.views + 1 end
  docs[3].title = "d4"                                        -- refused: the title is taken
  local fresh = A:new { title = "d5" }                        -- a new one is inserted
  docs[5] = fresh
  local unchanged = ok(A:get(docs[1].id))                     -- unchanged: nothing sent for it
  docs[6] = unchanged
  local before = ok(self.db:stats())
  local n, err, code, detail = A:bulk_save(docs)
  local after = ok(self.db:stats())
  lu.assertNil(n)
  lu.assertEquals(code, "stale")
  lu.assertIsString(err)
  lu.assertStrContains(err, "2 of 6 not written")
  lu.assertEquals(detail.written, 3)
  lu.assertEquals(#detail.failed, 2)
  lu.assertEquals({ detail.failed[1].index, detail.failed[1].code }, { 2, "stale" })
  lu.assertEquals(detail.failed[1].detail, { found = 1 }, "the revision found")
  lu.assertEquals({ detail.failed[2].index, detail.failed[2].code, detail.failed[2].detail.server_code },
                  { 3, "duplicate", 11000 })
  lu.assertIs(detail.failed[1].doc, docs[2])
  lu.assertIsString(detail.failed[2].message)
  lu.assertEquals(after.update - before.update, 1, "the deltas in one round trip")
  lu.assertEquals(after.find - before.find, 1, "and one read to tell which matched nothing")
  -- the written ones are in sync, the others as they were
  lu.assertEquals({ docs[1].rev, docs[4].rev, fresh.rev }, { 1, 1, 0 })
  lu.assertFalse(fresh.is_new)
  lu.assertEquals(docs[1]:changes(), {})
  lu.assertEquals(docs[2].rev, 0)
  lu.assertEquals(docs[2]:changes(), { ["$set"] = { views = 1 } })
  lu.assertEquals(docs[3].rev, 0)
  lu.assertEquals(docs[3]:changes(), { ["$set"] = { title = "d4", views = 1 } })
  lu.assertEquals(ok(A:get(docs[2].id)).views, 100)
  -- after a reload the stale one saves
  ok(docs[2]:reload())
  docs[2].views = docs[2].views + 1
  lu.assertEquals(ok(A:bulk_save { docs[2] }), 1)
  lu.assertEquals(ok(A:get(docs[2].id)).views, 101)
end

function TestModelBulk:test_bulk_save_validates_before_sending()
  local A = self.Article
  local a = ok(A:insert { title = "v" })
  a.views = "lots"
  local before = ok(self.db:stats())
  local n, _, code, detail = A:bulk_save { a }
  lu.assertNil(n)
  lu.assertEquals(code, "validation")
  lu.assertEquals({ detail.failed[1].code, detail.failed[1].detail.errors[1].field }, { "validation", "views" })
  lu.assertEquals(ok(self.db:stats()).total - before.total, 0, "nothing sent")
  lu.assertEquals(ok(A:bulk_save({ a }, { validate = false })), 1, "validate = false sends it")
end

function TestModelBulk:test_bulk_write_constructors()
  local A = self.Article
  for i = 1, 3 do ok(A:insert { title = "w" .. i }) end
  local r = ok(A:bulk_write {
    model.insert_one { title = "w4" },
    model.update_one(Q.title:eq("w1"), ops.inc { views = 1 }),
    model.update_many(Q.title:prefix("w"), ops.push { tags = "all" }),
    model.upsert_one(Q.title:eq("w9"), ops.inc { views = 9 }),
    model.delete_one(Q.title:eq("w2")),
    model.delete_many(Q.title:eq("w3"), { hard = true }),
  })
  lu.assertEquals({ r.inserted, r.upserted, r.deleted }, { 1, 1, 1 })
  lu.assertEquals(ok(A:get(ok(A:find(Q.title:eq("w1")):one()).id)).views, 1)
  local w9 = ok(A:find(Q.title:eq("w9")):one())
  lu.assertEquals({ w9.views, w9.rev }, { 9, 1 })
  lu.assertNotNil(w9.created_at)
  lu.assertEquals(A:find(Q.title:eq("w2")):first(), nil, "soft deleted")
  lu.assertEquals(ok(A:count(Q.title:eq("w2"), { unscoped = true })), 1)
  lu.assertEquals(ok(A:count(Q.title:eq("w3"), { unscoped = true })), 0, "hard deleted")
  lu.assertEquals(ok(A:find(Q.title:eq("w4")):one()).tags, { "all" })
  -- a bad value in any op fails the whole call, nothing sent
  local before = ok(self.db:stats())
  local v, err, code, detail = A:bulk_write { model.update_one(Q.title:eq("w1"), ops.inc { views = 1 }),
                                model.update_one(Q.title:eq("w1"), { views = "x" }) }
  lu.assertNil(v)
  lu.assertIsString(err)
  lu.assertEquals({ code, detail.errors[1].index, detail.errors[1].field }, { "validation", 2, "views" })
  lu.assertEquals({ #detail.failed, detail.failed[1].index, detail.failed[1].code,
                    detail.failed[1].detail.errors[1].field }, { 1, 2, "validation", "views" })
  lu.assertEquals(ok(self.db:stats()).total - before.total, 0)
  lu.assertErrorMsgContains("not a model", A.bulk_write, A, { { update_one = {} } })
end
