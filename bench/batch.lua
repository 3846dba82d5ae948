-- bench/batch.lua - batched delivery against one event at a time, one
-- worker, at K = 1, 10, 100, 1000 executions: events/s and round trips per
-- delivered event, for producers (engine:send_many against engine:send)
-- and for the relay (a pass with batch_delivery on against off).
--
-- usage: lua5.4 bench/batch.lua <uri> [--quick] [--db DB] [--label L]
--
-- send: K executions of a two-state chart, each sent R events (rounds of
-- one event per execution: a send_many of K, or K sends). relay: a source
-- emits one event to each of K targets, R times; the relay passes that
-- deliver them are timed. Trace off. Output: a table on stderr and
-- "RESULT <label>.<path>.<mode>.k<K>.<key> <value>" lines on stdout.
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local root = here .. "/.."
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path
package.cpath = root .. "/?.so;" .. package.cpath

local ms = require "mongostore"
local chart = require "mongostore.chart"
local engine_mod = require "mongostore.engine"
local format = string.format

local function charts()
  local pp = chart.define {
    id = "pp", initial = "A", states = { { "A" }, { "B" } },
    transitions = { { from = "A", to = "B", on = "Go" }, { from = "B", to = "A", on = "Go" } },
  }
  local src = chart.define {
    id = "src", initial = "On", states = { { "On" } },
    transitions = { { from = "On", to = "On", on = "Fan", action = function(context, _, act)
      for i = 1, context.k do act.emit(format("%s-%d", context.prefix, i), "Go", {}) end
    end } },
  }
  return { pp, src }
end

local function commands(store)
  local s = assert(store:stats())
  return s.total
end

-- events/s and round trips/event of `rounds` rounds over k executions.
local function run_send(uri, db, k, rounds, batched)
  local store = assert(ms.connect(uri, { db = db }))
  local e = engine_mod.new { store = store, charts = charts(), trace = false }
  local prefix = ms.uuid():sub(1, 8)
  for i = 1, k do assert(e:start("pp", { id = format("%s-%d", prefix, i) })) end
  local c0, t0 = commands(store), ms.now()
  for r = 1, rounds do
    if batched then
      local list = {}
      for i = 1, k do list[i] = { format("%s-%d", prefix, i), { kind = "Go", id = format("%s-%d-%d", prefix, i, r) } } end
      for _, res in ipairs(e:send_many(list)) do assert(res.ok, res.err) end
    else
      for i = 1, k do
        assert(e:send(format("%s-%d", prefix, i), { kind = "Go", id = format("%s-%d-%d", prefix, i, r) }))
      end
    end
  end
  local t1, c1 = ms.now(), commands(store)
  store:close()
  local events = k * rounds
  return events / (t1 - t0), (c1 - c0) / events
end

local function run_relay(uri, db, k, rounds, batched)
  local store = assert(ms.connect(uri, { db = db }))
  local e = engine_mod.new { store = store, charts = charts(), trace = false, batch = k,
                             batch_delivery = batched }
  local prefix = ms.uuid():sub(1, 8)
  for i = 1, k do assert(e:start("pp", { id = format("%s-%d", prefix, i) })) end
  assert(e:start("src", { id = prefix .. "-src", context = { k = k, prefix = prefix } }))
  local took, cmds, events = 0, 0, 0
  for r = 1, rounds do
    assert(e:send(prefix .. "-src", { kind = "Fan", id = format("%s-fan-%d", prefix, r) }))
    local c0, t0 = commands(store), ms.now()
    local n = 0
    while n < k do
      local got = e:relay_outbox()
      if got == 0 then error("relay: no progress") end
      n = n + got
    end
    took, cmds, events = took + ms.now() - t0, cmds + commands(store) - c0, events + n
  end
  store:close()
  return events / took, cmds / events
end

local uri = arg[1]
if not uri or uri:sub(1, 2) == "--" then
  io.stderr:write("usage: lua5.4 bench/batch.lua <uri> [--quick] [--db DB] [--label L]\n")
  os.exit(2)
end
local quick, db, label = false, "mongostore_bench_batch", "batch"
local i = 2
while arg[i] do
  if arg[i] == "--quick" then quick = true
  elseif arg[i] == "--db" then i = i + 1; db = arg[i]
  elseif arg[i] == "--label" then i = i + 1; label = arg[i] end
  i = i + 1
end

-- about the same number of events at every K (at least 3 rounds)
local budget = quick and 2000 or 10000
io.stderr:write(format("%-6s %6s %12s %12s %8s %12s %12s %8s\n", "path", "K", "one ev/s", "batch ev/s", "gain",
  "one rt/ev", "batch rt/ev", "events"))
for _, path in ipairs { "send", "relay" } do
  for _, k in ipairs { 1, 10, 100, 1000 } do
    local rounds = math.max(3, budget // k)
    local fn = path == "send" and run_send or run_relay
    -- a throwaway round of each first: connections, JIT of the server
    fn(uri, db, k, 1, false)
    fn(uri, db, k, 1, true)
    local eps1, rt1 = fn(uri, db, k, rounds, false)
    local epsb, rtb = fn(uri, db, k, rounds, true)
    io.stderr:write(format("%-6s %6d %12.0f %12.0f %7.2fx %12.3f %12.3f %8d\n", path, k, eps1, epsb, epsb / eps1,
      rt1, rtb, k * rounds))
    for _, kv in ipairs { { "one", eps1, rt1 }, { "batch", epsb, rtb } } do
      io.stdout:write(format("RESULT %s.%s.%s.k%d.eps %.0f\n", label, path, kv[1], k, kv[2]))
      io.stdout:write(format("RESULT %s.%s.%s.k%d.rt_per_event %.3f\n", label, path, kv[1], k, kv[3]))
    end
  end
end
