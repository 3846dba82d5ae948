-- spec/04-ngx/outcomes_spec.lua - what a call did, across nginx's thread
-- boundary: msngx.start, send, send_external, start_external and the control
-- calls answer the engine's delivery result as their third value, and
-- msngx.load_many (with its armed timers when asked) and msngx.commit_many
-- are forwarded, their executions crossing as fields (commit_many's committed
-- items answer their version), and msngx.delete_timers.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local H = require "helpers.ngx"

local PROBE = [[
        location = /_outcomes_probe {
            content_by_lua_block {
                local msngx = require "mongostore.ngx"
                local core = require "mongostore.core"
                local id = ngx.var.arg_id
                local out = {}
                local function keep(name, ...) out[name] = core.array({ ... }) end
                keep("start", msngx.start("refund", { id = id }))
                keep("start_again", msngx.start_external("refund", { id = id }))
                keep("nothing", msngx.send(id, { kind = "Nope", id = "e-nope" }))
                keep("suspend", msngx.suspend(id))
                keep("held", msngx.send_external(id, { kind = "Reject", id = "e-rej" }))
                keep("resume", msngx.resume(id))
                keep("again", msngx.send_external(id, { kind = "Reject", id = "e-rej" }))
                keep("finished", select(2, msngx.cancel(id)))
                local many = msngx.load_many({ id, "nobody" })
                out.many_ids = {}
                for k, f in pairs(many) do out.many_ids[#out.many_ids + 1] = k .. "@" .. f.version end
                local got = msngx.commit_many({ { many[id], { processed_event_id = "e-many" } } })
                out.commit_many = got
                -- with { timers = true }, each execution's armed timers cross too
                local _, armed = msngx.load_many({ id, "nobody" }, { timers = true })
                out.armed_ids = {}
                for k, t in pairs(armed) do out.armed_ids[#out.armed_ids + 1] = k .. ":" .. type(t) end
                out.delete_timers = msngx.delete_timers({ { execution_id = id, path = "Gone", fire_at = 1 } })
                ngx.say(core.json_encode(out))
            }
        }

]]

TestNgxOutcomes = {}

function TestNgxOutcomes:setUp()
  self.server = H.with_probe(PROBE, function() return H.start{ workers = 1, threads = 2 } end)
  self.store = assert(ms.connect(helper.uri(), { db = self.server.db, wait = 10 }))
end

function TestNgxOutcomes:tearDown()
  if self.store then self.store:close() end
  if self.server then self.server:stop() end
end

function TestNgxOutcomes:test_each_call_answers_what_it_did()
  local status, b = self.server:get("/_outcomes_probe?id=r-1")
  lu.assertEquals(status, 200, tostring(b))
  lu.assertEquals(type(b), "table", tostring(b))
  lu.assertEquals(b.start, { "r-1", true, { outcome = "transition", status = "RUNNING", active_path = "Requested" } })
  lu.assertEquals(b.start_again[2], false)
  lu.assertEquals(b.start_again[3].outcome, "duplicate")
  lu.assertEquals(b.nothing, { true, "applied", { outcome = "ignored", status = "RUNNING", active_path = "Requested" } })
  lu.assertEquals(b.suspend[3], { outcome = "transition", status = "SUSPENDED", active_path = "Requested" })
  lu.assertEquals(b.held[3].outcome, "held")
  lu.assertEquals(b.resume[3], { outcome = "transition", status = "DONE", active_path = "Rejected" })
  lu.assertEquals(b.again, { true, "duplicate", { outcome = "duplicate", status = "DONE", active_path = "Rejected" } })
  -- a control call on an execution that has ended: refused, nothing written
  lu.assertEquals(b.finished[2], "finished")
  lu.assertStrContains(b.finished[1], "the execution is finished (DONE)")
  local v = assert(self.store:load("r-1")).version
  lu.assertEquals(b.many_ids, { "r-1@" .. (v - 1) })
  lu.assertEquals(b.commit_many, { { ok = true, version = v } })
  lu.assertEquals(b.armed_ids, { "r-1:table" })
  lu.assertEquals(b.delete_timers, true)
  lu.assertTrue(self.store:is_processed("r-1", "e-many"))
  lu.assertEquals(self.server:errors(), {})
end
