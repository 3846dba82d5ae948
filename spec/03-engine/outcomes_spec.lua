-- spec/03-engine/outcomes_spec.lua - every delivery says what it did: send,
-- send_many, start and the control calls return a third value (the
-- DeliveryResult) with the outcome (transition, ignored, held, failed,
-- finished, duplicate), the status and active path after the commit and the
-- error of a failure; the trace tells an ignored event from a
-- self-transition; the engine log names the hook or timer an execution
-- failed in; start checks the timeout context values it is given; the CLI's
-- send exits 1 when the event left the execution FAILED.
local lu = require "luaunit"
local helper = require "helpers"
local engine_mod = require "mongostore.engine"
local chart = require "mongostore.chart"
local cli = require "fixtures.cli.run"

local shop = chart.define{
  id = "outcome_shop", initial = "Cart",
  states = {
    { "Cart", defer = { "Ship" } },
    { "Paid", timeout = { context = "pay_window" } },
    { "Shipped" },
    { "Done", final = "success" },
  },
  transitions = {
    { from = "Cart", to = "Cart", on = "Touch" },
    { from = "Cart", to = "Paid", on = "Pay", where = function(data, context)
        return (data.amount or 0) >= (context.total or 0)
      end },
    { from = "Cart", to = "Done", on = "Boom", action = function() error("the card processor said no") end },
    { from = "Paid", to = "Shipped", on = "Ship" },
    { from = "Shipped", to = "Done", on = "Finish" },
  },
}

TestOutcomes = {}

function TestOutcomes:setUp()
  self.store, self.db = helper.connect()
  self.logs = {}
  self.engine = engine_mod.new{ store = self.store, charts = { shop }, trace = true,
                                log = function(msg) self.logs[#self.logs + 1] = msg end }
end

function TestOutcomes:tearDown()
  self.store:close()
end

function TestOutcomes:version(id)
  return assert(self.store:load(id)).version
end

function TestOutcomes:last_step(id)
  local steps = assert(self.store:read_trace(id))
  return steps[#steps]
end

function TestOutcomes:test_start_and_send_say_what_the_event_did()
  local id, created, r = self.engine:start("outcome_shop", { id = "o-1", context = { total = 10, pay_window = 60 } })
  lu.assertEquals(id, "o-1")
  lu.assertTrue(created)
  lu.assertEquals(r, { outcome = "transition", status = "RUNNING", active_path = "Cart" })
  local _, again, r2 = self.engine:start("outcome_shop", { id = "o-1" })
  lu.assertFalse(again)
  lu.assertEquals(r2.outcome, "duplicate")
  lu.assertEquals(r2.active_path, "Cart")

  -- a self-transition is a transition
  local ok, how, t = self.engine:send("o-1", { kind = "Touch" })
  lu.assertTrue(ok)
  lu.assertEquals(how, "applied")
  lu.assertEquals(t.outcome, "transition")
  lu.assertEquals(self:last_step("o-1").outcome, "transition")

  -- nothing takes it: a guard that says no, a kind no transition has
  for _, ev in ipairs { { kind = "Pay", data = { amount = 3 } }, { kind = "Paay" } } do
    local v = self:version("o-1")
    ok, how, t = self.engine:send("o-1", ev)
    lu.assertTrue(ok)
    lu.assertEquals(how, "applied")
    lu.assertEquals(t, { outcome = "ignored", status = "RUNNING", active_path = "Cart" }, ev.kind)
    -- committed as processed: one version and its dedupe mark, as harel does
    lu.assertEquals(self:version("o-1"), v + 1)
    local step = self:last_step("o-1")
    lu.assertEquals(step.outcome, "ignored")
    lu.assertEquals(step.event, ev.kind)
    _, how, t = self.engine:send("o-1", ev)
    lu.assertEquals(how, "duplicate")
    lu.assertEquals(t.outcome, "duplicate")
    lu.assertEquals(self:version("o-1"), v + 1)
  end

  -- deferred by the active state
  _, _, t = self.engine:send("o-1", { kind = "Ship" })
  lu.assertEquals(t, { outcome = "held", status = "RUNNING", active_path = "Cart" })
  _, _, t = self.engine:send("o-1", { kind = "Pay", data = { amount = 10 } })
  lu.assertEquals(t.outcome, "transition")
  lu.assertEquals(t.active_path, "Shipped") -- the deferred Ship was taken on the way

  -- held while suspended
  _, _, t = self.engine:suspend("o-1")
  lu.assertEquals(t, { outcome = "transition", status = "SUSPENDED", active_path = "Shipped" })
  _, _, t = self.engine:send("o-1", { kind = "Finish" })
  lu.assertEquals(t.outcome, "held")
  _, _, t = self.engine:resume("o-1")
  lu.assertEquals(t, { outcome = "transition", status = "DONE", active_path = "Done" })

  -- the execution had ended
  ok, _, t = self.engine:send("o-1", { kind = "Touch" })
  lu.assertTrue(ok)
  lu.assertEquals(t, { outcome = "finished", status = "DONE", active_path = "Done" })
  -- a control call on it is refused and writes nothing
  local v = assert(self.store:load("o-1")).version
  local msg, code
  ok, msg, code = self.engine:cancel("o-1")
  lu.assertNil(ok)
  lu.assertEquals(code, "finished")
  lu.assertEquals(msg, "cancel o-1: the execution is finished (DONE)")
  lu.assertEquals(assert(self.store:load("o-1")).version, v)
end

function TestOutcomes:test_a_failure_is_reported_with_its_error_and_where_it_happened()
  assert(self.engine:start("outcome_shop", { id = "f-1" }))
  local ok, how, r = self.engine:send("f-1", { kind = "Boom" })
  local _
  lu.assertTrue(ok)
  lu.assertEquals(how, "applied")
  lu.assertEquals(r.outcome, "failed")
  lu.assertEquals(r.status, "FAILED")
  lu.assertStrContains(r.error, "the card processor said no")
  local said = table.concat(self.logs, "\n")
  lu.assertStrContains(said, "execution f-1 failed on Boom in ")
  lu.assertNotStrContains(said, " in nil")
  lu.assertStrContains(said, "(action)")
  _, _, r = self.engine:send("f-1", { kind = "Touch" })
  lu.assertEquals(r.outcome, "finished")
  lu.assertEquals(r.status, "FAILED")
  lu.assertStrContains(r.error, "the card processor said no")

  -- a timeout whose context key is missing when the state is entered: the log names the timer
  assert(self.engine:start("outcome_shop", { id = "f-2", context = { total = 0 } }))
  _, _, r = self.engine:send("f-2", { kind = "Pay", data = { amount = 1 } })
  lu.assertEquals(r.outcome, "failed")
  lu.assertStrContains(r.error, "context.pay_window")
  lu.assertStrContains(self.logs[#self.logs], "failed on Pay in timeout of Paid")
end

function TestOutcomes:test_send_many_items_carry_the_result()
  assert(self.engine:start("outcome_shop", { id = "m-1", context = { total = 5, pay_window = 60 } }))
  assert(self.engine:start("outcome_shop", { id = "m-2" }))
  local got = self.engine:send_many{
    { "m-1", { kind = "Pay", data = { amount = 1 }, id = "e1" } },
    { "m-1", { kind = "Pay", data = { amount = 5 }, id = "e2" } },
    { "m-2", { kind = "Boom", id = "e3" } },
    { "m-1", { kind = "Pay", id = "e1" } },
  }
  lu.assertEquals(got[1].result, { outcome = "ignored", status = "RUNNING", active_path = "Cart" })
  lu.assertEquals(got[2].result, { outcome = "transition", status = "RUNNING", active_path = "Paid" })
  lu.assertEquals(got[3].result.outcome, "failed")
  lu.assertEquals(got[3].result.status, "FAILED")
  lu.assertEquals(got[4].how, "duplicate")
  lu.assertEquals(got[4].result.outcome, "duplicate")
end

function TestOutcomes:test_start_checks_the_timeout_context_it_is_given()
  for _, bad in ipairs { "soon", -1, true, { 1 } } do
    local id, err, code = self.engine:start("outcome_shop", { id = "t-1", context = { pay_window = bad } })
    lu.assertNil(id)
    lu.assertEquals(code, "invalid")
    lu.assertStrContains(err, "context.pay_window")
    lu.assertStrContains(err, "timeout of Paid")
    lu.assertNil(self.store:load("t-1"), "nothing written")
  end
  lu.assertEquals((self.engine:start("outcome_shop", { id = "t-2", context = { pay_window = 30 } })), "t-2")
end

function TestOutcomes:test_the_cli_send_exits_1_when_the_execution_failed()
  assert(self.engine:start("outcome_shop", { id = "c-1" }))
  local tmp = os.tmpname()
  local charts_file = tmp .. ".lua" -- the CLI runs only .lua files as code
  os.remove(tmp)
  local f = assert(io.open(charts_file, "w"))
  f:write([[
local chart = require "mongostore.chart"
return { chart.define{ id = "outcome_shop", initial = "Cart",
  states = { { "Cart" }, { "Done", final = "success" } },
  transitions = { { from = "Cart", to = "Done", on = "Boom", action = function() error("no funds") end },
                  { from = "Cart", to = "Cart", on = "Touch" } },
  external = { "Boom", "Touch" } } }
]])
  f:close()
  local function run(argv)
    return cli.run(cli.concat(cli.base(self.db, { "--charts", charts_file }), argv))
  end
  local r = run({ "send", "c-1", "Nope", "--any-kind" })
  lu.assertEquals(r.code, 0, r.err)
  lu.assertStrContains(r.out, ": applied (ignored); now RUNNING at Cart")
  r = run({ "send", "c-1", "Boom" })
  os.remove(charts_file)
  lu.assertEquals(r.code, 1, r.out .. r.err)
  lu.assertStrContains(r.out, "applied (failed); now FAILED")
  lu.assertStrContains(r.err, "no funds")
end
