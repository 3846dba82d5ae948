-- mongostore.records - a store of immutable record graphs on the document API: record
-- types (define), opening a store (transaction modes, concerns, indexes, fingerprints),
-- save, fetch, replace and history, queries and keyset pages, store:transaction and info.
-- The parts live in mongostore.records.{canon,wire,lease,save,query} (and fsck, fingerprint).
local core = require "mongostore.core"
local contract = require "mongostore.contract"
local mquery = require "mongostore.query"
local canon = require "mongostore.records.canon"
local wire = require "mongostore.records.wire"
local lease = require "mongostore.records.lease"
local save = require "mongostore.records.save"
local rquery = require "mongostore.records.query"

local type, error, pairs, ipairs, tostring, setmetatable, pcall, select, rawequal = type, error, pairs, ipairs,
  tostring, setmetatable, pcall, select, rawequal
local format, concat = string.format, table.concat
local unpack = table.unpack or unpack  -- luacheck: ignore 143
local fail, driver = wire.fail, wire.driver
local array, null = core.array, core.null

local M = {}
M.Q = mquery.Q
-- A filter written as code (operators and all) for rq:where; the same mark as model.trusted.
M.trusted = mquery.trusted

-- ------------------------------------------------------------ define

local TypeMeta = {
  __tostring = function(T) return "record type " .. T.name end,
}

local DEFINE_KEYS = { name = true, fields = true, children = true, refs = true, dedup = true, indexes = true }
local DEDUP = { content = true, value = true, none = true }

--- records.define{ name =, fields =, children =, refs =, dedup = "content" | "value" | "none", indexes = } -> type
function M.define(spec)
  if type(spec) ~= "table" then error("define: spec must be a table, got " .. type(spec), 2) end
  for k in pairs(spec) do
    if not DEFINE_KEYS[k] then error("define: unknown key " .. tostring(k), 2) end
  end
  local name = spec.name
  if type(name) ~= "string" or not name:match("^[%a][%w_%-]*$") or #name > 100 then
    error("define: name must be letters, digits, _ and -, starting with a letter", 2)
  end
  local dedup = spec.dedup or "content"
  if not DEDUP[dedup] then
    error("define: dedup must be \"content\", \"value\" or \"none\", got " .. tostring(dedup), 2)
  end
  local T = canon.compile_shape(spec, "define " .. name, true)
  T.name, T.dedup, T.decl, T.__record_type = name, dedup, spec, true
  local indexes = {}
  if spec.indexes ~= nil then
    if type(spec.indexes) ~= "table" then error("define: indexes must be a list of field lists", 2) end
    for i, ix in ipairs(spec.indexes) do
      if type(ix) ~= "table" or #ix == 0 then
        error(format("define: indexes[%d] must be a list of field names", i), 2)
      end
      local keys = {}
      for j, f in ipairs(ix) do
        local fname, dir = f, 1
        if type(f) == "table" then fname, dir = f[1], f[2] or 1 end
        if type(fname) ~= "string" or not T.kinds[fname] or (dir ~= 1 and dir ~= -1) then
          error(format("define: indexes[%d][%d] must name a declared field (or { field, 1 | -1 })", i, j), 2)
        end
        keys[j] = { fname, dir }
      end
      indexes[i] = keys
    end
  end
  T.indexes = indexes
  T.shape = canon.describe(T)
  return setmetatable(T, TypeMeta)
end

--- records.optimade(rs, T, filter, opts) -> rows | page | nil, message, "invalid": an OPTIMADE filter over T
function M.optimade(rs, T, filter, opts)
  return require("mongostore.records.optimade").search(rs, T, filter, opts)
end

function M.is_type(x) return type(x) == "table" and rawequal(getmetatable(x), TypeMeta) end

-- ------------------------------------------------------------ the store

local Store = {}
Store.__index = Store
Store.__name = "mongostore.records.Store"
Store.__tostring = function(s) return format("records store %s (%s)", s.prefix, s.mode) end

-- records.open's signature (mongostore.contract). Its options are the
-- program's: a value it cannot take raises too. test_hooks and clock are the
-- specs' own (documented as such).
contract.kind("mongostore.Database", function(v) local t = type(v) return t == "userdata" or t == "table" end,
  "a Database")
local OPEN = contract.define("records.open", {
  { "db", "mongostore.Database" },
  { "opts", "table", fields = {
      types = { "table", required = true,
                check = function(v) return #v == 0 and "must be a non-empty list of types" or nil end },
      prefix = "string", transactions = { "string", one_of = { "auto", "require", "never" } },
      store_timestamps = "boolean", timestamp_resolution = { "integer", min = 1, max = 1000000000 },
      upgrade = "boolean", clock_regression_grace = "boolean", allow_clock_regression = "boolean",
      -- a lease of no length (or a negative one) is expired as it is written,
      -- so fsck would take a live writer for a dead one; an endless one never
      -- lets a dead writer go
      lease_ttl = { "number", gt = 0, lt = math.huge }, fsck_wait = { "number", min = 0 }, log = "function",
      write_concern = "table", read_concern = "table",
      test_hooks = "table", clock = "function" } },
})

local function default_log(level, msg)
  io.stderr:write("mongostore.records: ", level, ": ", msg, "\n")
end

-- The types and every type their refs reach.
local function closure(list)
  local by_name, ordered = {}, {}
  local function add(T, from)
    if not M.is_type(T) then error(format("open: %s is not a record type (records.define)", from), 4) end
    local have = by_name[T.name]
    if have then
      if have ~= T then error(format("open: two different types are named %s", T.name), 4) end
      return
    end
    by_name[T.name] = T
    ordered[#ordered + 1] = T
    for rname, r in pairs(T.refs) do add(r.type, T.name .. ".refs." .. rname) end
  end
  for i, T in ipairs(list) do add(T, "types[" .. i .. "]") end
  return by_name, ordered
end

local function index(coll, keys, o, what)
  local ok, e, c, d = coll:create_index(keys, o)
  if not ok then return driver("records.open: index " .. what, e, c, d) end
  return true
end

-- The collections' indexes: the content id (unique where dedup needs it),
-- the lineage, the timestamp and the declared ones, each with the sid last.
local function make_indexes(store, T)
  local coll, e, c, d = store.db:collection(store.colls[T.name])
  if not coll then return driver("records.open: collection " .. store.colls[T.name], e, c, d) end
  local ok
  ok, e, c, d = index(coll, { { "_cid", 1 } }, { unique = T.dedup ~= "none", name = "_cid" }, T.name .. "._cid")
  if not ok then return nil, e, c, d end
  ok, e, c, d = index(coll, { { "_lin", 1 }, { "_id", 1 } }, { name = "_lin" }, T.name .. "._lin")
  if not ok then return nil, e, c, d end
  if store.ts.enabled then
    ok, e, c, d = index(coll, { { "_ts", 1 }, { "_id", 1 } }, { name = "_ts" }, T.name .. "._ts")
    if not ok then return nil, e, c, d end
  end
  for i, keys in ipairs(T.indexes) do
    local k, names = {}, {}
    for j, p in ipairs(keys) do k[j] = { p[1], p[2] }; names[j] = p[1] end
    k[#k + 1] = { "_id", 1 }
    ok, e, c, d = index(coll, k, { name = "by_" .. concat(names, "_") }, T.name .. ".indexes[" .. i .. "]")
    if not ok then return nil, e, c, d end
  end
  return true
end

-- The key that signs page cursors: made once per store, kept in _meta.
local function page_key(store)
  local doc, e, c, d = store.wire:find_and_modify(store.meta, { _id = "page_key" },
    { ["$setOnInsert"] = { key = canon.hex(core.random_bytes(32)) } }, true, nil)
  if type(doc) ~= "table" then
    -- two opens upserting at once: one of them finds the other's
    if doc == nil and c ~= "duplicate" then return nil, e, c, d end
    doc, e, c, d = store.wire:find_one(store.meta, { _id = "page_key" }, nil, nil)
    if doc == nil then return nil, e, c, d end
    if not doc then return fail("server", "records.open: the page key could not be made") end
  end
  return doc.key
end

-- The highest timestamp stored: the clock guard starts from it.
local function seed_clock(store)
  local best
  for _, T in ipairs(store.type_list) do
    local doc, e, c, d = store.wire:find_one(store.colls[T.name], { _ts = { ["$exists"] = true } },
      { sort = { { "_ts", -1 } }, projection = { _ts = 1 } }, nil)
    if doc == nil then return nil, e, c, d end
    if doc and type(doc._ts) == "number" and (not best or doc._ts > best) then best = doc._ts end
  end
  if best then store.ts.hwm_ns = best * store.ts.resolution end
  return true
end

local function fingerprint_check(store, upgrade)
  local okreq, fp = pcall(require, "mongostore.records.fingerprint")
  if not okreq then
    if tostring(fp):find("module 'mongostore.records.fingerprint' not found", 1, true) then return true end
    error(fp, 0)
  end
  local ok, e, c, d = fp.check(store, store.type_list, { upgrade = upgrade })
  if not ok then return nil, tostring(e), c or "invalid", d end
  return true
end

--- records.open(db, opts) -> store; or nil, err, code

-- The store's mode from the server's answer and the caller's wish: ->
-- mode, why (degraded), or nil, err, "unavailable".
local function open_mode(info, tmode)
  if tmode == "never" then return "degraded", "transactions = \"never\"" end
  if info.transactions then return "transactions" end
  local why = info.replica_set and "the server has no transactions" or
    "the server is a standalone (not a replica set), which has no multi-document transactions"
  if tmode == "require" then
    return fail("unavailable", "records.open: transactions = \"require\", but " .. why, { reason = why })
  end
  return "degraded", why
end

-- What open prepares on the server: the collections, their indexes, the
-- page key, the schema fingerprint and the store clock. -> true or nil, err...
local function prepare_store(store, db, ordered, opts)
  local e, c, d
  for _, T in ipairs(ordered) do
    local cname = store.prefix .. T.name
    local coll
    coll, e, c, d = db:collection(cname)
    if not coll then return driver("records.open: collection " .. cname, e, c, d) end
    store.colls[T.name] = cname
  end
  local ok
  for _, T in ipairs(ordered) do
    ok, e, c, d = make_indexes(store, T)
    if not ok then return nil, e, c, d end
  end
  local key
  key, e, c, d = page_key(store)
  if not key then return nil, e, c, d end
  store.page_key = key
  ok, e, c, d = fingerprint_check(store, opts.upgrade == true)
  if not ok then return nil, e, c, d end
  if store.ts.enabled then
    ok, e, c, d = seed_clock(store)
    if not ok then return nil, e, c, d end
  end
  return true
end

function M.open(db, opts)
  local bad = OPEN:check(db, opts)
  if bad then error(bad, 2) end
  local tmode, resolution = opts.transactions or "auto", opts.timestamp_resolution or 1000
  local by_name, ordered = closure(opts.types)
  local prefix = opts.prefix or "records."
  local info, e, c, d = db:info()
  if not info then return driver("records.open", e, c, d) end
  local mode, why, code, detail = open_mode(info, tmode)
  if not mode then return nil, why, code, detail end
  local wc = opts.write_concern or { w = "majority", j = true }
  local rc = opts.read_concern or { level = "majority" }
  local store = setmetatable({
    db = db, prefix = prefix, mode = mode, types = by_name, type_list = ordered, colls = {},
    meta = prefix .. "_meta", counters = prefix .. "_counters",
    wire = wire.new(db, wc, rc), max_bson_size = info.max_bson_size or 16 * 1024 * 1024,
    timestamp_resolution = resolution,
    ts = { enabled = opts.store_timestamps ~= false, resolution = resolution,
           grace = opts.clock_regression_grace ~= false, allow = opts.allow_clock_regression == true,
           clock = opts.clock },
    hooks = opts.test_hooks, tx_opts = { read_concern = rc, write_concern = wc },
    log = opts.log or default_log, closed = false,
  }, Store)
  local ok
  ok, e, c, d = prepare_store(store, db, ordered, opts)
  if not ok then return nil, e, c, d end
  store.lease = lease.new(store.wire, store.meta, { ttl = opts.lease_ttl, fsck_wait = opts.fsck_wait })
  store.token = store.lease.token
  if mode == "degraded" then
    store.degraded_reason = why
    store.log("warning", format("store %s opened in degraded mode (%s): a graph save is not atomic, writes go "
      .. "bottom-up and a crash can leave unreachable records until fsck; store:transaction is unavailable",
      prefix, why))
  end
  return store
end

-- ------------------------------------------------------------ store methods

local function check_type(store, T, fn)
  if not M.is_type(T) then error(format("%s: T must be a record type, got %s", fn, type(T)), 3) end
  if store.types[T.name] ~= T then error(format("%s: %s is not one of this store's types", fn, T.name), 3) end
end

-- A sid as a caller (or a client, through JSON or a query string) gives it:
-- cast where exact, else invalid, the message naming its type only; nothing is sent.
local function sid_arg(fn, T, sid)
  local n = canon.cast_sid(sid)
  if n ~= nil then return n end
  return fail("invalid", format("%s %s: sid must be an integer (a number or its decimal text), got %s", fn, T.name,
    canon.got(sid)))
end

local function check_open(store, fn)
  if store.closed then return fail("closed", fn .. ": the store is closed") end
  return true
end

-- Stored documents of type T as records: fields read by their declared
-- types, refs fetched (one find per referenced type), store fields as _sid,
-- _cid, _ts, _lin, _prev, _next, _role.
function Store:load(T, docs, depth)
  depth = depth or 0
  local out = {}
  local want = {}   -- type name -> { T, sids, set }
  for _, doc in ipairs(docs) do
    for name, r in pairs(T.refs) do
      local v = doc[name]
      local list = r.many and (type(v) == "table" and v or {}) or { v }
      for _, sid in ipairs(list) do
        if sid ~= nil and sid ~= null then
          local w = want[r.type.name] or { T = r.type, sids = {}, set = {} }
          want[r.type.name] = w
          if not w.set[sid] then w.set[sid] = true; w.sids[#w.sids + 1] = sid end
        end
      end
    end
  end
  local loaded = {}
  if depth < 50 then
    for name, w in pairs(want) do
      local rdocs, e, c, d = self.wire:find(self.colls[name], { _id = { ["$in"] = array(w.sids) } }, nil, self.session)
      if not rdocs then return nil, e, c, d end
      local recs
      recs, e, c, d = self:load(w.T, rdocs, depth + 1)
      if not recs then return nil, e, c, d end
      local m = {}
      for _, rec in ipairs(recs) do m[rec._sid] = rec end
      loaded[name] = m
    end
  end
  for i, doc in ipairs(docs) do
    local rec = canon.read_doc(T, doc)
    for name, r in pairs(T.refs) do
      local m = loaded[r.type.name] or {}
      local v = doc[name]
      if r.many then
        local list = {}
        if type(v) == "table" then for j, sid in ipairs(v) do list[j] = m[sid] or sid end end
        rec[name] = list
      elseif v ~= nil and v ~= null then
        rec[name] = m[v] or v
      end
    end
    rec._sid, rec._cid, rec._ts, rec._lin = doc._id, doc._cid, doc._ts, doc._lin
    rec._prev, rec._next, rec._role = doc._prev, doc._next, doc._role
    out[i] = rec
  end
  return out
end

local function load_one(store, T, doc)
  local recs, e, c, d = store:load(T, { doc })
  if not recs then return nil, e, c, d end
  return recs[1]
end

--- store:save(T, record) -> sid
function Store:save(T, t)
  check_type(self, T, "save")
  local ok, e, c = check_open(self, "save")
  if not ok then return nil, e, c end
  return save.save(self, T, t, self.session, self.unit_ts)
end

--- store:fetch(T, sid) -> record, or nil, err, "not_found"
function Store:fetch(T, sid)
  check_type(self, T, "fetch")
  local e, c
  sid, e, c = sid_arg("fetch", T, sid)
  if sid == nil then return nil, e, c end
  local ok
  ok, e, c = check_open(self, "fetch")
  if not ok then return nil, e, c end
  local doc, d
  doc, e, c, d = self.wire:find_one(self.colls[T.name], { _id = sid }, nil, self.session)
  if doc == nil then return nil, e, c, d end
  if not doc then return fail("not_found", format("fetch %s: no record %s", T.name, tostring(sid))) end
  return load_one(self, T, doc)
end

--- store:fetch_by_content_id(T, cid) -> record (the lowest sid with it), or nil, err, "not_found"
function Store:fetch_by_content_id(T, cid)
  check_type(self, T, "fetch_by_content_id")
  -- a content id is 64 hex digits (any case: the stored one is lowercase); anything else is invalid
  if type(cid) ~= "string" or #cid ~= 64 or cid:find("%X") then
    return fail("invalid", format("fetch_by_content_id %s: cid must be a content id (64 hex digits), got %s",
      T.name, canon.got(cid)))
  end
  cid = cid:lower()
  local ok, e, c = check_open(self, "fetch_by_content_id")
  if not ok then return nil, e, c end
  local doc, d
  doc, e, c, d = self.wire:find_one(self.colls[T.name], { _cid = cid }, { sort = { { "_id", 1 } } }, self.session)
  if doc == nil then return nil, e, c, d end
  if not doc then
    return fail("not_found", format("fetch_by_content_id %s: no record with content id %s", T.name, cid))
  end
  return load_one(self, T, doc)
end

--- records.content_id(T, record) -> the content id save would give it (refs as records, not sids)
function M.content_id(T, t)
  if not M.is_type(T) then error("content_id: T must be a record type", 2) end
  local bad = canon.check_child(T, t, T.name)
  if bad then return fail("invalid", "content_id: " .. bad) end
  local function cid_of(RT, x)
    if type(x) ~= "table" then error("content_id: refs must be records (tables), not sids", 3) end
    if type(x._cid) == "string" and x._sid ~= nil then return x._cid end
    return (M.content_id(RT, x))
  end
  return canon.content_id(T, t, function(name, i)
    local r, v = T.refs[name], t[name]
    if r.many then
      if i == nil then return v and #v or 0 end
      return cid_of(r.type, v[i])
    end
    if v == nil or v == null then return nil end
    return cid_of(r.type, v)
  end)
end

--- store:replace(T, sid, record) -> the successor's sid
function Store:replace(T, sid, t)
  check_type(self, T, "replace")
  local e, c
  sid, e, c = sid_arg("replace", T, sid)
  if sid == nil then return nil, e, c end
  local ok
  ok, e, c = check_open(self, "replace")
  if not ok then return nil, e, c end
  if type(t) ~= "table" or rawequal(t, null) then
    return fail("invalid", format("replace %s: the record must be a table, got %s", T.name, canon.got(t)))
  end
  return save.replace(self, T, sid, t, self.session, self.unit_ts)
end

--- store:history(T, sid) -> the records of sid's lineage, oldest first
function Store:history(T, sid)
  check_type(self, T, "history")
  local e, c
  sid, e, c = sid_arg("history", T, sid)
  if sid == nil then return nil, e, c end
  local ok
  ok, e, c = check_open(self, "history")
  if not ok then return nil, e, c end
  local coll = self.colls[T.name]
  local doc, d
  doc, e, c, d = self.wire:find_one(coll, { _id = sid }, { projection = { _lin = 1 } }, self.session)
  if doc == nil then return nil, e, c, d end
  if not doc then return fail("not_found", format("history %s: no record %s", T.name, tostring(sid))) end
  local docs
  docs, e, c, d = self.wire:find(coll, { _lin = doc._lin }, { sort = { { "_id", 1 } } }, self.session)
  if not docs then return nil, e, c, d end
  -- the chain from the first record along _next (a successor a crash left
  -- unlinked is not part of the history)
  local by_sid = {}
  for _, x in ipairs(docs) do by_sid[x._id] = x end
  local chain, at, guard = {}, by_sid[doc._lin], 0
  while at and guard <= #docs do
    chain[#chain + 1] = at
    at = at._next ~= nil and by_sid[at._next] or nil
    guard = guard + 1
  end
  return self:load(T, chain)
end

--- store:searcher(opts) -> a searcher (mongostore.records.search): variables, conditions, outputs, results, pages
function Store:searcher(opts)
  return require("mongostore.records.search").new(self, opts)
end

--- store:query(T) -> a query (where, only_latest, as_of, order_by, all, count, page)
function Store:query(T)
  check_type(self, T, "query")
  return rquery.new(self, T)
end

-- A handle on the same store whose calls run in session s (store:transaction's fn gets it).
local function tx_handle(store, s, ts)
  return setmetatable({ session = s, unit_ts = ts }, { __index = store, __tostring = Store.__tostring })
end

local function pack(...) return { n = select("#", ...), ... } end

--- store:transaction(fn) -> true, fn's values; fn(tx) saves and reads through tx, all in one transaction
function Store:transaction(fn)
  if type(fn) ~= "function" then error("transaction: fn must be a function, got " .. type(fn), 2) end
  local ok, e, c = check_open(self, "transaction")
  if not ok then return nil, e, c end
  if self.session then
    return fail("invalid", "transaction: transactions do not nest (use the tx handle you were given)")
  end
  if self.mode ~= "transactions" then
    return fail("unavailable", "transaction: the store is in degraded mode (" .. tostring(self.degraded_reason)
      .. "): no multi-document transactions")
  end
  local result
  local r = pack(wire.transaction(self.db, "transaction", function(s)
    local okl, el, cl, dl = self.lease:check(s)
    if not okl then return nil, el, cl, dl end
    local ts, et, ct, dt = save.stamp(self)
    if self.ts.enabled and not ts then return nil, et, ct, dt end
    result = pack(fn(tx_handle(self, s, ts)))
    if result[1] == nil and result.n >= 2 then return nil, result[2], result[3], result[4] end
    return true
  end, self.tx_opts))
  if not r[1] then return nil, r[2], r[3], r[4] end
  return true, unpack(result, 1, result.n)
end

--- store:info() -> { mode = "transactions" | "degraded", ... }
function Store:info()
  return {
    mode = self.mode, prefix = self.prefix, reason = self.degraded_reason,
    types = (function() local t = {} for i, T in ipairs(self.type_list) do t[i] = T.name end return t end)(),
    store_timestamps = self.ts.enabled, timestamp_resolution = self.ts.resolution,
    writer = self.lease.token, commands = self.wire.commands, max_bson_size = self.max_bson_size,
    write_concern = self.wire.wc, read_concern = self.wire.rc,
  }
end

--- store:fsck{ repair =, collect_garbage =, force = } -> summary (mongostore.records.fsck)
function Store:fsck(opts)
  local ok, e, c = check_open(self, "fsck")
  if not ok then return nil, e, c end
  return require("mongostore.records.fsck").run(self, opts)
end

--- store:close(): releases the writer lease (so fsck need not wait for it); idempotent.
function Store:close()
  if self.closed then return true end
  self.closed = true
  return self.lease:release()
end

return M
