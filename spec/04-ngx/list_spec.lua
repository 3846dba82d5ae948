-- spec/04-ngx/list_spec.lua - GET /executions through the OpenResty example:
-- pages follow next_cursor until it is null and together hold every
-- execution once; status (one, a comma list or repeated), definition_id and
-- roots_only filter; an empty page is an empty JSON array.
local lu = require "luaunit"
local ms = require "mongostore"
local H = require "helpers.ngx"

local server

local function srv()
  if not server then server = H.start() end
  return server
end

local IDS = { "l-1", "l-2", "l-3", "l-4", "l-5", "l-6", "l-7" }
local TERMINATED = { ["l-2"] = true, ["l-5"] = true }
local ready = false

-- Seven orders, two of them terminated (status CANCELLED).
local function seed()
  if ready then return end
  for _, id in ipairs(IDS) do
    local status, body = srv():post("/executions", { chart = "order", id = id, context = { total = 1 } })
    lu.assertEquals(status, 201, H.encode({ body }))
  end
  for id in pairs(TERMINATED) do
    local status, body = srv():post("/executions/" .. id .. "/terminate")
    lu.assertEquals(status, 202, H.encode({ body }))
  end
  ready = true
end

-- Follows the cursor from the first page: the ids in order, the page sizes.
local function walk(query, limit)
  local ids, sizes, seen = {}, {}, {}
  local cursor
  for _ = 1, 20 do
    local path = "/executions?limit=" .. limit .. (query ~= "" and ("&" .. query) or "")
    if cursor then path = path .. "&cursor=" .. H.urlencode(cursor) end
    local status, page, _, raw = srv():get(path)
    lu.assertEquals(status, 200, raw)
    lu.assertIsTable(page.items)
    sizes[#sizes + 1] = #page.items
    lu.assertTrue(#page.items <= limit)
    for _, item in ipairs(page.items) do
      lu.assertNil(seen[item.id], "listed twice: " .. item.id)
      seen[item.id] = true
      ids[#ids + 1] = item.id
    end
    if page.next_cursor == ms.null then -- JSON null
      lu.assertStrContains(raw, '"next_cursor":null')
      return ids, sizes
    end
    lu.assertIsString(page.next_cursor)
    cursor = page.next_cursor
  end
  lu.fail("the cursor never ran out: " .. query)
end

local function sorted(t)
  local c = { table.unpack(t) }
  table.sort(c)
  return c
end

TestListing = {}

function TestListing:setUp()
  seed()
end

function TestListing:tearDown()
  if server then lu.assertEquals(server:errors(), {}) end
end

function TestListing.teardownClass()
  if server then
    pcall(server.stop, server)
    server = nil
  end
end

function TestListing:test_pages_follow_the_cursor()
  local ids, sizes = walk("definition_id=order", 3)
  lu.assertEquals(sorted(ids), sorted(IDS))
  lu.assertEquals(sizes, { 3, 3, 1 })
  -- a page's items are summaries
  local status, page = srv():get("/executions?definition_id=order&limit=1")
  lu.assertEquals(status, 200)
  local item = page.items[1]
  lu.assertEquals(item.definition_id, "order")
  lu.assertIsString(item.status)
  lu.assertIsNumber(item.version)
end

function TestListing:test_one_page_when_the_limit_is_larger()
  local ids, sizes = walk("", 50)
  lu.assertEquals(sorted(ids), sorted(IDS))
  lu.assertEquals(sizes, { 7 })
end

function TestListing:test_status_filters()
  local running = {}
  for _, id in ipairs(IDS) do if not TERMINATED[id] then running[#running + 1] = id end end
  local ids, sizes = walk("status=RUNNING", 2)
  lu.assertEquals(sorted(ids), sorted(running))
  lu.assertEquals(sizes, { 2, 2, 1 })

  ids = walk("status=CANCELLED&definition_id=order", 10)
  lu.assertEquals(sorted(ids), { "l-2", "l-5" })

  ids = walk("status=RUNNING,CANCELLED", 4)
  lu.assertEquals(sorted(ids), sorted(IDS))
  ids = walk("status=RUNNING&status=CANCELLED", 4)
  lu.assertEquals(sorted(ids), sorted(IDS))

  ids = walk("roots_only=true&status=RUNNING", 100)
  lu.assertEquals(sorted(ids), sorted(running))
end

function TestListing:test_empty_results_are_empty_arrays()
  for _, query in ipairs { "status=DONE", "definition_id=nothing" } do
    local status, page, _, raw = srv():get("/executions?" .. query)
    lu.assertEquals(status, 200, raw)
    lu.assertEquals(#page.items, 0)
    lu.assertStrContains(raw, '"items":[]')
    lu.assertStrContains(raw, '"next_cursor":null')
  end
end
