-- spec/02-records/replace_spec.lua - lineages: replace keeps the lineage (_lin,
-- _prev, _next), is idempotent for the same successor, refuses a cross-lineage
-- dedup hit, an earlier revision and a predecessor replaced already; history walks
-- oldest first from any member; only_latest; and a degraded replacement cut after
-- its successor's write is finished by the same call again.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local rawdb = require "helpers.rawdb"
local records = require "mongostore.records"
local Q = records.Q

local ok = require("helpers").ok

local Book = records.define { name = "book", fields = { title = "string", edition = "integer",
                                                        note = { "string", identity = false } } }
local Log = records.define { name = "log", fields = { line = "string" }, dedup = "none" }

local function raw_doc(db, sid, coll)
  for _, d in ipairs(rawdb.docs(db, coll)) do
    if d._id == sid then return d end
  end
  return nil
end

TestRecordsReplace = {}

function TestRecordsReplace:setUp()
  self.name = helper.fresh_db("rrepl")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
end

function TestRecordsReplace:tearDown()
  if self.store then self.store:close() end
  if self.db then self.db:close() end
end

function TestRecordsReplace:open(extra)
  local opts = { types = { Book, Log }, log = function() end }
  for k, v in pairs(extra or {}) do opts[k] = v end
  self.store = ok(records.open(self.db, opts))
  return self.store
end

function TestRecordsReplace:test_lineage_and_history()
  local store = self:open()
  local s1 = ok(store:save(Book, { title = "Dune", edition = 1 }))
  local s2 = ok(store:replace(Book, s1, { title = "Dune", edition = 2 }))
  local s3 = ok(store:replace(Book, s2, { title = "Dune", edition = 3 }))
  local d1, d2, d3 = raw_doc(self.name, s1, "records.book"), raw_doc(self.name, s2, "records.book"),
    raw_doc(self.name, s3, "records.book")
  lu.assertEquals({ d1._lin, d2._lin, d3._lin }, { s1, s1, s1 })
  lu.assertEquals({ d1._prev, d2._prev, d3._prev }, { nil, s1, s2 })
  lu.assertEquals({ d1._next, d2._next, d3._next }, { s2, s3, nil })
  lu.assertEquals({ d1._role, d2._role, d3._role }, { "main", "main", "main" })
  for _, from in ipairs { s1, s2, s3 } do
    local h = ok(store:history(Book, from))
    lu.assertEquals({ h[1]._sid, h[2]._sid, h[3]._sid }, { s1, s2, s3 }, "oldest first")
    lu.assertEquals({ h[1].edition, h[2].edition, h[3].edition }, { 1, 2, 3 })
  end
  -- another lineage beside it
  local other = ok(store:save(Book, { title = "Emma", edition = 1 }))
  local latest = ok(store:query(Book):only_latest():order_by { { "title", 1 } }:all())
  lu.assertEquals(#latest, 2)
  lu.assertEquals({ latest[1]._sid, latest[2]._sid }, { s3, other })
  lu.assertEquals(ok(store:query(Book):count()), 4)
  lu.assertEquals(ok(store:query(Book):where(Q.title:eq("Dune")):only_latest():count()), 1)
  local v, err, code = store:history(Book, 9999)
  lu.assertEquals({ v, code }, { nil, "not_found" }, tostring(err))
end

function TestRecordsReplace:test_idempotent_for_the_same_successor()
  local store = self:open()
  local s1 = ok(store:save(Book, { title = "Dune", edition = 1 }))
  local s2 = ok(store:replace(Book, s1, { title = "Dune", edition = 2 }))
  lu.assertEquals(ok(store:replace(Book, s1, { title = "Dune", edition = 2 })), s2)
  lu.assertEquals(rawdb.count(self.name, "records.book"), 2)
  -- the same content as the latest itself changes nothing
  lu.assertEquals(ok(store:replace(Book, s2, { title = "Dune", edition = 2 })), s2)
  lu.assertEquals(rawdb.count(self.name, "records.book"), 2)
end

function TestRecordsReplace:test_refusals()
  local store = self:open()
  local s1 = ok(store:save(Book, { title = "Dune", edition = 1 }))
  local s2 = ok(store:replace(Book, s1, { title = "Dune", edition = 2 }))
  local e1 = ok(store:save(Book, { title = "Emma", edition = 1 }))
  -- cross-lineage: Emma's content exists in another lineage
  local v, err, code = store:replace(Book, s2, { title = "Emma", edition = 1 })
  lu.assertEquals({ v, code }, { nil, "conflict" }, tostring(err))
  lu.assertStrContains(tostring(err), "another lineage")
  -- back to an earlier revision of its own lineage
  v, err, code = store:replace(Book, s2, { title = "Dune", edition = 1 })
  lu.assertEquals({ v, code }, { nil, "conflict" }, tostring(err))
  -- a predecessor replaced already, by something else
  v, err, code = store:replace(Book, s1, { title = "Dune", edition = 3 })
  lu.assertEquals({ v, code }, { nil, "conflict" }, tostring(err))
  lu.assertStrContains(tostring(err), "replaced already")
  v, err, code = store:replace(Book, 12345, { title = "X", edition = 1 })
  lu.assertEquals({ v, code }, { nil, "not_found" }, tostring(err))
  lu.assertEquals(rawdb.count(self.name, "records.book"), 3)
  lu.assertNil(raw_doc(self.name, e1, "records.book")._next)
  lu.assertNil(raw_doc(self.name, s2, "records.book")._next)
end

function TestRecordsReplace:test_dedup_none_lineage()
  local store = self:open()
  local l1 = ok(store:save(Log, { line = "a" }))
  local l2 = ok(store:replace(Log, l1, { line = "a" }))
  lu.assertNotEquals(l1, l2)
  local h = ok(store:history(Log, l1))
  lu.assertEquals({ h[1]._sid, h[2]._sid }, { l1, l2 })
end

function TestRecordsReplace:test_degraded_replacement_cut_short_is_finished_again()
  local fail_next = false
  local store = self:open({ transactions = "never", test_hooks = { after_write = function()
    if fail_next then fail_next = false; return nil, "cut short after the successor's write", "network" end
    return true
  end } })
  local s1 = ok(store:save(Book, { title = "Dune", edition = 1 }))
  fail_next = true
  local v, err, code = store:replace(Book, s1, { title = "Dune", edition = 2 })
  lu.assertEquals({ v, code }, { nil, "network" }, tostring(err))
  -- the successor is stored, unreachable: a dependency, and not linked
  local docs = rawdb.docs(self.name, "records.book")
  lu.assertEquals(#docs, 2)
  lu.assertEquals(docs[2]._role, "dep")
  lu.assertNil(docs[1]._next)
  lu.assertEquals(#ok(store:query(Book):where(Q.title:eq("Dune")):only_latest():all()), 2)
  -- the same call again finishes it
  local s2 = ok(store:replace(Book, s1, { title = "Dune", edition = 2 }))
  lu.assertEquals(s2, docs[2]._id)
  docs = rawdb.docs(self.name, "records.book")
  lu.assertEquals(docs[1]._next, s2)
  lu.assertEquals(docs[2]._role, "main")
  local h = ok(store:history(Book, s2))
  lu.assertEquals(#h, 2)
end
