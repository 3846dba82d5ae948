-- spec/01-unit/store_calls_spec.lua - the one list of Store calls
-- (mongostore.store CALLS) against the methods the Store really has, C and
-- Lua, and against what mongostore.ngx forwards: a new method that is
-- neither forwarded nor marked local fails here. No server.
local lu = require "luaunit"
local ms = require "mongostore"
local store = require "mongostore.store"
local msngx = require "mongostore.ngx"

local HOW = { plain = true, execution = true, executions = true, ["local"] = true }

-- The Store's public methods: every function of its method table whose
-- name does not start with "_" (those are the C core's, for store.lua).
local function public_methods()
  local out = {}
  for name, v in pairs(ms.Store) do
    if type(v) == "function" and name:sub(1, 1) ~= "_" then out[#out + 1] = name end
  end
  table.sort(out)
  return out
end

TestStoreCalls = {}

function TestStoreCalls:test_every_public_method_is_listed()
  local missing = {}
  for _, name in ipairs(public_methods()) do
    if store.CALLS[name] == nil then missing[#missing + 1] = name end
  end
  lu.assertEquals(missing, {}, "Store methods missing from mongostore.store CALLS")
end

function TestStoreCalls:test_every_listed_call_is_a_method_with_a_known_kind()
  for name, how in pairs(store.CALLS) do
    lu.assertEquals(type(ms.Store[name]), "function", name .. " is listed but the Store has no such method")
    lu.assertTrue(HOW[how], name .. ": " .. tostring(how) .. " is not plain, execution, executions or local")
  end
end

function TestStoreCalls:test_ngx_forwards_exactly_the_calls_not_marked_local()
  for name, how in pairs(store.CALLS) do
    if how == "local" then
      lu.assertNil(msngx[name], name .. " is local, yet mongostore.ngx has it")
    else
      lu.assertEquals(type(msngx[name]), "function", name .. " is not forwarded by mongostore.ngx")
    end
  end
end

function TestStoreCalls:test_the_calls_ngx_lacked_are_forwarded_now()
  for _, name in ipairs { "save", "stats", "release_outbox", "release_spawn", "load_many", "commit_many" } do
    lu.assertEquals(type(msngx[name]), "function", name)
  end
  lu.assertEquals(store.CALLS.close, "local")
end

function TestStoreCalls:test_the_face_keeps_its_names()
  for _, name in ipairs { "connect", "check_keys", "execution", "is_execution", "Store", "null", "array",
                          "is_array", "now", "sleep", "uuid", "int64", "json", "codes", "_VERSION" } do
    lu.assertNotNil(ms[name], name)
  end
  lu.assertIs(ms.connect, store.connect)
  lu.assertIs(ms.Store, require("mongostore.core").Store)
end
