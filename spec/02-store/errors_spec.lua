-- spec/02-store/errors_spec.lua - the error codes of a store whose connection
-- fails, through tools/fault-proxy: a connection reset in the middle of a
-- call is "network", a server that does not answer within socketTimeoutMS is
-- "timeout", no server to connect to is "unavailable"; and a write whose reply
-- was lost (applied or not) is applied once when the engine retries it.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local raw = require "helpers.rawdb"
local F = require "helpers.faults"
local C = require "fixtures.charts"
local engine_mod = require "mongostore.engine"

-- The driver retries a read once (retryReads) and, on a replica set, a
-- write once (retryWrites): with both off, one injected fault is the call's
-- only attempt, on every server. A short socketTimeoutMS keeps a silent
-- server from costing the default minutes; selection gets longer, since a
-- driver that marked the server down after a fault needs its monitor to
-- find it again (a slower server takes longer).
local OPTS = "retryReads=false&retryWrites=false&socketTimeoutMS=300&serverSelectionTimeoutMS=3000&connectTimeoutMS=1000"

-- Waits (bounded) until the store answers through the proxy again, so the
-- next fault hits a call on a working connection and not a monitor still
-- finding the server after the last one.
local function settle(store, id)
  local deadline = ms.now() + 15
  while true do
    local exe, err = store:load(id)
    if exe then return exe end
    if ms.now() > deadline then error("the store never answered again: " .. tostring(err), 2) end
    ms.sleep(0.05)
  end
end

TestErrors = {}

function TestErrors:setUp()
  self.proxy = F.start_proxy(helper.uri())
  self.db = helper.fresh_db("errors")
  self.stores = {}
end

function TestErrors:tearDown()
  for _, s in ipairs(self.stores) do s:close() end
  if self.proxy then self.proxy.stop() end
end

function TestErrors:connect(extra)
  local store, err, code = ms.connect(self.proxy.uri(extra or OPTS), { db = self.db, wait = 5 })
  assert(store, "connect through the proxy: " .. tostring(err) .. " (" .. tostring(code) .. ")")
  self.stores[#self.stores + 1] = store
  return store
end

-- An execution saved directly (not through the proxy), with an armed timer,
-- a trace step, an outbox entry and a pending spawn, so every store call
-- has something to read or change.
function TestErrors:seed(id)
  local direct = helper.connect({ db = self.db })
  local exe = ms.execution{ definition_id = "flat", id = id, context = { n = 1 } }
  assert(direct:commit(exe, {
    emits = { { target_id = "elsewhere", event = { kind = "Ping", data = {} } } },
    spawns = { { child_id = id .. "-child", root_path = "Fork.A", context = {} } },
    timers = { { action = "schedule", path = "Working", fire_at = ms.now() - 1 } },
    processed_event_id = "seed-" .. id,
    trace = { event = "Start", from = "", to = "Idle" },
  }))
  direct:close()
  return exe
end

local function result(...) return { n = select("#", ...), ... } end

-- Every store call, each given a reset before its first command reaches
-- the server: nil, message, "network", and nothing written.
function TestErrors:test_a_reset_connection_mid_call_is_network_and_writes_nothing()
  local store = self:connect()
  local exe = self:seed("r-1")
  local loaded = settle(store, "r-1")
  local fire_at = assert(C.timers(helper.connect({ db = self.db }), "r-1").Working)
  local calls = {
    load = function() return store:load("r-1") end,
    load_for_event = function() return store:load_for_event("r-1", "e") end,
    is_processed = function() return store:is_processed("r-1", "seed-r-1") end,
    list_executions = function() return store:list_executions{ definition_id = "flat", limit = 5 } end,
    pending_outbox = function() return store:pending_outbox() end,
    claim_outbox = function() return store:pending_outbox{ limit = 10, lease = 5 } end,
    pending_spawns = function() return store:pending_spawns() end,
    claim_spawns = function() return store:pending_spawns{ limit = 10, lease = 5 } end,
    due_timers = function() return store:due_timers(ms.now()) end,
    read_trace = function() return store:read_trace("r-1") end,
    commit = function()
      loaded.context.n = 2
      return store:commit(loaded, { processed_event_id = "e-commit" })
    end,
    save = function() return store:save(ms.execution{ definition_id = "flat", id = "r-new" }) end,
    append_trace = function() return store:append_trace("r-1", { event = "X" }) end,
    delete_timer = function() return store:delete_timer("r-1", "Working", fire_at) end,
  }
  local before = raw.docs(self.db)
  local names = {}
  for name in pairs(calls) do names[#names + 1] = name end
  table.sort(names)
  local got = {}
  for _, name in ipairs(names) do
    -- warm: the call works through the proxy, so what fails next is the reset
    settle(store, "r-1")
    self.proxy.bump("reset_next", 1)
    local r = result(calls[name]())
    got[name] = r[1] == nil and { type(r[2]) == "string", r[3] } or { false, "succeeded" }
  end
  local want = {}
  for _, name in ipairs(names) do want[name] = { true, "network" } end
  lu.assertEquals(got, want)
  lu.assertEquals(raw.docs(self.db), before, "a call whose command never reached the server wrote nothing")
  lu.assertEquals(self.proxy.stats().resets_next, #names)
  lu.assertEquals(exe.version, 1)
end

-- With the driver's read retry on (the default), a reset of both attempts is
-- network too; a single reset is absorbed by the retry.
function TestErrors:test_read_retry_absorbs_one_reset_and_reports_two_as_network()
  local store = self:connect("retryWrites=false&socketTimeoutMS=300&serverSelectionTimeoutMS=3000&connectTimeoutMS=1000")
  self:seed("rr-1")
  settle(store, "rr-1")
  self.proxy.bump("reset_next", 1)
  lu.assertNotNil(store:load("rr-1"), "one reset, retried once")
  settle(store, "rr-1")
  self.proxy.bump("reset_next", 2)
  local exe, msg, code = store:load("rr-1")
  lu.assertNil(exe)
  lu.assertEquals(code, "network", msg)
end

-- A server that takes the request and never answers: "timeout" after
-- socketTimeoutMS, for a read and for a write (which never reached the
-- server here, so nothing was written).
function TestErrors:test_a_black_holed_reply_is_timeout()
  local store = self:connect()
  self:seed("b-1")
  local loaded = settle(store, "b-1")
  local before = raw.doc(self.db, "b-1")
  self.proxy.set{ blackhole = 1 }
  local t0 = ms.now()
  local exe, msg, code = store:load("b-1")
  local waited = ms.now() - t0
  lu.assertNil(exe)
  lu.assertEquals(code, "timeout", msg)
  loaded.context.n = 5
  local ok, cmsg, ccode = store:commit(loaded, { processed_event_id = "e-b" })
  lu.assertNil(ok)
  lu.assertEquals(ccode, "timeout", cmsg)
  self.proxy.set{}
  lu.assertEquals(raw.doc(self.db, "b-1"), before, "the swallowed write was not applied")
  -- the store works again once the server answers
  settle(store, "b-1")
  print(string.format("FIGURES black hole: the load gave up after %.2fs (socketTimeoutMS=300)", waited))
end

-- A reply that comes after socketTimeoutMS: "timeout", though the write
-- was applied. The store does not know which; the caller must not assume.
function TestErrors:test_a_late_reply_is_timeout_and_the_write_may_have_been_applied()
  local store = self:connect()
  self:seed("s-1")
  local loaded = settle(store, "s-1")
  self.proxy.bump("slow_next", 1, { target = "update", slow_ms = 800 })
  loaded.context.n = 7
  local ok, msg, code = store:commit(loaded, { processed_event_id = "e-slow" })
  lu.assertNil(ok)
  lu.assertEquals(code, "timeout", msg)
  ms.sleep(0.8)
  local doc = raw.doc(self.db, "s-1")
  lu.assertEquals(doc.version, 2, "the late-answered write was applied all the same")
end

-- Nothing listens, and the live connections are reset. The next call
-- either breaks on its reset connection ("network") or, where the driver's
-- monitor saw the reset first (a streaming monitor keeps a read open, so it
-- does at once), finds the server marked down ("unavailable"); either is
-- what happened. The call after, and a connect that never reaches the
-- server, find none to select: "unavailable".
function TestErrors:test_refused_connections_are_unavailable_at_selection_and_network_once_selected()
  local store = self:connect()
  self:seed("c-1")
  settle(store, "c-1")
  self.proxy.set{ refuse = 1 }
  self.proxy.bump("reset_all", 1)
  local exe, lmsg, lcode = store:load("c-1")
  lu.assertNil(exe)
  lu.assertTrue(lcode == "network" or lcode == "unavailable", tostring(lcode) .. ": " .. tostring(lmsg))
  -- the driver has marked the server down: the call after finds none
  local exe2, umsg, ucode = store:load("c-1")
  lu.assertNil(exe2)
  lu.assertEquals(ucode, "unavailable", umsg)
  -- localThresholdMS makes a URI no pool of this process has seen
  local fresh, msg, code = ms.connect(self.proxy.uri(OPTS .. "&localThresholdMS=16"), { db = self.db, wait = 0.5 })
  lu.assertNil(fresh)
  lu.assertEquals(code, "unavailable", msg)
  self.proxy.set{}
  local deadline = ms.now() + 10
  local back
  repeat
    back = store:load("c-1")
    if not back then ms.sleep(0.1) end
  until back or ms.now() > deadline
  lu.assertNotNil(back, "the store reconnects on its own when the server is back")
end

------------------------------------------------------------------------
-- The engine's retry of an event whose commit reply was lost

function TestErrors:engine(store)
  return engine_mod.new{ store = store, charts = { C.flat(), F.hop_chart() }, trace = true, log = function() end }
end

local function version_and_outbox(db, id)
  local d = raw.doc(db, id)
  return d.version, #(d.outbox or {})
end

-- lost: the update reached the server and was applied, its reply never
-- came back (network); dropped: reset before it reached the server
-- (network, not applied); late: applied, answered after the timeout
-- (timeout). In every case the same event sent again is applied once.
function TestErrors:test_engine_retry_of_the_same_event_after_a_lost_reply_applies_it_once()
  local store = self:connect()
  local e = self:engine(store)
  local cases = {
    { fault = "lose_next", code = "network", applied = true },
    { fault = "reset_next", code = "network", applied = false },
    { fault = "slow_next", code = "timeout", applied = true },
  }
  for i, case in ipairs(cases) do
    local id = "h-" .. i
    lu.assertEquals(e:start("hop", { id = id, context = { peer = "nobody" } }), id)
    self.proxy.bump(case.fault, 1, { target = "update", slow_ms = 800 })
    local ok, msg, code = e:send(id, { kind = "Hop", id = "hop-" .. i, data = { n = 2 } })
    lu.assertNil(ok, case.fault)
    lu.assertEquals(code, case.code, case.fault .. ": " .. tostring(msg))
    if case.fault == "slow_next" then ms.sleep(0.8) end
    local v, outbox = version_and_outbox(self.db, id)
    lu.assertEquals(v, case.applied and 2 or 1, case.fault .. ": applied?")
    lu.assertEquals(outbox, case.applied and 1 or 0, case.fault .. ": its emit")
    self.proxy.set{}
    -- the caller (or a relay) sends the same event again
    local again, amsg = e:send(id, { kind = "Hop", id = "hop-" .. i, data = { n = 2 } })
    lu.assertTrue(again, amsg)
    v, outbox = version_and_outbox(self.db, id)
    lu.assertEquals(v, 2, case.fault .. ": applied once")
    lu.assertEquals(outbox, 1, case.fault .. ": emitted once")
    local exe = assert(store:load(id))
    lu.assertEquals(exe.context.hops, 1, case.fault)
    lu.assertEquals(C.trace_counts(store, id), { ["start:" .. id] = 1, ["hop-" .. i] = 1 }, case.fault)
  end
end
