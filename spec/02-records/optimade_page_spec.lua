-- spec/02-records/optimade_page_spec.lua - records.optimade beyond the
-- corpus: a page through a filter (signed cursor, a bad cursor invalid), the
-- store timestamp as as_of (nanoseconds and ISO-8601), client input (a huge
-- filter, deep parentheses, NUL bytes, invalid UTF-8, text that is not a
-- string: invalid, nothing sent) and programmer misuse (raises).
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local records = require "mongostore.records"
local optimade = require "mongostore.records.optimade"

local ok = helper.ok

local Item = records.define { name = "item", dedup = "none",
                              fields = { k = "string", n = "integer", tags = "string[]" } }

TestOptimadePage = {}

function TestOptimadePage:setUp()
  self.name = helper.fresh_db("roptpage")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  self.store = ok(records.open(self.db, { types = { Item }, log = function() end }))
  self.sids = {}
  for i = 1, 7 do
    self.sids[i] = ok(self.store:save(Item, { k = "i" .. i, n = i, tags = { i % 2 == 0 and "even" or "odd" } }))
  end
end

function TestOptimadePage:tearDown()
  if self.store then self.store:close() end
  if self.db then self.db:close() end
end

local function ks(rows)
  local out = {}
  for i, row in ipairs(rows) do out[i] = row.item.k end
  table.sort(out)
  return out
end

function TestOptimadePage:test_a_page_through_a_filter()
  local seen, cursor, pages = {}, nil, 0
  repeat
    local page = ok(records.optimade(self.store, Item, 'tags HAS "odd" OR n = 2',
      { page = { limit = 2, cursor = cursor } }))
    pages = pages + 1
    lu.assertTrue(#page.items <= 2)
    for _, row in ipairs(page.items) do seen[#seen + 1] = row.item.k end
    cursor = page.next_cursor
    lu.assertTrue(cursor == nil or type(cursor) == "string")
  until cursor == nil or pages > 10
  table.sort(seen)
  lu.assertEquals(seen, { "i1", "i2", "i3", "i5", "i7" })
  lu.assertEquals(pages, 3)
  -- a cursor of another filter, or a client's made-up one, is invalid
  local first = ok(records.optimade(self.store, Item, "n > 1", { page = { limit = 1 } }))
  local r, msg, code = records.optimade(self.store, Item, "n > 2",
    { page = { limit = 1, cursor = first.next_cursor } })
  lu.assertNil(r); lu.assertEquals(code, "invalid"); lu.assertStrContains(msg, "cursor")
  r, msg, code = records.optimade(self.store, Item, "n > 1", { page = { limit = 1, cursor = "not-a-cursor" } })
  lu.assertNil(r); lu.assertEquals(code, "invalid"); lu.assertStrContains(msg, "cursor")
  r, msg, code = records.optimade(self.store, Item, "n > 1", { page = { limit = 0 } })
  lu.assertNil(r); lu.assertEquals(code, "invalid"); lu.assertStrContains(msg, "limit")
  -- the limit as a client's text
  lu.assertEquals(#ok(records.optimade(self.store, Item, "n > 1", { page = { limit = "3" } })).items, 3)
end

function TestOptimadePage:test_the_store_timestamp_is_as_of()
  local last = 0
  for _, sid in ipairs(self.sids) do
    local ts = ok(self.store:fetch(Item, sid))._ts
    if ts > last then last = ts end
  end
  local res = self.store.ts.resolution
  local cut = last * res
  -- a later record, stored after the cut (a pause longer than the resolution)
  os.execute("sleep 0.05")
  local late = ok(self.store:save(Item, { k = "late", n = 99 }))
  lu.assertTrue(ok(self.store:fetch(Item, late))._ts > last)
  local before = ks(ok(records.optimade(self.store, Item, "_httk_store_timestamp <= " .. cut)))
  lu.assertEquals(before, { "i1", "i2", "i3", "i4", "i5", "i6", "i7" })
  lu.assertEquals(ks(ok(records.optimade(self.store, Item, "_httk_store_timestamp > " .. cut))), { "late" })
  lu.assertEquals(ks(ok(records.optimade(self.store, Item, cut .. " >= _httk_store_timestamp AND n >= 6"))),
    { "i6", "i7" })
  -- the same as the searcher's as_of
  local s = self.store:searcher { as_of = cut }
  s:variable(Item)
  lu.assertEquals(ks(ok(s:results())), before)
  -- ISO-8601 text with a zone
  local secs, frac = cut // 1000000000, cut % 1000000000
  local iso = os.date("!%Y-%m-%dT%H:%M:%S", secs) .. string.format(".%09dZ", frac)
  lu.assertEquals(ks(ok(records.optimade(self.store, Item, '_httk_store_timestamp <= "' .. iso .. '"'))), before)
  lu.assertEquals(ks(ok(records.optimade(self.store, Item, '_httk_store_timestamp <= "2000-01-01T00:00:00Z"'))), {})
  lu.assertEquals(#ok(records.optimade(self.store, Item, "_httk_store_timestamp IS KNOWN")), 8)
  -- a bad time is invalid
  local r, msg, code = records.optimade(self.store, Item, '_httk_store_timestamp <= "yesterday"')
  lu.assertNil(r); lu.assertEquals(code, "invalid"); lu.assertStrContains(msg, "_httk_store_timestamp")
end

function TestOptimadePage:test_client_input_is_refused_and_nothing_is_sent()
  local db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  local store = ok(records.open(db, { types = { Item }, log = function() end }))
  db:close()
  local deep = string.rep("(", optimade.MAX_DEPTH + 1) .. "n = 1" .. string.rep(")", optimade.MAX_DEPTH + 1)
  local cases = {
    { string.rep("n = 1 OR ", 2000) .. "n = 2", "bytes, more than" },
    { deep, "nest deeper than" },
    { string.rep("(", 5000), "nest deeper than" },
    { "n = 1\0 OR n = 2", "line 1, column 6: a NUL byte" },
    { 'k = "a\0b"', "NUL byte" },
    { 'k = "\255\254"', "line 1, column 6: the filter is not valid UTF-8" },
    { 'k = "\192\175"', "not valid UTF-8" },
    { 'k = "\237\160\128"', "not valid UTF-8" },
    { "n = 1\n AND\n k = \"\128\"", "line 3, column 7" },
    { 42, "must be text" },
    { { n = 1 }, "must be text" },
    { true, "must be text" },
    { ms.null, "must be text" },
  }
  for i, case in ipairs(cases) do
    local r, msg, code = records.optimade(store, Item, case[1])
    lu.assertNil(r, "case " .. i)
    lu.assertEquals(code, "invalid", "case " .. i .. ": " .. tostring(msg))
    lu.assertStrContains(msg, case[2], false, "case " .. i)
  end
  -- as deep as allowed, and a long chain of NOT, parse and run
  local allowed = string.rep("(", optimade.MAX_DEPTH) .. "n = 1" .. string.rep(")", optimade.MAX_DEPTH)
  lu.assertEquals(ks(ok(records.optimade(self.store, Item, allowed))), { "i1" })
  local nots = string.rep("NOT (", optimade.MAX_DEPTH) .. "n > 1" .. string.rep(")", optimade.MAX_DEPTH)
  lu.assertEquals(ks(ok(records.optimade(self.store, Item, nots))), { "i2", "i3", "i4", "i5", "i6", "i7" })
  lu.assertEquals(ks(ok(records.optimade(self.store, Item, 'k = "ünï" OR k = "i2"'))), { "i2" })
  store:close()
end

function TestOptimadePage:test_misuse_raises()
  lu.assertErrorMsgContains("rs must be a record store", records.optimade, {}, Item, "n = 1")
  lu.assertErrorMsgContains("T must be a record type", records.optimade, self.store, {}, "n = 1")
  lu.assertErrorMsgContains("opts must be a table", records.optimade, self.store, Item, "n = 1", 3)
  lu.assertErrorMsgContains("unknown option", records.optimade, self.store, Item, "n = 1", { limit = 3 })
  lu.assertErrorMsgContains("page must be a table", records.optimade, self.store, Item, "n = 1", { page = 3 })
  lu.assertErrorMsgContains("unknown option", records.optimade, self.store, Item, "n = 1", { page = { size = 3 } })
  local Other = records.define { name = "other", fields = { a = "string" } }
  lu.assertError(records.optimade, self.store, Other, "a = \"x\"")
  -- a field named like a searcher method is refused, not raised
  local Odd = records.define { name = "odd", fields = { length = "integer", has = "string[]" } }
  local st = ok(records.open(self.db, { types = { Odd }, prefix = "odd", log = function() end }))
  for _, f in ipairs { "length = 1", 'has HAS "x"', "length IS KNOWN" } do
    local r, msg, code = records.optimade(st, Odd, f)
    lu.assertNil(r, f); lu.assertEquals(code, "invalid", f); lu.assertStrContains(msg, "not reachable", f)
  end
  st:close()
  -- only_latest
  local sid = self.sids[1]
  ok(self.store:replace(Item, sid, { k = "i1b", n = 1 }))
  lu.assertEquals(ks(ok(records.optimade(self.store, Item, "n = 1"))), { "i1", "i1b" })
  lu.assertEquals(ks(ok(records.optimade(self.store, Item, "n = 1", { only_latest = true }))), { "i1b" })
end

-- the same filter under LuaJIT (the OpenResty interpreter), in its own process on the same store
function TestOptimadePage:test_under_luajit_the_same_matches()
  local root = helper.root()
  local f = io.open(root .. "/build/jit/mongostore/core.so", "rb")
  lu.assertNotNil(f, "the LuaJIT core is built (make build/jit/mongostore/core.so)")
  f:close()
  local filter = 'NOT (n < 3 OR n >= 6) AND tags HAS ANY "odd", "even" OR k ENDS "7"'
  local code = string.format([[
    package.path = %q; package.cpath = %q .. ";" .. package.cpath
    local ms = require "mongostore"
    local records = require "mongostore.records"
    local Item = records.define { name = "item", dedup = "none",
                                  fields = { k = "string", n = "integer", tags = "string[]" } }
    local db = assert(ms.database(%q, { db = %q, wait = 10 }))
    local store = assert(records.open(db, { types = { Item }, log = function() end }))
    local rows = assert(records.optimade(store, Item, %q))
    local out = {}
    for i, row in ipairs(rows) do out[i] = row.item.k end
    table.sort(out)
    print("keys " .. table.concat(out, ","))
    local _, msg, c = records.optimade(store, Item, "n = 1 AND (")
    print("refused " .. c .. " " .. msg)
    store:close(); db:close()
  ]], root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path, root .. "/build/jit/?.so",
    helper.uri(), self.name, filter)
  local p = assert(io.popen("LD_PRELOAD= luajit -e " .. helper.shell_quote(code) .. " 2>&1", "r"))
  local out = p:read("a")
  p:close()
  lu.assertEquals(ks(ok(records.optimade(self.store, Item, filter))), { "i3", "i4", "i5", "i7" })
  lu.assertStrContains(out, "keys i3,i4,i5,i7\n")
  lu.assertStrContains(out, "refused invalid optimade: line 1, column 12: unexpected end of the filter")
end

-- token soup and random bytes: every filter gets an answer (rows, or nil, message, code), none raises
function TestOptimadePage:test_random_filters_never_raise()
  local db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  local store = ok(records.open(db, { types = { Item }, log = function() end }))
  db:close()
  local tokens = { "n", "k", "tags", "nope", "a.b", "_httk_store_timestamp", "=", "!=", "<", "<=", ">", ">=",
                   "AND", "OR", "NOT", "(", ")", "HAS", "ALL", "ANY", "ONLY", "LENGTH", "IS", "KNOWN", "UNKNOWN",
                   "CONTAINS", "STARTS", "ENDS", "WITH", ",", '"x"', '"\\""', "1", "-1.5", "1e3", ".5", "1e999",
                   '"2026-01-01T00:00:00Z"', "\"", "\\" }
  local rng = 12345
  local function rand(n) rng = (rng * 1103515245 + 12345) % 2147483648; return rng % n + 1 end
  local refused, sent = 0, 0
  for i = 1, 1500 do
    local parts = {}
    if i % 5 == 0 then
      for j = 1, rand(30) do parts[j] = string.char(rand(256) - 1) end
    else
      for j = 1, rand(9) do parts[j] = tokens[rand(#tokens)] end
    end
    local text = table.concat(parts, i % 5 == 0 and "" or " ")
    local fine, r, msg, code = pcall(records.optimade, store, Item, text)
    lu.assertTrue(fine, string.format("%q raised: %s", text, tostring(r)))
    if r == nil then
      lu.assertEquals(type(msg), "string", text)
      lu.assertEquals(type(code), "string", text)
      if code == "invalid" then refused = refused + 1 else sent = sent + 1 end
    end
  end
  -- most of the soup is refused; what parses was sent (the closed database answers)
  lu.assertTrue(refused > 1000, tostring(refused))
  lu.assertTrue(sent > 0, tostring(sent))
  store:close()
end
