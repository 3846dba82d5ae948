-- spec/02-documents/model_revisions_spec.lua - revisions and timestamps of
-- mongostore.model: a stale save fails stale and leaves the document as it was,
-- reload brings it up to date, stale and not_found are told apart, insert starts
-- at 0 and upsert at 1, every update path bumps the revision; created_at and
-- updated_at are BSON dates, written on the paths that should write them
-- (the seed's "Optimistic locking"; grails-data-mapping #118, Mongoose #10974).
local lu = require "luaunit"
local ms = require "mongostore"
local model = require "mongostore.model"
local rawdb = require "helpers.rawdb"

local Q, ops = model.Q, model.ops

local articles = require "fixtures.articles"
local ok = articles.ok

TestModelRevisions = {}

function TestModelRevisions:setUp()
  articles.open(self, "mrev")
end

function TestModelRevisions:tearDown()
  if self.db then self.db:close() end
end

function TestModelRevisions:raw(id)
  for _, d in ipairs(rawdb.docs(self.name, "articles")) do
    if type(d._id) == "table" and d._id.text == tostring(id) then return d end
  end
end

-- the seed: loaded at rev 1, the database moved on to 3
function TestModelRevisions:test_seed_stale_save_then_reload()
  local A = self.Article
  local a = ok(A:insert { title = "Draft" })
  a.title = "Final"
  ok(a:save())
  local stale = a
  ok(A:update(a.id, ops.inc { views = 1 }, { title = "Final v2" }))
  ok(A:find(Q.views:gte(1)):update(ops.inc { views = 10 }))
  lu.assertEquals(stale.rev, 1)
  stale.title = "Overwrite?"
  local v, err, code, detail = stale:save()
  lu.assertNil(v)
  lu.assertEquals(code, "stale")
  lu.assertIsString(err)
  lu.assertStrContains(err, "revision 3")
  lu.assertEquals(detail, { found = 3 }, "the revision found, in detail")
  ok(stale:reload())
  lu.assertEquals({ stale.title, stale.rev, stale.views }, { "Final v2", 3, 11 })
  lu.assertEquals(stale:changes(), {})
end

-- grails-data-mapping #118: the revision is never bumped in memory by a write
-- that failed, so a retry does not overwrite; the snapshot stays too.
function TestModelRevisions:test_failed_save_leaves_state_untouched()
  local A = self.Article
  local a = ok(A:insert { title = "S" })
  ok(A:update(a.id, { views = 5 }))            -- the database is at rev 1, this copy at 0
  a.title = "mine"
  local updated_before = a.updated_at
  local v, _, code = a:save()
  lu.assertNil(v)
  lu.assertEquals(code, "stale")
  lu.assertEquals(a.rev, 0, "revision untouched")
  lu.assertEquals(a.updated_at, updated_before, "updated_at untouched")
  lu.assertEquals(a:changes(), { ["$set"] = { title = "mine" } }, "the change is still pending")
  v, _, code = a:save()                          -- a retry is stale again, not an overwrite
  lu.assertEquals({ v, code }, { nil, "stale" })
  lu.assertEquals(self:raw(a.id).title, "S")
  lu.assertEquals(self:raw(a.id).views, 5)
end

-- Mongoose #10974: zero matches are told apart.
function TestModelRevisions:test_stale_and_not_found_told_apart()
  local A = self.Article
  local a = ok(A:insert { title = "T" })
  local b = ok(A:get(a.id))
  ok(A:update(a.id, { views = 1 }))
  b.title = "x"
  local _, _, code = b:save()
  lu.assertEquals(code, "stale")
  ok(self.db:collection("articles"):delete_one({ _id = a.id }))
  local _, err2, code2 = b:save()
  lu.assertEquals(code2, "not_found")
  lu.assertStrContains(err2, "save articles: no document")
  local _, _, code3 = b:delete()
  lu.assertEquals(code3, "not_found")
  local _, _, code4 = b:reload()
  lu.assertEquals(code4, "not_found")
end

function TestModelRevisions:test_every_update_path_bumps()
  local A = self.Article
  local a = ok(A:insert { title = "R0" })
  lu.assertEquals(a.rev, 0, "insert starts at 0")
  lu.assertEquals(self:raw(a.id).rev, 0)
  a.views = 1
  ok(a:save())
  lu.assertEquals({ a.rev, self:raw(a.id).rev }, { 1, 1 }, "save")
  lu.assertEquals(ok(A:update(a.id, ops.inc { views = 1 })).rev, 2, "update")
  ok(A:find(Q.id:eq(a.id)):update(ops.inc { views = 1 }))
  lu.assertEquals(self:raw(a.id).rev, 3, "find():update")
  lu.assertEquals(ok(A:upsert(Q.id:eq(a.id), ops.inc { views = 1 })).rev, 4, "upsert of an existing one")
  lu.assertEquals(ok(A:upsert(Q.title:eq("new one"), ops.inc { views = 1 })).rev, 1, "upsert starts at 1")
  local b = ok(A:get(a.id))
  b.views = 100
  lu.assertEquals(ok(A:bulk_save { b }), 1)
  lu.assertEquals({ b.rev, self:raw(a.id).rev }, { 5, 5 }, "bulk_save")
  ok(A:bulk_write { model.update_one(Q.id:eq(a.id), ops.inc { views = 1 }) })
  lu.assertEquals(self:raw(a.id).rev, 6, "bulk_write")
  ok(ok(A:get(a.id)):delete())
  lu.assertEquals(self:raw(a.id).rev, 7, "soft delete")
end

function TestModelRevisions:test_timestamps_are_bson_dates()
  local A = self.Article
  local t0 = ms.date()
  local a = ok(A:insert { title = "When" })
  local DATE = getmetatable(ms.date())
  lu.assertEquals(getmetatable(a.created_at), DATE)
  lu.assertEquals(a.created_at, a.updated_at)
  local raw = self:raw(a.id)
  lu.assertEquals(raw.created_at.other, "datetime", "stored as a BSON date")
  lu.assertEquals(raw.updated_at.other, "datetime")
  lu.assertNil(raw.deleted_at)
  lu.assertTrue(a.created_at:ms() >= t0:ms())
  local created = a.created_at
  ms.sleep(0.005)
  a.title = "When 2"
  ok(a:save())
  lu.assertEquals(a.created_at, created, "created_at stays")
  lu.assertTrue(a.updated_at:ms() > created:ms(), "updated_at moves on save")
  local u = ok(A:update(a.id, { views = 1 }))
  lu.assertTrue(u.updated_at:ms() >= a.updated_at:ms(), "and on update")
  lu.assertEquals(u.created_at, created)
  local up = ok(A:upsert(Q.title:eq("Upserted"), { views = 1 }))
  lu.assertEquals(getmetatable(up.created_at), DATE, "created on an upsert that inserts")
  ok(A:find(Q.id:eq(a.id)):update { views = 2 })
  lu.assertEquals(self:raw(a.id).updated_at.other, "datetime")
  -- changing created_at raises
  local d = ok(A:get(a.id))
  d.created_at = ms.date(0)
  lu.assertErrorMsgContains("immutable", d.save, d)
end
