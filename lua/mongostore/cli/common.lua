-- mongostore.cli.common - what every command of the CLI shares: failures
-- (raised with their exit code), output, the global options and the command
-- table, the connection, and the charts a command loads.
local ms = require "mongostore"
local term = require "mongostore.cli.term"
local args = require "mongostore.cli.args"

local type, pairs, ipairs, tostring, tonumber, error, pcall, setmetatable =
  type, pairs, ipairs, tostring, tonumber, error, pcall, setmetatable
local format, concat, sort = string.format, table.concat, table.sort

------------------------------------------------------------------------
-- Failures: a table raised with its exit code, caught by main

local Failure = {}
Failure.__index = Failure

-- A failure carries the one failure shape of the library (message, code,
-- detail): with --json, main prints it on stdout as { message, code,
-- detail } beside the line on stderr.
local function usage(msg) error(setmetatable({ exit = 2, msg = msg, code = "usage" }, Failure), 0) end
local function fail(msg, code, detail)
  error(setmetatable({ exit = 1, msg = msg, code = code or "failed", detail = detail }, Failure), 0)
end

local function out(line) io.stdout:write(line, "\n") end

local function json_out(v)
  local text, err = ms.json.encode(v)
  if not text then fail("cannot encode the answer as JSON: " .. tostring(err)) end
  out(text)
end

local function list(t) return ms.array(t or {}) end

local function iso(t)
  if type(t) ~= "number" then return nil end
  local whole = math.floor(t)
  return os.date("!%Y-%m-%dT%H:%M:%S", whole) .. format(".%03dZ", math.floor((t - whole) * 1000))
end

local function age(seconds)
  if type(seconds) ~= "number" then return nil end
  local neg = seconds < 0
  local s = math.floor(math.abs(seconds) + 0.5)
  local text
  if s < 60 then text = s .. "s"
  elseif s < 3600 then text = format("%dm%02ds", s // 60, s % 60)
  elseif s < 86400 then text = format("%dh%02dm", s // 3600, s % 3600 // 60)
  else text = format("%dd%02dh", s // 86400, s % 86400 // 3600) end
  return neg and ("-" .. text) or text
end

-- An integer option within [lo, hi], or default when not given.
local function int_opt(o, name, lo, hi, default)
  if o[name] == nil then return default end
  local v, err = args.integer(o[name], name, lo, hi)
  if not v then usage(err) end
  return v
end

-- opts: term.table's (min cells per column, columns never cut)
local function print_table(headers, rows, opts)
  for _, line in ipairs(term.table(headers, rows, term.width(), opts)) do out(line) end
end

------------------------------------------------------------------------
-- Commands and their options

local GLOBAL = {
  uri = { value = true }, db = { value = true }, prefix = { value = true }, wait = { value = true },
  charts = { value = true }, json = {}, help = {}, debug = {},
}

local GLOBAL_USAGE = [[
Global options (before or after the command):
  --uri URI        the server (default: $MONGOSTORE_URI)
  --db NAME        the database (default: harel)
  --prefix P       collections are P_executions and P_counters (harel's store: --prefix harel)
  --wait SECONDS   how long to wait for the server (default: 5)
  --charts MODULE  a Lua module or .lua file returning the list of charts (default: $MONGOSTORE_CHARTS);
                   start, send, cancel, terminate, suspend, resume and recover need it
  --json           print JSON instead of tables (where the command has it)
  --debug          a traceback with an internal error
  --help, -h       this text, or a command's own]]

local COMMANDS, ORDER = {}, {}
local function command(name, def)
  def.name = name
  COMMANDS[name] = def
  ORDER[#ORDER + 1] = name
end

local function usage_line(def) return "usage: mongostore " .. def.name .. (def.args and (" " .. def.args) or "") end

local function usage_text()
  local lines = { "mongostore - look inside and steer durable statechart executions in MongoDB", "",
                  "usage: mongostore [global options] COMMAND [arguments]", "", "Commands:" }
  for _, name in ipairs(ORDER) do lines[#lines + 1] = format("  %-10s %s", name, COMMANDS[name].summary) end
  lines[#lines + 1] = ""
  lines[#lines + 1] = GLOBAL_USAGE
  lines[#lines + 1] = ""
  lines[#lines + 1] = "Exit codes: 0 ok, 1 the operation failed, 2 bad usage. `mongostore COMMAND --help` for more."
  return concat(lines, "\n")
end

local function command_help(def)
  local summary = def.summary:sub(1, 1):upper() .. def.summary:sub(2) .. "."
  return concat({ usage_line(def), "", summary, def.help and ("\n" .. def.help) or "", "", GLOBAL_USAGE }, "\n")
end

------------------------------------------------------------------------
-- Connecting and the charts

local function uri_of(o)
  local uri = o.uri or os.getenv("MONGOSTORE_URI")
  if uri == nil or uri == "" then usage("no server given: pass --uri URI or set MONGOSTORE_URI") end
  return uri
end

local function wait_of(o)
  if o.wait == nil then return 5 end
  local w = tonumber(o.wait)
  if not w or w ~= w or w < 0 or w > 86400 then usage("--wait must be a number of seconds from 0 to 86400") end
  return w
end

local function db_of(o)
  local db = o.db or "harel"
  if not db:match("^[%w_%-]+$") then usage("--db must be letters, digits, _ and -, got " .. format("%q", db)) end
  return db
end

local function connect(o)
  local store, err, code = ms.connect(uri_of(o), { db = db_of(o), prefix = o.prefix, wait = wait_of(o) })
  if not store then fail("cannot connect: " .. tostring(err), code) end
  return store
end

-- Names that are never loaded as code: data files, whatever their place.
local DATA_FILES = { json = true, stm = true, yaml = true, yml = true, txt = true, toml = true, csv = true,
                     xml = true }

-- Why name is neither a .lua file nor a module name, or nil.
local function not_code(name)
  if name:match("%.lua$") then return nil end
  if name:find("[/\\]") then return "a path must end in .lua" end
  local ext = name:match("%.([%w]+)$")
  if ext and DATA_FILES[ext:lower()] then return "a ." .. ext:lower() .. " file is not code" end
  if not name:match("^[%w_%-]+[%w_%-%.]*$") then return "not a module name" end
  return nil
end

-- A module name (found on package.path) or a path to a .lua file: nothing
-- else is run as code (a chart.json given here is refused, not executed).
local function load_lua(name, what)
  local ok, v
  local why = not_code(name)
  if why then
    usage(format("cannot load %s %s: only a .lua file or a module name is loaded as code (%s)", what, name, why))
  end
  if name:match("%.lua$") then
    local chunk, err = loadfile(name, "t") -- source only: no precompiled chunk
    if not chunk then usage(format("cannot load %s %s: %s", what, name, err)) end
    ok, v = pcall(chunk)
  else
    if not package.searchpath(name, package.path) and not package.searchpath(name, package.cpath) then
      usage(format("cannot find %s module %s on package.path (give a .lua file's path, or set LUA_PATH)", what, name))
    end
    ok, v = pcall(require, name)
  end
  if not ok then fail(format("loading %s %s raised: %s", what, name, tostring(v))) end
  return v
end

local function load_charts(o, why)
  local chart = require "mongostore.chart"
  local name = o.charts or os.getenv("MONGOSTORE_CHARTS")
  if name == nil or name == "" then
    usage(why .. " needs the charts the executions run: pass --charts MODULE (a Lua module or .lua file " ..
          "returning the list of charts, as mongostore.ngx's configure takes) or set MONGOSTORE_CHARTS")
  end
  local v = load_lua(name, "charts")
  local charts = {}
  if chart.is_chart(v) then
    charts[1] = v
  elseif type(v) == "table" then
    for _, c in pairs(v) do
      if chart.is_chart(c) then charts[#charts + 1] = c end
    end
  end
  if #charts == 0 then
    usage(format("charts %s returned no chart (it must return a list of charts from chart.define)", name))
  end
  local by_id, ids = {}, {}
  for _, c in ipairs(charts) do
    by_id[c.id] = c
    ids[#ids + 1] = c.id
  end
  sort(ids)
  return { list = charts, by_id = by_id, ids = ids, name = name }
end

local function new_engine(store, charts, o)
  return require("mongostore.engine").new{
    store = store, charts = charts.list, trace = not o["no-trace"],
    log = function(msg) io.stderr:write("mongostore: engine: ", term.clean(msg), "\n") end,
  }
end

-- The chart of an execution, or a failure saying which one is missing.
local function chart_for(store, charts, id, what)
  local exe, err, code = store:load(id)
  if exe == nil then
    if err then fail(format("%s %s: %s", what, id, err), code) end
    fail(format("%s %s: no such execution", what, id), "not_found")
  end
  local c = charts.by_id[exe.definition_id]
  if not c then
    fail(format("%s %s: it runs chart '%s', which --charts %s does not provide (it has: %s)", what, id,
      exe.definition_id, charts.name, concat(charts.ids, ", ")))
  end
  return c, exe
end

return {
  Failure = Failure,
  usage = usage,
  fail = fail,
  out = out,
  json_out = json_out,
  list = list,
  iso = iso,
  age = age,
  int_opt = int_opt,
  print_table = print_table,
  GLOBAL = GLOBAL,
  GLOBAL_USAGE = GLOBAL_USAGE,
  COMMANDS = COMMANDS,
  ORDER = ORDER,
  command = command,
  usage_line = usage_line,
  usage_text = usage_text,
  command_help = command_help,
  uri_of = uri_of,
  wait_of = wait_of,
  db_of = db_of,
  connect = connect,
  DATA_FILES = DATA_FILES,
  not_code = not_code,
  load_lua = load_lua,
  load_charts = load_charts,
  new_engine = new_engine,
  chart_for = chart_for,
}
