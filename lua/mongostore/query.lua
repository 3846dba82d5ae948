-- mongostore.query - filters and updates built from Lua values, in pure Lua: the Q
-- field conditions and the ops update operators the models take (model.Q and
-- model.ops are this module's), turned into the plain tables the document API sends.
--
-- Names and what they return (every emitted list is marked with mongostore.array,
-- so it is written as a BSON array even when empty):
--
--   Q.<name>, Q["a.b"]           a Field for that path; tostring gives Q["a.b"]
--   field:eq(v)   field:ne(v)    a Cond: { path = v } ({ path = { ["$eq"] = v } } when v is a
--                                table or a regex box), { path = { ["$ne"] = v } }
--   field:gt(v) :gte(v) :lt(v) :lte(v)      { path = { ["$gt"] = v } } ...
--   field:in_(list) :nin(list)              { path = { ["$in"] = array } }, $nin
--   field:exists(b)                         { path = { ["$exists"] = b } } (b defaults to true)
--   field:prefix(s)                         { path = { ["$regex"] = "^" .. s escaped } }
--   field:regex(pattern, flags)             { path = { ["$regex"] = pattern, ["$options"] = flags } }
--                                           (flags optional); a mongostore.regex box: { path = box }
--   field:all_(list) :size(n)               $all (array), $size
--   field:elem_match(c)                     { path = { ["$elemMatch"] = filter(c) } }; c is a Cond
--                                           or a plain table, its paths are the element's (no rename)
--   Q.and_(c, ...)                          a Cond: the parts merged into one document when
--                                           their keys do not collide, else { ["$and"] = array }
--   Q.or_(c, ...)                           a Cond: { ["$or"] = array } (at least one part)
--   Q.not_(c)                               a Cond: { path = { ["$not"] = ops } } for one field's
--                                           operator condition, else { ["$nor"] = { filter(c) } }
--   A Cond or a plain filter table is accepted wherever a condition is.
--   tostring(cond) shows the filter it makes.
--
--   query.filter(x, rename)   a fresh plain filter table from a Cond, a plain table or nil ({}).
--                             rename(path) -> path is applied to every field path of a Cond, and
--                             to a plain table's top-level keys not starting with "$" and inside
--                             its $and/$or/$nor lists.
--   query.is_cond(x), query.is_field(x), query.is_op(x), query.is_each(x)    booleans
--
--   ops.set ops.unset ops.inc ops.mul ops.min ops.max ops.push ops.add_to_set ops.pull ops.pop
--   ops.set_on_insert ops.current_date    each takes a table path -> value and returns an Op
--                             (tostring shows it). ops.unset also takes a list { "a", "b" };
--                             ops.inc and ops.mul take numbers (or number boxes); ops.pop 1 or -1;
--                             ops.current_date true, "date" or "timestamp"; ops.pull a value, a
--                             Cond or a plain condition (the element's paths).
--   ops.each(list, opts)      several values for push / add_to_set: { ["$each"] = array };
--                             opts (push only) position, slice, sort add $position, $slice, $sort.
--
--   query.update(list, rename)  one update document { ["$set"] = {...}, ["$inc"] = {...}, ... }
--                             from a list of Ops and plain tables (a plain table is a $set of
--                             its fields; its keys starting with "$" are operators, merged);
--                             raises naming the path when a path is given twice, or a path and
--                             its parent or child both are (the server refuses both).
--   query.paths(update)       a list of { op = "$inc", path = "views", value = 1 } for each path
--                             of an update document (or a list of Ops), sorted by op then path;
--                             a $each value also gives each = the list.
--   query.escape(s)           s with the regex metacharacters escaped (what prefix uses).
local values = require "mongostore.values"
local casts = require "mongostore.query.cast"

local type, error, pairs, ipairs, next, tostring, select = type, error, pairs, ipairs, next, tostring, select
local setmetatable, rawequal, rawget, pcall = setmetatable, rawequal, rawget, pcall
local sort, concat = table.sort, table.concat
local format, byte, find, gsub, sub = string.format, string.byte, string.find, string.gsub, string.sub
local array, is_array, null = values.array, values.is_array, values.null
local get_mt = debug and debug.getmetatable or getmetatable

local M = {}

local DOLLAR = 36 -- "$"

-- ---------------------------------------------------------------- helpers

local function is_operator_key(k)
  return type(k) == "string" and byte(k, 1) == DOLLAR
end

-- A fresh marked copy of a list argument (the caller may change its own later).
local function list_copy(list, what)
  if type(list) ~= "table" then error(what .. " must be a list, got " .. type(list), 3) end
  local out, n = {}, #list
  for i = 1, n do out[i] = list[i] end
  if next(list, n > 0 and n or nil) ~= nil then error(what .. " must be a list (keys 1..n)", 3) end
  return array(out)
end

local function is_regex_box(v)
  if type(v) ~= "userdata" then return false end
  local mt = get_mt(v)
  return type(mt) == "table" and rawget(mt, "__name") == "mongostore.Regex"
end
--- query.is_regex(v): whether v is a regex box (mongostore.regex).
M.is_regex = is_regex_box

-- A table the encoder writes as a document (not an array, not null).
local function is_document(v)
  if type(v) ~= "table" or rawequal(v, null) or is_array(v) then return false end
  local k = next(v)
  return k == nil or type(k) == "string"
end

-- Debugging text of a value: keys sorted so it is stable.
local function show(v, depth)
  depth = depth or 0
  local t = type(v)
  if t == "string" then return format("%q", v) end
  if t ~= "table" or rawequal(v, null) then return tostring(v) end
  if depth > 20 then return "{...}" end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  sort(keys, function(a, b)
    if type(a) == type(b) and (type(a) == "string" or type(a) == "number") then return a < b end
    return type(a) < type(b)
  end)
  local parts = {}
  if is_array(v) or (type(keys[1]) == "number") then
    for i = 1, #v do parts[i] = show(v[i], depth + 1) end
    return "[" .. concat(parts, ", ") .. "]"
  end
  for i, k in ipairs(keys) do
    local name = type(k) == "string" and find(k, "^[%a_][%w_]*$") and k or "[" .. show(k) .. "]"
    parts[i] = name .. " = " .. show(v[k], depth + 1)
  end
  return "{ " .. concat(parts, ", ") .. " }"
end

-- ---------------------------------------------------------------- Field and Cond

local Field = {}        -- methods
local Field_mt = { __name = "mongostore.query.Field" }
local Cond_mt = { __name = "mongostore.query.Cond" }

-- A Cond holds how to build its filter: kind "field" (path, ops: a table of
-- operator -> value, or eq: the value), "and", "or", "not" (parts), "raw" (a plain table).
local function new_cond(c) return setmetatable(c, Cond_mt) end

local function is_cond(x) return get_mt(x) == Cond_mt end
local function is_field(x) return get_mt(x) == Field_mt end
M.is_cond, M.is_field = is_cond, is_field

local function check_cond(c, what, level)
  if is_cond(c) then return c end
  if is_field(c) then error(what .. " must be a condition, got the Field " .. tostring(c) ..
      " (call one of its methods, e.g. :eq(v))", level + 1) end
  if type(c) ~= "table" or rawequal(c, null) or is_array(c) then
    error(what .. " must be a Cond or a filter table, got " .. (is_array(c) and "an array" or type(c)), level + 1)
  end
  return new_cond({ kind = "raw", raw = c })
end

Field_mt.__index = function(_, k)
  local m = Field[k]
  if m then return m end
  error(format("Q field has no method %s (eq ne gt gte lt lte in_ nin exists prefix regex all_ size elem_match)",
    tostring(k)), 2)
end
Field_mt.__newindex = function() error("a Q field is read-only", 2) end
Field_mt.__tostring = function(f) return format("Q[%q]", rawget(f, "path")) end

local function value_arg(v, name)
  if v == nil then error(format("%s: value must not be nil (mongostore.null stands for null)", name), 3) end
  return v
end

local function field_op(op, name)
  return function(self, v)
    return new_cond({ kind = "field", path = rawget(self, "path"), ops = { [op] = value_arg(v, name) } })
  end
end

function Field:eq(v)
  value_arg(v, "eq")
  local path = rawget(self, "path")
  -- a document or a regex as a bare value would be an operator document, an
  -- exact-document match or a regex match: $eq says equality
  if type(v) == "table" and not rawequal(v, null) or is_regex_box(v) then
    return new_cond({ kind = "field", path = path, ops = { ["$eq"] = v } })
  end
  return new_cond({ kind = "field", path = path, eq = v })
end
Field.ne = field_op("$ne", "ne")
Field.gt = field_op("$gt", "gt")
Field.gte = field_op("$gte", "gte")
Field.lt = field_op("$lt", "lt")
Field.lte = field_op("$lte", "lte")

function Field:in_(list)
  return new_cond({ kind = "field", path = rawget(self, "path"), ops = { ["$in"] = list_copy(list, "in_: list") } })
end
function Field:nin(list)
  return new_cond({ kind = "field", path = rawget(self, "path"), ops = { ["$nin"] = list_copy(list, "nin: list") } })
end
function Field:all_(list)
  return new_cond({ kind = "field", path = rawget(self, "path"), ops = { ["$all"] = list_copy(list, "all_: list") } })
end

function Field:exists(b)
  if b == nil then b = true end
  if type(b) ~= "boolean" then error("exists: b must be a boolean or nil, got " .. type(b), 2) end
  return new_cond({ kind = "field", path = rawget(self, "path"), ops = { ["$exists"] = b } })
end

function Field:size(n)
  if type(n) ~= "number" then error("size: n must be a number, got " .. type(n), 2) end
  return new_cond({ kind = "field", path = rawget(self, "path"), ops = { ["$size"] = n } })
end

-- Every character a regex gives a meaning to, escaped with a backslash.
local function escape(s)
  if type(s) ~= "string" then error("escape: s must be a string, got " .. type(s), 2) end
  return (gsub(s, "[%^%$%.%*%+%?%(%)%[%]%{%}%|\\%-/]", "\\%0"))
end
M.escape = escape

function Field:prefix(s)
  if type(s) ~= "string" then error("prefix: s must be a string, got " .. type(s), 2) end
  return new_cond({ kind = "field", path = rawget(self, "path"), ops = { ["$regex"] = "^" .. escape(s) } })
end

function Field:regex(pattern, flags)
  local ops
  if is_regex_box(pattern) then
    if flags ~= nil then error("regex: flags go in the regex box itself", 2) end
    -- the bare value is the form every server takes ({ $regex = box } is refused by some)
    return new_cond({ kind = "field", path = rawget(self, "path"), eq = pattern, regex = true })
  elseif type(pattern) == "string" then
    if flags ~= nil and type(flags) ~= "string" then
      error("regex: flags must be a string or nil, got " .. type(flags), 2)
    end
    ops = { ["$regex"] = pattern }
    if flags ~= nil and flags ~= "" then ops["$options"] = flags end
  else
    error("regex: pattern must be a string or a mongostore.regex, got " .. type(pattern), 2)
  end
  return new_cond({ kind = "field", path = rawget(self, "path"), ops = ops })
end

function Field:elem_match(c)
  return new_cond({ kind = "elem", path = rawget(self, "path"), cond = check_cond(c, "elem_match: c", 2) })
end

local Q = {}

-- Q.and_(c, ...)
function Q.and_(...)
  local parts = {}
  for i = 1, select("#", ...) do parts[i] = check_cond((select(i, ...)), "and_: argument " .. i, 2) end
  return new_cond({ kind = "and", parts = parts })
end

function Q.or_(...)
  local n = select("#", ...)
  if n == 0 then error("or_: give at least one condition (the server refuses an empty $or)", 2) end
  local parts = {}
  for i = 1, n do parts[i] = check_cond((select(i, ...)), "or_: argument " .. i, 2) end
  return new_cond({ kind = "or", parts = parts })
end

function Q.not_(c)
  return new_cond({ kind = "not", part = check_cond(c, "not_: c", 2) })
end

setmetatable(Q, {
  __name = "mongostore.query.Q",
  __index = function(_, path)
    if type(path) ~= "string" or path == "" then
      error("Q[path]: path must be a non-empty string, got " .. (path == "" and "\"\"" or type(path)), 2)
    end
    return setmetatable({ path = path }, Field_mt)
  end,
  __newindex = function() error("Q is read-only", 2) end,
})
M.Q = Q

-- ---------------------------------------------------------------- filters

local render

local function rename_path(path, rename)
  if rename == nil then return path end
  local p = rename(path)
  if type(p) ~= "string" then error("filter: rename must return a string path, got " .. type(p), 4) end
  return p
end

local is_number_box = casts.is_number_box
local check_raw, cast_ops -- the checks of a client's filter (ctx given), below

local function render_raw(t, rename, ctx)
  if ctx ~= nil then return check_raw(t, rename, ctx) end
  local out = {}
  for k, v in pairs(t) do
    if k == "$and" or k == "$or" or k == "$nor" then
      if type(v) == "table" and rename ~= nil then
        local list = {}
        for i = 1, #v do list[i] = render(check_cond(v[i], "filter: " .. k .. " item " .. i, 4), rename) end
        v = array(list)
      end
      out[k] = v
    elseif rename ~= nil and type(k) == "string" and byte(k, 1) ~= DOLLAR then
      out[rename_path(k, rename)] = v
    else
      out[k] = v
    end
  end
  return out
end

-- Whether two filter documents can become one: no key in common, except one
-- field's operator documents whose operators do not overlap.
local function merge_into(into, part)
  for k, v in pairs(part) do
    local have = into[k]
    if have ~= nil then
      if is_operator_key(k) then return false end
      local a_ops = is_document(have) and is_operator_key(next(have))
      local b_ops = is_document(v) and is_operator_key(next(v))
      if not (a_ops and b_ops) then return false end
      for op in pairs(v) do
        if not is_operator_key(op) or have[op] ~= nil then return false end
      end
      for op in pairs(have) do if not is_operator_key(op) then return false end end
    end
  end
  for k, v in pairs(part) do
    local have = into[k]
    if have ~= nil then
      local merged = {}
      for op, x in pairs(have) do merged[op] = x end
      for op, x in pairs(v) do merged[op] = x end
      into[k] = merged
    else
      into[k] = v
    end
  end
  return true
end

render = function(c, rename, ctx)
  local kind = c.kind
  if kind == "field" then
    local path = rename_path(c.path, rename)
    if c.ops == nil then
      if ctx ~= nil and not c.regex then return { [path] = ctx.cast(ctx, path, c.eq) } end
      return { [path] = c.eq }
    end
    local ops = {}
    for op, v in pairs(c.ops) do
      if is_array(v) then v = list_copy(v, "list") end
      ops[op] = v
    end
    if ctx ~= nil then cast_ops(ctx, path, ops) end
    return { [path] = ops }
  elseif kind == "elem" then
    local path = rename_path(c.path, rename)
    -- the element's own paths: checked for operators, not cast (ctx.elem)
    if ctx ~= nil then ctx.field(ctx, path) end
    return { [path] = { ["$elemMatch"] = render(c.cond, nil, ctx and ctx.elem) } }
  elseif kind == "raw" then
    return render_raw(c.raw, rename, ctx)
  elseif kind == "and" then
    local parts = c.parts
    local rendered = {}
    for i = 1, #parts do rendered[i] = render(parts[i], rename, ctx) end
    if #rendered == 1 then return rendered[1] end
    local merged = {}
    for i = 1, #rendered do
      if not merge_into(merged, rendered[i]) then return { ["$and"] = array(rendered) } end
    end
    return merged
  elseif kind == "or" then
    local parts = c.parts
    local rendered = {}
    for i = 1, #parts do rendered[i] = render(parts[i], rename, ctx) end
    return { ["$or"] = array(rendered) }
  else -- not
    local part = c.part
    if part.kind == "field" or part.kind == "elem" then
      local f = render(part, rename, ctx)
      local path, ops = next(f)
      if part.kind == "field" and part.ops == nil and not part.regex then ops = { ["$eq"] = ops } end
      return { [path] = { ["$not"] = ops } }
    end
    return { ["$nor"] = array({ render(part, rename, ctx) }) }
  end
end

function M.filter(x, rename)
  if rename ~= nil and type(rename) ~= "function" then
    error("filter: rename must be a function or nil, got " .. type(rename), 2)
  end
  if x == nil then return {} end
  return render(check_cond(x, "filter: x", 2), rename)
end

Cond_mt.__tostring = function(c) return "Cond" .. show(render(c, nil)) end

-- ---------------------------------------------------------------- client values

-- The tables marked as code: a trusted filter or update is sent as written,
-- operators and all (server-side JavaScript still refused). Weak keys: the
-- mark goes with the table, and marking copies nothing.
local trusted_set = setmetatable({}, { __mode = "k" })

function M.trusted(t)
  if type(t) ~= "table" then error("trusted: t must be a table (a filter or an update), got " .. type(t), 2) end
  trusted_set[t] = true
  return t
end

function M.is_trusted(t) return trusted_set[t] == true end

-- The operators that run JavaScript on the server.
local JS = { ["$where"] = true, ["$function"] = true, ["$accumulator"] = true }
M.JS = JS

local MAX_DEPTH = 100

-- The first JavaScript operator anywhere in v (a key at any depth), or nil.
local function find_js(v, depth)
  if depth > MAX_DEPTH then return "a nesting deeper than " .. MAX_DEPTH end
  for k, x in next, v do
    if JS[k] then return k end
    if type(x) == "table" then
      local found = find_js(x, depth + 1)
      if found then return found end
    end
  end
  return nil
end

--- query.find_js(v): the first of $where, $function, $accumulator found anywhere in v, or nil.
function M.find_js(v)
  if type(v) ~= "table" then return nil end
  return find_js(v, 0)
end

-- The first key starting with "$" anywhere in v, or nil.
local function find_dollar(v, depth)
  if depth > MAX_DEPTH then return "a nesting deeper than " .. MAX_DEPTH end
  for k, x in next, v do
    if is_operator_key(k) then return k end
    if type(x) == "table" then
      local found = find_dollar(x, depth + 1)
      if found then return found end
    end
  end
  return nil
end
M.find_dollar = function(v) return type(v) == "table" and find_dollar(v, 0) or nil end

-- A refusal of a client's filter, raised inside render and caught by client_filter.
local Refusal_mt = { __name = "mongostore.query.Refusal" }
local function refuse(msg) error(setmetatable({ msg = msg }, Refusal_mt), 0) end
M.refuse = refuse

--- query.describe(v): the type of v for a message (a box by its name).
local function describe(v)
  local t = type(v)
  if t == "userdata" then
    local mt = get_mt(v)
    local name = type(mt) == "table" and rawget(mt, "__name")
    if name then return name end
  elseif t == "table" then
    if rawequal(v, null) then return "null" end
    if is_array(v) or v[1] ~= nil then return "array" end
  end
  return t
end
M.describe = describe

local function is_trusted_js(t, ctx)
  local js = find_js(t, 0)
  if js then refuse(format("%s: %s is refused (it runs JavaScript on the server)", ctx.fn, js)) end
end

check_raw = function(t, rename, ctx)
  if trusted_set[t] then
    is_trusted_js(t, ctx)
    return render_raw(t, rename, nil)
  end
  local out = {}
  for k, v in pairs(t) do
    if type(k) ~= "string" then refuse(format("%s: the filter's key %s is not a field name", ctx.fn, describe(k))) end
    if byte(k, 1) == DOLLAR then
      refuse(format("%s: the filter's key %s is an operator; write operators with Q (Q.and_, Q.or_, ...) or %s",
        ctx.fn, k, ctx.hatch))
    end
    if type(v) == "table" then
      local op = find_dollar(v, 0)
      if op then
        refuse(format("%s: field '%s' holds an operator (%s); write operators with Q (Q.%s:ne(v) and the others) "
          .. "or %s", ctx.fn, k, op, k, ctx.hatch))
      end
    end
    local path = rename_path(k, rename)
    out[path] = ctx.cast(ctx, path, v)
  end
  return out
end

-- The operands of a Q field's operators taken as the field's values.
local CAST_ONE = { ["$eq"] = true, ["$ne"] = true, ["$gt"] = true, ["$gte"] = true, ["$lt"] = true, ["$lte"] = true }
local CAST_LIST = { ["$in"] = true, ["$nin"] = true, ["$all"] = true }

cast_ops = function(ctx, path, o)
  local cast, any = ctx.cast, false
  for op, v in pairs(o) do
    if CAST_ONE[op] then
      o[op] = cast(ctx, path, v); any = true
    elseif CAST_LIST[op] then
      for i = 1, #v do v[i] = cast(ctx, path, v[i]) end
      any = true
    end
  end
  if not any then ctx.field(ctx, path) end
end

--- query.client_filter(x, rename, ctx) -> a filter, or nil, message: x (nil, a Cond or a plain table) with
-- client values taken as data. ctx = { fn =, hatch =, cast = function(ctx, path, v) -> v, field =
-- function(ctx, path), elem = ctx for $elemMatch parts }; cast and field call query.refuse(msg) to refuse.
-- A table marked with query.trusted is code: rendered as query.filter does, JavaScript refused.
function M.client_filter(x, rename, ctx)
  if x == nil then return {} end
  if trusted_set[x] then
    local f = M.filter(x, rename)
    local js = find_js(f, 0)
    if js then return nil, format("%s: %s is refused (it runs JavaScript on the server)", ctx.fn, js) end
    return f
  end
  local c = check_cond(x, ctx.fn .. ": filter", 2)
  local ok, f = pcall(render, c, rename, ctx)
  if ok then return f end
  if get_mt(f) == Refusal_mt then return nil, f.msg end
  error(f, 0)
end

-- The element paths of an $elemMatch given by a client: operators refused,
-- values not cast (the element's fields are not the model's).
function M.elem_ctx(fn, hatch)
  local e = { fn = fn, hatch = hatch, field = function() end, cast = function(_, _, v) return v end }
  e.elem = e
  return e
end

-- query.cast_value(kind, v): mongostore.query.cast's
M.cast_value = casts.cast_value

-- ---------------------------------------------------------------- update operators

local Op_mt = { __name = "mongostore.query.Op" }
local Each_mt = { __name = "mongostore.query.Each" }

local function is_op(x) return get_mt(x) == Op_mt end
local function is_each(x) return get_mt(x) == Each_mt end
M.is_op, M.is_each = is_op, is_each

Op_mt.__tostring = function(o) return "Op" .. show({ [o.op] = o.fields }) end
Each_mt.__tostring = function(e) return "Each" .. show(e.list) end

local function check_path(path, what)
  if type(path) ~= "string" or path == "" then
    error(format("%s: paths must be non-empty strings, got %s", what, path == "" and "\"\"" or type(path)), 4)
  end
end


local ops = {}
M.ops = ops

-- The value checks per operator, by the ops name (fields: path -> value).
local checks = {
  inc = function(v)
    if type(v) ~= "number" and not is_number_box(v) then return "must be a number" end
  end,
  pop = function(v)
    if v ~= 1 and v ~= -1 then return "must be 1 (last) or -1 (first)" end
  end,
  current_date = function(v)
    if v ~= true and v ~= "date" and v ~= "timestamp" then return "must be true, \"date\" or \"timestamp\"" end
  end,
}
checks.mul = checks.inc
checks.rename = function(v)
  if type(v) ~= "string" or v == "" then return "must be the new path (a non-empty string)" end
end

local function value_of(name, v)
  if is_each(v) then
    if name ~= "push" and name ~= "add_to_set" then return nil, "ops.each goes only in push and add_to_set" end
    if name == "add_to_set" and v.opts ~= nil then return nil, "add_to_set takes ops.each without options" end
    return v
  end
  if name == "pull" and is_cond(v) then return render(v, nil) end
  if name == "current_date" then
    if v == true then return true end
    return { ["$type"] = v }
  end
  return v
end

local function make_op(name, mongo)
  ops[name] = function(fields)
    if type(fields) ~= "table" or is_cond(fields) or is_op(fields) then
      error(format("ops.%s: fields must be a table of path = value, got %s", name,
        is_cond(fields) and "a Cond" or is_op(fields) and "an Op" or type(fields)), 2)
    end
    local copy = {}
    local check = checks[name]
    for path, v in pairs(fields) do
      check_path(path, "ops." .. name)
      local bad = check and check(v)
      if bad then error(format("ops.%s: %s %s, got %s", name, path, bad, show(v)), 2) end
      local out, err = value_of(name, v)
      if err then error(format("ops.%s: %s: %s", name, path, err), 2) end
      copy[path] = out
    end
    return setmetatable({ op = mongo, name = name, fields = copy }, Op_mt)
  end
end

make_op("set", "$set")
make_op("inc", "$inc")
make_op("mul", "$mul")
make_op("min", "$min")
make_op("max", "$max")
make_op("push", "$push")
make_op("add_to_set", "$addToSet")
make_op("pull", "$pull")
make_op("pop", "$pop")
make_op("set_on_insert", "$setOnInsert")
make_op("current_date", "$currentDate")
make_op("rename", "$rename")

function ops.unset(fields)
  if type(fields) ~= "table" then error("ops.unset: fields must be a list of paths or a table of path = true, got " ..
      type(fields), 2) end
  local copy = {}
  for k, v in pairs(fields) do
    if type(k) == "number" then
      check_path(v, "ops.unset")
      copy[v] = true
    else
      check_path(k, "ops.unset")
      if v == false then error("ops.unset: " .. k .. " = false (give true, or leave the path out)", 2) end
      copy[k] = true
    end
  end
  return setmetatable({ op = "$unset", name = "unset", fields = copy }, Op_mt)
end

local each_keys = { position = "$position", slice = "$slice", sort = "$sort" }

function ops.each(list, opts)
  local l = list_copy(list, "ops.each: list")
  if opts ~= nil then
    if type(opts) ~= "table" then error("ops.each: opts must be a table or nil, got " .. type(opts), 2) end
    for k in pairs(opts) do
      if not each_keys[k] then error("ops.each: unknown option " .. tostring(k) .. " (position, slice, sort)", 2) end
    end
    if next(opts) == nil then opts = nil end
  end
  return setmetatable({ list = l, opts = opts }, Each_mt)
end

-- The value written for v under an operator: an Each becomes { $each = [...] }.
local function emit_value(v)
  if is_each(v) then
    local out = { ["$each"] = list_copy(v.list, "list") }
    local opts = v.opts
    if opts then
      for k, mongo in pairs(each_keys) do
        local x = opts[k]
        if x ~= nil then out[mongo] = x end
      end
    end
    return out
  end
  return v
end

-- query.update(list, rename)
function M.update(list, rename)
  if type(list) ~= "table" or is_op(list) or is_cond(list) then
    error("update: list must be a list of Ops and tables, got " .. (is_op(list) and "an Op" or type(list)), 2)
  end
  if rename ~= nil and type(rename) ~= "function" then
    error("update: rename must be a function or nil, got " .. type(rename), 2)
  end
  local doc = {}
  local seen = {}      -- path -> operator that gave it
  local parents = {}   -- every proper prefix of a path given -> that path
  local function add(mongo, path, v)
    if type(path) ~= "string" or path == "" then
      error(format("update: %s paths must be non-empty strings, got %s", mongo, type(path)), 3)
    end
    if rename then
      local p = rename(path)
      if type(p) ~= "string" then error("update: rename must return a string path, got " .. type(p), 3) end
      path = p
    end
    local other = seen[path]
    if other then
      error(format("update: path %q is given twice (%s and %s)", path, other, mongo), 3)
    end
    local child = parents[path]
    if child then
      error(format("update: path %q (%s) and its child %q (%s) are both given (the server refuses them together)",
        path, mongo, child, seen[child]), 3)
    end
    local start = 1
    while true do
      local dot = find(path, ".", start, true)
      if not dot then break end
      local prefix = sub(path, 1, dot - 1)
      local parent_op = seen[prefix]
      if parent_op then
        error(format("update: path %q (%s) and its parent %q (%s) are both given (the server refuses them together)",
          path, mongo, prefix, parent_op), 3)
      end
      if parents[prefix] == nil then parents[prefix] = path end
      start = dot + 1
    end
    if is_each(v) and mongo ~= "$push" and mongo ~= "$addToSet" then
      error(format("update: %s: ops.each goes only in push and add_to_set, not %s", path, mongo), 3)
    elseif is_cond(v) then
      if mongo ~= "$pull" then error(format("update: %s: a Cond is a value only of $pull, not %s", path, mongo), 3) end
      v = render(v, nil)
    end
    seen[path] = mongo
    local section = doc[mongo]
    if section == nil then section = {}; doc[mongo] = section end
    section[path] = emit_value(v)
  end
  for i = 1, #list do
    local item = list[i]
    if is_op(item) then
      local mongo = item.op
      for path, v in pairs(item.fields) do add(mongo, path, v) end
    elseif type(item) == "table" and not is_cond(item) and not rawequal(item, null) and not is_array(item) then
      for k, v in pairs(item) do
        if is_operator_key(k) then
          if type(v) ~= "table" then
            error(format("update: item %d: %s must be a table of path = value, got %s", i, k, type(v)), 2)
          end
          for path, x in pairs(v) do add(k, path, x) end
        else
          add("$set", k, v)
        end
      end
    else
      error(format("update: item %d must be an Op or a table of fields, got %s", i,
        is_cond(item) and "a Cond" or is_array(item) and "an array" or type(item)), 2)
    end
  end
  return doc
end

-- query.paths(update)
function M.paths(update)
  if type(update) ~= "table" then error("paths: update must be a table, got " .. type(update), 2) end
  if is_op(update) then update = M.update({ update }) end
  if update[1] ~= nil then update = M.update(update) end
  local out = {}
  for op, fields in pairs(update) do
    if not is_operator_key(op) or type(fields) ~= "table" then
      error("paths: update must be an update document ($op = { path = value }), found " .. tostring(op), 2)
    end
    for path, v in pairs(fields) do
      local e = { op = op, path = path, value = v }
      if type(v) == "table" and rawget(v, "$each") ~= nil then e.each = v["$each"] end
      out[#out + 1] = e
    end
  end
  sort(out, function(a, b)
    if a.op ~= b.op then return a.op < b.op end
    return a.path < b.path
  end)
  return out
end

return M
