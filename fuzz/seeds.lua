-- fuzz/seeds.lua - writes the committed seed corpus, fuzz/corpus/json and
-- fuzz/corpus/bson, from the cases below. The BSON is laid out byte by byte
-- here (string.pack), so seeds also hold types and shapes that mongostore's
-- own encoder never writes. Run: lua5.4 fuzz/seeds.lua (from the checkout).
local dir = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."

local function write(path, bytes)
  local f = assert(io.open(path, "wb"))
  f:write(bytes)
  f:close()
end

-- ---- JSON ----
local json = {
  'null', 'true', 'false', '0', '-0', '-0.0', '1.5e308', '5e-324', '2.2250738585072014e-308',
  '9007199254740993', '9223372036854775807', '-9223372036854775808', '9223372036854775808',
  '123456789012345678901234567890', '1E+2', '0.1e-3', '"plain"', '""',
  '"esc \\" \\\\ \\/ \\b \\f \\n \\r \\t \\u0000 \\u001f \\u007f"',
  '"\\ud83d\\ude00 \\ud800 \\udc00 \\uFFFF"', '"ключ 日本 😀"',
  '[]', '{}', '[[]]', '[{}]', '{"a":[]}', '[1,2.0,"3",null,true,false]',
  '{"a.b":1,"$set":2,"":3,"ключ":{"x":[1,[2,[3]]]}}',
  '{"a":1,"a":2}', '{"k\\u0000":1}', ' \t\r\n{ "a" : [ 1 , 2 ] } \n',
  '{"context":{"items":[{"sku":"x","qty":2}],"total":30.5},"status":"RUNNING","version":7}',
  '[1,]', '{"a":1,}', '01', '1.', '.5', '+1', 'NaN', 'Infinity', '"\\x41"', '"\255"', "'a'",
  '[' .. string.rep('[', 98) .. '1' .. string.rep(']', 98) .. ']',
  '[' .. string.rep('[', 100) .. string.rep(']', 100) .. ']',
}
os.execute("mkdir -p '" .. dir .. "/corpus/json' '" .. dir .. "/corpus/bson'")
for i, text in ipairs(json) do
  write(string.format("%s/corpus/json/seed-%02d.json", dir, i), text)
end

-- ---- BSON ----
local function cstr(s) return s .. "\0" end
local function doc(elems) -- elems: list of already-encoded elements
  local body = table.concat(elems) .. "\0"
  return string.pack("<i4", #body + 4) .. body
end
local function el(t, key, payload) return string.char(t) .. cstr(key) .. payload end
local function str(s) return string.pack("<i4", #s + 1) .. s .. "\0" end
local function arr(items)
  local e = {}
  for i, item in ipairs(items) do e[i] = el(item[1], tostring(i - 1), item[2]) end
  return doc(e)
end
local D, S, DOC, ARR, BIN, UNDEF, OID, BOOL, DATE, NULL, REGEX, CODE, SYM, I32, TS, I64, DEC, MINK, MAXK =
  0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x0D, 0x0E, 0x10, 0x11, 0x12, 0x13, 0xFF, 0x7F

local function nest(n, leaf)
  local d = leaf
  for _ = 1, n do d = doc { el(DOC, "x", d) } end
  return d
end

local bson = {
  doc {},
  doc { el(D, "d", string.pack("<d", 1.5)), el(D, "z", string.pack("<d", -0.0)),
        el(D, "sub", string.pack("<d", 5e-324)), el(D, "big", string.pack("<d", 1.7976931348623157e308)) },
  doc { el(D, "nan", string.pack("<d", 0 / 0)), el(D, "inf", string.pack("<d", math.huge)) },
  doc { el(S, "s", str("plain")), el(S, "u", str("ключ 日本 😀")), el(S, "nul", str("a\0b")) },
  doc { el(S, "bad", str("\255\254")) },
  doc { el(S, "mutf8", str("a\192\128b")) },
  doc { el(S, "k\255", str("v")) },
  doc { el(I32, "i", string.pack("<i4", -7)), el(I64, "max", string.pack("<i8", math.maxinteger)),
        el(I64, "min", string.pack("<i8", math.mininteger)), el(I64, "p53", string.pack("<i8", (1 << 53) + 1)) },
  doc { el(BOOL, "t", "\1"), el(BOOL, "f", "\0"), el(BOOL, "odd", "\2"), el(NULL, "n", ""), el(UNDEF, "u", "") },
  doc { el(ARR, "a", arr { { I32, string.pack("<i4", 1) }, { S, str("two") }, { NULL, "" } }), el(ARR, "e", doc {}) },
  doc { el(ARR, "holes", doc { el(I32, "5", string.pack("<i4", 1)), el(I32, "x", string.pack("<i4", 2)) }) },
  doc { el(DOC, "a.b", doc { el(DOC, "$c", doc {}) }), el(I32, "", string.pack("<i4", 0)) },
  doc { el(I32, "a", string.pack("<i4", 1)), el(I32, "a", string.pack("<i4", 2)) },
  doc { el(BIN, "b", string.pack("<i4", 3) .. "\0" .. "abc"),
        el(BIN, "bb", string.pack("<i4", 2) .. "\0" .. "\255\255"),
        el(BIN, "old", string.pack("<i4", 6) .. "\2" .. string.pack("<i4", 2) .. "hi") },
  doc { el(OID, "_id", "\101\102\103\104\105\106\107\108\109\110\111\112"),
        el(DATE, "when", string.pack("<i8", 1700000000123)), el(TS, "ts", string.pack("<I4I4", 5, 1700000000)) },
  doc { el(DEC, "dec", string.pack("<I8I8", 1, 0x3040000000000000)), el(MINK, "lo", ""), el(MAXK, "hi", "") },
  doc { el(REGEX, "re", cstr("^a.*") .. cstr("i")), el(CODE, "js", str("function(){}")), el(SYM, "sym", str("s")) },
  doc { el(S, "context", str('{"a":1}')), el(I64, "version", string.pack("<i8", 3)),
        el(ARR, "outbox", arr { { DOC, doc { el(S, "kind", str("Go")), el(S, "target", str("x")) } } }) },
  nest(98, doc { el(I32, "leaf", string.pack("<i4", 1)) }),
  nest(99, doc {}),
  nest(100, doc {}),
  -- malformed on purpose: a string whose length runs past the end, a
  -- sub-document longer than its parent, a missing terminator
  string.pack("<i4", 14) .. "\2k\0" .. string.pack("<i4", 100) .. "ab\0\0",
  string.pack("<i4", 13) .. "\3d\0" .. string.pack("<i4", 50) .. "\0\0\0",
  string.pack("<i4", 12) .. "\16i\0" .. string.pack("<i4", 1) .. "\1\1",
  -- a cut 70 levels down, which libbson 1.23's bson_validate does not see
  nest(70, doc { el(DOC, "x", string.pack("<i4", 50) .. "\0") }),
}
for i, bytes in ipairs(bson) do
  write(string.format("%s/corpus/bson/seed-%02d.bson", dir, i), bytes)
end
print(string.format("fuzz/seeds.lua: %d JSON and %d BSON seeds", #json, #bson))
