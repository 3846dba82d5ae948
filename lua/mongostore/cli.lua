-- mongostore.cli - the admin CLI behind bin/mongostore: the command line,
-- the connection, the charts a control command needs, and one function per
-- command. M.main(argv) returns the exit code: 0 ok, 1 failed, 2 usage.
local ms = require "mongostore"
local term = require "mongostore.cli.term"
local args = require "mongostore.cli.args"

local type, pairs, ipairs, tostring, tonumber, error, pcall, xpcall, setmetatable, getmetatable =
  type, pairs, ipairs, tostring, tonumber, error, pcall, xpcall, setmetatable, getmetatable
local format, concat, sort = string.format, table.concat, table.sort

local M = {}

------------------------------------------------------------------------
-- Failures: a table raised with its exit code, caught by main

local Failure = {}
Failure.__index = Failure

local function usage(msg) error(setmetatable({ exit = 2, msg = msg }, Failure), 0) end
local function fail(msg) error(setmetatable({ exit = 1, msg = msg }, Failure), 0) end

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

function M.usage()
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
  local store, err = ms.connect(uri_of(o), { db = db_of(o), prefix = o.prefix, wait = wait_of(o) })
  if not store then fail("cannot connect: " .. tostring(err)) end
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
  local exe, err = store:load(id)
  if exe == nil then
    if err then fail(format("%s %s: %s", what, id, err)) end
    fail(format("%s %s: no such execution", what, id))
  end
  local c = charts.by_id[exe.definition_id]
  if not c then
    fail(format("%s %s: it runs chart '%s', which --charts %s does not provide (it has: %s)", what, id,
      exe.definition_id, charts.name, concat(charts.ids, ", ")))
  end
  return c, exe
end

------------------------------------------------------------------------
-- list

local STATUSES = { "PENDING", "RUNNING", "DONE", "CANCELLED", "SUSPENDED", "CANCELLING", "FAILED" }

local function statuses_of(o)
  if not o.status then return nil end
  local known = {}
  for _, s in ipairs(STATUSES) do known[s] = true end
  local set = {}
  for _, text in ipairs(o.status) do
    for s in text:gmatch("[^,]+") do
      s = s:upper()
      if not known[s] then usage(format("--status %q is not one of %s", s, concat(STATUSES, ", "))) end
      set[#set + 1] = s
    end
  end
  return set
end

local function list_query(o)
  local q = { status = statuses_of(o), definition_id = o.definition, roots_only = o.roots or nil }
  q.limit = int_opt(o, "limit", 1, 10000)
  return q
end

local function summary_json(s)
  return { id = s.id, definition_id = s.definition_id, status = s.status, outcome = s.outcome,
           active_path = s.active_path, version = s.version, parent_id = s.parent_id, finished_at = s.finished_at }
end

command("list", {
  summary = "list executions by status and chart, a page at a time",
  args = "[--status S[,S]]... [--definition CHART] [--roots] [--limit N] [--cursor C | --all] [--json]",
  json = true,
  options = { status = { value = true, multi = true }, definition = { value = true }, roots = {},
              limit = { value = true }, cursor = { value = true }, all = {} },
  help = [[
  --status S       only these statuses (repeat it, or S1,S2): ]] .. concat(STATUSES, " ") .. [[

  --definition ID  only this chart's executions
  --roots          leave out forked children
  --limit N        a page of N (1 to 10000, default 100)
  --cursor C       the page after the one that printed this cursor (same filters)
  --all            every page (with a progress count on a terminal)
The last line of a page that has more says its --cursor.]],
  run = function(o, words)
    if #words > 0 then usage("list takes no arguments, got " .. words[1]) end
    if o.all and o.cursor then usage("--all and --cursor do not go together") end
    local q = list_query(o)
    q.cursor = o.cursor
    local store = connect(o)
    local items, next_cursor = {}, nil -- luacheck: ignore 311
    local progress = o.all and not o.json and term.progress("listing", nil)
    repeat
      local page, err = store:list_executions(q)
      if not page then fail(tostring(err)) end
      for _, s in ipairs(page.items) do items[#items + 1] = s end
      next_cursor = page.next_cursor
      q.cursor = next_cursor
      if progress then progress.update(#items) end
    until not (o.all and next_cursor)
    if progress then progress.finish() end
    if o.json then
      local js = {}
      for i, s in ipairs(items) do js[i] = summary_json(s) end
      json_out({ items = list(js), next_cursor = next_cursor or ms.null })
      return 0
    end
    local rows = {}
    for i, s in ipairs(items) do
      rows[i] = { s.id, s.definition_id, s.status, s.outcome, s.active_path, s.version, s.parent_id,
                  iso(s.finished_at) }
    end
    print_table({ "ID", "CHART", "STATUS", "OUTCOME", "ACTIVE", "VER", "PARENT", "FINISHED" }, rows,
      { min = { 16, 8, nil, nil, 8 }, whole = { [3] = true, [6] = true } })
    out(format("%d execution%s", #items, #items == 1 and "" or "s"))
    if next_cursor then out("more: --cursor " .. next_cursor) end
    return 0
  end,
})

------------------------------------------------------------------------
-- show

local FIELDS = { "id", "definition_id", "status", "outcome", "error", "active_path", "version", "processed_events",
                 "priority", "parent_id", "child_id", "root_path", "created_at", "updated_at", "finished_at",
                 "expires_at" }
local TIMES = { created_at = true, updated_at = true, finished_at = true, expires_at = true }

local function execution_json(exe)
  local t = {}
  for _, k in ipairs(FIELDS) do t[k] = exe[k] end
  t.context = exe.context
  t.history = exe.history
  t.deferred = list(exe.deferred)
  t.children = exe.children
  return t
end

local function one_id(words, what)
  if #words ~= 1 then usage(what .. " takes one execution id, got " .. #words .. " arguments") end
  return words[1]
end

command("show", {
  summary = "one execution: its fields, its children and its trace",
  args = "ID [--last N] [--json]",
  json = true,
  options = { last = { value = true } },
  help = "  --last N   the last N trace steps (default 50; 0 for all the store keeps)",
  run = function(o, words)
    local id = one_id(words, "show")
    local last = int_opt(o, "last", 0, nil, 50)
    local store = connect(o)
    local exe, err = store:load(id)
    if exe == nil then fail(format("show %s: %s", id, err or "no such execution")) end
    local children = {}
    local ids = {}
    for cid in pairs(exe.children or {}) do ids[#ids + 1] = cid end
    sort(ids)
    for _, cid in ipairs(ids) do
      local ch = exe.children[cid]
      local child = store:load(cid)
      children[#children + 1] = {
        id = cid, root_path = ch.root_path, finished = ch.finished == true,
        status = child and child.status or nil, active_path = child and child.active_path or nil,
        outcome = child and child.outcome or nil, exists = child ~= nil,
      }
    end
    local trace
    trace, err = store:read_trace(id)
    if not trace then fail(format("show %s: trace: %s", id, err)) end
    local first = (last > 0 and #trace > last) and (#trace - last + 1) or 1
    if o.json then
      local steps = {}
      for i = first, #trace do
        local s = trace[i]
        steps[#steps + 1] = { index = s.index, at = s.at, event = s.event, event_id = s.event_id, from = s.from,
                              to = s.to, status = s.status, actions = list(s.actions), error = s.error }
      end
      json_out({ execution = execution_json(exe), children = list(children), trace = list(steps) })
      return 0
    end
    local rows = {}
    for _, k in ipairs(FIELDS) do
      local v = exe[k]
      if v ~= nil and v ~= "" then rows[#rows + 1] = { k, TIMES[k] and iso(v) or tostring(v) } end
    end
    local ctx = ms.json.encode(exe.context or {})
    rows[#rows + 1] = { "context", ctx or "?" }
    if exe.deferred and #exe.deferred > 0 then rows[#rows + 1] = { "deferred", #exe.deferred .. " events held" } end
    out("execution")
    print_table({ "FIELD", "VALUE" }, rows)
    out("")
    out(format("children (%d)", #children))
    if #children > 0 then
      rows = {}
      for i, c in ipairs(children) do
        rows[i] = { c.id, c.root_path, c.exists and c.status or "(not created yet)", c.active_path, c.outcome,
                    c.finished and "yes" or "no" }
      end
      print_table({ "CHILD", "REGION", "STATUS", "ACTIVE", "OUTCOME", "JOINED" }, rows)
    end
    out("")
    out(format("trace (%d step%s%s)", #trace, #trace == 1 and "" or "s",
      first > 1 and format(", the last %d shown", #trace - first + 1) or ""))
    if #trace > 0 then
      rows = {}
      for i = first, #trace do
        local s = trace[i]
        rows[#rows + 1] = { s.index, iso(s.at), s.event, s.from, s.to, s.status,
                            s.actions and #s.actions > 0 and concat(s.actions, ",") or nil, s.error }
      end
      print_table({ "#", "AT", "EVENT", "FROM", "TO", "STATUS", "ACTIONS", "ERROR" }, rows)
    end
    return 0
  end,
})

------------------------------------------------------------------------
-- start and send

-- A JSON object from an argument: the text itself, `-` for stdin, @FILE.
local function json_object(text, what)
  if text == nil then return {} end
  if text == "-" then
    text = io.stdin:read("a")
  elseif text:sub(1, 1) == "@" then
    local f, err = io.open(text:sub(2), "rb")
    if not f then usage(format("cannot read %s from %s: %s", what, text:sub(2), err)) end
    text = f:read("a")
    f:close()
  end
  local v, err = ms.json.decode(text)
  if v == nil and err then usage(format("%s is not JSON: %s", what, err)) end
  if type(v) ~= "table" or ms.is_array(v) then usage(what .. " must be a JSON object") end
  return v
end

-- "applied" and what the event did when that was not a transition:
-- "applied (ignored)", "applied (held)", "applied (failed)", ...
local function said_how(how, outcome)
  if outcome == nil or outcome == "transition" or outcome == "duplicate" then return how end
  return how .. " (" .. outcome .. ")"
end

-- how: "applied", "duplicate", "created", ...; r: the engine's delivery
-- result (outcome, status, active_path, error after the commit). Returns
-- the exit code: 1 when the event left the execution FAILED.
local function report(o, what, id, how, r)
  local status, path = r.status, r.active_path
  if o.json then
    json_out({ id = id, result = how, outcome = r.outcome, status = status, active_path = path, error = r.error })
  else
    out(format("%s %s: %s; now %s%s", what, term.clean(id), said_how(how, r.outcome), tostring(status),
      path and path ~= "" and (" at " .. term.clean(path)) or ""))
  end
  if r.outcome == "failed" then
    if not o.json then
      io.stderr:write("mongostore: ", term.clean(id), " is FAILED: ", term.clean(tostring(r.error)), "\n")
    end
    return 1
  end
  return 0
end

command("start", {
  summary = "start an execution of a chart",
  args = "CHART [CONTEXT-JSON | - | @FILE] [--id ID] [--priority 0-4] [--json]",
  json = true, needs_charts = true,
  options = { id = { value = true }, priority = { value = true }, ["no-trace"] = {} },
  help = [[
  CONTEXT-JSON     the starting context, a JSON object (- reads it from stdin, @FILE from a file)
  --id ID          the execution's id (the same id again is the same execution: no second Start)
  --priority N     0 to 4
  --no-trace       write no trace step]],
  run = function(o, words)
    if #words < 1 or #words > 2 then usage("start takes a chart id and an optional context") end
    local priority = int_opt(o, "priority", 0, 4)
    local context = json_object(words[2], "the context")
    local charts = load_charts(o, "start")
    if not charts.by_id[words[1]] then
      fail(format("start: --charts %s has no chart '%s' (it has: %s)", charts.name, words[1], concat(charts.ids, ", ")))
    end
    local store = connect(o)
    local id, created, r = new_engine(store, charts, o):start(words[1], { id = o.id, context = context,
                                                                          priority = priority })
    if not id then fail("start: " .. tostring(created)) end
    return report(o, "start", id, created and "created" or "existed already", r)
  end,
})

command("send", {
  summary = "send an event to an execution",
  args = "ID KIND [DATA-JSON | - | @FILE] [--event-id EID] [--any-kind] [--json]",
  json = true, needs_charts = true,
  options = { ["event-id"] = { value = true }, ["any-kind"] = {}, ["no-trace"] = {} },
  help = [[
  DATA-JSON        the event's data, a JSON object (- reads it from stdin, @FILE from a file)
  --event-id EID   the event's id: sending the same id again changes nothing
  --any-kind       send a kind the chart does not list as external
  --no-trace       write no trace step]],
  run = function(o, words)
    if #words < 2 or #words > 3 then usage("send takes an execution id, an event kind and optional data") end
    local id, kind = words[1], words[2]
    local data = json_object(words[3], "the event data")
    local charts = load_charts(o, "send")
    local store = connect(o)
    local c = chart_for(store, charts, id, "send")
    local chart = require "mongostore.chart"
    if not o["any-kind"] and not chart.is_external(c, kind) then
      local kinds = chart.external_kinds(c)
      fail(format("send %s: %s is not an external event of chart '%s' (external: %s); --any-kind sends it anyway",
        id, kind, c.id, #kinds > 0 and concat(kinds, ", ") or "none"))
    end
    local event = { kind = kind, data = data, id = o["event-id"] }
    local ok, how, r = new_engine(store, charts, o):send(id, event)
    if not ok then fail(format("send %s %s: %s", kind, id, tostring(how))) end
    return report(o, "send " .. term.clean(kind) .. " (event " .. event.id .. ") to", id, how, r)
  end,
})

------------------------------------------------------------------------
-- cancel, terminate, suspend, resume: one or more ids, or a selection

local function control_command(name, summary, detail)
  command(name, {
    summary = summary,
    args = "ID... | --definition CHART [--status S]... [--json]",
    json = true, needs_charts = true,
    options = { definition = { value = true }, status = { value = true, multi = true }, ["no-trace"] = {} },
    help = detail .. [[


  ID...            the executions (their children get it from the outbox, through a worker)
  --definition ID  instead of ids: every root execution of this chart (with --status, only those)
  --status S       with --definition: only these statuses
  --no-trace       write no trace step
With more than one execution a progress bar runs on a terminal; the exit code is 1 when any failed.]],
    run = function(o, words)
      if #words > 0 and (o.definition or o.status) then usage(name .. " takes ids or a selection, not both") end
      if #words == 0 and not o.definition then
        usage(name .. " needs execution ids, or --definition CHART to select them")
      end
      if o.status and not o.definition then usage("--status selects only with --definition") end
      local charts = load_charts(o, name)
      local store = connect(o)
      local ids = words
      if #words == 0 then
        ids = {}
        local q = { definition_id = o.definition, status = statuses_of(o), roots_only = true, limit = 1000 }
        repeat
          local page, err = store:list_executions(q)
          if not page then fail(name .. ": listing: " .. tostring(err)) end
          for _, s in ipairs(page.items) do ids[#ids + 1] = s.id end
          q.cursor = page.next_cursor
        until not q.cursor
      end
      local selected = #words == 0
      if selected and not charts.by_id[o.definition] then
        fail(format("%s: --charts %s has no chart '%s' (it has: %s)", name, charts.name, o.definition,
          concat(charts.ids, ", ")))
      end
      local engine = new_engine(store, charts, o)
      local progress = #ids > 1 and not o.json and term.progress(name, #ids)
      local results, failed, counts = {}, 0, {}
      for i, id in ipairs(ids) do
        local ok, how, r
        -- a selection's chart is checked once above; named ids each here,
        -- so a missing chart is named before anything is sent
        local cok, cerr = true, nil
        if not selected then cok, cerr = pcall(chart_for, store, charts, id, name) end
        if not cok then
          if getmetatable(cerr) ~= Failure then error(cerr, 0) end
          how = cerr.msg
        else
          ok, how, r = engine[name](engine, id)
          if not ok then how = format("%s %s: %s", name, id, tostring(how)) end
        end
        results[i] = { id = id, ok = ok == true, result = ok and how or nil, error = (not ok) and how or nil,
                       outcome = r and r.outcome, status = r and r.status }
        if ok then counts[how] = (counts[how] or 0) + 1 else failed = failed + 1 end
        if progress then progress.update(i) end
      end
      if progress then progress.finish() end
      if o.json then
        json_out({ results = list(results), failed = failed })
      elseif #ids == 1 and failed == 0 then
        local r1 = results[1]
        out(format("%s %s: %s; now %s", name, term.clean(ids[1]), said_how(r1.result, r1.outcome), tostring(r1.status)))
      else
        for _, r in ipairs(results) do
          if not r.ok then io.stderr:write("mongostore: ", term.clean(r.error), "\n") end
        end
        out(format("%s: %d applied, %d duplicate, %d failed (of %d)", name, counts.applied or 0,
          counts.duplicate or 0, failed, #ids))
      end
      if failed > 0 and #ids == 1 and not o.json then fail(results[1].error) end
      return failed > 0 and 1 or 0
    end,
  })
end

control_command("cancel", "cancel executions (cooperative where the chart has a Cancel transition)",
  "A chart with a Cancel transition in the active states takes it; otherwise the execution ends CANCELLED.")
control_command("terminate", "end executions at once, running no hooks",
  "The execution ends CANCELLED with no hook, guard or action run; its live children get Terminate.")
control_command("suspend", "hold the events that arrive until resumed",
  "Events and timers that fall due meanwhile are kept in the order they came; resume applies them.")
control_command("resume", "release the events a suspended execution holds",
  "The kept events are applied in the order they came, then the execution runs on.")

------------------------------------------------------------------------
-- recover

command("recover", {
  summary = "deliver what a crash left: pending spawns, the outbox and due timers",
  args = "[--max-passes N] [--json]",
  json = true, needs_charts = true,
  options = { ["max-passes"] = { value = true }, ["no-trace"] = {} },
  help = [[
  --max-passes N   at most N passes (default 100); each pass relays spawns, the outbox, then due timers
  --no-trace       write no trace step
The charts must include every chart the pending work belongs to.]],
  run = function(o, words)
    if #words > 0 then usage("recover takes no arguments") end
    local max = int_opt(o, "max-passes", 1, nil, 100)
    local charts = load_charts(o, "recover")
    local store = connect(o)
    local engine = new_engine(store, charts, o)
    local progress = not o.json and term.progress("recover: items handled", nil)
    local total, passes = 0, 0
    for _ = 1, max do
      local n = engine:step()
      passes = passes + 1
      total = total + n
      if progress and n > 0 then progress.update(total) end
      if n == 0 then break end
    end
    if progress then progress.finish() end
    if o.json then
      json_out({ handled = total, passes = passes })
    else
      out(format("recover: %d item%s handled in %d pass%s", total, total == 1 and "" or "s", passes,
        passes == 1 and "" or "es"))
    end
    return 0
  end,
})

------------------------------------------------------------------------
-- timers

local FAR = 100 * 366 * 86400

command("timers", {
  summary = "durable timers: those due now and the next to fire",
  args = "[--limit N] [--json]",
  json = true,
  options = { limit = { value = true } },
  help = "  --limit N   at most N timers in each list (default 50)",
  run = function(o, words)
    if #words > 0 then usage("timers takes no arguments") end
    local limit = int_opt(o, "limit", 1, nil, 50)
    local store = connect(o)
    local now = ms.now()
    local all, err = store:due_timers(now + FAR)
    if not all then fail("timers: " .. tostring(err)) end
    local due, upcoming = {}, {}
    for _, t in ipairs(all) do
      local row = { execution_id = t.execution_id, path = t.path, fire_at = t.fire_at }
      if t.fire_at <= now then due[#due + 1] = row else upcoming[#upcoming + 1] = row end
    end
    local function head(l)
      local h = {}
      for i = 1, math.min(limit, #l) do h[i] = l[i] end
      return h
    end
    if o.json then
      json_out({ now = now, due_count = #due, next_count = #upcoming, due = list(head(due)),
                 next = list(head(upcoming)) })
      return 0
    end
    local function section(title, l, word, sign)
      out(format("%s: %d%s", title, #l, #l > limit and format(" (the first %d shown)", limit) or ""))
      if #l == 0 then return end
      local rows = {}
      for i, t in ipairs(head(l)) do
        rows[i] = { t.execution_id, t.path, iso(t.fire_at), age(sign * (t.fire_at - now)) }
      end
      print_table({ "EXECUTION", "PATH", "FIRE AT", word }, rows)
    end
    section("due", due, "OVERDUE", -1)
    out("")
    section("next", upcoming, "IN", 1)
    return 0
  end,
})

------------------------------------------------------------------------
-- outbox

-- The emitting execution of each pending entry, and when it last
-- committed: emitted events carry no created_time, so an entry's age is at
-- least now minus its source's updated_at (the commit that queued it, or a
-- later one). Read from the documents' own fields (harel's layout), only for
-- documents with a backlog.
local function outbox_sources(o, store)
  local info = store:info()
  local db = ms.database(uri_of(o), { db = info.db, wait = wait_of(o) })
  if not db then return {} end
  local coll = db:collection(info.executions)
  local cur = coll and coll:find({ ["outbox.0"] = { ["$exists"] = true } },
                                 { projection = { ["outbox.seq"] = 1, data = 1 } })
  local by_seq = {}
  if cur then
    for doc in cur:each() do
      local data = type(doc.data) == "string" and ms.json.decode(doc.data) or nil
      local at = type(data) == "table" and type(data.updated_at) == "number" and data.updated_at or nil
      for _, e in ipairs(doc.outbox or {}) do
        local seq = math.tointeger(e.seq)
        if seq then by_seq[seq] = { source = doc._id, at = at } end
      end
    end
  end
  db:close()
  return by_seq
end

-- outbox --failed: the entries given up on, oldest first
local function failed_entries(o, store)
  local rows, err = store:failed_outbox()
  if not rows then fail("outbox --failed: " .. tostring(err)) end
  local now = ms.now()
  if o.json then
    local js = {}
    for i, r in ipairs(rows) do
      js[i] = { source_id = r.source_id, seq = r.seq, target_id = r.target_id or ms.null, kind = r.event.kind,
                event_id = r.event.id, error = r.error, failed_at = r.failed_at, attempts = r.attempts }
    end
    json_out({ total = #rows, failed = list(js) })
    return 0
  end
  out(format("outbox: %d failed entr%s", #rows, #rows == 1 and "y" or "ies"))
  if #rows > 0 then
    local t = {}
    for i, r in ipairs(rows) do
      t[i] = { r.source_id .. ":" .. r.seq, r.target_id or "(external)", r.event.kind, r.attempts or 0,
               age(now - (r.failed_at or now)), term.clean(tostring(r.error)) }
    end
    print_table({ "ENTRY", "TARGET", "KIND", "TRIES", "FAILED", "ERROR" }, t)
    out("put one back with: mongostore outbox --redeliver ENTRY")
  end
  return 0
end

-- outbox --redeliver SOURCE:SEQ
local function redeliver(o, store, which)
  local source, seq = which:match("^(.+):(%d+)$")
  if not source then usage("--redeliver takes an entry as outbox --failed lists it: SOURCE:SEQ") end
  local ok, moved = store:redeliver_failed(source, math.tointeger(tonumber(seq)))
  if not ok then fail("outbox --redeliver: " .. tostring(moved)) end
  if not moved then fail(format("outbox --redeliver: no failed entry %s", which)) end
  if o.json then
    json_out({ redelivered = which })
  else
    out(format("outbox: %s is back in the outbox; a worker delivers it", which))
  end
  return 0
end

command("outbox", {
  summary = "the outbox's backlog by target and age, and the pending spawns",
  args = "[--failed | --redeliver SOURCE:SEQ] [--json]",
  json = true,
  options = { failed = {}, redeliver = { value = true } },
  help = [[
Entries waiting for delivery, grouped by target, the longest waiting first. AGE is at
least the time since the emitting execution last committed (emitted events carry no time
of their own).

  --failed                 the entries given up on (kept with their error instead of dropped)
  --redeliver SOURCE:SEQ   put a failed entry back into the outbox]],
  run = function(o, words)
    if #words > 0 then usage("outbox takes no arguments") end
    if o.failed and o.redeliver then usage("outbox takes --failed or --redeliver, not both") end
    local store = connect(o)
    if o.failed then return failed_entries(o, store) end
    if o.redeliver then return redeliver(o, store, o.redeliver) end
    local entries, err = store:pending_outbox()
    if not entries then fail("outbox: " .. tostring(err)) end
    local spawns
    spawns, err = store:pending_spawns()
    if not spawns then fail("outbox: spawns: " .. tostring(err)) end
    local now = ms.now()
    local sources = #entries > 0 and outbox_sources(o, store) or {}
    local by, targets = {}, {}
    for _, e in ipairs(entries) do
      local key = e.target_id or "\0external"
      local t = by[key]
      if not t then
        t = { target_id = e.target_id, count = 0, kinds = {}, kind_set = {}, oldest_at = nil, sources = {},
              source_set = {}, oldest_seq = e.seq }
        by[key] = t
        targets[#targets + 1] = t
      end
      t.count = t.count + 1
      local kind = e.event and e.event.kind or "?"
      if not t.kind_set[kind] then
        t.kind_set[kind] = true
        t.kinds[#t.kinds + 1] = kind
      end
      local src = sources[e.seq]
      if src and not t.source_set[src.source] then
        t.source_set[src.source] = true
        t.sources[#t.sources + 1] = src.source
      end
      local at = e.event and e.event.created_time
      if type(at) ~= "number" then at = src and src.at end
      if type(at) == "number" and (t.oldest_at == nil or at < t.oldest_at) then t.oldest_at = at end
      if e.seq < t.oldest_seq then t.oldest_seq = e.seq end
    end
    sort(targets, function(a, b)
      local x, y = a.oldest_at or math.huge, b.oldest_at or math.huge
      if x ~= y then return x < y end
      return (a.target_id or "") < (b.target_id or "")
    end)
    if o.json then
      local js = {}
      for i, t in ipairs(targets) do
        js[i] = { target_id = t.target_id or ms.null, count = t.count, kinds = list(t.kinds), oldest_at = t.oldest_at,
                  age = t.oldest_at and (now - t.oldest_at) or nil, oldest_seq = t.oldest_seq,
                  sources = list(t.sources) }
      end
      json_out({ total = #entries, targets = list(js), spawns = #spawns })
      return 0
    end
    out(format("outbox: %d entr%s for %d target%s", #entries, #entries == 1 and "y" or "ies", #targets,
      #targets == 1 and "" or "s"))
    if #targets > 0 then
      local rows = {}
      for i, t in ipairs(targets) do
        rows[i] = { t.target_id or "(external)", t.count, t.oldest_seq, age(t.oldest_at and now - t.oldest_at),
                    concat(t.kinds, ","), concat(t.sources, ",") }
      end
      print_table({ "TARGET", "ENTRIES", "OLDEST SEQ", "AGE", "KINDS", "FROM" }, rows)
    end
    out(format("spawns pending: %d", #spawns))
    return 0
  end,
})

------------------------------------------------------------------------
-- doctor

-- What csrc/store.c's ensure_indexes makes on the executions collection.
local NEEDED = {
  { name = "outbox_seq", keys = { "outbox.seq" }, why = "the outbox relay" },
  { name = "spawns_seq", keys = { "spawns.seq" }, why = "the spawn relay" },
  { name = "definition_id", keys = { "definition_id" }, why = "lookups by chart" },
  { name = "definition_status_id", keys = { "definition_id", "status", "_id" }, why = "the listing" },
  { name = "next_fire_at", keys = { "next_fire_at" }, why = "the timer sweep" },
  { name = "definition_id_id", keys = { "definition_id", "_id" }, why = "the listing by chart" },
  { name = "harel_written", keys = { "version" }, why = "documents harel's store wrote (partial)" },
}

local function key_text(keys)
  local parts = {}
  for i, k in ipairs(keys) do parts[i] = format("%q:1", k) end
  return "{" .. concat(parts, ",") .. "}"
end

local function collection_names(o)
  local p = o.prefix
  return (p and (p .. "_executions") or "executions"), (p and (p .. "_counters") or "counters")
end

command("doctor", {
  summary = "the server, transactions, the indexes mongostore needs and collection sizes",
  args = "[--fix] [--json]",
  json = true,
  options = { fix = {} },
  help = [[
  --fix   create the missing indexes (as every worker's connect does)
Exits 1 when an index mongostore needs is missing. It reads and never writes, unless --fix.]],
  run = function(o, words)
    if #words > 0 then usage("doctor takes no arguments") end
    local uri, dbname, wait = uri_of(o), db_of(o), wait_of(o)
    if o.fix then connect(o):close() end
    local db, err = ms.database(uri, { db = dbname, wait = wait })
    if not db then fail("cannot connect: " .. tostring(err)) end
    local info
    info, err = db:info()
    if not info then fail("doctor: hello: " .. tostring(err)) end
    local build = db:command({ buildInfo = 1 })
    local report_t = {
      server_version = build and build.version or ms.null, wire_version = info.wire_version,
      transactions = info.transactions, replica_set = info.replica_set or ms.null, db = dbname,
      max_bson_size = info.max_bson_size,
    }
    local exes_name, counters_name = collection_names(o)
    local existing = {}
    local colls = db:list_collections() or {}
    for _, c in ipairs(colls) do existing[c.name] = true end
    local collections = {}
    for _, name in ipairs { exes_name, counters_name } do
      local entry = { name = name, exists = existing[name] == true, documents = 0 }
      if entry.exists then
        local st = db:command({ { "collStats", name } })
        if st then
          entry.documents = math.tointeger(st.count) or st.count
          entry.bytes = math.tointeger(st.size) or st.size
          entry.storage_bytes = math.tointeger(st.storageSize) or st.storageSize
        else
          entry.documents = db:collection(name):count({})
        end
      end
      collections[#collections + 1] = entry
    end
    report_t.collections = list(collections)
    local have = {}
    if existing[exes_name] then
      local ixs = db:collection(exes_name):list_indexes()
      for _, ix in ipairs(ixs or {}) do
        have[#have + 1] = { name = ix.name, key = (tostring(ms.ejson.encode(ix.key)):gsub("%s", "")) }
      end
    end
    local indexes, missing = {}, 0
    for _, need in ipairs(NEEDED) do
      local want = key_text(need.keys)
      local state = "missing"
      for _, h in ipairs(have) do
        if h.key == want then state = "present" break end
        if h.name == need.name then state = "different keys" end
      end
      if state ~= "present" then missing = missing + 1 end
      indexes[#indexes + 1] = { collection = exes_name, name = need.name, keys = list(need.keys), state = state,
                                used_by = need.why }
    end
    report_t.indexes = list(indexes)
    report_t.missing_indexes = missing
    db:close()
    if o.json then
      json_out(report_t)
    else
      local tx = info.transactions and "yes" or
        ("no (" .. (info.replica_set and "the replica set does not offer them" or "a standalone server") .. ")")
      print_table({ "CHECK", "RESULT" }, {
        { "server", (build and build.version or "?") },
        { "wire version", info.wire_version },
        { "transactions", tx },
        { "replica set", info.replica_set or "-" },
        { "database", dbname },
        { "largest document", info.max_bson_size .. " bytes" },
      })
      out("")
      local rows = {}
      for i, c in ipairs(collections) do
        rows[i] = { c.name, c.exists and "yes" or "no", c.documents, c.bytes, c.storage_bytes }
      end
      print_table({ "COLLECTION", "EXISTS", "DOCUMENTS", "BYTES", "STORAGE" }, rows)
      out("")
      rows = {}
      for i, ix in ipairs(indexes) do rows[i] = { ix.name, concat(ix.keys, ","), ix.state, ix.used_by } end
      print_table({ "INDEX", "KEYS", "STATE", "USED BY" }, rows)
      if missing > 0 then
        out(format("%d index%s missing: `mongostore doctor --fix` (or any worker's connect) creates them", missing,
          missing == 1 and " is" or "es are"))
      end
    end
    return missing > 0 and 1 or 0
  end,
})

------------------------------------------------------------------------
-- render

local FORMATS = { mermaid = "to_mermaid", dot = "to_dot", svg = "to_dot" }

command("render", {
  summary = "draw a chart as Mermaid, Graphviz DOT or SVG",
  args = "[CHART] --format mermaid|dot|svg [--id CHART-ID] [--execution ID] [--direction TB|LR] [--output FILE]",
  options = { format = { value = true }, id = { value = true }, output = { value = true },
              execution = { value = true }, direction = { value = true } },
  help = [[
  CHART           a Lua module or .lua file returning a chart (or a list of charts: pick one with --id);
                  with --execution and no CHART, the execution's chart from --charts
  --format F      mermaid, dot, or svg (through Graphviz's `dot -Tsvg`)
  --execution ID  highlight where this execution and its children are, and the path its trace took
  --direction D   TB (the default), LR, BT or RL
  --output FILE   write there instead of stdout]],
  run = function(o, words)
    if #words > 1 or (#words == 0 and not o.execution) then
      usage("render takes one chart (a module name or a .lua file)")
    end
    local fmt = o.format or usage("render needs --format mermaid|dot|svg")
    if not FORMATS[fmt] then usage(format("--format must be mermaid, dot or svg, got %q", fmt)) end
    local dirs = { TB = true, LR = true, BT = true, RL = true }
    if o.direction and not dirs[o.direction] then usage("--direction must be TB, LR, BT or RL") end
    local chart = require "mongostore.chart"
    local dopts = { direction = o.direction }
    local from_execution
    if o.execution then
      local store = connect(o)
      local exe, err = store:load(o.execution)
      if exe == nil then fail(format("render %s: %s", o.execution, err or "no such execution")) end
      local exes = { exe }
      local cids = {}
      for cid in pairs(exe.children or {}) do cids[#cids + 1] = cid end
      sort(cids)
      for _, cid in ipairs(cids) do
        local child = store:load(cid)
        if child then exes[#exes + 1] = child end
      end
      local trace
      trace, err = store:read_trace(o.execution)
      if not trace then fail(format("render %s: trace: %s", o.execution, err)) end
      dopts.execution, dopts.trace = exes, trace
      if #words == 0 then
        from_execution = chart_for(store, load_charts(o, "render --execution"), o.execution, "render")
      end
      store:close()
    end
    local v = from_execution or load_lua(words[1], "chart")
    local c
    if chart.is_chart(v) then
      c = v
    elseif type(v) == "table" then
      local found = {}
      for _, x in pairs(v) do if chart.is_chart(x) then found[#found + 1] = x end end
      for _, x in ipairs(found) do if x.id == o.id then c = x end end
      if not c and #found == 1 and not o.id then c = found[1] end
      if not c then
        local ids = {}
        for i, x in ipairs(found) do ids[i] = x.id end
        sort(ids)
        if #found == 0 then usage(words[1] .. " returned no chart") end
        usage(format("%s returns %d charts: pick one with --id (%s)", words[1], #found, concat(ids, ", ")))
      end
    else
      usage(words[1] .. " returned no chart")
    end
    local fn = chart[FORMATS[fmt]]
    if type(fn) ~= "function" then
      fail(format("render: chart.%s is not available in this mongostore (the diagram module is missing)",
        FORMATS[fmt]))
    end
    local ok, text, derr = pcall(fn, c, dopts)
    if not ok then fail("render: " .. tostring(text)) end
    if type(text) ~= "string" then fail("render: " .. tostring(derr or "no diagram")) end
    if fmt == "svg" then
      local src = os.tmpname()
      local f = assert(io.open(src, "wb"))
      f:write(text)
      f:close()
      local p = io.popen("dot -Tsvg " .. src .. " 2>&1", "r")
      local svg = p and p:read("a") or ""
      local pok, _, status = true, nil, 0
      if p then pok, _, status = p:close() end
      os.remove(src)
      if not p or not pok then
        if status == 127 then fail("render: svg needs Graphviz's dot on PATH (Debian: graphviz)") end
        fail("render: dot -Tsvg failed: " .. (svg:match("[^\n]+") or ("exit " .. tostring(status))))
      end
      text = svg
    end
    if o.output then
      local f, err = io.open(o.output, "wb")
      if not f then fail("render: " .. tostring(err)) end
      f:write(text)
      f:close()
    else
      io.stdout:write(text)
      if text:sub(-1) ~= "\n" then io.stdout:write("\n") end
    end
    return 0
  end,
})

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
  M.debug = o.debug
  if o.help then out(command_help(def)) return 0 end
  if o.json and not def.json then usage(name .. " has no --json") end
  return def.run(o, words)
end

-- argv: the words after the program's name. Returns the exit code.
function M.main(argv)
  M.current, M.debug = nil, false
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
