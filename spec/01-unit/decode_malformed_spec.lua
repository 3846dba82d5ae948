-- spec/01-unit/decode_malformed_spec.lua - the document decoder
-- (csrc/decode.c) on bytes nothing checked first, as a server's reply
-- reaches it: every type reads as bson_decode reads it, and every cut,
-- flipped byte, bad length and hand-made malformed element is refused with
-- "server" and its offset, or reads as the document it still is. Run under
-- the asan flavour, a read past the end is an error of its own. Uses the
-- test-only core.test_decode_raw; needs no server.
local lu = require "luaunit"
local core = require "mongostore.core"

local raw = core.test_decode_raw

-- ---------------------------------------------------------------------------
-- BSON by hand

local function cstr(s) return s .. "\0" end
local function el(t, key, payload) return string.char(t) .. cstr(key) .. payload end
local function doc(...)
  local body = table.concat({ ... })
  return string.pack("<i4", #body + 5) .. body .. "\0"
end
local function str(s) return string.pack("<i4", #s + 1) .. s .. "\0" end
local OID = ("\101\161\178\195\212\229\246\7\24\41\58\75")

-- One document holding every BSON type, nested ones included.
local function every_type()
  local scope = doc(el(0x10, "n", string.pack("<i4", 7)))
  local code = str("return n")
  return doc(
    el(0x01, "double", string.pack("<d", 1.5)),
    el(0x02, "string", str("text")),
    el(0x03, "doc", doc(el(0x10, "x", string.pack("<i4", 1)), el(0x0A, "nothing", ""))),
    el(0x04, "array", doc(el(0x02, "0", str("a")), el(0x10, "1", string.pack("<i4", 2)))),
    el(0x05, "binary", string.pack("<i4", 3) .. "\0" .. "a\0b"),
    el(0x05, "old_binary", string.pack("<i4", 6) .. "\2" .. string.pack("<i4", 2) .. "xy"),
    el(0x06, "undefined", ""),
    el(0x07, "oid", OID),
    el(0x08, "yes", "\1"),
    el(0x08, "no", "\0"),
    el(0x09, "date", string.pack("<i8", 1700000000123)),
    el(0x0A, "null", ""),
    el(0x0B, "regex", cstr("^a.*b$") .. cstr("im")),
    el(0x0C, "dbpointer", str("coll") .. OID),
    el(0x0D, "code", str("function() end")),
    el(0x0E, "symbol", str("sym")),
    el(0x0F, "codewscope", string.pack("<i4", 4 + #code + #scope) .. code .. scope),
    el(0x10, "int32", string.pack("<i4", -5)),
    el(0x11, "timestamp", string.pack("<I4I4", 3, 1700000000)),
    el(0x12, "int64", string.pack("<i8", 5000000000)),
    el(0x13, "decimal", string.pack("<I8I8", 110, 0x303c000000000000)),
    el(0xFF, "minkey", ""),
    el(0x7F, "maxkey", ""))
end

-- A refusal is nil, a message that says where, and the code "server" (a
-- document too deep is "invalid", as for bson_decode).
local function assert_refused(bytes, fragment, ctx)
  local t, msg, code = raw(bytes)
  lu.assertNil(t, ctx .. ": took malformed bytes")
  lu.assertEquals(code, "server", ctx .. ": " .. tostring(msg))
  lu.assertStrContains(msg, fragment or "at byte", false, ctx)
  return msg
end

-- Whatever the bytes, a table or a refusal: never a raise, never a crash.
local function read_or_refuse(bytes, ctx)
  local ok, t, msg, code = pcall(raw, bytes)
  lu.assertTrue(ok, ctx .. ": raised " .. tostring(t))
  if t == nil then
    lu.assertIsString(msg, ctx)
    lu.assertTrue(code == "server" or code == "invalid", ctx .. ": code " .. tostring(code))
  end
  return t
end

-- ---------------------------------------------------------------------------

TestDecodeRaw = {}

function TestDecodeRaw:test_every_type_reads_as_bson_decode_reads_it()
  local bytes = every_type()
  local t = assert(raw(bytes))
  local checked = assert(core.bson_decode(bytes, { document = true }))
  lu.assertEquals(assert(core.bson_encode(t)), bytes)
  lu.assertEquals(assert(core.bson_encode(checked)), bytes)
  lu.assertEquals(math.type(t.int32), "integer")
  lu.assertEquals(t.string, "text")
  lu.assertEquals(t.double, 1.5)
  lu.assertTrue(t.yes)
  lu.assertFalse(t.no)
  lu.assertIs(t.null, core.null)
  lu.assertIs(t.doc.nothing, core.null)
  lu.assertTrue(core.is_array(t.array))
  lu.assertEquals(t.array[1], "a")
  lu.assertEquals(t.int64, 5000000000)
  lu.assertEquals(tostring(t.oid), "65a1b2c3d4e5f60718293a4b")
  lu.assertEquals(t.date:ms(), 1700000000123)
  lu.assertEquals(tostring(t.decimal), "1.10")
end

function TestDecodeRaw:test_an_empty_document_and_a_cut_header()
  lu.assertEquals(raw(doc()), {})
  assert_refused("", nil, "no bytes")
  assert_refused("\5\0\0", nil, "three bytes")
  assert_refused("\4\0\0\0", nil, "a header of 4")
  assert_refused("\6\0\0\0\0", nil, "a header longer than the bytes")
  assert_refused("\5\0\0\0\0\0", nil, "a header shorter than the bytes")
  assert_refused("\5\0\0\0\1", nil, "no final NUL")
end

function TestDecodeRaw:test_every_cut_is_refused_or_the_shorter_document_it_is()
  local bytes = every_type()
  local kept = 0
  for k = 4, #bytes - 2 do
    -- the first k bytes, closed again with a header and a NUL that agree
    local body = bytes:sub(5, k)
    local cut = string.pack("<i4", #body + 5) .. body .. "\0"
    local t = read_or_refuse(cut, "cut at " .. k)
    if t then
      kept = kept + 1
      lu.assertEquals(assert(core.bson_encode(t)), cut, "cut at " .. k .. " read as something else")
    end
    -- and merely cut: the header no longer agrees
    assert_refused(bytes:sub(1, k), nil, "truncated to " .. k)
  end
  -- one per element boundary: the empty body and each field but the last
  lu.assertEquals(kept, 23)
end

function TestDecodeRaw:test_every_flipped_byte_is_read_or_refused()
  local bytes = every_type()
  for i = 5, #bytes do
    for _, b in ipairs({ 0x00, 0x01, 0x02, 0x05, 0x7F, 0x80, 0xFF, (bytes:byte(i) + 1) % 256 }) do
      read_or_refuse(bytes:sub(1, i - 1) .. string.char(b) .. bytes:sub(i + 1), "byte " .. i .. " = " .. b)
    end
  end
end

function TestDecodeRaw:test_every_length_field_set_out_of_bounds_is_read_or_refused()
  local bytes = every_type()
  local n = #bytes
  for i = 1, n - 3 do
    local left = n - i + 1
    for _, v in ipairs({ 0, 1, 4, 5, left - 2, left - 1, left, left + 1, 0x7FFFFFFF, -1, -0x80000000 }) do
      read_or_refuse(bytes:sub(1, i - 1) .. string.pack("<i4", v) .. bytes:sub(i + 4), "int32 " .. v .. " at " .. i)
    end
  end
end

function TestDecodeRaw:test_malformed_elements_are_refused()
  local i32 = string.pack("<i4", 1)
  local cases = {
    { "a NUL type before the end", doc("\0a\0" .. i32) },
    { "a key without its NUL", string.pack("<i4", 9) .. "\16abc\0" },
    { "a string of length 0", doc(el(0x02, "s", string.pack("<i4", 0) .. "\0")) },
    { "a string longer than the document", doc(el(0x02, "s", string.pack("<i4", 50) .. "abc\0")) },
    { "a string without its NUL", doc(el(0x02, "s", string.pack("<i4", 4) .. "abcd")) },
    { "a document of length 4", doc(el(0x03, "d", string.pack("<i4", 4)), el(0x10, "x", i32)) },
    { "a document longer than its parent", doc(el(0x03, "d", string.pack("<i4", 40) .. "\0")) },
    { "a document without its final NUL", doc(el(0x03, "d", string.pack("<i4", 6) .. "\16\1")) },
    { "a document cut inside", doc(el(0x03, "d", string.pack("<i4", 11) .. "\16a\0\1\0\0\0")) },
    { "an array cut inside", doc(el(0x04, "a", string.pack("<i4", 9) .. "\16" .. "0\0\1\0")) },
    { "a binary longer than the document", doc(el(0x05, "b", string.pack("<i4", 9) .. "\0abc")) },
    { "an old binary whose lengths disagree", doc(el(0x05, "b", string.pack("<i4", 6) .. "\2" .. string.pack("<i4", 3) .. "xy")) },
    { "an old binary too short for its length", doc(el(0x05, "b", string.pack("<i4", 2) .. "\2xy")) },
    { "a boolean of 2", doc(el(0x08, "t", "\2")) },
    { "a regex without its flags' NUL", doc(el(0x0B, "r", "ab\0im")) },
    { "a dbpointer cut in its ObjectId", doc(el(0x0C, "p", str("c") .. "\1\2\3")) },
    { "a code with scope whose total disagrees", doc(el(0x0F, "c", string.pack("<i4", 30) .. str("x") .. doc())) },
    { "a code with scope whose scope is cut", doc(el(0x0F, "c", string.pack("<i4", 15) .. str("x") .. string.pack("<i4", 9) .. "\0")) },
    { "an int64 cut short", doc(el(0x12, "i", "\1\2\3")) },
    { "a double cut short", doc(el(0x01, "d", "\1\2")) },
    { "an ObjectId cut short", doc(el(0x07, "o", "\1\2\3")) },
    { "a decimal cut short", doc(el(0x13, "d", ("\0"):rep(10))) },
  }
  for _, case in ipairs(cases) do assert_refused(case[2], "corrupt document", case[1]) end
end

function TestDecodeRaw:test_an_unknown_type_is_named()
  local msg = assert_refused(doc(el(0x14, "x", "\1\2\3\4")), "unknown BSON type 0x14", "type 0x14")
  lu.assertStrContains(msg, "at byte 4")
  assert_refused(doc(el(0x10, "ok", string.pack("<i4", 1)), el(0x80, "x", "")), "unknown BSON type 0x80", "type 0x80")
end

function TestDecodeRaw:test_offsets_count_from_the_outer_document()
  -- the bad element starts at byte 4 of the inner document, at 4 + 1 + 2 of the outer
  local inner = string.pack("<i4", 8) .. "\0x\0\0"
  local msg = assert_refused(doc(el(0x03, "d", inner)), "corrupt document", "a NUL type inside")
  lu.assertStrContains(msg, "at byte 11")
end

function TestDecodeRaw:test_depth_is_bounded_as_bson_decode_bounds_it()
  local inner = doc(el(0x10, "x", string.pack("<i4", 1)))
  for _ = 1, 99 do inner = doc(el(0x03, "d", inner)) end
  lu.assertIsTable(raw(inner))                          -- 100 tables
  local t, msg, code = raw(doc(el(0x03, "d", inner)))   -- 101
  lu.assertNil(t)
  lu.assertEquals(code, "invalid")
  lu.assertStrContains(msg, "nested deeper than 100 levels")
  local deep = doc(el(0x10, "x", string.pack("<i4", 1)))
  for _ = 1, 200 do deep = doc(el(0x04, "0", deep)) end
  t, msg, code = raw(deep)
  lu.assertNil(t)
  lu.assertEquals(code, "invalid")
  lu.assertStrContains(msg, "nested deeper")
end

function TestDecodeRaw:test_a_refusal_leaves_the_cache_usable()
  local good = doc(el(0x10, "a", string.pack("<i4", 1)), el(0x02, "b", str("x")))
  assert(raw(good))
  assert_refused(doc(el(0x10, "a", string.pack("<i4", 1)), el(0x02, "b", string.pack("<i4", 9) .. "x\0")), nil, "cut b")
  local t = assert(raw(good))
  lu.assertEquals(t, { a = 1, b = "x" })
  lu.assertEquals(assert(core.bson_encode(t)), good)
end

function TestDecodeRaw:test_bytes_must_be_a_string()
  lu.assertErrorMsgContains("string expected", raw, {})
end
