-- spec/04-ngx/load_spec.lua - the OpenResty example under concurrent load:
-- 200 starts at once, then 200 events, 100 reads and 20 lists at once, all
-- of which must succeed, while a /ping loop keeps asking. /ping never touches
-- MongoDB, so its latency shows whether the event loop stays free while store
-- calls are in flight on the thread pool. The figures are printed (idle,
-- during each batch, and while the worker's relays drain what the batch
-- queued); only failures are asserted, since timing on a shared machine is
-- no contract.
local lu = require "luaunit"
local ms = require "mongostore"
local H = require "helpers.ngx"

local N = 200

local server

local function srv()
  if not server then server = H.start{ workers = 2, threads = 8 } end
  return server
end

local function id_of(i) return string.format("load-%03d", i) end

-- "" when every result has status `want`, else a summary by status with an
-- example body each.
local function failures(results, want, what)
  local by, order, bad = {}, {}, 0
  for _, r in ipairs(results) do
    if r.status ~= want then
      bad = bad + 1
      local b = by[r.status]
      if not b then
        b = { n = 0, example = (r.body or ""):gsub("%s+$", ""):sub(1, 200) }
        by[r.status] = b
        order[#order + 1] = r.status
      end
      b.n = b.n + 1
    end
  end
  local out = {}
  for _, st in ipairs(order) do
    out[#out + 1] = string.format("%d x %d (e.g. %s)", by[st].n, st, by[st].example)
  end
  if #out == 0 then return "" end
  return string.format("%s: %d of %d not %d: %s", what, bad, #results, want, table.concat(out, "; "))
end

local function times(results)
  local t = {}
  for i, r in ipairs(results) do t[i] = r.time end
  return t
end

local function figure(label, st)
  return string.format("  %-34s n=%-4d median %-9s p95 %-9s max %s", label, st.n, H.ms(st.median), H.ms(st.p95),
    H.ms(st.max))
end

-- Runs fn while a /ping loop runs; returns fn's results and the pings.
local function with_pings(s, fn, settle)
  local p = s:pinger()
  ms.sleep(0.1)
  local a, b = fn()
  if settle then ms.sleep(settle) end
  return a, b, p.stop()
end

TestLoad = {}

function TestLoad:tearDown()
  if server then lu.assertEquals(server:errors(), {}) end
end

function TestLoad.teardownClass()
  if server then
    pcall(server.stop, server)
    server = nil
  end
end

function TestLoad:test_concurrent_requests_while_ping_answers()
  local s = srv()

  -- /ping when nothing else happens, for comparison
  local _, _, idle = with_pings(s, function() ms.sleep(1) end)

  -- 1: N orders started at once
  local starts = {}
  for i = 1, N do
    starts[i] = { "POST", "/executions", { chart = "order", id = id_of(i), context = { total = i, payment_timeout = 600 } } }
  end
  local started, wall1, pings1 = with_pings(s, function() return s:parallel(starts, N) end)

  -- 2: an event to each, a read of half of them and some lists, at once
  local mixed = {}
  for i = 1, N do
    mixed[#mixed + 1] = { "POST", "/executions/" .. id_of(i) .. "/events", { kind = "PlaceOrder", id = "place-" .. i } }
  end
  for i = 1, N, 2 do mixed[#mixed + 1] = { "GET", "/executions/" .. id_of(i) } end
  for _ = 1, 20 do mixed[#mixed + 1] = { "GET", "/executions?definition_id=order&limit=50" } end
  local answered, wall2, pings2 = with_pings(s, function() return s:parallel(mixed, #mixed) end)

  -- 3: nothing but /ping while the worker's relays take the N Charge events
  -- the PlaceOrders queued (direct calls from an ngx timer)
  local _, _, pings3 = with_pings(s, function() ms.sleep(1.5) end)

  local events, reads = {}, {}
  for i, r in ipairs(answered) do
    if mixed[i][1] == "POST" then events[#events + 1] = r else reads[#reads + 1] = r end
  end

  local all = {}
  for _, r in ipairs(started) do all[#all + 1] = r.time end
  for _, r in ipairs(answered) do all[#all + 1] = r.time end
  print("")
  print(string.format("  %d starts at once: %.2f s; %d events + %d reads at once: %.2f s (2 nginx workers, 8 threads each)",
    N, wall1, #events, #reads, wall2))
  print(figure("request latency, both batches", H.stats(all)))
  print(figure("/ping idle", H.stats(times(idle))))
  print(figure("/ping during the starts", H.stats(times(pings1))))
  print(figure("/ping during events and reads", H.stats(times(pings2))))
  print(figure("/ping while the relays drain", H.stats(times(pings3))))

  -- every request succeeded
  lu.assertEquals(failures(started, 201, "starts"), "")
  lu.assertEquals(#events, N)
  lu.assertEquals(failures(events, 202, "events"), "")
  lu.assertEquals(failures(reads, 200, "reads and lists"), "")
  -- and so did every ping
  for _, p in ipairs { idle, pings1, pings2, pings3 } do
    lu.assertTrue(#p > 0, "a phase had no ping answered")
    lu.assertEquals(failures(p, 200, "pings"), "")
  end

  -- every order took its event exactly once
  local status, page, _, raw = s:get("/executions?definition_id=order&status=RUNNING&limit=1000")
  lu.assertEquals(status, 200, raw)
  lu.assertEquals(#page.items, N)
  for _, item in ipairs(page.items) do
    lu.assertEquals(item.active_path, "AwaitingPayment", item.id)
    lu.assertEquals(item.version, 2, item.id)
  end
end
