-- mongostore.query.cast - a client's value cast to a field's kind where the
-- conversion is exact (decimal text to an integer, 24 hex digits to an
-- ObjectId, ISO text with its zone to a date), for the model and record
-- filters that take client values as data.
local type, rawget, tonumber, getmetatable = type, rawget, tonumber, getmetatable
local find, sub = string.find, string.sub

local M = {}

local get_mt = getmetatable

-- Whether v is one of the number boxes (int64, Int32, Decimal128).
function M.is_number_box(v)
  if type(v) ~= "userdata" then return false end
  local mt = get_mt(v)
  local name = type(mt) == "table" and rawget(mt, "__name")
  return name == "mongostore.int64" or name == "mongostore.Int64" or name == "mongostore.Int32"
      or name == "mongostore.Decimal128"
end
local is_number_box = M.is_number_box

-- ISO-8601 text with its zone -> UTC milliseconds, or nil (no zone, not a time,
-- or a fraction finer than a millisecond).
local core_ok, core = pcall(require, "mongostore.core")
if not core_ok then core = nil end
local floor, tointeger, mtype = math.floor, math.tointeger, math.type

local function iso_ms(s)
  if core == nil or #s > 40 then return nil end
  if not (find(s, "^%d%d%d%d%-%d%d%-%d%d[Tt ]%d%d:%d%d:%d%d[.%d]*[Zz]$") or
          find(s, "^%d%d%d%d%-%d%d%-%d%d[Tt ]%d%d:%d%d:%d%d[.%d]*[+-]%d%d:?%d%d$")) then return nil end
  local base, frac, rest = s:match("^(.-%d%d:%d%d:%d%d)%.(%d+)(.*)$")
  local secs = core.iso_to_time(base and (base .. rest) or s)
  if not secs then return nil end
  local ms = floor(secs) * 1000
  if frac then
    local extra = sub(frac, 4)
    if find(extra, "[1-9]") then return nil end
    ms = ms + (tonumber((sub(frac, 1, 3) .. "00"):sub(1, 3)) or 0)
  end
  return tointeger and tointeger(ms) or ms
end

local function is_box(v, name)
  local mt = get_mt(v)
  return type(mt) == "table" and rawget(mt, "__name") == name
end

-- query.cast_value(kind, v) -> the value of that kind v stands for, or nil when none is exact:
-- integer ("2" -> 2), number ("2.5" -> 2.5), boolean ("true"), date (ISO text with its zone),
-- objectid (24 hex digits), string; any other kind takes v as it is.
function M.cast_value(kind, v)
  local t = type(v)
  if kind == "integer" then
    if t == "number" then return v end
    if t == "string" and #v <= 20 and find(v, "^%-?%d+$") then
      local n = tonumber(v)
      -- text beyond the int64 range reads as a float: not exact
      if mtype then
        if mtype(n) ~= "integer" then return nil end
      elseif n >= 2 ^ 53 or n <= -2 ^ 53 then
        return nil
      end
      return n
    end
    if t == "userdata" and (is_box(v, "mongostore.Int64") or is_box(v, "mongostore.int64")) then return v end
    return nil
  elseif kind == "number" then
    if t == "number" or is_number_box(v) then return v end
    if t == "string" and #v <= 40 and (find(v, "^%-?%d+$") or find(v, "^%-?%d+%.%d+$")) then return tonumber(v) end
    return nil
  elseif kind == "string" then
    if t == "string" then return v end
    return nil
  elseif kind == "boolean" then
    if t == "boolean" then return v end
    if v == "true" then return true elseif v == "false" then return false end
    return nil
  elseif kind == "date" then
    if is_box(v, "mongostore.Date") then return v end
    if t == "string" then
      local ms = iso_ms(v)
      if ms then return core.date(ms) end
    end
    return nil
  elseif kind == "objectid" then
    if is_box(v, "mongostore.ObjectId") then return v end
    if t == "string" and #v == 24 and find(v, "^%x+$") and core then return core.objectid(v) end
    return nil
  elseif kind == "any" or kind == "document" then
    return v
  end
  return nil
end


return M
