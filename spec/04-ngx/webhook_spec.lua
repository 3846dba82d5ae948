-- spec/04-ngx/webhook_spec.lua - signed webhooks from the nginx event loop
-- (mongostore.webhook over mongostore.ngx_http's cosocket client), against
-- real nginx locations that stand in for the receiver: each POST carries the
-- event as JSON, its id as the idempotency key and an HMAC-SHA256 signature
-- the receiver verifies; a 2xx is delivered, a 5xx, a refused connection, a
-- silent server past the timeout and a certificate that is not trusted are
-- failures; TLS is verified against lua_ssl_trusted_certificate. The client
-- reads Content-Length, chunked and close-delimited answers.
local lu = require "luaunit"
local helper = require "helpers"
local H = require "helpers.ngx"

local SECRET = "a-secret-of-more-than-16-bytes"

-- A CA, a server certificate it signs for 127.0.0.1, and one self-signed
-- certificate nobody trusts.
local function make_certs(dir)
  local function sh(cmd)
    local ok = os.execute(cmd .. " >/dev/null 2>&1")
    assert(ok, "failed: " .. cmd)
  end
  sh(string.format("cd %s && openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 "
    .. "-subj /CN=mongostore-test-ca", dir))
  sh(string.format("cd %s && openssl req -newkey rsa:2048 -nodes -keyout srv.key -out srv.csr -subj /CN=127.0.0.1",
    dir))
  local ext = io.open(dir .. "/san.ext", "w")
  ext:write("subjectAltName=IP:127.0.0.1,DNS:127.0.0.1\n")
  ext:close()
  sh(string.format("cd %s && openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out srv.pem "
    .. "-days 2 -extfile san.ext", dir))
  sh(string.format("cd %s && openssl req -x509 -newkey rsa:2048 -nodes -keyout self.key -out self.pem -days 2 "
    .. "-subj /CN=127.0.0.1", dir))
end

-- The receiver: records what it got and answers the status the spec set.
local RECEIVER = [[
            location = /_hook {
                content_by_lua_block {
                    local webhook = require "mongostore.webhook"
                    local dict = ngx.shared.hooks
                    ngx.req.read_body()
                    local body = ngx.req.get_body_data() or ""
                    local h = ngx.req.get_headers()
                    local ok, why = webhook.verify("%s", h["x-mongostore-timestamp"], body, h["x-mongostore-signature"])
                    local n = dict:incr("n", 1, 0)
                    dict:set("body:" .. n, body)
                    dict:set("key:" .. n, h["idempotency-key"] or "")
                    dict:set("verified:" .. n, ok and "yes" or tostring(why))
                    local status = tonumber(dict:get("status") or 200)
                    if dict:get("mode") == "chunked" then
                        ngx.status = status
                        ngx.print("part one, ")
                        ngx.flush(true)
                        ngx.print("part two")
                        return
                    end
                    if dict:get("mode") == "silent" then ngx.sleep(3) end
                    ngx.status = status
                    ngx.say("thanks")
                }
            }
]]

local function probe(tls_port, self_port)
  return string.format([[
        location = /_webhook_probe {
            content_by_lua_block {
                local webhook = require "mongostore.webhook"
                local core = require "mongostore.core"
                local dict = ngx.shared.hooks
                local target = ngx.var.arg_target or "plain"
                dict:set("status", tonumber(ngx.var.arg_status or 200))
                dict:set("mode", ngx.var.arg_mode or "")
                local urls = { plain = "http://127.0.0.1:" .. ngx.var.server_port .. "/_hook",
                               tls = "https://127.0.0.1:%d/_hook",
                               untrusted = "https://127.0.0.1:%d/_hook", refused = "http://127.0.0.1:1/_hook" }
                local send = webhook.handler{ url = urls[target], secret = "%s", timeout = 1 }
                local entry = { seq = 7, source_id = "sub-1",
                                event = { id = "evt-" .. target, kind = "Charge", data = { amount = 30 } } }
                local ok, err = send(entry)
                ngx.say(core.json_encode{ ok = ok, err = err, n = dict:get("n") })
            }
        }
]], tls_port, self_port, SECRET)
end

-- What the receivers recorded, as a list.
local SEEN = [[
        location = /_hooks_seen {
            content_by_lua_block {
                local core = require "mongostore.core"
                local dict = ngx.shared.hooks
                local out = {}
                for i = 1, dict:get("n") or 0 do
                    out[i] = { body = dict:get("body:" .. i), key = dict:get("key:" .. i),
                               verified = dict:get("verified:" .. i) }
                end
                ngx.say(core.json_encode(core.array(out)))
            }
        }
]]

TestWebhook = {}

function TestWebhook.setupClass()
  H.check_prerequisites()
  local dir = (io.popen("mktemp -d /tmp/mongostore-certs.XXXXXX"):read("l"))
  make_certs(dir)
  -- nginx's workers (never root: nobody when the master is root) load the
  -- trusted CA themselves, so it must be readable by them; the keys stay
  -- the master's
  os.execute("chmod 755 " .. dir .. " && chmod 644 " .. dir .. "/ca.pem")
  TestWebhook.dir = dir
  local tls_port, self_port = H.free_port(), H.free_port()
  local receiver = RECEIVER:format(SECRET)
  local http = string.format([[
    lua_shared_dict hooks 1m;
    lua_ssl_trusted_certificate %s/ca.pem;
    lua_ssl_verify_depth 2;
    server {
        listen 127.0.0.1:%d ssl;
        ssl_certificate %s/srv.pem;
        ssl_certificate_key %s/srv.key;
%s
    }
    server {
        listen 127.0.0.1:%d ssl;
        ssl_certificate %s/self.pem;
        ssl_certificate_key %s/self.key;
%s
    }
]], dir, tls_port, dir, dir, receiver, self_port, dir, dir, receiver)
  -- the plain receiver is a location of the example's own server (the
  -- probe reads its port from ngx.var.server_port)
  local locations = receiver .. probe(tls_port, self_port) .. SEEN
  TestWebhook.server = H.start{ workers = 1, http = http, locations = locations }
end

function TestWebhook.teardownClass()
  if TestWebhook.server then TestWebhook.server:stop() end
  if TestWebhook.dir then os.execute("rm -rf " .. TestWebhook.dir) end
end

local function call(query)
  local status, body = TestWebhook.server:get("/_webhook_probe?" .. query)
  lu.assertEquals(status, 200, tostring(body))
  lu.assertEquals(type(body), "table", tostring(body))
  return body
end

local function seen()
  local status, body = TestWebhook.server:get("/_hooks_seen")
  lu.assertEquals(status, 200, tostring(body))
  return body
end

function TestWebhook:test_a_2xx_is_delivered_signed_with_the_event_id_as_its_key()
  local before = #seen()
  local b = call("target=plain")
  lu.assertEquals(b.ok, true, tostring(b.err))
  local got = call("target=plain&status=201")
  lu.assertEquals(got.ok, true, tostring(got.err))
  local all = seen()
  lu.assertEquals(#all, before + 2)
  local one = all[#all]
  lu.assertEquals(one.verified, "yes", "the receiver's webhook.verify accepted the signature")
  lu.assertEquals(one.key, "evt-plain")
  local ev = require("mongostore.core").json_decode(one.body)
  lu.assertEquals(ev.kind, "Charge")
  lu.assertEquals(ev.id, "evt-plain")
  lu.assertEquals(ev.data, { amount = 30 })
  lu.assertEquals(ev.source_id, "sub-1")
end

function TestWebhook:test_over_tls_verified_and_a_certificate_nobody_trusts_is_refused()
  local b = call("target=tls")
  lu.assertEquals(b.ok, true, tostring(b.err))
  b = call("target=untrusted")
  lu.assertNil(b.ok)
  lu.assertStrContains(b.err, "TLS handshake")
end

function TestWebhook:test_failures_are_failures()
  local b = call("target=plain&status=503")
  lu.assertNil(b.ok)
  lu.assertStrContains(b.err, "answered 503")
  b = call("target=refused")
  lu.assertNil(b.ok)
  lu.assertStrContains(b.err, "connect")
  b = call("target=plain&mode=silent")
  lu.assertNil(b.ok)
  lu.assertStrContains(b.err, "timeout")
  b = call("target=plain&mode=chunked")
  lu.assertEquals(b.ok, true, tostring(b.err))
end

-- sign and verify outside nginx: a changed body, another secret or an old
-- timestamp is refused
function TestWebhook:test_verify_refuses_what_was_not_signed_here()
  local webhook = require "mongostore.webhook"
  local now = 1000000
  local sig = webhook.sign(SECRET, now, '{"a":1}')
  lu.assertStrMatches(sig, "^sha256=%x+$")
  lu.assertEquals(#sig, 7 + 64)
  lu.assertTrue(webhook.verify(SECRET, now, '{"a":1}', sig, { now = now }))
  lu.assertEquals({ webhook.verify(SECRET, now, '{"a":2}', sig, { now = now }) }, { false, "signature mismatch" })
  lu.assertEquals({ webhook.verify("another-secret-16b", now, '{"a":1}', sig, { now = now }) },
                  { false, "signature mismatch" })
  lu.assertEquals({ webhook.verify(SECRET, now, '{"a":1}', sig, { now = now + 301 }) },
                  { false, "timestamp outside the tolerance" })
  lu.assertErrorMsgContains("secret must be a string of at least 16 bytes", webhook.handler,
                            { url = "https://x.example/", secret = "short" })
  lu.assertErrorMsgContains("url", webhook.handler, { url = "ftp://x", secret = SECRET })
  lu.assertErrorMsgContains("unknown option", webhook.handler, { url = "https://x.example/", secret = SECRET, sekret = 1 })
  local _ = helper
end

function TestWebhook:test_nginx_logged_nothing_unexpected()
  lu.assertEquals(TestWebhook.server:errors({ "certificate verify failed", "connect%(%) failed", "timed out",
                                              "SSL_do_handshake" }), {})
end
