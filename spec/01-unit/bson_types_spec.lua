-- spec/01-unit/bson_types_spec.lua - the BSON boxes (csrc/bsontypes.c) and the
-- document form of decoding (csrc/value.c, ms_push_document): every
-- constructor with its tostring, == and bad input, each type's exact bytes
-- both ways, and shapes: a decoded table writes back in its fields' order
-- with their numeric types, new keys after, changed values by their own type.
-- Needs no server: BSON bytes are built here by hand with string.pack.
local lu = require "luaunit"
local core = require "mongostore.core"
local values = require "mongostore.values"

-- ---------------------------------------------------------------------------
-- BSON by hand

local function cstr(s) return s .. "\0" end
local function el(t, key, payload) return string.char(t) .. cstr(key) .. payload end
local function doc(...)
  local body = table.concat({ ... })
  return string.pack("<i4", #body + 5) .. body .. "\0"
end
local function str(s) return string.pack("<i4", #s + 1) .. s .. "\0" end
local function i32(k, v) return el(0x10, k, string.pack("<i4", v)) end
local function i64(k, v) return el(0x12, k, string.pack("<i8", v)) end
local function dbl(k, v) return el(0x01, k, string.pack("<d", v)) end
local function utf8(k, s) return el(0x02, k, str(s)) end
local function sub(k, d) return el(0x03, k, d) end
local function arr(k, ...)
  local items = {}
  for i, e in ipairs({ ... }) do items[i] = e(tostring(i - 1)) end
  return el(0x04, k, doc(table.unpack(items)))
end
local function hexbytes(h) return (h:gsub("..", function(x) return string.char(tonumber(x, 16)) end)) end

local function decode(bytes) return assert(core.bson_decode(bytes, { document = true })) end
local function encode(t) return assert(core.bson_encode(t)) end
local function hex(s) return (s:gsub(".", function(c) return string.format("%02x", c:byte()) end)) end
local function assert_bytes(got, want) lu.assertEquals(hex(got), hex(want)) end

local OID = "65a1b2c3d4e5f60718293a4b"

-- ---------------------------------------------------------------------------

TestBoxes = {}

function TestBoxes:test_objectid()
  local a = core.objectid(OID)
  lu.assertEquals(tostring(a), OID)
  lu.assertEquals(a:hex(), OID)
  lu.assertEquals(a:time(), 0x65a1b2c3)
  lu.assertTrue(a == core.objectid(OID:upper()))
  lu.assertFalse(a == core.objectid("65a1b2c3d4e5f60718293a4c"))
  lu.assertTrue(a < core.objectid("65a1b2c3d4e5f60718293a4c"))
  local fresh, other = core.objectid(), core.objectid()
  lu.assertStrMatches(tostring(fresh), ("%x"):rep(24))
  lu.assertFalse(fresh == other)
  lu.assertEquals(getmetatable(a).__name, "mongostore.ObjectId")
  for _, bad in ipairs({ "", "xyz", OID .. "0", OID:sub(2) .. "g" }) do
    local v, msg, code = core.objectid(bad)
    lu.assertNil(v)
    lu.assertEquals(code, "invalid")
    lu.assertStrContains(msg, "objectid")
  end
  lu.assertErrorMsgContains("hex must be a string", core.objectid, 5)
end

function TestBoxes:test_date()
  local d = core.date(1700000000123)
  lu.assertEquals(tostring(d), "2023-11-14T22:13:20.123Z")
  lu.assertEquals(d:ms(), 1700000000123)
  lu.assertEquals(tostring(core.date(0)), "1970-01-01T00:00:00.000Z")
  lu.assertEquals(tostring(core.date(-1)), "1969-12-31T23:59:59.999Z")
  lu.assertEquals(tostring(core.date(951782400000)), "2000-02-29T00:00:00.000Z")
  lu.assertEquals(tostring(core.date(253402300799999)), "9999-12-31T23:59:59.999Z")
  lu.assertTrue(core.date(5) == core.date(5))
  lu.assertFalse(core.date(5) == core.date(6))
  lu.assertTrue(core.date(5) < core.date(6))
  lu.assertEquals(math.type(core.date():ms()), "integer")
  local v, msg, code = core.date(1.5)
  lu.assertNil(v)
  lu.assertEquals(code, "invalid")
  lu.assertStrContains(msg, "date")
  lu.assertErrorMsgContains("ms must be an integer", core.date, "now")
end

function TestBoxes:test_binary()
  local b = core.binary("a\0\255", 0x80)
  lu.assertEquals(b:data(), "a\0\255")
  lu.assertEquals(b:subtype(), 0x80)
  lu.assertEquals(core.binary("x"):subtype(), 0)
  lu.assertEquals(tostring(b), "Binary(128, 3 bytes)")
  lu.assertTrue(core.binary("x", 4) == core.binary("x", 4))
  lu.assertFalse(core.binary("x", 4) == core.binary("x", 0))
  lu.assertFalse(core.binary("x") == core.binary("y"))
  for _, bad in ipairs({ 256, -1, 1.5 }) do
    local v, _, code = core.binary("x", bad)
    lu.assertNil(v)
    lu.assertEquals(code, "invalid")
  end
  lu.assertErrorMsgContains("data must be a string", core.binary, nil)
  lu.assertErrorMsgContains("subtype must be an integer", core.binary, "x", "0")
end

function TestBoxes:test_decimal_keeps_its_text()
  for _, text in ipairs({ "1.10", "0", "-0", "1E+3", "0.0001", "-1.5E-20", "NaN", "Infinity", "-Infinity",
                          "9999999999999999999999999999999999" }) do
    lu.assertEquals(tostring(core.decimal(text)), text)
  end
  lu.assertTrue(core.decimal("1.10") == core.decimal("1.10"))
  lu.assertFalse(core.decimal("1.10") == core.decimal("1.1"))
  for _, bad in ipairs({ "", "abc", "1.2.3", "1e99999" }) do
    local v, msg, code = core.decimal(bad)
    lu.assertNil(v, bad)
    lu.assertEquals(code, "invalid")
    lu.assertStrContains(msg, "decimal")
  end
  lu.assertErrorMsgContains("text must be a string", core.decimal, 1.1)
end

function TestBoxes:test_int32()
  local n = core.int32(-5)
  lu.assertEquals(tostring(n), "-5")
  lu.assertEquals(n:tonumber(), -5)
  lu.assertTrue(core.int32(7) == core.int32(7))
  lu.assertFalse(core.int32(7) == core.date(7))
  lu.assertNotNil(core.int32(2147483647))
  lu.assertNotNil(core.int32(-2147483648))
  for _, bad in ipairs({ 2147483648, -2147483649, 1.5 }) do
    local v, _, code = core.int32(bad)
    lu.assertNil(v)
    lu.assertEquals(code, "invalid")
  end
  lu.assertErrorMsgContains("n must be an integer", core.int32, "5")
end

function TestBoxes:test_timestamp()
  local t = core.timestamp(1700000000, 5)
  lu.assertEquals(t:t(), 1700000000)
  lu.assertEquals(t:i(), 5)
  lu.assertEquals(tostring(t), "Timestamp(1700000000, 5)")
  lu.assertTrue(t == core.timestamp(1700000000, 5))
  lu.assertTrue(core.timestamp(1, 9) < core.timestamp(2, 0))
  lu.assertNotNil(core.timestamp(4294967295, 4294967295))
  for _, bad in ipairs({ { -1, 0 }, { 0, 4294967296 }, { 0.5, 1 } }) do
    local v, _, code = core.timestamp(bad[1], bad[2])
    lu.assertNil(v)
    lu.assertEquals(code, "invalid")
  end
  lu.assertErrorMsgContains("i must be an integer", core.timestamp, 1)
end

function TestBoxes:test_regex()
  local r = core.regex("^a.*b$", "xmi")
  lu.assertEquals(r:pattern(), "^a.*b$")
  lu.assertEquals(r:flags(), "imx")           -- the order BSON keeps
  lu.assertEquals(tostring(r), "/^a.*b$/imx")
  lu.assertEquals(core.regex("x"):flags(), "")
  lu.assertTrue(r == core.regex("^a.*b$", "imx"))
  lu.assertFalse(r == core.regex("^a.*b$", "i"))
  for _, bad in ipairs({ { "a\0b", "" }, { "a", "q" }, { "a", "ii" }, { "\255", "" } }) do
    local v, _, code = core.regex(bad[1], bad[2])
    lu.assertNil(v)
    lu.assertEquals(code, "invalid")
  end
  lu.assertErrorMsgContains("pattern must be a string", core.regex, 1)
  lu.assertErrorMsgContains("flags must be a string", core.regex, "a", 1)
end

function TestBoxes:test_keys_and_undefined_are_single_values()
  lu.assertEquals(tostring(core.minkey), "MinKey")
  lu.assertEquals(tostring(core.maxkey), "MaxKey")
  lu.assertEquals(tostring(core.undefined), "undefined")
  lu.assertTrue(core.minkey == core.minkey)
  lu.assertFalse(core.minkey == core.maxkey)
  lu.assertTrue(rawequal(decode(doc(el(0xff, "k", ""))).k, core.minkey))
  lu.assertTrue(rawequal(decode(doc(el(0x7f, "k", ""))).k, core.maxkey))
  lu.assertTrue(rawequal(decode(doc(el(0x06, "k", ""))).k, core.undefined))
end

function TestBoxes:test_code_symbol_dbpointer()
  local c = core.code("function () {}")
  lu.assertEquals(c:code(), "function () {}")
  lu.assertEquals(tostring(c), "function () {}")
  lu.assertTrue(c == core.code("function () {}"))
  local cs = assert(core.code("f(a)", { a = 1 }))
  lu.assertEquals(cs:code(), "f(a)")
  lu.assertEquals(cs:scope(), { a = 1 })
  lu.assertFalse(cs == c)
  local v, _, code = core.code("f", { [1] = true, x = 1 })
  lu.assertNil(v)
  lu.assertEquals(code, "invalid")
  lu.assertErrorMsgContains("scope must be a table", core.code, "f", 1)
  local s = core.symbol("sym")
  lu.assertEquals(s:symbol(), "sym")
  lu.assertFalse(s == core.code("sym"))
  local p = core.dbpointer("coll", core.objectid(OID))
  lu.assertEquals(p:collection(), "coll")
  lu.assertTrue(p:id() == core.objectid(OID))
  lu.assertTrue(p == core.dbpointer("coll", OID))
  lu.assertEquals(tostring(p), "DBPointer(coll, " .. OID .. ")")
  local _, _, pcode = core.dbpointer("coll", "nope")
  lu.assertEquals(pcode, "invalid")
  lu.assertErrorMsgContains("id must be a string", core.dbpointer, "coll", 5)
end

function TestBoxes:test_a_method_of_one_kind_refuses_another()
  lu.assertErrorMsgContains("mongostore.ObjectId expected, got mongostore.Date", core.objectid(OID).hex, core.date(1))
  lu.assertErrorMsgContains("mongostore.Date expected, got number", core.date(1).ms, 5)
end

-- ---------------------------------------------------------------------------

TestBoxBytes = {}

-- each box, written and read back: the exact element BSON has for it
local CASES = {
  { "objectid", function() return core.objectid(OID) end, el(0x07, "v", hexbytes(OID)) },
  { "date", function() return core.date(-86400001) end, el(0x09, "v", string.pack("<i8", -86400001)) },
  { "binary", function() return core.binary("\0\1", 0x80) end, el(0x05, "v", string.pack("<i4B", 2, 0x80) .. "\0\1") },
  { "binary old", function() return core.binary("old", 2) end,
    el(0x05, "v", string.pack("<i4Bi4", 7, 2, 3) .. "old") },
  { "decimal", function() return core.decimal("1.10") end,
    el(0x13, "v", string.pack("<I8I8", 110, 0x303C000000000000)) },
  { "int32", function() return core.int32(-7) end, i32("v", -7) },
  { "timestamp", function() return core.timestamp(10, 20) end, el(0x11, "v", string.pack("<I4I4", 20, 10)) },
  { "regex", function() return core.regex("a+", "si") end, el(0x0b, "v", cstr("a+") .. cstr("is")) },
  { "minkey", function() return core.minkey end, el(0xff, "v", "") },
  { "maxkey", function() return core.maxkey end, el(0x7f, "v", "") },
  { "undefined", function() return core.undefined end, el(0x06, "v", "") },
  { "code", function() return core.code("x()") end, el(0x0d, "v", str("x()")) },
  { "code with scope", function() return core.code("y", { a = core.int32(1) }) end,
    el(0x0f, "v", string.pack("<i4", 4 + 6 + 12) .. str("y") .. doc(i32("a", 1))) },
  { "symbol", function() return core.symbol("s") end, el(0x0e, "v", str("s")) },
  { "dbpointer", function() return core.dbpointer("c", OID) end, el(0x0c, "v", str("c") .. hexbytes(OID)) },
}

function TestBoxBytes:test_each_box_writes_its_bson_type()
  for _, c in ipairs(CASES) do
    lu.assertEquals(hex(encode({ v = c[2]() })), hex(doc(c[3])), c[1])
  end
end

function TestBoxBytes:test_each_type_reads_as_its_box_and_writes_back_the_same()
  for _, c in ipairs(CASES) do
    local back = decode(doc(c[3]))
    if c[1] == "int32" then
      lu.assertEquals(back.v, -7)                    -- a plain number, its type remembered
      lu.assertEquals(math.type(back.v), "integer")
    else
      lu.assertTrue(back.v == c[2](), c[1])
      lu.assertEquals(getmetatable(back.v).__name, getmetatable(c[2]()).__name, c[1])
    end
    assert_bytes(encode(back), doc(c[3]))
  end
end

function TestBoxBytes:test_boxes_inside_arrays_and_plain_tables()
  local t = { list = core.array({ core.int32(1), core.date(2), core.minkey }), inner = { id = core.objectid(OID) } }
  local back = decode(encode(t))
  lu.assertEquals(back.list[1], 1)
  lu.assertEquals(math.type(back.list[1]), "integer")
  lu.assertTrue(back.list[2] == core.date(2))
  lu.assertTrue(back.inner.id == core.objectid(OID))
  assert_bytes(encode(back), encode(t))
end

function TestBoxBytes:test_the_plain_codec_is_unchanged()
  -- executions read through ms_push_bson_doc: an ObjectId is its hex, a date seconds
  local bytes = doc(el(0x07, "o", hexbytes(OID)), el(0x09, "d", string.pack("<i8", 1500)), i32("n", 3))
  local plain = assert(core.bson_decode(bytes))
  lu.assertEquals(plain.o, OID)
  lu.assertEquals(plain.d, 1.5)
  lu.assertNil(getmetatable(plain))
  lu.assertEquals(core.bson_roundtrip({ n = 3 }), { n = 3 })
end

function TestBoxBytes:test_bad_options_raise()
  lu.assertErrorMsgContains("opts must be a table", core.bson_decode, doc(), 5)
end

-- ---------------------------------------------------------------------------

TestShapes = {}

local SAMPLE = doc(i32("z", 1), dbl("a", 2.0), utf8("m", "x"), i64("k", 5), dbl("f", 0.5),
  sub("inner", doc(dbl("y", 3.0), i32("x", 4))),
  arr("list", function(k) return i32(k, 1) end, function(k) return dbl(k, 2.0) end,
      function(k) return i64(k, 3) end, function(k) return utf8(k, "four") end))

function TestShapes:test_order_and_numeric_types_are_kept()
  local t = decode(SAMPLE)
  lu.assertEquals(t.z, 1)
  lu.assertEquals(math.type(t.z), "integer")
  lu.assertEquals(math.type(t.a), "float")
  lu.assertEquals(t.k, 5)
  lu.assertEquals(t.list[3], 3)
  assert_bytes(encode(t), SAMPLE)
end

function TestShapes:test_arrays_with_a_shape_are_arrays_everywhere()
  local t = decode(SAMPLE)
  lu.assertTrue(core.is_array(t.list))
  lu.assertTrue(values.is_array(t.list))
  lu.assertEquals(getmetatable(t.list).__name, "array")
  lu.assertFalse(core.is_array(t))
  lu.assertFalse(values.is_array(t.inner))
  -- an empty array and one whose items need no types: the plain mark
  local e = decode(doc(arr("a"), arr("b", function(k) return utf8(k, "s") end)))
  lu.assertTrue(rawequal(getmetatable(e.a), getmetatable(core.array())))
  lu.assertTrue(core.is_array(e.b))
  assert_bytes(encode(e), doc(arr("a"), arr("b", function(k) return utf8(k, "s") end)))
  -- JSON sees an array too
  lu.assertEquals(core.json_encode(t.list), '[1,2.0,3,"four"]')
end

function TestShapes:test_new_keys_come_after_the_remembered_ones()
  local t = decode(SAMPLE)
  t.added = "new"
  local out = encode(t)
  assert_bytes(out, doc(SAMPLE:sub(5, -2), utf8("added", "new")))
end

function TestShapes:test_removed_keys_are_left_out()
  local t = decode(SAMPLE)
  t.a, t.inner = nil, nil
  local with = decode(doc(i32("z", 1), utf8("m", "x"), i64("k", 5), dbl("f", 0.5),
    arr("list", function(k) return i32(k, 1) end, function(k) return dbl(k, 2.0) end,
        function(k) return i64(k, 3) end, function(k) return utf8(k, "four") end)))
  assert_bytes(encode(t), encode(with))
end

function TestShapes:test_changed_values_keep_the_type_while_it_fits()
  local t = decode(doc(i32("n", 1), dbl("d", 2.5)))
  t.n = 2147483647
  assert_bytes(encode(t), doc(i32("n", 2147483647), dbl("d", 2.5)))
  t.n = 2147483648                                   -- no longer fits: int64
  assert_bytes(encode(t), doc(i64("n", 2147483648), dbl("d", 2.5)))
  t.n, t.d = "text", 4.0
  assert_bytes(encode(t), doc(utf8("n", "text"), dbl("d", 4.0)))
  t.n, t.d = core.int32(3), 7                        -- an integer is written as one
  assert_bytes(encode(t), doc(i32("n", 3), i64("d", 7)))
end

function TestShapes:test_array_items_keep_their_types_and_new_ones_are_plain()
  local t = decode(doc(arr("a", function(k) return i32(k, 1) end, function(k) return dbl(k, 2.0) end)))
  t.a[3] = 3
  assert_bytes(encode(t), doc(arr("a", function(k) return i32(k, 1) end, function(k) return dbl(k, 2.0) end,
                                  function(k) return i64(k, 3) end)))
end

function TestShapes:test_documents_of_one_shape_share_it()
  local a = decode(doc(i32("x", 1), utf8("y", "a")))
  local b = decode(doc(i32("x", 2), utf8("y", "b")))
  local c = decode(doc(dbl("x", 2.0), utf8("y", "b")))
  local d = decode(doc(utf8("y", "b"), i32("x", 2)))
  lu.assertTrue(rawequal(getmetatable(a), getmetatable(b)))
  lu.assertFalse(rawequal(getmetatable(a), getmetatable(c)))
  lu.assertFalse(rawequal(getmetatable(a), getmetatable(d)))
  assert_bytes(encode(d), doc(utf8("y", "b"), i32("x", 2)))
end

function TestShapes:test_keys_named_like_metamethods_stay_fields()
  local bytes = doc(utf8("__index", "i"), utf8("__newindex", "n"), utf8("__eq", "e"), utf8("__gc", "g"),
    utf8("__name", "x"), utf8("__tostring", "t"), utf8("__len", "l"))
  local t = decode(bytes)
  lu.assertNil(t.missing)
  lu.assertEquals(t.__index, "i")
  t.other = 1
  lu.assertEquals(rawget(t, "other"), 1)
  lu.assertStrContains(tostring(t), "mongostore.document")
  lu.assertEquals(#t, 0)
  lu.assertTrue(t ~= decode(bytes))
  t.other = nil
  assert_bytes(encode(t), bytes)
end

function TestShapes:test_repeated_keys_read_once()
  local t = decode(doc(i32("a", 1), i32("b", 2), i32("a", 3)))
  lu.assertEquals(t.a, 3)
  assert_bytes(encode(t), doc(i32("a", 3), i32("b", 2)))
end

function TestShapes:test_many_distinct_shapes()
  -- past the cache's bound it starts again; every table keeps its own shape
  local kept = {}
  for i = 1, 5000 do
    local bytes = doc(i32("k" .. i, i), dbl("d", 1.0))
    local t = decode(bytes)
    if i % 997 == 0 then kept[#kept + 1] = { t, bytes } end
    assert_bytes(encode(t), bytes)
  end
  for _, k in ipairs(kept) do assert_bytes(encode(k[1]), k[2]) end
end

function TestShapes:test_a_shape_survives_setmetatable_being_replaced()
  local t = decode(doc(i32("b", 1), i32("a", 2)))
  setmetatable(t, nil)
  local back = decode(encode(t))
  lu.assertEquals(back, { a = 2, b = 1 })
  lu.assertEquals(math.type(back.a), "integer")
end

function TestShapes:test_nested_as_deep_as_the_encoder_takes()
  local inner = doc(i32("x", 1))
  for _ = 1, 98 do inner = doc(sub("d", inner)) end
  local t = decode(inner)
  assert_bytes(encode(t), inner)
  local v, _, code = core.bson_decode(doc(sub("d", doc(sub("d", inner)))), { document = true })
  lu.assertNil(v)
  lu.assertEquals(code, "invalid")
end

function TestShapes:test_remembered_doubles_write_back_even_when_not_finite()
  local bytes = doc(dbl("nan", 0 / 0), dbl("inf", math.huge), dbl("ninf", -math.huge), dbl("nz", -0.0))
  local t = decode(bytes)
  lu.assertEquals(t.inf, math.huge)
  assert_bytes(encode(t), bytes)
  -- a new non-finite value is still refused
  t.extra = math.huge
  local out, _, code = core.bson_encode(t)
  lu.assertNil(out)
  lu.assertEquals(code, "invalid")
end

-- Documents of a cursor are mostly alike, so the decoder tries the shape it
-- last read at the same depth first: each way of differing from it.
function TestShapes:test_a_document_unlike_the_one_before()
  local base = { i32("a", 1), utf8("b", "x"), dbl("c", 1.5), sub("d", doc(i32("e", 2))) }
  local variants = {
    doc(table.unpack(base)),
    doc(i32("a", 1), utf8("b", "x"), dbl("c", 1.5)),                            -- fewer fields
    doc(i32("a", 1), utf8("b", "x"), dbl("c", 1.5), sub("d", doc(i32("e", 2))), utf8("z", "more")),
    doc(i32("a", 1), utf8("B", "x"), dbl("c", 1.5)),                            -- another key
    doc(i32("a", 1), i32("b", 5), dbl("c", 1.5)),                               -- another type
    doc(i32("a", 1), utf8("bb", "x"), dbl("c", 1.5)),                           -- a longer key
    doc(i32("a", 1), i32("a", 2), utf8("b", "x")),                              -- a repeated key
    doc(i32("a", 1), i32("a", 2), utf8("b", "x")),
    doc(),
  }
  for round = 1, 3 do
    for i, bytes in ipairs(variants) do
      local t = decode(bytes)
      local want = i == 7 and doc(i32("a", 2), utf8("b", "x")) or i == 8 and doc(i32("a", 2), utf8("b", "x")) or bytes
      lu.assertEquals(hex(encode(t)), hex(want), string.format("round %d, variant %d", round, i))
    end
  end
end

function TestShapes:test_the_cache_emptied_while_a_document_is_read()
  -- every parent has the shape read before it; every child a new one, so
  -- the cache fills and starts again in the middle of a parent
  for i = 1, 5000 do
    local bytes = doc(i32("a", i), sub("child", doc(i32("k" .. i, i))), utf8("after", "x"))
    assert_bytes(encode(decode(bytes)), bytes)
  end
end
