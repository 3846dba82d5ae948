-- spec/04-ngx/hostile_client_http_spec.lua - the OpenResty example against
-- clients it must not trust, through real nginx and real HTTP: no token, a
-- wrong token, a read token writing, bodies a web page could post
-- cross-site (text/plain, forms), a foreign Origin, context fields the chart
-- does not declare or of the wrong type, event data too deep to read back,
-- control calls on a finished execution, a burst of starts. Each refusal is
-- the documented status and body, carries no detail (no path, no host:port),
-- and reads or writes nothing the caller should not reach: the raw
-- collections, read through pymongo, stay as they were.
local lu = require "luaunit"
local H = require "helpers.ngx"

local server, last

local function setup()
  if server then return server end
  server = H.start()
  for _, id in ipairs { "hc-1", "hc-c", "hc-d" } do
    local status, body = server:post("/executions", { chart = "order", id = id, context = { total = 3 } })
    assert(status == 201, "could not start " .. id .. ": " .. H.encode({ body }))
  end
  local status = server:post("/executions/hc-c/cancel", {})
  assert(status == 202, "could not cancel hc-c")
  status = server:post("/executions/hc-d/suspend", {})
  assert(status == 202, "could not suspend hc-d")
  last = H.snapshot(server.db)
  return server
end

-- Nothing was written since the last call (or the fixture).
local function unchanged(what)
  local now = H.snapshot(server.db)
  lu.assertNil(H.changes(last, now), what .. " wrote something")
  last = now
end

local function deep(n) return string.rep('{"a":', n) .. "1" .. string.rep("}", n) end

-- The status, headers (lower-case names) and body of a raw exchange.
local function raw(bytes, opts) return setup():exchange(bytes, opts) end

local function assert_refusal(status, body, want, what)
  lu.assertEquals(status, want, what .. ": " .. H.encode({ body }))
  local expected = ({ [401] = "unauthorized", [403] = "forbidden", [415] = "unsupported media type" })[want]
  lu.assertEquals(body, { error = expected }, what)
end

TestHostileClient = {}

function TestHostileClient:test_01_no_token_reads_nothing()
  local s = setup()
  for _, path in ipairs { "/executions", "/executions/hc-1", "/executions?limit=1000", "/notes/x", "/nowhere" } do
    local status, body = s:request("GET", path, nil, { Authorization = false })
    assert_refusal(status, body, 401, "GET " .. path)
  end
  local status, headers, body = raw("GET /executions/hc-1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    { anonymous = true })
  lu.assertEquals(status, 401)
  lu.assertStrContains(headers["www-authenticate"] or "", "Bearer")
  lu.assertNotStrContains(body, "hc-1")
  unchanged("anonymous reads")
end

function TestHostileClient:test_02_a_wrong_token_is_refused()
  local s = setup()
  for _, auth in ipairs { "Bearer nope", "Bearer " .. H.WRITE_TOKEN .. "x", "Bearer " .. H.WRITE_TOKEN:sub(1, -2),
                          "Basic " .. H.WRITE_TOKEN, H.WRITE_TOKEN, "Bearer" } do
    local status, body = s:request("GET", "/executions", nil, { Authorization = auth })
    assert_refusal(status, body, 401, auth)
    status, body = s:request("POST", "/executions/hc-1/terminate", {}, { Authorization = auth })
    assert_refusal(status, body, 401, "terminate with " .. auth)
  end
  unchanged("wrong tokens")
end

function TestHostileClient:test_03_a_read_token_reads_but_never_writes()
  local s = setup()
  local read = { Authorization = "Bearer " .. H.READ_TOKEN }
  local status, body = s:request("GET", "/executions/hc-1", nil, read)
  lu.assertEquals(status, 200, H.encode({ body }))
  lu.assertEquals(body.execution.id, "hc-1")
  for _, req in ipairs {
    { "/executions", { chart = "order", id = "hc-new", context = { total = 1 } } },
    { "/executions/hc-1/events", { kind = "PlaceOrder" } },
    { "/executions/hc-1/terminate", {} }, { "/executions/hc-1/cancel", {} }, { "/notes", { text = "x" } },
  } do
    status, body = s:request("POST", req[1], req[2], read)
    assert_refusal(status, body, 403, "POST " .. req[1])
  end
  unchanged("a read token's posts")
end

-- What an HTML form or a no-preflight fetch can send cross-site.
function TestHostileClient:test_04_only_json_bodies_are_taken()
  local s = setup()
  for _, c in ipairs {
    { "text/plain", '{"kind":"PlaceOrder"}' },
    { "application/x-www-form-urlencoded", "kind=PlaceOrder" },
    { "multipart/form-data; boundary=xyz", "--xyz\r\nContent-Disposition: form-data; name=\"kind\"\r\n\r\nPaid\r\n--xyz--" },
    { false, '{"kind":"PlaceOrder"}' },
  } do
    local status, body = s:request("POST", "/executions/hc-1/events", c[2], { ["Content-Type"] = c[1] })
    assert_refusal(status, body, 415, tostring(c[1]))
    status, body = s:request("POST", "/executions/hc-1/terminate", c[2], { ["Content-Type"] = c[1] })
    assert_refusal(status, body, 415, "terminate as " .. tostring(c[1]))
  end
  -- a control POST with no body at all, as a form with no fields would be
  local status, body = s:request("POST", "/executions/hc-1/terminate")
  assert_refusal(status, body, 415, "terminate without a body")
  unchanged("bodies that are not JSON")
end

function TestHostileClient:test_05_a_foreign_origin_cannot_write()
  local s = setup()
  for _, origin in ipairs { "https://evil.example", "null", "https://app.example.evil.example" } do
    local status, body = s:request("POST", "/executions/hc-1/terminate", {}, { Origin = origin })
    assert_refusal(status, body, 403, origin)
  end
  unchanged("foreign origins")
  -- the allowed one can
  local status, body = s:request("POST", "/executions", { chart = "refund", id = "hc-o", context = { amount = 1 } },
                                 { Origin = H.ORIGIN })
  lu.assertEquals(status, 201, H.encode({ body }))
  last = H.snapshot(s.db)
end

function TestHostileClient:test_06_only_declared_inputs_of_their_types()
  local s = setup()
  for _, c in ipairs {
    { { total = 3, attempts = -100 }, "opts.context.attempts is not an input of chart order" },
    { { total = 3, payment_timeout = "abc" }, "opts.context.payment_timeout must be a number" },
    { { total = 3, payment_timeout = -5 }, "opts.context.payment_timeout must be a number" },
    { { total = 3, payment_timeout = 1e9 }, "opts.context.payment_timeout must be at most 86400" },
    { { total = "3" }, "opts.context.total must be a number" },
    { { total = 3, meta = { 1, 2 } }, "opts.context.meta must be an object" },
  } do
    local status, body = s:post("/executions", { chart = "order", id = "hc-in", context = c[1] })
    lu.assertEquals(status, 400, H.encode({ body }))
    lu.assertEquals(body.code, "invalid")
    lu.assertStrContains(body.error, c[2])
    lu.assertStrMatches(body.request_id, "%x+")
  end
  local status = s:get("/executions/hc-in")
  lu.assertEquals(status, 404)
  unchanged("refused starts")
end

function TestHostileClient:test_07_error_bodies_carry_a_request_id_and_no_detail()
  local s = setup()
  for _, req in ipairs {
    { "GET", "/nowhere" }, { "GET", "/executions/nobody" }, { "POST", "/executions", '{"chart":' },
    { "POST", "/executions/hc-1/events", { kind = "SetState" } }, { "DELETE", "/executions" },
  } do
    local status, body = s:request(req[1], req[2], req[3])
    lu.assertTrue(status >= 400 and status < 500, req[2])
    lu.assertEquals(type(body), "table", req[2])
    lu.assertTrue(type(body.request_id) == "string" and body.request_id:match("^%x+$") ~= nil, req[2])
    local text = H.encode(body)
    lu.assertNotStrContains(text, ".lua", false, req[2])
    lu.assertNotStrContains(text, "/work/", false, req[2])
    lu.assertNotStrContains(text, "127.0.0.1", false, req[2])
  end
  unchanged("error answers")
end

-- Event data the API accepts can always be read back; what could not be is
-- refused at the door (the thread crossing and the answer add levels).
function TestHostileClient:test_08_deep_event_data_is_refused_when_it_could_not_be_read_back()
  local s = setup()
  for _, n in ipairs { 81, 96, 99 } do
    local status, body = s:request("POST", "/executions/hc-d/events", '{"kind":"Paid","data":' .. deep(n) .. "}")
    lu.assertEquals(status, 400, n .. ": " .. H.encode({ body }))
    -- refused by the engine (past 80) or, deeper still, by the thread crossing on the way there
    lu.assertStrContains(body.error, n == 81 and "nested deeper than 80 levels" or "nested deeper than")
  end
  unchanged("deep events")
  -- 80 levels are held while suspended, and read back
  local status, body = s:request("POST", "/executions/hc-d/events", '{"kind":"Paid","id":"deep-80","data":' ..
    deep(80) .. "}")
  lu.assertEquals(status, 202, H.encode({ body }))
  lu.assertEquals(body.outcome, "held")
  status, body = s:get("/executions/hc-d")
  lu.assertEquals(status, 200, H.encode({ body }))
  lu.assertEquals(body.execution.status, "SUSPENDED")
  status, body = s:get("/executions?definition_id=order&limit=1000")
  lu.assertEquals(status, 200, H.encode({ body }))
  last = H.snapshot(s.db)
end

function TestHostileClient:test_09_control_on_a_finished_execution_writes_nothing()
  local s = setup()
  for _, action in ipairs { "resume", "suspend", "cancel", "terminate" } do
    local status, body = s:post("/executions/hc-c/" .. action, {})
    lu.assertEquals(status, 409, action .. ": " .. H.encode({ body }))
    lu.assertEquals(body.code, "finished")
    lu.assertStrContains(body.error, "finished (CANCELLED)")
  end
  unchanged("control on a cancelled execution")
end

function TestHostileClient:test_10_workers_do_not_run_as_root()
  local s = setup()
  local text = assert(H.read(s.conf))
  local out = H.sh("ps -o user= --ppid " .. s.pid)
  if H.sh("id -u"):match("^0") then
    lu.assertStrContains(text, "\nuser nobody nogroup;")
    lu.assertNotStrContains(out, "root")
    lu.assertStrContains(out, "nobody")
  else
    lu.assertNotStrContains(text, "\nuser ")
  end
  lu.assertErrorMsgContains("must not run as root", H.render.render, { prefix = s.prefix .. "/x", user = "root" })
  lu.assertErrorMsgContains("must not run as root", H.render.render,
                            { prefix = s.prefix .. "/x", user = "root www-data" })
  lu.assertEquals(s:errors(), {})
end

function TestHostileClient:test_11_starts_are_rate_limited()
  local s2 = H.start{ start_rate = "1r/m", start_burst = 2 }
  local ok, err = pcall(function()
    local codes = {}
    for i = 1, 6 do
      local status, body = s2:post("/executions", { chart = "refund", id = "rl-" .. i })
      codes[#codes + 1] = status
      if status == 429 then lu.assertEquals(body.error, "too many requests") end
    end
    lu.assertEquals(codes, { 201, 201, 201, 429, 429, 429 })
    -- reads and other writes are not counted
    for _ = 1, 5 do lu.assertEquals((s2:get("/executions/rl-1")), 200) end
    lu.assertEquals((s2:post("/executions/rl-1/events", { kind = "Reject" })), 202)
    local status = s2:get("/executions/rl-4")
    lu.assertEquals(status, 404, "a refused start wrote nothing")
  end)
  s2:stop()
  if not ok then error(err, 0) end
end

-- MongoDB out of reach: the client hears that, with a request id, never
-- libmongoc's message (which names the server); the log has it.
function TestHostileClient:test_12_server_detail_goes_to_the_log_only()
  local out = H.sh("python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\", 0)); " ..
    "print(s.getsockname()[1]); s.close()'")
  local port = assert(out:match("(%d+)"))
  local s2 = H.start{ uri = "mongodb://127.0.0.1:" .. port }
  local ok, err = pcall(function()
    local status, body = s2:get("/executions/x")
    lu.assertEquals(status, 503, H.encode({ body }))
    lu.assertStrContains(body.error, "MongoDB is not reachable")
    lu.assertNotStrContains(H.encode(body), port)
    lu.assertNotStrContains(H.encode(body), "127.0.0.1")
    lu.assertStrMatches(body.request_id, "%x+")
    local log = s2:log()
    lu.assertStrContains(log, "mongostore " .. body.request_id .. ": ")
    lu.assertStrContains(log, port)
  end)
  s2:stop()
  if not ok then error(err, 0) end
end

function TestHostileClient:test_zz_stop()
  lu.assertEquals(setup():errors(), {})
  server:stop()
end
