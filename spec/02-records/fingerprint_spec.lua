-- spec/02-records/fingerprint_spec.lua - schema fingerprints of the record store: the first
-- check stamps each type, an unchanged shape passes, a changed shape fails invalid with a diff
-- naming the collections (expected, actual, the changes), nothing is stamped by a failed check,
-- upgrade = true applies only purely additive changes (new fields with identity = false) and
-- re-stamps them, and the message hints at upgrade when the difference is exactly additive.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local fingerprint = require "mongostore.records.fingerprint"

local ok = require("helpers").ok

local function copy(t)
  if type(t) ~= "table" then return t end
  local c = {}
  for k, v in pairs(t) do c[k] = copy(v) end
  return c
end

local AUTHOR = { name = "author", fields = { name = "string" }, dedup = "content" }
local BOOK = {
  name = "book", dedup = "value",
  fields = { title = "string", year = "integer", note = { "string", identity = false } },
  children = { chapters = { fields = { title = "string", pages = "integer" } } },
  refs = { author = AUTHOR },
}

TestFingerprint = {}

function TestFingerprint:setUp()
  self.name = helper.fresh_db("fp")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  self.store = { db = self.db, prefix = "records." }
  self.meta = ok(self.db:collection("records._meta"))
end

function TestFingerprint:tearDown()
  if self.db then
    self.db:command({ dropDatabase = 1 })
    self.db:close()
  end
end

function TestFingerprint:stamps()
  local out = {}
  for _, d in ipairs(ok(ok(self.meta:find({}, { sort = { _id = 1 } })):all())) do out[d._id] = d.fingerprint end
  return out
end

local function book_with(change)
  local b = copy(BOOK)
  b.refs.author = AUTHOR
  change(b)
  return b
end

function TestFingerprint:test_the_first_check_stamps_every_type_and_an_unchanged_shape_passes()
  lu.assertTrue(ok(fingerprint.check(self.store, { AUTHOR, BOOK })))
  local stamps = self:stamps()
  lu.assertEquals(stamps["schema:author"], fingerprint.of(AUTHOR))
  lu.assertEquals(stamps["schema:book"], fingerprint.of(BOOK))
  lu.assertStrMatches(stamps["schema:book"], string.rep("%x", 64))
  local doc = ok(self.meta:find_one({ _id = "schema:book" }))
  lu.assertEquals(doc.shape.name, "book")
  lu.assertEquals(#doc.shape.fields, 3)
  -- a second open with the same declarations (built anew) passes and changes nothing
  lu.assertTrue(ok(fingerprint.check(self.store, { copy(AUTHOR), book_with(function() end) })))
  lu.assertEquals(self:stamps(), stamps)
  -- opening a subset of the types is fine
  lu.assertTrue(ok(fingerprint.check(self.store, { AUTHOR })))
end

function TestFingerprint:test_the_fingerprint_covers_shape_and_content_identity()
  local base = fingerprint.of(BOOK)
  local variants = {
    book_with(function(b) b.fields.year = "number" end),                        -- a field's type
    book_with(function(b) b.fields.title = { "string", identity = false } end), -- an identity flag
    book_with(function(b) b.fields.note = "string" end),                         -- the other way round
    book_with(function(b) b.dedup = "content" end),                              -- dedup
    book_with(function(b) b.children.chapters.fields.pages = "number" end),      -- a child's field
    book_with(function(b) b.children.notes = { fields = { text = "string" } } end),
    book_with(function(b) b.refs.editor = AUTHOR end),                           -- a new ref
    book_with(function(b) b.refs.author = { name = "person" } end),             -- a ref's target
    book_with(function(b) b.fields.isbn = { "string", identity = false } end),   -- a new field
  }
  local seen = { [base] = true }
  for i, v in ipairs(variants) do
    local fp = fingerprint.of(v)
    lu.assertNotEquals(fp, base, "variant " .. i)
    lu.assertNil(seen[fp], "variant " .. i .. " collides")
    seen[fp] = true
  end
  -- the spelling of a plain field does not change what is stored
  lu.assertEquals(fingerprint.of(book_with(function(b) b.fields.title = { "string", required = false } end)), base)
end

function TestFingerprint:test_a_changed_shape_fails_with_a_diff_naming_the_collections()
  ok(fingerprint.check(self.store, { AUTHOR, BOOK }))
  local before = self:stamps()
  local author2 = { name = "author", fields = { name = "string", born = "integer" }, dedup = "content" }
  local book2 = book_with(function(b)
    b.fields.year = "number"
    b.fields.title = nil
  end)
  local v, err, code, detail = fingerprint.check(self.store, { author2, book2 }, { upgrade = true })
  lu.assertIsNil(v)
  lu.assertEquals(code, "invalid")
  lu.assertEquals(type(err), "string")
  local schema = detail.diff.schema
  lu.assertEquals(schema["records.book"].expected, before["schema:book"])
  lu.assertEquals(schema["records.book"].actual, fingerprint.of(book2))
  lu.assertEquals(schema["records.author"].expected, before["schema:author"])
  lu.assertEquals(schema["records.author"].actual, fingerprint.of(author2))
  local msg = tostring(err)
  lu.assertStrContains(msg, "records.author")
  lu.assertStrContains(msg, "records.book")
  lu.assertStrContains(msg, "field removed: title")
  lu.assertStrContains(msg, "field changed: year (integer) -> year (number)")
  -- an identity field added is not additive: old content ids would be wrong
  lu.assertStrContains(msg, "field added: born")
  lu.assertStrContains(msg, "upgrade = true applies only additive changes")
  -- nothing was stamped, not even the types whose check passed
  lu.assertEquals(self:stamps(), before)
end

function TestFingerprint:test_a_new_type_is_stamped_without_upgrade()
  ok(fingerprint.check(self.store, { AUTHOR, BOOK }))
  local publisher = { name = "publisher", fields = { name = "string", city = "string" } }
  lu.assertTrue(ok(fingerprint.check(self.store, { AUTHOR, BOOK, publisher })))
  lu.assertEquals(self:stamps()["schema:publisher"], fingerprint.of(publisher))
end

function TestFingerprint:test_a_failed_check_stamps_no_new_type()
  ok(fingerprint.check(self.store, { AUTHOR }))
  local changed = { name = "author", fields = { name = "integer" } }
  local v, _, code = fingerprint.check(self.store, { changed, BOOK })
  lu.assertIsNil(v)
  lu.assertEquals(code, "invalid")
  lu.assertIsNil(self:stamps()["schema:book"])
end

function TestFingerprint:test_an_additive_change_needs_upgrade_and_is_re_stamped()
  ok(fingerprint.check(self.store, { AUTHOR, BOOK }))
  local book2 = book_with(function(b) b.fields.isbn = { "string", identity = false } end)
  local v, err, code, detail = fingerprint.check(self.store, { AUTHOR, book2 })
  lu.assertIsNil(v)
  lu.assertEquals(code, "invalid")
  lu.assertEquals(detail.diff.schema["records.book"].changes, { "field added: isbn (string, identity = false)" })
  lu.assertIsNil(detail.diff.schema["records.author"])
  lu.assertStrContains(tostring(err), "open with upgrade = true to apply it")
  lu.assertTrue(ok(fingerprint.check(self.store, { AUTHOR, book2 }, { upgrade = true })))
  lu.assertEquals(self:stamps()["schema:book"], fingerprint.of(book2))
  -- the new shape is now the stored one; the old one is a change again
  lu.assertTrue(ok(fingerprint.check(self.store, { AUTHOR, book2 })))
  local back, err2 = fingerprint.check(self.store, { AUTHOR, BOOK }, { upgrade = true })
  lu.assertIsNil(back)
  lu.assertStrContains(tostring(err2), "field removed: isbn")
end

function TestFingerprint:test_additive_means_a_new_optional_field_outside_the_content_id()
  ok(fingerprint.check(self.store, { BOOK }))
  local refused = {
    book_with(function(b) b.fields.isbn = "string" end),                                      -- identity
    book_with(function(b) b.fields.isbn = { "string", identity = false, required = true } end),
    book_with(function(b) b.children.notes = { fields = { text = { "string", identity = false } } } end),
    book_with(function(b) b.refs.editor = AUTHOR end),
  }
  for i, b in ipairs(refused) do
    local v, err, _, detail = fingerprint.check(self.store, { b }, { upgrade = true })
    lu.assertIsNil(v, "variant " .. i)
    lu.assertFalse(detail.diff.schema["records.book"].additive, "variant " .. i)
    lu.assertNil(tostring(err):find("open with upgrade = true", 1, true), "variant " .. i)
  end
end

function TestFingerprint:test_wrong_arguments_raise()
  local okk, e = pcall(fingerprint.check, self.store, "x")
  lu.assertFalse(okk)
  lu.assertStrContains(tostring(e), "types must be a list")
  okk, e = pcall(fingerprint.check, self.store, { BOOK }, { upgrade = "yes" })
  lu.assertFalse(okk)
  lu.assertStrContains(tostring(e), "opts.upgrade must be a boolean")
  okk, e = pcall(fingerprint.check, self.store, { {} })
  lu.assertFalse(okk)
  lu.assertStrContains(tostring(e), "has no name")
end

-- Through records.open: the store stamps at its first open and checks at every later one.
TestFingerprintOpen = {}

local records = require "mongostore.records"

local function types(extra_field)
  local Author = records.define { name = "author", fields = { name = "string" }, dedup = "content" }
  local fields = { title = "string", year = "integer", note = { "string", identity = false } }
  if extra_field then fields[extra_field[1]] = extra_field[2] end
  local Book = records.define {
    name = "book", dedup = "value", fields = fields,
    children = { chapters = { fields = { title = "string", pages = "integer" } } },
    refs = { author = Author },
  }
  return Author, Book
end

function TestFingerprintOpen:setUp()
  self.name = helper.fresh_db("fpo")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
end

function TestFingerprintOpen:tearDown()
  if self.db then
    self.db:command({ dropDatabase = 1 })
    self.db:close()
  end
end

function TestFingerprintOpen:open(Author, Book, upgrade)
  return records.open(self.db, { types = { Author, Book }, transactions = "never", upgrade = upgrade,
                                 log = function() end })
end

function TestFingerprintOpen:test_reopening_with_a_changed_shape_fails_naming_the_collection()
  local Author, Book = types()
  local store = ok(self:open(Author, Book))
  ok(store:save(Book, { title = "T", year = 2001, chapters = { { title = "c", pages = 1 } },
                        author = { name = "A" } }))
  store:close()
  local A2, B2 = types { "year", "float" }   -- replaces year's declaration
  local v, err, code, detail = self:open(A2, B2, true)
  lu.assertIsNil(v)
  lu.assertEquals(code, "invalid")
  lu.assertEquals(type(err), "string", "the message is text")
  lu.assertNotNil(detail.diff.schema["records.book"])
  lu.assertIsNil(detail.diff.schema["records.author"])
  lu.assertStrContains(tostring(err), "records.book")
  lu.assertStrContains(tostring(err), "field changed: year (integer) -> year (float)")
  -- the old declarations still open
  ok(self:open(types())):close()
end

function TestFingerprintOpen:test_upgrade_adds_an_optional_field_and_old_records_read_it_as_nil()
  local Author, Book = types()
  local store = ok(self:open(Author, Book))
  local sid = ok(store:save(Book, { title = "Old", year = 1999, chapters = { { title = "c", pages = 3 } },
                                    author = { name = "A" } }))
  local cid = ok(store:fetch(Book, sid))._cid
  store:close()
  local A2, B2 = types { "isbn", { "string", identity = false } }
  local v, err, code = self:open(A2, B2)
  lu.assertIsNil(v)
  lu.assertEquals(code, "invalid")
  lu.assertStrContains(tostring(err), "open with upgrade = true to apply it")
  local up = ok(self:open(A2, B2, true))
  local old = ok(up:fetch(B2, sid))
  lu.assertEquals(old.title, "Old")
  lu.assertIsNil(old.isbn)
  lu.assertEquals(old._cid, cid, "an additive upgrade keeps the content ids")
  -- a new record with the field, and the old one saved again dedups onto the same sid
  local sid2 = ok(up:save(B2, { title = "New", year = 2020, isbn = "978-0", chapters = {},
                                author = { name = "A" } }))
  lu.assertEquals(ok(up:fetch(B2, sid2)).isbn, "978-0")
  lu.assertEquals(ok(up:save(B2, { title = "Old", year = 1999, chapters = { { title = "c", pages = 3 } },
                                   author = { name = "A" } })), sid)
  up:close()
  -- the upgraded shape is the stored one now: it opens without upgrade
  ok(self:open(A2, B2)):close()
end
