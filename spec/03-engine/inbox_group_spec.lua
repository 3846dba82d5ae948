-- spec/03-engine/inbox_group_spec.lua - the inbox's group commit: up to
-- inbox_group queued events of one execution are applied in order in memory
-- and land in one commit (one version check, every event id marked in the
-- same update, a trace step each, emits in order, each timer as the last
-- event left it); a group is all or nothing, and one that cannot land is
-- applied again one event at a time. The store's half (processed_event_ids,
-- a list of trace steps) refuses bad input with nothing written.
local lu = require "luaunit"
local ms = require "mongostore"
local chart = require "mongostore.chart"
local helper = require "helpers"
local raw = require "helpers.rawdb"
local C = require "fixtures.charts"
local engine_mod = require "mongostore.engine"
local stm = require "mongostore.stm"

-- tally appends every Add's n to context.seen and forwards it to the
-- execution named in context.sink (when there is one)
local tally = chart.define{
  id = "tally", initial = "Open",
  states = { { "Open" } },
  transitions = {
    { from = "Open", to = "Open", on = "Add", action = function(context, event, act)
        context.seen = (context.seen or "") .. tostring(event.data.n) .. ","
        if context.sink then act.emit(context.sink, "Add", { n = event.data.n }) end
      end },
  },
}

local function new_engine(store, group, charts)
  local logs = {}
  local cs = { tally }
  for _, c in ipairs(charts or {}) do cs[#cs + 1] = c end
  local e = engine_mod.new{ store = store, charts = cs, trace = true, lease = 5, batch = 100, inbox = true,
                            inbox_group = group, log = function(msg) logs[#logs + 1] = msg end }
  e.spec_logs = logs
  return e
end

local function add(n, id) return { kind = "Add", data = { n = n }, id = id } end

local function upto(n)
  local t = {}
  for i = 1, n do t[#t + 1] = i .. "," end
  return table.concat(t)
end

TestInboxGroup = {}

function TestInboxGroup:setUp()
  self.store, self.db = C.store()
end

function TestInboxGroup:tearDown()
  self.store:close()
end

function TestInboxGroup:test_a_hot_execution_drains_in_commits_of_inbox_group_events()
  for _, case in ipairs { { group = 32 }, { group = 1 }, { group = 256 } } do
    local store = C.store()
    local e = new_engine(store, case.group)
    assert(e:start("tally", { id = "hot" }))
    local v0 = C.load(store, "hot").version
    for n = 1, 100 do assert(e:enqueue("hot", add(n, "ev-" .. n))) end
    -- a pass takes what its claim found (a server may list fewer of the
    -- queued entries at once): pass until the queue is empty
    local handled = 0
    for _ = 1, 20 do
      local n = e:relay_inbox()
      if n == 0 then break end
      handled = handled + n
    end
    lu.assertEquals(handled, 100)
    local exe = C.load(store, "hot")
    lu.assertEquals(exe.context.seen, upto(100), "applied in the order queued")
    lu.assertEquals(exe.version - v0, 100, "the version moves on by one per event, groups or not")
    -- a trace step per event, in order, indexes consecutive
    local steps = assert(store:read_trace("hot"))
    local ids, idx = {}, {}
    for _, s in ipairs(steps) do
      if s.event == "Add" then
        ids[#ids + 1] = s.event_id
        idx[#idx + 1] = s.index
      end
    end
    lu.assertEquals(#ids, 100)
    for k = 1, 100 do
      lu.assertEquals(ids[k], "ev-" .. k)
      if k > 1 then lu.assertEquals(idx[k], idx[k - 1] + 1) end
    end
    C.applied_once(store, "hot")
    -- every id of every group is marked: sending any again is a duplicate
    for _, n in ipairs { 1, 31, 32, 33, 64, 100 } do
      local ok, how = e:send("hot", add(n, "ev-" .. n))
      lu.assertEquals({ ok, how }, { true, "duplicate" }, "ev-" .. n)
    end
    lu.assertEquals(C.load(store, "hot").context.seen, upto(100))
    store:close()
  end
end

function TestInboxGroup:test_a_group_commit_is_fewer_round_trips_than_one_commit_per_event()
  local cost = {}
  for _, group in ipairs { 1, 50 } do
    local store = C.store()
    local e = engine_mod.new{ store = store, charts = { tally }, trace = false, inbox = true, inbox_group = group }
    e:relay_inbox() -- the first pass creates the inbox's indexes
    assert(e:start("tally", { id = "hot" }))
    for n = 1, 100 do assert(e:enqueue("hot", add(n))) end
    local got = C.commands(store, function() lu.assertEquals(e:relay_inbox(), 100) end)
    cost[group] = got.total
    lu.assertEquals(C.load(store, "hot").context.seen, upto(100))
    store:close()
  end
  print(string.format("inbox pass of 100 events of one execution: %d round trips one commit each, %d in groups of 50",
    cost[1], cost[50]))
  lu.assertTrue(cost[50] * 10 <= cost[1], "group of 50: " .. cost[50] .. " round trips, one each: " .. cost[1])
end

function TestInboxGroup:test_emits_keep_their_order_across_the_group()
  local e = new_engine(self.store, 16)
  assert(e:start("tally", { id = "sink" }))
  assert(e:start("tally", { id = "src", context = { sink = "sink" } }))
  for n = 1, 40 do assert(e:enqueue("src", add(n))) end
  C.drain(e)
  lu.assertEquals(C.load(self.store, "src").context.seen, upto(40))
  lu.assertEquals(C.load(self.store, "sink").context.seen, upto(40), "relayed in the order emitted")
  C.applied_once(self.store, "sink")
end

function TestInboxGroup:test_each_timer_is_as_the_last_event_of_the_group_left_it()
  local e = new_engine(self.store, 32, { C.timed() })
  -- armed, cancelled, armed again: armed
  assert(e:start("timed", { id = "t-armed", context = { wait = 600 } }))
  for _, k in ipairs { "Begin", "Leave", "Back" } do assert(e:enqueue("t-armed", { kind = k })) end
  -- armed then cancelled: nothing armed
  assert(e:start("timed", { id = "t-off", context = { wait = 600 } }))
  for _, k in ipairs { "Begin", "Leave" } do assert(e:enqueue("t-off", { kind = k })) end
  local v = { C.load(self.store, "t-armed").version, C.load(self.store, "t-off").version }
  lu.assertEquals(e:relay_inbox(), 5)
  lu.assertEquals(C.load(self.store, "t-armed").version, v[1] + 3)
  lu.assertEquals(C.load(self.store, "t-off").version, v[2] + 2)
  lu.assertEquals(C.load(self.store, "t-armed").active_path, "Waiting")
  lu.assertEquals(C.load(self.store, "t-off").active_path, "Other")
  local armed = C.timers(self.store, "t-armed")
  lu.assertNotNil(armed.Waiting, "the timer the last event armed is stored")
  lu.assertTrue(armed.Waiting > ms.now() + 500)
  lu.assertEquals(C.timers(self.store, "t-off"), {}, "the timer the group armed and cancelled is not stored")
end

function TestInboxGroup:test_a_group_that_cannot_land_is_applied_one_event_at_a_time()
  local e = new_engine(self.store, 32)
  assert(e:start("tally", { id = "hot" }))
  for n = 1, 10 do assert(e:enqueue("hot", add(n, "g-" .. n))) end
  -- event g-5 reaches the execution by another way first: the group holding
  -- it is refused whole as a duplicate, and its events go one by one
  assert(e:send("hot", add(5, "g-5")))
  lu.assertEquals(e:relay_inbox(), 10)
  lu.assertEquals(C.load(self.store, "hot").context.seen, "5,1,2,3,4,6,7,8,9,10,")
  C.applied_once(self.store, "hot")
end

function TestInboxGroup:test_a_group_ends_before_an_event_that_does_not_fit_and_later_ones_wait()
  local strict = assert(stm.to_chart([[
event Add { n: int }
machine strict {
  initial Open
  state Open {}
  from Open to Open on Add
}
]]))
  local e = new_engine(self.store, 32, { strict })
  assert(e:start("strict", { id = "s" }))
  local v = C.load(self.store, "s").version
  assert(e:enqueue("s", add(1)))
  assert(e:enqueue("s", add(2)))
  assert(e:enqueue("s", { kind = "Add", data = { n = "three" } }))
  assert(e:enqueue("s", add(4)))
  e:relay_inbox()
  lu.assertEquals(C.load(self.store, "s").version, v + 2, "the two events before the misfit")
  local kinds = C.trace(self.store, "s")
  local adds = 0
  for _, k in ipairs(kinds) do if k == "Add" then adds = adds + 1 end end
  lu.assertEquals(adds, 2, "nothing after the misfit was applied")
end

-- The store's half: store:commit with processed_event_ids and a list of steps.
TestGroupCommit = {}

function TestGroupCommit:setUp()
  self.store, self.db = helper.connect()
  assert(self.store:save(ms.execution{ definition_id = "dd", id = "g" }))
  self.exe = assert(self.store:load("g"))
end

function TestGroupCommit:tearDown()
  self.store:close()
end

function TestGroupCommit:test_every_id_is_marked_in_one_update()
  local exe = self.exe
  local steps = { { event = "A", event_id = "a" }, { event = "B", event_id = "b" }, { event = "C", event_id = "c" } }
  local v = exe.version
  assert(self.store:commit(exe, { processed_event_ids = { "a", "b", "c" }, trace = steps }))
  lu.assertEquals(exe.version, v + 1)
  local doc = raw.doc(self.db, "g")
  lu.assertEquals(doc.processed, { "a", "b", "c" })
  local trace = assert(self.store:read_trace("g"))
  lu.assertEquals(#trace, 3)
  lu.assertEquals({ trace[1].event_id, trace[2].event_id, trace[3].event_id }, { "a", "b", "c" })
  lu.assertEquals(trace[2].index, trace[1].index + 1)
  lu.assertEquals(trace[3].index, trace[1].index + 2)
  for _, id in ipairs { "a", "b", "c" } do
    local fresh = assert(self.store:load("g"))
    local ok, _, code = self.store:commit(fresh, { processed_event_id = id })
    lu.assertEquals({ ok, code }, { nil, "duplicate" }, id)
  end
end

function TestGroupCommit:test_a_group_holding_a_marked_id_writes_nothing()
  local exe = self.exe
  assert(self.store:commit(exe, { processed_event_id = "b" }))
  local before = raw.doc(self.db, "g")
  local ok, msg, code = self.store:commit(exe, { processed_event_ids = { "a", "b", "c" } })
  lu.assertNil(ok)
  lu.assertEquals(code, "duplicate")
  lu.assertStrContains(msg, "group")
  lu.assertEquals(raw.doc(self.db, "g"), before)
  -- a freshly loaded copy, the marked id last in the group
  local fresh = assert(self.store:load("g"))
  ok, msg, code = self.store:commit(fresh, { processed_event_ids = { "x", "b" } })
  lu.assertNil(ok)
  lu.assertEquals(code, "duplicate")
  lu.assertStrContains(msg, "already processed")
  lu.assertEquals(raw.doc(self.db, "g"), before)
end

function TestGroupCommit:test_bad_groups_are_refused_before_any_write()
  local exe = self.exe
  local before = raw.doc(self.db, "g")
  local many = {}
  for i = 1, 257 do many[i] = "e" .. i end
  for _, case in ipairs {
    { opts = { processed_event_ids = { "a", "a" } }, says = "twice" },
    { opts = { processed_event_ids = {} }, says = "1 to 256" },
    { opts = { processed_event_ids = many }, says = "1 to 256" },
    { opts = { processed_event_ids = { "a" }, processed_event_id = "b" }, says = "exclusive" },
    { opts = { processed_event_ids = { "a", "" } }, says = "processed_event_ids" },
    { opts = { processed_event_ids = { "a" }, trace = { { event = "A" }, 7 } }, says = "trace" },
  } do
    local ok, msg, code = self.store:commit(exe, case.opts)
    lu.assertNil(ok, case.says)
    lu.assertEquals(code, "invalid", case.says)
    lu.assertStrContains(msg, case.says)
  end
  lu.assertErrorMsgContains("opts.processed_event_ids must be a table", self.store.commit, self.store, exe,
    { processed_event_ids = "a" })
  lu.assertEquals(raw.doc(self.db, "g"), before, "nothing written")
  lu.assertEquals(exe.version, before.version)
end
