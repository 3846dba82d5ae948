-- mongostore.ngx_access - who may call an HTTP API served by nginx: bearer
-- tokens (read-only and read-write), and for requests that change state a
-- JSON content type and an allowed Origin, so that no web page can post to
-- the API cross-site. The decisions are plain Lua (access.new, a:decide);
-- a:check applies them to the current nginx request and ends it with a
-- 401/403/415 whose body says no more than the status.
local core = require "mongostore.core"
local contract = require "mongostore.contract"

local type, ipairs, tostring, error, setmetatable = type, ipairs, tostring, error, setmetatable
local lower = string.lower

local M = {}

-- The bodies of the refusals: nothing about which token, header or origin.
M.BODIES = {
  [401] = '{"error":"unauthorized"}',
  [403] = '{"error":"forbidden"}',
  [415] = '{"error":"unsupported media type"}',
}

local Access = {}
Access.__index = Access

-- digests compared in a time that does not depend on where they differ
local same_digest = core.same_bytes

local function token_list(list, what)
  if list == nil then return {} end
  local out = {}
  for i, t in ipairs(list) do
    if type(t) ~= "string" or t == "" then
      error("access.new: opts." .. what .. "[" .. i .. "] must be a non-empty string", 3)
    end
    out[#out + 1] = t
  end
  return out
end

-- An origin as browsers send it: scheme://host[:port], lower case, no slash.
local function normal_origin(o)
  return (lower(o):gsub("/+$", ""))
end

-- access.new{ read_tokens = {...}, write_tokens = {...}, allowed_origins = {...} }
-- A write token may read too. Tokens are kept only as HMAC-SHA256 digests
-- under a key made here, so every comparison is of 32 bytes whatever the
-- lengths of what was sent and what is configured.
local NEW = contract.define("access.new", {
  { "opts", "table", fields = { read_tokens = "table", write_tokens = "table", allowed_origins = "table" } },
})

function M.new(opts)
  NEW:check(opts)
  local self = setmetatable({ key = core.random_bytes(32), read = {}, write = {}, origins = {} }, Access)
  for _, t in ipairs(token_list(opts.read_tokens, "read_tokens")) do
    self.read[#self.read + 1] = core.hmac_sha256(self.key, t)
  end
  for _, t in ipairs(token_list(opts.write_tokens, "write_tokens")) do
    self.write[#self.write + 1] = core.hmac_sha256(self.key, t)
  end
  for i, o in ipairs(token_list(opts.allowed_origins, "allowed_origins")) do
    if not o:match("^https?://[^/]+/?$") then
      error("access.new: allowed_origins[" .. i .. "] must be scheme://host[:port]", 2)
    end
    self.origins[normal_origin(o)] = true
  end
  return self
end

local function split(s)
  local out = {}
  for part in (s or ""):gmatch("[^,]+") do
    part = part:match("^%s*(.-)%s*$")
    if part ~= "" then out[#out + 1] = part end
  end
  return out
end

-- access.from_env([getenv]) reads MONGOSTORE_API_READ_TOKENS,
-- MONGOSTORE_API_WRITE_TOKENS and MONGOSTORE_API_ORIGINS (comma-separated).
-- With no token configured every request is refused: an API nobody set a
-- token for is closed, not open.
function M.from_env(getenv)
  getenv = getenv or os.getenv
  return M.new{
    read_tokens = split(getenv("MONGOSTORE_API_READ_TOKENS")),
    write_tokens = split(getenv("MONGOSTORE_API_WRITE_TOKENS")),
    allowed_origins = split(getenv("MONGOSTORE_API_ORIGINS")),
  }
end

-- "read", "write" or nil: what the token allows. Every configured digest is
-- compared, whichever matches.
function Access:token_kind(token)
  if type(token) ~= "string" or token == "" then return nil end
  local d = core.hmac_sha256(self.key, token)
  local r, w = false, false
  for _, x in ipairs(self.read) do
    if same_digest(d, x) then r = true end
  end
  for _, x in ipairs(self.write) do
    if same_digest(d, x) then w = true end
  end
  if w then return "write" end
  if r then return "read" end
  return nil
end

-- The token of an Authorization header ("Bearer <token>"), or nil.
function M.bearer(header)
  if type(header) ~= "string" then return nil end
  return header:match("^[Bb][Ee][Aa][Rr][Ee][Rr] +([%w%-%._~+/]+=*)%s*$")
end

-- The pure decision: req = { kind = "read"|"write", authorization = header,
-- content_type = header, origin = header, method = "POST" (default), has_body
-- = bool } -> true, or
-- false, status (401, 403 or 415), why (for the log, never the client).
function Access:decide(req)
  local kind = req.kind
  if kind ~= "read" and kind ~= "write" then error("access:decide: kind must be 'read' or 'write'", 2) end
  local have = self:token_kind(M.bearer(req.authorization))
  if not have then
    return false, 401, req.authorization and "unknown token" or "no bearer token"
  end
  if kind == "write" then
    if have ~= "write" then return false, 403, "read-only token on a write" end
    if req.origin ~= nil then
      if type(req.origin) ~= "string" or not self.origins[normal_origin(req.origin)] then
        return false, 403, "origin not allowed"
      end
    end
    -- a POST (the one write a web page can send cross-site without asking
    -- first) and any request with a body: JSON only
    if req.method == nil or req.method == "POST" or req.has_body then
      local ct = type(req.content_type) == "string" and lower(req.content_type) or nil
      local media = ct and ct:match("^%s*([^;%s]+)")
      local charset = ct and ct:match(";%s*charset%s*=%s*\"?([^;\"%s]+)")
      if media ~= "application/json" or (charset and charset ~= "utf-8") then
        return false, 415, "content type is not application/json"
      end
    end
  end
  return true
end

-- A header's value, or nil (nil too when it is sent more than once: which
-- one would count?).
local function header(headers, name)
  local v = headers[name]
  if type(v) == "table" then return false end
  return v
end

-- a:check(kind) in an nginx request handler: true, or the request ends here
-- with the refusal (401 with WWW-Authenticate: Bearer, 403 or 415), the why
-- logged at info with the request id.
function Access:check(kind)
  local h = ngx.req.get_headers(100)
  local ok, status, why = self:decide{
    kind = kind,
    authorization = header(h, "authorization") or nil,
    content_type = header(h, "content-type") or nil,
    origin = header(h, "origin"),
    method = ngx.req.get_method(),
    has_body = h["content-length"] ~= nil or h["transfer-encoding"] ~= nil,
  }
  if ok then return true end
  ngx.log(ngx.INFO, "access ", tostring(ngx.var.request_id), ": ", why)
  ngx.status = status
  ngx.header["Content-Type"] = "application/json"
  if status == 401 then ngx.header["WWW-Authenticate"] = 'Bearer realm="mongostore"' end
  ngx.print(M.BODIES[status], "\n")
  return ngx.exit(ngx.HTTP_OK)
end

return M
