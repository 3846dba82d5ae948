-- spec/02-store/timers_spec.lua - durable timers: schedule / cancel / re-schedule
-- through commits, the due sweep, the guarded delete_timer and the sweep's
-- batched delete_timers, load_many's armed timers, the reversible
-- path encoding of the timers keys and paths that must never become keys.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local raw = require "helpers.rawdb"

local FULLSTOP = "\u{ff0e}"

local function new_exe(id)
  return ms.execution { definition_id = "order", id = id, context = {} }
end

local function schedule(path, fire_at) return { action = "schedule", path = path, fire_at = fire_at } end
local function cancel(path) return { action = "cancel", path = path } end

local function summary(due)
  local out = {}
  for i, t in ipairs(due) do out[i] = t.execution_id .. "|" .. t.path .. "|" .. string.format("%.3f", t.fire_at) end
  return out
end

TestTimers = {}

function TestTimers:setUp()
  self.store, self.db = helper.connect()
end

function TestTimers:tearDown()
  if self.store then self.store:close() end
end

function TestTimers:test_schedule_on_a_dotted_path_and_due()
  local exe = new_exe()
  lu.assertTrue(self.store:save(exe))
  lu.assertTrue(self.store:commit(exe, { timers = { schedule("Fork.A.B", 1000.5) } }))
  local due = self.store:due_timers(2000)
  lu.assertEquals(#due, 1)
  lu.assertEquals(due[1].execution_id, exe.id)
  lu.assertEquals(due[1].path, "Fork.A.B")
  lu.assertEquals(due[1].fire_at, 1000.5)
  -- due means fire_at <= now
  lu.assertEquals(#self.store:due_timers(1000.5), 1, "a timer firing exactly now is due")
  lu.assertEquals(#self.store:due_timers(1000.4), 0, "a future timer is not due")
  lu.assertEquals(#self.store:due_timers(0), 0)
  -- the sweep does not remove anything
  lu.assertEquals(#self.store:due_timers(2000), 1)
end

function TestTimers:test_raw_key_uses_the_fullwidth_full_stop()
  local exe = new_exe()
  lu.assertTrue(self.store:commit(exe, { timers = { schedule("Fork.A.B", 1000.5), schedule("Plain", 7.25) } }))
  local doc = raw.doc(self.db, exe.id)
  lu.assertEquals(raw.keys(doc.timers), { "Fork" .. FULLSTOP .. "A" .. FULLSTOP .. "B", "Plain" })
  lu.assertEquals(doc.timers["Fork" .. FULLSTOP .. "A" .. FULLSTOP .. "B"], 1000.5)
  lu.assertEquals(math.type(doc.timers.Plain), "float")
  lu.assertNil(doc.timers.Fork, "a dotted path became a nested document")
  for k in pairs(doc.timers) do
    lu.assertNil(k:find(".", 1, true), "a raw timers key holds a dot: " .. k)
  end
end

function TestTimers:test_cancel_removes_the_timer()
  local exe = new_exe()
  lu.assertTrue(self.store:commit(exe, { timers = { schedule("Fork.A.B", 100), schedule("Other", 150) } }))
  lu.assertEquals(#self.store:due_timers(1e12), 2)
  lu.assertTrue(self.store:commit(exe, { timers = { cancel("Fork.A.B") } }))
  local due = self.store:due_timers(1e12)
  lu.assertEquals(#due, 1)
  lu.assertEquals(due[1].path, "Other")
  lu.assertEquals(raw.keys(raw.doc(self.db, exe.id).timers), { "Other" })
  -- cancelling what is not scheduled is fine
  lu.assertTrue(self.store:commit(exe, { timers = { cancel("Never.Scheduled") } }))
  lu.assertTrue(self.store:commit(exe, { timers = { cancel("Other") } }))
  lu.assertEquals(#self.store:due_timers(1e12), 0)
  lu.assertEquals(raw.keys(raw.doc(self.db, exe.id).timers), {})
  lu.assertEquals(exe.version, 4)
end

function TestTimers:test_reschedule_replaces()
  local exe = new_exe()
  lu.assertTrue(self.store:commit(exe, { timers = { schedule("Fork.A", 100) } }))
  lu.assertTrue(self.store:commit(exe, { timers = { schedule("Fork.A", 200.5) } }))
  local due = self.store:due_timers(1e12)
  lu.assertEquals(#due, 1)
  lu.assertEquals(due[1].path, "Fork.A")
  lu.assertEquals(due[1].fire_at, 200.5)
  lu.assertEquals(#self.store:due_timers(150), 0, "the replaced time still fires")
end

function TestTimers:test_schedule_and_cancel_in_one_commit()
  local exe = new_exe()
  lu.assertTrue(self.store:commit(exe, { timers = { schedule("A.X", 10), schedule("A.Y", 20) } }))
  lu.assertTrue(self.store:commit(exe, { timers = { cancel("A.X"), schedule("A.Z", 30) } }))
  lu.assertEquals(summary(self.store:due_timers(1e12)),
    { exe.id .. "|A.Y|20.000", exe.id .. "|A.Z|30.000" })
end

function TestTimers:test_due_timers_are_ordered_by_fire_at_across_executions()
  local e1 = new_exe("aaa-" .. ms.uuid())
  local e2 = new_exe("zzz-" .. ms.uuid())
  lu.assertTrue(self.store:commit(e1, { timers = { schedule("X", 300), schedule("Z.W", 200) } }))
  lu.assertTrue(self.store:commit(e2, { timers = { schedule("Y", 100), schedule("Late.One", 5000) } }))
  lu.assertEquals(summary(self.store:due_timers(250)),
    { e2.id .. "|Y|100.000", e1.id .. "|Z.W|200.000" })
  lu.assertEquals(summary(self.store:due_timers(1e12)), {
    e2.id .. "|Y|100.000", e1.id .. "|Z.W|200.000", e1.id .. "|X|300.000", e2.id .. "|Late.One|5000.000",
  })
end

function TestTimers:test_timers_carried_on_first_insert_and_real_clock_values()
  local exe = new_exe()
  local soon = ms.now() + 0.001
  local later = ms.now() + 3600
  lu.assertTrue(self.store:commit(exe, { timers = { schedule("Soon", soon), schedule("Later", later) } }))
  local due = self.store:due_timers(soon + 1)
  lu.assertEquals(#due, 1)
  lu.assertEquals(due[1].path, "Soon")
  lu.assertEquals(due[1].fire_at, soon, "fire_at is not kept exactly")
  lu.assertEquals(#self.store:due_timers(later), 2)
end

function TestTimers:test_delete_timer_removes_the_timer_it_knows()
  local exe = new_exe()
  lu.assertTrue(self.store:commit(exe, { timers = { schedule("Fork.A.B", 100.25), schedule("Keep", 50) } }))
  local due = self.store:due_timers(1000)
  lu.assertEquals(#due, 2)
  self.store:delete_timer(exe.id, "Fork.A.B", 100.25)
  due = self.store:due_timers(1000)
  lu.assertEquals(#due, 1)
  lu.assertEquals(due[1].path, "Keep")
  lu.assertEquals(raw.keys(raw.doc(self.db, exe.id).timers), { "Keep" })
  -- a delete does not bump the version
  lu.assertEquals(raw.doc(self.db, exe.id).version, 1)
  lu.assertEquals(self.store:load(exe.id).version, 1)
end

function TestTimers:test_delete_timer_is_a_noop_when_fire_at_moved_on()
  local exe = new_exe()
  lu.assertTrue(self.store:commit(exe, { timers = { schedule("Fork.A", 100) } }))
  local stale = self.store:due_timers(1000)[1]
  lu.assertEquals(stale.fire_at, 100)
  -- the model re-arms the same node before the sweep deletes the old one
  lu.assertTrue(self.store:commit(exe, { timers = { schedule("Fork.A", 500) } }))
  self.store:delete_timer(stale.execution_id, stale.path, stale.fire_at)
  local due = self.store:due_timers(1e12)
  lu.assertEquals(#due, 1, "a stale delete removed the re-armed timer")
  lu.assertEquals(due[1].path, "Fork.A")
  lu.assertEquals(due[1].fire_at, 500)
  -- with the right time it goes
  self.store:delete_timer(exe.id, "Fork.A", 500)
  lu.assertEquals(#self.store:due_timers(1e12), 0)
end

function TestTimers:test_delete_timers_removes_each_timer_it_knows_in_one_round_trip()
  local a, b, c = new_exe("a"), new_exe("b"), new_exe("c")
  lu.assertTrue(self.store:commit(a, { timers = { schedule("Fork.A.B", 100.25), schedule("Keep", 50) } }))
  lu.assertTrue(self.store:commit(b, { timers = { schedule("T", 60) } }))
  lu.assertTrue(self.store:commit(c, { timers = { schedule("T", 70) } }))
  -- c re-armed since the sweep read it: its old entry must not remove the new
  local stale = { execution_id = "c", path = "T", fire_at = 70 }
  lu.assertTrue(self.store:commit(c, { timers = { schedule("T", 700) } }))
  local before = assert(self.store:stats())
  lu.assertTrue(self.store:delete_timers{
    { execution_id = "a", path = "Fork.A.B", fire_at = 100.25 },
    { execution_id = "b", path = "T", fire_at = 60 },
    stale,
    { execution_id = "no-such-execution", path = "T", fire_at = 60 },
    { execution_id = "a", path = "No.Such.Path", fire_at = 1 },
  })
  local after = assert(self.store:stats())
  lu.assertEquals(after.total - before.total, 1, "one bulk write")
  lu.assertEquals(summary(self.store:due_timers(1e12)), { "a|Keep|50.000", "c|T|700.000" })
  lu.assertEquals(raw.doc(self.db, "a").version, 1, "a delete does not bump the version")
  lu.assertNil(raw.doc(self.db, "no-such-execution"), "delete_timers created a document")
  -- due_timers' rows go in as they are; an empty list sends nothing
  lu.assertTrue(self.store:delete_timers(self.store:due_timers(1e12)))
  lu.assertEquals(#self.store:due_timers(1e12), 0)
  before = assert(self.store:stats())
  lu.assertTrue(self.store:delete_timers({}))
  lu.assertEquals(assert(self.store:stats()).total, before.total)
end

function TestTimers:test_delete_timers_refuses_a_bad_item_and_deletes_nothing()
  local exe = new_exe("x")
  lu.assertTrue(self.store:commit(exe, { timers = { schedule("T", 10), schedule("U", 20) } }))
  local good = { execution_id = "x", path = "T", fire_at = 10 }
  for _, bad in ipairs {
    { execution_id = "x", path = "$where", fire_at = 20 },
    { execution_id = "x", path = "", fire_at = 20 },
    { execution_id = "x", path = "U", fire_at = 0 / 0 },
    { execution_id = "x", path = "U", fire_at = math.huge },
    { execution_id = "", path = "U", fire_at = 20 },
    { execution_id = "x\0y", path = "U", fire_at = 20 },
  } do
    local ok, msg, code = self.store:delete_timers({ good, bad })
    lu.assertNil(ok, tostring(bad.path))
    lu.assertEquals(code, "invalid", msg)
    lu.assertStrContains(msg, "delete_timers: timers[2]")
  end
  lu.assertEquals(summary(self.store:due_timers(1e12)), { "x|T|10.000", "x|U|20.000" }, "nothing was deleted")
  -- a wrong Lua type is a programming error and raises, naming the field
  for _, case in ipairs {
    { "x", "timers must be a table" },
    { { "x" }, "timers[1] must be a table" },
    { { { execution_id = 5, path = "T", fire_at = 10 } }, "timers[1].execution_id must be a string" },
    { { { execution_id = "x", path = 5, fire_at = 10 } }, "timers[1].path must be a string" },
    { { good, { execution_id = "x", path = "T", fire_at = "10" } }, "timers[2].fire_at must be a number" },
  } do
    local ok, err = pcall(self.store.delete_timers, self.store, case[1])
    lu.assertFalse(ok)
    lu.assertStrContains(tostring(err), case[2])
  end
  lu.assertEquals(#self.store:due_timers(1e12), 2)
end

function TestTimers:test_load_many_with_timers_gives_each_executions_armed_timers()
  local a, b = new_exe("a"), new_exe("b")
  lu.assertTrue(self.store:commit(a, { timers = { schedule("Fork.A.B", 100.25), schedule("Keep", 50) } }))
  lu.assertTrue(self.store:save(b))
  local exes, armed = self.store:load_many({ "a", "b", "nobody" }, { timers = true })
  lu.assertEquals(exes.a.id, "a")
  lu.assertEquals(exes.b.id, "b")
  lu.assertNil(exes.nobody)
  lu.assertEquals(armed, { a = { ["Fork.A.B"] = 100.25, Keep = 50 }, b = {} })
  -- without the option: no second result, and no timers read
  local plain, none = self.store:load_many({ "a" })
  lu.assertEquals(plain.a.id, "a")
  lu.assertNil(none)
  lu.assertErrorMsgContains("unknown option timer", function() self.store:load_many({ "a" }, { timer = true }) end)
  lu.assertErrorMsgContains("opts.timers must be a boolean",
    function() self.store:load_many({ "a" }, { timers = 1 }) end)
end

-- next_fire_at: a caller that read every armed timer sets the mark exactly,
-- where a commit otherwise only lowers it ($min) for what it schedules.
function TestTimers:test_a_commit_with_next_fire_at_sets_the_mark_exactly()
  local exe = new_exe("m")
  lu.assertTrue(self.store:commit(exe, { timers = { schedule("A", 10), schedule("B", 50) } }))
  lu.assertEquals(raw.doc(self.db, "m").next_fire_at, 10)
  -- without it, a cancel leaves the mark low (the sweep raises it later)
  lu.assertTrue(self.store:commit(exe, { timers = { cancel("A") } }))
  lu.assertEquals(raw.doc(self.db, "m").next_fire_at, 10)
  -- with it, the mark is what the caller says, in the same update
  lu.assertTrue(self.store:commit(exe, { timers = { schedule("C", 70) }, next_fire_at = 50 }))
  lu.assertEquals(raw.doc(self.db, "m").next_fire_at, 50)
  local due, read = self.store:due_timers(20)
  lu.assertEquals({ #due, read }, { 0, 0 }, "nothing is read before the true earliest timer")
  lu.assertEquals(summary(self.store:due_timers(100)), { "m|B|50.000", "m|C|70.000" })
  -- math.huge: nothing armed
  lu.assertTrue(self.store:commit(exe, { timers = { cancel("B"), cancel("C") }, next_fire_at = math.huge }))
  lu.assertEquals(raw.doc(self.db, "m").next_fire_at, 1e300)
  local v = raw.doc(self.db, "m").version
  local ok, msg, code = self.store:commit(exe, { next_fire_at = 0 / 0 })
  lu.assertNil(ok)
  lu.assertEquals(code, "invalid", msg)
  lu.assertStrContains(msg, "next_fire_at must be a number")
  -- a wrong Lua type is the program's: it raises, naming the option
  for _, bad in ipairs { "10", true } do
    lu.assertErrorMsgContains("opts.next_fire_at must be a number", self.store.commit, self.store, exe,
      { next_fire_at = bad })
  end
  lu.assertEquals(raw.doc(self.db, "m").version, v, "a refused commit writes nothing")
end

function TestTimers:test_due_timers_says_how_many_documents_it_read()
  for i = 1, 5 do
    lu.assertTrue(self.store:commit(new_exe("d-" .. i), { timers = { schedule("A", i), schedule("B", i + 0.5) } }))
  end
  local due, read = self.store:due_timers(1000, { limit = 3 })
  lu.assertEquals(read, 3)
  lu.assertEquals(#due, 6, "every due timer of the documents read")
  due, read = self.store:due_timers(1000)
  lu.assertEquals({ #due, read }, { 10, 5 })
  -- a document whose timers all went is read once more, its mark raised
  lu.assertTrue(self.store:delete_timers(due))
  due, read = self.store:due_timers(1000)
  lu.assertEquals({ #due, read }, { 0, 5 })
  due, read = self.store:due_timers(1000)
  lu.assertEquals({ #due, read }, { 0, 0 }, "the raised marks are past")
end

function TestTimers:test_delete_timer_on_unknown_things_is_harmless()
  local exe = new_exe()
  lu.assertTrue(self.store:commit(exe, { timers = { schedule("T", 10) } }))
  self.store:delete_timer("no-such-execution", "T", 10)
  self.store:delete_timer(exe.id, "No.Such.Path", 10)
  lu.assertEquals(#self.store:due_timers(1e12), 1)
  lu.assertNil(raw.doc(self.db, "no-such-execution"), "delete_timer created a document")
end

-- A path that is empty, starts with '$' or holds NUL must never reach the
-- server as a key: the commit is refused as `invalid` with nothing written,
-- or the path is encoded reversibly and comes back unchanged.
local BAD_PATHS = { "", "$where", "$", "A.$b", "a\0b", "Fork.A\0" }

local function check_key_is_safe(k)
  lu.assertTrue(#k > 0, "an empty key reached the server")
  lu.assertNotEquals(k:sub(1, 1), "$", "a key starting with $ reached the server: " .. k)
  lu.assertNil(k:find("\0", 1, true), "a key with NUL reached the server")
  lu.assertNil(k:find(".", 1, true), "a key with a dot reached the server: " .. k)
end

function TestTimers:test_bad_paths_are_refused_or_encoded_reversibly()
  for _, path in ipairs(BAD_PATHS) do
    local exe = new_exe()
    lu.assertTrue(self.store:save(exe))
    local ok, msg, code = self.store:commit(exe, {
      timers = { schedule(path, 42.5) },
      emits = { { target_id = "t", event = { id = "bad-path-evt", kind = "K" } } },
    })
    local shown = string.format("%q", path)
    local doc = raw.doc(self.db, exe.id)
    for k in pairs(doc.timers) do check_key_is_safe(k) end
    if ok then
      lu.assertEquals(exe.version, 2)
      local due = self.store:due_timers(1e12)
      local mine = {}
      for _, t in ipairs(due) do if t.execution_id == exe.id then mine[#mine + 1] = t end end
      lu.assertEquals(#mine, 1, "path " .. shown)
      lu.assertEquals(mine[1].path, path, "path " .. shown .. " did not round-trip")
      lu.assertEquals(mine[1].fire_at, 42.5)
      -- and it can be cancelled and deleted by the same path
      lu.assertTrue(self.store:commit(exe, { timers = { cancel(path) } }))
      lu.assertEquals(raw.keys(raw.doc(self.db, exe.id).timers), {}, "cancel of " .. shown)
      self.store:ack_outbox(self.store:pending_outbox()[1].seq)
    else
      lu.assertEquals(code, "invalid", "path " .. shown .. ": " .. tostring(msg))
      lu.assertIsString(msg)
      lu.assertEquals(exe.version, 1, "a refused commit bumped the version, path " .. shown)
      lu.assertEquals(doc.version, 1, "a refused commit was written, path " .. shown)
      lu.assertEquals(raw.keys(doc.timers), {})
      lu.assertEquals(#doc.outbox, 0, "a refused commit wrote its emits, path " .. shown)
    end
  end
end

function TestTimers:test_bad_paths_in_cancel_and_delete_never_reach_the_server()
  local exe = new_exe()
  lu.assertTrue(self.store:commit(exe, { timers = { schedule("Good", 1) } }))
  for _, path in ipairs(BAD_PATHS) do
    local shown = string.format("%q", path)
    local ok, msg, code = self.store:commit(exe, { timers = { cancel(path) } })
    if not ok then
      lu.assertEquals(code, "invalid", "cancel " .. shown .. ": " .. tostring(msg))
    end
    local dok, dres, dmsg, dcode = pcall(self.store.delete_timer, self.store, exe.id, path, 1)
    lu.assertTrue(dok, "delete_timer raised for " .. shown .. ": " .. tostring(dres))
    if dres == nil and dcode ~= nil then
      lu.assertEquals(dcode, "invalid", "delete_timer " .. shown .. ": " .. tostring(dmsg))
    end
  end
  local doc = raw.doc(self.db, exe.id)
  lu.assertEquals(doc.timers, { Good = 1 }, "a bad path changed the timers")
  lu.assertEquals(#self.store:due_timers(1e12), 1)
end

function TestTimers:test_unicode_path_round_trips()
  local exe = new_exe()
  local path = "R\u{e9}gion.\u{65e5}\u{672c}.\u{1f680}"
  lu.assertTrue(self.store:commit(exe, { timers = { schedule(path, 9) } }))
  local due = self.store:due_timers(10)
  lu.assertEquals(#due, 1)
  lu.assertEquals(due[1].path, path)
  self.store:delete_timer(exe.id, path, 9)
  lu.assertEquals(#self.store:due_timers(10), 0)
end
