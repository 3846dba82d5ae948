-- spec/01-unit/execution_spec.lua - the Execution and Event values without a
-- server: field rules, read-only fields, and harel's JSON form both ways.
local lu = require "luaunit"
local ms = require "mongostore"
local execution = require "mongostore.execution"
local core = require "mongostore.core"

TestExecutionFields = {}

function TestExecutionFields:test_defaults_follow_harel()
  local exe = ms.execution{ definition_id = "order" }
  lu.assertEquals(#exe.id, 32)
  lu.assertStrMatches(exe.id, "^%x+$")
  lu.assertEquals(exe.definition_id, "order")
  lu.assertEquals(exe.version, 0)
  lu.assertEquals(exe.status, "PENDING")
  lu.assertEquals(exe.root_path, "")
  lu.assertEquals(exe.priority, 0)
  lu.assertEquals(exe.processed_events, 0)
  lu.assertNil(exe.parent_id)
  lu.assertTrue(ms.is_array(exe.deferred))
end

function TestExecutionFields:test_read_only_fields_raise()
  local exe = ms.execution{ definition_id = "order", id = "o-1" }
  lu.assertErrorMsgContains("read-only", function() exe.id = "other" end)
  lu.assertErrorMsgContains("read-only", function() exe.definition_id = "x" end)
  lu.assertErrorMsgContains("read-only", function() exe.version = 7 end)
  lu.assertEquals(exe.id, "o-1")
  lu.assertEquals(exe.version, 0)
end

function TestExecutionFields:test_writable_fields_are_checked()
  local exe = ms.execution{ definition_id = "order" }
  exe.status = "RUNNING"
  exe.active_path = "A.B"
  exe.priority = 4
  exe.context = { n = 1 }
  lu.assertEquals(exe.status, "RUNNING")
  lu.assertErrorMsgContains("status must be one of", function() exe.status = "WEIRD" end)
  lu.assertErrorMsgContains("priority", function() exe.priority = 5 end)
  lu.assertErrorMsgContains("priority", function() exe.priority = 1.5 end)
  lu.assertErrorMsgContains("no field 'colour'", function() exe.colour = "red" end)
  lu.assertErrorMsgContains("context must be a table", function() exe.context = "x" end)
  exe.outcome = ms.null
  lu.assertNil(exe.outcome)
  lu.assertEquals(exe.status, "RUNNING")
end

function TestExecutionFields:test_constructor_rejects_bad_fields()
  lu.assertErrorMsgContains("definition_id is required", function() ms.execution{} end)
  lu.assertErrorMsgContains("id must be a non-empty string", function() ms.execution{ definition_id = "d", id = {} } end)
  lu.assertErrorMsgContains("id must be a non-empty string", function() ms.execution{ definition_id = "d", id = "" } end)
  lu.assertErrorMsgContains("no field 'bogus'", function() ms.execution{ definition_id = "d", bogus = 1 } end)
  lu.assertErrorMsgContains("expected a table", function() ms.execution("order") end)
end

function TestExecutionFields:test_pairs_lists_the_fields()
  local exe = ms.execution{ definition_id = "order", id = "o-9" }
  local seen = {}
  for k in pairs(exe) do seen[k] = true end
  lu.assertTrue(seen.id and seen.definition_id and seen.version and seen.status and seen.context)
end

TestExecutionJson = {}

function TestExecutionJson:test_round_trip_keeps_every_field()
  local exe = ms.execution{
    definition_id = "order", id = "o-1", status = "RUNNING", active_path = "Fork.A",
    history = { Fork = "Fork.A" }, context = { a = { 1, 2 }, e = ms.array(), big = 9007199254740993, f = 0.1, u = "日本" },
    priority = 2, parent_id = "p-1", child_id = "c-1", created_at = 1764500000.25,
    deferred = { { id = "ev-1", kind = "Go", data = { x = 1 }, created_time = 1764500000.5 } },
    children = { ["c-1"] = { root_path = "Fork.A", finished = true, outcome = "success", result = { r = 1 } } },
    invoke_seq = { Fork = 3 },
  }
  local s = assert(execution.to_json(exe, 5))
  local back = assert(execution.from_json(s))
  lu.assertEquals(back.version, 5)
  lu.assertEquals(back.id, "o-1")
  lu.assertEquals(back.status, "RUNNING")
  lu.assertEquals(back.history.Fork, "Fork.A")
  lu.assertEquals(back.context.big, 9007199254740993)
  lu.assertEquals(math.type(back.context.big), "integer")
  lu.assertEquals(back.context.f, 0.1)
  lu.assertEquals(back.context.u, "日本")
  lu.assertTrue(ms.is_array(back.context.e))
  lu.assertEquals(back.deferred[1].kind, "Go")
  lu.assertEquals(back.deferred[1].created_time, 1764500000.5)
  lu.assertEquals(back.children["c-1"].outcome, "success")
  lu.assertEquals(back.children["c-1"].result.r, 1)
  lu.assertEquals(back.invoke_seq.Fork, 3)
  lu.assertEquals(back.created_at, 1764500000.25)
  lu.assertEquals(back.parent_id, "p-1")
end

function TestExecutionJson:test_fields_in_harel_order()
  local s = assert(execution.to_json(ms.execution{ definition_id = "d", id = "x" }))
  lu.assertStrContains(s, '{"id":"x","definition_id":"d","definition_fqn":null,"root_path":"","status":"PENDING"')
  lu.assertStrContains(s, '"history":{},"context":{},"processed_events":0,"version":0')
  lu.assertStrContains(s, '"deferred":[],"children":{},"invoke_seq":{}')
end

function TestExecutionJson:test_bad_context_names_the_path()
  local exe = ms.execution{ definition_id = "d", context = { deep = { fn = print } } }
  local s, err = execution.to_json(exe)
  lu.assertNil(s)
  lu.assertStrContains(err, "context.deep.fn")
end

function TestExecutionJson:test_unknown_fields_from_newer_writers_are_ignored()
  local exe = assert(execution.from_json('{"id":"a","definition_id":"d","status":"DONE","version":3,"future_field":[1]}'))
  lu.assertEquals(exe.status, "DONE")
  lu.assertEquals(exe.version, 3)
end

function TestExecutionJson:test_garbage_is_an_error()
  lu.assertNil(execution.from_json("not json"))
  lu.assertNil(execution.from_json('{"definition_id":"d"}'))
end

TestEventJson = {}

function TestEventJson:test_missing_id_is_filled()
  local ev = { kind = "Go" }
  local s = assert(execution.event_to_json(ev))
  lu.assertEquals(#ev.id, 32)
  local back = assert(execution.event_from_json(s))
  lu.assertEquals(back.id, ev.id)
  lu.assertEquals(back.kind, "Go")
  lu.assertEquals(next(back.data), nil)
end

function TestEventJson:test_times_are_iso_in_json_and_seconds_in_lua()
  local ev = { id = "e", kind = "K", created_time = 1764500000.123456, data = { v = 1 } }
  local s = assert(execution.event_to_json(ev))
  lu.assertStrContains(s, '"created_time":"2025-11-30T10:53:20.123456Z"')
  lu.assertStrContains(s, '"received_time":null')
  local back = execution.event_from_json(s)
  lu.assertAlmostEquals(back.created_time, 1764500000.123456, 1e-6)
end

function TestEventJson:test_bad_events_are_refused()
  lu.assertNil(execution.event_to_json({}))
  lu.assertNil(execution.event_to_json({ kind = "K", data = "x" }))
  lu.assertNil(execution.event_to_json({ kind = "K", created_time = "yesterday" }))
  lu.assertNil(execution.event_to_json({ kind = "K", created_time = 0/0 }))
  lu.assertNil(execution.event_to_json("K"))
  local s, err = execution.event_to_json({ kind = "K", data = { f = io.stdout } })
  lu.assertNil(s)
  lu.assertStrContains(err, "data.f")
end

function TestEventJson:test_core_round_trip_helpers()
  lu.assertEquals(core.json_decode(core.json_encode({ a = 1 })).a, 1)
end
