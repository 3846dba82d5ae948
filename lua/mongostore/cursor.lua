-- mongostore.cursor - the one text format of every signed page cursor (executions,
-- records): "c3." .. base64url(BSON payload) .. "." .. base64url(MAC), the MAC an
-- HMAC-SHA256 (its first 16 bytes) over what the cursor is bound to and the payload.
local core = require "mongostore.core"

local type, error, pcall = type, error, pcall
local byte, char, sub, concat, floor = string.byte, string.char, string.sub, table.concat, math.floor

local M = {}

M.PREFIX = "c3"
M.MAC_BYTES = 16
-- A cursor longer than this was never issued (a payload is a position: an id,
-- a few order keys) and is refused before anything is decoded; a caller whose
-- positions may hold long values (record pages ordered by a text field) gives
-- decode its own bound.
M.MAX_TEXT = 4096

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
local B64_INV = {}
for i = 1, 64 do B64_INV[byte(B64, i)] = i - 1 end

-- base64url without padding.
function M.b64(s)
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

-- The bytes of base64url text, or nil when it is not such text. Only the one
-- canonical spelling decodes: bits left over past the last byte must be zero,
-- so no two texts stand for the same bytes.
function M.unb64(s)
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
    elseif k == 3 then
      if c ~= 0 then return nil end
      out[#out + 1] = char(a, b)
    else
      if b ~= 0 or c ~= 0 then return nil end
      out[#out + 1] = char(a)
    end
  end
  return concat(out)
end

-- The binding goes in with its length, so no binding and payload pair can
-- pass for another that runs the same bytes together.
local function mac(key, binding, payload)
  return sub(core.hmac_sha256(key, M.PREFIX .. "\0" .. #binding .. ":" .. binding .. payload), 1, M.MAC_BYTES)
end

local function check_args(fn, key, binding)
  if type(key) ~= "string" or key == "" then error(fn .. ": key must be a non-empty string", 3) end
  if type(binding) ~= "string" then error(fn .. ": binding must be a string, got " .. type(binding), 3) end
end

--- cursor.encode(key, binding, payload) -> text: payload (a table of BSON values) signed with key,
-- bound to binding (what the cursor belongs to, e.g. its query's fingerprint).
function M.encode(key, binding, payload)
  check_args("cursor.encode", key, binding)
  if type(payload) ~= "table" then error("cursor.encode: payload must be a table, got " .. type(payload), 2) end
  local bytes = core.bson_encode(payload)
  return M.PREFIX .. "." .. M.b64(bytes) .. "." .. M.b64(mac(key, binding, bytes))
end

--- cursor.decode(key, binding, text[, max_text]) -> payload, or nil, why: why says what is wrong
-- (not a string, longer than max_text (default MAX_TEXT), malformed, not signed with key, bound
-- to something else).
function M.decode(key, binding, text, max_text)
  check_args("cursor.decode", key, binding)
  if max_text ~= nil and type(max_text) ~= "number" then
    error("cursor.decode: max_text must be a number, got " .. type(max_text), 2)
  end
  if type(text) ~= "string" then return nil, "not a string" end
  if #text > (max_text or M.MAX_TEXT) then return nil, "too long" end
  local p64, m64 = text:match("^c3%.([%w%-_]+)%.([%w%-_]+)$")
  if not p64 then return nil, "malformed" end
  local payload, got = M.unb64(p64), M.unb64(m64)
  if not payload or not got or #got ~= M.MAC_BYTES then return nil, "malformed" end
  -- a MAC made with the same key over another binding differs as a forged one does
  if not core.same_bytes(mac(key, binding, payload), got) then
    return nil, "its signature does not match (altered, forged, or another query's)"
  end
  local ok, t = pcall(core.bson_decode, payload, { document = true })
  if not ok or type(t) ~= "table" then return nil, "malformed" end
  return t
end

return M
