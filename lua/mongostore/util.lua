-- mongostore.util - small pure helpers more than one module needs.
local format = string.format
local pairs, type, floor = pairs, type, math.floor

local M = {}

-- gsub with a table runs in C: a long string costs no Lua call per byte.
local HEX, UNHEX = {}, {}
for b = 0, 255 do HEX[string.char(b)] = format("%02x", b) end
for a in ("0123456789abcdefABCDEF"):gmatch(".") do
  for b in ("0123456789abcdefABCDEF"):gmatch(".") do UNHEX[a .. b] = string.char(tonumber(a .. b, 16)) end
end

--- util.hex(bytes) -> the bytes as lowercase hex digits, two per byte.
function M.hex(bytes)
  return (bytes:gsub(".", HEX))
end

--- util.from_hex(text) -> the bytes, or nil when text is not hex of whole bytes.
function M.from_hex(s)
  if #s % 2 == 1 or s:find("%X") then return nil end
  return (s:gsub("%x%x", UNHEX))
end

--- util.is_sequence(t) -> whether the table's keys are exactly 1..#t (an
-- empty table is one). What else makes a list (an array mark, no
-- metatable, not null) is each caller's own rule.
function M.is_sequence(t)
  local n = #t
  for k in pairs(t) do
    if type(k) ~= "number" or k < 1 or k > n or k ~= floor(k) then return false end
  end
  return true
end

return M
