-- mongostore.cli.executions - the commands on executions: list, show, start,
-- send, and the control commands (cancel, terminate, suspend, resume).
local ms = require "mongostore"
local term = require "mongostore.cli.term"

local type, pairs, ipairs, tostring, error, pcall, getmetatable =
  type, pairs, ipairs, tostring, error, pcall, getmetatable
local format, concat, sort = string.format, table.concat, table.sort

local common = require "mongostore.cli.common"
local Failure = common.Failure
local chart_for = common.chart_for
local command = common.command
local connect = common.connect
local fail = common.fail
local int_opt = common.int_opt
local iso = common.iso
local json_out = common.json_out
local list = common.list
local load_charts = common.load_charts
local new_engine = common.new_engine
local out = common.out
local print_table = common.print_table
local usage = common.usage

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
      local page, err, code = store:list_executions(q)
      if not page then fail(tostring(err), code) end
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
    local exe, err, code = store:load(id)
    if exe == nil then fail(format("show %s: %s", id, err or "no such execution"), code or "not_found") end
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
    if not id then fail("start: " .. tostring(created), r) end
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
    if not ok then fail(format("send %s %s: %s", kind, id, tostring(how)), r) end
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
