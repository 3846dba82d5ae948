-- spec/03-engine/external_loop_spec.lua - external outbox entries delivered
-- by an event loop of the application's (engine:claim_external,
-- renew_external, settle_external): a claim takes only target-less entries,
-- a renewed claim is not taken by a second engine, a failed try comes again
-- only after its jittered wait and is given up after max_attempts, a
-- crashed holder's entries come back after the lease, and two processes
-- claiming at once deliver each entry once. Also the engine's own
-- on_external: it stops at the pass's deadline and leaves the rest claimable.
local lu = require "luaunit"
local helper = require "helpers"
local ms = require "mongostore"
local chart = require "mongostore.chart"
local engine_mod = require "mongostore.engine"

local charge = require "fixtures.cli.external_chart"

-- Pay emits an external Charge and a Note to a second execution.
local both = chart.define{
  id = "xl_both", initial = "Cart",
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
  id = "xl_peer", initial = "Idle",
  states = { { "Idle" }, { "Noted" } },
  transitions = { { from = "Idle", to = "Noted", on = "Note" } },
}

local function new_engine(store, opts)
  opts = opts or {}
  local logs = {}
  local e = engine_mod.new{ store = store, charts = { charge, both, peer }, lease = opts.lease or 5,
                            on_external = opts.on_external, max_attempts = opts.max_attempts,
                            on_dead_letter = opts.on_dead_letter,
                            log = function(msg) logs[#logs + 1] = msg end }
  e.spec_logs = logs
  return e
end

local function externals_pending(store)
  local n = 0
  for _, entry in ipairs(assert(store:pending_outbox())) do
    if entry.target_id == nil then n = n + 1 end
  end
  return n
end

-- n executions of cli_external, each with one external Charge pending.
local function charges(e, n, tag)
  for i = 1, n do
    local id = (tag or "x") .. "-" .. i
    assert(e:start("cli_external", { id = id, context = { amount = i } }))
    assert(e:send(id, { kind = "Pay" }))
  end
end

TestExternalLoop = {}

function TestExternalLoop:setUp()
  self.store, self.db = helper.connect()
end

function TestExternalLoop:tearDown()
  self.store:close()
end

function TestExternalLoop:test_claim_takes_only_external_entries_and_settle_acks_them()
  local e = new_engine(self.store)
  assert(e:start("xl_peer", { id = "p-1" }))
  assert(e:start("xl_both", { id = "b-1", context = { peer = "p-1" } }))
  assert(e:send("b-1", { kind = "Pay" }))
  local got = assert(e:claim_external(10))
  lu.assertEquals(#got, 1)
  local x = got[1]
  lu.assertEquals(x.event.kind, "Charge")
  lu.assertEquals(x.event.data, { amount = 5 })
  lu.assertNil(x.target_id)
  lu.assertEquals(x.source_id, "b-1")
  lu.assertEquals(x.claim_size, 1)
  lu.assertIsString(x.token)
  lu.assertTrue(x.lease_until > ms.now())
  lu.assertEquals(#assert(e:claim_external(10)), 0, "held: a second claim gets nothing")
  lu.assertEquals(assert(e:settle_external(x, true)), { outcome = "delivered" })
  lu.assertEquals(externals_pending(self.store), 0)
  -- the settle gave the claim back: the targeted Note goes at once
  e:step()
  lu.assertEquals(assert(self.store:load("p-1")).active_path, "Noted")
  lu.assertEquals(#assert(self.store:pending_outbox()), 0)
end

function TestExternalLoop:test_a_renewed_claim_is_not_taken_by_a_second_engine()
  local a = new_engine(self.store, { lease = 1 })
  local b = new_engine(self.store, { lease = 1 })
  charges(a, 2)
  local got = assert(a:claim_external(10))
  lu.assertEquals(#got, 2)
  local first_until = got[1].lease_until
  for _ = 1, 3 do
    ms.sleep(0.5)
    local renewed, lost = assert(a:renew_external(got))
    lu.assertEquals(renewed, 2)
    lu.assertEquals(#lost, 0)
    lu.assertEquals(#assert(b:claim_external(10)), 0, "b takes nothing while a renews")
  end
  lu.assertTrue(got[1].lease_until > first_until + 1)
  for _, x in ipairs(got) do lu.assertEquals(assert(a:settle_external(x, true)).outcome, "delivered") end
  lu.assertEquals(#assert(b:claim_external(10)), 0)
  lu.assertEquals(externals_pending(self.store), 0)
end

function TestExternalLoop:test_a_claim_that_ran_out_is_lost_to_the_renewal()
  local a = new_engine(self.store, { lease = 0.3 })
  local b = new_engine(self.store, { lease = 5 })
  charges(a, 1)
  local got = assert(a:claim_external(1))
  ms.sleep(0.5)
  local taken = assert(b:claim_external(1))
  lu.assertEquals(#taken, 1)
  local renewed, lost = assert(a:renew_external(got))
  lu.assertEquals(renewed, 0)
  lu.assertEquals(#lost, 1)
  lu.assertEquals(lost[1].seq, got[1].seq)
  assert(b:settle_external(taken[1], true))
  lu.assertEquals(externals_pending(self.store), 0)
end

function TestExternalLoop:test_a_failed_try_waits_out_a_jittered_backoff_on_the_entry()
  local e = new_engine(self.store)
  charges(e, 1)
  local full = 0.5
  for try = 1, 3 do
    local got = assert(e:claim_external(5))
    lu.assertEquals(#got, 1, "try " .. try)
    lu.assertEquals(got[1].tries, try > 1 and try - 1 or nil)
    local r = assert(e:settle_external(got[1], false, "gateway down"))
    lu.assertEquals(r.outcome, "retry")
    lu.assertEquals(r.tries, try)
    lu.assertTrue(r.wait >= full / 2 and r.wait <= full, ("wait %s for full %s"):format(r.wait, full))
    lu.assertStrContains(e.spec_logs[#e.spec_logs], "gateway down")
    lu.assertStrContains(e.spec_logs[#e.spec_logs], "try " .. try)
    -- given back, but not claimable before its wait is over
    lu.assertEquals(#assert(e:claim_external(5)), 0)
    lu.assertEquals(externals_pending(self.store), 1)
    ms.sleep(r.retry_at - ms.now() + 0.05)
    full = full * 2
  end
  local got = assert(e:claim_external(5))
  lu.assertEquals(#got, 1)
  lu.assertEquals(assert(e:settle_external(got[1], true)).outcome, "delivered")
  lu.assertEquals(externals_pending(self.store), 0)
  lu.assertEquals(#e.spec_logs, 3)
end

function TestExternalLoop:test_given_up_after_max_attempts()
  local dead = {}
  local e = new_engine(self.store, { max_attempts = 2, on_dead_letter = function(entry, err)
    dead[#dead + 1] = { entry.event.kind, err }
  end })
  charges(e, 1)
  local got = assert(e:claim_external(5))
  local r = assert(e:settle_external(got[1], false, "no"))
  lu.assertEquals(r.outcome, "retry")
  ms.sleep(r.retry_at - ms.now() + 0.05)
  got = assert(e:claim_external(5))
  lu.assertEquals(assert(e:settle_external(got[1], nil, "still no")).outcome, "given_up")
  lu.assertEquals(dead, { { "Charge", "still no" } })
  lu.assertEquals(externals_pending(self.store), 0)
end

function TestExternalLoop:test_given_up_with_no_on_dead_letter_it_is_kept_as_failed()
  local e = new_engine(self.store, { max_attempts = 1 })
  charges(e, 1)
  local got = assert(e:claim_external(5))
  local r = assert(e:settle_external(got[1], nil, "card declined"))
  lu.assertEquals(r.outcome, "given_up")
  lu.assertEquals(externals_pending(self.store), 0)
  local failed = assert(self.store:failed_outbox())
  lu.assertEquals(#failed, 1)
  lu.assertEquals(failed[1].event.kind, "Charge")
  lu.assertStrContains(failed[1].error, "card declined")
  lu.assertTrue(self.store:redeliver_failed(failed[1].source_id, failed[1].seq))
  lu.assertEquals(externals_pending(self.store), 1)
end

function TestExternalLoop:test_the_claim_is_given_back_with_the_last_entry_of_a_document()
  local e = new_engine(self.store)
  local twice = chart.define{
    id = "xl_twice", initial = "A",
    states = { { "A" }, { "B", on_enter = function(_, _, act)
      act.emit(nil, "Charge", { n = 1 })
      act.emit(nil, "Charge", { n = 2 })
    end } },
    transitions = { { from = "A", to = "B", on = "Go" } },
  }
  e:register(twice)
  assert(e:start("xl_twice", { id = "t-1" }))
  assert(e:send("t-1", { kind = "Go" }))
  local got = assert(e:claim_external(5))
  lu.assertEquals(#got, 2)
  lu.assertEquals(got[1].claim_size, 2)
  assert(e:settle_external(got[1], true))
  -- the other entry is still held: nobody else gets it
  local other = new_engine(self.store)
  lu.assertEquals(#assert(other:claim_external(5)), 0)
  local r = assert(e:settle_external(got[2], false, "later"))
  ms.sleep(r.retry_at - ms.now() + 0.05)
  local again = assert(other:claim_external(5))
  lu.assertEquals(#again, 1)
  lu.assertEquals(again[1].event.data.n, 2)
  assert(other:settle_external(again[1], true))
  lu.assertEquals(externals_pending(self.store), 0)
end

function TestExternalLoop:test_bad_arguments_raise_and_write_nothing()
  local e = new_engine(self.store)
  charges(e, 1)
  lu.assertErrorMsgContains("limit must be an integer, got string", function() e:claim_external("3") end)
  lu.assertErrorMsgContains("entry must be a claimed entry", function() e:settle_external(nil, true) end)
  lu.assertErrorMsgContains("must come from claim_external", function() e:settle_external({ seq = 1 }, true) end)
  lu.assertErrorMsgContains("unknown option", function()
    e:settle_external({ seq = 1, source_id = "x-1", token = "t" }, true, nil, { relase = true })
  end)
  lu.assertErrorMsgContains("entries must be a table", function() e:renew_external("x") end)
  local ok, _, code = e:claim_external(0)
  lu.assertNil(ok)
  lu.assertEquals(code, "invalid")
  lu.assertErrorMsgContains("exclude each other", function()
    self.store:pending_outbox{ limit = 1, lease = 1, targeted = true, external = true }
  end)
  lu.assertEquals(externals_pending(self.store), 1)
end

-- A process that claims external entries under a 1 s lease and is killed
-- (SIGKILL, by itself) before it settles any.
local CRASHER = [[
  local ms = require "mongostore"
  local store = assert(ms.connect(%q, { db = %q, wait = 10 }))
  local e = require("mongostore.engine").new{ store = store, lease = 1, log = function() end }
  local got = assert(e:claim_external(100))
  io.stdout:write("CLAIMED ", #got, "\n")
  io.stdout:flush()
  local pid = assert(io.open("/proc/self/stat")):read("a"):match("^(%%d+)")
  os.execute("kill -9 " .. pid)
  ms.sleep(30)
]]

function TestExternalLoop:test_a_crashed_holders_entries_come_back_after_the_lease()
  local e = new_engine(self.store)
  charges(e, 3)
  local out = helper.spawn(CRASHER:format(helper.uri(), self.db)).wait()
  lu.assertEquals(tonumber(out:match("CLAIMED (%d+)")), 3, out)
  local t0 = ms.now()
  local got = assert(e:claim_external(10))
  if #got == 0 then
    repeat
      ms.sleep(0.1)
      got = assert(e:claim_external(10))
    until #got > 0 or ms.now() - t0 > 10
  end
  lu.assertEquals(#got, 3)
  for _, x in ipairs(got) do assert(e:settle_external(x, true)) end
  lu.assertEquals(externals_pending(self.store), 0)
end

-- A process that claims and settles (ok) external entries until none has
-- come for a second, printing each delivered seq.
local DELIVERER = [[
  local ms = require "mongostore"
  local store = assert(ms.connect(%q, { db = %q, wait = 10 }))
  local e = require("mongostore.engine").new{ store = store, lease = 5, log = function() end }
  local idle = ms.now()
  while ms.now() - idle < 1 do
    local got = assert(e:claim_external(3))
    for _, x in ipairs(got) do
      io.stdout:write("GOT ", x.seq, "\n")
      assert(e:settle_external(x, true))
      idle = ms.now()
    end
    if #got == 0 then ms.sleep(0.02) end
  end
]]

function TestExternalLoop:test_two_processes_claiming_at_once_deliver_each_entry_once()
  local e = new_engine(self.store)
  charges(e, 30)
  local expected = {}
  for _, x in ipairs(assert(self.store:pending_outbox())) do expected[#expected + 1] = x.seq end
  lu.assertEquals(#expected, 30)
  local p1 = helper.spawn(DELIVERER:format(helper.uri(), self.db))
  local p2 = helper.spawn(DELIVERER:format(helper.uri(), self.db))
  local seen, count = {}, 0
  for _, p in ipairs { p1, p2 } do
    local out = p.wait()
    for seq in out:gmatch("GOT (%d+)") do
      seq = tonumber(seq)
      lu.assertNil(seen[seq], "seq " .. seq .. " delivered twice")
      seen[seq] = true
      count = count + 1
    end
  end
  lu.assertEquals(count, 30)
  for _, seq in ipairs(expected) do lu.assertTrue(seen[seq], "seq " .. seq .. " never delivered") end
  lu.assertEquals(externals_pending(self.store), 0)
end

function TestExternalLoop:test_the_engines_own_on_external_stops_at_the_deadline()
  for _, batched in ipairs { true, false } do
    local store = helper.connect()
    local calls = {}
    local e = engine_mod.new{ store = store, charts = { charge }, lease = 1, batch_delivery = batched,
                              log = function() end,
                              on_external = function(entry)
                                calls[#calls + 1] = entry.seq
                                ms.sleep(0.3)
                              end }
    local producer = new_engine(store)
    charges(producer, 5, "d" .. tostring(batched))
    e:relay_outbox()
    -- each handler takes 0.3 s and none starts past half the 1 s lease
    lu.assertTrue(#calls <= 2, #calls .. " handlers ran in one pass")
    -- the rest was given back: another engine can claim it at once
    local other = new_engine(store)
    local rest = assert(other:claim_external(10))
    lu.assertEquals(#rest + #calls, 5)
    for _, x in ipairs(rest) do assert(other:settle_external(x, false, "not now", { release = true })) end
    for _ = 1, 20 do
      if externals_pending(store) == 0 then break end
      ms.sleep(0.2)
      e:relay_outbox()
    end
    lu.assertEquals(externals_pending(store), 0)
    local once = {}
    for _, seq in ipairs(calls) do
      lu.assertNil(once[seq], "seq " .. seq .. " handled twice")
      once[seq] = true
    end
    lu.assertEquals(#calls, 5)
    store:close()
  end
end
