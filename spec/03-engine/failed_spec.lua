-- spec/03-engine/failed_spec.lua - outbox entries given up on are kept, not
-- dropped: with no on_dead_letter a dead letter (an on_external that keeps
-- failing, a target that never appears) moves to its source's
-- outbox_failed with its error and tries; store:failed_outbox and
-- `mongostore outbox --failed` list it, `--redeliver SOURCE:SEQ` puts it
-- back, and a worker then delivers it once. An on_dead_letter still
-- receives it instead.
local lu = require "luaunit"
local helper = require "helpers"
local engine_mod = require "mongostore.engine"
local cli = require "fixtures.cli.run"

local charge = require "fixtures.cli.external_chart"
local chart = require "mongostore.chart"

local lost = chart.define{
  id = "failed_lost", initial = "A",
  states = { { "A" }, { "B", on_enter = function(_, _, act) act.emit("nobody-here", "Hello", {}) end } },
  transitions = { { from = "A", to = "B", on = "Go" } },
}

local function new_engine(store, opts)
  opts = opts or {}
  local logs = {}
  local e = engine_mod.new{ store = store, charts = { charge, lost }, lease = 5, now = opts.now,
                            max_attempts = opts.max_attempts or 2, on_external = opts.on_external,
                            on_dead_letter = opts.on_dead_letter,
                            log = function(msg) logs[#logs + 1] = msg end }
  e.spec_logs = logs
  return e
end

TestFailed = {}

function TestFailed:setUp()
  self.store, self.db = helper.connect()
end

function TestFailed:tearDown()
  self.store:close()
end

local function give_up(e, clock)
  for _ = 1, 4 do
    clock.t = clock.t + 61
    e:step()
  end
end

function TestFailed:test_a_given_up_external_entry_is_kept_listed_and_redelivered_by_hand()
  local clock = { t = 1000 }
  local e = new_engine(self.store, { now = function() return clock.t end,
                                     on_external = function() error("gateway down") end })
  assert(e:start("cli_external", { id = "x-1" }))
  assert(e:send("x-1", { kind = "Pay", id = "pay-1" }))
  give_up(e, clock)
  lu.assertEquals(#assert(self.store:pending_outbox()), 0)
  local failed = assert(self.store:failed_outbox())
  lu.assertEquals(#failed, 1)
  local f = failed[1]
  lu.assertEquals(f.source_id, "x-1")
  lu.assertNil(f.target_id)
  lu.assertEquals(f.event.kind, "Charge")
  lu.assertStrContains(f.error, "gateway down")
  lu.assertEquals(f.attempts, 2)

  local base = cli.base(self.db)
  local r = cli.run(cli.concat(base, { "outbox", "--failed" }))
  lu.assertEquals(r.code, 0, r.err)
  lu.assertStrContains(r.out, "outbox: 1 failed entry")
  lu.assertStrContains(r.out, "x-1:" .. f.seq)
  lu.assertStrContains(r.out, "gateway down")
  r = cli.run(cli.concat(base, { "outbox", "--failed", "--json" }))
  lu.assertEquals(r.code, 0, r.err)
  lu.assertStrContains(r.out, '"kind":"Charge"')
  r = cli.run(cli.concat(base, { "outbox", "--redeliver", "x-1:999999" }))
  lu.assertEquals(r.code, 1, r.out)
  lu.assertStrContains(r.err, "no failed entry")
  r = cli.run(cli.concat(base, { "outbox", "--redeliver", "nonsense" }))
  lu.assertEquals(r.code, 2, r.out)
  r = cli.run(cli.concat(base, { "outbox", "--redeliver", "x-1:" .. f.seq }))
  lu.assertEquals(r.code, 0, r.err)
  lu.assertEquals(#assert(self.store:failed_outbox()), 0)
  lu.assertEquals(#assert(self.store:pending_outbox()), 1)

  local got = {}
  local fixed = new_engine(self.store, { on_external = function(entry) got[#got + 1] = entry.event.id end })
  for _ = 1, 3 do fixed:step() end
  lu.assertEquals(#got, 1)
  lu.assertEquals(#assert(self.store:pending_outbox()), 0)
end

function TestFailed:test_a_target_that_never_appears_is_kept_as_failed()
  local e = new_engine(self.store)
  assert(e:start("failed_lost", { id = "l-1" }))
  assert(e:send("l-1", { kind = "Go" }))
  for _ = 1, 4 do e:step() end
  local failed = assert(self.store:failed_outbox())
  lu.assertEquals(#failed, 1)
  lu.assertEquals(failed[1].target_id, "nobody-here")
  lu.assertEquals(failed[1].event.kind, "Hello")
end

function TestFailed:test_an_on_dead_letter_receives_it_instead()
  local dead = {}
  local e = new_engine(self.store, { on_dead_letter = function(entry, err) dead[#dead + 1] = { entry, err } end })
  assert(e:start("failed_lost", { id = "d-1" }))
  assert(e:send("d-1", { kind = "Go" }))
  for _ = 1, 4 do e:step() end
  lu.assertEquals(#dead, 1)
  lu.assertEquals(#assert(self.store:failed_outbox()), 0)
  lu.assertEquals(#assert(self.store:pending_outbox()), 0)
end
