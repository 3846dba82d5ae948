-- spec/04-ngx/no_server_spec.lua - the OpenResty example with no MongoDB to
-- reach (its URI points at a loopback port nobody listens on): requests get
-- a 503 with a JSON message that says MongoDB is not reachable, after about
-- the configured wait (2 s) rather than libmongoc's 30 s, /ping keeps
-- answering meanwhile, and a graceful stop (SIGQUIT, as `nginx -s quit`)
-- finishes by itself. The times are printed; the only bound asserted is an
-- order of magnitude (fail fast against a 30 s hang).
local lu = require "luaunit"
local ms = require "mongostore"
local H = require "helpers.ngx"

local WAIT = 2       -- the example's msngx.configure{ wait = 2 }
local BOUND = 5 * WAIT

-- A loopback port with nothing listening: bound, then closed.
local function closed_port()
  local out = H.sh("python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\", 0)); " ..
    "print(s.getsockname()[1]); s.close()'")
  return assert(tonumber(out:match("(%d+)")), "no port: " .. out)
end

local server

TestNoServer = {}

function TestNoServer.setupClass()
  server = H.start{ uri = "mongodb://127.0.0.1:" .. closed_port() }
end

function TestNoServer.teardownClass()
  if server then
    pcall(server.stop, server)
    server = nil
  end
end

local function timed(method, path, body) return server:timed(method, path, body) end

local function assert_unreachable(status, body, what)
  lu.assertEquals(status, 503, what .. ": " .. H.encode({ body }))
  lu.assertIsTable(body, what)
  lu.assertStrContains(body.error, "MongoDB is not reachable", false, what)
  lu.assertTrue(body.code == "unavailable" or body.code == "network", what .. ": code " .. tostring(body.code))
end

function TestNoServer:test_requests_fail_fast_with_a_clear_503()
  local times = {}
  local status, body, t = timed("GET", "/executions/o-1")
  assert_unreachable(status, body, "first GET")
  times[#times + 1] = t
  status, body, t = timed("POST", "/executions", { chart = "order", id = "o-1" })
  assert_unreachable(status, body, "POST /executions")
  times[#times + 1] = t
  status, body, t = timed("POST", "/executions/o-1/events", { kind = "PlaceOrder" })
  assert_unreachable(status, body, "POST event")
  times[#times + 1] = t
  status, body, t = timed("GET", "/executions?limit=5")
  assert_unreachable(status, body, "GET list")
  times[#times + 1] = t
  print(string.format("\n    no server: 503 after %s", table.concat((function()
    local out = {}
    for i, x in ipairs(times) do out[i] = string.format("%.2f s", x) end
    return out
  end)(), ", ")))
  for i, x in ipairs(times) do
    lu.assertTrue(x < BOUND, string.format("request %d took %.1f s: not failing fast", i, x))
  end
  -- the answer says when to come back
  local text = server:raw("GET /executions/o-1 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
  lu.assertStrContains(text, "HTTP/1.1 503")
  lu.assertStrContains(text:lower(), "retry-after: 1")
end

-- While requests wait for the server, the event loop still serves /ping.
function TestNoServer:test_ping_answers_while_requests_wait()
  local reqs = {}
  for i = 1, 8 do reqs[#reqs + 1] = { "GET", "/executions/p-" .. i } end
  for _ = 1, 4 do reqs[#reqs + 1] = { "GET", "/ping" } end
  local res = server:parallel(reqs)
  local pings = {}
  for i, r in ipairs(res) do
    if i <= 8 then
      lu.assertEquals(r.status, 503, r.body)
    else
      lu.assertEquals(r.status, 200, r.body)
      pings[#pings + 1] = r.time
    end
  end
  print(string.format("\n    no server: /ping during 8 waiting requests, max %s", H.ms(H.stats(pings).max)))
end

-- The timeouts go into the URI only where it sets none itself.
function TestNoServer:test_uri_timeouts_added_only_where_absent()
  local with = require("mongostore.ngx")._with_timeouts
  local both = "serverSelectionTimeoutMS=2000&connectTimeoutMS=2000"
  lu.assertEquals(with("mongodb://h:1", 2), "mongodb://h:1/?" .. both)
  lu.assertEquals(with("mongodb://h:1/", 2), "mongodb://h:1/?" .. both)
  lu.assertEquals(with("mongodb://h:1/db", 2), "mongodb://h:1/db?" .. both)
  lu.assertEquals(with("mongodb://a,b/?replicaSet=rs", 0.5),
    "mongodb://a,b/?replicaSet=rs&serverSelectionTimeoutMS=500&connectTimeoutMS=500")
  lu.assertEquals(with("mongodb://u:p@h/db?serverselectiontimeoutms=30000", 2),
    "mongodb://u:p@h/db?serverselectiontimeoutms=30000&connectTimeoutMS=2000")
  lu.assertEquals(with("mongodb://h/?connectTimeoutMS=1&serverSelectionTimeoutMS=9", 2),
    "mongodb://h/?connectTimeoutMS=1&serverSelectionTimeoutMS=9")
end

-- Run last (zz): a graceful stop, with requests and the worker's steps
-- having tried the server, finishes without the kill.
function TestNoServer:test_zz_graceful_stop_finishes()
  server:request("GET", "/executions/q-1")
  local graceful, took = server:stop()
  print(string.format("\n    no server: graceful stop took %.2f s", took))
  lu.assertTrue(graceful, string.format("nginx did not stop by itself within 10 s (%.1f s)", took))
  server = nil
end

------------------------------------------------------------------------
-- The server comes back

-- nginx reaches MongoDB through tools/fault-proxy (spec/03-engine/fault_helpers),
-- which first refuses every connection: a burst gets its 503s (each call
-- waits its own server selection, so the last of a burst larger than the
-- thread pool waits its turn too: printed, not asserted); once the proxy
-- lets connections through again, every request succeeds without a
-- restart, in both nginx workers.
TestServerComesBack = {}

local back, proxy

function TestServerComesBack.setupClass()
  local F = require "helpers.faults"
  proxy = F.start_proxy(require("helpers").uri())
  proxy.set{ refuse = 1 }
  back = H.start{ uri = proxy.uri() }
end

function TestServerComesBack.teardownClass()
  if back then pcall(back.stop, back) end
  if proxy then pcall(proxy.stop) end
  back, proxy = nil, nil
end

function TestServerComesBack:test_a_burst_fails_fast_then_requests_succeed_again()
  local status, body = back:request("GET", "/executions/back-1")
  assert_unreachable(status, body, "first GET through the refusing proxy")
  local reqs = {}
  for i = 1, 32 do reqs[i] = { "GET", "/executions/burst-" .. i } end
  local res, wall = back:parallel(reqs)
  local times = {}
  for i, r in ipairs(res) do
    lu.assertEquals(r.status, 503, r.body)
    local decoded = H.decode(r.body)
    lu.assertIsTable(decoded, r.body)
    lu.assertStrContains(decoded.error, "MongoDB is not reachable")
    times[i] = r.time
  end
  local st = H.stats(times)
  print(string.format("\n    no server, 32 at once: all 503, median %.2f s, p95 %.2f s, max %.2f s (wall %.2f s)",
    st.median, st.p95, st.max, wall))
  proxy.set{}
  local t0 = ms.now()
  local ok = H.poll(function()
    return back:post("/executions", { chart = "order", id = "back-1", context = { total = 5 } }) == 201
  end, 30, 0.2)
  lu.assertTrue(ok ~= nil, "requests did not succeed again after the server came back")
  print(string.format("    server back: first 201 after %.2f s", ms.now() - t0))
  status, body = back:request("POST", "/executions/back-1/events", { kind = "PlaceOrder" })
  lu.assertEquals(status, 202, H.encode({ body }))
  status, body = back:get("/executions/back-1")
  lu.assertEquals(status, 200, H.encode({ body }))
  lu.assertEquals(body.execution.active_path, "AwaitingPayment")
  -- many at once, so both nginx workers answer: neither kept a broken store
  local again = {}
  for i = 1, 16 do again[i] = { "GET", "/executions/back-1" } end
  for _, r in ipairs((back:parallel(again))) do lu.assertEquals(r.status, 200, r.body) end
end
