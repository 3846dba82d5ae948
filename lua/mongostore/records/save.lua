-- mongostore.records.save - saving a record graph: checking it whole, content ids
-- bottom-up, the size limit before anything is sent, one sid reservation for the graph,
-- then the writes (one transaction, or bottom-up in degraded mode), dedup hits, roles,
-- store timestamps with the clock-regression guard, and replace's lineage link.
local core = require "mongostore.core"
local canon = require "mongostore.records.canon"
local wire = require "mongostore.records.wire"

local type, pairs, ipairs, tostring, rawequal, floor = type, pairs, ipairs, tostring, rawequal, math.floor
local format = string.format
local fail = wire.fail
local null, array = core.null, core.array

local M = {}

-- ------------------------------------------------------------ timestamps

-- Nanoseconds now, from the store's clock (a spec may give one).
local function now_ns(store)
  local clock = store.ts.clock
  if clock then return clock() end
  return floor(core.now() * 1e9)
end

-- One timestamp for a save unit, in store units, never below the highest
-- this process has stored or read at open: a step back under 1 ms waits it
-- out (clock_regression_grace), a larger one fails.
function M.stamp(store)
  local ts = store.ts
  if not ts.enabled then return nil end
  local ns = now_ns(store)
  local hwm = ts.hwm_ns
  if hwm and ns < hwm and not ts.allow then
    local behind = hwm - ns
    if behind < 1e6 and ts.grace then
      core.sleep(behind / 1e9 + 0.0002)
      ns = now_ns(store)
      behind = hwm - ns
    end
    if ns < hwm then
      return fail("clock_regression", format("records: the clock is %.3f ms behind the latest store "
        .. "timestamp this process has seen (allow_clock_regression = true turns the guard off)", behind / 1e6),
        { behind_ns = behind })
    end
  end
  if not hwm or ns > hwm then ts.hwm_ns = ns end
  return canon.idiv(ns, ts.resolution)
end

-- ------------------------------------------------------------ preparing a graph


-- An existing record given as a ref (a sid, or a fetched record with _sid):
-- its content id, read once per save.
local function existing_ref(store, plan, T, sid, path)
  local key = T.name .. ":" .. tostring(sid)
  local hit = plan.existing[key]
  if hit then return hit end
  local doc, e, c, d = store.wire:find_one(store.colls[T.name], { _id = sid }, { projection = { _cid = 1 } },
    plan.session)
  if doc == nil then return nil, e, c, d end
  if not doc then
    return fail("not_found", format("save %s: %s refers to %s %s, which is not stored", plan.root_type.name, path,
      T.name, tostring(sid)))
  end
  hit = { T = T, sid = sid, cid = doc._cid, existing = true }
  plan.existing[key] = hit
  return hit
end

-- Walks the record t of type T: checks it, prepares its refs first, and
-- adds its node after theirs (post-order: dependencies before dependents).
local function prepare(store, plan, T, t, path, depth)
  if depth > 50 then
    return fail("invalid", format("save %s: %s: refs nest deeper than 50", plan.root_type.name, path))
  end
  if not store.types[T.name] or store.types[T.name] ~= T then
    return fail("invalid", format("save: the type %s is not one of this store's types", T.name))
  end
  local seen = plan.seen[t]
  if seen then return seen end
  local bad = canon.check_child(T, t, path)
  if bad then return fail("invalid", format("save %s: %s", plan.root_type.name, bad)) end
  local refs = {}
  for name, r in pairs(T.refs) do
    local v = t[name]
    local rpath = path .. "." .. name
    local function one(x, p)
      -- a sid, or its decimal text (a client's JSON or form)
      local sid = canon.cast_sid(x)
      if sid ~= nil then return existing_ref(store, plan, r.type, sid, p) end
      if type(x) ~= "table" or rawequal(x, null) then
        return fail("invalid", format("save %s: %s must be a %s record or its sid, got %s", plan.root_type.name,
          p, r.type.name, type(x)))
      end
      sid = x._sid ~= nil and canon.cast_sid(x._sid)
      if sid then return existing_ref(store, plan, r.type, sid, p) end
      return prepare(store, plan, r.type, x, p, depth + 1)
    end
    if v == nil or rawequal(v, null) then
      refs[name] = r.many and {} or nil
    elseif r.many then
      if not canon.is_list(v) then
        return fail("invalid", format("save %s: %s must be a list of %s records", plan.root_type.name, rpath,
          r.type.name))
      end
      local list = {}
      for i = 1, #v do
        local n, e, c, d = one(v[i], format("%s[%d]", rpath, i))
        if not n then return nil, e, c, d end
        list[i] = n
      end
      refs[name] = list
    else
      local n, e, c, d = one(v, rpath)
      if not n then return nil, e, c, d end
      refs[name] = n
    end
  end
  local cid = canon.content_id(T, t, function(name, i)
    local r = refs[name]
    if i == nil then return #r end
    if T.refs[name].many then return r[i].cid end
    return r and r.cid
  end)
  -- the same content twice in one graph is one record (dedup none keeps them apart)
  if T.dedup ~= "none" then
    local same = plan.by_cid[T.name .. ":" .. cid]
    if same then plan.seen[t] = same; return same end
  end
  local node = { T = T, t = t, cid = cid, refs = refs, doc = canon.store_doc(T, t), path = path }
  plan.seen[t] = node
  if T.dedup ~= "none" then plan.by_cid[T.name .. ":" .. cid] = node end
  plan.nodes[#plan.nodes + 1] = node
  return node
end

-- before the sids are reserved, 0 stands in (an int64 all the same)
local function sid_of(n) return n.sid or n.new_sid or 0 end

-- The node's document with its sids and store fields filled in.
local function fill(store, node, role, ts)
  local T, doc = node.T, node.doc
  local refs = {}
  for name, r in pairs(T.refs) do
    local v = node.refs[name]
    if r.many then
      local sids = {}
      for i, n in ipairs(v) do
        sids[i] = sid_of(n)
        refs[#refs + 1] = array { r.type.name, sids[i] }
      end
      doc[name] = array(sids)
    elseif v then
      doc[name] = sid_of(v)
      refs[#refs + 1] = array { r.type.name, doc[name] }
    else
      doc[name] = nil
    end
  end
  doc._id = node.new_sid or 0
  doc._cid = node.cid
  doc._role = role
  doc._lin = node.lin or node.new_sid or 0
  doc._prev = node.prev
  doc._w = store.lease.token
  doc._ts = ts
  doc._refs = array(refs)
  return doc
end

-- Every document of the graph encoded with stand-in sids (int64s, as the
-- real ones) and measured against the server's limit: nothing is sent yet.
local function check_sizes(store, plan)
  local limit = store.max_bson_size
  for _, node in ipairs(plan.nodes) do
    local doc = fill(store, node, "main", store.ts.enabled and 0 or nil)
    local bytes = core.bson_encode(doc)
    if #bytes > limit then
      return fail("too_large", format("save %s: %s is %d bytes encoded, over the server's limit of %d bytes "
        .. "(nothing was written)", plan.root_type.name, node.path, #bytes, limit), { size = #bytes, limit = limit })
    end
  end
  return true
end

-- lineage: { lin =, prev = } for replace's successor.
function M.plan(store, T, t, session, lineage)
  local plan = { root_type = T, seen = {}, by_cid = {}, nodes = {}, existing = {}, session = session }
  if type(t) ~= "table" or rawequal(t, null) then
    return fail("invalid", format("save %s: the record must be a table, got %s", T.name, canon.got(t)))
  end
  local root, e, c, d = prepare(store, plan, T, t, T.name, 0)
  if not root then return nil, e, c, d end
  if root.existing then
    return fail("invalid", "save: the root is a stored record given by its sid (nothing to save)")
  end
  plan.root = root
  if lineage then root.lin, root.prev = lineage.lin, lineage.prev end
  local ok
  ok, e, c, d = check_sizes(store, plan)
  if not ok then return nil, e, c, d end
  return plan
end

-- One $inc for the graph's sids, outside any transaction: a counter written
-- in every transaction would make them all conflict.
function M.reserve(store, n)
  local doc, e, c, d
  -- two first upserts at once: the loser's is a duplicate key (or no
  -- document): the counter exists by then, so the next $inc finds it
  for _ = 1, 3 do
    doc, e, c, d = store.wire:find_and_modify(store.counters, { _id = "sid" }, { ["$inc"] = { n = n } }, true, nil)
    if doc == nil and c ~= "duplicate" then return nil, e, c, d end
    if type(doc) == "table" then break end
  end
  if type(doc) ~= "table" then
    return fail("server", "records: the sid counter could not be incremented", d)
  end
  local last = doc.n
  if type(last) ~= "number" then last = tonumber(tostring(last)) end
  return last - n + 1
end

local function assign(plan, first)
  local i = 0
  for _, node in ipairs(plan.nodes) do
    node.new_sid = first + i
    i = i + 1
  end
end

-- ------------------------------------------------------------ dedup hits

-- A stored record with the node's content id was found: value dedup
-- compares what the content id leaves out.
local function take_hit(store, node, hit, want_main, session)
  local T = node.T
  if T.dedup == "value" then
    local stored = canon.read_doc(T, hit)
    if canon.meta_encode(T, stored) ~= canon.meta_encode(T, node.t) then
      return fail("conflict", format("save %s: %s has the identity of stored %s %s but other metadata "
        .. "(dedup = \"value\" refuses the difference)", node.T.name, node.path, T.name, tostring(hit._id)),
        { sid = hit._id })
    end
  end
  node.sid = hit._id
  node.hit = hit
  if want_main and hit._role == "dep" then
    -- promoted; its timestamp stays (first stored wins)
    local r, e, c, d = store.wire:update(store.colls[T.name], { { q = { _id = hit._id },
      u = { ["$set"] = { _role = "main" } } } }, session)
    if not r then return nil, e, c, d end
  end
  return true
end

local function hook(store, info)
  local h = store.hooks and store.hooks.after_write
  if not h then return true end
  local ok, e, c, d = h(info)
  if ok == nil and e ~= nil then return fail(c or "server", tostring(e), d) end
  return true
end

local function find_by_cid(store, T, cid, session)
  return store.wire:find_one(store.colls[T.name], { _cid = cid }, { sort = { { "_id", 1 } } }, session)
end

-- ------------------------------------------------------------ writing

-- Degraded: each node inserted on its own, dependencies first; a duplicate
-- content id is the stored record (another save's or an earlier one's).
local function write_degraded(store, plan, ts, root_role)
  local writes = 0
  for _, node in ipairs(plan.nodes) do
    local is_root = node == plan.root
    if is_root then
      local ok, e, c, d = store.lease:fence()
      if not ok then return nil, e, c, d end
    end
    local role = is_root and root_role or "dep"
    local doc = fill(store, node, role, ts)
    local coll = store.colls[node.T.name]
    local r, e, c, d = store.wire:insert(coll, { doc }, nil)
    if r then
      node.sid = node.new_sid
      writes = writes + 1
      local ok
      ok, e, c, d = hook(store, { type = node.T.name, sid = node.sid, role = role, writes = writes })
      if not ok then return nil, e, c, d end
    elseif c == "duplicate" and node.T.dedup ~= "none" then
      local hit, e2, c2, d2 = find_by_cid(store, node.T, node.cid, nil)
      if hit == nil then return nil, e2, c2, d2 end
      if not hit then return nil, e, c, d end
      local ok
      ok, e, c, d = take_hit(store, node, hit, role == "main", nil)
      if not ok then return nil, e, c, d end
    else
      return nil, e, c, d
    end
  end
  return true
end

-- In a transaction: the lease, then the stored content ids of the graph
-- (one find per collection), then the inserts of what is new.
local function write_tx(store, plan, ts, session, root_role)
  local ok, e, c, d = store.lease:check(session)
  if not ok then return nil, e, c, d end
  local by_type = {}
  for _, node in ipairs(plan.nodes) do
    node.sid, node.hit = nil, nil
    if node.T.dedup ~= "none" then
      local l = by_type[node.T.name] or { T = node.T, cids = {} }
      by_type[node.T.name] = l
      l.cids[#l.cids + 1] = node.cid
    end
  end
  local hits = {}
  for name, l in pairs(by_type) do
    local docs
    docs, e, c, d = store.wire:find(store.colls[name], { _cid = { ["$in"] = array(l.cids) } },
      { sort = { { "_id", 1 } } }, session)
    if not docs then return nil, e, c, d end
    for _, doc in ipairs(docs) do
      local k = name .. ":" .. doc._cid
      if not hits[k] then hits[k] = doc end
    end
  end
  local writes = 0
  for _, node in ipairs(plan.nodes) do
    local is_root = node == plan.root
    local role = is_root and root_role or "dep"
    local hit = hits[node.T.name .. ":" .. node.cid]
    if hit then
      ok, e, c, d = take_hit(store, node, hit, role == "main", session)
      if not ok then return nil, e, c, d end
    else
      local doc = fill(store, node, role, ts)
      local r
      r, e, c, d = store.wire:insert(store.colls[node.T.name], { doc }, session)
      if not r then return nil, e, c, d end
      node.sid = node.new_sid
      writes = writes + 1
      ok, e, c, d = hook(store, { type = node.T.name, sid = node.sid, role = role, writes = writes })
      if not ok then return nil, e, c, d end
    end
  end
  return true
end
M.write_tx = write_tx

-- Runs fn(session) in a transaction of the store's concerns; a duplicate key
-- (another process stored the same content meanwhile) runs it again, when
-- the lookup finds that record.
function M.in_transaction(store, fn)
  local attempts = 0
  while true do
    attempts = attempts + 1
    local ok, e, c, d = wire.transaction(store.db, "records: transaction", fn, store.tx_opts)
    if ok then return true end
    if c ~= "duplicate" or attempts >= 5 then return nil, e, c, d end
  end
end

-- store:save: the graph, in the store's mode; session: an open store:transaction's.
function M.save(store, T, t, session, unit_ts)
  local plan, e, c, d = M.plan(store, T, t, session)
  if not plan then return nil, e, c, d end
  local first
  first, e, c, d = M.reserve(store, #plan.nodes)
  if not first then return nil, e, c, d end
  assign(plan, first)
  if session then
    local ok
    ok, e, c, d = write_tx(store, plan, unit_ts, session, "main")
    if not ok then return nil, e, c, d end
    return plan.root.sid
  end
  local ts
  if store.mode == "transactions" then
    local ok
    ok, e, c, d = M.in_transaction(store, function(s)
      local stamp, e2, c2, d2 = M.stamp(store)
      if store.ts.enabled and not stamp then return nil, e2, c2, d2 end
      return write_tx(store, plan, stamp, s, "main")
    end)
    if not ok then return nil, e, c, d end
    return plan.root.sid
  end
  local ok
  ok, e, c, d = store.lease:check(nil)
  if not ok then return nil, e, c, d end
  ts, e, c, d = M.stamp(store)
  if store.ts.enabled and not ts then return nil, e, c, d end
  ok, e, c, d = write_degraded(store, plan, ts, "main")
  if not ok then return nil, e, c, d end
  return plan.root.sid
end

-- ------------------------------------------------------------ replace

-- pred: the stored predecessor document. What a stored record with the
-- successor's content id means for this replacement.
local function replace_hit(pred, hit)
  if hit._id == pred._id then
    if pred._next == nil then return "same" end
    return nil, "an earlier revision"
  end
  if hit._lin ~= pred._lin then return nil, "another lineage" end
  if hit._prev == pred._id then return "successor" end
  return nil, "an earlier revision"
end

-- pred._next = the successor, and its timestamp as _nts (so only_latest
-- with as_of tells what was latest then without reading the successor).
local function link(store, T, pred, succ_sid, succ_ts, session)
  local coll = store.colls[T.name]
  local set = { _next = succ_sid, _nts = succ_ts }
  local r, e, c, d = store.wire:update(coll, { { q = { _id = pred._id, _next = { ["$exists"] = false } },
    u = { ["$set"] = set } } }, session)
  if not r then return nil, e, c, d end
  if (r.n or 0) == 0 then
    local now, e2, c2, d2 = store.wire:find_one(coll, { _id = pred._id }, { projection = { _next = 1 } }, session)
    if now == nil then return nil, e2, c2, d2 end
    if now and now._next == succ_sid then return true end
    return fail("conflict", format("replace %s %s: it was replaced by %s meanwhile", T.name, tostring(pred._id),
      tostring(now and now._next)), { sid = pred._id, next = now and now._next })
  end
  return true
end

-- A replacement whose content is stored already (hit): the same record
-- again (idempotent: the same successor, and a link a crash left undone),
-- or a conflict when hit is not pred's own successor.
local function replace_onto_hit(store, T, sid, pred, hit, session)
  local how, why = replace_hit(pred, hit)
  if not how then
    return fail("conflict", format("replace %s %s: the new content is stored already as %s %s, %s "
      .. "(a replacement cannot join it)", T.name, tostring(sid), T.name, tostring(hit._id), why),
      { sid = hit._id })
  end
  if how == "same" then return pred._id end
  local ok, e, c, d
  if pred._next == nil then
    ok, e, c, d = link(store, T, pred, hit._id, hit._ts, session)
    if not ok then return nil, e, c, d end
  end
  if hit._role == "dep" then
    ok, e, c, d = store.wire:update(store.colls[T.name],
      { { q = { _id = hit._id }, u = { ["$set"] = { _role = "main" } } } }, session)
    if not ok then return nil, e, c, d end
  end
  return hit._id
end

local replace_degraded

function M.replace(store, T, sid, t, session, unit_ts)
  local coll = store.colls[T.name]
  local pred, e, c, d = store.wire:find_one(coll, { _id = sid }, nil, session)
  if pred == nil then return nil, e, c, d end
  if not pred then return fail("not_found", format("replace %s: no record %s", T.name, tostring(sid))) end
  local plan
  plan, e, c, d = M.plan(store, T, t, session, { lin = pred._lin, prev = pred._id })
  if not plan then return nil, e, c, d end
  local root = plan.root
  -- the successor's own content already stored?
  if T.dedup ~= "none" then
    local hit
    hit, e, c, d = find_by_cid(store, T, root.cid, session)
    if hit == nil then return nil, e, c, d end
    if hit then return replace_onto_hit(store, T, sid, pred, hit, session) end
  end
  if pred._next ~= nil then
    return fail("conflict", format("replace %s %s: it was replaced already by %s (replace the latest)", T.name,
      tostring(sid), tostring(pred._next)), { sid = sid, next = pred._next })
  end
  local first
  first, e, c, d = M.reserve(store, #plan.nodes)
  if not first then return nil, e, c, d end
  assign(plan, first)
  local function in_tx(s, stamp)
    local ok, e2, c2, d2 = write_tx(store, plan, stamp, s, "main")
    if not ok then return nil, e2, c2, d2 end
    if root.hit then
      return fail("conflict", format("replace %s %s: the new content was stored meanwhile as %s", T.name,
        tostring(sid), tostring(root.sid)))
    end
    return link(store, T, pred, root.sid, stamp, s)
  end
  if session then
    local ok
    ok, e, c, d = in_tx(session, unit_ts)
    if not ok then return nil, e, c, d end
    return root.sid
  end
  if store.mode == "transactions" then
    local ok
    ok, e, c, d = M.in_transaction(store, function(s)
      local stamp, e2, c2, d2 = M.stamp(store)
      if store.ts.enabled and not stamp then return nil, e2, c2, d2 end
      return in_tx(s, stamp)
    end)
    if not ok then return nil, e, c, d end
    return root.sid
  end
  return replace_degraded(store, T, sid, pred, plan)
end

-- A degraded replace: the successor goes in as a dependency (unreachable
-- until linked, so a crash leaves what fsck collects), then the link, then main.
replace_degraded = function(store, T, sid, pred, plan)
  local coll, root = store.colls[T.name], plan.root
  local ok, e, c, d = store.lease:check(nil)
  if not ok then return nil, e, c, d end
  local ts
  ts, e, c, d = M.stamp(store)
  if store.ts.enabled and not ts then return nil, e, c, d end
  ok, e, c, d = write_degraded(store, plan, ts, "dep")
  if not ok then return nil, e, c, d end
  if root.hit then
    return fail("conflict", format("replace %s %s: the new content was stored meanwhile as %s", T.name,
      tostring(sid), tostring(root.sid)))
  end
  ok, e, c, d = link(store, T, pred, root.sid, ts, nil)
  if not ok then return nil, e, c, d end
  ok, e, c, d = store.wire:update(coll, { { q = { _id = root.sid }, u = { ["$set"] = { _role = "main" } } } }, nil)
  if not ok then return nil, e, c, d end
  return root.sid
end

return M
