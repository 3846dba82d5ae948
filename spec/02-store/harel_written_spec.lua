-- spec/02-store/harel_written_spec.lua - documents mongostore created that
-- harel 0.9.0's own MongoStore then committed to (driven through
-- tools/harel_interop.py, which calls harel's MongoStore.commit): its commit
-- sets data, version and timers.<path> and none of the fields mongostore
-- promotes, yet our sweep fires the timer it armed (once) and our listing
-- files the execution under the status harel committed.
local lu = require "luaunit"
local ms = require "mongostore"
local core = require "mongostore.core"
local helper = require "helpers"
local C = require "fixtures.charts"

-- Commits `changes` to execution id through harel's own store; returns the
-- Execution harel committed, decoded.
local function harel_commit(db, id, changes)
  local args = { helper.python(), helper.root() .. "/tools/harel_interop.py", "commit", helper.uri(), db, id,
    core.json_encode(changes) }
  for i, a in ipairs(args) do args[i] = helper.shell_quote(a) end
  local tmp = os.tmpname()
  local f = assert(io.popen(table.concat(args, " ") .. " 2>" .. tmp, "r"))
  local out = f:read("a")
  local ok, _, status = f:close()
  local ef = io.open(tmp, "r")
  local err = ef and ef:read("a") or ""
  if ef then ef:close() end
  os.remove(tmp)
  if not ok then error(string.format("harel commit failed (exit %s):\n%s", tostring(status), err), 2) end
  return assert(core.json_decode(out))
end

local function ids_of(page)
  local out = {}
  for _, s in ipairs(page.items) do out[#out + 1] = s.id end
  table.sort(out)
  return out
end

TestHarelWritten = {}

function TestHarelWritten:setUp()
  self.store, self.db = helper.connect { prefix = "harel" }
  self.engine = C.engine(self.store)
end

function TestHarelWritten:tearDown()
  if self.store then self.store:close() end
end

-- Our engine arms Waiting an hour ahead; harel's store re-arms it one
-- second ago. The document keeps the next_fire_at our commit set.
function TestHarelWritten:test_our_sweep_fires_a_timer_harel_armed_once()
  local e, s = self.engine, self.store
  assert(e:start("timed", { id = "t", context = { wait = 3600 } }))
  assert(e:send("t", { kind = "Begin", id = "begin" }))
  lu.assertEquals(C.load(s, "t").active_path, "Waiting")
  lu.assertEquals(e:sweep(), 0, "nothing is due yet")
  local due_at = ms.now() - 1
  harel_commit(self.db, "t", { timers = { { "schedule", "Waiting", due_at } } })

  local due = assert(s:due_timers(ms.now()))
  lu.assertEquals(#due, 1, "due_timers returns the timer harel armed")
  lu.assertEquals(due[1].execution_id, "t")
  lu.assertEquals(due[1].path, "Waiting")
  lu.assertEquals(due[1].fire_at, due_at)

  lu.assertEquals(e:sweep(), 1, "the sweep fires it")
  local exe = C.load(s, "t")
  lu.assertEquals(exe.active_path, "TimedOut")
  lu.assertEquals(exe.context.timeouts, 1)
  lu.assertEquals(e:sweep(), 0, "and only once")
  lu.assertEquals(C.load(s, "t").context.timeouts, 1)
  lu.assertEquals(#assert(s:due_timers(ms.now() + 1e9)), 0)
end

-- A document with a timer of ours far ahead: harel arms an earlier one on
-- another path, and both are reported when due, each once.
function TestHarelWritten:test_a_timer_harel_armed_before_ours_is_due_first()
  local s = self.store
  local exe = ms.execution { id = "x", definition_id = "order", status = "RUNNING" }
  assert(s:commit(exe, { timers = { { action = "schedule", path = "Late", fire_at = 5000 } } }))
  harel_commit(self.db, "x", { timers = { { "schedule", "Order.Early", 1000 } } })
  local due = assert(s:due_timers(1000))
  lu.assertEquals(#due, 1)
  lu.assertEquals(due[1].path, "Order.Early")
  assert(s:delete_timer("x", "Order.Early", 1000))
  lu.assertEquals(#assert(s:due_timers(4999)), 0)
  local late = assert(s:due_timers(5000))
  lu.assertEquals(#late, 1)
  lu.assertEquals(late[1].path, "Late")
end

-- We create three RUNNING executions; harel finishes one, fails another.
function TestHarelWritten:test_our_listing_files_harels_final_status()
  local s = self.store
  for _, id in ipairs { "a", "b", "c" } do
    assert(s:save(ms.execution { id = id, definition_id = "order", status = "RUNNING" }))
  end
  harel_commit(self.db, "a", { status = "DONE", outcome = "shipped", active_path = "Order.Done" })
  harel_commit(self.db, "b", { status = "FAILED" })

  local done = assert(s:list_executions { status = "DONE" })
  lu.assertEquals(ids_of(done), { "a" })
  lu.assertEquals(done.items[1].status, "DONE")
  lu.assertEquals(done.items[1].outcome, "shipped")
  lu.assertEquals(done.items[1].version, 2)
  lu.assertEquals(ids_of(assert(s:list_executions { status = { "DONE", "FAILED" }, definition_id = "order" })),
    { "a", "b" })
  lu.assertEquals(ids_of(assert(s:list_executions { status = "RUNNING" })), { "c" })
  lu.assertEquals(ids_of(assert(s:list_executions { status = "RUNNING", roots_only = true })), { "c" })
  lu.assertEquals(ids_of(assert(s:list_executions {})), { "a", "b", "c" })
end

-- What harel commits next is seen again: the promoted fields follow every
-- harel commit, not only the first, and our own next commit takes over.
function TestHarelWritten:test_promoted_fields_follow_every_harel_commit()
  local s = self.store
  assert(s:save(ms.execution { id = "p", definition_id = "order", status = "RUNNING" }))
  harel_commit(self.db, "p", { status = "SUSPENDED" })
  lu.assertEquals(ids_of(assert(s:list_executions { status = "SUSPENDED" })), { "p" })
  harel_commit(self.db, "p", { status = "RUNNING", timers = { { "schedule", "Order.Wait", 2000 } } })
  lu.assertEquals(ids_of(assert(s:list_executions { status = "SUSPENDED" })), {})
  lu.assertEquals(ids_of(assert(s:list_executions { status = "RUNNING" })), { "p" })
  lu.assertEquals(#assert(s:due_timers(2000)), 1)
  local exe = assert(s:load("p"))
  lu.assertEquals(exe.version, 3)
  exe.status = "CANCELLED"
  assert(s:commit(exe, { timers = { { action = "cancel", path = "Order.Wait" } } }))
  lu.assertEquals(ids_of(assert(s:list_executions { status = "CANCELLED" })), { "p" })
  lu.assertEquals(#assert(s:due_timers(1e12)), 0)
  -- harel's store still loads and commits on top of ours
  local h = harel_commit(self.db, "p", { outcome = "gone" })
  lu.assertEquals(h.version, 5)
  lu.assertEquals(h.status, "CANCELLED")
end

-- An event harel's store marked handled is a duplicate to ours.
function TestHarelWritten:test_an_event_harel_handled_is_a_duplicate_here()
  local s = self.store
  assert(s:save(ms.execution { id = "d", definition_id = "order", status = "RUNNING" }))
  harel_commit(self.db, "d", { event_id = "evt-h" })
  lu.assertTrue(s:is_processed("d", "evt-h"))
  local exe, processed = s:load_for_event("d", "evt-h")
  lu.assertNotNil(exe)
  lu.assertTrue(processed)
  local ok, _, code = s:commit(exe, { processed_event_id = "evt-h" })
  lu.assertNil(ok)
  lu.assertEquals(code, "duplicate")
end

-- What it costs: with a prefix (collections harel's store can write to) one
-- find of the partial index first, and one bulk write only when harel's store
-- committed something since; without a prefix, nothing.
function TestHarelWritten:test_the_promotion_pass_costs_one_find_and_a_write_only_when_needed()
  local s = self.store
  assert(s:save(ms.execution { id = "k", definition_id = "order", status = "RUNNING" }))
  local function cost(fn)
    local before = s:stats()
    fn()
    local after = s:stats()
    return { find = (after.find or 0) - (before.find or 0), update = (after.update or 0) - (before.update or 0) }
  end
  lu.assertEquals(cost(function() assert(s:due_timers(ms.now())) end), { find = 2, update = 0 })
  lu.assertEquals(cost(function() assert(s:list_executions { status = "RUNNING" }) end), { find = 2, update = 0 })
  lu.assertEquals(cost(function() assert(s:list_executions { definition_id = "order" }) end), { find = 1, update = 0 })
  harel_commit(self.db, "k", { status = "DONE" })
  lu.assertEquals(cost(function() assert(s:due_timers(ms.now())) end), { find = 2, update = 1 })
  lu.assertEquals(cost(function() assert(s:list_executions { status = "DONE" }) end), { find = 2, update = 0 })

  local plain = helper.connect { db = self.db }
  local before = plain:stats()
  assert(plain:due_timers(ms.now()))
  lu.assertEquals(plain:stats().find - before.find, 1, "no prefix: harel's store cannot write here")
  plain:close()
end
