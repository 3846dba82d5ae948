-- bench/batch.lua - batched delivery against one event at a time, one
-- worker, at K = 1, 10, 100, 1000 executions: events/s and round trips per
-- delivered event, for producers (engine:send_many against engine:send)
-- and for the relay (a pass with batch_delivery on against off).
--
-- usage: lua5.4 bench/batch.lua <uri> [--quick] [--db DB] [--label L]
--                                      [--ks 1,10,100,1000] [--events N] [--paths send,relay]
--
-- send: K executions of a two-state chart, each sent R events (rounds of
-- one event per execution: a send_many of K, or K sends). relay: a source
-- emits one event to each of K targets, R times; the relay passes that
-- deliver them are timed. Trace off. R = N / K, N = 2,000 with --quick,
-- else 10,000 (--events overrides), so every K delivers about as many
-- events; at least 3 rounds batched (each one or two round trips), at
-- least 1 one at a time (each K of them). Each measurement runs in a database of its own
-- (<DB>_<path>_k<K>_<mode>, dropped after), so the collection holds the K
-- executions it works on and no more: on mongo-java-server, which scans the
-- collection for a {_id, version} update, that keeps a figure comparable
-- with bench/batch_limit.c's on K documents. The URI may point through
-- tools/delay-proxy. Output: a table on stderr and
-- "RESULT <label>.<path>.<mode>.k<K>.<key> <value>" lines on stdout (mode
-- one or batch, key eps or rt_per_event).
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

local function drop(uri, db)
  local d = ms.database(uri, { db = db })
  if d then
    d:command({ dropDatabase = 1 })
    d:close()
  end
end

-- events/s and round trips/event of `rounds` rounds over k executions.
local function run_send(uri, db, k, rounds, batched)
  local store = assert(ms.connect(uri, { db = db }))
  local e = engine_mod.new { store = store, charts = charts(), trace = false }
  local prefix = ms.uuid():sub(1, 8)
  for i = 1, k do assert(e:start("pp", { id = format("%s-%d", prefix, i) })) end
  local c0, t0, cpu0 = commands(store), ms.now(), os.clock()
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
  local t1, c1, cpu1 = ms.now(), commands(store), os.clock()
  store:close()
  local events = k * rounds
  return events / (t1 - t0), (c1 - c0) / events, (cpu1 - cpu0) * 1e6 / events
end

local function run_relay(uri, db, k, rounds, batched)
  local store = assert(ms.connect(uri, { db = db }))
  local e = engine_mod.new { store = store, charts = charts(), trace = false, batch = k,
                             batch_delivery = batched }
  local prefix = ms.uuid():sub(1, 8)
  for i = 1, k do assert(e:start("pp", { id = format("%s-%d", prefix, i) })) end
  assert(e:start("src", { id = prefix .. "-src", context = { k = k, prefix = prefix } }))
  local took, cmds, events, cpu = 0, 0, 0, 0
  for r = 1, rounds do
    assert(e:send(prefix .. "-src", { kind = "Fan", id = format("%s-fan-%d", prefix, r) }))
    local c0, t0, cpu0 = commands(store), ms.now(), os.clock()
    local n = 0
    while n < k do
      local got = e:relay_outbox()
      if got == 0 then error("relay: no progress") end
      n = n + got
    end
    took, cmds, events = took + ms.now() - t0, cmds + commands(store) - c0, events + n
    cpu = cpu + os.clock() - cpu0
  end
  store:close()
  return events / took, cmds / events, cpu * 1e6 / events
end

local USAGE = "usage: lua5.4 bench/batch.lua <uri> [--quick] [--db DB] [--label L] [--ks 1,10,100,1000]" ..
  " [--events N] [--paths send,relay]\n"
local uri = arg[1]
if not uri or uri:sub(1, 2) == "--" then
  io.stderr:write(USAGE)
  os.exit(2)
end
local quick, db, label, ks, events, paths = false, "mongostore_bench_batch", "batch", { 1, 10, 100, 1000 }, nil,
  { "send", "relay" }
local function list(s)
  local t = {}
  for v in s:gmatch("[^,]+") do t[#t + 1] = v end
  return t
end
local i = 2
while arg[i] do
  local a = arg[i]
  if a == "--quick" then quick = true
  elseif a == "--db" then i = i + 1; db = arg[i]
  elseif a == "--label" then i = i + 1; label = arg[i]
  elseif a == "--events" then i = i + 1; events = tonumber(arg[i])
  elseif a == "--ks" then
    i = i + 1
    ks = {}
    for _, v in ipairs(list(arg[i] or "")) do ks[#ks + 1] = math.tointeger(tonumber(v)) end
  elseif a == "--paths" then i = i + 1; paths = list(arg[i] or "")
  else
    io.stderr:write("batch.lua: unknown argument ", tostring(a), "\n", USAGE)
    os.exit(2)
  end
  i = i + 1
end
for _, k in ipairs(ks) do
  if not k or k < 1 then io.stderr:write("batch.lua: --ks takes positive integers\n") os.exit(2) end
end
for _, p in ipairs(paths) do
  if p ~= "send" and p ~= "relay" then io.stderr:write("batch.lua: --paths takes send and relay\n") os.exit(2) end
end

-- about the same number of events at every K (at least 3 rounds)
local budget = events or (quick and 2000 or 10000)
io.stderr:write(format("%-6s %6s %12s %12s %8s %12s %12s %11s %11s %13s\n", "path", "K", "one ev/s", "batch ev/s",
  "gain", "one rt/ev", "batch rt/ev", "one cpu us", "batch cpu", "events"))
for _, path in ipairs(paths) do
  for _, k in ipairs(ks) do
    local fn = path == "send" and run_send or run_relay
    local function measure(batched)
      -- a batched round is one round trip or two, so it gets at least 3; a
      -- round one event at a time is K of them, so at K = 1,000 one will do
      local rounds = math.max(batched and 3 or 1, budget // k)
      local name = format("%s_%s_k%d_%s", db, path, k, batched and "batch" or "one")
      -- a throwaway round first, in a database of its own: connections, the server's JIT
      fn(uri, name .. "_warm", math.min(k, 100), 1, batched)
      drop(uri, name .. "_warm")
      local eps, rt, cpu = fn(uri, name, k, rounds, batched)
      drop(uri, name)
      return eps, rt, cpu, k * rounds
    end
    local eps1, rt1, cpu1, n1 = measure(false)
    local epsb, rtb, cpub, nb = measure(true)
    io.stderr:write(format("%-6s %6d %12.0f %12.0f %7.2fx %12.3f %12.3f %11.1f %11.1f %6d/%6d\n", path, k, eps1, epsb,
      epsb / eps1, rt1, rtb, cpu1, cpub, n1, nb))
    for _, kv in ipairs { { "one", eps1, rt1, cpu1 }, { "batch", epsb, rtb, cpub } } do
      io.stdout:write(format("RESULT %s.%s.%s.k%d.eps %.0f\n", label, path, kv[1], k, kv[2]))
      io.stdout:write(format("RESULT %s.%s.%s.k%d.rt_per_event %.3f\n", label, path, kv[1], k, kv[3]))
      -- the client's own CPU per event: what is left of the wall time is the network and the server
      io.stdout:write(format("RESULT %s.%s.%s.k%d.cpu_us %.1f\n", label, path, kv[1], k, kv[4]))
    end
    io.stdout:flush() -- a run cut short keeps the figures it has
  end
end
