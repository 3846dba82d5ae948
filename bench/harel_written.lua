-- bench/harel_written.lua - what the promotion pass (store.lua,
-- _promote_foreign) costs on a store with a prefix: N executions written by
-- mongostore, then K of them given the `$set` of version that harel's
-- MongoStore.commit sends (int32, through pymongo). Prints the median ms of
-- due_timers with nothing to promote, and of the pass that promotes K.
-- usage: MONGOSTORE_URI=... lua bench/harel_written.lua [N] [K]
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "./?.so;" .. package.cpath
local ms = require "mongostore"

local uri = assert(os.getenv("MONGOSTORE_URI"), "MONGOSTORE_URI is not set")
local N, K = tonumber(arg[1] or "") or 10000, tonumber(arg[2] or "") or 100
local db = "bench_hw_" .. ms.uuid():sub(1, 8)
local store = assert(ms.connect(uri, { db = db, prefix = "harel", wait = 10 }))
for i = 1, N do
  assert(store:save(ms.execution { id = string.format("e-%07d", i), definition_id = "b", status = "RUNNING" }))
end

local function median(f, reps)
  local t = {}
  for i = 1, reps do
    local t0 = ms.now(); f(); t[i] = (ms.now() - t0) * 1000
  end
  table.sort(t)
  return t[(reps + 1) // 2]
end

local idle = median(function() assert(store:due_timers(ms.now())) end, 5)
local py = os.getenv("MONGOSTORE_PYTHON") or "python3"
local flips = {}
for i = 1, K do flips[i] = string.format("e-%07d", i * (N // K)) end
local cmd = string.format([==[%s -c 'import sys, pymongo
c = pymongo.MongoClient(sys.argv[1]); e = c[sys.argv[2]]["harel_executions"]
for i in sys.argv[3:]: e.update_one({"_id": i}, {"$set": {"version": 2}})' %s %s %s]==], py, uri, db,
  table.concat(flips, " "))
-- the pass alone, timed without the python run
assert(os.execute(cmd))
local t0 = ms.now()
local promoted = assert(store:_promote_foreign())
assert(promoted == K, "promoted " .. tostring(promoted))
local pass = (ms.now() - t0) * 1000
local after = median(function() assert(store:due_timers(ms.now())) end, 5)
print(string.format("harel_written: %d executions: due_timers %.1f ms (nothing to promote); promoting %d: %.1f ms;"
  .. " due_timers after: %.1f ms", N, idle, K, pass, after))
local d = assert(ms.database(uri, { db = db }))
d:collection("harel_executions"):drop()
d:collection("harel_counters"):drop()
store:close()
