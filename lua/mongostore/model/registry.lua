-- mongostore.model.registry - registries that bind models to a database
-- (creating their indexes), and their transactions with in-memory rollback.
local core = require "mongostore.core"
local query = require "mongostore.query"

local type, error, pairs, ipairs, select, setmetatable, getmetatable, tostring, pcall =
  type, error, pairs, ipairs, select, setmetatable, getmetatable, tostring, pcall
local format = string.format
local unpack = table.unpack or unpack  -- luacheck: ignore 143
local null = core.null
local to_filter = query.filter

local P_shared = require "mongostore.model.shared"
local Session = P_shared.Session
local check_opts = P_shared.check_opts
local driver_fail = P_shared.driver_fail
local fail = P_shared.fail
local journal_rollback = P_shared.journal_rollback
local journals = P_shared.journals
local new_journal = P_shared.new_journal
local rename = P_shared.rename

-- ------------------------------------------------------------ registries

local Registry = {}
Registry.__index = Registry
Registry.__name = "mongostore.model.Registry"

-- A model's declared index, as create_index takes it. A unique index of a
-- soft-deleting model is partial: it holds only the documents whose
-- deleted_at is missing or null ({ deleted_at = null } matches both and is an
-- equality, which partial filters allow, where $exists: false is not), so a
-- deleted document never blocks a live one with the same key.
local function index_args(C, ix)
  local keys = {}
  for i, pair in ipairs(ix.keys) do keys[i] = { rename(pair[1]), pair[2] } end
  if #keys == 0 then for k, v in pairs(ix.keys) do keys[rename(k)] = v end end
  local o = { unique = ix.unique, name = ix.name, sparse = ix.sparse, expire_after = ix.expire_after }
  local pf = ix.partial_filter
  if pf ~= nil then pf = to_filter(pf, rename) end
  if ix.unique and C._soft and not ix.include_deleted then
    pf = pf or {}
    if pf[C._soft] == nil then pf[C._soft] = null end
  end
  o.partial_filter = pf
  return keys, o
end

--- model.registry(db, { Model... }) -> a registry, the declared indexes created; or nil, err.
local function registry(db, models, opts)
  if type(db) ~= "userdata" and type(db) ~= "table" then
    error("model.registry: db must be a Database, got " .. type(db), 2)
  end
  if type(models) ~= "table" then error("model.registry: models must be a list of models, got " .. type(models), 2) end
  check_opts("model.registry", opts, { indexes = true })
  local reg = setmetatable({ db = db, models = {}, depth = 0 }, Registry)
  for i, C in ipairs(models) do
    if type(C) ~= "table" or getmetatable(C) ~= C._meta then
      error(format("model.registry: models[%d] is not a model", i), 2)
    end
    local coll, msg, code, detail = db:collection(C.collection)
    if not coll then return driver_fail(msg, code, detail) end
    C._coll, C._db, C._registry = coll, db, reg
    reg.models[C.name] = C
    if not (opts and opts.indexes == false) then
      for _, ix in ipairs(C._indexes) do
        local keys, o = index_args(C, ix)
        local ok
        ok, msg, code, detail = coll:create_index(keys, o)
        if not ok then
          return driver_fail(format("model.registry: index on %s: %s", C.collection, tostring(msg)), code, detail)
        end
      end
    end
  end
  return reg
end

local TX_OPTS = { timeout = true, read_concern = true, write_concern = true, read_preference = true,
                  max_commit_time_ms = true, independent = true }

-- A stand-in for the database handle, so an independent transaction is not
-- taken for one nested in the handle's running one.
local function handle_for(db)
  return setmetatable({}, { __index = {
    info = function() return db:info() end,
    session = function() return db:session() end,
  } })
end

local function pack(...) return { n = select("#", ...), ... } end

--- registry:transaction(fn, opts) -> true, fn's values; or nil, err. fn(tx) runs again on transient
-- errors, after every document it wrote is put back as it was in memory; on abort too.
function Registry:transaction(fn, opts)
  if type(fn) ~= "function" then error("registry:transaction: fn must be a function, got " .. type(fn), 2) end
  check_opts("registry:transaction", opts, TX_OPTS)
  local independent = opts and opts.independent
  if self.depth > 0 and not independent then
    return fail("transaction", "transaction: transactions do not nest (MongoDB has no savepoints): pass the "
      .. "outer transaction's session on, or give { independent = true } for a separate commit")
  end
  local topts
  if opts then
    topts = {}
    for k, v in pairs(opts) do if k ~= "independent" then topts[k] = v end end
  end
  local journal = new_journal()
  local raised, raised_set = nil, false
  local function attempt(s)
    journal_rollback(journal)   -- the last attempt's writes, undone in memory
    raised, raised_set = nil, false
    journals[s] = journal
    local r = pack(pcall(fn, s))
    if not r[1] then
      -- raised (a failure given to assert among them): db:transaction runs fn
      -- again when an operation of the transaction failed transiently
      raised, raised_set = r[2], true
      error(r[2], 0)
    end
    -- nil, message, code, detail from a model call: handed on as it is, the
    -- driver's labels in detail, so a transient one is retried
    return unpack(r, 2, r.n)
  end
  local target = independent and handle_for(self.db) or self.db
  self.depth = self.depth + 1
  local res = pack(pcall(self.db.transaction, target, attempt, topts))
  self.depth = self.depth - 1
  local n = res.n
  if not res[1] then
    journal_rollback(journal)
    error(res[2], 0)
  end
  if res[2] == true then
    return true, unpack(res, 3, n)
  end
  journal_rollback(journal)
  if raised_set then error(raised, 0) end
  return driver_fail(res[3], res[4], res[5])
end

--- registry:session() -> a session for transactions run by hand (no retry): start_transaction, commit, abort.
function Registry:session()
  local raw, msg, code, detail = self.db:session()
  if not raw then return driver_fail(msg, code, detail) end
  return setmetatable({ raw = raw, session = raw }, Session)
end

function Session:start_transaction(opts)
  local ok, msg, code, detail = self.raw:start_transaction(opts)
  if not ok then return driver_fail(msg, code, detail) end
  journals[self.raw] = new_journal()
  return true
end

function Session:commit()
  local ok, msg, code, detail = self.raw:commit()
  if not ok then return driver_fail(msg, code, detail) end
  journals[self.raw] = nil
  return true
end

function Session:abort()
  local journal = journals[self.raw]
  local ok, msg, code, detail = self.raw:abort()
  if journal then journal_rollback(journal); journals[self.raw] = nil end
  if not ok then return driver_fail(msg, code, detail) end
  return true
end

function Session:in_transaction() return self.raw:in_transaction() end

function Session:close()
  local journal = journals[self.raw]
  if journal and self.raw:in_transaction() then journal_rollback(journal) end
  journals[self.raw] = nil
  return self.raw:close()
end
Session.__close = Session.close
Session.__gc = nil

function Registry:model(name) return self.models[name] end

return {
  registry = registry,
  Registry = Registry,
  index_args = index_args,
  TX_OPTS = TX_OPTS,
  handle_for = handle_for,
  pack = pack,
}
