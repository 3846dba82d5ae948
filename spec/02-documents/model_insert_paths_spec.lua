-- spec/02-documents/model_insert_paths_spec.lua - the four insert paths of
-- mongostore.model (insert, insert_many, bulk_save of a new document,
-- bulk_write's insert_one) share one preparation (issue 21, item 8a): a
-- model with string ids refuses a document without an id on each, nothing
-- written (insert_many, bulk_save and bulk_write used to send it and the
-- server made up an ObjectId); each stores the same document for the same
-- fields; bulk_write's inserted documents are tracked, its refused ones left
-- as they were. The transaction journal of bulk_write's insert is
-- spec/05-secantus/model_transaction_spec.lua.
local lu = require "luaunit"
local ms = require "mongostore"
local model = require "mongostore.model"

local articles = require "fixtures.articles"
local ok = articles.ok

TestModelInsertPaths = {}

function TestModelInsertPaths:setUp()
  articles.open(self, "mins")
  self.Slug = model.define { name = "Slug", collection = "slugs",
                             fields = { id = "string", title = { "string", default = "" }, rev = "revision",
                                        created_at = "created_at" } }
  ok(model.registry(self.db, { self.Slug }))
end

function TestModelInsertPaths:tearDown()
  if self.db then self.db:close() end
end

local function assert_id_refused(errs, where)
  lu.assertEquals(errs[1].field, "id", where)
  lu.assertStrContains(errs[1].message, "id is required", false, where)
end

local function assert_untouched(doc, where)
  lu.assertTrue(doc.is_new, where)
  lu.assertNil(rawget(doc, "_id"), where)
  lu.assertNil(doc.rev, where)
  lu.assertNil(doc.created_at, where)
end

function TestModelInsertPaths:test_string_ids_refuse_a_document_without_id_on_every_path()
  local S = self.Slug
  local before = ok(self.db:stats())
  -- insert
  local d = S:new { title = "a" }
  local v, err, code, detail = S:insert(d)
  lu.assertEquals({ v, code, type(err) }, { nil, "validation", "string" })
  assert_id_refused(detail.errors, "insert")
  assert_untouched(d, "insert")
  -- insert_many, ordered and not
  for _, ordered in ipairs { true, false } do
    local list = { S:new { title = "b" }, { title = "c" } }
    local res = ok(S:insert_many(list, { ordered = ordered }))
    lu.assertEquals(#res.inserted, 0)
    lu.assertEquals({ res.errors[1].index, res.errors[1].code }, { 1, "validation" })
    assert_id_refused(res.errors[1].detail.errors, "insert_many")
    lu.assertEquals(#res.errors, ordered and 1 or 2)
    assert_untouched(list[1], "insert_many")
  end
  -- bulk_save of a new document
  local n
  local e = S:new { title = "d" }
  n, err, code, detail = S:bulk_save { e }
  lu.assertEquals({ n, code, detail.failed[1].code, detail.failed[1].index }, { nil, "validation", "validation", 1 })
  lu.assertIsString(err)
  assert_id_refused(detail.failed[1].detail.errors, "bulk_save")
  assert_untouched(e, "bulk_save")
  -- bulk_write's insert_one
  local f = S:new { title = "e" }
  v, err, code, detail = S:bulk_write { model.insert_one(f) }
  lu.assertEquals({ v, code, type(err) }, { nil, "validation", "string" })
  lu.assertEquals(detail.errors[1].index, 1)
  assert_id_refused(detail.errors, "bulk_write")
  assert_untouched(f, "bulk_write")
  -- nothing reached the server
  lu.assertEquals(ok(self.db:stats()).total - before.total, 0)
  lu.assertEquals(ok(self.db:collection("slugs"):count {}), 0)
  -- with an id, every path writes
  lu.assertEquals(ok(S:insert { id = "s1" }).id, "s1")
  lu.assertEquals(#ok(S:insert_many { { id = "s2" } }).inserted, 1)
  lu.assertEquals(ok(S:bulk_save { S:new { id = "s3" } }), 1)
  lu.assertEquals(ok(S:bulk_write { model.insert_one { id = "s4" } }).inserted, 1)
  for _, id in ipairs { "s1", "s2", "s3", "s4" } do lu.assertEquals(ok(S:get(id)).rev, 0) end
end

-- The same fields through each path: the same stored document (defaults, the
-- model's fields, an ObjectId id), and a tracked document in memory.
function TestModelInsertPaths:test_every_path_stores_the_same_document()
  local A = self.Article
  local made = {}
  made.insert = ok(A:insert { title = "same" })
  made.insert_many = ok(A:insert_many { { title = "same" } }).inserted[1]
  local b = A:new { title = "same" }
  ok(A:bulk_save { b })
  made.bulk_save = b
  local w = A:new { title = "same" }
  ok(A:bulk_write { model.insert_one(w) })
  made.bulk_write = w
  local shape
  for how, doc in pairs(made) do
    lu.assertFalse(doc.is_new, how)
    lu.assertEquals(doc:changes(), {}, how)
    lu.assertEquals(getmetatable(doc.id), getmetatable(ms.objectid()), how)
    local stored = ok(A:find(model.Q.id:eq(doc.id)):lean())[1]
    lu.assertNotNil(stored, how)
    local keys = {}
    for k in pairs(stored) do keys[#keys + 1] = k end
    table.sort(keys)
    keys = table.concat(keys, " ")
    shape = shape or keys
    lu.assertEquals(keys, shape, how)
    lu.assertEquals({ stored.title, stored.views, stored.rev, #stored.tags }, { "same", 0, 0, 0 }, how)
    lu.assertEquals(getmetatable(stored.created_at), getmetatable(ms.date()), how)
    -- and it saves as any tracked document does
    doc.views = 1
    ok(doc:save())
    lu.assertEquals(doc.rev, 1, how)
  end
end

-- bulk_write: a refused insert (a duplicate id) is left as it was, the ones
-- written are tracked; ordered, the ones after the refusal were never sent.
function TestModelInsertPaths:test_bulk_write_tracks_what_it_inserted()
  local S = self.Slug
  ok(S:insert { id = "taken" })
  for _, ordered in ipairs { false, true } do
    local tag = ordered and "o" or "u"
    local a, dup, c = S:new { id = tag .. "a" }, S:new { id = "taken" }, S:new { id = tag .. "c" }
    local res = ok(S:bulk_write({ model.insert_one(a), model.insert_one(dup), model.insert_one(c) },
      { ordered = ordered }))
    lu.assertEquals({ #res.errors, res.errors[1].index, res.errors[1].code }, { 1, 2, "duplicate" })
    lu.assertFalse(a.is_new)
    lu.assertEquals(a.rev, 0)
    lu.assertTrue(dup.is_new, "refused")
    lu.assertNil(dup.rev)
    lu.assertEquals(dup.id, "taken", "its own id stays")
    lu.assertEquals(c.is_new, ordered, ordered and "never sent" or "written")
    lu.assertEquals(c.rev, (not ordered) and 0 or nil)
    lu.assertEquals(ok(S:count { _id = tag .. "c" }), ordered and 0 or 1)
  end
  -- a stored document is not inserted again
  local stored = ok(S:get("taken"))
  lu.assertErrorMsgContains("item 1 is stored already", S.bulk_write, S, { model.insert_one(stored) })
  -- a failure of any op sends nothing and leaves the inserts as they were
  local x = S:new { id = "x" }
  local v, _, code, detail = S:bulk_write { model.insert_one(x), model.update_one({ title = "a" }, { title = 5 }) }
  lu.assertEquals({ v, code, detail.errors[1].index }, { nil, "validation", 2 })
  lu.assertTrue(x.is_new)
  lu.assertNil(x.rev)
  lu.assertNil(x.created_at)
end
