-- spec/02-store/cli_tty_spec.lua - bin/mongostore on a real terminal: tmux
-- runs it in a detached session of a given size and the pane is read back.
-- On a terminal a bulk command draws a progress bar, and tables fit the
-- terminal's width (UTF-8 and wide characters counted as cells).
local lu = require "luaunit"
local helper = require "helpers"
local ms = require "mongostore"
local engine_mod = require "mongostore.engine"
local cli = require "fixtures.cli.run"
local charts = require "fixtures.cli.charts"

TestCliTty = {}

local function have_tmux()
  local ok = os.execute("command -v tmux >/dev/null 2>&1")
  return ok == true
end

-- Display cells as a terminal counts them, for the characters these
-- executions use: CJK ideographs take two cells, everything else one.
local function cells(s)
  local n = 0
  for _, cp in utf8.codes(s) do n = n + ((cp >= 0x4E00 and cp <= 0x9FFF) and 2 or 1) end
  return n
end

-- The text from cell n (0-based) on, or nil when no character starts there.
local function from_cell(line, n)
  local w = 0
  for pos, cp in utf8.codes(line) do
    if w == n then return line:sub(pos) end
    if w > n then return nil end
    w = w + ((cp >= 0x4E00 and cp <= 0x9FFF) and 2 or 1)
  end
  return nil
end

-- The cell a substring starts at (0-based), or nil.
local function cell_of(line, needle)
  local at = line:find(needle, 1, true)
  if not at then return nil end
  return cells(line:sub(1, at - 1))
end

function TestCliTty:setUp()
  if not have_tmux() then return end
  self.store, self.db = helper.connect()
  self.engine = engine_mod.new{ store = self.store, charts = charts, log = function() end }
  self.socket = "mscli-" .. ms.uuid():sub(1, 12)
end

function TestCliTty:tearDown()
  if self.socket then os.execute("tmux -L " .. self.socket .. " kill-server >/dev/null 2>&1") end
  if self.store then self.store:close() end
end

-- Runs `mongostore argv...` in a fresh tmux session width x height and
-- returns the pane's lines (wrapped lines joined back, so a line longer
-- than the terminal shows as one) once the command has exited.
function TestCliTty:in_terminal(width, height, argv)
  local words = {}
  for i, a in ipairs(cli.concat(cli.base(self.db, { "--charts", cli.charts_file }), argv)) do
    words[i] = helper.shell_quote(a)
  end
  local inner = string.format("env -u COLUMNS -u LINES LUA_PATH_5_4=%s %s %s %s; echo __EXIT=$?__; sleep 600",
    helper.shell_quote(helper.lua_path() .. ";"), helper.lua_command(), helper.shell_quote(cli.bin),
    table.concat(words, " "))
  local session = "s" .. ms.uuid():sub(1, 8)
  local cmd = string.format("LANG=C.UTF-8 tmux -u -L %s -f /dev/null new-session -d -s %s -x %d -y %d %s",
    self.socket, session, width, height, helper.shell_quote(inner))
  lu.assertTrue(os.execute(cmd) == true, "tmux new-session failed: " .. cmd)
  local text, code
  for _ = 1, 600 do
    local p = assert(io.popen(string.format("tmux -L %s capture-pane -p -J -t %s", self.socket, session)))
    text = p:read("a")
    p:close()
    code = text:match("__EXIT=(%d+)__")
    if code then break end
    ms.sleep(0.1)
  end
  lu.assertNotNil(code, "the command did not finish in the terminal:\n" .. tostring(text))
  os.execute(string.format("tmux -L %s kill-session -t %s >/dev/null 2>&1", self.socket, session))
  local lines = {}
  for l in text:gmatch("([^\n]*)\n") do
    if l:find("__EXIT=", 1, true) then break end
    lines[#lines + 1] = (l:gsub("%s+$", ""))
  end
  return lines, tonumber(code)
end

function TestCliTty:test_a_bulk_command_draws_a_progress_bar_on_a_terminal()
  if not have_tmux() then return lu.skip("tmux is not installed (tools/deps.sh installs it)") end
  for i = 1, 30 do assert(self.engine:start("cli_flow", { id = string.format("p-%02d", i) })) end
  local lines, code = self:in_terminal(100, 20, { "terminate", "--definition", "cli_flow" })
  lu.assertEquals(code, 0, table.concat(lines, "\n"))
  local bar
  for _, l in ipairs(lines) do
    if l:match("^terminate %[") then bar = l end
  end
  lu.assertNotNil(bar, "no progress bar in:\n" .. table.concat(lines, "\n"))
  -- finished: the bar is full and counts every execution
  lu.assertStrMatches(bar, "^terminate %[=+%] 30/30$")
  lu.assertTrue(cells(bar) <= 100)
  lu.assertEquals(lines[#lines], "terminate: 30 applied, 0 duplicate, 0 failed (of 30)")
  for i = 1, 30 do lu.assertEquals(self.store:load(string.format("p-%02d", i)).status, "CANCELLED") end

  -- the same through a pipe: no bar (cli_spec runs every command so; here
  -- the same binary and state, only stdout differs)
  for i = 1, 3 do assert(self.engine:start("cli_flow", { id = "q-" .. i })) end
  local r = cli.run(cli.concat(cli.base(self.db, { "--charts", cli.charts_file }),
    { "terminate", "--definition", "cli_flow", "--status", "RUNNING" }))
  lu.assertEquals(r.code, 0, r.err)
  lu.assertEquals(r.out, "terminate: 3 applied, 0 duplicate, 0 failed (of 3)\n")
end

local LONG = "order-2026-12-01-" .. string.rep("abcdef", 8)
local UNI = "café-日本-straße"

function TestCliTty:test_tables_fit_the_terminal_at_two_widths()
  if not have_tmux() then return lu.skip("tmux is not installed (tools/deps.sh installs it)") end
  local ids = { LONG, UNI, "short" }
  for _, id in ipairs(ids) do assert(self.engine:start("cli_flow", { id = id })) end
  assert(self.engine:send(UNI, { kind = "Begin" }))

  local seen = {}
  for _, width in ipairs { 150, 60 } do
    local lines, code = self:in_terminal(width, 30, { "list" })
    lu.assertEquals(code, 0, table.concat(lines, "\n"))
    -- header, one row per execution, the count: no line wrapped
    lu.assertEquals(#lines, 1 + #ids + 1, table.concat(lines, "\n"))
    lu.assertEquals(lines[#lines], "3 executions")
    for _, l in ipairs(lines) do
      lu.assertTrue(cells(l) <= width, string.format("%d cells at width %d: %s", cells(l), width, l))
    end
    -- columns line up, counted in cells: STATUS and VER start where their headers do
    local status_at, ver_at = cell_of(lines[1], "STATUS"), cell_of(lines[1], "VER")
    lu.assertNotNil(status_at)
    lu.assertNotNil(ver_at)
    for i = 2, #ids + 1 do
      lu.assertEquals(cell_of(lines[i], "RUNNING"), status_at, lines[i])
      lu.assertNotNil((from_cell(lines[i], ver_at) or ""):match("^%d+"), lines[i])
    end
    for _, h in ipairs { "ID", "CHART", "STATUS", "ACTIVE", "VER" } do lu.assertStrContains(lines[1], h) end
    if width == 150 then
      lu.assertStrMatches(lines[1], "^ID%s+CHART%s+STATUS%s+OUTCOME%s+ACTIVE%s+VER%s+PARENT%s+FINISHED$")
    end
    seen[width] = table.concat(lines, "\n")
  end
  -- wide enough: every id whole; narrow: the long id cut with an ellipsis
  lu.assertStrContains(seen[150], LONG)
  lu.assertStrContains(seen[150], UNI)
  lu.assertNotStrContains(seen[150], "…")
  lu.assertNotStrContains(seen[60], LONG)
  lu.assertStrContains(seen[60], "order-2026-12-01-")
  lu.assertStrContains(seen[60], "…")

  -- show's tables at the narrow width too
  local lines, code = self:in_terminal(60, 40, { "show", LONG })
  lu.assertEquals(code, 0, table.concat(lines, "\n"))
  for _, l in ipairs(lines) do lu.assertTrue(cells(l) <= 60, l) end
  lu.assertEquals(lines[1], "execution")
end
