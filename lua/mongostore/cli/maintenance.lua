-- mongostore.cli.maintenance - the commands that look after a store: recover,
-- timers, outbox (its backlog, failed entries, redelivery) and doctor.
local ms = require "mongostore"
local term = require "mongostore.cli.term"

local type, ipairs, tostring, tonumber =
  type, ipairs, tostring, tonumber
local format, concat, sort = string.format, table.concat, table.sort

local common = require "mongostore.cli.common"
local age = common.age
local command = common.command
local connect = common.connect
local db_of = common.db_of
local fail = common.fail
local int_opt = common.int_opt
local iso = common.iso
local json_out = common.json_out
local list = common.list
local load_charts = common.load_charts
local new_engine = common.new_engine
local out = common.out
local print_table = common.print_table
local uri_of = common.uri_of
local usage = common.usage
local wait_of = common.wait_of

------------------------------------------------------------------------
-- recover

command("recover", {
  summary = "deliver what a crash left: pending spawns, the outbox and due timers",
  args = "[--max-passes N] [--json]",
  json = true, needs_charts = true,
  options = { ["max-passes"] = { value = true }, ["no-trace"] = {} },
  help = [[
  --max-passes N   at most N passes (default 100); each pass relays spawns, the outbox, then due timers
  --no-trace       write no trace step
The charts must include every chart the pending work belongs to.]],
  run = function(o, words)
    if #words > 0 then usage("recover takes no arguments") end
    local max = int_opt(o, "max-passes", 1, nil, 100)
    local charts = load_charts(o, "recover")
    local store = connect(o)
    local engine = new_engine(store, charts, o)
    local progress = not o.json and term.progress("recover: items handled", nil)
    local total, passes = 0, 0
    for _ = 1, max do
      local n = engine:step()
      passes = passes + 1
      total = total + n
      if progress and n > 0 then progress.update(total) end
      if n == 0 then break end
    end
    if progress then progress.finish() end
    if o.json then
      json_out({ handled = total, passes = passes })
    else
      out(format("recover: %d item%s handled in %d pass%s", total, total == 1 and "" or "s", passes,
        passes == 1 and "" or "es"))
    end
    return 0
  end,
})

------------------------------------------------------------------------
-- timers

local FAR = 100 * 366 * 86400

command("timers", {
  summary = "durable timers: those due now and the next to fire",
  args = "[--limit N] [--json]",
  json = true,
  options = { limit = { value = true } },
  help = "  --limit N   at most N timers in each list (default 50)",
  run = function(o, words)
    if #words > 0 then usage("timers takes no arguments") end
    local limit = int_opt(o, "limit", 1, nil, 50)
    local store = connect(o)
    local now = ms.now()
    local all, err = store:due_timers(now + FAR)
    if not all then fail("timers: " .. tostring(err)) end
    local due, upcoming = {}, {}
    for _, t in ipairs(all) do
      local row = { execution_id = t.execution_id, path = t.path, fire_at = t.fire_at }
      if t.fire_at <= now then due[#due + 1] = row else upcoming[#upcoming + 1] = row end
    end
    local function head(l)
      local h = {}
      for i = 1, math.min(limit, #l) do h[i] = l[i] end
      return h
    end
    if o.json then
      json_out({ now = now, due_count = #due, next_count = #upcoming, due = list(head(due)),
                 next = list(head(upcoming)) })
      return 0
    end
    local function section(title, l, word, sign)
      out(format("%s: %d%s", title, #l, #l > limit and format(" (the first %d shown)", limit) or ""))
      if #l == 0 then return end
      local rows = {}
      for i, t in ipairs(head(l)) do
        rows[i] = { t.execution_id, t.path, iso(t.fire_at), age(sign * (t.fire_at - now)) }
      end
      print_table({ "EXECUTION", "PATH", "FIRE AT", word }, rows)
    end
    section("due", due, "OVERDUE", -1)
    out("")
    section("next", upcoming, "IN", 1)
    return 0
  end,
})

------------------------------------------------------------------------
-- outbox

-- The emitting execution of each pending entry, and when it last
-- committed: emitted events carry no created_time, so an entry's age is at
-- least now minus its source's updated_at (the commit that queued it, or a
-- later one). Read from the documents' own fields (harel's layout), only for
-- documents with a backlog.
local function outbox_sources(o, store)
  local info = store:info()
  local db = ms.database(uri_of(o), { db = info.db, wait = wait_of(o) })
  if not db then return {} end
  local coll = db:collection(info.executions)
  local cur = coll and coll:find({ ["outbox.0"] = { ["$exists"] = true } },
                                 { projection = { ["outbox.seq"] = 1, data = 1 } })
  local by_seq = {}
  if cur then
    for doc in cur:each() do
      local data = type(doc.data) == "string" and ms.json.decode(doc.data) or nil
      local at = type(data) == "table" and type(data.updated_at) == "number" and data.updated_at or nil
      for _, e in ipairs(doc.outbox or {}) do
        local seq = math.tointeger(e.seq)
        if seq then by_seq[seq] = { source = doc._id, at = at } end
      end
    end
  end
  db:close()
  return by_seq
end

-- outbox --failed: the entries given up on, oldest first
local function failed_entries(o, store)
  local rows, err = store:failed_outbox()
  if not rows then fail("outbox --failed: " .. tostring(err)) end
  local now = ms.now()
  if o.json then
    local js = {}
    for i, r in ipairs(rows) do
      js[i] = { source_id = r.source_id, seq = r.seq, target_id = r.target_id or ms.null, kind = r.event.kind,
                event_id = r.event.id, error = r.error, failed_at = r.failed_at, attempts = r.attempts }
    end
    json_out({ total = #rows, failed = list(js) })
    return 0
  end
  out(format("outbox: %d failed entr%s", #rows, #rows == 1 and "y" or "ies"))
  if #rows > 0 then
    local t = {}
    for i, r in ipairs(rows) do
      t[i] = { r.source_id .. ":" .. r.seq, r.target_id or "(external)", r.event.kind, r.attempts or 0,
               age(now - (r.failed_at or now)), term.clean(tostring(r.error)) }
    end
    print_table({ "ENTRY", "TARGET", "KIND", "TRIES", "FAILED", "ERROR" }, t)
    out("put one back with: mongostore outbox --redeliver ENTRY")
  end
  return 0
end

-- outbox --redeliver SOURCE:SEQ
local function redeliver(o, store, which)
  local source, seq = which:match("^(.+):(%d+)$")
  if not source then usage("--redeliver takes an entry as outbox --failed lists it: SOURCE:SEQ") end
  local ok, moved = store:redeliver_failed(source, math.tointeger(tonumber(seq)))
  if not ok then fail("outbox --redeliver: " .. tostring(moved)) end
  if not moved then fail(format("outbox --redeliver: no failed entry %s", which)) end
  if o.json then
    json_out({ redelivered = which })
  else
    out(format("outbox: %s is back in the outbox; a worker delivers it", which))
  end
  return 0
end

command("outbox", {
  summary = "the outbox's backlog by target and age, and the pending spawns",
  args = "[--failed | --redeliver SOURCE:SEQ] [--json]",
  json = true,
  options = { failed = {}, redeliver = { value = true } },
  help = [[
Entries waiting for delivery, grouped by target, the longest waiting first. AGE is at
least the time since the emitting execution last committed (emitted events carry no time
of their own).

  --failed                 the entries given up on (kept with their error instead of dropped)
  --redeliver SOURCE:SEQ   put a failed entry back into the outbox]],
  run = function(o, words)
    if #words > 0 then usage("outbox takes no arguments") end
    if o.failed and o.redeliver then usage("outbox takes --failed or --redeliver, not both") end
    local store = connect(o)
    if o.failed then return failed_entries(o, store) end
    if o.redeliver then return redeliver(o, store, o.redeliver) end
    local entries, err = store:pending_outbox()
    if not entries then fail("outbox: " .. tostring(err)) end
    local spawns
    spawns, err = store:pending_spawns()
    if not spawns then fail("outbox: spawns: " .. tostring(err)) end
    local now = ms.now()
    local sources = #entries > 0 and outbox_sources(o, store) or {}
    local by, targets = {}, {}
    for _, e in ipairs(entries) do
      local key = e.target_id or "\0external"
      local t = by[key]
      if not t then
        t = { target_id = e.target_id, count = 0, kinds = {}, kind_set = {}, oldest_at = nil, sources = {},
              source_set = {}, oldest_seq = e.seq }
        by[key] = t
        targets[#targets + 1] = t
      end
      t.count = t.count + 1
      local kind = e.event and e.event.kind or "?"
      if not t.kind_set[kind] then
        t.kind_set[kind] = true
        t.kinds[#t.kinds + 1] = kind
      end
      local src = sources[e.seq]
      if src and not t.source_set[src.source] then
        t.source_set[src.source] = true
        t.sources[#t.sources + 1] = src.source
      end
      local at = e.event and e.event.created_time
      if type(at) ~= "number" then at = src and src.at end
      if type(at) == "number" and (t.oldest_at == nil or at < t.oldest_at) then t.oldest_at = at end
      if e.seq < t.oldest_seq then t.oldest_seq = e.seq end
    end
    sort(targets, function(a, b)
      local x, y = a.oldest_at or math.huge, b.oldest_at or math.huge
      if x ~= y then return x < y end
      return (a.target_id or "") < (b.target_id or "")
    end)
    if o.json then
      local js = {}
      for i, t in ipairs(targets) do
        js[i] = { target_id = t.target_id or ms.null, count = t.count, kinds = list(t.kinds), oldest_at = t.oldest_at,
                  age = t.oldest_at and (now - t.oldest_at) or nil, oldest_seq = t.oldest_seq,
                  sources = list(t.sources) }
      end
      json_out({ total = #entries, targets = list(js), spawns = #spawns })
      return 0
    end
    out(format("outbox: %d entr%s for %d target%s", #entries, #entries == 1 and "y" or "ies", #targets,
      #targets == 1 and "" or "s"))
    if #targets > 0 then
      local rows = {}
      for i, t in ipairs(targets) do
        rows[i] = { t.target_id or "(external)", t.count, t.oldest_seq, age(t.oldest_at and now - t.oldest_at),
                    concat(t.kinds, ","), concat(t.sources, ",") }
      end
      print_table({ "TARGET", "ENTRIES", "OLDEST SEQ", "AGE", "KINDS", "FROM" }, rows)
    end
    out(format("spawns pending: %d", #spawns))
    return 0
  end,
})

------------------------------------------------------------------------
-- doctor

-- What csrc/store.c's ensure_indexes makes on the executions collection.
local NEEDED = {
  { name = "outbox_seq", keys = { "outbox.seq" }, why = "the outbox relay" },
  { name = "spawns_seq", keys = { "spawns.seq" }, why = "the spawn relay" },
  { name = "definition_id", keys = { "definition_id" }, why = "lookups by chart" },
  { name = "definition_status_id", keys = { "definition_id", "status", "_id" }, why = "the listing" },
  { name = "next_fire_at", keys = { "next_fire_at" }, why = "the timer sweep" },
  { name = "definition_id_id", keys = { "definition_id", "_id" }, why = "the listing by chart" },
  { name = "harel_written", keys = { "version" }, why = "documents harel's store wrote (partial)" },
}

local function key_text(keys)
  local parts = {}
  for i, k in ipairs(keys) do parts[i] = format("%q:1", k) end
  return "{" .. concat(parts, ",") .. "}"
end

local function collection_names(o)
  local p = o.prefix
  return (p and (p .. "_executions") or "executions"), (p and (p .. "_counters") or "counters")
end

-- doctor: each of the collections named, whether it exists, its documents
-- and (where collStats answers) its sizes.
local function doctor_collections(db, names, existing)
  local collections = {}
  for _, name in ipairs(names) do
    local entry = { name = name, exists = existing[name] == true, documents = 0 }
    if entry.exists then
      local st = db:command({ { "collStats", name } })
      if st then
        entry.documents = math.tointeger(st.count) or st.count
        entry.bytes = math.tointeger(st.size) or st.size
        entry.storage_bytes = math.tointeger(st.storageSize) or st.storageSize
      else
        entry.documents = db:collection(name):count({})
      end
    end
    collections[#collections + 1] = entry
  end
  return collections
end

-- doctor: each index mongostore needs on the executions collection, present,
-- missing or with different keys, and how many are not present.
local function doctor_indexes(db, exes_name, existing)
  local have = {}
  if existing[exes_name] then
    local ixs = db:collection(exes_name):list_indexes()
    for _, ix in ipairs(ixs or {}) do
      have[#have + 1] = { name = ix.name, key = (tostring(ms.ejson.encode(ix.key)):gsub("%s", "")) }
    end
  end
  local indexes, missing = {}, 0
  for _, need in ipairs(NEEDED) do
    local want = key_text(need.keys)
    local state = "missing"
    for _, h in ipairs(have) do
      if h.key == want then state = "present" break end
      if h.name == need.name then state = "different keys" end
    end
    if state ~= "present" then missing = missing + 1 end
    indexes[#indexes + 1] = { collection = exes_name, name = need.name, keys = list(need.keys), state = state,
                              used_by = need.why }
  end
  return indexes, missing
end

-- doctor's report as tables: the checks, the collections, the indexes.
local function print_doctor(info, build, dbname, collections, indexes, missing)
  local tx = info.transactions and "yes" or
    ("no (" .. (info.replica_set and "the replica set does not offer them" or "a standalone server") .. ")")
  print_table({ "CHECK", "RESULT" }, {
    { "server", (build and build.version or "?") },
    { "wire version", info.wire_version },
    { "transactions", tx },
    { "replica set", info.replica_set or "-" },
    { "database", dbname },
    { "largest document", info.max_bson_size .. " bytes" },
  })
  out("")
  local rows = {}
  for i, c in ipairs(collections) do
    rows[i] = { c.name, c.exists and "yes" or "no", c.documents, c.bytes, c.storage_bytes }
  end
  print_table({ "COLLECTION", "EXISTS", "DOCUMENTS", "BYTES", "STORAGE" }, rows)
  out("")
  rows = {}
  for i, ix in ipairs(indexes) do rows[i] = { ix.name, concat(ix.keys, ","), ix.state, ix.used_by } end
  print_table({ "INDEX", "KEYS", "STATE", "USED BY" }, rows)
  if missing > 0 then
    out(format("%d index%s missing: `mongostore doctor --fix` (or any worker's connect) creates them", missing,
      missing == 1 and " is" or "es are"))
  end
end

command("doctor", {
  summary = "the server, transactions, the indexes mongostore needs and collection sizes",
  args = "[--fix] [--json]",
  json = true,
  options = { fix = {} },
  help = [[
  --fix   create the missing indexes (as every worker's connect does)
Exits 1 when an index mongostore needs is missing. It reads and never writes, unless --fix.]],
  run = function(o, words)
    if #words > 0 then usage("doctor takes no arguments") end
    local uri, dbname, wait = uri_of(o), db_of(o), wait_of(o)
    if o.fix then connect(o):close() end
    local db, err = ms.database(uri, { db = dbname, wait = wait })
    if not db then fail("cannot connect: " .. tostring(err)) end
    local info
    info, err = db:info()
    if not info then fail("doctor: hello: " .. tostring(err)) end
    local build = db:command({ buildInfo = 1 })
    local report_t = {
      server_version = build and build.version or ms.null, wire_version = info.wire_version,
      transactions = info.transactions, replica_set = info.replica_set or ms.null, db = dbname,
      max_bson_size = info.max_bson_size,
    }
    local exes_name, counters_name = collection_names(o)
    local existing = {}
    local colls = db:list_collections() or {}
    for _, c in ipairs(colls) do existing[c.name] = true end
    local collections = doctor_collections(db, { exes_name, counters_name }, existing)
    report_t.collections = list(collections)
    local indexes, missing = doctor_indexes(db, exes_name, existing)
    report_t.indexes = list(indexes)
    report_t.missing_indexes = missing
    db:close()
    if o.json then
      json_out(report_t)
    else
      print_doctor(info, build, dbname, collections, indexes, missing)
    end
    return missing > 0 and 1 or 0
  end,
})
