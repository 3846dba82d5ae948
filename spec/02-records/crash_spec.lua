-- spec/02-records/crash_spec.lua - a writer process (a real lua5.4 child) killed with kill -9 in
-- the middle of degraded-mode graph saves: once paused right after it wrote a new author (a
-- dependency) and before the book that refers to it, and at random moments of a loop of saves.
-- fsck refuses while the dead writer's lease is unexpired, force takes it over, the orphans are
-- collected, no record refers to a missing one, every book still fetches whole, and a new
-- writer goes on with sids never used before.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local records = require "mongostore.records"

-- The types and the graphs, shared by this file and its child processes.
local TYPES = [[
  local records = require "mongostore.records"
  local Author = records.define { name = "author", fields = { name = "string" }, dedup = "content" }
  local Book = records.define {
    name = "book", dedup = "value",
    fields = { title = "string", year = "integer" },
    children = { chapters = { fields = { title = "string", pages = "integer" } } },
    refs = { author = Author },
  }
  -- book i: 3 chapters; authors shared by 10 books, so one save in ten writes a new author
  local function book(i)
    local a = math.floor((i - 1) / 10)
    return { title = "Book " .. i, year = 1900 + i % 100,
             chapters = { { title = "one", pages = i % 7 }, { title = "two", pages = i % 11 },
                          { title = "three", pages = i % 13 } },
             author = { name = "Author " .. a } }
  end
  return Author, Book, book
]]

local Author, Book, book = load(TYPES)()

-- The writer: saves books FIRST.. in a loop in degraded mode. PAUSE=1: stops for good right
-- after it wrote a new author (the store's test hook after_write), before the book that refers
-- to it, and says so in PAUSED.
local WRITER = [[
  local ms = require "mongostore"
  local Author, Book, book = load(os.getenv("TYPES"))()
  local records = require "mongostore.records"
  local hooks
  if os.getenv("PAUSE") == "1" then
    hooks = { after_write = function(info)
      if info.type == "author" then
        local p = assert(io.open(os.getenv("PAUSED"), "w"))
        p:write(info.type, " ", tostring(info.sid), " ", info.role, "\n")
        p:close()
        while true do ms.sleep(1) end
      end
      return true
    end }
  end
  local db = assert(ms.database(os.getenv("MONGOSTORE_TEST_URI"), { db = os.getenv("DB"), wait = 10 }))
  local store = assert(records.open(db, { types = { Author, Book }, transactions = "never", test_hooks = hooks,
                                          log = function() end }))
  local f = assert(io.open(os.getenv("PIDFILE"), "w"))
  f:write(io.popen("echo $PPID"):read("l"), "\n")
  f:close()
  local i = tonumber(os.getenv("FIRST"))
  while true do
    assert(store:save(Book, book(i)))
    i = i + 1
  end
]]

local ok = require("helpers").ok

TestRecordsCrash = {}

function TestRecordsCrash:setUp()
  self.name = helper.fresh_db("rcrash")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  self.store = ok(records.open(self.db, { types = { Author, Book }, transactions = "never", log = function() end }))
  self.books = ok(self.db:collection("records.book"))
  self.authors = ok(self.db:collection("records.author"))
  self.files = {}
end

function TestRecordsCrash:tearDown()
  for _, p in ipairs(self.files) do os.remove(p) end
  if self.db then
    self.db:command({ dropDatabase = 1 })
    self.db:close()
  end
end

function TestRecordsCrash:tmp()
  local p = os.tmpname()
  os.remove(p)
  self.files[#self.files + 1] = p
  return p
end

local function wait_until(what, fn, seconds)
  local deadline = ms.now() + (seconds or 30)
  while not fn() do
    if ms.now() > deadline then error("timed out waiting for " .. what, 2) end
    ms.sleep(0.01)
  end
end

local function read_file(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

function TestRecordsCrash:writer(first, pause)
  local pidfile, paused = self:tmp(), self:tmp()
  local h = helper.spawn(WRITER, { DB = self.name, PIDFILE = pidfile, PAUSED = paused, FIRST = tostring(first),
                                   PAUSE = pause and "1" or "0", TYPES = TYPES, MONGOSTORE_TEST_URI = helper.uri() })
  wait_until("the writer's pid", function()
    local s = read_file(pidfile)
    h.pid = s and s:match("^(%d+)")
    return h.pid ~= nil
  end)
  h.paused = paused
  return h
end

local function kill(h)
  lu.assertTrue(os.execute("kill -9 " .. h.pid), "kill -9 " .. h.pid)
  local out, status = h.wait()
  lu.assertNotEquals(status, 0, "the writer was not killed:\n" .. out)
  return out
end

-- The dead writer's lease holds fsck off until forced; then every orphan goes.
function TestRecordsCrash:fsck_after_crash()
  local v, err, code = self.store:fsck { collect_garbage = true }
  lu.assertIsNil(v, "fsck ran past the dead writer's unexpired lease")
  lu.assertEquals(code, "unavailable")
  lu.assertStrContains(tostring(err), "writer:")
  local s = ok(self.store:fsck { repair = true, collect_garbage = true, force = true })
  lu.assertEquals(#s.taken_over, 1)
  lu.assertEquals(s.totals.violations, 0, "a record refers to a missing one")
  return s
end

-- Every book fetches whole, every record's content id is its content's, and every author
-- left is one a book refers to.
function TestRecordsCrash:check_intact()
  local v = ok(self.store:fsck { verify_content = true })
  lu.assertTrue(v.clean, #v.violations > 0 and v.violations[1].message or "")
  local docs = ok(ok(self.books:find({}, { sort = { _id = 1 } })):all())
  local used = {}
  for _, d in ipairs(docs) do
    lu.assertEquals(d._role, "main")
    local i = tonumber(d.title:match("^Book (%d+)$"))
    local want = book(i)
    local got = ok(self.store:fetch(Book, d._id))
    lu.assertEquals(got.title, want.title)
    lu.assertEquals(got.year, want.year)
    lu.assertEquals(#got.chapters, 3)
    for k = 1, 3 do
      lu.assertEquals(got.chapters[k].title, want.chapters[k].title)
      lu.assertEquals(got.chapters[k].pages, want.chapters[k].pages)
    end
    local author = got.author
    if type(author) ~= "table" then author = ok(self.store:fetch(Author, author)) end
    lu.assertEquals(author.name, want.author.name, d.title)
    for _, pair in ipairs(d._refs) do used[pair[2]] = true end
  end
  for _, a in ipairs(ok(ok(self.authors:find({})):all())) do
    lu.assertTrue(used[a._id] or a._role == "main", "author " .. tostring(a._id) .. " is an orphan fsck left")
  end
  return #docs
end

function TestRecordsCrash:test_killed_between_a_dependency_and_its_root_leaves_an_orphan_fsck_collects()
  for i = 1, 15 do ok(self.store:save(Book, book(i))) end   -- authors 0 and 1
  local books_before = ok(self.books:count())
  local authors_before = ok(self.authors:count())
  local h = self:writer(16, true)   -- book 21 writes author 2 first
  wait_until("the writer's pause", function() return read_file(h.paused) ~= nil end)
  lu.assertStrContains(read_file(h.paused), " dep")
  kill(h)
  -- books 16..20 were saved, book 21's author was written, book 21 was not
  lu.assertEquals(ok(self.books:count()), books_before + 5)
  lu.assertEquals(ok(self.authors:count()), authors_before + 1)
  local orphan = ok(self.authors:find_one({ name = "Author 2" }))
  lu.assertEquals(orphan._role, "dep")
  local s = self:fsck_after_crash()
  lu.assertEquals(s.collections["records.author"].deleted, 1)
  lu.assertEquals(s.collections["records.book"].deleted, 0)
  lu.assertIsNil(self.authors:find_one({ _id = orphan._id }))
  lu.assertEquals(self:check_intact(), 20)
  -- a new writer goes on, above every sid used so far, the crashed one's included
  local sid = ok(self.store:save(Book, book(21)))
  lu.assertTrue(sid > orphan._id)
  lu.assertEquals(self:check_intact(), 21)
  lu.assertTrue(ok(self.store:fsck {}).clean)
end

function TestRecordsCrash:test_killed_at_random_moments_of_a_loop_of_saves()
  math.randomseed(os.time())
  local first = 1
  for round = 1, 4 do
    local h = self:writer(first, false)
    local at = ok(self.books:count()) + 5 + math.random(0, 20)
    wait_until("round " .. round .. "'s saves", function() return ok(self.books:count()) >= at end)
    ms.sleep(math.random() * 0.03)
    kill(h)
    -- the next writer starts after the last book written
    first = 0
    for _, d in ipairs(ok(ok(self.books:find({})):all())) do
      first = math.max(first, tonumber(d.title:match("%d+")))
    end
    first = first + 1
    if round < 4 then
      -- each dead writer's lease goes with a forced pass (report only: its orphans wait)
      ok(self.store:fsck { force = true })
    end
  end
  local s = self:fsck_after_crash()
  local n = self:check_intact()
  lu.assertTrue(n >= 20, "only " .. n .. " books")
  lu.assertEquals(ok(self.store:fsck { collect_garbage = true }).totals.unreachable, 0)
  lu.assertTrue(s.gen > 0)
end
