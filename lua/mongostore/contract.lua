-- mongostore.contract - each public call's signature as data, checked in one
-- place, and the one failure constructor.
--
-- A signature names the call as the docs show it (`store:pending_outbox`,
-- `engine.new`, `mongostore.connect`): that name is the prefix of every
-- message the call gives, and spec/01-unit/contract_spec.lua holds every
-- signature against the call's entry in docs/api.lua (the parameter names,
-- their types, an options table's keys and their types).
--
--   local SIG = contract.define("store:due_timers", {
--     { "now", "number" },
--     { "opts", "table?", fields = { limit = { "integer", min = 1 } } },
--   })
--   function Store:due_timers(now, opts)
--     local bad = SIG:check(now, opts)
--     if bad then return contract.fail("invalid", bad) end
--
-- The two kinds of wrong input are told apart as the house does: a wrong Lua
-- type, an unknown option or a rule between options (`needs`, `excludes`) is
-- the caller's program, and raises naming the argument; a value of the right
-- type that the call cannot take (out of range, not an integer, not one of a
-- set) may be a client's, and check returns the message for
-- `nil, message, "invalid"`.
--
-- A type is a union of kinds, `|`-separated, with a trailing `?` for an
-- optional one: string, number, integer (a number that must be integral: a
-- fractional one is a bad value), boolean, table, function, any, or a kind
-- registered with contract.kind (a predicate, as `mongostore.Execution`).
-- Rules on a value: min, max (inclusive), gt, lt (exclusive), one_of (a set
-- of allowed values), check (a function returning why not, or nil).
local type, error, pairs, ipairs, tostring, setmetatable = type, error, pairs, ipairs, tostring, setmetatable
local format, sort, concat = string.format, table.sort, table.concat
local math_type = math.type or function(v) -- Lua 5.1 / LuaJIT
  if type(v) ~= "number" then return nil end
  if v == v and v % 1 == 0 and v > -2 ^ 63 and v < 2 ^ 63 then return "integer" end
  return "float"
end

local M = {}

-- A signature's arguments at most (checked without a vararg list).
local MAX_ARGS = 6

-- Every signature defined, by name, and their names in definition order.
M.signatures = {}
M.names = {}

local PRIMITIVE = { string = true, number = true, integer = true, boolean = true, table = true,
                    ["function"] = true, any = true, ["nil"] = true }

-- Kinds beyond Lua's: name -> predicate(v) -> boolean, and how a message
-- names each ("a chart (chart.define)").
local kinds, kind_words = {}, {}
M.kinds = kinds

-- contract.kind(name, predicate[, words]): a named kind a type may use.
function M.kind(name, predicate, words)
  if type(name) ~= "string" or type(predicate) ~= "function" then
    error("contract.kind: expected a name and a predicate", 2)
  end
  kinds[name], kind_words[name] = predicate, words
end

-- "integer|string?" -> { "integer", "string" }, true
local function parse_type(text, where)
  if type(text) ~= "string" then error(where .. ": a type must be a string", 3) end
  local optional = text:sub(-1) == "?"
  if optional then text = text:sub(1, -2) end
  local list = {}
  for k in text:gmatch("[^|]+") do
    -- a dotted name ("mongostore.Execution") may be registered later, by
    -- the module that makes such values; until then nothing is of it
    if not PRIMITIVE[k] and not kinds[k] and not k:match("^[%a_][%w_]*%.[%w_.]+$") then
      error(format("%s: unknown kind %s", where, k), 3)
    end
    list[#list + 1] = k
  end
  if #list == 0 then error(where .. ": an empty type", 3) end
  return list, optional
end

local getmetatable = getmetatable
local function is_int64_box(v)
  if type(v) ~= "userdata" and type(v) ~= "cdata" then return false end
  local mt = getmetatable(v)
  return type(mt) == "table" and mt.__name == "mongostore.int64"
end

-- "a string", "an integer or a table": the kinds of a type, for a message.
local function describe(list)
  local parts = {}
  for i, k in ipairs(list) do
    if k == "any" then parts[i] = "a value"
    elseif kind_words[k] then parts[i] = kind_words[k]
    else parts[i] = (k:match("^[aeiouAEIOU]") and "an " or "a ") .. k end
  end
  return concat(parts, " or ")
end

local function matches(kind, v)
  if kind == "any" then return v ~= nil end
  -- integral is a value rule; the core's int64 box is an integer too
  if kind == "integer" then return type(v) == "number" or is_int64_box(v) end
  if PRIMITIVE[kind] then return type(v) == kind end
  local pred = kinds[kind]
  return pred ~= nil and pred(v) == true
end

local function what_of(v)
  local t = type(v)
  if t == "number" then return math_type(v) == "integer" and "integer" or "number" end
  return t
end

-- One argument or option: { kinds, optional, rules..., label }.
local function compile_value(spec, label, where, optional_default)
  if type(spec) == "string" then spec = { spec } end
  if type(spec) ~= "table" or type(spec[1]) ~= "string" then
    error(format("%s: %s: expected a type or { type, rules... }", where, label), 3)
  end
  local list, optional = parse_type(spec[1], where .. ": " .. label)
  local v = { kinds = list, optional = optional or optional_default, label = label, type_text = describe(list),
              min = spec.min, max = spec.max, gt = spec.gt, lt = spec.lt, check = spec.check,
              needs = spec.needs, excludes = spec.excludes }
  if spec.required then v.optional = false end
  if spec.one_of then
    local set, shown = {}, {}
    for i, x in ipairs(spec.one_of) do set[x], shown[i] = true, tostring(x) end
    v.one_of, v.one_of_text = set, concat(shown, ", ")
  end
  -- integer without number in the union: a fractional number is refused
  local has_int, has_num = false, false
  for _, k in ipairs(list) do
    if k == "integer" then has_int = true elseif k == "number" then has_num = true end
  end
  v.integral = has_int and not has_num
  -- the common case, one Lua type and no rule, is judged by one type() test
  if #list == 1 and PRIMITIVE[list[1]] and list[1] ~= "integer" and list[1] ~= "any" then v.single = list[1] end
  v.int_only = #list == 1 and list[1] == "integer"
  v.has_rules = v.integral or v.min ~= nil or v.max ~= nil or v.gt ~= nil or v.lt ~= nil or v.one_of ~= nil
    or v.check ~= nil
  return v
end

local Signature = {}
Signature.__index = Signature
M.Signature = Signature

-- contract.define(name, args) -> signature. args: a list of
-- { name, type, rules..., fields = { key = type | { type, rules... } } }:
-- fields make the argument an options table whose keys are those, each
-- optional unless `required = true`, and an unknown key raises.
function M.define(name, args)
  if type(name) ~= "string" then error("contract.define: name must be a string", 2) end
  if M.signatures[name] then error("contract.define: " .. name .. " is defined already", 2) end
  if type(args) ~= "table" then error("contract.define: " .. name .. ": args must be a list", 2) end
  local sig = setmetatable({ name = name, args = {} }, Signature)
  for i, a in ipairs(args) do
    if type(a) ~= "table" or type(a[1]) ~= "string" then
      error(format("contract.define: %s: args[%d] must be { name, type, ... }", name, i), 2)
    end
    local arg = compile_value({ a[2], min = a.min, max = a.max, gt = a.gt, lt = a.lt, check = a.check,
                                one_of = a.one_of }, a[1], name, false)
    arg.name = a[1]
    if a.fields then
      arg.fields = {}
      local keys = {}
      for k in pairs(a.fields) do keys[#keys + 1] = k end
      sort(keys)
      for _, k in ipairs(keys) do
        arg.fields[k] = compile_value(a.fields[k], a[1] .. "." .. k, name, true)
        arg.fields[k].name = k
      end
      arg.field_names = keys
      local required = {}
      for _, k in ipairs(keys) do if not arg.fields[k].optional then required[#required + 1] = k end end
      arg.required = required
    end
    sig.args[i] = arg
  end
  if #sig.args > MAX_ARGS then error(format("contract.define: %s: at most %d arguments", name, MAX_ARGS), 2) end
  sig.n = #sig.args
  M.signatures[name] = sig
  M.names[#M.names + 1] = name
  return sig
end

-- The value rules of one argument or option: nil, or why not.
-- " from 1 to 256", " >= 1", " > 0 and at most 86400": a range, for a message.
local function range_text(spec)
  local low = spec.min ~= nil and tostring(spec.min)
  local high = spec.max ~= nil and tostring(spec.max)
  if low and high then return format(" from %s to %s", low, high) end
  local parts = {}
  if low then parts[#parts + 1] = ">= " .. low end
  if spec.gt ~= nil then parts[#parts + 1] = "> " .. tostring(spec.gt) end
  if spec.lt ~= nil then parts[#parts + 1] = "< " .. tostring(spec.lt) end
  if high then parts[#parts + 1] = (#parts > 0 and "at most " or "<= ") .. high end
  if #parts == 0 then return "" end
  return " " .. concat(parts, " and ")
end

local function value_error(prefix, spec, v)
  if type(v) == "number" then
    local out = v ~= v or (spec.integral and math_type(v) ~= "integer")
      or (spec.min ~= nil and v < spec.min) or (spec.max ~= nil and v > spec.max)
      or (spec.gt ~= nil and v <= spec.gt) or (spec.lt ~= nil and v >= spec.lt)
    if out then
      return format("%s: %s must be %s%s, got %s", prefix, spec.label, spec.integral and "an integer" or "a number",
                    range_text(spec), tostring(v))
    end
  end
  if spec.one_of and not spec.one_of[v] then
    return format("%s: %s must be one of %s, got %s", prefix, spec.label, spec.one_of_text, tostring(v))
  end
  if spec.check then
    local why = spec.check(v)
    if why then return format("%s: %s %s", prefix, spec.label, why) end
  end
  return nil
end

-- One value against its spec: nil, or "type" and the message (a wrong
-- Lua type, which the caller raises), or "value" and the message (a value
-- refused, which it returns).
local function judge(prefix, spec, v)
  if v == nil then
    if spec.optional then return nil end
    return "type", format("%s: %s must be %s, got nil", prefix, spec.label, spec.type_text)
  end
  local ok
  if spec.single then
    ok = type(v) == spec.single
  elseif spec.int_only then
    ok = type(v) == "number" or is_int64_box(v)
  else
    ok = false
    for _, k in ipairs(spec.kinds) do
      if matches(k, v) then ok = true break end
    end
  end
  if not ok then
    return "type", format("%s: %s must be %s, got %s", prefix, spec.label, spec.type_text, what_of(v))
  end
  if spec.has_rules then
    local why = value_error(prefix, spec, v)
    if why then return "value", why end
  end
  return nil
end

-- Raises for a wrong type (level: the caller of the public call); returns
-- why a value is refused, or nil.
local function check_value(prefix, spec, v, level)
  local what, msg = judge(prefix, spec, v)
  if what == "type" then error(msg, level) end
  return msg
end

-- An options table, in one pass over the keys it has: an unknown key
-- raises at once; of the wrong types (raised) and the refused values
-- (returned) the first by name is the one told, so the message is the same
-- in every process.
local function check_fields(prefix, arg, t, level)
  local fields = arg.fields
  local type_key, type_msg, bad_key, bad_msg
  for k, v in pairs(t) do
    local f = fields[k]
    if f == nil then error(format("%s: unknown option %s", prefix, tostring(k)), level) end
    if f.needs and t[f.needs] == nil then
      error(format("%s: %s needs %s.%s", prefix, f.label, arg.name, f.needs), level)
    end
    if f.excludes and t[f.excludes] ~= nil then
      error(format("%s: %s and %s.%s exclude each other", prefix, f.label, arg.name, f.excludes), level)
    end
    local what, msg = judge(prefix, f, v)
    if what == "type" then
      if type_key == nil or k < type_key then type_key, type_msg = k, msg end
    elseif what == "value" then
      if bad_key == nil or k < bad_key then bad_key, bad_msg = k, msg end
    end
  end
  if type_msg then error(type_msg, level) end
  for _, k in ipairs(arg.required) do
    if t[k] == nil then check_value(prefix, fields[k], nil, level + 1) end
  end
  return bad_msg
end

-- One argument: its value, and its options when it takes some. Raised
-- errors are raised at level (counted from one's frame: the caller of the
-- public call that asked).
local function one(prefix, arg, v, level)
  local what, msg = judge(prefix, arg, v)
  if what == "type" then error(msg, level) end
  if arg.fields and v ~= nil then return check_fields(prefix, arg, v, level + 1) or msg end
  return msg
end

-- The arguments, by position, without a vararg list, so a check costs a
-- few tests per argument (one(1), run(2), check or check_in(3), the public
-- call(4): its caller is level 5).
local function run(self, prefix, a1, a2, a3, a4, a5, a6)
  local args, n = self.args, self.n
  if n == 0 then return nil end
  local bad = one(prefix, args[1], a1, 5)
  if n == 1 then return bad end
  local b = one(prefix, args[2], a2, 5)
  bad = bad or b
  if n == 2 then return bad end
  b = one(prefix, args[3], a3, 5)
  bad = bad or b
  if n == 3 then return bad end
  b = one(prefix, args[4], a4, 5)
  bad = bad or b
  if n == 4 then return bad end
  b = one(prefix, args[5], a5, 5)
  bad = bad or b
  if n == 5 then return bad end
  b = one(prefix, args[6], a6, 5)
  return bad or b
end

-- sig:check(...) with the call's arguments (not the receiver): raises on a
-- wrong type or option, and returns the first refused value's message (or
-- nil). Arguments past the signature's are left alone, as Lua leaves them
-- (`store:delete_timers(store:due_timers(now))` passes the count too).
function Signature:check(a1, a2, a3, a4, a5, a6)
  local args, n = self.args, self.n
  -- the common shapes, one and two arguments, without run's frame
  if n == 1 then return (one(self.name, args[1], a1, 4)) end
  if n == 2 then
    local bad = one(self.name, args[1], a1, 4)
    local b = one(self.name, args[2], a2, 4)
    return bad or b
  end
  return (run(self, self.name, a1, a2, a3, a4, a5, a6))
end

-- sig:check_in(prefix, ...): the same checks for a part of another call (an
-- item of a batch), its messages under that call's prefix ("store:commit_many:
-- items[3]").
function Signature:check_in(prefix, a1, a2, a3, a4, a5, a6)
  return (run(self, prefix, a1, a2, a3, a4, a5, a6))
end

-- contract.fail(code, message[, detail]) -> nil, message, code, detail: the
-- one failure shape of every layer. message is a string; detail, a table or
-- nil, carries the structured facts (validation errors, the version found,
-- the server's code and labels).
function M.fail(code, message, detail)
  if type(code) ~= "string" then error("contract.fail: code must be a string", 2) end
  if type(message) ~= "string" then message = tostring(message) end
  if detail ~= nil and type(detail) ~= "table" then error("contract.fail: detail must be a table or nil", 2) end
  return nil, message, code, detail
end

-- The item of a batch result that failed: { index, message, code, detail }.
function M.failed_item(index, message, code, detail)
  return { index = index, message = tostring(message), code = code, detail = detail }
end

return M
