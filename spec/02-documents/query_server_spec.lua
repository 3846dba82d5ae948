-- spec/02-documents/query_server_spec.lua - the filters and updates mongostore.query
-- builds, and the diffs mongostore.track computes, sent to a real server: each Q
-- condition finds the documents it should, each op changes what it should, and a
-- diff applied with update_one leaves the stored document equal to the changed one.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local query = require "mongostore.query"
local track = require "mongostore.track"
local Q, ops = query.Q, query.ops

local ok = require("helpers").ok

local function rename_id(path)
  if path == "id" then return "_id" end
  return path
end

local DOCS = {
  { _id = 1, title = "alpha", views = 0, score = 1.5, tags = { "a", "b" }, author = { name = "ann", langs = { "en" } },
    comments = { { by = "x", n = 1 }, { by = "y", n = 5 } } },
  { _id = 2, title = "beta", views = 5, score = 2.5, tags = { "b" }, author = { name = "bob" }, gone = ms.null,
    comments = { { by = "x", n = 7 } } },
  { _id = 3, title = "a.b*c", views = 10, tags = ms.array(), comments = ms.array() },
  { _id = 4, title = "Alphabet", views = 20, tags = { "a", "c", "d" }, author = { name = "ann" } },
}

TestQueryServer = {}

function TestQueryServer:setUp()
  self.name = helper.fresh_db("query")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  self.c = ok(self.db:collection("articles"))
  ok(self.c:insert_many(track.copy(DOCS)))
end

function TestQueryServer:tearDown()
  if self.db then self.db:close() end
end

-- The _ids a condition finds, in order.
function TestQueryServer:ids(cond)
  local cursor = ok(self.c:find(query.filter(cond, rename_id), { sort = { { "_id", 1 } } }))
  local out = {}
  for _, d in ipairs(ok(cursor:all())) do out[#out + 1] = d._id end
  return out
end

function TestQueryServer:test_comparisons()
  lu.assertEquals(self:ids(Q.title:eq("beta")), { 2 })
  lu.assertEquals(self:ids(Q.id:eq(3)), { 3 })
  lu.assertEquals(self:ids(Q["author.name"]:eq("ann")), { 1, 4 })
  lu.assertEquals(self:ids(Q.title:ne("beta")), { 1, 3, 4 })
  lu.assertEquals(self:ids(Q.views:gt(5)), { 3, 4 })
  lu.assertEquals(self:ids(Q.views:gte(5)), { 2, 3, 4 })
  lu.assertEquals(self:ids(Q.views:lt(5)), { 1 })
  lu.assertEquals(self:ids(Q.views:lte(5)), { 1, 2 })
  lu.assertEquals(self:ids(Q.id:gt(2)), { 3, 4 })
end

function TestQueryServer:test_null_and_documents()
  -- null matches null and missing; exists tells them apart
  lu.assertEquals(self:ids(Q.gone:eq(ms.null)), { 1, 2, 3, 4 })
  lu.assertEquals(self:ids(Q.gone:exists()), { 2 })
  lu.assertEquals(self:ids(Q.author:exists(false)), { 3 })
  lu.assertEquals(self:ids(Q.author:eq({ name = "bob" })), { 2 })
end

function TestQueryServer:test_lists()
  lu.assertEquals(self:ids(Q.id:in_({ 1, 4, 9 })), { 1, 4 })
  lu.assertEquals(self:ids(Q.id:in_({})), {})
  lu.assertEquals(self:ids(Q.id:nin({ 1, 4 })), { 2, 3 })
  lu.assertEquals(self:ids(Q.tags:in_({ "c" })), { 4 })
  lu.assertEquals(self:ids(Q.tags:all_({ "a", "b" })), { 1 })
  lu.assertEquals(self:ids(Q.tags:size(0)), { 3 })
  lu.assertEquals(self:ids(Q.tags:size(1)), { 2 })
end

function TestQueryServer:test_regex_and_prefix()
  lu.assertEquals(self:ids(Q.title:regex("^a")), { 1, 3 })
  lu.assertEquals(self:ids(Q.title:regex("^a", "i")), { 1, 3, 4 })
  lu.assertEquals(self:ids(Q.title:regex(ms.regex("ET$", "i"))), { 4 })
  lu.assertEquals(self:ids(Q.title:prefix("alpha")), { 1 })
  -- the prefix's metacharacters are literal: "a.b*" would match "alpha" as a regex
  lu.assertEquals(self:ids(Q.title:prefix("a.b*")), { 3 })
  lu.assertEquals(self:ids(Q.title:prefix("a.")), { 3 })
end

function TestQueryServer:test_elem_match()
  lu.assertEquals(self:ids(Q.comments:elem_match(Q.and_(Q.by:eq("x"), Q.n:gt(3)))), { 2 })
  lu.assertEquals(self:ids(Q.comments:elem_match({ by = "y" })), { 1 })
end

function TestQueryServer:test_and_or_not()
  lu.assertEquals(self:ids(Q.and_(Q.views:gte(5), Q.views:lt(20))), { 2, 3 })
  lu.assertEquals(self:ids(Q.and_(Q.views:gte(1), Q.views:gte(10))), { 3, 4 }) -- the $and form
  lu.assertEquals(self:ids(Q.and_(Q.tags:eq("a"), Q["author.name"]:eq("ann"))), { 1, 4 })
  lu.assertEquals(self:ids(Q.or_(Q.id:eq(1), Q.title:eq("beta"))), { 1, 2 })
  lu.assertEquals(self:ids(Q.or_({ id = 3 }, Q.views:gt(15))), { 3, 4 })
  lu.assertEquals(self:ids(Q.not_(Q.views:gt(5))), { 1, 2 })
  lu.assertEquals(self:ids(Q.not_(Q.title:eq("beta"))), { 1, 3, 4 })
  lu.assertEquals(self:ids(Q.not_(Q.or_(Q.id:eq(1), Q.id:eq(2)))), { 3, 4 })
  lu.assertEquals(self:ids(Q.and_()), { 1, 2, 3, 4 })
  lu.assertEquals(self:ids(nil), { 1, 2, 3, 4 })
  lu.assertEquals(self:ids({ id = 2 }), { 2 })
end

function TestQueryServer:test_not_of_prefix_and_elem_match()
  lu.assertEquals(self:ids(Q.not_(Q.title:prefix("a"))), { 2, 4 })
  lu.assertEquals(self:ids(Q.not_(Q.title:regex(ms.regex("^a", "i")))), { 2 })
  lu.assertEquals(self:ids(Q.not_(Q.comments:elem_match({ by = "x" }))), { 3, 4 })
end

-- Applies an update to one document and returns it as stored.
function TestQueryServer:updated(id, list, opts)
  local r = ok(self.c:update_one({ _id = id }, query.update(list, rename_id), opts))
  lu.assertEquals(r.matched, 1)
  return ok(self.c:find_one({ _id = id }))
end

function TestQueryServer:test_each_op()
  local d = self:updated(1, { ops.inc({ views = 2 }), ops.push({ tags = "featured" }), { title = "alpha v2" },
                              ops.set({ ["author.name"] = "anne" }), ops.unset({ "score" }) })
  lu.assertEquals(d.views, 2)
  lu.assertEquals(d.tags, { "a", "b", "featured" })
  lu.assertEquals(d.title, "alpha v2")
  lu.assertEquals(d.author.name, "anne")
  lu.assertNil(d.score)
  d = self:updated(2, { ops.mul({ score = 2 }), ops.min({ views = 1 }), ops.max({ high = 3 }),
                        ops.add_to_set({ tags = ops.each({ "b", "z" }) }), ops.pop({ ["comments"] = 1 }) })
  lu.assertEquals(d.score, 5.0)
  lu.assertEquals(d.views, 1)
  lu.assertEquals(d.high, 3)
  lu.assertEquals(d.tags, { "b", "z" })
  lu.assertEquals(#d.comments, 0)
  d = self:updated(1, { ops.pull({ comments = Q.n:gt(3) }), ops.push({ tags = ops.each({ "c", "d" }, { position = 0 }) }) })
  lu.assertEquals(d.comments, { { by = "x", n = 1 } })
  lu.assertEquals(d.tags, { "c", "d", "a", "b", "featured" })
  d = self:updated(4, { ops.pull({ tags = { ["$in"] = { "a", "d" } } }), ops.current_date({ seen = true }) })
  lu.assertEquals(d.tags, { "c" })
  lu.assertEquals(ms.is_array(d.tags), true)
  lu.assertNotNil(d.seen)
end

function TestQueryServer:test_set_on_insert_on_an_upsert()
  local update = query.update({ ops.inc({ views = 1 }), ops.set_on_insert({ tags = { "page" } }) })
  local r = ok(self.c:update_one({ title = "Landing" }, update, { upsert = true }))
  lu.assertNotNil(r.upserted_id)
  local d = ok(self.c:find_one({ title = "Landing" }))
  lu.assertEquals(d.views, 1)
  lu.assertEquals(d.tags, { "page" })
  ok(self.c:update_one({ title = "Landing" }, update, { upsert = true }))
  d = ok(self.c:find_one({ title = "Landing" }))
  lu.assertEquals(d.views, 2)
  lu.assertEquals(d.tags, { "page" })
end

-- A diff of a loaded document, sent as $set/$unset, leaves the server holding the
-- changed document.
function TestQueryServer:test_a_diff_applied_is_the_changed_document()
  ok(self.c:insert_one({ _id = 10, meta = { ["a.b"] = 1, plain = 1 }, sub = { x = { y = 1, z = 2 }, keep = true },
                         list = { 1, 2 }, drop = "me" }))
  local doc = ok(self.c:find_one({ _id = 10 }))
  local snap = track.copy(doc)
  doc.meta["a.b"] = 2
  doc.sub.x.y = 5
  doc.sub.x.z = nil
  doc.sub.added = { deep = ms.null }
  doc.list[#doc.list + 1] = 3
  doc.drop = nil
  local set, unset, n = track.diff(snap, doc)
  lu.assertEquals(n, 6)
  local update = {}
  if next(set) then update["$set"] = set end
  if next(unset) then update["$unset"] = unset end
  ok(self.c:update_one({ _id = 10 }, update))
  local stored = ok(self.c:find_one({ _id = 10 }))
  lu.assertTrue(track.equal(stored, doc))
  -- and nothing is left to send
  local _, _, none = track.diff(stored, doc)
  lu.assertEquals(none, 0)
end
