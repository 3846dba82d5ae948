-- spec/02-store/outbox_spawns_spec.lua - the transactional outbox (entries,
-- global seq order, acks, event ids), the dedupe marks, and the pending
-- spawns of orthogonal forks (committed with context intact, acked).
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local raw = require "helpers.rawdb"

local function new_exe(id, ctx)
  return ms.execution { definition_id = "order", id = id, context = ctx or {} }
end

local function ids_of(entries)
  local out = {}
  for i, e in ipairs(entries) do out[i] = e.event.id end
  return out
end

local function assert_increasing_seqs(entries)
  for i, e in ipairs(entries) do
    lu.assertEquals(math.type(e.seq), "integer", "seq of entry " .. i)
    if i > 1 then lu.assertTrue(e.seq > entries[i - 1].seq, "seqs are not increasing at entry " .. i) end
  end
end

TestOutbox = {}

function TestOutbox:setUp()
  self.store, self.db = helper.connect()
end

function TestOutbox:tearDown()
  if self.store then self.store:close() end
end

function TestOutbox:test_empty_store_has_no_pending_entries()
  lu.assertEquals(#self.store:pending_outbox(), 0)
  lu.assertEquals(#self.store:pending_spawns(), 0)
  local exe = new_exe()
  lu.assertTrue(self.store:save(exe))
  lu.assertEquals(#self.store:pending_outbox(), 0)
  lu.assertEquals(#self.store:pending_spawns(), 0)
end

function TestOutbox:test_emitted_event_is_in_the_outbox()
  local exe = new_exe()
  lu.assertTrue(self.store:save(exe))
  local data = { n = 1, list = ms.array { 1, "two" }, empty = ms.array {}, obj = {},
                 text = "gr\u{fc}\u{df}e \u{1f600}", nothing = ms.null, big = 9007199254740993 }
  lu.assertTrue(self.store:commit(exe, {
    emits = { { target_id = "exe-2", event = { id = "e1", kind = "Go", data = data,
                                               created_time = 1764500000.25 } } },
  }))
  local entries = self.store:pending_outbox()
  lu.assertEquals(#entries, 1)
  local e = entries[1]
  lu.assertEquals(math.type(e.seq), "integer")
  lu.assertTrue(e.seq >= 1)
  lu.assertEquals(e.target_id, "exe-2")
  lu.assertEquals(e.event.id, "e1")
  lu.assertEquals(e.event.kind, "Go")
  lu.assertEquals(e.event.data, data)
  lu.assertTrue(ms.is_array(e.event.data.empty))
  lu.assertFalse(ms.is_array(e.event.data.obj))
  lu.assertEquals(math.type(e.event.data.big), "integer")
  lu.assertEquals(math.type(e.event.created_time), "float")
  lu.assertAlmostEquals(e.event.created_time, 1764500000.25, 1e-6)

  -- the stored entry: {seq, target_id, event = "<Event JSON>"} with harel's event fields
  local doc = raw.doc(self.db, exe.id)
  lu.assertEquals(#doc.outbox, 1)
  lu.assertEquals(raw.keys(doc.outbox[1]), { "event", "seq", "target_id" })
  lu.assertEquals(doc.outbox[1].seq, e.seq)
  lu.assertEquals(doc.outbox[1].target_id, "exe-2")
  lu.assertIsString(doc.outbox[1].event)
  local ev = raw.json(doc.outbox[1].event)
  lu.assertEquals(raw.keys(ev), { "created_time", "data", "id", "kind", "received_time" })
  lu.assertEquals(ev.id, "e1")
  lu.assertEquals(ev.kind, "Go")
  lu.assertEquals(ev.data.big, 9007199254740993)
  lu.assertEquals(ev.data.text, data.text)
  lu.assertIsString(ev.created_time)
  lu.assertStrMatches(ev.created_time, "2025%-11%-30T10:53:20%.25.*")
  lu.assertEquals(ev.received_time, ms.null)
end

function TestOutbox:test_received_time_round_trips()
  local exe = new_exe()
  lu.assertTrue(self.store:commit(exe, {
    emits = { { target_id = "t", event = { kind = "Go", created_time = 1700000000.5,
                                           received_time = 1700000001.125 } } },
  }))
  local e = self.store:pending_outbox()[1]
  lu.assertAlmostEquals(e.event.created_time, 1700000000.5, 1e-6)
  lu.assertAlmostEquals(e.event.received_time, 1700000001.125, 1e-6)
  local ev = raw.json(raw.doc(self.db, exe.id).outbox[1].event)
  lu.assertStrMatches(ev.created_time, "2023%-11%-14T22:13:20%.5.*")
  lu.assertStrMatches(ev.received_time, "2023%-11%-14T22:13:21%.125.*")
end

function TestOutbox:test_event_id_is_filled_when_missing()
  local exe = new_exe()
  lu.assertTrue(self.store:commit(exe, {
    emits = {
      { target_id = "t", event = { kind = "First", data = {} } },
      { target_id = "t", event = { kind = "Second" } },
    },
  }))
  local entries = self.store:pending_outbox()
  lu.assertEquals(#entries, 2)
  for _, e in ipairs(entries) do
    lu.assertStrMatches(e.event.id, ("%x"):rep(32))
  end
  lu.assertNotEquals(entries[1].event.id, entries[2].event.id)
  local doc = raw.doc(self.db, exe.id)
  lu.assertEquals(raw.json(doc.outbox[1].event).id, entries[1].event.id)
  lu.assertEquals(raw.json(doc.outbox[2].event).id, entries[2].event.id)
  lu.assertEquals(raw.json(doc.outbox[2].event).data, {})
end

function TestOutbox:test_emit_without_target_is_stored_with_null_target()
  local exe = new_exe()
  lu.assertTrue(self.store:commit(exe, { emits = { { event = { id = "lonely", kind = "Broadcast" } } } }))
  local entries = self.store:pending_outbox()
  lu.assertEquals(#entries, 1)
  lu.assertEquals(entries[1].event.id, "lonely")
  lu.assertTrue(entries[1].target_id == nil or entries[1].target_id == ms.null,
    "target_id should be absent or null, got " .. tostring(entries[1].target_id))
  lu.assertEquals(raw.doc(self.db, exe.id).outbox[1].target_id, ms.null)
end

function TestOutbox:test_outbox_is_carried_on_the_first_insert()
  local exe = new_exe()
  lu.assertTrue(self.store:commit(exe, {
    emits = {
      { target_id = "a", event = { id = "i1", kind = "One" } },
      { target_id = "b", event = { id = "i2", kind = "Two" } },
    },
  }))
  lu.assertEquals(exe.version, 1)
  local entries = self.store:pending_outbox()
  lu.assertEquals(ids_of(entries), { "i1", "i2" })
  lu.assertEquals(entries[1].target_id, "a")
  lu.assertEquals(entries[2].target_id, "b")
  assert_increasing_seqs(entries)
  local doc = raw.doc(self.db, exe.id)
  lu.assertEquals(#doc.outbox, 2)
  lu.assertTrue(doc.outbox[1].seq < doc.outbox[2].seq)
end

function TestOutbox:test_outbox_is_ordered_across_executions_by_global_seq()
  -- ids chosen so that document order (by _id) is the reverse of commit order
  local z = new_exe("zzz-" .. ms.uuid())
  local a = new_exe("aaa-" .. ms.uuid())
  lu.assertTrue(self.store:commit(z, { emits = { { target_id = "t", event = { id = "z1", kind = "K" } } } }))
  lu.assertTrue(self.store:commit(a, { emits = {
    { target_id = "t", event = { id = "a1", kind = "K" } },
    { target_id = "t", event = { id = "a2", kind = "K" } },
  } }))
  lu.assertTrue(self.store:commit(z, { emits = { { target_id = "t", event = { id = "z2", kind = "K" } } } }))
  lu.assertTrue(self.store:commit(a, { emits = { { target_id = "t", event = { id = "a3", kind = "K" } } } }))
  local entries = self.store:pending_outbox()
  lu.assertEquals(ids_of(entries), { "z1", "a1", "a2", "z2", "a3" })
  assert_increasing_seqs(entries)
  -- seqs are unique across the two documents
  local seen = {}
  for _, e in ipairs(entries) do
    lu.assertNil(seen[e.seq], "seq " .. e.seq .. " used twice")
    seen[e.seq] = true
  end
  -- the seqs came from the counters collection
  lu.assertTrue(#raw.docs(self.db, "counters") >= 1)
end

function TestOutbox:test_ack_removes_exactly_one_entry()
  local x = new_exe()
  local y = new_exe()
  lu.assertTrue(self.store:commit(x, { emits = {
    { target_id = "t", event = { id = "x1", kind = "K" } },
    { target_id = "t", event = { id = "x2", kind = "K" } },
  } }))
  lu.assertTrue(self.store:commit(y, { emits = { { target_id = "t", event = { id = "y1", kind = "K" } } } }))
  local entries = self.store:pending_outbox()
  lu.assertEquals(ids_of(entries), { "x1", "x2", "y1" })

  self.store:ack_outbox(entries[1].seq)
  lu.assertEquals(ids_of(self.store:pending_outbox()), { "x2", "y1" })
  lu.assertEquals(#raw.doc(self.db, x.id).outbox, 1)
  lu.assertEquals(#raw.doc(self.db, y.id).outbox, 1)

  -- acking again, or an unknown seq, changes nothing
  self.store:ack_outbox(entries[1].seq)
  self.store:ack_outbox(entries[3].seq + 1000)
  lu.assertEquals(ids_of(self.store:pending_outbox()), { "x2", "y1" })

  self.store:ack_outbox(entries[3].seq)
  lu.assertEquals(ids_of(self.store:pending_outbox()), { "x2" })
  self.store:ack_outbox(entries[2].seq)
  lu.assertEquals(#self.store:pending_outbox(), 0)
  local dx = raw.doc(self.db, x.id)
  lu.assertTrue(ms.is_array(dx.outbox))
  lu.assertEquals(#dx.outbox, 0)

  -- acks touch only the outbox
  lu.assertEquals(dx.version, 1)
  lu.assertEquals(self.store:load(x.id).version, 1)
end

function TestOutbox:test_outbox_entries_survive_later_commits()
  local exe = new_exe()
  lu.assertTrue(self.store:commit(exe, { emits = { { target_id = "t", event = { id = "e1", kind = "K" } } } }))
  lu.assertTrue(self.store:save(exe))
  lu.assertTrue(self.store:commit(exe, { emits = { { target_id = "t", event = { id = "e2", kind = "K" } } } }))
  lu.assertEquals(ids_of(self.store:pending_outbox()), { "e1", "e2" })
end

function TestOutbox:test_dedupe_marks()
  local exe = new_exe()
  lu.assertTrue(self.store:commit(exe, { processed_event_id = "evt-1" }))
  lu.assertTrue(self.store:is_processed(exe.id, "evt-1"))
  lu.assertFalse(self.store:is_processed(exe.id, "evt-2"))
  lu.assertTrue(self.store:commit(exe, { processed_event_id = "evt-2" }))
  lu.assertTrue(self.store:is_processed(exe.id, "evt-1"))
  lu.assertTrue(self.store:is_processed(exe.id, "evt-2"))
  lu.assertFalse(self.store:is_processed(exe.id, "evt-3"))
  local doc = raw.doc(self.db, exe.id)
  lu.assertEquals(doc.processed, { "evt-1", "evt-2" }, "the dedupe marks in the order handled")
  local _, p1 = self.store:load_for_event(exe.id, "evt-2")
  lu.assertTrue(p1)
  lu.assertEquals(exe.version, 2)
end

-- processed keeps the last dedupe_window ids: the redelivery horizon.
function TestOutbox:test_dedupe_window_keeps_the_last_ids()
  local store = helper.connect{ db = self.db, dedupe_window = 3 }
  lu.assertEquals(store:info().dedupe_window, 3)
  local exe = new_exe()
  for i = 1, 5 do lu.assertTrue(store:commit(exe, { processed_event_id = "w-" .. i })) end
  lu.assertEquals(raw.doc(self.db, exe.id).processed, { "w-3", "w-4", "w-5" })
  lu.assertFalse(store:is_processed(exe.id, "w-2"))
  lu.assertTrue(store:is_processed(exe.id, "w-3"))
  local _, seen = store:load_for_event(exe.id, "w-5")
  lu.assertTrue(seen)
  lu.assertEquals(self.store:info().dedupe_window, 1000)
  store:close()
  for _, bad in ipairs { 0, -1, 1000001, 2.5 } do
    local none, err, code = ms.connect(helper.uri(), { db = self.db, dedupe_window = bad, wait = 10 })
    lu.assertNil(none)
    lu.assertEquals(code, "invalid")
    lu.assertStrContains(err, "dedupe_window must be an integer from 1 to 1000000")
  end
  lu.assertErrorMsgContains("dedupe_window must be an integer, got string", ms.connect, helper.uri(),
    { db = self.db, dedupe_window = "10" })
  local widest = helper.connect{ db = self.db, dedupe_window = 1000000 }
  lu.assertEquals(widest:info().dedupe_window, 1000000)
  widest:close()
end

-- Beyond the last 16 ids in `processed`, the window lives in the digests:
-- an event 100 marks back is still recognised, one older than the window is
-- not, and the document carries one 8-byte digest per id in the window.
function TestOutbox:test_dedupe_window_beyond_the_readable_tail()
  local store = helper.connect{ db = self.db, dedupe_window = 200 }
  local exe = new_exe()
  for i = 1, 300 do assert(store:commit(exe, { processed_event_id = "d-" .. i })) end
  local doc = raw.doc(self.db, exe.id)
  lu.assertEquals(#doc.processed, 16)
  lu.assertEquals(doc.processed[1], "d-285")
  lu.assertEquals(doc.processed[16], "d-300")
  lu.assertEquals(#doc.dedupe.binary, 200 * 8)
  lu.assertTrue(store:is_processed(exe.id, "d-200"))
  lu.assertTrue(store:is_processed(exe.id, "d-101"))
  lu.assertFalse(store:is_processed(exe.id, "d-100"))
  local _, seen = store:load_for_event(exe.id, "d-150")
  lu.assertTrue(seen)
  -- a redelivery inside the window is refused with nothing written, from a
  -- fresh load as from the execution that committed
  local fresh = assert(store:load(exe.id))
  local ok, _, code = store:commit(fresh, { processed_event_id = "d-120" })
  lu.assertNil(ok)
  lu.assertEquals(code, "duplicate")
  local _, _, code2 = store:commit(exe, { processed_event_id = "d-250" })
  lu.assertEquals(code2, "duplicate")
  lu.assertEquals(raw.doc(self.db, exe.id).version, 300)
  -- outside the window it is applied again: the horizon the README states
  lu.assertTrue(store:commit(fresh, { processed_event_id = "d-100" }))
  store:close()
end

function TestOutbox:test_commit_with_outbox_dedupe_and_state_together()
  local exe = new_exe(nil, { n = 0 })
  lu.assertTrue(self.store:save(exe))
  local loaded, seen = self.store:load_for_event(exe.id, "in-1")
  lu.assertFalse(seen)
  loaded.context.n = 1
  lu.assertTrue(self.store:commit(loaded, {
    processed_event_id = "in-1",
    emits = { { target_id = "other", event = { id = "out-1", kind = "Reply", data = { n = 1 } } } },
  }))
  local again, seen2 = self.store:load_for_event(exe.id, "in-1")
  lu.assertTrue(seen2)
  lu.assertEquals(again.context.n, 1)
  lu.assertEquals(ids_of(self.store:pending_outbox()), { "out-1" })
end

TestSpawns = {}

function TestSpawns:setUp()
  self.store, self.db = helper.connect()
end

function TestSpawns:tearDown()
  if self.store then self.store:close() end
end

function TestSpawns:test_spawns_are_committed_with_context_intact()
  local exe = new_exe()
  lu.assertTrue(self.store:save(exe))
  local ctx1 = { k = "v", arr = ms.array { 1, 2, 3 }, empty_arr = ms.array {}, empty_obj = {},
                 nested = { x = 1, y = { z = "\u{263a}" } }, nothing = ms.null,
                 big = 9007199254740993, f = 0.5, yes = true }
  lu.assertTrue(self.store:commit(exe, {
    spawns = {
      { child_id = "c1", root_path = "Fork.A", context = ctx1 },
      { child_id = "c2", root_path = "Fork.B", context = {} },
    },
  }))
  local spawns = self.store:pending_spawns()
  lu.assertEquals(#spawns, 2)
  assert_increasing_seqs(spawns)
  lu.assertEquals(spawns[1].parent_id, exe.id)
  lu.assertEquals(spawns[1].child_id, "c1")
  lu.assertEquals(spawns[1].root_path, "Fork.A")
  lu.assertEquals(spawns[1].context, ctx1)
  lu.assertTrue(ms.is_array(spawns[1].context.arr))
  lu.assertTrue(ms.is_array(spawns[1].context.empty_arr))
  lu.assertFalse(ms.is_array(spawns[1].context.empty_obj))
  lu.assertEquals(math.type(spawns[1].context.big), "integer")
  lu.assertEquals(math.type(spawns[1].context.f), "float")
  lu.assertEquals(spawns[1].context.nothing, ms.null)
  lu.assertEquals(spawns[2].parent_id, exe.id)
  lu.assertEquals(spawns[2].child_id, "c2")
  lu.assertEquals(spawns[2].root_path, "Fork.B")
  lu.assertEquals(spawns[2].context, {})

  -- stored as {seq, parent_id, child_id, root_path, context = {...}} (a sub-document, not JSON)
  local doc = raw.doc(self.db, exe.id)
  lu.assertEquals(#doc.spawns, 2)
  local s = doc.spawns[1]
  lu.assertEquals(raw.keys(s), { "child_id", "context", "parent_id", "root_path", "seq" })
  lu.assertEquals(s.seq, spawns[1].seq)
  lu.assertEquals(s.parent_id, exe.id)
  lu.assertEquals(s.child_id, "c1")
  lu.assertEquals(s.root_path, "Fork.A")
  lu.assertEquals(type(s.context), "table")
  lu.assertEquals(s.context.nested.y.z, "\u{263a}")
  lu.assertEquals(s.context.big, 9007199254740993)
  lu.assertTrue(ms.is_array(s.context.empty_arr))
  lu.assertFalse(ms.is_array(s.context.empty_obj))
end

function TestSpawns:test_spawns_are_carried_on_the_first_insert()
  local exe = new_exe()
  lu.assertTrue(self.store:commit(exe, {
    spawns = { { child_id = "only", root_path = "Par.X", context = { a = 1 } } },
  }))
  local spawns = self.store:pending_spawns()
  lu.assertEquals(#spawns, 1)
  lu.assertEquals(spawns[1].child_id, "only")
  lu.assertEquals(spawns[1].parent_id, exe.id)
  lu.assertEquals(spawns[1].context, { a = 1 })
end

function TestSpawns:test_spawns_are_acked_one_at_a_time()
  local p = new_exe("zz-parent")
  local q = new_exe("aa-parent")
  lu.assertTrue(self.store:commit(p, { spawns = {
    { child_id = "p1", root_path = "F.A", context = {} },
    { child_id = "p2", root_path = "F.B", context = {} },
  } }))
  lu.assertTrue(self.store:commit(q, { spawns = { { child_id = "q1", root_path = "G.A", context = { w = 1 } } } }))
  local spawns = self.store:pending_spawns()
  local function children(list)
    local out = {}
    for i, s in ipairs(list) do out[i] = s.child_id end
    return out
  end
  lu.assertEquals(children(spawns), { "p1", "p2", "q1" }, "spawns are ordered by seq, not by document")
  assert_increasing_seqs(spawns)
  lu.assertEquals(spawns[3].parent_id, "aa-parent")

  self.store:ack_spawn(spawns[2].seq)
  lu.assertEquals(children(self.store:pending_spawns()), { "p1", "q1" })
  self.store:ack_spawn(spawns[2].seq)                    -- again: no-op
  self.store:ack_spawn(spawns[3].seq + 1000)             -- unknown: no-op
  lu.assertEquals(children(self.store:pending_spawns()), { "p1", "q1" })
  self.store:ack_spawn(spawns[3].seq)
  lu.assertEquals(children(self.store:pending_spawns()), { "p1" })
  self.store:ack_spawn(spawns[1].seq)
  lu.assertEquals(#self.store:pending_spawns(), 0)
  local doc = raw.doc(self.db, "zz-parent")
  lu.assertTrue(ms.is_array(doc.spawns))
  lu.assertEquals(#doc.spawns, 0)
  lu.assertEquals(doc.version, 1, "an ack must not touch the version")
end

function TestSpawns:test_spawn_acks_and_outbox_acks_are_separate()
  local exe = new_exe()
  lu.assertTrue(self.store:commit(exe, {
    emits = { { target_id = "t", event = { id = "ev", kind = "K" } } },
    spawns = { { child_id = "c", root_path = "R", context = {} } },
  }))
  local out = self.store:pending_outbox()
  local sp = self.store:pending_spawns()
  lu.assertEquals(#out, 1)
  lu.assertEquals(#sp, 1)
  self.store:ack_outbox(out[1].seq)
  lu.assertEquals(#self.store:pending_outbox(), 0)
  lu.assertEquals(#self.store:pending_spawns(), 1, "acking the outbox removed a spawn")
  self.store:ack_spawn(sp[1].seq)
  lu.assertEquals(#self.store:pending_spawns(), 0)
end
