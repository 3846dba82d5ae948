-- mongostore.cli.term - what the admin CLI knows of the terminal: whether
-- stdout is one, its width, the display width of UTF-8 text, tables that fit
-- that width, and the progress bar drawn only on a terminal.
local utf8, tonumber, tostring, os, io, math = utf8, tonumber, tostring, os, io, math
local concat, format = table.concat, string.format

local M = {}

local tty_cache
-- Asked of the shell once: Lua has no isatty, and `test -t 1` in a child
-- process sees the same stdout as ours.
function M.stdout_is_tty()
  if tty_cache == nil then
    local ok = os.execute("test -t 1")
    tty_cache = ok == true
  end
  return tty_cache
end

-- For the specs' sake a test can pin it; nothing else should.
function M.set_tty(v) tty_cache = v end

-- COLUMNS first (what a user or a script pins), then the terminal's own
-- width; nil when stdout is no terminal and nothing says: a pipe gets whole
-- lines, so scripts never see text cut short.
function M.width()
  local cols = tonumber(os.getenv("COLUMNS") or "")
  if cols and cols >= 1 and cols % 1 == 0 then return math.floor(cols) end
  if not M.stdout_is_tty() then return nil end
  local f = io.popen("tput cols 2>/dev/null", "r")
  if f then
    local out = f:read("a") or ""
    f:close()
    cols = tonumber(out:match("%d+"))
    if cols and cols >= 1 then return cols end
  end
  return 80
end

-- East Asian wide and fullwidth ranges (two cells); combining marks take none.
local WIDE = {
  { 0x1100, 0x115F }, { 0x2E80, 0x303E }, { 0x3041, 0x33FF }, { 0x3400, 0x4DBF }, { 0x4E00, 0x9FFF },
  { 0xA000, 0xA4CF }, { 0xAC00, 0xD7A3 }, { 0xF900, 0xFAFF }, { 0xFE30, 0xFE4F }, { 0xFF00, 0xFF60 },
  { 0xFFE0, 0xFFE6 }, { 0x1F300, 0x1F64F }, { 0x1F900, 0x1F9FF }, { 0x20000, 0x2FFFD }, { 0x30000, 0x3FFFD },
}
local ZERO = { { 0x0300, 0x036F }, { 0x1AB0, 0x1AFF }, { 0x1DC0, 0x1DFF }, { 0x200B, 0x200F }, { 0x20D0, 0x20FF },
               { 0xFE00, 0xFE0F }, { 0xFE20, 0xFE2F } }

local function in_ranges(cp, ranges)
  for i = 1, #ranges do
    local r = ranges[i]
    if cp >= r[1] and cp <= r[2] then return true end
  end
  return false
end

local function cp_width(cp)
  if cp < 0x300 then return 1 end
  if in_ranges(cp, ZERO) then return 0 end
  if in_ranges(cp, WIDE) then return 2 end
  return 1
end

-- Text as it may go to a terminal: valid UTF-8 is kept, control characters
-- (an escape sequence inside an id would drive the terminal) and bytes that
-- are not UTF-8 are shown as \xNN, newlines and tabs as \n and \t.
function M.clean(s)
  s = tostring(s)
  if not s:find("[^\32-\126]") then return s end -- printable ASCII, the common case
  local out, i, n = {}, 1, #s
  while i <= n do
    local b = s:byte(i)
    local len = b < 0x80 and 1 or b >= 0xF0 and 4 or b >= 0xE0 and 3 or b >= 0xC2 and 2 or 0
    local piece = len > 0 and s:sub(i, i + len - 1)
    if piece and len > 1 and (#piece < len or not utf8.len(piece)) then piece = nil end
    if piece and len > 1 then
      local cp = utf8.codepoint(piece)
      if cp >= 0x80 and cp <= 0x9F then piece = nil end -- C1 controls
    end
    if not piece then
      out[#out + 1] = format("\\x%02X", b)
      i = i + 1
    else
      if len == 1 and (b < 0x20 or b == 0x7F) then
        piece = b == 10 and "\\n" or b == 9 and "\\t" or b == 13 and "\\r" or format("\\x%02X", b)
      end
      out[#out + 1] = piece
      i = i + len
    end
  end
  return concat(out)
end

-- Display cells of clean text (M.clean's output is always valid UTF-8).
function M.display_width(s)
  if not s:find("[\128-\255]") then return #s end
  local w = 0
  for _, cp in utf8.codes(s) do w = w + cp_width(cp) end
  return w
end

-- Cuts clean text to at most `cells` cells, ending with an ellipsis when cut.
function M.truncate(s, cells)
  if M.display_width(s) <= cells then return s end
  if cells <= 0 then return "" end
  local out, w = {}, 0
  for _, cp in utf8.codes(s) do
    local cw = cp_width(cp)
    if w + cw > cells - 1 then break end
    out[#out + 1] = utf8.char(cp)
    w = w + cw
  end
  return concat(out) .. "…"
end

local function pad(s, cells)
  return s .. string.rep(" ", cells - M.display_width(s))
end

-- Lines of a table: headers, then rows of cells (any value; nil shows as
-- "-"). Columns are two spaces apart. When the widest layout is wider than
-- `width`, the columns with nothing in them are left out first, then the
-- widest columns give up cells (never below their header, 4 cells, or
-- opts.min[c]; never at all for opts.whole[c]) and their cells end with an
-- ellipsis.
function M.table(headers, rows, width, opts)
  opts = opts or {}
  local min, whole = opts.min or {}, opts.whole or {}
  local all = #headers
  local cells, need, empty = {}, {}, {}
  for c = 1, all do
    need[c] = M.display_width(headers[c])
    empty[c] = #rows > 0
  end
  for r, row in ipairs(rows) do
    cells[r] = {}
    for c = 1, all do
      local v = row[c]
      if v ~= nil then empty[c] = false end
      local s = M.clean(v == nil and "-" or v)
      cells[r][c] = s
      local w = M.display_width(s)
      if w > need[c] then need[c] = w end
    end
  end
  local function total(cols, widths)
    local t = 2 * (#cols - 1)
    for _, c in ipairs(cols) do t = t + widths[c] end
    return t
  end
  local cols, widths = {}, {}
  for c = 1, all do
    cols[c] = c
    widths[c] = need[c]
  end
  if width and total(cols, widths) > width then
    local kept = {}
    for c = 1, all do
      if not empty[c] then kept[#kept + 1] = c end
    end
    cols = kept
    local floor = {}
    for _, c in ipairs(cols) do
      floor[c] = whole[c] and need[c] or math.min(need[c], math.max(4, M.display_width(headers[c]), min[c] or 0))
    end
    while total(cols, widths) > width do
      local excess, wc = 0, nil
      for _, c in ipairs(cols) do
        if widths[c] - floor[c] > excess then excess, wc = widths[c] - floor[c], c end
      end
      if not wc then break end -- nothing left to give: the terminal wraps
      widths[wc] = widths[wc] - 1
    end
  end
  local lines = {}
  local function line(values)
    local parts = {}
    for i, c in ipairs(cols) do
      local s = M.truncate(values[c], widths[c])
      parts[i] = i < #cols and pad(s, widths[c]) or s
    end
    lines[#lines + 1] = (concat(parts, "  "):gsub("%s+$", ""))
  end
  line(headers)
  for r = 1, #cells do line(cells[r]) end
  return lines
end

-- A progress bar on stdout, only when stdout is a terminal (a pipe or a
-- file gets none of it). total nil: a count with no bar. The last state
-- stays on screen, so what was done is still visible after the command.
function M.progress(label, total)
  local self = { label = label, total = total, n = 0, shown = false, last = -1 }
  local on = M.stdout_is_tty()
  local width = on and (M.width() or 80) or 80 -- asked once: tput is a process
  function self.draw()
    if not on then return end
    local text
    if self.total and self.total > 0 then
      local counts = format(" %d/%d", self.n, self.total)
      local bar_cells = math.max(10, math.min(40, width - M.display_width(self.label) - #counts - 4))
      local filled = math.floor(bar_cells * math.min(self.n, self.total) / self.total)
      text = format("%s [%s%s]%s", self.label, string.rep("=", filled), string.rep(" ", bar_cells - filled), counts)
    else
      text = format("%s %d", self.label, self.n)
    end
    io.stdout:write("\r\27[K", M.truncate(text, width - 1))
    io.stdout:flush()
    self.shown = true
  end
  function self.update(n)
    self.n = n
    self.draw()
  end
  function self.finish()
    if on and self.shown then
      io.stdout:write("\n")
      io.stdout:flush()
    end
  end
  return self
end

return M
