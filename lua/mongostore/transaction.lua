-- mongostore.transaction - db:transaction(fn, opts): a session, a transaction,
-- fn(session) run protected, the commit, and the retry loop the MongoDB
-- drivers' specification describes, all in Lua (the core only starts, commits
-- and aborts: a Lua error never unwinds through libmongoc's frames).
local core = require "mongostore.core"

local M = {}

local now, sleep = core.now, core.sleep
local format = string.format
local unpack = table.unpack or unpack  -- luacheck: ignore 143

local OPTS = { timeout = true, read_concern = true, write_concern = true, read_preference = true,
               max_commit_time_ms = true }
M.DEFAULT_TIMEOUT = 120

-- The database handles running a transaction right now (weak: a handle
-- dropped while its transaction runs is not kept for it).
local running = setmetatable({}, { __mode = "k" })

local function has_label(detail, label)
  if type(detail) ~= "table" or type(detail.labels) ~= "table" then return false end
  for _, l in ipairs(detail.labels) do
    if l == label then return true end
  end
  return false
end

local function is_transient(code, detail)
  return code == "transient" or has_label(detail, "TransientTransactionError")
end

local function pack(...) return { n = select("#", ...), ... } end

-- A short random pause before fn runs again, so two transactions that
-- conflicted do not meet again at once (growing with the attempts, at most 0.1 s).
local function backoff(attempts, deadline)
  local pause = math.min(0.1, 0.005 * 2 ^ math.min(attempts, 5)) * math.random()
  if now() + pause < deadline then sleep(pause) end
end

local function check_opts(fn, opts)
  if type(fn) ~= "function" then error("transaction: fn must be a function, got " .. type(fn), 3) end
  if opts == nil then return M.DEFAULT_TIMEOUT, nil end
  if type(opts) ~= "table" then error("transaction: opts must be a table, got " .. type(opts), 3) end
  for k in pairs(opts) do
    if not OPTS[k] then error(format("transaction: unknown option %s", tostring(k)), 3) end
  end
  local timeout = opts.timeout
  if timeout == nil then
    timeout = M.DEFAULT_TIMEOUT
  elseif type(timeout) ~= "number" or timeout ~= timeout or timeout <= 0 then
    error("transaction: opts.timeout must be a positive number of seconds, got " .. tostring(timeout), 3)
  end
  local topts = { read_concern = opts.read_concern, write_concern = opts.write_concern,
                  read_preference = opts.read_preference, max_commit_time_ms = opts.max_commit_time_ms }
  return timeout, next(topts) ~= nil and topts or nil
end

-- Giving up: code timeout, the last failure's message, and its detail with
-- the last failure's own code as detail.cause (its labels kept: one of
-- UnknownTransactionCommitResult says the transaction may have committed).
local function gave_up(timeout, attempts, msg, code, detail)
  local d = {}
  if type(detail) == "table" then
    for k, v in pairs(detail) do d[k] = v end
  end
  d.cause = code
  return format("transaction: gave up after %g s (%d attempts): %s", timeout, attempts, tostring(msg)),
    "timeout", d
end

-- One attempt: start, fn, commit (the commit alone retried on
-- UnknownTransactionCommitResult). Returns "done", fn's values...;
-- "retry", msg, code, detail (transient: fn runs again); "unknown", ... (the
-- commit's outcome still unknown at the deadline); "fail", msg, code, detail.
local function attempt(s, fn, topts, deadline)
  local ok, msg, code, detail = s:start_transaction(topts)
  if not ok then return "fail", msg, code, detail end
  local r = pack(pcall(fn, s))
  -- The session knows whether an operation of this transaction failed with
  -- TransientTransactionError (the server aborted it, or may have): then the
  -- transaction cannot commit whatever fn did with the failure, handed it on,
  -- raised it (assert), or raised something else because of it.
  local failed = s:transaction_failed()
  if not r[1] then
    if s:in_transaction() then s:abort() end
    local raised = "transaction: fn raised: " .. tostring(r[2])
    if failed then return "retry", raised, "transient", { error = r[2] } end
    -- a Lua error with no failed operation behind it is the code's: never retried
    return "fail", raised, "invalid", { error = r[2] }
  end
  if r[2] == nil and r[3] ~= nil then
    -- fn returned nil, msg, code[, detail]: abort with it (and run again when transient)
    if s:in_transaction() then s:abort() end
    if failed or is_transient(r[4], r[5]) then return "retry", r[3], r[4], r[5] end
    return "fail", r[3], r[4], r[5]
  end
  while true do
    ok, msg, code, detail = s:commit()
    if ok then return "done", unpack(r, 2, r.n) end
    if has_label(detail, "UnknownTransactionCommitResult") then
      -- it may have committed: only the commit is tried again (libmongoc
      -- raises its write concern to majority for the retry)
      if now() >= deadline then return "unknown", msg, code, detail end
      sleep(0.01)
    elseif is_transient(code, detail) then
      return "retry", msg, code, detail
    else
      return "fail", msg, code, detail
    end
  end
end

local function loop(s, fn, topts, timeout, deadline)
  local attempts = 0
  while true do
    attempts = attempts + 1
    local r = pack(attempt(s, fn, topts, deadline))
    if r[1] == "unknown" then
      return pack("fail", gave_up(timeout, attempts, "the commit's outcome is unknown: " .. tostring(r[2]), r[3], r[4]))
    end
    if r[1] ~= "retry" then return r end
    if now() >= deadline then return pack("fail", gave_up(timeout, attempts, r[2], r[3], r[4])) end
    backoff(attempts, deadline)
  end
end

-- db:transaction(fn, { timeout = 120, read_concern =, write_concern =,
--   read_preference =, max_commit_time_ms = })
--   --> true, fn's values... | nil, msg, code[, detail]
function M.run(db, fn, opts)
  local timeout, topts = check_opts(fn, opts)
  if running[db] then
    return nil, "transaction: a transaction is already running on this database handle "
      .. "(db:transaction inside db:transaction)", "invalid"
  end
  local info, msg, code = db:info()
  if not info then return nil, "transaction: " .. tostring(msg), code end
  if not info.transactions then
    return nil, "transaction: the server does not support transactions "
      .. "(a replica set or a sharded cluster does)", "unavailable"
  end
  local s
  s, msg, code = db:session()
  if not s then return nil, msg, code end
  running[db] = true
  -- protected, so that a wrong option type (start_transaction raises) still
  -- ends the session and frees the handle before the error goes on
  local done, r = pcall(loop, s, fn, topts, timeout, now() + timeout)
  running[db] = nil
  s:close()
  if not done then error(r, 0) end
  if r[1] == "done" then return true, unpack(r, 2, r.n) end
  return nil, r[2], r[3], r[4]
end

return M
