-- mongostore.records.optimade - OPTIMADE v1.x filters over a record type.
--
-- parse(text) -> tree | nil, message, "invalid"   (client text: never raises)
-- search(rs, T, text, opts) -> the searcher's result set, or a page with opts.page
--
-- The grammar is written here with LPeg: comparisons (= != < <= > >=, a value
-- on either side, or two properties), CONTAINS, STARTS [WITH], ENDS [WITH],
-- HAS, HAS ALL / ANY / ONLY, LENGTH [op] n, IS KNOWN / UNKNOWN, NOT > AND > OR,
-- parentheses and dotted property paths. The tree is translated into a
-- searcher (mongostore.records.search) over T; nothing is sent for a filter
-- that is refused.
local lpeg = require "lpeg"
local wire = require "mongostore.records.wire"
local canon = require "mongostore.records.canon"
local rquery = require "mongostore.records.query"

local P, R, S, C, Cc, Ct, Cp, Cmt, V = lpeg.P, lpeg.R, lpeg.S, lpeg.C, lpeg.Cc, lpeg.Ct, lpeg.Cp, lpeg.Cmt, lpeg.V
local format, floor, huge = string.format, math.floor, math.huge
local unpack = table.unpack or unpack
local fail = wire.fail

local M = {}

M.MAX_LENGTH = 8192   -- bytes of filter text
M.MAX_DEPTH = 24      -- nested parentheses
M.TIMESTAMP = "_httk_store_timestamp"

-- ------------------------------------------------------------ text checks

local cont = R("\128\191")
local utf8_char = R("\1\127") + R("\194\223") * cont + P("\224") * R("\160\191") * cont
  + R("\225\236") * cont * cont + P("\237") * R("\128\159") * cont + R("\238\239") * cont * cont
  + P("\240") * R("\144\191") * cont * cont + R("\241\243") * cont * cont * cont
  + P("\244") * R("\128\143") * cont * cont
local valid_prefix = utf8_char ^ 0 * Cp()

-- "line L, column C" of byte position pos (columns count characters)
local function where(text, pos)
  local line, start = 1, 1
  for i = 1, pos - 1 do
    if text:byte(i) == 10 then line, start = line + 1, i + 1 end
  end
  local col = 1
  for i = start, pos - 1 do
    local b = text:byte(i)
    if b < 128 or b > 191 then col = col + 1 end
  end
  return format("line %d, column %d", line, col)
end

local function refuse(text, pos, msg)
  return fail("invalid", format("optimade: %s: %s", where(text, pos), msg))
end

-- the deepest nesting of parentheses outside strings
local function depth_of(text)
  local depth, most, i, n, in_str = 0, 0, 1, #text, false
  while i <= n do
    local b = text:byte(i)
    if in_str then
      if b == 92 then i = i + 1 elseif b == 34 then in_str = false end
    elseif b == 34 then in_str = true
    elseif b == 40 then
      depth = depth + 1
      if depth > most then most = depth; if most > M.MAX_DEPTH then return most, i end end
    elseif b == 41 then depth = depth - 1 end
    i = i + 1
  end
  return most
end

-- ------------------------------------------------------------ the grammar

local far -- the farthest position a token was tried at (per parse)
local mark = Cmt(P(true), function(_, i) if i > far then far = i end return true end)

local sp = S(" \t\n\r\f\v") ^ 0
local idchar = R("az", "AZ", "09") + P("_")
local function kw(word) return mark * P(word) * -idchar end
local function tok(p) return mark * p end

local ident = (R("az") + P("_")) * (R("az", "09") + P("_")) ^ 0 * -R("AZ")
local property = tok(Ct(Cc("prop") * Cp() * C(ident * (P(".") * ident) ^ 0))) /
  function(t) return { k = "prop", pos = t[2], path = t[3] } end

local str_char = mark * (P('\\"') / '"' + P("\\\\") / "\\" + (1 - S('"\\')))
local string_lit = tok(Cp() * P('"') * lpeg.Cs(str_char ^ 0) * mark * P('"')) /
  function(pos, s) return { k = "str", pos = pos, v = s } end

local digits = R("09") ^ 1
local number_text = S("+-") ^ -1 * (digits * (P(".") * R("09") ^ 0) ^ -1 + P(".") * digits)
  * (S("eE") * S("+-") ^ -1 * digits) ^ -1 * -idchar
local number_lit = tok(Cp() * C(number_text)) /
  function(pos, s) return { k = "num", pos = pos, text = s, v = tonumber(s) } end

local constant = string_lit + number_lit
local operand = property + constant
local OPS = { ["="] = "eq", ["!="] = "ne", ["<"] = "lt", ["<="] = "le", [">"] = "gt", [">="] = "ge" }
local op = tok(C(P("<=") + P(">=") + P("!=") + P("<") + P(">") + P("="))) / OPS

local value_list = Ct(constant * (sp * tok(P(",")) * sp * constant) ^ 1) + Ct(constant)

local predicate =
  (property * sp * kw("IS") * sp * (kw("KNOWN") * Cc(true) + kw("UNKNOWN") * Cc(false))) /
    (function(p, yes) return { t = "known", prop = p, yes = yes } end)
  + (property * sp * kw("CONTAINS") * sp * constant) /
    (function(p, v) return { t = "text", op = "contains", prop = p, value = v } end)
  + (property * sp * kw("STARTS") * (sp * kw("WITH")) ^ -1 * sp * constant) /
    (function(p, v) return { t = "text", op = "prefix", prop = p, value = v } end)
  + (property * sp * kw("ENDS") * (sp * kw("WITH")) ^ -1 * sp * constant) /
    (function(p, v) return { t = "text", op = "suffix", prop = p, value = v } end)
  + (property * sp * kw("HAS") * sp * (kw("ALL") * Cc("has_all") + kw("ANY") * Cc("has_any")
      + kw("ONLY") * Cc("has_only")) * sp * value_list) /
    (function(p, mode, vs) return { t = "has", op = mode, prop = p, values = vs } end)
  + (property * sp * kw("HAS") * sp * constant) /
    (function(p, v) return { t = "has", op = "has", prop = p, values = { v } } end)
  + (property * sp * kw("LENGTH") * sp * (op * sp + Cc("eq")) * constant) /
    (function(p, o, v) return { t = "length", op = o, prop = p, value = v } end)
  + (operand * sp * op * sp * operand) /
    (function(l, o, r) return { t = "cmp", op = o, l = l, r = r } end)

local grammar = P {
  "Filter",
  Filter = sp * V("Or") * sp * mark * -1,
  Or = Ct(V("And") * (sp * kw("OR") * sp * V("And")) ^ 0) /
    function(t) return #t == 1 and t[1] or { t = "or", parts = t } end,
  And = Ct(V("Not") * (sp * kw("AND") * sp * V("Not")) ^ 0) /
    function(t) return #t == 1 and t[1] or { t = "and", parts = t } end,
  -- one NOT per phrase, as the specification's grammar has it (NOT (NOT x) for two)
  Not = kw("NOT") * sp * V("Primary") / function(x) return { t = "not", x = x } end + V("Primary"),
  Primary = tok(P("(")) * sp * V("Or") * sp * tok(P(")")) + predicate,
}

local function near(text, pos)
  if pos > #text then return "unexpected end of the filter" end
  local word = text:match("^[%w_%.]+", pos) or text:match('^"[^"]*"?', pos) or text:sub(pos, pos)
  if #word > 20 then word = word:sub(1, 20) .. "..." end
  return format("unexpected %q", word)
end

--- parse(text) -> the filter's tree, or nil, message, "invalid"
function M.parse(text)
  if type(text) ~= "string" then
    return fail("invalid", "optimade: the filter must be text, got " .. canon.a_type(text))
  end
  if #text > M.MAX_LENGTH then
    return fail("invalid", format("optimade: the filter is %d bytes, more than the %d taken", #text, M.MAX_LENGTH))
  end
  local nul = text:find("\0", 1, true)
  if nul then return refuse(text, nul, "a NUL byte is not taken in a filter") end
  local upto = valid_prefix:match(text)
  if upto <= #text then return refuse(text, upto, "the filter is not valid UTF-8") end
  local d, at = depth_of(text)
  if d > M.MAX_DEPTH then
    return refuse(text, at, format("parentheses nest deeper than %d", M.MAX_DEPTH))
  end
  if text:match("^%s*$") then return fail("invalid", "optimade: the filter is empty") end
  far = 1
  local ok, tree = pcall(lpeg.match, grammar, text)
  if not ok then return fail("invalid", "optimade: the filter is too complex to parse") end
  if tree == nil then return refuse(text, far, near(text, far)) end
  return tree
end

-- ------------------------------------------------------------ translation

local TYPE_WORD = { string = "text", integer = "an integer", float = "a number", boolean = "a boolean" }

-- The searcher's path methods: a field of one of these names is not reachable as a path (b.length is the method)
local METHOD = {}
for name in ("eq ne lt le gt ge in_list nin_list prefix suffix contains is_known is_unknown has has_all has_any "
    .. "has_only length any all none"):gmatch("%S+") do METHOD[name] = true end

-- What path names in shape: a leaf { kind, decl } or nil, message.
local function walk(T, path)
  local shape, label, segs = T, T.name, {}
  for seg in path:gmatch("[^.]+") do segs[#segs + 1] = seg end
  local leaf
  for i, name in ipairs(segs) do
    local kind = shape.kinds[name]
    if kind == nil then return nil, format("%s has no property %s", label, name) end
    label = label .. "." .. name
    if METHOD[name] then
      return nil, format("%s is not reachable in a search (a searcher method has its name)", label)
    end
    if kind == "field" then
      if i < #segs then return nil, format("%s is a field: it has no property %s", label, segs[i + 1]) end
      leaf = { kind = "field", decl = shape.fields[name] }
    elseif kind == "ref" then
      local r = shape.refs[name]
      leaf = { kind = "ref", many = r.many }
      shape = r.type
    else
      leaf = { kind = "child" }
      shape = shape.children[name]
    end
  end
  leaf.segs, leaf.label = segs, label
  return leaf
end

-- fn(path of the leaf) under the root variable b, a child set's elements reached through :any
local function build(p, shape, segs, i, fn)
  local name = segs[i]
  if i == #segs then return fn(p[name]) end
  local kind = shape.kinds[name]
  if kind == "ref" then return build(p[name], shape.refs[name].type, segs, i + 1, fn) end
  local child = shape.children[name]
  return p[name]:any(function(c) return build(c, child, segs, i + 1, fn) end)
end

-- v (a constant) as a value of the field declared decl, or nil, message
local function value_for(leaf, v)
  local ty = leaf.decl.type
  if ty == "string" then
    if v.k ~= "str" then return nil, format("%s is text, got the number %s", leaf.label, v.text) end
    return v.v
  end
  if ty == "boolean" then
    return nil, format("%s is a boolean: only IS KNOWN and IS UNKNOWN ask about it", leaf.label)
  end
  if v.k ~= "num" then return nil, format("%s is %s, got text", leaf.label, TYPE_WORD[ty]) end
  local x = v.v
  if x == nil or x ~= x or x == huge or x == -huge then
    return nil, format("%s: the number %s is out of range", leaf.label, v.text)
  end
  if ty == "integer" then
    if x ~= floor(x) then return nil, format("%s is an integer, got %s", leaf.label, v.text) end
    if math.tointeger and math.tointeger(x) then x = math.tointeger(x) end
  end
  return x
end

local FLIP = { eq = "eq", ne = "ne", lt = "gt", le = "ge", gt = "lt", ge = "le" }

local tr

-- the store timestamp compared with a time: the store keeps _ts in units of its resolution
local function timestamp(ctx, opname, v)
  local ts = ctx.rs.ts
  if not ts or not ts.enabled then return nil, "the store keeps no timestamps (store_timestamps = false)" end
  local ns, e = rquery.to_ns(v.k == "num" and v.text or v.v)
  if not ns then return nil, M.TIMESTAMP .. ": " .. tostring(e) end
  local res = ts.resolution
  local down, up = canon.idiv(ns, res), -canon.idiv(-ns, res)
  local f = ctx.b._ts
  if opname == "le" then return f:le(down) elseif opname == "gt" then return f:gt(down)
  elseif opname == "lt" then return f:lt(up) elseif opname == "ge" then return f:ge(up) end
  if down ~= up then
    return nil, format("%s: %s is finer than the store's resolution of %d ns", M.TIMESTAMP, v.k == "num" and v.text
      or v.v, res)
  end
  if opname == "eq" then return f:eq(down) end
  return ctx.s.any_of(f:lt(down), f:gt(down))
end

local function leaf_of(ctx, prop)
  local leaf, e = walk(ctx.T, prop.path)
  if not leaf then return nil, e end
  leaf.pos = prop.pos
  return leaf
end

local function is_scalar(leaf) return leaf.kind == "field" and not leaf.decl.list end

local function cmp(ctx, n)
  local l, r, o = n.l, n.r, n.op
  if l.k ~= "prop" and r.k ~= "prop" then
    return nil, "a comparison needs a property on one side", l.pos
  end
  if l.k ~= "prop" then l, r, o = r, l, FLIP[o] end
  if l.path == M.TIMESTAMP and r.k ~= "prop" then
    local c, e = timestamp(ctx, o, r)
    return c, e, l.pos
  end
  local leaf, e = leaf_of(ctx, l)
  if not leaf then return nil, e, l.pos end
  if not is_scalar(leaf) then
    return nil, format("%s is not a single value: %s", leaf.label, leaf.kind == "field"
      and "HAS, HAS ALL, HAS ANY, HAS ONLY and LENGTH ask about a list" or "ask with LENGTH, IS KNOWN or IS UNKNOWN"),
      l.pos
  end
  local s = ctx.s
  if r.k == "prop" then
    local other
    other, e = leaf_of(ctx, r)
    if not other then return nil, e, r.pos end
    if #leaf.segs ~= 1 or #other.segs ~= 1 or not is_scalar(other) then
      return nil, "two properties are compared only when both are single fields of the record itself", l.pos
    end
    local a, b = ctx.b[leaf.segs[1]], ctx.b[other.segs[1]]
    if leaf.decl.type ~= other.decl.type and not (leaf.decl.type ~= "string" and other.decl.type ~= "string"
        and leaf.decl.type ~= "boolean" and other.decl.type ~= "boolean") then
      return nil, format("%s and %s hold different kinds of value", leaf.label, other.label), l.pos
    end
    -- a comparison with an unknown value is false (an $expr would order a missing one first)
    return s.all_of(a:is_known(), b:is_known(), a[o](a, b))
  end
  local x
  x, e = value_for(leaf, r)
  if x == nil then return nil, e, r.pos end
  return build(ctx.b, ctx.T, leaf.segs, 1, function(p)
    if o == "ne" then return s.all_of(p:is_known(), p:ne(x)) end
    return p[o](p, x)
  end)
end

local function text(ctx, n)
  local leaf, e = leaf_of(ctx, n.prop)
  if not leaf then return nil, e, n.prop.pos end
  if not is_scalar(leaf) or leaf.decl.type ~= "string" then
    return nil, format("%s is not text: CONTAINS, STARTS and ENDS ask about text", leaf.label), n.prop.pos
  end
  local x
  x, e = value_for(leaf, n.value)
  if x == nil then return nil, e, n.value.pos end
  return build(ctx.b, ctx.T, leaf.segs, 1, function(p) return p[n.op](p, x) end)
end

local function has(ctx, n)
  local leaf, e = leaf_of(ctx, n.prop)
  if not leaf then return nil, e, n.prop.pos end
  if leaf.kind ~= "field" or not leaf.decl.list then
    return nil, format("%s is not a list of values: HAS asks about one", leaf.label), n.prop.pos
  end
  local xs = {}
  for i, v in ipairs(n.values) do
    local x
    x, e = value_for(leaf, v)
    if x == nil then return nil, e, v.pos end
    xs[i] = x
  end
  return build(ctx.b, ctx.T, leaf.segs, 1, function(p)
    if n.op == "has" then return p:has(xs[1]) end
    return p[n.op](p, xs)
  end)
end

local function length(ctx, n)
  local leaf, e = leaf_of(ctx, n.prop)
  if not leaf then return nil, e, n.prop.pos end
  if not ((leaf.kind == "field" and leaf.decl.list) or leaf.kind == "child" or (leaf.kind == "ref" and leaf.many)) then
    return nil, format("%s is not a list: LENGTH asks about one", leaf.label), n.prop.pos
  end
  local v = n.value
  if v.k ~= "num" or v.v == nil or v.v ~= floor(v.v) or v.v < 0 or v.v > 2 ^ 31 then
    return nil, format("LENGTH takes a whole number of at least 0, got %s", v.k == "num" and v.text or "text"), v.pos
  end
  local k = math.tointeger and math.tointeger(v.v) or v.v
  local s = ctx.s
  return build(ctx.b, ctx.T, leaf.segs, 1, function(p)
    local len = p:length()
    if n.op == "ne" then return s.any_of(p:length():lt(k), len:gt(k)) end
    return len[n.op](len, k)
  end)
end

local function known(ctx, n)
  if n.prop.path == M.TIMESTAMP then
    if not (ctx.rs.ts and ctx.rs.ts.enabled) then
      return nil, "the store keeps no timestamps (store_timestamps = false)", n.prop.pos
    end
    return n.yes and ctx.b._ts:is_known() or ctx.b._ts:is_unknown()
  end
  local leaf, e = leaf_of(ctx, n.prop)
  if not leaf then return nil, e, n.prop.pos end
  return build(ctx.b, ctx.T, leaf.segs, 1, function(p)
    if n.yes then return p:is_known() end
    return p:is_unknown()
  end)
end

local KINDS = { cmp = cmp, text = text, has = has, length = length, known = known }

function tr(ctx, n)
  if n.t == "and" or n.t == "or" then
    local parts = {}
    for i, x in ipairs(n.parts) do
      local c, e, pos = tr(ctx, x)
      if not c then return nil, e, pos end
      parts[i] = c
    end
    if n.t == "and" then return ctx.s.all_of(unpack(parts)) end
    return ctx.s.any_of(unpack(parts))
  elseif n.t == "not" then
    local c, e, pos = tr(ctx, n.x)
    if not c then return nil, e, pos end
    return ctx.s.none_of(c)
  end
  return KINDS[n.t](ctx, n)
end

local OPTS = { page = "table", only_latest = "boolean" }

--- search(rs, T, filter, opts?) -> rows (the searcher's result set) | page { items, next_cursor }
---   | nil, message, code, detail
function M.search(rs, T, filter, opts)
  if type(rs) ~= "table" or type(rs.searcher) ~= "function" then
    error("optimade: rs must be a record store, got " .. type(rs), 3)
  end
  if type(T) ~= "table" or not T.__record_type then error("optimade: T must be a record type, got " .. type(T), 3) end
  if opts ~= nil and type(opts) ~= "table" then error("optimade: opts must be a table, got " .. type(opts), 3) end
  opts = opts or {}
  for k, v in pairs(opts) do
    if not OPTS[k] then error("optimade: unknown option " .. tostring(k), 3) end
    if type(v) ~= OPTS[k] then error(format("optimade: %s must be a %s, got %s", k, OPTS[k], type(v)), 3) end
  end
  local s = rs:searcher { only_latest = opts.only_latest }
  local b = s:variable(T)
  local tree, e = M.parse(filter)
  if not tree then return nil, e, "invalid" end
  local ctx = { rs = rs, T = T, s = s, b = b }
  local c, why, pos = tr(ctx, tree)
  if not c then
    if pos then return refuse(filter, pos, why) end
    return fail("invalid", "optimade: " .. why)
  end
  s:add(c)
  if opts.page then return s:page(opts.page) end
  return s:results()
end

return M
