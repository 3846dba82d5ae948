-- spec/04-ngx/silent_server_spec.lua - the OpenResty example in front of a
-- MongoDB that accepted its connections and then stops answering
-- (tools/fault-proxy's black hole: every request swallowed, the connections
-- left open): a request gets its 503 after about configure's socket_timeout
-- (socketTimeoutMS in the URI), not libmongoc's 5 minutes, and requests
-- succeed again once the server answers. The times are printed; the only
-- bound asserted is an order of magnitude. The timeout goes into the URI only
-- where the URI sets none.
local lu = require "luaunit"
local helper = require "helpers"
local H = require "helpers.ngx"

local SOCKET_TIMEOUT = 1
-- a retryable read or write is tried twice, each after a selection (2 s)
local BOUND = 5 * (2 * SOCKET_TIMEOUT + 2)

local server, proxy

TestSilentServer = {}

function TestSilentServer.setupClass()
  H.check_prerequisites()
  local F = require "helpers.faults"
  proxy = F.start_proxy(helper.uri())
  server = H.start{ workers = 1, threads = 2, uri = proxy.uri(),
                    configure = "socket_timeout = " .. SOCKET_TIMEOUT .. "," }
end

function TestSilentServer.teardownClass()
  if proxy then pcall(proxy.set, {}) end
  if server then pcall(server.stop, server) end
  if proxy then pcall(proxy.stop) end
  server, proxy = nil, nil
end

local function timed(method, path, body) return server:timed(method, path, body) end

local function assert_unreachable(status, body, t, what)
  lu.assertEquals(status, 503, what .. ": " .. H.encode({ body }))
  lu.assertIsTable(body, what)
  lu.assertStrContains(body.error, "MongoDB is not reachable", false, what)
  lu.assertTrue(body.code == "timeout" or body.code == "network" or body.code == "unavailable",
    what .. ": code " .. tostring(body.code))
  lu.assertTrue(t < BOUND, string.format("%s took %.1f s, more than %d s", what, t, BOUND))
end

function TestSilentServer:test_a_silent_server_answers_503_after_about_socket_timeout()
  local status, body = server:post("/executions", { chart = "order", id = "silent-1", context = { total = 5 } })
  lu.assertEquals(status, 201, H.encode({ body }))
  -- both thread VMs have their store and a pooled connection
  for _, r in ipairs((server:parallel({ { "GET", "/executions/silent-1" }, { "GET", "/executions/silent-1" },
                                        { "GET", "/executions/silent-1" }, { "GET", "/executions/silent-1" } }))) do
    lu.assertEquals(r.status, 200, r.body)
  end
  proxy.set{ blackhole = 1 }
  local t
  status, body, t = timed("GET", "/executions/silent-1")
  assert_unreachable(status, body, t, "GET (a read)")
  local t_read = t
  status, body, t = timed("POST", "/executions/silent-1/events", { kind = "PlaceOrder", id = "place-s1" })
  assert_unreachable(status, body, t, "POST event (a write)")
  print(string.format("\n    silent server, socket_timeout %g s: read 503 after %.2f s, write 503 after %.2f s",
    SOCKET_TIMEOUT, t_read, t))
  lu.assertTrue((proxy.stats().blackholed_requests or 0) > 0, "the proxy swallowed nothing")
  proxy.set{}
  local ok = H.poll(function()
    local s = server:post("/executions/silent-1/events", { kind = "PlaceOrder", id = "place-s1" })
    return s == 202
  end, 30, 0.2)
  lu.assertTrue(ok ~= nil, "requests did not succeed again once the server answered")
  status, body = server:get("/executions/silent-1")
  lu.assertEquals(status, 200, H.encode({ body }))
  lu.assertEquals(body.execution.active_path, "AwaitingPayment")
end

-- socketTimeoutMS goes into the URI unless it is there; the default is 10 s.
function TestSilentServer:test_socket_timeout_added_only_where_absent()
  local msngx = require "mongostore.ngx"
  local with = msngx._with_timeouts
  lu.assertEquals(with("mongodb://h:1", 2, 10),
    "mongodb://h:1/?serverSelectionTimeoutMS=2000&connectTimeoutMS=2000&socketTimeoutMS=10000")
  lu.assertEquals(with("mongodb://h:1/db?socketTimeoutMS=500", 2, 10),
    "mongodb://h:1/db?socketTimeoutMS=500&serverSelectionTimeoutMS=2000&connectTimeoutMS=2000")
  local saved = msngx.config()
  msngx.configure{ uri = "mongodb://h:1" }
  lu.assertStrContains(msngx.config().uri, "socketTimeoutMS=10000")
  msngx.configure{ uri = "mongodb://h:1", socket_timeout = 0.5 }
  lu.assertStrContains(msngx.config().uri, "socketTimeoutMS=500")
  lu.assertErrorMsgContains("socket_timeout must be a number from 0.1 to 3600",
    msngx.configure, { uri = "mongodb://h:1", socket_timeout = 0 })
  lu.assertErrorMsgContains("socket_timeout must be a number, got string",
    msngx.configure, { uri = "mongodb://h:1", socket_timeout = "10" })
  if saved then msngx.configure(saved) end
end
