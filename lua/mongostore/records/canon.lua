-- mongostore.records.canon - the shapes of record types (fields, embedded children,
-- refs) and what follows from them: checking a value against its type, the canonical
-- encoding a content id hashes, and turning a stored document back into a record.
local core = require "mongostore.core"
local query = require "mongostore.query"
local util = require "mongostore.util"

local type, error, pairs, ipairs, tostring, rawequal, getmetatable = type, error, pairs, ipairs, tostring, rawequal,
  getmetatable
local format, concat, sort, byte = string.format, table.concat, table.sort, string.byte
local floor, huge = math.floor, math.huge
local mtype = math.type   -- nil on LuaJIT
local null, array = core.null, core.array

local M = {}

local SCALARS = { string = true, integer = true, float = true, boolean = true }
M.SCALARS = SCALARS

-- ------------------------------------------------------------ integers

local INT64_MAX = 9223372036854775807

-- An int64 box (LuaJIT beyond 2^53) or a number with no fraction.
local function is_int64_box(v)
  if type(v) ~= "userdata" then return false end
  local mt = getmetatable(v)
  return type(mt) == "table" and mt.__name == "mongostore.Int64"
end

local function is_integer(v)
  if type(v) == "number" then
    if mtype then return mtype(v) == "integer" or (v == floor(v) and v > -2^63 and v < 2^63) end
    return v == floor(v) and v >= -2^63 and v < 2^63
  end
  return is_int64_box(v)
end
M.is_integer = is_integer
M.INT64_MAX = INT64_MAX

-- floor(a / b) for integers, exact beyond 2^53 on Lua 5.4 (a float division
-- rounds there); LuaJIT has no integers past 2^53 anyway.
function M.idiv(a, b)
  local q = floor(a / b)
  if mtype then q = math.tointeger(q) or q end
  -- the remainder, exact even where q * b wraps past the int64 range (near
  -- its ends): the difference is small, and wrapping arithmetic keeps it
  local r = a - q * b
  while r < 0 do q, r = q - 1, r + b end
  while r >= b do q, r = q + 1, r - b end
  return q
end

-- A value's type with its article ("a string", "an array", "nil"), for a message.
local function a_type(v)
  if rawequal(v, null) then return "null" end
  local d = query.describe(v)
  if d == "nil" or d == "null" then return d end
  return (d:match("^[aeio]") and "an " or "a ") .. d
end
M.a_type = a_type

-- A value's type for a message about a client's value that could not be
-- cast: never its content.
function M.got(v)
  if type(v) == "number" then
    if v ~= v or v == huge or v == -huge then return "a number that is not finite" end
    if v ~= floor(v) then return "a number with a fraction" end
    return "a number"
  end
  if type(v) == "string" then return "a string that is not one" end
  return a_type(v)
end

-- A sid as a caller (or a client, through JSON or a query string) may give
-- it: an integer, or its exact decimal text; nil for anything else.
function M.cast_sid(v)
  if is_integer(v) then
    if type(v) == "number" and mtype then return math.tointeger(v) end
    return v
  end
  if type(v) == "string" then
    local n = query.cast_value("integer", v)
    if n ~= nil and is_integer(n) then return n end
  end
  return nil
end

-- The integer as Lua writes it (on Lua 5.4 an integral float becomes an integer).
local function as_integer(v)
  if mtype and mtype(v) == "float" then return math.tointeger(v) end
  return v
end

local function int_text(v)
  if type(v) == "number" then
    if mtype then return format("%d", as_integer(v)) end
    return format("%.0f", v)
  end
  return tostring(v)
end

local function float_text(v)
  if v ~= v or v == huge or v == -huge then return nil end
  if v == 0 and 1 / v < 0 then return "-0" end
  return format("%.17g", v)
end

-- ------------------------------------------------------------ field declarations

-- "string" | "integer" | "float" | "boolean", each with "[]" for a list of it;
-- or { type, identity = false, required = true }.
local FIELD_KEYS = { [1] = true, identity = true, required = true }

function M.compile_field(decl, where)
  local t, identity, required = decl, true, false
  if type(decl) == "table" then
    for k in pairs(decl) do
      if not FIELD_KEYS[k] then error(format("%s: unknown key %s in a field declaration", where, tostring(k)), 4) end
    end
    t = decl[1]
    if decl.identity ~= nil then
      if type(decl.identity) ~= "boolean" then error(where .. ": identity must be a boolean", 4) end
      identity = decl.identity
    end
    if decl.required ~= nil then
      if type(decl.required) ~= "boolean" then error(where .. ": required must be a boolean", 4) end
      required = decl.required
    end
  end
  if type(t) ~= "string" then error(format("%s: the type must be a string, got %s", where, type(t)), 4) end
  local base, list = t, false
  if t:sub(-2) == "[]" then base, list = t:sub(1, -3), true end
  if not SCALARS[base] then
    error(format("%s: unknown type %q (string, integer, float, boolean, each with [] for a list)", where, t), 4)
  end
  return { type = base, list = list, identity = identity, required = required, decl = t }
end

-- ------------------------------------------------------------ checking values

local function scalar_ok(kind, v)
  if kind == "string" then return type(v) == "string" end
  if kind == "boolean" then return type(v) == "boolean" end
  if kind == "integer" then return is_integer(v) end
  return type(v) == "number" and float_text(v) ~= nil
end

local function is_list(v)
  return type(v) == "table" and not rawequal(v, null) and util.is_sequence(v)
end
M.is_list = is_list

-- nil when v fits f, else what is wrong.
function M.check_field(f, v, path)
  if v == nil or rawequal(v, null) then
    if f.required then return path .. " is required" end
    return nil
  end
  if f.list then
    if not is_list(v) then return format("%s must be a list of %s, got %s", path, f.type, type(v)) end
    for i = 1, #v do
      if not scalar_ok(f.type, v[i]) then
        return format("%s[%d] must be %s %s, got %s", path, i, f.type == "integer" and "an" or "a", f.type,
          type(v[i]))
      end
    end
    return nil
  end
  if not scalar_ok(f.type, v) then
    local got = type(v)
    if f.type == "float" and type(v) == "number" then got = "a number that is not finite" end
    if f.type == "integer" and type(v) == "number" then got = "a number with a fraction" end
    return format("%s must be %s %s, got %s", path, f.type == "integer" and "an" or "a", f.type, got)
  end
  return nil
end

-- ------------------------------------------------------------ canonical encoding

-- Typed and length-prefixed, so no two values share an encoding: an integer
-- and a float of the same magnitude differ ("i" / "d"), keys go in byte order.
local function enc_scalar(kind, v, out)
  if kind == "string" then out[#out + 1] = "s" .. #v .. ":" .. v
  elseif kind == "boolean" then out[#out + 1] = v and "T" or "F"
  elseif kind == "integer" then out[#out + 1] = "i" .. int_text(v) .. ";"
  else out[#out + 1] = "d" .. float_text(v) .. ";" end
end

local function enc_field(f, v, out)
  if v == nil or rawequal(v, null) then out[#out + 1] = "N"; return end
  if f.list then
    out[#out + 1] = "a" .. #v .. "["
    for i = 1, #v do enc_scalar(f.type, v[i], out) end
    out[#out + 1] = "]"
  else
    enc_scalar(f.type, v, out)
  end
end

local function key(k, out) out[#out + 1] = "k" .. #k .. ":" .. k end

-- shape: a compiled type or child shape (fields, children, refs, names sorted);
-- refcid(name, i) gives the content id of the ref (i-th element of a list ref).
local function enc_shape(shape, t, out, refcid, meta)
  out[#out + 1] = "{"
  for _, name in ipairs(shape.names) do
    local kind = shape.kinds[name]
    if kind == "field" then
      local f = shape.fields[name]
      if f.identity ~= (meta or false) then key(name, out); enc_field(f, t[name], out) end
    elseif kind == "child" then
      key(name, out)
      local list, child = t[name], shape.children[name]
      if list == nil or rawequal(list, null) then
        out[#out + 1] = "a0["
      else
        out[#out + 1] = "a" .. #list .. "["
        for i = 1, #list do enc_shape(child, list[i], out, nil, meta) end
      end
      out[#out + 1] = "]"
    elseif not meta then
      key(name, out)
      local r = shape.refs[name]
      if r.many then
        local n = refcid(name, nil)
        out[#out + 1] = "a" .. n .. "["
        for i = 1, n do out[#out + 1] = "r" .. refcid(name, i) .. ";" end
        out[#out + 1] = "]"
      else
        local cid = refcid(name, 1)
        out[#out + 1] = cid and ("r" .. cid .. ";") or "N"
      end
    end
  end
  out[#out + 1] = "}"
end

-- The canonical bytes of a record of type T: its name, then its identity
-- fields, children and the content ids of its refs.
function M.encode(T, t, refcid)
  local out = { "R", #T.name, ":", T.name }
  enc_shape(T, t, out, refcid)
  return concat(out)
end

M.hex = util.hex

-- The fields with identity = false (children's too): what value dedup compares.
function M.meta_encode(T, t)
  local out = {}
  enc_shape(T, t, out, nil, true)
  return concat(out)
end

function M.content_id(T, t, refcid)
  return M.hex(core.sha256(M.encode(T, t, refcid)))
end

-- ------------------------------------------------------------ shapes

-- Compiles fields/children of a type or a child into a shape: by name, and
-- the names sorted (the canonical order).
function M.compile_shape(spec, where, allow_refs)
  local shape = { fields = {}, children = {}, refs = {}, kinds = {}, names = {} }
  local function add(name, kind)
    if type(name) ~= "string" or not name:match("^[%a][%w_]*$") then
      error(format("%s: %s name %s must be letters, digits and _, starting with a letter", where, kind,
        tostring(name)), 4)
    end
    if shape.kinds[name] then error(format("%s: %s is declared twice", where, name), 4) end
    shape.kinds[name] = kind
    shape.names[#shape.names + 1] = name
  end
  if spec.fields ~= nil and type(spec.fields) ~= "table" then error(where .. ": fields must be a table", 4) end
  for name, decl in pairs(spec.fields or {}) do
    add(name, "field")
    shape.fields[name] = M.compile_field(decl, where .. ": field " .. tostring(name))
  end
  if spec.children ~= nil and type(spec.children) ~= "table" then error(where .. ": children must be a table", 4) end
  for name, cspec in pairs(spec.children or {}) do
    add(name, "child")
    if type(cspec) ~= "table" then error(format("%s: children.%s must be { fields = ..., children = ... }", where,
      tostring(name)), 4) end
    for k in pairs(cspec) do
      if k ~= "fields" and k ~= "children" then
        error(format("%s: children.%s: unknown key %s (fields, children)", where, name, tostring(k)), 4)
      end
    end
    shape.children[name] = M.compile_shape(cspec, where .. ": child " .. name, false)
  end
  if spec.refs ~= nil then
    if not allow_refs then error(where .. ": children cannot hold refs (a ref belongs to a record type)", 4) end
    if type(spec.refs) ~= "table" then error(where .. ": refs must be a table", 4) end
    for name, target in pairs(spec.refs) do
      add(name, "ref")
      local many = false
      if type(target) == "table" and not target.__record_type and #target == 1 then target, many = target[1], true end
      if type(target) ~= "table" or not target.__record_type then
        error(format("%s: refs.%s must be a record type (records.define) or { type } for a list", where, name), 4)
      end
      shape.refs[name] = { type = target, many = many }
    end
  end
  sort(shape.names)
  return shape
end

-- A plain description of a shape (for fingerprints and debugging): fields
-- with their declared type and identity, children's shapes, refs by type name.
function M.describe(shape)
  local d = { fields = {}, children = {}, refs = {} }
  for name, f in pairs(shape.fields) do
    d.fields[name] = { type = f.decl, identity = f.identity, required = f.required }
  end
  for name, c in pairs(shape.children) do d.children[name] = M.describe(c) end
  for name, r in pairs(shape.refs) do d.refs[name] = { type = r.type.name, many = r.many } end
  return d
end

-- ------------------------------------------------------------ stored form

-- The stored value of a field: floats written as floats on Lua 5.4, lists as arrays.
local function store_field(f, v)
  if v == nil or rawequal(v, null) then return nil end
  if f.list then
    local out = {}
    for i = 1, #v do out[i] = (f.type == "float" and mtype) and v[i] + 0.0 or v[i] end
    return array(out)
  end
  if f.type == "float" and mtype then return v + 0.0 end
  if f.type == "integer" then return as_integer(v) end
  return v
end

-- A child's stored document (fields and nested children).
local function store_child(shape, t)
  local d = {}
  for name, f in pairs(shape.fields) do d[name] = store_field(f, t[name]) end
  for name, c in pairs(shape.children) do
    local list = t[name]
    local out = {}
    if list ~= nil and not rawequal(list, null) then
      for i = 1, #list do out[i] = store_child(c, list[i]) end
    end
    d[name] = array(out)
  end
  return d
end

-- The user part of a record's document (refs left to the caller).
function M.store_doc(T, t)
  return store_child(T, t)
end

-- Reading back: a float field read on Lua 5.4 as an integer (written by
-- LuaJIT, whose integral numbers go out as int64) becomes a float again, and
-- an integer field the other way round; a field nothing stored reads as nil.
local function read_field(f, v)
  if v == nil or rawequal(v, null) then return nil end
  if f.list then
    local out = {}
    for i = 1, #v do
      local x = v[i]
      if mtype and type(x) == "number" then x = f.type == "float" and x + 0.0 or (as_integer(x) or x) end
      out[i] = x
    end
    return out
  end
  if mtype and type(v) == "number" then
    if f.type == "float" then return v + 0.0 end
    if f.type == "integer" then return as_integer(v) or v end
  end
  return v
end

local function read_child(shape, d)
  local t = {}
  for name, f in pairs(shape.fields) do t[name] = read_field(f, d[name]) end
  for name, c in pairs(shape.children) do
    local list = d[name]
    local out = {}
    if type(list) == "table" then
      for i = 1, #list do out[i] = read_child(c, list[i]) end
    end
    t[name] = out
  end
  return t
end

function M.read_doc(T, d)
  return read_child(T, d)
end

-- Checks a child table: its fields, its nested children, nothing undeclared.
function M.check_child(shape, t, path)
  if type(t) ~= "table" or rawequal(t, null) then return format("%s must be a table, got %s", path, type(t)) end
  for k in pairs(t) do
    if type(k) ~= "string" then return format("%s has a key that is not a string (%s)", path, tostring(k)) end
    if byte(k, 1) ~= 95 and not shape.kinds[k] then return format("%s.%s is not declared", path, k) end
  end
  for name, f in pairs(shape.fields) do
    local e = M.check_field(f, t[name], path .. "." .. name)
    if e then return e end
  end
  for name, c in pairs(shape.children) do
    local list = t[name]
    if list ~= nil and not rawequal(list, null) then
      if not is_list(list) then return format("%s.%s must be a list of children", path, name) end
      for i = 1, #list do
        local e = M.check_child(c, list[i], format("%s.%s[%d]", path, name, i))
        if e then return e end
      end
    end
  end
  return nil
end

return M
