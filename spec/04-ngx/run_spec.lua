-- spec/04-ngx/run_spec.lua - msngx.run in real nginx: a handler calls a
-- function of an app module (spec/fixtures/app/run_probe.lua) in a worker
-- thread's VM and answers its results. Arguments and results cross exactly
-- (integers beyond 2^53, nested tables, empty arrays, null, nils), the
-- function's own failures pass through, a Lua error inside is reported and
-- the next call works, unknown modules and functions are clear errors,
-- calls in flight stay within max_inflight, and a function that blocks its
-- thread does not block the worker: another location answers meanwhile.
-- The module's handles: a Store it opens itself and keeps, and the VM's
-- Database from mongostore.ngx_thread.database (the document API).
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local H = require "helpers.ngx"

local VM_POOL = 4 -- the example's max_inflight is its VM pool

-- /_run: { module, fn, args = { n, v = [...] } } -> msngx.run(module, fn, args...)
-- answered as { n, v = [...] } (nil as null), or { raised = msg } when it
-- raised. /_run_state and /_run_release read and set the fixture's dict.
local LOCATIONS = [[
        location = /_run {
            content_by_lua_block {
                local msngx = require "mongostore.ngx"
                local core = require "mongostore.core"
                ngx.req.read_body()
                local req = core.json_decode(ngx.req.get_body_data() or "")
                local a = req.args
                for i = 1, a.n do if a.v[i] == core.null then a.v[i] = nil end end
                local function answer(ok, ...)
                    if not ok then return { raised = tostring((...)) } end
                    local n, v = select("#", ...), { ... }
                    for i = 1, n do if v[i] == nil then v[i] = core.null end end
                    return { n = n, v = core.array(v) }
                end
                local module, fn = req.module, req.fn
                if module == core.null then module = nil end
                local out = answer(pcall(msngx.run, module, fn, unpack(a.v, 1, a.n)))
                ngx.say(assert(core.json_encode(out)))
            }
        }

        location = /_run_boxes {
            content_by_lua_block {
                local msngx = require "mongostore.ngx"
                local ms = require "mongostore"
                local core = require "mongostore.core"
                -- every box, in an array so that the order is fixed and the
                -- BSON of what was sent and what came back can be compared
                local sent = ms.array{
                    ms.objectid("5f00000000000000000000a1"), ms.date(1700000000123), ms.int32(7),
                    ms.int64("9007199254740993"), ms.binary("\0\1\255", 4), ms.decimal("1.10"),
                    ms.timestamp(5, 6), ms.regex("^a", "i"), ms.code("x = 1"), ms.minkey, ms.maxkey,
                    ms.array{}, ms.null, { nested = ms.objectid("5f00000000000000000000a2"), d = 1.5 },
                }
                local n, back = msngx.run("app.run_probe", "echo", sent)
                local want = assert(core.bson_encode({ v = sent }))
                local got = type(back) == "table" and core.bson_encode({ v = back })
                local doc, err = msngx.run("app.run_probe", "find_raw", ngx.var.arg_coll)
                local oid = doc and doc._id
                ngx.say(assert(core.json_encode{
                    n = n, same = got == want,
                    id = oid and tostring(oid) or ms.null, err = err or ms.null,
                    id_is_objectid = oid ~= nil and getmetatable(oid) == getmetatable(ms.objectid()),
                }))
            }
        }

        location = /_run_state {
            content_by_lua_block {
                local d, k = ngx.shared.run_probe, ngx.var.arg_key
                ngx.say(require("mongostore.core").json_encode{
                    entered = d:get(k .. ":entered") or false, max = d:get(k .. ":max") or 0,
                    now = d:get(k .. ":now") or 0 })
            }
        }

        location = /_run_release {
            content_by_lua_block {
                ngx.shared.run_probe:set(ngx.var.arg_key .. ":released", true)
                ngx.say('{"released":true}')
            }
        }

]]

local server

local function srv()
  if not server then
    server = H.start{ workers = 1, threads = 8, vm_pool = VM_POOL, locations = LOCATIONS,
                      http = "    lua_shared_dict run_probe 1m;\n",
                      package_path = { H.root .. "/spec/fixtures/?.lua" } }
  end
  return server
end

local function pack_args(...)
  local n, v = select("#", ...), { ... }
  for i = 1, n do if v[i] == nil then v[i] = ms.null end end
  return { n = n, v = ms.array(v) }
end

local function body_of(module, fn, ...)
  return { module = module, fn = fn, args = pack_args(...) }
end

-- msngx.run(module, fn, ...) in the server: its results as a list and their
-- count (null for nil), or raises with what it raised as { raised = msg }.
local function run(module, fn, ...)
  local status, body, _, raw = srv():post("/_run", body_of(module, fn, ...))
  lu.assertEquals(status, 200, tostring(raw))
  lu.assertIsTable(body, raw)
  return body, raw
end

local function results(module, fn, ...)
  local body, raw = run(module, fn, ...)
  lu.assertNil(body.raised, raw)
  return body.v, body.n, raw
end

TestNgxRun = {}

function TestNgxRun:tearDown()
  if server then
    lu.assertEquals(server:errors { "mongostore%.ngx run app%.run_probe%.boom: Lua error: .*boom: on purpose" }, {})
  end
end

function TestNgxRun.teardownClass()
  if server then
    pcall(server.stop, server)
    server = nil
  end
end

function TestNgxRun:test_arguments_and_results_cross_exactly()
  local doc = {
    big = 9007199254740993, max = math.maxinteger, min = math.mininteger, neg = -9007199254740995,
    half = 0.5, tenth = 0.1, text = "a\0b \u{e9}",
    nested = { list = { 1, { 2, { 3 } }, { deep = { x = ms.null } } }, empty = ms.array{}, flag = false },
  }
  local v, n, raw = results("app.run_probe", "echo", doc, nil, "x", nil)
  -- echo answers how many arguments it got, then each one: nils at the top
  -- level stay nils (null in the answer), the trailing one counted
  lu.assertEquals(n, 5, raw)
  lu.assertEquals(v[1], 4)
  lu.assertEquals(v[3], ms.null)
  lu.assertEquals(v[4], "x")
  lu.assertEquals(v[5], ms.null)
  local back = v[2]
  lu.assertEquals(math.type(back.big), "integer")
  lu.assertEquals(back.big, 9007199254740993)
  lu.assertEquals(back.max, math.maxinteger)
  lu.assertEquals(back.min, math.mininteger)
  lu.assertEquals(back.neg, -9007199254740995)
  lu.assertEquals(math.type(back.half), "float")
  lu.assertEquals(back.half, 0.5)
  lu.assertEquals(back.tenth, 0.1)
  lu.assertEquals(back.text, "a\0b \u{e9}")
  lu.assertEquals(back.nested.list[1], 1)
  lu.assertEquals(back.nested.list[2][2][1], 3)
  -- null inside a value stays null (the key is kept)
  lu.assertIs(back.nested.list[3].deep.x, ms.null)
  lu.assertIs(back.nested.flag, false)
  lu.assertTrue(ms.is_array(back.nested.empty), "an empty array stays an array")
  lu.assertStrContains(raw, '"empty":[]')
  lu.assertStrContains(raw, "9007199254740993")
  lu.assertStrContains(raw, "9223372036854775807")
  lu.assertStrContains(raw, "-9223372036854775808")

  -- no arguments, no results but nils
  v, n = results("app.run_probe", "echo")
  lu.assertEquals(n, 1)
  lu.assertEquals(v[1], 0)
end

function TestNgxRun:test_an_execution_through_a_store_the_module_keeps()
  local ctx = { total = 9007199254740993, lines = { { sku = "a", qty = 2 } }, tags = ms.array{}, note = ms.null }
  local v, n, raw = results("app.run_probe", "save_and_load", "run-1", ctx)
  lu.assertEquals(n, 2, raw)
  lu.assertEquals(v[1].total, 9007199254740993)
  lu.assertEquals(v[1].lines, { { sku = "a", qty = 2 } })
  lu.assertTrue(ms.is_array(v[1].tags))
  lu.assertIs(v[1].note, ms.null)
  -- what the thread wrote is in MongoDB, read here with a store of our own
  local store = assert(ms.connect(helper.uri(), { db = srv().db, wait = 10 }))
  local exe = assert(store:load("run-1"))
  store:close()
  lu.assertEquals(exe.definition_id, "run_probe")
  lu.assertEquals(exe.context.total, 9007199254740993)
  lu.assertEquals(exe.context.lines, { { sku = "a", qty = 2 } })
end

function TestNgxRun:test_documents_through_the_thread_vms_database()
  local calls, opened = 3 * VM_POOL, 0
  for i = 1, calls do
    local doc = { n = i, big = 9007199254740993, tags = ms.array{}, nested = { a = { 1, 2 }, none = ms.null } }
    local v, n, raw = results("app.run_probe", "insert_and_find", "notes", doc)
    lu.assertEquals(n, 2, raw)
    local found = v[1]
    lu.assertStrMatches(found._id, "^%x+$")
    lu.assertEquals(#found._id, 24)
    lu.assertEquals(found.n, i)
    lu.assertEquals(found.big, 9007199254740993)
    lu.assertTrue(ms.is_array(found.tags), raw)
    lu.assertEquals(found.nested.a, { 1, 2 })
    lu.assertIs(found.nested.none, ms.null)
    if v[2] == false then opened = opened + 1 end
  end
  -- each VM opened its Database once and kept it
  lu.assertTrue(opened >= 1 and opened <= VM_POOL, "databases opened: " .. opened)
  -- what the threads wrote is in MongoDB
  local db = assert(ms.database(helper.uri(), { db = srv().db, wait = 10 }))
  lu.assertEquals(db:collection("notes"):count({ big = 9007199254740993 }), calls)

  -- the document API's own failure passes through as it is
  local v, _, raw = results("app.run_probe", "insert_twice", "notes", { _id = "dup-1" })
  lu.assertEquals(v[1], ms.null, raw)
  lu.assertEquals(v[3], "duplicate", raw)
  lu.assertStrContains(v[2], "dup-1")

  -- a document answered as it comes holds an ObjectId: it crosses as one,
  -- as does every other box, both ways (BSON between the VMs)
  assert(db:collection("boxed"):insert_one({ _id = ms.objectid("5f00000000000000000000b7"), at = ms.date(5) }))
  local status, body, _, raw2 = srv():get("/_run_boxes?coll=boxed")
  lu.assertEquals(status, 200, raw2)
  lu.assertEquals(body.n, 1, raw2)
  lu.assertTrue(body.same, raw2)
  lu.assertEquals(body.id, "5f00000000000000000000b7", raw2)
  lu.assertTrue(body.id_is_objectid, raw2)
  db:close()
end

-- The example's notes endpoint: documents through msngx.run and app/notes.lua.
function TestNgxRun:test_the_examples_notes_endpoint()
  local s = srv()
  local status, body, _, raw = s:post("/notes", { text = "first note", tags = { "a", "b" } })
  lu.assertEquals(status, 201, raw)
  local id = body.id
  lu.assertStrMatches(id, "^[%x%-]+$")
  status, body, _, raw = s:get("/notes/" .. id)
  lu.assertEquals(status, 200, raw)
  lu.assertEquals(body.note, { id = id, text = "first note", tags = { "a", "b" } })
  -- no tags: an empty array, kept one through MongoDB and both thread crossings
  status, body, _, raw = s:post("/notes", { text = "second" })
  lu.assertEquals(status, 201, raw)
  status, _, _, raw = s:get("/notes/" .. body.id)
  lu.assertEquals(status, 200, raw)
  lu.assertStrContains(raw, '"tags":[]')
  -- the document is in MongoDB as written
  local db = assert(ms.database(helper.uri(), { db = s.db, wait = 10 }))
  local doc = db:collection("notes"):find_one({ _id = id })
  db:close()
  lu.assertEquals(doc, { _id = id, text = "first note", tags = { "a", "b" } })

  status, body, _, raw = s:get("/notes/no-such-note")
  lu.assertEquals(status, 404, raw)
  lu.assertEquals(body.code, "not_found")
  status, body, _, raw = s:post("/notes", { text = "" })
  lu.assertEquals(status, 400, raw)
  lu.assertStrContains(body.error, "text must be a non-empty string")
  status, _, _, raw = s:post("/notes", { text = "x", tags = { 1 } })
  lu.assertEquals(status, 400, raw)
  status, _, _, raw = s:request("DELETE", "/notes/" .. id)
  lu.assertEquals(status, 405, raw)
end

function TestNgxRun:test_the_functions_own_failure_passes_through()
  local v, n, raw = results("app.run_probe", "refuse", "o-9")
  lu.assertEquals(n, 4, raw)
  lu.assertEquals(v[1], ms.null)
  lu.assertEquals(v[2], "no order o-9")
  lu.assertEquals(v[3], "not_found")
  lu.assertEquals(v[4], { server_code = 42 })
end

function TestNgxRun:test_a_lua_error_inside_is_reported_and_not_fatal()
  local v, n, raw = results("app.run_probe", "boom", "on purpose")
  lu.assertEquals(n, 3, raw)
  lu.assertEquals(v[1], ms.null)
  lu.assertStrContains(v[2], "run app.run_probe.boom: Lua error: ")
  lu.assertStrContains(v[2], "boom: on purpose")
  lu.assertEquals(v[3], "server")
  -- the position stays out of the answer (it may reach a client) and goes,
  -- with the traceback, to nginx's error log
  lu.assertNil(v[2]:find(".lua:", 1, true), v[2])
  lu.assertStrContains(srv():log(), "run_probe.lua:")
  lu.assertStrContains(srv():log(), "stack traceback")
  -- the thread VM and the worker go on
  for i = 1, VM_POOL + 1 do
    v = results("app.run_probe", "echo", i)
    lu.assertEquals(v, { 1, i })
  end
  local status, body = srv():get("/ping")
  lu.assertEquals(status, 200)
  lu.assertEquals(body, "pong")
end

function TestNgxRun:test_unknown_modules_and_functions_are_clear_errors()
  local v, _, raw = results("app.no_such_module", "create", 1)
  lu.assertEquals(v[1], ms.null, raw)
  lu.assertStrContains(v[2], "run app.no_such_module.create: no module app.no_such_module")
  lu.assertEquals(v[3], "invalid")

  v, _, raw = results("app.run_probe", "no_such_fn")
  lu.assertEquals(v[1], ms.null, raw)
  lu.assertEquals(v[2], "run app.run_probe.no_such_fn: module app.run_probe has no function no_such_fn")
  lu.assertEquals(v[3], "invalid")

  -- a result BSON cannot carry (a function)
  v, _, raw = results("app.run_probe", "unencodable")
  lu.assertEquals(v[1], ms.null, raw)
  lu.assertStrContains(v[2], "run app.run_probe.unencodable: answer not encodable")
  lu.assertEquals(v[3], "server")

  -- what the app's code may name at all: raised, before any thread runs
  local body = run("mongostore.store", "connect", "mongodb://x")
  lu.assertStrContains(body.raised, "mongostore.ngx.run: module 'mongostore.store' is not in configure's run_modules")
  body = run("appx.orders", "create")
  lu.assertStrContains(body.raised, "is not in configure's run_modules")
  body = run("app..x", "create")
  lu.assertStrContains(body.raised, "module must be a module name")
  body = run("app.run_probe", "echo()")
  lu.assertStrContains(body.raised, "fn must be a function name")
  body = run(ms.null, "echo")
  lu.assertStrContains(body.raised, "module must be a string, got nil")
  body = run("app.run_probe", 3)
  lu.assertStrContains(body.raised, "fn must be a string, got number")
end

function TestNgxRun:test_concurrent_calls_stay_within_max_inflight()
  local n = 6 * VM_POOL
  local reqs = {}
  for i = 1, n do reqs[i] = { "POST", "/_run", body_of("app.run_probe", "hold", "burst", 0.15) } end
  local res, wall = srv():parallel(reqs, n)
  local counts = {}
  for i, r in ipairs(res) do
    lu.assertEquals(r.status, 200, "request " .. i .. ": " .. tostring(r.body))
    local body = H.decode(r.body)
    lu.assertIsTable(body, r.body)
    lu.assertNil(body.raised, r.body)
    lu.assertEquals(body.n, 1, r.body)
    counts[#counts + 1] = body.v[1]
  end
  local status, state = srv():get("/_run_state?key=burst")
  lu.assertEquals(status, 200)
  -- every call ran (none refused for want of a VM), never more than the
  -- bound at once though the pool has twice as many threads, and more than
  -- one at a time
  print(string.format("\n  %d calls of 0.15 s at once: %.2f s; at most %d in flight (max_inflight %d, 8 threads)",
    n, wall, state.max, VM_POOL))
  lu.assertEquals(#counts, n)
  lu.assertEquals(state.now, 0)
  lu.assertTrue(state.max <= VM_POOL, "calls in flight at once: " .. state.max)
  lu.assertTrue(state.max >= 2, "the calls ran one at a time: " .. state.max)
  for _, c in ipairs(counts) do lu.assertTrue(c >= 1 and c <= VM_POOL, "count " .. c) end
end

function TestNgxRun:test_a_blocking_function_does_not_block_the_worker()
  local s = srv()
  -- one nginx worker: the slow call, the ping and the release all meet in it
  local slow = s:background("/_run", body_of("app.run_probe", "wait_release", "order", 20))
  local entered = H.poll(function()
    local _, state = s:get("/_run_state?key=order")
    return type(state) == "table" and state.entered
  end, 15)
  lu.assertTrue(entered, "the slow call never started")
  -- the worker answers while the call holds its thread
  local status, body = s:get("/ping")
  lu.assertEquals(status, 200)
  lu.assertEquals(body, "pong")
  local v = results("app.run_probe", "echo", "meanwhile")
  lu.assertEquals(v, { 1, "meanwhile" })
  lu.assertFalse(slow.done(), "the slow call ended before it was released")
  -- released by a request the worker could only serve while not blocked
  status = s:get("/_run_release?key=order")
  lu.assertEquals(status, 200)
  lu.assertTrue(H.poll(slow.done, 25), "the slow call did not answer")
  local answer = H.decode(slow.answer() or "")
  lu.assertIsTable(answer, tostring(slow.answer()))
  lu.assertEquals(answer.v, { true }, "it was released, not timed out")
end

-- configure's run_modules and the names msngx.run takes, checked before
-- any thread is asked (here, outside nginx).
TestNgxRunNames = {}

function TestNgxRunNames:test_run_modules_must_be_a_list_of_names_or_prefixes()
  local msngx = require "mongostore.ngx"
  local uri = "mongodb://127.0.0.1:1"
  local bad_lists = { "app.", { "app..x" }, { "" }, { "." }, { "1app" }, { 1 }, { x = "app." },
                      { "app.", nil, "b" } }
  for i = 1, 8 do
    local ok, err = pcall(msngx.configure, { uri = uri, run_modules = bad_lists[i] })
    lu.assertFalse(ok, "case " .. i)
    lu.assertStrContains(err, i == 1 and "cfg.run_modules must be a table, got string"
      or "run_modules must be a list of module names or prefixes ending with '.'")
  end
  lu.assertTrue(msngx.configure{ uri = uri, run_modules = { "app.", "shop.orders" } })
  for _, name in ipairs { "app", "appx.orders", "shop.orders.lines", "shop.ordersx", "shop" } do
    local ok, err = pcall(msngx.run, name, "create")
    lu.assertFalse(ok, name)
    lu.assertStrContains(err, "mongostore.ngx.run: module '" .. name .. "' is not in configure's run_modules")
  end
  -- a misspelt setting raises, as every options table does
  local bad_ok, bad_err = pcall(msngx.configure, { uri = uri, run_module = { "app." } })
  lu.assertFalse(bad_ok)
  lu.assertStrContains(bad_err, "msngx.configure: unknown option run_module")
  -- none is callable when run_modules is absent
  lu.assertTrue(msngx.configure{ uri = uri })
  local ok, err = pcall(msngx.run, "app.orders", "create")
  lu.assertFalse(ok)
  lu.assertStrContains(err, "is not in configure's run_modules")
end
