-- mongostore.cli.render - the render command: a chart as Mermaid, DOT or SVG.

local type, pairs, ipairs, tostring, pcall =
  type, pairs, ipairs, tostring, pcall
local format, concat, sort = string.format, table.concat, table.sort

local common = require "mongostore.cli.common"
local chart_for = common.chart_for
local command = common.command
local connect = common.connect
local fail = common.fail
local load_charts = common.load_charts
local load_lua = common.load_lua
local usage = common.usage

------------------------------------------------------------------------
-- render

local FORMATS = { mermaid = "to_mermaid", dot = "to_dot", svg = "to_dot" }

-- render --execution: the execution and its children (dopts.execution) and
-- its trace (dopts.trace) put in dopts; the execution's chart from --charts
-- when no CHART is given.
local function execution_view(o, words, dopts)
  local from_execution
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
  return from_execution
end

-- The chart to draw of what CHART gave (v): a chart, or the one of a list
-- picked by --id (or the only one).
local function pick_chart(chart, v, o, words)
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
  return c
end

-- The SVG Graphviz's dot makes of the DOT text.
local function to_svg(text)
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
  return svg
end

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
      from_execution = execution_view(o, words, dopts)
    end
    local v = from_execution or load_lua(words[1], "chart")
    local c = pick_chart(chart, v, o, words)
    local has_diagram, diagram = pcall(require, "mongostore.diagram")
    local fn = has_diagram and diagram[FORMATS[fmt]]
    if type(fn) ~= "function" then
      fail(format("render: diagram.%s is not available in this mongostore (the diagram module is missing)",
        FORMATS[fmt]))
    end
    local ok, text, derr = pcall(fn, c, dopts)
    if not ok then fail("render: " .. tostring(text)) end
    if type(text) ~= "string" then fail("render: " .. tostring(derr or "no diagram")) end
    if fmt == "svg" then
      text = to_svg(text)
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
