-- spec/01-unit/runtime_pure_spec.lua - the interpreter runs with nothing but
-- Lua: a child lua5.4 with an empty package.cpath and a package.path of lua/
-- only steps a chart through Start, events, a timeout and a fork, and gets
-- what the same steps give with the C core loaded; and mongostore.values
-- shares the core's array mark whichever of the two loads first.
local lu = require "luaunit"
local helper = require "helpers"

local root = helper.root()
local LIB_PATH = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua"

-- Runs code in a fresh interpreter (the one that runs this spec) whose
-- package.path is lua/ only and whose package.cpath is cpath ("" for none).
-- Returns its output lines as a table and the exit status.
local function run_child(code, cpath, interpreter)
  local pre = string.format("package.path = %q; package.cpath = %q;", LIB_PATH, cpath)
  local cmd = string.format("%s -e %s 2>&1", interpreter or helper.lua_command(), helper.shell_quote(pre .. code))
  local f = assert(io.popen(cmd, "r"))
  local out = f:read("a")
  local ok, _, status = f:close()
  local lines = {}
  for line in out:gmatch("[^\n]+") do lines[#lines + 1] = line end
  return lines, ok and 0 or status, out
end

-- The "key=value" lines as a table; other lines (a driver's warning on
-- stderr, such as mongoc's about its shared-memory counters) are left out,
-- and the whole output goes into the failure messages.
local function parse(lines)
  local t = {}
  for _, line in ipairs(lines) do
    local k, v = line:match("^([%w_%.]+)=(.*)$")
    if k then t[k] = v end
  end
  return t
end

------------------------------------------------------------------------
-- A chart stepped through start, an event, a timeout and a fork

-- The child's script: prints what it observes as key=value lines. The
-- execution is a plain table of fields, as mongostore.execution would hold
-- them; each "commit" only moves the version on.
local STEPS = [=[
local core_ok, core_err = pcall(require, "mongostore.core")
print("core_loadable=" .. tostring(core_ok))
if not core_ok then print("core_error=" .. (tostring(core_err):match("^[^\n]*"))) end
local chart = require "mongostore.chart"
local runtime = require "mongostore.runtime"
local values = require "mongostore.values"
print("values_has_core=" .. tostring(values.has_core))
print("core_loaded_by_runtime=" .. tostring(package.loaded["mongostore.core"] ~= nil))

local c = chart.define{
  id = "pure", initial = "Idle",
  states = {
    { "Idle" },
    { "Waiting", timeout = 5, on_enter = function(ctx, _, act)
        ctx.waited = (ctx.waited or 0) + 1
        act.emit(nil, "Asked", { n = ctx.waited })
        act.emit("other", "Poke", {})
      end },
    { "Fork", orthogonal = true, states = {
        { "A", initial = "A1", states = { { "A1" }, { "A2", final = "success" } },
          transitions = { { from = "A1", to = "A2", on = "Go" } } },
        { "B", initial = "B1", states = { { "B1" }, { "B2", final = "success" } },
          transitions = { { from = "B1", to = "B2", on = "Go" } } } } },
    { "Done", final = "success" },
    { "Failed", final = "failed" },
  },
  transitions = {
    { from = "Idle", to = "Waiting", on = "Begin" },
    { from = "Waiting", to = "Fork", on = "Timeout" },
    { from = "Fork", join = "all", to = "Done", else_to = "Failed" },
  },
}

local function new_exe(f)
  local exe = { version = 0, status = "PENDING", root_path = "", context = {}, history = {}, children = {},
                deferred = values.array(), invoke_seq = {}, processed_events = 0, priority = 0 }
  for k, v in pairs(f) do exe[k] = v end
  return exe
end
local function step(exe, ev, now, opts)
  local fx = runtime.apply(c, exe, ev, now, opts)
  exe.version = exe.version + 1
  return fx
end
local function emits(fx)
  local out = {}
  for i, e in ipairs(fx.emits) do
    out[i] = tostring(e.target_id) .. ">" .. e.event.kind .. "#" .. e.event.id
  end
  return table.concat(out, ",")
end

local exe = new_exe{ id = "p-1", definition_id = "pure", context = { tags = values.array{} } }
local fx = step(exe, { id = "start:p-1", kind = "Start", data = { who = "pure" } }, 100)
print("start.status=" .. exe.status)
print("start.active=" .. exe.active_path)
print("start.who=" .. exe.context.who)

fx = step(exe, { id = "e-1", kind = "Begin", data = {} }, 101)
print("begin.active=" .. exe.active_path)
print("begin.emits=" .. emits(fx))
print("begin.timer=" .. fx.timers[1].action .. " " .. fx.timers[1].path .. " " .. fx.timers[1].fire_at)
print("begin.actions=" .. table.concat(fx.actions, ","))

-- a Timeout for another fire_at is stale; the armed one forks
fx = step(exe, { id = "t-stale", kind = "Timeout", data = { path = "Waiting", fire_at = 999 } }, 102, { armed = 106 })
print("stale.active=" .. exe.active_path)
fx = step(exe, { id = "t-1", kind = "Timeout", data = { path = "Waiting", fire_at = 106 } }, 106, { armed = 106 })
print("timeout.active=" .. exe.active_path)
print("timeout.timer=" .. fx.timers[1].action .. " " .. fx.timers[1].path)
local spawned = {}
for i, s in ipairs(fx.spawns) do
  spawned[i] = s.child_id .. "@" .. s.root_path
  print("spawn." .. i .. ".tags_is_array=" .. tostring(values.is_array(s.context.tags)))
  print("spawn." .. i .. ".tags_shared=" .. tostring(s.context.tags == exe.context.tags))
end
print("timeout.spawns=" .. table.concat(spawned, ","))

-- the children: each started from its spawn, each gets Go through the parent
local kids = {}
for _, s in ipairs(fx.spawns) do
  local kid = new_exe{ id = s.child_id, definition_id = "pure", root_path = s.root_path, parent_id = "p-1",
                       child_id = s.child_id, context = s.context }
  step(kid, { id = "start:" .. kid.id, kind = "Start", data = {} }, 107)
  kids[s.child_id] = kid
end
fx = step(exe, { id = "go-1", kind = "Go", data = { x = 1 } }, 108)
print("go.emits=" .. emits(fx))
local finished = {}
for _, e in ipairs(fx.emits) do
  local kid = kids[e.target_id]
  local kfx = step(kid, e.event, 109)
  print("kid." .. kid.root_path .. ".status=" .. kid.status .. " " .. tostring(kid.outcome))
  print("kid." .. kid.root_path .. ".emits=" .. emits(kfx))
  finished[#finished + 1] = kfx.emits[1].event
end
fx = step(exe, finished[1], 110)
print("first_finished.active=" .. exe.active_path .. " " .. exe.status)
fx = step(exe, finished[2], 111)
print("joined.status=" .. exe.status .. " " .. tostring(exe.outcome) .. " " .. tostring(exe.active_path))
local results = {}
for k, r in pairs(exe.context.region_results) do results[#results + 1] = k .. ":" .. tostring(r.outcome) end
table.sort(results)
print("joined.region_results=" .. table.concat(results, ","))

-- a failing action: FAILED, and nothing of the step kept but what reports it
local bad = chart.define{ id = "bad", initial = "A", states = {
  { "A" }, { "B", on_enter = function() error({ type = "Boom", message = "no" }) end } },
  transitions = { { from = "A", to = "B", on = "Go" } } }
local b = new_exe{ id = "b-1", definition_id = "bad" }
runtime.apply(bad, b, { id = "s", kind = "Start", data = {} }, 1)
local bfx = runtime.apply(bad, b, { id = "g", kind = "Go", data = {} }, 2)
print("failed.status=" .. b.status .. " " .. tostring(bfx.failed))
print("done=true")
]=]

TestRuntimePure = {}

function TestRuntimePure:test_steps_a_chart_with_no_c_module()
  local lines, status, out = run_child(STEPS, "")
  lu.assertEquals(status, 0, out)
  local r = parse(lines)
  -- the proof is real: the core cannot be loaded there
  lu.assertEquals(r.core_loadable, "false", out)
  lu.assertStrContains(r.core_error, "module 'mongostore.core' not found")
  lu.assertEquals(r.values_has_core, "false")
  lu.assertEquals(r.core_loaded_by_runtime, "false")
  lu.assertEquals(r["start.status"], "RUNNING")
  lu.assertEquals(r["start.active"], "Idle")
  lu.assertEquals(r["start.who"], "pure")
  lu.assertEquals(r["begin.active"], "Waiting")
  -- emitted ids from the execution id, the version the step applied to and
  -- the position in the step's emits
  lu.assertEquals(r["begin.emits"], "nil>Asked#emit:p-1:1:1,other>Poke#emit:p-1:1:2")
  lu.assertEquals(r["begin.timer"], "schedule Waiting 106")
  lu.assertEquals(r["begin.actions"], "on_enter Waiting")
  lu.assertEquals(r["stale.active"], "Waiting")
  lu.assertEquals(r["timeout.active"], "Fork")
  lu.assertEquals(r["timeout.timer"], "cancel Waiting")
  lu.assertEquals(r["timeout.spawns"], "p-1:Fork.A:0@Fork.A,p-1:Fork.B:0@Fork.B")
  for i = 1, 2 do
    lu.assertEquals(r["spawn." .. i .. ".tags_is_array"], "true", "the array mark survives the child's copy")
    lu.assertEquals(r["spawn." .. i .. ".tags_shared"], "false", "a child's context is its own")
  end
  lu.assertEquals(r["go.emits"], "p-1:Fork.A:0>Go#go-1@p-1:Fork.A:0,p-1:Fork.B:0>Go#go-1@p-1:Fork.B:0")
  lu.assertEquals(r["kid.Fork.A.status"], "DONE success")
  lu.assertEquals(r["kid.Fork.A.emits"], "p-1>Finished#finished:p-1:Fork.A:0")
  lu.assertEquals(r["kid.Fork.B.status"], "DONE success")
  lu.assertEquals(r["first_finished.active"], "Fork RUNNING")
  lu.assertEquals(r["joined.status"], "DONE success Done")
  lu.assertEquals(r["joined.region_results"], "Fork.A:success,Fork.B:success")
  lu.assertEquals(r["failed.status"], "FAILED Boom: no")
  lu.assertEquals(r.done, "true")
end

-- The same steps with the core loadable: every observation but the ones
-- about the core itself is the same.
function TestRuntimePure:test_the_same_steps_with_the_core_give_the_same_results()
  local pure, s1, out1 = run_child(STEPS, "")
  local full, s2, out2 = run_child(STEPS, package.cpath)
  lu.assertEquals(s1, 0, out1)
  lu.assertEquals(s2, 0, out2)
  local a, b = parse(pure), parse(full)
  lu.assertEquals(b.core_loadable, "true", out2)
  lu.assertEquals(b.values_has_core, "true")
  for _, k in ipairs { "core_loadable", "core_error", "values_has_core", "core_loaded_by_runtime" } do
    a[k], b[k] = nil, nil
  end
  lu.assertEquals(b.done, "true", out2)
  lu.assertEquals(a, b, out1 .. out2)
end

-- OpenResty runs the interpreter on LuaJIT: the same steps there, with no C
-- module either, give the same results (skipped where there is no LuaJIT).
function TestRuntimePure:test_luajit_with_no_c_module_gives_the_same_results()
  if not os.execute("command -v luajit >/dev/null 2>&1") then lu.skip("no luajit on this machine") end
  local jit, s1, out1 = run_child(STEPS, "", "luajit")
  local puc, s2, out2 = run_child(STEPS, "")
  lu.assertEquals(s1, 0, out1)
  lu.assertEquals(s2, 0, out2)
  local a, b = parse(jit), parse(puc)
  lu.assertEquals(a.core_loadable, "false", out1)
  lu.assertEquals(a.done, "true", out1)
  a.core_error, b.core_error = nil, nil -- the loaders' messages differ
  lu.assertEquals(a, b, out1 .. out2)
end

------------------------------------------------------------------------
-- mongostore.values and the core share one array mark

local CHECKS = [=[
local values, core = ...
print("core_sees_values_array=" .. tostring(core.is_array(values.array())))
print("values_sees_core_array=" .. tostring(values.is_array(core.array())))
print("decoded_is_array=" .. tostring(values.is_array(core.json_decode("[]"))))
print("empty_encodes_as=" .. core.json_encode(values.array{}))
print("list_encodes_as=" .. core.json_encode(values.array{ 1, 2 }))
print("plain_empty_encodes_as=" .. core.json_encode({}))
print("same_null=" .. tostring(values.null == core.null))
print("null_encodes_as=" .. tostring(core.json_encode({ values.null })))
]=]

local function checks(prelude, cpath)
  local code = prelude .. "\nlocal checks = load(" .. string.format("%q", CHECKS) .. ")\nchecks(values, core)"
  local lines, status, out = run_child(code, cpath)
  lu.assertEquals(status, 0, out)
  return parse(lines), out
end

local function assert_shared_marks(r, out)
  lu.assertEquals(r.core_sees_values_array, "true", out)
  lu.assertEquals(r.values_sees_core_array, "true", out)
  lu.assertEquals(r.decoded_is_array, "true", out)
  lu.assertEquals(r.empty_encodes_as, "[]")
  lu.assertEquals(r.list_encodes_as, "[1,2]")
  lu.assertEquals(r.plain_empty_encodes_as, "{}")
end

function TestRuntimePure:test_core_first_then_values()
  local prelude = 'local core = require "mongostore.core"\nlocal values = require "mongostore.values"'
  local r, out = checks(prelude, package.cpath)
  assert_shared_marks(r, out)
  lu.assertEquals(r.same_null, "true")
  lu.assertEquals(r.null_encodes_as, "[null]")
end

function TestRuntimePure:test_values_first_then_core()
  -- values loads while the core cannot, so it makes the registry's table
  -- itself; the core, loaded after, finds it there
  local prelude = string.format([[
local values = require "mongostore.values"
assert(values.has_core == false, "the core was loadable")
package.cpath = %q
local core = require "mongostore.core"]], package.cpath)
  local r, out = checks(prelude, "")
  assert_shared_marks(r, out)
  -- null was fixed when values loaded without the core: the sentinel
  lu.assertEquals(r.same_null, "false")
end

function TestRuntimePure:test_values_loads_the_core_when_it_can()
  local prelude = 'local values = require "mongostore.values"\nlocal core = require "mongostore.core"'
  local r, out = checks(prelude, package.cpath)
  assert_shared_marks(r, out)
  lu.assertEquals(r.same_null, "true")
end

------------------------------------------------------------------------
-- mongostore.values itself (in this process: the core is loadable here)

function TestRuntimePure:test_values_marks()
  local values = require "mongostore.values"
  local t = {}
  lu.assertIs(values.array(t), t)
  lu.assertTrue(values.is_array(t))
  lu.assertTrue(values.is_array(values.array()))
  lu.assertFalse(values.is_array({}))
  lu.assertFalse(values.is_array("x"))
  lu.assertFalse(values.is_array(nil))
  lu.assertTrue(values.is_null(values.null))
  lu.assertFalse(values.is_null(nil))
  lu.assertFalse(values.is_null(false))
  lu.assertErrorMsgContains("array: t must be a table or nil, got number", values.array, 5)
  -- like the core's, array replaces a metatable the table had
  local other = setmetatable({}, { __index = {} })
  values.array(other)
  lu.assertTrue(values.is_array(other))
end

function TestRuntimePure:test_the_pure_null_is_a_sentinel()
  local lines, status, out = run_child([[
local values = require "mongostore.values"
print("type=" .. type(values.null))
print("tostring=" .. tostring(values.null))
print("is_null=" .. tostring(values.is_null(values.null)))
print("protected=" .. tostring(getmetatable(values.null)))
print("write_refused=" .. tostring(not pcall(function() values.null.x = 1 end)))
]], "")
  lu.assertEquals(status, 0, out)
  local r = parse(lines)
  lu.assertEquals(r.type, "table")
  lu.assertEquals(r.tostring, "null")
  lu.assertEquals(r.is_null, "true")
  lu.assertEquals(r.protected, "false")
  lu.assertEquals(r.write_refused, "true")
end
