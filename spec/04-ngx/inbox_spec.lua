-- spec/04-ngx/inbox_spec.lua - msngx.enqueue in real nginx: an HTTP
-- handler hands an event to the inbox in one insert and answers at once;
-- nginx's own worker (msngx.start_worker) delivers it by default, exactly
-- once; with configure's inbox = false it does not, and a separate worker
-- process does. The same event again is one entry; a bad event is refused
-- and writes nothing.
local lu = require "luaunit"
local helper = require "helpers"
local rawdb = require "helpers.rawdb"
local H = require "helpers.ngx"

-- /_enqueue: { id, event, priority } -> msngx.enqueue(id, event, { priority })
-- answered as { ok, how, err, code } (absent where nil)
local LOCATIONS = [[
        location = /_enqueue {
            content_by_lua_block {
                local msngx = require "mongostore.ngx"
                local core = require "mongostore.core"
                ngx.req.read_body()
                local req = core.json_decode(ngx.req.get_body_data() or "")
                local opts = req.priority ~= nil and { priority = req.priority } or nil
                local ok, how, code = msngx.enqueue(req.id, req.event, opts)
                local out = { ok = ok, how = ok and how or nil, err = (not ok) and how or nil, code = code }
                ngx.say(assert(core.json_encode(out)))
            }
        }
]]

local server, quiet

local function srv()
  if not server then server = H.start{ workers = 1, locations = LOCATIONS } end
  return server
end

-- nginx whose own worker delivers no inbox
local function quiet_srv()
  if not quiet then quiet = H.start{ workers = 1, locations = LOCATIONS, configure = "inbox = false," } end
  return quiet
end

local function enqueue(id, event, priority, s)
  local status, body = (s or srv()):post("/_enqueue", { id = id, event = event, priority = priority })
  lu.assertEquals(status, 200, H.encode({ body }))
  return body
end

local function show(id, s)
  local status, body = (s or srv()):get("/executions/" .. id)
  lu.assertEquals(status, 200, H.encode({ body }))
  return body.execution, body.trace
end

-- A worker process: relay_inbox until `want` entries are handled (or 20 s).
local WORKER = [[
  local ms = require "mongostore"
  package.path = %q .. "/examples/openresty/?.lua;" .. %q .. "/examples/?.lua;" .. package.path
  local store = assert(ms.connect(%q, { db = %q, wait = 10 }))
  local e = require("mongostore.engine").new{ store = store, charts = require "app.charts", trace = true,
                                              inbox = true, log = function(m) io.stdout:write("LOG ", m, "\n") end }
  local n, deadline = 0, ms.now() + 20
  while n < %d and ms.now() < deadline do
    n = n + e:relay_inbox()
    ms.sleep(0.02)
  end
  io.stdout:write("DELIVERED ", n, "\n")
]]

local function run_worker(s, want)
  local out = helper.spawn(string.format(WORKER, helper.root(), helper.root(), helper.uri(), s.db, want)).wait()
  return tonumber(out:match("DELIVERED (%d+)")), out
end

TestNgxInbox = {}

function TestNgxInbox:tearDown()
  if server then lu.assertEquals(server:errors(), {}) end
  if quiet then lu.assertEquals(quiet:errors(), {}) end
end

function TestNgxInbox.teardownClass()
  for _, s in ipairs { server or false, quiet or false } do
    if s then pcall(s.stop, s) end
  end
  server, quiet = nil, nil
end

local function applied_once(trace, event_id)
  local n = 0
  for _, step in ipairs(trace) do
    if step.event_id == event_id then n = n + 1 end
  end
  lu.assertEquals(n, 1, event_id .. " applied once")
end

function TestNgxInbox:test_a_request_enqueues_and_nginx_s_own_worker_delivers_by_default()
  H.check_prerequisites()
  local s = srv()
  local status = s:post("/executions", { chart = "order", id = "inbox-o1", context = { total = 30 } })
  lu.assertEquals(status, 201)
  local got = enqueue("inbox-o1", { kind = "PlaceOrder", data = {}, id = "place-1" }, 3)
  lu.assertEquals(got.ok, true, H.encode(got))
  -- the entry may be delivered and acked at once: a second enqueue is a
  -- duplicate either way (of the queued entry, or of the handled event)
  local again = enqueue("inbox-o1", { kind = "PlaceOrder", data = {}, id = "place-1" })
  lu.assertEquals(again.ok, true, H.encode(again))
  local exe = H.poll(function()
    local e = show("inbox-o1")
    return e.active_path == "AwaitingPayment" and e
  end, 10)
  lu.assertTrue(exe ~= nil and exe ~= false, "nginx's worker did not deliver the inbox")
  local _, trace = show("inbox-o1")
  applied_once(trace, "place-1")
  H.poll(function() return rawdb.count(s.db, "inbox") == 0 end, 10)
  lu.assertEquals(rawdb.count(s.db, "inbox"), 0, "the worker acked it")
end

function TestNgxInbox:test_with_inbox_false_the_event_waits_for_a_worker_that_delivers_it()
  H.check_prerequisites()
  local s = quiet_srv()
  local status = s:post("/executions", { chart = "order", id = "inbox-q1", context = { total = 30 } })
  lu.assertEquals(status, 201)
  local got = enqueue("inbox-q1", { kind = "PlaceOrder", data = {}, id = "place-q1" }, 3, s)
  lu.assertEquals(got, { ok = true, how = "queued" })
  lu.assertEquals(enqueue("inbox-q1", { kind = "PlaceOrder", data = {}, id = "place-q1" }, nil, s),
                  { ok = true, how = "duplicate" })
  local entry = rawdb.doc(s.db, "place-q1", "inbox")
  lu.assertEquals(entry.execution_id, "inbox-q1")
  lu.assertEquals(entry.priority, 3)
  require("mongostore").sleep(0.5)
  lu.assertEquals(show("inbox-q1", s).active_path, "Cart")
  local n, out = run_worker(s, 1)
  lu.assertEquals(n, 1, out)
  local exe, trace = show("inbox-q1", s)
  lu.assertEquals(exe.active_path, "AwaitingPayment")
  applied_once(trace, "place-q1")
  lu.assertEquals(rawdb.count(s.db, "inbox"), 0, "the worker acked it")
end

-- configure's inbox_group and sweep_batch reach the engines of nginx's
-- worker: a queue drained one event a commit, and timers swept three
-- documents a page, still deliver everything once.
function TestNgxInbox:test_inbox_group_and_sweep_batch_are_the_engines_options()
  local msngx = require "mongostore.ngx"
  local saved = msngx.config()
  msngx.configure{ uri = "mongodb://h:1", inbox_group = 1, sweep_batch = 7 }
  lu.assertEquals({ msngx.config().inbox_group, msngx.config().sweep_batch }, { 1, 7 })
  for _, bad in ipairs { { inbox_group = 0 }, { inbox_group = 257 }, { inbox_group = 1.5 } } do
    bad.uri = "mongodb://h:1"
    lu.assertErrorMsgContains("cfg.inbox_group must be an integer from 1 to 256", msngx.configure, bad)
  end
  lu.assertErrorMsgContains("cfg.inbox_group must be an integer, got string", msngx.configure,
    { uri = "mongodb://h:1", inbox_group = "1" })
  lu.assertErrorMsgContains("sweep_batch must be an integer >= 1", msngx.configure,
    { uri = "mongodb://h:1", sweep_batch = 0 })
  for _, v in ipairs { 0, 1.5 } do
    lu.assertErrorMsgContains("max_conflicts must be an integer >= 1", msngx.configure,
      { uri = "mongodb://h:1", max_conflicts = v })
  end
  lu.assertErrorMsgContains("max_conflicts must be an integer, got string", msngx.configure,
    { uri = "mongodb://h:1", max_conflicts = "3" })
  if saved then msngx.configure(saved) end

  H.check_prerequisites()
  local s = H.start{ workers = 1, locations = LOCATIONS, configure = "inbox_group = 1, sweep_batch = 3," }
  local ok, err = pcall(function()
    for i = 1, 8 do
      lu.assertEquals(s:post("/executions", { chart = "order", id = "g-" .. i,
                                              context = { total = 30, payment_timeout = 0.3 } }), 201)
      lu.assertEquals(enqueue("g-" .. i, { kind = "PlaceOrder", data = {}, id = "g-place-" .. i }, nil, s).ok, true)
    end
    for i = 1, 8 do
      local exe = H.poll(function()
        local e = show("g-" .. i, s)
        return e.active_path == "Cancelled" and e
      end, 20)
      lu.assertTrue(exe ~= nil and exe ~= false, "g-" .. i .. " was not placed and timed out")
      local _, trace = show("g-" .. i, s)
      applied_once(trace, "g-place-" .. i)
    end
    lu.assertEquals(s:errors(), {})
  end)
  s:stop()
  if not ok then error(err, 0) end
end

function TestNgxInbox:test_a_bad_event_is_refused_and_writes_nothing()
  H.check_prerequisites()
  local s = srv()
  local before = rawdb.count(s.db, "inbox")
  local got = enqueue("inbox-o2", { kind = "", data = {} })
  lu.assertEquals(got.code, "invalid", H.encode(got))
  got = enqueue("inbox-o2", { kind = "PlaceOrder", data = {} }, 9)
  lu.assertEquals(got.code, "invalid", H.encode(got))
  lu.assertEquals(rawdb.count(s.db, "inbox"), before)
end
