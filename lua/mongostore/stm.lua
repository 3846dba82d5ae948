-- mongostore.stm - harel's .stm charts in Lua: the text read by
-- mongostore.stm.parse into harel's normal form, then mapped onto what
-- chart.define takes, with the actions and guards given in Lua, and the events'
-- typed fields kept beside the chart for check_event. What the engine cannot
-- run yet is refused by name, with its line and column; nothing is dropped.
local parse = require "mongostore.stm.parse"
local expand = require "mongostore.stm.expand"
local chart_mod = require "mongostore.chart"
local contract = require "mongostore.contract"

local type, pairs, ipairs, next, error, tostring, pcall = type, pairs, ipairs, next, error, tostring, pcall
local format, concat, setmetatable, getmetatable = string.format, table.concat, setmetatable, getmetatable

local M = {}

local meta, fail_at, fail_in, py_str = parse.meta, parse.fail_at, parse.fail_in, parse.py_str

-- stm.parse(text) / stm.normalize(text): the program in harel's normal form
-- (the structure harel.dsl.parse builds, positions as { line, column }).
function M.parse(text)
  if type(text) ~= "string" then error("stm.parse: text must be a string, got " .. type(text), 2) end
  return parse.parse(text)
end
function M.normalize(text)
  if type(text) ~= "string" then error("stm.normalize: text must be a string, got " .. type(text), 2) end
  return parse.parse(text)
end

-- stm.expand(text, { machine = "name", actions = {...}, guards = {...} }): the
-- machine as harel's loader resolves it (actions through `bind` and actions,
-- named guards inlined, fragments' uses expanded), the program's events beside.
-- The program with its imports merged, read relative to opts.base_dir;
-- without one, an import is refused by name.
local function load(text, opts)
  if opts.base_dir == nil then
    local prog = parse.parse(text)
    local imp = prog.imports[1]
    if imp then
      fail_at(text, imp.pos[1], imp.pos[2], "`import` is not supported without base_dir: pass "
        .. "{ base_dir = \"the directory imports are read from\" }")
    end
    return prog
  end
  return expand.load(text, opts.base_dir,
                     { import_paths = opts.import_paths, max_import_bytes = opts.max_import_bytes })
end

-- import_paths and max_import_bytes, checked (misuse raises).
-- The options of to_chart and expand (mongostore.StmOptions): the
-- program's, so a value they cannot take raises too.
local function non_empty(v) return v == "" and "must be a non-empty string" or nil end
local function names_to_functions(t)
  for name, fn in pairs(t) do
    if type(name) ~= "string" or type(fn) ~= "function" then
      return "must map names to functions (" .. tostring(name) .. ")"
    end
  end
end
local function directories(list)
  for i, p in ipairs(list) do
    if type(p) ~= "string" or p == "" then return format("entry %d must be a non-empty string", i) end
  end
end
local STM_ARGS = {
  { "text", "string" },
  { "opts", "table?", fields = {
      actions = { "table", check = names_to_functions }, guards = { "table", check = names_to_functions },
      machine = { "string", check = non_empty }, id = { "string", check = non_empty },
      base_dir = { "string", check = non_empty }, import_paths = { "table", check = directories },
      max_import_bytes = { "integer", min = 1 } } },
}
local TO_CHART = contract.define("stm.to_chart", STM_ARGS)
local EXPAND = contract.define("stm.expand", STM_ARGS)

function M.expand(text, opts)
  local bad = EXPAND:check(text, opts)
  if bad then error(bad, 2) end
  opts = opts or {}
  local prog = load(text, opts)
  local order = meta[prog].machines
  local name = opts.machine or order[1]
  if opts.machine == nil and #order > 1 then
    -- as harel's loader: which one is for the caller to say
    fail_at(text, 1, 1, "several machines (%s): pass machine = \"name\"", concat(order, ", "))
  end
  if name == nil or prog.machines[name] == nil then
    fail_at(text, 1, 1, "no machine named '%s'", tostring(name))
  end
  return expand.machine(prog, text, name, opts)
end

-- Event kinds harel gives a meaning mongostore's engine does not have: an
-- `on error` transition catches a failed action there (here the execution
-- fails), Expired comes from a ttl and Returned from an invoke.
local UNRUNNABLE_EVENTS = {
  error = "harel routes a failed action to an `on error` transition; mongostore's engine fails the execution",
  Expired = "Expired comes from a machine's ttl, which mongostore's engine does not run",
}

-- harel's reserved kinds are never checked against declarations.
local RESERVED_EVENTS = { Timeout = true, Finished = true, Cancel = true, Reset = true, SetState = true,
                          Start = true, Returned = true, error = true, Expired = true }

------------------------------------------------------------------------
-- Values, as harel compares them

local is_null do
  local ok, ms = pcall(require, "mongostore.values")
  local null = ok and type(ms) == "table" and ms.null or nil
  is_null = function(v) return v == nil or (null ~= nil and v == null) end
end

local function is_list(v)
  if type(v) ~= "table" then return false end
  local n = 0
  for _ in pairs(v) do n = n + 1 end
  return n == #v
end

local function num(v)
  if type(v) == "number" then return v end
  if type(v) == "boolean" then return v and 1 or 0 end -- Python: True == 1
  return nil
end

local function py_eq(a, b)
  local na, nb = num(a), num(b)
  if na and nb then return na == nb end
  if type(a) == "table" and type(b) == "table" then
    for k, v in pairs(a) do if not py_eq(v, b[k]) then return false end end
    for k in pairs(b) do if a[k] == nil then return false end end
    return true
  end
  return a == b
end

-- A comparison that cannot be made (3 < "a", x in 5) does not hold, as in harel.
local function compare(op, a, b)
  if op == "eq" then return py_eq(a, b) end
  if op == "ne" then return not py_eq(a, b) end
  if op == "in" then
    if type(b) == "string" then return type(a) == "string" and b:find(a, 1, true) ~= nil end
    if type(b) ~= "table" then return false end
    if is_list(b) then
      for _, x in ipairs(b) do if py_eq(a, x) then return true end end
      return false
    end
    return b[a] ~= nil
  end
  local na, nb = num(a), num(b)
  if not (na and nb) then
    if type(a) == "string" and type(b) == "string" then na, nb = a, b else return false end
  end
  if op == "lt" then return na < nb end
  if op == "le" then return na <= nb end
  if op == "gt" then return na > nb end
  return na >= nb
end

local function deep_copy(v)
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = deep_copy(x) end
  return setmetatable(out, getmetatable(v))
end

------------------------------------------------------------------------
-- Typed events

local function fits(t, v)
  if t == "any" then return true end
  if t == "string" then return type(v) == "string" end
  if t == "bool" then return type(v) == "boolean" end
  if t == "float" then return type(v) == "number" end
  if t == "int" then
    if type(v) ~= "number" then return false end
    if math.type then return math.type(v) == "integer" end
    return v % 1 == 0
  end
  return false
end

local function show(v)
  if type(v) == "string" then return format("%q", v) end
  return tostring(v)
end

-- What in data breaks the declared fields: harel's schema_problems (an
-- undeclared key is allowed; a null only for an optional field).
local function problems(fields, data)
  local out, names = {}, {}
  for name in pairs(fields) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    local spec, v = fields[name], data[name]
    if v == nil then
      if spec.required then out[#out + 1] = format("missing required field '%s' (%s)", name, spec.type) end
    elseif not (is_null(v) and not spec.required) and not fits(spec.type, v) then
      out[#out + 1] = format("field '%s' must be %s, got %s %s", name, spec.type, type(v), show(v))
    end
  end
  return out
end

local chart_events = setmetatable({}, { __mode = "k" })
-- chart -> the charts of its inline `invoke { ... }` bodies
local submachines = setmetatable({}, { __mode = "k" })

-- stm.submachines(c): the charts of c's inline `invoke { ... }` bodies (ids
-- `<machine>#<state path>`, nested ones included), a fresh list; the engine
-- registers them with c.
function M.submachines(c)
  if not chart_mod.is_chart(c) then error("stm.submachines: c must be a chart, got " .. type(c), 2) end
  local out = {}
  for i, s in ipairs(submachines[c] or {}) do out[i] = s end
  return out
end

-- stm.check_event(c, kind, data) -> true | nil, msg, "invalid": whether data
-- fits the fields the .stm declared for kind (an undeclared kind, or one of
-- the reserved ones, is not checked).
function M.check_event(c, kind, data)
  if not chart_mod.is_chart(c) then error("stm.check_event: c must be a chart, got " .. type(c), 2) end
  if type(kind) ~= "string" then error("stm.check_event: kind must be a string, got " .. type(kind), 2) end
  if data ~= nil and type(data) ~= "table" then
    error("stm.check_event: data must be a table, got " .. type(data), 2)
  end
  local events = chart_events[c]
  local fields = events and not RESERVED_EVENTS[kind] and events[kind]
  if not fields then return true end
  local bad = problems(fields, data or {})
  if #bad == 0 then return true end
  return nil, format("event '%s' does not fit its declaration: %s", kind, concat(bad, "; ")), "invalid"
end

-- stm.events(c): the declared events of a chart from_stm built, as
-- { Kind = { field = { type = "int", required = true } } } (a copy), or nil.
function M.events(c)
  if not chart_mod.is_chart(c) then error("stm.events: c must be a chart, got " .. type(c), 2) end
  local e = chart_events[c]
  return e and deep_copy(e) or nil
end

------------------------------------------------------------------------
-- Compiling a machine

local Compiler = {}
Compiler.__index = Compiler

function Compiler:fail(pos, fmt, ...)
  pos = pos or self.machine_pos
  fail_in(self.src, pos[1], pos[2], fmt, ...)
end

function Compiler:refuse(pos, construct, why)
  self:fail(pos, "`%s` is not supported: %s", construct, why)
end

-- An action, as the expansion resolved it: a Lua function (opts.actions by
-- handler name), or a path (a `bind`'s, or a literal dotted one), found in
-- opts.actions by that path, else as the field of the module `require` finds.
function Compiler:resolve_action(spec)
  local info = meta[spec] or {}
  local impl = spec["function"]
  if type(impl) == "function" then return impl end
  if self.actions[impl] then return self.actions[impl] end
  local mod, field = impl:match("^(.*)%.([^.]+)$")
  if mod then
    local ok, m = pcall(require, mod)
    if ok and type(m) == "table" and type(m[field]) == "function" then return m[field] end
  end
  self:fail(info.pos, "action '%s' (%s) is not a function: pass actions = { [\"%s\"] = fn } or make module '%s' "
    .. "return it", tostring(info.ref), impl, impl, tostring(mod))
end

-- A hook: fn(context, event, act, inputs).
function Compiler:hook(spec)
  local fn, inputs = self:resolve_action(spec), spec.inputs
  return function(context, event, act) return fn(context, event, act, deep_copy(inputs)) end
end

-- A predicate tree -> fn(scopes) -> boolean.
function Compiler:predicate(p)
  if p.leaf then
    local l = p.leaf
    local source, field, op, value, ref = l.source, l.field, l.op, l.value, l.ref
    return function(s)
      local v = s[source][field]
      if v == nil then return false end
      if ref then
        local other = s[ref.source][ref.field]
        if other == nil then return false end
        return compare(op, v, other)
      end
      return compare(op, v, value)
    end
  end
  if p.all or p.any then
    local parts = {}
    for i, c in ipairs(p.all or p.any) do parts[i] = self:predicate(c) end
    if p.all then
      return function(s)
        for _, f in ipairs(parts) do if not f(s) then return false end end
        return true
      end
    end
    return function(s)
      for _, f in ipairs(parts) do if f(s) then return true end end
      return false
    end
  end
  if p["not"] then
    local f = self:predicate(p["not"])
    return function(s) return not f(s) end
  end
  -- a guard in Lua (opts.guards), called as a `where` is
  local lua_guard = p.lua
  return function(s) return lua_guard(s.event, s.context, s.ev) and true or false end
end

local function scopes(data, context, event)
  return { event = data or {}, context = context or {}, ev = event }
end

-- `set`: every right-hand side evaluated against the context and event as the
-- transition starts (as harel does), applied between the exits and the entries.
local ARITH = {
  ["+"] = function(a, b) return a + b end, ["-"] = function(a, b) return a - b end,
  ["*"] = function(a, b) return a * b end, ["/"] = function(a, b) return a / b end,
}

local function value_of(expr, s)
  if expr.lit ~= nil then return deep_copy(expr.lit) end
  if expr.ref then
    local v = s[expr.ref.source][expr.ref.field]
    if v == nil then error(format("%s.%s is not set", expr.ref.source, expr.ref.field), 0) end
    return deep_copy(v)
  end
  local a = expr.arith
  local l, r = value_of(a.left, s), value_of(a.right, s)
  for _, side in ipairs { l, r } do
    if type(side) ~= "number" then error(format("`%s` needs numbers, got %s %s", a.op, type(side), show(side)), 0) end
  end
  if a.op == "/" and r == 0 then error("division by zero", 0) end
  return ARITH[a.op](l, r)
end

local function evaluate(list, s)
  local values = {}
  for _, a in ipairs(list) do
    local ok, v = pcall(value_of, a.expr, s)
    if not ok then error("set context." .. a.field .. ": " .. tostring(v), 0) end
    values[#values + 1] = { a.field, v }
  end
  return values
end

local function apply(values, context)
  for _, fv in ipairs(values) do context[fv[1]] = fv[2] end
end

local function concat_lists(a, b)
  local out = {}
  for _, x in ipairs(a or {}) do out[#out + 1] = x end
  for _, x in ipairs(b or {}) do out[#out + 1] = x end
  return out
end

-- An unused key for a selector's else.
local function else_key(mapper)
  local k = "else"
  while mapper[k] ~= nil do k = k .. "_" end
  return k
end

-- A choice transition (branches with `when`, and an else): which branch
-- is chosen when the transition is enabled, and what it sets.
function Compiler:choice_transition(t, d, guard, pending)
  local own_set = t.set
  local branches = {}
  for i, b in ipairs(t.choice.branches) do
    branches[i] = { when = self:predicate(b.when), set = concat_lists(own_set, b.set) }
  end
  local default, default_set = t.choice.default, concat_lists(own_set, t.choice.default_set)
  local targets = {}
  for i, b in ipairs(t.choice.branches) do targets[tostring(i)] = b.to end
  if default then targets["else"] = default end
  local function pick(s)
    for i, b in ipairs(branches) do if b.when(s) then return i end end
    return nil
  end
  d.where = function(data, context, event)
    local s = scopes(data, context, event)
    if guard and not guard(s) then return false end
    return default ~= nil or pick(s) ~= nil
  end
  d.select = function(context, event)
    local s = scopes(event and event.data, context, event)
    local i = pick(s)
    pending[context] = evaluate(i and branches[i].set or default_set, s)
    return i and tostring(i) or "else"
  end
  d.to = targets
  d.action = function(context)
    local v = pending[context]
    pending[context] = nil
    if v then apply(v, context) end
  end
  return d
end

-- harel's join: once every region has finished, pass when all (or any) of
-- them ended with outcome "success", else the else target.
local function join_transition(t, d)
  local sel = t.selector
  local mode = meta[t].join
  d.join = "all"
  d.to = { pass = sel.mapper.pass, fail = sel.default }
  d.select = function(context)
    local results = context.region_results
    local n, ok = 0, 0
    if type(results) == "table" then
      for _, r in pairs(results) do
        n = n + 1
        if type(r) == "table" and r.outcome == "success" then ok = ok + 1 end
      end
    end
    local passed = n > 0 and (mode == "all" and ok == n or mode == "any" and ok > 0)
    return passed and "pass" or "fail"
  end
  return d
end

-- A selector transition: a function of the context picks the branch.
function Compiler:selector_transition(t, d, guard, pos)
  local sel = t.selector
  local fnspec = sel
  local fn, inputs = self:resolve_action(fnspec), fnspec.inputs
  local mapper, default = sel.mapper, sel.default
  if sel.enum then
    for _, v in ipairs(sel.enum) do
      if mapper[v] == nil and default == nil then
        self:fail(pos, "selector %s returns '%s' (its `returns`) but has no branch for it and no `else`",
          tostring(meta[fnspec] and meta[fnspec].ref), v)
      end
    end
  end
  local ekey = else_key(mapper)
  local targets = {}
  for k, v in pairs(mapper) do targets[k] = v end
  if default then targets[ekey] = default end
  local label = tostring(meta[fnspec] and meta[fnspec].ref or fnspec["function"])
  d.select = function(context, event)
    local r = fn(context, event, deep_copy(inputs))
    local key = py_str(r)
    if mapper[key] ~= nil then return key end
    if default ~= nil then return ekey end
    error(format("selector %s returned %s, which matches no branch and there is no else", label, show(r)), 0)
  end
  d.to = targets
  if guard then d.where = function(data, context, event) return guard(scopes(data, context, event)) end end
  return d
end

function Compiler:transition(t)
  local pos = t.__pos__
  local d = { from = t.from }
  self.transition_pos[#self.transition_pos + 1] = { from = t.from, pos = pos, src = self.src }
  local guard
  if t.on_event then
    local kinds = {}
    for k in t.on_event.type:gmatch("[^|]+") do
      if UNRUNNABLE_EVENTS[k] then self:refuse(pos, "on " .. k, UNRUNNABLE_EVENTS[k]) end
      kinds[#kinds + 1] = k
    end
    d.on = #kinds == 1 and kinds[1] or kinds
    self.transition_pos[#self.transition_pos].on = t.on_event.type
    if t.on_event.where then guard = self:predicate(t.on_event.where) end
  end
  -- values computed when the transition is enabled (or its branch chosen),
  -- keyed by the execution's context table, applied by its action
  local pending = setmetatable({}, { __mode = "k" })
  if t.choice then return self:choice_transition(t, d, guard, pending) end
  if t.selector then
    if meta[t] and meta[t].join then return join_transition(t, d) end
    return self:selector_transition(t, d, guard, pos)
  end
  local own_set = t.set
  d.to = t.to
  if own_set then
    d.where = function(data, context, event)
      local s = scopes(data, context, event)
      if guard and not guard(s) then return false end
      pending[context] = evaluate(own_set, s)
      return true
    end
    d.action = function(context, event)
      local v = pending[context]
      pending[context] = nil
      if v == nil then v = evaluate(own_set, scopes(event and event.data, context, event)) end
      apply(v, context)
    end
  elseif guard then
    d.where = function(data, context, event) return guard(scopes(data, context, event)) end
  end
  return d
end

local function plain_list(l)
  local out = {}
  for i, v in ipairs(l) do out[i] = v end
  return out
end

-- An inline `invoke { ... }` body: a chart of its own, with harel's id for
-- it (`<machine>#<state path>`), compiled beside the machine and registered
-- with it (stm.submachines). Returns its id.
function Compiler:inline_machine(body, path, cfg)
  local id = self.machine .. "#" .. path
  local sub = setmetatable({
    main = self.main, src = self.src, machine_pos = body.__pos__ or cfg.__pos__, actions = self.actions,
    state_pos = {}, transition_pos = {}, outcome_at = {}, machine = id, submachines = self.submachines,
  }, Compiler)
  sub:refusals(body, meta[body] or { order = {}, at = {} }, "the inline invoke of " .. path, true)
  local def = { id = id, initial = body.start, dialect = "harel" }
  if body.carry then def.carry = plain_list(body.carry) end
  sub:children(def, body, meta[body] or { order = {}, at = {} }, "")
  local pos = body.__pos__ or cfg.__pos__
  if def.states == nil then self:fail(pos, "the inline invoke of %s has no states", path) end
  if def.initial == nil then self:fail(pos, "the inline invoke of %s has no `initial`", path) end
  self.submachines[#self.submachines + 1] = sub:define(def)
  return id
end

-- Constructs of a state (or the machine) the engine cannot run, by name.
function Compiler:refusals(cfg, info, what, is_machine)
  local at = info.at
  local function p(key) return at[key] or cfg.__pos__ end
  if at.invoke and not cfg.invoke and not cfg.invoke_inline then
    self:fail(at.invoke, "`invoke` names no machine: `invoke NAME`")
  end
  if cfg.invoke_with and not cfg.invoke and not cfg.invoke_inline and cfg.type ~= "OrthogonalState" then
    self:fail(p("invoke_with"), "`with` passes context to an `invoke` or to an orthogonal state's regions")
  end
  if cfg.cancel_on_failure then
    self:refuse(p("cancel_on_failure"), "cancel_on_failure", "mongostore's joins wait for every region "
      .. "(join = \"any\" takes the first to finish); none cancels the rest on a failure")
  end
  if cfg.ttl then
    self:refuse(p("ttl"), "ttl", "mongostore's engine does not expire an execution after a time without events")
  end
  if cfg.context_schema then
    self:refuse(p("context_schema"), "context", "a typed context (with defaults) is not checked by "
      .. "mongostore's engine; pass the context to engine:start")
  end
  if is_machine then
    for _, key in ipairs { "on_enter", "on_exit", "on_activity", "timeout", "defer", "outcome" } do
      if cfg[key] ~= nil then
        self:refuse(p(key), (key:gsub("_", " ")) .. " on the machine", "a chart's root has no hooks, "
          .. "timer, deferred kinds or outcome in mongostore: put it on a state")
      end
    end
  end
  if cfg.outcome ~= nil and cfg.states ~= nil and not info.final then
    self:refuse(p("outcome"), "outcome on a composite state", what .. " has states; mongostore records an "
      .. "outcome only from a final state (or a leaf without transitions)")
  end
end

function Compiler:state(name, cfg, path)
  local info = meta[cfg] or { order = {}, at = {} }
  -- a state from an imported fragment: its errors point into that file
  local saved = self.src
  self.src = info.src or saved
  self.state_pos[path] = { cfg.__pos__, self.src }
  self:refusals(cfg, info, "state " .. path, false)
  local def = { name }
  if cfg.type == "OrthogonalState" then
    def.orthogonal = true
    -- harel's regions start with what `with` passes down, nothing else
    def.with = cfg.invoke_with or {}
  elseif cfg.invoke_inline then
    def.invoke = self:inline_machine(cfg.invoke_inline, path, cfg)
    def.with = cfg.invoke_with or {}
    if cfg.invoke_each then def.as, def.each = cfg.invoke_each[1], cfg.invoke_each[2] end
  elseif cfg.invoke then
    def.invoke = cfg.invoke
    def.with = cfg.invoke_with or {}
    if cfg.invoke_each then def.as, def.each = cfg.invoke_each[1], cfg.invoke_each[2] end
  end
  if cfg.carry then def.carry = plain_list(cfg.carry) end
  if cfg.start then def.initial = cfg.start end
  for _, hook in ipairs { "on_enter", "on_exit", "on_activity" } do
    if cfg[hook] then def[hook] = self:hook(cfg[hook]) end
  end
  if cfg.timeout ~= nil then def.timeout = cfg.timeout end
  if cfg.defer then def.defer = plain_list(cfg.defer) end
  if cfg.allow_history == false then def.history = false end
  if cfg.outcome ~= nil then
    def.final = cfg.outcome
    if not info.final then self.outcome_at[path] = info.at.outcome end
  end
  self:children(def, cfg, info, path)
  self.src = saved
  return def
end

function Compiler:children(def, cfg, info, path)
  if cfg.states then
    local list = {}
    for _, n in ipairs(info.order) do
      list[#list + 1] = self:state(n, cfg.states[n], path == "" and n or path .. "." .. n)
    end
    def.states = list
  end
  if cfg.transitions then
    local list = {}
    for _, t in ipairs(cfg.transitions) do list[#list + 1] = self:transition(t) end
    def.transitions = list
  end
end

-- chart.define's error names a state path (and a transition's source and
-- kind): point at that line.
function Compiler:define(def)
  local ok, c = pcall(chart_mod.define, def)
  if ok then return c end
  local msg = tostring(c)
  local path = msg:match("^chart [^:]*: state ([^:]*):")
  local at = path and path ~= "(root)" and self.state_pos[path] or { self.machine_pos, self.main }
  local pos, src = at[1], at[2]
  if path and self.outcome_at[path] and msg:find("a final state has no way out", 1, true) then
    self.src = src
    -- harel records a state's outcome when it ends there; here only a final state has one
    self:refuse(self.outcome_at[path], "outcome on a state with a way out", "mongostore records an outcome only "
      .. "from a final state, which no transition leaves; use `final NAME VERDICT`")
  end
  local from, on = msg:match(": transition from ([^%s:]+) on ([^%s:]+):")
  if not from then from = msg:match(": transition from ([^%s:]+):") end
  if from then
    for _, tp in ipairs(self.transition_pos) do
      if tp.from == from and (on == nil or tp.on == on) then pos, src = tp.pos, tp.src break end
    end
  end
  fail_in(src, pos[1], pos[2], "%s", msg)
end

-- stm.to_chart(text, { actions = {...}, guards = {...}, machine = "name", id = "chart id" })
function M.to_chart(text, opts)
  local bad = TO_CHART:check(text, opts)
  if bad then error(bad, 2) end
  opts = opts or {}
  local prog = load(text, opts)
  local order = meta[prog].machines
  local function top_fail(fmt, ...) fail_at(text, 1, 1, fmt, ...) end
  local name = opts.machine
  if name == nil then
    if #order == 0 then top_fail("no machine declared") end
    if #order > 1 then top_fail("several machines (%s): pass machine = \"name\"", concat(order, ", ")) end
    name = order[1]
  elseif prog.machines[name] == nil then
    top_fail("no machine named '%s'", name)
  end
  local cfg = expand.machine(prog, text, name, opts)
  local main = { text = text }
  local self = setmetatable({
    main = main, src = main, machine_pos = cfg.__pos__, actions = opts.actions or {},
    state_pos = {}, transition_pos = {}, outcome_at = {}, machine = name, submachines = {},
  }, Compiler)
  self:refusals(cfg, meta[cfg], "machine " .. name, true)
  -- children run and report harel's way (chart.define's dialect)
  local def = { id = opts.id or name, initial = cfg.start, dialect = "harel" }
  if cfg.carry then def.carry = plain_list(cfg.carry) end
  if cfg.allow_history == false then def.history = false end
  self:children(def, cfg, meta[cfg], "")
  if def.states == nil then self:fail(cfg.__pos__, "machine %s has no states", name) end
  if def.initial == nil then self:fail(cfg.__pos__, "machine %s has no `initial`", name) end
  local c = self:define(def)
  local events = next(prog.events) ~= nil and deep_copy(prog.events) or nil
  chart_events[c] = events
  for _, sub in ipairs(self.submachines) do chart_events[sub] = events end
  if #self.submachines > 0 then submachines[c] = self.submachines end
  return c
end

return M
