-- spec/04-ngx/answers_spec.lua - what msngx says is what happens, across
-- nginx's thread boundary: send, send_external, send_many and enqueue fill a
-- missing event id into the caller's own table (so a caller can send the same
-- event again after a timeout), and the id is the one the store keeps.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local rawdb = require "helpers.rawdb"
local H = require "helpers.ngx"

-- /_ids_probe?id=X: each call with an event that has no id; the answer
-- lists the ids the caller's tables hold afterwards, and what sending the
-- same table again answered.
local PROBE = [[
        location = /_ids_probe {
            content_by_lua_block {
                local msngx = require "mongostore.ngx"
                local core = require "mongostore.core"
                local id = ngx.var.arg_id
                local out = {}
                assert(msngx.start("refund", { id = id }))
                local sent = { kind = "Nope" }
                msngx.send(id, sent)
                out.send = sent.id or core.null
                out.send_again = core.array({ msngx.send(id, sent) })
                local ext = { kind = "Reject" }
                msngx.send_external(id, ext)
                out.send_external = ext.id or core.null
                local a, b = { kind = "Nope" }, { kind = "Nope" }
                out.send_many_results = msngx.send_many({ { id, a }, { id, b } })
                out.send_many = core.array({ a.id or core.null, b.id or core.null })
                local q = { kind = "Nope" }
                msngx.enqueue(id, q)
                out.enqueue = q.id or core.null
                out.enqueue_again = core.array({ msngx.enqueue(id, q) })
                local own = { kind = "Nope", id = "mine-1" }
                msngx.send(id, own)
                out.own = own.id
                ngx.say(core.json_encode(out))
            }
        }

]]

TestNgxAnswers = {}

function TestNgxAnswers:setUp()
  self.server = H.with_probe(PROBE, function()
    return H.start{ workers = 1, threads = 2, configure = "inbox = false," }
  end)
  self.store = assert(ms.connect(helper.uri(), { db = self.server.db, wait = 10 }))
end

function TestNgxAnswers:tearDown()
  if self.store then self.store:close() end
  if self.server then self.server:stop() end
end

local function is_id(v) return type(v) == "string" and #v > 0 end

function TestNgxAnswers:test_a_missing_event_id_is_filled_into_the_callers_table()
  local status, b = self.server:get("/_ids_probe?id=ids-1")
  lu.assertEquals(status, 200, tostring(b))
  lu.assertEquals(type(b), "table", tostring(b))
  for _, k in ipairs { "send", "send_external", "enqueue" } do
    lu.assertTrue(is_id(b[k]), k .. " left the caller's event without an id: " .. H.encode(b))
  end
  lu.assertTrue(is_id(b.send_many[1]) and is_id(b.send_many[2]), H.encode(b.send_many))
  lu.assertNotEquals(b.send_many[1], b.send_many[2])
  lu.assertEquals(b.own, "mine-1")
  -- the ids the callers hold are the ones the store keeps
  for _, eid in ipairs { b.send, b.send_external, b.send_many[1], b.send_many[2], "mine-1" } do
    lu.assertTrue(self.store:is_processed("ids-1", eid), eid .. " is not the id the execution handled")
  end
  for _, r in ipairs(b.send_many_results) do lu.assertTrue(r.ok, H.encode(r)) end
  -- so the same table sent again is a duplicate, not a second event
  lu.assertEquals(b.send_again[1], true)
  lu.assertEquals(b.send_again[2], "duplicate")
  lu.assertEquals(b.enqueue_again, { true, "duplicate" })
  local entry = rawdb.doc(self.server.db, b.enqueue, "inbox")
  lu.assertEquals(type(entry), "table", "no inbox entry under the caller's id " .. b.enqueue)
  lu.assertEquals(entry.execution_id, "ids-1")
  lu.assertEquals(self.server:errors(), {})
end
