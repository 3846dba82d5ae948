-- spec/01-unit/timeout_event_spec.lua - execution.timeout_event, harel's
-- Timeout id "timeout:<id>:<path>:<fire_at>" with fire_at as Python's repr()
-- writes a float, in pure Lua: the same text as the C core's JSON writer
-- (which writes a float that way) for integers, fractions, large and small,
-- subnormal and negative numbers, and for values whose shortest form ends in
-- a tie; the same as CPython's own f-string, which harel's id is; and the
-- same on LuaJIT, whose own number formatter differs from glibc's on ties.
local lu = require "luaunit"
local core = require "mongostore.core"
local execution = require "mongostore.execution"
local runtime = require "mongostore.runtime"
local helper = require "helpers"

local PREFIX = "timeout:e-1:A.B:"

local function formatted(v)
  local id = execution.timeout_event("e-1", "A.B", v).id
  lu.assertEquals(id:sub(1, #PREFIX), PREFIX)
  return id:sub(#PREFIX + 1)
end

-- The values: fixed edge cases, then seeded random ones of several shapes.
local function cases()
  local out = {
    0, 1, 2, 10, 110, 1764504100, 2 ^ 53, 2 ^ 53 + 2, 2 ^ 63, 2 ^ 64, 1e15, 1e16, 1e17, 1e21, 1e22, 1e100, 1e308,
    1.7976931348623157e308, 0.1, 0.2, 0.3, 1 / 3, 2 / 3, 0.5, 0.25, 1.5, 1764504100.5, 1764504100.123456,
    1764504100.1, 123456.789, 1e-4, 1.5e-4, 9.99e-5, 1e-5, 1e-7, 1e-300, 2.2250738585072014e-308,
    2.2250738585072009e-308, 5e-324, 1e-323, 4.9406564584124654e-320, 9.999999999999999e15, 999999999999999.9,
    1234567890123456.0, 12345678901234567.0, 0.1 + 0.2, 100.0, 1e16 - 2, 3.14159, 2.5e-5,
  }
  local n = #out
  for i = 1, n do out[#out + 1] = -out[i] end
  out[#out + 1] = -0.0
  local rng = { 12345 }
  local function rand() -- a small LCG, so the cases are the same on every run
    rng[1] = (rng[1] * 1103515245 + 12345) % 2147483648
    return rng[1] / 2147483648
  end
  for i = 1, 3000 do
    local shape = i % 6
    local v
    if shape == 0 then v = math.floor(rand() * 2 ^ 40) -- integers
    elseif shape == 1 then v = rand() * 10 ^ math.floor(rand() * 60 - 30) -- any magnitude
    elseif shape == 2 then v = 1.7e9 + math.floor(rand() * 1e9) / 1e6 -- epoch seconds with microseconds
    elseif shape == 3 then v = 1.7e9 + rand() -- epoch seconds, full fraction
    elseif shape == 4 then -- ties at the 17th digit: quarters beside 2^51
      v = 2 ^ 51 + math.floor(rand() * 2 ^ 50) + ({ 0.25, 0.75, 0.5 })[i % 3 + 1]
    else v = math.floor(rand() * 1e6) / 10 ^ math.floor(rand() * 9) end -- short decimals
    out[#out + 1] = (i % 7 == 0) and -v or v
  end
  return out
end

TestTimeoutEvent = {}

function TestTimeoutEvent:test_the_event()
  local ev = execution.timeout_event("e-1", "A.B", 110)
  lu.assertEquals(ev, { id = "timeout:e-1:A.B:110.0", kind = "Timeout", data = { path = "A.B", fire_at = 110 } })
  lu.assertEquals(runtime.timeout_event("e-1", "A.B", 110), ev, "the runtime's name for it gives the same event")
end

function TestTimeoutEvent:test_as_python_writes_floats()
  -- what repr() gives in CPython for these
  local python = {
    { 110, "110.0" }, { 0.1, "0.1" }, { 1e16, "1e+16" }, { 1e15, "1000000000000000.0" }, { 1e-4, "0.0001" },
    { 1e-5, "1e-05" }, { 5e-324, "5e-324" }, { 1764504100.5, "1764504100.5" },
    { 0.1 + 0.2, "0.30000000000000004" }, { 2 ^ 63, "9.223372036854776e+18" }, { 1 / 3, "0.3333333333333333" },
    { 1.7976931348623157e308, "1.7976931348623157e+308" }, { -2.5, "-2.5" },
  }
  for _, c in ipairs(python) do lu.assertEquals(formatted(c[1]), c[2], tostring(c[1])) end
end

function TestTimeoutEvent:test_the_same_text_as_the_core_for_every_case()
  local n = 0
  for _, v in ipairs(cases()) do
    lu.assertEquals(formatted(v), core.json_encode(v + 0.0), string.format("%.17g", v))
    n = n + 1
  end
  lu.assertTrue(n > 3000)
end

-- fire_at + 0.0 makes the number a float, as it always did, and so a -0.0
-- becomes 0.0 on the way (IEEE: -0 + 0 is +0).
function TestTimeoutEvent:test_a_negative_zero_is_written_as_zero()
  lu.assertEquals(formatted(-0.0), "0.0")
  lu.assertEquals(formatted(-0.0), core.json_encode(-0.0 + 0.0))
end

function TestTimeoutEvent:test_a_fire_at_that_is_not_finite_raises()
  for _, v in ipairs { 1 / 0, -1 / 0, 0 / 0 } do
    lu.assertErrorMsgContains("timeout_event: fire_at must be a finite number", execution.timeout_event, "e", "p", v)
  end
end

-- LuaJIT formats numbers itself and rounds a tie away from zero; the ids
-- must not depend on the VM. Every case's text from LuaJIT is compared with
-- this process's (skipped where there is no LuaJIT).
function TestTimeoutEvent:test_luajit_writes_the_same_text()
  local ok = os.execute("command -v luajit >/dev/null 2>&1")
  if not ok then lu.skip("no luajit on this machine") end
  local vals = {}
  for i, v in ipairs(cases()) do vals[i] = string.format("%.17g", v) end
  local input = os.tmpname()
  local f = assert(io.open(input, "w"))
  f:write(table.concat(vals, "\n"), "\n")
  f:close()
  -- the function alone, loaded from execution.lua's text: the module itself
  -- needs the core, which the LuaJIT build of this checkout may not have
  local src = assert(io.open(helper.root() .. "/lua/mongostore/execution.lua")):read("a")
  local fn = src:match("\n(function M%.timeout_event%(.-\nend)\n")
  lu.assertNotNil(fn, "execution.timeout_event not found in execution.lua")
  local code = string.format([[
M, format = {}, string.format
assert(loadstring(%q))()
for line in io.lines(%q) do
  local v = tonumber(line)
  if v == 0 and line:sub(1, 1) == "-" then v = -0.0 end
  io.write(M.timeout_event("e-1", "A.B", v).id, "\n")
end]], fn, input)
  local p = assert(io.popen("luajit -e " .. helper.shell_quote(code) .. " 2>&1"))
  local out = p:read("a")
  p:close()
  os.remove(input)
  local i = 0
  for line in out:gmatch("[^\n]+") do
    i = i + 1
    local v = tonumber(vals[i])
    if v == 0 and vals[i]:sub(1, 1) == "-" then v = -0.0 end
    lu.assertEquals(line, execution.timeout_event("e-1", "A.B", v).id, vals[i])
  end
  lu.assertEquals(i, #vals, out:sub(1, 500))
end

-- Python itself: harel writes the id as f"timeout:{id}:{path}:{fire_at}"
-- with fire_at a float, so every case is compared with CPython's text
-- (skipped where there is no Python).
function TestTimeoutEvent:test_python_writes_the_same_text()
  local py = os.getenv("MONGOSTORE_PYTHON")
  if py == nil or py == "" then py = "python3" end
  if not os.execute("command -v " .. py .. " >/dev/null 2>&1") then lu.skip("no python on this machine") end
  local vals = {}
  for i, v in ipairs(cases()) do vals[i] = string.format("%.17g", v + 0.0) end
  local input = os.tmpname()
  local f = assert(io.open(input, "w"))
  f:write(table.concat(vals, "\n"), "\n")
  f:close()
  local code = "import sys\nfor line in open(sys.argv[1]):\n    print(f'timeout:e-1:A.B:{float(line) + 0.0}')"
  local p = assert(io.popen(py .. " -c " .. helper.shell_quote(code) .. " " .. input .. " 2>&1"))
  local out = p:read("a")
  p:close()
  os.remove(input)
  local i = 0
  for line in out:gmatch("[^\n]+") do
    i = i + 1
    lu.assertEquals(execution.timeout_event("e-1", "A.B", tonumber(vals[i])).id, line, vals[i])
  end
  lu.assertEquals(i, #vals, out:sub(1, 500))
end
