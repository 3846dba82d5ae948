-- mongostore.chart - statechart definitions: a Lua table checked once by
-- chart.define and compiled into an immutable tree of states with their
-- transitions, timers, hooks and paths, and the event kinds it takes from
-- outside (external). A wrong chart raises an error that names the state
-- path, before anything runs.
local type, pairs, ipairs, next, error, tostring = type, pairs, ipairs, next, error, tostring
local setmetatable, getmetatable, format, concat = setmetatable, getmetatable, string.format, table.concat

local M = {}

-- Events the engine itself gives meaning to; a chart may handle Cancel,
-- Timeout and Finished with transitions, the others are driven by the engine.
M.RESERVED = { Start = true, Finished = true, Returned = true, Timeout = true, Cancel = true, Reset = true,
               SetState = true,
               Terminate = true, Suspend = true, Resume = true }

local STATE_KEYS = {
  [1] = true, initial = true, states = true, transitions = true, orthogonal = true, final = true,
  timeout = true, on_enter = true, on_exit = true, on_activity = true, defer = true, history = true,
  invoke = true, with = true, each = true, as = true, carry = true,
}
local TRANSITION_KEYS = {
  from = true, to = true, on = true, where = true, select = true, join = true, else_to = true,
  action = true,
}

local function fail(chart_id, path, fmt, ...)
  local where = path == "" and "(root)" or path
  error(format("chart %s: state %s: " .. fmt, tostring(chart_id), where, ...), 0)
end

local function check_name(chart_id, parent_path, name)
  if type(name) ~= "string" or name == "" then
    fail(chart_id, parent_path, "a state needs a name as its first item, got %s", tostring(name))
  end
  if name:find(".", 1, true) or name:sub(1, 1) == "$" or name:find("%z") or name:find("[%c]") then
    fail(chart_id, parent_path, "state name '%s' may not contain '.', control characters or start with '$'", name)
  end
end

local function is_fn(v) return type(v) == "function" end

-- carry = { "key", ... }: the context keys a child execution reports to its
-- parent when it finishes (harel's `carry`), under harel's conventions
-- (dialect = "harel").
local function check_carry(list, bad)
  if type(list) ~= "table" or #list == 0 then bad("carry must be a non-empty list of context keys") end
  local out = {}
  for i, k in ipairs(list) do
    if type(k) ~= "string" or k == "" then bad("carry must be a non-empty list of context keys") end
    out[i] = k
  end
  return out
end

-- invoke = "chart id": entering the state starts that chart as a child
-- execution and waits for it; its Finished comes back as a Returned event.
-- with = { child_key = "parent_key" } is what the child starts with; each =
-- "list key", as = "name" fans out one child per entry of the context list,
-- joined like an orthogonal state's regions.
local function with_map(chart_id, path, with)
  local out = {}
  if type(with) ~= "table" then fail(chart_id, path, "with must map child keys to parent keys") end
  for ck, pk in pairs(with) do
    if type(ck) ~= "string" or ck == "" or type(pk) ~= "string" or pk == "" then
      fail(chart_id, path, "with must map child keys to parent keys (strings)")
    end
    out[ck] = pk
  end
  return out
end

local function check_invoke(chart_id, path, def, node)
  local inv = def.invoke
  if inv == nil then
    for _, k in ipairs { "each", "as" } do
      if def[k] ~= nil then fail(chart_id, path, "%s belongs to an invoke (invoke = \"chart id\")", k) end
    end
    if def.with ~= nil then
      -- on an orthogonal state: what each region starts with
      if def.orthogonal ~= true then
        fail(chart_id, path, "with belongs to an invoke or an orthogonal state")
      end
      node.with = with_map(chart_id, path, def.with)
    end
    return
  end
  if type(inv) ~= "string" or inv == "" then fail(chart_id, path, "invoke must be a chart id (a non-empty string)") end
  if def.states ~= nil or def.orthogonal ~= nil or def.final ~= nil then
    fail(chart_id, path, "an invoke state is a leaf: no states, orthogonal or final")
  end
  local with = def.with ~= nil and with_map(chart_id, path, def.with) or {}
  if (def.each == nil) ~= (def.as == nil) then
    fail(chart_id, path, "each and as go together: each = \"list key\", as = \"name\"")
  end
  if def.each ~= nil then
    if type(def.each) ~= "string" or def.each == "" or type(def.as) ~= "string" or def.as == "" then
      fail(chart_id, path, "each and as must be non-empty strings")
    end
    node.each, node.as = def.each, def.as
  end
  node.invoke, node.with, node.with_given = inv, with, def.with ~= nil
end

-- Checks a state's hooks, history, defer and timeout; puts the deferred
-- kinds and the timeout on its node.
local function check_state_options(chart_id, path, def, node)
  for _, hook in ipairs { "on_enter", "on_exit", "on_activity" } do
    if def[hook] ~= nil and not is_fn(def[hook]) then fail(chart_id, path, "%s must be a function", hook) end
  end
  if def.history ~= nil and type(def.history) ~= "boolean" then
    fail(chart_id, path, "history must be true or false")
  end
  if def.defer ~= nil then
    if type(def.defer) ~= "table" then fail(chart_id, path, "defer must be a list of event kinds") end
    for _, k in ipairs(def.defer) do
      if type(k) ~= "string" or k == "" then fail(chart_id, path, "defer must be a list of event kinds") end
      node.defer[k] = true
    end
  end
  local t = def.timeout
  if t ~= nil then
    if type(t) == "number" then
      if not (t > 0 and t < math.huge) then fail(chart_id, path, "timeout must be a positive number of seconds") end
    elseif type(t) ~= "table" or type(t.context) ~= "string" then
      fail(chart_id, path, "timeout must be seconds or { context = \"key\" }")
    end
    node.timeout = t
  end
end

-- Checks a state's initial against its children (an orthogonal state has
-- none: every region runs) and puts the initial child on its node.
local function check_initial(chart_id, path, def, node)
  if node.orthogonal then
    if #node.children == 0 then fail(chart_id, path, "an orthogonal state needs regions (states)") end
    if def.initial ~= nil then fail(chart_id, path, "an orthogonal state has no initial: every region runs") end
    for _, region in ipairs(node.children) do
      if #region.children == 0 then fail(chart_id, region.path, "a region of an orthogonal state needs states") end
    end
  elseif #node.children > 0 then
    if def.initial == nil then fail(chart_id, path, "missing initial") end
    local init = node.by_name[def.initial]
    if not init then fail(chart_id, path, "initial '%s' is not one of its states", tostring(def.initial)) end
    node.initial = init
  elseif def.initial ~= nil then
    fail(chart_id, path, "initial given but the state has no states")
  end
end

-- Builds the node for one state table (recursively).
local function build_node(chart_id, def, parent, index)
  local name = def[1]
  local parent_path = parent and parent.path or ""
  check_name(chart_id, parent_path, name)
  local path = parent and (parent.path == "" and name or parent.path .. "." .. name) or name
  for k in pairs(def) do
    if not STATE_KEYS[k] then fail(chart_id, path, "unknown key '%s'", tostring(k)) end
  end
  if index[path] then fail(chart_id, path, "duplicate state name '%s'", name) end
  local node = {
    name = name, path = path, parent = parent, depth = parent and parent.depth + 1 or 0,
    children = {}, by_name = {}, outgoing = {},
    on_enter = def.on_enter, on_exit = def.on_exit, on_activity = def.on_activity,
    history = def.history ~= false, defer = {},
  }
  index[path] = node
  check_state_options(chart_id, path, def, node)
  if def.final ~= nil then
    if type(def.final) ~= "string" and def.final ~= true then
      fail(chart_id, path, "final must be an outcome string (or true for no outcome)")
    end
    node.final = true
    node.outcome = type(def.final) == "string" and def.final or nil
    if def.states then fail(chart_id, path, "a final state cannot have states") end
  end
  if def.carry ~= nil then node.carry = check_carry(def.carry, function(m) fail(chart_id, path, "%s", m) end) end
  check_invoke(chart_id, path, def, node)
  local states = def.states
  if states ~= nil then
    if type(states) ~= "table" or #states == 0 then fail(chart_id, path, "states must be a non-empty list") end
    for _, sdef in ipairs(states) do
      if type(sdef) ~= "table" then fail(chart_id, path, "each state must be a table like { \"Name\", ... }") end
      local child = build_node(chart_id, sdef, node, index)
      if node.by_name[child.name] then fail(chart_id, child.path, "duplicate state name '%s'", child.name) end
      node.by_name[child.name] = child
      node.children[#node.children + 1] = child
    end
  end
  node.orthogonal = def.orthogonal == true
  check_initial(chart_id, path, def, node)
  node.kind = node.orthogonal and "orthogonal" or (#node.children > 0 and "composite") or (node.final and "final")
              or (node.invoke and "invoke") or "leaf"
  -- what waits on child executions and joins them: regions or a fan-out
  node.joins = node.orthogonal or node.each ~= nil
  node.def_transitions = def.transitions
  return node
end

-- A state named by a transition, seen from `scope`: a path below the scope,
-- then below each enclosing state, then from the chart's root.
local function lookup(index, scope, name)
  local s = scope
  while s do
    local p = s.path == "" and name or s.path .. "." .. name
    if index[p] then return index[p] end
    s = s.parent
  end
  return nil
end

local function event_set(chart_id, path, on)
  if on == nil then return nil end
  local set, list = {}, type(on) == "table" and on or { on }
  if type(on) ~= "string" and type(on) ~= "table" then
    fail(chart_id, path, "on must be an event kind or a list of them")
  end
  for _, k in ipairs(list) do
    if type(k) ~= "string" or k == "" then fail(chart_id, path, "on must be an event kind or a list of them") end
    set[k] = true
  end
  if next(set) == nil then fail(chart_id, path, "on must name at least one event kind") end
  return set
end

local function is_ancestor(a, b) -- a is a proper ancestor of b
  local p = b.parent
  while p do
    if p == a then return true end
    p = p.parent
  end
  return false
end
M.is_ancestor = is_ancestor

local function compile_transitions(chart_id, scope, index, all)
  local defs = scope.def_transitions
  scope.def_transitions = nil
  if defs ~= nil then
    if type(defs) ~= "table" then fail(chart_id, scope.path, "transitions must be a list") end
    for i, d in ipairs(defs) do
      if type(d) ~= "table" then fail(chart_id, scope.path, "transition %d must be a table", i) end
      for k in pairs(d) do
        if not TRANSITION_KEYS[k] then fail(chart_id, scope.path, "transition %d: unknown key '%s'", i, tostring(k)) end
      end
      if type(d.from) ~= "string" then fail(chart_id, scope.path, "transition %d needs from = \"State\"", i) end
      local src = lookup(index, scope, d.from)
      if not src or not (src == scope or is_ancestor(scope, src)) then
        fail(chart_id, scope.path, "transition %d: from '%s' is not a state inside this one", i, d.from)
      end
      local events = event_set(chart_id, src.path, d.on)
      local label = format("transition from %s%s", d.from,
        d.on and (" on " .. (type(d.on) == "table" and concat(d.on, "|") or d.on)) or "")
      local t = { source = src, events = events, label = label }
      if d.where ~= nil and not is_fn(d.where) then fail(chart_id, src.path, "%s: where must be a function", label) end
      if d.action ~= nil and not is_fn(d.action) then
        fail(chart_id, src.path, "%s: action must be a function", label)
      end
      t.guard, t.action = d.where, d.action
      if src.final then fail(chart_id, src.path, "%s: a final state has no way out", label) end
      local function target(name, what)
        if type(name) ~= "string" then fail(chart_id, src.path, "%s: %s must be a state name", label, what) end
        local node = lookup(index, scope, name)
        if not node then fail(chart_id, src.path, "%s: unknown target '%s'", label, name) end
        return node
      end
      if d.select ~= nil then
        if not is_fn(d.select) then fail(chart_id, src.path, "%s: select must be a function", label) end
        if type(d.to) ~= "table" or next(d.to) == nil then
          fail(chart_id, src.path, "%s: a selector needs targets: to = { key = \"State\", ... }", label)
        end
        t.select, t.targets = d.select, {}
        for key, name in pairs(d.to) do
          if type(key) ~= "string" then fail(chart_id, src.path, "%s: selector keys must be strings", label) end
          t.targets[key] = target(name, "to." .. key)
        end
      elseif d.to == nil then
        -- targetless (SCXML's transition without a target, UML's internal
        -- transition): taking it runs its action and leaves the active
        -- state as it is, nothing exited or entered, no timer re-armed. Only
        -- on an event: an automatic one would take itself for ever.
        if d.join ~= nil or d.else_to ~= nil then fail(chart_id, src.path, "%s: a join needs a target (to)", label) end
        if not events then
          fail(chart_id, src.path, "%s: needs a target (to); only a transition on an event may go without one", label)
        end
        t.targetless = true
      else
        t.target = target(d.to, "to")
      end
      if d.join ~= nil then
        if d.join ~= "all" and d.join ~= "any" then
          fail(chart_id, src.path, "%s: join must be \"all\" or \"any\"", label)
        end
        if not src.joins then
          fail(chart_id, src.path, "%s: join is only for an orthogonal state or an invoke with each", label)
        end
        if t.events then fail(chart_id, src.path, "%s: a join is automatic, it takes no on", label) end
        t.join = d.join
      end
      if d.else_to ~= nil then
        if not t.join then fail(chart_id, src.path, "%s: else_to belongs to a join", label) end
        t.else_target = target(d.else_to, "else_to")
      end
      if src.joins and not t.events and not t.join then t.join = "all" end
      if src.invoke and not src.each and not t.events then
        fail(chart_id, src.path, "%s: an invoke state waits for its child: leave it on = \"Returned\" (or another "
          .. "event), not automatically", label)
      end
      all[#all + 1] = t
      src.outgoing[#src.outgoing + 1] = t
    end
  end
  for _, c in ipairs(scope.children) do compile_transitions(chart_id, c, index, all) end
end

-- Every state must be reachable from the root's initial state through
-- initial states, regions and transition targets.
local function check_reachable(chart_id, root, index)
  local seen, stack = { [root] = true }, { root }
  local function visit(n)
    if n and not seen[n] then
      seen[n] = true
      stack[#stack + 1] = n
    end
  end
  while #stack > 0 do
    local n = table.remove(stack)
    -- entering a node enters its ancestors; a composite enters its initial,
    -- and (through history) any child it once left
    local p = n.parent
    while p do visit(p); p = p.parent end
    if n.orthogonal then
      for _, r in ipairs(n.children) do visit(r) end
    elseif n.initial then
      visit(n.initial)
    end
    local up = n
    while up do
      for _, t in ipairs(up.outgoing) do
        visit(t.target)
        visit(t.else_target)
        if t.targets then for _, x in pairs(t.targets) do visit(x) end end
      end
      up = up.parent
    end
  end
  local missing = {}
  for path, n in pairs(index) do
    if not seen[n] then missing[#missing + 1] = path end
  end
  if #missing > 0 then
    table.sort(missing)
    fail(chart_id, missing[1], "unreachable: no initial state or transition leads here")
  end
end

-- external = { "PlaceOrder", "Paid", ... }: the kinds that may come from
-- outside (an HTTP client, a queue). Each must be a kind some transition
-- handles (a kind nothing handles is a typo, or an event that would be
-- dropped), listed once, and none reserved: control events have their own
-- calls (engine:cancel, ...) and Start, Finished, Timeout are the engine's.
-- The set is read-only.
local external_kinds = setmetatable({}, { __mode = "k" })

local function external_set(chart_id, list, transitions)
  local function bad(fmt, ...) error(format("chart %s: external: " .. fmt, chart_id, ...), 0) end
  if type(list) ~= "table" then bad("must be a list of event kinds, got %s", type(list)) end
  local n = 0
  for _ in pairs(list) do n = n + 1 end
  if n ~= #list then bad("must be a list of event kinds (keys 1..n)") end
  local handled = {}
  for _, t in ipairs(transitions) do
    for k in pairs(t.events or {}) do handled[k] = true end
  end
  local set, sorted = {}, {}
  for i, k in ipairs(list) do
    if type(k) ~= "string" or k == "" then bad("item %d must be a non-empty string, got %s", i, type(k)) end
    if M.RESERVED[k] then bad("'%s' is reserved for the engine and its control calls", k) end
    if set[k] then bad("'%s' is listed twice", k) end
    if not handled[k] then bad("no transition handles '%s'", k) end
    set[k] = true
    sorted[#sorted + 1] = k
  end
  table.sort(sorted)
  -- LuaJIT has no __pairs: external_kinds lists the set from here
  local proxy = setmetatable({}, {
    __index = set,
    __newindex = function() error("a chart's external set is immutable", 2) end,
    __pairs = function() return next, set, nil end,
    __metatable = false,
  })
  external_kinds[proxy] = sorted
  return proxy
end

-- inputs = { total = "number", note = "string?", tries = { type = "integer", min = 0, max = 5 } }:
-- the context fields a caller of engine:start may set, and their types. A
-- chart that declares inputs is started only with declared fields, each of
-- its type (nil, message otherwise); one without takes any context. A
-- type name ending in "?", or optional = true, may be left out; the others
-- must be given. min and max bound numbers; max_length bounds strings
-- (bytes) and arrays (items).
local INPUT_TYPES = { string = true, number = true, integer = true, boolean = true, object = true, array = true }
local INPUT_KEYS = { type = true, optional = true, min = true, max = true, max_length = true }

local function finite(v) return type(v) == "number" and v == v and v ~= math.huge and v ~= -math.huge end

local function input_set(chart_id, inputs)
  local function bad(name, fmt, ...)
    error(format("chart %s: inputs%s: " .. fmt, chart_id, name and ("." .. tostring(name)) or "", ...), 0)
  end
  if type(inputs) ~= "table" or getmetatable(inputs) ~= nil then bad(nil, "must be a table of name = type") end
  local set = {}
  for name, spec in pairs(inputs) do
    if type(name) ~= "string" or name == "" then bad(nil, "names must be non-empty strings, got %s", type(name)) end
    local one = {}
    if type(spec) == "string" then
      one.type, one.optional = spec:match("^(%a+)(%??)$")
      one.optional = one.optional == "?"
      if not one.type then bad(name, "'%s' is not a type", spec) end
    elseif type(spec) == "table" then
      for k in pairs(spec) do
        if not INPUT_KEYS[k] then bad(name, "unknown key '%s'", tostring(k)) end
      end
      one.type = spec.type
      if spec.optional ~= nil and type(spec.optional) ~= "boolean" then bad(name, "optional must be a boolean") end
      one.optional = spec.optional == true
      for _, k in ipairs { "min", "max", "max_length" } do
        if spec[k] ~= nil and not finite(spec[k]) then bad(name, "%s must be a finite number", k) end
        one[k] = spec[k]
      end
      if one.min and one.max and one.min > one.max then bad(name, "min is above max") end
    else
      bad(name, "must be a type name or { type = ... }, got %s", type(spec))
    end
    if not INPUT_TYPES[one.type] then
      bad(name, "'%s' is not a type (string, number, integer, boolean, object, array)", tostring(one.type))
    end
    if (one.min or one.max) and one.type ~= "number" and one.type ~= "integer" then
      bad(name, "min and max are for numbers")
    end
    if one.max_length and one.type ~= "string" and one.type ~= "array" then
      bad(name, "max_length is for strings and arrays")
    end
    set[name] = one
  end
  return set
end

-- An integer beyond 2^53 decoded on LuaJIT is a boxed int64.
local function is_int64_box(v)
  local mt = type(v) == "userdata" and getmetatable(v)
  return mt and mt.__name == "mongostore.int64" or false
end

local function input_error(name, one, v)
  local core = require "mongostore.core"
  local t = one.type
  local ok
  if is_int64_box(v) then
    ok = t == "number" or t == "integer"
    -- its nearest double is close enough to hold against min and max
    if ok then v = tonumber(tostring(v)) or 0 end
  elseif t == "string" then
    ok = type(v) == "string"
  elseif t == "number" then
    ok = finite(v)
  elseif t == "integer" then
    ok = finite(v) and v == math.floor(v)
  elseif t == "boolean" then
    ok = type(v) == "boolean"
  elseif t == "object" then
    ok = type(v) == "table" and not core.is_array(v)
  else
    ok = type(v) == "table" and core.is_array(v)
  end
  if not ok then
    local got = type(v)
    if got == "number" then
      got = tostring(v)
    elseif got == "table" then
      got = core.is_array(v) and "an array" or "an object"
    end
    local article = (t == "integer" or t == "array" or t == "object") and "an" or "a"
    return format("opts.context.%s must be %s %s, got %s", name, article, t, got)
  end
  if one.min and v < one.min then return format("opts.context.%s must be at least %s", name, tostring(one.min)) end
  if one.max and v > one.max then return format("opts.context.%s must be at most %s", name, tostring(one.max)) end
  if one.max_length and #v > one.max_length then
    return format("opts.context.%s must be at most %d %s long", name, one.max_length,
      t == "string" and "bytes" or "items")
  end
  return nil
end

-- chart.check_inputs(c, context) -> true | nil, message: whether a start may
-- be given this context (always, for a chart that declares no inputs).
function M.check_inputs(c, context)
  if not M.is_chart(c) then error("chart.check_inputs: c must be a chart (chart.define), got " .. type(c), 2) end
  if context ~= nil and type(context) ~= "table" then
    error("chart.check_inputs: context must be a table, got " .. type(context), 2)
  end
  local inputs = c.inputs
  if not inputs then return true end
  context = context or {}
  local names = {}
  for k in pairs(context) do
    if type(k) ~= "string" then return nil, "opts.context keys must be strings" end
    names[#names + 1] = k
  end
  table.sort(names)
  for _, k in ipairs(names) do
    local one = inputs[k]
    if not one then return nil, format("opts.context.%s is not an input of chart %s", k, c.id) end
    local why = input_error(k, one, context[k])
    if why then return nil, why end
  end
  local missing = {}
  for k, one in pairs(inputs) do
    if not one.optional and context[k] == nil then missing[#missing + 1] = k end
  end
  table.sort(missing)
  if missing[1] then return nil, format("opts.context.%s is required by chart %s", missing[1], c.id) end
  return true
end

-- chart.inputs(c) -> { name = { type =, optional =, min =, max =, max_length = } } (a copy) or nil
function M.inputs(c)
  if not M.is_chart(c) then error("chart.inputs: c must be a chart (chart.define), got " .. type(c), 2) end
  if not c.inputs then return nil end
  local out = {}
  for k, one in pairs(c.inputs) do
    local copy = {}
    for f, v in pairs(one) do copy[f] = v end
    out[k] = copy
  end
  return out
end

-- A chart is read through a proxy: its fields cannot be assigned.
local Chart = {}
local ChartMeta = {
  __name = "mongostore.Chart",
  __newindex = function() error("a chart is immutable", 2) end,
}

-- chart.define{ id = "order", initial = "Cart", states = {...}, transitions = {...},
--               external = { "PlaceOrder", ... }, inputs = { total = "number", ... } }
function M.define(def)
  if type(def) ~= "table" then error("chart.define: expected a table", 2) end
  local id = def.id
  if type(id) ~= "string" or id == "" then error("chart.define: id must be a non-empty string", 2) end
  for k in pairs(def) do
    if k ~= "id" and k ~= "initial" and k ~= "states" and k ~= "transitions" and k ~= "history"
      and k ~= "external" and k ~= "dialect" and k ~= "carry" and k ~= "inputs" then
      error(format("chart %s: unknown key '%s'", id, tostring(k)), 2)
    end
  end
  if def.states == nil then error(format("chart %s: states are required", id), 2) end
  if def.dialect ~= nil and def.dialect ~= "mongostore" and def.dialect ~= "harel" then
    error(format("chart %s: dialect must be \"mongostore\" or \"harel\"", id), 2)
  end
  local index = {}
  local root = { name = "", path = "", depth = 0, children = {}, by_name = {}, outgoing = {},
                 history = def.history ~= false, defer = {}, kind = "composite" }
  if def.carry ~= nil then
    local ok, err = pcall(check_carry, def.carry, function(m) error(format("chart %s: %s", id, m), 0) end)
    if not ok then error(err, 2) end
    root.carry = err
  end
  index[""] = root
  if type(def.states) ~= "table" or #def.states == 0 then
    error(format("chart %s: states must be a non-empty list", id), 2)
  end
  local ok2, err2 = pcall(function()
    for _, sdef in ipairs(def.states) do
      if type(sdef) ~= "table" then fail(id, "", "each state must be a table like { \"Name\", ... }") end
      local child = build_node(id, sdef, root, index)
      if root.by_name[child.name] then fail(id, child.path, "duplicate state name '%s'", child.name) end
      root.by_name[child.name] = child
      root.children[#root.children + 1] = child
    end
    if def.initial == nil then fail(id, "", "missing initial") end
    root.initial = root.by_name[def.initial]
    if not root.initial then fail(id, "", "initial '%s' is not one of its states", tostring(def.initial)) end
    root.def_transitions = def.transitions
    local all = {}
    compile_transitions(id, root, index, all)
    check_reachable(id, root, index)
    return all
  end)
  if not ok2 then error(err2, 2) end
  local external
  if def.external ~= nil then
    local ok3, err3 = pcall(external_set, id, def.external, err2)
    if not ok3 then error(err3, 2) end
    external = err3
  end
  local inputs
  if def.inputs ~= nil then
    local ok4, err4 = pcall(input_set, id, def.inputs)
    if not ok4 then error(err4, 2) end
    inputs = err4
  end
  local fields = setmetatable({ id = id, root = root, index = index, external = external, inputs = inputs,
                                dialect = def.dialect or "mongostore" }, { __index = Chart })
  return setmetatable({}, { __index = fields, __newindex = ChartMeta.__newindex, __name = ChartMeta.__name,
                            __metatable = ChartMeta })
end

function M.is_chart(v)
  return getmetatable(v) == ChartMeta
end
require("mongostore.contract").kind("mongostore.Chart", M.is_chart, "a chart (chart.define)")

-- chart.is_external(c, kind): may an event of this kind come from outside?
-- A chart that declares `external` answers for its list; one that does not
-- takes any kind but the reserved ones (what engine:send would apply).
function M.is_external(c, kind)
  if not M.is_chart(c) then error("chart.is_external: c must be a chart (chart.define), got " .. type(c), 2) end
  if type(kind) ~= "string" then error("chart.is_external: kind must be a string, got " .. type(kind), 2) end
  if kind == "" then return false end
  local ext = c.external
  if ext then return ext[kind] == true end
  return not M.RESERVED[kind]
end

-- chart.external_kinds(c): the declared external kinds, sorted (a fresh
-- list), or nil when the chart declares none.
function M.external_kinds(c)
  if not M.is_chart(c) then error("chart.external_kinds: c must be a chart (chart.define), got " .. type(c), 2) end
  local ext = c.external
  if not ext then return nil end
  local out = {}
  for i, k in ipairs(external_kinds[ext]) do out[i] = k end
  return out
end

-- The node at a path, or nil.
function Chart:node(path)
  return self.index[path]
end

return M
