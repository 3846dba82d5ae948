-- spec/02-store/rock_spec.lua - `luarocks make` installs the rock from this
-- checkout offline into a scratch tree, and a separate Lua process that
-- knows only that tree loads it and commits to the server.
local lu = require "luaunit"
local helper = require "helpers"
local rockspec = require "helpers.rockspec"

TestRock = {}

local function run(cmd)
  local f = assert(io.popen(cmd .. " 2>&1", "r"))
  local out = f:read("a")
  local ok, _, status = f:close()
  return ok, out, status
end

-- luarocks' builtin build writes its objects and the module beside the
-- sources: build from a copy, so the checkout's own mongostore/core.so (the
-- one this suite runs on) is never replaced.
local function source_copy(with_makefile)
  local dir = os.tmpname()
  os.remove(dir)
  local root = helper.root()
  local ok, out = run(string.format("mkdir -p %s && cp -r %s %s %s %s %s %s/", helper.shell_quote(dir),
    helper.shell_quote(root .. "/csrc"), helper.shell_quote(root .. "/lua"), helper.shell_quote(root .. "/bin"),
    helper.shell_quote(rockspec.path()), with_makefile and helper.shell_quote(root .. "/Makefile") or "",
    helper.shell_quote(dir)))
  assert(ok, out)
  return dir
end

function TestRock:test_luarocks_make_installs_a_working_rock()
  local root = source_copy()
  local tree = os.tmpname()
  os.remove(tree)
  local build = string.format(
    "cd %s && LD_PRELOAD= luarocks --lua-version 5.4 make --tree %s --deps-mode none " ..
    "MONGOC_INCDIR=/usr/include/libmongoc-1.0 BSON_INCDIR=/usr/include/libbson-1.0 %s",
    helper.shell_quote(root), helper.shell_quote(tree), rockspec.file_name())
  local ok, out = run(build)
  lu.assertTrue(ok, out)
  lu.assertStrContains(out, "mongostore " .. rockspec.load().version .. " is now installed")
  -- luarocks passes no -fvisibility flag: the headers hide every ms_ symbol
  local nm_ok, symbols = run("nm -D --defined-only " .. helper.shell_quote(tree .. "/lib/lua/5.4/mongostore/core.so"))
  lu.assertTrue(nm_ok, symbols)
  local exported = {}
  for name in symbols:gmatch("%x+%s+%a%s+(%S+)") do exported[#exported + 1] = name end
  lu.assertEquals(exported, { "luaopen_mongostore_core" })

  -- Only the scratch tree on the paths: nothing from the checkout.
  local code = [[
    local ms = require "mongostore"
    assert(package.searchpath("mongostore.core", package.cpath):find(TREE, 1, true))
    local store = assert(ms.connect(URI, { db = DB, wait = 10 }))
    local exe = ms.execution{ definition_id = "rock" }
    assert(store:save(exe))
    assert(store:load(exe.id).version == 1)
    store:close()
    print("rock ok " .. exe.id)
  ]]
  local db = helper.fresh_db("rock")
  code = code:gsub("TREE", string.format("%q", tree)):gsub("URI", string.format("%q", helper.uri()))
             :gsub("DB", string.format("%q", db))
  local cmd = string.format(
    "LUA_PATH_5_4=%s LUA_CPATH_5_4=%s LD_PRELOAD= lua5.4 -e %s",
    helper.shell_quote(tree .. "/share/lua/5.4/?.lua;" .. tree .. "/share/lua/5.4/?/init.lua"),
    helper.shell_quote(tree .. "/lib/lua/5.4/?.so"),
    helper.shell_quote(code))
  ok, out = run(cmd)
  lu.assertTrue(ok, out)
  lu.assertStrMatches(out, "rock ok %x+\n")
  local id = out:match("rock ok (%x+)")

  -- the installed command finds the tree's modules by itself
  ok, out = run(string.format("env -u LUA_PATH -u LUA_CPATH -u LUA_PATH_5_4 -u LUA_CPATH_5_4 LD_PRELOAD= "
    .. "%s --uri %s --db %s list --all --json",
    helper.shell_quote(tree .. "/bin/mongostore"), helper.shell_quote(helper.uri()),
    helper.shell_quote(db)))
  lu.assertTrue(ok, out)
  lu.assertStrContains(out, id)
  run("rm -rf " .. helper.shell_quote(tree) .. " " .. helper.shell_quote(root))
end

-- The same rockspec for Lua 5.1 / LuaJIT (OpenResty), loaded by luajit.
function TestRock:test_luarocks_make_for_luajit()
  local root = source_copy()
  local tree = os.tmpname()
  os.remove(tree)
  local ok, out = run(string.format(
    "cd %s && LD_PRELOAD= luarocks --lua-version 5.1 make --tree %s --deps-mode none " ..
    "LUA_INCDIR=/usr/include/luajit-2.1 MONGOC_INCDIR=/usr/include/libmongoc-1.0 " ..
    "BSON_INCDIR=/usr/include/libbson-1.0 %s",
    helper.shell_quote(root), helper.shell_quote(tree), rockspec.file_name()))
  lu.assertTrue(ok, out)
  local code = string.format([[
    package.path = %q; package.cpath = %q
    local ms = require "mongostore"
    assert(package.searchpath("mongostore.core", package.cpath):find(%q, 1, true))
    local store = assert(ms.connect(%q, { db = %q, wait = 10 }))
    local exe = ms.execution{ definition_id = "rock51", context = { big = ms.int64("9007199254740993") } }
    assert(store:save(exe))
    print("rock51 " .. tostring(store:load(exe.id).context.big))
    store:close()
  ]], tree .. "/share/lua/5.1/?.lua;" .. tree .. "/share/lua/5.1/?/init.lua", tree .. "/lib/lua/5.1/?.so",
    tree, helper.uri(), helper.fresh_db("rock51"))
  ok, out = run("LD_PRELOAD= luajit -e " .. helper.shell_quote(code))
  lu.assertTrue(ok, out)
  lu.assertStrContains(out, "rock51 9007199254740993")
  run("rm -rf " .. helper.shell_quote(tree) .. " " .. helper.shell_quote(root))
end

-- A rock build inside a checkout never breaks the checkout's own build:
-- luarocks' builtin build leaves a LuaJIT mongostore/core.so (newer than
-- every source) and csrc/*.o there; make still gives the module lua5.4
-- loads, and make clean removes every output, the rock's objects included.
function TestRock:test_rock_build_in_a_checkout_leaves_make_working()
  local root = source_copy(true)
  local q = helper.shell_quote
  local make = "cd " .. q(root) .. " && env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS LD_PRELOAD= make --no-print-directory"
  local ok, out = run(make)
  lu.assertTrue(ok, out)
  local tree = os.tmpname()
  os.remove(tree)
  ok, out = run(string.format(
    "cd %s && LD_PRELOAD= luarocks --lua-version 5.1 make --tree %s --deps-mode none " ..
    "LUA_INCDIR=/usr/include/luajit-2.1 MONGOC_INCDIR=/usr/include/libmongoc-1.0 " ..
    "BSON_INCDIR=/usr/include/libbson-1.0 %s", q(root), q(tree), rockspec.file_name()))
  lu.assertTrue(ok, out)
  local load54 = string.format("LD_PRELOAD= lua5.4 -e %s", q(string.format(
    "package.cpath = %q; local core = require 'mongostore.core'; print('loaded ' .. core.version)",
    root .. "/?.so")))
  -- what luarocks left in the checkout: a module lua5.4 cannot load
  ok, out = run(load54)
  lu.assertNotEquals(ok, true, "the rock build left a module lua5.4 loads: the spec shows nothing\n" .. out)
  ok, out = run(make)
  lu.assertTrue(ok, out)
  ok, out = run(load54)
  lu.assertTrue(ok, out)
  lu.assertStrContains(out, "loaded " .. rockspec.load().version:match("^(.-)%-%d+$"))
  -- a second make has nothing to do
  ok, out = run(make)
  lu.assertTrue(ok, out)
  lu.assertEquals(out:gsub("make: Nothing to be done for 'all'%.\n", ""), "")
  ok, out = run(make .. " clean")
  lu.assertTrue(ok, out)
  local _, left = run("cd " .. q(root) .. " && find . -name '*.o' -o -name '*.so'; for d in build mongostore; do if [ -e $d ]; then echo $d; fi; done")
  lu.assertEquals(left, "", "make clean left build outputs")
  run("rm -rf " .. q(tree) .. " " .. q(root))
end
