-- spec/02-records/fsck_records_spec.lua - fsck over stores written by mongostore.records itself:
-- a store of graphs is clean and keeps every record; a degraded save or replace stopped after
-- its first writes (the store's after_write hook fails) leaves residue that fsck collects while
-- history and fetch stay whole; store timestamps written by a clock an hour ahead are reported,
-- hold every later writer off (the clock guard starts from them), and clamping lets them write.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local records = require "mongostore.records"

local Author = records.define { name = "author", fields = { name = "string" }, dedup = "content" }
local Book = records.define {
  name = "book", dedup = "value",
  fields = { title = "string", year = "integer", note = { "string", identity = false } },
  children = { chapters = { fields = { title = "string", pages = "integer" } } },
  refs = { author = Author, editors = { Author } },
}

local function book(i, author, year)
  return { title = "Book " .. i, year = year or (2000 + i), chapters = { { title = "one", pages = i } },
           author = { name = author or ("Author " .. i) }, editors = { { name = "Editor " .. i } } }
end

local ok = require("helpers").ok

local quiet = function() end

TestFsckRecords = {}

function TestFsckRecords:setUp()
  self.name = helper.fresh_db("fsckr")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  self.books = ok(self.db:collection("records.book"))
  self.authors = ok(self.db:collection("records.author"))
end

function TestFsckRecords:tearDown()
  if self.db then
    self.db:command({ dropDatabase = 1 })
    self.db:close()
  end
end

-- transactions: "never" (bottom-up writes), or the server's own mode
function TestFsckRecords:open(extra)
  local opts = { types = { Author, Book }, transactions = "never", log = quiet }
  for k, v in pairs(extra or {}) do opts[k] = v end
  return ok(records.open(self.db, opts))
end

function TestFsckRecords:test_a_store_of_graphs_is_clean_and_keeps_every_record()
  local store = self:open { transactions = "auto" }
  local sids = {}
  for i = 1, 12 do sids[i] = ok(store:save(Book, book(i, "Shared " .. (i % 3)))) end
  local s2 = ok(store:replace(Book, sids[1], book(1, "Shared 0", 1999)))
  ok(store:save(Author, { name = "Shared 1" }))   -- a dependency promoted to main
  local before_a, before_b = ok(self.authors:count()), ok(self.books:count())
  local s = ok(store:fsck { repair = true, collect_garbage = true })
  lu.assertTrue(s.clean, #s.violations > 0 and s.violations[1].message or "")
  lu.assertEquals(s.totals.deleted, 0)
  lu.assertEquals(s.totals.repaired, 0)
  lu.assertEquals(s.totals.unreachable, 0)
  lu.assertEquals(s.collections["records.book"].examined, 13)
  lu.assertEquals(s.collections["records.author"].examined, before_a)
  lu.assertEquals(ok(self.authors:count()), before_a)
  lu.assertEquals(ok(self.books:count()), before_b)
  for i = 2, 12 do lu.assertEquals(ok(store:fetch(Book, sids[i])).author.name, "Shared " .. (i % 3)) end
  local h = ok(store:history(Book, s2))
  lu.assertEquals(#h, 2)
  lu.assertEquals(h[2].year, 1999)
  lu.assertEquals(ok(store:query(Book):only_latest():count()), 12)
  -- the store's own handle goes on writing after its pass
  ok(store:save(Book, book(13)))
end

function TestFsckRecords:test_an_interrupted_degraded_save_leaves_residue_fsck_collects()
  local stop_after
  local store = self:open { test_hooks = { after_write = function(info)
    if stop_after and info.writes >= stop_after then return nil, "stopped by the spec", "server" end
    return true
  end } }
  local kept = ok(store:save(Book, book(1)))
  stop_after = 2   -- the author and the editor are written, the book is not
  local v, _, code = store:save(Book, book(2))
  lu.assertIsNil(v)
  lu.assertEquals(code, "server")
  stop_after = nil
  lu.assertNotNil(self.authors:find_one({ name = "Author 2" }))
  local report = ok(store:fsck {})
  lu.assertEquals(report.collections["records.author"].unreachable, 2)
  lu.assertTrue(report.clean, "residue is not a violation")
  local s = ok(store:fsck { collect_garbage = true })
  lu.assertEquals(s.collections["records.author"].deleted, 2)
  lu.assertIsNil(self.authors:find_one({ name = "Author 2" }))
  lu.assertIsNil(self.authors:find_one({ name = "Editor 2" }))
  local b = ok(store:fetch(Book, kept))
  lu.assertEquals(b.author.name, "Author 1")
  lu.assertEquals(b.editors[1].name, "Editor 1")
  -- saved again, the graph is whole, on new sids
  local again = ok(store:save(Book, book(2)))
  lu.assertTrue(again > kept + 3)
  lu.assertEquals(ok(store:fetch(Book, again)).editors[1].name, "Editor 2")
  lu.assertTrue(ok(store:fsck { collect_garbage = true }).clean)
end

function TestFsckRecords:test_an_interrupted_degraded_replace_is_collected_and_can_be_done_again()
  local stop
  local store = self:open { test_hooks = { after_write = function(info)
    if stop and info.type == "book" then return nil, "stopped by the spec", "server" end
    return true
  end } }
  local first = ok(store:save(Book, book(1)))
  stop = true
  lu.assertIsNil(store:replace(Book, first, book(1, "Author 1", 1990)))
  stop = nil
  -- the successor was written as a dependency, not linked
  local succ = ok(self.books:find_one({ year = 1990 }))
  lu.assertEquals(succ._role, "dep")
  lu.assertEquals(#ok(store:history(Book, first)), 1)
  local s = ok(store:fsck { repair = true, collect_garbage = true })
  lu.assertTrue(s.clean, #s.violations > 0 and s.violations[1].message or "")
  lu.assertEquals(s.collections["records.book"].deleted, 1)
  lu.assertEquals(s.collections["records.book"].repaired, 0, "fsck never links an unfinished replace")
  lu.assertIsNil(self.books:find_one({ _id = succ._id }))
  lu.assertIsNil(ok(self.books:find_one({ _id = first }))._next)
  local second = ok(store:replace(Book, first, book(1, "Author 1", 1990)))
  lu.assertNotEquals(second, succ._id)
  local h = ok(store:history(Book, second))
  lu.assertEquals({ h[1]._sid, h[2]._sid }, { first, second })
  lu.assertTrue(ok(store:fsck { collect_garbage = true }).clean)
end

function TestFsckRecords:test_future_timestamps_hold_writers_off_until_clamped()
  local hour = 3600 * 1e9
  local ahead = self:open { clock = function() return math.floor(ms.now() * 1e9) + hour end }
  local sid = ok(ahead:save(Book, book(1)))
  local succ = ok(ahead:replace(Book, sid, book(1, "Author 1", 1990)))
  ahead:close()
  local ts = ok(self.books:find_one({ _id = sid }))._ts
  -- a writer with a true clock starts its guard from the stored timestamps: an hour behind them
  local store = self:open()
  local v, err, code = store:save(Book, book(2))
  lu.assertIsNil(v)
  lu.assertEquals(code, "clock_regression", tostring(err))
  local report = ok(store:fsck {})
  local future = {}
  for _, x in ipairs(report.violations) do
    lu.assertEquals(x.kind, "future_timestamp")
    future[#future + 1] = x.collection .. " " .. x.sid
  end
  table.sort(future)
  -- both books' _ts, the first book's _nts (its successor's timestamp), the author and the
  -- editor (the replacement found both by their content ids)
  lu.assertEquals(#future, 5, table.concat(future, ", "))
  local s = ok(store:fsck { repair = true, clamp_future_timestamps = true })
  lu.assertEquals(s.totals.repaired, 5)
  local first, second = ok(self.books:find_one({ _id = sid })), ok(self.books:find_one({ _id = succ }))
  lu.assertTrue(first._ts < ts)
  lu.assertEquals(first._nts, second._ts, "a successor's timestamp and its copy clamped alike")
  lu.assertTrue(ok(store:fsck {}).clean)
  -- as of now both are present and only the successor is the latest
  local t = math.floor(ms.now() * 1e9)
  lu.assertEquals(ok(store:query(Book):as_of(t):count()), 2)
  local latest = ok(store:query(Book):only_latest():as_of(t):all())
  lu.assertEquals(#latest, 1)
  lu.assertEquals(latest[1]._sid, succ)
  -- a store opened now starts its guard from the clamped timestamps
  local fresh = self:open()
  local sid2 = ok(fresh:save(Book, book(2)))
  lu.assertEquals(ok(fresh:fetch(Book, sid2)).title, "Book 2")
  lu.assertEquals(ok(fresh:fetch(Book, sid)).title, "Book 1")
end

function TestFsckRecords:test_verify_content_finds_records_changed_behind_the_stores_back()
  local store = self:open()
  local sids = {}
  for i = 1, 5 do sids[i] = ok(store:save(Book, book(i))) end
  lu.assertTrue(ok(store:fsck { verify_content = true }).clean)
  -- an identity field edited, a child edited, a field the type cannot read, a metadata field
  ok(self.books:update_one({ _id = sids[1] }, { ["$set"] = { title = "Forged" } }))
  ok(self.books:update_one({ _id = sids[2] }, { ["$set"] = { ["chapters.0.pages"] = 999 } }))
  ok(self.books:update_one({ _id = sids[3] }, { ["$set"] = { year = "not a year" } }))
  ok(self.books:update_one({ _id = sids[4] }, { ["$set"] = { note = "identity = false: not in the content id" } }))
  local author = ok(self.authors:find_one({ name = "Author 5" }))
  ok(self.authors:update_one({ _id = author._id }, { ["$set"] = { name = "Someone else" } }))
  lu.assertTrue(ok(store:fsck {}).clean, "without verify_content nothing is read whole")
  local s = ok(store:fsck { verify_content = true })
  local got = {}
  for _, v in ipairs(s.violations) do got[#got + 1] = v.collection .. " " .. v.kind .. " " .. tostring(v.sid) end
  table.sort(got)
  lu.assertEquals(got, {
    "records.author content_mismatch " .. author._id,
    "records.book content_mismatch " .. sids[1],
    "records.book content_mismatch " .. sids[2],
    "records.book invalid_record " .. sids[3],
  })
  -- a verifying pass deletes and repairs nothing on its own account
  lu.assertEquals(s.totals.deleted + s.totals.repaired, 0)
  lu.assertEquals(ok(store:fetch(Book, sids[5])).author.name, "Someone else")
end
