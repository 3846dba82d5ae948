-- mongostore.webhook - signed webhooks for external events: an on_external
-- handler that POSTs each event as JSON to one URL, with the event id as its
-- idempotency key and an HMAC-SHA256 signature over the timestamp and the
-- body, so the receiver can check it came from here, unchanged and recent.
-- The POST needs cosockets (mongostore.ngx_http): use the handler in the
-- nginx event loop (msngx.start_worker{ deliver = ... }). sign and verify
-- are plain Lua on the core's HMAC and work anywhere.
local core = require "mongostore.core"

local type, tostring, tonumber, pairs, format = type, tostring, tonumber, pairs, string.format

local M = {}

M.SIGNATURE_HEADER = "X-Mongostore-Signature"
M.TIMESTAMP_HEADER = "X-Mongostore-Timestamp"
M.IDEMPOTENCY_HEADER = "Idempotency-Key"

local hex = require("mongostore.util").hex

-- sign(secret, timestamp, body) -> "sha256=<64 hex>": the HMAC-SHA256 of
-- "<timestamp>.<body>" under secret.
function M.sign(secret, timestamp, body)
  if type(secret) ~= "string" or secret == "" then error("webhook.sign: secret must be a non-empty string", 2) end
  if type(body) ~= "string" then error("webhook.sign: body must be a string", 2) end
  return "sha256=" .. hex(core.hmac_sha256(secret, tostring(timestamp) .. "." .. body))
end

-- Compares two strings in time that does not depend on where they differ
-- (core.same_bytes: libcrypto's CRYPTO_memcmp).
local function same(a, b)
  return type(a) == "string" and type(b) == "string" and core.same_bytes(a, b)
end

-- verify(secret, timestamp, body, signature[, { now = , tolerance = 300 }])
-- -> true, or false, why: the signature is this body's under secret, and
-- the timestamp is within tolerance seconds of now (a replayed old request
-- is refused).
function M.verify(secret, timestamp, body, signature, opts)
  opts = opts or {}
  local ts = tonumber(timestamp)
  if not ts then return false, "no timestamp" end
  local now = opts.now or core.now()
  if math.abs(now - ts) > (opts.tolerance or 300) then return false, "timestamp outside the tolerance" end
  if not same(M.sign(secret, timestamp, body), signature) then return false, "signature mismatch" end
  return true
end

-- The body of an event's POST: its id, kind, data, the execution that
-- emitted it and when.
function M.body(entry)
  local ev = entry.event or {}
  return core.json_encode{
    id = ev.id, kind = ev.kind, data = ev.data or {}, source_id = entry.source_id,
    created_time = ev.created_time, seq = entry.seq,
  }
end

local CONFIG = { url = true, secret = true, timeout = true, concurrency = true, verify = true, headers = true }

-- check(cfg) -> cfg, or raises naming what is wrong: url (http or https),
-- secret (a non-empty string), timeout (seconds > 0, default 10),
-- concurrency (integer >= 1, default 16), verify (TLS, default true),
-- headers (extra ones).
function M.check(cfg, fn)
  fn = fn or "deliver"
  if type(cfg) ~= "table" then error(fn .. " must be a table { url =, secret = }", 3) end
  for k in pairs(cfg) do
    if not CONFIG[k] then error(format("%s: unknown option '%s'", fn, tostring(k)), 3) end
  end
  local http = require "mongostore.ngx_http"
  local u, uerr = http.parse_url(cfg.url)
  if not u then error(fn .. ".url: " .. uerr, 3) end
  if type(cfg.secret) ~= "string" or #cfg.secret < 16 then
    error(fn .. ".secret must be a string of at least 16 bytes", 3)
  end
  local v = cfg.timeout
  if v ~= nil and (type(v) ~= "number" or v ~= v or v <= 0 or v == math.huge) then
    error(fn .. ".timeout must be a number of seconds > 0", 3)
  end
  local c = cfg.concurrency
  if c ~= nil and (type(c) ~= "number" or c % 1 ~= 0 or c < 1) then
    error(fn .. ".concurrency must be an integer >= 1", 3)
  end
  if cfg.verify ~= nil and type(cfg.verify) ~= "boolean" then error(fn .. ".verify must be a boolean", 3) end
  if cfg.headers ~= nil and type(cfg.headers) ~= "table" then error(fn .. ".headers must be a table", 3) end
  return cfg
end

-- handler(cfg) -> fn(entry) -> true | nil, err: the on_external that POSTs
-- each entry. A 2xx answer is delivered; anything else (a 4xx or 5xx, a
-- refused connection, a timeout, a failed TLS check) is a failure the
-- caller retries with backoff.
function M.handler(cfg)
  M.check(cfg)
  local http = require "mongostore.ngx_http"
  return function(entry)
    local body = M.body(entry)
    local ts = format("%d", math.floor(core.now()))
    local headers = {
      ["Content-Type"] = "application/json",
      [M.IDEMPOTENCY_HEADER] = entry.event and entry.event.id or tostring(entry.seq),
      [M.TIMESTAMP_HEADER] = ts,
      [M.SIGNATURE_HEADER] = M.sign(cfg.secret, ts, body),
    }
    for k, v in pairs(cfg.headers or {}) do headers[k] = v end
    local res, err, code = http.request{ url = cfg.url, method = "POST", headers = headers, body = body,
                                   timeout = cfg.timeout or 10, verify = cfg.verify ~= false }
    if not res then return nil, err, code end
    if res.status < 200 or res.status > 299 then
      return nil, format("%s answered %d", cfg.url, res.status), "server"
    end
    return true
  end
end

return M
