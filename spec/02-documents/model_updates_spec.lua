-- spec/02-documents/model_updates_spec.lua - mongostore.model's atomic updates:
-- Model:update returns the document in one round trip, find():update touches
-- every match and loads none, upsert inserts with created_at and the revision
-- at 1; every supplied field is validated, unknown and immutable fields raise,
-- an update of no document is not_found (the seed's "Atomic updates").
local lu = require "luaunit"
local ms = require "mongostore"
local model = require "mongostore.model"

local Q, ops = model.Q, model.ops

local articles = require "fixtures.articles"
local ok, invalid = articles.ok, articles.invalid

TestModelUpdates = {}

function TestModelUpdates:setUp()
  articles.open(self, "mupd", { fields = { score = "number", author = { "document", fields = { name = "string" } } } })
end

function TestModelUpdates:tearDown()
  if self.db then self.db:close() end
end

function TestModelUpdates:test_seed_atomic_updates()
  local A = self.Article
  local a = ok(A:insert { title = "Final", tags = { "news" } })
  a.title = "Final"
  local before = ok(self.db:stats())
  local updated = ok(A:update(a.id, ops.inc { views = 1 }, ops.push { tags = "featured" }, { title = "Final v2" }))
  local after = ok(self.db:stats())
  lu.assertEquals(after.total - before.total, 1, "one round trip")
  lu.assertEquals(after.findAndModify - before.findAndModify, 1, "a findAndModify")
  lu.assertEquals({ updated.views, updated.tags, updated.rev, updated.title }, { 1, { "news", "featured" }, 1, "Final v2" })
  lu.assertTrue(model.is_document(updated))
  lu.assertEquals(updated:changes(), {}, "the returned document is tracked")

  local n, r = A:find(Q.views:gte(1)):update(ops.inc { views = 10 })
  lu.assertEquals(n, 1)
  lu.assertEquals({ r.matched, r.modified }, { 1, 1 })

  local created = ok(A:upsert(Q.title:eq("Landing"), ops.inc { views = 1 }, ops.set_on_insert { tags = { "page" } }))
  lu.assertEquals({ created.views, created.tags, created.title, created.rev }, { 1, { "page" }, "Landing", 1 })
  lu.assertEquals(getmetatable(created.created_at), getmetatable(ms.date()))
  -- the same upsert again updates: created_at stays, rev goes on
  local again = ok(A:upsert(Q.title:eq("Landing"), ops.inc { views = 1 }))
  lu.assertEquals({ again.views, again.rev, tostring(again.id) }, { 2, 2, tostring(created.id) })
  lu.assertEquals(again.created_at, created.created_at)
end

function TestModelUpdates:test_every_operator()
  local A = self.Article
  local a = ok(A:insert { title = "Ops", views = 10, score = 2.0, tags = { "a", "b", "c" } })
  local u = ok(A:update(a.id, ops.mul { score = 2 }, ops.min { views = 3 }, ops.add_to_set { tags = ops.each { "a", "d" } },
    ops.set { ["author.name"] = "Ann" }))
  lu.assertEquals({ u.score, u.views, u.tags, u.author.name }, { 4.0, 3, { "a", "b", "c", "d" }, "Ann" })
  u = ok(A:update(a.id, ops.max { views = 7 }, ops.pull { tags = "b" }, ops.unset { "author" }))
  lu.assertEquals({ u.views, u.tags, u.author }, { 7, { "a", "c", "d" }, nil })
  ok(A:update(a.id, ops.pop { tags = 1 }))
  u = ok(A:update(a.id, ops.push { tags = ops.each({ "z" }, { position = 0 }) }))
  lu.assertEquals(u.tags, { "z", "a", "c" })
  lu.assertEquals(u.rev, 4)
  -- one path twice is refused before anything is sent (the server would refuse it)
  invalid("given twice", A.update, A, a.id, ops.pop { tags = 1 }, ops.push { tags = "x" })
end

-- Every supplied field is checked before anything is sent.
function TestModelUpdates:test_supplied_values_are_validated()
  local A = self.Article
  local a = ok(A:insert { title = "V" })
  local before = ok(self.db:stats())
  for _, bad in ipairs {
    { { title = 123 }, "title" },
    { ops.inc { title = 1 }, "title" },
    { ops.inc { views = 1.5 }, "views" },
    { ops.push { tags = 7 }, "tags[]" },
    { ops.push { views = 1 }, "views" },
    { ops.set { tags = { 1, 2 } }, "tags[1]" },
    { ops.set { ["author.name"] = false }, "author.name" },
  } do
    local v, err, code, detail = A:update(a.id, bad[1])
    lu.assertNil(v)
    lu.assertEquals(code, "validation")
    lu.assertIsString(err)
    lu.assertEquals(detail.errors[1].field, bad[2])
    lu.assertStrContains(err, bad[2])
  end
  lu.assertEquals(ok(self.db:stats()).total - before.total, 0, "nothing was sent")
  -- validate = false lets them through
  ok(A:update(a.id, { title = "forced" }, model.options { validate = false }))
end

-- A path the model does not declare, the id, an immutable field or one the
-- model writes itself: the update is invalid, whatever the operator, with
-- validation off too, and nothing is sent.
function TestModelUpdates:test_unknown_and_immutable_fields_are_invalid()
  local A = self.Article
  local a = ok(A:insert { title = "I" })
  local before = ok(self.db:stats())
  invalid("not a field", A.update, A, a.id, { nope = 1 })
  invalid("not a field", A.update, A, a.id, ops.set { ["author.age"] = 1 })
  invalid("immutable", A.update, A, a.id, { id = ms.objectid() })
  invalid("immutable", A.update, A, a.id, { _id = ms.objectid() })
  invalid("immutable", A.update, A, a.id, { created_at = ms.date() })
  invalid("written by the model", A.update, A, a.id, ops.inc { rev = 1 })
  invalid("written by the model", A.update, A, a.id, { updated_at = ms.date() })
  invalid("written by the model", A.update, A, a.id, { deleted_at = ms.date() })
  invalid("written by the model", A.update, A, a.id, ops.unset { "deleted_at" })
  invalid("not a field", function() return A:find():update { nope = 1 } end)
  invalid("immutable", function() return A:upsert(Q.title:eq("x"), { created_at = ms.date() }) end)
  invalid("immutable", A.update, A, a.id, { id = 1 }, model.options { validate = false })
  -- $rename's destination is a path too
  invalid("$rename's destination", A.update, A, a.id, model.trusted { ["$rename"] = { title = "deleted_at" } })
  invalid("$rename's destination", A.update, A, a.id, ops.rename { title = "created_at" })
  invalid("$rename's destination", A.update, A, a.id, ops.rename { title = "isAdmin" })
  lu.assertEquals(ok(self.db:stats()).total - before.total, 0, "nothing was sent")
  local back = ok(A:get(a.id))
  lu.assertEquals({ back.title, back.rev, back.deleted_at }, { "I", a.rev, nil })
end

function TestModelUpdates:test_update_of_no_document_is_not_found()
  local v, err, code = self.Article:update(("0"):rep(24), { title = "nobody" })
  lu.assertNil(v)
  lu.assertEquals(code, "not_found")
  lu.assertIsString(err)
  lu.assertStrContains(err, "000000000000000000000000")
  lu.assertEquals(self.Article:find(Q.title:eq("nobody")):update { views = 1 }, 0)
  -- a nil id would be the filter {} (any document): it is invalid
  ok(self.Article:insert { title = "somebody" })
  invalid("the id is missing", self.Article.get, self.Article, nil)
  invalid("the id is missing", self.Article.update, self.Article, nil, { title = "x" })
  lu.assertEquals(ok(self.Article:find(Q.title:eq("somebody")):count()), 1)
end

-- An upsert that inserts gets the model's defaults for what neither the
-- update nor the filter gives, created_at and the first revision.
function TestModelUpdates:test_upsert_fills_defaults()
  local d = ok(self.Article:upsert(Q.title:eq("Fresh"), ops.inc { views = 2 }))
  lu.assertEquals({ d.title, d.views, d.tags, d.rev }, { "Fresh", 2, {}, 1 })
  lu.assertTrue(ms.is_array(d.tags))
  lu.assertNotNil(d.created_at)
  lu.assertNotNil(d.updated_at)
end

function TestModelUpdates:test_find_sort_limit_skip_first_one()
  local A = self.Article
  for i = 1, 5 do ok(A:insert { title = "t" .. i, views = i }) end
  local top = ok(A:find(Q.views:gte(2)):sort { { "views", -1 } }:limit(2):all())
  lu.assertEquals({ top[1].views, top[2].views }, { 5, 4 })
  lu.assertEquals(ok(A:find():sort { { "views", 1 } }:skip(1):first()).views, 2)
  lu.assertEquals(A:find(Q.views:gt(10)):first(), nil)
  local v, _, code = A:find(Q.views:gt(10)):one()
  lu.assertNil(v)
  lu.assertEquals(code, "not_found")
  v, _, code = A:find(Q.views:gt(1)):one()
  lu.assertNil(v)
  lu.assertEquals(code, "invalid")
  lu.assertEquals(ok(A:find(Q.or_(Q.views:eq(1), Q.title:eq("t5"))):count()), 2)
  lu.assertEquals(ok(A:find(model.trusted { views = { ["$lt"] = 3 } }):count()), 2, "a trusted table is code")
  invalid("holds an operator ($lt)", function() return A:find({ views = { ["$lt"] = 3 } }):count() end)
  lu.assertEquals(ok(A:find({ views = "2" }):count()), 1, "a decimal string is cast to the integer field")
  local ids = {}
  for d in A:find(Q.views:lte(2)):sort { { "views", 1 } }:each() do ids[#ids + 1] = d.views end
  lu.assertEquals(ids, { 1, 2 })
  lu.assertEquals(ok(A:get(top[1].id)).views, 5)
  lu.assertEquals(ok(A:get(tostring(top[1].id))).views, 5, "a hex string is taken for an ObjectId")
end
