-- spec/02-store/list_spec.lua - list_executions: definition isolation, status
-- as one value or a list, roots only, combined filters, light summaries,
-- stable id order, the limit, and paging that ends and covers every match once.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"

local SUMMARY_FIELDS = {
  id = true, definition_id = true, status = true, outcome = true, active_path = true,
  version = true, parent_id = true, finished_at = true,
}

-- Saves an execution with the given fields; returns it.
local function make(store, def, fields)
  fields = fields or {}
  local exe = ms.execution { definition_id = def, id = fields.id, context = fields.context or { secret = "ctx" } }
  for k, v in pairs(fields) do
    if k ~= "id" and k ~= "context" and k ~= "saves" then exe[k] = v end
  end
  exe.history = { Main = "Main.Sub" }
  for _ = 1, (fields.saves or 1) do assert(store:save(exe)) end
  return exe
end

-- Pages through list_executions until next_cursor is nil; returns all items
-- and the pages. Fails if a page breaks the limit or paging does not end.
local function collect(store, query, limit)
  local items, pages = {}, {}
  local cursor = nil
  for _ = 1, 500 do
    local q = {}
    for k, v in pairs(query) do q[k] = v end
    q.limit, q.cursor = limit, cursor
    local page = store:list_executions(q)
    lu.assertEquals(type(page), "table")
    lu.assertEquals(type(page.items), "table")
    lu.assertTrue(#page.items <= limit, "a page holds " .. #page.items .. " items, limit " .. limit)
    pages[#pages + 1] = page
    for _, it in ipairs(page.items) do items[#items + 1] = it end
    cursor = page.next_cursor
    if cursor == nil then return items, pages end
    lu.assertEquals(type(cursor), "string", "next_cursor must be a string or nil")
  end
  lu.fail("paging did not terminate after 500 pages")
end

local function ids(items)
  local out = {}
  for i, it in ipairs(items) do out[i] = it.id end
  return out
end

local function sorted(list)
  local copy = { table.unpack(list) }
  table.sort(copy)
  return copy
end

local function set_of(exes)
  local out = {}
  for i, e in ipairs(exes) do out[i] = e.id end
  table.sort(out)
  return out
end

local function assert_id_order(items)
  for i = 2, #items do
    lu.assertTrue(items[i - 1].id < items[i].id,
      "items are not in id order at " .. i .. ": " .. items[i - 1].id .. " then " .. items[i].id)
  end
end

TestList = {}

function TestList:setUp()
  self.store, self.db = helper.connect()
end

function TestList:tearDown()
  if self.store then self.store:close() end
end

function TestList:test_empty_store_lists_nothing()
  local page = self.store:list_executions {}
  lu.assertEquals(#page.items, 0)
  lu.assertNil(page.next_cursor)
end

function TestList:test_definition_isolation()
  local orders, invoices = {}, {}
  for i = 1, 3 do orders[i] = make(self.store, "order") end
  for i = 1, 2 do invoices[i] = make(self.store, "invoice") end
  local page = self.store:list_executions { definition_id = "order" }
  lu.assertEquals(sorted(ids(page.items)), set_of(orders))
  for _, it in ipairs(page.items) do lu.assertEquals(it.definition_id, "order") end
  lu.assertNil(page.next_cursor)
  page = self.store:list_executions { definition_id = "invoice" }
  lu.assertEquals(sorted(ids(page.items)), set_of(invoices))
  page = self.store:list_executions { definition_id = "nothing-like-this" }
  lu.assertEquals(#page.items, 0)
  page = self.store:list_executions {}
  lu.assertEquals(#page.items, 5)
end

function TestList:test_status_as_one_value_or_a_list()
  local running = { make(self.store, "order", { status = "RUNNING" }), make(self.store, "order", { status = "RUNNING" }) }
  local done = { make(self.store, "order", { status = "DONE" }) }
  local failed = { make(self.store, "order", { status = "FAILED" }) }
  make(self.store, "order")                                        -- PENDING
  local page = self.store:list_executions { status = "RUNNING" }
  lu.assertEquals(sorted(ids(page.items)), set_of(running))
  for _, it in ipairs(page.items) do lu.assertEquals(it.status, "RUNNING") end
  page = self.store:list_executions { status = { "RUNNING", "DONE" } }
  lu.assertEquals(sorted(ids(page.items)), set_of { running[1], running[2], done[1] })
  page = self.store:list_executions { status = { "FAILED" } }
  lu.assertEquals(ids(page.items), set_of(failed))
  page = self.store:list_executions { status = "CANCELLED" }
  lu.assertEquals(#page.items, 0)
  page = self.store:list_executions { status = ms.array { "DONE", "PENDING" } }
  lu.assertEquals(#page.items, 2)
end

function TestList:test_roots_only()
  local root = make(self.store, "order")
  local child = make(self.store, "order", { parent_id = root.id, child_id = "c1", root_path = "Fork.A" })
  local page = self.store:list_executions { roots_only = true }
  lu.assertEquals(ids(page.items), { root.id })
  lu.assertNil(page.items[1].parent_id)
  page = self.store:list_executions { roots_only = false }
  lu.assertEquals(sorted(ids(page.items)), set_of { root, child })
  page = self.store:list_executions {}
  lu.assertEquals(#page.items, 2)
  local by_id = {}
  for _, it in ipairs(page.items) do by_id[it.id] = it end
  lu.assertEquals(by_id[child.id].parent_id, root.id)
end

function TestList:test_combined_filters()
  local want = {}
  local root = make(self.store, "order", { status = "RUNNING" })
  want[#want + 1] = root
  want[#want + 1] = make(self.store, "order", { status = "DONE" })
  make(self.store, "order", { status = "RUNNING", parent_id = root.id })   -- not a root
  make(self.store, "order", { status = "FAILED" })                          -- wrong status
  make(self.store, "invoice", { status = "RUNNING" })                       -- wrong definition
  make(self.store, "invoice", { status = "DONE", parent_id = root.id })     -- wrong on every count
  local page = self.store:list_executions {
    definition_id = "order", status = { "RUNNING", "DONE" }, roots_only = true,
  }
  lu.assertEquals(sorted(ids(page.items)), set_of(want))
  for _, it in ipairs(page.items) do
    lu.assertEquals(it.definition_id, "order")
    lu.assertNil(it.parent_id)
  end
end

function TestList:test_summaries_carry_no_context_or_history()
  local exe = make(self.store, "order", {
    status = "DONE", outcome = "approved", active_path = "Main.End", finished_at = 1764500000.5,
    context = { secret = "do not ship me", big = string.rep("x", 1000) }, saves = 3,
  })
  local page = self.store:list_executions {}
  lu.assertEquals(#page.items, 1)
  local it = page.items[1]
  for k in pairs(it) do
    lu.assertTrue(SUMMARY_FIELDS[k], "a summary carries the field " .. tostring(k))
  end
  lu.assertNil(it.context)
  lu.assertNil(it.history)
  lu.assertNil(it.children)
  lu.assertNil(it.data)
  lu.assertEquals(it.id, exe.id)
  lu.assertEquals(it.definition_id, "order")
  lu.assertEquals(it.status, "DONE")
  lu.assertEquals(it.outcome, "approved")
  lu.assertEquals(it.active_path, "Main.End")
  lu.assertEquals(it.version, 3)
  lu.assertEquals(math.type(it.version), "integer")
  lu.assertEquals(it.finished_at, 1764500000.5)
  lu.assertNil(it.parent_id)
end

function TestList:test_stable_id_order()
  local made = {}
  for i = 1, 12 do
    -- ids in an order unrelated to insertion
    made[i] = make(self.store, "order", { id = string.format("%02d-%s", (i * 7) % 12, ms.uuid()) })
  end
  local first = self.store:list_executions {}
  lu.assertEquals(#first.items, 12)
  assert_id_order(first.items)
  lu.assertEquals(ids(first.items), set_of(made))
  -- a later write does not move an execution in the listing
  local moved = self.store:load(made[5].id)
  moved.status = "RUNNING"
  assert(self.store:save(moved))
  local second = self.store:list_executions {}
  lu.assertEquals(ids(second.items), ids(first.items))
end

function TestList:test_the_limit_holds()
  for _ = 1, 7 do make(self.store, "order") end
  local page = self.store:list_executions { limit = 3 }
  lu.assertEquals(#page.items, 3)
  lu.assertEquals(type(page.next_cursor), "string")
  page = self.store:list_executions { limit = 1 }
  lu.assertEquals(#page.items, 1)
  page = self.store:list_executions { limit = 7 }
  lu.assertTrue(#page.items <= 7)
  page = self.store:list_executions { limit = 100 }
  lu.assertEquals(#page.items, 7)
  lu.assertNil(page.next_cursor)
end

function TestList:test_paging_terminates_and_covers_every_match_once()
  local statuses = { "RUNNING", "DONE", "FAILED", "PENDING" }
  local all, wanted, roots = {}, {}, {}
  local parent = nil
  for i = 1, 57 do
    local fields = { status = statuses[i % 4 + 1] }
    if i % 5 == 0 and parent then fields.parent_id = parent.id end
    local exe = make(self.store, "order", fields)
    if i == 1 then parent = exe end
    all[#all + 1] = exe
    if (fields.status == "RUNNING" or fields.status == "DONE") then wanted[#wanted + 1] = exe end
    if fields.parent_id == nil then roots[#roots + 1] = exe end
  end
  for i = 1, 6 do make(self.store, "invoice", { status = statuses[i % 4 + 1] }) end

  -- no status filter: every order exactly once, in id order across pages
  local items, pages = collect(self.store, { definition_id = "order" }, 10)
  lu.assertEquals(ids(items), set_of(all))
  assert_id_order(items)
  lu.assertTrue(#pages >= 6, "57 items cannot fit in fewer than 6 pages of 10")

  -- status filter (client-side): pages may be short, the union is exact
  items = collect(self.store, { definition_id = "order", status = { "RUNNING", "DONE" } }, 10)
  lu.assertEquals(ids(items), set_of(wanted))
  assert_id_order(items)
  for _, it in ipairs(items) do
    lu.assertTrue(it.status == "RUNNING" or it.status == "DONE")
  end

  -- roots only, small pages
  items = collect(self.store, { definition_id = "order", roots_only = true }, 4)
  lu.assertEquals(ids(items), set_of(roots))

  -- everything in the database, odd page size
  items = collect(self.store, {}, 7)
  lu.assertEquals(#items, 63)
  assert_id_order(items)
  local seen = {}
  for _, it in ipairs(items) do
    lu.assertNil(seen[it.id], "listed twice: " .. it.id)
    seen[it.id] = true
  end

  -- a page size of one still ends
  items = collect(self.store, { definition_id = "invoice" }, 1)
  lu.assertEquals(#items, 6)
end

function TestList:test_a_cursor_this_store_did_not_return_is_invalid()
  for _ = 1, 3 do make(self.store, "order") end
  for _, cursor in ipairs { "garbage", "", "c1.zz" } do
    local ok, page, msg, code = pcall(self.store.list_executions, self.store, { limit = 1, cursor = cursor })
    lu.assertTrue(ok, "list_executions raised on a bad cursor: " .. tostring(page))
    lu.assertNil(page, "a made-up cursor " .. cursor .. " was accepted")
    lu.assertIsString(msg)
    lu.assertEquals(code, "invalid")
  end
end

function TestList:test_trace_only_documents_are_not_listed()
  local exe = make(self.store, "order", { status = "RUNNING" })
  self.store:append_trace("trace-only", { event = "orphan" })
  local items = collect(self.store, {}, 10)
  lu.assertEquals(ids(items), { exe.id })
  items = collect(self.store, { status = "RUNNING" }, 1)
  lu.assertEquals(ids(items), { exe.id })
end
