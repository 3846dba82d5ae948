-- spec/02-records/luajit_spec.lua - the record store under LuaJIT (make jit), in its
-- own process beside this Lua 5.4 one on the same store: the same content has the
-- same content id and dedups onto the same sid in both, and a float field LuaJIT
-- writes as an integral number reads back on Lua 5.4 as a float.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local records = require "mongostore.records"

local ok = require("helpers").ok

local TYPES = [[
local records = require "mongostore.records"
local Author = records.define { name = "author", fields = { name = "string" } }
local Item = records.define { name = "item", dedup = "value",
  fields = { label = "string", n = "integer", x = "float", xs = "float[]", note = { "string", identity = false } },
  children = { parts = { fields = { k = "integer", w = "float" } } }, refs = { by = Author } }
]]

local function luajit(name, code)
  local root = helper.root()
  local cmd = string.format("LD_PRELOAD= luajit -e %s 2>&1",
    helper.shell_quote(string.format("package.path=%q; package.cpath=%q; URI=%q; DB=%q; ",
      root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path,
      root .. "/build/jit/?.so", helper.uri(), name) .. TYPES .. code))
  local f = assert(io.popen(cmd, "r"))
  local out = f:read("a")
  local fine = f:close()
  return fine, out
end

-- A fresh database and a store of Item in it, here (Lua 5.4); skips when the LuaJIT core is not built.
local function open_here(prefix)
  local f = io.open(helper.root() .. "/build/jit/mongostore/core.so", "rb")
  if not f then lu.skip("the LuaJIT core is not built (make jit)") end
  f:close()
  local name = helper.fresh_db(prefix)
  local db = ok(ms.database(helper.uri(), { db = name, wait = 10 }))
  local Item = assert(load(TYPES .. " return Item", "=types"))()
  return name, db, Item, ok(records.open(db, { types = { Item }, log = function() end }))
end

TestRecordsLuaJIT = {}

function TestRecordsLuaJIT:test_same_content_same_id_and_sid()
  local name, db, Item, store = open_here("rjit")
  local item = { label = "a", n = 3, x = 2.0, xs = { 1.0, 0.5 }, parts = { { k = 1, w = 4.0 } }, by = { name = "me" } }
  local sid = ok(store:save(Item, item))
  local cid = ok(store:fetch(Item, sid))._cid
  local fine, out = luajit(name, [[
    local ms = require "mongostore"
    local db = assert(ms.database(URI, { db = DB, wait = 10 }))
    local store = assert(records.open(db, { types = { Item }, log = function() end }))
    local item = { label = "a", n = 3, x = 2, xs = { 1, 0.5 }, parts = { { k = 1, w = 4 } }, by = { name = "me" } }
    local sid = assert(store:save(Item, item))
    print("same " .. sid .. " " .. assert(records.content_id(Item, item)))
    local sid2 = assert(store:save(Item, { label = "b", n = 9007199254740000, x = 7, xs = {}, by = { name = "me" } }))
    print("new " .. sid2)
    store:close()
  ]])
  lu.assertTrue(fine, out)
  local jsid, jcid = out:match("same (%d+) (%x+)")
  lu.assertEquals(tonumber(jsid), sid, out)
  lu.assertEquals(jcid, cid)
  local sid2 = tonumber(out:match("new (%d+)"))
  local b = ok(store:fetch(Item, sid2))
  lu.assertEquals(math.type(b.x), "float")
  lu.assertEquals(b.x, 7.0)
  lu.assertEquals(b.n, 9007199254740000)
  lu.assertEquals(b._cid, ok(records.content_id(Item, { label = "b", n = 9007199254740000, x = 7.0, xs = {},
                                                        by = { name = "me" } })))
  store:close()
  db:close()
end

function TestRecordsLuaJIT:test_searcher_under_luajit()
  local name, db, Item, store = open_here("rjits")
  for i = 1, 7 do
    ok(store:save(Item, { label = "i" .. i, n = i, x = i / 2, xs = { 0.5 * i }, parts = { { k = i, w = 1.0 } },
                          by = { name = i % 2 == 0 and "even" or "odd" } }))
  end
  local fine, out = luajit(name, [[
    local ms = require "mongostore"
    local db = assert(ms.database(URI, { db = DB, wait = 10 }))
    local store = assert(records.open(db, { types = { Item }, log = function() end }))
    local s = store:searcher { only_latest = true }
    local v = s:variable(Item)
    s:add(v.n:ge("2"))
    s:add(v.by.name:eq("even"))
    s:add(v.parts:any(function(p) return p.k:lt(7) end))
    s:output(v.label, "label"):sort(v.n, -1)
    print("labels " .. table.concat(assert(s:results()):scalars(), ","))
    local page = assert(s:page { limit = 2 })
    local rest = assert(s:page { limit = 2, cursor = page.next_cursor })
    print("pages " .. page.items[1].label .. page.items[2].label .. " " .. rest.items[1].label
      .. " " .. tostring(rest.next_cursor))
    store:close()
  ]])
  lu.assertTrue(fine, out)
  lu.assertStrContains(out, "labels i6,i4,i2\n")
  lu.assertStrContains(out, "pages i6i4 i2 nil\n")
  store:close()
  db:close()
end
