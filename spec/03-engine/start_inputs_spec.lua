-- spec/03-engine/start_inputs_spec.lua - engine:start of a chart that
-- declares its inputs: an undeclared or mistyped context field is refused
-- with invalid and nothing is written; the README's order chart takes its
-- total and payment_timeout and nothing else (a client's attempts = -100
-- would skew its retries, payment_timeout = "abc" would fail the order).
local lu = require "luaunit"
local C = require "fixtures.charts"
local order = dofile(require("helpers").root() .. "/examples/order_chart.lua")

TestStartInputs = {}

function TestStartInputs:setUp()
  self.store, self.db = C.store()
  self.engine = C.engine(self.store, { charts = { order } })
end

function TestStartInputs:tearDown()
  if self.store then self.store:close() end
end

function TestStartInputs:test_refused_starts_write_nothing()
  local e, s = self.engine, self.store
  for i, case in ipairs {
    { { total = 3, attempts = -100 }, "start: opts.context.attempts is not an input of chart order" },
    { { total = 3, payment_timeout = "abc" }, "start: opts.context.payment_timeout must be a number" },
    { { total = -1 }, "start: opts.context.total must be at least 0" },
    { { total = 3, payment_timeout = 1e9 }, "start: opts.context.payment_timeout must be at most 86400" },
  } do
    local id = "in-" .. i
    local ok, err, code = e:start("order", { id = id, context = case[1] })
    lu.assertNil(ok, case[2])
    lu.assertEquals(code, "invalid")
    lu.assertStrContains(err, case[2])
    local exe, lerr = s:load(id)
    lu.assertNil(exe, "nothing written for " .. id)
    lu.assertNil(lerr)
  end
end

function TestStartInputs:test_declared_inputs_start()
  local e, s = self.engine, self.store
  lu.assertEquals(e:start("order", { id = "ok-1", context = { total = 30, payment_timeout = 60 } }), "ok-1")
  lu.assertEquals(C.load(s, "ok-1").context.total, 30)
  lu.assertEquals(e:start("order", { id = "ok-2" }), "ok-2")
  -- the chart's own hooks still set what they like
  lu.assertTrue(e:send("ok-1", { kind = "PlaceOrder" }))
  lu.assertEquals(C.load(s, "ok-1").context.attempts, 1)
end
