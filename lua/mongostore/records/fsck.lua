-- mongostore.records.fsck - the record store's integrity pass: the exclusive fsck lease
-- (<prefix>_meta "fsck"), fencing of the writer leases it overrides, reachability from the
-- main records through _refs and lineage links, garbage collection of unreachable
-- dependencies, future store timestamps (reported, clamped on request) and the gen bump.
local core = require "mongostore.core"

local type, error, pairs, ipairs, tostring, format = type, error, pairs, ipairs, tostring, string.format
local floor, sort, concat = math.floor, table.sort, table.concat
local null, date, now, sleep = core.null, core.date, core.now, core.sleep

local M = {}

M.FSCK_TTL = 60        -- seconds an fsck lease lasts unless renewed (it renews between phases)
M.FUTURE_SLACK = 5     -- seconds a store timestamp may run ahead of this clock (hosts' skew)
-- Seconds a collecting pass waits after removing other writers' leases: a degraded writer
-- checks its lease right before its root write, so a root whose check passed just before the
-- takeover lands within one round trip; the pass scans after it, and sees the root.
M.FENCE_GRACE = 1
local BATCH = 1000     -- documents per delete and per cursor batch

local OPTS = {
  repair = "boolean", collect_garbage = "boolean", force = "boolean", clamp_future_timestamps = "boolean",
  wait = "number", future_slack = "number", verify_content = "boolean",
}

-- the record store's failure shape (mongostore.records.wire): nil, message, code, detail
local wire = require "mongostore.records.wire"
local fail = wire.fail

local function driver_fail(what, msg, code, detail)
  return wire.driver("fsck: " .. what, msg, code, detail)
end

-- ------------------------------------------------------------ the store handle

-- What fsck needs of a store handle from records.open: its database, the prefix of its
-- collections, the token of its own writer lease (never waited for nor deleted) and the
-- timestamp resolution. Read by several names so the pass also runs on a bare table
-- { db =, prefix = } (an administrative tool with no declared types).
local function context(store)
  if type(store) ~= "table" then error("fsck: store must be a record store, got " .. type(store), 3) end
  local db = store.db or store._db
  if db == nil then error("fsck: store has no database handle (store.db)", 3) end
  local prefix = store.prefix or store._prefix or "records."
  local lease = store.lease or store._lease
  local token = store.token or store._token or store.writer_token
  if token == nil and type(lease) == "table" then token = lease.token end
  local resolution = store.timestamp_resolution or store._resolution or 1000
  return { db = db, prefix = prefix, token = token, resolution = resolution, store = store }
end

local function now_ms() return floor(now() * 1000) end

local function ms_of(v)
  if type(v) == "userdata" or type(v) == "table" then
    local ok, ms = pcall(function() return v:ms() end)
    if ok and ms then return tonumber(ms) end
  end
  if type(v) == "number" then return v end
  return nil
end

local hex = require("mongostore.util").hex

-- ------------------------------------------------------------ the lease

local function meta_coll(ctx)
  local c, err, code, detail = ctx.db:collection(ctx.prefix .. "_meta")
  if not c then return driver_fail("the meta collection", err, code, detail) end
  return c
end

-- Takes the fsck lease: free, expired, or (force) whoever holds it. Another holder of an
-- unexpired lease is unavailable: two passes at once would each see the other's
-- half-swept state.
local function acquire(ctx, meta, force)
  local r, err, code, detail = meta:insert_one({ _id = "fsck", holder = null, expires = date(0), gen = 0 })
  if not r and code ~= "duplicate" then return driver_fail("creating the fsck lease", err, code, detail) end
  local t = now_ms()
  local filter = { _id = "fsck" }
  if not force then
    filter["$or"] = core.array({ { holder = null }, { expires = { ["$lte"] = date(t) } } })
  end
  r, err, code, detail = meta:update_one(filter,
    { ["$set"] = { holder = ctx.fsck_token, expires = date(t + M.FSCK_TTL * 1000) } })
  if not r then return driver_fail("taking the fsck lease", err, code, detail) end
  if r.matched == 0 then
    local doc = meta:find_one({ _id = "fsck" }) or {}
    local until_ms = ms_of(doc.expires)
    return fail("unavailable", format("fsck: another fsck holds the lease (%s) until %s; wait for it, or force = true "
      .. "once its process is known dead", tostring(doc.holder), until_ms and tostring(date(until_ms)) or "?"))
  end
  ctx.lease_at = t
  return true
end

-- Renews the lease when half its time is gone; a lease another fsck took over (force)
-- stops this pass before it deletes anything. cheap: no round trip before half the time
-- (called every batch of a long scan, so the lease never lapses under a running pass and
-- lets writers back in).
local function keep(ctx, meta, cheap)
  local t = now_ms()
  local filter = { _id = "fsck", holder = ctx.fsck_token }
  if t - ctx.lease_at < M.FSCK_TTL * 500 then
    if cheap then return true end
    local doc, err, code, detail = meta:find_one(filter, { projection = { _id = 1 } })
    if doc == nil and err ~= nil then return driver_fail("checking the fsck lease", err, code, detail) end
    if doc == nil then return fail("conflict", "fsck: its lease was taken over by another fsck") end
    return true
  end
  local r, err, code, detail = meta:update_one(filter,
    { ["$set"] = { expires = date(t + M.FSCK_TTL * 1000) } })
  if not r then return driver_fail("renewing the fsck lease", err, code, detail) end
  if r.matched == 0 then return fail("conflict", "fsck: its lease was taken over by another fsck") end
  ctx.lease_at = t
  return true
end

-- Gives the lease back and bumps gen, so a live handle learns that records may have gone.
local function release(ctx, meta)
  local doc, err, code, detail = meta:find_one_and_update({ _id = "fsck", holder = ctx.fsck_token },
    { ["$set"] = { holder = null, expires = date(now_ms()) }, ["$inc"] = { gen = 1 } }, { new = true })
  if doc == nil and err ~= nil then return driver_fail("releasing the fsck lease", err, code, detail) end
  if doc == nil then return fail("conflict", "fsck: its lease was taken over by another fsck before it finished") end
  return doc.gen
end

-- The writer leases of other handles: { token =, live = bool, expires = ms }.
local function writers(ctx, meta)
  local cur, err, code, detail = meta:find({ _id = { ["$gte"] = "writer:", ["$lt"] = "writer;" } })
  if not cur then return driver_fail("reading the writer leases", err, code, detail) end
  local docs
  docs, err, code, detail = cur:all()
  if not docs then return driver_fail("reading the writer leases", err, code, detail) end
  local t, out = now_ms(), {}
  for _, d in ipairs(docs) do
    local token = d._id:sub(8)
    if token ~= ctx.token then
      local exp = ms_of(d.expires) or 0
      out[#out + 1] = { id = d._id, token = token, live = exp > t, expires = exp }
    end
  end
  return out
end

-- Without force: waits up to `wait` seconds for the other writers' leases to expire (the
-- fsck lease, held meanwhile, keeps them from starting a save, so they stop renewing).
local function settle_writers(ctx, meta, opts, summary)
  local deadline = now() + (opts.wait or 0)
  local list, err, code, d_err
  while true do
    list, err, code, d_err = writers(ctx, meta)
    if not list then return nil, err, code, d_err end
    local live = {}
    for _, w in ipairs(list) do if w.live then live[#live + 1] = w end end
    if #live == 0 or opts.force then break end
    if now() >= deadline then
      local names = {}
      for i, w in ipairs(live) do
        names[i] = format("%s until %s", w.id, tostring(date(w.expires)))
      end
      return fail("unavailable", format("fsck: %d writer lease(s) of other store handles are held (%s); close them "
        .. "or wait for them to expire, or pass force = true once their processes are known dead",
        #live, concat(names, ", ")), { writers = live })
    end
    sleep(0.05)
    local kept, ke, kc, d_ke = keep(ctx, meta, true)
    if not kept then return nil, ke, kc, d_ke end
  end
  -- A lease fsck overrides or finds expired is deleted when the pass may delete records:
  -- its holder, if it still runs, then fails every write (it checks its lease before each
  -- save unit and again before a degraded root), so it cannot write a root over swept deps.
  local mutating = opts.repair or opts.collect_garbage
  for _, w in ipairs(list) do
    if w.live or mutating then
      local r, e, c, d = meta:delete_one({ _id = w.id })
      if not r then return driver_fail("deleting the writer lease " .. w.id, e, c, d) end
      if r.deleted > 0 then
        ctx.fenced[#ctx.fenced + 1] = w.token
        if w.live then
          summary.taken_over[#summary.taken_over + 1] = w.token
        else
          summary.stale_writers = summary.stale_writers + 1
        end
      end
    end
  end
  return true
end

-- ------------------------------------------------------------ the pass

-- The collections a pass examines: every <prefix><name> with a name records.define takes (so
-- no other store's "<prefix>x.y"), and the declared types' even before they exist. It deletes
-- only in the collections it owns: the declared types' and those stamped in the meta
-- collection's schema:<type> documents (every type a store of this prefix ever opened), so it
-- never collects from a collection of another store whose prefix merely starts like this one.
local TYPE_NAME = "^[%a][%w_%-]*$"

local function record_collections(ctx, meta)
  local entries, err, code, detail = ctx.db:list_collections()
  if not entries then return driver_fail("listing the collections", err, code, detail) end
  local p, names, seen, owned = ctx.prefix, {}, {}, {}
  local function add(name)
    if not seen[name] then seen[name] = true; names[#names + 1] = name end
  end
  for _, e in ipairs(entries) do
    local name = e.name
    if type(name) == "string" and name:sub(1, #p) == p and name:sub(#p + 1):match(TYPE_NAME) then add(name) end
  end
  local types = ctx.store.types
  if type(types) == "table" then
    for k, t in pairs(types) do
      local tname = type(t) == "table" and t.name or (type(k) == "string" and k or nil)
      if type(tname) == "string" then
        add(p .. tname)
        owned[p .. tname] = true
      end
    end
  end
  local cur, docs
  cur, err, code, detail = meta:find({ _id = { ["$gte"] = "schema:", ["$lt"] = "schema;" } },
    { projection = { _id = 1 } })
  if cur then docs, err, code, detail = cur:all() end
  if not docs then return driver_fail("reading the schema stamps", err, code, detail) end
  for _, d in ipairs(docs) do
    local tname = d._id:sub(8)
    if tname:match(TYPE_NAME) then
      add(p .. tname)
      owned[p .. tname] = true
    end
  end
  sort(names)
  return names, owned
end

local function new_entry(owned)
  return { examined = 0, repaired = 0, conflicts = 0, deleted = 0, unreachable = 0, violations = {}, owned = owned }
end

local function violation(summary, coll, sid, kind, message)
  local e = summary.collections[coll]
  local v = { collection = coll, sid = sid, kind = kind, message = message }
  summary.reported[kind .. "\0" .. coll .. "\0" .. tostring(sid)] = true
  e.violations[#e.violations + 1] = v
  summary.violations[#summary.violations + 1] = v
end

-- an integer sid on Lua 5.4 and on LuaJIT (where integers are doubles)
local function is_int(v) return type(v) == "number" and v == floor(v) and v == v end

-- Reads the store fields of every record of one collection.
local function scan(ctx, meta, coll_name, docs, summary)
  local coll, err, code, d_err = ctx.db:collection(coll_name)
  if not coll then return driver_fail("collection " .. coll_name, err, code, d_err) end
  local cur, e2, c2, d2 = coll:find({}, {
    projection = { _id = 1, _role = 1, _refs = 1, _prev = 1, _next = 1, _ts = 1, _nts = 1 }, batch_size = BATCH,
  })
  if not cur then return driver_fail("reading " .. coll_name, e2, c2, d2) end
  local entry = summary.collections[coll_name]
  while true do
    local d, e3, c3, d3 = cur:next()
    if d == nil then
      if e3 ~= nil then return driver_fail("reading " .. coll_name, e3, c3, d3) end
      break
    end
    entry.examined = entry.examined + 1
    if entry.examined % BATCH == 0 then
      local ok, e4, c4, d_e4 = keep(ctx, meta, true)
      if not ok then return nil, e4, c4, d_e4 end
    end
    local sid = d._id
    if not is_int(sid) then
      violation(summary, coll_name, sid, "bad_sid", format("%s: a document whose _id %s is not an integer sid",
        coll_name, tostring(sid)))
    else
      docs[sid] = { role = d._role, refs = d._refs, prev = d._prev, next = d._next, ts = d._ts, nts = d._nts }
    end
  end
  return coll
end

-- Marks every record reachable from a main record; reports what points nowhere.
local function mark(ctx, all, summary)
  local p = ctx.prefix
  local marked, stack = {}, {}
  for cname, docs in pairs(all) do
    marked[cname] = {}
    for sid, d in pairs(docs) do
      if d.role == "main" then
        stack[#stack + 1] = { cname, sid }
      elseif d.role ~= "dep" then
        -- kept (never collected) since nothing says what it is
        violation(summary, cname, sid, "bad_role", format("%s %d: _role is %s, not \"main\" or \"dep\"", cname, sid,
          tostring(d.role)))
        stack[#stack + 1] = { cname, sid }
      end
    end
  end
  local function visit(cname, sid)
    local m = marked[cname]
    if m and not m[sid] and all[cname][sid] then
      m[sid] = true
      stack[#stack + 1] = { cname, sid }
    end
  end
  local done = {}
  while #stack > 0 do
    local top = stack[#stack]
    stack[#stack] = nil
    local cname, sid = top[1], top[2]
    local key = cname .. "\0" .. sid
    if not done[key] then
      done[key] = true
      marked[cname][sid] = true
      local d = all[cname][sid]
      local refs = d.refs
      if refs ~= nil and refs ~= null then
        if type(refs) ~= "table" then
          violation(summary, cname, sid, "bad_refs", format("%s %d: _refs is not a list", cname, sid))
        else
          for _, pair in ipairs(refs) do
            local tname, rsid = type(pair) == "table" and pair[1], type(pair) == "table" and pair[2]
            if type(tname) ~= "string" or not is_int(rsid) then
              violation(summary, cname, sid, "bad_refs", format("%s %d: a _refs entry is not { type, sid }",
                cname, sid))
            else
              local target = p .. tname
              if not (all[target] and all[target][rsid]) then
                violation(summary, cname, sid, "dangling_ref", format("%s %d refers to %s %d, which does not exist",
                  cname, sid, target, rsid))
              else
                visit(target, rsid)
              end
            end
          end
        end
      end
      -- a lineage stays whole: the versions before and after a reachable record are kept
      for _, link in ipairs { "prev", "next" } do
        local l = d[link]
        if l ~= nil and l ~= null then visit(cname, l) end
      end
    end
  end
  return marked
end

-- Lineage links of the reachable records (an unlinked successor is a degraded replace that
-- stopped before its link: a dependency nothing reaches, collected like any other): a _prev or
-- _next pointing nowhere, two successors of one record, a _next whose record names another
-- predecessor, a linked successor still a dependency (the replace stopped before promoting it:
-- promoted on repair), a main successor its predecessor does not link (linked on repair).
local function lineage(_, cname, coll, docs, marked, summary, opts)
  local entry = summary.collections[cname]
  local function update(filter, change)
    local r, e, c, dd = coll:update_one(filter, change)
    if not r then return driver_fail("repairing " .. cname, e, c, dd) end
    entry.repaired = entry.repaired + r.modified
    return true
  end
  local succ = {}
  for sid, d in pairs(docs) do
    local prev = d.prev
    if marked[sid] and prev ~= nil and prev ~= null then
      if not docs[prev] then
        violation(summary, cname, sid, "dangling_lineage", format("%s %d: its predecessor %s does not exist",
          cname, sid, tostring(prev)))
      else
        local list = succ[prev] or {}
        list[#list + 1] = sid
        succ[prev] = list
      end
    end
  end
  for sid, d in pairs(docs) do
    local nxt = d.next
    local list = succ[sid]
    if not marked[sid] then
      -- residue: collected or kept as it is, never repaired
      nxt = nil
      list = nil
    end
    if list and #list > 1 then
      sort(list)
      entry.conflicts = entry.conflicts + 1
      local s = {}
      for i, x in ipairs(list) do s[i] = tostring(x) end
      violation(summary, cname, sid, "lineage_fork", format("%s %d has more than one successor (%s)", cname, sid,
        concat(s, ", ")))
    elseif nxt ~= nil and nxt ~= null then
      local n = docs[nxt]
      if not n then
        violation(summary, cname, sid, "dangling_lineage", format("%s %d: its successor %s does not exist",
          cname, sid, tostring(nxt)))
        if opts.repair then
          local ok, e, c, d_e = update({ _id = sid, _next = nxt }, { ["$unset"] = { _next = "", _nts = "" } })
          if not ok then return nil, e, c, d_e end
        end
      elseif n.prev ~= sid then
        entry.conflicts = entry.conflicts + 1
        violation(summary, cname, sid, "lineage_mismatch", format("%s %d names %d as its successor, whose "
          .. "predecessor is %s", cname, sid, nxt, tostring(n.prev)))
      elseif n.role == "dep" and d.role == "main" then
        violation(summary, cname, nxt, "unpromoted_successor", format("%s %d: the successor of main %d is still a "
          .. "dependency (a replace stopped before promoting it)", cname, nxt, sid))
        if opts.repair then
          local ok, e, c, d_e = update({ _id = nxt, _role = "dep" }, { ["$set"] = { _role = "main" } })
          if not ok then return nil, e, c, d_e end
          n.role = "main"
        end
      end
    elseif list and docs[list[1]].role == "main" then
      violation(summary, cname, sid, "missing_next", format("%s %d: its successor %d is not linked from it",
        cname, sid, list[1]))
      if opts.repair then
        local ok, e, c, d_e = update({ _id = sid, _next = { ["$exists"] = false } }, { ["$set"] = { _next = list[1] } })
        if not ok then return nil, e, c, d_e end
      end
    end
  end
  return true
end

-- Store timestamps past now + slack, in store units (ns // resolution): a record's _ts, and
-- the copy of its successor's a predecessor keeps as _nts (only_latest with as_of reads it).
-- Every clamp of a pass writes the same now, so a clamped successor's _ts and its
-- predecessor's _nts stay equal.
local function timestamps(ctx, cname, coll, docs, summary, opts)
  local entry = summary.collections[cname]
  local units = 1e9 / ctx.resolution
  local t_now = ctx.t_now
  local limit = t_now + floor((opts.future_slack or M.FUTURE_SLACK) * units)
  local clamp = opts.repair and opts.clamp_future_timestamps
  for sid, d in pairs(docs) do
    for _, f in ipairs { "ts", "nts" } do
      local ts = d[f]
      if type(ts) == "number" and ts > limit then
        local field = "_" .. f
        violation(summary, cname, sid, "future_timestamp", format("%s %d: its %s %d is %.3f s in the future",
          cname, sid, f == "ts" and "store timestamp" or "successor's timestamp (_nts)", ts, (ts - t_now) / units))
        if clamp then
          local r, e, c, dd = coll:update_one({ _id = sid, [field] = ts }, { ["$set"] = { [field] = t_now } })
          if not r then return driver_fail("clamping " .. cname, e, c, dd) end
          entry.repaired = entry.repaired + r.modified
          d[f] = t_now
        end
      end
    end
  end
  return true
end

-- verify_content: every reachable record of a declared type read whole, turned back into a
-- record as fetch does and its content id computed again: a document edited behind the
-- store's back, or one its type no longer reads, is a violation.
local VERIFY_BATCH = 500

local function check_content(summary, records, T, cname, doc, rec)
  local okc, cid, why = pcall(records.content_id, T, rec)
  if not okc then
    -- a ref to a record that is not there: reported as dangling already
    if not tostring(cid):find("not sids", 1, true) then
      violation(summary, cname, doc._id, "invalid_record", format("%s %s: %s", cname, tostring(doc._id),
        tostring(cid)))
    end
  elseif cid == nil then
    violation(summary, cname, doc._id, "invalid_record", format("%s %s: the stored document is not a %s: %s",
      cname, tostring(doc._id), T.name, tostring(why)))
  elseif cid ~= doc._cid then
    violation(summary, cname, doc._id, "content_mismatch", format("%s %s: its content id is %s, its content's "
      .. "is %s (changed behind the store's back)", cname, tostring(doc._id), tostring(doc._cid), cid))
  end
end

local function verify(ctx, meta, cname, coll, docs, marked, summary)
  local store = ctx.store
  local records = package.loaded["mongostore.records"]
  local T = type(store.types) == "table" and store.types[cname:sub(#ctx.prefix + 1)]
  if not (records and T and records.is_type(T) and type(store.load) == "function") then return true end
  local sids = {}
  for sid in pairs(docs) do if marked[sid] then sids[#sids + 1] = sid end end
  sort(sids)
  for i = 1, #sids, VERIFY_BATCH do
    local kept, ke, kc, d_ke = keep(ctx, meta, true)
    if not kept then return nil, ke, kc, d_ke end
    local chunk = {}
    for j = i, math.min(i + VERIFY_BATCH - 1, #sids) do chunk[#chunk + 1] = sids[j] end
    local cur, e, c, d = coll:find({ _id = { ["$in"] = core.array(chunk) } })
    if not cur then return driver_fail("reading " .. cname, e, c, d) end
    local full
    full, e, c, d = cur:all()
    if not full then return driver_fail("reading " .. cname, e, c, d) end
    -- one document the type cannot read must not hide the others: read one by one then
    local okl, recs, e2, c2, d_e2 = pcall(store.load, store, T, full)
    if okl and not recs then return nil, e2, c2, d_e2 end
    if not okl then
      recs = {}
      for k, doc in ipairs(full) do
        local ok1, one = pcall(store.load, store, T, { doc })
        if ok1 and one then
          recs[k] = one[1]
        else
          recs[k] = false
          violation(summary, cname, doc._id, "invalid_record", format("%s %s: the stored document is not a %s: %s",
            cname, tostring(doc._id), T.name, tostring(one)))
        end
      end
    end
    for k, rec in ipairs(recs) do
      if rec then check_content(summary, records, T, cname, full[k], rec) end
    end
  end
  return true
end

-- The sid counter must stay above every sid in use, or a later save reuses one.
local function counter(ctx, max_sid, max_coll, summary, opts)
  local c, err, code, d_err = ctx.db:collection(ctx.prefix .. "_counters")
  if not c then return driver_fail("the counters collection", err, code, d_err) end
  local doc, e2, c2, d2 = c:find_one({ _id = "sid" })
  if doc == nil and e2 ~= nil then return driver_fail("reading the sid counter", e2, c2, d2) end
  local n = doc and doc.n or 0
  if max_sid > n then
    violation(summary, max_coll, max_sid, "sid_beyond_counter", format("%s %d: the sid counter stands at %d, below "
      .. "a sid in use", max_coll, max_sid, n))
    if opts.repair then
      local r, e, cc, d = c:update_one({ _id = "sid" }, { ["$max"] = { n = max_sid } }, { upsert = true })
      if not r then return driver_fail("repairing the sid counter", e, cc, d) end
      local entry = summary.collections[max_coll]
      entry.repaired = entry.repaired + 1
    end
  end
  return true
end

local function collect(ctx, meta, cname, coll, docs, marked, summary, gc)
  local entry = summary.collections[cname]
  local garbage = {}
  for sid, d in pairs(docs) do
    if not marked[sid] and d.role == "dep" then garbage[#garbage + 1] = sid end
  end
  entry.unreachable = #garbage
  if not gc or #garbage == 0 then return true end
  sort(garbage)
  local ok, err, code, d_err = keep(ctx, meta)
  if not ok then return nil, err, code, d_err end
  for i = 1, #garbage, BATCH do
    if i > 1 then
      ok, err, code, d_err = keep(ctx, meta, true)
      if not ok then return nil, err, code, d_err end
    end
    local chunk = {}
    for j = i, math.min(i + BATCH - 1, #garbage) do chunk[#chunk + 1] = garbage[j] end
    -- the role again in the filter: a record promoted to main since the scan stays
    local r, e, c, d = coll:delete_many({ _id = { ["$in"] = core.array(chunk) }, _role = "dep" })
    if not r then return driver_fail("collecting " .. cname, e, c, d) end
    entry.deleted = entry.deleted + r.deleted
  end
  return true
end

local function check_opts(opts)
  if opts == nil then return {} end
  if type(opts) ~= "table" then error("fsck: opts must be a table or nil, got " .. type(opts), 3) end
  for k, v in pairs(opts) do
    local kind = OPTS[k]
    if not kind then error("fsck: unknown option " .. tostring(k), 3) end
    if type(v) ~= kind then error(format("fsck: opts.%s must be a %s, got %s", k, kind, type(v)), 3) end
  end
  -- NaN (x ~= x) passes a "< 0" test
  if opts.wait and (opts.wait ~= opts.wait or opts.wait < 0) then
    error("fsck: opts.wait must be a number >= 0, got " .. tostring(opts.wait), 3)
  end
  if opts.future_slack and (opts.future_slack ~= opts.future_slack or opts.future_slack < 0) then
    error("fsck: opts.future_slack must be a number >= 0, got " .. tostring(opts.future_slack), 3)
  end
  return opts
end

-- After the sweep: what a fenced writer wrote while the pass ran (its root past the grace)
-- must still find every record it refers to; one that does not is a violation.
local function late_writes(ctx, colls, summary)
  if #ctx.fenced == 0 then return true end
  local p = ctx.prefix
  for cname, coll in pairs(colls) do
    local cur, err, code, detail = coll:find({ _w = { ["$in"] = core.array(ctx.fenced) } },
      { projection = { _id = 1, _refs = 1, _w = 1 } })
    if not cur then return driver_fail("reading " .. cname, err, code, detail) end
    local docs
    docs, err, code, detail = cur:all()
    if not docs then return driver_fail("reading " .. cname, err, code, detail) end
    for _, d in ipairs(docs) do
      for _, pair in ipairs(type(d._refs) == "table" and d._refs or {}) do
        if type(pair) == "table" and type(pair[1]) == "string" and is_int(pair[2]) then
          local target = colls[p .. pair[1]]
          local found = target and target:find_one({ _id = pair[2] }, { projection = { _id = 1 } })
          if not found and not summary.reported["dangling_ref\0" .. cname .. "\0" .. tostring(d._id)] then
            violation(summary, cname, d._id, "dangling_ref", format("%s %s refers to %s%s %d, which does not "
              .. "exist (written by the writer %s whose lease this pass took over)", cname, tostring(d._id), p,
              pair[1], pair[2], tostring(d._w)))
          end
        end
      end
    end
  end
  return true
end

local function pass(ctx, meta, opts, summary)
  local ok, err, code, d_err = settle_writers(ctx, meta, opts, summary)
  if not ok then return nil, err, code, d_err end
  if opts.collect_garbage and #ctx.fenced > 0 and M.FENCE_GRACE > 0 then sleep(M.FENCE_GRACE) end
  local names, owned, code2, d_owned = record_collections(ctx, meta)
  if not names then return nil, owned, code2, d_owned end
  local all, colls = {}, {}
  for _, cname in ipairs(names) do
    summary.collections[cname] = new_entry(owned[cname] == true)
    all[cname] = {}
    colls[cname], err, code, d_err = scan(ctx, meta, cname, all[cname], summary)
    if not colls[cname] then return nil, err, code, d_err end
    ok, err, code, d_err = keep(ctx, meta)
    if not ok then return nil, err, code, d_err end
  end
  local marked = mark(ctx, all, summary)
  ctx.t_now = floor(now() * (1e9 / ctx.resolution))
  local max_sid, max_coll = 0, nil
  for _, cname in ipairs(names) do
    local docs, coll = all[cname], colls[cname]
    for sid in pairs(docs) do
      if sid > max_sid then max_sid, max_coll = sid, cname end
    end
    ok, err, code, d_err = lineage(ctx, cname, coll, docs, marked[cname], summary, opts)
    if not ok then return nil, err, code, d_err end
    ok, err, code, d_err = timestamps(ctx, cname, coll, docs, summary, opts)
    if not ok then return nil, err, code, d_err end
    if opts.verify_content then
      ok, err, code, d_err = verify(ctx, meta, cname, coll, docs, marked[cname], summary)
      if not ok then return nil, err, code, d_err end
    end
    ok, err, code, d_err = collect(ctx, meta, cname, coll, docs, marked[cname], summary,
      opts.collect_garbage and owned[cname])
    if not ok then return nil, err, code, d_err end
  end
  if max_coll then
    ok, err, code, d_err = counter(ctx, max_sid, max_coll, summary, opts)
    if not ok then return nil, err, code, d_err end
  end
  if opts.collect_garbage then return late_writes(ctx, colls, summary) end
  return true
end

--- fsck.run(store, { repair, collect_garbage, force, clamp_future_timestamps, wait, future_slack,
-- verify_content })
-- -> summary { collections = { [name] = { examined, repaired, conflicts, deleted, unreachable,
-- violations = { ... } } }, totals = { ... }, violations = { ... }, taken_over, stale_writers,
-- gen, clean }, or nil, err, code.
function M.run(store, opts)
  local ctx = context(store)
  opts = check_opts(opts)
  local meta, err, code, d_err = meta_coll(ctx)
  if not meta then return nil, err, code, d_err end
  ctx.fsck_token = "fsck:" .. hex(core.random_bytes(12))
  ctx.fenced = {}
  local ok
  ok, err, code, d_err = acquire(ctx, meta, opts.force)
  if not ok then return nil, err, code, d_err end
  local summary = { collections = {}, violations = {}, taken_over = {}, stale_writers = 0, reported = {} }
  local ok2, e2, c2, d_e2 = pass(ctx, meta, opts, summary)
  local gen, e3, c3, d_e3 = release(ctx, meta)
  if not ok2 then return nil, e2, c2, d_e2 end
  if not gen then return nil, e3, c3, d_e3 end
  summary.gen = gen
  local totals = { examined = 0, repaired = 0, conflicts = 0, deleted = 0, unreachable = 0, violations = 0 }
  for _, e in pairs(summary.collections) do
    for k in pairs(totals) do
      totals[k] = totals[k] + (k == "violations" and #e.violations or e[k])
    end
  end
  summary.totals = totals
  summary.reported = nil
  summary.clean = totals.violations == 0 and totals.conflicts == 0
  -- the handle that ran the pass forgets what it cached (records may have gone)
  if type(store.after_fsck) == "function" then store:after_fsck(gen) end
  return summary
end

return M
