-- spec/02-store/boxes_spec.lua - the BSON boxes (mongostore.objectid, date, int32, ...)
-- are values of the document API only: the execution store reads its fields back
-- through the plain codec, which has no form for them, so a box anywhere in what a
-- commit, append_trace, a spawn or a timer writes is refused (nil, msg, "invalid")
-- and nothing is written; the same box is stored by the document API.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local raw = require "helpers.rawdb"

-- Every kind of box, by name.
local function boxes()
  return {
    objectid = ms.objectid(),
    date = ms.date(1700000000000),
    binary = ms.binary("\0\1\2", 0),
    decimal = ms.decimal("1.10"),
    int32 = ms.int32(7),
    timestamp = ms.timestamp(1, 2),
    regex = ms.regex("^a", "i"),
    code = ms.code("return 1"),
    code_with_scope = ms.code("return x", { x = 1 }),
    symbol = ms.symbol("s"),
    minkey = ms.minkey,
    maxkey = ms.maxkey,
    undefined = ms.undefined,
  }
end

local function names(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = k end
  table.sort(out)
  return out
end

local function new_exe() return ms.execution { definition_id = "order" } end

TestStoreBoxes = {}

function TestStoreBoxes:setUp()
  self.store, self.db = helper.connect()
end

function TestStoreBoxes:tearDown()
  if self.store then self.store:close() end
  raw.drop(self.db)
end

-- res: table.pack of the call; refused with "invalid" and a message naming where.
local function assert_refused(res, label, where)
  lu.assertNil(res[1], label .. ": accepted")
  lu.assertEquals(res[3], "invalid", label .. ": " .. tostring(res[2]))
  lu.assertStrContains(res[2], where, false, label)
  lu.assertStrContains(res[2], "cannot be stored", false, label)
end

function TestStoreBoxes:test_commit_refuses_a_box_in_a_spawn_context_or_a_trace()
  local all = boxes()
  for _, name in ipairs(names(all)) do
    local b = all[name]
    local exe = new_exe()
    assert_refused(table.pack(self.store:commit(exe, {
      spawns = { { child_id = "c-" .. name, root_path = "A", context = { v = b } } },
    })), "spawn context " .. name, "spawns[1].context.v")
    assert_refused(table.pack(self.store:commit(exe, { trace = { event = "Go", v = b } })),
      "trace " .. name, "trace.v")
    -- nested, in an array and a document
    assert_refused(table.pack(self.store:commit(exe, { trace = { event = "Go", deep = { list = ms.array { 1, b } } } })),
      "nested trace " .. name, "trace.deep.list[2]")
    lu.assertEquals(exe.version, 0, name .. ": the version moved")
  end
  raw.assert_empty(lu, self.db, "boxes in commits")
end

function TestStoreBoxes:test_append_trace_refuses_a_box()
  local exe = new_exe()
  assert(self.store:commit(exe))
  local before = raw.doc(self.db, exe.id)
  local all = boxes()
  for _, name in ipairs(names(all)) do
    assert_refused(table.pack(self.store:append_trace(exe.id, { event = "x", v = all[name] })),
      "append_trace " .. name, "entry.v")
  end
  lu.assertEquals(raw.doc(self.db, exe.id), before, "the execution (and its trace) changed")
end

function TestStoreBoxes:test_a_box_is_no_timer_time_nor_a_context_value()
  local exe = new_exe()
  local res = table.pack(self.store:commit(exe, {
    timers = { { action = "schedule", path = "T", fire_at = ms.date(1700000000000) } },
  }))
  lu.assertNil(res[1], "a date box accepted as fire_at")
  lu.assertEquals(res[3], "invalid", tostring(res[2]))
  -- the context goes through JSON: refused there, at assignment or at the commit
  local ok, r1, r2, r3 = pcall(function()
    local e = new_exe()
    e.context = { v = ms.objectid() }
    return self.store:commit(e)
  end)
  if ok then
    lu.assertNil(r1, "a box in the context accepted")
    lu.assertEquals(r3, "invalid", tostring(r2))
  end
  raw.assert_empty(lu, self.db, "boxes as timer times and context values")
end

-- The positive control: the same values are documents' values (those every
-- test server stores: mongo-java-server drops the connection on a symbol and
-- on code with a scope).
function TestStoreBoxes:test_the_document_api_stores_them()
  local db = assert(ms.database(helper.uri(), { db = self.db, wait = 10 }))
  local c = db:collection("boxed")
  local doc = boxes()
  doc.symbol, doc.code_with_scope = nil, nil
  doc._id = "all"
  local res, msg = c:insert_one(doc)
  lu.assertNotNil(res, msg)
  local back = assert(c:find_one({ _id = "all" }))
  for _, name in ipairs(names(doc)) do
    -- an int32 reads back as a number (its table remembers the type)
    if name ~= "_id" and name ~= "int32" then lu.assertEquals(type(back[name]), "userdata", name) end
  end
  lu.assertEquals(back.objectid, doc.objectid)
  lu.assertEquals(back.int32, 7)
  db:close()
end
