-- spec/03-engine/seq_blocks_spec.lua - outbox and spawn seqs come from a
-- block each store reserves, not from one counter document per emitting
-- commit: a thousand emits cost one counter round trip, seqs stay unique
-- across stores, and an execution's entries stay in emit order when its
-- commits alternate between stores whose blocks were reserved at different
-- times (the commit's guard sends a stale block's seqs back for fresh ones).
local lu = require "luaunit"
local ms = require "mongostore"
local chart = require "mongostore.chart"
local engine_mod = require "mongostore.engine"
local helper = require "helpers"

-- Ping n: emits Pong n to "nobody", which never exists, so every entry stays
-- pending where the spec can read it.
local pinger = chart.define{
  id = "pinger", initial = "On",
  states = { { "On" } },
  transitions = {
    { from = "On", to = "On", on = "Ping", action = function(_, event, act)
        for k = 1, (event.data.copies or 1) do
          act.emit("nobody", "Pong", { n = event.data.n, k = k })
        end
      end },
  },
}

local function new_engine(store)
  return engine_mod.new{ store = store, charts = { pinger }, log = function() end }
end

local function counter_trips(store, fn)
  local before = assert(store:stats())
  fn()
  local after = assert(store:stats())
  return after.findAndModify - before.findAndModify
end

-- The pending entries of execution id, in seq order: { { seq, n, k }, ... }
local function entries_of(store, id)
  local out = {}
  for _, e in ipairs(assert(store:pending_outbox())) do
    if e.source_id == id then
      out[#out + 1] = { seq = e.seq, n = e.event.data.n, k = e.event.data.k }
    end
  end
  return out
end

TestSeqBlocks = {}

function TestSeqBlocks:setUp()
  self.a, self.db = helper.connect()
  self.b = nil
end

function TestSeqBlocks:tearDown()
  if self.b then self.b:close() end
  if self.a then self.a:close() end
end

function TestSeqBlocks:test_a_thousand_emits_cost_one_counter_round_trip()
  local e = new_engine(self.a)
  assert(e:start("pinger", { id = "p" }))
  local trips = counter_trips(self.a, function()
    for n = 1, 200 do assert(e:send("p", { kind = "Ping", id = "ping-" .. n, data = { n = n, copies = 5 } })) end
  end)
  -- 1,000 emits: the first reserves the block, the other 999 take from it
  lu.assertEquals(trips, 1)
  local got = entries_of(self.a, "p")
  lu.assertEquals(#got, 1000)
  for i = 2, #got do lu.assertTrue(got[i].seq > got[i - 1].seq) end
  lu.assertEquals(got[1000].n, 200)
  lu.assertEquals(got[1000].k, 5)
end

-- seq_block = 1 is the old way: a counter round trip per emitting commit.
function TestSeqBlocks:test_a_block_of_one_reserves_at_every_emitting_commit()
  self.b = assert(ms.connect(helper.uri(), { db = self.db, wait = 10, seq_block = 1 }))
  lu.assertEquals(self.b:info().seq_block, 1)
  lu.assertEquals(self.a:info().seq_block, 1000)
  local e = new_engine(self.b)
  assert(e:start("pinger", { id = "q" }))
  local trips = counter_trips(self.b, function()
    for n = 1, 10 do assert(e:send("q", { kind = "Ping", id = "q-" .. n, data = { n = n, copies = 3 } })) end
  end)
  lu.assertEquals(trips, 10)
  lu.assertEquals(#entries_of(self.b, "q"), 30)
end

-- Store a reserves its block first, store b a later one; then the commits of
-- one execution alternate between them. Without the guard, a's seqs (from
-- the older block) would sort before b's and the relay would deliver the
-- later Pong first.
function TestSeqBlocks:test_entries_stay_in_emit_order_when_commits_alternate_between_stores()
  self.b = assert(ms.connect(helper.uri(), { db = self.db, wait = 10 }))
  local ea, eb = new_engine(self.a), new_engine(self.b)
  assert(ea:start("pinger", { id = "warm-a" }))
  assert(ea:send("warm-a", { kind = "Ping", id = "wa", data = { n = 0 } })) -- a's block: the lower one
  assert(eb:start("pinger", { id = "warm-b" }))
  assert(eb:send("warm-b", { kind = "Ping", id = "wb", data = { n = 0 } })) -- b's block: above a's
  assert(ea:start("pinger", { id = "x" }))
  for n = 1, 12 do
    local e = (n % 2 == 1) and eb or ea
    local ok, err = e:send("x", { kind = "Ping", id = "x-" .. n, data = { n = n } })
    lu.assertTrue(ok, err)
  end
  local got = entries_of(self.a, "x")
  lu.assertEquals(#got, 12)
  local seqs = {}
  for i, g in ipairs(got) do
    lu.assertEquals(g.n, i, "entry " .. i .. " out of emit order")
    lu.assertNil(seqs[g.seq], "seq " .. g.seq .. " used twice")
    seqs[g.seq] = true
  end
  -- every seq either store handed out is unique over all executions
  local all = {}
  for _, e in ipairs(assert(self.a:pending_outbox())) do
    lu.assertNil(all[e.seq], "seq " .. e.seq .. " used twice")
    all[e.seq] = true
  end
end

-- The same through send_many: a commit of the batch that the guard refuses
-- falls back to the one-event path, which takes fresh seqs.
function TestSeqBlocks:test_a_batch_with_a_stale_block_falls_back_and_keeps_the_order()
  self.b = assert(ms.connect(helper.uri(), { db = self.db, wait = 10 }))
  local ea, eb = new_engine(self.a), new_engine(self.b)
  local ids = {}
  for i = 1, 5 do
    ids[i] = "y-" .. i
    assert(ea:start("pinger", { id = ids[i] }))
    assert(ea:send(ids[i], { kind = "Ping", id = ids[i] .. "-1", data = { n = 1 } })) -- from a's block
  end
  assert(eb:start("pinger", { id = "warm-b" }))
  assert(eb:send("warm-b", { kind = "Ping", id = "wb", data = { n = 0 } }))
  for i = 1, 5, 2 do -- b's newer block on y-1, y-3, y-5
    assert(eb:send(ids[i], { kind = "Ping", id = ids[i] .. "-2", data = { n = 2 } }))
  end
  local list = {}
  for i = 1, 5 do
    local n = (i % 2 == 1) and 3 or 2
    list[i] = { ids[i], { kind = "Ping", id = ids[i] .. "-" .. n, data = { n = n } } }
  end
  for i, r in ipairs(ea:send_many(list)) do lu.assertEquals(r.how, "applied", ids[i] .. ": " .. tostring(r.message)) end
  for i = 1, 5 do
    local got = entries_of(self.a, ids[i])
    lu.assertEquals(#got, (i % 2 == 1) and 3 or 2, ids[i])
    for k, g in ipairs(got) do lu.assertEquals(g.n, k, ids[i] .. ": entry " .. k .. " out of emit order") end
  end
end
