-- spec/03-engine/input_spec.lua - the engine checks a caller's event whole,
-- once, before anything is sent: kind and id non-empty UTF-8, data that the
-- value rules can store, within max_event_bytes. A bad one writes nothing
-- (the raw database is compared before and after) and is not applied; a
-- wrong Lua type raises, naming the argument.
local lu = require "luaunit"
local ms = require "mongostore"
local C = require "fixtures.charts"
local snapshot = require "helpers.snapshot"

TestEngineInput = {}

function TestEngineInput:setUp()
  self.store, self.db = C.store()
  self.engine = C.engine(self.store, { max_event_bytes = 64 * 1024 })
  lu.assertEquals(self.engine:start("flat", { id = "f" }), "f")
  C.drain(self.engine)
end

function TestEngineInput:tearDown()
  if self.store then self.store:close() end
end

function TestEngineInput.tearDownClass()
  snapshot.close()
end

-- Runs fn and checks it refused with code, and that the database is as it was.
function TestEngineInput:refused(code, what, fn)
  local before = snapshot.take(self.db)
  local ok, err, got = fn()
  lu.assertNil(ok, what .. " was accepted")
  lu.assertEquals(got, code, what .. ": " .. tostring(err))
  lu.assertEquals(type(err), "string")
  lu.assertNil(snapshot.diff(before, snapshot.take(self.db)), what .. " wrote something")
end

function TestEngineInput:test_bad_events_are_refused_before_anything_is_written()
  local e = self.engine
  local cycle = {}
  cycle.self = cycle
  local cases = {
    { "invalid", "a kind that is not UTF-8", { kind = "Begin\xff" } },
    { "invalid", "an empty kind", { kind = "" } },
    { "invalid", "a kind with NUL", { kind = "Be\0gin" } },
    { "invalid", "an empty id", { kind = "Begin", id = "" } },
    { "invalid", "an id that is not UTF-8", { kind = "Begin", id = "\xc3\x28" } },
    { "invalid", "data holding a function", { kind = "Begin", data = { f = print } } },
    { "invalid", "data holding a coroutine", { kind = "Begin", data = { co = coroutine.create(print) } } },
    { "invalid", "data holding a cycle", { kind = "Begin", data = cycle } },
    { "invalid", "data holding NaN", { kind = "Begin", data = { x = 0 / 0 } } },
    { "invalid", "data that is a list", { kind = "Begin", data = ms.array { 1, 2 } } },
    { "invalid", "data with a non-UTF-8 string", { kind = "Begin", data = { s = "\xff" } } },
    { "too_large", "data over max_event_bytes", { kind = "Begin", data = { blob = string.rep("x", 70000) } } },
  }
  for _, case in ipairs(cases) do
    self:refused(case[1], case[2], function() return e:send("f", case[3]) end)
  end
  lu.assertEquals(C.load(self.store, "f").active_path, "Idle", "none of them was applied")
  -- the bound is the engine's option: the default takes the same event
  local e2 = C.engine(self.store)
  lu.assertTrue(e2:send("f", { kind = "Begin", data = { blob = string.rep("x", 70000) } }))
  lu.assertEquals(C.load(self.store, "f").active_path, "Working")
end

function TestEngineInput:test_bad_ids_and_charts_are_refused_before_anything_is_written()
  local e = self.engine
  self:refused("invalid", "send to a non-UTF-8 id", function() return e:send("f\xff", { kind = "Begin" }) end)
  self:refused("invalid", "send to an empty id", function() return e:send("", { kind = "Begin" }) end)
  for _, op in ipairs { "cancel", "terminate", "suspend", "resume" } do
    self:refused("invalid", op .. " of a non-UTF-8 id", function() return e[op](e, "\xff") end)
  end
  self:refused("invalid", "start with a non-UTF-8 id", function() return e:start("flat", { id = "n\xff" }) end)
  self:refused("invalid", "start of a chart id that is not UTF-8", function() return e:start("fl\xffat") end)
  self:refused("invalid", "start of an unknown chart", function() return e:start("nope", { id = "x" }) end)
  self:refused("invalid", "start with a context holding a function",
    function() return e:start("flat", { id = "x", context = { f = print } }) end)
  self:refused("invalid", "start with a list as context",
    function() return e:start("flat", { id = "x", context = { 1, 2, 3 } }) end)
  self:refused("invalid", "start with priority 9", function() return e:start("flat", { id = "x", priority = 9 }) end)
  self:refused("invalid", "start with priority 1.5", function() return e:start("flat", { id = "x", priority = 1.5 }) end)
end

function TestEngineInput:test_wrong_types_raise_naming_the_argument()
  local e = self.engine
  local raises = {
    { "send: id must be a string", function() e:send(5, { kind = "Begin" }) end },
    { "send: event must be a table", function() e:send("f", "Begin") end },
    { "send: event.kind must be a string", function() e:send("f", { kind = 5 }) end },
    { "send: event.id must be a string", function() e:send("f", { kind = "Begin", id = 7 }) end },
    { "send: event.data must be a table", function() e:send("f", { kind = "Begin", data = "x" }) end },
    { "send: event.created_time must be a number", function() e:send("f", { kind = "Begin", created_time = "now" }) end },
    { "cancel: id must be a string", function() e:cancel({}) end },
    { "engine:start: chart_id must be a string", function() e:start(nil) end },
    { "start: opts.id must be a string", function() e:start("flat", { id = 3 }) end },
    { "start: opts.context must be a table", function() e:start("flat", { context = "x" }) end },
    { "engine.new: opts.max_event_bytes must be an integer >= 1",
      function() C.engine(self.store, { max_event_bytes = 0 }) end },
    { "engine.new: opts.lease must be a number > 0 and at most 86400", function() C.engine(self.store, { lease = -1 }) end },
    { "engine.new: opts.charts must be a table", function() require("mongostore.engine").new { store = self.store, charts = "x" } end },
  }
  for _, case in ipairs(raises) do
    lu.assertErrorMsgContains(case[1], case[2])
  end
end

function TestEngineInput:test_a_good_event_after_bad_ones_applies_once()
  local e = self.engine
  local ev = { kind = "Begin", id = "b-1" }
  lu.assertNil(e:send("f", { kind = "Begin", id = "b-1", data = { f = print } }))
  lu.assertTrue(e:send("f", ev))
  lu.assertTrue(e:send("f", ev))
  local exe = C.load(self.store, "f")
  lu.assertEquals(exe.active_path, "Working")
  lu.assertEquals(exe.context.worked, 1)
end
