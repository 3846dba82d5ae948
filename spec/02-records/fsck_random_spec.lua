-- spec/02-records/fsck_random_spec.lua - seeded random record graphs (three types, refs across
-- them and to themselves, cycles, refs to records never written, lineage links) checked against
-- a reachability computed here by a plain fixed point: fsck reports exactly the unreachable
-- dependencies and one violation per dangling ref of a reachable record, and collect_garbage
-- deletes exactly those dependencies. FSCK_SEED=<n> replays a failing run.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local fsck = require "mongostore.records.fsck"

local A = ms.array
local TYPES = { "alpha", "beta", "gamma" }
local ROUNDS, NODES = 12, 80

local ok = require("helpers").ok

TestFsckRandom = {}

function TestFsckRandom:setUp()
  self.name = helper.fresh_db("fsckrand")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  self.seed = tonumber(os.getenv("FSCK_SEED") or "") or os.time()
end

function TestFsckRandom:tearDown()
  if self.db then
    self.db:command({ dropDatabase = 1 })
    self.db:close()
  end
end

-- One graph: nodes { type, sid, role, refs = { { type, sid } }, prev, dangling = n }.
local function graph(rng, n)
  local nodes, by_key = {}, {}
  for sid = 1, n do
    local node = { type = TYPES[rng(#TYPES)], sid = sid, role = rng(5) == 1 and "main" or "dep", refs = {},
                   dangling = 0 }
    nodes[sid] = node
    by_key[node.type .. ":" .. sid] = node
  end
  for _, node in ipairs(nodes) do
    for _ = 1, rng(4) - 1 do
      local r = rng(20)
      if r == 1 then
        -- a record never written
        node.refs[#node.refs + 1] = { TYPES[rng(#TYPES)], n + rng(100) }
        node.dangling = node.dangling + 1
      else
        -- any record, earlier or later (cycles included), by its own type
        local target = nodes[rng(n)]
        node.refs[#node.refs + 1] = { target.type, target.sid }
      end
    end
    -- now and then the successor of an older record of its type (one each, linked both ways;
    -- a main's successor is a main, as a finished replace leaves it)
    if rng(8) == 1 then
      local earlier = {}
      for _, x in ipairs(nodes) do
        if x.type == node.type and x.sid < node.sid and not x.next then earlier[#earlier + 1] = x end
      end
      if #earlier > 0 then
        local pred = earlier[rng(#earlier)]
        node.prev, pred.next = pred.sid, node.sid
        if pred.role == "main" then node.role = "main" end
      end
    end
  end
  return nodes, by_key
end

-- Reachability by a fixed point over the edges (refs, _prev, _next), from every main.
local function reference(nodes, by_key)
  local reached = {}
  for _, node in ipairs(nodes) do if node.role == "main" then reached[node] = true end end
  local changed = true
  while changed do
    changed = false
    for _, node in ipairs(nodes) do
      if reached[node] then
        local edges = {}
        for _, r in ipairs(node.refs) do edges[#edges + 1] = by_key[r[1] .. ":" .. r[2]] end
        if node.prev then edges[#edges + 1] = by_key[node.type .. ":" .. node.prev] end
        if node.next then edges[#edges + 1] = by_key[node.type .. ":" .. node.next] end
        for _, t in ipairs(edges) do
          if t and not reached[t] then reached[t] = true; changed = true end
        end
      end
    end
  end
  return reached
end

function TestFsckRandom:test_random_graphs_against_a_reference_reachability()
  local seed = self.seed
  math.randomseed(seed)
  local rng = math.random
  local types = {}
  for _, t in ipairs(TYPES) do types[t] = { name = t } end
  for round = 1, ROUNDS do
    local prefix = "r" .. round .. "."
    local store = { db = self.db, prefix = prefix, types = types }
    local nodes, by_key = graph(rng, NODES)
    local docs = {}
    for _, node in ipairs(nodes) do
      local refs = {}
      for i, r in ipairs(node.refs) do refs[i] = A { r[1], r[2] } end
      local d = { _id = node.sid, _role = node.role, _cid = string.format("%064x", node.sid), _lin = node.sid,
                  _refs = A(refs), _w = "spec" }
      d._prev, d._next = node.prev, node.next
      docs[node.type] = docs[node.type] or {}
      table.insert(docs[node.type], d)
    end
    for t, list in pairs(docs) do ok(ok(self.db:collection(prefix .. t)):insert_many(list)) end
    ok(ok(self.db:collection(prefix .. "_counters")):insert_one({ _id = "sid", n = NODES }))

    local reached = reference(nodes, by_key)
    local want_unreachable, want_dangling, want_deleted = {}, 0, {}
    for _, node in ipairs(nodes) do
      if not reached[node] then
        want_unreachable[node.type] = (want_unreachable[node.type] or 0) + 1
        want_deleted[#want_deleted + 1] = node.type .. ":" .. node.sid
      else
        want_dangling = want_dangling + node.dangling
      end
    end
    table.sort(want_deleted)
    local where = string.format("seed %d, round %d", seed, round)

    local s = ok(fsck.run(store))
    local dangling, unreachable = 0, {}
    for _, v in ipairs(s.violations) do
      -- lineage links are whole here: the only violations are the dangling refs
      lu.assertEquals(v.kind, "dangling_ref", where .. ": " .. v.message)
      dangling = dangling + 1
    end
    for _, t in ipairs(TYPES) do
      local e = s.collections[prefix .. t]
      if e then unreachable[t] = e.unreachable ~= 0 and e.unreachable or nil end
    end
    lu.assertEquals(dangling, want_dangling, where)
    lu.assertEquals(unreachable, want_unreachable, where)
    lu.assertEquals(s.totals.examined, NODES, where)

    s = ok(fsck.run(store, { collect_garbage = true }))
    lu.assertEquals(s.totals.deleted, #want_deleted, where)
    local left = {}
    for _, t in ipairs(TYPES) do
      for _, d in ipairs(ok(ok(ok(self.db:collection(prefix .. t)):find({})):all())) do
        left[t .. ":" .. d._id] = true
      end
    end
    for _, key in ipairs(want_deleted) do lu.assertNil(left[key], where .. ": " .. key .. " was not collected") end
    for node in pairs(reached) do
      lu.assertTrue(left[node.type .. ":" .. node.sid], where .. ": reachable " .. node.type .. " " .. node.sid
        .. " was deleted")
    end
    -- nothing is left to collect, and what was reported stays reported
    s = ok(fsck.run(store, { collect_garbage = true }))
    lu.assertEquals(s.totals.deleted, 0, where)
    lu.assertEquals(s.totals.violations, want_dangling, where)
  end
end
