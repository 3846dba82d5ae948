-- spec/02-store/commit_spec.lua - the CAS commit: insert on first save, version
-- bumps, the JSON round trip of an Execution, stale writes and racing inserts,
-- load / load_for_event / is_processed, read-only fields and the exact shape
-- of the stored document.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local raw = require "helpers.rawdb"

-- The seed's fields, plus what the store promotes for its indexes: status and
-- parent_id (listing) and next_fire_at (the timer sweep), and the dedupe
-- digests.
local DOC_FIELDS = { "_id", "data", "dedupe", "definition_id", "next_fire_at", "outbox", "parent_id", "processed",
                     "spawns", "status", "timers", "trace", "version" }
local DATA_FIELDS = {
  "active_path", "child_id", "children", "context", "created_at", "deferred", "definition_fqn",
  "definition_id", "error", "expires_at", "finished_at", "history", "id", "invoke_seq", "outcome",
  "parent_id", "priority", "processed_events", "root_path", "status", "updated_at", "version",
}

local function new_exe(ctx, id)
  return ms.execution { definition_id = "order", id = id, context = ctx or {} }
end

local rich_context = require("fixtures.contexts").rich_context

TestCommit = {}

function TestCommit:setUp()
  self.store, self.db = helper.connect()
end

function TestCommit:tearDown()
  if self.store then self.store:close() end
end

function TestCommit:test_new_execution_has_harels_defaults()
  local exe = new_exe()
  lu.assertStrMatches(exe.id, ("%x"):rep(32))
  lu.assertEquals(exe.definition_id, "order")
  lu.assertEquals(exe.version, 0)
  lu.assertEquals(exe.status, "PENDING")
  lu.assertEquals(exe.root_path, "")
  lu.assertEquals(exe.processed_events, 0)
  lu.assertEquals(exe.priority, 0)
  lu.assertEquals(exe.context, {})
  lu.assertEquals(exe.history, {})
  lu.assertNotEquals(new_exe().id, exe.id)
  local named = ms.execution { definition_id = "order", id = "exe-1" }
  lu.assertEquals(named.id, "exe-1")
end

function TestCommit:test_first_save_inserts_and_bumps_version_to_one()
  local exe = new_exe({ n = 1 })
  lu.assertNil(raw.doc(self.db, exe.id))
  local ok, err, code = self.store:save(exe)
  lu.assertTrue(ok, tostring(err) .. " " .. tostring(code))
  lu.assertEquals(exe.version, 1)
  local doc = raw.doc(self.db, exe.id)
  lu.assertNotNil(doc, "the first save inserted no document")
  lu.assertEquals(doc.version, 1)
  lu.assertEquals(math.type(doc.version), "integer")
  lu.assertEquals(doc.definition_id, "order")
  local data = raw.data(self.db, exe.id)
  lu.assertEquals(data.version, 1, "data carries the version too")
  lu.assertEquals(data.id, exe.id)
  local loaded = self.store:load(exe.id)
  lu.assertEquals(loaded.version, 1)
  lu.assertEquals(loaded.id, exe.id)
  lu.assertEquals(loaded.context, { n = 1 })
end

function TestCommit:test_three_saves_give_version_three()
  local exe = new_exe()
  for i = 1, 3 do
    exe.context = { step = i }
    local ok, err = self.store:save(exe)
    lu.assertTrue(ok, err)
    lu.assertEquals(exe.version, i)
  end
  lu.assertEquals(raw.doc(self.db, exe.id).version, 3)
  lu.assertEquals(raw.data(self.db, exe.id).version, 3)
  local loaded = self.store:load(exe.id)
  lu.assertEquals(loaded.version, 3)
  lu.assertEquals(loaded.context, { step = 3 })
  lu.assertEquals(raw.count(self.db), 1, "saves of one execution made more than one document")
end

function TestCommit:test_save_after_load_continues_the_versions()
  local exe = new_exe()
  lu.assertTrue(self.store:save(exe))
  local again = self.store:load(exe.id)
  again.status = "RUNNING"
  lu.assertTrue(self.store:save(again))
  lu.assertEquals(again.version, 2)
  local third = self.store:load(exe.id)
  lu.assertEquals(third.status, "RUNNING")
  lu.assertEquals(third.version, 2)
end

function TestCommit:test_json_round_trip_keeps_context_intact()
  local exe = new_exe(rich_context())
  lu.assertTrue(self.store:save(exe))
  local loaded = self.store:load(exe.id)
  local want, got = rich_context(), loaded.context
  lu.assertEquals(got, want)

  -- what assertEquals does not look at: number subtypes and array marks
  for _, k in ipairs { "int_small", "int_negative", "int_zero", "int_big", "int_big_negative", "int_max", "int_min" } do
    lu.assertEquals(math.type(got[k]), "integer", k)
    lu.assertEquals(got[k], want[k], k)
  end
  for _, k in ipairs { "float_tenth", "float_negative", "float_integral", "float_huge", "float_tiny",
                       "float_pi", "float_beyond_int64", "float_1e20" } do
    lu.assertEquals(math.type(got[k]), "float", k)
    lu.assertEquals(got[k], want[k], k)
  end
  lu.assertEquals(got.int_big, 9007199254740993)
  lu.assertEquals(got.int_big - 1, 9007199254740992, "the big integer lost precision")
  lu.assertEquals(got.nothing, ms.null)
  lu.assertEquals(got.nul_inside, "a\0b")
  lu.assertEquals(#got.nul_inside, 3)
  lu.assertTrue(ms.is_array(got.list))
  lu.assertEquals(got.list[5], ms.null)
  lu.assertTrue(ms.is_array(got.list[7]))
  lu.assertFalse(ms.is_array(got.list[6]))
  lu.assertTrue(ms.is_array(got.plain_sequence))
  lu.assertTrue(ms.is_array(got.empty_array), "an empty array came back as an object")
  lu.assertFalse(ms.is_array(got.empty_object), "an empty object came back as an array")
  lu.assertTrue(ms.is_array(got.nested_empty.inner_array))
  lu.assertFalse(ms.is_array(got.nested_empty.inner_object))
  lu.assertTrue(ms.is_array(got.array_of_empties[1]))
  lu.assertFalse(ms.is_array(got.array_of_empties[2]))
  lu.assertFalse(ms.is_array(got))
  lu.assertEquals(got["1"], want["1"])
  lu.assertNil(got[1], "a string key came back as an integer key")
  lu.assertEquals(got.nested.a.b.c.d.e, "deep")

  -- and the stored JSON says the same to an independent parser (Python's json)
  local data = raw.data(self.db, exe.id)
  local ctx = data.context
  lu.assertEquals(ctx.int_big, 9007199254740993)
  lu.assertEquals(math.type(ctx.int_big), "integer")
  lu.assertEquals(ctx.int_max, math.maxinteger)
  lu.assertEquals(ctx.int_min, math.mininteger)
  lu.assertEquals(math.type(ctx.float_integral), "float", "1.0 was written as an integer")
  lu.assertEquals(math.type(ctx.float_beyond_int64), "float")
  lu.assertEquals(ctx.float_tenth, 0.1)
  lu.assertEquals(ctx.float_tiny, 5e-324)
  lu.assertEquals(ctx.unicode, want.unicode)
  lu.assertEquals(ctx.escapes, want.escapes)
  lu.assertEquals(ctx.nul_inside, "a\0b")
  lu.assertEquals(ctx.nothing, ms.null)
  lu.assertTrue(ms.is_array(ctx.empty_array))
  lu.assertFalse(ms.is_array(ctx.empty_object))
  lu.assertEquals(ctx["dotted.key"], 1)
  lu.assertEquals(ctx["$dollar"], 2)
end

function TestCommit:test_other_fields_round_trip()
  local exe = new_exe()
  exe.status = "RUNNING"
  exe.outcome = "approved"
  exe.error = "ValueError: nope"
  exe.active_path = "Main.Fork.A"
  exe.history = { ["Main"] = "Main.Fork" }
  exe.processed_events = 12
  exe.priority = 4
  exe.parent_id = "parent-1"
  exe.child_id = "c1"
  exe.root_path = "Main.Fork.A"
  exe.definition_fqn = "pkg.order"
  exe.invoke_seq = { ["Main.Fork"] = 3 }
  exe.children = { c1 = { root_path = "Main.Fork.A", finished = true, outcome = "ok",
                          result = { total = 3 }, submachine = false, key = "A" } }
  exe.deferred = { { id = "d1", kind = "Later", data = { x = 1 }, created_time = 1764500000.25 } }
  exe.created_at = 1764500000.5
  exe.updated_at = 1764500001.75
  exe.finished_at = 1764500002.125
  exe.expires_at = 1764503600.0
  lu.assertTrue(self.store:save(exe))
  local got = self.store:load(exe.id)
  lu.assertEquals(got.status, "RUNNING")
  lu.assertEquals(got.outcome, "approved")
  lu.assertEquals(got.error, "ValueError: nope")
  lu.assertEquals(got.active_path, "Main.Fork.A")
  lu.assertEquals(got.history, { ["Main"] = "Main.Fork" })
  lu.assertEquals(got.processed_events, 12)
  lu.assertEquals(got.priority, 4)
  lu.assertEquals(got.parent_id, "parent-1")
  lu.assertEquals(got.child_id, "c1")
  lu.assertEquals(got.root_path, "Main.Fork.A")
  lu.assertEquals(got.definition_fqn, "pkg.order")
  lu.assertEquals(got.invoke_seq, { ["Main.Fork"] = 3 })
  lu.assertEquals(got.children.c1.root_path, "Main.Fork.A")
  lu.assertEquals(got.children.c1.finished, true)
  lu.assertEquals(got.children.c1.outcome, "ok")
  lu.assertEquals(got.children.c1.result, { total = 3 })
  lu.assertEquals(got.children.c1.key, "A")
  lu.assertEquals(#got.deferred, 1)
  lu.assertEquals(got.deferred[1].id, "d1")
  lu.assertEquals(got.deferred[1].kind, "Later")
  lu.assertEquals(got.deferred[1].data, { x = 1 })
  lu.assertAlmostEquals(got.deferred[1].created_time, 1764500000.25, 1e-6)
  lu.assertEquals(got.created_at, 1764500000.5)
  lu.assertEquals(got.updated_at, 1764500001.75)
  lu.assertEquals(got.finished_at, 1764500002.125)
  lu.assertEquals(got.expires_at, 1764503600.0)

  -- the stored JSON uses harel's names and shapes
  local data = raw.data(self.db, exe.id)
  lu.assertEquals(data.status, "RUNNING")
  lu.assertEquals(data.priority, 4)
  lu.assertEquals(data.children.c1.finished, true)
  lu.assertTrue(ms.is_array(data.deferred))
  lu.assertEquals(type(data.deferred[1].created_time), "string", "event times are ISO-8601 strings in the JSON")
  lu.assertStrMatches(data.deferred[1].created_time, "2025%-11%-30T10:53:20%.25.*")
end

function TestCommit:test_context_mutated_in_place_is_saved()
  local exe = new_exe({ count = 1, items = ms.array { "a" } })
  lu.assertTrue(self.store:save(exe))
  local loaded = self.store:load(exe.id)
  loaded.context.count = loaded.context.count + 1
  loaded.context.items[#loaded.context.items + 1] = "b"
  lu.assertTrue(self.store:save(loaded))
  local again = self.store:load(exe.id)
  lu.assertEquals(again.context.count, 2)
  lu.assertEquals(again.context.items, { "a", "b" })
end

function TestCommit:test_load_of_absent_id_is_nil()
  lu.assertNil(self.store:load("no-such-execution"))
  lu.assertNil(self.store:load(ms.uuid()))
end

function TestCommit:test_stale_write_conflicts_and_the_winner_stands()
  local exe = new_exe({ who = "nobody" })
  lu.assertTrue(self.store:save(exe))
  local a = self.store:load(exe.id)
  local b = self.store:load(exe.id)
  lu.assertEquals(a.version, 1)
  lu.assertEquals(b.version, 1)

  a.context = { who = "a" }
  lu.assertTrue(self.store:commit(a, {
    emits = { { target_id = "sink", event = { id = "winner-evt", kind = "A" } } },
    processed_event_id = "winner-p",
  }))
  lu.assertEquals(a.version, 2)

  b.context = { who = "b" }
  local ok, msg, code, detail = self.store:commit(b, {
    emits = { { target_id = "sink", event = { id = "loser-evt", kind = "B" } } },
    processed_event_id = "loser-p",
    timers = { { action = "schedule", path = "Loser.T", fire_at = 1.5 } },
    spawns = { { child_id = "loser-child", root_path = "Loser", context = { x = 1 } } },
    trace = { event = "B", from = "X", to = "Y" },
  })
  lu.assertNil(ok)
  lu.assertEquals(code, "conflict")
  lu.assertEquals(detail.found, 2)
  lu.assertIsString(msg)
  lu.assertStrContains(msg, exe.id)
  lu.assertStrMatches(msg, ".*[Ee]xpected%D*1.*")
  lu.assertStrMatches(msg, ".*[Ff]ound%D*2.*")
  lu.assertEquals(b.version, 1, "the loser's in-memory version was not rolled back")

  -- the winner's state stands, none of the loser's effects landed
  local now = self.store:load(exe.id)
  lu.assertEquals(now.version, 2)
  lu.assertEquals(now.context, { who = "a" })
  local outbox = self.store:pending_outbox()
  lu.assertEquals(#outbox, 1)
  lu.assertEquals(outbox[1].event.id, "winner-evt")
  lu.assertTrue(self.store:is_processed(exe.id, "winner-p"))
  lu.assertFalse(self.store:is_processed(exe.id, "loser-p"))
  lu.assertEquals(#self.store:due_timers(1e12), 0)
  lu.assertEquals(#self.store:pending_spawns(), 0)
  lu.assertEquals(#self.store:read_trace(exe.id), 0)
  local doc = raw.doc(self.db, exe.id)
  lu.assertEquals(doc.version, 2)
  lu.assertEquals(#doc.outbox, 1)
  lu.assertEquals(#doc.spawns, 0)
  lu.assertEquals(#doc.trace, 0)
  lu.assertEquals(doc.processed, { "winner-p" })
  lu.assertEquals(raw.keys(doc.timers), {})

  -- the same stale object keeps conflicting; a reload lets it win
  local ok2, _, code2, detail2 = self.store:save(b)
  lu.assertNil(ok2)
  lu.assertEquals(code2, "conflict")
  lu.assertEquals(detail2.found, 2)
  lu.assertEquals(b.version, 1)
  local fresh = self.store:load(exe.id)
  fresh.context.who = "b after reload"
  lu.assertTrue(self.store:save(fresh))
  lu.assertEquals(fresh.version, 3)
  lu.assertEquals(self.store:load(exe.id).context.who, "b after reload")
end

function TestCommit:test_new_execution_on_a_taken_id_conflicts_with_found_one()
  local id = "exe-" .. ms.uuid()
  local first = ms.execution { definition_id = "order", id = id, context = { who = "first" } }
  local second = ms.execution { definition_id = "order", id = id, context = { who = "second" } }
  lu.assertTrue(self.store:save(first))
  local ok, msg, code, detail = self.store:commit(second, {
    emits = { { target_id = "sink", event = { id = "second-evt", kind = "X" } } },
  })
  lu.assertNil(ok)
  lu.assertEquals(code, "conflict")
  lu.assertEquals(detail.found, 1)
  lu.assertStrContains(msg, id)
  lu.assertEquals(second.version, 0)
  lu.assertEquals(self.store:load(id).context.who, "first")
  lu.assertEquals(#self.store:pending_outbox(), 0)
end

function TestCommit:test_commit_on_a_vanished_document_conflicts_with_found_nil()
  local exe = new_exe()
  lu.assertTrue(self.store:save(exe))
  lu.assertEquals(raw.delete(self.db, exe.id), 1)
  local ok, _, code, detail = self.store:commit(exe, {
    emits = { { target_id = "sink", event = { kind = "X" } } },
  })
  lu.assertNil(ok)
  lu.assertEquals(code, "conflict")
  lu.assertNil(detail and detail.found)
  lu.assertEquals(exe.version, 1)
  lu.assertNil(raw.doc(self.db, exe.id), "a stale commit re-created a deleted execution")
  lu.assertEquals(#self.store:pending_outbox(), 0)
end

-- Several processes insert the same new id at once: one wins, every other
-- one gets conflict with found = 1, and only the winner's effects exist.
function TestCommit:test_racing_inserts_on_one_new_id()
  local id = "race-" .. ms.uuid()
  local n = 6
  local start_at = ms.now() + 1.5
  local code = [[
    local ms = require "mongostore"
    local store = assert(ms.connect(os.getenv("MONGOSTORE_TEST_URI"), { db = os.getenv("DB"), wait = 10 }))
    local me = os.getenv("ME")
    local exe = ms.execution { definition_id = "order", id = os.getenv("ID"), context = { who = me } }
    local t = tonumber(os.getenv("START"))
    while ms.now() < t do ms.sleep(0.005) end
    local ok, msg, code, detail = store:commit(exe, {
      emits = { { target_id = "sink", event = { id = "evt-" .. me, kind = "Hello" } } },
      processed_event_id = "p-" .. me,
    })
    if ok then
      print("WON " .. me .. " " .. exe.version)
    else
      print("LOST " .. me .. " " .. tostring(code) .. " " .. tostring(detail and detail.found) .. " " .. exe.version .. " " .. tostring(msg))
    end
    store:close()
  ]]
  local procs = {}
  for i = 1, n do
    procs[i] = helper.spawn(code, { DB = self.db, ID = id, ME = "p" .. i, START = string.format("%.6f", start_at) })
  end
  local winners, losers = {}, 0
  for i = 1, n do
    local out, status = procs[i].wait()
    lu.assertEquals(status, 0, out)
    local who, version = out:match("WON (%S+) (%d+)")
    if who then
      winners[#winners + 1] = who
      lu.assertEquals(tonumber(version), 1, out)
    else
      local lcode, lfound, lversion = out:match("LOST %S+ (%S+) (%S+) (%d+)")
      lu.assertEquals(lcode, "conflict", out)
      lu.assertEquals(lfound, "1", out)
      lu.assertEquals(lversion, "0", "a loser's version was not rolled back: " .. out)
      losers = losers + 1
    end
  end
  lu.assertEquals(#winners, 1, "exactly one insert must win")
  lu.assertEquals(losers, n - 1)

  local winner = winners[1]
  local exe = self.store:load(id)
  lu.assertEquals(exe.version, 1)
  lu.assertEquals(exe.context.who, winner)
  local outbox = self.store:pending_outbox()
  lu.assertEquals(#outbox, 1, "a loser's emit reached the outbox")
  lu.assertEquals(outbox[1].event.id, "evt-" .. winner)
  local doc = raw.doc(self.db, id)
  lu.assertEquals(doc.processed, { "p-" .. winner })
  lu.assertEquals(raw.count(self.db), 1)
end

function TestCommit:test_load_for_event_and_is_processed()
  local exe = new_exe({ k = "v" })
  lu.assertTrue(self.store:save(exe))

  local got, processed = self.store:load_for_event(exe.id, "evt-1")
  lu.assertNotNil(got)
  lu.assertEquals(got.id, exe.id)
  lu.assertEquals(got.version, 1)
  lu.assertEquals(got.context, { k = "v" })
  lu.assertFalse(processed)
  lu.assertFalse(self.store:is_processed(exe.id, "evt-1"))

  lu.assertTrue(self.store:commit(got, { processed_event_id = "evt-1" }))
  local again, processed2 = self.store:load_for_event(exe.id, "evt-1")
  lu.assertEquals(again.version, 2)
  lu.assertTrue(processed2)
  lu.assertTrue(self.store:is_processed(exe.id, "evt-1"))
  local _, other = self.store:load_for_event(exe.id, "evt-2")
  lu.assertFalse(other)
  lu.assertFalse(self.store:is_processed(exe.id, "evt-2"))
  -- the mark belongs to its execution only
  local stranger = new_exe()
  lu.assertTrue(self.store:save(stranger))
  lu.assertFalse(self.store:is_processed(stranger.id, "evt-1"))
  local _, sp = self.store:load_for_event(stranger.id, "evt-1")
  lu.assertFalse(sp)

  local none, np = self.store:load_for_event("no-such-execution", "evt-1")
  lu.assertNil(none)
  lu.assertFalse(np)
  lu.assertFalse(self.store:is_processed("no-such-execution", "evt-1"))
end

function TestCommit:test_commit_refuses_an_event_already_processed()
  -- the caller skipped the check (or raced a redelivery): the commit is
  -- guarded on the mark itself, so an event is applied once
  local exe = new_exe({ n = 1 })
  lu.assertTrue(self.store:save(exe))
  lu.assertTrue(self.store:commit(exe, { processed_event_id = "evt-1" }))
  local again = assert(self.store:load(exe.id))
  again.context.n = 2
  local ok, msg, code, detail = self.store:commit(again, {
    processed_event_id = "evt-1",
    emits = { { target_id = "t", event = { id = "out-1", kind = "K" } } },
    timers = { { action = "schedule", path = "Waiting", fire_at = 5 } },
  })
  lu.assertNil(ok)
  lu.assertEquals(code, "duplicate")
  lu.assertStrContains(msg, "evt-1")
  lu.assertStrContains(msg, "already processed")
  lu.assertEquals(detail.found, 2)
  lu.assertEquals(again.version, 2, "the version stays where it was")
  local doc = raw.doc(self.db, exe.id)
  lu.assertEquals(doc.version, 2)
  lu.assertEquals(doc.processed, { "evt-1" })
  lu.assertEquals(#doc.outbox, 0, "nothing of the refused commit is queued")
  lu.assertEquals(raw.keys(doc.timers), {})
  lu.assertEquals(assert(self.store:load(exe.id)).context.n, 1)
  -- another event goes through; a stale write of a new event is a conflict,
  -- and of an event it applied itself still a duplicate
  lu.assertTrue(self.store:commit(again, { processed_event_id = "evt-2" }))
  local stale = exe
  local _, _, c2 = self.store:commit(stale, { processed_event_id = "evt-3" })
  lu.assertEquals(c2, "conflict")
  local _, _, c3 = self.store:commit(stale, { processed_event_id = "evt-1" })
  lu.assertEquals(c3, "duplicate")
end

function TestCommit:test_the_filter_refuses_a_mark_the_digests_do_not_know()
  -- a mark only in `processed` (harel's store writes no digests): the
  -- commit's filter refuses it on the server
  local exe = new_exe()
  lu.assertTrue(self.store:commit(exe, { processed_event_id = "evt-h" }))
  raw.unset(self.db, exe.id, "dedupe")
  local got = assert(self.store:load(exe.id))
  local ok, msg, code, detail = self.store:commit(got, { processed_event_id = "evt-h",
    emits = { { target_id = "t", event = { id = "out-h", kind = "K" } } } })
  lu.assertNil(ok)
  lu.assertEquals(code, "duplicate")
  lu.assertStrContains(msg, "evt-h")
  lu.assertEquals(detail.found, 1)
  lu.assertEquals(#raw.doc(self.db, exe.id).outbox, 0)
  lu.assertTrue(self.store:is_processed(exe.id, "evt-h"))
  local _, seen = self.store:load_for_event(exe.id, "evt-h")
  lu.assertTrue(seen)
  -- the next mark starts the digests again
  lu.assertTrue(self.store:commit(got, { processed_event_id = "evt-i" }))
  lu.assertTrue(self.store:is_processed(exe.id, "evt-i"))
end

function TestCommit:test_load_brings_the_armed_fire_at_of_a_timer_path()
  local exe = new_exe()
  lu.assertTrue(self.store:commit(exe, { timers = {
    { action = "schedule", path = "A.B", fire_at = 1234.5 }, { action = "schedule", path = "C", fire_at = 99 } } }))
  local got, armed = self.store:load(exe.id, "A.B")
  lu.assertEquals(got.id, exe.id)
  lu.assertEquals(armed, 1234.5)
  local _, c = self.store:load(exe.id, "C")
  lu.assertEquals(c, 99)
  local _, none = self.store:load(exe.id, "D")
  lu.assertNil(none)
  local plain, second = self.store:load(exe.id)
  lu.assertEquals(plain.version, 1)
  lu.assertNil(second)
  lu.assertNil((self.store:load("no-such-execution", "A.B")))
  local bad, msg, code = self.store:load(exe.id, "$x")
  lu.assertNil(bad)
  lu.assertEquals(code, "invalid")
  lu.assertStrContains(msg, "load")
end

function TestCommit:test_load_for_event_on_a_document_without_processed()
  local exe = new_exe()
  lu.assertTrue(self.store:save(exe))
  raw.unset(self.db, exe.id, "processed")
  local got, processed = self.store:load_for_event(exe.id, "evt-1")
  lu.assertNotNil(got)
  lu.assertEquals(got.id, exe.id)
  lu.assertFalse(processed)
  lu.assertFalse(self.store:is_processed(exe.id, "evt-1"))
end

function TestCommit:test_read_only_fields_raise()
  local exe = new_exe()
  lu.assertError(function() exe.id = "other" end)
  lu.assertError(function() exe.definition_id = "other" end)
  lu.assertError(function() exe.version = 7 end)
  lu.assertEquals(exe.definition_id, "order")
  lu.assertEquals(exe.version, 0)
  lu.assertStrMatches(exe.id, ("%x"):rep(32))
  -- still read-only after a save and after a load
  lu.assertTrue(self.store:save(exe))
  lu.assertError(function() exe.version = 0 end)
  lu.assertEquals(exe.version, 1)
  local loaded = self.store:load(exe.id)
  lu.assertError(function() loaded.version = 5 end)
  lu.assertError(function() loaded.id = "x" end)
  lu.assertEquals(loaded.version, 1)
end

function TestCommit:test_unknown_fields_and_bad_status_or_priority_raise()
  local exe = new_exe()
  lu.assertError(function() exe.no_such_field = 1 end)
  lu.assertError(function() exe.Status = "RUNNING" end)
  for _, s in ipairs { "PENDING", "RUNNING", "DONE", "CANCELLED", "SUSPENDED", "CANCELLING", "FAILED" } do
    exe.status = s
    lu.assertEquals(exe.status, s)
  end
  lu.assertError(function() exe.status = "running" end)
  lu.assertError(function() exe.status = "FINISHED" end)
  lu.assertError(function() exe.status = 1 end)
  lu.assertEquals(exe.status, "FAILED")
  for p = 0, 4 do
    exe.priority = p
    lu.assertEquals(exe.priority, p)
  end
  lu.assertError(function() exe.priority = 5 end)
  lu.assertError(function() exe.priority = -1 end)
  lu.assertError(function() exe.priority = 1.5 end)
  lu.assertError(function() exe.priority = "2" end)
  lu.assertEquals(exe.priority, 4)
  lu.assertError(function() ms.execution { definition_id = "order", status = "BOGUS" } end)
  lu.assertError(function() ms.execution { definition_id = "order", priority = 9 } end)
  lu.assertError(function() ms.execution { definition_id = "order", bogus_field = 1 } end)
  lu.assertError(function() ms.execution {} end)       -- definition_id is required
end

function TestCommit:test_raw_document_has_exactly_the_seeds_fields()
  local exe = new_exe({ a = 1 })
  lu.assertTrue(self.store:save(exe))
  local doc = raw.doc(self.db, exe.id)
  lu.assertEquals(raw.keys(doc), DOC_FIELDS)
  lu.assertEquals(doc._id, exe.id)
  lu.assertEquals(doc.definition_id, "order")
  lu.assertEquals(doc.version, 1)
  lu.assertIsString(doc.data)
  lu.assertTrue(ms.is_array(doc.outbox) and #doc.outbox == 0, "outbox is an empty array")
  lu.assertTrue(ms.is_array(doc.spawns) and #doc.spawns == 0, "spawns is an empty array")
  lu.assertTrue(ms.is_array(doc.processed) and #doc.processed == 0, "processed is an empty array")
  lu.assertTrue(ms.is_array(doc.trace) and #doc.trace == 0, "trace is an empty array")
  lu.assertFalse(ms.is_array(doc.timers), "timers is a sub-document")
  lu.assertEquals(raw.keys(doc.timers), {})

  local data = raw.data(self.db, exe.id)
  lu.assertEquals(raw.keys(data), DATA_FIELDS)
  lu.assertEquals(data.id, exe.id)
  lu.assertEquals(data.definition_id, "order")
  lu.assertEquals(data.root_path, "")
  lu.assertEquals(data.status, "PENDING")
  lu.assertEquals(data.version, 1)
  lu.assertEquals(data.priority, 0)
  lu.assertEquals(data.processed_events, 0)
  lu.assertEquals(data.context, { a = 1 })
  lu.assertEquals(data.outcome, ms.null)
  lu.assertEquals(data.parent_id, ms.null)
  lu.assertEquals(data.definition_fqn, ms.null)
  lu.assertTrue(ms.is_array(data.deferred))
  lu.assertFalse(ms.is_array(data.history))
  lu.assertFalse(ms.is_array(data.children))
  lu.assertFalse(ms.is_array(data.invoke_seq))

  -- a commit with every kind of effect keeps the same top-level shape
  lu.assertTrue(self.store:commit(exe, {
    emits = { { target_id = "t", event = { kind = "Go" } } },
    processed_event_id = "e1",
    timers = { { action = "schedule", path = "A.B", fire_at = 10.5 } },
    spawns = { { child_id = "c1", root_path = "A", context = {} } },
    trace = { event = "Go" },
  }))
  doc = raw.doc(self.db, exe.id)
  lu.assertEquals(raw.keys(doc), DOC_FIELDS)
  lu.assertEquals(doc.version, 2)
  lu.assertEquals(#doc.outbox, 1)
  lu.assertEquals(raw.keys(doc.outbox[1]), { "event", "seq", "target_id" })
  lu.assertIsString(doc.outbox[1].event)
  lu.assertEquals(math.type(doc.outbox[1].seq), "integer")
  lu.assertEquals(#doc.spawns, 1)
  lu.assertEquals(raw.keys(doc.spawns[1]), { "child_id", "context", "parent_id", "root_path", "seq" })
  lu.assertEquals(doc.processed, { "e1" })
  lu.assertEquals(#doc.trace, 1)
  lu.assertEquals(doc.trace[1].index, 0)
  lu.assertEquals(raw.keys(doc.timers), { "A\u{ff0e}B" })
end

function TestCommit:test_first_commit_seeds_every_embedded_field()
  local exe = new_exe()
  lu.assertTrue(self.store:commit(exe, {
    emits = { { target_id = "t", event = { kind = "Go" } } },
    processed_event_id = "e0",
    timers = { { action = "schedule", path = "Wait", fire_at = 20.0 } },
    spawns = { { child_id = "c", root_path = "R", context = { q = 1 } } },
    trace = { event = "start" },
  }))
  lu.assertEquals(exe.version, 1)
  local doc = raw.doc(self.db, exe.id)
  lu.assertEquals(raw.keys(doc), DOC_FIELDS)
  lu.assertEquals(doc.version, 1)
  lu.assertEquals(#doc.outbox, 1)
  lu.assertEquals(#doc.spawns, 1)
  lu.assertEquals(doc.processed, { "e0" })
  lu.assertEquals(doc.timers, { Wait = 20.0 })
  lu.assertEquals(doc.next_fire_at, 20.0)
  lu.assertEquals(doc.status, "PENDING")
  lu.assertEquals(doc.parent_id, ms.null)
  lu.assertEquals(#doc.trace, 1)
  lu.assertEquals(doc.trace[1].index, 0)
  lu.assertEquals(doc.trace[1].event, "start")
end

function TestCommit:test_commit_with_empty_options_is_a_save()
  local exe = new_exe()
  lu.assertTrue(self.store:commit(exe))
  lu.assertEquals(exe.version, 1)
  lu.assertTrue(self.store:commit(exe, {}))
  lu.assertEquals(exe.version, 2)
  lu.assertTrue(self.store:commit(exe, { emits = {}, spawns = {}, timers = {} }))
  lu.assertEquals(exe.version, 3)
  local doc = raw.doc(self.db, exe.id)
  lu.assertEquals(doc.version, 3)
  lu.assertEquals(#doc.outbox, 0)
  lu.assertEquals(#doc.spawns, 0)
  lu.assertEquals(#doc.trace, 0)
  lu.assertEquals(#doc.processed, 0)
end

