-- spec/01-unit/chart_inputs_spec.lua - chart.define's inputs: a wrong
-- declaration raises at define time, and chart.check_inputs takes only the
-- declared context fields, each of its type, with the required ones given.
local lu = require "luaunit"
local chart = require "mongostore.chart"
local core = require "mongostore.core"

local function def(inputs)
  return { id = "in", initial = "A", states = { { "A" }, { "B", final = true } },
           transitions = { { from = "A", to = "B", on = "Go" } }, inputs = inputs }
end

local function c() return chart.define(def{
  total = "number", note = "string?", tries = { type = "integer", min = 0, max = 5, optional = true },
  flag = "boolean?", items = { type = "array", max_length = 2, optional = true }, address = "object?",
  code = { type = "string", max_length = 4, optional = true },
}) end

TestChartInputs = {}

function TestChartInputs:test_bad_declarations_raise()
  for _, case in ipairs {
    { 5, "inputs: must be a table" },
    { { [1] = "number" }, "inputs: names must be non-empty strings" },
    { { x = "numbr" }, "inputs.x: 'numbr' is not a type" },
    { { x = "number??" }, "inputs.x: 'number??' is not a type" },
    { { x = 7 }, "inputs.x: must be a type name" },
    { { x = { type = "number", minimum = 1 } }, "inputs.x: unknown key 'minimum'" },
    { { x = { type = "number", min = 5, max = 1 } }, "inputs.x: min is above max" },
    { { x = { type = "string", min = 1 } }, "inputs.x: min and max are for numbers" },
    { { x = { type = "number", max_length = 1 } }, "inputs.x: max_length is for strings and arrays" },
    { { x = { type = "number", min = 0 / 0 } }, "inputs.x: min must be a finite number" },
    { { x = { type = "number", optional = "yes" } }, "inputs.x: optional must be a boolean" },
  } do
    local ok, err = pcall(chart.define, def(case[1]))
    lu.assertFalse(ok, case[2])
    lu.assertStrContains(tostring(err), "chart in: " .. case[2])
  end
end

function TestChartInputs:test_declared_fields_of_their_types_pass()
  local x = c()
  lu.assertTrue(chart.check_inputs(x, { total = 3 }))
  lu.assertTrue(chart.check_inputs(x, { total = 2.5, note = "hi", tries = 5, flag = false,
                                        items = core.array{ 1, 2 }, address = { city = "x" }, code = "abcd" }))
  lu.assertEquals(chart.inputs(x).tries, { type = "integer", min = 0, max = 5, optional = true })
end

function TestChartInputs:test_anything_else_is_refused()
  local x = c()
  for _, case in ipairs {
    { {}, "opts.context.total is required by chart in" },
    { { total = 1, attempts = -100 }, "opts.context.attempts is not an input of chart in" },
    { { total = "abc" }, "opts.context.total must be a number, got string" },
    { { total = 0 / 0 }, "opts.context.total must be a number" },
    { { total = math.huge }, "opts.context.total must be a number" },
    { { total = 1, tries = 1.5 }, "opts.context.tries must be an integer, got 1.5" },
    { { total = 1, tries = -1 }, "opts.context.tries must be at least 0" },
    { { total = 1, tries = 6 }, "opts.context.tries must be at most 5" },
    { { total = 1, note = 5 }, "opts.context.note must be a string, got 5" },
    { { total = 1, flag = "true" }, "opts.context.flag must be a boolean" },
    { { total = 1, items = { a = 1 } }, "opts.context.items must be an array, got an object" },
    { { total = 1, items = core.array{ 1, 2, 3 } }, "opts.context.items must be at most 2 items long" },
    { { total = 1, address = core.array{} }, "opts.context.address must be an object, got an array" },
    { { total = 1, code = "abcde" }, "opts.context.code must be at most 4 bytes long" },
    { { total = 1, [5] = 1 }, "opts.context keys must be strings" },
  } do
    local ok, err = chart.check_inputs(x, case[1])
    lu.assertNil(ok, case[2])
    lu.assertStrContains(err, case[2])
  end
end

function TestChartInputs:test_a_chart_without_inputs_takes_any_context()
  local x = chart.define(def(nil))
  lu.assertTrue(chart.check_inputs(x, { anything = { at = "all" } }))
  lu.assertNil(chart.inputs(x))
  lu.assertErrorMsgContains("chart.check_inputs: c must be a chart", chart.check_inputs, {}, {})
end
