-- mongostore.util - small pure helpers more than one module needs.
local format = string.format

local M = {}

--- util.hex(bytes) -> the bytes as lowercase hex digits, two per byte.
function M.hex(bytes)
  return (bytes:gsub(".", function(c) return format("%02x", c:byte()) end))
end

return M
