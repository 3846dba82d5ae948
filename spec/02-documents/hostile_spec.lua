-- spec/02-documents/hostile_spec.lua - a matrix of careless input to every Database,
-- Collection and Cursor method: a wrong Lua type raises naming the method and the
-- argument, an unknown or mistyped option raises, and bad values (NUL keys, cycles,
-- nesting past the bound, $-keys where a document belongs, sparse tables, huge
-- documents) come back as nil, message, "invalid" | "too_large" with nothing
-- written (raw reads with pymongo).
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local rawdb = require "helpers.rawdb"

local ok = require("helpers").ok

local function result(...) return { n = select("#", ...), ... } end

TestHostile = {}

function TestHostile:setUp()
  self.name = helper.fresh_db("dochostile")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  self.c = ok(self.db:collection("victims"))
end

function TestHostile:tearDown()
  if self.db then self.db:close() end
end

-- every method with good arguments: { name, args... }; the matrix swaps one
-- argument at a time for a value of each wrong type
local function methods(self)
  local c, db = self.c, self.db
  return {
    { c, "insert_one", { { "doc", { a = 1 } } } },
    { c, "insert_many", { { "docs", { { a = 1 } } } } },
    { c, "find_one", { { "filter", {}, nil_ok = true } } },
    { c, "find", { { "filter", {}, nil_ok = true } } },
    { c, "count", { { "filter", {}, nil_ok = true } } },
    { c, "update_one", { { "filter", {} }, { "update", { ["$set"] = { a = 1 } } } } },
    { c, "update_many", { { "filter", {} }, { "update", { ["$set"] = { a = 1 } } } } },
    { c, "replace_one", { { "filter", {} }, { "replacement", { a = 1 } } } },
    { c, "delete_one", { { "filter", {} } } },
    { c, "delete_many", { { "filter", {} } } },
    { c, "find_one_and_update", { { "filter", {} }, { "update", { ["$set"] = { a = 1 } } } } },
    { c, "find_one_and_delete", { { "filter", {} } } },
    { c, "bulk_write", { { "ops", { { insert_one = {} } } } } },
    { c, "aggregate", { { "pipeline", {} } } },
    { c, "distinct", { { "field", "a" }, { "filter", {}, nil_ok = true } } },
    { c, "create_index", { { "keys", { a = 1 } } } },
    { c, "list_indexes", {} },
    { c, "drop_index", { { "name", "a_1" } } },
    { c, "drop", {} },
    { db, "collection", { { "name", "x" } }, no_opts = true },
    { db, "command", { { "cmd", { ping = 1 } } } },
    { db, "list_collections", {} },
  }
end

local WRONG = { 42, true, function() end, "text", {} }

function TestHostile:test_wrong_types_raise_naming_the_argument()
  local raised, total = 0, 0
  for _, m in ipairs(methods(self)) do
    local obj, name, args = m[1], m[2], m[3]
    for i, a in ipairs(args) do
      for _, bad in ipairs(WRONG) do
        if type(bad) ~= type(a[2]) then
          local call = {}
          for j, b in ipairs(args) do call[j] = b[2] end
          call[i] = bad
          total = total + 1
          local okc, err = pcall(obj[name], obj, table.unpack(call, 1, #args))
          lu.assertFalse(okc, name .. " took a " .. type(bad) .. " as " .. a[1])
          lu.assertStrContains(tostring(err), name .. ": " .. a[1] .. " must be", false, name)
          lu.assertStrContains(tostring(err), "hostile_spec", false, "raised at the caller's line: " .. tostring(err))
          raised = raised + 1
        end
      end
      if not a.nil_ok then
        local call = {}
        for j, b in ipairs(args) do call[j] = b[2] end
        call[i] = nil
        local okc, err = pcall(obj[name], obj, table.unpack(call, 1, #args))
        lu.assertFalse(okc, name .. " took nil as " .. a[1])
        lu.assertStrContains(tostring(err), a[1], false, name)
      end
    end
    if not m.no_opts then
      local call = {}
      for j, b in ipairs(args) do call[j] = b[2] end
      call[#args + 1] = "not options"
      local okc, err = pcall(obj[name], obj, table.unpack(call, 1, #args + 1))
      lu.assertFalse(okc, name .. " took a string as opts")
      lu.assertStrContains(tostring(err), name .. ": opts must be a table")
      call[#args + 1] = { no_such_option = 1 }
      okc, err = pcall(obj[name], obj, table.unpack(call, 1, #args + 1))
      lu.assertFalse(okc, name .. " took an unknown option")
      lu.assertStrContains(tostring(err), name .. ": unknown option no_such_option")
    end
  end
  lu.assertEquals(raised, total)
  lu.assertEquals(rawdb.count(self.name, "victims"), 0)
end

function TestHostile:test_mistyped_options_raise()
  for _, case in ipairs {
    { "find", { limit = "5" }, "opts.limit" },
    { "find", { batch_size = true }, "opts.batch_size" },
    { "find", { sort = "a" }, "opts.sort" },
    { "find", { hint = 1 }, "opts.hint" },
    { "find", { session = "s" }, "opts.session" },
    { "insert_many", { ordered = "no" }, "opts.ordered" },
    { "update_one", { upsert = 1 }, "opts.upsert" },
    { "create_index", { unique = "yes" }, "opts.unique" },
    { "create_index", { partial_filter = "x" }, "opts.partial_filter" },
    { "find_one_and_update", { new = 1 }, "opts.new" },
  } do
    local name, opts, what = case[1], case[2], case[3]
    local args = ({
      find = { {} }, insert_many = { { { a = 1 } } }, update_one = { {}, { ["$set"] = { a = 1 } } },
      create_index = { { a = 1 } }, find_one_and_update = { {}, { ["$set"] = { a = 1 } } },
    })[name]
    args[#args + 1] = opts
    local okc, err = pcall(self.c[name], self.c, table.unpack(args))
    lu.assertFalse(okc, name .. " " .. what)
    lu.assertStrContains(tostring(err), name .. ": " .. what .. " must be")
  end
  local okc, err = pcall(ms.database, helper.uri(), { db = 5 })
  lu.assertFalse(okc)
  lu.assertStrContains(err, "database: opts.db must be")
  okc, err = pcall(ms.database, helper.uri(), { dbname = "x" })
  lu.assertFalse(okc)
  lu.assertStrContains(err, "database: unknown option dbname")
  okc, err = pcall(ms.database, 42)
  lu.assertFalse(okc)
  lu.assertStrContains(err, "database: uri must be a string")
  lu.assertEquals(rawdb.count(self.name, "victims"), 0)
end

function TestHostile:test_methods_on_the_wrong_object_raise()
  local okc = pcall(self.c.insert_one, "not a collection", { a = 1 })
  lu.assertFalse(okc)
  okc = pcall(self.db.collection, self.c, "x")
  lu.assertFalse(okc)
  local cur = ok(self.c:find({}))
  okc = pcall(cur.next, self.c)
  lu.assertFalse(okc)
  lu.assertEquals(rawdb.count(self.name, "victims"), 0)
end

local function deep(n)
  local t = {}
  local cur = t
  for _ = 1, n do
    cur.x = {}
    cur = cur.x
  end
  return t
end

function TestHostile:test_bad_values_write_nothing()
  local cyc = {}
  cyc.me = cyc
  local list_cycle = ms.array {}
  list_cycle[1] = list_cycle
  local docs = {
    nul_key = { ["k\0"] = 1 },
    nested_nul_key = { a = { ["x\0y"] = 1 } },
    empty_key = { [""] = 1 },
    nested_empty_key = { a = { [""] = 1 } },
    cycle = { c = cyc },
    list_cycle = { l = list_cycle },
    too_deep = deep(200),
    sparse = { s = { [1] = 1, [3] = 3 } },
    mixed = { m = { 1, 2, k = 3 } },
    table_key = { [{}] = 1 },
    bool_key = { [true] = 1 },
    float_key = { [1.5] = 1 },
    function_value = { f = print },
    thread_value = { t = coroutine.create(print) },
    userdata_value = { u = io.stdout },
    bad_utf8_value = { s = "\192\128" },
    bad_utf8_key = { ["\255"] = 1 },
    inf = { n = math.huge },
    dollar_top = { ["$inc"] = { a = 1 } },
    dollar_top_with_id = { _id = "d", ["$x"] = 1 },
  }
  local names = {}
  for k in pairs(docs) do names[#names + 1] = k end
  table.sort(names)
  for _, what in ipairs(names) do
    local doc = docs[what]
    for how, call in pairs {
      insert_one = function() return self.c:insert_one(doc) end,
      insert_many = function() return self.c:insert_many({ { _id = "fine" }, doc }) end,
      replace_one = function() return self.c:replace_one({ _id = "r" }, doc, { upsert = true }) end,
      bulk_write = function() return self.c:bulk_write({ { insert_one = { _id = "fine" } }, { insert_one = doc } }) end,
    } do
      local r = result(call())
      lu.assertNil(r[1], what .. " via " .. how)
      lu.assertEquals(r[3], "invalid", what .. " via " .. how .. ": " .. tostring(r[2]))
      lu.assertIsString(r[2])
    end
    if not what:match("^dollar") then
      -- the same value as a filter or an update is refused before it is sent
      local r = result(self.c:update_many(doc, { ["$set"] = { a = 1 } }, { upsert = true }))
      lu.assertEquals({ r[1], r[3] }, { nil, "invalid" }, what .. " as a filter: " .. tostring(r[2]))
      r = result(self.c:update_one({ _id = "u" }, { ["$set"] = doc }, { upsert = true }))
      lu.assertEquals({ r[1], r[3] }, { nil, "invalid" }, what .. " in an update: " .. tostring(r[2]))
    end
  end
  lu.assertEquals(rawdb.count(self.name, "victims"), 0)
end

function TestHostile:test_huge_documents_are_too_large()
  local max = ok(self.db:info()).max_bson_size
  local huge = { s = string.rep("h", max + 1) }
  local many = {}
  for i = 1, 17 do many[i] = string.rep(string.char(96 + i), 1024 * 1024) end
  for what, doc in pairs { one_string = huge, many_strings = { parts = ms.array(many) } } do
    local r = result(self.c:insert_one(doc))
    lu.assertEquals({ r[1], r[3] }, { nil, "too_large" }, what .. ": " .. tostring(r[2]))
    r = result(self.c:replace_one({ _id = 1 }, doc, { upsert = true }))
    lu.assertEquals({ r[1], r[3] }, { nil, "too_large" }, what .. ": " .. tostring(r[2]))
  end
  lu.assertEquals(rawdb.count(self.name, "victims"), 0)
end

function TestHostile:test_careless_but_storable_values_round_trip()
  -- NUL inside a string value, empty tables, a long key, unicode: all storable
  local doc = { _id = "ok", nul = "a\0b", empty = {}, list = ms.array {}, [string.rep("k", 1000)] = 1,
                text = "héllo ✓", nested = { deeper = { deepest = ms.array { 1, 2, 3 } } } }
  ok(self.c:insert_one(doc))
  local back = ok(self.c:find_one({ _id = "ok" }))
  lu.assertEquals(back.nul, "a\0b")
  lu.assertEquals(back.text, "héllo ✓")
  lu.assertEquals(back[string.rep("k", 1000)], 1)
  lu.assertEquals(back.nested.deeper.deepest, { 1, 2, 3 })
  lu.assertTrue(ms.is_array(back.list))
  -- a filter that matches nothing, with hostile-looking but valid operators
  lu.assertNil(self.c:find_one({ _id = { ["$in"] = ms.array {} } }))
  lu.assertEquals(rawdb.count(self.name, "victims"), 1)
end

function TestHostile:test_bad_cursor_use()
  for i = 1, 3 do ok(self.c:insert_one({ _id = i })) end
  local cur = ok(self.c:find({}, { batch_size = 1 }))
  cur:close()
  local okc, err = pcall(function() for _ in cur:each() do end end)
  lu.assertFalse(okc)
  lu.assertStrContains(tostring(err), "closed")
  -- a cursor kept after its database is collected keeps the database alive
  local c2 = ok(ok(ok(ms.database(helper.uri(), { db = self.name, wait = 10 })):collection("victims"))
    :find({}, { batch_size = 1 }))
  collectgarbage()
  collectgarbage()
  lu.assertEquals(#ok(c2:all()), 3)
end
