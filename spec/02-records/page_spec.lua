-- spec/02-records/page_spec.lua - keyset pages: over ascending, descending and
-- two-key orders with ties and missing (null) keys, pages cover every match exactly
-- once and in the order all() gives; the last page has no next cursor; a limit
-- out of 1..10,000 is invalid, a limit of a wrong Lua type raises; a forged, edited
-- or another query's cursor is refused as invalid, and cursors are opaque text.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local records = require "mongostore.records"
local Q = records.Q

local ok = require("helpers").ok

local Book = records.define { name = "book", dedup = "none",
                              fields = { title = "string", year = "integer", score = "float" },
                              indexes = { { "year" }, { { "year", -1 }, "title" } } }

local N = 61

TestRecordsPages = {}

function TestRecordsPages:setUp()
  self.name = helper.fresh_db("rpage")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  self.store = ok(records.open(self.db, { types = { Book }, log = function() end }))
  for i = 1, N do
    -- ties on year, every fifth year missing, titles repeating
    local year = 1990 + i % 7
    if i % 5 == 0 then year = nil end
    ok(self.store:save(Book, { title = "t" .. (i % 4), year = year, score = (i % 3) + 0.5 }))
  end
end

function TestRecordsPages:tearDown()
  if self.store then self.store:close() end
  if self.db then self.db:close() end
end

local function walk(q, size)
  local sids, seen, pages, token = {}, {}, 0, nil
  repeat
    local page = ok(q:page { limit = size, cursor = token })
    pages = pages + 1
    lu.assertTrue(#page.items <= size)
    for _, r in ipairs(page.items) do
      lu.assertNil(seen[r._sid], "sid " .. tostring(r._sid) .. " on two pages")
      seen[r._sid] = true
      sids[#sids + 1] = r._sid
    end
    lu.assertNil(page.next, "the old key is gone")
    if page.next_cursor then
      lu.assertEquals(type(page.next_cursor), "string")
      lu.assertEquals(#page.items, size, "only the last page is short")
    end
    token = page.next_cursor
    lu.assertTrue(pages <= N + 1, "the walk does not end")
  until not token
  return sids, pages
end

local function all_sids(q)
  local out = {}
  for i, r in ipairs(ok(q:all())) do out[i] = r._sid end
  return out
end

function TestRecordsPages:test_pages_cover_every_match_once_in_order()
  local orders = {
    {},
    { { "year", 1 } },
    { { "year", -1 } },
    { { "year", -1 }, { "title", 1 } },
    { { "title", 1 }, { "year", 1 } },
    { { "score", -1 }, { "year", -1 } },
  }
  for _, order in ipairs(orders) do
    for _, size in ipairs { 1, 7, 60, 61, 100 } do
      local q = self.store:query(Book):order_by(order)
      local sids = walk(q, size)
      lu.assertEquals(#sids, N)
      lu.assertEquals(sids, all_sids(q), "pages in all()'s order")
    end
  end
  -- with a condition
  local q = self.store:query(Book):where(Q.year:gte(1993)):order_by { { "year", -1 } }
  local sids = walk(q, 4)
  lu.assertEquals(#sids, ok(q:count()))
  lu.assertEquals(sids, all_sids(q))
  -- a trusted filter is the same condition; conditions add up
  local plain = self.store:query(Book):where(records.trusted { year = { ["$gte"] = 1993 } }):order_by { { "year", -1 } }
  lu.assertEquals(all_sids(plain), sids)
  lu.assertEquals(walk(plain, 5), sids)
  local both = self.store:query(Book):where(Q.year:gte(1993)):where({ title = "t1" })
  lu.assertEquals(ok(both:count()), ok(self.store:query(Book):where(Q.and_(Q.year:gte(1993), Q.title:eq("t1"))):count()))
  lu.assertTrue(ok(both:count()) < ok(q:count()))
  -- nulls come first ascending and last descending, each explicitly
  local asc = ok(self.store:query(Book):order_by { { "year", 1 } }:all())
  lu.assertNil(asc[1].year)
  lu.assertNotNil(asc[N].year)
  local desc = ok(self.store:query(Book):order_by { { "year", -1 } }:all())
  lu.assertNotNil(desc[1].year)
  lu.assertNil(desc[N].year)
end

function TestRecordsPages:test_empty_and_exact_pages()
  local q = self.store:query(Book):where(Q.title:eq("none"))
  local page = ok(q:page { limit = 10 })
  lu.assertEquals(#page.items, 0)
  lu.assertNil(page.next_cursor)
  page = ok(self.store:query(Book):page { limit = N })
  lu.assertEquals(#page.items, N)
  lu.assertNil(page.next_cursor, "no next cursor when the page ends the matches")
end

function TestRecordsPages:test_page_limits()
  local q = self.store:query(Book)
  lu.assertEquals(#ok(q:page { limit = 10000 }).items, N)
  -- a limit is a client's value often: decimal text is taken, anything else out of 1..10000 is invalid
  lu.assertEquals(#ok(q:page { limit = "7" }).items, 7)
  local before = self.store:info().commands
  for _, limit in ipairs { 10001, 0, -1, 1.5, 0 / 0, math.huge, -math.huge, 2 ^ 63, math.mininteger,
                           math.maxinteger, "ten", "1e3", "", "0", "10001", "99999999999999999999999", " 5",
                           "5\0", "-1" } do
    local v, err, code = q:page { limit = limit }
    lu.assertNil(v, tostring(limit))
    lu.assertEquals(code, "invalid", tostring(limit))
    lu.assertEquals(type(err), "string")
    lu.assertStrContains(err, "page book: limit must be an integer from 1 to 10000")
  end
  lu.assertEquals(self.store:info().commands, before, "nothing was sent for a refused limit")
  -- no limit is the default one
  lu.assertEquals(#ok(q:page {}).items, math.min(N, 100))
  -- a mistake in the code raises, naming the argument
  lu.assertErrorMsgContains("unknown option offset", function() q:page { limit = 1, offset = 2 } end)
  lu.assertErrorMsgContains("unknown option size", function() q:page { size = 1 } end)
  lu.assertErrorMsgContains("unknown option after", function() q:page { limit = 1, after = "x" } end)
  lu.assertErrorMsgContains("page: limit must be a number", function() q:page { limit = { 5 } } end)
  lu.assertErrorMsgContains("page: limit must be a number", function() q:page { limit = true } end)
  lu.assertErrorMsgContains("page: cursor must be a string", function() q:page { limit = 5, cursor = 5 } end)
  lu.assertErrorMsgContains("page: cursor must be a string", function() q:page { limit = 5, cursor = {} } end)
  lu.assertErrorMsgContains("page: opts must be a table", function() q:page(5) end)
end

-- A cursor holds the last record's order keys: ordered by a long text field, the cursor is as long,
-- and still taken.
function TestRecordsPages:test_long_order_keys_make_long_cursors_that_work()
  local long = string.rep("x", 20000)
  for i = 1, 3 do ok(self.store:save(Book, { title = long .. i, year = 3000 })) end
  local q = self.store:query(Book):where { year = 3000 }:order_by { { "title", 1 } }
  local p1 = ok(q:page { limit = 2 })
  lu.assertTrue(#p1.next_cursor > 20000)
  local p2 = ok(q:page { limit = 2, cursor = p1.next_cursor })
  lu.assertEquals(#p2.items, 1)
  lu.assertEquals(p2.items[1].title, long .. 3)
  lu.assertNil(p2.next_cursor)
end

function TestRecordsPages:test_cursors_are_authenticated()
  local q = self.store:query(Book):order_by { { "year", 1 } }
  local page = ok(q:page { limit = 5 })
  local token = page.next_cursor
  lu.assertNotStrContains(token, "year")
  lu.assertNotNil(token:match("^c3%.[%w_%-]+%.[%w_%-]+$"), "the one cursor format: " .. token)
  local before = self.store:info().commands
  local function refused(qq, t, why)
    local v, err, code = qq:page { limit = 5, cursor = t }
    lu.assertNil(v, why)
    lu.assertEquals(code, "invalid", why .. ": " .. tostring(err))
    lu.assertEquals(type(err), "string")
    lu.assertStrContains(err, "page book: cursor is not one this query gave")
  end
  refused(q, "", "empty")
  refused(q, "not a token", "garbage")
  refused(q, token:sub(1, -2), "truncated")
  refused(q, token .. "A", "lengthened")
  refused(q, "c3." .. string.rep("A", 100000) .. ".AAAA", "100 KB")
  refused(q, "c3." .. string.rep("A", 30 * 1024 * 1024) .. ".AAAA", "longer than any document")
  refused(q, "c3.\0.\0", "NUL bytes")
  refused(q, "c3.\xff\xfe.AA", "not UTF-8")
  lu.assertEquals(self.store:info().commands, before, "nothing was sent for a refused cursor")
  -- one character of the payload changed
  local i = 10
  local c = token:sub(i, i)
  local edited = token:sub(1, i - 1) .. (c == "A" and "B" or "A") .. token:sub(i + 1)
  refused(q, edited, "edited")
  -- a payload signed with another key
  local payload = token:match("^(c3%.[^.]+)%.")
  refused(q, payload .. "." .. token:match("%.([^.]+)$"):reverse(), "forged signature")
  local cursor = require "mongostore.cursor"
  refused(q, cursor.encode("another key", "anything", { v = ms.array { 1990 }, s = 3 }), "another key")
  -- another query's token
  refused(self.store:query(Book):order_by { { "year", -1 } }, token, "another order")
  refused(self.store:query(Book):where(Q.year:gte(1990)):order_by { { "year", 1 } }, token, "another filter")
  -- another store's key
  local other = ok(records.open(self.db, { types = { Book }, prefix = "other.", log = function() end }))
  refused(other:query(Book):order_by { { "year", 1 } }, token, "another store")
  other:close()
  -- the genuine token still works
  lu.assertEquals(#ok(q:page { limit = 5, cursor = token }).items, 5)
end

function TestRecordsPages:test_order_by_refuses_what_it_cannot_order()
  local q = self.store:query(Book)
  -- a client may choose the order: a name or direction it cannot be is invalid when the query runs
  local function refused(qq, want)
    for _, run in ipairs { function() return qq:all() end, function() return qq:count() end,
                           function() return qq:page { limit = 5 } end } do
      local v, err, code = run()
      lu.assertNil(v, want)
      lu.assertEquals(code, "invalid", tostring(err))
      lu.assertStrContains(tostring(err), want)
    end
  end
  refused(q:order_by { { "nope", 1 } }, 'order_by book: keys[1] ("nope") is not a scalar field of book')
  refused(q:order_by { { "year", 2 } }, "order_by book: keys[1] must be { field, 1 | -1 }")
  refused(q:order_by { { { "$gt" }, 1 } }, "must be { field, 1 | -1 }, got { array, number }")
  -- the direction as text is taken
  lu.assertEquals(ok(q:order_by { { "year", "-1" } }:all())[1].year, ok(q:order_by { { "year", -1 } }:all())[1].year)
  -- the shape of the keys is the code's
  lu.assertErrorMsgContains("order_by: keys must be", function() q:order_by "year" end)
  lu.assertErrorMsgContains("order_by: keys[1] must be", function() q:order_by { "year" } end)
end
