-- mongostore.diagram - draws a compiled chart as Graphviz DOT or a Mermaid
-- state diagram (diagram.to_dot, diagram.to_mermaid), optionally highlighting
-- where an execution is and the transitions its trace took, in order.
-- Output is deterministic and every label is escaped for its format.
local type, pairs, ipairs, next, error, tostring = type, pairs, ipairs, next, error, tostring
local format, concat, sort, byte = string.format, table.concat, table.sort, string.byte

require "mongostore.chart" -- the mongostore.Chart kind of the signatures below
local contract = require "mongostore.contract"

local M = {}

------------------------------------------------------------------------
-- Text: UTF-8 decoded by hand (LuaJIT has no utf8 library); an invalid byte
-- stands for U+FFFD, so no input can smuggle raw bytes into a diagram.

local function codepoints(s)
  local out, i, n = {}, 1, #s
  while i <= n do
    local b = byte(s, i)
    local cp, len
    if b < 0x80 then cp, len = b, 1
    elseif b >= 0xC2 and b <= 0xDF then cp, len = b - 0xC0, 2
    elseif b >= 0xE0 and b <= 0xEF then cp, len = b - 0xE0, 3
    elseif b >= 0xF0 and b <= 0xF4 then cp, len = b - 0xF0, 4
    end
    if len and len > 1 then
      for j = 1, len - 1 do
        local c = byte(s, i + j)
        if not c or c < 0x80 or c > 0xBF then cp = nil; break end
        cp = cp * 64 + (c - 0x80)
      end
      -- overlong forms, surrogates and beyond U+10FFFF are not characters
      if cp and ((len == 3 and cp < 0x800) or (len == 4 and (cp < 0x10000 or cp > 0x10FFFF))
                 or (cp >= 0xD800 and cp <= 0xDFFF)) then
        cp = nil
      end
    end
    if cp then
      out[#out + 1] = cp
      i = i + len
    else
      out[#out + 1] = 0xFFFD
      i = i + 1
    end
  end
  return out
end

-- Graphviz: a quoted string (\" and \\), a newline as a line break, other
-- control characters shown as \xNN, & and everything past ASCII as
-- character entities (Graphviz reads them in plain labels too).
local function dot_text(s)
  local out = {}
  for _, cp in ipairs(codepoints(tostring(s))) do
    local ch
    if cp == 34 then ch = '\\"'
    elseif cp == 92 then ch = "\\\\"
    elseif cp == 10 then ch = "\\n"
    elseif cp == 38 then ch = "&amp;"
    elseif cp < 32 or cp == 127 then ch = format("\\\\x%02X", cp)
    elseif cp > 127 then ch = format("&#%d;", cp)
    else ch = string.char(cp) end
    out[#out + 1] = ch
  end
  return '"' .. concat(out) .. '"'
end

-- Mermaid: letters, digits, space and _ as they are, everything else as
-- mermaid's #NNN; entity (decoded after parsing), so no character can end a
-- label, open a block or start a statement.
local function mermaid_text(s)
  local out = {}
  for _, cp in ipairs(codepoints(tostring(s))) do
    if (cp >= 48 and cp <= 57) or (cp >= 65 and cp <= 90) or (cp >= 97 and cp <= 122) or cp == 32 or cp == 95 then
      out[#out + 1] = string.char(cp)
    else
      out[#out + 1] = format("#%d;", cp)
    end
  end
  return concat(out)
end

M.dot_text, M.mermaid_text = dot_text, mermaid_text

------------------------------------------------------------------------
-- The model both formats draw: states numbered in chart order, pseudo
-- states (initial dots, choices, join bars) and edges, each edge knowing the
-- transition (and the selector key or join branch) it stands for.

local function is_container(node) return #node.children > 0 end

local function sorted_keys(t)
  local out = {}
  for k in pairs(t or {}) do out[#out + 1] = k end
  sort(out)
  return out
end

local function named(names, fn, fallback)
  local n = fn and names and names[fn]
  if type(n) == "string" and n ~= "" then return n end
  return fallback
end

local function transition_label(t, names, with_guard)
  local parts = {}
  if t.events then parts[#parts + 1] = concat(sorted_keys(t.events), " | ") end
  if t.join then parts[#parts + 1] = "join " .. t.join end
  if with_guard and t.guard then parts[#parts + 1] = "[" .. named(names, t.guard, "guard") .. "]" end
  local sel = t.select and named(names, t.select, nil)
  if sel then parts[#parts + 1] = "select " .. sel end
  if t.action then parts[#parts + 1] = "/ " .. named(names, t.action, "action") end
  return (concat(parts, " "):gsub("%s+$", ""))
end

-- The lines under a state's name: its timeout, outcome, deferrals, hooks.
local function state_notes(node, names)
  local lines = {}
  if node.orthogonal then lines[#lines + 1] = "orthogonal" end
  if node.invoke then
    -- the chart it runs as a child, and for a fan-out the list it runs over
    lines[#lines + 1] = "invoke " .. node.invoke .. (node.each and (" for " .. node.as .. " in " .. node.each) or "")
  end
  local t = node.timeout
  if type(t) == "number" then
    lines[#lines + 1] = format("timeout %ss", (t % 1 == 0) and format("%d", t) or format("%.14g", t))
  elseif t then
    lines[#lines + 1] = "timeout context." .. t.context
  end
  if node.final then lines[#lines + 1] = node.outcome and ("final: " .. node.outcome) or "final" end
  local defer = sorted_keys(node.defer)
  if #defer > 0 then lines[#lines + 1] = "defer " .. concat(defer, ", ") end
  for _, hook in ipairs { { "on_enter", "entry" }, { "on_exit", "exit" }, { "on_activity", "activity" } } do
    if node[hook[1]] then
      local n = named(names, node[hook[1]], nil)
      lines[#lines + 1] = n and (hook[2] .. " / " .. n) or hook[2]
    end
  end
  if node.history == false and is_container(node) and not node.orthogonal then lines[#lines + 1] = "no history" end
  -- targetless transitions, as UML lists internal transitions in their state
  for _, tr in ipairs(node.outgoing or {}) do
    if tr.targetless then lines[#lines + 1] = transition_label(tr, names, true) .. " (internal)" end
  end
  return lines
end

local function build(c, names)
  local g = { chart = c, ids = {}, list = {}, pseudo = {}, edges = {}, by_t = {}, initial_edge = {} }
  local root = c.root
  g.ids[root] = "s0"
  local n = 0
  local function number(node)
    for _, ch in ipairs(node.children) do
      n = n + 1
      g.ids[ch] = "s" .. n
      g.list[#g.list + 1] = ch
      number(ch)
    end
  end
  number(root)
  local function edge(e)
    g.edges[#g.edges + 1] = e
    e.order = {}
    return e
  end
  -- initial dots first, in chart order
  local scopes = { root }
  for _, node in ipairs(g.list) do scopes[#scopes + 1] = node end
  for _, node in ipairs(scopes) do
    if node.initial then
      local dot = { id = g.ids[node] .. "_start", ptype = "start", scope = node }
      g.initial_edge[node] = edge{ from = dot, to = node.initial, label = "", scope = node }
    end
  end
  local choices, joins = 0, 0
  for _, node in ipairs(g.list) do
    for _, t in ipairs(node.outgoing) do
      local src, scope = t.source, t.source.parent
      local parts = {}
      g.by_t[t] = parts
      if t.select then
        choices = choices + 1
        local p = { id = "c" .. choices, ptype = "choice", scope = scope }
        g.pseudo[#g.pseudo + 1] = p
        parts.main = edge{ from = src, to = p, label = transition_label(t, names, true), t = t }
        parts.keys = {}
        for _, key in ipairs(sorted_keys(t.targets)) do
          parts.keys[key] = edge{ from = p, to = t.targets[key], label = key, t = t }
        end
      elseif t.join then
        joins = joins + 1
        local p = { id = "j" .. joins, ptype = "join", scope = scope }
        g.pseudo[#g.pseudo + 1] = p
        parts.main = edge{ from = src, to = p, label = transition_label(t, names, true), t = t }
        parts.done = edge{ from = p, to = t.target, label = t.else_target and "success" or "", t = t }
        if t.else_target then parts["else"] = edge{ from = p, to = t.else_target, label = "else", t = t } end
      elseif not t.targetless then -- a targetless one is a line in its state (state_notes)
        parts.main = edge{ from = src, to = t.target, label = transition_label(t, names, true), t = t }
      end
    end
  end
  return g
end

------------------------------------------------------------------------
-- Highlighting: where the executions are, and which edges their traces took.

local function is_within(x, y) -- x is y or below it
  while x do
    if x == y then return true end
    x = x.parent
  end
  return false
end

-- The states entered along with x: its initial child, that one's, ...
local function entered(x)
  local out = { x }
  while x.initial do
    x = x.initial
    out[#out + 1] = x
  end
  return out
end

local function targets_of(t)
  local out = {}
  if t.targetless then return out end -- leads nowhere: it explains no move
  if t.select then
    for _, key in ipairs(sorted_keys(t.targets)) do out[#out + 1] = { t.targets[key], "keys", key } end
  elseif t.join then
    out[#out + 1] = { t.target, "done" }
    if t.else_target then out[#out + 1] = { t.else_target, "else" } end
  else
    out[#out + 1] = { t.target, "main" }
  end
  return out
end

-- The transitions one trace step took: the first one the event enables from
-- the state it left (innermost first, as the engine picks), then any
-- automatic ones, ending where the step ended (or at a sink whose parent
-- the step ended in). Breadth first, so the shortest explanation wins.
local MAX_CHAIN = 8

local function explain(from, to, kind)
  local queue, head = {}, 1
  local n = from
  while n do
    for _, t in ipairs(n.outgoing) do
      local takes
      if t.events then takes = kind ~= nil and t.events[kind] == true
      else takes = kind == "Finished" or not t.join end
      if takes then queue[#queue + 1] = { t = t, chain = {} } end
    end
    n = n.parent
  end
  while head <= #queue and head <= 256 do
    local item = queue[head]
    head = head + 1
    for _, tg in ipairs(targets_of(item.t)) do
      local chain = {}
      for i, x in ipairs(item.chain) do chain[i] = x end
      chain[#chain + 1] = { t = item.t, part = tg[2], key = tg[3] }
      local x = tg[1]
      -- a sink (a final, or a leaf with no way out) finishes its parent
      local sink = x.final or (#x.children == 0 and #x.outgoing == 0)
      if to == x or is_within(to, x) or (sink and is_within(x, to)) then return chain, x end
      if #chain < MAX_CHAIN then
        for _, e in ipairs(entered(x)) do
          local up = e
          while up do
            for _, t in ipairs(up.outgoing) do
              if not t.events and not t.join then queue[#queue + 1] = { t = t, chain = chain } end
            end
            up = (up == e and e ~= x) and nil or up.parent
          end
        end
      end
    end
  end
  return nil
end

local function check_list(v, what)
  if v == nil then return {} end
  if type(v) ~= "table" then error(format("diagram: opts.%s must be a table, got %s", what, type(v)), 3) end
  return v
end

-- The executions (opts.execution, one or a list, and opts.executions) and
-- the traces (opts.trace, one list of steps or a list of them, and
-- opts.traces) a highlight is made from.
local function highlight_inputs(opts)
  local exes = {}
  local function add_exe(e, what)
    if type(e) ~= "table" and type(e) ~= "userdata" then
      error(format("diagram: %s must be an execution, got %s", what, type(e)), 5)
    end
    exes[#exes + 1] = e
  end
  local one = opts.execution
  if one ~= nil then
    if type(one) == "table" and one[1] ~= nil then
      for i, e in ipairs(one) do add_exe(e, format("opts.execution[%d]", i)) end
    else
      add_exe(one, "opts.execution")
    end
  end
  for i, e in ipairs(check_list(opts.executions, "executions")) do add_exe(e, format("opts.executions[%d]", i)) end
  local traces = {}
  local tr = check_list(opts.trace, "trace")
  local first = tr[1]
  if type(first) == "table" and (first[1] ~= nil or next(first) == nil) then
    for _, t in ipairs(tr) do traces[#traces + 1] = check_list(t, "trace[i]") end
  elseif tr[1] ~= nil then
    traces[1] = tr
  end
  for _, t in ipairs(check_list(opts.traces, "traces")) do traces[#traces + 1] = check_list(t, "traces[i]") end
  return exes, traces
end

-- Every step of every trace, ordered by time (then trace, then position).
local function ordered_steps(traces)
  local steps = {}
  for ti, list in ipairs(traces) do
    for si, s in ipairs(list) do
      if type(s) ~= "table" then error(format("diagram: trace %d step %d must be a table", ti, si), 4) end
      steps[#steps + 1] = { s = s, ti = ti, si = si, at = type(s.at) == "number" and s.at or nil }
    end
  end
  sort(steps, function(a, b)
    if a.at and b.at and a.at ~= b.at then return a.at < b.at end
    if a.ti ~= b.ti then return a.ti < b.ti end
    return a.si < b.si
  end)
  return steps
end

local RANK = { visited = 1, active = 2, current = 3, failed = 3 }

-- A highlight being made over graph g: its states' classes and its edges'
-- order of taking.
local Marks = {}
Marks.__index = Marks

local function new_marks(g)
  return setmetatable({ g = g, c = g.chart, h = { state = {}, any = false }, count = 0 }, Marks)
end

-- The node at path, nil for none, or nil, message for a path not in the chart.
function Marks:node_at(path, what)
  if path == nil then return nil end
  local c = self.c
  local node = c.index[path]
  if not node or node == c.root then
    return nil, format("%s: state '%s' is not in chart %s", what, tostring(path), c.id)
  end
  return node
end

-- Marks node and its ancestors with class (the ancestors of a current or
-- failed state are active), keeping the higher of two marks.
function Marks:mark(node, class)
  local h, root = self.h, self.c.root
  while node and node ~= root do
    local old = h.state[node]
    if not old or RANK[class] > RANK[old] then h.state[node] = class end
    if class == "current" or class == "failed" then class = "active" end
    node = node.parent
  end
  h.any = true
end

function Marks:taken(e)
  self.count = self.count + 1
  e.order[#e.order + 1] = self.count
end

-- The initial edges from top down to bottom, outermost first.
function Marks:initials_down(top, bottom)
  local g = self.g
  local path = {}
  local n = bottom
  while n and n ~= top do
    path[#path + 1] = n
    n = n.parent
  end
  local parent = top
  for i = #path, 1, -1 do
    local child = path[i]
    if parent and parent.initial == child and g.initial_edge[parent] then self:taken(g.initial_edge[parent]) end
    parent = child
  end
end

-- One trace step: its states visited, the edges its transition took.
function Marks:step(from, to, event)
  if from then self:mark(from, "visited") end
  if to then self:mark(to, "visited") end
  if to and not from then
    self:initials_down(nil, to)
  elseif from and to then
    local chain, landed = explain(from, to, event)
    if chain then
      for _, link in ipairs(chain) do
        local parts, t = self.g.by_t[link.t], link.t
        local target = (link.part == "keys" and t.targets[link.key]) or (link.part == "else" and t.else_target)
                       or t.target
        self:mark(target, "visited")
        self:taken(parts.main)
        if link.part == "keys" then self:taken(parts.keys[link.key])
        elseif link.part ~= "main" then self:taken(parts[link.part]) end
      end
      if landed ~= to and is_within(to, landed) then self:initials_down(landed, to) end
    end
  end
end

local function highlight(g, opts)
  local c = g.chart
  local exes, traces = highlight_inputs(opts)
  local m = new_marks(g)
  for i, e in ipairs(exes) do
    local what = format("execution %s", tostring(e.id or i))
    if e.definition_id ~= nil and e.definition_id ~= c.id then
      return nil, format("%s runs chart %s, not %s", what, tostring(e.definition_id), c.id)
    end
    local node, err = m:node_at(e.active_path, what)
    if err then return nil, err end
    -- a region that finished is a place the execution passed, not where it is
    local class = e.status == "FAILED" and "failed" or "current"
    if e.parent_id ~= nil and (e.status == "DONE" or e.status == "CANCELLED") then class = "visited" end
    if node then m:mark(node, class) end
  end
  local last_to = {}
  for _, item in ipairs(ordered_steps(traces)) do
    local s = item.s
    local where = format("trace step %d of trace %d", item.si, item.ti)
    local from, err = m:node_at(s.from, where)
    if err then return nil, err end
    local to, err2 = m:node_at(s.to, where)
    if err2 then return nil, err2 end
    if to then last_to[item.ti] = to end
    m:step(from, to, s.event)
  end
  if #exes == 0 then
    for ti = 1, #traces do
      if last_to[ti] then m:mark(last_to[ti], "current") end
    end
  end
  return m.h
end

------------------------------------------------------------------------
-- Options

-- The diagrams' signatures: the options are the program's, so a value they
-- cannot take raises too.
local DIAGRAM_ARGS = {
  { "c", "mongostore.Chart" },
  { "opts", "table?", fields = {
      execution = "mongostore.Execution|table", executions = "table", trace = "table", traces = "table",
      names = "table", direction = { "string", one_of = { "TB", "LR", "BT", "RL" } },
      title = { "string|boolean", check = function(v) return v == true and "must be a string or false" or nil end } } },
}
local SIGS = { to_dot = contract.define("diagram.to_dot", DIAGRAM_ARGS),
               to_mermaid = contract.define("diagram.to_mermaid", DIAGRAM_ARGS) }

local function prepare(fname, c, opts)
  if opts == nil then opts = {} end
  local g = build(c, opts.names)
  local ok, h, err = pcall(highlight, g, opts)
  if not ok then error((tostring(h):gsub("^diagram:", "diagram." .. fname .. ":")), 3) end
  if not h then return nil, err end
  g.h = h
  return g, opts
end

local function order_suffix(e)
  if #e.order == 0 then return "" end
  local nums = {}
  for i, o in ipairs(e.order) do nums[i] = tostring(o) end
  return "(" .. concat(nums, ", ") .. ")"
end

local function with_order(label, e)
  local suffix = order_suffix(e)
  if suffix == "" then return label end
  return label == "" and suffix or (label .. " " .. suffix)
end

------------------------------------------------------------------------
-- Graphviz DOT

local DOT_CLASS = {
  current = { fill = "#ffd27f", color = "#d35400", width = 2 },
  failed = { fill = "#f5b7b1", color = "#c0392b", width = 2 },
  active = { color = "#d35400", width = 2 },
  visited = { fill = "#eaf2fb", color = "#2e86c1", width = 1 },
}
local TAKEN = "#d35400"

-- The attributes of a container's cluster (inside node, highlighted with style or not).
local function dot_cluster_attrs(node, label, style)
  local st = (node.orthogonal and "dashed" or "rounded") .. (style and style.width > 1 and ",bold" or "")
  local attrs = { "label=" .. label, "style=\"" .. st .. "\"" }
  if style then
    attrs[#attrs + 1] = format("color=\"%s\"", style.color)
    attrs[#attrs + 1] = format("penwidth=%d", style.width)
  end
  return attrs
end

-- The attributes of a simple state's node.
local function dot_state_attrs(ch, label, class, style)
  local attrs = { "label=" .. label }
  if ch.final then attrs[#attrs + 1] = "peripheries=2" end
  if style then
    attrs[#attrs + 1] = format("style=\"rounded,filled%s\"", style.width > 1 and ",bold" or "")
    attrs[#attrs + 1] = format("fillcolor=\"%s\"", style.fill or "white")
    attrs[#attrs + 1] = format("color=\"%s\"", style.color)
    attrs[#attrs + 1] = format("penwidth=%d", style.width)
    attrs[#attrs + 1] = format("class=\"%s\"", class)
  end
  return attrs
end

-- An edge's end point: a container is reached at its anchor, with lhead/ltail.
local function dot_endpoint(x, ids)
  if x.ptype then return x.id, nil end -- a pseudo state
  if is_container(x) then
    return ids[x] .. (x.initial and "_start" or "_anchor"), "cluster_" .. ids[x]
  end
  return ids[x], nil
end

-- An edge's line (a taken one drawn in TAKEN).
local function dot_edge(e, ids)
  local from, ltail = dot_endpoint(e.from, ids)
  local to, lhead = dot_endpoint(e.to, ids)
  local attrs = {}
  local label = with_order(e.label, e)
  if label ~= "" then attrs[#attrs + 1] = "label=" .. dot_text(label) end
  if ltail and ltail ~= lhead then attrs[#attrs + 1] = "ltail=" .. ltail end
  if lhead and ltail ~= lhead then attrs[#attrs + 1] = "lhead=" .. lhead end
  if e.label == "else" then attrs[#attrs + 1] = "style=dashed" end
  if #e.order > 0 then
    attrs[#attrs + 1] = format("color=\"%s\", fontcolor=\"%s\", penwidth=2.5, class=\"taken\"", TAKEN, TAKEN)
  end
  return from .. " -> " .. to .. (#attrs > 0 and (" [" .. concat(attrs, ", ") .. "]") or "") .. ";"
end

function M.to_dot(c, opts)
  local bad = SIGS.to_dot:check(c, opts)
  if bad then error(bad, 2) end
  local g, err = prepare("to_dot", c, opts)
  if not g then return nil, err, "invalid" end
  opts = opts or {}
  local names, h, ids = opts.names, g.h, g.ids
  local out = {}
  local function w(depth, line) out[#out + 1] = string.rep("  ", depth) .. line end
  local title = opts.title == nil and c.id or opts.title
  w(0, "digraph " .. dot_text(c.id) .. " {")
  w(1, format("graph [compound=true, rankdir=%s, fontname=\"Helvetica\", fontsize=12, nodesep=0.4%s];",
    opts.direction or "TB", title and (", labelloc=t, label=" .. dot_text(title)) or ""))
  w(1, "node [shape=box, style=\"rounded\", fontname=\"Helvetica\", fontsize=11];")
  w(1, "edge [fontname=\"Helvetica\", fontsize=10];")
  -- pseudo states grouped by scope
  local pseudo_in = {}
  for _, p in ipairs(g.pseudo) do
    pseudo_in[p.scope] = pseudo_in[p.scope] or {}
    local list = pseudo_in[p.scope]
    list[#list + 1] = p
  end
  local function pseudo_line(depth, p)
    if p.ptype == "choice" then
      w(depth, p.id .. " [shape=diamond, style=\"\", label=\"\", width=0.3, height=0.3];")
    else
      w(depth, p.id .. " [shape=box, style=filled, fillcolor=black, label=\"\", width=0.5, height=0.06];")
    end
  end
  local function label_of(node)
    local lines = { node.name }
    for _, l in ipairs(state_notes(node, names)) do lines[#lines + 1] = l end
    return dot_text(concat(lines, "\n"))
  end
  local function scope_body(node, depth)
    if node.initial then
      w(depth, ids[node] .. "_start [shape=point, width=0.12, label=\"\"];")
    elseif node.orthogonal then
      w(depth, ids[node] .. "_anchor [shape=point, style=invis, width=0.01, label=\"\"];")
    end
    for _, ch in ipairs(node.children) do
      local class = h.state[ch]
      local style = class and DOT_CLASS[class]
      if is_container(ch) then
        w(depth, "subgraph cluster_" .. ids[ch] .. " {")
        for _, a in ipairs(dot_cluster_attrs(node, label_of(ch), style)) do w(depth + 1, a .. ";") end
        scope_body(ch, depth + 1)
        w(depth, "}")
      else
        w(depth, ids[ch] .. " [" .. concat(dot_state_attrs(ch, label_of(ch), class, style), ", ") .. "];")
      end
    end
    for _, p in ipairs(pseudo_in[node] or {}) do pseudo_line(depth, p) end
  end
  scope_body(c.root, 1)
  for _, e in ipairs(g.edges) do w(1, dot_edge(e, ids)) end
  w(0, "}")
  return concat(out, "\n") .. "\n"
end

------------------------------------------------------------------------
-- Mermaid stateDiagram-v2

local MERMAID_CLASS = {
  current = "fill:#ffd27f,stroke:#d35400,stroke-width:3px",
  failed = "fill:#f5b7b1,stroke:#c0392b,stroke-width:3px",
  active = "stroke:#d35400,stroke-width:3px",
  visited = "fill:#eaf2fb,stroke:#2e86c1",
}

-- The innermost state enclosing both a and b (each a node or pseudo state).
local function common_scope(a, b, root)
  local function scope_of(x) return x.ptype and x.scope or (x.parent or root) end
  local sa, sb = scope_of(a), scope_of(b)
  while sa and not is_within(sb, sa) do sa = sa.parent end
  return sa or root
end

-- The edges and pseudo states of each scope (the state that holds them).
local function mermaid_scopes(g, c)
  local edges_in, pseudo_in = {}, {}
  for _, e in ipairs(g.edges) do
    local scope = e.scope or common_scope(e.from, e.to, c.root)
    edges_in[scope] = edges_in[scope] or {}
    local list = edges_in[scope]
    list[#list + 1] = e
  end
  for _, p in ipairs(g.pseudo) do
    pseudo_in[p.scope] = pseudo_in[p.scope] or {}
    local list = pseudo_in[p.scope]
    list[#list + 1] = p
  end
  return edges_in, pseudo_in
end

-- How an edge names its end: [*] for a start, a pseudo state's id, a state's.
local function mermaid_ref(x, ids)
  if x.ptype == "start" then return "[*]" end
  if x.ptype then return x.id end
  return ids[x]
end

-- The highlight's classes: a classDef and a class line per class used.
local function mermaid_classes(g, h, ids, w)
  for _, class in ipairs { "current", "failed", "active", "visited" } do
    local members = {}
    for _, node in ipairs(g.list) do
      if h.state[node] == class then members[#members + 1] = ids[node] end
    end
    if #members > 0 then
      w(1, "classDef " .. class .. " " .. MERMAID_CLASS[class])
      w(1, "class " .. concat(members, ",") .. " " .. class)
    end
  end
end

function M.to_mermaid(c, opts)
  local bad = SIGS.to_mermaid:check(c, opts)
  if bad then error(bad, 2) end
  local g, err = prepare("to_mermaid", c, opts)
  if not g then return nil, err, "invalid" end
  opts = opts or {}
  local names, h, ids = opts.names, g.h, g.ids
  local out = {}
  local function w(depth, line) out[#out + 1] = string.rep("  ", depth) .. line end
  if opts.title then
    -- a title goes in the front matter, which is YAML: double-quoted with
    -- the same entities as every other label
    w(0, "---")
    w(0, "title: \"" .. mermaid_text(opts.title) .. "\"")
    w(0, "---")
  end
  w(0, "stateDiagram-v2")
  w(1, "direction " .. (opts.direction or "TB"))
  local edges_in, pseudo_in = mermaid_scopes(g, c)
  local function ref(x) return mermaid_ref(x, ids) end
  local function scope_body(node, depth)
    for i, ch in ipairs(node.children) do
      if node.orthogonal and i > 1 then w(depth, "--") end
      local notes = state_notes(ch, names)
      if is_container(ch) then
        -- mermaid gives a composite no description lines: its notes go in its name
        local label = #notes > 0 and (ch.name .. " (" .. concat(notes, ", ") .. ")") or ch.name
        w(depth, "state \"" .. mermaid_text(label) .. "\" as " .. ids[ch])
      else
        w(depth, "state \"" .. mermaid_text(ch.name) .. "\" as " .. ids[ch])
        for _, l in ipairs(notes) do w(depth, ids[ch] .. " : " .. mermaid_text(l)) end
      end
      if is_container(ch) then
        w(depth, "state " .. ids[ch] .. " {")
        scope_body(ch, depth + 1)
        w(depth, "}")
      end
    end
    for _, p in ipairs(pseudo_in[node] or {}) do
      w(depth, "state " .. p.id .. (p.ptype == "choice" and " <<choice>>" or " <<join>>"))
    end
    if node.orthogonal then return end
    for _, e in ipairs(edges_in[node] or {}) do
      local label = with_order(e.label, e)
      w(depth, ref(e.from) .. " --> " .. ref(e.to) .. (label ~= "" and (" : " .. mermaid_text(label)) or ""))
    end
    for _, ch in ipairs(node.children) do
      if ch.final then w(depth, ids[ch] .. " --> [*]") end
    end
  end
  scope_body(c.root, 1)
  -- edges whose scope is an orthogonal state (between its regions) are drawn
  -- one level out: mermaid has no statements between the regions' dividers
  for _, node in ipairs(g.list) do
    if node.orthogonal and edges_in[node] then
      for _, e in ipairs(edges_in[node]) do
        local label = with_order(e.label, e)
        w(1, ref(e.from) .. " --> " .. ref(e.to) .. (label ~= "" and (" : " .. mermaid_text(label)) or ""))
      end
    end
  end
  if h.any then mermaid_classes(g, h, ids, w) end
  return concat(out, "\n") .. "\n"
end

return M
