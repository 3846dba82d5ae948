-- mongostore.stm.parse_transitions - the reader of the transitions of
-- harel's .stm that branch: choose (guards), select (a function's value) and
-- join (over the regions' outcomes). mongostore.stm.parse hands its Parser
-- in, with its side tables, and these become its methods.

-- The Parser's side tables, as mongostore.stm.parse hands them in.
local meta, pos_of

-- from S choose [on ...] { when P to T [set ...] ... [else to T [set ...]] }
local function choose_transition(self, src, pos)
  local t = self:trigger_and_set({ from = src, __pos__ = pos })
  self:op("{")
  local branches = {}
  if not self:is_word("when") then self:expected("'when'") end
  while self:is_word("when") do
    self:advance()
    local b = { when = self:predicate() }
    self:word("to")
    b.to = self:ref("the branch's target")
    if self:is_word("set") then b.set = self:assign_clause() end
    branches[#branches + 1] = b
  end
  local choice = { branches = branches }
  if self:is_word("else") then
    self:advance()
    self:word("to")
    choice.default = self:ref("the else target")
    if self:is_word("set") then choice.default_set = self:assign_clause() end
  end
  self:op("}")
  t.choice = choice
  return t
end

-- from S select ACTION [returns { v, ... }] [on ...] { v to T ... [else to T] }
local function select_transition(self, src, pos)
  local sel = { ["function"] = self:action(), mapper = {} }
  local t = { from = src, selector = sel, __pos__ = pos }
  local order = {}
  meta[sel] = { order = order }
  if self:is_word("returns") then
    self:advance()
    self:op("{")
    local enum = {}
    repeat
      local _, s = self:value()
      enum[#enum + 1] = s
    until not (self:is_op(",") and self:advance())
    self:op("}")
    sel.enum = enum
  end
  if self:is_word("on") then t.on_event = self:trigger() end
  self:op("{")
  if not self:value_start(0) then self:expected("a branch (a value, then `to` and a state)") end
  while self:value_start(0) do
    local vt = self:peek()
    local _, key = self:value()
    self:word("to")
    sel.mapper[key] = self:ref("the branch's target")
    order[#order + 1] = { key = key, pos = pos_of(vt) }
  end
  if self:is_word("else") then
    self:advance()
    self:word("to")
    sel.default = self:ref("the else target")
  end
  self:op("}")
  return t
end

-- from S join all|any to T else to U: harel desugars it to a selector over region_results
local function join_transition(self, src, pos)
  local mode_t = self:peek()
  if not (self:is_word("all") or self:is_word("any")) then self:expected("'all' or 'any'") end
  self:advance()
  self:word("to")
  local ok = self:ref("the join's target")
  self:word("else")
  self:word("to")
  local otherwise = self:ref("the join's else target")
  local fn = { kind = "literal", ref = "harel.lib.join_success", inputs = { mode = mode_t.value } }
  meta[fn] = { pos = pos_of(mode_t) }
  local t = { from = src, selector = { ["function"] = fn, mapper = { pass = ok }, default = otherwise },
              __pos__ = pos }
  meta[t] = { join = mode_t.value }
  return t
end

-- Puts the readers on the Parser, with its side tables.
return function(Parser, env)
  meta, pos_of = env.meta, env.pos_of
  Parser.choose_transition = choose_transition
  Parser.select_transition = select_transition
  Parser.join_transition = join_transition
end
