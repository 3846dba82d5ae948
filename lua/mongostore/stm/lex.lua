-- mongostore.stm.lex - the tokens of harel's .stm DSL (LPeg), where a byte
-- offset is (line and column), the caret messages of a parse error, and the
-- literals read as harel reads them (escapes, floats as Python prints them).
local lpeg = require "lpeg"

local P, R, S, C, Cp, Cc = lpeg.P, lpeg.R, lpeg.S, lpeg.C, lpeg.Cp, lpeg.Cc
local type, tonumber, tostring, error = type, tonumber, tostring, error
local format, concat, byte, sub = string.format, table.concat, string.byte, string.sub

local M = {}

------------------------------------------------------------------------
-- Tokens

local alpha = R("az", "AZ") + P"_"
local ident = alpha * (alpha + R"09")^0
local digits = R"09"^1
local exp = S"eE" * S"+-"^-1 * digits
local decimal = digits * P"." * digits^-1 + P"." * digits
local float = digits * exp + decimal * exp^-1
local string_lit = P'"' * (P"\\" * (1 - P"\n") + (1 - S'"\\\n'))^0 * P'"'
local skip = (S" \t\r\n\f" + P"#" * (1 - P"\n")^0 + P"//" * (1 - P"\n")^0)^0
local ops = P"==" + P"!=" + P"<=" + P">=" + S"<>=|{}()[],:?+-*/"

-- A token: its class and text; DOTTED (two or more dotted names) is one token,
-- as in harel's grammar, so `a.b` is never a name followed by something else.
local token = skip * Cp() * (
  Cc"dotted" * C(ident * (P"." * ident)^1) +
  Cc"name" * C(ident) +
  Cc"float" * C(float) +
  Cc"int" * C(digits) +
  Cc"string" * C(string_lit) +
  Cc"op" * C(ops)
) * Cp()
local tail = skip * Cp() * P(-1)

-- Line and column (1-based, in characters) of a byte offset.
local function locate(text, pos)
  local line, start = 1, 1
  local i = 1
  while true do
    local nl = text:find("\n", i, true)
    if not nl or nl >= pos then break end
    line, start, i = line + 1, nl + 1, nl + 1
  end
  local col = 1
  for j = start, pos - 1 do
    local b = byte(text, j)
    if b < 0x80 or b >= 0xC0 then col = col + 1 end
  end
  return line, col
end

local function caret(text, line, col)
  local n = 0
  for l in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    if n == line then return "\n    " .. l .. "\n    " .. (" "):rep(col - 1) .. "^" end
  end
  return ""
end

-- The error of a .stm text: "stm: line L, column C: message", then the line
-- with a caret under the column. Raised as a string, as chart.define's are.
local function fail_at(text, line, col, fmt, ...)
  error(format("stm: line %d, column %d: " .. fmt, line, col, ...) .. caret(text, line, col), 0)
end
M.fail_at = fail_at

-- The same for a source { text, file }: an imported file's errors name it
-- ("stm: lib/steps.stm: line L, column C: ...").
local function fail_in(src, line, col, fmt, ...)
  if not src.file then fail_at(src.text, line, col, fmt, ...) end
  error(format("stm: %s: line %d, column %d: " .. fmt, src.file, line, col, ...) .. caret(src.text, line, col), 0)
end
M.fail_in = fail_in

local function lex(text, file)
  local src = { text = text, file = file }
  local toks, pos = {}, 1
  while true do
    if lpeg.match(tail, text, pos) then break end
    local start, class, value, after = lpeg.match(token, text, pos)
    if not start then
      local at = lpeg.match(skip * Cp(), text, pos)
      local line, col = locate(text, at)
      local ch = sub(text, at, at)
      if ch == '"' then fail_in(src, line, col, "unterminated string (a string ends on its line)") end
      fail_in(src, line, col, "unexpected character '%s'", ch)
    end
    local line, col = locate(text, start)
    toks[#toks + 1] = { class = class, value = value, line = line, col = col, start = start, stop = after }
    pos = after
  end
  -- the end of input is where harel puts it: after the last line's text
  local last = #text
  while last > 0 and (sub(text, last, last) == "\n" or sub(text, last, last) == "\r") do last = last - 1 end
  local line, col = locate(text, last + 1)
  toks[#toks + 1] = { class = "eof", value = "end of input", line = line, col = col, start = #text + 1,
                      stop = #text + 1 }
  return toks
end

------------------------------------------------------------------------
-- Literals, as harel's parser gives them

local ESC = { n = "\n", t = "\t", r = "\r", b = "\b", f = "\f", v = "\v", a = "\a", ["\\"] = "\\",
              ['"'] = '"', ["'"] = "'" }

local function utf8_char(cp)
  if cp < 0x80 then return string.char(cp) end
  if cp < 0x800 then return string.char(0xC0 + math.floor(cp / 64), 0x80 + cp % 64) end
  if cp < 0x10000 then
    return string.char(0xE0 + math.floor(cp / 4096), 0x80 + math.floor(cp / 64) % 64, 0x80 + cp % 64)
  end
  return string.char(0xF0 + math.floor(cp / 262144), 0x80 + math.floor(cp / 4096) % 64,
    0x80 + math.floor(cp / 64) % 64, 0x80 + cp % 64)
end

-- A string literal's value: Python's escapes (harel decodes with
-- unicode_escape); an unknown escape keeps its backslash, as Python does.
local function unquote(s)
  s = sub(s, 2, -2)
  local out, i, n = {}, 1, #s
  while i <= n do
    local ch = sub(s, i, i)
    if ch ~= "\\" then
      out[#out + 1] = ch
      i = i + 1
    else
      local e = sub(s, i + 1, i + 1)
      local hex = (e == "x" and 2) or (e == "u" and 4) or (e == "U" and 8) or nil
      if ESC[e] then
        out[#out + 1] = ESC[e]
        i = i + 2
      elseif hex and sub(s, i + 2, i + 1 + hex):match("^%x+$") and #sub(s, i + 2, i + 1 + hex) == hex then
        out[#out + 1] = utf8_char(tonumber(sub(s, i + 2, i + 1 + hex), 16))
        i = i + 2 + hex
      elseif e:match("[0-7]") then
        local oct = s:match("^[0-7][0-7]?[0-7]?", i + 1)
        out[#out + 1] = utf8_char(tonumber(oct, 8))
        i = i + 1 + #oct
      else
        out[#out + 1] = "\\"
        i = i + 1
      end
    end
  end
  return concat(out)
end
M.unquote = unquote

-- Python's str() of a number, which is how harel keys a selector's branches
-- (`1 to A` is "1", `1.5 to B` is "1.5", `1e5` is "100000.0").
local function py_float(x)
  if x ~= x then return "nan" end
  if x == math.huge then return "inf" end
  if x == -math.huge then return "-inf" end
  if x == 0 then return (1 / x < 0) and "-0.0" or "0.0" end
  local s
  for p = 1, 17 do
    s = format("%." .. p .. "e", x)
    if tonumber(s) == x then break end
  end
  local mant, e = s:match("^(-?[%d%.]+)e([-+]%d+)$")
  local e10 = tonumber(e)
  local digs = mant:gsub("[-.]", ""):gsub("0+$", "")
  if digs == "" then digs = "0" end
  if e10 >= -4 and e10 < 16 then
    local decimals = #digs - 1 - e10
    if decimals < 1 then decimals = 1 end
    return format("%." .. decimals .. "f", x)
  end
  local m = digs:sub(1, 1) .. (#digs > 1 and ("." .. digs:sub(2)) or "")
  if x < 0 then m = "-" .. m end
  return format("%se%s%02d", m, e10 < 0 and "-" or "+", math.abs(e10))
end

local is_float_type = math.type and function(v) return math.type(v) == "float" end or function() return false end

function M.py_str(v)
  if v == true then return "True" end
  if v == false then return "False" end
  if type(v) == "number" then
    if is_float_type(v) or v % 1 ~= 0 then return py_float(v) end
    return format("%d", v)
  end
  return tostring(v)
end

M.lex = lex
M.py_float = py_float

return M
