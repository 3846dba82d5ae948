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
