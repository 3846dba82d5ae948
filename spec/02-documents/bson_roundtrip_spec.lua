-- spec/02-documents/bson_roundtrip_spec.lua - every BSON type, exactly: pymongo
-- writes a document holding every type (spec/helpers/bsontypes.py), the
-- document API reads it and writes it back with replace_one, and the raw
-- bytes pymongo then reads are the same bytes; under Lua 5.4 and LuaJIT
-- (build/jit, a child luajit process). The boxes written from Lua are what
-- pymongo reads them as.
local lu = require "luaunit"
local ms = require "mongostore"
local core = require "mongostore.core"
local helper = require "helpers"

local SERVER = os.getenv("MONGOSTORE_TEST_SERVER") or "other"

-- What mongo-java-server cannot take at all (it drops the connection on
-- them); the spec checks these only on servers that store them.
local JAVA_REFUSES = { "binary_function", "binary_old", "binary_md5", "code_with_scope", "symbol", "dbpointer" }
local SKIP = SERVER == "java" and table.concat(JAVA_REFUSES, ",") or ""

local function python()
  local py = os.getenv("MONGOSTORE_PYTHON") or ""
  return py ~= "" and py or "python3"
end

-- runs spec/helpers/bsontypes.py; returns its one line of output
local function pyrun(db, coll, op, arg, skip)
  local cmd = string.format("env -u LD_PRELOAD BSONTYPES_SKIP=%s %s %s %s %s %s %s %s",
    helper.shell_quote(skip or ""), helper.shell_quote(python()),
    helper.shell_quote(helper.root() .. "/spec/helpers/bsontypes.py"), helper.shell_quote(helper.uri()),
    helper.shell_quote(db), helper.shell_quote(coll), op, helper.shell_quote(arg or ""))
  local tmp = os.tmpname()
  local f = assert(io.popen(cmd .. " 2>" .. tmp, "r"))
  local out = f:read("a")
  local ok, _, status = f:close()
  local ef = io.open(tmp, "r")
  local err = ef and ef:read("a") or ""
  if ef then ef:close() end
  os.remove(tmp)
  if not ok then error(string.format("bsontypes %s failed (exit %s): %s", op, tostring(status), err), 2) end
  return (out:gsub("%s+$", ""))
end

local function unhex(h) return (h:gsub("..", function(x) return string.char(tonumber(x, 16)) end)) end
local function hex(s) return (s:gsub(".", function(c) return string.format("%02x", c:byte()) end)) end

local ok = require("helpers").ok

-- The first differing byte, for a readable failure.
local function same_bytes(got, want, what)
  if got == want then return end
  local i = 1
  while got:sub(i, i) == want:sub(i, i) do i = i + 1 end
  lu.fail(string.format("%s: %d bytes against %d, first difference at byte %d:\n got  %s\n want %s", what,
    #got, #want, i, hex(got:sub(math.max(1, i - 16), i + 16)), hex(want:sub(math.max(1, i - 16), i + 16))))
end

-- A child luajit with the LuaJIT build of the core; prints what code prints.
local function luajit(code)
  local root = helper.root()
  local cmd = string.format("LD_PRELOAD= luajit -e %s 2>&1",
    helper.shell_quote(string.format("package.path=%q; package.cpath=%q; URI=%q; ",
      root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path,
      root .. "/build/jit/?.so", helper.uri()) .. code))
  local f = assert(io.popen(cmd, "r"))
  local out = f:read("a")
  local done = f:close()
  return done, out
end

TestBsonRoundTrip = {}

function TestBsonRoundTrip:setUp()
  self.name = helper.fresh_db("bsonrt")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  self.c = self.db:collection("every")
end

function TestBsonRoundTrip:tearDown()
  if self.db then self.db:close() end
end

-- pymongo's own encoding of every type, legacy ones included, through the
-- document codec with no server between
function TestBsonRoundTrip:test_every_type_decodes_and_encodes_to_the_same_bytes()
  local bytes = unhex(pyrun("-", "-", "bytes", "all"))
  local doc = ok(core.bson_decode(bytes, { document = true }))
  same_bytes(ok(core.bson_encode(doc)), bytes, "every type")
  lu.assertEquals(math.type(doc.int32), "integer")
  lu.assertEquals(math.type(doc.int64_big), "integer")
  lu.assertEquals(doc.int64_big, 9007199254740993)
  lu.assertEquals(math.type(doc.double_integral), "float")
  lu.assertTrue(doc.null == ms.null)
  lu.assertTrue(ms.is_array(doc.array))
  lu.assertTrue(ms.is_array(doc.array_empty))
  lu.assertTrue(doc.objectid == ms.objectid("65a1b2c3d4e5f60718293a4b"))
  lu.assertTrue(doc.date == ms.date(1700000000123))
  lu.assertEquals(tostring(doc.date), "2023-11-14T22:13:20.123Z")
  lu.assertTrue(doc.decimal == ms.decimal("1.10"))
  lu.assertTrue(doc.regex == ms.regex("^a.*b$", "imx"))
  lu.assertTrue(doc.timestamp == ms.timestamp(1700000000, 5))
  lu.assertTrue(doc.binary_old == ms.binary("old", 2))
  lu.assertTrue(doc.binary_user == ms.binary("user", 0x80))
  lu.assertTrue(doc.minkey == ms.minkey and doc.maxkey == ms.maxkey and doc.undefined == ms.undefined)
  lu.assertTrue(doc.symbol == ms.symbol("sym"))
  lu.assertTrue(doc.dbpointer == ms.dbpointer("coll", "65a1b2c3d4e5f60718293a4c"))
  lu.assertEquals(doc.code_with_scope:scope().b[1], 2.5)
end

-- write -> read -> replace_one -> the server's bytes unchanged
function TestBsonRoundTrip:test_pymongo_writes_lua_writes_back_the_same_bytes()
  local before = unhex(pyrun(self.name, "every", "write", "doc1", SKIP))
  local doc = ok(self.c:find_one({ _id = "doc1" }))
  local r = ok(self.c:replace_one({ _id = "doc1" }, doc))
  lu.assertEquals(r.matched, 1)
  local after = unhex(pyrun(self.name, "every", "raw", "doc1"))
  same_bytes(after, before, "after replace_one")
end

function TestBsonRoundTrip:test_the_types_mongo_java_server_cannot_store()
  if SERVER == "java" then
    lu.skip("mongo-java-server drops the connection on " .. table.concat(JAVA_REFUSES, ", "))
  end
  local before = unhex(pyrun(self.name, "every", "write", "doc2"))
  for _, k in ipairs(JAVA_REFUSES) do lu.assertStrContains(before, k .. "\0") end
  local doc = ok(self.c:find_one({ _id = "doc2" }))
  ok(self.c:replace_one({ _id = "doc2" }, doc))
  same_bytes(unhex(pyrun(self.name, "every", "raw", "doc2")), before, "legacy types after replace_one")
end

-- a changed field is written by its new value, a new one after the rest,
-- every other byte as it was
function TestBsonRoundTrip:test_a_changed_document_keeps_everything_else()
  local before = unhex(pyrun(self.name, "every", "write", "doc3", SKIP))
  local doc = ok(self.c:find_one({ _id = "doc3" }))
  doc.int32 = 8
  doc.added = "new"
  ok(self.c:replace_one({ _id = "doc3" }, doc))
  local old_field = "\x10int32\0" .. string.pack("<i4", 7)
  local at = assert(before:find(old_field, 1, true))
  local body = before:sub(5, at - 1) .. "\x10int32\0" .. string.pack("<i4", 8) .. before:sub(at + #old_field, -2)
    .. "\x02added\0" .. string.pack("<i4", 4) .. "new\0"
  same_bytes(unhex(pyrun(self.name, "every", "raw", "doc3")), string.pack("<i4", #body + 5) .. body .. "\0",
    "after a change")
end

-- the boxes made in Lua are what another driver reads them as
function TestBsonRoundTrip:test_pymongo_reads_the_lua_boxes_as_their_types()
  ok(self.c:insert_one({
    _id = "lua", oid = ms.objectid(), date = ms.date(1700000000123), bin = ms.binary("\0\1", 0),
    dec = ms.decimal("1.10"), i32 = ms.int32(5), i64 = 5, ts = ms.timestamp(1, 2), re = ms.regex("a", "i"),
    mn = ms.minkey, mx = ms.maxkey, code = ms.code("f()"), f = 0.5, s = "x", n = ms.null, b = true,
    list = ms.array({ 1, 2 }),
  }))
  local types = ok(ms.json.decode(pyrun(self.name, "every", "types", "lua")))
  lu.assertEquals(types, {
    _id = "str", oid = "ObjectId", date = "datetime", bin = "bytes", dec = "Decimal128", i32 = "int", i64 = "Int64",
    ts = "Timestamp", re = "Regex", mn = "MinKey", mx = "MaxKey", code = "Code", f = "float", s = "str",
    n = "NoneType", b = "bool", list = "list",
  })
  local back = ok(self.c:find_one({ _id = "lua" }))
  lu.assertTrue(back.date == ms.date(1700000000123))
  lu.assertEquals(back.i32, 5)
end

function TestBsonRoundTrip:test_luajit_writes_back_the_same_bytes()
  local before = unhex(pyrun(self.name, "every", "write", "jit", SKIP))
  local all = pyrun("-", "-", "bytes", "all")
  local done, out = luajit(string.format([[
    local ms = require "mongostore"
    local core = require "mongostore.core"
    local db = assert(ms.database(URI, { db = %q, wait = 10 }))
    local c = db:collection("every")
    local doc = assert(c:find_one({ _id = "jit" }))
    print("types", type(doc.int32), type(doc.double_integral), type(doc.int64_big), tostring(doc.int64_big),
          doc.double_integral, ms.is_array(doc.array))
    assert(c:replace_one({ _id = "jit" }, doc))
    local bytes = (%q):gsub("..", function(x) return string.char(tonumber(x, 16)) end)
    local back = assert(core.bson_decode(bytes, { document = true }))
    print("offline", core.bson_encode(back) == bytes)
    db:close()
  ]], self.name, all))
  lu.assertTrue(done, out)
  lu.assertStrContains(out, "types\tnumber\tnumber\tuserdata\t9007199254740993\t2\ttrue")
  lu.assertStrContains(out, "offline\ttrue")
  same_bytes(unhex(pyrun(self.name, "every", "raw", "jit")), before, "after LuaJIT's replace_one")
end
