-- mongostore.records.search - the searcher: variables over record types, paths
-- through refs (any depth) and into child sets, conditions on fields, lists,
-- child sets and list refs, outputs, sorts, offsets, limits, result sets and
-- keyset pages. Conditions become one find on the root type's collection; a
-- condition through a ref first runs one indexed find on the referenced
-- type's collection for the matching sids (a semi-join), never a find per row.
local core = require "mongostore.core"
local mquery = require "mongostore.query"
local canon = require "mongostore.records.canon"
local wire = require "mongostore.records.wire"
local rquery = require "mongostore.records.query"
local cursor = require "mongostore.cursor"
local search_plan = require "mongostore.records.search_plan"

local type, error, pairs, ipairs, tostring, setmetatable, getmetatable, rawequal, select =
  type, error, pairs, ipairs, tostring, setmetatable, getmetatable, rawequal, select
local format, concat, floor = string.format, table.concat, math.floor
local fail = wire.fail
local array, null = core.array, core.null

local M = {}
M.MAX_PAGE = rquery.MAX_PAGE

local Searcher = {}
Searcher.__index = Searcher
Searcher.__name = "mongostore.records.Searcher"

local Cond = { __name = "mongostore.records.SearchCondition" }
Cond.__index = Cond
local Length = { __name = "mongostore.records.SearchLength" }
Length.__index = Length
local Rows = { __name = "mongostore.records.SearchResults" }
Rows.__index = Rows

-- ------------------------------------------------------------ paths

-- A path: a variable (what = "var"), or a field, child set or ref under one.
-- scope: the document it names a part of (a root variable, a child element, a
-- referenced record); hops: the refs walked from the root scope to get there.
local Path = { __name = "mongostore.records.SearchPath" }
local PathMethods = {}

-- A path's own facts live under one key no record field can name.
local DATA = setmetatable({}, { __name = "mongostore.records.SearchPathData" })
local function is_path(x) return getmetatable(x) == Path end
local function is_cond(x) return getmetatable(x) == Cond end

local STORE = { _sid = { "_id", "integer" }, _cid = { "_cid", "string" }, _ts = { "_ts", "integer" },
                _lin = { "_lin", "integer" } }
local KIND_OF = { string = "string", integer = "integer", float = "number", boolean = "boolean" }

local function new_path(t) return setmetatable({ [DATA] = t }, Path) end

local function shape_name(scope) return scope.name end

-- The path name.sub under p (a var or a ref), raising on a name the shape lacks.
local function sub_path(p, name)
  p = p[DATA]
  local scope, hops, shape = p.scope, p.hops, p.shape
  if p.what == "ref" then
    hops = {}
    for i, h in ipairs(p.hops) do hops[i] = h end
    scope = { T = p.ref.type, kind = "ref", name = p.ref.type.name }
    hops[#hops + 1] = { holder = p.scope, field = p.field, ref = p.ref, tscope = scope }
    shape = p.ref.type
  elseif p.what ~= "var" then
    error(format("search: %s is a %s; a condition on what it holds goes through :any, :all or :none", p.label,
      p.what == "child" and "child set" or "field"), 3)
  end
  local label = p.label .. "." .. name
  local store = STORE[name]
  if store and shape.__record_type then
    return new_path { s = p.s, scope = scope, hops = hops, what = "field", field = store[1], kind = store[2],
                      list = false, label = label }
  end
  local kind = shape.kinds[name]
  if kind == "field" then
    local f = shape.fields[name]
    return new_path { s = p.s, scope = scope, hops = hops, what = "field", field = name, kind = KIND_OF[f.type],
                      list = f.list, label = label }
  elseif kind == "child" then
    return new_path { s = p.s, scope = scope, hops = hops, what = "child", field = name, child = shape.children[name],
                      label = label }
  elseif kind == "ref" then
    return new_path { s = p.s, scope = scope, hops = hops, what = "ref", field = name, ref = shape.refs[name],
                      label = label }
  end
  error(format("search: %s has no field %s", shape_name(scope) or p.label, tostring(name)), 3)
end

Path.__index = function(p, k)
  local m = PathMethods[k]
  if m then return m end
  if type(k) ~= "string" then error("search: a path's name must be a string, got " .. type(k), 2) end
  return sub_path(p, k)
end
Path.__tostring = function(p) return "search path " .. p[DATA].label end

-- ------------------------------------------------------------ conditions

local function bad(msg) return { msg = msg } end

local function cond(t)
  -- the first refused value of the parts is the condition's
  if t.bad == nil and t.parts then
    for _, c in ipairs(t.parts) do if c.bad then t.bad = c.bad; break end end
  end
  if t.bad == nil and t.inner and t.inner.bad then t.bad = t.inner.bad end
  return setmetatable(t, Cond)
end

-- The condition c on p's final document, wrapped in an "any" per ref hop.
local function through_hops(p, c)
  for i = #p.hops, 1, -1 do
    local h = p.hops[i]
    c = cond { op = "any", holder = h.holder, what = "ref", field = h.field, ref = h.ref, tscope = h.tscope,
               inner = c, label = p.label }
  end
  return c
end

-- v as a value of the field's kind (decimal text taken), or nil, why.
local function cast(p, v, fn)
  local x = mquery.cast_value(p.kind, v)
  if x ~= nil and p.kind == "integer" then
    if not canon.is_integer(x) then x = nil
    elseif type(x) == "number" and math.tointeger then x = math.tointeger(x) end
  elseif x ~= nil and p.kind == "number" and x ~= x then
    x = nil
  end
  if x == nil then
    return nil, format("search: %s %s takes %s, got %s", p.label, fn, p.kind == "integer" and "an integer"
      or (p.kind == "boolean" and "a boolean" or "a " .. p.kind), canon.got(v))
  end
  return x
end

local function need(p, what, fn)
  if p.what ~= what then
    error(format("search: %s: %s is not a %s", fn, p.label, what == "field" and "field" or "child set or ref"), 3)
  end
end

local function cmp(p, op, v)
  need(p, "field", op)
  if v == nil then
    error(format("search: %s:%s needs a value (is_unknown for a missing one)", p.label, op), 3)
  end
  local c = { op = op, scope = p.scope, field = p.field, label = p.label }
  if rawequal(v, null) then
    -- a client's JSON null: data, refused as a value
    c.bad = bad(format("search: %s %s takes a value, got null (is_unknown asks for a missing one)", p.label, op))
    return through_hops(p, cond(c))
  end
  if is_path(v) then
    v = v[DATA]
    if v.what ~= "field" or v.scope ~= p.scope or #v.hops > 0 or #p.hops > 0 or v.list or p.list then
      c.bad = bad(format("search: %s:%s: a field is compared with a scalar field of the same variable only, "
        .. "not %s", p.label, op, v.label))
    elseif op ~= "eq" and op ~= "ne" and op ~= "lt" and op ~= "le" and op ~= "gt" and op ~= "ge" then
      error(format("search: %s:%s takes a value, not a field", p.label, op), 3)
    end
    c.other = v.field
    c.desc = "field:" .. v.field
    return through_hops(p, cond(c))
  end
  local x, why = cast(p, v, op)
  if x == nil then c.bad = bad(why) end
  c.v = x
  return through_hops(p, cond(c))
end

for _, op in ipairs { "eq", "ne", "lt", "le", "gt", "ge" } do
  PathMethods[op] = function(p, v) return cmp(p, op, v) end
end

local function list_arg(p, op, list)
  local c = { op = op, scope = p.scope, field = p.field, label = p.label }
  if type(list) ~= "table" or rawequal(list, null) or not canon.is_list(list) then
    c.bad = bad(format("search: %s:%s takes a list of values, got %s", p.label, op, canon.a_type(list)))
    return c
  end
  local out = {}
  for i = 1, #list do
    local x, why = cast(p, list[i], op)
    if x == nil then c.bad = bad(why .. format(" at [%d]", i)); break end
    out[i] = x
  end
  c.v = out
  return c
end

PathMethods.in_list = function(p, list)
  need(p, "field", "in_list")
  return through_hops(p, cond(list_arg(p, "in_list", list)))
end
PathMethods.nin_list = function(p, list)
  need(p, "field", "nin_list")
  return through_hops(p, cond(list_arg(p, "nin_list", list)))
end

local function text_op(op)
  return function(p, v)
    need(p, "field", op)
    if p.kind ~= "string" then error(format("search: %s:%s needs a string field", p.label, op), 2) end
    local c = { op = op, scope = p.scope, field = p.field, label = p.label }
    if type(v) ~= "string" then
      c.bad = bad(format("search: %s:%s takes a string, got %s", p.label, op, canon.a_type(v)))
    end
    c.v = v
    return through_hops(p, cond(c))
  end
end
PathMethods.prefix, PathMethods.suffix, PathMethods.contains = text_op("prefix"), text_op("suffix"),
  text_op("contains")

PathMethods.is_known = function(p)
  if p.what == "var" then error("search: is_known needs a field, a child set or a ref", 2) end
  return through_hops(p, cond { op = "is_known", scope = p.scope, field = p.field, label = p.label })
end
PathMethods.is_unknown = function(p)
  if p.what == "var" then error("search: is_unknown needs a field, a child set or a ref", 2) end
  return through_hops(p, cond { op = "is_unknown", scope = p.scope, field = p.field, label = p.label })
end

-- list fields
local function need_list(p, op)
  if p.what ~= "field" or not p.list then error(format("search: %s:%s needs a list field", p.label, op), 3) end
end
PathMethods.has = function(p, v)
  need_list(p, "has")
  local c = { op = "has", scope = p.scope, field = p.field, label = p.label }
  local x, why = cast(p, v, "has")
  if x == nil then c.bad = bad(why) end
  c.v = x
  return through_hops(p, cond(c))
end
for _, op in ipairs { "has_all", "has_any", "has_only" } do
  PathMethods[op] = function(p, list)
    need_list(p, op)
    return through_hops(p, cond(list_arg(p, op, list)))
  end
end

-- p:length() -> an expression compared with eq, ne, lt, le, gt, ge (list fields, child sets, list refs)
PathMethods.length = function(p)
  if not ((p.what == "field" and p.list) or p.what == "child" or (p.what == "ref" and p.ref.many)) then
    error(format("search: %s:length needs a list field, a child set or a list ref", p.label), 2)
  end
  return setmetatable({ p = p }, Length)
end
for _, op in ipairs { "eq", "ne", "lt", "le", "gt", "ge" } do
  Length[op] = function(l, n)
    local p = l.p
    local c = { op = "length", cmp = op, scope = p.scope, field = p.field, label = p.label .. ":length()" }
    local x = mquery.cast_value("integer", n)
    if x == nil or not canon.is_integer(x) or x < 0 then
      c.bad = bad(format("search: %s:length():%s takes an integer of at least 0, got %s", p.label, op, canon.got(n)))
    else
      c.v = floor(x)
    end
    return through_hops(p, cond(c))
  end
end

-- quantifiers over a child set or a (list) ref: fn(element variable) -> condition
local function quant(op)
  return function(p, fn)
    if p.what ~= "child" and p.what ~= "ref" then
      error(format("search: %s:%s needs a child set or a ref", p.label, op), 2)
    end
    if type(fn) ~= "function" then error(format("search: %s:%s: fn must be a function, got %s", p.label, op,
      type(fn)), 2) end
    local tscope, shape
    if p.what == "child" then
      shape = p.child
      tscope = { T = shape, kind = "child", name = p.label }
    else
      shape = p.ref.type
      tscope = { T = shape, kind = "ref", name = shape.name }
    end
    local v = new_path { s = p.s, scope = tscope, hops = {}, what = "var", shape = shape, label = p.label .. "[]" }
    local inner = fn(v)
    if not is_cond(inner) then
      error(format("search: %s:%s: fn must return a condition, got %s", p.label, op, type(inner)), 2)
    end
    return through_hops(p, cond { op = op, holder = p.scope, what = p.what, field = p.field, ref = p.ref,
                                  tscope = tscope, inner = inner, label = p.label })
  end
end
PathMethods.any, PathMethods.all, PathMethods.none = quant("any"), quant("all"), quant("none")

local function logic(op, fname)
  return function(...)
    local n = select("#", ...)
    if n == 0 then error("search: " .. fname .. " needs at least one condition", 2) end
    local parts = {}
    for i = 1, n do
      local c = select(i, ...)
      if not is_cond(c) then error(format("search: %s: argument %d must be a condition, got %s", fname, i,
        type(c)), 2) end
      parts[i] = c
    end
    return cond { op = op, parts = parts }
  end
end
Searcher.all_of = logic("and", "all_of")
Searcher.any_of = logic("or", "any_of")
Searcher.none_of = logic("nor", "none_of")
M.all_of, M.any_of, M.none_of = Searcher.all_of, Searcher.any_of, Searcher.none_of

-- the methods take the path's facts
for k, f in pairs(PathMethods) do
  PathMethods[k] = function(p, ...) return f(p[DATA], ...) end
end

local compile, describe = search_plan.compile, search_plan.describe

-- ------------------------------------------------------------ the searcher

local OPEN_KEYS = { only_latest = "boolean", as_of = "any" }

function M.new(store, opts)
  if opts ~= nil and type(opts) ~= "table" then error("searcher: opts must be a table, got " .. type(opts), 3) end
  opts = opts or {}
  for k, v in pairs(opts) do
    local want = OPEN_KEYS[k]
    if not want then error("searcher: unknown option " .. tostring(k), 3) end
    if want ~= "any" and type(v) ~= want then
      error(format("searcher: %s must be a %s, got %s", k, want, type(v)), 3)
    end
  end
  local s = setmetatable({ store = store, vars = {}, conds = {}, outputs = {}, out_names = {}, sorts = {},
                           latest = opts.only_latest == true }, Searcher)
  if opts.as_of ~= nil then
    if not store.ts.enabled then error("searcher: as_of: the store was opened with store_timestamps = false", 3) end
    local ns, e = rquery.to_ns(opts.as_of)
    if not ns then s.refusal = bad("searcher: " .. e)
    else s.cut = canon.idiv(ns, store.ts.resolution) end
  end
  return s
end

local function refuse(s, b)
  if s.refusal == nil then s.refusal = b end
end

--- s:variable(T) -> a root variable over record type T
function Searcher:variable(T)
  if type(T) ~= "table" or not T.__record_type then
    error("variable: T must be a record type (records.define), got " .. canon.a_type(T), 2)
  end
  if not self.store.colls[T.name] then error("variable: " .. T.name .. " is not a type of this store", 2) end
  local scope = { T = T, kind = "root", name = T.name, n = #self.vars + 1 }
  local v = new_path { s = self, scope = scope, hops = {}, what = "var", shape = T, label = T.name }
  self.vars[#self.vars + 1] = v[DATA]
  return v
end

local function root_of(p) return p.hops[1] and p.hops[1].holder or p.scope end

-- The root scope a condition is on (its first), for the disconnected check.
local function cond_root(c)
  if c.parts then return cond_root(c.parts[1]) end
  return c.holder or c.scope
end

--- s:add(cond): a condition every row meets; conditions add up.
function Searcher:add(c)
  if not is_cond(c) then error("add: cond must be a condition, got " .. canon.a_type(c), 2) end
  if c.bad then refuse(self, c.bad) end
  self.conds[#self.conds + 1] = c
  return self
end

--- s:output(x, name): a row's field name holds x (a variable's record, or a path's value)
function Searcher:output(x, name)
  if not is_path(x) then error("output: x must be a variable or a path, got " .. canon.a_type(x), 2) end
  if type(name) ~= "string" or name == "" then error("output: name must be a non-empty string", 2) end
  if self.out_names[name] then error("output: " .. name .. " is output twice", 2) end
  self.out_names[name] = true
  self.outputs[#self.outputs + 1] = { p = x[DATA], name = name }
  return self
end

--- s:sort(path, dir): by a scalar field of the root variable, 1 or -1 (also as text); the sid breaks ties
function Searcher:sort(p, dir)
  if not is_path(p) then error("sort: path must be a path, got " .. canon.a_type(p), 2) end
  p = p[DATA]
  local d = dir == nil and 1 or dir
  if type(d) == "string" then d = mquery.cast_value("integer", d) end
  if d ~= 1 and d ~= -1 then
    refuse(self, bad(format("search: sort %s: dir must be 1 or -1, got %s", p.label, canon.got(dir))))
  elseif p.what ~= "field" or p.list or #p.hops > 0 or p.scope.kind ~= "root" then
    refuse(self, bad(format("search: sort: %s is not a scalar field of a root variable", p.label)))
  end
  self.sorts[#self.sorts + 1] = { p = p, field = p.field, dir = d }
  return self
end

local function count_arg(self, fn, n, min)
  local x = n
  if type(x) == "string" then x = mquery.cast_value("integer", x) end
  if type(x) ~= "number" then
    if type(n) ~= "string" then error(format("%s: n must be an integer, got %s", fn, type(n)), 3) end
  end
  if type(x) ~= "number" or x ~= floor(x) or x < min or x > 2 ^ 53 then
    refuse(self, bad(format("search: %s: n must be an integer of at least %d, got %s", fn, min, canon.got(n))))
    return nil
  end
  return floor(x)
end

function Searcher:offset(n) self.skip = count_arg(self, "offset", n, 0) or 0; self.has_offset = true; return self end
function Searcher:limit(n) self.lim = count_arg(self, "limit", n, 1); self.has_limit = true; return self end

-- The one root variable of the search, or invalid: every condition, output
-- and sort is on it (a second root variable would be a cartesian product).
local function the_root(self)
  local root
  local function see(scope)
    if root == nil then root = scope
    elseif root ~= scope then
      return fail("invalid", format("search: the variables %s and %s are not joined (disconnected variables "
        .. "are not searched; reach a record through a ref path instead)", root.name, scope.name))
    end
    return true
  end
  for _, c in ipairs(self.conds) do
    local ok, e, code = see(cond_root(c)); if not ok then return nil, e, code end
  end
  for _, o in ipairs(self.outputs) do
    local ok, e, code = see(root_of(o.p)); if not ok then return nil, e, code end
  end
  for _, x in ipairs(self.sorts) do
    local ok, e, code = see(root_of(x.p)); if not ok then return nil, e, code end
  end
  if root == nil then
    if #self.vars ~= 1 then
      return fail("invalid", format("search: %d root variables and nothing joining them", #self.vars))
    end
    root = self.vars[1].scope
  end
  if root.kind ~= "root" then return fail("invalid", "search: a condition on an element variable outside its :any") end
  return root
end

-- The root and the filter to send (refs' finds run here), or nil, err.
local function plan(self, fn)
  if self.refusal then return fail("invalid", self.refusal.msg) end
  local store = self.store
  if store.closed then return fail("closed", fn .. ": the store is closed") end
  local root, e, c, d = the_root(self)
  if not root then return nil, e, c, d end
  local ctx = { store = store, finds = 0 }
  local q = rquery.new(store, root.T)
  for _, x in ipairs(self.conds) do
    local f
    f, e, c, d = compile(ctx, x, root)
    if not f then return nil, e, c, d end
    q.conds[#q.conds + 1] = f
  end
  q.latest, q.cut = self.latest, self.cut
  return root, q:filter(), ctx
end

-- The order keys: the sorts, a key given twice counting once (the first).
local function order_keys(self)
  local keys, seen = {}, {}
  for _, x in ipairs(self.sorts) do
    if not seen[x.field] then seen[x.field] = true; keys[#keys + 1] = { x.field, x.dir } end
  end
  return keys, seen
end

-- The order keys, then the sid (unless a key is the sid already).
local function sort_spec(self)
  local spec, seen = order_keys(self)
  if not seen._id then spec[#spec + 1] = { "_id", 1 } end
  return spec
end

-- The value of path p in record rec (its refs loaded).
local function value_at(rec, p)
  if p.what == "var" then return rec end
  local cur = rec
  for _, h in ipairs(p.hops) do
    if type(cur) ~= "table" then return nil end
    cur = cur[h.field]
    if h.ref.many then
      -- a list ref: the values of every element
      local out = {}
      local rest = { s = p.s, scope = p.scope, hops = {}, what = p.what, field = p.field, label = p.label }
      for i = 2, #p.hops do rest.hops[i - 1] = p.hops[i] end
      for i, r in ipairs(type(cur) == "table" and cur or {}) do out[i] = value_at(r, rest) end
      return out
    end
  end
  if type(cur) ~= "table" then return nil end
  local name = p.field
  if name == "_id" then name = "_sid" end
  return cur[name]
end

local function rows_of(self, root, recs)
  local rows = setmetatable({ outputs = {} }, Rows)
  for i, o in ipairs(self.outputs) do rows.outputs[i] = o.name end
  if #self.outputs == 0 then rows.outputs[1] = root.name end
  for i, rec in ipairs(recs) do
    local row = {}
    if #self.outputs == 0 then row[root.name] = rec end
    for _, o in ipairs(self.outputs) do row[o.name] = value_at(rec, o.p) end
    rows[i] = row
  end
  return rows
end

--- s:results() -> the rows (a result set), or nil, err
function Searcher:results()
  local root, filter, code, detail = plan(self, "results")
  if not root then return nil, filter, code, detail end
  local store = self.store
  local docs, e, c, d = store.wire:find(store.colls[root.T.name], filter,
    { sort = sort_spec(self), skip = self.skip, limit = self.lim }, store.session)
  if not docs then return nil, e, c, d end
  local recs
  recs, e, c, d = store:load(root.T, docs)
  if not recs then return nil, e, c, d end
  return rows_of(self, root, recs)
end

--- s:count() -> the number of matching root records (offset and limit aside), or nil, err
function Searcher:count()
  local root, filter, code, detail = plan(self, "count")
  if not root then return nil, filter, code, detail end
  local store = self.store
  return store.wire:count(store.colls[root.T.name], filter, store.session)
end

-- What a page's cursor is bound to: the store, the type, the conditions, the cut, the order.
local function fingerprint(self, root)
  local out = { self.store.prefix, "\0", root.T.name, "\0", tostring(self.latest), "\0", tostring(self.cut), "\0" }
  for _, c in ipairs(self.conds) do describe(c, out) end
  out[#out + 1] = "\0"
  for _, k in ipairs(order_keys(self)) do out[#out + 1] = k[1] .. ":" .. k[2] .. "," end
  return canon.hex(core.sha256(concat(out)))
end

local PAGE_KEYS = { limit = true, cursor = true }

--- s:page{ limit = n, cursor = c } -> { items = rows, next_cursor = c | nil }
function Searcher:page(opts)
  if type(opts) ~= "table" then error("page: opts must be a table { limit = n, cursor = c }", 2) end
  for k in pairs(opts) do
    if not PAGE_KEYS[k] then error("page: unknown option " .. tostring(k), 2) end
  end
  local lt = type(opts.limit)
  if lt ~= "number" and lt ~= "string" and lt ~= "nil" then
    error("page: limit must be a number (or its decimal text), got " .. canon.a_type(opts.limit), 2)
  end
  if opts.cursor ~= nil and type(opts.cursor) ~= "string" then
    error("page: cursor must be a string, got " .. canon.a_type(opts.cursor), 2)
  end
  if self.refusal then return fail("invalid", self.refusal.msg) end
  if self.has_offset or self.has_limit then
    return fail("invalid", "page: a search with offset or limit is not paged (the page's limit and cursor say where)")
  end
  local size = opts.limit == nil and rquery.DEFAULT_PAGE or opts.limit
  if type(size) == "string" then size = mquery.cast_value("integer", size) end
  if type(size) ~= "number" or size ~= floor(size) or size < 1 or size > M.MAX_PAGE then
    return fail("invalid", format("page: limit must be an integer from 1 to %d, got %s", M.MAX_PAGE,
      canon.got(opts.limit)))
  end
  local root, filter, code, detail = plan(self, "page")
  if not root then return nil, filter, code, detail end
  local store = self.store
  local fp = fingerprint(self, root)
  local order, seen = order_keys(self)
  local by_sid = seen._id
  if opts.cursor ~= nil then
    local t, why = cursor.decode(store.page_key, fp, opts.cursor, floor(store.max_bson_size * 4 / 3) + 64)
    if t and (not canon.is_integer(t.s) or type(t.v) ~= "table" or #t.v ~= #order) then t, why = nil, "malformed" end
    if not t then return fail("invalid", format("page: cursor is not one this search gave (%s)", why)) end
    local branches = rquery.after(order, t.v, t.s)
    -- ordered by the sid itself: no tie to break (the last branch would be "a larger sid")
    if by_sid then branches[#branches] = nil end
    filter = { ["$and"] = array { filter, { ["$or"] = array(branches) } } }
  end
  local docs, e, c, d = store.wire:find(store.colls[root.T.name], filter, { sort = sort_spec(self), limit = size + 1 },
    store.session)
  if not docs then return nil, e, c, d end
  local values, sid = rquery.page_end(docs, size, order)
  local next_cursor = values and cursor.encode(store.page_key, fp, { v = array(values), s = sid })
  local recs
  recs, e, c, d = store:load(root.T, docs)
  if not recs then return nil, e, c, d end
  local rows = rows_of(self, root, recs)
  local items = {}
  for i = 1, #rows do items[i] = rows[i] end
  return { items = items, next_cursor = next_cursor }
end

-- ------------------------------------------------------------ result sets

--- rows:first() -> the first row, or nil when there is none
function Rows:first() return self[1] end

--- rows:one() -> the only row; none is not_found, several invalid
function Rows:one()
  local n = #self
  if n == 1 then return self[1] end
  if n == 0 then return fail("not_found", "one: the search found no row, one expected", { count = 0 }) end
  return fail("invalid", format("one: the search found %d rows, one expected", n), { count = n })
end

local function column(self, fn, name)
  if name == nil then
    if #self.outputs ~= 1 then
      error(format("%s: name is needed: the rows have %d outputs", fn, #self.outputs), 3)
    end
    name = self.outputs[1]
  end
  if type(name) ~= "string" then error(fn .. ": name must be a string, got " .. type(name), 3) end
  local known = false
  for _, o in ipairs(self.outputs) do if o == name then known = true end end
  if not known then error(format("%s: %s is not an output of the search", fn, name), 3) end
  local out = { n = #self }
  for i = 1, #self do out[i] = self[i][name] end
  return out
end

--- rows:scalars(name?) -> the values of one output, row by row (name may be left out when there is one output)
function Rows:scalars(name) return column(self, "scalars", name) end

--- rows:column(name) -> the values of output name, row by row
function Rows:column(name)
  if name == nil then error("column: name must be a string, got nil", 2) end
  return column(self, "column", name)
end

M.Searcher, M.Rows, M.Length, M.PathMethods = Searcher, Rows, Length, PathMethods
return M
