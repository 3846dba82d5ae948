-- spec/05-secantus/search_explain_spec.lua - a searcher's ref path is served by
-- indexes: the finds it really sends (recorded at the store's own wire) are
-- explained, and the referenced type's find and the referring find examine
-- about what they return, not the collections. Needs a server with a query
-- planner (SecantusDB, or a real MongoDB): skipped on mongo-java-server.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local records = require "mongostore.records"
local core = require "mongostore.core"

local ok = helper.ok
local SERVER = os.getenv("MONGOSTORE_TEST_SERVER") or "other"
local BOOKS, PER_AUTHOR = 600, 6

local Author = records.define { name = "author", fields = { name = "string" }, indexes = { { "name" } } }
local Book = records.define { name = "book", dedup = "none", fields = { title = "string", year = "integer" },
                              refs = { author = Author }, indexes = { { "author" }, { "year" } } }

-- { find = coll, filter = f } with find first (the server reads the first key as the command): the
-- two one-field documents' BSON joined and decoded, as a decoded table keeps its fields' order
local function find_command(coll, filter)
  local a, b = core.bson_encode({ find = coll }), core.bson_encode({ filter = filter })
  local body = a:sub(5, -2) .. b:sub(5, -2)
  local n = #body + 5
  local len = string.char(n % 256, (n >> 8) % 256, (n >> 16) % 256, (n >> 24) % 256)
  return core.bson_decode(len .. body .. "\0", { document = true })
end

TestSearchExplain = {}

function TestSearchExplain:setUp()
  if SERVER == "java" then
    lu.skip("mongo-java-server has no query planner: explain cannot show what a find examines")
  end
  self.name = helper.fresh_db("rsexplain")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  self.store = ok(records.open(self.db, { types = { Book }, log = function() end }))
  local authors = {}
  for i = 1, BOOKS do
    local a = (i - 1) // PER_AUTHOR
    authors[a] = authors[a] or ok(self.store:save(Author, { name = "Author " .. a }))
    ok(self.store:save(Book, { title = "Book " .. i, year = 1900 + i % 50, author = authors[a] }))
  end
end

function TestSearchExplain:tearDown()
  if self.store then self.store:close() end
  if self.db then self.db:close() end
end

function TestSearchExplain:test_ref_path_finds_use_indexes()
  local sent = {}
  local wire = self.store.wire
  local find = getmetatable(wire).__index.find
  wire.find = function(w, coll, filter, opts, session)
    sent[#sent + 1] = { coll = coll, filter = filter }
    return find(w, coll, filter, opts, session)
  end
  local s = self.store:searcher()
  local b = s:variable(Book)
  s:add(b.author.name:eq("Author 7"))
  s:output(b.title, "title")
  local rows = ok(s:results())
  wire.find = nil
  lu.assertEquals(#rows, PER_AUTHOR)
  lu.assertTrue(#sent >= 2, "the authors' find, then the books'")
  for i = 1, 2 do
    local f = sent[i]
    local reply = ok(self.db:command({ { "explain", find_command(f.coll, f.filter) },
                                       { "verbosity", "executionStats" } }))
    local st = reply.executionStats
    local examined = math.max(st.totalDocsExamined, st.totalKeysExamined)
    lu.assertTrue(examined <= 2 * PER_AUTHOR + 2, string.format("%s examined %d documents or keys for %d returned",
      f.coll, examined, st.nReturned))
  end
end
