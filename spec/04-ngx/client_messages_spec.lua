-- spec/04-ngx/client_messages_spec.lua - no message that reaches a client
-- tells it where the library lives: a raised argument error that comes back
-- from the worker thread as nil, msg, "invalid" (an app that passes a
-- client's values straight to msngx), a raise in an msngx.run function, and
-- the OpenResty example's error bodies carry neither a file path nor a line
-- number.
local lu = require "luaunit"
local helper = require "helpers"
local H = require "helpers.ngx"

-- /_careless: the JSON body's { call, args } handed to msngx as they came,
-- as a careless handler would; answers { err, code } of what msngx returned.
local PROBE = [[
        location = /_careless {
            content_by_lua_block {
                local msngx = require "mongostore.ngx"
                local core = require "mongostore.core"
                ngx.req.read_body()
                local req = core.json_decode(ngx.req.get_body_data() or "")
                local args = req.args or {}
                local ok, err, code
                if req.call == "run" then
                  ok, err, code = msngx.run("app.notes", "create", args[1])
                else
                  ok, err, code = msngx[req.call](args[1], args[2], args[3])
                end
                ngx.say(core.json_encode({ ok = ok and true or false, err = ok and core.null or err,
                                           code = code or core.null }))
            }
        }

]]

local server

TestClientMessages = {}

function TestClientMessages.setupClass()
  server = H.with_probe(PROBE, function() return H.start{ workers = 1, threads = 2 } end)
  local status, body = server:post("/executions", { chart = "order", id = "cm-1", context = { total = 3 } })
  assert(status == 201, H.encode({ body }))
end

function TestClientMessages.teardownClass()
  if server then pcall(server.stop, server) end
  server = nil
end

-- No file position ("x.lua:12:", "[string ...]:3:") and no absolute path
-- of this machine (the checkout, /usr/share/lua, ...).
local function assert_no_position(msg, what)
  lu.assertEquals(type(msg), "string", what .. ": no message")
  lu.assertNil(msg:find(".lua:", 1, true), what .. ": " .. msg)
  lu.assertNil(msg:find("%]:%d+:"), what .. ": " .. msg)
  local root = H.sh("cd " .. H.shell_quote(helper.root()) .. " && pwd"):gsub("%s+$", "")
  lu.assertNil(msg:find(root, 1, true), what .. ": " .. msg)
  lu.assertNil(msg:find("/usr/", 1, true), what .. ": " .. msg)
  lu.assertNil(msg:find("/tmp/", 1, true), what .. ": " .. msg)
end

local CARELESS = {
  { "start, opts.id a number", { call = "start", args = { "order", { id = 5 } } } },
  { "start, opts a string", { call = "start", args = { "order", "o-1" } } },
  { "start_external, context a string", { call = "start_external", args = { "order", { context = "x" } } } },
  { "send, event a string", { call = "send", args = { "cm-1", "PlaceOrder" } } },
  { "send, kind a table", { call = "send", args = { "cm-1", { kind = { 1 } } } } },
  { "send, id a number", { call = "send", args = { 7, { kind = "PlaceOrder" } } } },
  { "send_external, kind a number", { call = "send_external", args = { "cm-1", { kind = 3 } } } },
  { "enqueue, data a string", { call = "enqueue", args = { "cm-1", { kind = "PlaceOrder", data = "x" } } } },
  { "enqueue, unknown option", { call = "enqueue", args = { "cm-1", { kind = "PlaceOrder" }, { prio = 1 } } } },
  { "send_many, list a string", { call = "send_many", args = { "x" } } },
  { "cancel, id a table", { call = "cancel", args = { { 1 } } } },
  { "load, id a number", { call = "load", args = { 12 } } },
  { "list_executions, limit a string", { call = "list_executions", args = { { limit = "x" } } } },
  { "run, a raise in the function", { call = "run", args = { 5 } } },
}

function TestClientMessages:test_msngx_messages_carry_no_file_or_line()
  for _, case in ipairs(CARELESS) do
    local status, body = server:post("/_careless", case[2])
    lu.assertEquals(status, 200, case[1] .. ": " .. H.encode({ body }))
    lu.assertEquals(body.ok, false, case[1] .. ": " .. H.encode(body))
    lu.assertTrue(body.code == "invalid" or body.code == "server", case[1] .. ": " .. H.encode(body))
    assert_no_position(body.err, case[1])
  end
  -- the operator still gets the position: the raise in msngx.run's function
  -- is logged whole, with its traceback
  lu.assertStrContains(server:log(), "notes.lua:")
  lu.assertEquals(server:errors({ "mongostore%.ngx run app%.notes%.create: Lua error" }), {})
end

-- The example's API: every error body a hostile request can get.
local HOSTILE = {
  { "POST", "/executions", { chart = "order", context = { payment_timeout = "soon" } } },
  { "POST", "/executions", { chart = "order", context = { payment_timeout = -1 } } },
  { "POST", "/executions", { chart = "order", priority = 1.5 } },
  { "POST", "/executions", { chart = "nope" } },
  { "POST", "/executions", "[1,2]" },
  { "POST", "/executions", "{\"chart\":" },
  { "POST", "/executions/cm-1/events", { kind = "Timeout" } },
  { "POST", "/executions/cm-1/events", { kind = "PlaceOrder", data = { 1, 2 } } },
  { "POST", "/executions/cm-1/events", { kind = "PlaceOrder", data = { total = "x" } } },
  { "POST", "/executions/nobody/events", { kind = "PlaceOrder" } },
  { "POST", "/executions/cm-1/nothing", {} },
  { "GET", "/executions?limit=abc" },
  { "GET", "/executions?cursor=%00" },
  { "GET", "/executions/nobody" },
  { "POST", "/notes", { text = { 1 } } },
  { "GET", "/notes/%2Fetc%2Fpasswd" },
}

function TestClientMessages:test_the_example_s_error_bodies_carry_no_file_or_line()
  for _, case in ipairs(HOSTILE) do
    local what = case[1] .. " " .. case[2]
    local status, body, _, raw = server:request(case[1], case[2], case[3])
    lu.assertTrue(type(status) == "number" and status >= 200, what .. ": " .. tostring(raw))
    if status >= 400 then
      lu.assertIsTable(body, what .. ": " .. tostring(raw))
      assert_no_position(body.error, what)
    end
    lu.assertNil(raw:find(".lua:", 1, true), what .. ": " .. raw)
  end
  lu.assertEquals(server:errors({ "mongostore%.ngx run app%.notes%.create: Lua error" }), {})
end
