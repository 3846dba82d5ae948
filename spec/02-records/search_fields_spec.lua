-- spec/02-records/search_fields_spec.lua - the searcher on fields, store fields,
-- ref paths (one and two hops, list refs), and/or/not, field-to-field
-- comparisons, only_latest and as_of, outputs, sort, offset, limit, count and
-- the result set (first, one, scalars, column); a client's bad values are
-- invalid with nothing sent, programmer misuse raises, operator-looking values
-- are compared as data, and disconnected variables are refused.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local records = require "mongostore.records"

local ok = helper.ok

local Country = records.define { name = "country", fields = { code = "string" } }
local Author = records.define { name = "author", fields = { name = "string", born = "integer" },
                                refs = { country = Country } }
local Book = records.define {
  name = "book", dedup = "none",
  fields = { title = "string", year = "integer", pages = "integer", min_pages = "integer", tags = "string[]" },
  refs = { author = Author, editors = { Author } },
}

local function sorted(list) table.sort(list); return list end

TestSearchFields = {}

function TestSearchFields:setUp()
  self.name = helper.fresh_db("rsearch")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  self.store = ok(records.open(self.db, { types = { Book }, log = function() end }))
  local ann = { name = "Ann", born = 1950, country = { code = "SE" } }
  local bob = { name = "Bob", born = 1970, country = { code = "NO" } }
  self.sids = {}
  local books = {
    { title = "Alpha", year = 1985, pages = 100, min_pages = 50, author = ann, editors = { bob } },
    { title = "Axe", year = 1995, pages = 40, min_pages = 60, author = bob, editors = { ann, bob } },
    { title = "Boxer", year = 2001, pages = 300, min_pages = 10, author = ann },
    { title = "Cider", year = 2010, author = bob },
    { title = "$gt", year = 1990, pages = 5, min_pages = 1 },
  }
  for i, b in ipairs(books) do self.sids[b.title] = ok(self.store:save(Book, b)); self.sids[i] = self.sids[b.title] end
end

function TestSearchFields:tearDown()
  if self.store then self.store:close() end
  if self.db then self.db:close() end
end

local function titles(s)
  local out = {}
  for i, row in ipairs(ok(s:results())) do out[i] = row.book.title end
  return sorted(out)
end

function TestSearchFields:search(fn)
  local s = self.store:searcher()
  local b = s:variable(Book)
  s:output(b, "book")
  fn(s, b)
  return titles(s)
end

function TestSearchFields:test_field_comparisons()
  lu.assertEquals(self:search(function(s, b) s:add(b.year:ge(1995)) end), { "Axe", "Boxer", "Cider" })
  lu.assertEquals(self:search(function(s, b) s:add(b.year:lt(1995)) end), { "$gt", "Alpha" })
  lu.assertEquals(self:search(function(s, b) s:add(b.year:le(1995)); s:add(b.year:gt(1985)) end), { "$gt", "Axe" })
  lu.assertEquals(self:search(function(s, b) s:add(b.title:eq("Axe")) end), { "Axe" })
  lu.assertEquals(self:search(function(s, b) s:add(b.title:ne("Axe")) end), { "$gt", "Alpha", "Boxer", "Cider" })
  lu.assertEquals(self:search(function(s, b) s:add(b.year:in_list { 1985, "2010" }) end), { "Alpha", "Cider" })
  lu.assertEquals(self:search(function(s, b) s:add(b.year:nin_list { 1985, 2010 }) end), { "$gt", "Axe", "Boxer" })
  lu.assertEquals(self:search(function(s, b) s:add(b.title:prefix("A")) end), { "Alpha", "Axe" })
  lu.assertEquals(self:search(function(s, b) s:add(b.title:suffix("er")) end), { "Boxer", "Cider" })
  lu.assertEquals(self:search(function(s, b) s:add(b.title:contains("x")) end), { "Axe", "Boxer" })
  lu.assertEquals(self:search(function(s, b) s:add(b.pages:is_unknown()) end), { "Cider" })
  lu.assertEquals(#self:search(function(s, b) s:add(b.pages:is_known()) end), 4)
  -- store fields
  lu.assertEquals(self:search(function(s, b) s:add(b._sid:eq(self.sids.Boxer)) end), { "Boxer" })
  lu.assertEquals(#self:search(function(s, b) s:add(b._ts:gt(0)); s:add(b._lin:ge(1)) end), 5)
  -- a regular expression's characters are matched as themselves
  lu.assertEquals(self:search(function(s, b) s:add(b.title:prefix("$")) end), { "$gt" })
  lu.assertEquals(self:search(function(s, b) s:add(b.title:contains(".")) end), {})
end

function TestSearchFields:test_and_or_not()
  lu.assertEquals(self:search(function(s, b)
    s:add(s.any_of(b.title:prefix("C"), b.title:contains("x")))
  end), { "Axe", "Boxer", "Cider" })
  lu.assertEquals(self:search(function(s, b)
    s:add(s.all_of(b.year:gt(1980), b.year:lt(2000)))
    s:add(s.none_of(b.title:eq("Axe")))
  end), { "$gt", "Alpha" })
end

function TestSearchFields:test_field_against_field()
  lu.assertEquals(self:search(function(s, b) s:add(b.pages:gt(b.min_pages)) end), { "$gt", "Alpha", "Boxer" })
  lu.assertEquals(self:search(function(s, b) s:add(b.pages:lt(b.min_pages)) end), { "Axe" })
end

function TestSearchFields:test_ref_paths()
  lu.assertEquals(self:search(function(s, b) s:add(b.author.name:eq("Ann")) end), { "Alpha", "Boxer" })
  lu.assertEquals(self:search(function(s, b) s:add(b.author.born:gt(1960)) end), { "Axe", "Cider" })
  -- two hops
  lu.assertEquals(self:search(function(s, b) s:add(b.author.country.code:eq("NO")) end), { "Axe", "Cider" })
  -- a list ref: any element, and the quantifiers
  lu.assertEquals(self:search(function(s, b) s:add(b.editors.name:eq("Ann")) end), { "Axe" })
  lu.assertEquals(self:search(function(s, b)
    s:add(b.editors:any(function(e) return e.name:eq("Bob") end))
  end), { "Alpha", "Axe" })
  lu.assertEquals(self:search(function(s, b)
    s:add(b.editors:all(function(e) return e.name:eq("Bob") end))
    s:add(b.editors:length():ge(1))
  end), { "Alpha" })
  lu.assertEquals(self:search(function(s, b)
    s:add(b.editors:none(function(e) return e.name:eq("Bob") end))
  end), { "$gt", "Boxer", "Cider" })
  -- a ref inside any_of, and its absence
  lu.assertEquals(self:search(function(s, b)
    s:add(s.any_of(b.author.name:eq("Bob"), b.author:is_unknown()))
  end), { "$gt", "Axe", "Cider" })
end

function TestSearchFields:test_outputs_sort_offset_limit()
  local s = self.store:searcher()
  local b = s:variable(Book)
  s:add(b.author.name:is_known())
  s:output(b, "book"):output(b.title, "title"):output(b.author.name, "author"):output(b.author.country.code, "cc")
  s:output(b.editors.name, "editors")
  s:sort(b.year, -1)
  local rows = ok(s:results())
  lu.assertEquals(#rows, 4)
  lu.assertEquals(rows:scalars("title"), { "Cider", "Boxer", "Axe", "Alpha", n = 4 })
  lu.assertEquals(rows:column("author"), { "Bob", "Ann", "Bob", "Ann", n = 4 })
  lu.assertEquals(rows:column("cc"), { "NO", "SE", "NO", "SE", n = 4 })
  lu.assertEquals(rows[3].editors, { "Ann", "Bob" })
  lu.assertEquals(rows:first().book._sid, self.sids.Cider)
  lu.assertEquals(rows[2].book.author.name, "Ann")
  lu.assertEquals(ok(s:count()), 4)
  s:offset(1):limit(2)
  rows = ok(s:results())
  lu.assertEquals(rows:scalars("title"), { "Boxer", "Axe", n = 2 })
  lu.assertEquals(ok(s:count()), 4, "count is of every match, offset and limit aside")
  -- a client's text for numbers
  s:offset("3"):limit("10")
  lu.assertEquals(ok(s:results()):scalars("title"), { "Alpha", n = 1 })
end

function TestSearchFields:test_sort_by_sid_and_twice()
  local s = self.store:searcher()
  local b = s:variable(Book)
  s:output(b._sid, "sid"):sort(b._sid, -1):sort(b._sid, 1)
  local sids = ok(s:results()):scalars()
  lu.assertEquals(#sids, 5)
  for i = 2, #sids do lu.assertTrue(sids[i - 1] > sids[i]) end
  local page = ok(s:page { limit = 2 })
  lu.assertEquals(page.items[2].sid, sids[2])
  local walked, token = {}, nil
  repeat
    page = ok(s:page { limit = 2, cursor = token })
    for _, row in ipairs(page.items) do walked[#walked + 1] = row.sid end
    token = page.next_cursor
  until not token
  walked.n = #walked
  lu.assertEquals(walked, sids)
end

function TestSearchFields:test_one_first_scalars()
  local s = self.store:searcher()
  local b = s:variable(Book)
  s:add(b.title:eq("Boxer"))
  s:output(b.year, "year")
  local rows = ok(s:results())
  lu.assertEquals(ok(rows:one()).year, 2001)
  lu.assertEquals(rows:scalars(), { 2001, n = 1 })
  local none = self.store:searcher()
  local v = none:variable(Book)
  none:add(v.title:eq("nothing"))
  rows = ok(none:results())
  lu.assertNil(rows:first())
  local r, msg, code, detail = rows:one()
  lu.assertNil(r)
  lu.assertEquals(code, "not_found")
  lu.assertStrContains(msg, "no row")
  lu.assertEquals(detail.count, 0)
  local many = self.store:searcher()
  many:variable(Book)
  rows = ok(many:results())
  lu.assertEquals(#rows, 5, "no output: each row holds the record under its type's name")
  lu.assertNotNil(rows[1].book._sid)
  r, msg, code, detail = rows:one()
  lu.assertNil(r)
  lu.assertEquals(code, "invalid")
  lu.assertStrContains(msg, "5 rows")
  lu.assertEquals(detail.count, 5)
  s:output(b.title, "title")
  local two = ok(s:results())
  lu.assertErrorMsgContains("name is needed", function() two:scalars() end)
  lu.assertErrorMsgContains("not an output", function() rows:column("nope") end)
end

function TestSearchFields:test_only_latest_and_as_of()
  local before = ok(self.store:fetch(Book, self.sids.Axe))
  lu.assertNotNil(before)
  local t0 = os.time()
  local new = ok(self.store:replace(Book, self.sids.Axe, { title = "Axe", year = 1996 }))
  local s = self.store:searcher { only_latest = true }
  local b = s:variable(Book)
  s:add(b.title:eq("Axe"))
  s:output(b.year, "year")
  lu.assertEquals(ok(s:results()):scalars(), { 1996, n = 1 })
  local all = self.store:searcher()
  local a = all:variable(Book)
  all:add(a.title:eq("Axe"))
  lu.assertEquals(ok(all:count()), 2)
  -- as of a time before the replacement: the old one is the latest then
  local old_ts = ok(self.store:fetch(Book, self.sids.Axe))._ts
  local cut = self.store:searcher { only_latest = true, as_of = old_ts * self.store.ts.resolution }
  local c = cut:variable(Book)
  cut:add(c.title:eq("Axe"))
  cut:output(c._sid, "sid")
  lu.assertEquals(ok(cut:results()):scalars(), { self.sids.Axe, n = 1 })
  lu.assertNotEquals(new, self.sids.Axe)
  lu.assertTrue(t0 > 0)
end

function TestSearchFields:test_bad_values_are_invalid_nothing_sent()
  local cases = {
    function(b) return b.year:ge("nineteen") end,
    function(b) return b.year:eq({ ["$gt"] = 0 }) end,
    function(b) return b.year:in_list("1990") end,
    function(b) return b.year:in_list { 1990, {} } end,
    function(b) return b.title:prefix(12) end,
    function(b) return b.author.born:lt(1.5) end,
    function(b) return b.tags:length():ge(-1) end,
  }
  for i, make in ipairs(cases) do
    local s = self.store:searcher()
    local b = s:variable(Book)
    s:add(make(b))
    local db = self.db
    local r, msg, code = s:results()
    lu.assertNil(r, "case " .. i)
    lu.assertEquals(code, "invalid", "case " .. i)
    lu.assertEquals(type(msg), "string")
    lu.assertStrContains(msg, "search:")
    local _, _, count_code = s:count()
    lu.assertEquals(count_code, "invalid")
    lu.assertNotNil(db)
  end
  -- nothing is sent: with the database closed the refusal is still what comes back
  do
    local db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
    local store = ok(records.open(db, { types = { Book }, log = function() end }))
    local s = store:searcher()
    local b = s:variable(Book)
    s:add(b.author.name:eq("Ann"))
    s:add(b.year:gt("soon"))
    db:close()
    local r, msg, code = s:results()
    lu.assertNil(r)
    lu.assertEquals(code, "invalid")
    lu.assertStrContains(msg, "book.year gt takes an integer")
    local t = store:searcher()
    t:variable(Book)
    local _, _, closed_code = t:count()
    lu.assertNotEquals(closed_code, "invalid", "a search that sends something fails otherwise there")
  end
  -- a client's JSON body: null, an object and an array where a value belongs are data, refused
  local body = ms.json.decode('{"year": null, "title": {"$ne": ""}, "pages": [1, 2]}')
  for _, k in ipairs { "year", "title", "pages" } do
    local x = self.store:searcher()
    local v = x:variable(Book)
    x:add(v[k]:eq(body[k]))
    local r, msg, code = x:results()
    lu.assertNil(r, k)
    lu.assertEquals(code, "invalid", k)
    lu.assertStrContains(msg, "book." .. k)
  end
  -- a closed store
  do
    local db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
    local store = ok(records.open(db, { types = { Book }, log = function() end }))
    local x = store:searcher()
    x:variable(Book)
    store:close()
    local r, _, code = x:results()
    lu.assertNil(r)
    lu.assertEquals(code, "closed")
    db:close()
  end
  -- an operator-looking string is compared as data
  local s = self.store:searcher()
  local b = s:variable(Book)
  s:add(b.title:eq("$gt"))
  lu.assertEquals(#ok(s:results()), 1)
  -- a bad limit, offset, sort direction, as_of
  local function code_of(fn)
    local x = self.store:searcher()
    fn(x, x:variable(Book))
    local _, _, code = x:results()
    return code
  end
  lu.assertEquals(code_of(function(x) x:limit(0) end), "invalid")
  lu.assertEquals(code_of(function(x) x:limit("ten") end), "invalid")
  lu.assertEquals(code_of(function(x) x:offset(-1) end), "invalid")
  lu.assertEquals(code_of(function(x, v) x:sort(v.year, 2) end), "invalid")
  lu.assertEquals(code_of(function(x, v) x:sort(v.tags, 1) end), "invalid")
  lu.assertEquals(code_of(function(x, v) x:sort(v.author.name, 1) end), "invalid")
  local x = self.store:searcher { as_of = "yesterday" }
  x:variable(Book)
  local _, msg, code = x:results()
  lu.assertEquals(code, "invalid")
  lu.assertStrContains(msg, "as_of")
end

function TestSearchFields:test_misuse_raises()
  local s = self.store:searcher()
  local b = s:variable(Book)
  lu.assertErrorMsgContains("unknown option", function() self.store:searcher { latest = true } end)
  lu.assertErrorMsgContains("only_latest", function() self.store:searcher { only_latest = "yes" } end)
  lu.assertErrorMsgContains("record type", function() s:variable("book") end)
  lu.assertErrorMsgContains("no field", function() return b.nope end)
  lu.assertErrorMsgContains("condition", function() s:add({ year = 1 }) end)
  lu.assertErrorMsgContains("string field", function() b.year:prefix("1") end)
  lu.assertErrorMsgContains("needs a value", function() b.year:eq(nil) end)
  lu.assertErrorMsgContains("list field", function() b.title:has("x") end)
  lu.assertErrorMsgContains("output", function() s:output(b, 1) end)
  lu.assertErrorMsgContains("integer", function() s:limit({}) end)
end

function TestSearchFields:test_disconnected_variables_refused()
  local s = self.store:searcher()
  local b = s:variable(Book)
  local a = s:variable(Author)
  s:add(b.year:gt(1990))
  s:add(a.name:eq("Ann"))
  local r, msg, code = s:results()
  lu.assertNil(r)
  lu.assertEquals(code, "invalid")
  lu.assertStrContains(msg, "disconnected")
  local t = self.store:searcher()
  t:variable(Book); t:variable(Author)
  r, msg, code = t:count()
  lu.assertNil(r)
  lu.assertEquals(code, "invalid")
  lu.assertStrContains(msg, "2 root variables")
end

