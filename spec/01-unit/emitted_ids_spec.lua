-- spec/01-unit/emitted_ids_spec.lua - the ids the interpreter gives the
-- events it emits: "emit:<execution id>:<version>:<n>", derived from the
-- execution, the version the step applies to and the event's position, so
-- the same step replayed on a copy of the execution emits the same ids, and
-- another version or position never does.
local lu = require "luaunit"
local ms = require "mongostore"
local chart = require "mongostore.chart"
local runtime = require "mongostore.runtime"
local execution = require "mongostore.execution"

-- Working's on_enter emits three events: to the caller, to a target, and
-- another to the caller, so one step has several positions.
local function emitting_chart()
  return chart.define{
    id = "emitting", initial = "Idle",
    states = {
      { "Idle" },
      { "Working", on_enter = function(ctx, _, act)
          ctx.n = (ctx.n or 0) + 1
          act.emit(nil, "Note", { n = ctx.n })
          act.emit("target-1", "Poke", {})
          act.emit(nil, "Note", { key = act.idempotency_key })
        end },
      { "Fork", orthogonal = true, states = {
          { "A", initial = "A1", states = { { "A1" }, { "A2", final = "success" } },
            transitions = { { from = "A1", to = "A2", on = "GoA" } } },
          { "B", initial = "B1", states = { { "B1" }, { "B2", final = "success" } },
            transitions = { { from = "B1", to = "B2", on = "GoB" } } } } },
      { "Broken", on_enter = function() error("broken on purpose") end },
      { "Done", final = "success" },
    },
    transitions = {
      { from = "Idle", to = "Working", on = "Begin" },
      { from = "Working", to = "Idle", on = "Again" },
      { from = "Working", to = "Fork", on = "Split" },
      { from = "Fork", to = "Idle", on = "Leave" },
      { from = "Fork", to = "Broken", on = "Break" },
      { from = "Fork", join = "all", to = "Done" },
    },
  }
end

-- A copy of an execution as a reload gives it: through its stored JSON.
local function reloaded(exe)
  local copy = assert(execution.from_json(assert(execution.to_json(exe))))
  return copy
end

-- What the store's commit does to the version.
local function committed(exe)
  execution.set_version(exe, exe.version + 1)
end

local function ids(fx)
  local out = {}
  for i, e in ipairs(fx.emits) do out[i] = e.event.id end
  return out
end

local function apply(c, exe, kind, now, data)
  return runtime.apply(c, exe, { id = "evt-" .. kind .. "-" .. exe.version, kind = kind, data = data or {} }, now)
end

TestEmittedIds = {}

function TestEmittedIds:setUp()
  self.c = emitting_chart()
  self.exe = ms.execution{ definition_id = "emitting", id = "exe:with:colons" }
  apply(self.c, self.exe, "Start", 1)
  committed(self.exe)
end

function TestEmittedIds:test_the_same_step_on_two_copies_emits_the_same_ids()
  local a, b = reloaded(self.exe), reloaded(self.exe)
  local event = { id = "evt-begin", kind = "Begin", data = {} }
  local fa = runtime.apply(self.c, a, event, 10)
  local fb = runtime.apply(self.c, b, { id = "evt-begin", kind = "Begin", data = {} }, 10)
  lu.assertEquals(#fa.emits, 3)
  lu.assertEquals(ids(fa), ids(fb))
  lu.assertEquals(ids(fa), { "emit:exe:with:colons:1:1", "emit:exe:with:colons:1:2", "emit:exe:with:colons:1:3" })
  -- ids are the form's; the act key is another string
  lu.assertEquals(fa.emits[3].event.data.key, "exe:with:colons:1:0")
  lu.assertNotEquals(fa.emits[3].event.data.key, fa.emits[3].event.id)
end

function TestEmittedIds:test_a_replay_at_the_same_version_gives_the_same_ids()
  -- a step computed, its commit lost (a crash), and the step computed again
  -- from the same stored state
  local before = reloaded(self.exe)
  local first = apply(self.c, self.exe, "Begin", 10)
  local again = apply(self.c, before, "Begin", 11)
  lu.assertEquals(ids(first), ids(again))
end

function TestEmittedIds:test_other_versions_and_positions_give_other_ids()
  local seen = {}
  local function record(fx)
    for _, id in ipairs(ids(fx)) do
      lu.assertNil(seen[id], "id emitted twice: " .. id)
      seen[id] = true
    end
  end
  -- the same transition taken at version after version: Working's three
  -- emits each time
  for i = 1, 5 do
    record(apply(self.c, self.exe, "Begin", 10 + i))
    committed(self.exe)
    record(apply(self.c, self.exe, "Again", 10 + i))
    committed(self.exe)
  end
  local n = 0
  for _ in pairs(seen) do n = n + 1 end
  lu.assertEquals(n, 15)
end

function TestEmittedIds:test_control_events_to_regions_get_derived_ids()
  apply(self.c, self.exe, "Begin", 10)
  committed(self.exe)
  apply(self.c, self.exe, "Split", 11)
  committed(self.exe)
  local v = self.exe.version
  -- leaving the fork tells each region to stop
  local copy = reloaded(self.exe)
  local fx = apply(self.c, self.exe, "Leave", 12)
  local kinds = {}
  for i, e in ipairs(fx.emits) do kinds[i] = e.event.kind .. " " .. e.target_id end
  lu.assertEquals(kinds, { "Cancel exe:with:colons:Fork.A:0", "Cancel exe:with:colons:Fork.B:0" })
  lu.assertEquals(ids(fx), { "emit:exe:with:colons:" .. v .. ":1", "emit:exe:with:colons:" .. v .. ":2" })
  lu.assertEquals(ids(apply(self.c, copy, "Leave", 13)), ids(fx))
end

function TestEmittedIds:test_a_failed_step_terminates_its_regions_with_derived_ids()
  apply(self.c, self.exe, "Begin", 10)
  committed(self.exe)
  apply(self.c, self.exe, "Split", 11)
  committed(self.exe)
  local v = self.exe.version
  local copy = reloaded(self.exe)
  local fx = apply(self.c, self.exe, "Break", 12)
  lu.assertEquals(self.exe.status, "FAILED")
  -- the step's own emits (the Cancels of leaving the fork) are dropped; the
  -- Terminates that replace them take the positions from 1
  local kinds = {}
  for i, e in ipairs(fx.emits) do kinds[i] = e.event.kind end
  lu.assertEquals(kinds, { "Terminate", "Terminate" })
  lu.assertEquals(ids(fx), { "emit:exe:with:colons:" .. v .. ":1", "emit:exe:with:colons:" .. v .. ":2" })
  lu.assertEquals(ids(apply(self.c, copy, "Break", 13)), ids(fx))
end

function TestEmittedIds:test_ids_given_by_their_own_rule_are_kept()
  apply(self.c, self.exe, "Begin", 10)
  committed(self.exe)
  apply(self.c, self.exe, "Split", 11)
  committed(self.exe)
  -- an event the parent forwards to its regions keeps its own id per child
  local fx = runtime.apply(self.c, self.exe, { id = "caller-1", kind = "GoA", data = {} }, 12)
  lu.assertEquals(ids(fx), { "caller-1@exe:with:colons:Fork.A:0", "caller-1@exe:with:colons:Fork.B:0" })
  -- a region reports to its parent as finished:<its id>
  local child = ms.execution{ definition_id = "emitting", id = "exe:with:colons:Fork.A:0", root_path = "Fork.A",
                              parent_id = "exe:with:colons", child_id = "exe:with:colons:Fork.A:0" }
  apply(self.c, child, "Start", 12)
  committed(child)
  fx = apply(self.c, child, "GoA", 13)
  lu.assertEquals(child.status, "DONE")
  lu.assertEquals(ids(fx), { "finished:exe:with:colons:Fork.A:0" })
end

-- The version and the position are the last two fields, so execution ids
-- that hold ':' and digits cannot make two triples give one id.
function TestEmittedIds:test_the_form_is_one_to_one()
  local seen = {}
  for _, id in ipairs { "a", "a:1", "a:1:2", "1", "1:2", "a:", ":", "emit:a" } do
    for v = 0, 3 do
      for n = 1, 3 do
        local s = runtime.emit_id(id, v, n)
        lu.assertNil(seen[s], s .. " from two triples")
        seen[s] = true
        lu.assertStrMatches(s, "^emit:.*:%d+:%d+$")
      end
    end
  end
end
