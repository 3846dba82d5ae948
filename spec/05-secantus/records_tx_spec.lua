-- spec/05-secantus/records_tx_spec.lua - the record store in transaction mode (SecantusDB,
-- a single-node replica set): a graph save is one transaction, so a failure injected
-- after its first child write leaves nothing visible (while the sids reserved outside
-- it stay used); store:transaction commits several saves and a replacement together with
-- one timestamp, aborts them all on an error or a raise, and reads its own writes through
-- its handle; a fenced writer fails inside the transaction. Skipped on mongo-java-server,
-- which has no transactions (spec/02-records covers degraded mode there).
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local rawdb = require "helpers.rawdb"
local records = require "mongostore.records"

local SERVER = os.getenv("MONGOSTORE_TEST_SERVER") or "other"

local ok = require("helpers").ok

local Author = records.define { name = "author", fields = { name = "string" } }
local Book = records.define { name = "book", dedup = "value", fields = { title = "string", year = "integer" },
                              children = { chapters = { fields = { title = "string" } } },
                              refs = { author = Author, editor = Author } }

TestRecordsTransactions = {}

function TestRecordsTransactions:setUp()
  if SERVER == "java" then lu.skip("mongo-java-server has no transactions") end
  self.name = helper.fresh_db("rtx")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  if not ok(self.db:info()).transactions then lu.skip("this server has no transactions") end
  self.fail_at = nil
  self.writes = {}
  self.store = ok(records.open(self.db, { types = { Book }, transactions = "require", log = function() end,
    test_hooks = { after_write = function(info)
      self.writes[#self.writes + 1] = info
      if self.fail_at and info.writes == self.fail_at then return nil, "injected failure", "network" end
      if (self.transient or 0) > 0 then
        self.transient = self.transient - 1
        return nil, "injected transient failure", "network", { labels = ms.array { "TransientTransactionError" } }
      end
      return true
    end } }))
end

function TestRecordsTransactions:tearDown()
  if self.store then self.store:close() end
  if self.db then self.db:close() end
end

function TestRecordsTransactions:test_mode()
  lu.assertEquals(self.store:info().mode, "transactions")
end

function TestRecordsTransactions:test_failure_after_the_first_child_write_leaves_nothing()
  self.fail_at = 1
  local v, err, code = self.store:save(Book, { title = "Dune", year = 1965, chapters = { { title = "One" } },
                                               author = { name = "Herbert" }, editor = { name = "Someone" } })
  lu.assertNil(v)
  lu.assertEquals(code, "network", tostring(err))
  lu.assertEquals(err, "injected failure", "the message is a string, as the failing step gave it")
  lu.assertEquals(self.writes[1].type, "author", "the first write was a child's")
  lu.assertEquals(rawdb.count(self.name, "records.author"), 0)
  lu.assertEquals(rawdb.count(self.name, "records.book"), 0)
  -- the sids were reserved outside the transaction: used up, never given again
  lu.assertEquals(rawdb.docs(self.name, "records._counters")[1].n, 3)
  self.fail_at = nil
  local sid = ok(self.store:save(Book, { title = "Dune", year = 1965, author = { name = "Herbert" } }))
  lu.assertTrue(sid > 3)
  lu.assertEquals(rawdb.count(self.name, "records.author"), 1)
  lu.assertEquals(rawdb.count(self.name, "records.book"), 1)
end

function TestRecordsTransactions:test_failure_in_a_replacement_leaves_the_lineage_as_it_was()
  local s1 = ok(self.store:save(Book, { title = "Dune", year = 1965 }))
  self.fail_at = 1
  local v, _, code = self.store:replace(Book, s1, { title = "Dune", year = 1966 })
  lu.assertEquals({ v, code }, { nil, "network" })
  local docs = rawdb.docs(self.name, "records.book")
  lu.assertEquals(#docs, 1)
  lu.assertNil(docs[1]._next)
  self.fail_at = nil
  local s2 = ok(self.store:replace(Book, s1, { title = "Dune", year = 1966 }))
  lu.assertEquals(#ok(self.store:history(Book, s2)), 2)
end

-- A failure whose detail carries TransientTransactionError runs the save's transaction again:
-- the detail a step returns stays the detail, so the retry sees its labels.
function TestRecordsTransactions:test_a_transient_failure_runs_the_transaction_again()
  self.transient = 1
  local sid = ok(self.store:save(Book, { title = "Dune", year = 1965, author = { name = "Herbert" } }))
  lu.assertEquals(self.transient, 0)
  lu.assertEquals(#self.writes, 3, "the first attempt's write, then both again")
  lu.assertEquals(rawdb.count(self.name, "records.author"), 1)
  lu.assertEquals(rawdb.count(self.name, "records.book"), 1)
  lu.assertEquals(ok(self.store:fetch(Book, sid)).author.name, "Herbert")
  -- inside store:transaction too, and the unit commits once
  self.transient = 1
  local okt, a = self.store:transaction(function(tx) return tx:save(Book, { title = "Emma", year = 1815 }) end)
  lu.assertTrue(okt)
  lu.assertEquals(ok(self.store:fetch(Book, a)).title, "Emma")
  lu.assertEquals(rawdb.count(self.name, "records.book"), 2)
end

function TestRecordsTransactions:test_store_transaction_commits_together()
  local store = self.store
  local s1 = ok(store:save(Book, { title = "Dune", year = 1965 }))
  local res = { store:transaction(function(tx)
    local a = ok(tx:save(Book, { title = "Emma", year = 1815, author = { name = "Austen" } }))
    local b = ok(tx:save(Book, { title = "Persuasion", year = 1817, author = { name = "Austen" } }))
    local r = ok(tx:replace(Book, s1, { title = "Dune", year = 1966 }))
    -- its own writes, read back inside
    lu.assertEquals(ok(tx:fetch(Book, b)).author.name, "Austen")
    lu.assertEquals(ok(tx:query(Book):only_latest():count()), 3)
    return a, b, r
  end) }
  lu.assertTrue(res[1], tostring(res[2]))
  lu.assertEquals(#res, 4)
  local a, b, r = res[2], res[3], res[4]
  local docs = {}
  for _, d in ipairs(rawdb.docs(self.name, "records.book")) do docs[d._id] = d end
  lu.assertNotNil(docs[a])
  lu.assertNotNil(docs[b])
  lu.assertEquals(docs[s1]._next, r)
  lu.assertEquals(docs[a]._ts, docs[b]._ts, "one timestamp for the unit")
  lu.assertEquals(docs[a]._ts, docs[r]._ts)
  lu.assertEquals(ok(store:fetch(Book, a)).author._sid, ok(store:fetch(Book, b)).author._sid)
end

function TestRecordsTransactions:test_store_transaction_aborts_on_error_or_raise()
  local store = self.store
  local v, err, code = store:transaction(function(tx)
    ok(tx:save(Book, { title = "Emma", year = 1815 }))
    return nil, "changed my mind", "invalid"
  end)
  lu.assertNil(v)
  lu.assertEquals(code, "invalid", tostring(err))
  lu.assertEquals(err, "changed my mind", "fn's own failure comes back as fn gave it")
  lu.assertEquals(rawdb.count(self.name, "records.book"), 0)
  v, err, code = store:transaction(function(tx)
    ok(tx:save(Book, { title = "Emma", year = 1815 }))
    error("boom")
  end)
  lu.assertNil(v)
  lu.assertEquals(code, "invalid")
  lu.assertEquals(type(err), "string")
  lu.assertStrContains(err, "transaction: ")
  lu.assertStrContains(err, "boom")
  lu.assertEquals(rawdb.count(self.name, "records.book"), 0)
  -- a save failing inside aborts what came before it
  self.fail_at = 1
  local saved_first = false
  local _
  v, _, code = store:transaction(function(tx)
    self.fail_at = nil
    ok(tx:save(Book, { title = "Emma", year = 1815 }))
    saved_first = true
    self.fail_at = 1
    local s, e, c = tx:save(Book, { title = "Persuasion", year = 1817 })
    if not s then return nil, e, c end
    return s
  end)
  lu.assertTrue(saved_first)
  lu.assertEquals({ v, code }, { nil, "network" })
  lu.assertEquals(rawdb.count(self.name, "records.book"), 0)
  -- no nesting
  self.fail_at = nil
  v, _, code = store:transaction(function(tx) return tx:transaction(function() end) end)
  lu.assertEquals({ v, code }, { nil, "invalid" })
end

function TestRecordsTransactions:test_fenced_inside_the_transaction()
  local store = self.store
  ok(store:save(Book, { title = "A", year = 1 }))
  ok(self.db:collection("records._meta"):delete_one({ _id = "writer:" .. store:info().writer }))
  local v, err, code = store:save(Book, { title = "B", year = 2 })
  lu.assertEquals({ v, code }, { nil, "conflict" }, tostring(err))
  lu.assertStrContains(tostring(err), "taken over")
  v, err, code = store:transaction(function(tx) return tx:save(Book, { title = "C", year = 3 }) end)
  lu.assertEquals({ v, code }, { nil, "conflict" }, tostring(err))
  lu.assertEquals(rawdb.count(self.name, "records.book"), 1)
end
