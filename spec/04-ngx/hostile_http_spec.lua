-- spec/04-ngx/hostile_http_spec.lua - the OpenResty example's API tried as a
-- hostile client would: malformed and mistyped bodies, huge bodies, strings
-- that are not UTF-8 or hold NUL and control bytes, bad ids in paths,
-- garbage, forged, tampered and other queries' cursors, limits out of range,
-- unknown charts, reserved and undeclared kinds, integers no int64 holds,
-- deep nesting, repeated keys, broken HTTP. Each case must get a 4xx with a
-- JSON {error} (never a 5xx), leave no Lua error in nginx's log, and leave
-- the raw executions and counters collections exactly as they were
-- (compared through pymongo after every case).
local lu = require "luaunit"
local H = require "helpers.ngx"

local server, fixture, last

-- nginx logs these itself, at level error, for what it refuses on purpose
local ALLOWED_LOG = { "client intended to send too large", "client sent too long header line",
                      "client sent invalid request", "client sent invalid method" }

local function setup()
  if server then return end
  server = H.start()
  fixture = {}
  for _, id in ipairs { "h-1", "h-2", "h-3" } do
    local status, body = server:post("/executions", { chart = "order", id = id, context = { total = 3 } })
    assert(status == 201, "could not start " .. id .. ": " .. H.encode({ body }))
  end
  local status, body = server:post("/executions", { chart = "refund", id = "h-r", context = { amount = 2 } })
  assert(status == 201, "could not start h-r: " .. H.encode({ body }))
  -- a real cursor (this also makes the database's cursor secret, so later
  -- listings write nothing)
  status, body = server:get("/executions?definition_id=order&limit=1")
  assert(status == 200 and type(body.next_cursor) == "string", "no cursor: " .. H.encode({ body }))
  fixture.cursor = body.next_cursor
  last = H.snapshot(server.db)
  assert(H.count(last, "executions") == 4, "fixture: expected 4 executions")
end

-- A listing position as mongostore.cursor writes it (its payload, unsigned).
local function position(id)
  return require("mongostore.cursor").b64(require("mongostore.core").bson_encode { id = id })
end

-- The cursor with one character changed at position i (counted from the end
-- when negative).
local function flip(c, i)
  if i < 0 then i = #c + 1 + i end
  local ch = c:sub(i, i)
  return c:sub(1, i - 1) .. (ch == "0" and "1" or "0") .. c:sub(i + 1)
end

local function deep(n) return string.rep('{"a":', n) .. "1" .. string.rep("}", n) end

-- { name, method, path, body, status } ; path and body may be functions of
-- the fixture; status is the exact answer expected (always a 4xx).
local CASES = {
  -- bodies that are not JSON objects
  { "malformed_json_start", "POST", "/executions", '{"chart":"order"', 400 },
  { "malformed_json_event", "POST", "/executions/h-1/events", "{kind: PlaceOrder}", 400 },
  { "body_is_an_array", "POST", "/executions", '[{"chart":"order","id":"h-new"}]', 400 },
  { "body_is_a_string", "POST", "/executions/h-1/events", '"PlaceOrder"', 400 },
  { "body_empty", "POST", "/executions/h-1/events", "", 400 },
  { "trailing_garbage", "POST", "/executions/h-1/events", '{"kind":"PlaceOrder"} x', 400 },
  -- wrong types
  { "chart_is_a_number", "POST", "/executions", '{"chart":5,"id":"h-new"}', 400 },
  { "context_is_an_array", "POST", "/executions", '{"chart":"order","id":"h-new","context":[1,2]}', 400 },
  { "priority_is_a_string", "POST", "/executions", '{"chart":"order","id":"h-new","priority":"high"}', 400 },
  { "priority_out_of_range", "POST", "/executions", '{"chart":"order","id":"h-new","priority":99}', 400 },
  { "kind_is_an_object", "POST", "/executions/h-1/events", '{"kind":{"a":1}}', 400 },
  { "kind_is_true", "POST", "/executions/h-1/events", '{"kind":true}', 400 },
  { "data_is_a_string", "POST", "/executions/h-1/events", '{"kind":"PlaceOrder","data":"x"}', 400 },
  { "event_id_is_a_number", "POST", "/executions/h-1/events", '{"kind":"PlaceOrder","id":7}', 400 },
  { "start_id_is_null", "POST", "/executions", '{"chart":"order","id":null}', 400 },
  -- huge
  { "huge_start_body", "POST", "/executions",
    '{"chart":"order","id":"h-new","context":{"pad":"' .. string.rep("x", 100 * 1024) .. '"}}', 413 },
  { "huge_event_body", "POST", "/executions/h-1/events",
    '{"kind":"PlaceOrder","data":{"pad":"' .. string.rep("y", 1024 * 1024) .. '"}}', 413 },
  { "kind_too_long", "POST", "/executions/h-1/events", '{"kind":"' .. string.rep("K", 300) .. '"}', 400 },
  { "start_id_too_long", "POST", "/executions", '{"chart":"order","id":"' .. string.rep("i", 300) .. '"}', 400 },
  -- bytes that are not UTF-8, NUL and control characters
  { "kind_not_utf8", "POST", "/executions/h-1/events", '{"kind":"Place\255Order"}', 400 },
  { "data_not_utf8", "POST", "/executions/h-1/events", '{"kind":"PlaceOrder","data":{"n":"\195\040"}}', 400 },
  { "key_not_utf8", "POST", "/executions/h-1/events", '{"kind":"PlaceOrder","data":{"\237\160\128":1}}', 400 },
  { "overlong_utf8_id", "POST", "/executions", '{"chart":"order","id":"h\192\175"}', 400 },
  { "raw_nul_in_json", "POST", "/executions/h-1/events", '{"kind":"PlaceOrder\0"}', 400 },
  { "escaped_nul_in_kind", "POST", "/executions/h-1/events", '{"kind":"PlaceOrder\\u0000"}', 400 },
  { "escaped_nul_in_event_id", "POST", "/executions/h-1/events", '{"kind":"PlaceOrder","id":"e\\u0000"}', 400 },
  { "escaped_nul_in_start_id", "POST", "/executions", '{"chart":"order","id":"h\\u0000x"}', 400 },
  { "bell_in_kind", "POST", "/executions/h-1/events", '{"kind":"Place\\u0007Order"}', 400 },
  { "newline_in_event_id", "POST", "/executions/h-1/events", '{"kind":"PlaceOrder","id":"a\\nb"}', 400 },
  -- bad ids in paths
  { "path_id_not_utf8", "POST", "/executions/%FF/events", { kind = "PlaceOrder" }, 400 },
  { "path_id_nul", "GET", "/executions/h-1%00", nil, 400 },
  { "path_id_nul_event", "POST", "/executions/h-1%00/events", { kind = "PlaceOrder" }, 400 },
  { "path_id_slash", "GET", "/executions/h%2F1", nil, 400 },
  { "path_id_overlong_utf8", "GET", "/executions/%C0%AF", nil, 400 },
  { "path_id_too_long", "GET", "/executions/" .. string.rep("z", 300), nil, 400 },
  { "path_id_control", "POST", "/executions/h%0A1/cancel", "{}", 400 },
  -- cursors
  { "cursor_garbage", "GET", "/executions?cursor=not-a-cursor", nil, 400 },
  { "cursor_forged", "GET", function() return "/executions?definition_id=order&limit=1&cursor=c3." ..
      position("h-2") .. "." .. string.rep("A", 22) end, nil, 400 },
  { "cursor_mac_tampered", "GET", function(fx) return "/executions?definition_id=order&limit=1&cursor=" ..
      flip(fx.cursor, -1) end, nil, 400 },
  { "cursor_position_tampered", "GET", function(fx)
      -- another position under the genuine MAC (mongostore.cursor's format)
      local mac = fx.cursor:match("%.([%w%-_]+)$")
      return "/executions?definition_id=order&limit=1&cursor=c3." .. position("h-2") .. "." .. mac
    end, nil, 400 },
  { "cursor_of_another_chart", "GET", function(fx)
      return "/executions?definition_id=refund&limit=1&cursor=" .. H.urlencode(fx.cursor) end, nil, 400 },
  { "cursor_of_another_status_filter", "GET", function(fx)
      return "/executions?definition_id=order&status=RUNNING&limit=1&cursor=" .. H.urlencode(fx.cursor) end, nil, 400 },
  { "cursor_without_its_filter", "GET", function(fx)
      return "/executions?limit=1&cursor=" .. H.urlencode(fx.cursor) end, nil, 400 },
  { "cursor_huge", "GET", "/executions?cursor=c2." .. string.rep("ab", 1500) .. ".00", nil, 400 },
  { "cursor_nul", "GET", "/executions?cursor=%00", nil, 400 },
  { "cursor_not_utf8", "GET", "/executions?cursor=c2.%FF", nil, 400 },
  -- limits and filters
  { "limit_zero", "GET", "/executions?limit=0", nil, 400 },
  { "limit_over_the_maximum", "GET", "/executions?limit=1001", nil, 400 },
  { "limit_negative", "GET", "/executions?limit=-5", nil, 400 },
  { "limit_exponent", "GET", "/executions?limit=1e2", nil, 400 },
  { "limit_huge", "GET", "/executions?limit=99999999999999999999999", nil, 400 },
  { "definition_id_not_utf8", "GET", "/executions?definition_id=%FF", nil, 400 },
  { "definition_id_nul", "GET", "/executions?definition_id=order%00", nil, 400 },
  { "status_unknown", "GET", "/executions?status=DELETED", nil, 400 },
  { "too_many_query_arguments", "GET", "/executions?" .. string.rep("x=1&", 120) .. "limit=1", nil, 400 },
  -- charts and kinds
  { "unknown_chart", "POST", "/executions", { chart = "invoice", id = "h-new" }, 400 },
  { "setstate_to_done", "POST", "/executions/h-1/events", { kind = "SetState", data = { path = "Done" } }, 400 },
  { "reset", "POST", "/executions/h-1/events", { kind = "Reset" }, 400 },
  { "terminate_as_event", "POST", "/executions/h-1/events", { kind = "Terminate" }, 400 },
  { "forged_finished", "POST", "/executions/h-1/events", { kind = "Finished", data = { outcome = "success" } }, 400 },
  { "forged_timeout", "POST", "/executions/h-1/events", { kind = "Timeout" }, 400 },
  { "undeclared_kind", "POST", "/executions/h-r/events", { kind = "Settle", data = { amount = 2 } }, 400 },
  { "event_to_unknown_execution", "POST", "/executions/nobody/events", { kind = "PlaceOrder" }, 404 },
  { "start_over_another_charts_execution", "POST", "/executions", { chart = "refund", id = "h-1" }, 409 },
  -- numbers and structure no store could keep as written
  { "int_2_63_in_context", "POST", "/executions",
    '{"chart":"order","id":"h-new","context":{"n":9223372036854775808}}', 400 },
  { "int_minus_2_63_minus_1_in_data", "POST", "/executions/h-1/events",
    '{"kind":"PlaceOrder","data":{"n":-9223372036854775809}}', 400 },
  { "underflow_in_data", "POST", "/executions/h-1/events", '{"kind":"PlaceOrder","data":{"x":1e-400}}', 400 },
  { "overflow_in_data", "POST", "/executions/h-1/events", '{"kind":"PlaceOrder","data":{"x":1e999}}', 400 },
  { "repeated_kind_key", "POST", "/executions/h-1/events", '{"kind":"PlaceOrder","kind":"SetState"}', 400 },
  { "deep_nesting_in_context", "POST", "/executions",
    '{"chart":"order","id":"h-new","context":' .. deep(150) .. "}", 400 },
  { "deep_nesting_in_data", "POST", "/executions/h-1/events",
    '{"kind":"PlaceOrder","data":' .. deep(5000) .. "}", 400 },
  -- methods and HTTP itself
  { "wrong_method", "DELETE", "/executions/h-1", nil, 405 },
  { "raw_garbage_request", "RAW", "GARBAGE\r\n\r\n", nil, 400 },
  { "raw_header_too_large", "RAW", "GET /executions/h-1 HTTP/1.1\r\nHost: x\r\nX-Big: " .. string.rep("b", 40000) ..
      "\r\nConnection: close\r\n\r\n", nil, 400 },
  { "raw_chunked_body_too_large", "RAW", function()
      local chunk = string.rep("c", 70 * 1024)
      return "POST /executions/h-1/events HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n" ..
        "Content-Type: application/json\r\nConnection: close\r\n\r\n" ..
        string.format("%x\r\n", #chunk) .. chunk .. "\r\n0\r\n\r\n"
    end, nil, 413 },
}

-- One raw HTTP exchange: status, content type, decoded JSON body.
local function raw_exchange(bytes)
  local status, headers, body = server:exchange(bytes)
  if not status then return nil, nil, body end
  return status, headers["content-type"] or "", H.decode(body) or body
end

local function run_case(c)
  setup()
  local path = type(c[3]) == "function" and c[3](fixture) or c[3]
  local body = type(c[4]) == "function" and c[4](fixture) or c[4]
  local status, decoded, ctype, raw
  if c[2] == "RAW" then
    status, ctype, decoded = raw_exchange(path)
    raw = decoded
  else
    status, decoded, ctype, raw = server:request(c[2], path, body)
  end
  local what = string.format("%s: %s %s -> %s %s", c[1], c[2], c[2] == "RAW" and "" or path:sub(1, 120),
    tostring(status), tostring(type(raw) == "string" and raw:sub(1, 300) or H.encode(raw)))
  lu.assertIsNumber(status, what)
  lu.assertTrue(status >= 400 and status < 500, what)
  lu.assertEquals(status, c[5], what)
  lu.assertStrContains(ctype or "", "application/json", false, what)
  lu.assertIsTable(decoded, what)
  lu.assertIsString(decoded.error, what)
  local now = H.snapshot(server.db)
  local changed = H.changes(last, now)
  last = now
  lu.assertNil(changed, c[1] .. ": the raw collections changed: " .. tostring(changed))
  lu.assertEquals(server:errors(ALLOWED_LOG), {}, c[1])
end

TestHostileHttp = {}

for i, c in ipairs(CASES) do
  TestHostileHttp[string.format("test_%02d_%s", i, c[1])] = function() run_case(c) end
end

-- After every case: the fixture executions are as they were made and the
-- server still takes a good request.
function TestHostileHttp:test_zz_still_serving()
  setup()
  for _, id in ipairs { "h-1", "h-2", "h-3" } do
    local status, body = server:get("/executions/" .. id)
    lu.assertEquals(status, 200)
    lu.assertEquals(body.execution.version, 1, id)
    lu.assertEquals(body.execution.active_path, "Cart", id)
  end
  local status = server:post("/executions/h-1/events", { kind = "PlaceOrder" })
  lu.assertEquals(status, 202)
  print(string.format("\n    hostile HTTP: %d cases, each a 4xx JSON error with nothing written", #CASES))
end

function TestHostileHttp.teardownClass()
  if server then
    pcall(server.stop, server)
    server = nil
  end
end
