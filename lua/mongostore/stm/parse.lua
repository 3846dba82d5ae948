-- mongostore.stm.parse - reads harel's .stm statechart DSL (harel 0.9.0,
-- harel/dsl/grammar.lark) into its normal form: the program harel's own parser
-- builds (machines and fragments as config tables, events, bindings, guards),
-- with every position as { line, column }. Tokens come from LPeg
-- (mongostore.stm.lex); the items are read by recursive descent so each
-- error names what was expected where.
local type, pairs, tonumber, error = type, pairs, tonumber, error
local concat = table.concat
local setmetatable = setmetatable

local M = {}

local lex_m = require "mongostore.stm.lex"
local fail_in = lex_m.fail_in
local lex = lex_m.lex
local unquote = lex_m.unquote
local py_float = lex_m.py_float
-- the lexer's helpers other modules of the stm reader use through this one
M.py_str, M.fail_at, M.fail_in, M.unquote = lex_m.py_str, lex_m.fail_at, lex_m.fail_in, lex_m.unquote

------------------------------------------------------------------------
-- The parser

local FIELD_TYPES = { string = true, int = true, float = true, bool = true, any = true }
local PARAM_KINDS = { action = true, state = true, guard = true, value = true, event = true }
local CMP = { ["=="] = "eq", ["!="] = "ne", ["<"] = "lt", ["<="] = "le", [">"] = "gt", [">="] = "ge", ["in"] = "in" }
local ARITH = { ["+"] = true, ["-"] = true, ["*"] = true, ["/"] = true }

-- Words that open an item: a name after `invoke`, or after `on enter`, that is
-- one of these starts the next item instead.
local ITEM_WORDS = {
  initial = true, on = true, timeout = true, ttl = true, context = true, outcome = true, carry = true,
  defer = true, no = true, cancel_on_failure = true, invoke = true, with = true, use = true, state = true,
  orthogonal = true, final = true, from = true,
}

-- What the parser keeps beside the normal form (weak keys, never in it): the
-- declared order of a container's states and the positions of its items.
local meta = setmetatable({}, { __mode = "k" })
M.meta = meta

local Parser = {}
Parser.__index = Parser

function Parser:peek(k) return self.toks[self.i + (k or 0)] end

function Parser:advance()
  local t = self.toks[self.i]
  self.i = self.i + 1
  return t
end

local function describe(t)
  if t.class == "eof" then return "the end of input" end
  return "'" .. t.value .. "'"
end

function Parser:fail(t, fmt, ...)
  fail_in(self.src, t.line, t.col, fmt, ...)
end

function Parser:expected(what, t)
  t = t or self:peek()
  if t.class == "eof" then
    self:fail(t, "unexpected end of input, expected %s (a `{` block is likely missing its closing `}`)", what)
  end
  self:fail(t, "expected %s, found %s", what, describe(t))
end

function Parser:is_op(v, k) local t = self:peek(k) return t.class == "op" and t.value == v end
function Parser:is_word(v, k) local t = self:peek(k) return t.class == "name" and t.value == v end

function Parser:op(v)
  if not self:is_op(v) then self:expected("'" .. v .. "'") end
  return self:advance()
end

function Parser:word(v)
  if not self:is_word(v) then self:expected("'" .. v .. "'") end
  return self:advance()
end

function Parser:name(what)
  local t = self:peek()
  if t.class ~= "name" then self:expected(what or "a name") end
  self:advance()
  return t.value, t
end

-- ref: NAME | STRING
function Parser:ref(what)
  local t = self:peek()
  if t.class == "name" then self:advance() return t.value, t end
  if t.class == "string" then self:advance() return unquote(t.value), t end
  self:expected(what or "a name or a string")
end

local function pos_of(t) return { t.line, t.col } end

-- value: STRING | SIGNED_NUMBER | BOOL | list. Returns the value and its
-- Python str (a selector branch's key).
function Parser:value_start(k)
  local t = self:peek(k)
  if t.class == "string" or t.class == "int" or t.class == "float" then return true end
  if t.class == "name" and (t.value == "true" or t.value == "false") then return true end
  if t.class == "op" and t.value == "[" then return true end
  if t.class == "op" and (t.value == "+" or t.value == "-") then
    local n = self:peek(k + 1)
    return (n.class == "int" or n.class == "float") and n.start == t.stop
  end
  return false
end

function Parser:value()
  local t = self:peek()
  if t.class == "string" then self:advance() return unquote(t.value), unquote(t.value) end
  if t.class == "name" and (t.value == "true" or t.value == "false") then
    self:advance()
    return t.value == "true", t.value == "true" and "True" or "False"
  end
  local sign = ""
  if t.class == "op" and (t.value == "+" or t.value == "-") then
    local n = self:peek(1)
    if (n.class == "int" or n.class == "float") and n.start == t.stop then
      sign = t.value == "-" and "-" or ""
      self:advance()
      t = n
    end
  end
  if t.class == "int" then
    self:advance()
    local v = math.tointeger and math.tointeger(tonumber(sign .. t.value)) or tonumber(sign .. t.value)
    if v == nil then v = tonumber(sign .. t.value) end
    return v, M.py_str(v)
  end
  if t.class == "float" then
    self:advance()
    local v = tonumber(sign .. t.value) + 0.0
    return v, py_float(v)
  end
  if t.class == "op" and t.value == "[" then
    self:advance()
    local list, strs = {}, {}
    if not self:is_op("]") then
      repeat
        local v, s = self:value()
        list[#list + 1] = v
        strs[#strs + 1] = s
      until not (self:is_op(",") and self:advance())
    end
    self:op("]")
    return setmetatable(list, M.LIST), "[" .. concat(strs, ", ") .. "]"
  end
  self:expected("a value (a string, a number, true, false or a list)")
end

-- Lists built from the text are marked, so an empty one stays a list.
M.LIST = { __name = "stm.list" }

-- `event.x` / `context.x`: one field of the event's data or of the context.
function Parser:namespaced(t)
  local source, field = t.value:match("^([^.]+)%.(.+)$")
  if source ~= "event" and source ~= "context" then
    self:fail(t, "unknown namespace '%s' in '%s': use `event.<field>` or `context.<field>`", source, t.value)
  end
  if field:find(".", 1, true) then
    self:fail(t, "'%s': a reference names one field of `%s`, not a nested path", t.value, source)
  end
  return source, field
end

------------------------------------------------------------------------
-- Predicates: trees of leaves, guard references and all / any / not

function Parser:predicate()
  local first = self:and_expr()
  if not self:is_word("or") then return first end
  local parts = { first }
  while self:is_word("or") do
    self:advance()
    parts[#parts + 1] = self:and_expr()
  end
  return { any = parts }
end

function Parser:and_expr()
  local first = self:not_expr()
  if not self:is_word("and") then return first end
  local parts = { first }
  while self:is_word("and") do
    self:advance()
    parts[#parts + 1] = self:not_expr()
  end
  return { all = parts }
end

function Parser:not_expr()
  if self:is_word("not") then
    self:advance()
    return { ["not"] = self:not_expr() }
  end
  return self:atom()
end

function Parser:cmp_op(k)
  local t = self:peek(k)
  if t.class == "op" and CMP[t.value] then return CMP[t.value] end
  if t.class == "name" and t.value == "in" then return "in" end
  return nil
end

function Parser:atom()
  local t = self:peek()
  if self:is_op("(") then
    self:advance()
    local p = self:predicate()
    self:op(")")
    return p
  end
  if t.class == "name" and not self:cmp_op(1) then
    self:advance()
    local g = { guard = t.value }
    meta[g] = { pos = pos_of(t) }
    return g
  end
  if t.class ~= "name" and t.class ~= "string" and t.class ~= "dotted" then
    self:expected("a comparison, a guard name or '('")
  end
  self:advance()
  local source, field = "event", t.class == "string" and unquote(t.value) or t.value
  if t.class == "dotted" then source, field = self:namespaced(t) end
  local op = self:cmp_op()
  if not op then self:expected("a comparison operator (==, !=, <, <=, >, >=, in)") end
  self:advance()
  local r = self:peek()
  if r.class == "dotted" then
    self:advance()
    local rs, rf = self:namespaced(r)
    return { leaf = { source = source, field = field, op = op, ref = { source = rs, field = rf } } }
  end
  local v = self:value()
  return { leaf = { source = source, field = field, op = op, value = v } }
end

------------------------------------------------------------------------
-- Actions, triggers, assignments

-- action: (NAME | DOTTED) ( "(" [input ("," input)*] ")" )?
function Parser:action()
  local t = self:peek()
  if t.class ~= "name" and t.class ~= "dotted" then self:expected("an action (a handler name or a dotted path)") end
  self:advance()
  local spec = { kind = t.class == "dotted" and "literal" or "handler", ref = t.value, inputs = {} }
  meta[spec] = { pos = pos_of(t) }
  if self:is_op("(") then
    self:advance()
    if not self:is_op(")") then
      repeat
        local key = self:ref("an input name")
        self:op(":")
        if self:value_start(0) then
          spec.inputs[key] = self:value()
        else
          spec.inputs[key] = { __param__ = self:name("a value or a parameter name") }
        end
      until not (self:is_op(",") and self:advance())
    end
    self:op(")")
  end
  return spec
end

function Parser:trigger()
  self:word("on")
  local kinds = { (self:ref("an event kind")) }
  while self:is_op("|") do
    self:advance()
    kinds[#kinds + 1] = self:ref("an event kind")
  end
  local trig = { type = concat(kinds, "|") }
  if self:is_word("where") then
    self:advance()
    trig.where = self:predicate()
  end
  return trig
end

function Parser:operand()
  local t = self:peek()
  if t.class == "dotted" then
    self:advance()
    local source, field = self:namespaced(t)
    return { ref = { source = source, field = field } }
  end
  if not self:value_start(0) then self:expected("a reference (context.x, event.x) or a value") end
  return { lit = (self:value()) }
end

function Parser:assign_clause()
  self:word("set")
  local list = {}
  repeat
    local t = self:peek()
    if t.class ~= "dotted" then self:expected("`context.<field>` to set") end
    self:advance()
    local source, field = self:namespaced(t)
    if source ~= "context" then
      self:fail(t, "`set` writes the execution context: '%s' must be `context.<field>`", t.value)
    end
    self:op("=")
    local expr = self:operand()
    local o = self:peek()
    if o.class == "op" and ARITH[o.value] then
      self:advance()
      expr = { arith = { op = o.value, left = expr, right = self:operand() } }
    end
    list[#list + 1] = { field = field, expr = expr }
  until not (self:is_op(",") and self:advance())
  return list
end

-- After a transition, `on` starts its trigger unless it is an `on enter`,
-- `on exit` or `on activity` item (a hook) of the enclosing state.
function Parser:hook_ahead()
  if not self:is_word("on") then return false end
  local w, a = self:peek(1), self:peek(2)
  if not (w.class == "name" and (w.value == "enter" or w.value == "exit" or w.value == "activity")) then
    return false
  end
  if a.class == "dotted" then return true end
  return a.class == "name" and not ITEM_WORDS[a.value] and a.value ~= "where" and a.value ~= "set"
end

function Parser:trigger_and_set(t)
  if self:is_word("on") and not self:hook_ahead() then t.on_event = self:trigger() end
  if self:is_word("set") then t.set = self:assign_clause() end
  return t
end

------------------------------------------------------------------------
-- Transitions

-- choose_transition, select_transition, join_transition (mongostore.stm.parse_transitions)
require("mongostore.stm.parse_transitions")(Parser, { meta = meta, pos_of = pos_of })

function Parser:transition(from_tok)
  local src = self:ref("the source state")
  local pos = pos_of(from_tok)
  if self:is_word("to") then
    self:advance()
    local t = { from = src, to = (self:ref("the target state")), __pos__ = pos }
    return self:trigger_and_set(t)
  elseif self:is_word("choose") then
    self:advance()
    return self:choose_transition(src, pos)
  elseif self:is_word("select") then
    self:advance()
    return self:select_transition(src, pos)
  elseif self:is_word("join") then
    self:advance()
    return self:join_transition(src, pos)
  end
  self:expected("'to', 'choose', 'select' or 'join'")
end

------------------------------------------------------------------------
-- Containers: machines, states, fragments, inline machines

local MACHINE_ONLY = { ttl = "ttl", context_schema = "context" }

function Parser:field_spec(with_default)
  local name, nt = self:ref("a field name")
  self:op(":")
  local tt = self:peek()
  if not (tt.class == "name" and FIELD_TYPES[tt.value]) then
    self:expected("a field type (string, int, float, bool, any)")
  end
  self:advance()
  local spec = { type = tt.value, required = true }
  if self:is_op("?") then
    self:advance()
    spec.required = false
  end
  if with_default and self:is_op("=") then
    self:advance()
    if not spec.required then
      self:fail(nt, "context field '%s' has a default, so it can't also be optional (`?`): "
        .. "an execution always starts with it", name)
    end
    spec.default = self:value()
  end
  return name, spec
end

-- Reads items until the closing `}` into a config table (harel's _assemble:
-- a repeated scalar item keeps the last).
-- timeout SECONDS | timeout context KEY | timeout PARAM
function Parser:timeout_value()
  local v = self:peek()
  if v.class == "int" then
    self:advance()
    return tonumber(v.value)
  elseif self:is_word("context") then
    self:advance()
    return { context = (self:ref("a context key")) }
  elseif v.class == "name" then
    self:advance()
    return { __param__ = v.value }
  end
  self:expected("seconds, `context KEY` or a parameter name")
end

-- context { name: type ... }
function Parser:context_schema()
  self:op("{")
  local schema = {}
  while not self:is_op("}") do
    local name, spec = self:field_spec(true)
    schema[name] = spec
  end
  self:op("}")
  return schema
end

-- invoke [CHART] [for VAR in LIST] [{ inline chart }], into cfg
function Parser:invoke_item(cfg)
  local n = self:peek()
  if n.class == "dotted" or (n.class == "name" and not ITEM_WORDS[n.value] and n.value ~= "for") then
    self:advance()
    cfg.invoke = n.value
  end
  if self:is_word("for") then
    self:advance()
    local var = self:ref("the loop variable")
    self:word("in")
    cfg.invoke_each = setmetatable({ var, (self:ref("a context list")) }, M.LIST)
  end
  if self:is_op("{") then
    local ot = self:advance()
    local body = {}
    self:items(body)
    self:op("}")
    self:machine_only(body, "an inline `invoke` target, which always runs as a child", ot)
    cfg.invoke_inline = body
  end
end

-- One argument of a fragment's use: a (predicate), a value, a name or a dotted path.
function Parser:use_arg()
  local a = self:peek()
  if self:is_op("(") then
    self:advance()
    local v = setmetatable({ "pred", self:predicate() }, M.LIST)
    self:op(")")
    return v
  elseif self:value_start(0) then
    return setmetatable({ "lit", (self:value()) }, M.LIST)
  elseif a.class == "name" then
    self:advance()
    return setmetatable({ "name", a.value }, M.LIST)
  elseif a.class == "dotted" then
    self:advance()
    return setmetatable({ "dotted", a.value }, M.LIST)
  end
  self:expected("a name, a dotted path, a value or a (predicate)")
end

-- use FRAGMENT [(name = arg, ...)] [as ALIAS]
function Parser:use_item(t)
  local f = self:peek()
  if f.class ~= "name" and f.class ~= "dotted" then self:expected("a fragment name") end
  self:advance()
  local use = { fragment = f.value, args = {}, __pos__ = pos_of(t) }
  if self:is_op("(") then
    self:advance()
    if not self:is_op(")") then
      repeat
        local an = self:name("an argument name")
        self:op("=")
        use.args[an] = self:use_arg()
      until not (self:is_op(",") and self:advance())
    end
    self:op(")")
  end
  if self:is_word("as") then
    self:advance()
    use.alias = self:ref("a local name")
  end
  return use
end

-- state NAME { ... } | orthogonal NAME { ... } | final NAME OUTCOME [{ ... }]
-- -> name, its token, the state
function Parser:state_item(w, t)
  local name, nt = self:ref("a state name")
  local child = { __pos__ = pos_of(t) }
  if w == "final" then
    child.outcome = self:ref("the final state's verdict (an outcome)")
    if self:is_op("{") then
      self:advance()
      self:items(child)
      self:op("}")
    else
      meta[child] = { order = {}, at = {}, uses = {} }
    end
    meta[child].at.outcome = pos_of(t)
    meta[child].final = true
  else
    self:op("{")
    self:items(child)
    self:op("}")
  end
  self:machine_only(child, "state " .. name, t)
  if w == "orthogonal" then
    child.type = "OrthogonalState"
    for _, region in pairs(child.states or {}) do
      if region.states and not region.type then region.type = "ParallelState" end
    end
  end
  return name, nt, child
end

-- The hook after `on`: enter, exit or activity.
function Parser:hook_name()
  local which = self:peek()
  local v = which.class == "name" and which.value
  if not (v == "enter" or v == "exit" or v == "activity") then
    self:expected("'enter', 'exit' or 'activity'")
  end
  self:advance()
  return which.value
end

-- The seconds after `ttl`: an integer.
function Parser:ttl_seconds()
  local v = self:peek()
  if v.class ~= "int" then self:expected("seconds (an integer)") end
  self:advance()
  return tonumber(v.value)
end

-- One or more refs (each a `what`) separated by commas, as a list.
function Parser:ref_list(what)
  local list = { (self:ref(what)) }
  while self:is_op(",") do
    self:advance()
    list[#list + 1] = self:ref(what)
  end
  return setmetatable(list, M.LIST)
end

-- The `{ child: key ... }` after `with`: child context key -> context key.
function Parser:with_pairs()
  self:op("{")
  local pairs_ = {}
  repeat
    local child = self:ref("a child context key")
    self:op(":")
    pairs_[child] = self:ref("a context key")
  until self:is_op("}")
  self:op("}")
  return pairs_
end

function Parser:items(cfg)
  local info = { order = {}, at = {}, uses = {} }
  meta[cfg] = info
  local states, transitions, uses = nil, nil, nil
  while not self:is_op("}") do
    local t = self:peek()
    if t.class ~= "name" then self:expected("an item or '}'") end
    local w = t.value
    local function set(key, v) cfg[key] = v; info.at[key] = pos_of(t) end
    if w == "initial" then
      self:advance()
      set("start", (self:ref("the initial state")))
    elseif w == "on" then
      self:advance()
      local hook = self:hook_name()
      set("on_" .. hook, self:action())
    elseif w == "timeout" then
      self:advance()
      set("timeout", self:timeout_value())
    elseif w == "ttl" then
      self:advance()
      set("ttl", self:ttl_seconds())
    elseif w == "context" then
      self:advance()
      set("context_schema", self:context_schema())
    elseif w == "outcome" then
      self:advance()
      set("outcome", (self:ref("an outcome")))
    elseif w == "carry" or w == "defer" then
      self:advance()
      set(w, self:ref_list(w == "carry" and "a context key" or "an event kind"))
    elseif w == "no" then
      self:advance()
      self:word("history")
      set("allow_history", false)
    elseif w == "cancel_on_failure" then
      self:advance()
      set("cancel_on_failure", true)
    elseif w == "invoke" then
      self:advance()
      info.at.invoke = pos_of(t)
      self:invoke_item(cfg)
    elseif w == "with" then
      self:advance()
      set("invoke_with", self:with_pairs())
    elseif w == "use" then
      self:advance()
      uses = uses or {}
      uses[#uses + 1] = self:use_item(t)
    elseif w == "state" or w == "orthogonal" or w == "final" then
      self:advance()
      local name, nt, child = self:state_item(w, t)
      states = states or {}
      if states[name] then self:fail(nt, "duplicate state name '%s' (harel keeps only the last)", name) end
      states[name] = child
      info.order[#info.order + 1] = name
    elseif w == "from" then
      self:advance()
      transitions = transitions or setmetatable({}, M.LIST)
      transitions[#transitions + 1] = self:transition(t)
    else
      self:expected("an item (state, final, orthogonal, from, initial, on, timeout, defer, ...) or '}'")
    end
  end
  if states then cfg.states = states end
  if transitions then cfg.transitions = transitions end
  if uses then cfg.__uses__ = setmetatable(uses, M.LIST) end
  return cfg
end

function Parser:machine_only(cfg, where, t)
  for key, keyword in pairs(MACHINE_ONLY) do
    if cfg[key] ~= nil then
      self:fail(t, "`%s` is only allowed at the machine level, not on %s", keyword, where)
    end
  end
end

-- import "FILE" [as ALIAS]
function Parser:import_statement(t)
  local s = self:peek()
  if s.class ~= "string" then self:expected("a file name (a string)") end
  self:advance()
  local imp = { path = unquote(s.value), pos = pos_of(t) }
  if self:is_word("as") then
    self:advance()
    imp.alias = self:name("an alias")
  end
  return imp
end

-- bind { name = handler, ... }, into bindings
function Parser:bind_statement(bindings)
  self:op("{")
  repeat
    local name = self:name("a handler name")
    self:op("=")
    local impl = self:peek()
    if impl.class ~= "name" and impl.class ~= "dotted" then self:expected("a handler name or a dotted path") end
    self:advance()
    bindings[name] = impl.value
  until self:is_op("}")
  self:op("}")
end

-- A fragment's (name: kind, ...), or nil when it takes none.
function Parser:fragment_params()
  if not self:is_op("(") then return nil end
  self:advance()
  local params = setmetatable({}, M.LIST)
  repeat
    local pn = self:name("a parameter name")
    self:op(":")
    local k = self:peek()
    if not (k.class == "name" and PARAM_KINDS[k.value]) then
      self:expected("a parameter kind (action, state, guard, value, event)")
    end
    self:advance()
    params[#params + 1] = setmetatable({ pn, k.value }, M.LIST)
  until not (self:is_op(",") and self:advance())
  self:op(")")
  return params
end

function Parser:program()
  local prog = { imports = setmetatable({}, M.LIST), bindings = {}, guards = {}, events = {}, machines = {},
                 fragments = {}, positions = {} }
  local order = {}
  meta[prog] = { machines = order }
  if self:peek().class == "eof" then self:expected("a statement (machine, event, bind, guard, import, fragment)") end
  while self:peek().class ~= "eof" do
    local t = self:peek()
    local w = t.class == "name" and t.value or nil
    if w == "import" then
      self:advance()
      prog.imports[#prog.imports + 1] = self:import_statement(t)
    elseif w == "bind" then
      self:advance()
      self:bind_statement(prog.bindings)
    elseif w == "guard" then
      self:advance()
      local name = self:name("a guard name")
      self:op("=")
      prog.guards[name] = self:predicate()
      prog.positions["guard " .. name] = pos_of(t)
    elseif w == "event" then
      self:advance()
      local name = self:ref("an event name")
      self:op("{")
      local fields = {}
      while not self:is_op("}") do
        local f, spec = self:field_spec(false)
        fields[f] = spec
      end
      self:op("}")
      prog.events[name] = fields
      prog.positions["event " .. name] = pos_of(t)
    elseif w == "machine" or w == "fragment" then
      self:advance()
      local name = self:ref(w == "machine" and "a machine name" or "a fragment name")
      local cfg = {}
      local params = w == "fragment" and self:fragment_params() or nil
      self:op("{")
      self:items(cfg)
      self:op("}")
      cfg.__pos__ = pos_of(t)
      if w == "machine" then
        prog.machines[name] = cfg
        order[#order + 1] = name
      else
        self:machine_only(cfg, "fragment " .. name, t)
        if params then cfg.__params__ = params end
        prog.fragments[name] = cfg
      end
      prog.positions[w .. " " .. name] = pos_of(t)
    else
      self:expected("a statement (machine, event, bind, guard, import, fragment)")
    end
  end
  return prog
end

-- parse(text) -> program (the normal form); raises "stm: line L, column C: ..."
-- parse(text, file): file names the text in errors (an imported file).
function M.parse(text, file)
  if type(text) ~= "string" then error("stm.parse: text must be a string, got " .. type(text), 2) end
  local p = setmetatable({ text = text, src = { text = text, file = file }, toks = lex(text, file), i = 1 }, Parser)
  return p:program()
end

return M
