-- spec/01-unit/rockspec_spec.lua - the rockspec stays in step with the tree:
-- it builds every C source in csrc/ and installs every module under
-- lua/mongostore/, and its version is the one core.version reports.
local lu = require "luaunit"
local helper = require "helpers"
local rockspec = require "helpers.rockspec"

TestRockspec = {}

local function listing(pattern)
  local p = assert(io.popen("cd " .. helper.shell_quote(helper.root()) .. " && ls " .. pattern .. " 2>/dev/null"))
  local out = {}
  for line in p:lines() do out[#out + 1] = line end
  p:close()
  table.sort(out)
  return out
end

function TestRockspec:test_builds_every_c_source()
  local spec = rockspec.load()
  local sources = { table.unpack(spec.build.modules["mongostore.core"].sources) }
  table.sort(sources)
  lu.assertEquals(sources, listing("csrc/*.c"))
end

function TestRockspec:test_installs_every_lua_module()
  local files = {}
  for name, file in pairs(rockspec.load().build.modules) do
    if type(file) == "string" then
      files[#files + 1] = file
      local expect = name == "mongostore" and "lua/mongostore/init.lua"
        or "lua/" .. name:gsub("%.", "/") .. ".lua"
      lu.assertEquals(file, expect, "module " .. name)
    end
  end
  table.sort(files)
  -- the modules of lua/mongostore/ and of its folders (mongostore.records.*)
  lu.assertEquals(files, listing("lua/mongostore/*.lua lua/mongostore/*/*.lua"))
end

function TestRockspec:test_file_name_and_version_agree()
  local spec = rockspec.load()
  lu.assertEquals(rockspec.file_name(), spec.package .. "-" .. spec.version .. ".rockspec")
  -- the development head (scm) or a release (X.Y.Z), then the rockspec revision
  lu.assertNotNil(spec.version:match("^scm%-%d+$") or spec.version:match("^%d+%.%d+%.%d+%-%d+$"), spec.version)
end

function TestRockspec:test_core_reports_the_rockspec_version()
  local core = require "mongostore.core"
  lu.assertEquals(core.version, rockspec.version())
end
