-- spec/04-ngx/external_spec.lua - external events in real nginx:
-- msngx.start_worker{ on_external = fn } hands each order's Charge to fn in
-- the nginx worker, where a cosocket HTTP call reaches a location of the
-- same nginx standing in for the gateway; each Charge arrives once and the
-- outbox empties. A gateway that fails is retried with a growing wait, each
-- failure logged. Without on_external the Charges stay pending, said once.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local H = require "helpers.ngx"

-- /_gateway records each charge it accepts (per order) and the tries it
-- saw; an order whose id starts with "flaky" is refused twice (500).
-- /_gateway_seen answers { accepted = { order = n }, tries = { order = n } }.
local LOCATIONS = [[
        location = /_gateway {
            content_by_lua_block {
                local core = require "mongostore.core"
                local dict = ngx.shared.gateway
                ngx.req.read_body()
                local req = core.json_decode(ngx.req.get_body_data() or "") or {}
                local order = type(req.data) == "table" and req.data.order or "?"
                local tries = dict:incr("tries:" .. order, 1, 0)
                if order:match("^flaky") and tries <= 2 then
                    ngx.status = 500
                    ngx.say("{}")
                    return
                end
                dict:incr("accepted:" .. order, 1, 0)
                ngx.say("{}")
            }
        }
        location = /_gateway_seen {
            content_by_lua_block {
                local core = require "mongostore.core"
                local dict = ngx.shared.gateway
                local out = { accepted = {}, tries = {}, started = {} }
                for _, k in ipairs(dict:get_keys(0)) do
                    local what, order = k:match("^(%a+):(.*)$")
                    out[what][order] = dict:get(k)
                end
                ngx.say(assert(core.json_encode(out)))
            }
        }
]]

-- An order whose id starts with "slow" is held 12 s before it is posted:
-- longer than the engine's 10 s lease, which the loop renews meanwhile.
local WORKER = [[
            on_external = function(entry)
                local order = tostring(entry.event.data.order)
                if order:match("^slow") then
                    ngx.shared.gateway:incr("started:" .. order, 1, 0)
                    ngx.sleep(12)
                end
                return require("ngx_gateway").deliver(entry, {{PORT}})
            end,
            external_concurrency = 4,
]]

-- The example's own on_external taken away: a value computed at run time,
-- since LuaJIT fills a constant field of a table constructor before the
-- computed ones, whatever their order.
local NO_HANDLER = "on_external = (function() return nil end)(),"

local function start(opts)
  opts = opts or {}
  return H.start{ workers = 2, locations = LOCATIONS, http = "lua_shared_dict gateway 1m;",
                  package_path = { helper.root() .. "/spec/fixtures/?.lua" }, worker = opts.worker or WORKER }
end

local function seen(s)
  local status, body = s:get("/_gateway_seen")
  lu.assertEquals(status, 200, H.encode({ body }))
  return body
end

local function place_orders(s, prefix, n)
  local reqs = {}
  for i = 1, n do
    local id = prefix .. "-" .. i
    local status, body = s:post("/executions", { chart = "order", id = id, context = { total = i } })
    lu.assertEquals(status, 201, H.encode({ body }))
    reqs[#reqs + 1] = { "POST", "/executions/" .. id .. "/events", { kind = "PlaceOrder" } }
  end
  for _, r in ipairs(s:parallel(reqs, 16)) do lu.assertEquals(r.status, 202, H.encode(r)) end
end

local function externals_pending(s)
  local store = assert(ms.connect(helper.uri(), { db = s.db, wait = 10 }))
  local n = 0
  for _, e in ipairs(assert(store:pending_outbox())) do
    if e.target_id == nil then n = n + 1 end
  end
  store:close()
  return n
end

local function count_lines(log, pattern)
  local n = 0
  for line in log:gmatch("[^\n]+") do
    if line:find(pattern) then n = n + 1 end
  end
  return n
end

TestNgxExternal = {}

function TestNgxExternal:tearDown()
  if self.server then
    lu.assertEquals(self.server:errors(), {})
    self.server:stop()
  end
end

function TestNgxExternal:test_each_charge_arrives_once_through_a_cosocket_and_the_outbox_empties()
  local s = start()
  self.server = s
  local n = 40
  place_orders(s, "o", n)
  -- within the engine's 10 s lease: an entry a loop claimed and dropped
  -- would come again only once its claim ran out
  local got = H.poll(function()
    local body = seen(s)
    local k = 0
    for _ in pairs(body.accepted) do k = k + 1 end
    return k == n and body or nil
  end, 8, 0.1)
  lu.assertNotNil(got, "every order charged within the lease: " .. H.encode(seen(s)))
  lu.assertTrue(H.poll(function() return externals_pending(s) == 0 end, 10, 0.1), "the outbox empties")
  ms.sleep(1) -- nothing comes a second time
  got = seen(s)
  for i = 1, n do
    local id = "o-" .. i
    lu.assertEquals(got.accepted[id], 1, id .. " charged once")
    lu.assertEquals(got.tries[id], 1, id .. " tried once")
  end
end

function TestNgxExternal:test_a_failing_gateway_is_retried_with_backoff_and_each_failure_logged()
  local s = start()
  self.server = s
  place_orders(s, "flaky", 1)
  lu.assertTrue(H.poll(function() return seen(s).accepted["flaky-1"] == 1 end, 20, 0.1),
    "charged in the end: " .. H.encode(seen(s)))
  lu.assertTrue(H.poll(function() return externals_pending(s) == 0 end, 10, 0.1))
  ms.sleep(0.5)
  local got = seen(s)
  lu.assertEquals(got.tries["flaky-1"], 3)
  lu.assertEquals(got.accepted["flaky-1"], 1)
  local log = s:log()
  lu.assertEquals(count_lines(log, "on_external: outbox %d+: external Charge failed %(try 1, next in [%d.]+s%): "
    .. "gateway answered 500"), 1, log:sub(-3000))
  lu.assertEquals(count_lines(log, "external Charge failed %(try 2, next in"), 1)
  -- the waits were the backoff's: the first in [0.25, 0.5] s, the second in [0.5, 1] s
  local w1 = tonumber(log:match("try 1, next in ([%d.]+)s"))
  local w2 = tonumber(log:match("try 2, next in ([%d.]+)s"))
  lu.assertTrue(w1 >= 0.2 and w1 <= 0.55, tostring(w1))
  lu.assertTrue(w2 >= 0.45 and w2 <= 1.05, tostring(w2))
end

function TestNgxExternal:test_without_on_external_charges_stay_pending_and_it_is_said_once()
  local s = start{ worker = NO_HANDLER }
  self.server = s
  place_orders(s, "p", 3)
  ms.sleep(1.5) -- several worker steps
  lu.assertEquals(externals_pending(s), 3)
  local body = seen(s)
  lu.assertNil(next(body.accepted))
  lu.assertEquals(count_lines(s:log(), "start_worker has no on_external"), 1, s:log():sub(-3000))
  local st, exe = s:get("/executions/p-1")
  lu.assertEquals(st, 200)
  lu.assertEquals(exe.execution.active_path, "AwaitingPayment")
end

function TestNgxExternal:test_a_slow_handlers_claim_is_renewed_and_nobody_else_takes_it()
  local s = start()
  self.server = s
  place_orders(s, "slow", 1)
  -- once nginx's handler holds it, another engine (a process of its own
  -- would do the same) tries to claim the Charge all along the handler's
  -- 12 s, past the 10 s lease
  lu.assertNotNil(H.poll(function() return seen(s).started["slow-1"] end, 10, 0.05), "the handler started")
  local store = assert(ms.connect(helper.uri(), { db = s.db, wait = 10 }))
  local other = require("mongostore.engine").new{ store = store, log = function() end }
  local taken = {}
  local deadline = ms.now() + 40
  while ms.now() < deadline and not seen(s).accepted["slow-1"] do
    for _, e in ipairs(assert(other:claim_external(10))) do
      taken[#taken + 1] = e.seq
      other:settle_external(e, false, "spec: not mine", { release = true })
    end
    ms.sleep(0.25)
  end
  local lines = {}
  for line in s:log():gmatch("[^\n]+") do
    if line:find("on_external") or line:find("gateway") then lines[#lines + 1] = line end
  end
  lu.assertEquals(seen(s).accepted["slow-1"], 1, table.concat(lines, "\n"))
  lu.assertEquals(seen(s).started["slow-1"], 1, "the handler ran once")
  lu.assertEquals(taken, {}, "the claim was taken while its handler ran")
  lu.assertTrue(H.poll(function() return externals_pending(s) == 0 end, 10, 0.1))
  store:close()
  lu.assertEquals(count_lines(s:log(), "claim ran out"), 0)
end

function TestNgxExternal:test_the_examples_own_charges_reach_its_stand_in_gateway_once()
  local s = H.start{ workers = 2 }
  self.server = s
  place_orders(s, "ex", 3)
  lu.assertTrue(H.poll(function() return externals_pending(s) == 0 end, 20, 0.1), "the outbox empties")
  ms.sleep(0.5)
  local log = s:log()
  for i = 1, 3 do
    lu.assertEquals(count_lines(log, "gateway %(stand%-in%): charge order ex%-" .. i .. " amount " .. i .. " key %S+"), 1,
      log:sub(-3000))
  end
end
