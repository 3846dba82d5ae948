-- spec/02-records/lease_spec.lua - the writer side of the store's leases: a
-- writer:<token> document made at the first write (not at open) and deleted at
-- close, every record carrying the token, renewal past half the ttl, fencing (a
-- writer whose document is gone fails every later write with conflict, also when
-- it goes between a graph's dependency and its root), and writes waiting for, then
-- refused by, a held fsck lease.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local rawdb = require "helpers.rawdb"
local records = require "mongostore.records"

local ok = require("helpers").ok

local Author = records.define { name = "author", fields = { name = "string" } }
local Book = records.define { name = "book", fields = { title = "string" }, refs = { author = Author } }

local function writer_docs(name)
  local out = {}
  for _, d in ipairs(rawdb.docs(name, "records._meta")) do
    if tostring(d._id):sub(1, 7) == "writer:" then out[#out + 1] = d end
  end
  return out
end

TestRecordsLease = {}

function TestRecordsLease:setUp()
  self.name = helper.fresh_db("rlease")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  self.meta = self.db:collection("records._meta")
end

function TestRecordsLease:tearDown()
  if self.store then self.store:close() end
  if self.db then self.db:close() end
end

function TestRecordsLease:open(extra)
  local opts = { types = { Book }, log = function() end }
  for k, v in pairs(extra or {}) do opts[k] = v end
  self.store = ok(records.open(self.db, opts))
  return self.store
end

function TestRecordsLease:test_writer_document_from_first_write_to_close()
  local store = self:open()
  lu.assertEquals(#writer_docs(self.name), 0, "opening writes no lease")
  ok(store:save(Book, { title = "Dune", author = { name = "Herbert" } }))
  local docs = writer_docs(self.name)
  lu.assertEquals(#docs, 1)
  local token = store:info().writer
  lu.assertEquals(docs[1]._id, "writer:" .. token)
  lu.assertNotNil(docs[1].expires)
  lu.assertEquals(math.type(docs[1].gen), "integer")
  for _, coll in ipairs { "records.book", "records.author" } do
    for _, d in ipairs(rawdb.docs(self.name, coll)) do lu.assertEquals(d._w, token) end
  end
  ok(store:close())
  lu.assertEquals(#writer_docs(self.name), 0, "close deletes it")
  self.store = nil
end

function TestRecordsLease:test_renewed_past_half_the_ttl()
  local store = self:open({ lease_ttl = 0.4 })
  ok(store:save(Book, { title = "A" }))
  local first = ok(self.meta:find_one({ _id = "writer:" .. store:info().writer })).expires:ms()
  ms.sleep(0.3)
  ok(store:save(Book, { title = "B" }))
  local second = ok(self.meta:find_one({ _id = "writer:" .. store:info().writer })).expires:ms()
  lu.assertTrue(second > first, "renewed")
end

function TestRecordsLease:test_taken_over_fails_every_later_write()
  local store = self:open()
  local sid = ok(store:save(Book, { title = "A" }))
  -- what fsck force does to the writers it overrides
  ok(self.meta:delete_one({ _id = "writer:" .. store:info().writer }))
  for i = 1, 2 do
    local v, err, code = store:save(Book, { title = "B" .. i })
    lu.assertNil(v)
    lu.assertEquals(code, "conflict")
    lu.assertStrContains(tostring(err), "taken over")
  end
  local v, _, code = store:replace(Book, sid, { title = "A2" })
  lu.assertEquals({ v, code }, { nil, "conflict" })
  lu.assertEquals(rawdb.count(self.name, "records.book"), 1)
  -- reads still work
  lu.assertEquals(ok(store:fetch(Book, sid)).title, "A")
  -- and the lease is not made again behind fsck's back
  lu.assertEquals(#writer_docs(self.name), 0)
end

function TestRecordsLease:test_fenced_between_dependency_and_root()
  local meta = self.meta
  local store
  store = self:open({ transactions = "never", test_hooks = { after_write = function(info)
    if info.writes == 1 then ok(meta:delete_one({ _id = "writer:" .. store:info().writer })) end
    return true
  end } })
  local v, err, code = store:save(Book, { title = "Dune", author = { name = "Herbert" } })
  lu.assertNil(v)
  lu.assertEquals(code, "conflict", tostring(err))
  -- the dependency was written (an orphan for fsck), the root was not
  lu.assertEquals(rawdb.count(self.name, "records.author"), 1)
  lu.assertEquals(rawdb.count(self.name, "records.book"), 0)
end

function TestRecordsLease:test_writes_wait_for_a_held_fsck_lease()
  local store = self:open({ fsck_wait = 0.3 })
  ok(store:save(Book, { title = "A" }))
  ok(self.meta:insert_one({ _id = "fsck", holder = "fsck:other", expires = ms.date(math.floor(ms.now() * 1000) + 60000),
                            gen = 0 }))
  local v, err, code = store:save(Book, { title = "B" })
  lu.assertNil(v)
  lu.assertEquals(code, "unavailable")
  lu.assertStrContains(tostring(err), "fsck")
  lu.assertEquals(rawdb.count(self.name, "records.book"), 1)
  -- an expired fsck lease holds nothing
  ok(self.meta:update_one({ _id = "fsck" }, { ["$set"] = { expires = ms.date(0) } }))
  ok(store:save(Book, { title = "C" }))
  -- released while the save waits: it goes on
  ok(self.meta:update_one({ _id = "fsck" }, { ["$set"] = { holder = ms.null } }))
  ok(store:save(Book, { title = "D" }))
  lu.assertEquals(rawdb.count(self.name, "records.book"), 3)
end
