-- spec/02-store/cursor_spec.lua - listing cursors are the store's own: signed
-- with the database's secret, bound to the query they were issued for, good
-- in any process or store on the same database, and nothing else.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local snapshot = require "helpers.snapshot"
local mcursor = require "mongostore.cursor"
local core = require "mongostore.core"

local function seed(store, n, def)
  for i = 1, n do
    local exe = ms.execution { definition_id = def or "order", id = string.format("e-%03d", i) }
    if i % 2 == 0 then exe.status = "RUNNING" end
    assert(store:save(exe))
  end
end

local function expect_invalid(what, page, err, code)
  lu.assertNil(page, what)
  lu.assertEquals(code, "invalid", what .. ": " .. tostring(err))
  lu.assertStrContains(err, "list_executions")
end

TestCursors = {}

function TestCursors:setUp()
  self.store, self.db = helper.connect()
  seed(self.store, 7)
end

function TestCursors:tearDown()
  self.store:close()
end

function TestCursors.tearDownClass()
  snapshot.close()
end

function TestCursors:test_paging_covers_everything_once()
  local seen, cursor = {}, nil
  for _ = 1, 10 do
    local page = assert(self.store:list_executions { limit = 3, cursor = cursor })
    for _, it in ipairs(page.items) do
      lu.assertNil(seen[it.id], "listed twice: " .. it.id)
      seen[it.id] = true
    end
    cursor = page.next_cursor
    if not cursor then break end
    lu.assertNotNil(cursor:match("^c3%.[%w%-_]+%.[%w%-_]+$"), "the one cursor format (mongostore.cursor): " .. cursor)
  end
  local n = 0
  for _ in pairs(seen) do n = n + 1 end
  lu.assertEquals(n, 7)
end

function TestCursors:test_bound_to_the_filters_it_was_issued_for()
  local page = assert(self.store:list_executions { definition_id = "order", limit = 2 })
  local c = assert(page.next_cursor)
  assert(self.store:list_executions { definition_id = "order", limit = 2, cursor = c })
  expect_invalid("without definition_id", self.store:list_executions { limit = 2, cursor = c })
  expect_invalid("other definition", self.store:list_executions { definition_id = "other", limit = 2, cursor = c })
  expect_invalid("with a status", self.store:list_executions { definition_id = "order", status = "RUNNING", limit = 2, cursor = c })
  expect_invalid("roots only", self.store:list_executions { definition_id = "order", roots_only = true, limit = 2, cursor = c })
  -- a different page size is the same query
  assert(self.store:list_executions { definition_id = "order", limit = 5, cursor = c })
  -- a status given alone or as a one-item list, in any order, is the same set
  local p2 = assert(self.store:list_executions { status = { "RUNNING", "PENDING" }, limit = 2 })
  assert(self.store:list_executions { status = { "PENDING", "RUNNING" }, limit = 2, cursor = p2.next_cursor })
end

function TestCursors:test_altered_or_forged_cursors_are_refused()
  local page = assert(self.store:list_executions { limit = 2 })
  local c = assert(page.next_cursor)
  local pos, mac = c:match("^c3%.([%w%-_]+)%.([%w%-_]+)$")
  lu.assertNotNil(pos, c)
  local flipped = mac:sub(1, -2) .. (mac:sub(-1) == "A" and "B" or "A")
  local function position(id) return mcursor.b64(core.bson_encode { id = id }) end
  local hexid = require("mongostore.execution").to_hex(assert(mcursor.unb64(pos)))
  local cases = {
    { "c3." .. pos .. "." .. flipped, "one MAC character changed" },
    { "c3." .. position("e-001") .. "." .. mac, "another position with the same MAC" },
    { "c3." .. pos:sub(1, -3) .. "." .. mac, "a shorter position" },
    { "c3." .. pos .. ".", "no MAC" },
    { "c1." .. pos, "an old unsigned form" },
    { "c2." .. hexid .. "." .. string.rep("0", 32), "the old c2 form" },
    { "c3." .. string.rep("A", 100000) .. "." .. mac, "100 KB" },
    { "c3." .. position("e\0") .. "." .. mac, "a NUL position" },
    { "c3." .. mcursor.b64(core.bson_encode { id = 5 }) .. "." .. mac, "a position that is no id" },
    { "", "empty" },
    { "garbage", "garbage" },
  }
  for _, case in ipairs(cases) do
    expect_invalid(case[2], self.store:list_executions { limit = 2, cursor = case[1] })
  end
end

function TestCursors:test_wrong_types_raise()
  lu.assertErrorMsgContains("cursor must be a string", self.store.list_executions, self.store, { cursor = 5 })
  lu.assertErrorMsgContains("roots_only must be a boolean", self.store.list_executions, self.store,
    { roots_only = "yes" })
  lu.assertErrorMsgContains("q.limit must be an integer, got string", self.store.list_executions, self.store,
    { limit = "10" })
end

function TestCursors:test_filter_strings_follow_the_value_rules()
  local page, err, code = self.store:list_executions { definition_id = "d\xff" }
  lu.assertNil(page)
  lu.assertEquals(code, "invalid", err)
  page, err, code = self.store:list_executions { definition_id = "" }
  lu.assertEquals(code, "invalid", err)
  lu.assertNil(page)
  page, err, code = self.store:list_executions { status = "FINISHED" }
  lu.assertEquals(code, "invalid", err)
  lu.assertNil(page)
  page, err, code = self.store:list_executions { status = {} }
  lu.assertEquals(code, "invalid", err)
  lu.assertNil(page)
end

function TestCursors:test_another_store_on_the_same_database_honours_it()
  local page = assert(self.store:list_executions { limit = 3 })
  local other = helper.connect { db = self.db }
  local p2, err = other:list_executions { limit = 3, cursor = page.next_cursor }
  lu.assertNotNil(p2, err)
  lu.assertEquals(p2.items[1].id, "e-004")
  other:close()
  -- and another process
  local out, status = helper.spawn(string.format([[
    local ms = require "mongostore"
    local s = assert(ms.connect(%q, { db = %q, wait = 10 }))
    local p = assert(s:list_executions { limit = 3, cursor = %q })
    io.write("first=", p.items[1].id, "\n")
  ]], helper.uri(), self.db, page.next_cursor)):wait()
  lu.assertEquals(status, 0, out)
  lu.assertStrContains(out, "first=e-004")
end

function TestCursors:test_a_cursor_of_another_database_is_refused()
  local other, odb = helper.connect()
  seed(other, 4)
  local page = assert(other:list_executions { limit = 2 })
  expect_invalid("from " .. odb, self.store:list_executions { limit = 2, cursor = page.next_cursor })
  other:close()
end

function TestCursors:test_checking_a_cursor_writes_nothing()
  -- a database that never issued a cursor has no secret: checking one must
  -- not make it
  local fresh, fdb = helper.connect()
  seed(fresh, 3)
  local before = snapshot.take(fdb)
  expect_invalid("no secret yet", fresh:list_executions { limit = 1,
    cursor = mcursor.encode("guessed", "list", { id = "e-001" }) })
  lu.assertNil(snapshot.diff(before, snapshot.take(fdb)))
  -- issuing one makes the secret, once
  assert(fresh:list_executions { limit = 1 })
  lu.assertStrContains(snapshot.diff(before, snapshot.take(fdb)) or "", "inserted")
  fresh:close()
end
