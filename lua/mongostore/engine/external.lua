-- mongostore.engine.external - external outbox entries (an emit with no
-- target) for an event loop that delivers them itself: claim_external,
-- renew_external while a handler runs, settle_external when it is done (ack,
-- or a per-entry backoff stored on the entry, or a dead letter). engine.lua
-- puts these methods on its Engine; relays.lua shares the backoff.
local ms = require "mongostore"
local contract = require "mongostore.contract"

local type, ipairs, tostring, error = type, ipairs, tostring, error
local format = string.format
local math_type = math.type or function(n) return type(n) == "number" and n % 1 == 0 and "integer" or "float" end

local M = {}

local Engine = {}
M.methods = Engine

-- The wait before an external entry's next try after its a-th failure:
-- 0.5 s doubled per failure up to 60 s, each drawn between half and all of
-- that (jitter, so that entries failed together do not come back together).
local BASE, CAP = 0.5, 60
function M.backoff(a)
  local full = BASE * 2 ^ (a - 1)
  if full > CAP then full = CAP end
  return full * (0.5 + 0.5 * math.random())
end

local function claim_key(e) return e.source_id .. "\0" .. e.token end

local function check_entry(fn, e, what)
  what = what or "entry"
  if type(e) ~= "table" then error(format("%s: %s must be a claimed entry (a table), got %s", fn, what, type(e)), 3) end
  if math_type(e.seq) ~= "integer" then error(format("%s: %s.seq must be an integer", fn, what), 3) end
  if type(e.source_id) ~= "string" or type(e.token) ~= "string" then
    error(format("%s: %s must come from claim_external (source_id and token)", fn, what), 3)
  end
end

-- engine:claim_external([limit = batch]) -> entries | nil, msg, code
-- Claims external entries whose wait (after a failed try) is over, whole
-- source documents at a time under the engine's lease, as the relays claim:
-- no other relay or loop gets them until the lease runs out. Each entry is
-- the outbox entry (seq, event, source_id, token, lease_until, tries when it
-- failed before) with claim_size, the entries its claim holds.
local CLAIM = contract.define("engine:claim_external", { { "limit", "integer?", min = 1 } })
local RENEW = contract.define("engine:renew_external", { { "entries", "table" } })
local SETTLE = contract.define("engine:settle_external", {
  { "entry", "table" }, { "ok", "boolean?" }, { "err", "any?" },
  { "opts", "table?", fields = { release = "boolean", log = "boolean" } },
})

function Engine:claim_external(limit)
  local bad = CLAIM:check(limit)
  if bad then return nil, bad, "invalid" end
  local entries, err, code = self.store:pending_outbox{ limit = limit or self.batch, lease = self.lease,
                                                        external = true }
  if not entries then return nil, "claim_external: " .. tostring(err), code end
  local sizes = {}
  for _, e in ipairs(entries) do
    local k = claim_key(e)
    sizes[k] = (sizes[k] or 0) + 1
  end
  for _, e in ipairs(entries) do
    local k = claim_key(e)
    e.claim_size = sizes[k]
    self.external_open:set(k, sizes[k])
  end
  return entries
end

-- engine:renew_external(entries) -> renewed, lost | nil, msg, code
-- Extends the lease of each claim the entries belong to (one update per
-- source document) to now + lease, while a handler still runs on them:
-- renewed counts the claims extended, lost lists the entries whose claim
-- ran out and passed on (another loop may deliver them too).
function Engine:renew_external(entries)
  RENEW:check(entries)
  local by_key, keys = {}, {}
  for i, e in ipairs(entries) do
    check_entry("engine:renew_external", e, "entries[" .. i .. "]")
    local k = claim_key(e)
    if not by_key[k] then
      by_key[k] = {}
      keys[#keys + 1] = k
    end
    local list = by_key[k]
    list[#list + 1] = e
  end
  local renewed, lost = 0, {}
  for _, k in ipairs(keys) do
    local list = by_key[k]
    local ok, until_or_err, code = self.store:renew_outbox(list[1].source_id, list[1].token, self.lease)
    if ok == nil then return nil, "renew_external: " .. tostring(until_or_err), code end
    if ok then
      renewed = renewed + 1
      for _, e in ipairs(list) do e.lease_until = until_or_err end
    else
      for _, e in ipairs(list) do lost[#lost + 1] = e end
    end
  end
  return renewed, ms.array(lost)
end

-- Whether settling e ends its claim: opts.release when given (a loop that
-- counts its claims itself, as mongostore.ngx does across thread VMs), else
-- when e is the last open entry of the claim claim_external made here.
local function ends_claim(self, e, release)
  local k = claim_key(e)
  local left = (self.external_open:get(k) or e.claim_size or 1) - 1
  if release ~= nil then left = release and 0 or left end
  if left <= 0 then
    self.external_open:set(k, nil)
    return true
  end
  self.external_open:set(k, left)
  return false
end


-- engine:settle_external(entry, ok[, err[, opts]]) -> result | nil, msg, code
-- After the handler: ok acks the entry (while the claim is still this
-- caller's); not ok counts a try on the entry itself, logs err, and stamps
-- the entry with its next try (backoff with jitter, 0.5 s doubling to 60 s),
-- or after max_attempts tries gives it up (to on_dead_letter and acked, else
-- logged and kept in outbox_failed: store:fail_outbox). The last entry settled of a claim gives the claim back, so what
-- waits on the document comes at once and a failed entry comes again after
-- its wait. result: { outcome = "delivered" | "retry" | "given_up", tries,
-- wait, retry_at, lost = true when the claim had passed on }.
-- opts: release (end the claim now, or keep it; default: the engine's own
-- count), log = false (the caller logs; result.message says it).
function Engine:settle_external(entry, ok, err, opts)
  check_entry("engine:settle_external", entry)
  SETTLE:check(entry, ok, err, opts)
  opts = opts or {}
  local store, release = self.store, ends_claim(self, entry, opts.release)
  local function failed(what, msg, code)
    return nil, format("settle_external %d: %s: %s", entry.seq, what, tostring(msg)), code
  end
  if ok then
    local done, aerr, acode
    if release then
      done, aerr, acode = store:ack_outbox_many{ { source_id = entry.source_id, token = entry.token,
                                                   seqs = ms.array{ entry.seq }, release = true } }
    else
      done, aerr, acode = store:ack_outbox(entry.seq, entry.token)
    end
    if not done then return failed("ack", aerr, acode) end
    return { outcome = "delivered" }
  end
  local why = err == nil and "no reason given" or tostring(err)
  local tries = (math_type(entry.tries) == "integer" and entry.tries or 0) + 1
  if tries >= self.max_attempts then
    local msg = format("outbox %d: %s (external) given up after %d tries: %s", entry.seq,
                       tostring(type(entry.event) == "table" and entry.event.kind), tries, why)
    local done, aerr, acode
    if self.on_dead_letter then
      self.on_dead_letter(entry, why)
      done, aerr, acode = store:ack_outbox(entry.seq, entry.token)
    else
      -- kept in its source's outbox_failed, for mongostore outbox --failed and --redeliver
      msg = msg .. "; kept as failed"
      if opts.log ~= false then self.log(msg) end
      done, aerr, acode = store:fail_outbox(entry, { error = tostring(why), attempts = tries })
    end
    if not done then return failed(self.on_dead_letter and "ack" or "keep as failed", aerr, acode) end
    if release then store:release_outbox(entry.source_id, entry.token) end
    return { outcome = "given_up", tries = tries, message = msg }
  end
  local wait = M.backoff(tries)
  local retry_at = ms.now() + wait
  local held, rerr, rcode = store:retry_outbox(entry.source_id, entry.token, entry.seq, retry_at, tries, release)
  if held == nil then return failed("retry", rerr, rcode) end
  local msg = format("outbox %d: external %s failed (try %d, next in %.1fs): %s", entry.seq,
                     tostring(type(entry.event) == "table" and entry.event.kind), tries, wait, why)
  if not held then msg = msg .. " (its claim had passed on)" end
  if opts.log ~= false then self.log(msg) end
  return { outcome = "retry", tries = tries, wait = wait, retry_at = retry_at, lost = not held or nil, message = msg }
end

return M
