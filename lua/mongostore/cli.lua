-- mongostore.cli - the admin CLI behind bin/mongostore: the command line and
-- its dispatch. The commands live in mongostore.cli.executions, .maintenance
-- and .render, what they share in mongostore.cli.common. M.main(argv) returns
-- the exit code: 0 ok, 1 failed, 2 usage.
local ms = require "mongostore"
local term = require "mongostore.cli.term"
local args = require "mongostore.cli.args"

local type, pairs, ipairs, tostring, error, xpcall, getmetatable =
  type, pairs, ipairs, tostring, error, xpcall, getmetatable
local format = string.format

local M = {}

local common = require "mongostore.cli.common"
local COMMANDS = common.COMMANDS
local Failure = common.Failure
local GLOBAL = common.GLOBAL
local command_help = common.command_help
local out = common.out
local usage = common.usage
local usage_line = common.usage_line

-- the commands, in the order the usage lists them
require "mongostore.cli.executions"
require "mongostore.cli.maintenance"
require "mongostore.cli.render"

M.usage = common.usage_text

------------------------------------------------------------------------
-- main

-- The command is the first word that is neither an option nor the value
-- of a global option.
local function find_command(argv)
  local i = 1
  while i <= #argv do
    local a = argv[i]
    if a == "--" then return argv[i + 1], i + 1 end
    if a:sub(1, 1) ~= "-" or a == "-" then return a, i end
    local name = a:match("^%-%-([%w][%w%-]*)$")
    if name and GLOBAL[name] and GLOBAL[name].value then i = i + 1 end
    i = i + 1
  end
  return nil
end

local function run(argv)
  for i, a in ipairs(argv) do
    if type(a) ~= "string" then error("argv[" .. i .. "] must be a string", 0) end
  end
  local name, at = find_command(argv)
  if name == nil then
    local o = args.parse(argv, GLOBAL)
    if o and o.help then out(M.usage()) return 0 end
    usage("no command given (list, show, send, ...)")
  end
  local def = COMMANDS[name]
  if not def then usage(format("unknown command %q", name)) end
  local spec = {}
  for k, v in pairs(GLOBAL) do spec[k] = v end
  for k, v in pairs(def.options or {}) do spec[k] = v end
  local rest = {}
  for i, a in ipairs(argv) do if i ~= at then rest[#rest + 1] = a end end
  M.current = def
  local o, words = args.parse(rest, spec)
  if not o then usage(words) end
  M.debug, M.json = o.debug, o.json
  if o.help then out(command_help(def)) return 0 end
  if o.json and not def.json then usage(name .. " has no --json") end
  return def.run(o, words)
end

-- argv: the words after the program's name. Returns the exit code.
function M.main(argv)
  M.current, M.debug, M.json = nil, false, false
  local debug_wanted = false
  for _, a in ipairs(argv) do if a == "--debug" then debug_wanted = true end end
  local ok, res = xpcall(run, function(e)
    if getmetatable(e) == Failure then return e end
    return { internal = tostring(e), trace = debug.traceback(tostring(e), 2) }
  end, argv)
  io.stdout:flush()
  if ok then return res or 0 end
  local prefix = "mongostore" .. (M.current and (" " .. M.current.name) or "") .. ": "
  if getmetatable(res) == Failure then
    local cmd = M.current and M.current.name
    if cmd and (res.msg:sub(1, #cmd + 1) == cmd .. " " or res.msg:sub(1, #cmd + 1) == cmd .. ":") then
      prefix = "mongostore: "
    end
    io.stderr:write(prefix, term.clean(res.msg), "\n")
    if M.json then
      -- the failure shape, for a program reading stdout
      local text = ms.json.encode({ message = res.msg, code = res.code, detail = res.detail or ms.null })
      if text then io.stdout:write(text, "\n") end
    end
    if res.exit == 2 then
      io.stderr:write(M.current and usage_line(M.current) or "usage: mongostore [global options] COMMAND [arguments]",
        "\n")
    end
    return res.exit
  end
  if debug_wanted then
    io.stderr:write(res.trace, "\n")
  else
    io.stderr:write(prefix, "internal error: ", term.clean(res.internal), " (--debug shows where)\n")
  end
  return 1
end

return M

