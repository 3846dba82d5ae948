-- spec/01-unit/ejson_spec.lua - mongostore.ejson: documents with boxes as
-- MongoDB Extended JSON and back. Every box survives both forms (the bytes
-- bson_encode writes are the same after the trip), the relaxed and canonical
-- forms have the shapes other tools read, text written by other tools reads
-- as the types it names, and bad text or bad arguments are refused clearly.
-- Needs no server.
local lu = require "luaunit"
local ms = require "mongostore"
local core = require "mongostore.core"

local function hex(s) return (s:gsub(".", function(c) return string.format("%02x", c:byte()) end)) end
local function bytes(doc) return hex(assert(core.bson_encode(doc))) end

-- Every box, in an array so that the order of the trip is fixed.
local function every_box()
  return { v = ms.array{
    ms.objectid("65a1b2c3d4e5f60718293a4b"), ms.date(1700000000123), ms.date(-86400001), ms.int32(7),
    ms.int32(-2147483648), ms.int64("9007199254740993"), ms.int64("-9223372036854775808"),
    ms.binary("\0\1\254\255", 0), ms.binary(string.rep("\17", 16), 4), ms.binary("user", 128),
    ms.decimal("1.10"), ms.decimal("-1.5E-20"), ms.decimal("NaN"), ms.timestamp(1700000000, 5),
    ms.regex("^a.*b$", "imx"), ms.regex("x"), ms.minkey, ms.maxkey,
    1.5, -0.0, 2.0, 42, "h\u{e9}llo \u{2603}", "", true, false, ms.null, ms.array{}, {},
    { nested = { deep = ms.array{ { x = 1 }, { x = 2.5 } } } },
  -- (JavaScript code is written but not read: see below)
  } }
end

TestEjson = {}

function TestEjson:test_every_box_survives_the_canonical_form_exactly()
  local text = assert(ms.ejson.encode(every_box(), { canonical = true }))
  lu.assertEquals(bytes(assert(ms.ejson.decode(text))), bytes(every_box()), text)
end

-- Relaxed writes numbers as JSON numbers, so an integer's width is what the
-- reader makes of it (int32 when it fits); every value and box is kept.
function TestEjson:test_every_value_survives_the_relaxed_form()
  local sent = every_box()
  local text = assert(ms.ejson.encode(sent))
  local back = assert(ms.ejson.decode(text))
  lu.assertEquals(#back.v, #sent.v)
  for i, want in ipairs(sent.v) do
    local got = back.v[i]
    if type(want) == "number" then
      lu.assertEquals(got, want, "item " .. i)
    elseif getmetatable(want) == getmetatable(ms.int32(0)) then
      lu.assertEquals(got, math.tointeger(tonumber(tostring(want))), "item " .. i)
    elseif type(want) == "table" then
      lu.assertEquals(ms.ejson.encode({ x = got }), ms.ejson.encode({ x = want }), "item " .. i)
    else
      lu.assertEquals(tostring(got), tostring(want), "item " .. i)
      lu.assertEquals(type(got), type(want), "item " .. i)
    end
  end
end

function TestEjson:test_the_forms_have_the_shapes_other_tools_read()
  local doc = { v = ms.array{ ms.objectid("65a1b2c3d4e5f60718293a4b"), ms.int32(7), ms.int64(5),
                              ms.date(1700000000123), 2.5 } }
  local relaxed = assert(ms.ejson.encode(doc))
  lu.assertStrContains(relaxed, '{ "$oid" : "65a1b2c3d4e5f60718293a4b" }')
  lu.assertStrContains(relaxed, '{ "$date" : "2023-11-14T22:13:20.123Z" }')
  lu.assertStrContains(relaxed, "7, 5, ")
  local canonical = assert(ms.ejson.encode(doc, { canonical = true }))
  lu.assertStrContains(canonical, '{ "$numberInt" : "7" }')
  lu.assertStrContains(canonical, '{ "$numberLong" : "5" }')
  lu.assertStrContains(canonical, '{ "$date" : { "$numberLong" : "1700000000123" } }')
  lu.assertStrContains(canonical, '{ "$numberDouble" : "2.5" }')
end

-- What mongoexport or another driver writes (relaxed, one line).
function TestEjson:test_text_from_other_tools_reads_as_the_types_it_names()
  local doc = assert(ms.ejson.decode(
    '{"_id":{"$oid":"65a1b2c3d4e5f60718293a4b"},"at":{"$date":"2023-11-14T22:13:20.123Z"},'
    .. '"n":{"$numberLong":"9007199254740993"},"small":3,"ratio":0.5,"tags":[],"none":null,'
    .. '"price":{"$numberDecimal":"9.99"},"raw":{"$binary":{"base64":"AAE=","subType":"00"}}}'))
  lu.assertEquals(doc._id, ms.objectid("65a1b2c3d4e5f60718293a4b"))
  lu.assertEquals(doc.at, ms.date(1700000000123))
  lu.assertEquals(doc.n, 9007199254740993)
  lu.assertEquals(math.type(doc.n), "integer")
  lu.assertEquals(doc.small, 3)
  lu.assertEquals(doc.ratio, 0.5)
  lu.assertTrue(ms.is_array(doc.tags))
  lu.assertIs(doc.none, ms.null)
  lu.assertEquals(doc.price, ms.decimal("9.99"))
  lu.assertEquals(doc.raw, ms.binary("\0\1", 0))
  -- the order of the text is the order written back
  local again = assert(ms.ejson.encode(doc))
  lu.assertStrMatches(again, '^{ "_id" : .-"at" : .-"n" : .-"small" : .-"raw" : .*}$')
end

function TestEjson:test_bad_text_is_refused_clearly()
  local cases = {
    { "", "not a JSON object" }, { "   ", "not a JSON object" }, { "[1, 2]", "not a JSON object" },
    { "42", "not a JSON object" }, { "{", "ejson.decode: " }, { '{"a": 1} x', "ejson.decode: " },
    { '{"a": 1}{"b": 2}', "text after the JSON object" }, { '{"a": {"$oid": "zz"}}', "OID" },
    { '{"a": {"$date": "yesterday"}}', "date" }, { '{"a": 1e400}', "out of range" },
    { '{"a\\u0000b": 1}', "ejson.decode: " }, { '{"a": "\\ud800"}', "ejson.decode: " },
    { '{"a": "\255"}', "ejson.decode: " },
    { '{"v": [{"$code": "f"}, 1]}', 'JavaScript code ("$code") is not read' },
    { '{"c": {"\\u0024code": "f", "$scope": {}}}', 'JavaScript code ("$code") is not read' },
    { '{"v": [true, {"$code": "f"}]}', "ejson.decode: " },
    { string.rep('{"a":', 300) .. "1" .. string.rep("}", 300), "ejson.decode: " },
  }
  for _, c in ipairs(cases) do
    local doc, msg, code = ms.ejson.decode(c[1])
    lu.assertNil(doc, c[1])
    lu.assertEquals(code, "invalid", c[1])
    lu.assertStrContains(msg, c[2], false, c[1])
    lu.assertStrContains(msg, "ejson.decode", false, c[1])
  end
end

-- libbson 1.23's reader reads uninitialised memory on JavaScript code in an
-- array or with a scope holding one (valgrind shows it): code is written, and
-- refused when read, before libbson sees the text.
function TestEjson:test_javascript_code_is_written_but_not_read()
  local text = assert(ms.ejson.encode({ c = ms.code("f()"), s = ms.code("g()", { a = 1 }) }))
  lu.assertStrContains(text, '"$code" : "f()"')
  lu.assertStrContains(text, '"$scope"')
  local doc, msg, code = ms.ejson.decode(text)
  lu.assertNil(doc)
  lu.assertEquals(code, "invalid")
  lu.assertStrContains(msg, 'ejson.decode: JavaScript code ("$code") is not read')
  -- the same letters as a value, or inside a string, are only text
  doc = assert(ms.ejson.decode('{"a": "$code", "b": "x\\"$code\\": 1"}'))
  lu.assertEquals(doc.a, "$code")
end

function TestEjson:test_what_bson_cannot_hold_is_refused_clearly()
  local text, msg, code = ms.ejson.encode({ f = print })
  lu.assertNil(text)
  lu.assertEquals(code, "invalid")
  lu.assertEquals(msg, "ejson.encode.f: a function cannot be stored")
  text, msg, code = ms.ejson.encode({ holes = { [1] = 1, [3] = 3 } })
  lu.assertNil(text)
  lu.assertEquals(code, "invalid")
  lu.assertStrContains(msg, "ejson.encode.holes")
end

function TestEjson:test_wrong_arguments_raise()
  lu.assertErrorMsgContains("doc must be a table, got string", ms.ejson.encode, "x")
  lu.assertErrorMsgContains("opts must be a table, got boolean", ms.ejson.encode, {}, true)
  lu.assertErrorMsgContains("unknown option 'relaxed'", ms.ejson.encode, {}, { relaxed = true })
  lu.assertErrorMsgContains("opts.canonical must be a boolean, got string", ms.ejson.encode, {},
                            { canonical = "yes" })
  lu.assertErrorMsgContains("text must be a string, got nil", ms.ejson.decode)
  lu.assertErrorMsgContains("bytes must be a string, got table", core.bson_to_ejson, {})
  lu.assertErrorMsgContains("text must be a string, got number", core.ejson_to_bson, 1)
end

function TestEjson:test_the_core_refuses_bytes_that_are_not_one_document()
  for _, b in ipairs{ "", "\5\0\0", "\6\0\0\0\0\0", "\5\0\0\0\1", string.pack("<i4", 12) .. "\2a\0\9\0\0\0" } do
    local text, msg, code = core.bson_to_ejson(b)
    lu.assertNil(text, hex(b))
    lu.assertEquals(code, "invalid", hex(b))
    lu.assertStrContains(msg, "bson_to_ejson: ", false, hex(b))
  end
end
