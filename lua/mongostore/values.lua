-- mongostore.values - the value marks every layer shares, in pure Lua: null,
-- and the array mark that keeps a table a JSON/BSON array. The interpreter
-- takes them from here, so it runs with no C module; the C core reads the same marks.

-- The array mark is the metatable the C core keeps in the registry under
-- "mongostore.array" (csrc/ms.h MS_ARRAY_MT). luaL_newmetatable hands back
-- the table already there, so whichever of this file and the core loads first
-- creates it and the other shares it: an array marked here is an array to the
-- core's codecs, and one the core decodes is an array here.
local ARRAY_MT_NAME = "mongostore.array"

local type, error, rawequal, rawget, pcall, require = type, error, rawequal, rawget, pcall, require
local getmetatable, setmetatable = getmetatable, setmetatable
local debug = debug

local M = {}

local array_mt
local getregistry = debug and debug.getregistry
if getregistry then
  local registry = getregistry()
  array_mt = registry[ARRAY_MT_NAME]
  if type(array_mt) ~= "table" then
    -- as ms_open_value names it, for error messages that print a type name
    array_mt = { __name = "array" }
    registry[ARRAY_MT_NAME] = array_mt
  end
end

-- null: the C core's null is the NULL light userdata (as lua-cjson's), which
-- pure Lua cannot make. With the core loadable, null is that value, so a null
-- decoded by the core and one written here are the same; without it, null is
-- a sentinel table of its own, unique, that refuses fields. The choice is made
-- once, when this module first loads: a core loaded later in the same state
-- has its own null, which this one does not equal.
local core_ok, core = pcall(require, "mongostore.core")
if not core_ok then core = nil end

if core then
  M.null = core.null
  if not array_mt then array_mt = getmetatable(core.array {}) end -- no debug library
else
  M.null = setmetatable({}, {
    __name = "mongostore.null",
    __tostring = function() return "null" end,
    __newindex = function() error("mongostore.null has no fields", 2) end,
    __metatable = false,
  })
  -- no debug library and no core: a mark only this module reads
  array_mt = array_mt or { __name = "array" }
end

-- Whether the C core backs null here (true) or the pure sentinel does.
M.has_core = core ~= nil

-- raw, as lua_setmetatable and lua_getmetatable are in the core
local set_mt = debug and debug.setmetatable or setmetatable
local get_mt = debug and debug.getmetatable or getmetatable

-- array(t) marks t (or a new table) as an array and returns it: it stays a
-- JSON/BSON array even when empty. Like the core's, it replaces whatever
-- metatable t had.
function M.array(t)
  if t == nil then t = {} end
  if type(t) ~= "table" then error("array: t must be a table or nil, got " .. type(t), 2) end
  set_mt(t, array_mt) -- its result is not t in Lua 5.1 / LuaJIT
  return t
end

-- is_array(v): true when v is a table marked with array. The one rule the
-- core keeps too (ms_is_marked_array): its metatable is the mark, or the
-- shape of an array the core decoded from a document (which remembers each
-- item's numeric type), holding the mark at [0].
function M.is_array(v)
  if type(v) ~= "table" then return false end
  local mt = get_mt(v)
  return rawequal(mt, array_mt) or (type(mt) == "table" and rawequal(rawget(mt, 0), array_mt))
end

-- is_null(v): true for null (nil is not null: it is a missing value).
function M.is_null(v)
  return rawequal(v, M.null)
end

return M
