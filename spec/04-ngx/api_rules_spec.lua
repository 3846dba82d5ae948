-- spec/04-ngx/api_rules_spec.lua - what the OpenResty example's API promises a
-- client beyond the happy path: integers beyond 2^53 go in and come back
-- exactly (context, event data, the stored JSON), a number that cannot be
-- stored as written is a 400 with nothing written; only the kinds the
-- execution's chart takes from outside pass the events endpoint (reserved
-- and control kinds never); HEAD answers like GET without a body; a resent
-- event id is a 202 that says duplicate and changes nothing.
local lu = require "luaunit"
local H = require "helpers.ngx"
local raw = require "helpers.rawdb"

local server

local function srv()
  if not server then server = H.start() end
  return server
end

local function start(chart, id, context)
  local status, body = srv():post("/executions", { chart = chart, id = id, context = context })
  lu.assertEquals(status, 201, H.encode({ body }))
  return id
end

local function show(id)
  local status, body = srv():get("/executions/" .. id)
  lu.assertEquals(status, 200, H.encode({ body }))
  return body.execution, body.trace
end

local function event(id, body)
  return srv():request("POST", "/executions/" .. id .. "/events", body)
end

-- An integer value and its type, so 9007199254740993 never passes as the
-- float 9007199254740992.0.
local function assert_exact(got, want, what)
  lu.assertEquals(math.type(got), "integer", what)
  lu.assertEquals(got, want, what)
end

TestApiRules = {}

function TestApiRules:tearDown()
  if server then lu.assertEquals(server:errors(), {}) end
end

function TestApiRules.teardownClass()
  if server then
    pcall(server.stop, server)
    server = nil
  end
end

------------------------------------------------------------------------
-- Exact integers

local BIG = {
  above = 9007199254740993,        -- 2^53 + 1: a double cannot hold it
  below = -9007199254740993,
  max = math.maxinteger,           -- 2^63 - 1
  min = math.mininteger,           -- -2^63
  near = 1234567890123456789,
}

function TestApiRules:test_big_integers_in_the_context_round_trip()
  -- the order chart's inputs: total (a number, here beyond 2^53) and meta
  -- (an object, the caller's own)
  local meta = { list = { BIG.above, BIG.max, BIG.min } }
  for k, v in pairs(BIG) do meta[k] = v end
  start("order", "x-ctx", { total = BIG.above, meta = meta })
  local exe = show("x-ctx")
  assert_exact(exe.context.total, BIG.above, "context.total")
  for k, v in pairs(BIG) do assert_exact(exe.context.meta[k], v, "context.meta." .. k) end
  assert_exact(exe.context.meta.list[1], BIG.above, "list[1]")
  assert_exact(exe.context.meta.list[2], BIG.max, "list[2]")
  assert_exact(exe.context.meta.list[3], BIG.min, "list[3]")
  -- what is stored, read by Python's json module: the same integers
  local stored = raw.data(srv().db, "x-ctx")
  for k, v in pairs(BIG) do assert_exact(stored.context.meta[k], v, "stored context.meta." .. k) end
  -- and the listing carries the execution without breaking on them
  local status, page = srv():get("/executions?definition_id=order&limit=1000")
  lu.assertEquals(status, 200, H.encode({ page }))
end

function TestApiRules:test_big_integers_in_event_data_round_trip()
  start("refund", "x-data", { amount = BIG.max })
  local status, body = event("x-data", { kind = "Approve", id = "ap-1",
                                         data = { by = "ops", amount = BIG.max, ref = BIG.above, low = BIG.min } })
  lu.assertEquals(status, 202, H.encode({ body }))
  -- Approve keeps its data in the context; Approved then sends itself
  -- Settle (with the amount) through the outbox, which the worker relays
  local exe = H.poll(function()
    local e = show("x-data")
    return e.status == "DONE" and e
  end, 15)
  lu.assertNotNil(exe, "x-data never settled: " .. H.encode(show("x-data")))
  lu.assertEquals(exe.outcome, "success")
  assert_exact(exe.context.approval.amount, BIG.max, "approval.amount")
  assert_exact(exe.context.approval.ref, BIG.above, "approval.ref")
  assert_exact(exe.context.approval.low, BIG.min, "approval.low")
  assert_exact(exe.context.amount, BIG.max, "amount")
  local stored = raw.data(srv().db, "x-data")
  assert_exact(stored.context.approval.ref, BIG.above, "stored approval.ref")
end

-- 2^63 and -2^63-1 fit no 64-bit integer: read as doubles they would be
-- stored as some other number, so the request is refused whole.
function TestApiRules:test_numbers_that_cannot_be_stored_exactly_are_refused()
  start("order", "x-big", { total = 1 })
  local before = H.snapshot(srv().db)
  local texts = {
    { "/executions", '{"chart":"order","id":"x-no","context":{"n":9223372036854775808}}' },
    { "/executions", '{"chart":"order","id":"x-no","context":{"n":-9223372036854775809}}' },
    { "/executions", '{"chart":"order","id":"x-no","context":{"l":[1,2,18446744073709551616]}}' },
    { "/executions/x-big/events", '{"kind":"PlaceOrder","data":{"n":9223372036854775808}}' },
    { "/executions/x-big/events", '{"kind":"PlaceOrder","data":{"n":-9223372036854775809}}' },
    { "/executions/x-big/events", '{"kind":"PlaceOrder","data":{"tiny":1e-400}}' },
    { "/executions/x-big/events", '{"kind":"PlaceOrder","kind":"SetState"}' },
  }
  for _, t in ipairs(texts) do
    local status, body = srv():request("POST", t[1], t[2])
    lu.assertEquals(status, 400, t[2] .. " -> " .. H.encode({ body }))
    lu.assertStrContains(body.error, "cannot be stored as written", false, t[2])
  end
  lu.assertNil(H.changes(before, H.snapshot(srv().db)))
  lu.assertEquals((srv():get("/executions/x-no")), 404)
  lu.assertEquals(show("x-big").active_path, "Cart")
end

------------------------------------------------------------------------
-- External events only

local REFUSED = {
  { kind = "SetState", data = { path = "Done" } },
  { kind = "SetState", data = { path = "Cancelled" } },
  { kind = "Reset" }, { kind = "Terminate" }, { kind = "Suspend" }, { kind = "Resume" },
  { kind = "Start" }, { kind = "Finished", data = { outcome = "success" } }, { kind = "Timeout" },
  { kind = "Cancel" },
}

function TestApiRules:test_reserved_and_control_kinds_never_pass_the_events_endpoint()
  start("order", "x-ctl", { total = 30 })
  local status, body = event("x-ctl", { kind = "PlaceOrder", id = "po" })
  lu.assertEquals(status, 202, H.encode({ body }))
  lu.assertTrue(H.outbox_settled(srv().db), "the Charge is delivered (on_external)")
  local before = H.snapshot(srv().db)
  local exe0 = show("x-ctl")
  for _, ev in ipairs(REFUSED) do
    status, body = event("x-ctl", ev)
    lu.assertEquals(status, 400, ev.kind .. " -> " .. H.encode({ body }))
    lu.assertEquals(body.code, "invalid", ev.kind)
    lu.assertStrContains(body.error, ev.kind)
  end
  -- the control kinds name the endpoint to use instead
  status, body = event("x-ctl", { kind = "Cancel" })
  lu.assertEquals(status, 400, H.encode({ body }))
  lu.assertStrContains(body.error, "/executions/{id}/cancel")
  lu.assertNil(H.changes(before, H.snapshot(srv().db)))
  local exe = show("x-ctl")
  lu.assertEquals(exe.status, "RUNNING")
  lu.assertEquals(exe.active_path, "AwaitingPayment")
  lu.assertEquals(exe.version, exe0.version)
  -- the control operation itself works through its own endpoint
  status, body = srv():post("/executions/x-ctl/suspend")
  lu.assertEquals(status, 202, H.encode({ body }))
  lu.assertEquals(show("x-ctl").status, "SUSPENDED")
end

-- The refund chart declares external = { "Approve", "Reject" }: Settle,
-- which it handles but sends only itself, and any unknown kind are refused
-- by the events endpoint, with nothing written.
function TestApiRules:test_only_declared_kinds_pass()
  start("refund", "x-ext", { amount = 5 })
  local before = H.snapshot(srv().db)
  for _, kind in ipairs { "Settle", "Refund", "approve", "Approve ", "PlaceOrder" } do
    local status, body = event("x-ext", { kind = kind, data = { amount = 5 } })
    lu.assertEquals(status, 400, kind .. " -> " .. H.encode({ body }))
    lu.assertEquals(body.code, "invalid", kind)
    lu.assertStrContains(body.error, "takes from outside", false, kind)
  end
  lu.assertNil(H.changes(before, H.snapshot(srv().db)))
  local exe = show("x-ext")
  lu.assertEquals(exe.active_path, "Requested")
  lu.assertEquals(exe.version, 1)
  local status, body = event("x-ext", { kind = "Reject" })
  lu.assertEquals(status, 202, H.encode({ body }))
  lu.assertEquals(show("x-ext").outcome, "rejected")
end

------------------------------------------------------------------------
-- HEAD, duplicates

-- Status, headers (lower-case names) and the bytes after them of a raw
-- exchange.
local function exchange(bytes)
  local status, headers, rest = srv():exchange(bytes)
  lu.assertNotNil(status, "no HTTP response: " .. rest:sub(1, 300))
  return status, headers, rest
end

local function head(path)
  return exchange("HEAD " .. path .. " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
end

function TestApiRules:test_head_answers_like_get_without_a_body()
  start("order", "x-head", { total = 3 })
  for _, c in ipairs {
    { "/executions/x-head", 200 },
    { "/executions?limit=2", 200 },
    { "/executions?definition_id=order&status=RUNNING", 200 },
    { "/executions/nobody", 404 },
    { "/executions?limit=0", 400 },
    { "/executions/x-head/events", 405, "POST" },
    { "/executions/x-head/cancel", 405, "POST" },
  } do
    local get_status = srv():get(c[1])
    local status, headers, body = head(c[1])
    lu.assertEquals(status, c[2], "HEAD " .. c[1])
    lu.assertEquals(status, get_status, "HEAD and GET " .. c[1])
    lu.assertStrContains(headers["content-type"] or "", "application/json", false, c[1])
    lu.assertEquals(body, "", "HEAD " .. c[1] .. " sent a body")
    if c[3] then lu.assertEquals(headers["allow"], c[3]) end
  end
  -- /ping too
  local status, _, body = head("/ping")
  lu.assertEquals(status, 200)
  lu.assertEquals(body, "")
  -- and a wrong method names HEAD among the allowed ones
  local headers
  status, headers = exchange("DELETE /executions/x-head HTTP/1.1\r\nHost: localhost\r\n" ..
    "Connection: close\r\n\r\n")
  lu.assertEquals(status, 405)
  lu.assertEquals(headers.allow, "GET, HEAD")
end

function TestApiRules:test_a_resent_event_id_is_accepted_once()
  start("order", "x-dup", { total = 3 })
  local status, body = event("x-dup", { kind = "PlaceOrder", id = "po-1" })
  lu.assertEquals(status, 202)
  lu.assertEquals(body, { ok = true, outcome = "transition", status = "RUNNING" })
  lu.assertTrue(H.outbox_settled(srv().db), "the Charge is delivered (on_external)")
  local exe1 = show("x-dup")
  local before = H.snapshot(srv().db)
  for _ = 1, 2 do
    status, body = event("x-dup", { kind = "PlaceOrder", id = "po-1" })
    lu.assertEquals(status, 202, H.encode({ body }))
    lu.assertEquals(body, { ok = true, duplicate = true })
  end
  -- another kind under the same id is the same event id: still a duplicate
  status, body = event("x-dup", { kind = "Paid", id = "po-1", data = { amount = 3 } })
  lu.assertEquals(status, 202, H.encode({ body }))
  lu.assertEquals(body, { ok = true, duplicate = true })
  lu.assertNil(H.changes(before, H.snapshot(srv().db)))
  local exe, trace = show("x-dup")
  lu.assertEquals(exe.version, exe1.version)
  lu.assertEquals(exe.active_path, "AwaitingPayment")
  local placed = 0
  for _, step in ipairs(trace) do if step.event == "PlaceOrder" then placed = placed + 1 end end
  lu.assertEquals(placed, 1)
end

------------------------------------------------------------------------
-- Starts that name an id

-- The same id again is the same execution (201, nothing written, not even
-- the trace's counter); the id of another chart's execution is a 409.
function TestApiRules:test_a_replayed_start_writes_nothing()
  start("order", "x-again", { total = 1 })
  local before = H.snapshot(srv().db)
  for _ = 1, 2 do
    local status, body = srv():post("/executions", { chart = "order", id = "x-again", context = { total = 99 } })
    lu.assertEquals(status, 201, H.encode({ body }))
    lu.assertEquals(body.id, "x-again")
  end
  local status, body = srv():post("/executions", { chart = "refund", id = "x-again" })
  lu.assertEquals(status, 409, H.encode({ body }))
  lu.assertEquals(body.code, "conflict")
  lu.assertStrContains(body.error, "runs chart 'order'")
  lu.assertNil(H.changes(before, H.snapshot(srv().db)))
  lu.assertEquals(show("x-again").context.total, 1)
end
