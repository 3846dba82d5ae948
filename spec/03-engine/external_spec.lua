-- spec/03-engine/external_spec.lua - external outbox entries (an emit with
-- no target) reach the application's on_external and nothing else: an
-- engine without on_external (the CLI's, a misconfigured worker) leaves them
-- pending, says so once in its log, and still delivers the entries that have
-- a target; a failing on_external is retried with a growing, jittered wait
-- per entry, each failure logged, and given up after max_attempts.
local lu = require "luaunit"
local helper = require "helpers"
local engine_mod = require "mongostore.engine"
local cli = require "fixtures.cli.run"

local charge = require "fixtures.cli.external_chart"
local chart = require "mongostore.chart"

-- Pay emits an external Charge and a Note to a second execution.
local both = chart.define{
  id = "ext_both", initial = "Cart",
  states = {
    { "Cart" },
    { "Paid", on_enter = function(context, _, act)
        act.emit(nil, "Charge", { amount = 5 })
        act.emit(context.peer, "Note", {})
      end },
  },
  transitions = { { from = "Cart", to = "Paid", on = "Pay" } },
}
local peer = chart.define{
  id = "ext_peer", initial = "Idle",
  states = { { "Idle" }, { "Noted" } },
  transitions = { { from = "Idle", to = "Noted", on = "Note" } },
}

local function new_engine(store, opts)
  opts = opts or {}
  local logs = {}
  local e = engine_mod.new{ store = store, charts = { charge, both, peer }, lease = 5,
                            on_external = opts.on_external, now = opts.now, max_attempts = opts.max_attempts,
                            batch_delivery = opts.batch_delivery,
                            log = function(msg) logs[#logs + 1] = msg end }
  e.spec_logs = logs
  return e
end

local function drain(e)
  for _ = 1, 50 do
    if e:step() == 0 then return end
  end
  error("still working after 50 passes")
end

local function externals_pending(store)
  local n = 0
  for _, entry in ipairs(assert(store:pending_outbox())) do
    if entry.target_id == nil then n = n + 1 end
  end
  return n
end

local function count_matching(list, pattern)
  local n = 0
  for _, s in ipairs(list) do
    if s:find(pattern) then n = n + 1 end
  end
  return n
end

TestExternal = {}

function TestExternal:setUp()
  self.store, self.db = helper.connect()
end

function TestExternal:tearDown()
  self.store:close()
end

function TestExternal:test_an_engine_without_on_external_leaves_them_pending_and_says_so_once()
  for _, batched in ipairs { true, false } do
    local bare = new_engine(self.store, { batch_delivery = batched })
    local id = "c-" .. tostring(batched)
    assert(bare:start("cli_external", { id = id }))
    assert(bare:send(id, { kind = "Pay" }))
    drain(bare)
    drain(bare)
    lu.assertEquals(externals_pending(self.store), 1, "the external entry is still pending")
    lu.assertEquals(count_matching(bare.spec_logs, "no on_external"), 1, table.concat(bare.spec_logs, "\n"))

    local seen = {}
    local app = new_engine(self.store, { on_external = function(entry) seen[#seen + 1] = entry end })
    drain(app)
    drain(bare)
    lu.assertEquals(#seen, 1)
    lu.assertEquals(seen[1].event.kind, "Charge")
    lu.assertEquals(seen[1].source_id, id)
    lu.assertEquals(externals_pending(self.store), 0)
  end
end

function TestExternal:test_targeted_entries_of_the_same_document_still_go()
  local bare = new_engine(self.store)
  assert(bare:start("ext_peer", { id = "p-1" }))
  assert(bare:start("ext_both", { id = "b-1", context = { peer = "p-1" } }))
  assert(bare:send("b-1", { kind = "Pay" }))
  drain(bare)
  lu.assertEquals(assert(self.store:load("p-1")).active_path, "Noted")
  local pending = assert(self.store:pending_outbox())
  lu.assertEquals(#pending, 1)
  lu.assertNil(pending[1].target_id)
  lu.assertEquals(pending[1].event.kind, "Charge")
end

function TestExternal:test_the_cli_recover_does_not_consume_them()
  local e = new_engine(self.store)
  assert(e:start("cli_external", { id = "r-1" }))
  assert(e:send("r-1", { kind = "Pay" }))
  local r = cli.run(cli.concat(cli.base(self.db, { "--charts", "fixtures.cli.external_chart" }), { "recover" }))
  lu.assertEquals(r.code, 0, r.err .. r.out)
  lu.assertStrContains(r.out, "recover: 0 items handled")
  lu.assertEquals(externals_pending(self.store), 1)
  local seen = 0
  drain(new_engine(self.store, { on_external = function() seen = seen + 1 end }))
  lu.assertEquals(seen, 1)
end

function TestExternal:test_a_failing_on_external_backs_off_per_entry_and_logs_each_failure()
  local clock = 1000
  local calls = 0
  local fail = true
  local e = new_engine(self.store, { now = function() return clock end, on_external = function()
    calls = calls + 1
    if fail then error("card processor down") end
  end })
  assert(e:start("cli_external", { id = "f-1" }))
  assert(e:send("f-1", { kind = "Pay" }))
  e:step()
  lu.assertEquals(calls, 1)
  for _ = 1, 5 do e:step() end
  lu.assertEquals(calls, 1, "no new try before the wait is over")
  lu.assertEquals(count_matching(e.spec_logs, "card processor down"), 1)
  local waits = {}
  for try = 2, 6 do
    clock = clock + 61 -- past the longest wait
    e:step()
    lu.assertEquals(calls, try)
    local last = e.spec_logs[#e.spec_logs]
    lu.assertStrContains(last, "card processor down")
    lu.assertStrContains(last, "try " .. try)
    waits[#waits + 1] = tonumber(last:match("next in ([%d.]+)s"))
  end
  -- 0.5 s doubled per failure (capped at 60), each drawn in [half, all]
  for k, w in ipairs(waits) do
    local full = math.min(60, 0.5 * 2 ^ k)
    lu.assertTrue(w >= full / 2 - 0.05 and w <= full + 0.05, ("wait %d was %s, full %s"):format(k + 1, w, full))
  end
  fail = false
  clock = clock + 61
  e:step()
  lu.assertEquals(calls, 7)
  lu.assertEquals(externals_pending(self.store), 0)
end

function TestExternal:test_given_up_after_max_attempts()
  local clock = 0
  local e = new_engine(self.store, { now = function() return clock end, max_attempts = 3,
                                     on_external = function() error("no") end })
  assert(e:start("cli_external", { id = "g-1" }))
  assert(e:send("g-1", { kind = "Pay" }))
  for _ = 1, 3 do
    clock = clock + 61
    e:step()
  end
  lu.assertEquals(externals_pending(self.store), 0)
  lu.assertEquals(count_matching(e.spec_logs, "given up"), 1)
end
