-- mongostore.schema - a model's field declarations, compiled once at define time
-- into plain tables (types, defaults, roles, nested schemas), and the checks
-- that run on them: a whole document before it is stored, one value or one
-- update path (mongostore.query.paths) before an update is sent.
local core = require "mongostore.core"
local is_sequence = require("mongostore.util").is_sequence

local type, pairs, ipairs, tostring, format, getmetatable, next, rawget = type, pairs, ipairs, tostring,
  string.format, getmetatable, next, rawget
local floor = math.floor
local concat = table.concat
local mtype = math.type  -- nil on LuaJIT

local M = {}

local null, is_array, array = core.null, core.is_array, core.array
local DATE_MT = getmetatable(core.date(0))
local OID_MT = getmetatable(core.objectid())
local DEC_MT = getmetatable(core.decimal("1"))
local BIN_MT = getmetatable(core.binary(""))
local INT64_MT = getmetatable(core.int64("9007199254740993"))  -- a box on LuaJIT, a plain integer on 5.4
if type(INT64_MT) ~= "table" then INT64_MT = nil end

-- check_document's fast kinds (compile_field sets them)
local K_INTEGER, K_NUMBER, K_BOX, K_ANY, K_ARRAY_OF = 1, 2, 3, 4, 5
local BOX_MT = { date = DATE_MT, objectid = OID_MT, decimal = DEC_MT, binary = BIN_MT }

-- The roles a field can play, and the type each has.
M.ROLES = { created_at = "date", updated_at = "date", deleted_at = "date", revision = "integer" }

local function is_integer(v)
  if type(v) == "number" then
    if mtype then return mtype(v) == "integer" or (v == floor(v) and v > -2 ^ 63 and v < 2 ^ 63) end
    return v == floor(v) and v > -2 ^ 63 and v < 2 ^ 63
  end
  return INT64_MT ~= nil and getmetatable(v) == INT64_MT
end

local function is_number(v)
  if type(v) == "number" then return v == v and v ~= 1 / 0 and v ~= -1 / 0 end
  return INT64_MT ~= nil and getmetatable(v) == INT64_MT
end

-- A plain table that is no array (documents read back have a shape metatable).
local function is_document(v)
  if type(v) ~= "table" or is_array(v) then return false end
  local mt = getmetatable(v)
  if mt ~= nil and mt.__name ~= "mongostore.document" then return false end
  return v[1] == nil
end

-- An array field's value: one marked as an array, or a plain table whose
-- keys are 1..n.
local function is_list(v)
  if type(v) ~= "table" then return false end
  if is_array(v) then return true end
  return getmetatable(v) == nil and is_sequence(v)
end

-- type name -> test, and the words of its message
local TYPES = {
  string = { function(v) return type(v) == "string" end, "a string" },
  integer = { is_integer, "an integer" },
  number = { is_number, "a number" },
  boolean = { function(v) return type(v) == "boolean" end, "a boolean" },
  date = { function(v) return getmetatable(v) == DATE_MT end, "a date (mongostore.date)" },
  objectid = { function(v) return getmetatable(v) == OID_MT end, "an ObjectId (mongostore.objectid)" },
  decimal = { function(v) return getmetatable(v) == DEC_MT end, "a Decimal128 (mongostore.decimal)" },
  binary = { function(v) return getmetatable(v) == BIN_MT end, "a Binary (mongostore.binary)" },
  array = { is_list, "an array" },
  document = { is_document, "a document (a table of fields)" },
  any = { function() return true end, "any value" },
}
M.TYPES = TYPES

local FIELD_KEYS = { [1] = true, default = true, required = true, of = true, fields = true, enum = true,
                     min = true, max = true, check = true, immutable = true, role = true }

local compile

-- A field declaration: a type name, a role name, or { type, default =, required =,
-- of = <element declaration>, fields = <nested declarations>, enum = {...},
-- min =, max =, check = function(v) -> true | nil, message, immutable = }.
local function compile_field(name, decl, where)
  if type(decl) == "string" then decl = { decl } end
  if type(decl) ~= "table" then
    error(format("%s: field %s must be a type name or a table, got %s", where, name, type(decl)), 4)
  end
  for k in pairs(decl) do
    if not FIELD_KEYS[k] then error(format("%s: field %s: unknown key %s", where, name, tostring(k)), 4) end
  end
  local t, role = decl[1], decl.role
  if M.ROLES[t] then role, t = t, M.ROLES[t] end
  if role ~= nil and not M.ROLES[role] then
    error(format("%s: field %s: unknown role %s", where, name, tostring(role)), 4)
  end
  if role then t = M.ROLES[role] end
  if type(t) ~= "string" or not TYPES[t] then
    error(format("%s: field %s: unknown type %s", where, name, tostring(t)), 4)
  end
  local f = { name = name, type = t, test = TYPES[t][1], words = TYPES[t][2], role = role,
              required = decl.required == true, immutable = decl.immutable == true or role == "created_at",
              enum = nil, min = decl.min, max = decl.max, check = decl.check }
  if decl.check ~= nil and type(decl.check) ~= "function" then
    error(format("%s: field %s: check must be a function", where, name), 4)
  end
  if decl.enum ~= nil then
    if type(decl.enum) ~= "table" then error(format("%s: field %s: enum must be a list", where, name), 4) end
    f.enum = {}
    for _, v in ipairs(decl.enum) do f.enum[v] = true end
    f.enum_list = decl.enum
  end
  if decl.of ~= nil then
    if t ~= "array" then error(format("%s: field %s: of is for arrays", where, name), 4) end
    f.of = compile_field(name .. "[]", decl.of, where)
  end
  if decl.fields ~= nil then
    if t ~= "document" and t ~= "array" then error(format("%s: field %s: fields is for documents", where, name), 4) end
    if t == "array" then
      local sub = compile(decl.fields, where .. " " .. name)
      f.of = { name = name .. "[]", type = "document", test = is_document, words = TYPES.document[2],
               schema = sub, marks = sub.mark_list[1] ~= nil }
    else
      f.schema = compile(decl.fields, where .. " " .. name)
    end
  end
  -- marks: a value of this field can hold a table that must be marked as an
  -- array before it is diffed or encoded (M.mark_value)
  f.marks = t == "array" or (f.schema ~= nil and f.schema.mark_list[1] ~= nil)
  -- plain: passing the type's test is all there is to check
  f.plain = not (f.enum or f.min or f.max or f.check or f.of or f.schema or t == "array")
  -- a plain string or boolean field is one type() comparison; the other
  -- plain kinds one test each too (check_document's fast path; a value that
  -- fails it takes the full check, which decides and words the error)
  if f.plain then
    if t == "string" or t == "boolean" then f.ltype = t
    elseif t == "integer" and mtype then f.kind = K_INTEGER
    elseif t == "number" and not INT64_MT then f.kind = K_NUMBER
    elseif BOX_MT[t] then f.kind, f.lmt = K_BOX, BOX_MT[t]
    elseif t == "any" then f.kind = K_ANY
    end
  elseif t == "array" and not (f.enum or f.min or f.max or f.check) and f.of and f.of.ltype then
    f.kind, f.lmt = K_ARRAY_OF, f.of.ltype
  end
  if decl.default ~= nil then
    local d = decl.default
    if type(d) == "table" and t == "array" and not is_array(d) and getmetatable(d) == nil then d = array(d) end
    if type(d) ~= "function" and d ~= null and not f.test(d) then
      error(format("%s: field %s: its default is not %s", where, name, f.words), 4)
    end
    f.default = d
  end
  return f
end

-- fields -> { by_name = { name -> field }, list = { field... } (by name), roles = { role -> name } }
function compile(fields, where)
  if type(fields) ~= "table" then error(where .. ": fields must be a table", 4) end
  local s = { by_name = {}, list = {}, roles = {} }
  for name, decl in pairs(fields) do
    if type(name) ~= "string" or name == "" or name:find(".", 1, true) or name:sub(1, 1) == "$" then
      error(format("%s: %s is not a field name", where, tostring(name)), 3)
    end
    local f = compile_field(name, decl, where)
    s.by_name[name] = f
    s.list[#s.list + 1] = f
    if f.role then
      if s.roles[f.role] then error(format("%s: two %s fields (%s, %s)", where, f.role, s.roles[f.role], name), 3) end
      s.roles[f.role] = name
    end
  end
  table.sort(s.list, function(a, b) return a.name < b.name end)
  s.required = {}
  for _, f in ipairs(s.list) do
    if f.required then s.required[#s.required + 1] = f.name end
  end
  s.mark_list = {}
  for _, f in ipairs(s.list) do
    if f.marks then s.mark_list[#s.mark_list + 1] = f end
  end
  return s
end
M.compile = compile

-- Array marks, put on every write whether or not it is validated: an empty
-- table is a document to the encoder (and to track.diff) unless it is marked,
-- so `a.tags = {}` would be stored as {} and read back as no array. The
-- schema knows which values are arrays; only those are walked.
local mark_doc

local function mark_value(f, v)
  if f.type == "array" then
    if getmetatable(v) == nil and next(v) == nil then array(v); return end
    local of = f.of
    if of and of.marks then
      for i = 1, #v do
        local x = v[i]
        if type(x) == "table" then mark_value(of, x) end
      end
    end
  elseif f.schema and not is_array(v) then
    mark_doc(f.schema, v)
  end
end

function mark_doc(s, doc)
  local list = s.mark_list
  for i = 1, #list do
    local f = list[i]
    local v = rawget(doc, f.name)
    if type(v) == "table" then mark_value(f, v) end
  end
end

--- schema.mark(s, doc): marks the empty tables of doc's array fields (nested ones too) as arrays.
function M.mark(s, doc)
  if s.mark_list[1] ~= nil then mark_doc(s, doc) end
end

--- schema.mark_value(field, v): marks v (a value of the field) and the arrays inside it as the schema declares.
function M.mark_value(f, v)
  if f.marks and type(v) == "table" then mark_value(f, v) end
end

-- A value's path for a message, built only when there is one to give: base
-- (the parent's path, "" at the top) and key (a field name, or an item's index).
local function path_of(base, key)
  if type(key) == "number" then return base .. "[" .. key .. "]" end
  if base == "" then return key end
  return base .. "." .. key
end

local function add(errs, field, message)
  errs[#errs + 1] = { field = field, message = message }
end

local check_document

local function type_name(f, v)
  local got = type(v)
  if got == "userdata" then
    local mt = getmetatable(v)
    got = mt and mt.__name or got
  elseif got == "number" and f.type == "integer" then
    got = "the float " .. tostring(v)
  end
  return got
end

-- Checks one value against a field (the value at base/key); a nil value is
-- the caller's to judge (required). The common case, a value of the right
-- type with nothing more to check, builds no string and no table.
local function check_value(f, v, base, key, errs)
  if v == null then
    if f.required then
      local p = path_of(base, key)
      add(errs, p, p .. " is required (got null)")
    end
    return
  end
  if not f.test(v) then
    local p = path_of(base, key)
    add(errs, p, format("%s must be %s, got %s", p, f.words, type_name(f, v)))
    return
  end
  if f.enum and not f.enum[v] then
    local words = {}
    for i, e in ipairs(f.enum_list) do words[i] = tostring(e) end
    local p = path_of(base, key)
    add(errs, p, format("%s must be one of %s, got %s", p, concat(words, ", "), tostring(v)))
    return
  end
  if f.min ~= nil or f.max ~= nil then
    local size = (f.type == "string" or f.type == "array") and #v or v
    if type(size) == "number" then
      if f.min ~= nil and size < f.min then
        local p = path_of(base, key)
        add(errs, p, format("%s is below its minimum %s", p, tostring(f.min)))
      end
      if f.max ~= nil and size > f.max then
        local p = path_of(base, key)
        add(errs, p, format("%s is above its maximum %s", p, tostring(f.max)))
      end
    end
  end
  local t = f.type
  if t == "array" then
    -- an empty table meant as an array: marked, so it is stored as [] and not {}
    if next(v) == nil and getmetatable(v) == nil then array(v) end
    local of = f.of
    if of then
      local p = path_of(base, key)
      local test, plain = of.test, of.plain
      for i = 1, #v do
        local x = v[i]
        if not (plain and test(x)) then check_value(of, x, p, i, errs) end
      end
    end
  elseif f.schema then
    check_document(f.schema, v, path_of(base, key), errs)
  end
  if f.check then
    local ok, msg = f.check(v)
    if not ok then
      local p = path_of(base, key)
      add(errs, p, p .. ": " .. tostring(msg or "refused by its check"))
    end
  end
end

--- schema.check_value(field, v, path, errs): checks one value (an update's), adding to errs.
function M.check_value(f, v, path, errs)
  return check_value(f, v, "", path, errs)
end

-- Checks a document against a schema: unknown keys, required fields, types.
-- skip: keys not to look at (the id, which the model checks itself).
function check_document(s, doc, base, errs, skip)
  local by_name = s.by_name
  -- next, not pairs: a model's document has a metatable (no __pairs to look up)
  for k, v in next, doc do
    local f = by_name[k]
    if f == nil then
      if not (skip and skip[k]) then
        local p = path_of(base, tostring(k))
        add(errs, p, p .. " is not a field of the model")
      end
    else
      local lt = f.ltype
      if lt then
        if type(v) ~= lt then check_value(f, v, base, k, errs) end
      else
        local kind = f.kind
        if kind == K_INTEGER then
          if mtype(v) ~= "integer" then check_value(f, v, base, k, errs) end
        elseif kind == K_NUMBER then
          -- v - v is 0 for every finite number, NaN for NaN and the infinities
          if type(v) ~= "number" or v - v ~= 0 then check_value(f, v, base, k, errs) end
        elseif kind == K_BOX then
          if getmetatable(v) ~= f.lmt then check_value(f, v, base, k, errs) end
        elseif kind == K_ARRAY_OF then
          if is_array(v) then
            local et = f.lmt
            for i = 1, #v do
              if type(v[i]) ~= et then check_value(f, v, base, k, errs); break end
            end
          else
            check_value(f, v, base, k, errs)
          end
        elseif kind ~= K_ANY and not (f.plain and f.test(v)) then
          check_value(f, v, base, k, errs)
        end
      end
    end
  end
  local required = s.required
  for i = 1, #required do
    local name = required[i]
    if doc[name] == nil then
      local p = path_of(base, name)
      add(errs, p, p .. " is required")
    end
  end
  return errs
end

--- Checks a document: nil when it fits, otherwise the list of { field =, message = }.
function M.check(s, doc, skip)
  local errs = check_document(s, doc, "", {}, skip)
  if #errs == 0 then return nil end
  return errs
end

-- The field an update path names, walking nested schemas: the field, or
-- false when the path runs into a free-form document (anything goes), or
-- nil, why when the path names no field.
local function field_at(s, path)
  local f, rest = nil, path
  local cur = s
  while true do
    local seg, tail = rest:match("^([^.]+)%.(.+)$")
    if not seg then seg = rest end
    if f and f.type == "array" then
      -- an element: an index, $, $[] or $[name]
      if seg:match("^%d+$") or seg == "$" or seg:match("^%$%[[%w_]*%]$") then
        f = f.of or false
        if f == false then return false end
        cur = f.schema
      else
        return nil, "an array is indexed by a number or $"
      end
    else
      if cur == nil then
        if f and (f.type == "document" or f.type == "any") then return false end
        return nil, "it has no fields"
      end
      f = cur.by_name[seg]
      if not f then return nil, "not a field of the model" end
      cur = f.schema
    end
    if not tail then return f end
    rest = tail
  end
end
M.field_at = field_at

return M
