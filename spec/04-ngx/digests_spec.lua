-- spec/04-ngx/digests_spec.lua - the dedupe digests across nginx's thread
-- boundary: a handler's msngx.load gives the execution's fields with its
-- digests, and msngx.commit of those fields refuses an event they know with
-- no command sent and commits a new one with one update, no extra find.
-- The example server gets one more location, a probe that runs the calls in
-- its nginx worker and answers what they cost (msngx.stats: the worker
-- process's pool); the relays and sweep of that worker are stopped first so
-- that only the probe's own commands count.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local H = require "helpers.ngx"
local raw = require "helpers.rawdb"

local PROBE = [[
        location = /_digests_probe {
            content_by_lua_block {
                local msngx = require "mongostore.ngx"
                local core = require "mongostore.core"
                local function diff(a, b)
                    local d = {}
                    for k, v in pairs(b) do
                        if k ~= "reply_bytes" and v ~= (a[k] or 0) then d[k] = v - (a[k] or 0) end
                    end
                    return d
                end
                msngx.stop_worker()
                -- quiet once two counts 0.2 s apart agree (a step in flight finishes)
                local last = msngx.stats()
                for _ = 1, 50 do
                    ngx.sleep(0.2)
                    local now = msngx.stats()
                    if now.total == last.total then break end
                    last = now
                end
                local id = ngx.var.arg_id
                local fields = msngx.load(id)
                local s0 = msngx.stats()
                local _, dmsg, dcode = msngx.commit(fields, { processed_event_id = "evt-1" })
                local s1 = msngx.stats()
                local ok, version = msngx.commit(fields, { processed_event_id = "evt-2" })
                local s2 = msngx.stats()
                ngx.say(core.json_encode{ dedupe = fields.dedupe, dup_msg = dmsg, dup_code = dcode,
                                          dup_cost = diff(s0, s1), ok = ok, version = version,
                                          commit_cost = diff(s1, s2) })
            }
        }

]]

TestNgxDigests = {}

function TestNgxDigests:setUp()
  self.server = H.with_probe(PROBE, function() return H.start{ workers = 1, threads = 2 } end)
  self.store = assert(ms.connect(helper.uri(), { db = self.server.db, wait = 10 }))
end

function TestNgxDigests:tearDown()
  if self.store then self.store:close() end
  if self.server then self.server:stop() end
end

function TestNgxDigests:test_committed_fields_carry_their_digests_across_the_thread_boundary()
  lu.assertTrue(self.store:save(ms.execution{ definition_id = "probe", id = "n-1" }))
  local exe = assert(self.store:load("n-1"))
  lu.assertTrue(self.store:commit(exe, { processed_event_id = "evt-1" }))
  local status, body = self.server:get("/_digests_probe?id=n-1")
  lu.assertEquals(status, 200, tostring(body))
  lu.assertEquals(type(body), "table", tostring(body))
  lu.assertStrMatches(body.dedupe, "^2:%x+$")
  -- the event the fields know: refused before anything is sent
  lu.assertEquals(body.dup_code, "duplicate")
  lu.assertStrContains(body.dup_msg, "evt-1")
  lu.assertEquals(body.dup_cost, {})
  -- a new one: one update, no find for the digests
  lu.assertTrue(body.ok)
  lu.assertEquals(body.version, 3)
  lu.assertEquals(body.commit_cost, { update = 1, total = 1 })
  lu.assertTrue(self.store:is_processed("n-1", "evt-1"))
  lu.assertTrue(self.store:is_processed("n-1", "evt-2"))
  lu.assertEquals(#raw.doc(self.server.db, "n-1").dedupe.binary, 2 * 8, "no digest was lost")
  lu.assertEquals(self.server:errors(), {})
end
