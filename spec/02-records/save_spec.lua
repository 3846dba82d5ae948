-- spec/02-records/save_spec.lua - saving record graphs: refs in their own
-- collections written as sids with roles, children embedded, the stored layout
-- read behind the library's back, one sid reservation per graph and sids never
-- reused, content ids, the three dedup policies, promotion of a dependency,
-- fetch and fetch_by_content_id, refs given by sid, too_large before anything
-- is sent, and what is refused. Runs in the server's mode (degraded on
-- mongo-java-server, transactions on SecantusDB).
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local rawdb = require "helpers.rawdb"
local records = require "mongostore.records"

local ok = require("helpers").ok

local Author = records.define { name = "author", fields = { name = "string", born = "integer" }, dedup = "content" }
local Book = records.define {
  name = "book", dedup = "value",
  fields = { title = "string", year = "integer", price = "float", tags = "string[]",
             note = { "string", identity = false } },
  children = { chapters = { fields = { title = "string", pages = "integer" } } },
  refs = { author = Author },
}
local Event = records.define { name = "event", fields = { what = "string" }, dedup = "none" }

-- one raw document by its integer sid (rawdb.doc takes string ids)
local function raw_doc(db, sid, coll)
  for _, d in ipairs(rawdb.docs(db, coll)) do
    if d._id == sid then return d end
  end
  return nil
end

local function book(title, author, note)
  return { title = title, year = 1965, price = 9.5, tags = { "sf" }, note = note,
           author = author or { name = "Frank Herbert", born = 1920 },
           chapters = { { title = "One", pages = 10 }, { title = "Two", pages = 12 } } }
end

TestRecordsSave = {}

function TestRecordsSave:setUp()
  self.name = helper.fresh_db("rsave")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  self.logged = {}
  self.store = ok(records.open(self.db, { types = { Book, Event },
    log = function(level, msg) self.logged[#self.logged + 1] = level .. ": " .. msg end }))
end

function TestRecordsSave:tearDown()
  if self.store then self.store:close() end
  if self.db then self.db:close() end
end

function TestRecordsSave:test_graph_layout_behind_the_library()
  local sid = ok(self.store:save(Book, book("Dune")))
  lu.assertTrue(math.type(sid) == "integer" or sid == math.floor(sid))
  local authors = rawdb.docs(self.name, "records.author")
  local books = rawdb.docs(self.name, "records.book")
  lu.assertEquals(#authors, 1)
  lu.assertEquals(#books, 1)
  local a, b = authors[1], books[1]
  lu.assertEquals(b._id, sid)
  -- the ref is the author's sid; the children are embedded
  lu.assertEquals(b.author, a._id)
  lu.assertEquals(b.chapters, ms.array { { title = "One", pages = 10 }, { title = "Two", pages = 12 } })
  lu.assertEquals(b._role, "main")
  lu.assertEquals(a._role, "dep")
  lu.assertEquals(b._lin, b._id)
  lu.assertEquals(a._lin, a._id)
  lu.assertNil(b._prev)
  lu.assertNil(b._next)
  lu.assertStrMatches(b._cid, string.rep("%x", 64))
  lu.assertStrMatches(a._cid, string.rep("%x", 64))
  lu.assertEquals(b._refs, ms.array { ms.array { "author", a._id } })
  lu.assertEquals(#a._refs, 0)
  lu.assertEquals(b._w, self.store:info().writer)
  lu.assertEquals(a._w, b._w)
  lu.assertEquals(math.type(b._ts), "integer")
  lu.assertEquals(b._ts, a._ts, "one timestamp per save unit")
  lu.assertEquals(math.type(b.price), "float")
  lu.assertNil(b.note)
end

function TestRecordsSave:test_sids_one_reservation_per_graph_never_reused()
  local s1 = ok(self.store:save(Book, book("Dune")))
  local ctr = rawdb.docs(self.name, "records._counters")
  lu.assertEquals(#ctr, 1)
  lu.assertEquals(ctr[1]._id, "sid")
  lu.assertEquals(ctr[1].n, 2, "the book and its author")
  -- a graph whose author is stored already: its reservation still covers both
  local s2 = ok(self.store:save(Book, book("Dune Messiah")))
  lu.assertEquals(rawdb.docs(self.name, "records._counters")[1].n, 4)
  lu.assertTrue(s2 > s1)
  -- a deleted record's sid is not given again
  ok(self.db:collection("records.book"):delete_one({ _id = s2 }))
  lu.assertNil(raw_doc(self.name, s2, "records.book"))
  local s3 = ok(self.store:save(Book, book("Children of Dune")))
  lu.assertTrue(s3 > 4, "sid " .. tostring(s3) .. " reused")
end

function TestRecordsSave:test_content_dedup_same_content_same_sid()
  local a1 = ok(self.store:save(Author, { name = "Ursula", born = 1929 }))
  local a2 = ok(self.store:save(Author, { born = 1929, name = "Ursula" }))
  local a3 = ok(self.store:save(Author, { name = "Ursula", born = 1930 }))
  lu.assertEquals(a2, a1)
  lu.assertNotEquals(a3, a1)
  lu.assertEquals(rawdb.count(self.name, "records.author"), 2)
  -- two books by one author: one author record
  local b1 = ok(self.store:save(Book, book("A", { name = "Ursula", born = 1929 })))
  local b2 = ok(self.store:save(Book, book("B", { name = "Ursula", born = 1929 })))
  lu.assertEquals(ok(self.store:fetch(Book, b1)).author._sid, a1)
  lu.assertEquals(ok(self.store:fetch(Book, b2)).author._sid, a1)
  lu.assertEquals(rawdb.count(self.name, "records.author"), 2)
end

function TestRecordsSave:test_value_dedup_refuses_other_metadata()
  local s1 = ok(self.store:save(Book, book("Dune", nil, "first printing")))
  lu.assertEquals(ok(self.store:save(Book, book("Dune", nil, "first printing"))), s1)
  local v, err, code, detail = self.store:save(Book, book("Dune", nil, "a later note"))
  lu.assertNil(v)
  lu.assertEquals(code, "conflict")
  lu.assertStrContains(tostring(err), "metadata")
  lu.assertEquals(type(err), "string")
  lu.assertEquals(detail.sid, s1)
  lu.assertEquals(rawdb.count(self.name, "records.book"), 1)
  lu.assertEquals(ok(self.store:fetch(Book, s1)).note, "first printing")
end

function TestRecordsSave:test_identity_false_fields_left_out_of_the_content_id()
  local c1 = ok(records.content_id(Book, book("Dune", nil, "x")))
  local c2 = ok(records.content_id(Book, book("Dune", nil, "y")))
  local c3 = ok(records.content_id(Book, book("Dune!", nil, "x")))
  lu.assertEquals(c1, c2)
  lu.assertNotEquals(c1, c3)
  local sid = ok(self.store:save(Book, book("Dune", nil, "x")))
  lu.assertEquals(ok(self.store:fetch(Book, sid))._cid, c1)
end

function TestRecordsSave:test_dedup_none_every_save_a_record()
  local e1 = ok(self.store:save(Event, { what = "boot" }))
  local e2 = ok(self.store:save(Event, { what = "boot" }))
  lu.assertNotEquals(e1, e2)
  lu.assertEquals(rawdb.count(self.name, "records.event"), 2)
  local r = ok(self.store:fetch_by_content_id(Event, ok(records.content_id(Event, { what = "boot" }))))
  lu.assertEquals(r._sid, math.min(e1, e2))
end

function TestRecordsSave:test_dependency_promoted_first_timestamp_kept()
  ok(self.store:save(Book, book("Dune")))
  local a = rawdb.docs(self.name, "records.author")[1]
  lu.assertEquals(a._role, "dep")
  ms.sleep(0.01)
  local sid = ok(self.store:save(Author, { name = "Frank Herbert", born = 1920 }))
  lu.assertEquals(sid, a._id)
  local after = raw_doc(self.name, a._id, "records.author")
  lu.assertEquals(after._role, "main")
  lu.assertEquals(after._ts, a._ts, "first stored wins")
  -- a main record met again as a dependency stays main
  ok(self.store:save(Book, book("Dune Messiah")))
  lu.assertEquals(raw_doc(self.name, a._id, "records.author")._role, "main")
end

function TestRecordsSave:test_fetch_reconstructs_the_graph()
  local sid = ok(self.store:save(Book, book("Dune", nil, "n")))
  local b = ok(self.store:fetch(Book, sid))
  lu.assertEquals(b.title, "Dune")
  lu.assertEquals(b.year, 1965)
  lu.assertEquals(math.type(b.price), "float")
  lu.assertEquals(b.tags, { "sf" })
  lu.assertEquals(b.note, "n")
  lu.assertEquals(b.chapters, { { title = "One", pages = 10 }, { title = "Two", pages = 12 } })
  lu.assertEquals(b.author.name, "Frank Herbert")
  lu.assertEquals(b.author.born, 1920)
  lu.assertEquals(b._sid, sid)
  lu.assertEquals(b._role, "main")
  local by_cid = ok(self.store:fetch_by_content_id(Book, b._cid))
  lu.assertEquals(by_cid._sid, sid)
  lu.assertEquals(by_cid.author._sid, b.author._sid)
  -- a fetched record saved again is the same record (store fields are ignored)
  lu.assertEquals(ok(self.store:save(Book, b)), sid)
  local v, err, code = self.store:fetch(Book, sid + 1000)
  lu.assertNil(v)
  lu.assertEquals(code, "not_found", tostring(err))
  v, err, code = self.store:fetch_by_content_id(Book, string.rep("0", 64))
  lu.assertNil(v)
  lu.assertEquals(code, "not_found", tostring(err))
end

function TestRecordsSave:test_refs_by_sid()
  local a = ok(self.store:save(Author, { name = "Le Guin", born = 1929 }))
  local b = ok(self.store:save(Book, book("Earthsea", a)))
  lu.assertEquals(ok(self.store:fetch(Book, b)).author._sid, a)
  -- the content id is the same as with the author given whole
  lu.assertEquals(ok(self.store:fetch(Book, b))._cid, ok(records.content_id(Book, book("Earthsea",
    { name = "Le Guin", born = 1929 }))))
  local v, err, code = self.store:save(Book, book("Nowhere", a + 999))
  lu.assertNil(v)
  lu.assertEquals(code, "not_found")
  lu.assertStrContains(tostring(err), "author")
end

function TestRecordsSave:test_too_large_before_anything_is_sent()
  local limit = ok(self.db:info()).max_bson_size
  local before = rawdb.docs(self.name, "records._counters")
  local v, err, code = self.store:save(Book, book(string.rep("x", limit + 10)))
  lu.assertNil(v)
  lu.assertEquals(code, "too_large", tostring(err))
  lu.assertEquals(rawdb.count(self.name, "records.book"), 0)
  lu.assertEquals(rawdb.count(self.name, "records.author"), 0)
  lu.assertEquals(rawdb.docs(self.name, "records._counters"), before, "no sid was reserved")
  -- nor was a writer lease taken
  for _, d in ipairs(rawdb.docs(self.name, "records._meta")) do
    lu.assertNotStrContains(tostring(d._id), "writer:")
  end
end

function TestRecordsSave:test_refused_input()
  local cases = {
    { { title = 1 }, "title must be a string" },
    { { title = "x", year = 1.5 }, "year must be an integer" },
    { { title = "x", price = 0 / 0 }, "price" },
    { { title = "x", tags = { 1 } }, "tags[1]" },
    { { title = "x", extra = true }, "extra is not declared" },
    { { title = "x", chapters = { { title = "c", nope = 1 } } }, "nope is not declared" },
    { { title = "x", author = "nobody" }, "author" },
  }
  for _, case in ipairs(cases) do
    local v, err, code = self.store:save(Book, case[1])
    lu.assertNil(v, case[2])
    lu.assertEquals(code, "invalid", tostring(err))
    lu.assertStrContains(tostring(err), case[2])
  end
  lu.assertEquals(rawdb.count(self.name, "records.book"), 0)
  -- what a client can send is invalid (a record that is not a table, a sid that is not one); nothing is written
  local v, err, code = self.store:save(Book, "x")
  lu.assertNil(v)
  lu.assertEquals(code, "invalid")
  lu.assertStrContains(tostring(err), "save book: the record must be a table, got a string")
  v, err, code = self.store:fetch(Book, { 1 })
  lu.assertNil(v)
  lu.assertEquals(code, "invalid")
  lu.assertStrContains(tostring(err), "fetch book: sid must be an integer (a number or its decimal text), got an array")
  lu.assertEquals(rawdb.count(self.name, "records.book"), 0)
  -- programmer mistakes raise
  lu.assertErrorMsgContains("record type", function() self.store:save({}, {}) end)
  local Other = records.define { name = "other", fields = { x = "string" } }
  lu.assertErrorMsgContains("not one of this store's types", function() self.store:save(Other, { x = "y" }) end)
  lu.assertErrorMsgContains("unknown key", function() records.define { name = "z", feilds = {} } end)
  lu.assertErrorMsgContains("unknown type", function() records.define { name = "z", fields = { a = "date" } } end)
  lu.assertErrorMsgContains("dedup", function() records.define { name = "z", dedup = "maybe" } end)
end

function TestRecordsSave:test_shared_record_in_one_graph_is_one_record()
  local List = records.define { name = "shelf", fields = { label = "string" }, refs = { books = { Book } } }
  local store = ok(records.open(self.db, { types = { List }, log = function() end }))
  local a = { name = "Frank Herbert", born = 1920 }
  local sid = ok(store:save(List, { label = "sf", books = { book("Dune", a), book("Messiah", a), book("Dune", a) } }))
  local shelf = ok(store:fetch(List, sid))
  lu.assertEquals(#shelf.books, 3)
  lu.assertEquals(shelf.books[1]._sid, shelf.books[3]._sid)
  lu.assertEquals(shelf.books[1].author._sid, shelf.books[2].author._sid)
  lu.assertEquals(rawdb.count(self.name, "records.book"), 2)
  lu.assertEquals(rawdb.count(self.name, "records.author"), 1)
  lu.assertEquals(#raw_doc(self.name, sid, "records.shelf")._refs, 3)
  store:close()
end
