-- spec/03-engine/cache_bounds_spec.lua - the engine's per-process caches stay
-- within cache_size under many executions and outbox entries (the chart of
-- each parent for the spawn relay, the failed deliveries of each entry), and
-- what was evicted is still handled right: a parent's chart is read again,
-- an entry still reaches max_attempts and is given up once.
local lu = require "luaunit"
local chart = require "mongostore.chart"
local engine_mod = require "mongostore.engine"
local C = require "fixtures.charts"

-- Two charts of the same shape with their own region names: a child created
-- under the wrong chart would name a region that chart does not have.
-- Idle -Begin-> Fork (two regions, each finishing on Go) -join all-> Idle,
-- so every Begin forks again.
local function looping_fork(id, prefix)
  local function region(name)
    return { name, initial = name .. "1", states = { { name .. "1" }, { name .. "2", final = "success" } },
             transitions = { { from = name .. "1", to = name .. "2", on = "Go" } } }
  end
  return chart.define{
    id = id, initial = "Idle",
    states = {
      { "Idle", on_enter = C.count("idle") },
      { "Fork", orthogonal = true, states = { region(prefix .. "X"), region(prefix .. "Y") } },
    },
    transitions = {
      { from = "Idle", to = "Fork", on = "Begin" },
      { from = "Fork", join = "all", to = "Idle" },
    },
  }
end

-- Working's on_enter sends Ping to each id in context.targets.
local pinger = chart.define{
  id = "pinger", initial = "Idle",
  states = {
    { "Idle" },
    { "Working", on_enter = function(ctx, _, act)
        for _, t in ipairs(ctx.targets) do act.emit(t, "Ping", { to = t }) end
      end },
  },
  transitions = { { from = "Idle", to = "Working", on = "Begin" } },
}

local function new_engine(store, opts)
  local logs, dead = {}, {}
  local o = {
    store = store, charts = { looping_fork("loop_a", "A"), looping_fork("loop_b", "B"), pinger, C.flat() },
    log = function(msg) logs[#logs + 1] = msg end,
    on_dead_letter = function(entry, err) dead[#dead + 1] = { target = entry.target_id, err = err } end,
    lease = 1,
  }
  for k, v in pairs(opts or {}) do o[k] = v end
  local e = engine_mod.new(o)
  e.spec_logs, e.spec_dead = logs, dead
  return e
end

-- Runs passes until one handles nothing, checking the caches after each.
local function drain_bounded(e, limit)
  for _ = 1, 300 do
    lu.assertTrue(e.definitions:len() <= limit, "definitions: " .. e.definitions:len())
    lu.assertTrue(e.attempts:len() <= math.max(limit, e.batch), "attempts: " .. e.attempts:len())
    if e:step() == 0 then return end
  end
  error("the engine still had work after 300 passes")
end

TestCacheBounds = {}

function TestCacheBounds:setUp()
  self.store = C.store()
end

function TestCacheBounds:tearDown()
  if self.store then self.store:close() end
end

function TestCacheBounds:test_cache_size_is_checked_like_the_other_options()
  for _, bad in ipairs { 0, -1, 1.5 } do
    lu.assertErrorMsgContains("engine.new: opts.cache_size must be an integer >= 1", engine_mod.new,
      { store = self.store, cache_size = bad })
  end
  lu.assertErrorMsgContains("engine.new: opts.cache_size must be an integer, got string", engine_mod.new,
    { store = self.store, cache_size = "10" })
  lu.assertErrorMsgContains("engine.new: unknown option cache_sizes", engine_mod.new,
    { store = self.store, cache_sizes = 10 })
  local e = engine_mod.new{ store = self.store }
  lu.assertEquals(e.definitions.size, 10000, "the default")
  lu.assertEquals(e.attempts.size, 10000)
  e = engine_mod.new{ store = self.store, cache_size = 3 }
  lu.assertEquals(e.definitions.size, 3)
  lu.assertEquals(e.attempts.size, 3)
end

-- Twelve parents of two charts fork, twice each, through an engine that
-- remembers three parents' charts: the cache never holds more, parents are
-- evicted and read again, and every child runs its own parent's chart.
function TestCacheBounds:test_definitions_stay_bounded_and_spawns_resolve_after_eviction()
  local e = new_engine(self.store, { cache_size = 3, batch = 5 })
  local parents = {}
  for i = 1, 12 do
    local def = i % 2 == 0 and "loop_a" or "loop_b"
    local id = assert(e:start(def, { id = string.format("p-%02d", i) }))
    parents[id] = def
  end
  for round = 1, 2 do
    for id in pairs(parents) do lu.assertEquals(select(2, assert(e:send(id, { kind = "Begin" }))), "applied") end
    drain_bounded(e, 3)
    -- every region got its child, under the parent's chart
    for id, def in pairs(parents) do
      local exe = C.load(self.store, id)
      lu.assertEquals(exe.active_path, "Fork", id)
      local kids = C.children(exe)
      lu.assertEquals(#kids, 2, id)
      for _, cid in ipairs(kids) do
        local kid = C.load(self.store, cid)
        lu.assertEquals(kid.definition_id, def, cid)
        lu.assertEquals(kid.status, "RUNNING", cid)
        lu.assertStrMatches(cid, ".*:" .. (round - 1), nil, nil, "a fresh child per entry: " .. cid)
      end
      lu.assertTrue(assert(e:send(id, { kind = "Go" })))
    end
    drain_bounded(e, 3)
    for id in pairs(parents) do
      local exe = C.load(self.store, id)
      lu.assertEquals(exe.active_path, "Idle", id .. " joined")
      lu.assertEquals(exe.context.idle, round + 1, id)
    end
  end
  lu.assertEquals(e.definitions:len(), 3)
  -- 24 spawn lookups of 12 parents through 3 places: most were read again
  lu.assertTrue(e.definitions.evicted >= 12, "evicted " .. e.definitions.evicted)
  lu.assertEquals(e.spec_logs, {})
end

-- Failed deliveries are counted per entry in a cache of two: counts of
-- entries another worker delivered are evicted, not kept for ever, and the
-- entries that keep failing are still given up after max_attempts, once each,
-- though every pass meets more of them than the cache holds (a claim takes
-- the source's whole outbox): the oldest keep their counts, the rest wait.
function TestCacheBounds:test_attempts_stay_bounded_and_entries_still_dead_letter()
  local targets = { "t-1", "t-2", "t-3", "t-4", "t-5", "t-6" }
  local e1 = new_engine(self.store, { cache_size = 2, batch = 2, max_attempts = 3 })
  local e2 = new_engine(self.store, { batch = 2 })
  assert(e1:start("pinger", { id = "src", context = { targets = targets } }))
  assert(e1:send("src", { kind = "Begin" }))
  -- a pass of e1: all six fail (no such targets yet); two are counted
  lu.assertEquals(e1:relay_outbox(), 0)
  lu.assertEquals(e1.attempts:len(), 2)
  lu.assertEquals(e1.attempts.refused, 4)
  -- t-1 and t-2 appear, and another worker delivers their entries
  assert(e2:start("flat", { id = "t-1" }))
  assert(e2:start("flat", { id = "t-2" }))
  lu.assertEquals(e2:relay_outbox(), 2)
  -- e1 goes on with the rest: its counts of the delivered entries are the
  -- oldest and make room
  local passes = 0
  while #e1.spec_dead < 4 and passes < 50 do
    e1:relay_outbox()
    passes = passes + 1
    lu.assertTrue(e1.attempts:len() <= 2, "attempts: " .. e1.attempts:len())
  end
  lu.assertTrue(e1.attempts.evicted >= 2, "evicted " .. e1.attempts.evicted)
  -- t-3 .. t-6 never appear: each given up once, after max_attempts
  local given_up = {}
  for _, d in ipairs(e1.spec_dead) do
    lu.assertNil(given_up[d.target], "given up twice: " .. d.target)
    given_up[d.target] = true
  end
  lu.assertEquals(given_up, { ["t-3"] = true, ["t-4"] = true, ["t-5"] = true, ["t-6"] = true })
  -- t-3 and t-4 counted from the second pass, t-5 and t-6 once those are given up
  lu.assertEquals(passes, 5)
  lu.assertEquals(e1:relay_outbox(), 0, "nothing left")
  lu.assertEquals(e1.attempts:len(), 0)
  for _, t in ipairs { "t-1", "t-2" } do
    lu.assertEquals(C.load(self.store, t).processed_events, 1, t .. " got its Ping once")
  end
end
