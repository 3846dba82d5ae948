-- spec/02-records/fsck_fencing_spec.lua - fsck against live writers: a forced pass takes the
-- writer's lease over and the writer then fails every write with conflict (idle, or stopped in
-- the middle of a degraded graph save right before its root), a writer whose lease ran out is
-- fenced by a collecting pass without force, a running fsck holds writers off, and a root that
-- a fenced writer still lands while the pass runs is reported, never silently left dangling.
local lu = require "luaunit"
local ms = require "mongostore"
local core = require "mongostore.core"
local helper = require "helpers"
local records = require "mongostore.records"
local fsck = require "mongostore.records.fsck"

local A = ms.array

local Author = records.define { name = "author", fields = { name = "string" }, dedup = "content" }
local Book = records.define {
  name = "book", dedup = "value",
  fields = { title = "string", year = "integer" },
  children = { chapters = { fields = { title = "string", pages = "integer" } } },
  refs = { author = Author },
}

local function book(i, author)
  return { title = "Book " .. i, year = 2000 + i, chapters = { { title = "one", pages = i } },
           author = { name = author or ("Author " .. i) } }
end

local ok = require("helpers").ok

TestFsckFencing = {}

function TestFsckFencing:setUp()
  self.name = helper.fresh_db("fence")
  self.saved = { delete_many = core.Collection.delete_many, find = core.Collection.find }
  self.admin_db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  self.writer_db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  local quiet = function() end
  self.admin = ok(records.open(self.admin_db, { types = { Author, Book }, transactions = "never", log = quiet }))
  -- the writer's saves call self.on_write (if set) after each document they write
  self.writer = ok(records.open(self.writer_db, { types = { Author, Book }, transactions = "never", log = quiet,
    test_hooks = { after_write = function(info) return not self.on_write or self.on_write(info) end } }))
  self.books = ok(self.admin_db:collection("records.book"))
  self.authors = ok(self.admin_db:collection("records.author"))
  self.meta = ok(self.admin_db:collection("records._meta"))
end

function TestFsckFencing:tearDown()
  core.Collection.delete_many = self.saved.delete_many
  core.Collection.find = self.saved.find
  if self.writer_db then self.writer_db:close() end
  if self.admin_db then
    self.admin_db:command({ dropDatabase = 1 })
    self.admin_db:close()
  end
end

function TestFsckFencing:writer_leases()
  local out = {}
  for _, d in ipairs(ok(ok(self.meta:find({ _id = { ["$gte"] = "writer:", ["$lt"] = "writer;" } })):all())) do
    out[#out + 1] = d._id
  end
  return out
end

local function assert_fenced(v, err, code)
  lu.assertIsNil(v)
  lu.assertEquals(code, "conflict")
  lu.assertStrContains(tostring(err), "taken over")
end

-- the writer in the server's own mode: with transactions where it has them (SecantusDB), where
-- the lease is renewed inside each save's transaction
function TestFsckFencing:test_a_forced_pass_fences_an_idle_live_writer_in_the_servers_mode()
  self.writer = ok(records.open(self.writer_db, { types = { Author, Book }, transactions = "auto",
                                                  log = function() end }))
  self:test_a_forced_pass_fences_an_idle_live_writer()
end

function TestFsckFencing:test_a_forced_pass_fences_an_idle_live_writer()
  ok(self.writer:save(Book, book(1)))
  lu.assertEquals(#self:writer_leases(), 1)
  -- without force the live lease holds the pass off
  local v, _, code = self.admin:fsck { collect_garbage = true }
  lu.assertIsNil(v)
  lu.assertEquals(code, "unavailable")
  local s = ok(self.admin:fsck { collect_garbage = true, force = true })
  lu.assertEquals(#s.taken_over, 1)
  lu.assertEquals(self:writer_leases(), {})
  local books = ok(self.books:count())
  assert_fenced(self.writer:save(Book, book(2)))
  -- and every later write, not only the first
  assert_fenced(self.writer:save(Book, book(3)))
  assert_fenced(self.writer:save(Author, { name = "Someone" }))
  lu.assertEquals(ok(self.books:count()), books)
  lu.assertIsNil(self.authors:find_one({ name = "Someone" }))
  lu.assertTrue(ok(self.admin:fsck {}).clean)
  -- the store is whole: a new handle writes on
  local fresh = ok(records.open(self.writer_db, { types = { Author, Book }, transactions = "never",
                                                   log = function() end }))
  ok(fresh:save(Book, book(4)))
  lu.assertEquals(ok(fresh:fetch(Book, ok(fresh:save(Book, book(4))))).title, "Book 4")
end

-- The writer stops right after it wrote a new author, before its book: the forced pass runs
-- there (collecting that author, an orphan now), and the writer must not write the book.
function TestFsckFencing:test_a_writer_taken_over_mid_save_cannot_write_its_root()
  ok(self.writer:save(Book, book(1)))
  local admin, armed, summary = self.admin, false, nil
  self.on_write = function(info)
    if info.type == "author" and not summary then
      armed = true
      summary = ok(admin:fsck { collect_garbage = true, force = true })
    end
    return true
  end
  local v, err, code = self.writer:save(Book, book(2))
  self.on_write = nil
  lu.assertTrue(armed, "the save wrote no author")
  lu.assertNotNil(summary, "the pass never ran")
  assert_fenced(v, err, code)
  lu.assertEquals(summary.collections["records.author"].deleted, 1)
  lu.assertIsNil(self.authors:find_one({ name = "Author 2" }))
  lu.assertIsNil(self.books:find_one({ title = "Book 2" }))
  local after = ok(self.admin:fsck { collect_garbage = true })
  lu.assertTrue(after.clean)
  lu.assertEquals(after.totals.deleted, 0)
  lu.assertEquals(ok(self.admin:fetch(Book, ok(self.books:find_one({ title = "Book 1" }))._id)).title, "Book 1")
end

function TestFsckFencing:test_a_writer_whose_lease_ran_out_is_fenced_by_a_collecting_pass()
  ok(self.writer:save(Book, book(1)))
  local id = self:writer_leases()[1]
  ok(self.meta:update_one({ _id = id }, { ["$set"] = { expires = ms.date(math.floor(ms.now() * 1000) - 1) } }))
  -- a report-only pass leaves the lapsed lease alone, and the writer goes on
  ok(self.admin:fsck {})
  ok(self.writer:save(Book, book(2)))
  ok(self.meta:update_one({ _id = id }, { ["$set"] = { expires = ms.date(math.floor(ms.now() * 1000) - 1) } }))
  local s = ok(self.admin:fsck { collect_garbage = true })
  lu.assertEquals(s.stale_writers, 1)
  lu.assertEquals(s.taken_over, {})
  assert_fenced(self.writer:save(Book, book(3)))
end

function TestFsckFencing:test_writers_wait_while_an_fsck_holds_the_lease()
  local writer, admin = self.writer, self.admin
  ok(writer:save(Book, book(1)))
  -- the pass runs while a save waits: the save goes through once the pass gave the lease back
  ok(self.meta:update_one({ _id = "fsck" }, { ["$set"] = { holder = "fsck:spec", gen = 0,
    expires = ms.date(math.floor(ms.now() * 1000) + 400) } }, { upsert = true }))
  local sid = ok(writer:save(Book, book(2)))
  lu.assertEquals(ok(admin:fetch(Book, sid)).title, "Book 2")
  lu.assertEquals(ok(self.meta:find_one({ _id = "fsck" })).holder, "fsck:spec")
end

-- A save tried while a pass is scanning waits for the lease, then gives up (fsck_wait); once
-- the pass is over it goes through.
function TestFsckFencing:test_a_running_pass_blocks_writers()
  local writer = ok(records.open(self.writer_db, { types = { Author, Book }, transactions = "auto", fsck_wait = 0.3,
                                                   log = function() end }))
  ok(writer:save(Book, book(1)))
  ok(writer:close())   -- its lease goes, so the pass need not wait for it
  writer = ok(records.open(self.writer_db, { types = { Author, Book }, transactions = "auto", fsck_wait = 0.3,
                                             log = function() end }))
  local find, during = self.saved.find, nil
  core.Collection.find = function(coll, ...)
    if during == nil and coll:name() == "records.book" then
      during = { writer:save(Book, book(2)) }
    end
    return find(coll, ...)
  end
  local s = ok(self.admin:fsck { collect_garbage = true })
  core.Collection.find = find
  lu.assertNotNil(during, "the pass never scanned the books")
  lu.assertIsNil(during[1])
  lu.assertEquals(during[3], "unavailable")
  lu.assertStrContains(tostring(during[2]), "fsck")
  lu.assertTrue(s.clean)
  lu.assertIsNil(self.books:find_one({ title = "Book 2" }))
  local sid = ok(writer:save(Book, book(2)))
  lu.assertEquals(ok(self.admin:fetch(Book, sid)).title, "Book 2")
end

-- The race a degraded store cannot close: a fenced writer's root that passed its check just
-- before the takeover and lands after the scan. The pass reports it.
function TestFsckFencing:test_a_root_landing_after_the_scan_is_reported()
  ok(ok(self.admin_db:collection("records._counters")):update_one({ _id = "sid" }, { ["$max"] = { n = 2000 } },
    { upsert = true }))
  ok(self.meta:insert_one({ _id = "writer:late", expires = ms.date(math.floor(ms.now() * 1000) + 60000), gen = 0 }))
  ok(self.authors:insert_one({ _id = 1001, _role = "dep", _cid = string.rep("a", 64), _lin = 1001, _refs = A {},
                               _w = "late" }))
  local books, delete_many = self.books, self.saved.delete_many
  local landed = false
  core.Collection.delete_many = function(coll, filter, ...)
    if not landed and coll:name() == "records.author" then
      landed = true
      ok(books:insert_one({ _id = 1002, _role = "main", _cid = string.rep("b", 64), _lin = 1002,
                            _refs = A { A { "author", 1001 } }, _w = "late", title = "late" }))
    end
    return delete_many(coll, filter, ...)
  end
  local saved_grace = fsck.FENCE_GRACE
  fsck.FENCE_GRACE = 0
  local s = ok(self.admin:fsck { collect_garbage = true, force = true })
  fsck.FENCE_GRACE = saved_grace
  core.Collection.delete_many = delete_many
  lu.assertTrue(landed)
  lu.assertEquals(s.taken_over, { "late" })
  lu.assertEquals(#s.violations, 1)
  lu.assertEquals(s.violations[1].kind, "dangling_ref")
  lu.assertEquals(s.violations[1].sid, 1002)
  lu.assertStrContains(s.violations[1].message, "late")
  lu.assertFalse(s.clean)
end

-- A pass that starts between a writer's first read of the fsck lease and its writer document
-- (so the pass sees no writer): the writer reads the fsck lease again after making its
-- document, and waits instead of writing under the pass.
function TestFsckFencing:test_a_pass_starting_while_a_writer_makes_its_lease_holds_it_off()
  local writer = ok(records.open(self.writer_db, { types = { Author, Book }, transactions = "never", fsck_wait = 0.2,
                                                   log = function() end }))
  local wdb, admin = self.writer_db, self.admin
  local find, command = self.saved.find, core.Database.command
  local pass, result
  -- the pass stops once, right before it scans the authors
  core.Collection.find = function(coll, ...)
    if pass and coroutine.running() == pass and coll:name() == "records.author" and not result then
      coroutine.yield()
    end
    return find(coll, ...)
  end
  pass = coroutine.create(function() result = { admin:fsck { collect_garbage = true } } end)
  local started = false
  core.Database.command = function(db, cmd, ...)
    local head = type(cmd) == "table" and cmd[1]
    if db == wdb and not started and type(head) == "table" and head[1] == "insert" and head[2] == "records._meta" then
      started = true
      assert(coroutine.resume(pass))   -- takes the fsck lease, finds no writer, stops before the authors
    end
    return command(db, cmd, ...)
  end
  local v, err, code = writer:save(Book, book(1))
  core.Database.command = command
  lu.assertTrue(started, "the writer made no lease document")
  lu.assertEquals(coroutine.status(pass), "suspended")
  lu.assertIsNil(v)
  lu.assertEquals(code, "unavailable", tostring(err))
  lu.assertEquals(ok(self.authors:count()), 0)
  assert(coroutine.resume(pass))
  core.Collection.find = find
  lu.assertEquals(coroutine.status(pass), "dead")
  local s = ok(result[1], result[2], result[3])
  lu.assertTrue(s.clean)
  -- the writer's lease is still its own: it writes once the pass is over
  local sid = ok(writer:save(Book, book(1)))
  lu.assertEquals(ok(admin:fetch(Book, sid)).author.name, "Author 1")
  lu.assertTrue(ok(admin:fsck { force = true }).clean)
end
