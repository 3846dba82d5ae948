-- spec/01-unit/chart_spec.lua - chart.define without a server: every wrong
-- chart raises a clear error naming the state path, a valid chart compiles
-- into dotted paths, and the compiled chart cannot be changed.
local lu = require "luaunit"
local chart = require "mongostore.chart"

-- The error chart.define raises for def (fails the test when it does not raise).
local function define_error(def)
  local ok, err = pcall(chart.define, def)
  lu.assertFalse(ok, "chart.define accepted a wrong chart")
  return tostring(err)
end

-- Asserts that def is refused with a message naming `path` and containing
-- each of the given fragments.
local function refuses(def, path, ...)
  local msg = define_error(def)
  lu.assertStrContains(msg, "state " .. path .. ":", false)
  for _, frag in ipairs { ... } do lu.assertStrContains(msg, frag) end
  return msg
end

local function accepts(def)
  local ok, c = pcall(chart.define, def)
  lu.assertTrue(ok, "chart.define refused a valid chart: " .. tostring(c))
  return c
end

-- A small valid chart with the states and transitions given appended.
local function flat(states, transitions)
  local def = { id = "t", initial = "A", states = { { "A" }, { "B" } },
                transitions = { { from = "A", to = "B", on = "Go" } } }
  for _, s in ipairs(states or {}) do def.states[#def.states + 1] = s end
  for _, t in ipairs(transitions or {}) do def.transitions[#def.transitions + 1] = t end
  return def
end

-- The README's order chart.
local function order_def()
  local function request_payment() end
  local function retry_or_give_up() return "retry" end
  return {
    id = "order", initial = "Cart",
    states = {
      { "Cart" },
      { "AwaitingPayment", timeout = 900, on_enter = request_payment },
      { "Fulfilling", initial = "Picking",
        states = { { "Picking" }, { "Packing" } },
        transitions = { { from = "Picking", to = "Packing", on = "Picked" } } },
      { "Fork", orthogonal = true, states = {
          { "A", initial = "A1", states = { { "A1" }, { "A2", final = "success" } },
            transitions = { { from = "A1", to = "A2", on = "Go" } } },
          { "B", initial = "B1", states = { { "B1" }, { "B2", final = "success" } },
            transitions = { { from = "B1", to = "B2", on = "Go" } } } } },
      { "Done", final = "success" },
      { "Cancelled", final = "cancelled" },
    },
    transitions = {
      { from = "Cart", to = "AwaitingPayment", on = "PlaceOrder" },
      { from = "AwaitingPayment", to = "Fulfilling", on = "Paid",
        where = function(data) return data.amount > 0 end },
      { from = "AwaitingPayment", on = "Declined", select = retry_or_give_up,
        to = { retry = "AwaitingPayment", giveup = "Cancelled" } },
      { from = "AwaitingPayment", to = "Cancelled", on = "Timeout" },
      { from = "Fulfilling", to = "Fork", on = "Packed" },
      { from = "Fork", join = "all", to = "Done", else_to = "Cancelled" },
    },
  }
end

------------------------------------------------------------------------

TestChartValid = {}

function TestChartValid:test_order_chart_compiles()
  local c = accepts(order_def())
  lu.assertTrue(chart.is_chart(c))
  lu.assertEquals(c.id, "order")
  lu.assertFalse(chart.is_chart(order_def()))
end

function TestChartValid:test_paths_are_dotted()
  local c = accepts(order_def())
  for _, p in ipairs { "Cart", "AwaitingPayment", "Fulfilling", "Fulfilling.Picking", "Fulfilling.Packing",
                       "Fork", "Fork.A", "Fork.A.A1", "Fork.A.A2", "Fork.B.B2", "Done", "Cancelled" } do
    local n = c:node(p)
    lu.assertNotNil(n, "no node at " .. p)
    lu.assertEquals(n.path, p)
  end
  lu.assertEquals(c:node("Fork.A.A2").name, "A2")
  lu.assertNil(c:node("Picking"))
  lu.assertNil(c:node("Fork.A.A3"))
end

function TestChartValid:test_kinds_outcomes_and_initials()
  local c = accepts(order_def())
  lu.assertEquals(c:node("Cart").kind, "leaf")
  lu.assertEquals(c:node("Fulfilling").kind, "composite")
  lu.assertEquals(c:node("Fork").kind, "orthogonal")
  lu.assertEquals(c:node("Done").kind, "final")
  lu.assertEquals(c:node("Done").outcome, "success")
  lu.assertEquals(c:node("Cancelled").outcome, "cancelled")
  lu.assertIs(c:node("Fulfilling").initial, c:node("Fulfilling.Picking"))
  lu.assertEquals(c:node("AwaitingPayment").timeout, 900)
end

function TestChartValid:test_final_true_has_no_outcome()
  local c = accepts{ id = "t", initial = "A", states = { { "A" }, { "End", final = true } },
                     transitions = { { from = "A", to = "End", on = "Go" } } }
  lu.assertEquals(c:node("End").kind, "final")
  lu.assertNil(c:node("End").outcome)
end

function TestChartValid:test_same_name_under_different_parents_is_fine()
  local c = accepts{ id = "t", initial = "P",
    states = { { "P", initial = "X", states = { { "X" } } }, { "Q", initial = "X", states = { { "X" } } } },
    transitions = { { from = "P", to = "Q", on = "Go" } } }
  lu.assertNotNil(c:node("P.X"))
  lu.assertNotNil(c:node("Q.X"))
  lu.assertNotIs(c:node("P.X"), c:node("Q.X"))
end

function TestChartValid:test_targets_resolve_from_the_enclosing_state_outward()
  -- inside Fulfilling, "Done" is not a child: it resolves at the root
  local c = accepts{ id = "t", initial = "F",
    states = { { "F", initial = "P", states = { { "P" }, { "Q" } },
                 transitions = { { from = "P", to = "Q", on = "Go" }, { from = "Q", to = "Done", on = "Go" } } },
               { "Done", final = "success" } } }
  lu.assertNotNil(c:node("Done"))
end

function TestChartValid:test_on_list_and_timeout_context_accepted()
  accepts(flat({ { "C", timeout = { context = "delay" } } },
               { { from = "B", to = "C", on = { "X", "Y" } } }))
end

function TestChartValid:test_chart_refuses_new_fields()
  local c = accepts(order_def())
  lu.assertErrorMsgContains("immutable", function() c.extra = 1 end)
  lu.assertErrorMsgContains("immutable", function() c.node = function() end end)
  lu.assertNil(rawget(c, "extra"))
  lu.assertNil(rawget(c, "node"))
end

function TestChartValid:test_chart_fields_cannot_be_reassigned()
  local c = accepts(order_def())
  local root, index = c.root, c.index
  lu.assertErrorMsgContains("immutable", function() c.id = "other" end)
  lu.assertErrorMsgContains("immutable", function() c.root = nil end)
  lu.assertErrorMsgContains("immutable", function() c.index = {} end)
  lu.assertEquals(c.id, "order")
  lu.assertIs(c.root, root)
  lu.assertIs(c.index, index)
end

function TestChartValid:test_changing_the_definition_afterwards_changes_nothing()
  local def = order_def()
  local c = accepts(def)
  def.states[#def.states + 1] = { "Late" }
  def.states[1].timeout = 5
  def.id = "renamed"
  lu.assertNil(c:node("Late"))
  lu.assertNil(c:node("Cart").timeout)
  lu.assertEquals(c.id, "order")
end

------------------------------------------------------------------------

TestChartErrors = {}

function TestChartErrors:test_not_a_table_or_no_id()
  lu.assertErrorMsgContains("expected a table", chart.define, "order")
  lu.assertErrorMsgContains("id must be a non-empty string", chart.define, { initial = "A", states = { { "A" } } })
  lu.assertErrorMsgContains("id must be a non-empty string", chart.define, { id = "", initial = "A", states = { { "A" } } })
end

function TestChartErrors:test_no_states()
  lu.assertStrContains(define_error{ id = "t", initial = "A" }, "states")
  lu.assertStrContains(define_error{ id = "t", initial = "A", states = {} }, "states must be a non-empty list")
end

function TestChartErrors:test_unknown_top_level_key()
  lu.assertStrContains(define_error{ id = "t", initial = "A", states = { { "A" } }, colour = "red" },
                       "unknown key 'colour'")
end

function TestChartErrors:test_unknown_target()
  local msg = refuses(flat(nil, { { from = "B", to = "Nowhere", on = "Back" } }), "B", "unknown target 'Nowhere'")
  lu.assertStrContains(msg, "chart t:")
end

function TestChartErrors:test_unknown_target_in_nested_state_names_its_path()
  refuses({ id = "t", initial = "P",
    states = { { "P", initial = "X", states = { { "X" }, { "Y" } },
                 transitions = { { from = "X", to = "Y", on = "Go" }, { from = "Y", to = "Z", on = "Go" } } } } },
    "P.Y", "unknown target 'Z'")
end

function TestChartErrors:test_unknown_else_target()
  refuses({ id = "t", initial = "F",
    states = { { "F", orthogonal = true, states = { { "R", initial = "R1", states = { { "R1" } } } } },
               { "Done", final = "success" } },
    transitions = { { from = "F", join = "all", to = "Done", else_to = "Nope" } } },
    "F", "unknown target 'Nope'")
end

function TestChartErrors:test_unknown_source()
  local msg = define_error(flat(nil, { { from = "Ghost", to = "A", on = "Back" } }))
  lu.assertStrContains(msg, "from 'Ghost'")
  local msg2 = define_error(flat(nil, { { to = "A", on = "Back" } }))
  lu.assertStrContains(msg2, "needs from")
end

function TestChartErrors:test_missing_initial_at_root()
  refuses({ id = "t", states = { { "A" } } }, "(root)", "missing initial")
end

function TestChartErrors:test_missing_initial_in_composite()
  refuses({ id = "t", initial = "P", states = { { "P", states = { { "X" } } } } }, "P", "missing initial")
end

function TestChartErrors:test_initial_that_is_not_a_child()
  refuses({ id = "t", initial = "Z", states = { { "A" } } }, "(root)", "initial 'Z'")
  -- a grandchild is not a child
  refuses({ id = "t", initial = "P.X", states = { { "P", initial = "X", states = { { "X" } } } } },
          "(root)", "initial 'P.X'")
  -- a sibling of the composite is not its child
  refuses({ id = "t", initial = "P",
    states = { { "P", initial = "Q", states = { { "X" } } }, { "Q" } } }, "P", "initial 'Q'")
end

function TestChartErrors:test_initial_on_a_leaf()
  refuses({ id = "t", initial = "A", states = { { "A", initial = "X" } } }, "A", "initial")
end

function TestChartErrors:test_unreachable_state()
  refuses({ id = "t", initial = "A", states = { { "A" }, { "B" } } }, "B", "unreachable")
  refuses(flat({ { "C" } }), "C", "unreachable")
end

function TestChartErrors:test_unreachable_nested_state()
  refuses({ id = "t", initial = "P", states = { { "P", initial = "X", states = { { "X" }, { "Y" } } } } },
          "P.Y", "unreachable")
end

function TestChartErrors:test_duplicate_sibling_names()
  refuses({ id = "t", initial = "A", states = { { "A" }, { "A" } } }, "A", "duplicate", "'A'")
  refuses({ id = "t", initial = "P", states = { { "P", initial = "X", states = { { "X" }, { "X" } } } } },
          "P.X", "duplicate", "'X'")
end

function TestChartErrors:test_duplicate_paths_of_composites()
  -- two composites of the same name would give the same paths below them
  refuses({ id = "t", initial = "P", states = {
    { "P", initial = "X", states = { { "X" } } },
    { "P", initial = "X", states = { { "X" } } } } }, "P", "duplicate")
end

function TestChartErrors:test_selector_without_targets()
  local sel = function() return "a" end
  refuses(flat(nil, { { from = "B", on = "Pick", select = sel } }), "B", "selector needs targets")
  refuses(flat(nil, { { from = "B", on = "Pick", select = sel, to = {} } }), "B", "selector needs targets")
  refuses(flat(nil, { { from = "B", on = "Pick", select = sel, to = "A" } }), "B", "selector needs targets")
end

function TestChartErrors:test_selector_with_unknown_target_or_bad_key()
  local sel = function() return "a" end
  refuses(flat(nil, { { from = "B", on = "Pick", select = sel, to = { a = "A", b = "Nope" } } }),
          "B", "unknown target 'Nope'")
  refuses(flat(nil, { { from = "B", on = "Pick", select = sel, to = { "A" } } }), "B", "selector keys")
end

function TestChartErrors:test_selector_must_be_a_function()
  refuses(flat(nil, { { from = "B", on = "Pick", select = "a", to = { a = "A" } } }), "B", "select must be a function")
end

function TestChartErrors:test_transition_without_target()
  -- on an event it is a targetless transition (spec/01-unit/targetless_spec.lua);
  -- an automatic one would take itself for ever
  refuses(flat(nil, { { from = "B" } }), "B", "needs a target")
  refuses(flat(nil, { { from = "B", on = "Back", to = 7 } }), "B", "must be a state name")
end

function TestChartErrors:test_unknown_key_in_state()
  refuses(flat({ { "C", colour = "red" } }, { { from = "B", to = "C", on = "Go" } }), "C", "unknown key 'colour'")
  refuses({ id = "t", initial = "P", states = { { "P", initial = "X", states = { { "X", entry = print } } } } },
          "P.X", "unknown key 'entry'")
end

function TestChartErrors:test_unknown_key_in_transition()
  refuses(flat(nil, { { from = "B", to = "A", on = "Back", guard = function() return true end } }),
          "(root)", "unknown key 'guard'")
  refuses(flat(nil, { { from = "B", to = "A", event = "Back" } }), "(root)", "unknown key 'event'")
end

function TestChartErrors:test_bad_timeout_values()
  for _, t in ipairs { 0, -1, math.huge, 0 / 0, "10", true, {}, { context = 5 }, { seconds = 10 } } do
    local def = flat(nil, nil)
    def.states[2].timeout = t
    refuses(def, "B", "timeout")
  end
end

function TestChartErrors:test_join_on_a_non_orthogonal_state()
  refuses(flat(nil, { { from = "B", join = "all", to = "A" } }), "B", "join is only for an orthogonal state")
end

function TestChartErrors:test_join_must_be_all_or_any()
  refuses({ id = "t", initial = "F",
    states = { { "F", orthogonal = true, states = { { "R", initial = "R1", states = { { "R1" } } } } },
               { "Done", final = "success" } },
    transitions = { { from = "F", join = "some", to = "Done" } } }, "F", "join must be")
end

function TestChartErrors:test_else_to_without_join()
  refuses(flat(nil, { { from = "B", to = "A", on = "Back", else_to = "A" } }), "B", "else_to")
end

function TestChartErrors:test_on_must_name_event_kinds()
  refuses(flat(nil, { { from = "B", to = "A", on = {} } }), "B", "on must name at least one event kind")
  refuses(flat(nil, { { from = "B", to = "A", on = { 1 } } }), "B", "on must be an event kind")
  refuses(flat(nil, { { from = "B", to = "A", on = 5 } }), "B", "on must be an event kind")
  refuses(flat(nil, { { from = "B", to = "A", on = "" } }), "B", "on must be an event kind")
end

-- a list holding a value table.concat cannot join (a boolean, a table)
function TestChartErrors:test_on_list_with_a_non_string_kind_names_the_state()
  refuses(flat(nil, { { from = "B", to = "A", on = { "X", false } } }), "B", "on must be an event kind")
  refuses(flat(nil, { { from = "B", to = "A", on = { {} } } }), "B", "on must be an event kind")
end

function TestChartErrors:test_state_names()
  refuses({ id = "t", initial = "A.B", states = { { "A.B" } } }, "(root)", "'A.B'", "'.'")
  refuses({ id = "t", initial = "$A", states = { { "$A" } } }, "(root)", "'$A'", "'$'")
  refuses({ id = "t", initial = "A", states = { { "" } } }, "(root)", "needs a name")
  refuses({ id = "t", initial = "A", states = { { 7 } } }, "(root)", "needs a name")
  refuses({ id = "t", initial = "A", states = { { initial = "X" } } }, "(root)", "needs a name")
  refuses({ id = "t", initial = "P", states = { { "P", initial = "x.y", states = { { "x.y" } } } } },
          "P", "'x.y'")
end

function TestChartErrors:test_states_must_be_tables()
  refuses({ id = "t", initial = "A", states = { "A" } }, "(root)", "each state must be a table")
  refuses({ id = "t", initial = "P", states = { { "P", initial = "X", states = { "X" } } } },
          "P", "each state must be a table")
  refuses({ id = "t", initial = "P", states = { { "P", initial = "X", states = {} } } }, "P", "non-empty")
end

function TestChartErrors:test_final_with_children()
  refuses({ id = "t", initial = "E", states = { { "E", final = "ok", initial = "X", states = { { "X" } } } } },
          "E", "final state cannot have states")
end

function TestChartErrors:test_final_with_outgoing_transitions()
  refuses({ id = "t", initial = "A", states = { { "A" }, { "E", final = "ok" } },
            transitions = { { from = "A", to = "E", on = "Go" }, { from = "E", to = "A", on = "Again" } } },
          "E", "final state has no way out")
end

function TestChartErrors:test_final_value()
  refuses({ id = "t", initial = "E", states = { { "E", final = 1 } } }, "E", "final must be")
end

function TestChartErrors:test_hooks_must_be_functions()
  for _, hook in ipairs { "on_enter", "on_exit", "on_activity" } do
    local def = flat(nil, nil)
    def.states[2][hook] = "print"
    refuses(def, "B", hook .. " must be a function")
  end
  refuses(flat(nil, { { from = "B", to = "A", on = "Back", where = true } }), "B", "where must be a function")
  refuses(flat(nil, { { from = "B", to = "A", on = "Back", action = "x" } }), "B", "action must be a function")
end

function TestChartErrors:test_history_and_defer_values()
  local def = flat(nil, nil)
  def.states[2].history = "no"
  refuses(def, "B", "history")
  def = flat(nil, nil)
  def.states[2].defer = "Pay"
  refuses(def, "B", "defer")
  def = flat(nil, nil)
  def.states[2].defer = { 1 }
  refuses(def, "B", "defer")
end

function TestChartErrors:test_orthogonal_with_initial()
  refuses({ id = "t", initial = "F", states = {
    { "F", orthogonal = true, initial = "R", states = { { "R", initial = "R1", states = { { "R1" } } } } } } },
    "F", "orthogonal")
end

function TestChartErrors:test_orthogonal_without_regions()
  refuses({ id = "t", initial = "F", states = { { "F", orthogonal = true } } }, "F", "needs regions")
end

function TestChartErrors:test_region_without_states()
  refuses({ id = "t", initial = "F", states = { { "F", orthogonal = true, states = { { "R" } } } } },
          "F.R", "region")
end

function TestChartErrors:test_transitions_must_be_a_list_of_tables()
  local def = flat(nil, nil)
  def.transitions = "A->B"
  refuses(def, "(root)", "transitions must be a list")
  def = flat(nil, nil)
  def.transitions[2] = "B->A"
  refuses(def, "(root)", "transition 2 must be a table")
end

function TestChartErrors:test_from_outside_the_scope()
  -- a transition listed in P may not start from a state outside P
  refuses({ id = "t", initial = "P", states = {
    { "P", initial = "X", states = { { "X" } }, transitions = { { from = "Q", to = "X", on = "Go" } } },
    { "Q" } }, transitions = { { from = "P", to = "Q", on = "Go" } } }, "P", "from 'Q'")
end

------------------------------------------------------------------------
-- external = { kinds }: what may come from outside

TestChartExternal = {}

local function with_external(ext)
  local def = order_def()
  def.external = ext
  return def
end

function TestChartExternal:test_declared_kinds_are_a_read_only_set()
  local c = accepts(with_external { "PlaceOrder", "Paid", "Declined", "Picked", "Packed", "Go" })
  lu.assertTrue(c.external.Paid)
  lu.assertNil(c.external.Timeout)
  lu.assertEquals(chart.external_kinds(c), { "Declined", "Go", "Packed", "Paid", "Picked", "PlaceOrder" })
  lu.assertErrorMsgContains("immutable", function() c.external.SetState = true end)
  lu.assertErrorMsgContains("immutable", function() c.external = {} end)
  -- the list handed back is a copy
  local kinds = chart.external_kinds(c)
  kinds[1] = "SetState"
  lu.assertEquals(chart.external_kinds(c)[1], "Declined")
  lu.assertNil(c.external.SetState)
end

function TestChartExternal:test_is_external_with_a_declaration()
  local c = accepts(with_external { "PlaceOrder", "Paid" })
  lu.assertTrue(chart.is_external(c, "PlaceOrder"))
  lu.assertTrue(chart.is_external(c, "Paid"))
  -- handled by the chart but not declared
  lu.assertFalse(chart.is_external(c, "Picked"))
  lu.assertFalse(chart.is_external(c, "Nope"))
  lu.assertFalse(chart.is_external(c, ""))
  for kind in pairs(chart.RESERVED) do lu.assertFalse(chart.is_external(c, kind), kind) end
end

function TestChartExternal:test_without_a_declaration_every_unreserved_kind()
  local c = accepts(order_def())
  lu.assertNil(c.external)
  lu.assertNil(chart.external_kinds(c))
  lu.assertTrue(chart.is_external(c, "Paid"))
  lu.assertTrue(chart.is_external(c, "Anything"))
  lu.assertFalse(chart.is_external(c, ""))
  for kind in pairs(chart.RESERVED) do lu.assertFalse(chart.is_external(c, kind), kind) end
end

function TestChartExternal:test_an_empty_declaration_takes_nothing()
  local c = accepts(with_external {})
  lu.assertEquals(chart.external_kinds(c), {})
  lu.assertFalse(chart.is_external(c, "Paid"))
end

function TestChartExternal:test_refused_declarations()
  local cases = {
    { "PlaceOrder", "must be a list of event kinds" },
    { { kind = "Paid" }, "keys 1..n" },
    { { "Paid", nil, "Go" }, "keys 1..n" },
    { { "Paid", 5 }, "item 2 must be a non-empty string" },
    { { "" }, "item 1 must be a non-empty string" },
    { { "Paid", "Paid" }, "'Paid' is listed twice" },
    { { "Refund" }, "no transition handles 'Refund'" },
    -- handled by a transition, but the engine's or a control call's
    { { "Timeout" }, "'Timeout' is reserved" },
  }
  for kind in pairs(chart.RESERVED) do cases[#cases + 1] = { { kind }, "'" .. kind .. "' is reserved" } end
  for _, case in ipairs(cases) do
    local msg = define_error(with_external(case[1]))
    lu.assertStrContains(msg, "chart order: external: ")
    lu.assertStrContains(msg, case[2])
  end
end

function TestChartExternal:test_argument_types()
  local c = accepts(order_def())
  lu.assertErrorMsgContains("chart.is_external: c must be a chart", chart.is_external, {}, "Paid")
  lu.assertErrorMsgContains("chart.is_external: kind must be a string, got number", chart.is_external, c, 5)
  lu.assertErrorMsgContains("chart.external_kinds: c must be a chart", chart.external_kinds, nil)
end
