-- spec/03-engine/crash_runs_spec.lua - the same deterministic workload (hop
-- chains through the outbox, forks, a timer, orders with external events,
-- counters) run twice by three worker processes: once undisturbed, once with
-- workers killed by SIGKILL at random points dozens of times and restarted,
-- then a final recover. Every execution and child ends in the same state
-- (status, outcome, active_path, context, version) in both runs.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local F = require "helpers.faults"

local WORKERS = 3
-- each Hop step sleeps `delay` in its action, so a run lasts long enough to
-- be killed many times, often between a load and its commit
local PARAMS = { hops = 12, ring = 16, forks = 6, orders = 6, timed = 4, pokes = 8, delay = 0.08 }
local KILLS = tonumber(os.getenv("CRASH_KILLS") or "40")
local BUDGET = 60 -- seconds of killing at most

local function spawn(db, w, mode)
  return F.spawn_worker({ URI = helper.uri(), DB = db, W = w, NW = WORKERS, DUP = "1", MODE = mode or "run",
                          PARAMS = F.params_env(PARAMS), DEADLINE = 80 }, 90)
end

-- Runs the workload to the end; with kill = true, kills workers at random
-- points until KILLS kills or BUDGET seconds, restarting each one.
local function run(db, kill)
  local t0 = ms.now()
  local workers, outs, bad = {}, {}, {}
  for w = 0, WORKERS - 1 do workers[w] = spawn(db, w) end
  local kills, restarts = 0, 0
  local function reap(w, expect_killed)
    local out, status = workers[w].wait()
    outs[#outs + 1] = out
    if not expect_killed and (status ~= 0 or not out:find("IDLE", 1, true)) then
      bad[#bad + 1] = string.format("worker %d exited %s:\n%s", w, tostring(status), out)
    end
  end
  if kill then
    while kills < KILLS and ms.now() - t0 < BUDGET do
      ms.sleep(0.05 + math.random() * 0.5)
      local w = math.random(0, WORKERS - 1)
      local h = workers[w]
      if not h.done() then
        local pid = h.pid()
        if pid and os.execute("kill -9 " .. pid .. " 2>/dev/null") then
          -- it may have finished just before the signal: then it was not killed
          local out, status = h.wait()
          if status ~= 0 then
            kills = kills + 1
          else
            outs[#outs + 1] = out
          end
          workers[w] = spawn(db, w)
          restarts = restarts + 1
        end
      else
        local all_done = true
        for i = 0, WORKERS - 1 do if not workers[i].done() then all_done = false end end
        if all_done then break end
      end
    end
  end
  for w = 0, WORKERS - 1 do reap(w, false) end
  -- the final recover, as a restarted process would run it
  local rec = spawn(db, 0, "recover")
  local out, status = rec.wait()
  if status ~= 0 or not out:find("IDLE", 1, true) then bad[#bad + 1] = "recover exited " .. tostring(status) .. ":\n" .. out end
  outs[#outs + 1] = out
  return { kills = kills, restarts = restarts, bad = bad, time = ms.now() - t0 }
end

local function deep_equal(a, b)
  if type(a) ~= "table" or type(b) ~= "table" then return a == b end
  for k, v in pairs(a) do if not deep_equal(v, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end

local function state_of(s)
  return { status = s.status, outcome = s.outcome, active_path = s.active_path, version = s.version,
           context = s.context }
end

TestCrashRuns = {}

function TestCrashRuns:test_final_states_after_many_kills_equal_those_of_a_run_without_kills()
  local seed = tonumber(os.getenv("FAULT_SEED") or "") or os.time()
  math.randomseed(seed)
  local calm_db, killed_db = helper.fresh_db("calm"), helper.fresh_db("killed")
  local calm = run(calm_db, false)
  lu.assertEquals(calm.bad, {}, "the undisturbed run")
  local killed = run(killed_db, true)

  local calm_snap, killed_snap = F.snapshot(calm_db), F.snapshot(killed_db)
  local calm_diffs, applied = F.differences(calm_snap, PARAMS)
  local killed_diffs, applied_killed = F.differences(killed_snap, PARAMS)
  local unequal = {}
  for id, s in pairs(calm_snap) do
    local k = killed_snap[id]
    if not k then
      unequal[#unequal + 1] = id .. ": missing after the kills"
    elseif not deep_equal(state_of(s), state_of(k)) then
      unequal[#unequal + 1] = string.format("%s: %s after the kills, %s without", id,
        ms.json.encode(state_of(k)), ms.json.encode(state_of(s)))
    end
  end
  for id in pairs(killed_snap) do
    if not calm_snap[id] then unequal[#unequal + 1] = id .. ": only after the kills" end
  end
  table.sort(unequal)
  print(string.format("FIGURES crash runs: seed=%d workers=%d executions=%d events_applied=%d/%d kills=%d "
    .. "restarts=%d differences=%d run_without_kills=%.1fs run_with_kills=%.1fs",
    seed, WORKERS, F.count(killed_snap), applied_killed, applied, killed.kills, killed.restarts,
    #unequal + #killed_diffs, calm.time, killed.time))

  lu.assertEquals(calm_diffs, {}, "the run without kills ends as expected")
  lu.assertEquals(killed.bad, {}, "every restarted worker ends idle")
  lu.assertEquals(killed_diffs, {}, "after the kills every event is applied once")
  lu.assertEquals(unequal, {}, "the final states equal those of the run without kills")
  lu.assertTrue(killed.kills >= math.min(KILLS, 10), "too few kills landed: the test proves little")
  local raw = require "helpers.rawdb"
  raw.drop(calm_db)
  raw.drop(killed_db)
end
