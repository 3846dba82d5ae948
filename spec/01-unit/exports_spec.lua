-- spec/01-unit/exports_spec.lua - the built module exports one symbol,
-- luaopen_mongostore_core (the Makefile's -fvisibility=hidden): no ms_
-- function can clash with another module's in the host (nginx, a Lua with
-- other C modules loaded), and nothing outside may come to depend on it.
local lu = require "luaunit"
local helper = require "helpers"

TestExports = {}

local function defined_symbols(path)
  local f = assert(io.popen("nm -D --defined-only " .. helper.shell_quote(path) .. " 2>&1", "r"))
  local names = {}
  for line in f:lines() do
    local name = line:match("^%x+%s+%a%s+(%S+)$")
    if name then names[#names + 1] = name end
  end
  local ok = f:close()
  assert(ok, "nm failed on " .. path)
  table.sort(names)
  return names
end

local function check(rel)
  local path = helper.root() .. "/" .. rel
  local probe = io.open(path, "rb")
  if not probe then
    lu.skip(rel .. " is not built (make " .. rel .. ")")
  end
  probe:close()
  lu.assertEquals(defined_symbols(path), { "luaopen_mongostore_core" })
end

function TestExports:test_lua54_module_exports_only_its_open_function()
  check("mongostore/core.so")
end

function TestExports:test_luajit_module_exports_only_its_open_function()
  check("build/jit/mongostore/core.so")
end
