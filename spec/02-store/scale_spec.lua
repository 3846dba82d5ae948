-- spec/02-store/scale_spec.lua - what keeps the store's costs flat as it grows:
-- the promoted next_fire_at (never later than the earliest timer, raised by
-- the sweep while the version holds), the promoted status and parent_id that
-- the listing filters on the server, bounded sweeps, and the command counts
-- (store:stats) that show the round trips an event costs.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local raw = require "helpers.rawdb"

TestScale = {}

function TestScale:setUp()
  self.store, self.db = helper.connect()
end

function TestScale:tearDown()
  if self.store then self.store:close() end
end

local function new_exe(id)
  return ms.execution{ definition_id = "scale", id = id }
end

function TestScale:test_next_fire_at_follows_the_earliest_timer()
  local exe = new_exe("t-1")
  lu.assertTrue(self.store:save(exe))
  lu.assertEquals(raw.doc(self.db, "t-1").next_fire_at, 1e300)
  lu.assertTrue(self.store:commit(exe, { timers = { { action = "schedule", path = "A", fire_at = 50.0 },
                                                    { action = "schedule", path = "B.C", fire_at = 30.0 } } }))
  lu.assertEquals(raw.doc(self.db, "t-1").next_fire_at, 30.0)
  lu.assertTrue(self.store:commit(exe, { timers = { { action = "schedule", path = "D", fire_at = 40.0 } } }))
  lu.assertEquals(raw.doc(self.db, "t-1").next_fire_at, 30.0, "$min never raises it")
  -- the earliest is cancelled: the mark stays low until a sweep finds nothing due there
  lu.assertTrue(self.store:commit(exe, { timers = { { action = "cancel", path = "B.C" } } }))
  lu.assertEquals(raw.doc(self.db, "t-1").next_fire_at, 30.0)
  lu.assertEquals(#self.store:due_timers(35), 0)
  lu.assertEquals(raw.doc(self.db, "t-1").next_fire_at, 40.0, "the sweep raised it to the true minimum")
  local due = self.store:due_timers(45)
  lu.assertEquals(#due, 1)
  lu.assertEquals(due[1].path, "D")
  lu.assertTrue(self.store:commit(exe, { timers = { { action = "cancel", path = "D" }, { action = "cancel", path = "A" } } }))
  lu.assertEquals(#self.store:due_timers(1e9), 0)
  lu.assertEquals(raw.doc(self.db, "t-1").next_fire_at, 1e300, "no timer left: back to never")
end

function TestScale:test_the_sweep_does_not_raise_a_mark_that_moved_on()
  local exe = new_exe("t-2")
  lu.assertTrue(self.store:commit(exe, { timers = { { action = "schedule", path = "A", fire_at = 10.0 } } }))
  lu.assertTrue(self.store:commit(exe, { timers = { { action = "cancel", path = "A" } } }))
  -- a concurrent writer arms a new early timer between the sweep's read and
  -- its raise: the version guard keeps the raise from hiding it
  local other = assert(self.store:load("t-2"))
  lu.assertTrue(self.store:commit(other, { timers = { { action = "schedule", path = "B", fire_at = 12.0 } } }))
  local due = self.store:due_timers(20)
  lu.assertEquals(#due, 1)
  lu.assertEquals(due[1].path, "B")
  lu.assertEquals(raw.doc(self.db, "t-2").next_fire_at, 10.0)
end

function TestScale:test_due_timers_reads_only_due_documents_and_honours_limit()
  for i = 1, 30 do
    local exe = new_exe(string.format("d-%02d", i))
    lu.assertTrue(self.store:commit(exe, { timers = { { action = "schedule", path = "W", fire_at = i + 0.0 } } }))
  end
  local before = self.store:stats()
  local due = self.store:due_timers(10)
  local after = self.store:stats()
  lu.assertEquals(#due, 10)
  lu.assertEquals(due[1].fire_at, 1.0)
  lu.assertEquals(due[10].fire_at, 10.0)
  -- one index lookup, what is due: without a prefix the collections are not
  -- ones harel's store can write to, so there is nothing to promote first
  lu.assertEquals(after.find - before.find, 1, "one query")
  lu.assertEquals(#self.store:due_timers(30, { limit = 5 }), 5)
end

function TestScale:test_listing_filters_on_the_server()
  for i = 1, 40 do
    local exe = new_exe(string.format("l-%02d", i))
    exe.status = (i % 4 == 0) and "DONE" or "RUNNING"
    if i % 5 == 0 then exe.parent_id = "l-01" end
    lu.assertTrue(self.store:save(exe))
  end
  local before = self.store:stats()
  local page = self.store:list_executions{ definition_id = "scale", status = "DONE", limit = 100 }
  local after = self.store:stats()
  lu.assertEquals(#page.items, 10)
  lu.assertEquals(after.find - before.find, 1)
  for _, s in ipairs(page.items) do lu.assertEquals(s.status, "DONE") end
  local roots = self.store:list_executions{ definition_id = "scale", roots_only = true, limit = 100 }
  lu.assertEquals(#roots.items, 32)
  -- a status changed by a later commit moves with it
  local exe = assert(self.store:load("l-04"))
  exe.status = "FAILED"
  lu.assertTrue(self.store:save(exe))
  lu.assertEquals(raw.doc(self.db, "l-04").status, "FAILED")
  lu.assertEquals(#self.store:list_executions{ status = "DONE" }.items, 9)
end

function TestScale:test_a_delivered_event_costs_two_round_trips()
  local chart = require "mongostore.chart"
  local engine = require("mongostore.engine").new{
    store = self.store,
    charts = { chart.define{ id = "flat", initial = "A", states = { { "A" }, { "B", final = "ok" } },
                             transitions = { { from = "A", to = "B", on = "Go" } } } },
  }
  lu.assertEquals(engine:start("flat", { id = "f-1" }), "f-1")
  local before = self.store:stats()
  lu.assertTrue(engine:send("f-1", { kind = "Go", id = "go-1" }))
  local after = self.store:stats()
  lu.assertEquals(after.total - before.total, 2, "a load by _id and the commit")
  lu.assertEquals(after.find - before.find, 1)
  lu.assertEquals(after.update - before.update, 1)
  lu.assertEquals(self.store:load("f-1").status, "DONE")
  -- a redelivery: the digests that came with the load know the event, so
  -- the commit is refused before anything is sent, and nothing changes
  local doc = raw.doc(self.db, "f-1")
  before = self.store:stats()
  local ok, how = engine:deliver("f-1", { kind = "Go", id = "go-1" })
  after = self.store:stats()
  lu.assertTrue(ok)
  lu.assertEquals(how, "duplicate")
  lu.assertEquals(after.total - before.total, 1)
  lu.assertEquals(after.find - before.find, 1)
  lu.assertEquals(raw.doc(self.db, "f-1"), doc)
end

function TestScale:test_claimed_entries_go_to_one_relay_at_a_time()
  -- two sources with three entries each: a relay claims a source's entries together
  for _, id in ipairs { "c-a", "c-b" } do
    local emits = {}
    for i = 1, 3 do emits[i] = { target_id = "t", event = { id = id .. "-ev-" .. i, kind = "K" } } end
    lu.assertTrue(self.store:commit(new_exe(id), { emits = emits }))
  end
  local other = helper.connect{ db = self.db }
  local a = self.store:pending_outbox{ limit = 2, lease = 30 }
  local b = other:pending_outbox{ limit = 2, lease = 30 }
  lu.assertEquals(#a, 3, "a whole source")
  lu.assertEquals(#b, 3, "the other source")
  lu.assertNotEquals(a[1].source_id, b[1].source_id)
  for i = 2, 3 do lu.assertTrue(a[i].seq > a[i - 1].seq) lu.assertEquals(a[i].source_id, a[1].source_id) end
  lu.assertEquals(#other:pending_outbox{ limit = 10, lease = 30 }, 0, "all claimed")
  -- a token that is not the claim's removes nothing
  lu.assertTrue(other:ack_outbox(a[1].seq, b[1].token))
  lu.assertEquals(#self.store:pending_outbox(), 6)
  lu.assertTrue(self.store:ack_outbox(a[1].seq, a[1].token))
  lu.assertEquals(#self.store:pending_outbox(), 5)
  -- given back, the source's remaining entries are claimable again at once
  lu.assertTrue(self.store:release_outbox(a[1].source_id, a[1].token))
  local again = other:pending_outbox{ limit = 10, lease = 30 }
  lu.assertEquals(#again, 2)
  lu.assertEquals(again[1].seq, a[2].seq)
  lu.assertEquals(again[1].event.id, a[2].event.id)
  other:close()
end

function TestScale:test_an_expired_lease_lets_another_relay_take_the_entry()
  local exe = new_exe("c-2")
  lu.assertTrue(self.store:commit(exe, { spawns = { { child_id = "k", root_path = "R" } } }))
  local first = self.store:pending_spawns{ limit = 5, lease = 0.2 }
  lu.assertEquals(#first, 1)
  lu.assertEquals(#self.store:pending_spawns{ limit = 5, lease = 0.2 }, 0)
  ms.sleep(0.3)
  local second = self.store:pending_spawns{ limit = 5, lease = 30 }
  lu.assertEquals(#second, 1)
  lu.assertNotEquals(second[1].token, first[1].token)
  lu.assertTrue(self.store:ack_spawn(first[1].seq, first[1].token))
  lu.assertEquals(#self.store:pending_spawns(), 1, "the stale relay's ack did not remove the new claim")
  lu.assertTrue(self.store:ack_spawn(second[1].seq, second[1].token))
  lu.assertEquals(#self.store:pending_spawns(), 0)
end
