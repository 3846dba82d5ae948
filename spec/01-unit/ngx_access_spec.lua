-- spec/01-unit/ngx_access_spec.lua - mongostore.ngx_access's decisions
-- without nginx: which token reads and writes, what a write needs (a JSON
-- content type, an allowed Origin when one is sent), and that a wrong
-- configuration raises.
local lu = require "luaunit"
local access = require "mongostore.ngx_access"

local function a()
  return access.new{ read_tokens = { "r-token-1", "r2" }, write_tokens = { "w-token-1" },
                     allowed_origins = { "https://app.example" } }
end

local JSON = "application/json"

TestAccessTokens = {}

function TestAccessTokens:test_token_kinds()
  local x = a()
  lu.assertEquals(x:token_kind("r-token-1"), "read")
  lu.assertEquals(x:token_kind("r2"), "read")
  lu.assertEquals(x:token_kind("w-token-1"), "write")
  lu.assertNil(x:token_kind("w-token-"))
  lu.assertNil(x:token_kind("w-token-12"))
  lu.assertNil(x:token_kind(""))
  lu.assertNil(x:token_kind(nil))
  lu.assertNil(x:token_kind(string.rep("x", 10000)))
end

function TestAccessTokens:test_bearer_header()
  lu.assertEquals(access.bearer("Bearer abc"), "abc")
  lu.assertEquals(access.bearer("bearer abc.def-_~+/=="), "abc.def-_~+/==")
  lu.assertNil(access.bearer("Basic abc"))
  lu.assertNil(access.bearer("Bearer"))
  lu.assertNil(access.bearer("Bearer a b"))
  lu.assertNil(access.bearer(nil))
end

function TestAccessTokens:test_no_tokens_refuses_everyone()
  local x = access.from_env(function() return nil end)
  local ok, status = x:decide{ kind = "read", authorization = "Bearer anything" }
  lu.assertFalse(ok)
  lu.assertEquals(status, 401)
end

function TestAccessTokens:test_from_env_splits_lists()
  local env = { MONGOSTORE_API_READ_TOKENS = " r1 , r2,", MONGOSTORE_API_WRITE_TOKENS = "w1",
                MONGOSTORE_API_ORIGINS = "https://a.example, http://localhost:3000" }
  local x = access.from_env(function(k) return env[k] end)
  lu.assertEquals(x:token_kind("r1"), "read")
  lu.assertEquals(x:token_kind("r2"), "read")
  lu.assertEquals(x:token_kind("w1"), "write")
  lu.assertTrue(x:decide{ kind = "write", authorization = "Bearer w1", content_type = JSON,
                          origin = "http://localhost:3000" })
end

TestAccessDecide = {}

function TestAccessDecide:test_read()
  local x = a()
  lu.assertTrue(x:decide{ kind = "read", authorization = "Bearer r2" })
  lu.assertTrue(x:decide{ kind = "read", authorization = "Bearer w-token-1" })
  local ok, status, why = x:decide{ kind = "read" }
  lu.assertEquals({ ok, status, why }, { false, 401, "no bearer token" })
  ok, status, why = x:decide{ kind = "read", authorization = "Bearer nope" }
  lu.assertEquals({ ok, status, why }, { false, 401, "unknown token" })
  -- reads need neither a content type nor a known origin
  lu.assertTrue(x:decide{ kind = "read", authorization = "Bearer r2", origin = "https://evil.example" })
end

function TestAccessDecide:test_write_needs_a_write_token()
  local x = a()
  local ok, status = x:decide{ kind = "write", authorization = "Bearer r2", content_type = JSON }
  lu.assertEquals({ ok, status }, { false, 403 })
  lu.assertTrue(x:decide{ kind = "write", authorization = "Bearer w-token-1", content_type = JSON })
end

function TestAccessDecide:test_write_needs_json()
  local x = a()
  for _, ct in ipairs { "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                        "application/jsonx", "application/json; charset=latin1" } do
    local ok, status = x:decide{ kind = "write", authorization = "Bearer w-token-1", content_type = ct }
    lu.assertEquals({ ok, status }, { false, 415 }, ct)
  end
  local ok, status = x:decide{ kind = "write", authorization = "Bearer w-token-1" }
  lu.assertEquals({ ok, status }, { false, 415 })
  lu.assertTrue(x:decide{ kind = "write", authorization = "Bearer w-token-1",
                          content_type = "Application/JSON; charset=UTF-8" })
  -- a DELETE without a body needs no content type; with one it does
  lu.assertTrue(x:decide{ kind = "write", authorization = "Bearer w-token-1", method = "DELETE" })
  ok, status = x:decide{ kind = "write", authorization = "Bearer w-token-1", method = "PUT", has_body = true,
                         content_type = "text/plain" }
  lu.assertEquals({ ok, status }, { false, 415 })
end

function TestAccessDecide:test_write_origin()
  local x = a()
  local w = "Bearer w-token-1"
  lu.assertTrue(x:decide{ kind = "write", authorization = w, content_type = JSON, origin = "https://app.example" })
  lu.assertTrue(x:decide{ kind = "write", authorization = w, content_type = JSON, origin = "HTTPS://App.Example" })
  for _, o in ipairs { "https://evil.example", "null", "https://app.example.evil", "http://app.example", false } do
    local ok, status = x:decide{ kind = "write", authorization = w, content_type = JSON, origin = o }
    lu.assertEquals({ ok, status }, { false, 403 }, tostring(o))
  end
end

function TestAccessDecide:test_misuse_raises()
  lu.assertErrorMsgContains("kind must be 'read' or 'write'", a().decide, a(), { kind = "admin" })
  lu.assertErrorMsgContains("access.new: unknown option tokens", access.new, { tokens = {} })
  lu.assertErrorMsgContains("opts.read_tokens must be a table, got string", access.new, { read_tokens = "r" })
  lu.assertErrorMsgContains("read_tokens[1] must be a non-empty string", access.new, { read_tokens = { "" } })
  lu.assertErrorMsgContains("allowed_origins[1] must be scheme://host", access.new,
                            { allowed_origins = { "app.example" } })
end

function TestAccessDecide:test_refusal_bodies_say_nothing_more()
  for status, body in pairs(access.BODIES) do
    lu.assertNotStrContains(body, "token", false, status)
    lu.assertNotStrContains(body, "origin", false, status)
  end
end
