-- spec/03-engine/faults_spec.lua - several worker processes run a workload of
-- hop chains through the outbox, forks, timers and orders through
-- tools/fault-proxy, which resets random live connections and delays replies
-- all along, with a black hole, refused connections and a SIGSTOP/SIGCONT
-- freeze of the server in the middle: every worker survives and ends, and
-- every execution ends with each of its events applied exactly once.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local F = require "helpers.faults"

local WORKERS = 4
local PARAMS = { hops = 12, ring = 20, forks = 8, orders = 8, timed = 6, pokes = 10, delay = 0 }
if os.getenv("MONGOSTORE_TEST_SERVER") == "secantus" then
  -- every reconnect costs more there: half the work keeps the run near a minute
  PARAMS = { hops = 10, ring = 12, forks = 5, orders = 5, timed = 4, pokes = 6, delay = 0 }
end
-- short timeouts, as the README asks of a worker: a frozen server costs a
-- timeout, not a five-minute hang
local URI_OPTS = "socketTimeoutMS=1500&serverSelectionTimeoutMS=2000&connectTimeoutMS=1000"

TestFaults = {}

function TestFaults:setUp()
  -- a private server: its PID is ours to freeze, and no other spec shares it
  self.server = assert(F.start_server())
  self.proxy = F.start_proxy(self.server.uri, os.getenv("FAULT_SEED"))
end

function TestFaults:tearDown()
  if self.proxy then self.proxy.stop() end
  if self.server then self.server.stop() end
end

local function with(t, more)
  local out = {}
  for k, v in pairs(t) do out[k] = v end
  for k, v in pairs(more) do out[k] = v end
  return out
end

local function alive_count(workers)
  local n = 0
  for _, h in ipairs(workers) do if not h.done() then n = n + 1 end end
  return n
end

function TestFaults:test_workers_survive_resets_delays_black_hole_refusals_and_a_server_freeze()
  local proxy, server = self.proxy, self.server
  local db = helper.fresh_db("faults")
  -- lose_rate: a write reaches the server and its reply is lost (applied,
  -- never answered); drop_rate: a write is reset before it gets there
  local faults = { reset_rate = 4, delay_ms = 2, jitter_ms = 8, lose_rate = 0.02, drop_rate = 0.01 }
  -- FAULTS="reset_rate=20,lose_rate=0.1" makes a harsher run by hand
  for k, v in (os.getenv("FAULTS") or ""):gmatch("([%w_]+)=([^,]+)") do faults[k] = tonumber(v) end
  proxy.set(faults)
  local t0 = ms.now()
  local workers = {}
  for w = 0, WORKERS - 1 do
    workers[#workers + 1] = F.spawn_worker({ URI = proxy.uri(URI_OPTS), DB = db, W = w, NW = WORKERS, DUP = "1",
                                             PARAMS = F.params_env(PARAMS), DEADLINE = 75 }, 85)
  end
  for _, h in ipairs(workers) do lu.assertNotNil(h.pid(), "a worker never started") end

  -- the middle of the run: a freeze, a black hole, a refusal window
  ms.sleep(1.5)
  local busy_at_freeze = alive_count(workers)
  lu.assertTrue(server.freeze(), "kill -STOP the server")
  ms.sleep(3)
  lu.assertTrue(server.thaw(), "kill -CONT the server")
  ms.sleep(1)
  proxy.set(with(faults, { blackhole_for = 1 }))
  ms.sleep(2)
  proxy.set(with(faults, { refuse = 1 }))
  ms.sleep(1)
  local busy_after = alive_count(workers)
  proxy.set(faults)

  local errors, logs, crashed, samples = {}, 0, {}, {}
  for i, h in ipairs(workers) do
    local out, status = h.wait()
    local s = F.summary(out)
    if status ~= 0 or not out:find("IDLE", 1, true) or not s then
      crashed[#crashed + 1] = string.format("worker %d exited %s:\n%s", i - 1, tostring(status), out)
    end
    if s then
      for k, n in pairs(s.errors) do errors[k] = (errors[k] or 0) + n end
      logs = logs + s.logs
    end
    for line in out:gmatch("ERRMSG ([^\n]*)") do samples[#samples + 1] = line end
  end
  local elapsed = ms.now() - t0
  local stats = proxy.stats()
  proxy.stop()
  local snap = F.snapshot_via(server.uri, db)
  local diffs, applied = F.differences(snap, PARAMS)
  local parts = {}
  for k, n in pairs(errors) do parts[#parts + 1] = k .. "=" .. n end
  table.sort(parts)
  print(string.format(
    "FIGURES faults: workers=%d executions=%d events_applied=%d resets=%d (random %d, all %d) "
    .. "writes_reply_lost=%d writes_dropped=%d "
    .. "blackholed_requests=%d connections=%d requests=%d errors_returned{%s} logged=%d "
    .. "busy_at_freeze=%d busy_after_faults=%d differences=%d run=%.1fs",
    WORKERS, F.count(snap), applied, (stats.resets_random or 0) + (stats.resets_all or 0),
    stats.resets_random or 0, stats.resets_all or 0, stats.replies_lost or 0, stats.writes_dropped or 0,
    stats.blackholed_requests or 0, stats.accepted or 0,
    stats.requests or 0, table.concat(parts, ","), logs, busy_at_freeze, busy_after, #diffs, elapsed))
  for _, line in ipairs(samples) do print("  returned: " .. line) end
  lu.assertEquals(crashed, {}, "every worker survives the faults and ends idle")
  lu.assertEquals(diffs, {}, "every execution ends exactly as expected, each event applied once")
  lu.assertTrue(busy_at_freeze > 0, "the workers had finished before the freeze: the test proves nothing")
  lu.assertTrue((stats.resets_random or 0) > 0, "the proxy reset no connection: the test proves nothing")
  lu.assertTrue((stats.replies_lost or 0) > 0, "no write lost its reply: the test proves nothing")
end
