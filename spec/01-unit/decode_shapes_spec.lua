-- spec/01-unit/decode_shapes_spec.lua - the document decoder's likely
-- shape (csrc/decode.c: the shape last read at a depth is followed field by
-- field): documents that match it, stop short of it, go past it, or differ
-- from it in a key, a numeric type or a repeated key, one after the other,
-- each read back exactly (the bytes written back are the bytes read), and
-- malformed bytes met while following it refused. Needs no server.
local lu = require "luaunit"
local core = require "mongostore.core"

local function cstr(s) return s .. "\0" end
local function el(t, key, payload) return string.char(t) .. cstr(key) .. payload end
local function doc(...)
  local body = table.concat({ ... })
  return string.pack("<i4", #body + 5) .. body .. "\0"
end
local function str(s) return string.pack("<i4", #s + 1) .. s .. "\0" end
local function i32(k, v) return el(0x10, k, string.pack("<i4", v)) end
local function dbl(k, v) return el(0x01, k, string.pack("<d", v)) end
local function utf8(k, s) return el(0x02, k, str(s)) end
local function sub(k, d) return el(0x03, k, d) end

local function hex(s) return (s:gsub(".", function(c) return string.format("%02x", c:byte()) end)) end

local function reads_back(bytes, ctx)
  local t, msg = core.test_decode_raw(bytes)
  lu.assertIsTable(t, ctx .. ": " .. tostring(msg))
  local back = assert(core.bson_encode(t))
  lu.assertEquals(hex(back), hex(bytes), ctx)
  return t
end

TestDecodeShapes = {}

function TestDecodeShapes:test_documents_that_differ_from_the_last_one_read()
  local base = { i32("a", 1), dbl("b", 2.5), utf8("c", "x"), sub("d", doc(i32("e", 3))) }
  local variants = {
    { "the same shape", base },
    { "one field short", { base[1], base[2], base[3] } },
    { "one field more", { base[1], base[2], base[3], base[4], i32("f", 9) } },
    { "a key changed midway", { base[1], base[2], utf8("z", "x"), base[4] } },
    { "an int32 become a double", { dbl("a", 1), base[2], base[3], base[4] } },
    { "a double become an int32", { base[1], i32("b", 2), base[3], base[4] } },
    { "a key one byte longer", { base[1], dbl("bb", 2.5), base[3], base[4] } },
    { "a key one byte shorter", { i32("", 1), base[2], base[3], base[4] } },
    { "a nested document's shape changed", { base[1], base[2], base[3], sub("d", doc(dbl("e", 3))) } },
    { "empty", {} },
  }
  -- each variant read right after the base shape and right after itself
  for _, v in ipairs(variants) do
    local bytes = doc(table.unpack(v[2]))
    reads_back(doc(table.unpack(base)), v[1] .. " (base first)")
    reads_back(bytes, v[1])
    reads_back(bytes, v[1] .. " (again)")
  end
end

-- A table holds one value per key: a repeated key keeps its first place
-- and its last value, whether or not the shape is followed.
function TestDecodeShapes:test_a_repeated_key_keeps_its_first_place_and_last_value()
  local plain = doc(i32("a", 1), dbl("b", 2.5))
  local repeated = doc(i32("a", 1), dbl("b", 2.5), i32("a", 7))
  for _, bytes in ipairs({ plain, repeated, repeated, plain, repeated }) do
    local t = assert(core.test_decode_raw(bytes))
    local want = bytes == plain and plain or doc(i32("a", 7), dbl("b", 2.5))
    lu.assertEquals(hex(assert(core.bson_encode(t))), hex(want))
  end
end

function TestDecodeShapes:test_numeric_types_are_kept_while_the_shape_is_followed()
  local bytes = doc(i32("n", 1), dbl("f", 2))
  for _ = 1, 3 do
    local t = reads_back(bytes, "int32 and double")
    lu.assertEquals(math.type(t.n), "integer")
    lu.assertEquals(math.type(t.f), "float")
  end
end

function TestDecodeShapes:test_malformed_bytes_are_refused_while_the_shape_is_followed()
  local good = doc(i32("a", 1), utf8("b", "xy"), dbl("c", 1.5))
  reads_back(good, "good")
  local cases = {
    { "a cut string", doc(i32("a", 1), el(0x02, "b", string.pack("<i4", 30) .. "xy\0"), dbl("c", 1.5)) },
    { "a cut double", doc(i32("a", 1), utf8("b", "xy"), el(0x01, "c", "\1\2")) },
    { "the key's NUL replaced", (good:gsub("b%z", "bb", 1)) },
    { "a NUL type where the next field is", doc(i32("a", 1), "\0b\0") },
  }
  for _, case in ipairs(cases) do
    reads_back(good, "good before " .. case[1])
    local t, msg, code = core.test_decode_raw(case[2])
    lu.assertNil(t, case[1])
    lu.assertEquals(code, "server", case[1] .. ": " .. tostring(msg))
  end
  reads_back(good, "good after")
end

function TestDecodeShapes:test_many_shapes_fill_the_cache_and_it_starts_again()
  for i = 1, 5000 do
    local bytes = doc(i32("a", i), sub("child", doc(i32("k" .. i, i))), utf8("after", "x"))
    reads_back(bytes, "shape " .. i)
  end
end
