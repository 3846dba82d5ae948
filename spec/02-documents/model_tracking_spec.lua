-- spec/02-documents/model_tracking_spec.lua - change tracking of mongostore.model
-- documents: a snapshot at load, the difference at save (nested documents as
-- dotted paths, a changed array whole, nothing sent for an unchanged document,
-- counted with db:stats()), change marks cleared after a save, and documents
-- not from a tracked read refused with a duplicate that says why (the seed's
-- "Change tracking"); the ODM failures the issue names, each by its number.
local lu = require "luaunit"
local ms = require "mongostore"
local model = require "mongostore.model"
local track = require "mongostore.track"
local helper = require "helpers"
local rawdb = require "helpers.rawdb"

local Q, ops = model.Q, model.ops

local articles = require "fixtures.articles"
local ok = articles.ok

local function define()
  return articles.define { fields = {
    author = { "document", fields = { name = "string", address = { "document", fields = { city = "string" } } } },
    meta = "document",
  } }
end

TestModelTracking = {}

function TestModelTracking:setUp()
  self.name = helper.fresh_db("mtrack")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  self.Article = define()
  self.registry = ok(model.registry(self.db, { self.Article }))
end

function TestModelTracking:tearDown()
  if self.db then self.db:close() end
end

-- commands the pool started while fn ran (this process is the only client of its server's database)
function TestModelTracking:commands(fn)
  local before = ok(self.db:stats())
  fn()
  local after = ok(self.db:stats())
  return after.total - before.total, after.update - before.update
end

function TestModelTracking:raw(id)
  for _, d in ipairs(rawdb.docs(self.name, "articles")) do
    if type(d._id) == "table" and d._id.text == tostring(id) then return d end
  end
end

function TestModelTracking:test_seed_change_tracking()
  local Article = self.Article
  local a = ok(Article:insert { title = "Draft" })
  a.title = "Final"
  a.tags[#a.tags + 1] = "news"
  lu.assertEquals(a:changes(), { ["$set"] = { title = "Final", tags = { "news" } } })
  ok(a:save())
  lu.assertEquals(a:changes(), {})
  lu.assertEquals(a.rev, 1)
  local back = ok(Article:get(a.id))
  lu.assertEquals({ back.title, back.tags, back.rev }, { "Final", { "news" }, 1 })
end

function TestModelTracking:test_unchanged_save_sends_no_command()
  local a = ok(self.Article:insert { title = "Quiet" })
  local n = self:commands(function() ok(a:save()) end)
  lu.assertEquals(n, 0, "an unchanged new document's save sends nothing")
  local loaded = ok(self.Article:get(a.id))
  n = self:commands(function() ok(loaded:save()); ok(loaded:save()) end)
  lu.assertEquals(n, 0, "an unchanged loaded document's save sends nothing")
  loaded.views = 1
  local total, updates = self:commands(function() ok(loaded:save()) end)
  lu.assertEquals({ total, updates }, { 1, 1 }, "one change: one update, nothing else")
  total = self:commands(function() ok(loaded:save()) end)
  lu.assertEquals(total, 0, "saved: nothing left to send")
end

-- Nested documents become dotted paths; a changed array is set whole;
-- a removed key is unset.
function TestModelTracking:test_nested_documents_are_dotted_paths()
  local a = ok(self.Article:insert { title = "N", author = { name = "Ann", address = { city = "Oslo" } },
                                     meta = { a = 1, b = 2 } })
  a.author.address.city = "Bergen"
  a.meta.b = nil
  a.meta.c = { deep = true }
  lu.assertEquals(a:changes(), {
    ["$set"] = { ["author.address.city"] = "Bergen", ["meta.c"] = { deep = true } },
    ["$unset"] = { ["meta.b"] = true },
  })
  ok(a:save())
  local raw = self:raw(a.id)
  lu.assertEquals(raw.author, { name = "Ann", address = { city = "Bergen" } })
  lu.assertEquals(raw.meta, { a = 1, c = { deep = true } })
  lu.assertEquals(a:changes(), {})
end

-- Mongoose #296, #7779; MongoEngine #1038, #2392: a change made in place inside
-- a nested table or an array, with no setter and no mark, is still sent.
function TestModelTracking:test_in_place_changes_of_nested_tables_and_arrays_are_saved()
  local a = ok(self.Article:insert { title = "P", tags = { "a", "b" }, author = { name = "X" } })
  local loaded = ok(self.Article:get(a.id))
  table.insert(loaded.tags, 1, "first")       -- in place, in an array read back from the server
  loaded.author.name = "Y"                     -- in place, in a nested document
  ok(loaded:save())
  local raw = self:raw(a.id)
  lu.assertEquals(raw.tags, { "first", "a", "b" })
  lu.assertEquals(raw.author.name, "Y")
  table.remove(loaded.tags)                     -- shrink in place
  loaded.tags[1] = "changed"
  ok(loaded:save())
  lu.assertEquals(self:raw(a.id).tags, { "changed", "a" })
end

-- MongoEngine PR #927: a parent and its child path in one $set, which the
-- server refuses. A replaced parent is sent alone, never with its children.
function TestModelTracking:test_parent_and_child_path_never_together()
  local a = ok(self.Article:insert { title = "PC", author = { name = "A", address = { city = "C" } } })
  a.author.address.city = "D"                  -- a child change ...
  a.author = { name = "B", address = { city = "E" } }   -- ... then the parent replaced
  local ch = a:changes()
  local paths = {}
  for p in pairs(ch["$set"]) do paths[#paths + 1] = p end
  table.sort(paths)
  for i = 1, #paths do
    for j = 1, #paths do
      if i ~= j then lu.assertNotEquals(paths[j]:sub(1, #paths[i] + 1), paths[i] .. ".", "prefix pair sent") end
    end
  end
  ok(a:save())
  lu.assertEquals(self:raw(a.id).author, { name = "B", address = { city = "E" } })
  -- an update given a parent and its child is invalid before anything is sent
  articles.invalid("both given", self.Article.update, self.Article, a.id,
    ops.set { author = { name = "Z" } }, ops.set { ["author.name"] = "W" })
end

-- ODMantic #87: change marks are cleared after a save, so the next save sends
-- only what changed since.
function TestModelTracking:test_marks_cleared_after_save()
  local a = ok(self.Article:insert { title = "M" })
  a.title = "M2"
  ok(a:save())
  a.views = 3
  lu.assertEquals(a:changes(), { ["$set"] = { views = 3 } }, "title is not sent again")
  -- another writer changes the title; our next save must not put ours back
  ok(self.db:collection("articles"):update_one({ _id = a.id }, { ["$set"] = { title = "theirs" } }))
  ok(a:save())
  lu.assertEquals(self:raw(a.id).title, "theirs")
  lu.assertEquals(self:raw(a.id).views, 3)
end

-- A document not from a tracked read has no snapshot: saving it tries an
-- insert, which fails duplicate and says why.
function TestModelTracking:test_untracked_copies_fail_duplicate_and_say_why()
  local a = ok(self.Article:insert { title = "Orig" })
  for _, make in ipairs {
    function() return track.copy(a) end,                                   -- a deep copy of a tracked document
    function() return self.Article:new(ok(self.Article:lean(Q.id:eq(a.id)))[1]) end,   -- a lean result
  } do
    local c = make()
    c.title = "copy"
    lu.assertTrue(c.is_new)
    local v, err, code, detail = c:save()
    lu.assertNil(v)
    lu.assertEquals(code, "duplicate")
    lu.assertIsString(err)
    lu.assertStrContains(err, "no snapshot")
    lu.assertStrContains(err, "hydrate")
    lu.assertEquals(detail.server_code, 11000, "the driver's detail kept")
  end
  lu.assertEquals(ok(self.Article:get(a.id)).title, "Orig")
  -- the same in a bulk save
  local c = track.copy(a)
  c.title = "bulk copy"
  local n, _, code, detail = self.Article:bulk_save { c }
  lu.assertNil(n)
  lu.assertEquals(code, "duplicate")
  lu.assertEquals(detail.failed[1].code, "duplicate")
  lu.assertStrContains(detail.failed[1].message, "no snapshot")
end

function TestModelTracking:test_hydrate_and_lean()
  local a = ok(self.Article:insert { title = "H" })
  local raws = ok(self.Article:lean(Q.title:eq("H")))
  lu.assertEquals(#raws, 1)
  lu.assertFalse(model.is_document(raws[1]), "lean returns plain documents")
  local h = self.Article:hydrate(raws[1])
  lu.assertFalse(h.is_new)
  lu.assertEquals(h:changes(), {})
  h.views = 9
  ok(h:save())
  lu.assertEquals(ok(self.Article:get(a.id)).views, 9)
  -- lean and each read the same documents: each's are tracked
  local seen = 0
  for d in self.Article:find(Q.title:eq("H")):each() do
    seen = seen + 1
    lu.assertTrue(model.is_document(d))
    lu.assertEquals(d:changes(), {})
  end
  lu.assertEquals(seen, 1)
end

function TestModelTracking:test_id_and_is_new()
  local d = self.Article:new { title = "New" }
  lu.assertTrue(d.is_new)
  lu.assertNil(d.id)
  ok(d:insert())
  lu.assertFalse(d.is_new)
  lu.assertEquals(tostring(d.id), tostring(d._id))
  lu.assertEquals(getmetatable(d.id), getmetatable(ms.objectid()))
  lu.assertErrorMsgContains("read-only", function() d.is_new = true end)
  lu.assertErrorMsgContains("immutable", function()
    d.id = ms.objectid()
    d.title = "moved"
    d:save()
  end)
end

-- A model whose ids are not ObjectIds takes them from the caller.
function TestModelTracking:test_declared_id_type()
  local Slug = model.define { name = "Slug", collection = "slugs", fields = { id = "string", n = "integer" } }
  ok(model.registry(self.db, { Slug }))
  local s = ok(Slug:insert { id = "hello", n = 1 })
  lu.assertEquals(s.id, "hello")
  lu.assertEquals(ok(Slug:get("hello")).n, 1)
  local v, _, code = Slug:insert { n = 2 }
  lu.assertNil(v)
  lu.assertEquals(code, "validation")
  local detail
  v, _, code, detail = Slug:insert { id = 5, n = 2 }
  lu.assertNil(v)
  lu.assertEquals({ code, detail.errors[1].field }, { "validation", "_id" })
end
