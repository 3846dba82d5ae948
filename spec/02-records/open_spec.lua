-- spec/02-records/open_spec.lua - records.open's transaction modes exactly as the
-- seed: auto probes the server (transactions on a replica set; a standalone opens
-- degraded and logs one warning), require refuses a standalone as unavailable
-- saying why, never forces degraded; the majority concerns by default; the
-- indexes each collection gets; store:info; store:transaction in degraded mode;
-- the arguments open refuses.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local rawdb = require "helpers.rawdb"
local records = require "mongostore.records"

local SERVER = os.getenv("MONGOSTORE_TEST_SERVER") or "other"

local ok = require("helpers").ok

local Author = records.define { name = "author", fields = { name = "string" } }
local Book = records.define { name = "book", dedup = "value", fields = { title = "string", year = "integer" },
                              refs = { author = Author }, indexes = { { "year" } } }
local Event = records.define { name = "event", fields = { what = "string" }, dedup = "none" }

TestRecordsOpen = {}

function TestRecordsOpen:setUp()
  self.name = helper.fresh_db("ropen")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  self.has_tx = ok(self.db:info()).transactions
  self.logged = {}
  self.log = function(level, msg) self.logged[#self.logged + 1] = { level = level, msg = msg } end
end

function TestRecordsOpen:tearDown()
  if self.db then self.db:close() end
end

function TestRecordsOpen:test_auto_probes_the_server()
  local store = ok(records.open(self.db, { types = { Book }, transactions = "auto", log = self.log }))
  local info = store:info()
  if self.has_tx then
    lu.assertEquals(info.mode, "transactions")
    lu.assertEquals(#self.logged, 0, "no warning with transactions")
  else
    lu.assertEquals(info.mode, "degraded")
    lu.assertEquals(#self.logged, 1, "one warning")
    lu.assertEquals(self.logged[1].level, "warning")
    lu.assertStrContains(self.logged[1].msg, "degraded")
    lu.assertStrContains(self.logged[1].msg, "standalone")
    -- a save logs nothing more
    ok(store:save(Book, { title = "Dune", year = 1965, author = { name = "Herbert" } }))
    lu.assertEquals(#self.logged, 1)
  end
  if SERVER == "java" then lu.assertEquals(info.mode, "degraded") end
  if SERVER == "secantus" then lu.assertEquals(info.mode, "transactions") end
  store:close()
end

function TestRecordsOpen:test_require_refuses_a_standalone()
  local store, err, code = records.open(self.db, { types = { Book }, transactions = "require", log = self.log })
  if self.has_tx then
    lu.assertNotNil(store, tostring(err))
    lu.assertEquals(store:info().mode, "transactions")
    store:close()
  else
    lu.assertNil(store)
    lu.assertEquals(code, "unavailable")
    lu.assertStrContains(tostring(err), "require")
    lu.assertStrContains(tostring(err), "standalone")
    -- refused before anything was created
    lu.assertEquals(#self.logged, 0)
    lu.assertEquals(rawdb.count(self.name, "records._meta"), 0)
  end
end

function TestRecordsOpen:test_never_forces_degraded()
  local store = ok(records.open(self.db, { types = { Book }, transactions = "never", log = self.log }))
  lu.assertEquals(store:info().mode, "degraded")
  lu.assertEquals(#self.logged, 1)
  lu.assertStrContains(self.logged[1].msg, "never")
  local ran = false
  local v, err, code = store:transaction(function() ran = true end)
  lu.assertNil(v)
  lu.assertEquals(code, "unavailable")
  lu.assertStrContains(tostring(err), "degraded")
  lu.assertFalse(ran)
  store:close()
end

function TestRecordsOpen:test_majority_concerns_by_default()
  local store = ok(records.open(self.db, { types = { Book }, log = self.log }))
  local info = store:info()
  lu.assertEquals(info.write_concern, { w = "majority", j = true })
  lu.assertEquals(info.read_concern, { level = "majority" })
  store:close()
  store = ok(records.open(self.db, { types = { Book }, log = self.log, write_concern = { w = 1 } }))
  lu.assertEquals(store:info().write_concern, { w = 1 })
  ok(store:save(Book, { title = "Dune", year = 1965 }))
  store:close()
end

function TestRecordsOpen:test_indexes()
  local store = ok(records.open(self.db, { types = { Book, Event }, log = self.log }))
  local function by_name(coll)
    local out = {}
    for _, ix in ipairs(ok(self.db:collection(coll):list_indexes())) do out[ix.name] = ix end
    return out
  end
  local books = by_name("records.book")
  lu.assertTrue(books._cid.unique, "dedup value: a unique content id")
  lu.assertNotNil(books._lin)
  lu.assertNotNil(books._ts)
  lu.assertNotNil(books.by_year)
  lu.assertTrue(by_name("records.author")._cid.unique)
  local events = by_name("records.event")
  lu.assertNotNil(events._cid)
  lu.assertFalse(events._cid.unique == true, "dedup none: the content id is not unique")
  store:close()
  -- reopening creates nothing new and fails nothing
  store = ok(records.open(self.db, { types = { Book, Event }, log = self.log }))
  store:close()
end

function TestRecordsOpen:test_info_and_prefix()
  local store = ok(records.open(self.db, { types = { Book }, prefix = "lib.", log = self.log }))
  local info = store:info()
  lu.assertEquals(info.prefix, "lib.")
  lu.assertItemsEquals(info.types, { "book", "author" }, "types reached by refs are in the store")
  lu.assertTrue(info.store_timestamps)
  lu.assertEquals(info.timestamp_resolution, 1000)
  ok(store:save(Book, { title = "Dune", year = 1965, author = { name = "Herbert" } }))
  lu.assertEquals(rawdb.count(self.name, "lib.book"), 1)
  lu.assertEquals(rawdb.count(self.name, "lib.author"), 1)
  lu.assertEquals(rawdb.count(self.name, "lib._counters"), 1)
  store:close()
end

function TestRecordsOpen:test_closed_store()
  local store = ok(records.open(self.db, { types = { Book }, log = self.log }))
  ok(store:close())
  ok(store:close())
  local v, err, code = store:save(Book, { title = "x" })
  lu.assertNil(v)
  lu.assertEquals(code, "closed", tostring(err))
  v, err, code = store:fetch(Book, 1)
  lu.assertEquals({ v, code }, { nil, "closed" }, tostring(err))
  -- a query made before the close fails the same way
  local q = store:query(Book):order_by{ { "title", 1 } }
  for _, call in ipairs{ function() return q:all() end, function() return q:count() end,
                         function() return q:page{ limit = 10 } end } do
    v, err, code = call()
    lu.assertEquals({ v, code }, { nil, "closed" }, tostring(err))
  end
end

function TestRecordsOpen:test_bad_arguments_raise()
  lu.assertErrorMsgContains("db must be", function() records.open(nil, { types = { Book } }) end)
  lu.assertErrorMsgContains("types", function() records.open(self.db, {}) end)
  lu.assertErrorMsgContains("unknown option", function() records.open(self.db, { types = { Book }, tx = 1 }) end)
  lu.assertErrorMsgContains("transactions", function()
    records.open(self.db, { types = { Book }, transactions = "sometimes" })
  end)
  lu.assertErrorMsgContains("not a record type", function() records.open(self.db, { types = { {} } }) end)
  local Twin = records.define { name = "book", fields = { other = "string" } }
  lu.assertErrorMsgContains("two different types", function() records.open(self.db, { types = { Book, Twin } }) end)
  lu.assertErrorMsgContains("timestamp_resolution", function()
    records.open(self.db, { types = { Book }, timestamp_resolution = 0.5 })
  end)
end
