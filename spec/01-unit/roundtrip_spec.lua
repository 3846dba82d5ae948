-- spec/01-unit/roundtrip_spec.lua - a randomized property of the value codecs
-- (csrc/value.c, csrc/json.c): random Lua values come back equal through BSON
-- and through JSON, and what the value rules refuse both codecs refuse.
-- Needs no server. MONGOSTORE_ROUNDTRIP_SEED=N replays a run; the seed is in
-- every failure message.
local lu = require "luaunit"
local core = require "mongostore.core"

local null, array = core.null, core.array
local MAX_DEPTH = 100 -- tables on a path, the top document included

local SEED = tonumber(os.getenv("MONGOSTORE_ROUNDTRIP_SEED") or "") or (os.time() ~ (math.random(0) & 0xffff))
local VALUES = tonumber(os.getenv("MONGOSTORE_ROUNDTRIP_VALUES") or "") or 1000

local function seeded(name)
  math.randomseed(SEED)
  return string.format("%s (seed %d: MONGOSTORE_ROUNDTRIP_SEED=%d replays it)", name, SEED, SEED)
end

-- ---------------------------------------------------------------------------
-- random values

local function pick(list) return list[math.random(#list)] end

local INTS = {
  0, 1, -1, 2, 127, 128, -129, 255, 65536, 2 ^ 31 // 1, -(2 ^ 31 // 1), 2 ^ 31 // 1 - 1, 2 ^ 32 // 1,
  math.maxinteger, math.mininteger, math.maxinteger - 1, math.mininteger + 1,
  (1 << 53) - 1, 1 << 53, (1 << 53) + 1, -(1 << 53), -(1 << 53) - 1, (1 << 53) + 2, (1 << 62),
}
local function random_int()
  local r = math.random(4)
  if r == 1 then return pick(INTS) end
  if r == 2 then return math.random(-1000, 1000) end
  if r == 3 then return math.random(0) >> math.random(0, 63) end
  return math.random(0)   -- all 64 bits
end

local FLOATS = {
  0.0, -0.0, 1.0, -1.0, 0.1, 1 / 3, -2.5, 1e308, -1e308, 1.7976931348623157e308, -1.7976931348623157e308,
  5e-324, -5e-324, 2.2250738585072014e-308, 2.225073858507201e-308, 1e-310, 2.0 ^ 53, 2.0 ^ 53 + 2,
  -(2.0 ^ 53), 2.0 ^ 63, -(2.0 ^ 63), 2.0 ^ 64, 1e22, 1e23, 1e15, 1e16, 1e-5, 1e-4, 123456.789,
}
local function bits_to_float(i) return (string.unpack("<d", string.pack("<i8", i))) end
local function random_float()
  local r = math.random(4)
  if r == 1 then return pick(FLOATS) end
  if r == 2 then return (math.random() - 0.5) * 10 ^ math.random(-20, 20) end
  local x
  repeat
    if r == 3 then
      -- a subnormal: exponent bits zero, random mantissa and sign
      x = bits_to_float(math.random(0) & 0x800fffffffffffff)
    else
      x = bits_to_float(math.random(0))
    end
  until x == x and x ~= math.huge and x ~= -math.huge
  return x
end

local PIECES = {
  "a", "Z", "0", " ", "plain text", "\0", "\b", "\f", "\n", "\r", "\t", "\"", "\\", "/", "\1", "\31",
  "\127", "'", "<", "&", "é", "ß", "ключ", "日本語", "😀", "\u{FFFF}", "\u{FFFE}", "\u{10FFFF}", "\u{2028}",
  "\u{FEFF}", "\u{80}", "\u{7FF}", "\u{800}", "\u{10000}", "\\u0000", "\\ud800",
}
local function random_codepoint()
  local r = math.random(4)
  if r == 1 then return math.random(0, 0x7f) end
  if r == 2 then return math.random(0x80, 0x7ff) end
  if r == 3 then
    local c
    repeat c = math.random(0x800, 0xffff) until c < 0xd800 or c > 0xdfff
    return c
  end
  return math.random(0x10000, 0x10ffff)
end
local function random_string(no_nul)
  local parts = {}
  for i = 1, math.random(0, 8) do
    if math.random(2) == 1 then parts[i] = pick(PIECES) else parts[i] = utf8.char(random_codepoint()) end
  end
  local s = table.concat(parts)
  if no_nul then s = s:gsub("%z", "") end
  return s
end

local KEYS = { "", "a", "_id", "a.b", ".", "..", "$", "$set", "$where", "a$b", "1", "0", "-1", "1.5",
  "ключ", "日本", "😀", "key with space", "\u{10FFFF}", "x\n", "\"q\"", "\\" }
local function random_key()
  if math.random(2) == 1 then return pick(KEYS) end
  return random_string(true)
end

local random_value

-- A table of kind "doc" or "array"; arrays are marked, or left as plain
-- sequences (which the codecs read as arrays too) when not empty.
local function random_table(depth, budget, kind)
  local t = {}
  local n = math.random(0, depth < 3 and 6 or 3)
  kind = kind or (math.random(2) == 1 and "doc" or "array")
  for i = 1, n do
    if budget[1] <= 0 then break end
    local v = random_value(depth + 1, budget)
    if kind == "array" then t[i] = v else t[random_key()] = v end
  end
  if kind == "array" and (next(t) == nil or math.random(2) == 1) then array(t) end
  return t
end

function random_value(depth, budget)
  budget[1] = budget[1] - 1
  local r = math.random(20)
  if depth < MAX_DEPTH and budget[1] > 0 and r <= 7 then return random_table(depth, budget) end
  if r <= 8 then return null end
  if r <= 9 then return math.random(2) == 1 end
  if r <= 12 then return random_int() end
  if r <= 15 then return random_float() end
  return random_string(false)
end

-- A chain of tables exactly `tables` deep counted from the top document (a
-- document), each below it a document or an array at random, with a random
-- scalar (or nothing) at the bottom.
local function deep_chain(tables)
  local top = {}
  local cur, cur_kind = top, "doc"
  for level = 2, tables + 1 do
    local child, child_kind
    if level <= tables then
      child, child_kind = {}, (math.random(2) == 1 and "doc" or "array")
    elseif math.random(2) == 1 then
      child = random_int()
    end
    if child ~= nil then
      if cur_kind == "doc" then cur[random_key()] = child else cur[1] = child end
    end
    if cur_kind == "array" and (cur[1] == nil or math.random(2) == 1) then array(cur) end
    cur, cur_kind = child, child_kind
  end
  return top
end

local function depth_of(v)
  if type(v) ~= "table" then return 0 end
  local d = 0
  for _, x in pairs(v) do d = math.max(d, depth_of(x)) end
  return d + 1
end

local function random_document()
  if math.random(25) == 1 then return deep_chain(math.random(MAX_DEPTH - 5, MAX_DEPTH)) end
  return random_table(1, { math.random(1, 60) }, "doc")
end

-- ---------------------------------------------------------------------------
-- equality as the codecs see it

-- "array" for a marked table or a non-empty sequence, "doc" otherwise.
local function kind(t)
  if core.is_array(t) then return "array" end
  local k = next(t)
  if k == nil or type(k) == "string" then return "doc" end
  return "array"
end

local function show(x)
  if math.type(x) == "float" then return string.format("%.17g (float)", x) end
  if math.type(x) == "integer" then return string.format("%d (integer)", x) end
  if type(x) == "string" then return string.format("%q", x) end
  return tostring(x)
end

-- nil when `got` (read back) equals `want`, else where and how they differ.
-- Integers and floats are different values, floats compare by their bits
-- (-0.0 is not 0.0), and what was read back must be marked exactly where
-- the original is an array.
local function diff(want, got, path)
  path = path or "value"
  if type(want) ~= type(got) then return path .. ": " .. show(want) .. " came back as " .. show(got) end
  if type(want) == "number" then
    if math.type(want) ~= math.type(got) then return path .. ": " .. show(want) .. " came back as " .. show(got) end
    if string.pack("<n", want) ~= string.pack("<n", got) then
      return path .. ": " .. show(want) .. " came back as " .. show(got)
    end
    return nil
  end
  if type(want) ~= "table" then
    if want ~= got then return path .. ": " .. show(want) .. " came back as " .. show(got) end
    return nil
  end
  local k = kind(want)
  if (k == "array") ~= core.is_array(got) then
    return path .. ": a " .. k .. " came back " .. (core.is_array(got) and "marked as an array" or "unmarked")
  end
  for key, v in pairs(want) do
    local sub = type(key) == "string" and (path .. "." .. string.format("%q", key)) or (path .. "[" .. key .. "]")
    if got[key] == nil then return sub .. ": missing" end
    local d = diff(v, got[key], sub)
    if d then return d end
  end
  for key in pairs(got) do
    if want[key] == nil then return path .. ": extra key " .. show(key) end
  end
  return nil
end

local function assert_same(want, got, what, ctx)
  local d = diff(want, got)
  if d then lu.fail(ctx .. ": " .. what .. ": " .. d) end
end

-- ---------------------------------------------------------------------------
TestRoundTrip = {}

function TestRoundTrip.test_random_values_through_bson_and_json()
  local ctx = seeded("random values")
  local started = os.clock()
  for i = 1, VALUES do
    local v = random_document()
    local where = ctx .. ", value " .. i
    local bytes, msg = core.bson_encode(v)
    lu.assertIsString(bytes, where .. ": bson_encode refused: " .. tostring(msg))
    local back, msg2 = core.bson_decode(bytes)
    lu.assertIsTable(back, where .. ": bson_decode refused: " .. tostring(msg2))
    assert_same(v, back, "BSON", where)
    assert_same(v, core.bson_roundtrip(v), "bson_roundtrip", where)

    local text, jmsg = core.json_encode(v)
    lu.assertIsString(text, where .. ": json_encode refused: " .. tostring(jmsg))
    local jback, jmsg2 = core.json_decode(text)
    lu.assertIsTable(jback, where .. ": json_decode refused " .. text .. ": " .. tostring(jmsg2))
    assert_same(v, jback, "JSON " .. (#text < 300 and text or text:sub(1, 300) .. "..."), where)

    -- across: JSON of what BSON gave back, and BSON of what JSON gave back
    assert_same(v, core.json_decode(core.json_encode(back)), "BSON then JSON", where)
    assert_same(v, core.bson_decode(core.bson_encode(jback)), "JSON then BSON", where)

    -- scalars and arrays at the top level travel through JSON alone
    local member = v[next(v) or 1]
    if member ~= nil then
      local t2 = core.json_encode(member)
      assert_same(member, core.json_decode(t2), "JSON of a member " .. t2, where)
    end
  end
  -- a bound on the spec's own cost, not an assertion on timing
  io.write(string.format("  %d random values, seed %d, %.2fs CPU\n", VALUES, SEED, os.clock() - started))
end

function TestRoundTrip.test_the_edges_of_numbers()
  local ctx = seeded("numbers")
  local doc = { i = {}, f = {} }
  for _, x in ipairs(INTS) do doc.i[#doc.i + 1] = x end
  for _, x in ipairs(FLOATS) do doc.f[#doc.f + 1] = x end
  for _ = 1, 300 do
    doc.i[#doc.i + 1] = random_int()
    doc.f[#doc.f + 1] = random_float()
  end
  assert_same(doc, core.bson_decode(core.bson_encode(doc)), "BSON", ctx)
  assert_same(doc, core.json_decode(core.json_encode(doc)), "JSON", ctx)
  -- one by one, so a failure names the number
  for _, x in ipairs(doc.f) do
    local t = core.json_encode(x)
    assert_same(x, core.json_decode(t), "JSON text " .. t, ctx)
  end
end

function TestRoundTrip.test_depth_up_to_the_limit()
  local ctx = seeded("depth")
  for tables = MAX_DEPTH - 2, MAX_DEPTH do
    for _ = 1, 5 do
      local v = deep_chain(tables)
      lu.assertEquals(depth_of(v), tables, ctx)
      assert_same(v, core.bson_decode(core.bson_encode(v)), "BSON at " .. tables .. " tables", ctx)
      assert_same(v, core.json_decode(core.json_encode(v)), "JSON at " .. tables .. " tables", ctx)
    end
  end
end

-- ---------------------------------------------------------------------------
TestRefusals = {}

local function refused_by_both(v, what, pattern, ctx)
  local b, bmsg, bcode = core.bson_encode(v)
  lu.assertNil(b, ctx .. ": bson_encode took " .. what)
  lu.assertIsString(bmsg, ctx .. ": " .. what)
  lu.assertEquals(bcode, "invalid", ctx .. ": " .. what)
  local j, jmsg, jcode = core.json_encode(v)
  lu.assertNil(j, ctx .. ": json_encode took " .. what)
  lu.assertIsString(jmsg, ctx .. ": " .. what)
  lu.assertEquals(jcode, "invalid", ctx .. ": " .. what)
  lu.assertNil(core.bson_roundtrip(v), ctx .. ": bson_roundtrip took " .. what)
  if pattern then
    lu.assertStrContains(bmsg, pattern, false, ctx .. ": " .. what)
    lu.assertStrContains(jmsg, pattern, false, ctx .. ": " .. what)
  end
end

local function nest(tables)
  local t = {}
  for _ = 2, tables do t = { x = t } end
  return t
end

-- The bad values, each as a maker (a fresh one per use: cycles must be new).
local BAD = {
  { "NaN", function() return 0 / 0 end, "NaN" },
  { "-NaN", function() return -(0 / 0) end, "NaN" },
  { "infinity", function() return math.huge end, "infinity" },
  { "-infinity", function() return -math.huge end, "infinity" },
  { "a function", function() return print end, "function" },
  { "a coroutine", function() return coroutine.create(print) end, "thread" },
  { "a file", function() return io.stderr end, "cannot be stored" },
  { "a cycle", function() local t = {} t.self = t return t end, "cycle" },
  { "a longer cycle", function() local a, b = {}, {} a.b = b b[1] = a return a end, "cycle" },
  { "a table nested past the limit", function() return nest(MAX_DEPTH) end, "nested deeper than 100 levels" },
  { "a byte 0xff", function() return "ab\255" end, "UTF-8" },
  { "an overlong NUL (C0 80)", function() return "a\192\128" end, "UTF-8" },
  { "an overlong slash", function() return "\193\175" end, "UTF-8" },
  { "a UTF-16 surrogate", function() return "\237\160\128" end, "UTF-8" },
  { "a code point past U+10FFFF", function() return "\244\144\128\128" end, "UTF-8" },
  { "a cut sequence", function() return "\226\130" end, "UTF-8" },
  { "a lone continuation byte", function() return "\128" end, "UTF-8" },
  { "string and array keys mixed", function() return { 1, 2, a = 3 } end, "mixes" },
  { "an array with a hole", function() return { 1, nil, 3 } end, "holes" },
  { "a float key", function() return { [1.5] = 1 } end, "keys must be strings" },
  { "a boolean key", function() return { [true] = 1 } end, "keys must be strings" },
  { "a zero key", function() return { [0] = 1 } end, "keys must be strings" },
  { "a negative key", function() return { [-1] = 1 } end, "keys must be strings" },
  { "a table key", function() return { [{}] = 1 } end, "keys must be strings" },
  { "a marked array with a string key", function() return array({ a = 1 }) end, "mixes" },
  { "a key with NUL", function() return { ["a\0b"] = 1 } end, "NUL" },
  { "a key that is not UTF-8", function() return { ["k\255"] = 1 } end, "UTF-8" },
}

function TestRefusals.test_each_bad_value_alone()
  local ctx = seeded("bad values")
  for _, case in ipairs(BAD) do
    refused_by_both({ v = case[2]() }, case[1], case[3], ctx)
    refused_by_both({ a = { b = array({ 1, case[2]() }) } }, case[1] .. " inside an array", case[3], ctx)
  end
  -- at the top: BSON wants a document, JSON a value
  refused_by_both(nest(MAX_DEPTH + 1), "101 tables", "nested deeper than 100 levels", ctx)
  local c = {}
  c.me = c
  refused_by_both(c, "a document that contains itself", "cycle", ctx)
end

function TestRefusals.test_a_bad_value_anywhere_in_a_random_value()
  local ctx = seeded("bad values in random documents")
  for i = 1, 150 do
    local v = random_table(1, { math.random(5, 40) }, "doc")
    -- walk down to a random table of v and put the bad value there
    local case = BAD[math.random(#BAD)]
    local holder, depth = v, 1
    while depth < 20 and math.random(3) > 1 do
      local subs = {}
      for _, x in pairs(holder) do if type(x) == "table" then subs[#subs + 1] = x end end
      if #subs == 0 then break end
      holder = subs[math.random(#subs)]
      depth = depth + 1
    end
    local bad = case[2]()
    if kind(holder) == "array" then
      holder[#holder + 1] = bad
    else
      holder["bad" .. i] = bad
    end
    refused_by_both(v, case[1] .. " in random value " .. i, case[3], ctx)
  end
end

function TestRefusals.test_codecs_read_no_more_than_they_write()
  local ctx = seeded("decoders")
  -- JSON: 100 nested tables read, 101 refused
  lu.assertNotNil(core.json_decode(string.rep("[", MAX_DEPTH) .. string.rep("]", MAX_DEPTH)), ctx)
  local v, msg, code = core.json_decode(string.rep("[", MAX_DEPTH + 1) .. string.rep("]", MAX_DEPTH + 1))
  lu.assertNil(v, ctx)
  lu.assertEquals(code, "invalid", ctx)
  lu.assertStrContains(msg, "nested deeper than 100 levels")

  -- BSON bytes laid out by hand, as another program might write them
  local function doc(body) return string.pack("<i4", #body + 5) .. body .. "\0" end
  local function el(t, key, payload) return string.char(t) .. key .. "\0" .. payload end
  local function str(s) return string.pack("<i4", #s + 1) .. s .. "\0" end
  local function nest_bytes(tables)
    local d = doc("")
    for _ = 2, tables do d = doc(el(3, "x", d)) end
    return d
  end
  lu.assertNotNil(core.bson_decode(nest_bytes(MAX_DEPTH)), ctx)
  local hostile = {
    { "101 tables", nest_bytes(MAX_DEPTH + 1), "nested deeper than 100 levels" },
    { "a string that is not UTF-8", doc(el(2, "s", str("\255"))), "UTF-8" },
    { "an overlong NUL", doc(el(2, "s", str("a\192\128"))), "UTF-8" },
    { "a key that is not UTF-8", doc(el(16, "k\255", string.pack("<i4", 1))), nil },
    { "binary that is not UTF-8", doc(el(5, "b", string.pack("<i4", 1) .. "\0\255")), "UTF-8" },
    { "a NaN double", doc(el(1, "d", string.pack("<d", 0 / 0))), "NaN" },
    { "an infinite double", doc(el(1, "d", string.pack("<d", -math.huge))), "infinity" },
    { "a byte after the document", doc("") .. "\0", nil },
    { "a short length", string.pack("<i4", 4) .. "\0", nil },
    { "a length past the end", string.pack("<i4", 64) .. "\0", nil },
    { "no terminator", string.pack("<i4", 5) .. "\1", nil },
    { "a string running past its document", string.pack("<i4", 14) .. "\2k\0" .. string.pack("<i4", 100) .. "ab\0\0", nil },
    { "an unknown type", doc(el(0x42, "k", "")), nil },
    -- libbson 1.23's bson_validate passes this one: the cut is 70 levels down
    { "a cut sub-document deep down", (function()
        local d = doc(el(3, "x", string.pack("<i4", 50) .. "\0"))
        for _ = 1, 70 do d = doc(el(3, "x", d)) end
        return d
      end)(), "malformed" },
    { "empty", "", nil },
  }
  for _, case in ipairs(hostile) do
    local t, m, c = core.bson_decode(case[2])
    lu.assertNil(t, ctx .. ": bson_decode took " .. case[1])
    lu.assertIsString(m, ctx .. ": " .. case[1])
    lu.assertEquals(c, "invalid", ctx .. ": " .. case[1])
    if case[3] then lu.assertStrContains(m, case[3], false, ctx .. ": " .. case[1]) end
  end
  -- types with no Lua counterpart read as something bson_encode takes back
  local odd = doc(el(7, "oid", ("\1"):rep(12)) .. el(9, "date", string.pack("<i8", 1700000000123)) ..
    el(17, "ts", string.pack("<I4I4", 5, 7)) .. el(16, "i32", string.pack("<i4", -5)) ..
    el(6, "undef", "") .. el(0xff, "min", "") .. el(11, "re", "a\0i\0") .. el(5, "bin", string.pack("<i4", 2) .. "\0hi"))
  local t = core.bson_decode(odd)
  lu.assertIsTable(t, ctx)
  lu.assertEquals(t.oid, ("01"):rep(12))
  lu.assertEquals(math.type(t.i32), "integer")
  lu.assertEquals(t.i32, -5)
  lu.assertEquals(t.undef, null)
  lu.assertEquals(t.bin, "hi")
  assert_same(t, core.bson_decode(core.bson_encode(t)), "odd types", ctx)
  -- programmer mistakes raise, naming the argument
  lu.assertErrorMsgContains("bson_decode: bytes must be a string, got number", core.bson_decode, 5)
  lu.assertErrorMsgContains("bson_encode: doc must be a table, got string", core.bson_encode, "x")
  local arr, amsg, acode = core.bson_encode(array({ 1 }))
  lu.assertNil(arr)
  lu.assertEquals(acode, "invalid")
  lu.assertStrContains(amsg, "got an array")
end
