-- spec/helpers/rockspec.lua - the project's one rockspec, read as luarocks
-- reads it (a Lua chunk run in its own table): its file name, the version it
-- gives, and the C sources and Lua modules it builds.
local helper = require "helpers"

local M = {}

-- The path of the rockspec at the checkout's root (there is exactly one).
function M.path()
  local root = helper.root()
  local p = assert(io.popen("ls " .. helper.shell_quote(root) .. "/*.rockspec 2>/dev/null", "r"))
  local found = {}
  for line in p:lines() do found[#found + 1] = line end
  p:close()
  assert(#found == 1, "expected one rockspec at the root, found " .. #found)
  return found[1]
end

function M.file_name()
  return (M.path():match("([^/]+)$"))
end

-- The rockspec's fields, evaluated the way luarocks does.
function M.load()
  local env = {}
  local chunk = assert(loadfile(M.path(), "t", env))
  chunk()
  return env
end

-- "scm" of version "scm-1" ("X.Y.Z" of "X.Y.Z-1"): what core.version must say.
function M.version()
  return (M.load().version:match("^(.-)%-%d+$"))
end

return M
