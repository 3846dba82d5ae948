-- spec/04-ngx/deliver_spec.lua - msngx.start_worker{ deliver = { url, secret } }:
-- the order chart's Charge (an external event) is POSTed as a signed webhook
-- from nginx's event loop to a receiver in the same real nginx, which
-- verifies the signature; each Charge arrives once and the outbox empties;
-- a receiver that answers 503 has the entry tried again, and it arrives once
-- the receiver takes it. Bad deliver settings raise at start_worker.
local lu = require "luaunit"
local helper = require "helpers"
local H = require "helpers.ngx"
local ms = require "mongostore"

local SECRET = "deliver-spec-secret-0123456789"

local RECEIVER = [[
        location = /_hook {
            content_by_lua_block {
                local webhook = require "mongostore.webhook"
                local dict = ngx.shared.hooks
                ngx.req.read_body()
                local body = ngx.req.get_body_data() or ""
                local h = ngx.req.get_headers()
                local refuse = dict:get("refuse") or 0
                if refuse > 0 then
                    dict:incr("refuse", -1)
                    dict:incr("refused", 1, 0)
                    ngx.status = 503
                    return ngx.say("busy")
                end
                local ok = webhook.verify("]] .. SECRET .. [[", h["x-mongostore-timestamp"], body,
                                          h["x-mongostore-signature"])
                local n = dict:incr("n", 1, 0)
                dict:set("body:" .. n, body)
                dict:set("verified:" .. n, ok and "yes" or "no")
                ngx.say("ok")
            }
        }
        location = /_hooks_seen {
            content_by_lua_block {
                local core = require "mongostore.core"
                local dict = ngx.shared.hooks
                if ngx.var.arg_refuse then dict:set("refuse", tonumber(ngx.var.arg_refuse)) end
                local out = {}
                for i = 1, dict:get("n") or 0 do
                    out[i] = { body = dict:get("body:" .. i), verified = dict:get("verified:" .. i) }
                end
                ngx.say(core.json_encode({ seen = core.array(out), refused = dict:get("refused") or 0 }))
            }
        }
]]

-- The example's config with its on_external line replaced by a deliver table.
local function with_deliver(fn)
  local render = H.render.render
  H.render.render = function(opts)
    local conf = render(opts)
    local f = assert(io.open(conf, "r"))
    local text = f:read("a")
    f:close()
    local deliver = string.format('deliver = { url = "http://127.0.0.1:%d/_hook", secret = "%s", timeout = 2 },',
      opts.port, SECRET)
    local patched, n = text:gsub("on_external = require%b()%.deliver_to%b(),", (deliver:gsub("%%", "%%%%")), 1)
    assert(n == 1, "the example config has no on_external line to replace")
    f = assert(io.open(conf, "w"))
    f:write(patched)
    f:close()
    return conf
  end
  local ok, a = pcall(fn)
  H.render.render = render
  if not ok then error(a, 0) end
  return a
end

TestDeliver = {}

function TestDeliver.setupClass()
  H.check_prerequisites()
  TestDeliver.server = with_deliver(function()
    return H.start{ workers = 2, http = "lua_shared_dict hooks 1m;", locations = RECEIVER }
  end)
  TestDeliver.store = assert(ms.connect(helper.uri(), { db = TestDeliver.server.db, wait = 10 }))
end

function TestDeliver.teardownClass()
  if TestDeliver.store then TestDeliver.store:close() end
  if TestDeliver.server then TestDeliver.server:stop() end
end

local function seen(query)
  local status, body = TestDeliver.server:get("/_hooks_seen" .. (query or ""))
  lu.assertEquals(status, 200, tostring(body))
  return body
end

local function place(id)
  local s = TestDeliver.server
  lu.assertEquals((s:post("/executions", { chart = "order", id = id, context = { total = 30 } })), 201)
  lu.assertEquals((s:post("/executions/" .. id .. "/events", { kind = "PlaceOrder", id = "po-" .. id })), 202)
end

local function charges_for(list, id)
  local n = 0
  for _, h in ipairs(list) do
    local ev = require("mongostore.core").json_decode(h.body)
    if ev.kind == "Charge" and ev.source_id == id then
      n = n + 1
      lu.assertEquals(h.verified, "yes", "the receiver verified the signature")
      lu.assertEquals(ev.data.amount, 30)
    end
  end
  return n
end

local function outbox_empty()
  return #assert(TestDeliver.store:pending_outbox()) == 0
end

function TestDeliver:test_each_charge_arrives_once_signed()
  for i = 1, 5 do place("d-" .. i) end
  local ok = H.poll(function()
    local list = seen().seen
    for i = 1, 5 do
      if charges_for(list, "d-" .. i) < 1 then return false end
    end
    return outbox_empty()
  end, 20)
  lu.assertTrue(ok, "the Charges did not all arrive")
  ms.sleep(1) -- nothing more comes
  local list = seen().seen
  for i = 1, 5 do lu.assertEquals(charges_for(list, "d-" .. i), 1, "d-" .. i) end
end

function TestDeliver:test_a_refusing_receiver_is_tried_again()
  seen("?refuse=2")
  place("r-1")
  local ok = H.poll(function() return charges_for(seen().seen, "r-1") == 1 and outbox_empty() end, 30)
  lu.assertTrue(ok, "the Charge did not arrive after the receiver took it again")
  lu.assertTrue(seen().refused >= 2)
  lu.assertEquals(TestDeliver.server:errors({ "on_external", "answered 503" }), {})
end

function TestDeliver:test_bad_deliver_settings_raise()
  local webhook = require "mongostore.webhook"
  lu.assertErrorMsgContains("secret", webhook.check, { url = "http://127.0.0.1/", secret = "short" })
  lu.assertErrorMsgContains("url", webhook.check, { url = "127.0.0.1/x", secret = SECRET })
  lu.assertErrorMsgContains("concurrency", webhook.check, { url = "http://127.0.0.1/", secret = SECRET,
                                                            concurrency = 0 })
end
