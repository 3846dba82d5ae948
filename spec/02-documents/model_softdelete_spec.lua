-- spec/02-documents/model_softdelete_spec.lua - soft delete in mongostore.model:
-- a deleted document is hidden from every read and write path (get, find, count,
-- distinct, aggregate, find():update, update, upsert, bulk_write, save) unless
-- unscoped; hard delete; restore by an unscoped update (the seed's "Soft
-- delete"; mongoose-delete #29, #152, mongoose-soft-delete #25, #28). The unique
-- index that ignores deleted documents is spec/05-secantus/model_index_spec.lua.
local lu = require "luaunit"
local ms = require "mongostore"
local model = require "mongostore.model"

local Q, ops = model.Q, model.ops

local articles = require "fixtures.articles"
local ok = articles.ok

TestModelSoftDelete = {}

function TestModelSoftDelete:setUp()
  articles.open(self, "msoft")
  self.live = ok(self.Article:insert { title = "live", views = 1, tags = { "x" } })
  self.gone = ok(self.Article:insert { title = "gone", views = 1, tags = { "y" } })
  ok(self.gone:delete())
end

function TestModelSoftDelete:tearDown()
  if self.db then self.db:close() end
end

function TestModelSoftDelete:test_seed_soft_delete_restore_hard_delete()
  local A = self.Article
  local id = self.gone.id
  lu.assertEquals(A:get(id), nil)
  lu.assertEquals(getmetatable(self.gone.deleted_at), getmetatable(ms.date()))
  lu.assertEquals(ok(A:find():unscoped("soft_delete"):count()), 2)
  lu.assertEquals(ok(A:find():count()), 1)
  -- restore
  lu.assertEquals(A:find(Q.id:eq(id)):unscoped("soft_delete"):update { deleted_at = ms.null }, 1)
  local back = ok(A:get(id))
  lu.assertEquals(back.title, "gone")
  lu.assertNil(back.deleted_at, "a stored null reads as absent: `if doc.deleted_at` means deleted")
  lu.assertEquals(back:changes(), {})
  -- really remove
  ok(back:delete { hard = true })
  lu.assertEquals(ok(A:find():unscoped("soft_delete"):count()), 1)
  lu.assertFalse(back.is_new)
  local v, err, code = back:save()
  lu.assertEquals({ v, code, type(err) }, { nil, "not_found", "string" })
  lu.assertEquals(ok(self.db:collection("articles"):count()), 1)
end

-- mongoose-delete #29, #152; mongoose-soft-delete #25, #28: every read path.
function TestModelSoftDelete:test_hidden_from_every_read_path()
  local A = self.Article
  lu.assertEquals(A:get(self.gone.id), nil, "get")
  lu.assertEquals(#ok(A:find():all()), 1, "find")
  lu.assertEquals(A:find(Q.title:eq("gone")):first(), nil, "first")
  lu.assertEquals(ok(A:find(Q.views:eq(1)):count()), 1, "find():count")
  lu.assertEquals(ok(A:count()), 1, "count")
  lu.assertEquals(ok(A:count(Q.views:eq(1))), 1, "count(q)")
  lu.assertEquals(ok(A:distinct("title")), { "live" }, "distinct")
  lu.assertEquals(#ok(A:lean()), 1, "lean")
  local n = 0
  for _ in A:find():each() do n = n + 1 end
  lu.assertEquals(n, 1, "each")
  local agg = ok(A:aggregate { { ["$group"] = { _id = ms.null, n = { ["$sum"] = 1 } } } })
  lu.assertEquals(agg[1].n, 1, "aggregate")
  -- and all of them see it when unscoped
  lu.assertEquals(ok(A:get(self.gone.id, { unscoped = true })).title, "gone")
  lu.assertEquals(#ok(A:find():unscoped():all()), 2)
  lu.assertEquals(ok(A:count(nil, { unscoped = true })), 2)
  local titles = ok(A:distinct("title", nil, { unscoped = true }))
  table.sort(titles)
  lu.assertEquals(titles, { "gone", "live" })
  agg = ok(A:aggregate({ { ["$group"] = { _id = ms.null, n = { ["$sum"] = 1 } } } }, { unscoped = true }))
  lu.assertEquals(agg[1].n, 2)
  -- a filter on deleted_at itself is kept beside the scope, not replaced by it
  lu.assertEquals(ok(A:count(Q.deleted_at:exists(true))), 0)
  lu.assertEquals(ok(A:find(Q.deleted_at:exists(true)):unscoped():count()), 1)
end

function TestModelSoftDelete:test_hidden_from_every_write_path()
  local A = self.Article
  local coll = self.db:collection("articles")
  local function gone_views() return ok(coll:find_one({ _id = self.gone.id })).views end
  lu.assertEquals(A:find(Q.views:eq(1)):update(ops.inc { views = 1 }), 1, "find():update")
  local v, _, code = A:update(self.gone.id, ops.inc { views = 1 })
  lu.assertEquals({ v, code }, { nil, "not_found" }, "update")
  local up = ok(A:upsert(Q.title:eq("gone"), ops.inc { views = 1 }))
  lu.assertNotEquals(tostring(up.id), tostring(self.gone.id), "upsert inserts a new one rather than touch the deleted")
  local r = ok(A:bulk_write {
    model.update_many(Q.title:eq("gone"), ops.inc { views = 1 }),
    model.update_one(Q.id:eq(self.gone.id), ops.inc { views = 1 }),
    model.delete_many(Q.title:eq("gone"), { hard = true }),
  })
  lu.assertEquals(r.deleted, 1, "the upserted live one; the soft-deleted one stays")
  lu.assertEquals(gone_views(), 1, "the deleted document was never written")
  -- a stale in-memory copy of a document someone else soft-deleted cannot be saved into it
  ok(self.live:reload())
  local other = ok(A:get(self.live.id))
  ok(self.live:delete())
  other.title = "written into a deleted document?"
  local v2, _, code2 = other:save()
  lu.assertNil(v2)
  lu.assertEquals(code2, "not_found", "hidden by the scope: not there for a save")
  lu.assertEquals(A:find():delete(), 0, "find():delete sees nothing left")
  lu.assertEquals(A:find():unscoped():delete { hard = true }, 2)
  lu.assertEquals(ok(coll:count()), 0)
end

-- A model without a revision: the scope alone keeps a save out of a deleted document.
function TestModelSoftDelete:test_scope_without_revision()
  local Note = model.define { name = "Note", collection = "notes",
                              fields = { text = "string", deleted_at = "deleted_at" } }
  ok(model.registry(self.db, { Note }))
  local n = ok(Note:insert { text = "a" })
  local copy = ok(Note:get(n.id))
  ok(n:delete())
  copy.text = "b"
  local v, _, code = copy:save()
  lu.assertEquals({ v, code }, { nil, "not_found" })
  lu.assertEquals(ok(Note:get(n.id, { unscoped = true })).text, "a")
  -- the deleted document itself, held in memory, can still be written
  n.text = "edited while deleted"
  ok(n:save())
  lu.assertEquals(ok(Note:get(n.id, { unscoped = true })).text, "edited while deleted")
end

-- Issue 21, item 8c: a second delete of the same document deletes nothing and
-- says so (nil, err, "not_found"); deleted_at and the revision do not move,
-- in memory or in the database. Soft then soft, soft then via an unscoped
-- read's copy, hard then hard, and a model without soft delete.
function TestModelSoftDelete:test_a_second_delete_reports_nothing_deleted()
  local A = self.Article
  local coll = self.db:collection("articles")
  local function stored(id) return ok(coll:find_one { _id = id }) end
  -- soft, then the same copy again
  local d = ok(A:insert { title = "twice" })
  lu.assertTrue(ok(d:delete()))
  local at, rev = d.deleted_at, d.rev
  local before = stored(d.id)
  local v, err, code = d:delete()
  lu.assertEquals({ v, code, type(err) }, { nil, "not_found", "string" })
  lu.assertStrContains(err, "deleted already")
  lu.assertEquals({ d.deleted_at, d.rev }, { at, rev }, "in memory: unmoved")
  local after = stored(d.id)
  lu.assertEquals({ after.deleted_at, after.rev, after.updated_at }, { before.deleted_at, before.rev, before.updated_at })
  lu.assertEquals(d:changes(), {})
  -- a copy read unscoped, after the delete: the same answer
  local copy = ok(A:get(d.id, { unscoped = true }))
  v, err, code = copy:delete()
  lu.assertEquals({ v, code }, { nil, "not_found" })
  lu.assertStrContains(tostring(err), "deleted already")
  lu.assertEquals(stored(d.id).rev, rev)
  -- the copy from before the delete: hidden by the scope, not_found too
  local e = ok(A:insert { title = "old copy" })
  local early = ok(A:get(e.id))
  ok(e:delete())
  lu.assertEquals(select(3, early:delete()), "not_found")
  lu.assertEquals(stored(e.id).rev, e.rev)
  -- a soft-deleted one can still be removed for good, once
  lu.assertTrue(ok(d:delete { hard = true }))
  lu.assertNil(coll:find_one { _id = d.id })
  v, err, code = d:delete { hard = true }
  lu.assertEquals({ v, code }, { nil, "not_found" })
  lu.assertStrContains(tostring(err), "deleted already")
  lu.assertEquals(select(3, d:delete()), "not_found")
  -- a model without soft delete: hard every time
  local Tag = model.define { name = "Tag", collection = "tags", fields = { name = "string", rev = "revision" } }
  ok(model.registry(self.db, { Tag }))
  local t = ok(Tag:insert { name = "t" })
  local t2 = ok(Tag:get(t.id))
  lu.assertTrue(ok(t:delete()))
  lu.assertEquals(select(3, t:delete()), "not_found")
  lu.assertEquals(select(3, t2:delete()), "not_found")
end
