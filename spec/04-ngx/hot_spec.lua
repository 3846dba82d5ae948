-- spec/04-ngx/hot_spec.lua - a hot execution in real nginx: 64 requests at
-- once sending to one execution queue per execution id in the nginx worker
-- (mongostore.ngx runs the calls that commit to an execution one at a time
-- per id), so each event costs exactly one commit, none is retried against
-- its neighbours and none is answered 409; every event is applied once.
local lu = require "luaunit"
local helper = require "helpers"
local H = require "helpers.ngx"
local ms = require "mongostore"

local STATS = [[
        location = /_stats {
            content_by_lua_block {
                local core = require "mongostore.core"
                ngx.say(core.json_encode(require("mongostore.ngx").stats()))
            }
        }
]]

TestNgxHot = {}

function TestNgxHot:setUp()
  self.server = H.start{ workers = 1, threads = 8, locations = STATS }
  self.store = assert(ms.connect(helper.uri(), { db = self.server.db, wait = 10 }))
end

function TestNgxHot:tearDown()
  if self.store then self.store:close() end
  if self.server then self.server:stop() end
end

local function stats(s)
  local status, body = s:get("/_stats")
  lu.assertEquals(status, 200, tostring(body))
  return body
end

function TestNgxHot:test_64_requests_on_one_execution_queue_and_commit_once_each()
  local s = self.server
  lu.assertEquals((s:post("/executions", { chart = "order", id = "hot-1", context = { total = 30 } })), 201)
  local reqs = {}
  for i = 1, 64 do
    -- Paid without an amount: the guard says no, and the event is still one commit
    reqs[i] = { "POST", "/executions/hot-1/events", { kind = "Paid", data = {}, id = "h-" .. i } }
  end
  local before = stats(s)
  local res = s:parallel(reqs, 64)
  local after = stats(s)
  local codes = {}
  for _, r in ipairs(res) do codes[r.status] = (codes[r.status] or 0) + 1 end
  lu.assertEquals(codes, { [202] = 64 })
  lu.assertEquals(assert(self.store:load("hot-1")).version, 1 + 64, "each event applied once")
  -- one update per event: no commit was retried after a conflict
  lu.assertEquals((after.update or 0) - (before.update or 0), 64)
  lu.assertEquals(s:errors(), {})
end

-- Another process keeps committing to the execution while 64 requests send to
-- it through two nginx workers, and each send has one attempt (max_conflicts
-- = 1): a send that loses its version check is not answered 409 but queued in
-- the inbox under its own id, and the worker's inbox pass applies it; every
-- event is applied once.
local HAMMER = [[
local ms = require "mongostore"
local s = assert(ms.connect(%q, { db = %q, wait = 10 }))
local n, t0 = 0, ms.now()
while ms.now() - t0 < %f do
  local exe = assert(s:load("hot-2"))
  if s:commit(exe) then n = n + 1 end
end
print("COMMITS " .. n)
]]

function TestNgxHot:test_a_send_that_loses_every_retry_is_queued_not_refused()
  self.server:stop()
  self.server = H.start{ workers = 2, threads = 8, configure = "max_conflicts = 1," }
  local s = self.server
  self.store:close()
  self.store = assert(ms.connect(helper.uri(), { db = s.db, wait = 10 }))
  lu.assertEquals((s:post("/executions", { chart = "order", id = "hot-2", context = { total = 30 } })), 201)
  local hammer = helper.spawn(string.format(HAMMER, helper.uri(), s.db, 4.0))
  os.execute("sleep 0.5")
  local reqs = {}
  for i = 1, 64 do reqs[i] = { "POST", "/executions/hot-2/events", { kind = "Paid", data = {}, id = "q-" .. i } } end
  local res = s:parallel(reqs, 64)
  local out = hammer.wait()
  local commits = tonumber(out:match("COMMITS (%d+)"))
  lu.assertNotNil(commits, out)
  local codes, queued = {}, 0
  for _, r in ipairs(res) do
    codes[r.status] = (codes[r.status] or 0) + 1
    local okd, b = pcall(H.decode, r.body)
    if okd and type(b) == "table" and b.outcome == "queued" then queued = queued + 1 end
  end
  lu.assertEquals(codes, { [202] = 64 }, "no 409: a send that lost is queued")
  lu.assertTrue(queued >= 1, "some sends lost to the other process's commits and were queued")
  -- the inbox pass applies the queued ones: every event once
  local want = 1 + 64 + commits
  local version = H.poll(function()
    local exe = self.store:load("hot-2")
    return exe and exe.version >= want and exe.version or nil
  end, 30)
  lu.assertEquals(version, want, "each event applied once, and each of the other process's commits")
  for i = 1, 64 do lu.assertTrue(self.store:is_processed("hot-2", "q-" .. i), "q-" .. i .. " applied") end
  lu.assertEquals(s:errors(), {})
end
