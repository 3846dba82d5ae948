-- spec/02-records/fsck_spec.lua - the record store's fsck on documents of the storage layout
-- written with the document API: reachability from main records through _refs, garbage
-- collection of unreachable dependencies only, dangling refs and lineage links, future store
-- timestamps and clamping, the sid counter, the fsck lease and the writer leases it waits
-- for, refuses on or (force) takes over, and the gen bump.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local fsck = require "mongostore.records.fsck"

local A = ms.array

local ok = require("helpers").ok

local function now_ms() return math.floor(ms.now() * 1000) end
-- store units at the default resolution (1000 ns: microseconds)
local function now_units() return math.floor(ms.now() * 1e6) end

TestFsck = {}

function TestFsck:setUp()
  self.name = helper.fresh_db("fsck")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  -- a bare handle: the database, the prefix and the types (by name) that are the store's own
  self.store = { db = self.db, prefix = "records.", types = { author = { name = "author" }, book = { name = "book" } } }
  self.books = ok(self.db:collection("records.book"))
  self.authors = ok(self.db:collection("records.author"))
  self.meta = ok(self.db:collection("records._meta"))
  self.counters = ok(self.db:collection("records._counters"))
  self.max_sid = 0
end

function TestFsck:tearDown()
  if self.db then
    self.db:command({ dropDatabase = 1 })
    self.db:close()
  end
end

-- A record document of the layout; refs: list of { type name, sid }.
function TestFsck:put(coll, sid, role, refs, extra)
  local doc = { _id = sid, _role = role, _cid = string.rep(string.format("%x", sid % 16), 64), _lin = sid,
                _ts = now_units(), _w = "spec", _refs = A(refs or {}) }
  for k, v in pairs(extra or {}) do doc[k] = v end
  ok(coll:insert_one(doc))
  if sid > self.max_sid then
    self.max_sid = sid
    ok(self.counters:update_one({ _id = "sid" }, { ["$max"] = { n = sid } }, { upsert = true }))
  end
end

-- Two reachable graphs (book 10 -> author 1, book 11 -> author 1 and author 2), a chain
-- author 3 -> author 4 reachable from book 12, and the residue of an interrupted save: author 5
-- and author 6 (dep, unreachable), one pointing at the other.
function TestFsck:graph()
  self:put(self.authors, 1, "dep")
  self:put(self.authors, 2, "dep")
  self:put(self.authors, 4, "dep")
  self:put(self.authors, 3, "dep", { A { "author", 4 } })
  self:put(self.authors, 6, "dep")
  self:put(self.authors, 5, "dep", { A { "author", 6 } })
  self:put(self.books, 10, "main", { A { "author", 1 } }, { title = "a" })
  self:put(self.books, 11, "main", { A { "author", 1 }, A { "author", 2 } }, { title = "b" })
  self:put(self.books, 12, "main", { A { "author", 3 } }, { title = "c" })
  -- a main nothing points at is a root, never garbage
  self:put(self.authors, 7, "main")
end

local function ids(coll)
  local out = {}
  for _, d in ipairs(ok(ok(coll:find({}, { sort = { _id = 1 } })):all())) do out[#out + 1] = d._id end
  return out
end

local function kinds(summary)
  local out = {}
  for _, v in ipairs(summary.violations) do out[#out + 1] = v.kind end
  table.sort(out)
  return out
end

function TestFsck:test_report_only_changes_nothing_and_counts_every_collection()
  self:graph()
  local s = ok(fsck.run(self.store))
  lu.assertEquals(s.collections["records.author"].examined, 7)
  lu.assertEquals(s.collections["records.book"].examined, 3)
  lu.assertEquals(s.collections["records.author"].unreachable, 2)
  lu.assertEquals(s.collections["records.book"].unreachable, 0)
  lu.assertEquals(s.totals.deleted, 0)
  lu.assertEquals(s.totals.examined, 10)
  lu.assertEquals(s.totals.violations, 0)
  lu.assertTrue(s.clean)
  lu.assertIsNil(s.collections["records._meta"])
  lu.assertIsNil(s.collections["records._counters"])
  lu.assertEquals(ids(self.authors), { 1, 2, 3, 4, 5, 6, 7 })
end

function TestFsck:test_collect_garbage_deletes_only_unreachable_dependencies()
  self:graph()
  local s = ok(fsck.run(self.store, { collect_garbage = true }))
  lu.assertEquals(s.collections["records.author"].deleted, 2)
  lu.assertEquals(s.collections["records.book"].deleted, 0)
  lu.assertEquals(s.totals.deleted, 2)
  lu.assertEquals(ids(self.authors), { 1, 2, 3, 4, 7 })
  lu.assertEquals(ids(self.books), { 10, 11, 12 })
  -- a second pass finds nothing left to do
  local again = ok(fsck.run(self.store, { collect_garbage = true }))
  lu.assertEquals(again.totals.deleted, 0)
  lu.assertEquals(again.totals.unreachable, 0)
  lu.assertTrue(again.clean)
end

-- Collections of the prefix that are not the store's own (no declared type, no schema stamp):
-- their mains count as roots, nothing in them is collected; "<prefix>x.y" is another store's.
function TestFsck:test_only_the_stores_own_collections_are_collected()
  local legacy = ok(self.db:collection("records.legacy"))
  local other = ok(self.db:collection("records.v2.author"))
  self:put(legacy, 1, "main", { A { "author", 2 } })
  self:put(self.authors, 2, "dep")
  self:put(legacy, 3, "dep")
  self:put(other, 4, "dep")
  -- a type stamped by an earlier open is the store's even when this handle does not declare it
  local stamped = ok(self.db:collection("records.chapter_type"))
  ok(self.meta:insert_one({ _id = "schema:chapter_type", fingerprint = string.rep("0", 64), shape = {} }))
  self:put(stamped, 5, "dep")
  local s = ok(fsck.run(self.store, { collect_garbage = true }))
  lu.assertEquals(s.collections["records.legacy"].unreachable, 1)
  lu.assertEquals(s.collections["records.legacy"].deleted, 0)
  lu.assertFalse(s.collections["records.legacy"].owned)
  lu.assertTrue(s.collections["records.chapter_type"].owned)
  lu.assertEquals(s.collections["records.chapter_type"].deleted, 1)
  lu.assertIsNil(s.collections["records.v2.author"])
  lu.assertEquals(ids(self.authors), { 2 })
  lu.assertEquals(ids(legacy), { 1, 3 })
  lu.assertEquals(ids(other), { 4 })
end

function TestFsck:test_lineage_keeps_every_version_of_a_reachable_record()
  -- an older version (dep) of a dependency a main refers to through its latest version
  self:put(self.authors, 20, "dep", nil, { _next = 21 })
  self:put(self.authors, 21, "dep", nil, { _prev = 20, _lin = 20 })
  self:put(self.books, 22, "main", { A { "author", 21 } })
  local s = ok(fsck.run(self.store, { collect_garbage = true }))
  lu.assertEquals(s.totals.deleted, 0)
  lu.assertEquals(ids(self.authors), { 20, 21 })
  lu.assertTrue(s.clean)
end

function TestFsck:test_dangling_refs_are_violations_and_keep_their_record()
  self:put(self.authors, 1, "dep")
  self:put(self.books, 2, "main", { A { "author", 1 }, A { "author", 99 } })
  self:put(self.books, 3, "main", { A { "chapter_type", 5 } })
  local s = ok(fsck.run(self.store, { repair = true, collect_garbage = true }))
  lu.assertEquals(kinds(s), { "dangling_ref", "dangling_ref" })
  lu.assertEquals(#s.collections["records.book"].violations, 2)
  lu.assertEquals(s.totals.violations, 2)
  lu.assertFalse(s.clean)
  local by_sid = {}
  for _, v in ipairs(s.violations) do by_sid[v.sid] = v end
  lu.assertStrContains(by_sid[2].message, "records.author 99")
  lu.assertStrContains(by_sid[3].message, "records.chapter_type 5")
  lu.assertEquals(ids(self.books), { 2, 3 })
  lu.assertEquals(ids(self.authors), { 1 })
end

function TestFsck:test_malformed_store_fields_are_reported_and_never_collected()
  self:put(self.authors, 1, "dep")
  ok(self.authors:insert_one({ _id = 2, _refs = A {} }))           -- no role
  ok(self.authors:insert_one({ _id = "x", _role = "dep" }))        -- not a sid
  self:put(self.books, 3, "main", { A { "author" } })               -- a pair without its sid
  local s = ok(fsck.run(self.store, { collect_garbage = true }))
  lu.assertEquals(kinds(s), { "bad_refs", "bad_role", "bad_sid" })
  lu.assertEquals(s.collections["records.author"].deleted, 1)      -- only author 1
  lu.assertEquals(ok(self.authors:count()), 2)
end

function TestFsck:test_future_timestamps_are_reported_and_clamped_only_on_request()
  local ahead = now_units() + 3600 * 1000000   -- an hour ahead
  self:put(self.books, 1, "main", nil, { _ts = ahead })
  self:put(self.books, 2, "main")
  local s = ok(fsck.run(self.store))
  lu.assertEquals(kinds(s), { "future_timestamp" })
  lu.assertEquals(s.violations[1].sid, 1)
  lu.assertStrContains(s.violations[1].message, "in the future")
  -- repair alone does not clamp: clamping is destructive to as-of queries
  ok(fsck.run(self.store, { repair = true }))
  lu.assertEquals(ok(self.books:find_one({ _id = 1 }))._ts, ahead)
  -- clamping without repair is a report
  ok(fsck.run(self.store, { clamp_future_timestamps = true }))
  lu.assertEquals(ok(self.books:find_one({ _id = 1 }))._ts, ahead)
  local before = now_units()
  local c = ok(fsck.run(self.store, { repair = true, clamp_future_timestamps = true }))
  lu.assertEquals(c.collections["records.book"].repaired, 1)
  local ts = ok(self.books:find_one({ _id = 1 }))._ts
  lu.assertTrue(ts >= before and ts <= now_units(), "clamped to now: " .. tostring(ts))
  lu.assertTrue(ok(fsck.run(self.store)).clean)
  -- a slack wider than the skew reports nothing
  self:put(self.books, 3, "main", nil, { _ts = now_units() + 30 * 1000000 })
  lu.assertEquals(#ok(fsck.run(self.store)).violations, 1)
  lu.assertEquals(#ok(fsck.run(self.store, { future_slack = 120 })).violations, 0)
end

function TestFsck:test_a_sid_beyond_the_counter_is_repaired_by_raising_the_counter()
  self:put(self.books, 5, "main")
  ok(self.books:insert_one({ _id = 9, _role = "main", _refs = A {} }))   -- written behind the counter's back
  local s = ok(fsck.run(self.store))
  lu.assertEquals(kinds(s), { "sid_beyond_counter" })
  lu.assertEquals(ok(self.counters:find_one({ _id = "sid" })).n, 5)
  s = ok(fsck.run(self.store, { repair = true }))
  lu.assertEquals(s.totals.repaired, 1)
  lu.assertEquals(ok(self.counters:find_one({ _id = "sid" })).n, 9)
  lu.assertTrue(ok(fsck.run(self.store)).clean)
end

function TestFsck:test_lineage_links_are_checked_and_a_missing_next_is_repaired()
  -- a degraded replace stopped between the successor's write and the predecessor's _next
  self:put(self.books, 1, "main")
  self:put(self.books, 2, "main", nil, { _prev = 1, _lin = 1 })
  -- a successor link to a record never written
  self:put(self.books, 3, "main", nil, { _next = 50 })
  -- two successors of one record
  self:put(self.books, 4, "main", nil, { _next = 5 })
  self:put(self.books, 5, "main", nil, { _prev = 4, _lin = 4 })
  self:put(self.books, 6, "main", nil, { _prev = 4, _lin = 4 })
  -- a degraded replace that stopped before its link: the successor is residue, not a fork
  self:put(self.books, 7, "main", nil, { _next = 9 })
  self:put(self.books, 8, "dep", nil, { _prev = 7, _lin = 7 })
  -- one that stopped after its link, before promoting the successor
  self:put(self.books, 9, "dep", nil, { _prev = 7, _lin = 7 })
  local s = ok(fsck.run(self.store))
  lu.assertEquals(kinds(s), { "dangling_lineage", "lineage_fork", "missing_next", "unpromoted_successor" })
  lu.assertEquals(s.collections["records.book"].conflicts, 1)
  lu.assertEquals(s.collections["records.book"].unreachable, 1)
  s = ok(fsck.run(self.store, { repair = true, collect_garbage = true }))
  lu.assertEquals(s.collections["records.book"].repaired, 3)
  lu.assertEquals(s.collections["records.book"].deleted, 1)
  lu.assertEquals(ok(self.books:find_one({ _id = 1 }))._next, 2)
  lu.assertIsNil(ok(self.books:find_one({ _id = 3 }))._next)
  lu.assertEquals(ok(self.books:find_one({ _id = 9 }))._role, "main")
  lu.assertIsNil(self.books:find_one({ _id = 8 }))
  -- the fork is a conflict for a person to settle: still there
  s = ok(fsck.run(self.store, { repair = true }))
  lu.assertEquals(kinds(s), { "lineage_fork" })
  lu.assertEquals(s.totals.conflicts, 1)
end

function TestFsck:test_each_pass_bumps_gen_and_gives_the_lease_back()
  self:put(self.books, 1, "main")
  local s1 = ok(fsck.run(self.store))
  local s2 = ok(fsck.run(self.store))
  lu.assertEquals(s2.gen, s1.gen + 1)
  local lease = ok(self.meta:find_one({ _id = "fsck" }))
  lu.assertEquals(lease.gen, s2.gen)
  lu.assertEquals(lease.holder, ms.null)
  lu.assertTrue(lease.expires:ms() <= now_ms())
end

function TestFsck:test_an_unexpired_fsck_lease_of_another_is_refused_unless_forced()
  self:put(self.books, 1, "main")
  ok(self.meta:insert_one({ _id = "fsck", holder = "fsck:other", expires = ms.date(now_ms() + 60000), gen = 4 }))
  local v, err, code = fsck.run(self.store)
  lu.assertIsNil(v)
  lu.assertEquals(code, "unavailable")
  lu.assertEquals(type(err), "string")
  lu.assertStrContains(tostring(err), "fsck:other")
  lu.assertEquals(ok(self.meta:find_one({ _id = "fsck" })).holder, "fsck:other")
  local s = ok(fsck.run(self.store, { force = true }))
  lu.assertEquals(s.gen, 5)
  -- an expired lease needs no force
  ok(self.meta:update_one({ _id = "fsck" }, { ["$set"] = { holder = "fsck:dead", expires = ms.date(now_ms() - 1) } }))
  lu.assertEquals(ok(fsck.run(self.store)).gen, 6)
end

function TestFsck:test_live_writer_leases_are_refused_waited_for_or_taken_over()
  self:put(self.books, 1, "main")
  ok(self.meta:insert_one({ _id = "writer:w1", expires = ms.date(now_ms() + 60000), gen = 0 }))
  ok(self.meta:insert_one({ _id = "writer:stale", expires = ms.date(now_ms() - 1000), gen = 0 }))
  local v, err, code, detail = fsck.run(self.store)
  lu.assertIsNil(v)
  lu.assertEquals(code, "unavailable")
  lu.assertStrContains(tostring(err), "writer:w1")
  lu.assertStrContains(tostring(err), "force = true")
  lu.assertEquals(type(err), "string")
  lu.assertEquals(#detail.writers, 1)
  -- the lease was given back: a writer may go on, and the next fsck may start
  lu.assertEquals(ok(self.meta:find_one({ _id = "fsck" })).holder, ms.null)
  -- the handle's own writer lease is never waited for
  lu.assertEquals(ok(fsck.run({ db = self.db, prefix = "records.", token = "w1", types = self.store.types }))
    .totals.examined, 1)
  -- wait: a lease that runs out while fsck waits lets it through
  ok(self.meta:update_one({ _id = "writer:w1" }, { ["$set"] = { expires = ms.date(now_ms() + 300) } }))
  local s = ok(fsck.run(self.store, { wait = 10 }))
  lu.assertEquals(s.taken_over, {})
  lu.assertNotNil(ok(self.meta:find_one({ _id = "writer:w1" })), "a report-only pass deletes no lease")
  -- force takes over a live lease: the document goes, its holder is fenced
  ok(self.meta:update_one({ _id = "writer:w1" }, { ["$set"] = { expires = ms.date(now_ms() + 60000) } }))
  s = ok(fsck.run(self.store, { force = true }))
  lu.assertEquals(s.taken_over, { "w1" })
  lu.assertIsNil(self.meta:find_one({ _id = "writer:w1" }))
  -- a pass that deletes records removes the stale leases too
  s = ok(fsck.run(self.store, { collect_garbage = true }))
  lu.assertEquals(s.stale_writers, 1)
  lu.assertIsNil(self.meta:find_one({ _id = "writer:stale" }))
end

function TestFsck:test_wrong_options_raise_naming_them()
  local function raises(opts, text)
    local okk, e = pcall(fsck.run, self.store, opts)
    lu.assertFalse(okk)
    lu.assertStrContains(tostring(e), text)
  end
  raises({ repair = 1 }, "opts.repair must be a boolean")
  raises({ gc = true }, "unknown option gc")
  raises({ wait = -1 }, "opts.wait")
  raises("x", "opts must be a table")
  local okk, e = pcall(fsck.run, nil)
  lu.assertFalse(okk)
  lu.assertStrContains(tostring(e), "store must be a record store")
end

-- A pass longer than its lease's time renews the lease as it scans, so writers stay out.
function TestFsck:test_a_long_pass_keeps_its_lease()
  local docs = {}
  for i = 1, 8000 do docs[i] = { _id = i, _role = "main", _refs = A {} } end
  ok(self.books:insert_many(docs))
  ok(self.counters:insert_one({ _id = "sid", n = 8000 }))
  local core = require "mongostore.core"
  local next_doc, ttl = core.Cursor.next, fsck.FSCK_TTL
  local seen, late, started = 0, nil, nil
  fsck.FSCK_TTL = 2
  core.Cursor.next = function(cur, ...)
    seen = seen + 1
    if seen == 1 then started = ms.now() end
    ms.sleep(0.0004)   -- a slow scan: about 3 s for the books, past the lease's 2 s
    if seen == 7900 then
      late = { lease = self.meta:find_one({ _id = "fsck" }), at = now_ms(), since = ms.now() - started }
    end
    return next_doc(cur, ...)
  end
  local s, err = fsck.run(self.store)
  core.Cursor.next, fsck.FSCK_TTL = next_doc, ttl
  ok(s, err)
  lu.assertEquals(s.totals.examined, 8000)
  lu.assertNotNil(late, "the scan never reached its end")
  lu.assertTrue(late.since > 2, "the scan was not longer than the lease; it proves nothing")
  lu.assertNotEquals(late.lease.holder, ms.null)
  lu.assertTrue(late.lease.expires:ms() > late.at, "the lease ran out under a running pass")
end
