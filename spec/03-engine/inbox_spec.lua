-- spec/03-engine/inbox_spec.lua - the inbox: engine:enqueue hands an event
-- over in one insert without loading the execution, and the inbox pass
-- delivers queued events per execution, in order, in batches, the most
-- urgent executions first, under a fenced lease: a worker whose lease passed
-- to another can neither deliver nor ack, and a worker killed with kill -9
-- loses nothing. Every event is applied exactly once (trace counts).
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local rawdb = require "helpers.rawdb"
local C = require "fixtures.charts"
local engine_mod = require "mongostore.engine"
local inbox = require "mongostore.inbox"

-- tally: every Add appends its data.n to context.seen (the worker processes
-- load the same text)
local CHARTS = [[
local chart = require "mongostore.chart"
return { chart.define{
  id = "tally", initial = "Open",
  states = { { "Open" } },
  transitions = {
    { from = "Open", to = "Open", on = "Add", action = function(context, event)
        context.seen = (context.seen or "") .. tostring(event.data.n) .. ","
      end },
  },
} }
]]
local charts = assert(load(CHARTS))()

local function new_engine(store, opts)
  opts = opts or {}
  local logs = {}
  local e = engine_mod.new{ store = store, charts = charts, trace = opts.trace ~= false, lease = opts.lease or 5,
                            batch = opts.batch or 100, inbox = true,
                            log = function(msg) logs[#logs + 1] = msg end }
  e.spec_logs = logs
  return e
end

local commands, applied_once = C.commands, C.applied_once

local function seen(store, id)
  return C.load(store, id).context.seen
end

local function queued(db)
  return rawdb.count(db, "inbox")
end

-- relay_inbox until a pass handles nothing; returns the passes that did work
local function drain(e)
  local passes = 0
  for _ = 1, 100 do
    if e:relay_inbox() == 0 then return passes end
    passes = passes + 1
  end
  error("the inbox still had work after 100 passes")
end

local function add(n, id)
  return { kind = "Add", data = { n = n }, id = id }
end

TestInbox = {}

function TestInbox:setUp()
  self.store, self.db = C.store()
  self.engine = new_engine(self.store)
end

function TestInbox:tearDown()
  self.store:close()
end

function TestInbox:start(n, prefix)
  local ids = {}
  for i = 1, n do
    ids[i] = assert(self.engine:start("tally", { id = (prefix or "t") .. i }))
  end
  return ids
end

function TestInbox:test_an_enqueue_is_one_insert_and_no_read()
  local ev = add(1)
  local got = commands(self.store, function()
    lu.assertEquals({ self.engine:enqueue("nowhere-yet", ev) }, { true, "queued" })
  end)
  lu.assertEquals(got.insert, 1)
  lu.assertEquals(got.total, 1, "an enqueue is one round trip: " .. tostring(got.total))
  lu.assertIsString(ev.id, "the event id is filled into the caller's table")
  local doc = rawdb.doc(self.db, ev.id, "inbox")
  lu.assertEquals(doc.execution_id, "nowhere-yet")
  lu.assertEquals(doc.priority, 0)
  lu.assertNil(rawdb.doc(self.db, "nowhere-yet"), "the execution was not created or read")
end

function TestInbox:test_events_are_delivered_in_order_per_execution()
  local ids = self:start(3)
  for n = 1, 20 do
    for _, id in ipairs(ids) do assert(self.engine:enqueue(id, add(n))) end
  end
  lu.assertEquals(drain(self.engine), 1, "one pass takes every queued event of the claimed executions")
  local want = {}
  for n = 1, 20 do want[#want + 1] = n .. "," end
  for _, id in ipairs(ids) do
    lu.assertEquals(seen(self.store, id), table.concat(want))
    applied_once(self.store, id)
  end
  lu.assertEquals(queued(self.db), 0, "every delivered entry was acked")
end

-- A queue longer than a pass takes (inbox_max_events): the claim stamps all
-- of it and reads the oldest inbox_max_events; the rest is given back with
-- the claim, so the next pass takes it at once, not once the lease ends.
function TestInbox:test_a_queue_longer_than_a_pass_drains_pass_after_pass_within_the_lease()
  local e = engine_mod.new{ store = self.store, charts = charts, trace = true, lease = 60, inbox = true,
                            inbox_max_events = 10, log = function() end }
  assert(e:start("tally", { id = "long" }))
  for n = 1, 35 do assert(e:enqueue("long", add(n))) end
  local t0 = ms.now()
  local got = {}
  for _ = 1, 4 do got[#got + 1] = e:relay_inbox() end
  lu.assertEquals(got, { 10, 10, 10, 5 }, "each pass takes the next part of the queue")
  lu.assertTrue(ms.now() - t0 < 30, "the passes did not wait out the 60 s lease")
  local want = {}
  for n = 1, 35 do want[#want + 1] = n .. "," end
  lu.assertEquals(seen(self.store, "long"), table.concat(want))
  applied_once(self.store, "long")
  lu.assertEquals(queued(self.db), 0)
end

function TestInbox:test_a_pass_is_a_few_round_trips_for_any_number_of_executions()
  local per = {}
  for _, k in ipairs { 1, 10, 100 } do
    local store, db = C.store()
    -- no trace: a trace step takes its index in a round trip of its own per commit
    local e = new_engine(store, { batch = 1000, trace = false })
    e:relay_inbox() -- the store's first pass creates the inbox's indexes
    for i = 1, k do
      assert(e:start("tally", { id = "k" .. i }))
      assert(e:enqueue("k" .. i, add(1)))
    end
    local n = 0
    local got = commands(store, function() n = e:relay_inbox() end)
    lu.assertEquals(n, k)
    lu.assertEquals(queued(db), 0)
    for i = 1, k do lu.assertEquals(seen(store, "k" .. i), "1,") end
    per[k] = got.total
    local names = {}
    for name, v in pairs(got) do
      if name ~= "total" and name ~= "reply_bytes" and v > 0 then names[#names + 1] = name .. "=" .. v end
    end
    table.sort(names)
    print(string.format("inbox pass: K = %d executions, %d round trips, %.3f per delivered event (%s)", k,
      got.total, got.total / k, table.concat(names, " ")))
    store:close()
  end
  -- the pass's round trips do not grow with K: its writes and reads are one per step
  lu.assertEquals(per[100], per[1], "round trips at K = 100 and K = 1")
  lu.assertTrue(per[100] / 100 <= 0.1, "round trips per event at K = 100: " .. per[100] / 100)
end

function TestInbox:test_the_most_urgent_executions_go_first_then_the_oldest()
  local e = new_engine(self.store, { batch = 1 })
  for _, id in ipairs { "low", "high", "mid", "high2" } do assert(e:start("tally", { id = id })) end
  assert(e:enqueue("low", add(1), { priority = 0 }))
  assert(e:enqueue("high", add(1), { priority = 4 }))
  assert(e:enqueue("mid", add(1), { priority = 2 }))
  assert(e:enqueue("high2", add(1), { priority = 4 }))
  local order, done = {}, {}
  for _ = 1, 4 do
    lu.assertEquals(e:relay_inbox(), 1)
    for _, id in ipairs { "low", "high", "mid", "high2" } do
      if seen(self.store, id) and not done[id] then
        done[id] = true
        order[#order + 1] = id
      end
    end
  end
  lu.assertEquals(order, { "high", "high2", "mid", "low" })
end

function TestInbox:test_an_execution_queue_keeps_its_order_whatever_the_priorities()
  local id = self:start(1)[1]
  assert(self.engine:enqueue(id, add(1), { priority = 0 }))
  assert(self.engine:enqueue(id, add(2), { priority = 4 }))
  assert(self.engine:enqueue(id, add(3), { priority = 1 }))
  drain(self.engine)
  lu.assertEquals(seen(self.store, id), "1,2,3,")
end

function TestInbox:test_the_same_event_twice_is_one_entry_and_one_application()
  local id = self:start(1)[1]
  lu.assertEquals({ self.engine:enqueue(id, add(1, "ev-1")) }, { true, "queued" })
  lu.assertEquals({ self.engine:enqueue(id, add(1, "ev-1")) }, { true, "duplicate" })
  lu.assertEquals(queued(self.db), 1)
  local ok, err, code = self.engine:enqueue("other", add(1, "ev-1"))
  lu.assertNil(ok)
  lu.assertEquals(code, "conflict")
  lu.assertStrContains(err, id)
  drain(self.engine)
  -- queued again after its delivery: delivered again, and refused by dedupe
  lu.assertEquals({ self.engine:enqueue(id, add(1, "ev-1")) }, { true, "queued" })
  drain(self.engine)
  lu.assertEquals(queued(self.db), 0)
  lu.assertEquals(seen(self.store, id), "1,")
  lu.assertEquals(C.trace_counts(self.store, id)["ev-1"], 1)
end

function TestInbox:test_bad_input_writes_nothing()
  local e = self.engine
  local function refused(want_code, ...)
    local args = { ... }
    local got = commands(self.store, function()
      local ok, err, code = e:enqueue(table.unpack(args))
      lu.assertNil(ok)
      lu.assertIsString(err)
      lu.assertEquals(code, want_code, err)
    end)
    lu.assertEquals(got.total or 0, 0, "nothing was sent")
  end
  refused("invalid", "", add(1))
  refused("invalid", "t1", { kind = "" })
  refused("invalid", "t1", { kind = "Add", id = "" })
  refused("invalid", "t1", { kind = "Add", data = { f = 0 / 0 } })
  refused("invalid", "t1", add(1), { priority = 5 })
  refused("invalid", "t1", add(1), { priority = -1 })
  refused("invalid", "t1", add(1), { priority = 1.5 })
  refused("too_large", "t1", { kind = "Add", data = { s = string.rep("x", 1100000) } })
  lu.assertErrorMsgContains("id must be a string", e.enqueue, e, 1, add(1))
  lu.assertErrorMsgContains("event must be a table", e.enqueue, e, "t1", "Add")
  lu.assertErrorMsgContains("event.kind must be a string", e.enqueue, e, "t1", { kind = 1 })
  lu.assertErrorMsgContains("opts.priority must be an integer", e.enqueue, e, "t1", add(1), { priority = "4" })
  lu.assertErrorMsgContains("unknown option", e.enqueue, e, "t1", add(1), { prio = 1 })
  lu.assertErrorMsgContains("opts must be a table", e.enqueue, e, "t1", add(1), 3)
  lu.assertEquals(queued(self.db), 0)
end

function TestInbox:test_an_event_for_a_missing_execution_waits_for_it()
  assert(self.engine:enqueue("later", add(1)))
  lu.assertEquals(self.engine:relay_inbox(), 0)
  lu.assertEquals(queued(self.db), 1, "kept until the execution exists")
  assert(self.engine:start("tally", { id = "later" }))
  lu.assertEquals(self.engine:relay_inbox(), 1)
  lu.assertEquals(seen(self.store, "later"), "1,")
end

function TestInbox:test_a_claim_holds_until_its_lease_runs_out()
  local id = self:start(1)[1]
  assert(self.engine:enqueue(id, add(1)))
  local a = new_engine(self.store, { lease = 30 })
  local held = assert(inbox.claim(a))
  lu.assertEquals(#held.entries, 1)
  local other = assert(inbox.claim(self.engine))
  lu.assertEquals(next(other.fences), nil, "another worker cannot take it meanwhile")
  lu.assertEquals(#other.entries, 0)
  inbox.deliver(a, held)
  lu.assertEquals(inbox.ack(a, held), 1)
  assert(inbox.release(a, held))
  lu.assertEquals(seen(self.store, id), "1,")
end

function TestInbox:test_a_stale_worker_can_neither_deliver_nor_ack()
  local ids = self:start(2)
  for n = 1, 3 do
    for _, id in ipairs(ids) do assert(self.engine:enqueue(id, add(n))) end
  end
  local a = new_engine(self.store, { lease = 0.3 })
  local b = new_engine(self.store, { lease = 30 })
  local ca = assert(inbox.claim(a))
  lu.assertEquals(#ca.entries, 6)
  ms.sleep(0.4) -- A's lease runs out
  local cb = assert(inbox.claim(b))
  lu.assertEquals(#cb.entries, 6, "B takes every entry A held")
  for _, id in ipairs(ids) do
    lu.assertTrue(cb.fences[id] > ca.fences[id], "the fence grew when the claim passed")
  end
  inbox.deliver(b, cb)
  for _, en in ipairs(cb.entries) do lu.assertTrue(en.done, tostring(en.result.message)) end
  -- A goes on as if its lease held: every commit is refused, and so is its ack
  ca.deadline = ms.now() + 30
  inbox.deliver(a, ca)
  for _, en in ipairs(ca.entries) do
    lu.assertFalse(en.done == true)
    lu.assertTrue(en.result.code == "stale" or en.result.blocked == true, tostring(en.result.code))
  end
  for _, id in ipairs(ids) do
    local first
    for _, en in ipairs(ca.entries) do
      if en.execution_id == id and not first then first = en end
    end
    lu.assertEquals(first.result.code, "stale", "the first event of each execution is refused as stale")
  end
  for _, en in ipairs(ca.entries) do en.done = true end -- even if A thought it delivered
  lu.assertEquals(inbox.ack(a, ca), 0, "A's ack deletes nothing")
  lu.assertEquals(queued(self.db), 6)
  lu.assertEquals(inbox.ack(b, cb), 6)
  assert(inbox.release(b, cb))
  assert(inbox.release(a, ca)) -- gives back nothing: the claims are B's
  for _, id in ipairs(ids) do
    lu.assertEquals(seen(self.store, id), "1,2,3,")
    applied_once(self.store, id)
  end
end

function TestInbox:test_a_stale_worker_is_refused_before_the_new_one_commits_its_event()
  -- B commits the first event only; A then tries the first (marked) and the
  -- second (not yet applied): both refused by the fence, and B goes on
  local id = self:start(1)[1]
  for n = 1, 2 do assert(self.engine:enqueue(id, add(n))) end
  local a = new_engine(self.store, { lease = 0.3 })
  local b = new_engine(self.store, { lease = 30 })
  local ca = assert(inbox.claim(a))
  ms.sleep(0.4)
  local cb = assert(inbox.claim(b))
  local exe = C.load(self.store, id)
  assert(self.store:commit(exe, { processed_event_id = cb.entries[1].event.id, fence = cb.fences[id] }))
  local ok, _, code = self.store:commit(C.load(self.store, id), { processed_event_id = ca.entries[2].event.id,
                                                                  fence = ca.fences[id] })
  lu.assertNil(ok)
  lu.assertEquals(code, "stale")
  ok, _, code = self.store:commit(C.load(self.store, id), { processed_event_id = ca.entries[1].event.id,
                                                            fence = ca.fences[id] })
  lu.assertNil(ok)
  lu.assertEquals(code, "stale", "a marked event under a stale fence is stale, not a duplicate")
  local _, _, fcode = self.store:commit(C.load(self.store, id), { fence = 1.5 })
  lu.assertEquals(fcode, "invalid")
end

function TestInbox:test_step_and_run_deliver_the_inbox_by_default_unless_opted_out()
  local id = self:start(1)[1]
  assert(self.engine:enqueue(id, add(1)))
  local off = engine_mod.new{ store = self.store, charts = charts, log = function() end, inbox = false }
  lu.assertEquals(off:step(), 0, "inbox = false opts out")
  local default = engine_mod.new{ store = self.store, charts = charts, log = function() end }
  lu.assertEquals(default:step(), 1, "a default engine delivers the inbox")
  lu.assertEquals(seen(self.store, id), "1,")
  assert(self.engine:enqueue(id, add(2)))
  local passes = 0
  default:run{ idle_sleep = 0, stop = function()
    passes = passes + 1
    return passes > 2
  end }
  lu.assertEquals(seen(self.store, id), "1,2,")
  lu.assertErrorMsgContains("inbox must be a boolean", engine_mod.new, { store = self.store, inbox = 1 })
end

-- The worker loop's idle inbox pass backs off, 50 ms doubling to 1 s, and
-- work resets it; an event enqueued into an idle inbox still goes within
-- the wait. step always runs the pass.
function TestInbox:test_an_idle_inbox_pass_backs_off_and_work_resets_it()
  local id = self:start(1)[1]
  local e = self.engine
  local waits = {}
  for _ = 1, 7 do
    e.inbox_idle_until = nil -- as if the wait were over
    lu.assertEquals(inbox.idle_pass(e), 0)
    waits[#waits + 1] = e.inbox_idle
  end
  lu.assertEquals(waits, { 0.05, 0.1, 0.2, 0.4, 0.8, 1, 1 })
  local finds = commands(self.store, function() lu.assertEquals(inbox.idle_pass(e), 0) end)
  lu.assertEquals(finds.total, 0, "within the wait a pass sends nothing")
  assert(e:enqueue(id, add(7)))
  lu.assertEquals(e:step(), 1, "step does not wait")
  assert(e:enqueue(id, add(8)))
  local got = 0
  local deadline = ms.now() + 3
  while got == 0 and ms.now() < deadline do
    got = inbox.idle_pass(e)
    ms.sleep(0.02)
  end
  lu.assertEquals(got, 1, "delivered once the wait was over")
  lu.assertNil(e.inbox_idle, "work resets the backoff")
  lu.assertEquals(seen(self.store, id), "7,8,")
end

-- kill -9 a worker process that holds claims: its events come back after
-- the lease and are applied once
local WORKER = [[
  local ms = require "mongostore"
  local inbox = require "mongostore.inbox"
  local charts = assert(load(%q))()
  local store = assert(ms.connect(%q, { db = %q, wait = 10 }))
  local e = require("mongostore.engine").new{ store = store, charts = charts, trace = true, lease = 1,
                                              batch = 1000, log = function() end }
  local claim = assert(inbox.claim(e))
  if %s then inbox.deliver(e, claim) end
  io.stdout:write("HELD ", #claim.entries, "\n"); io.stdout:flush()
  ms.sleep(60)
  io.stdout:write("DONE\n")
]]

function TestInbox:kill_9_holding_claims(deliver_first)
  local ids = self:start(10)
  for n = 1, 3 do
    for _, id in ipairs(ids) do assert(self.engine:enqueue(id, add(n))) end
  end
  local out = os.tmpname()
  local h = helper.spawn(string.format("local f = assert(io.open(%q, 'w')); f:write(io.open('/proc/self/stat')"
    .. ":read('l'):match('^%%d+'), '\\n'); f:close(); io.stdout = assert(io.open(%q, 'a')); ", out, out)
    .. string.format(WORKER, CHARTS, helper.uri(), self.db, tostring(deliver_first)))
  local pid
  local held = C.wait_for(function()
    local f = io.open(out, "r")
    local text = f and f:read("a") or ""
    if f then f:close() end
    pid = text:match("^(%d+)\n")
    return pid and text:match("HELD (%d+)")
  end, nil, 20)
  os.remove(out)
  lu.assertEquals(held, "30", "the worker never held its claims")
  lu.assertEquals(self.engine:relay_inbox(), 0, "the claims are the worker's while it lives")
  lu.assertTrue(os.execute("kill -9 " .. pid))
  local _, status = h.wait()
  lu.assertNotEquals(status, 0)
  lu.assertEquals(queued(self.db), 30, "nothing was acked")
  ms.sleep(1.1) -- the dead worker's lease runs out
  lu.assertEquals(drain(self.engine), 1)
  lu.assertEquals(queued(self.db), 0)
  for _, id in ipairs(ids) do
    lu.assertEquals(seen(self.store, id), "1,2,3,")
    applied_once(self.store, id)
  end
end

-- two worker processes share the inbox while the events arrive: each event
-- once, each execution's in the order they were enqueued
local RACER = [[
  local ms = require "mongostore"
  local charts = assert(load(%q))()
  local store = assert(ms.connect(%q, { db = %q, wait = 10 }))
  local e = require("mongostore.engine").new{ store = store, charts = charts, trace = true, lease = 2, batch = 7,
                                              log = function() end }
  local n, idle, deadline = 0, 0, ms.now() + 30
  while idle < 25 and ms.now() < deadline do
    local k = e:relay_inbox()
    n = n + k
    idle = k == 0 and idle + 1 or 0
    ms.sleep(0.02)
  end
  io.stdout:write("HANDLED ", n, "\n")
]]

function TestInbox:test_two_workers_share_the_inbox_in_order_and_once()
  local ids = self:start(20)
  local workers = {}
  for w = 1, 2 do
    workers[w] = helper.spawn(string.format(RACER, CHARTS, helper.uri(), self.db))
  end
  for n = 1, 5 do
    for _, id in ipairs(ids) do assert(self.engine:enqueue(id, add(n), { priority = n % 5 })) end
    ms.sleep(0.05)
  end
  local total = 0
  for w = 1, 2 do
    local out = workers[w].wait()
    total = total + (tonumber(out:match("HANDLED (%d+)")) or 0)
  end
  lu.assertEquals(total, 100, "every entry handled once, by one of the two")
  lu.assertEquals(queued(self.db), 0)
  for _, id in ipairs(ids) do
    lu.assertEquals(seen(self.store, id), "1,2,3,4,5,")
    applied_once(self.store, id)
  end
end

function TestInbox:test_kill_9_while_holding_claims_before_delivering()
  self:kill_9_holding_claims(false)
end

function TestInbox:test_kill_9_after_delivering_before_the_ack()
  self:kill_9_holding_claims(true)
end

