-- spec/03-engine/persistence_spec.lua - executions survive restarts and crashes:
-- a flat execution resumes in a new process, orthogonal children persist and
-- join after a restart, a region that finishes at once is not lost, forks
-- committed but not yet relayed are created by a later recover(), a Finished
-- queued before a crash reaches its parent after it, and an event delivered
-- twice is applied once.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local C = require "fixtures.charts"

TestPersistence = {}

function TestPersistence:setUp()
  self.store, self.db = C.store()
  self.engine = C.engine(self.store)
end

function TestPersistence:tearDown()
  if self.store then self.store:close() end
  if self.store2 then self.store2:close() end
end

-- "Crash": drop the store and engine without relaying anything, then come
-- back with a new store handle and a new engine on the same database.
function TestPersistence:restart()
  self.store:close()
  self.store = nil
  self.store2 = C.store(self.db)
  self.engine2 = C.engine(self.store2)
  return self.store2, self.engine2
end

function TestPersistence:test_flat_execution_resumes_after_restart_in_a_new_process()
  -- the first life: another OS process starts the execution and sends Begin
  local out, status = helper.spawn([[
    local ms = require "mongostore"
    local C = require "fixtures.charts"
    local store = C.store(os.getenv("DB"))
    local engine = C.engine(store)
    assert(engine:start("flat", { id = "f-1", context = { owner = "first" } }) == "f-1")
    assert(engine:send("f-1", { kind = "Begin", id = "begin-1" }))
    local exe = store:load("f-1")
    print("FIRST " .. exe.active_path .. " " .. exe.version)
    store:close()
  ]], { DB = self.db, MONGOSTORE_TEST_URI = helper.uri() }).wait()
  lu.assertEquals(status, 0, out)
  lu.assertStrContains(out, "FIRST Working 2")
  self.store:close()

  -- the second life: a new store and engine in this process
  local store = C.store(self.db)
  self.store = store
  local engine = C.engine(store)
  local exe = C.load(store, "f-1")
  lu.assertEquals(exe.status, "RUNNING")
  lu.assertEquals(exe.active_path, "Working")
  lu.assertEquals(exe.version, 2)
  lu.assertEquals(exe.context.owner, "first")
  lu.assertEquals(exe.context.worked, 1)

  -- starting the same id again is the same execution: no second Start
  lu.assertEquals(engine:start("flat", { id = "f-1", context = { owner = "second" } }), "f-1")
  -- Begin again (the first life's event id) changes nothing
  lu.assertTrue(engine:send("f-1", { kind = "Begin", id = "begin-1" }))
  exe = C.load(store, "f-1")
  lu.assertEquals(exe.version, 2)
  lu.assertEquals(exe.context.owner, "first")
  lu.assertEquals(exe.context.worked, 1)

  lu.assertTrue(engine:send("f-1", { kind = "Finish", id = "finish-1" }))
  exe = C.load(store, "f-1")
  lu.assertEquals(exe.status, "DONE")
  lu.assertEquals(exe.outcome, "success")
  lu.assertEquals(exe.active_path, "Done")
  lu.assertEquals(exe.version, 3)
  lu.assertEquals(exe.context.done, 1)
  local kinds, ids = C.trace(store, "f-1")
  lu.assertEquals(kinds, { "Start", "Begin", "Finish" })
  lu.assertEquals(ids, { "start:f-1", "begin-1", "finish-1" })
end

function TestPersistence:test_orthogonal_children_persist_and_join_after_restart()
  local e = self.engine
  lu.assertEquals(e:start("fork", { id = "p", context = { n = 7 } }), "p")
  lu.assertTrue(e:send("p", { kind = "Begin", id = "begin" }))
  C.drain(e)
  local parent = C.load(self.store, "p")
  lu.assertEquals(parent.active_path, "Fork")
  local a, b = C.child(parent, "Fork.A"), C.child(parent, "Fork.B")
  lu.assertEquals(a, "p:Fork.A:0")
  lu.assertEquals(b, "p:Fork.B:0")
  lu.assertTrue(e:send("p", { kind = "GoA", id = "go-a" }))
  C.drain(e)
  lu.assertEquals(C.load(self.store, a).status, "DONE")
  lu.assertEquals(C.load(self.store, b).status, "RUNNING")

  local store, e2 = self:restart()
  parent = C.load(store, "p")
  lu.assertEquals(parent.status, "RUNNING")
  lu.assertEquals(parent.active_path, "Fork")
  lu.assertTrue(parent.children[a].finished)
  lu.assertEquals(parent.children[a].outcome, "success")
  lu.assertFalse(parent.children[b].finished)
  local child_b = C.load(store, b)
  lu.assertEquals(child_b.status, "RUNNING")
  lu.assertEquals(child_b.active_path, "Fork.B.B1")
  lu.assertEquals(child_b.parent_id, "p")
  lu.assertEquals(child_b.root_path, "Fork.B")
  lu.assertEquals(child_b.context.n, 7, "a region starts with a copy of the parent's context")

  lu.assertTrue(e2:send("p", { kind = "GoB", id = "go-b" }))
  lu.assertTrue(C.wait_for(function() return C.load(store, "p").status == "DONE" end, e2))
  parent = C.load(store, "p")
  lu.assertEquals(parent.outcome, "success")
  lu.assertEquals(parent.active_path, "Done")
  lu.assertEquals(parent.context.done, 1)
  lu.assertEquals(parent.context.region_results["Fork.A"].outcome, "success")
  lu.assertEquals(parent.context.region_results["Fork.B"].outcome, "success")
  lu.assertEquals(parent.context.region_results["Fork.B"].context.b1, 1)
  lu.assertEquals(C.load(store, b).status, "DONE")
  lu.assertEquals(#assert(store:pending_outbox()), 0)
  lu.assertEquals(#assert(store:pending_spawns()), 0)
end

-- A region whose initial state is final finishes in its Start commit, before
-- the parent has even recorded anything of it but its spawn.
function TestPersistence:test_immediately_finishing_region_is_not_lost()
  local e = self.engine
  lu.assertEquals(e:start("quick", { id = "q" }), "q")
  lu.assertTrue(e:send("q", { kind = "Begin", id = "begin" }))
  C.drain(e)
  local parent = C.load(self.store, "q")
  local quick, slow = C.child(parent, "Fork.Quick"), C.child(parent, "Fork.Slow")
  lu.assertNotNil(quick)
  lu.assertNotNil(slow)
  lu.assertEquals(C.load(self.store, quick).status, "DONE")
  lu.assertEquals(C.load(self.store, quick).outcome, "success")
  lu.assertTrue(parent.children[quick].finished, "the parent lost the Finished of its quick region")
  lu.assertEquals(parent.status, "RUNNING")
  lu.assertEquals(parent.active_path, "Fork")

  lu.assertTrue(e:send("q", { kind = "Go", id = "go" }))
  C.drain(e)
  parent = C.load(self.store, "q")
  lu.assertEquals(parent.status, "DONE")
  lu.assertEquals(parent.outcome, "success")
  lu.assertEquals(parent.context.region_results["Fork.Quick"].outcome, "success")
  lu.assertEquals(parent.context.region_results["Fork.Slow"].outcome, "success")
end

-- The same, but the quick region's Finished is still in the outbox when the
-- process dies: the restart delivers it and the join still waits for Slow.
function TestPersistence:test_immediately_finishing_region_survives_a_crash()
  local e = self.engine
  e:start("quick", { id = "q" })
  lu.assertTrue(e:send("q", { kind = "Begin", id = "begin" }))
  lu.assertTrue(e:relay_spawns() >= 2)
  local quick = C.child(C.load(self.store, "q"), "Fork.Quick")
  lu.assertEquals(C.load(self.store, quick).status, "DONE")
  local finished = 0
  for _, entry in ipairs(assert(self.store:pending_outbox())) do
    if entry.target_id == "q" and entry.event.kind == "Finished" then finished = finished + 1 end
  end
  lu.assertEquals(finished, 1, "the quick region's Finished is queued")

  local store, e2 = self:restart()
  e2:recover()
  local parent = C.load(store, "q")
  lu.assertTrue(parent.children[quick].finished)
  lu.assertEquals(parent.active_path, "Fork")
  lu.assertTrue(e2:send("q", { kind = "Go", id = "go" }))
  e2:recover()
  parent = C.load(store, "q")
  lu.assertEquals(parent.status, "DONE")
  lu.assertEquals(parent.outcome, "success")
  lu.assertEquals(parent.context.region_results["Fork.Quick"].outcome, "success")
end

function TestPersistence:test_fork_children_survive_a_crash_between_commit_and_relay()
  local e = self.engine
  e:start("fork", { id = "p", context = { n = 1 } })
  lu.assertTrue(e:send("p", { kind = "Begin", id = "begin" }))
  -- committed with the parent, not yet created
  local spawns = assert(self.store:pending_spawns())
  lu.assertEquals(#spawns, 2)
  local pending = {}
  for _, s in ipairs(spawns) do
    lu.assertEquals(s.parent_id, "p")
    pending[s.child_id] = s.root_path
  end
  lu.assertEquals(pending, { ["p:Fork.A:0"] = "Fork.A", ["p:Fork.B:0"] = "Fork.B" })
  lu.assertNil(self.store:load("p:Fork.A:0"))
  lu.assertNil(self.store:load("p:Fork.B:0"))

  local store, e2 = self:restart()
  lu.assertTrue(e2:recover() >= 2)
  lu.assertEquals(#assert(store:pending_spawns()), 0)
  for cid, root in pairs(pending) do
    local child = C.load(store, cid)
    lu.assertEquals(child.status, "RUNNING")
    lu.assertEquals(child.root_path, root)
    lu.assertEquals(child.parent_id, "p")
    lu.assertEquals(child.version, 1, "a child is created by one commit (its Start)")
  end
  -- a second recover creates nothing again
  lu.assertEquals(e2:recover(), 0)
  lu.assertEquals(C.load(store, "p:Fork.A:0").version, 1)

  lu.assertTrue(e2:send("p", { kind = "GoA", id = "go-a" }))
  lu.assertTrue(e2:send("p", { kind = "GoB", id = "go-b" }))
  e2:recover()
  local parent = C.load(store, "p")
  lu.assertEquals(parent.status, "DONE")
  lu.assertEquals(parent.outcome, "success")
  lu.assertEquals(parent.active_path, "Done")
  lu.assertEquals(parent.context.done, 1)
end

function TestPersistence:test_finished_emitted_before_a_crash_is_delivered_after_it()
  local e = self.engine
  e:start("fork", { id = "p" })
  lu.assertTrue(e:send("p", { kind = "Begin", id = "begin" }))
  C.drain(e)
  local a, b = "p:Fork.A:0", "p:Fork.B:0"
  -- region A finishes; its Finished is committed to the outbox, not relayed
  lu.assertTrue(e:send(a, { kind = "GoA", id = "go-a" }))
  lu.assertEquals(C.load(self.store, a).status, "DONE")
  local queued
  for _, entry in ipairs(assert(self.store:pending_outbox())) do
    if entry.target_id == "p" and entry.event.kind == "Finished" then queued = entry end
  end
  lu.assertNotNil(queued, "the region's Finished is in the outbox")
  lu.assertEquals(queued.event.data.child_id, a)
  lu.assertFalse(C.load(self.store, "p").children[a].finished)

  local store, e2 = self:restart()
  e2:recover()
  local parent = C.load(store, "p")
  lu.assertTrue(parent.children[a].finished, "the Finished queued before the crash was lost")
  lu.assertEquals(parent.children[a].outcome, "success")
  lu.assertEquals(parent.status, "RUNNING")
  lu.assertEquals(#assert(store:pending_outbox()), 0)

  lu.assertTrue(e2:send(b, { kind = "GoB", id = "go-b" }))
  e2:recover()
  parent = C.load(store, "p")
  lu.assertEquals(parent.status, "DONE")
  lu.assertEquals(parent.outcome, "success")
  lu.assertEquals(C.trace_counts(store, "p")["finished:" .. a], 1)
  lu.assertEquals(C.trace_counts(store, "p")["finished:" .. b], 1)
end

function TestPersistence:test_duplicate_event_is_processed_once()
  local e = self.engine
  e:start("flat", { id = "f" })
  local ev = { kind = "Begin", id = "evt-1" }
  lu.assertTrue(e:send("f", ev))
  local exe = C.load(self.store, "f")
  local version, processed = exe.version, exe.processed_events
  lu.assertEquals(exe.context.worked, 1)
  for _ = 1, 3 do
    lu.assertTrue(e:send("f", { kind = "Begin", id = "evt-1" }))
  end
  -- a duplicate of another kind under the same id is the same event too
  lu.assertTrue(e:send("f", { kind = "Finish", id = "evt-1" }))
  lu.assertEquals(e:deliver("f", { kind = "Begin", id = "evt-1", data = {} }), true)
  lu.assertEquals(select(2, e:deliver("f", { kind = "Begin", id = "evt-1", data = {} })), "duplicate")
  exe = C.load(self.store, "f")
  lu.assertEquals(exe.version, version)
  lu.assertEquals(exe.processed_events, processed)
  lu.assertEquals(exe.context.worked, 1)
  lu.assertEquals(exe.active_path, "Working")
  lu.assertEquals(C.trace_counts(self.store, "f")["evt-1"], 1)

  -- and after a restart, by another engine
  local store, e2 = self:restart()
  lu.assertTrue(e2:send("f", { kind = "Begin", id = "evt-1" }))
  lu.assertEquals(C.load(store, "f").version, version)
end

function TestPersistence:test_duplicate_event_forwarded_to_regions_is_processed_once()
  local e = self.engine
  e:start("fork", { id = "p" })
  e:send("p", { kind = "Begin", id = "begin" })
  C.drain(e)
  lu.assertTrue(e:send("p", { kind = "Nudge", id = "n-1" }))
  local v = C.load(self.store, "p").version
  lu.assertTrue(e:send("p", { kind = "Nudge", id = "n-1" }))
  C.drain(e)
  lu.assertEquals(C.load(self.store, "p").version, v)
  for _, cid in ipairs { "p:Fork.A:0", "p:Fork.B:0" } do
    local counts = C.trace_counts(self.store, cid)
    lu.assertEquals(counts["n-1@" .. cid], 1, "forwarded once to " .. cid)
    lu.assertEquals(C.load(self.store, cid).version, 2)
  end
end

-- A relay that died after its delivery committed and before its ack: the
-- entry is still pending, and the next relay finds it applied.
function TestPersistence:test_outbox_entry_applied_but_not_acked_before_a_crash_is_not_applied_again()
  local e = self.engine
  e:start("fork", { id = "p" })
  e:send("p", { kind = "Begin", id = "begin" })
  lu.assertTrue(e:relay_spawns() == 2)
  lu.assertTrue(e:send("p", { kind = "GoA", id = "go-a" }))
  local entries = assert(self.store:pending_outbox())
  lu.assertEquals(#entries, 2, "GoA forwarded to both regions")
  -- what the dying relay did: deliver, no ack
  for _, entry in ipairs(entries) do
    lu.assertEquals(select(2, e:deliver(entry.target_id, entry.event)), "applied")
  end
  local a = "p:Fork.A:0"
  local version_a = C.load(self.store, a).version

  local store, e2 = self:restart()
  local still = {}
  for _, entry in ipairs(assert(store:pending_outbox())) do still[entry.seq] = true end
  for _, entry in ipairs(entries) do lu.assertTrue(still[entry.seq], "entry " .. entry.seq .. " is still pending") end
  e2:recover()
  lu.assertEquals(#assert(store:pending_outbox()), 0)
  lu.assertEquals(C.load(store, a).version, version_a, "the redelivered GoA was applied again")
  lu.assertEquals(C.trace_counts(store, a)["go-a@" .. a], 1)
  lu.assertTrue(C.load(store, "p").children[a].finished)
end

-- A spawn relay that died after creating the child and before its ack.
function TestPersistence:test_child_created_but_not_acked_before_a_crash_is_not_created_again()
  local e = self.engine
  e:start("fork", { id = "p" })
  e:send("p", { kind = "Begin", id = "begin" })
  local spawns = assert(self.store:pending_spawns())
  lu.assertEquals(#spawns, 2)
  local s = spawns[1]
  -- what the dying relay did: create, no ack; the child then moves on
  lu.assertTrue(e:create{ definition_id = "fork", id = s.child_id, root_path = s.root_path,
                          parent_id = s.parent_id, child_id = s.child_id, context = s.context or {} })
  local region = s.root_path == "Fork.A" and "GoA" or "GoB"
  lu.assertTrue(e:send(s.child_id, { kind = region, id = "direct" }))
  local child = C.load(self.store, s.child_id)
  lu.assertEquals(child.status, "DONE")
  local version = child.version

  local store, e2 = self:restart()
  e2:recover()
  lu.assertEquals(#assert(store:pending_spawns()), 0)
  child = C.load(store, s.child_id)
  lu.assertEquals(child.version, version, "the spawn relay touched an existing child")
  lu.assertEquals(child.status, "DONE")
  lu.assertEquals(C.trace_counts(store, s.child_id)["start:" .. s.child_id], 1)
end

-- A sweep that died after its Timeout committed and before it deleted the timer.
function TestPersistence:test_timeout_applied_but_timer_not_deleted_before_a_crash_fires_once()
  local e = self.engine
  e:start("timed", { id = "t", context = { wait = 0.2 } })
  e:send("t", { kind = "Begin", id = "begin" })
  local due = C.wait_for(function()
    local list = assert(self.store:due_timers(ms.now()))
    return #list > 0 and list or nil
  end)
  lu.assertNotNil(due)
  local t = due[1]
  local runtime = require "mongostore.runtime"
  lu.assertEquals(select(2, e:deliver(t.execution_id, runtime.timeout_event(t.execution_id, t.path, t.fire_at), t.path)),
    "applied")
  local exe = C.load(self.store, "t")
  lu.assertEquals(exe.context.timeouts, 1)
  local version = exe.version

  local store, e2 = self:restart()
  e2:recover()
  exe = C.load(store, "t")
  lu.assertEquals(exe.version, version)
  lu.assertEquals(exe.context.timeouts, 1)
  lu.assertEquals(C.timers(store, "t"), {})
end
