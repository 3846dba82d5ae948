-- spec/04-ngx/answers_spec.lua - what msngx says is what happens, across
-- nginx's thread boundary: send, send_external, send_many and enqueue fill a
-- missing event id into the caller's own table (so a caller can send the same
-- event again after a timeout), and the id is the one the store keeps;
-- enqueue_external checks what send_external checks before its one insert.
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

        location = /_enqueue_external_probe {
            content_by_lua_block {
                local msngx = require "mongostore.ngx"
                local core = require "mongostore.core"
                local id = ngx.var.arg_id
                local out = {}
                local function keep(name, ...)
                  local v = { ... }
                  for i = 1, select("#", ...) do if v[i] == nil then v[i] = core.null end end
                  out[name] = core.array(v)
                end
                assert(msngx.start("refund", { id = id }))
                keep("nobody", msngx.enqueue_external("nobody", { kind = "Approve", id = "q-nobody" }))
                keep("own_event", msngx.enqueue_external(id, { kind = "Settle", id = "q-settle" }))
                keep("reserved", msngx.enqueue_external(id, { kind = "SetState", id = "q-set" }))
                keep("misspelt", msngx.enqueue_external(id, { kind = "Aprove", id = "q-typo" }))
                keep("bad_id", msngx.enqueue_external(42, { kind = "Approve", id = "q-42" }))
                keep("bad_priority", msngx.enqueue_external(id, { kind = "Approve", id = "q-p" }, { priority = 9 }))
                local ev = { kind = "Approve", data = { by = "ann" } }
                keep("queued", msngx.enqueue_external(id, ev, { priority = 2 }))
                out.queued_id = ev.id
                keep("again", msngx.enqueue_external(id, ev))
                assert(msngx.send(id, { kind = "Reject", id = "r-1" }))
                keep("handled", msngx.enqueue_external(id, { kind = "Reject", id = "r-1" }))
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

function TestNgxAnswers:test_enqueue_external_checks_what_send_external_checks()
  local db = self.server.db
  local status, b = self.server:get("/_enqueue_external_probe?id=qx-1")
  lu.assertEquals(status, 200, tostring(b))
  lu.assertEquals(type(b), "table", tostring(b))
  local null = ms.null
  lu.assertEquals(b.nobody[1], null)
  lu.assertEquals(b.nobody[3], "not_found", H.encode(b.nobody))
  for _, k in ipairs { "own_event", "reserved", "misspelt", "bad_id", "bad_priority" } do
    lu.assertEquals(b[k][1], null, k .. ": " .. H.encode(b[k]))
    lu.assertEquals(b[k][3], "invalid", k .. ": " .. H.encode(b[k]))
  end
  lu.assertStrContains(b.own_event[2], "not an event chart 'refund' takes from outside")
  lu.assertStrContains(b.misspelt[2], "Aprove")
  lu.assertEquals(b.queued, { true, "queued" })
  lu.assertEquals(b.again, { true, "duplicate" })
  lu.assertEquals(b.handled, { true, "duplicate" })
  -- the one insert, under the caller's id; nothing for the refused ones
  lu.assertEquals(rawdb.count(db, "inbox"), 1)
  local entry = rawdb.doc(db, b.queued_id, "inbox")
  lu.assertEquals(entry.execution_id, "qx-1")
  lu.assertEquals(entry.priority, 2)
  lu.assertEquals(self.store:load("nobody"), nil)
  lu.assertEquals(self.server:errors(), {})
end
