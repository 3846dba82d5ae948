-- spec/02-store/trace_spec.lua - the execution-trace ring: indices stamped from a
-- per-execution counter by commits and append_trace, the trace_max ring that
-- keeps original indices, read_trace on present and absent executions.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local raw = require "helpers.rawdb"

local function new_exe(id)
  return ms.execution { definition_id = "order", id = id, context = {} }
end

local function indices(steps)
  local out = {}
  for i, s in ipairs(steps) do out[i] = s.index end
  return out
end

local function events(steps)
  local out = {}
  for i, s in ipairs(steps) do out[i] = s.event end
  return out
end

TestTrace = {}

function TestTrace:setUp()
  self.stores = {}
end

function TestTrace:tearDown()
  for _, s in ipairs(self.stores) do s:close() end
end

function TestTrace:connect(opts)
  local store, db = helper.connect(opts)
  self.stores[#self.stores + 1] = store
  return store, db
end

function TestTrace:test_commits_stamp_indices_0_1_2()
  local store, db = self:connect()
  local exe = new_exe()
  lu.assertTrue(store:commit(exe, { trace = { event = "Start", from = ms.null, to = "A" } }))
  lu.assertTrue(store:commit(exe, { trace = { event = "Go", from = "A", to = "B" } }))
  lu.assertTrue(store:save(exe))                                  -- no trace step
  lu.assertTrue(store:commit(exe, { trace = { event = "Stop", from = "B", to = "C", extra = { n = ms.array { 1, 2 } } } }))
  local steps = store:read_trace(exe.id)
  lu.assertEquals(#steps, 3)
  lu.assertEquals(indices(steps), { 0, 1, 2 })
  for _, s in ipairs(steps) do lu.assertEquals(math.type(s.index), "integer") end
  lu.assertEquals(events(steps), { "Start", "Go", "Stop" })
  lu.assertEquals(steps[2].from, "A")
  lu.assertEquals(steps[2].to, "B")
  lu.assertEquals(steps[1].from, ms.null)
  lu.assertEquals(steps[3].extra, { n = { 1, 2 } })
  lu.assertTrue(ms.is_array(steps[3].extra.n))

  local doc = raw.doc(db, exe.id)
  lu.assertEquals(#doc.trace, 3)
  lu.assertEquals(indices(doc.trace), { 0, 1, 2 })
  lu.assertEquals(raw.keys(doc.trace[2]), { "event", "from", "index", "to" })
  lu.assertEquals(doc.trace[2].event, "Go")
end

function TestTrace:test_indices_are_per_execution()
  local store = self:connect()
  local a, b = new_exe(), new_exe()
  lu.assertTrue(store:commit(a, { trace = { event = "a0" } }))
  lu.assertTrue(store:commit(b, { trace = { event = "b0" } }))
  lu.assertTrue(store:commit(a, { trace = { event = "a1" } }))
  lu.assertTrue(store:commit(b, { trace = { event = "b1" } }))
  lu.assertEquals(indices(store:read_trace(a.id)), { 0, 1 })
  lu.assertEquals(indices(store:read_trace(b.id)), { 0, 1 })
  lu.assertEquals(events(store:read_trace(b.id)), { "b0", "b1" })
end

function TestTrace:test_ring_of_two_keeps_the_last_two_with_their_indices()
  local store, db = self:connect { trace_max = 2 }
  local exe = new_exe()
  for i = 0, 4 do
    lu.assertTrue(store:commit(exe, { trace = { event = "step" .. i } }))
  end
  local steps = store:read_trace(exe.id)
  lu.assertEquals(indices(steps), { 3, 4 })
  lu.assertEquals(events(steps), { "step3", "step4" })
  lu.assertEquals(#raw.doc(db, exe.id).trace, 2)
  lu.assertEquals(exe.version, 5)
end

function TestTrace:test_default_ring_keeps_two_hundred()
  local store, db = self:connect()
  local exe = new_exe()
  lu.assertTrue(store:save(exe))
  for i = 0, 204 do
    store:append_trace(exe.id, { event = "e" .. i })
  end
  local steps = store:read_trace(exe.id)
  lu.assertEquals(#steps, 200)
  lu.assertEquals(steps[1].index, 5)
  lu.assertEquals(steps[1].event, "e5")
  lu.assertEquals(steps[200].index, 204)
  lu.assertEquals(#raw.doc(db, exe.id).trace, 200)
end

function TestTrace:test_append_trace_continues_the_commit_indices()
  local store = self:connect()
  local exe = new_exe()
  lu.assertTrue(store:commit(exe, { trace = { event = "c0" } }))
  lu.assertTrue(store:commit(exe, { trace = { event = "c1" } }))
  store:append_trace(exe.id, { event = "manual", note = "by hand" })
  lu.assertTrue(store:commit(exe, { trace = { event = "c3" } }))
  local steps = store:read_trace(exe.id)
  lu.assertEquals(indices(steps), { 0, 1, 2, 3 })
  lu.assertEquals(events(steps), { "c0", "c1", "manual", "c3" })
  lu.assertEquals(steps[3].note, "by hand")
  -- append_trace writes only the trace: the execution is untouched
  local loaded = store:load(exe.id)
  lu.assertEquals(loaded.version, 3)
end

function TestTrace:test_append_trace_on_an_id_without_document()
  local store, db = self:connect()
  lu.assertEquals(#store:read_trace("ghost"), 0)
  store:append_trace("ghost", { event = "first" })
  store:append_trace("ghost", { event = "second" })
  local steps = store:read_trace("ghost")
  lu.assertEquals(indices(steps), { 0, 1 })
  lu.assertEquals(events(steps), { "first", "second" })
  local doc = raw.doc(db, "ghost")
  lu.assertNotNil(doc, "append_trace should upsert the document")
  lu.assertEquals(#doc.trace, 2)
  lu.assertNil(store:load("ghost"), "a trace-only document is not an execution")
end

function TestTrace:test_append_trace_honours_an_entrys_own_index()
  local store = self:connect()
  local exe = new_exe()
  lu.assertTrue(store:commit(exe, { trace = { event = "c0" } }))
  store:append_trace(exe.id, { event = "imported", index = 42 })
  store:append_trace(exe.id, { event = "after" })
  local steps = store:read_trace(exe.id)
  lu.assertEquals(#steps, 3)
  lu.assertEquals(steps[1].index, 0)
  lu.assertEquals(steps[2].index, 42)
  lu.assertEquals(steps[2].event, "imported")
  -- the stamped counter goes on from the commits, whatever the imported index
  lu.assertEquals(steps[3].event, "after")
  lu.assertTrue(steps[3].index >= 1 and steps[3].index < 42,
    "the next stamped index should come from the counter, got " .. tostring(steps[3].index))
end

function TestTrace:test_append_trace_respects_the_ring()
  local store = self:connect { trace_max = 2 }
  store:append_trace("ringed", { event = "a" })
  store:append_trace("ringed", { event = "b" })
  store:append_trace("ringed", { event = "c" })
  local steps = store:read_trace("ringed")
  lu.assertEquals(indices(steps), { 1, 2 })
  lu.assertEquals(events(steps), { "b", "c" })
end

function TestTrace:test_read_trace_of_absent_or_traceless_execution_is_empty()
  local store = self:connect()
  local none = store:read_trace("no-such-execution")
  lu.assertEquals(type(none), "table")
  lu.assertEquals(#none, 0)
  lu.assertNil(next(none))
  local exe = new_exe()
  lu.assertTrue(store:save(exe))
  local empty = store:read_trace(exe.id)
  lu.assertEquals(type(empty), "table")
  lu.assertEquals(#empty, 0)
end

function TestTrace:test_append_trace_does_not_disturb_the_caller_entry()
  local store = self:connect()
  local entry = { event = "x" }
  store:append_trace("mine", entry)
  lu.assertEquals(entry, { event = "x" })
  local trace = { event = "y" }
  local exe = new_exe()
  lu.assertTrue(store:commit(exe, { trace = trace }))
  lu.assertEquals(trace, { event = "y" })
end
