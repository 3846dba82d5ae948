-- spec/01-unit/json_spec.lua - mongostore.core's JSON codec and ISO-8601 helpers
-- (csrc/json.c): the value rules, strict parsing, and agreement with Python's
-- json module and datetime/pydantic on the same texts. Needs no server.
local lu = require "luaunit"
local core = require "mongostore.core"

local null = core.null

local function assert_invalid(v, msg, code, pattern)
  lu.assertNil(v)
  lu.assertIsString(msg)
  lu.assertEquals(code, "invalid")
  if pattern then lu.assertStrContains(msg, pattern) end
end

local function is_neg_zero(x)
  return x == 0 and 1 / x == -math.huge
end

-- Python 3 runs the script with a temp file holding `input` as argv[1]; the
-- script's stdout is returned.
-- The sanitizer run preloads libasan into this process; Python must not
-- inherit it.
local PYTHON = "env -u LD_PRELOAD -u ASAN_OPTIONS -u LSAN_OPTIONS -u UBSAN_OPTIONS python3"

local function have_python()
  local ok = os.execute(PYTHON .. " -c 'import json' >/dev/null 2>&1")
  return ok == true or ok == 0
end

local function python(script, input)
  local inpath, outpath = os.tmpname(), os.tmpname()
  local f = assert(io.open(inpath, "wb"))
  f:write(input or "")
  f:close()
  local cmd = string.format("%s -c %s %s > %s", PYTHON, "'" .. script:gsub("'", "'\\''") .. "'", inpath, outpath)
  local ok = os.execute(cmd)
  f = assert(io.open(outpath, "rb"))
  local out = f:read("a")
  f:close()
  os.remove(inpath)
  os.remove(outpath)
  assert(ok == true or ok == 0, "python3 failed: " .. cmd)
  return out
end

local function lines(s)
  local t = {}
  for l in s:gmatch("([^\n]*)\n") do t[#t + 1] = l end
  return t
end

-- ---------------------------------------------------------------------------
TestJsonEncode = {}

function TestJsonEncode.test_scalars()
  lu.assertEquals(core.json_encode(true), "true")
  lu.assertEquals(core.json_encode(false), "false")
  lu.assertEquals(core.json_encode(null), "null")
  lu.assertEquals(core.json_encode(0), "0")
  lu.assertEquals(core.json_encode(-17), "-17")
  lu.assertEquals(core.json_encode(math.maxinteger), "9223372036854775807")
  lu.assertEquals(core.json_encode(math.mininteger), "-9223372036854775808")
  lu.assertEquals(core.json_encode(9007199254740993), "9007199254740993")
  lu.assertEquals(core.json_encode("hi"), '"hi"')
end

function TestJsonEncode.test_floats_as_python_repr()
  local cases = {
    {1.0, "1.0"}, {0.1, "0.1"}, {-0.0, "-0.0"}, {0.0, "0.0"}, {1e20, "1e+20"},
    {1e16, "1e+16"}, {1e15, "1000000000000000.0"}, {123.456, "123.456"},
    {0.0001, "0.0001"}, {1e-05, "1e-05"}, {1.5e-07, "1.5e-07"}, {1e300, "1e+300"},
    {5e-324, "5e-324"}, {1.7976931348623157e308, "1.7976931348623157e+308"},
    {2.0 ^ 53, "9007199254740992.0"}, {1 / 3, "0.3333333333333333"},
    {-2.5, "-2.5"}, {100.0, "100.0"}, {0.30000000000000004, "0.30000000000000004"},
  }
  for _, c in ipairs(cases) do
    lu.assertEquals(core.json_encode(c[1]), c[2], "encoding " .. string.format("%.17g", c[1]))
  end
end

function TestJsonEncode.test_string_escapes()
  lu.assertEquals(core.json_encode('"\\/\b\f\n\r\t'), [["\"\\/\b\f\n\r\t"]])
  lu.assertEquals(core.json_encode("\0\1\31\127 ~"), [["\u0000\u0001\u001f\u007f ~"]])
  -- non-ASCII UTF-8 passes through raw
  lu.assertEquals(core.json_encode("é€😀"), '"é€😀"')
end

function TestJsonEncode.test_tables()
  lu.assertEquals(core.json_encode({}), "{}")
  lu.assertEquals(core.json_encode(core.array()), "[]")
  lu.assertEquals(core.json_encode({1, 2, 3}), "[1,2,3]")
  lu.assertEquals(core.json_encode({a = {1, {b = null}}}), '{"a":[1,{"b":null}]}')
  local two = core.json_encode({a = 1, b = "x"})
  lu.assertTrue(two == '{"a":1,"b":"x"}' or two == '{"b":"x","a":1}', two)
end

function TestJsonEncode.test_depth_limit()
  local function nest(n)
    local t = {}
    for _ = 2, n do t = {t} end
    return t
  end
  lu.assertEquals(core.json_encode(nest(100)), string.rep("[", 99) .. "{}" .. string.rep("]", 99))
  local v, msg, code = core.json_encode(nest(101))
  assert_invalid(v, msg, code, "nested deeper than 100 levels")
end

function TestJsonEncode.test_invalid_values()
  local t = {}
  t.self = t
  local cases = {
    {0 / 0, "value: NaN cannot be stored"},
    {math.huge, "value: infinity cannot be stored"},
    {{x = -math.huge}, "value.x: infinity"},
    {t, "value.self: cycle"},
    {{a = {b = {t}}}, "cycle"},
    {print, "value: a function cannot be stored"},
    {{f = print}, "value.f: a function cannot be stored"},
    {{context = {items = {1, 2, print}}}, "value.context.items[3]: a function cannot be stored"},
    {io.stdout, "value: a userdata cannot be stored"},
    {coroutine.create(print), "value: a thread cannot be stored"},
    {{[true] = 1}, "keys must be strings"},
    {{[1.5] = 1}, "keys must be strings"},
    {{[0] = 1}, "keys must be strings"},
    {{1, a = 2}, "mixes string keys"},
    {{1, nil, 3}, "holes"},
    {{x = {[1] = 1, [3] = 3}}, "value.x: an array has holes"},
    {"\255", "value: string is not valid UTF-8"},
    {"\192\128", "value: string is not valid UTF-8"},           -- overlong NUL
    {"\237\160\128", "value: string is not valid UTF-8"},       -- surrogate
    {"\244\144\128\128", "value: string is not valid UTF-8"},   -- past U+10FFFF
    {"abc\226\130", "not valid UTF-8"},                         -- truncated sequence
    {{ok = {["\255"] = 1}}, "key is not valid UTF-8"},
    {{["a\0b"] = 1}, "NUL"},
    {nil, "value: a nil cannot be stored"},
  }
  for i, c in ipairs(cases) do
    local v, msg, code = core.json_encode(c[1])
    lu.assertNil(v, "case " .. i)
    lu.assertEquals(code, "invalid", "case " .. i)
    lu.assertStrContains(msg, c[2], false, "case " .. i)
  end
end

function TestJsonEncode.test_no_argument_raises()
  lu.assertErrorMsgContains("bad argument #1", core.json_encode)
end

-- ---------------------------------------------------------------------------
TestJsonDecode = {}

function TestJsonDecode.test_scalars()
  lu.assertEquals(core.json_decode("true"), true)
  lu.assertEquals(core.json_decode(" false "), false)
  lu.assertEquals(core.json_decode("null"), null)
  lu.assertEquals(core.json_decode('"x"'), "x")
  lu.assertEquals(core.json_decode("\t\r\n 42 \n"), 42)
end

function TestJsonDecode.test_numbers()
  local function check(text, want, kind)
    local v = core.json_decode(text)
    lu.assertEquals(math.type(v), kind, text)
    lu.assertEquals(v, want, text)
  end
  check("0", 0, "integer")
  check("-0", 0, "integer")
  check("9007199254740993", 9007199254740993, "integer")
  check("-9007199254740993", -9007199254740993, "integer")
  check("9223372036854775807", math.maxinteger, "integer")
  check("-9223372036854775808", math.mininteger, "integer")
  check("9223372036854775808", 9223372036854775808.0, "float")
  check("-9223372036854775809", -9223372036854775809.0, "float")
  check("1.0", 1.0, "float")
  check("1e2", 100.0, "float")
  check("1E+2", 100.0, "float")
  check("25e-1", 2.5, "float")
  check("0.1", 0.1, "float")
  check("1e300", 1e300, "float")
  check("5e-324", 5e-324, "float")
  check("1e-400", 0.0, "float")
  check("0." .. string.rep("0", 300) .. "1", 1e-301, "float")
  check("123456789012345678901234567890", 1.2345678901234568e29, "float")
  lu.assertTrue(is_neg_zero(core.json_decode("-0.0")))
end

function TestJsonDecode.test_out_of_range_numbers()
  for _, text in ipairs({"1e400", "-1e400", "1" .. string.rep("0", 400), "[1e999]"}) do
    assert_invalid(core.json_decode(text))
    local _, msg = core.json_decode(text)
    lu.assertStrContains(msg, "number out of range")
  end
end

function TestJsonDecode.test_tables_and_marks()
  local v = core.json_decode('{"a":[1,{"b":null}],"e":[],"o":{}}')
  lu.assertEquals(v, {a = {1, {b = null}}, e = {}, o = {}})
  lu.assertTrue(core.is_array(v.a))
  lu.assertTrue(core.is_array(v.e))
  lu.assertFalse(core.is_array(v.o))
  lu.assertFalse(core.is_array(v))
  lu.assertEquals(#v.e, 0)
  lu.assertEquals(core.json_encode(v.e), "[]")
  lu.assertEquals(core.json_encode(v.o), "{}")
  -- null inside arrays keeps its slot
  local n = core.json_decode("[null,null,3]")
  lu.assertEquals(#n, 3)
  lu.assertEquals(n[1], null)
end

-- A repeated key is refused by default: a check made on one reading of the
-- text (the first "kind") must not be undone by another (the last).
function TestJsonDecode.test_duplicate_keys_are_refused_unless_allowed()
  for _, text in ipairs { '{"a":1,"a":2}', '{"a":{"x":1},"b":0,"a":null}', '[{"k":1,"k":1}]',
                          '{"o":{"x":1,"x":2}}' } do
    assert_invalid(core.json_decode(text))
    local _, msg = core.json_decode(text)
    lu.assertStrContains(msg, "repeated key in object at byte", false, text)
  end
  local allow = { allow_duplicates = true }
  lu.assertEquals(core.json_decode('{"a":1,"a":2}', allow), {a = 2})
  lu.assertEquals(core.json_decode('{"a":{"x":1},"b":0,"a":null}', allow), {a = null, b = 0})
  -- the same key in two objects is not a repeat
  lu.assertEquals(core.json_decode('{"a":{"k":1},"b":{"k":2}}'), { a = { k = 1 }, b = { k = 2 } })
  lu.assertErrorMsgContains("opts.allow_duplicates must be a boolean", core.json_decode, "{}",
                            { allow_duplicates = 1 })
  lu.assertErrorMsgContains("drop opts.allow_duplicates", core.json_decode, "{}",
                            { allow_duplicates = true, exact = true })
end

-- opts.exact refuses what the default reading would change silently: an
-- integer literal outside int64 (default: the nearest double), a nonzero
-- number underflowing to 0, a key repeated in one object (default: the last
-- wins). Everything else reads exactly as without it.
function TestJsonDecode.test_exact_refuses_what_would_change()
  local exact = { exact = true }
  for _, text in ipairs({
    "9223372036854775808", "-9223372036854775809", "18446744073709551616",
    "123456789012345678901234567890", '{"n":9223372036854775808}', "[1,-9223372036854775809]",
  }) do
    assert_invalid(core.json_decode(text, exact))
    local _, msg = core.json_decode(text, exact)
    lu.assertStrContains(msg, "integer outside the 64-bit range", false, text)
    lu.assertNotNil(core.json_decode(text), "the default reading still takes " .. text)
  end
  assert_invalid(core.json_decode("1e-400", exact))
  local _, msg = core.json_decode("[0.5e-330]", exact)
  lu.assertStrContains(msg, "too small")
  _, msg = core.json_decode('{"kind":"Paid","kind":"SetState"}', exact)
  lu.assertEquals(msg, "json: repeated key in object at byte 16")
  assert_invalid(core.json_decode('{"a":{"x":1,"x":null}}', exact))
  assert_invalid(core.json_decode("1e400", exact))
end

function TestJsonDecode.test_exact_keeps_everything_else()
  local exact = { exact = true }
  local function same(text)
    local a, b = core.json_decode(text), core.json_decode(text, exact)
    lu.assertEquals(b, a, text)
    lu.assertEquals(math.type(b), math.type(a), text)
  end
  for _, text in ipairs({ "9223372036854775807", "-9223372036854775808", "9007199254740993", "0", "-0",
                          "1.5", "0.1", "1e300", "5e-324", "0e-400", "0.000e-999", "-0.0", '"x"', "null" }) do
    same(text)
  end
  lu.assertEquals(core.json_decode('{"a":{"b":1},"c":{"b":2},"d":[{"b":3},{"b":4}]}', exact),
    { a = { b = 1 }, c = { b = 2 }, d = { { b = 3 }, { b = 4 } } })
  lu.assertEquals(core.json_decode("9223372036854775807", exact), math.maxinteger)
  lu.assertEquals(core.json_decode("1", { exact = false }), 1)
  lu.assertEquals(core.json_decode("1", {}), 1)
end

function TestJsonDecode.test_exact_option_types()
  lu.assertErrorMsgContains("opts.exact must be a boolean", core.json_decode, "1", { exact = 1 })
  lu.assertErrorMsgContains("bad argument #2", core.json_decode, "1", "exact")
end

function TestJsonDecode.test_escapes()
  lu.assertEquals(core.json_decode([["\"\\\/\b\f\n\r\t"]]), '"\\/\b\f\n\r\t')
  lu.assertEquals(core.json_decode([["\u0000\u001F\u007f"]]), "\0\31\127")
  lu.assertEquals(core.json_decode([["\u00e9\u20AC"]]), "é€")
  lu.assertEquals(core.json_decode([["\ud83d\ude00"]]), "😀")
  lu.assertEquals(core.json_decode([["\uD83D\uDE00x"]]), "😀x")
  lu.assertEquals(core.json_decode([["a\u0041b"]]), "aAb")
  -- a lone surrogate becomes U+FFFD
  lu.assertEquals(core.json_decode([["\ud800"]]), "\u{FFFD}")
  lu.assertEquals(core.json_decode([["\udc00x"]]), "\u{FFFD}x")
  lu.assertEquals(core.json_decode([["\ud83dx"]]), "\u{FFFD}x")
  lu.assertEquals(core.json_decode([["\ud83d\u0041"]]), "\u{FFFD}A")
  lu.assertEquals(core.json_decode([["\ud83d\ud83d\ude00"]]), "\u{FFFD}😀")
  -- keys are decoded the same way
  lu.assertEquals(core.json_decode([[{"k\u00e9\n":1}]]), {["ké\n"] = 1})
end

function TestJsonDecode.test_raw_unicode()
  lu.assertEquals(core.json_decode('"é€😀\u{10FFFF}"'), "é€😀\u{10FFFF}")
  lu.assertEquals(core.json_decode('{"ключ":"значение"}'), {["ключ"] = "значение"})
end

function TestJsonDecode.test_bad_input()
  local bad = {
    "", " ", "\n\t", "[1,2", "[1,2,]", "[,1]", "[1 2]", '{"a" 1}', '{"a":1,}', "{a:1}",
    '{"a":1 "b":2}', '{"a"}', "{1:2}", "[01]", "01", "-01", "-", "-a", "1.", ".5", "1e", "1e+",
    "+1", "0x10", "NaN", "Infinity", "-Infinity", "[1] x", "[1]]", "{}}", "1 2", "tru",
    "nul", "nulll", "True", "'a'", [["\x"]], [["\u12"]], [["\u12G4"]], [["\U0041"]], '"abc',
    '"a\tb"', '"a\nb"', '"\0"', "\"\255\"", "\"\192\128\"", "\"\237\160\128\"",
    "\"\244\144\128\128\"", "\"\226\130\"", "\"\128\"", "[1]\0", "\0", "/*c*/1", "[1,]",
    "\239\187\191{}",   -- a byte order mark is not whitespace
    '{"\255":1}',
  }
  for i, text in ipairs(bad) do
    local v, msg, code = core.json_decode(text)
    lu.assertNil(v, "case " .. i .. ": " .. text)
    lu.assertEquals(code, "invalid", "case " .. i)
    lu.assertStrMatches(msg, "json: .*", nil, nil, "case " .. i)
  end
end

function TestJsonDecode.test_messages_name_the_byte()
  local _, msg = core.json_decode('{"a" 1}')
  lu.assertEquals(msg, "json: expected ':' at byte 6")
  _, msg = core.json_decode("[1,2")
  lu.assertEquals(msg, "json: unexpected end of input at byte 5")
  _, msg = core.json_decode("[1] x")
  lu.assertEquals(msg, "json: unexpected text after the value at byte 5")
  _, msg = core.json_decode("")
  lu.assertEquals(msg, "json: empty input")
  _, msg = core.json_decode("[01]")
  lu.assertEquals(msg, "json: leading zero in number at byte 2")
  _, msg = core.json_decode([["ab\q"]])
  lu.assertEquals(msg, "json: invalid escape at byte 4")
  _, msg = core.json_decode("[\1]")
  lu.assertEquals(msg, "json: unexpected byte 0x01 at byte 2")
end

function TestJsonDecode.test_every_prefix_of_a_document_is_an_error()
  local doc = '{"a": [1, -2.5e+3, true, false, null, "x\\n\\u00e9\\ud83d\\ude00é😀"],' ..
    ' "b" : {"c": {}, "d": []}, "e": 12345678901234567890, "f": -0.0}'
  lu.assertNotNil(core.json_decode(doc))
  for i = 0, #doc - 1 do
    local prefix = doc:sub(1, i)
    local v, msg, code = core.json_decode(prefix)
    lu.assertNil(v, "prefix " .. i)
    lu.assertEquals(code, "invalid", "prefix " .. i)
    lu.assertIsString(msg)
  end
end

function TestJsonDecode.test_deep_nesting()
  local ok = string.rep("[", 100) .. string.rep("]", 100)
  local v = core.json_decode(ok)
  lu.assertTrue(core.is_array(v))
  for _, text in ipairs({
    string.rep("[", 101) .. string.rep("]", 101),
    string.rep("[", 10000),
    string.rep("[", 10000) .. string.rep("]", 10000),
    string.rep('{"a":', 10000) .. "1" .. string.rep("}", 10000),
    string.rep("[{\"a\":", 5000),
  }) do
    local r, msg, code = core.json_decode(text)
    assert_invalid(r, msg, code, "nested deeper than 100 levels")
  end
end

function TestJsonDecode.test_argument_must_be_a_string()
  lu.assertErrorMsgContains("bad argument #1", core.json_decode, {})
  lu.assertErrorMsgContains("bad argument #1", core.json_decode)
end

-- ---------------------------------------------------------------------------
TestJsonRoundTrip = {}

local sample = {
  name = "exe-1",
  context = {
    items = {1, 2.5, "three", {four = 4}, core.array(), {}, null, true, false},
    big = 9007199254740993,
    max = math.maxinteger,
    min = math.mininteger,
    floats = {0.1, 1.0, 1e300, 5e-324, -2.5, 1e-7, 123456.789},
    text = "quote \" backslash \\ slash / controls \b\f\n\r\t\1\31\127 é € 😀",
    [""] = "empty key",
    ["ключ"] = {nested = {deeper = {deepest = core.array({null})}}},
  },
}

function TestJsonRoundTrip.test_nested_values()
  local text = assert(core.json_encode(sample))
  local back = core.json_decode(text)
  lu.assertEquals(back, sample)
  lu.assertTrue(core.is_array(back.context.items))
  lu.assertTrue(core.is_array(back.context.items[5]))
  lu.assertFalse(core.is_array(back.context.items[6]))
  lu.assertEquals(math.type(back.context.big), "integer")
  lu.assertEquals(math.type(back.context.floats[2]), "float")
  -- the decoded value encodes to the same text (objects may reorder keys)
  lu.assertEquals(core.json_decode(core.json_encode(back)), sample)
end

function TestJsonRoundTrip.test_floats_bit_exact()
  local values = {0.1, 1.0, -0.0, 1e300, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308,
    math.pi, -1 / 3, 2 ^ 53, 2 ^ 63, 1e22, 1e23}
  for _, x in ipairs(values) do
    local y = core.json_decode(core.json_encode(x))
    lu.assertEquals(string.pack("<d", y), string.pack("<d", x), string.format("%.17g", x))
  end
  -- random bit patterns over the whole range
  math.randomseed(12345)
  for _ = 1, 5000 do
    local x = string.unpack("<d", string.pack("<i4i4", math.random(-2 ^ 31, 2 ^ 31 - 1),
      math.random(-2 ^ 31, 2 ^ 31 - 1)))
    if x == x and x ~= math.huge and x ~= -math.huge then
      local text = core.json_encode(x)
      local y = core.json_decode(text)
      lu.assertEquals(math.type(y), "float", text)
      lu.assertEquals(string.pack("<d", y), string.pack("<d", x), text)
    end
  end
end

function TestJsonRoundTrip.test_matches_bson_rules()
  -- what the BSON codec refuses, the JSON codec refuses too, and vice versa
  local t = {}
  t.t = t
  for _, v in ipairs({{a = print}, {a = 0 / 0}, {a = "\255"}, t, {a = {1, nil, 3}}, {[true] = 1}}) do
    lu.assertNil(core.bson_roundtrip(v))
    lu.assertNil(core.json_encode(v))
  end
  lu.assertNotNil(core.bson_roundtrip(sample))
  lu.assertEquals(core.json_decode(core.json_encode(core.bson_roundtrip(sample))), sample)
end

function TestJsonRoundTrip.test_decimal_comma_locale()
  local old = os.setlocale(nil, "numeric")
  local set
  for _, name in ipairs({"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "fr_FR.utf8", "ru_RU.UTF-8"}) do
    set = os.setlocale(name, "numeric")
    if set then break end
  end
  if not set then
    os.setlocale(old, "numeric")
    lu.skip("no locale with a decimal comma is installed")
  end
  local ok, err = pcall(function()
    lu.assertEquals(string.format("%.1f", 0.5), "0,5")   -- the locale is in force
    lu.assertEquals(core.json_encode({0.5, 1e-7, 1e20}), "[0.5,1e-07,1e+20]")
    lu.assertEquals(core.json_decode("[0.5,2.25e1]"), {0.5, 22.5})
  end)
  os.setlocale(old, "numeric")
  if not ok then error(err, 0) end
end

-- ---------------------------------------------------------------------------
TestJsonPython = {}

function TestJsonPython.setUp()
  if not have_python() then lu.skip("python3 is not installed") end
end

function TestJsonPython.test_python_reads_what_lua_writes()
  local values = {0, 1, -1, 2 ^ 53 | 0, (2 ^ 53 | 0) + 1, -(2 ^ 53 | 0) - 1, math.maxinteger,
    math.mininteger, 0.1, 1.0, -0.0, 1e300, 5e-324, 1e16, 1e15, 1e-5, 1e-4, 1 / 3,
    1.7976931348623157e308, 123.456, true, false, null, "é€😀", "\0\1\31\127\"\\/", ""}
  local texts = {}
  for i, v in ipairs(values) do texts[i] = assert(core.json_encode(v)) end
  local doc = assert(core.json_encode(core.array(values)))
  -- Python parses the array and prints repr of each item; ints and floats must
  -- come out with the same text Lua wrote (Lua writes floats as repr does).
  local out = python([[
import json, sys
with open(sys.argv[1], "rb") as f:
    vals = json.loads(f.read().decode("utf-8"))
for v in vals:
    print(type(v).__name__, json.dumps(v, ensure_ascii=False))
]], doc)
  local got = lines(out)
  lu.assertEquals(#got, #values)
  for i, v in ipairs(values) do
    local kind = ({integer = "int", float = "float"})[math.type(v)] or
      (type(v) == "boolean" and "bool") or (v == null and "NoneType") or "str"
    local want = kind .. " " .. texts[i]
    if type(v) == "string" then
      -- Python leaves DEL raw; compare the decoded strings instead
      local pykind, pytext = got[i]:match("^(%S+) (.*)$")
      lu.assertEquals(pykind, "str")
      lu.assertEquals(core.json_decode(pytext), v)
    else
      lu.assertEquals(got[i], want, "item " .. i)
    end
  end
end

function TestJsonPython.test_random_floats_agree_with_python_repr()
  math.randomseed(777)
  local values = {}
  while #values < 3000 do
    local x = string.unpack("<d", string.pack("<i4i4", math.random(-2 ^ 31, 2 ^ 31 - 1),
      math.random(-2 ^ 31, 2 ^ 31 - 1)))
    if x == x and x ~= math.huge and x ~= -math.huge then values[#values + 1] = x end
    if #values % 3 == 0 then values[#values + 1] = math.random() * 10 ^ math.random(-8, 20) end
  end
  local out = python([[
import json, sys
for x in json.load(open(sys.argv[1])):
    print(repr(x))
]], core.json_encode(values))
  local got = lines(out)
  lu.assertEquals(#got, #values)
  local mismatches = 0
  for i, x in ipairs(values) do
    if got[i] ~= core.json_encode(x) then mismatches = mismatches + 1 end
    -- the value itself must be exact whatever the text
    lu.assertEquals(core.json_decode(got[i]), x, got[i])
  end
  lu.assertEquals(mismatches, 0)
end

function TestJsonPython.test_lua_reads_what_python_writes()
  local text = assert(core.json_encode(sample))
  local out = python([[
import json, sys
v = json.load(open(sys.argv[1], encoding="utf-8"))
print(json.dumps(v, ensure_ascii=True))
print(json.dumps(v, ensure_ascii=False, indent=2, sort_keys=True))
print(json.dumps(v, separators=(",", ":")))
print(json.dumps(["\ud800", "\udfff", "\U0001F600", "\x00\x1f\x7f\u2028"]))
]], text)
  local got = lines(out)
  lu.assertEquals(#got >= 4, true)
  local ascii, pretty, compact, lone = got[1], table.concat(got, "\n", 2, #got - 2), got[#got - 1], got[#got]
  lu.assertStrContains(ascii, [[\ud83d\ude00]])
  lu.assertNotStrContains(ascii, "😀")
  lu.assertStrContains(pretty, "😀")
  for _, t in ipairs({ascii, pretty, compact}) do
    local v = core.json_decode(t)
    lu.assertEquals(v, sample)
    lu.assertTrue(core.is_array(v.context.items[5]))
    lu.assertEquals(math.type(v.context.big), "integer")
    lu.assertEquals(v.context.big, 9007199254740993)
    lu.assertEquals(v.context.min, math.mininteger)
  end
  lu.assertEquals(core.json_decode(lone), {"\u{FFFD}", "\u{FFFD}", "😀", "\0\31\127\u{2028}"})
end

function TestJsonPython.test_python_rejects_nothing_lua_writes()
  -- every escape Lua writes is one Python's strict parser accepts
  local s = {}
  for b = 0, 127 do s[#s + 1] = string.char(b) end
  local text = core.json_encode({all = table.concat(s), u = "é€😀"})
  local out = python([[
import json, sys
v = json.loads(open(sys.argv[1], "rb").read().decode("utf-8", "strict"), strict=True)
print("".join("%02x" % ord(c) for c in v["all"]), v["u"] == "\u00e9\u20ac\U0001F600")
]], text)
  local hex = {}
  for b = 0, 127 do hex[#hex + 1] = string.format("%02x", b) end
  lu.assertEquals(out, table.concat(hex) .. " True\n")
end

-- ---------------------------------------------------------------------------
TestIso8601 = {}

function TestIso8601.test_format()
  lu.assertEquals(core.time_to_iso(0), "1970-01-01T00:00:00Z")
  lu.assertEquals(core.time_to_iso(0.5), "1970-01-01T00:00:00.500000Z")
  lu.assertEquals(core.time_to_iso(1796035950), "2026-11-30T10:52:30Z")
  lu.assertEquals(core.time_to_iso(1796035950.123456), "2026-11-30T10:52:30.123456Z")
  lu.assertEquals(core.time_to_iso(1.9999996), "1970-01-01T00:00:02Z")        -- carry
  lu.assertEquals(core.time_to_iso(86399.9999999), "1970-01-02T00:00:00Z")    -- carry into the day
  lu.assertEquals(core.time_to_iso(-0.5), "1969-12-31T23:59:59.500000Z")
  lu.assertEquals(core.time_to_iso(951782400), "2000-02-29T00:00:00Z")        -- leap day
  lu.assertEquals(core.time_to_iso(-62135596800), "0001-01-01T00:00:00Z")
  lu.assertEquals(core.time_to_iso(253402300799.5), "9999-12-31T23:59:59.500000Z")
end

function TestIso8601.test_format_rejects()
  assert_invalid(core.time_to_iso(0 / 0))
  assert_invalid(core.time_to_iso(math.huge))
  assert_invalid(core.time_to_iso(-math.huge))
  assert_invalid(core.time_to_iso(253402300800))
  assert_invalid(core.time_to_iso(-62135596801))
  lu.assertErrorMsgContains("bad argument #1", core.time_to_iso, "soon")
  lu.assertErrorMsgContains("bad argument #1", core.time_to_iso)
end

function TestIso8601.test_parse()
  local cases = {
    {"1970-01-01T00:00:00Z", 0},
    {"1970-01-01T00:00:00.5Z", 0.5},
    {"2026-11-30T10:52:30Z", 1796035950},
    {"2026-11-30T10:52:30.123456Z", 1796035950.123456},
    {"2026-11-30 10:52:30z", 1796035950},
    {"2026-11-30T10:52:30", 1796035950},                       -- no zone: UTC
    {"2026-11-30T10:52", 1796035920},
    {"2026-11-30", 1795996800},
    {"2026-11-30T12:52:30+02:00", 1796035950},                 -- 2 hours ahead of UTC
    {"2026-11-30T12:52:30+0200", 1796035950},
    {"2026-11-30T05:22:30-05:30", 1796035950},
    {"2026-11-30T10:52:30-00:00", 1796035950},
    {"2026-11-30T10:52:30.000000001Z", 1796035950.000000001},
    {"2000-02-29T00:00:00Z", 951782400},
    {"2016-12-31T23:59:60Z", 1483228800},                     -- a leap second reads as the next
    {"0001-01-01T00:00:00Z", -62135596800},
  }
  for _, c in ipairs(cases) do
    local t = core.iso_to_time(c[1])
    lu.assertEquals(math.type(t), "float", c[1])
    lu.assertAlmostEquals(t, c[2], 1e-6, c[1])
  end
end

function TestIso8601.test_parse_rejects()
  for _, s in ipairs({"", "garbage", "2026-02-30T00:00:00Z", "2025-02-29", "1900-02-29",
    "2026-13-01", "2026-00-10", "2026-01-00", "2026-04-31", "2026-11-30T25:00:00Z",
    "2026-11-30T24:00:00Z", "2026-11-30T10:60:00Z", "2026-11-30T10:00:61Z",
    "2026-11-30T10Z", "2026-11-30T10:52:30.Z", "2026-11-30T10:52:30.1234567890Z",
    "2026-11-30T10:52:30+2", "2026-11-30T10:52:30+02", "2026-11-30T10:52:30+02:", "2026-11-30T10:52:30+24:00",
    "2026-11-30T10:52:30+02:60", "2026-11-30T10:52:30ZZ", "2026-11-30T10:52:30 ", " 2026-11-30",
    "2026-11-30X10:52:30", "26-11-30", "2026/11/30", "0000-01-01T00:00:00Z", "2026-1-30",
    "2026-11-30T1:52", "2026-11-30T10:52:30\0"}) do
    local t, msg, code = core.iso_to_time(s)
    lu.assertNil(t, s)
    lu.assertEquals(code, "invalid", s)
    lu.assertStrContains(msg, "iso_to_time: ")
  end
  lu.assertErrorMsgContains("bad argument #1", core.iso_to_time, {})
end

function TestIso8601.test_round_trip()
  for _, t in ipairs({0, 0.5, 1.25, 1796035950.123456, 951782400, -1.75, 1e9 + 0.000001,
    253402300799.5, -62135596800}) do
    lu.assertAlmostEquals(core.iso_to_time(core.time_to_iso(t)), t, 1e-6)
  end
  math.randomseed(99)
  for _ = 1, 2000 do
    local t = math.random(-62135596800, 253402300798) + math.random(0, 999999) / 1e6
    local s = core.time_to_iso(t)
    lu.assertEquals(core.time_to_iso(core.iso_to_time(s)), s)
  end
end

function TestIso8601.test_agrees_with_python()
  if not have_python() then lu.skip("python3 is not installed") end
  local ts = {0, 0.5, 1.9999996, 86399.9999999, -0.5, 951782400, 1796035950.123456, 1e9 + 0.1234565,
    1e9 + 0.1234575, 1.0000005, 1.0000015, 2.5e-7, -62135596800, 253402300799.5}
  math.randomseed(4242)
  for _ = 1, 500 do ts[#ts + 1] = math.random(-2 ^ 40, 2 ^ 40) / 1024 end
  for _ = 1, 500 do ts[#ts + 1] = math.random(0, 4102444800) + math.random() end
  local input = {}
  for i, t in ipairs(ts) do input[i] = string.format("%.17g", t) end
  local out = python([[
import datetime, sys
for line in open(sys.argv[1]):
    d = datetime.datetime.fromtimestamp(float(line), datetime.timezone.utc)
    print(d.isoformat().replace("+00:00", "Z"), repr(d.timestamp()))
]], table.concat(input, "\n") .. "\n")
  local got = lines(out)
  lu.assertEquals(#got, #ts)
  for i, t in ipairs(ts) do
    local iso, stamp = got[i]:match("^(%S+) (%S+)$")
    lu.assertEquals(core.time_to_iso(t), iso, input[i])
    lu.assertAlmostEquals(core.iso_to_time(iso), tonumber(stamp), 1e-6)
  end
  -- and Python's own offsets parse to the same instant
  out = python([[
import datetime, sys
base = datetime.datetime(2024, 2, 29, 23, 30, 15, 250000, datetime.timezone.utc)
for mins in (0, 120, -300, 330, -570, 840, -720):
    tz = datetime.timezone(datetime.timedelta(minutes=mins))
    print(base.astimezone(tz).isoformat(), repr(base.timestamp()))
    print(base.astimezone(tz).isoformat(sep=" ", timespec="seconds"), repr(float(int(base.timestamp()))))
]])
  for _, l in ipairs(lines(out)) do
    local iso, stamp = l:match("^(.+) (%S+)$")
    lu.assertAlmostEquals(core.iso_to_time(iso), tonumber(stamp), 1e-6, iso)
  end
end

function TestIso8601.test_agrees_with_pydantic()
  if not have_python() then lu.skip("python3 is not installed") end
  local probe = python([[
try:
    import pydantic
    print("yes" if pydantic.VERSION.startswith("2") else "no")
except ImportError:
    print("no")
]])
  if probe ~= "yes\n" then lu.skip("pydantic 2 is not installed") end
  local ts = {0, 0.5, 1796035950, 1796035950.12, 1796035950.000001, 1.9999996, -0.5}
  local input = {}
  for i, t in ipairs(ts) do input[i] = string.format("%.17g", t) end
  local out = python([[
import datetime, sys, pydantic
class M(pydantic.BaseModel):
    t: datetime.datetime
for line in open(sys.argv[1]):
    d = datetime.datetime.fromtimestamp(float(line), datetime.timezone.utc)
    print(M(t=d).model_dump_json())
]], table.concat(input, "\n") .. "\n")
  local got = lines(out)
  lu.assertEquals(#got, #ts)
  for i, t in ipairs(ts) do
    lu.assertEquals(got[i], core.json_encode({t = core.time_to_iso(t)}), input[i])
  end
end

-- A key holding \u0000 could be decoded but neither encoded again nor
-- stored: it is refused where it is read.
function TestJsonDecode.test_a_nul_in_a_key_is_refused()
  local v, err, code = core.json_decode('{"a\\u0000b":1}')
  lu.assertNil(v)
  lu.assertEquals(code, "invalid")
  lu.assertStrContains(err, "key contains a NUL byte")
  lu.assertEquals(core.json_decode('{"a":"x\\u0000y"}').a, "x\0y", "a NUL in a string value is fine")
end
