-- spec/05-secantus/index_spec.lua - due_timers, the relays and list_executions
-- read only what is due or asked for: the finds the store really sends
-- (captured by the server's profiler) are explained at 10k and at 100k
-- executions, and what they examine must not grow with the collection.
-- Needs a server with a query planner (SecantusDB, or a real MongoDB):
-- skipped on mongo-java-server.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"

local SERVER = os.getenv("MONGOSTORE_TEST_SERVER") or "other"
local SMALL = tonumber(os.getenv("INDEX_SPEC_SMALL") or "") or 10000
local LARGE = tonumber(os.getenv("INDEX_SPEC_LARGE") or "") or 100000
local PAGE = 5
local N_DUE, N_OUTBOX, N_SPAWNS, N_RARE = 5, 5, 5, 7

local function python()
  local py = os.getenv("MONGOSTORE_PYTHON") or ""
  return py ~= "" and py or "python3"
end


-- runs spec/helpers/indexdb.py and decodes the JSON it prints
local function indexdb(db, ...)
  local args = { helper.shell_quote(helper.root() .. "/spec/helpers/indexdb.py"),
    helper.shell_quote(helper.uri()), helper.shell_quote(db) }
  for _, a in ipairs({ ... }) do args[#args + 1] = helper.shell_quote(tostring(a)) end
  local tmp = os.tmpname()
  local f = assert(io.popen("env -u LD_PRELOAD " .. helper.shell_quote(python()) .. " " ..
    table.concat(args, " ") .. " 2>" .. tmp, "r"))
  local out = f:read("a")
  local ok, _, status = f:close()
  local ef = io.open(tmp, "r")
  local err = ef and ef:read("a") or ""
  if ef then ef:close() end
  os.remove(tmp)
  if not ok then error(string.format("indexdb %s failed (exit %s): %s", (...), tostring(status), err), 2) end
  return assert(ms.json.decode(out))
end

TestIndexes = {}

function TestIndexes:setUp()
  if SERVER == "java" then
    lu.skip("mongo-java-server has no range-index planner: explain cannot show what a query examines")
  end
end

-- The store's documents at rest: half never had anything pending, half had an
-- outbox entry and a spawn delivered and acknowledged and a timer far ahead,
-- so the indexed fields hold every shape an idle execution leaves behind.
local function make_templates(store, far)
  local idle = ms.execution { definition_id = "bulk", id = "tmpl-idle-000" }
  assert(store:save(idle))
  local busy = ms.execution { definition_id = "bulk", id = "tmpl-busy-000" }
  assert(store:commit(busy, {
    emits = { { target_id = "elsewhere", event = { kind = "Ping" } } },
    spawns = { { child_id = "tmpl-child-00", root_path = "Work", context = {} } },
    timers = { { action = "schedule", path = "Wait.later", fire_at = far } },
  }))
  for _, e in ipairs(assert(store:pending_outbox())) do assert(store:ack_outbox(e.seq)) end
  for _, e in ipairs(assert(store:pending_spawns())) do assert(store:ack_spawn(e.seq)) end
  lu.assertEquals(#store:pending_outbox(), 0)
  lu.assertEquals(#store:pending_spawns(), 0)
end

-- What the calls must find, written through the store: due timers, pending
-- outbox entries and spawns, and a rare definition to list.
local function make_targets(store, now)
  for i = 1, N_DUE do
    local e = ms.execution { definition_id = "bulk", id = "due-" .. i }
    assert(store:commit(e, { timers = { { action = "schedule", path = "Wait.t", fire_at = now - 100 - i } } }))
  end
  for i = 1, N_OUTBOX do
    local e = ms.execution { definition_id = "bulk", id = "out-" .. i }
    assert(store:commit(e, { emits = {
      { target_id = "tgt-" .. i, event = { kind = "A" } },
      { target_id = "tgt-" .. i, event = { kind = "B" } } } }))
  end
  for i = 1, N_SPAWNS do
    local e = ms.execution { definition_id = "bulk", id = "spn-" .. i }
    assert(store:commit(e, { spawns = { { child_id = "kid-" .. i, root_path = "Work", context = {} } } }))
  end
  for i = 1, N_RARE do
    assert(store:save(ms.execution { definition_id = "rare", id = string.format("rare-%02d", i) }))
  end
end

local function ids_of(rows, field)
  local set, list = {}, {}
  for _, r in ipairs(rows) do
    local id = r[field]
    if not set[id] then set[id] = true; list[#list + 1] = id end
  end
  table.sort(list)
  return list
end

-- The calls, each with what it must return; a call's checks failing is
-- recorded against that call only.
local CALLS = {
  { "due_timers", function(store, now)
      local due = assert(store:due_timers(now))
      lu.assertEquals(#due, N_DUE)
      local want = {}
      for i = 1, N_DUE do want[i] = "due-" .. i end
      lu.assertEquals(ids_of(due, "execution_id"), want)
      for _, r in ipairs(due) do lu.assertEquals(r.path, "Wait.t") end
    end },
  { "due_timers_limit", function(store, now)
      local due = assert(store:due_timers(now, { limit = 2 }))
      lu.assertEquals(#ids_of(due, "execution_id"), 2)
    end },
  { "pending_outbox", function(store)
      local out = assert(store:pending_outbox{ limit = 3, lease = 0.5 })
      -- whole documents are claimed: two of the five sources, all their entries
      lu.assertEquals(#out, 4)
      lu.assertEquals(#ids_of(out, "source_id"), 2)
      for _, src in ipairs(ids_of(out, "source_id")) do lu.assertStrMatches(src, "out%-%d") end
    end },
  { "pending_spawns", function(store)
      local spn = assert(store:pending_spawns{ limit = 3, lease = 0.5 })
      lu.assertEquals(#spn, 3)
      for _, src in ipairs(ids_of(spn, "source_id")) do lu.assertStrMatches(src, "spn%-%d") end
    end },
  { "list_by_definition", function(store)
      local p1 = assert(store:list_executions { definition_id = "rare", limit = PAGE })
      lu.assertEquals(#p1.items, PAGE)
      lu.assertEquals(p1.items[1].id, "rare-01")
      lu.assertNotNil(p1.next_cursor)
      return p1.next_cursor
    end },
  { "list_by_definition_page2", function(store, _, cursor)
      local p2 = assert(store:list_executions { definition_id = "rare", limit = PAGE, cursor = cursor })
      lu.assertEquals(#p2.items, N_RARE - PAGE)
      lu.assertEquals(p2.items[1].id, string.format("rare-%02d", PAGE + 1))
      lu.assertNil(p2.next_cursor)
    end },
  { "list_by_definition_and_status", function(store)
      local p = assert(store:list_executions { definition_id = "rare", status = "PENDING", limit = PAGE })
      lu.assertEquals(#p.items, PAGE)
    end },
  { "list_all", function(store)
      local p = assert(store:list_executions { limit = PAGE })
      lu.assertEquals(#p.items, PAGE)
    end },
}

-- Runs every call once with the profiler on and gives back, per call, the
-- explain figures of the find it sent on executions that examined the most
-- (or its error).
local function measure(store, db, now)
  local figures, carry = {}, nil
  for _, c in ipairs(CALLS) do
    local name, call = c[1], c[2]
    local seen = indexdb(db, "profile_on")
    local ok, res = pcall(call, store, now, carry)
    local finds = indexdb(db, "collect", seen)
    if ok then carry = res end
    local f = { error = not ok and tostring(res) or nil }
    if #finds == 0 then
      f.error = f.error or "the profiler recorded no find on executions"
    else
      local worst = finds[1]
      for _, x in ipairs(finds) do
        if x.totalDocsExamined + x.totalKeysExamined > worst.totalDocsExamined + worst.totalKeysExamined then
          worst = x
        end
      end
      for k, v in pairs(worst) do f[k] = v end
      f.finds = #finds
    end
    figures[name] = f
  end
  return figures
end

local function report(size, figures)
  for _, c in ipairs(CALLS) do
    local f = figures[c[1]]
    if f.plan then
      print(string.format("index_spec: %6d executions  %-29s docs=%-6d keys=%-6d returned=%-4d plan=%s  filter=%s",
        size, c[1], f.totalDocsExamined, f.totalKeysExamined, f.nReturned, f.plan, f.filter))
    end
  end
end

-- Populated and measured once for every test of the file: SMALL executions,
-- then LARGE.
local results, failure
local function populate_and_measure()
  local store, db = helper.connect { db = helper.fresh_db("idx") }
  local now = ms.now()
  make_templates(store, now + 10 * 365 * 86400)
  local t0 = ms.now()
  local half = SMALL // 2
  indexdb(db, "clone", "tmpl-idle-000", "i", 1, half)
  indexdb(db, "clone", "tmpl-busy-000", "f", 1, SMALL - half)
  make_targets(store, now)
  local t1 = ms.now()
  local small = measure(store, db, now)
  report(SMALL, small)
  local t2 = ms.now()
  local more = LARGE - SMALL
  indexdb(db, "clone", "tmpl-idle-000", "i", half + 1, half + more // 2)
  indexdb(db, "clone", "tmpl-busy-000", "f", SMALL - half + 1, SMALL - half + more - more // 2)
  local t3 = ms.now()
  -- the claims of the first round ran out long ago (lease 0.5 s)
  local large = measure(store, db, now)
  report(LARGE, large)
  local t4 = ms.now()
  print(string.format("index_spec: populate %d: %.1f s, measure: %.1f s; populate to %d: %.1f s, measure: %.1f s",
    SMALL, t1 - t0, t2 - t1, LARGE, t3 - t2, t4 - t3))
  store:close()
  indexdb(db, "drop")
  return { small = small, large = large }
end

local function results_once()
  if not results and not failure then
    local ok, r = pcall(populate_and_measure)
    if ok then results = r else failure = tostring(r) end
  end
  if failure then lu.fail("populating or measuring failed: " .. failure) end
  return results
end

-- What one call examines at LARGE is what it examined at SMALL, or at most
-- what it returns or was asked for: not a function of the collection's size.
local function assert_flat(name)
  local r = results_once()
  local s, l = r.small[name], r.large[name]
  if s.error then lu.fail(name .. " at " .. SMALL .. ": " .. s.error) end
  if l.error then lu.fail(name .. " at " .. LARGE .. ": " .. l.error) end
  local bound = math.max(s.totalDocsExamined, s.totalKeysExamined, PAGE, N_DUE, N_OUTBOX * 2, N_SPAWNS, N_RARE)
  if l.totalDocsExamined > bound or l.totalKeysExamined > bound then
    lu.fail(string.format("%s examines more as the collection grows: docs %d -> %d, keys %d -> %d from %d to %d"
      .. " executions (plan %s; filter %s)", name, s.totalDocsExamined, l.totalDocsExamined,
      s.totalKeysExamined, l.totalKeysExamined, SMALL, LARGE, l.plan, l.filter))
  end
end

function TestIndexes:test_due_timers_read_only_the_due() assert_flat("due_timers") end
function TestIndexes:test_due_timers_with_a_limit() assert_flat("due_timers_limit") end
function TestIndexes:test_pending_outbox_reads_only_pending_entries() assert_flat("pending_outbox") end
function TestIndexes:test_pending_spawns_reads_only_pending_spawns() assert_flat("pending_spawns") end
function TestIndexes:test_list_by_definition_first_page() assert_flat("list_by_definition") end
function TestIndexes:test_list_by_definition_next_page() assert_flat("list_by_definition_page2") end
function TestIndexes:test_list_by_definition_and_status() assert_flat("list_by_definition_and_status") end
function TestIndexes:test_list_everything_first_page()
  if SERVER == "secantus" then
    -- its _id index is virtual (nothing to walk in order), and its explain
    -- counts every document the filter matches whatever the limit: a page of
    -- an unfiltered listing reads, and shows, the whole collection there
    results_once()
    lu.skip("SecantusDB cannot show an unfiltered page read in _id order: no _id index walk, explain ignores the limit")
  end
  assert_flat("list_all")
end
