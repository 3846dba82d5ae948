-- spec/03-engine/batch_spec.lua - batched delivery: send_many and the
-- batched relay pass load their targets together and carry their commits in
-- one bulk write, yet every event is applied once, in order per target: a
-- commit that loses falls back alone, duplicates are refused, a lost reply
-- and a worker killed with kill -9 during the bulk write lose nothing.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local faults = require "helpers.faults"
local C = require "fixtures.charts"
local engine_mod = require "mongostore.engine"

-- The charts, as source text: the worker processes load the same.
-- tally: every Add appends its data.n to context.seen; fan: Fan emits
-- context.rep Adds (n = 1..rep) to each of context.targets.
local CHARTS = [[
local chart = require "mongostore.chart"
local hooks = ...
local tally = chart.define{
  id = "tally", initial = "Open",
  states = { { "Open" } },
  transitions = {
    { from = "Open", to = "Open", on = "Add", action = function(context, event, act)
        context.seen = (context.seen or "") .. tostring(event.data.n) .. ","
        if hooks.interfere then hooks.interfere(act.execution_id) end
      end },
  },
}
local fan = chart.define{
  id = "fan", initial = "Idle",
  states = { { "Idle" }, { "Sent" } },
  transitions = {
    { from = "Idle", to = "Sent", on = "Fan", action = function(context, _, act)
        for target in context.targets:gmatch("[^,]+") do
          for n = 1, context.rep do act.emit(target, "Add", { n = n }) end
        end
      end },
  },
}
return { tally, fan }
]]

local hooks = {}
local charts = assert(load(CHARTS))(hooks)

local function new_engine(store, opts)
  opts = opts or {}
  local logs = {}
  local e = engine_mod.new{ store = store, charts = charts, trace = true, lease = 1,
                            log = function(msg) logs[#logs + 1] = msg end,
                            batch = opts.batch or 1000, batch_delivery = true }
  e.spec_logs = logs
  return e
end

local commands, applied_once = C.commands, C.applied_once

TestBatch = {}

function TestBatch:setUp()
  hooks.interfere = nil
  self.store, self.db = C.store()
  self.engine = new_engine(self.store)
end

function TestBatch:tearDown()
  hooks.interfere = nil
  if self.other then self.other:close() end
  if self.store then self.store:close() end
end

function TestBatch:start_tallies(n, prefix)
  local ids = {}
  for i = 1, n do
    ids[i] = (prefix or "t-") .. i
    lu.assertEquals(self.engine:start("tally", { id = ids[i] }), ids[i])
  end
  return ids
end

function TestBatch:test_send_many_loads_once_and_writes_once()
  -- trace off: a traced commit also reserves its step's index, a round trip
  -- per execution (the trace counters are one document each)
  self.engine = engine_mod.new{ store = self.store, charts = charts, trace = false }
  local ids = self:start_tallies(20)
  local list = {}
  for i, id in ipairs(ids) do list[i] = { id, { kind = "Add", id = "add-" .. i, data = { n = 1 } } } end
  local results
  local d = commands(self.store, function() results = self.engine:send_many(list) end)
  for i, r in ipairs(results) do
    lu.assertTrue(r.ok, tostring(r.message))
    lu.assertEquals(r.how, "applied", ids[i])
  end
  -- one find of every target, one bulk write of every commit
  lu.assertEquals(d.find, 1)
  lu.assertEquals(d.update, 1)
  lu.assertEquals(d.total, 2)
  for _, id in ipairs(ids) do
    local exe = C.load(self.store, id)
    lu.assertEquals(exe.context.seen, "1,", id)
    lu.assertEquals(exe.version, 2, id)
  end
end

function TestBatch:test_several_events_for_one_target_apply_in_order_each_its_own_commit()
  self:start_tallies(2)
  local list = {
    { "t-1", { kind = "Add", id = "a1", data = { n = 1 } } },
    { "t-2", { kind = "Add", id = "b1", data = { n = 1 } } },
    { "t-1", { kind = "Add", id = "a2", data = { n = 2 } } },
    { "t-1", { kind = "Add", id = "a3", data = { n = 3 } } },
  }
  for _, r in ipairs(self.engine:send_many(list)) do lu.assertEquals(r.how, "applied", tostring(r.message)) end
  local exe = C.load(self.store, "t-1")
  lu.assertEquals(exe.context.seen, "1,2,3,")
  lu.assertEquals(exe.version, 4) -- Start and three commits, one per event
  local kinds, eids = C.trace(self.store, "t-1")
  lu.assertEquals(kinds, { "Start", "Add", "Add", "Add" })
  lu.assertEquals(eids, { "start:t-1", "a1", "a2", "a3" })
  for _, eid in ipairs { "a1", "a2", "a3" } do lu.assertTrue(self.store:is_processed("t-1", eid), eid) end
  lu.assertEquals(C.load(self.store, "t-2").context.seen, "1,")
  -- the same list again: every event is refused as a duplicate, nothing moves
  for _, r in ipairs(self.engine:send_many(list)) do lu.assertEquals(r.how, "duplicate") end
  lu.assertEquals(C.load(self.store, "t-1").version, 4)
  lu.assertEquals(C.load(self.store, "t-2").version, 2)
end

function TestBatch:test_a_commit_that_loses_falls_back_for_its_event_only()
  local ids = self:start_tallies(10)
  self.other = C.store(self.db)
  local done = false
  hooks.interfere = function(id)
    if id ~= "t-4" or done then return end
    done = true
    local exe = assert(self.other:load(id))
    exe.context.others = 1
    assert(self.other:save(exe))
  end
  local list = {}
  for i, id in ipairs(ids) do list[i] = { id, { kind = "Add", id = "add-" .. i, data = { n = i } } } end
  list[#list + 1] = { "t-4", { kind = "Add", id = "add-4b", data = { n = 40 } } }
  local results = self.engine:send_many(list)
  for i, r in ipairs(results) do lu.assertEquals(r.how, "applied", i .. ": " .. tostring(r.message)) end
  lu.assertTrue(done, "the interference never ran: the test proves nothing")
  local exe = C.load(self.store, "t-4")
  -- the interfering write kept, then both events once, in order
  lu.assertEquals(exe.context.others, 1)
  lu.assertEquals(exe.context.seen, "4,40,")
  lu.assertEquals(exe.version, 4)
  applied_once(self.store, "t-4")
  for i, id in ipairs(ids) do
    if id ~= "t-4" then
      local x = C.load(self.store, id)
      lu.assertEquals(x.context.seen, tostring(i) .. ",", id)
      lu.assertEquals(x.version, 2, id)
    end
  end
end

function TestBatch:test_send_many_with_duplicates_and_bad_items()
  self:start_tallies(3)
  local list = {
    { "t-1", { kind = "Add", id = "e1", data = { n = 1 } } },
    { "t-2", { kind = "Add", id = "e2", data = { n = 2 } } },
    { "t-1", { kind = "Add", id = "e1", data = { n = 99 } } },  -- the same event again
    { "", { kind = "Add", data = { n = 3 } } },                  -- a bad id
    { "t-3", { kind = "", data = { n = 3 } } },                  -- a bad kind
    { "t-3", { kind = "Add", id = "e3", data = { n = 3 } } },   -- behind the refused one
    { "nobody", { kind = "Add", id = "e4", data = { n = 4 } } },
  }
  local r = self.engine:send_many(list)
  lu.assertEquals(r[1].how, "applied")
  lu.assertEquals(r[2].how, "applied")
  lu.assertEquals(r[3].how, "duplicate")
  lu.assertEquals(r[4].code, "invalid")
  lu.assertEquals(r[5].code, "invalid")
  lu.assertEquals(r[6].code, "invalid")
  lu.assertTrue(r[6].blocked)
  lu.assertEquals(r[7].code, "not_found")
  lu.assertEquals(C.load(self.store, "t-1").context.seen, "1,")
  lu.assertEquals(C.load(self.store, "t-3").version, 1)
  -- an event without an id gets one, filled into the caller's table
  local ev = { kind = "Add", data = { n = 5 } }
  lu.assertEquals(self.engine:send_many{ { "t-3", ev } }[1].how, "applied")
  lu.assertIsString(ev.id)
  lu.assertEquals(self.engine:send_many{ { "t-3", ev } }[1].how, "duplicate")
  lu.assertEquals(C.load(self.store, "t-3").context.seen, "5,")
end

function TestBatch:test_send_many_raises_on_misuse()
  lu.assertErrorMsgContains("engine:send_many: list must be a table", function() self.engine:send_many("x") end)
  lu.assertErrorMsgContains("list[1] must be a table", function() self.engine:send_many{ 1 } end)
  lu.assertErrorMsgContains("id must be a string", function() self.engine:send_many{ { 1, { kind = "Add" } } } end)
  lu.assertErrorMsgContains("event must be a table", function() self.engine:send_many{ { "t", 1 } } end)
end

-- A source that emits `rep` Adds to each of `n` targets.
function TestBatch:fan_out(n, rep)
  local ids = self:start_tallies(n)
  local e = self.engine
  lu.assertEquals(e:start("fan", { id = "src", context = { targets = table.concat(ids, ","), rep = rep } }), "src")
  lu.assertTrue(e:send("src", { kind = "Fan", id = "fan-1" }))
  lu.assertEquals(#assert(self.store:pending_outbox()), n * rep)
  return ids
end

function TestBatch:check_fanned(ids, rep)
  local want = ""
  for n = 1, rep do want = want .. n .. "," end
  lu.assertEquals(#assert(self.store:pending_outbox()), 0)
  for _, id in ipairs(ids) do
    local exe = C.load(self.store, id)
    lu.assertEquals(exe.context.seen, want, id)
    lu.assertEquals(exe.version, 1 + rep, id)
    applied_once(self.store, id)
  end
end

function TestBatch:test_a_relay_pass_delivers_and_acks_together()
  local ids = self:fan_out(30, 2)
  local handled
  local d = commands(self.store, function() handled = self.engine:relay_outbox() end)
  lu.assertEquals(handled, 60)
  -- two bulk writes of commits (the 1st and the 2nd Add of every target),
  -- one bulk write of acks that also releases the source's claim
  lu.assertEquals(d.update, 3)
  self:check_fanned(ids, 2)
end

-- Entries held by many source documents: the pass claims them all in three
-- round trips (four when candidates are left unread) (the find of candidates, one update that stamps every
-- candidate, one find of what it stamped), not one per source; a second
-- relay that claims in between gets only what the first left.
function TestBatch:test_claims_of_many_sources_take_three_round_trips()
  local ids = self:start_tallies(25)
  for i, id in ipairs(ids) do
    local src = "src-" .. i
    lu.assertEquals(self.engine:start("fan", { id = src, context = { targets = id, rep = 1 } }), src)
    lu.assertTrue(self.engine:send(src, { kind = "Fan", id = "fan-" .. i }))
  end
  local held
  local d = commands(self.store, function() held = assert(self.store:pending_outbox{ limit = 10, lease = 30 }) end)
  lu.assertEquals(#held, 10)
  lu.assertEquals(d.find, 2)
  lu.assertEquals(d.update, 1)
  -- and the killCursors of the candidates left unread
  lu.assertTrue(d.other <= 1 and d.total <= 4, "round trips: " .. d.total)
  local token, sources = held[1].token, {}
  for _, e in ipairs(held) do
    lu.assertEquals(e.token, token)
    lu.assertNil(sources[e.source_id], "a source held twice")
    sources[e.source_id] = true
  end
  -- another relay: only the 15 sources nobody holds
  self.other = assert(ms.connect(helper.uri(), { db = self.db, wait = 10 }))
  local rest = assert(self.other:pending_outbox{ limit = 100, lease = 30 })
  lu.assertEquals(#rest, 15)
  for _, e in ipairs(rest) do lu.assertNil(sources[e.source_id], "claimed by both relays: " .. e.source_id) end
  -- an ack with the first relay's token still counts; the other's claims stand
  for _, e in ipairs(held) do lu.assertTrue(self.store:ack_outbox(e.seq, e.token)) end
  lu.assertEquals(#assert(self.other:pending_outbox{ limit = 100, lease = 30 }), 0, "the second relay's claims were lost")
end

function TestBatch:test_the_one_at_a_time_pass_ends_the_same()
  self.engine = new_engine(self.store)
  self.engine.batch_delivery = false
  local ids = self:fan_out(10, 2)
  lu.assertEquals(self.engine:relay_outbox(), 20)
  self:check_fanned(ids, 2)
end

------------------------------------------------------------------------
-- Faults in the middle of a batch

TestBatchFaults = {}

function TestBatchFaults:setUp()
  hooks.interfere = nil
  self.store, self.db = C.store()
  self.engine = new_engine(self.store)
  self.proxy = faults.start_proxy(helper.uri())
end

function TestBatchFaults:tearDown()
  if self.proxy then self.proxy.stop() end
  if self.store then self.store:close() end
end

TestBatchFaults.start_tallies = TestBatch.start_tallies
TestBatchFaults.fan_out = TestBatch.fan_out
TestBatchFaults.check_fanned = TestBatch.check_fanned

-- A bulk write of the pass (its commits' or its acks') reaches the server
-- and is applied, but its reply is lost and the connection reset, twice (the
-- driver's retry too): the entries not known acked come again, and their
-- targets refuse the copies.
function TestBatchFaults:test_a_lost_reply_of_the_bulk_write_applies_nothing_twice()
  local ids = self:fan_out(20, 1)
  local via = assert(ms.connect(self.proxy.uri(), { db = self.db, wait = 10 }))
  local e = new_engine(via)
  self.proxy.set{ target = "update" }
  self.proxy.bump("lose_next", 2, { target = "update" })
  e:relay_outbox()
  lu.assertTrue(self.proxy.stats().replies_lost >= 1, "no reply was lost: the test proves nothing")
  -- the commits landed: the targets hold the events
  lu.assertEquals(C.load(self.store, ids[1]).context.seen, "1,")
  ms.sleep(1.1) -- the lease of a pass that lost its reply
  C.drain(e)
  via:close()
  self:check_fanned(ids, 1)
end

-- A worker killed with kill -9 while its bulk write of commits is applied on
-- the server and the reply is on its way: another worker finishes the work,
-- every event once.
function TestBatchFaults:test_kill_9_during_the_bulk_write()
  local ids = self:fan_out(30, 1)
  self.proxy.set{ target = "update", slow_ms = 5000 }
  self.proxy.bump("slow_next", 1, { target = "update", slow_ms = 5000 })
  local pidfile = os.tmpname()
  local code = string.format([[
    local ms = require "mongostore"
    local engine_mod = require "mongostore.engine"
    local charts = assert(load(%q))({})
    local store = assert(ms.connect(%q, { db = %q, wait = 10 }))
    local e = engine_mod.new{ store = store, charts = charts, trace = true, lease = 1, batch = 1000,
                              batch_delivery = true, log = function() end }
    io.stdout:write("RELAYING\n"); io.stdout:flush()
    e:relay_outbox()
    io.stdout:write("RELAYED\n"); io.stdout:flush()
  ]], CHARTS, self.proxy.uri(), self.db)
  local h = helper.spawn("local f = assert(io.open(" .. string.format("%q", pidfile) ..
    ", 'w')); f:write(io.open('/proc/self/stat'):read('l'):match('^%d+')); f:close(); " .. code)
  local pid
  local ok = C.wait_for(function()
    local f = io.open(pidfile, "r")
    pid = f and f:read("l")
    if f then f:close() end
    if not (pid and pid:match("^%d+$")) then return false end
    -- every commit of the batch applied on the server, none acked yet
    for _, id in ipairs(ids) do
      if C.load(self.store, id).version ~= 2 then return false end
    end
    return true
  end, nil, 20)
  os.remove(pidfile)
  lu.assertTrue(ok, "the worker's bulk write never landed")
  lu.assertEquals(#assert(self.store:pending_outbox()), 30, "the worker acked before the kill")
  lu.assertTrue(os.execute("kill -9 " .. pid))
  local out, status = h.wait()
  lu.assertNotEquals(status, 0, out)
  lu.assertNil(out:find("RELAYED", 1, true), "the worker finished before it was killed")
  ms.sleep(1.1) -- the dead worker's claim runs out
  C.drain(self.engine)
  self:check_fanned(ids, 1)
end
