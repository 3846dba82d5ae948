-- spec/02-records/search_sets_spec.lua - the searcher on child sets (any, all,
-- none, nested children, length) and list fields (has, has_all, has_any,
-- has_only, length), their values cast or refused as invalid, and misuse.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local records = require "mongostore.records"

local ok = helper.ok

local Book = records.define {
  name = "book", dedup = "none",
  fields = { title = "string", tags = "string[]", scores = "integer[]" },
  children = { chapters = { fields = { title = "string", pages = "integer" },
                            children = { notes = { fields = { text = "string" } } } } },
}

TestSearchSets = {}

function TestSearchSets:setUp()
  self.name = helper.fresh_db("rsets")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  self.store = ok(records.open(self.db, { types = { Book }, log = function() end }))
  local books = {
    { title = "A", tags = { "a", "b" }, scores = { 1, 2, 3 },
      chapters = { { title = "one", pages = 5 }, { title = "two", pages = 20, notes = { { text = "hi" } } } } },
    { title = "B", tags = { "a" }, scores = { 7 }, chapters = { { title = "one", pages = 30 } } },
    { title = "C", tags = {}, scores = {}, chapters = {} },
    { title = "D", tags = { "c", "a", "b" } },
  }
  for _, b in ipairs(books) do ok(self.store:save(Book, b)) end
end

function TestSearchSets:tearDown()
  if self.store then self.store:close() end
  if self.db then self.db:close() end
end

function TestSearchSets:search(fn)
  local s = self.store:searcher()
  local b = s:variable(Book)
  s:output(b.title, "title")
  s:sort(b.title)
  fn(s, b)
  local out = {}
  for i, row in ipairs(ok(s:results())) do out[i] = row.title end
  return out
end

function TestSearchSets:test_child_sets()
  lu.assertEquals(self:search(function(s, b) s:add(b.chapters:any(function(c) return c.pages:gt(10) end)) end),
    { "A", "B" })
  -- one element meets both, not two elements one each
  lu.assertEquals(self:search(function(s, b)
    s:add(b.chapters:any(function(c) return s.all_of(c.title:eq("one"), c.pages:gt(10)) end))
  end), { "B" })
  lu.assertEquals(self:search(function(s, b) s:add(b.chapters:all(function(c) return c.pages:gt(10) end)) end),
    { "B", "C", "D" }, "all holds for an empty or missing set")
  lu.assertEquals(self:search(function(s, b) s:add(b.chapters:none(function(c) return c.pages:gt(25) end)) end),
    { "A", "C", "D" })
  -- nested children
  lu.assertEquals(self:search(function(s, b)
    s:add(b.chapters:any(function(c) return c.notes:any(function(n) return n.text:prefix("h") end) end))
  end), { "A" })
  lu.assertEquals(self:search(function(s, b) s:add(b.chapters:length():eq(2)) end), { "A" })
  -- a child set is stored as a list, empty when the record has none
  lu.assertEquals(self:search(function(s, b) s:add(b.chapters:length():lt(2)) end), { "B", "C", "D" })
  lu.assertEquals(self:search(function(s, b) s:add(b.chapters:is_unknown()) end), {})
  lu.assertEquals(self:search(function(s, b) s:add(b.chapters:length():eq(0)) end), { "C", "D" })
  lu.assertEquals(self:search(function(s, b) s:add(b.chapters:length():lt(0)) end), {})
  -- inside an element: none_of, all of a nested set, a negated text match
  lu.assertEquals(self:search(function(s, b)
    s:add(b.chapters:any(function(c) return s.none_of(c.title:eq("one")) end))
  end), { "A" })
  lu.assertEquals(self:search(function(s, b)
    s:add(b.chapters:all(function(c) return c.title:prefix("o") end))
  end), { "B", "C", "D" })
  lu.assertEquals(self:search(function(s, b)
    s:add(b.chapters:any(function(c) return c.notes:none(function(n) return n.text:eq("hi") end) end))
    s:add(b.chapters:any(function(c) return c.notes:length():ne(1) end))
  end), { "A", "B" })
end

function TestSearchSets:test_lists()
  lu.assertEquals(self:search(function(s, b) s:add(b.tags:has("b")) end), { "A", "D" })
  lu.assertEquals(self:search(function(s, b) s:add(b.tags:has_all { "a", "b" }) end), { "A", "D" })
  lu.assertEquals(self:search(function(s, b) s:add(b.tags:has_any { "c", "b" }) end), { "A", "D" })
  lu.assertEquals(self:search(function(s, b) s:add(b.tags:has_only { "a", "b" }) end), { "A", "B", "C" })
  lu.assertEquals(self:search(function(s, b) s:add(b.scores:has("7")) end), { "B" }, "decimal text is cast")
  lu.assertEquals(self:search(function(s, b) s:add(b.tags:length():ge(2)) end), { "A", "D" })
  lu.assertEquals(self:search(function(s, b) s:add(b.tags:length():gt(2)) end), { "D" })
  lu.assertEquals(self:search(function(s, b) s:add(b.tags:length():le(1)) end), { "B", "C" })
  lu.assertEquals(self:search(function(s, b) s:add(b.tags:length():ne(1)) end), { "A", "C", "D" })
  lu.assertEquals(self:search(function(s, b) s:add(b.tags:length():eq(0)) end), { "C" })
  lu.assertEquals(self:search(function(s, b) s:add(b.scores:is_known()) end), { "A", "B", "C" })
end

function TestSearchSets:test_outputs_of_sets()
  local s = self.store:searcher()
  local b = s:variable(Book)
  s:add(b.title:eq("A"))
  s:output(b.chapters, "chapters"):output(b.tags, "tags")
  local row = ok(ok(s:results()):one())
  lu.assertEquals(#row.chapters, 2)
  lu.assertEquals(row.chapters[2].notes[1].text, "hi")
  lu.assertEquals(row.tags, { "a", "b" })
end

function TestSearchSets:test_bad_values_and_misuse()
  local bad = {
    function(_, b) return b.scores:has("seven") end,
    function(_, b) return b.tags:has_only("a") end,
    function(_, b) return b.scores:has_all { 1, "x" } end,
    function(_, b) return b.chapters:any(function(c) return c.pages:gt({ ["$ne"] = 0 }) end) end,
    function(_, b) return b.chapters:length():gt("many") end,
  }
  for i, make in ipairs(bad) do
    local s = self.store:searcher()
    s:add(make(s, s:variable(Book)))
    local r, msg, code = s:results()
    lu.assertNil(r, "case " .. i)
    lu.assertEquals(code, "invalid", "case " .. i)
    lu.assertStrContains(msg, "search:")
  end
  local s = self.store:searcher()
  local b = s:variable(Book)
  lu.assertErrorMsgContains(":any", function() return b.chapters.pages end)
  lu.assertErrorMsgContains("child set or a ref", function() b.title:any(function() end) end)
  lu.assertErrorMsgContains("fn must return a condition", function() b.chapters:any(function() return 1 end) end)
  lu.assertErrorMsgContains("fn must be a function", function() b.chapters:any("x") end)
  lu.assertErrorMsgContains("list field", function() b.title:has_only { "a" } end)
  lu.assertErrorMsgContains("length needs", function() b.title:length() end)
  lu.assertErrorMsgContains("at least one condition", function() s.any_of() end)
  -- an element variable's condition added to the search itself is refused
  local leaked
  b.chapters:any(function(c) leaked = c.pages:gt(1); return leaked end)
  s:add(leaked)
  local r, _, code = s:results()
  lu.assertNil(r)
  lu.assertEquals(code, "invalid")
  -- a child element's field against another field: not inside $elemMatch
  local t = self.store:searcher()
  local v = t:variable(Book)
  t:add(v.chapters:any(function(c) return c.pages:gt(c.pages) end))
  r, _, code = t:results()
  lu.assertNil(r)
  lu.assertEquals(code, "invalid")
end
