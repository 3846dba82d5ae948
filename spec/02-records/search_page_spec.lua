-- spec/02-records/search_page_spec.lua - the searcher's keyset pages: every
-- match once and in results' order (ties, missing keys, two keys, a ref
-- condition), the last page without a cursor; a limit out of range, a search
-- with offset or limit, a forged or another search's cursor are invalid; wrong
-- Lua types and unknown keys raise.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local records = require "mongostore.records"

local ok = helper.ok

local Author = records.define { name = "author", fields = { name = "string" } }
local Book = records.define { name = "book", dedup = "none",
                              fields = { title = "string", year = "integer" }, refs = { author = Author } }

local N = 37

TestSearchPages = {}

function TestSearchPages:setUp()
  self.name = helper.fresh_db("rspage")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  self.store = ok(records.open(self.db, { types = { Book }, log = function() end }))
  for i = 1, N do
    local year = 1990 + i % 5
    if i % 6 == 0 then year = nil end
    ok(self.store:save(Book, { title = "t" .. (i % 3), year = year, author = { name = i % 2 == 0 and "Ann" or "Bob" } }))
  end
end

function TestSearchPages:tearDown()
  if self.store then self.store:close() end
  if self.db then self.db:close() end
end

local function build(store, sorts, ann)
  local s = store:searcher { only_latest = true }
  local b = s:variable(Book)
  if ann then s:add(b.author.name:eq("Ann")) end
  s:output(b._sid, "sid"):output(b.year, "year"):output(b.author.name, "author")
  for _, k in ipairs(sorts) do s:sort(b[k[1]], k[2]) end
  return s
end

function TestSearchPages:test_pages_cover_every_match_once_in_order()
  for _, sorts in ipairs { {}, { { "year", 1 } }, { { "year", -1 } }, { { "year", -1 }, { "title", 1 } } } do
    for _, ann in ipairs { false, true } do
      local want = ok(build(self.store, sorts, ann):results()):scalars("sid")
      lu.assertEquals(want.n, ann and 18 or N)
      for _, size in ipairs { 1, 5, 18, 100 } do
        local s = build(self.store, sorts, ann)
        local got, token, pages = {}, nil, 0
        repeat
          local page = ok(s:page { limit = size, cursor = token })
          pages = pages + 1
          lu.assertTrue(#page.items <= size)
          for _, row in ipairs(page.items) do
            got[#got + 1] = row.sid
            if ann then lu.assertEquals(row.author, "Ann") end
          end
          if page.next_cursor then lu.assertEquals(#page.items, size) end
          token = page.next_cursor
          lu.assertTrue(pages <= N + 2)
        until not token
        got.n = #got
        lu.assertEquals(got, want)
      end
    end
  end
end

function TestSearchPages:test_bad_pages()
  local s = build(self.store, { { "year", 1 } })
  local first = ok(s:page { limit = 5 })
  lu.assertNotNil(first.next_cursor)
  lu.assertEquals(#ok(s:page { limit = "5", cursor = first.next_cursor }).items, 5)
  local function code_of(search, opts)
    local r, msg, code = search:page(opts)
    lu.assertNil(r)
    lu.assertEquals(type(msg), "string")
    return code, msg
  end
  lu.assertEquals(code_of(s, { limit = 0 }), "invalid")
  lu.assertEquals(code_of(s, { limit = 10001 }), "invalid")
  lu.assertEquals(code_of(s, { limit = "many" }), "invalid")
  lu.assertEquals(code_of(s, { limit = 1.5 }), "invalid")
  lu.assertEquals(code_of(s, { limit = 5, cursor = "c3.forged.x" }), "invalid")
  local edited = first.next_cursor:sub(1, -2) .. (first.next_cursor:sub(-1) == "A" and "B" or "A")
  lu.assertEquals(code_of(s, { limit = 5, cursor = edited }), "invalid")
  -- another search's cursor
  local other = build(self.store, { { "year", -1 } })
  local code, msg = code_of(other, { limit = 5, cursor = first.next_cursor })
  lu.assertEquals(code, "invalid")
  lu.assertStrContains(msg, "cursor")
  local ann = build(self.store, { { "year", 1 } }, true)
  lu.assertEquals(code_of(ann, { limit = 5, cursor = first.next_cursor }), "invalid")
  -- offset or limit with page
  local lim = build(self.store, {})
  lim:limit(3)
  lu.assertEquals(code_of(lim, { limit = 5 }), "invalid")
  local off = build(self.store, {})
  off:offset(1)
  lu.assertEquals(code_of(off, { limit = 5 }), "invalid")
  -- misuse raises
  lu.assertErrorMsgContains("opts must be a table", function() s:page(5) end)
  lu.assertErrorMsgContains("unknown option", function() s:page { size = 5 } end)
  lu.assertErrorMsgContains("limit must be a number", function() s:page { limit = {} } end)
  lu.assertErrorMsgContains("cursor must be a string", function() s:page { cursor = 1 } end)
end
