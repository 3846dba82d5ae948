-- spec/01-unit/stm_spec.lua - harel's .stm DSL without a server: the text
-- read into its normal form, every error with its line and column, what the
-- engine cannot run refused by name, the chart stm.to_chart builds (stepped
-- by the interpreter alone: guards, set, choices, selectors, joins), and the
-- typed fields of declared events checked.
local lu = require "luaunit"
local chart = require "mongostore.chart"
local stm = require "mongostore.stm"
local runtime = require "mongostore.runtime"
local values = require "mongostore.values"
local helper = require "helpers"

local function read(name)
  local f = assert(io.open(helper.root() .. "/spec/fixtures/stm/" .. name, "r"))
  local text = f:read("a")
  f:close()
  return text
end

-- A machine around the given items.
local function machine(items)
  return "machine m {\n  initial A\n  state A {}\n  state B {}\n" .. items .. "\n}\n"
end

-- The error `fn(...)` raises: asserts its line and column, and that it
-- contains each fragment.
local function fails_at(line, col, fn, ...)
  local ok, err = pcall(fn, ...)
  lu.assertFalse(ok, "accepted")
  err = tostring(err)
  local l, c = err:match("^stm: line (%d+), column (%d+): ")
  lu.assertNotNil(l, "no line and column in: " .. err)
  lu.assertEquals({ tonumber(l), tonumber(c) }, { line, col }, err)
  return err
end

local function parse_fails(line, col, text, ...)
  local err = fails_at(line, col, stm.parse, text)
  for _, frag in ipairs { ... } do lu.assertStrContains(err, frag) end
  return err
end

local function build_fails(line, col, text, opts, ...)
  local err = fails_at(line, col, stm.to_chart, text, opts)
  for _, frag in ipairs { ... } do lu.assertStrContains(err, frag) end
  return err
end

------------------------------------------------------------------------
-- Stepping a chart with the interpreter alone

local function new_exe(id, context)
  return { id = id, definition_id = "m", version = 0, status = "PENDING", root_path = "", context = context or {},
           history = {}, children = {}, deferred = values.array(), invoke_seq = {}, processed_events = 0,
           priority = 0 }
end

local function step(c, exe, kind, data)
  local fx = runtime.apply(c, exe, { id = kind .. ":" .. exe.version, kind = kind, data = data or {} }, 100)
  exe.version = exe.version + 1
  return fx
end

local function started(c, context)
  local exe = new_exe("x", context)
  step(c, exe, "Start")
  return exe
end

------------------------------------------------------------------------
-- Parsing

TestStmParse = {}

function TestStmParse:test_the_normal_form_of_a_small_program()
  local p = stm.parse([[
event Paid { amount: float  note: string? }
guard big = amount > 10 and context.tier == "gold"
bind { hello = pkg.hello }
machine m {
  initial A
  state A { on enter hello(n: 1, s: "x")  timeout 5 }
  final Done success
  from A to Done on Paid | Retry where big set context.n = context.n + 1
}
]])
  lu.assertEquals(p.events, { Paid = { amount = { type = "float", required = true },
                                       note = { type = "string", required = false } } })
  lu.assertEquals(p.bindings, { hello = "pkg.hello" })
  lu.assertEquals(p.guards.big, { all = {
    { leaf = { source = "event", field = "amount", op = "gt", value = 10 } },
    { leaf = { source = "context", field = "tier", op = "eq", value = "gold" } } } })
  local m = p.machines.m
  lu.assertEquals(m.__pos__, { 4, 1 })
  lu.assertEquals(m.start, "A")
  lu.assertEquals(m.states.A.on_enter, { kind = "handler", ref = "hello", inputs = { n = 1, s = "x" } })
  lu.assertEquals(m.states.A.timeout, 5)
  lu.assertEquals(m.states.A.__pos__, { 6, 3 })
  lu.assertEquals(m.states.Done, { outcome = "success", __pos__ = { 7, 3 } })
  lu.assertEquals(m.transitions[1], {
    from = "A", to = "Done", __pos__ = { 8, 3 },
    on_event = { type = "Paid|Retry", where = { guard = "big" } },
    set = { { field = "n", expr = { arith = { op = "+", left = { ref = { source = "context", field = "n" } },
                                               right = { lit = 1 } } } } },
  })
  lu.assertEquals(p.positions, { ["event Paid"] = { 1, 1 }, ["guard big"] = { 2, 1 }, ["machine m"] = { 4, 1 } })
end

function TestStmParse:test_every_corpus_file_parses()
  for _, name in ipairs { "order.stm", "guards.stm", "selector.stm", "fork.stm", "refused.stm", "fragments.stm",
                          "shipment.stm" } do
    local ok, err = pcall(stm.normalize, read(name))
    lu.assertTrue(ok, name .. ": " .. tostring(err))
  end
end

function TestStmParse:test_literals_as_harel_reads_them()
  local p = stm.parse(machine([[
  from A select f(a: -2, b: 2.5, c: 1e5, d: true, e: [1, "x"], f: "t\tq\"\\\u00e9") { 1 to A  -1.5 to B  true to A  "s" to B  1e5 to A }
]]))
  local sel = p.machines.m.transitions[1].selector
  local inputs = sel["function"].inputs
  lu.assertEquals(inputs.a, -2)
  lu.assertEquals(math.type(inputs.a), "integer")
  lu.assertEquals(inputs.b, 2.5)
  lu.assertEquals(math.type(inputs.c), "float")
  lu.assertEquals(inputs.d, true)
  lu.assertEquals(inputs.e, { 1, "x" })
  lu.assertEquals(inputs.f, "t\tq\"\\\195\169")
  -- branches are keyed by Python's str() of the value
  lu.assertEquals(sel.mapper, { ["1"] = "A", ["-1.5"] = "B", ["True"] = "A", s = "B", ["100000.0"] = "A" })
end

function TestStmParse:test_on_enter_after_a_transition_is_a_hook_and_on_enter_before_an_item_a_trigger()
  local p = stm.parse(machine("  from A to B\n  on enter greet\n  from B to A on enter\n  state C {}"))
  local m = p.machines.m
  lu.assertEquals(m.on_enter, { kind = "handler", ref = "greet", inputs = {} })
  lu.assertNil(m.transitions[1].on_event)
  lu.assertEquals(m.transitions[2].on_event, { type = "enter" })
  lu.assertNotNil(m.states.C)
end

function TestStmParse:test_orthogonal_regions_are_parallel_states()
  local p = stm.parse(read("fork.stm"))
  local work = p.machines.fork.states.Work
  lu.assertEquals(work.type, "OrthogonalState")
  lu.assertEquals(work.states.Left.type, "ParallelState")
  lu.assertEquals(p.machines.fork.states.Retrying.allow_history, false)
  lu.assertEquals(p.machines.fork.states.Prepare.defer, { "Go", "Hold" })
  lu.assertEquals(work.states.Left.states.L1.timeout, { context = "wait" })
end

------------------------------------------------------------------------
-- Errors: each with its line and column

TestStmErrors = {}

function TestStmErrors:test_lexical_errors()
  parse_fails(3, 13, "machine m {\n  initial A\n  state A { @ }\n}", "unexpected character '@'")
  parse_fails(2, 11, "machine m {\n  initial \"A\n}", "unterminated string")
end

function TestStmErrors:test_syntax_errors_say_what_was_expected()
  parse_fails(3, 13, "machine m {\n  initial A\n  state A {}\n", "unexpected end of input", "'}'")
  parse_fails(5, 10, machine("  from A -> B"), "expected 'to', 'choose', 'select' or 'join'", "'-'")
  parse_fails(5, 3, machine("  bogus A"), "expected an item")
  parse_fails(1, 1, "state A {}", "expected a statement")
  parse_fails(1, 14, "# only a note\n", "unexpected end of input")
  parse_fails(5, 28, machine("  from A to B on X where n * 2 > 1"), "found '*'")
  parse_fails(1, 14, "event E { n: integer }", "expected a field type")
  parse_fails(5, 17, machine("  from A select { 1 to B }"), "expected an action")
  parse_fails(5, 15, machine("  from A join some to B else to A"), "expected 'all' or 'any'")
  parse_fails(5, 19, machine("  from A choose { else to B }"), "expected 'when'")
  parse_fails(1, 15, "fragment F(x: widget) { initial A state A {} }", "expected a parameter kind")
end

function TestStmErrors:test_structure_errors_harel_reports_too()
  parse_fails(5, 26, machine("  from A to B on X where data.n > 1"), "unknown namespace 'data'")
  parse_fails(5, 26, machine("  from A to B on X where context.a.b > 1"), "not a nested path")
  parse_fails(5, 24, machine("  from A to B on X set event.n = 1"), "`set` writes the execution context")
  parse_fails(3, 3, "machine m {\n  initial A\n  state A {\n    ttl 5\n  }\n}", "`ttl` is only allowed at the machine level")
  parse_fails(3, 3, "machine m {\n  initial A\n  final A success { context { n: int } }\n}",
    "`context` is only allowed at the machine level")
  parse_fails(2, 13, "machine m {\n  context { n: int? = 1 }\n  initial A\n  state A {}\n}", "can't also be optional")
  parse_fails(4, 9, "machine m {\n  initial A\n  state A {}\n  state A {}\n}", "duplicate state name 'A'")
end

function TestStmErrors:test_building_errors_point_at_their_construct()
  build_fails(5, 22, machine("  state C { on enter nobody }"), nil, "unbound action handler 'nobody'")
  build_fails(5, 26, machine("  from A to B on X where nope"), nil, "unbound guard 'nope'")
  build_fails(2, 11, "guard a = b\nguard b = a\n" .. machine("  from A to B on X where a"), nil, "refers to itself")
  build_fails(5, 3, machine("  from A select pick returns { \"x\", \"y\" } { \"x\" to B }"),
    { actions = { pick = function() end } }, "returns 'y'", "no branch for it and no `else`")
  -- what chart.define finds, at the state or transition it names
  build_fails(5, 3, machine("  from A to Nowhere on Go"), nil, "unknown target 'Nowhere'")
  build_fails(5, 3, machine("  state C { state D {} }\n  from A to C on Go"), nil, "state C: missing initial")
  build_fails(4, 3, "machine m {\n  initial A\n  state A {}\n  state B {}\n}", nil, "state B: unreachable")
  build_fails(5, 3, machine("  from A join all to B else to A"), nil, "join is only for an orthogonal state")
  build_fails(1, 1, "event E {}", nil, "no machine declared")
  build_fails(1, 1, "machine a { initial A state A {} }\nmachine b { initial A state A {} }", nil,
    "several machines (a, b)")
  build_fails(1, 1, "machine a { initial A state A {} }", { machine = "zz" }, "no machine named 'zz'")
  build_fails(1, 1, "machine a { state A {} }", nil, "has no `initial`")
end

function TestStmErrors:test_wrong_arguments_raise_naming_them()
  lu.assertErrorMsgContains("text must be a string", stm.to_chart, 5)
  lu.assertErrorMsgContains("opts must be a table", stm.to_chart, "x", 5)
  lu.assertErrorMsgContains("unknown option action", stm.to_chart, "x", { action = {} })
  lu.assertErrorMsgContains("opts.actions must map names to functions", stm.to_chart, "x", { actions = { a = 1 } })
  lu.assertErrorMsgContains("opts.machine must be a string, got integer", stm.to_chart, "x", { machine = 3 })
  lu.assertErrorMsgContains("opts.machine must be a non-empty string", stm.to_chart, "x", { machine = "" })
  lu.assertErrorMsgContains("text must be a string", stm.parse, nil)
end

------------------------------------------------------------------------
-- Refusals by name

TestStmRefusals = {}

local noop = function() end

local REFUSED = {
  { "  orthogonal C { cancel_on_failure state R { initial R1 final R1 success } }\n  from A to C on Go", 5, 18,
    "`cancel_on_failure` is not supported" },
  { "  from A to B on error", 5, 3, "`on error` is not supported", "fails the execution" },
  { "  from A to B on Go | Expired", 5, 3, "`on Expired` is not supported" },
  { "  state C { outcome partial initial D state D {} }\n  from A to C on Go", 5, 13,
    "`outcome on a composite state` is not supported" },
  { "  state C { outcome partial }\n  from A to C on Go\n  from C to B on Go", 5, 13,
    "`outcome on a state with a way out` is not supported" },
}

function TestStmRefusals:test_each_construct_is_refused_by_name_at_its_place()
  for _, case in ipairs(REFUSED) do
    local err = build_fails(case[2], case[3], machine(case[1]), nil, case[4], select(5, table.unpack(case)))
    lu.assertNotStrContains(err, "unbound")
  end
end

-- Mistakes harel's validator reports, with their place.
function TestStmRefusals:test_invoke_and_with_mistakes()
  build_fails(5, 13, machine("  state C { invoke }\n  from A to C on Go"), nil, "`invoke` names no machine")
  build_fails(5, 13, machine("  state C { with { n: m } }\n  from A to C on Go"), nil,
    "`with` passes context to an `invoke` or to an orthogonal state's regions")
  build_fails(7, 3, machine("  state C { invoke pay }\n  from A to C on Go\n  from C to B"), nil,
    "an invoke state waits for its child")
  build_fails(5, 3, machine("  state C { invoke { } }\n  from A to C on Go"), nil, "the inline invoke of C has no states")
  build_fails(5, 3, machine("  state C { invoke { state X {} } }\n  from A to C on Go"), nil,
    "the inline invoke of C has no `initial`")
end

function TestStmRefusals:test_machine_level_constructs()
  build_fails(2, 3, "machine m {\n  ttl 60\n  initial A\n  state A {}\n}", nil, "`ttl` is not supported")
  build_fails(2, 3, "machine m {\n  context { n: int }\n  initial A\n  state A {}\n}", nil,
    "`context` is not supported")
  build_fails(2, 3, "machine m {\n  on enter hi\n  initial A\n  state A {}\n}", { actions = { hi = print } },
    "`on enter on the machine` is not supported")
  build_fails(2, 3, "machine m {\n  timeout 5\n  initial A\n  state A {}\n}", nil,
    "`timeout on the machine` is not supported")
  build_fails(2, 3, "machine m {\n  defer X\n  initial A\n  state A {}\n}", nil, "`defer on the machine`")
  build_fails(1, 1, "import \"lib.stm\"\nmachine m { initial A state A {} }", nil, "`import` is not supported")
  build_fails(2, 13, "machine m {\n  state A { timeout budget }\n  initial A\n}", nil,
    "unbound value parameter 'budget'")
end

function TestStmRefusals:test_the_corpus_files_with_refused_constructs_are_refused()
  build_fails(3, 1, read("refused.stm"), nil, "`import` is not supported")
  build_fails(19, 5, read("fragments.stm"), nil, "use 'Retry': unbound action handler 'do_it' for 'work'")
  build_fails(20, 5, read("fragments.stm"), { actions = { do_it = noop } }, "use of unknown fragment 'lib.Other'")
end

------------------------------------------------------------------------
-- The chart

TestStmChart = {}

function TestStmChart:test_the_order_chart_maps_onto_chart_define()
  local c = stm.to_chart(read("order.stm"), { actions = {
    ["payments.request"] = noop, ["fulfilment.ship"] = noop, log_exit = noop, notify = noop } })
  lu.assertTrue(chart.is_chart(c))
  lu.assertEquals(c.id, "order")
  lu.assertEquals(c:node("AwaitingPayment").timeout, 900)
  lu.assertEquals(c:node("Delivered").outcome, "success")
  lu.assertEquals(c:node("Cancelled").outcome, "cancelled")
  lu.assertEquals(type(c:node("Cancelled").on_enter), "function")
  lu.assertEquals(c.root.initial.path, "Cart")
  local t = c:node("AwaitingPayment").outgoing[2]
  lu.assertTrue(t.events.Declined and t.events.Timeout)
  local id = stm.to_chart(read("order.stm"), { id = "order-v2", actions = {
    request_payment = noop, ship = noop, log_exit = noop, notify = noop } }).id
  lu.assertEquals(id, "order-v2")
end

function TestStmChart:test_fork_regions_history_defer_and_timeouts()
  local c = stm.to_chart(read("fork.stm"), { actions = { note = noop } })
  lu.assertEquals(c:node("Work").kind, "orthogonal")
  lu.assertEquals(c:node("Work.Left").kind, "composite")
  lu.assertEquals(c:node("Work.Left.L1").timeout, { context = "wait" })
  lu.assertEquals(c:node("Retrying.Waiting").timeout, { context = "backoff seconds" })
  lu.assertFalse(c:node("Retrying").history)
  lu.assertTrue(c:node("Prepare").defer.Go and c:node("Prepare").defer.Hold)
  local join = c:node("Work").outgoing[1]
  lu.assertEquals(join.join, "all")
  lu.assertEquals(join.targets.pass.path, "Race")
  lu.assertEquals(join.targets.fail.path, "Retrying")
end

-- harel's join: every region done, then pass when all (or any) ended "success"
function TestStmChart:test_joins_route_on_the_regions_verdicts()
  local c = stm.to_chart(read("fork.stm"), { actions = { note = noop } })
  local all = c:node("Work").outgoing[1].select
  local any = c:node("Race").outgoing[1].select
  local function r(...)
    local out = {}
    for i, o in ipairs { ... } do out["R" .. i] = { outcome = o == "-" and values.null or o, context = {} } end
    return { region_results = out }
  end
  lu.assertEquals(all(r("success", "success")), "pass")
  lu.assertEquals(all(r("success", "failure")), "fail")
  lu.assertEquals(all(r("success", "-")), "fail", "no outcome is not a success for harel")
  lu.assertEquals(all({}), "fail", "no results: nothing succeeded")
  lu.assertEquals(any(r("failure", "success")), "pass")
  lu.assertEquals(any(r("failure", "-")), "fail")
end

function TestStmChart:test_guards_compare_as_harel_does()
  local c = stm.to_chart(machine([[
  from A to B on X where n == 1
  from A to B on Y where n < 3 and s != "no"
  from A to B on Z where tag in ["a", "b"] or word in "abc"
  from A to B on W where n >= context.min
  from A to B on V where not flag == true]]))
  local g = {}
  for i, t in ipairs(c:node("A").outgoing) do g[i] = t.guard end
  lu.assertTrue(g[1]({ n = 1 }, {}))
  lu.assertTrue(g[1]({ n = 1.0 }, {}))
  lu.assertTrue(g[1]({ n = true }, {}), "Python: True == 1")
  lu.assertFalse(g[1]({}, {}), "an absent field does not hold")
  lu.assertFalse(g[2]({ n = 2 }, {}), "an absent field fails, even for !=")
  lu.assertTrue(g[2]({ n = 2, s = "x" }, {}))
  lu.assertFalse(g[2]({ n = "2", s = "x" }, {}), "a string and a number do not compare")
  lu.assertFalse(g[2]({ n = 2, s = "no" }, {}))
  lu.assertTrue(g[3]({ tag = "b" }, {}))
  lu.assertTrue(g[3]({ tag = "c", word = "bc" }, {}))
  lu.assertFalse(g[3]({ tag = "c", word = 5 }, {}))
  lu.assertTrue(g[4]({ n = 5 }, { min = 5 }))
  lu.assertFalse(g[4]({ n = 5 }, {}), "an absent reference does not hold")
  lu.assertTrue(g[5]({ flag = false }, {}))
  lu.assertTrue(g[5]({}, {}), "not of a comparison that cannot be made holds")
end

function TestStmChart:test_set_and_choices_step_through_the_interpreter()
  local c = stm.to_chart(read("guards.stm"))
  -- the first transition on Add (where not over) counts
  local exe = started(c, { n = 1, limit = 10, tier = "bronze" })
  lu.assertEquals(exe.active_path, "Counting")
  step(c, exe, "Add", { count = 2 })
  lu.assertEquals(exe.active_path, "Counting")
  lu.assertEquals(exe.context.n, 3, "set context.n = context.n + event.count")
  lu.assertEquals(exe.context.last, 2)
  -- over the limit it does not; the choice needs vip, which bronze is not
  step(c, exe, "Add", { count = 20 })
  lu.assertEquals(exe.active_path, "Counting")
  lu.assertEquals(exe.context.n, 3)

  -- the choice's second branch, with the transition's own set
  exe = started(c, { n = 1, limit = 0, tier = "platinum" })
  step(c, exe, "Add", { count = 2 })
  lu.assertEquals(exe.active_path, "Small")
  lu.assertEquals(exe.context.seen, true)
  lu.assertNil(exe.context.route)

  -- the first branch and its set; then Large's automatic choice goes on to Done
  exe = started(c, { n = 11, limit = 0, tier = "gold" })
  step(c, exe, "Add", { count = 5 })
  lu.assertEquals(exe.context.route, "large")
  lu.assertEquals(exe.active_path, "Done")
  lu.assertEquals(exe.status, "DONE")
  lu.assertEquals(exe.outcome, "success")
end

function TestStmChart:test_a_choice_else_with_its_own_set()
  local c = stm.to_chart(read("guards.stm"))
  local exe = started(c, { n = -1, limit = 0, tier = "gold" })
  -- over and vip hold, no branch does (n is not > 10 nor >= 0.25): the else
  step(c, exe, "Add", { count = 2 })
  lu.assertEquals(exe.active_path, "Done")
  lu.assertEquals(exe.status, "DONE")
  lu.assertEquals(exe.context.route, "done")
  lu.assertEquals(exe.context.n, 0)
  lu.assertEquals(exe.context.seen, true)
end

function TestStmChart:test_a_set_that_cannot_be_evaluated_fails_the_step()
  local c = stm.to_chart(machine("  from A to B on X set context.n = context.missing + 1"))
  local exe = started(c)
  step(c, exe, "X")
  lu.assertEquals(exe.status, "FAILED")
  lu.assertStrContains(tostring(exe.error and (exe.error.message or exe.error)), "context.missing is not set")
end

function TestStmChart:test_selectors_key_their_result_as_python_prints_it()
  local r1, r2
  local seen = {}
  local c = stm.to_chart(read("selector.stm"), { actions = {
    pick = function(context, event, inputs) seen[#seen + 1] = { context.k, event.kind, inputs } return r1 end,
    ["pkg.choose"] = function(_, _, inputs) seen[#seen + 1] = inputs return r2 end,
  } })
  local function route(a, b)
    r1, r2 = a, b
    local exe = started(c, { k = "v" })
    step(c, exe, "Decide")
    return exe
  end
  lu.assertEquals(route(1).active_path, "C")
  lu.assertEquals(seen[1], { "v", "Decide", {} })
  lu.assertEquals(route(1.0).active_path, "Fail", "str(1.0) is '1.0', not '1': the else")
  lu.assertEquals(route(true).active_path, "Out", "true is the branch `true` (Python's 'True')")
  lu.assertEquals(route("zzz").active_path, "Fail", "else")
  -- from A the selector is automatic and has inputs
  lu.assertEquals(route("a", false).active_path, "Out")
  lu.assertEquals(seen[#seen], { limit = 2, mode = "fast", ratio = 0.5, on = false, tags = { "x", "y" } })
  lu.assertEquals(route("a", 2.5).active_path, "B")
  lu.assertEquals(route("a", 100000.0).active_path, "C")
  -- and no else: a result it does not map fails the execution, naming it
  local exe = route("a", "nope")
  lu.assertEquals(exe.status, "FAILED")
  lu.assertStrContains(tostring(exe.error and (exe.error.message or exe.error)), "matches no branch")
end

function TestStmChart:test_actions_get_their_inputs_and_resolve_through_bind_and_require()
  local got = {}
  package.loaded["stm_spec_actions"] = { hello = function(_, _, _, inputs) got[#got + 1] = inputs.who end }
  local text = "bind { greet = stm_spec_actions.hello }\n" .. machine([[
  state C { on enter greet(who: "bound") }
  state D { on enter stm_spec_actions.hello(who: "literal") }
  from A to C on Go
  from C to D on Go
  from D to B on Go]])
  local c = stm.to_chart(text)
  local exe = started(c)
  step(c, exe, "Go")
  step(c, exe, "Go")
  lu.assertEquals(got, { "bound", "literal" })
  -- opts.actions wins over a bind, by the handler's name
  local c2 = stm.to_chart(text, { actions = { greet = function(_, _, _, inputs) got[#got + 1] = "opt:" .. inputs.who end } })
  exe = started(c2)
  step(c2, exe, "Go")
  lu.assertEquals(got[3], "opt:bound")
  package.loaded["stm_spec_actions"] = nil
end

function TestStmChart:test_lua_guards_override_declared_ones()
  local text = "guard ok = n > 1\n" .. machine("  from A to B on Go where ok")
  local c = stm.to_chart(text)
  lu.assertTrue(c:node("A").outgoing[1].guard({ n = 2 }, {}))
  c = stm.to_chart(text, { guards = { ok = function(data, context) return data.n == 0 and context.z == 1 end } })
  lu.assertFalse(c:node("A").outgoing[1].guard({ n = 2 }, { z = 1 }))
  lu.assertTrue(c:node("A").outgoing[1].guard({ n = 0 }, { z = 1 }))
end

------------------------------------------------------------------------
-- Typed events

TestStmEvents = {}

function TestStmEvents:test_declared_fields_are_checked()
  local c = stm.to_chart(read("order.stm"), { actions = {
    request_payment = noop, ship = noop, log_exit = noop, notify = noop } })
  local function check(kind, data) return stm.check_event(c, kind, data) end
  lu.assertTrue(check("Paid", { amount = 1.5, method = "card" }))
  lu.assertTrue(check("Paid", { amount = 2, method = "card" }), "an int is a float")
  lu.assertTrue(check("Paid", { amount = 2, method = "card", reference = values.null }), "null for an optional field")
  lu.assertTrue(check("Paid", { amount = 2, method = "card", gift = true, extra = { 1 }, other = "x" }))
  local ok, msg, code = check("Paid", { method = 5 })
  lu.assertNil(ok)
  lu.assertEquals(code, "invalid")
  lu.assertStrContains(msg, "missing required field 'amount' (float)")
  lu.assertStrContains(msg, "field 'method' must be string, got number 5")
  lu.assertNil(check("PlaceOrder", { items = 1.5 }), "1.5 is not an int")
  lu.assertNil(check("PlaceOrder", { items = true }), "a boolean is not an int")
  lu.assertNil(check("Paid", { amount = 1, method = "c", gift = "yes" }))
  lu.assertNil(check("Paid", { amount = values.null, method = "c" }), "null only for an optional field")
  lu.assertTrue(check("Unknown", { anything = 1 }), "an undeclared kind is not checked")
  lu.assertTrue(check("Timeout", {}), "nor a reserved one")
  lu.assertEquals(stm.events(c)["Cancel Order"], {})
  lu.assertEquals(stm.events(c).Declined, { reason = { type = "string", required = true } })
  lu.assertNil(stm.events(stm.to_chart(machine("  from A to B on Go"))))
  lu.assertErrorMsgContains("c must be a chart", stm.check_event, {}, "X", {})
end

------------------------------------------------------------------------
-- Fragments

TestStmFragments = {}

local FRAG = [[
fragment F(work: action, out: state, ok: guard, n: value, go: event) {
  initial W
  state W { on enter work(n: n)  timeout n }
  from W to out on go where ok
}
]]

function TestStmFragments:test_use_errors_point_at_the_use()
  local function use(args) return FRAG .. machine("  use F(" .. args .. ") as C\n  from A to C on Go") end
  build_fails(10, 3, FRAG .. machine("  use G() as C\n  from A to C on Go"), nil, "use of unknown fragment 'G'")
  build_fails(10, 3, use("work = w, out = B, ok = (x == 1), n = 1, go = Go, extra = 2"), { actions = { w = noop } },
    "use 'F': unknown args: extra")
  build_fails(10, 3, use("work = w, out = B"), { actions = { w = noop } }, "use 'F': missing args: go, n, ok")
  build_fails(10, 3, use("work = 5, out = B, ok = (x == 1), n = 1, go = Go"), nil,
    "arg 'work' must be an action handler or path")
  build_fails(10, 3, use("work = w, out = (x == 1), ok = (x == 1), n = 1, go = Go"), { actions = { w = noop } },
    "arg 'out' must be a state name")
  build_fails(10, 3, use("work = w, out = B, ok = 3, n = 1, go = Go"), { actions = { w = noop } },
    "arg 'ok' must be a guard predicate or name")
  build_fails(10, 3, use("work = w, out = B, ok = nope, n = 1, go = Go"), { actions = { w = noop } },
    "unbound guard 'nope' for 'ok'")
  build_fails(10, 3, use("work = w, out = B, ok = (x == 1), n = k, go = Go"), { actions = { w = noop } },
    "unbound value parameter 'k' for 'n'")
  build_fails(10, 3, use("work = w, out = B, ok = (x == 1), n = 1, go = Go"), nil,
    "unbound action handler 'w' for 'work'")
  build_fails(10, 3, FRAG .. machine("  use F(work = w, out = B, ok = (x == 1), n = 1, go = Go) as A"),
    { actions = { w = noop } }, "collides with an existing state")
end

function TestStmFragments:test_a_chart_of_fragments_maps_and_steps()
  local calls = {}
  local function rec(name)
    return function(_, _, _, inputs) calls[#calls + 1] = { name, inputs.limit or inputs.level } end
  end
  local c = stm.to_chart(read("reuse.stm"), { actions = {
    ["jobs.fetch"] = rec("fetch"), ["jobs.save"] = rec("save"), ["ops.alert"] = rec("alert") } })
  -- each use is a composite named by its alias, its value parameters filled in
  lu.assertEquals(c:node("Fetch").kind, "composite")
  lu.assertEquals(c:node("Fetch.Trying").timeout, 30)
  lu.assertEquals(c:node("Save.Inner.Trying").timeout, 5, "forwarded through Guarded's `wait`")
  lu.assertEquals(c:node("Ping.P").outcome, "success")
  -- the state parameter is the target, the event parameter the trigger
  local give_up = c:node("Fetch.Trying").outgoing[2]
  lu.assertTrue(give_up.events.Timeout)
  lu.assertEquals(give_up.target.path, "Failed")
  lu.assertTrue(c:node("Fetch.Trying").outgoing[1].events.Poke)
  lu.assertTrue(c:node("Save.Inner.Trying").outgoing[1].events.Nudge)

  local exe = started(c, { tries = 1 })
  lu.assertEquals(exe.active_path, "Fetch.Trying")
  step(c, exe, "Poke", { status = "late" })
  lu.assertEquals(exe.active_path, "Fetch.Trying", "the guard argument: status must be ok")
  step(c, exe, "Poke", { status = "ok" })
  lu.assertEquals(exe.active_path, "Save.Inner.Trying", "Fetch finished and its completion transition ran")
  step(c, exe, "Poke", { status = "ok" })
  lu.assertEquals(exe.active_path, "Save.Inner.Trying", "this use's trigger is Nudge")
  step(c, exe, "Nudge", { status = "ok" })
  lu.assertEquals(exe.status, "DONE")
  lu.assertEquals(exe.active_path, "Done")
  lu.assertEquals(calls, { { "fetch", 30 }, { "save", 5 } })

  exe = started(c, { tries = 5 })
  step(c, exe, "Poke", { status = "ok" })
  lu.assertEquals(exe.active_path, "Fetch.Trying", "context.tries < 3 does not hold")
end

local STM_DIR = helper.root() .. "/spec/fixtures/stm"

function TestStmFragments:test_imports_are_read_relative_to_base_dir()
  local asked = {}
  local c = stm.to_chart(read("imports.stm"), { base_dir = STM_DIR, actions = {
    ["people.ask"] = function(_, _, _, inputs) asked[#asked + 1] = inputs.channel end,
    ["ops.notify"] = noop } })
  lu.assertEquals(c:node("Review.Pause.Waiting").timeout, 60, "lib/steps.stm used lib/more.stm's Wait")
  lu.assertEquals(c:node("Cool.Waiting").timeout, 5)
  lu.assertEquals(c:node("Ping.P").outcome, "success", "x.Ping, imported under an alias")
  lu.assertEquals(stm.events(c), { Verdict = { verdict = { type = "string", required = true } } })
  local exe = started(c)
  lu.assertEquals(exe.active_path, "Review.Asking")
  lu.assertEquals(asked, { "mail" })
  step(c, exe, "Verdict", { verdict = "no" })
  lu.assertEquals(exe.active_path, "Rejected", "the imported guard `accepted` does not hold: the state argument")
  lu.assertEquals(exe.outcome, "failure")
end

-- A directory of .stm files for one test.
local function files(t)
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p " .. helper.shell_quote(dir)))
  for name, text in pairs(t) do
    local f = assert(io.open(dir .. "/" .. name, "w"))
    f:write(text)
    f:close()
  end
  return dir
end

-- An import reads only .stm files inside base_dir (or a listed import
-- path), at most max_import_bytes of them: an absolute path, a `..` out of
-- the directory, /dev/zero or /etc/passwd are refused by name, and no
-- error quotes a line of a file that is not .stm.
function TestStmFragments:test_imports_stay_inside_their_directories()
  local lib = files { ["shared.stm"] = "fragment S {\n  initial A\n  state A {}\n}\n" }
  local dir = files {
    ["ok.stm"] = "fragment F {\n  initial A\n  state A {}\n}\n",
    ["big.stm"] = "# " .. string.rep("x", 2000) .. "\n",
    ["notes.txt"] = "secret first line\n",
  }
  os.execute("mkdir " .. helper.shell_quote(dir .. "/sub.stm"))
  local function refused(path, opts, ...)
    local err = build_fails(1, 1, "import \"" .. path .. "\"\n" .. machine(""), opts or { base_dir = dir }, ...)
    lu.assertNotStrContains(err, "root:")
    lu.assertNotStrContains(err, "secret first line")
    return err
  end
  refused("/etc/passwd", nil, "import /etc/passwd: an absolute path is not imported")
  refused("/dev/zero", nil, "import /dev/zero: an absolute path is not imported")
  refused("../../../../../../etc/passwd", nil, "only .stm files are imported")
  refused("notes.txt", nil, "import notes.txt: only .stm files are imported")
  refused("../" .. lib:match("[^/]+$") .. "/shared.stm", nil, "the path leads out of the import directories")
  refused("sub.stm", nil, "import sub.stm: not a readable file")
  refused("big.stm", { base_dir = dir, max_import_bytes = 1000 }, "import big.stm: the file is larger than 1000 bytes")
  refused("none.stm", nil, "import not found: none.stm")
  -- inside: the directory itself, a listed import path
  local uses = function(f) return machine("  use " .. f .. " as C\n  from A to C on Go\n  from A to B on Stop") end
  lu.assertNotNil(stm.to_chart("import \"ok.stm\"\n" .. uses("F"), { base_dir = dir }))
  lu.assertNotNil(stm.to_chart("import \"shared.stm\"\n" .. uses("S"), { base_dir = dir, import_paths = { lib } }))
  lu.assertErrorMsgContains("opts.import_paths must be a table", stm.to_chart, "x", { base_dir = dir,
                            import_paths = "x" })
  lu.assertErrorMsgContains("opts.max_import_bytes must be an integer", stm.to_chart, "x",
                            { base_dir = dir, max_import_bytes = 0 })
  os.execute("rm -rf " .. helper.shell_quote(dir) .. " " .. helper.shell_quote(lib))
end

function TestStmFragments:test_errors_in_an_imported_file_name_it()
  local dir = files {
    ["bad.stm"] = "fragment F {\n  initial A\n  state A { @ }\n}\n",
    ["refused.stm"] = "fragment G {\n  initial A\n  state A {}\n  from A to A on error\n  final B success\n  from A to B on Go\n}\n",
  }
  local main = "import \"bad.stm\"\n" .. machine("  use F as C\n  from A to C on Go")
  local ok, err = pcall(stm.to_chart, main, { base_dir = dir })
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "stm: " .. dir .. "/bad.stm: line 3, column 13: unexpected character '@'")
  main = "import \"refused.stm\"\n" .. machine("  use G as C\n  from A to C on Go")
  ok, err = pcall(stm.to_chart, main, { base_dir = dir })
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "stm: " .. dir .. "/refused.stm: line 4, column 3: `on error` is not supported")
  build_fails(1, 1, "import \"none.stm\"\n" .. machine(""), { base_dir = dir }, "import not found: none.stm")
  lu.assertErrorMsgContains("opts.base_dir must be a string, got integer", stm.to_chart, "x", { base_dir = 1 })
  lu.assertErrorMsgContains("opts.base_dir must be a non-empty string", stm.to_chart, "x", { base_dir = "" })
  os.execute("rm -rf " .. helper.shell_quote(dir))
end
