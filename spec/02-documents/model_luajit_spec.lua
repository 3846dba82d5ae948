-- spec/02-documents/model_luajit_spec.lua - mongostore.model under LuaJIT (the
-- OpenResty interpreter) with the LuaJIT build of the core (make jit): the
-- models seed (examples/articles.lua) runs there as on Lua 5.4, whose numbers
-- are doubles (an integer field takes an integral double).
local lu = require "luaunit"
local helper = require "helpers"

TestModelLuaJIT = {}

function TestModelLuaJIT:test_articles_example_under_luajit()
  local root = helper.root()
  local probe = io.open(root .. "/build/jit/mongostore/core.so", "rb")
  if not probe then return lu.skip("the LuaJIT core is not built (make jit)") end
  probe:close()
  if not os.execute("command -v luajit >/dev/null 2>&1") then return lu.skip("no luajit") end
  local cmd = string.format("cd %s && LD_PRELOAD= LUA_CPATH=%s MONGOSTORE_URI=%s luajit examples/articles.lua 2>&1",
    helper.shell_quote(root), helper.shell_quote(root .. "/build/jit/?.so"), helper.shell_quote(helper.uri()))
  local f = assert(io.popen(cmd, "r"))
  local out = f:read("a")
  local ok = f:close()
  lu.assertTrue(ok, out)
  lu.assertStrContains(out, "saved: rev 1, changes left 0, an unchanged save sent 0 commands")
  lu.assertStrContains(out, "update: views 1, tags {news,featured}, rev 2")
  lu.assertStrContains(out, "stale: stale (stored at rev 3), reloaded title \"Final v2\" at rev 3")
  lu.assertStrContains(out, "bulk_save: 3 saved in 1 round trip")
  lu.assertStrContains(out, "insert_many unordered: 1 inserted, errors at 2 (validation: title) and 3 (duplicate, "
    .. "server code 11000)")
  lu.assertStrContains(out, "validation: insert -> validation (views), still new true, stored 0")
end
