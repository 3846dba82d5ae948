-- mongostore.records.query - queries over one record type: where (Q or a plain
-- filter), only_latest, as_of, order_by, all, count, and keyset pages whose opaque
-- cursors (mongostore.cursor) carry the last order keys and sid under an HMAC, so
-- a forged, edited or another query's cursor is refused.
local core = require "mongostore.core"
local query = require "mongostore.query"
local canon = require "mongostore.records.canon"
local wire = require "mongostore.records.wire"
local cursor = require "mongostore.cursor"

local type, error, pairs, ipairs, tostring, tonumber, setmetatable, rawequal = type, error, pairs, ipairs,
  tostring, tonumber, setmetatable, rawequal
local format, concat, sort, sub, find = string.format, table.concat, table.sort, string.sub, string.find
local floor = math.floor
local mtype = math.type
local fail = wire.fail
local null, array, is_array = core.null, core.array, core.is_array

local M = {}

M.MAX_PAGE = 10000
M.DEFAULT_PAGE = 100   -- a page's limit when none is given

-- ------------------------------------------------------------ as_of

-- A nanosecond integer, or ISO-8601 text with its zone: nanoseconds (the
-- fraction read digit by digit, a double would round it). Text without a zone
-- (a bare date, or a time with no Z or offset) names no instant: it is refused,
-- never read as UTC.
local function quoted(t)
  if #t > 64 then t = sub(t, 1, 64) .. "..." end
  return format("%q", t)
end

local function bad_time(t, why)
  return fail("invalid", format("as_of: %s is not %s", quoted(t), why), { value = t })
end

-- t as nanoseconds, or nil, err, "invalid" (the message naming the value's
-- type, and text by itself): what a client's time cannot be.
function M.to_ns(t)
  if canon.is_integer(t) then
    if type(t) == "number" then return math.tointeger and math.tointeger(t) or t end
    return tonumber(tostring(t))
  end
  if type(t) == "number" then
    return fail("invalid", "as_of: a number must be an integer of nanoseconds, got one with a fraction "
      .. "(or not finite, or beyond the int64 range)")
  end
  if type(t) ~= "string" then
    return fail("invalid", "as_of: t must be nanoseconds (an integer) or ISO-8601 text, got " .. canon.got(t))
  end
  local n = query.cast_value("integer", t)
  if n ~= nil then return n end
  local base, frac, rest = t:match("^(.-%d%d:%d%d:%d%d)%.(%d+)(.*)$")
  local whole = base and (base .. rest) or t
  local secs = core.iso_to_time(whole)
  if not secs then return bad_time(t, "an ISO-8601 date-time") end
  -- nanoseconds are int64: from 1677-09-21 to 2262-04-11
  if not (secs >= -9223372036 and secs < 9223372036) then
    return bad_time(t, "a time nanoseconds since 1970 can count (1677 to 2262, in int64)")
  end
  -- the parser takes a date alone or a time without a zone as UTC; here the
  -- zone is required: a date, a time, then Z or an offset
  if not t:find("^%d%d%d%d%-%d%d%-%d%d[Tt ][%d:.]+[Zz]$") and
     not t:find("^%d%d%d%d%-%d%d%-%d%d[Tt ][%d:.]+[+-]%d%d:?%d%d$") then
    return bad_time(t, "an ISO-8601 date-time with its zone (Z or an offset such as +01:00)")
  end
  local ns = floor(secs) * 1000000000
  if frac then
    if #frac > 9 then return bad_time(t, "an ISO-8601 date-time of at most 9 fractional digits") end
    ns = ns + tonumber(frac .. string.rep("0", 9 - #frac))
  end
  return ns
end

-- ------------------------------------------------------------ cursors

-- Text of a value that is the same in every process: keys sorted, integers
-- and floats apart, boxes by their text.
local function stable(v, out)
  local t = type(v)
  if t == "table" and not rawequal(v, null) then
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = k end
    sort(keys, function(x, y)
      if type(x) == type(y) then return x < y end
      return type(x) < type(y)
    end)
    out[#out + 1] = is_array(v) and "[" or "{"
    for _, k in ipairs(keys) do
      out[#out + 1] = tostring(k) .. "="
      stable(v[k], out)
      out[#out + 1] = ","
    end
    out[#out + 1] = "}"
  elseif t == "number" then
    if mtype and mtype(v) == "float" then out[#out + 1] = format("d%.17g", v)
    else out[#out + 1] = format("i%.17g", v) end
  elseif t == "string" then
    out[#out + 1] = format("%q", v)
  else
    out[#out + 1] = t .. ":" .. tostring(v)
  end
end

-- ------------------------------------------------------------ queries

local Query = {}
Query.__index = Query
Query.__name = "mongostore.records.Query"

function M.new(store, T)
  return setmetatable({ store = store, T = T, conds = {}, latest = false, cut = nil, order = nil }, Query)
end

local function clone(q)
  local c = {}
  for k, v in pairs(q) do c[k] = v end
  local conds = {}
  for i, x in ipairs(q.conds) do conds[i] = x end
  c.conds = conds
  return setmetatable(c, Query)
end

local function rename(path)
  if path == "sid" then return "_id" end
  return path
end

-- ------------------------------------------------------------ client values

-- The store fields a filter may name, with the kind of their values.
local STORE_KINDS = {
  _id = "integer", _lin = "integer", _prev = "integer", _next = "integer", _nts = "integer", _ts = "integer",
  _cid = "string", _role = "string", _w = "string", _refs = "any",
}

local KIND_OF = { string = "string", integer = "integer", float = "number", boolean = "boolean" }

-- The kind of the values at path in type T ("integer", "number", "string",
-- "boolean", "any"), whether it is a list, or nil when T has no such path.
-- A path goes through children (an index may follow a list), ends at a field
-- or a ref (then an index may follow a list field or a list ref).
local function path_kind(T, path)
  local k = STORE_KINDS[path]
  if k then return k, false end
  local shape, pos, n = T, 1, #path
  while pos <= n do
    local dot = find(path, ".", pos, true)
    local seg = sub(path, pos, (dot or n + 1) - 1)
    pos = (dot or n) + 1
    local what = shape.kinds[seg]
    if what == nil then return nil end
    local rest = dot and sub(path, pos) or nil
    if what == "child" then
      shape = shape.children[seg]
      if rest == nil then return "any", true end
      local idx = rest:match("^(%d+)%.") or rest:match("^(%d+)$")
      if idx then
        if #idx == #rest then return "any", false end
        pos = pos + #idx + 1
      end
    else
      local list
      if what == "field" then
        local f = shape.fields[seg]
        k, list = KIND_OF[f.type], f.list
      else
        k, list = "integer", shape.refs[seg].many
      end
      if rest == nil then return k, list end
      if list and rest:match("^%d+$") then return k, false end
      return nil
    end
  end
  return nil
end
M.path_kind = path_kind

local WANT = {
  integer = "an integer (a number or its decimal text)",
  number = "a number (or its decimal text)",
  string = "a string",
  boolean = "a boolean (or the text true or false)",
}

local article = canon.got -- a value's type, never its content

local PLURAL = { integer = "integers", number = "numbers", string = "strings", boolean = "booleans" }

local function shown(path) return path == "_id" and "sid" or path end

-- v as a value of kind: the exact cast (decimal text to an integer, "true" to
-- true), or nil.
local function cast_kind(kind, v)
  local x = query.cast_value(kind, v)
  if x == nil then return nil end
  if kind == "integer" then
    if not canon.is_integer(x) then return nil end
    if type(x) == "number" and math.tointeger then x = math.tointeger(x) end
  elseif kind == "number" and type(x) == "number" and x ~= x then
    return nil
  end
  return x
end

local function client_cast(ctx, path, v)
  local kind, list = path_kind(ctx.T, path)
  if kind == nil then
    query.refuse(format("%s: %s is not a field of %s", ctx.fn, shown(path), ctx.T.name))
  end
  if v == nil or rawequal(v, null) or kind == "any" then return v end
  if list and type(v) == "table" and canon.is_list(v) then
    local out = {}
    for i = 1, #v do
      local x = cast_kind(kind, v[i])
      if x == nil then
        query.refuse(format("%s: field '%s' takes %s, got %s at [%d]", ctx.fn, shown(path), PLURAL[kind],
          article(v[i]), i))
      end
      out[i] = x
    end
    return array(out)
  end
  local x = cast_kind(kind, v)
  if x == nil then
    query.refuse(format("%s: field '%s' takes %s, got %s", ctx.fn, shown(path), WANT[kind], article(v)))
  end
  return x
end

local function client_field(ctx, path)
  if path_kind(ctx.T, path) == nil then
    query.refuse(format("%s: %s is not a field of %s", ctx.fn, shown(path), ctx.T.name))
  end
end

local HATCH = "records.trusted{...} (a filter written as code)"

-- The ctx query.client_filter casts and checks a where's values with.
local function where_ctx(T)
  local fn = "where " .. T.name
  return { fn = fn, hatch = HATCH, T = T, cast = client_cast, field = client_field,
           elem = query.elem_ctx(fn, HATCH) }
end
local ctx_of = setmetatable({}, { __mode = "k" })

-- A refused builder argument (nil, message, code, detail): kept in the query,
-- returned by the call that runs it (the first one, when there are several).
local function refused(q, _, msg, code, detail)
  local c = clone(q)
  if c.refusal == nil then c.refusal = { msg, code, detail } end
  return c
end

-- The refusal a builder kept, as the call that runs the query returns it.
local function refusal(q)
  local r = q.refusal
  return nil, r[1], r[2], r[3]
end

--- q:where(cond): a Q condition, a plain filter of values (data: cast to the fields' types, operators refused),
-- or a records.trusted table; "sid" is the sid; conditions add up.
function Query:where(cond)
  if type(cond) ~= "table" or rawequal(cond, null) or query.describe(cond) == "array" then
    return refused(self, fail("invalid", format("where %s: the filter must be a Q condition or a table of "
      .. "field = value, got %s", self.T.name, canon.a_type(cond))))
  end
  local ctx = ctx_of[self.T]
  if ctx == nil then ctx = where_ctx(self.T); ctx_of[self.T] = ctx end
  local f, msg = query.client_filter(cond, rename, ctx)
  if f ~= nil then
    local js = query.find_js(f)
    if js then msg = format("%s: %s is refused (it runs JavaScript on the server)", ctx.fn, js); f = nil end
  end
  if f == nil then return refused(self, fail("invalid", msg)) end
  local c = clone(self)
  c.conds[#c.conds + 1] = f
  return c
end

function Query:only_latest()
  local c = clone(self)
  c.latest = true
  return c
end

function Query:as_of(t)
  local store = self.store
  if not store.ts.enabled then error("as_of: the store was opened with store_timestamps = false", 2) end
  -- a client's bad time is kept in the query and returned by the call that runs it
  local ns, e, c, d = M.to_ns(t)
  if not ns then return refused(self, nil, e, c, d) end
  local q = clone(self)
  q.cut = canon.idiv(ns, store.ts.resolution)
  return q
end

--- q:order_by{ { field, 1 | -1 }, ... }: declared scalar fields (or "_ts"); the sid breaks ties.
-- A name that is not one, or a direction that is not 1 or -1 ("1" and "-1" as text are), is refused
-- as invalid by the call that runs the query (a client may choose the order).
function Query:order_by(keys)
  if type(keys) ~= "table" then error("order_by: keys must be a list of { field, 1 | -1 }", 2) end
  local order = {}
  for i, k in ipairs(keys) do
    if type(k) ~= "table" then error(format("order_by: keys[%d] must be { field, 1 | -1 }", i), 2) end
    local name, dir = k[1], k[2]
    if type(dir) == "string" then dir = query.cast_value("integer", dir) end
    if type(name) ~= "string" or (dir ~= 1 and dir ~= -1) then
      return refused(self, fail("invalid", format("order_by %s: keys[%d] must be { field, 1 | -1 }, got { %s, %s }",
        self.T.name, i, query.describe(name), query.describe(k[2]))))
    end
    local f = self.T.fields[name]
    if name ~= "_ts" and (not f or f.list) then
      return refused(self, fail("invalid", format("order_by %s: keys[%d] (%s) is not a scalar field of %s",
        self.T.name, i, quoted(name), self.T.name)))
    end
    order[i] = { name, dir }
  end
  local c = clone(self)
  c.order = order
  return c
end

-- The filter the query sends.
function Query:filter()
  local parts = {}
  for _, c in ipairs(self.conds) do parts[#parts + 1] = c end
  if self.cut then parts[#parts + 1] = { _ts = { ["$lte"] = self.cut } } end
  if self.latest then
    if self.cut then
      -- latest then: no successor, or one stored after the cut
      parts[#parts + 1] = { ["$or"] = array { { _next = { ["$exists"] = false } }, { _nts = { ["$gt"] = self.cut } } } }
    else
      parts[#parts + 1] = { _next = { ["$exists"] = false } }
    end
  end
  if #parts == 0 then return {} end
  if #parts == 1 then
    local f = {}
    for k, v in pairs(parts[1]) do f[k] = v end
    return f
  end
  return { ["$and"] = array(parts) }
end

local function sort_spec(self)
  local s = {}
  for i, k in ipairs(self.order or {}) do s[i] = { k[1], k[2] } end
  s[#s + 1] = { "_id", 1 }
  return s
end

-- A query of a closed store fails as the store's own methods do.
local function closed(store, fn)
  if store.closed then return fail("closed", fn .. ": the store is closed") end
end

function Query:all()
  local store = self.store
  if self.refusal then return refusal(self) end
  if store.closed then return closed(store, "all") end
  local docs, e, c, d = store.wire:find(store.colls[self.T.name], self:filter(), { sort = sort_spec(self) },
    store.session)
  if not docs then return nil, e, c, d end
  return store:load(self.T, docs)
end

function Query:count()
  local store = self.store
  if self.refusal then return refusal(self) end
  if store.closed then return closed(store, "count") end
  return store.wire:count(store.colls[self.T.name], self:filter(), store.session)
end

-- What a cursor is bound to: the type, the filter, the order, the store.
local function fingerprint(self)
  local out = { self.store.prefix, "\0", self.T.name, "\0" }
  stable(self:filter(), out)
  out[#out + 1] = "\0"
  stable(self.order or {}, out)
  return canon.hex(core.sha256(concat(out)))
end

-- The position after the page's last record: its order keys and sid.
local function cursor_for(self, qfp, values, sid)
  return cursor.encode(self.store.page_key, qfp, { v = array(values), s = sid })
end

-- A client's cursor text as the position it names, or invalid: a cursor
-- decodes only under this store's key and this query's fingerprint, and a
-- position is the order keys (one per key) and an integer sid.
local function read_cursor(self, qfp, text)
  -- its order keys are values of the last record: as long as a document may be, in base64
  local t, why = cursor.decode(self.store.page_key, qfp, text, floor(self.store.max_bson_size * 4 / 3) + 64)
  if t and (not canon.is_integer(t.s) or type(t.v) ~= "table" or #t.v ~= #(self.order or {})) then
    t, why = nil, "malformed"
  end
  if not t then
    return fail("invalid", format("page %s: cursor is not one this query gave (%s)", self.T.name, why))
  end
  return t
end

-- The keyset condition "after (values, sid)" in the sort's order: for each
-- key, the earlier keys equal and this one after, then all equal and a
-- larger sid; nulls sort first ascending and last descending, as MongoDB does,
-- and are matched explicitly ({ k = null } also matches a missing field).
local function after(order, values, sid)
  local branches = {}
  local n = #order
  for i = 1, n + 1 do
    local b = {}
    local possible = true
    for j = 1, i - 1 do
      local v = values[j]
      b[order[j][1]] = (v == nil or rawequal(v, null)) and null or v
    end
    if i <= n then
      local k, dir, v = order[i][1], order[i][2], values[i]
      local isnull = v == nil or rawequal(v, null)
      if dir == 1 then
        b[k] = isnull and { ["$ne"] = null } or { ["$gt"] = v }
      elseif isnull then
        possible = false   -- nothing comes after null, descending
      else
        if b["$or"] then possible = false end
        b["$or"] = array { { [k] = { ["$lt"] = v } }, { [k] = null } }
      end
    else
      b._id = { ["$gt"] = sid }
    end
    if possible then branches[#branches + 1] = b end
  end
  return branches
end

-- A page's documents, read with limit size + 1: the one past the page is
-- dropped, and the position after the page's last (its order keys, nulls as
-- null, and its sid) returned; nil when this was the last page.
function M.page_end(docs, size, order)
  if #docs <= size then return nil end
  docs[#docs] = nil
  local last = docs[#docs]
  local values = {}
  for i, k in ipairs(order) do
    local v = last[k[1]]
    values[i] = v == nil and null or v
  end
  return values, last._id
end

local PAGE_KEYS = { limit = true, cursor = true }

-- An integer a decoder boxed (an int64 beyond a double's range, on LuaJIT):
-- it prints as its decimal text.
local function is_int_box(v)
  local t = type(v)
  return (t == "userdata" or t == "cdata") and tostring(v):match("^%-?%d+$") ~= nil
end

-- A page's limit (a client's, perhaps: decimal text is taken) -> the number, or invalid.
local function page_limit(self, limit)
  local n = limit
  if is_int_box(n) then n = tostring(n) end
  if type(n) == "string" then n = query.cast_value("integer", n) end
  if type(n) ~= "number" or n ~= n or n ~= floor(n) or n < 1 or n > M.MAX_PAGE then
    local whole = type(limit) == "number" and limit == floor(limit) and limit > -math.huge and limit < math.huge
    local got = (whole or is_int_box(limit) or type(limit) == "string" and n ~= nil) and "one out of range"
      or article(limit)
    return fail("invalid", format("page %s: limit must be an integer from 1 to %d, got %s", self.T.name, M.MAX_PAGE,
      got))
  end
  return n
end

--- q:page{ limit = n, cursor = c } -> { items = records, next_cursor = c | nil }
-- A limit that is not an integer from 1 to MAX_PAGE, or a cursor this query did not give, is invalid;
-- a limit of another Lua type than a number or text, a cursor not a string, or another key raises.
function Query:page(opts)
  if type(opts) ~= "table" then error("page: opts must be a table { limit = n, cursor = c }", 2) end
  for k in pairs(opts) do
    if not PAGE_KEYS[k] then error("page: unknown option " .. tostring(k), 2) end
  end
  local lt = type(opts.limit)
  if lt ~= "number" and lt ~= "string" and lt ~= "nil" and not is_int_box(opts.limit) then
    error("page: limit must be a number (or its decimal text), got " .. canon.a_type(opts.limit), 2)
  end
  if opts.cursor ~= nil and type(opts.cursor) ~= "string" then
    error("page: cursor must be a string, got " .. canon.a_type(opts.cursor), 2)
  end
  if self.refusal then return refusal(self) end
  local size, e, c, d = page_limit(self, opts.limit == nil and M.DEFAULT_PAGE or opts.limit)
  if not size then return nil, e, c, d end
  local store = self.store
  if store.closed then return closed(store, "page") end
  local qfp = fingerprint(self)
  local filter = self:filter()
  local order = self.order or {}
  if opts.cursor ~= nil then
    local t
    t, e, c = read_cursor(self, qfp, opts.cursor)
    if not t then return nil, e, c end
    local branches = after(order, t.v, t.s)
    if filter["$or"] == nil and filter["$and"] == nil then
      filter["$or"] = array(branches)
    else
      filter = { ["$and"] = array { filter, { ["$or"] = array(branches) } } }
    end
  end
  local docs
  docs, e, c, d = store.wire:find(store.colls[self.T.name], filter, { sort = sort_spec(self), limit = size + 1 },
    store.session)
  if not docs then return nil, e, c, d end
  local values, sid = M.page_end(docs, size, order)
  local next_cursor = values and cursor_for(self, qfp, values, sid)
  local items
  items, e, c, d = store:load(self.T, docs)
  if not items then return nil, e, c, d end
  return { items = items, next_cursor = next_cursor }
end

M.Query = Query
M.after = after   -- the keyset condition of a page (the unit spec, the searcher's pages)
M.stable = stable -- a value's text, the same in every process (the searcher's cursor binding)
return M
