-- mongostore.stm.expand - what harel's DSL loader does after parsing, for one
-- text: a machine's actions resolved through `bind` and the caller's actions,
-- named guards replaced by their predicates, and each `use` of a fragment
-- expanded into a child state with its parameters (action, state, guard, value,
-- event) filled in, nested uses forwarding them. Every unbound name fails at
-- the place that names it.
local parse = require "mongostore.stm.parse"

local type, pairs, ipairs, next, setmetatable, getmetatable = type, pairs, ipairs, next, setmetatable,
  getmetatable
local concat, sort = table.concat, table.sort

local M = {}

local meta = parse.meta

-- A deep copy that keeps the parser's side information (state order, item
-- positions) and the list marks.
local function copy(v)
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = copy(x) end
  local mt = getmetatable(v)
  if mt then setmetatable(out, mt) end
  local info = meta[v]
  if info then
    local ni = {}
    for k, x in pairs(info) do
      if type(x) == "table" then
        local t = {}
        for kk, xx in pairs(x) do t[kk] = xx end
        ni[k] = t
      else
        ni[k] = x
      end
    end
    meta[out] = ni
  end
  return out
end
M.copy = copy

local function shallow(t)
  local out = {}
  for k, v in pairs(t) do out[k] = v end
  local mt = getmetatable(t)
  if mt then setmetatable(out, mt) end
  if meta[t] then meta[out] = meta[t] end
  return out
end

local Expander = {}
Expander.__index = Expander

function Expander:fail(pos, fmt, ...)
  pos = pos or self.machine_pos
  parse.fail_in(self.src, pos[1], pos[2], fmt, ...)
end

local function child_ctx(bindings, guards, values, states, events)
  return { bindings = bindings, guards = guards, values = values, states = states or {}, events = events or {} }
end

local function merged(a)
  local out = {}
  for k, v in pairs(a) do out[k] = v end
  return out
end

function Expander:value(v, ctx, pos)
  if type(v) == "table" and v.__param__ then
    local name = v.__param__
    if ctx.values[name] == nil then
      self:fail(pos, "unbound value parameter '%s' (only valid inside a fragment that declares it)", name)
    end
    return copy(ctx.values[name])
  end
  return v
end

-- An action spec -> { function = impl path or Lua function, inputs = {...} }.
function Expander:action(spec, ctx)
  local pos = meta[spec] and meta[spec].pos
  local fn
  if spec.kind == "literal" then
    fn = spec.ref
  else
    fn = ctx.bindings[spec.ref]
    if fn == nil then
      self:fail(pos, "unbound action handler '%s' (add a `bind` or pass actions = { %s = fn })", spec.ref, spec.ref)
    end
  end
  local inputs = {}
  for k, v in pairs(spec.inputs) do inputs[k] = self:value(v, ctx, pos) end
  local out = { ["function"] = fn, inputs = inputs }
  meta[out] = { pos = pos, ref = spec.ref }
  return out
end

-- Named guards replaced by their predicates (a Lua guard by { lua = fn }).
function Expander:guards(p, ctx, seen)
  if p.leaf then return p end
  if p.all or p.any then
    local parts = {}
    for i, c in ipairs(p.all or p.any) do parts[i] = self:guards(c, ctx, seen) end
    return p.all and { all = parts } or { any = parts }
  end
  if p["not"] then return { ["not"] = self:guards(p["not"], ctx, seen) } end
  local name = p.guard
  local g = ctx.guards[name]
  if g == nil then
    self:fail(meta[p] and meta[p].pos, "unbound guard '%s' (add a `guard %s = ...` or pass guards = { %s = fn })",
      name, name, name)
  end
  if type(g) == "function" then return { lua = g } end
  seen = seen or {}
  if seen[g] then self:fail(meta[p] and meta[p].pos, "guard '%s' refers to itself", name) end
  seen[g] = true
  local out = self:guards(g, ctx, seen)
  seen[g] = nil
  return out
end

function Expander:transition(t, ctx)
  t = shallow(t)
  if t.on_event and t.on_event.where then
    t.on_event = { type = t.on_event.type, where = self:guards(t.on_event.where, ctx) }
  end
  if t.selector then
    -- harel's loader merges the resolved handler into the selector itself
    local sel = shallow(t.selector)
    local a = self:action(sel["function"], ctx)
    sel["function"], sel.inputs = a["function"], a.inputs
    meta[sel] = meta[a]
    t.selector = sel
  end
  if t.choice then
    local choice = shallow(t.choice)
    local branches = {}
    for i, b in ipairs(choice.branches) do
      local nb = shallow(b)
      nb.when = self:guards(b.when, ctx)
      branches[i] = nb
    end
    choice.branches = branches
    t.choice = choice
  end
  return t
end

-- A fragment's state parameters renamed in its transitions' targets, and its
-- event parameters in their triggers (harel renames nothing else).
local function substitute(cfg, states, events)
  if cfg.transitions then
    local list = setmetatable({}, getmetatable(cfg.transitions))
    for i, t in ipairs(cfg.transitions) do
      t = shallow(t)
      if t.to ~= nil and states[t.to] then t.to = states[t.to] end
      if t.selector then
        local sel = shallow(t.selector)
        local mapper = {}
        for k, v in pairs(sel.mapper) do mapper[k] = states[v] or v end
        sel.mapper = mapper
        if sel.default and states[sel.default] then sel.default = states[sel.default] end
        t.selector = sel
      end
      if t.choice then
        local choice = shallow(t.choice)
        local branches = {}
        for j, b in ipairs(choice.branches) do
          local nb = shallow(b)
          nb.to = states[b.to] or b.to
          branches[j] = nb
        end
        choice.branches = branches
        if choice.default ~= nil then choice.default = states[choice.default] or choice.default end
        t.choice = choice
      end
      if t.on_event then
        local kinds = {}
        for k in t.on_event.type:gmatch("[^|]+") do kinds[#kinds + 1] = events[k] or k end
        t.on_event = { type = concat(kinds, "|"), where = t.on_event.where }
      end
      list[i] = t
    end
    cfg.transitions = list
  end
  if cfg.states then
    for _, s in pairs(cfg.states) do substitute(s, states, events) end
  end
  return cfg
end

function Expander:instantiate(use, ctx)
  local pos = use.__pos__
  local name = use.fragment
  local frag = self.fragments[name]
  if frag == nil then self:fail(pos, "use of unknown fragment '%s'", name) end
  local params, kinds = {}, {}
  for _, p in ipairs(frag.__params__ or {}) do
    params[#params + 1] = p[1]
    kinds[p[1]] = p[2]
  end
  local unknown, missing = {}, {}
  for a in pairs(use.args) do if not kinds[a] then unknown[#unknown + 1] = a end end
  for _, p in ipairs(params) do if use.args[p] == nil then missing[#missing + 1] = p end end
  sort(unknown)
  sort(missing)
  if #unknown > 0 then self:fail(pos, "use '%s': unknown args: %s", name, concat(unknown, ", ")) end
  if #missing > 0 then self:fail(pos, "use '%s': missing args: %s", name, concat(missing, ", ")) end
  local bindings, guards, values = merged(ctx.bindings), merged(ctx.guards), merged(ctx.values)
  local states, events = {}, {}
  for _, p in ipairs(params) do
    local kind, tag, payload = kinds[p], use.args[p][1], use.args[p][2]
    if kind == "action" then
      if tag == "dotted" then
        bindings[p] = payload
      elseif tag == "name" then
        if ctx.bindings[payload] == nil then
          self:fail(pos, "use '%s': unbound action handler '%s' for '%s' (add a `bind` or pass actions = "
            .. "{ %s = fn })", name, payload, p, payload)
        end
        bindings[p] = ctx.bindings[payload]
      else
        self:fail(pos, "use '%s': arg '%s' must be an action handler or path", name, p)
      end
    elseif kind == "state" then
      if tag ~= "name" and tag ~= "dotted" then self:fail(pos, "use '%s': arg '%s' must be a state name", name, p) end
      states[p] = ctx.states[payload] or payload
    elseif kind == "event" then
      if tag ~= "name" and tag ~= "dotted" then self:fail(pos, "use '%s': arg '%s' must be an event name", name, p) end
      events[p] = ctx.events[payload] or payload
    elseif kind == "guard" then
      if tag == "pred" then
        guards[p] = payload
      elseif tag == "name" and ctx.guards[payload] ~= nil then
        guards[p] = ctx.guards[payload]
      elseif tag == "name" then
        self:fail(pos, "use '%s': unbound guard '%s' for '%s'", name, payload, p)
      else
        self:fail(pos, "use '%s': arg '%s' must be a guard predicate or name", name, p)
      end
    else -- value
      if tag == "lit" then
        values[p] = payload
      elseif tag == "name" and ctx.values[payload] ~= nil then
        values[p] = ctx.values[payload]
      elseif tag == "name" then
        self:fail(pos, "use '%s': unbound value parameter '%s' for '%s'", name, payload, p)
      else
        self:fail(pos, "use '%s': arg '%s' must be a literal value", name, p)
      end
    end
  end
  local clone = copy(frag)
  clone.__params__ = nil
  substitute(clone, states, events)
  local local_name = use.alias or name:match("([^.]+)$")
  -- an imported fragment's errors point into its own file
  local saved = self.src
  self.src = meta[frag] and meta[frag].src or saved
  local out = self:expand(clone, child_ctx(bindings, guards, values, states, events))
  self.src = saved
  return local_name, out
end

-- One container, expanded (a fresh table; the parsed program is unchanged).
function Expander:expand(cfg, ctx)
  cfg = shallow(cfg)
  local info = meta[cfg] or { order = {}, at = {} }
  local uses = cfg.__uses__
  cfg.__uses__ = nil
  for _, hook in ipairs { "on_enter", "on_exit", "on_activity" } do
    if cfg[hook] then cfg[hook] = self:action(cfg[hook], ctx) end
  end
  if cfg.timeout ~= nil then cfg.timeout = self:value(cfg.timeout, ctx, info.at.timeout) end
  if cfg.transitions then
    local list = setmetatable({}, getmetatable(cfg.transitions))
    for i, t in ipairs(cfg.transitions) do list[i] = self:transition(t, ctx) end
    cfg.transitions = list
  end
  -- an inline `invoke` body resolves in this scope, as harel's loader does it
  if cfg.invoke_inline then cfg.invoke_inline = self:expand(cfg.invoke_inline, ctx) end
  local order = {}
  for i, n in ipairs(info.order or {}) do order[i] = n end
  local states
  if cfg.states then
    states = {}
    for n, s in pairs(cfg.states) do states[n] = self:expand(s, ctx) end
  end
  for _, use in ipairs(uses or {}) do
    local name, expanded = self:instantiate(use, ctx)
    states = states or {}
    if states[name] then
      self:fail(use.__pos__, "use '%s' as '%s' collides with an existing state", use.fragment, name)
    end
    states[name] = expanded
    order[#order + 1] = name
  end
  cfg.states = states
  local ni = {}
  for k, v in pairs(info) do ni[k] = v end
  ni.order = order
  ni.src = self.src
  meta[cfg] = ni
  return cfg
end

------------------------------------------------------------------------
-- Imports

local function dirname(path) return path:match("^(.*)/[^/]*$") or "." end

local function normpath(path)
  local parts = {}
  for seg in path:gmatch("[^/]+") do
    if seg == ".." and #parts > 0 and parts[#parts] ~= ".." then
      parts[#parts] = nil
    elseif seg ~= "." then
      parts[#parts + 1] = seg
    end
  end
  return (path:sub(1, 1) == "/" and "/" or "") .. concat(parts, "/")
end

-- The largest file an import reads, unless opts.max_import_bytes says.
M.MAX_IMPORT_BYTES = 1024 * 1024

-- Whether the normalised path lies in one of the normalised roots.
local function inside(path, roots)
  for _, root in ipairs(roots) do
    if root == "" or root == "." then
      if path:sub(1, 1) ~= "/" and path ~= ".." and path:sub(1, 3) ~= "../" then return true end
    elseif path == root or path:sub(1, #root + 1) == root .. "/" or (root == "/" and path:sub(1, 1) == "/") then
      return true
    end
  end
  return false
end

-- The text of an imported file, or an error at the import. Only a .stm file
-- inside the roots, read up to max bytes: neither an absolute path nor a
-- `..` leads out of them, and nothing of a file that is not .stm is read,
-- so no error can quote it.
local function read_import(src, imp, base, roots, max)
  local function refuse(fmt, ...) parse.fail_in(src, imp.pos[1], imp.pos[2], "import %s: " .. fmt, imp.path, ...) end
  if imp.path:sub(1, 1) == "/" then refuse("an absolute path is not imported (name it relative to the file)") end
  if not imp.path:match("%.stm$") then refuse("only .stm files are imported") end
  if imp.path:find("%z") then refuse("the path holds a NUL byte") end
  local candidates = { normpath(base .. "/" .. imp.path) }
  for i = 2, #roots do candidates[#candidates + 1] = normpath(roots[i] .. "/" .. imp.path) end
  for _, resolved in ipairs(candidates) do
    if inside(resolved, roots) then
      local f = io.open(resolved, "rb")
      if f then
        local text = f:read(max + 1)
        f:close()
        if text == nil then
          -- a directory opens but does not read; an empty file reads ""
          refuse("not a readable file")
        end
        if #text > max then refuse("the file is larger than %d bytes", max) end
        return text, resolved
      end
    end
  end
  if not inside(candidates[1], roots) then refuse("the path leads out of the import directories") end
  parse.fail_in(src, imp.pos[1], imp.pos[2], "import not found: %s", imp.path)
end

-- load(text, base_dir[, { import_paths = {...}, max_import_bytes = n }]) ->
-- the program with what its imports declare merged in, as harel's loader
-- merges them: their events, bindings, guards and fragments (named
-- `alias.Fragment` under an alias), the text's own declarations winning;
-- each file read once, relative to the one importing it, then in the
-- import paths; never from outside base_dir and the import paths.
function M.load(text, base_dir, opts)
  opts = opts or {}
  local roots = { normpath(base_dir) }
  for _, p in ipairs(opts.import_paths or {}) do roots[#roots + 1] = normpath(p) end
  local max = opts.max_import_bytes or M.MAX_IMPORT_BYTES
  local seen = {}
  local function load(src, base)
    local prog = parse.parse(src.text, src.file)
    local events, fragments, bindings, guards = {}, {}, {}, {}
    for _, imp in ipairs(prog.imports) do
      local itext, resolved = read_import(src, imp, base, roots, max)
      if not seen[resolved] then
        seen[resolved] = true
        local iprog = load({ text = itext, file = resolved }, dirname(resolved))
        for k, v in pairs(iprog.events) do events[k] = v end
        for k, v in pairs(iprog.bindings) do bindings[k] = v end
        for k, v in pairs(iprog.guards) do guards[k] = v end
        for k, v in pairs(iprog.fragments) do fragments[imp.alias and (imp.alias .. "." .. k) or k] = v end
      end
    end
    for k, v in pairs(prog.events) do events[k] = v end
    for k, v in pairs(prog.bindings) do bindings[k] = v end
    for k, v in pairs(prog.guards) do guards[k] = v end
    for k, v in pairs(prog.fragments) do
      if meta[v] then meta[v].src = meta[v].src or src end
      fragments[k] = v
    end
    prog.events, prog.bindings, prog.guards, prog.fragments = events, bindings, guards, fragments
    meta[prog].src = src
    return prog
  end
  return load({ text = text }, normpath(base_dir))
end

-- expand(prog, text, name, opts) -> the machine's config, expanded; the
-- program's events beside it (as harel's loader puts them).
function M.machine(prog, text, name, opts)
  local cfg = prog.machines[name]
  local bindings, guards = merged(prog.bindings), merged(prog.guards)
  for k, fn in pairs(opts.actions or {}) do bindings[k] = fn end
  for k, fn in pairs(opts.guards or {}) do guards[k] = fn end
  local self = setmetatable({ src = meta[prog].src or { text = text }, fragments = prog.fragments,
                              machine_pos = cfg.__pos__ }, Expander)
  local out = self:expand(cfg, child_ctx(bindings, guards, {}))
  if next(prog.events) ~= nil then out.events = prog.events end
  return out
end

return M
