-- spec/04-ngx/bad_requests_spec.lua - every request the OpenResty example's API
-- cannot take gets a 4xx with a JSON body {error = "..."}, never a 500, and
-- leaves no Lua error in nginx's log: malformed or non-object bodies, missing
-- or wrong fields, unknown charts, executions and paths, bad list arguments,
-- wrong methods, a body over the size limit, a malformed HTTP request.
local lu = require "luaunit"
local H = require "helpers.ngx"

local server

local function srv()
  if not server then
    server = H.start()
    -- one execution the event cases can address
    local status = server:post("/executions", { chart = "order", id = "b-1" })
    assert(status == 201, "could not start b-1: " .. tostring(status))
  end
  return server
end

-- The request must be answered with `status` and a JSON {error: string}
-- whose message contains `says` (when given).
local function expect(status, method, path, body, says)
  local got, decoded, ctype, raw = srv():request(method, path, body)
  local what = string.format("%s %s -> %s %s", method, path, tostring(got), tostring(raw or decoded))
  lu.assertEquals(got, status, what)
  lu.assertStrContains(ctype or "", "application/json", what)
  lu.assertIsTable(decoded, what)
  lu.assertIsString(decoded.error, what)
  if says then lu.assertStrContains(decoded.error, says, what) end
  return decoded
end

TestBadRequests = {}

function TestBadRequests:tearDown()
  -- the oversized body is logged by nginx itself, at level error
  if server then lu.assertEquals(server:errors({ "client intended to send too large body" }), {}) end
end

function TestBadRequests.teardownClass()
  if server then
    pcall(server.stop, server)
    server = nil
  end
end

-- POST /executions

function TestBadRequests:test_start_malformed_json()
  expect(400, "POST", "/executions", '{"chart": "order"', "malformed JSON")
  expect(400, "POST", "/executions", "chart=order", "malformed JSON")
end

function TestBadRequests:test_start_body_not_an_object()
  expect(400, "POST", "/executions", "[1, 2]", "JSON object")
  expect(400, "POST", "/executions", '"order"', "JSON object")
  expect(400, "POST", "/executions", "", "JSON object")
end

function TestBadRequests:test_start_missing_chart()
  expect(400, "POST", "/executions", { id = "x" }, "chart")
  expect(400, "POST", "/executions", { chart = 5 }, "chart")
end

function TestBadRequests:test_start_unknown_chart()
  expect(400, "POST", "/executions", { chart = "invoice" }, "unknown chart")
end

function TestBadRequests:test_start_bad_id()
  expect(400, "POST", "/executions", '{"chart":"order","id":17}', "id")
  expect(400, "POST", "/executions", { chart = "order", id = "" }, "id")
  expect(400, "POST", "/executions", { chart = "order", id = "a/b" }, "'/'")
  expect(400, "POST", "/executions", { chart = "order", id = string.rep("x", 201) }, "id")
end

function TestBadRequests:test_start_bad_context()
  expect(400, "POST", "/executions", '{"chart":"order","context":[1,2]}', "context")
  expect(400, "POST", "/executions", { chart = "order", context = "total=3" }, "context")
end

function TestBadRequests:test_start_bad_priority()
  expect(400, "POST", "/executions", { chart = "order", priority = 9 }, "priority")
  expect(400, "POST", "/executions", { chart = "order", priority = 1.5 }, "priority")
end

-- POST /executions/{id}/events

function TestBadRequests:test_event_malformed_json()
  expect(400, "POST", "/executions/b-1/events", "{kind: PlaceOrder}", "malformed JSON")
end

function TestBadRequests:test_event_missing_kind()
  expect(400, "POST", "/executions/b-1/events", { data = { amount = 1 } }, "kind")
  expect(400, "POST", "/executions/b-1/events", { kind = "" }, "kind")
  expect(400, "POST", "/executions/b-1/events", '{"kind":42}', "kind")
end

function TestBadRequests:test_event_bad_data_and_id()
  expect(400, "POST", "/executions/b-1/events", '{"kind":"Paid","data":[1]}', "data")
  expect(400, "POST", "/executions/b-1/events", '{"kind":"Paid","data":"lots"}', "data")
  expect(400, "POST", "/executions/b-1/events", '{"kind":"Paid","id":12}', "event id")
end

function TestBadRequests:test_event_kinds_only_the_engine_sends()
  for _, kind in ipairs { "Start", "Finished", "Timeout" } do
    expect(400, "POST", "/executions/b-1/events", { kind = kind }, "engine only")
  end
end

function TestBadRequests:test_event_to_an_unknown_execution()
  local body = expect(404, "POST", "/executions/nobody/events", { kind = "PlaceOrder" })
  lu.assertEquals(body.code, "not_found")
end

function TestBadRequests:test_event_to_an_id_with_a_slash()
  expect(400, "POST", "/executions/a%2Fb/events", { kind = "PlaceOrder" }, "'/'")
end

-- GET

function TestBadRequests:test_get_unknown_execution()
  expect(404, "GET", "/executions/nobody")
end

function TestBadRequests:test_unknown_paths()
  expect(404, "GET", "/")
  expect(404, "GET", "/nope")
  expect(404, "GET", "/executions/b-1/history")
  expect(404, "GET", "/executions/b-1/events/extra")
  expect(404, "GET", "/_error")           -- the error page's location is internal
end

function TestBadRequests:test_list_bad_limit()
  for _, limit in ipairs { "0", "-1", "abc", "1.5", "100000", "" } do
    expect(400, "GET", "/executions?limit=" .. limit, nil, "limit")
  end
  expect(400, "GET", "/executions?limit", nil, "limit")
  expect(400, "GET", "/executions?limit=1&limit=2", nil, "limit")
end

function TestBadRequests:test_list_bad_status()
  expect(400, "GET", "/executions?status=BOGUS", nil, "status")
  expect(400, "GET", "/executions?status=running", nil, "status")
  expect(400, "GET", "/executions?status=RUNNING,NOPE", nil, "status")
  expect(400, "GET", "/executions?status=", nil, "status")
end

function TestBadRequests:test_list_bad_cursor_and_flags()
  local body = expect(400, "GET", "/executions?cursor=not-a-cursor", nil, "cursor")
  lu.assertEquals(body.code, "invalid") -- refused by the store itself
  expect(400, "GET", "/executions?cursor=", nil, "cursor")
  expect(400, "GET", "/executions?roots_only=yes", nil, "roots_only")
  expect(400, "GET", "/executions?definition_id=a&definition_id=b", nil, "definition_id")
end

-- Methods

function TestBadRequests:test_wrong_methods()
  local cases = {
    { "DELETE", "/executions", "GET, HEAD, POST" },
    { "PUT", "/executions", "GET, HEAD, POST" },
    { "POST", "/executions/b-1", "GET, HEAD" },
    { "DELETE", "/executions/b-1", "GET, HEAD" },
    { "GET", "/executions/b-1/events", "POST" },
    { "PATCH", "/executions/b-1/events", "POST" },
    { "GET", "/executions/b-1/cancel", "POST" },
  }
  for _, c in ipairs(cases) do
    -- a POST without a JSON body is a 415 before its method is looked at
    expect(405, c[1], c[2], c[1] == "POST" and "{}" or nil, c[3])
  end
end

-- What nginx itself refuses

function TestBadRequests:test_body_too_large()
  local big = '{"chart":"order","context":{"pad":"' .. string.rep("x", 100 * 1024) .. '"}}'
  expect(413, "POST", "/executions", big, "too large")
end

function TestBadRequests:test_malformed_http_request()
  local out = srv():raw("GARBAGE\r\n\r\n", { anonymous = true })
  lu.assertStrContains(out, "HTTP/1.1 400")
  lu.assertStrContains(out, "application/json")
  local body = H.decode(out:match("\r\n\r\n(.*)$") or "")
  lu.assertEquals(type(body), "table", out)
  lu.assertEquals(body.error, "bad request")
  lu.assertStrMatches(body.request_id, "%x+")
end

-- After all of that, the server still works and b-1 was never touched.
function TestBadRequests:test_zz_still_serving()
  local status, body = srv():get("/executions/b-1")
  lu.assertEquals(status, 200)
  lu.assertEquals(body.execution.active_path, "Cart")
  lu.assertEquals(body.execution.version, 1)
  status = srv():get("/ping")
  lu.assertEquals(status, 200)
end
