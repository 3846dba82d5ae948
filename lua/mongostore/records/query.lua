-- mongostore.records.query - queries over one record type: where (Q or a plain
-- filter), only_latest, as_of, order_by, all, count, and keyset pages whose opaque
-- tokens carry the last order keys and sid under an HMAC, so a forged, edited or
-- foreign token is refused.
local core = require "mongostore.core"
local query = require "mongostore.query"
local canon = require "mongostore.records.canon"
local wire = require "mongostore.records.wire"

local type, error, pairs, ipairs, tostring, tonumber, setmetatable, rawequal, pcall = type, error, pairs, ipairs,
  tostring, tonumber, setmetatable, rawequal, pcall
local format, concat, sort, byte, char, sub = string.format, table.concat, table.sort, string.byte, string.char,
  string.sub
local floor = math.floor
local mtype = math.type
local fail = wire.fail
local null, array, is_array = core.null, core.array, core.is_array

local M = {}

M.MAX_PAGE = 10000

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

function M.to_ns(t)
  if type(t) == "number" then
    if not canon.is_integer(t) then error("as_of: a number must be an integer of nanoseconds", 3) end
    return t
  end
  if canon.is_integer(t) then return tonumber(tostring(t)) end
  if type(t) ~= "string" then
    error("as_of: t must be nanoseconds (an integer) or ISO-8601 text, got " .. type(t), 3)
  end
  local base, frac, rest = t:match("^(.-%d%d:%d%d:%d%d)%.(%d+)(.*)$")
  local whole = base and (base .. rest) or t
  local secs = core.iso_to_time(whole)
  if not secs then return bad_time(t, "an ISO-8601 date-time") end
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

-- ------------------------------------------------------------ tokens

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
local B64_INV = {}
for i = 1, 64 do B64_INV[byte(B64, i)] = i - 1 end

local function b64(s)
  local out = {}
  for i = 1, #s, 3 do
    local a, b, c = byte(s, i, i + 2)
    local n = a * 65536 + (b or 0) * 256 + (c or 0)
    local q = { floor(n / 262144) % 64, floor(n / 4096) % 64, floor(n / 64) % 64, n % 64 }
    local k = c and 4 or (b and 3 or 2)
    for j = 1, k do out[#out + 1] = sub(B64, q[j] + 1, q[j] + 1) end
  end
  return concat(out)
end

local function unb64(s)
  if #s % 4 == 1 then return nil end
  local out = {}
  for i = 1, #s, 4 do
    local n, k = 0, 0
    for j = i, i + 3 do
      local ch = byte(s, j)
      if ch then
        local v = B64_INV[ch]
        if not v then return nil end
        n = n * 64 + v
        k = k + 1
      else
        n = n * 64
      end
    end
    local a, b, c = floor(n / 65536) % 256, floor(n / 256) % 256, n % 256
    if k == 4 then out[#out + 1] = char(a, b, c)
    elseif k == 3 then out[#out + 1] = char(a, b)
    else out[#out + 1] = char(a) end
  end
  return concat(out)
end
M.b64, M.unb64 = b64, unb64

local equal_bytes = core.same_bytes -- a MAC compared in constant time

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

--- q:where(cond): a Q condition or a plain filter on the record's fields ("sid" is its sid); conditions add up.
function Query:where(cond)
  if cond == nil or (type(cond) ~= "table") then
    error("where: cond must be a Q condition or a filter table, got " .. type(cond), 2)
  end
  local c = clone(self)
  c.conds[#c.conds + 1] = query.filter(cond, rename)
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
  -- bad text raises the invalid error itself (a records error: code, message,
  -- the value), so the one who passed a client's time can tell it apart
  local ns, err = M.to_ns(t)
  if not ns then error(err, 2) end
  local c = clone(self)
  c.cut = canon.idiv(ns, store.ts.resolution)
  return c
end

--- q:order_by{ { field, 1 | -1 }, ... }: declared scalar fields (or "_ts"); the sid breaks ties.
function Query:order_by(keys)
  if type(keys) ~= "table" then error("order_by: keys must be a list of { field, 1 | -1 }", 2) end
  local order = {}
  for i, k in ipairs(keys) do
    if type(k) ~= "table" or type(k[1]) ~= "string" or (k[2] ~= 1 and k[2] ~= -1) then
      error(format("order_by: keys[%d] must be { field, 1 | -1 }", i), 2)
    end
    local f = self.T.fields[k[1]]
    if k[1] ~= "_ts" and (not f or f.list) then
      error(format("order_by: %s is not a scalar field of %s", k[1], self.T.name), 2)
    end
    order[i] = { k[1], k[2] }
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
  if store.closed then return closed(store, "all") end
  local docs, e, c, d = store.wire:find(store.colls[self.T.name], self:filter(), { sort = sort_spec(self) },
    store.session)
  if not docs then return nil, e, c, d end
  return store:load(self.T, docs)
end

function Query:count()
  local store = self.store
  if store.closed then return closed(store, "count") end
  return store.wire:count(store.colls[self.T.name], self:filter(), store.session)
end

-- What a token is bound to: the type, the filter, the order, the store.
local function fingerprint(self)
  local out = { self.store.prefix, "\0", self.T.name, "\0" }
  stable(self:filter(), out)
  out[#out + 1] = "\0"
  stable(self.order or {}, out)
  return canon.hex(core.sha256(concat(out)))
end

local function token_for(self, qfp, values, sid)
  local payload = core.bson_encode({ q = qfp, v = array(values), s = sid })
  local mac = core.hmac_sha256(self.store.page_key, payload)
  return b64(payload) .. "." .. b64(mac)
end

local function invalid_token(why)
  return fail("invalid", "page: the token is not one this query gave (" .. why .. ")")
end

local function read_token(self, qfp, token)
  if type(token) ~= "string" then return invalid_token("not a string") end
  local p64, m64 = token:match("^([%w%-_]+)%.([%w%-_]+)$")
  if not p64 then return invalid_token("malformed") end
  local payload, mac = unb64(p64), unb64(m64)
  if not payload or not mac then return invalid_token("malformed") end
  if not equal_bytes(core.hmac_sha256(self.store.page_key, payload), mac) then
    return invalid_token("its signature does not match")
  end
  local ok, t = pcall(core.bson_decode, payload, { document = true })
  if not ok or type(t) ~= "table" then return invalid_token("malformed") end
  if t.q ~= qfp then return invalid_token("it belongs to another query") end
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

--- q:page{ size = n, after = token } -> { items = records, next = token | nil }
function Query:page(opts)
  if type(opts) ~= "table" then error("page: opts must be a table { size = n, after = token }", 2) end
  for k in pairs(opts) do
    if k ~= "size" and k ~= "after" then error("page: unknown option " .. tostring(k), 2) end
  end
  local size = opts.size
  if type(size) ~= "number" or size ~= floor(size) or size < 1 or size > M.MAX_PAGE then
    error(format("page: size must be an integer from 1 to %d", M.MAX_PAGE), 2)
  end
  local store = self.store
  if store.closed then return closed(store, "page") end
  local qfp = fingerprint(self)
  local filter = self:filter()
  local order = self.order or {}
  if opts.after ~= nil then
    local t, e, c = read_token(self, qfp, opts.after)
    if not t then return nil, e, c end
    local branches = after(order, t.v or {}, t.s)
    if filter["$or"] == nil and filter["$and"] == nil then
      filter["$or"] = array(branches)
    else
      filter = { ["$and"] = array { filter, { ["$or"] = array(branches) } } }
    end
  end
  local docs, e, c, d = store.wire:find(store.colls[self.T.name], filter, { sort = sort_spec(self), limit = size + 1 },
    store.session)
  if not docs then return nil, e, c, d end
  local more = #docs > size
  if more then docs[#docs] = nil end
  local nexttok
  if more then
    local last = docs[#docs]
    local values = {}
    for i, k in ipairs(order) do
      local v = last[k[1]]
      values[i] = v == nil and null or v
    end
    nexttok = token_for(self, qfp, values, last._id)
  end
  local items
  items, e, c, d = store:load(self.T, docs)
  if not items then return nil, e, c, d end
  return { items = items, next = nexttok }
end

M.Query = Query
M.after = after   -- for the unit spec: the keyset condition of a page
return M
