-- spec/05-secantus/concurrent_start_spec.lua - several processes start the same
-- executions at the same instant (as the workers of a restarted deployment
-- do): every start succeeds, each execution exists once with one Start step.
-- Runs on every server; on SecantusDB the counters' upserts really race
-- (its findAndModify answers value: null to a racing upsert it applied).
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"

local PROCS, IDS = 3, 10

local STARTER = [[
  local ms = require "mongostore"
  local C = require "fixtures.charts"
  local store = C.store(os.getenv("DB"))
  local engine = C.engine(store)
  local start = tonumber(os.getenv("START"))
  for i = 1, tonumber(os.getenv("IDS")) do
    local id = "s-" .. i
    -- every process at the same moment, id after id
    local at = start + (i - 1) * 0.25
    while ms.now() < at do ms.sleep(0.002) end
    local got, err, code = engine:start("flat", { id = id })
    print(string.format("START %s %s %s %s", id, tostring(got), tostring(code), tostring(err)))
  end
  store:close()
]]

TestConcurrentStart = {}

function TestConcurrentStart:test_the_same_starts_from_several_processes_at_once_all_succeed()
  local db = helper.fresh_db("cstart")
  local start = string.format("%.6f", ms.now() + 1.0)
  local procs = {}
  for p = 1, PROCS do
    procs[p] = helper.spawn(STARTER, { DB = db, START = start, IDS = IDS, MONGOSTORE_TEST_URI = helper.uri() })
  end
  local failures = {}
  for p = 1, PROCS do
    local out, status = procs[p].wait()
    lu.assertEquals(status, 0, out)
    local n = 0
    for id, got, code, err in out:gmatch("START (%S+) (%S+) (%S+) ([^\n]*)") do
      n = n + 1
      if got ~= id then failures[#failures + 1] = string.format("process %d: start %s: %s (%s)", p, id, err, code) end
    end
    lu.assertEquals(n, IDS, out)
  end
  local store = helper.connect { db = db }
  for i = 1, IDS do
    local exe = assert(store:load("s-" .. i))
    lu.assertEquals(exe.version, 1, "s-" .. i .. " started more than once")
    lu.assertEquals(#assert(store:read_trace("s-" .. i)), 1)
  end
  store:close()
  lu.assertEquals(failures, {}, "a start of the same id from several processes at once failed")
end
