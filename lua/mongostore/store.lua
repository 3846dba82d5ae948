-- mongostore.store - the Lua half of the Store: connect, and the methods
-- that turn Executions and Events into their stored JSON form around the C
-- core's operations (csrc/: commit.c, load.c, list.c, relay.c, ...); CALLS, the
-- one list of the Store's public methods, which mongostore.ngx forwards from.
local core = require "mongostore.core"
local execution = require "mongostore.execution"
local contract = require "mongostore.contract"
local cursor = require "mongostore.cursor"

local type, error, ipairs, pairs, tostring = type, error, ipairs, pairs, tostring
local math_type, sort, format, concat = execution.math_type, table.sort, string.format, table.concat
local set_version = execution.set_version
local digests_of, set_digests = execution.digests, execution.set_digests

local M = {}

local Store = core.Store
local define, fail, failed_item = contract.define, contract.fail, contract.failed_item

-- (mongostore.execution and mongostore.chart register the kinds of their values)
local function is_store(v)
  local smt = type(v) == "userdata" and getmetatable(v)
  return (smt and smt.__index == Store) == true
end
contract.kind("mongostore.Store", is_store, "a store from mongostore.connect")

-- Every Store method a caller may use, and how mongostore.ngx treats it:
--   "plain"      forwarded to a worker thread: plain values in and out (an
--                Execution in a result comes back as its fields)
--   "execution"  forwarded; the first argument is an Execution, which crosses
--                as its fields (execution.fields / execution.from_fields)
--   "executions" forwarded; lists of Executions cross as their fields:
--                load_many's answer (each execution), commit_many's items
--                (each { fields, opts }; an item committed answers its new
--                version too)
--   "local"      not forwarded: close would end the store a thread's VM keeps
-- A method missing here fails spec/01-unit/store_calls_spec.lua; names that
-- start with "_" are the C core's, for this file only.
M.CALLS = {
  commit = "execution", save = "execution",
  load = "plain", load_for_event = "plain", is_processed = "plain", list_executions = "plain",
  pending_outbox = "plain", pending_spawns = "plain", ack_outbox = "plain", ack_spawn = "plain",
  release_outbox = "plain", release_spawn = "plain", due_timers = "plain", delete_timer = "plain",
  delete_timers = "plain",
  append_trace = "plain", read_trace = "plain", info = "plain", stats = "plain",
  ack_outbox_many = "plain", fail_outbox = "plain", failed_outbox = "plain", redeliver_failed = "plain",
  renew_outbox = "plain", retry_outbox = "plain",
  load_many = "executions", commit_many = "executions",
  close = "local",
}

-- An option table's keys, checked against the names a function takes: a
-- misspelt option is a programming mistake, and raises.
local function check_keys(t, known, fn, what)
  for k in pairs(t) do
    if not known[k] then error(format("%s: unknown %s %s", fn, what, tostring(k)), 3) end
  end
end
M.check_keys = check_keys

-- The core (csrc/connect.c) checks the same ranges again, before a client
-- is made: its own callers (mongostore.ngx's threads) come in there.
local CONNECT = define("mongostore.connect", {
  { "uri", "string" },
  { "opts", "table?", fields = { db = "string", prefix = "string", trace_max = { "integer", min = 0 },
                                 wait = { "number", min = 0, max = 86400 },
                                 dedupe_window = { "integer", min = 1, max = 1000000 },
                                 seq_block = { "integer", min = 1, max = 1000000 } } },
})

-- connect(uri, { db = "harel", prefix = nil, trace_max = 200, wait = 30, dedupe_window = 1000,
--                seq_block = 1000 })
-- seq_block: the outbox and spawn seqs one counter round trip reserves for
-- this store (1 reserves them per emitting commit, as harel does).
function M.connect(uri, opts)
  local bad = CONNECT:check(uri, opts)
  if bad then return fail("invalid", bad) end
  return core.connect(uri, opts)
end

local function invalid(msg)
  return nil, msg, "invalid"
end

-- Emits become { target_id, event = "<Event JSON>" } for the core.
local function prepare_emits(emits, doing)
  if emits == nil then return nil end
  if type(emits) ~= "table" then return nil, doing .. ": emits must be a list of tables" end
  local out = {}
  for i, em in ipairs(emits) do
    if type(em) ~= "table" then return nil, format("%s: emits[%d] must be a table", doing, i) end
    local ev, err = execution.event_to_json(em.event, format("emits[%d].event", i))
    if not ev then return nil, doing .. ": " .. err end
    out[i] = { target_id = em.target_id, event = ev }
  end
  local n = 0
  for _ in pairs(emits) do n = n + 1 end
  if n ~= #out then return nil, doing .. ": emits must be a list (keys 1..n)" end
  return out
end

local COMMIT = define("store:commit", {
  { "exe", "mongostore.Execution" },
  { "opts", "table?", fields = {
      emits = "table", processed_event_id = "string", processed_event_ids = "table", timers = "table",
      spawns = "table", trace = "table", fence = "integer", advance = { "integer", min = 1, max = 256 },
      next_fire_at = "number" } },
})
local SAVE = define("store:save", { { "exe", "mongostore.Execution" } })
local COMMIT_MANY = define("store:commit_many", { { "items", "table" } })

-- A failed commit's fourth value from the core (the version found, or a
-- driver's detail) as the detail table.
local function commit_detail(found)
  if type(found) == "number" then return { found = found } end
  if type(found) == "table" then return found end
  return nil
end

-- The arguments of one commit for the core (shared by commit and
-- commit_many): (id, definition_id, version, data, ops), or nil, msg.
local function commit_args(self, exe, opts)
  local doing = "commit " .. exe.id
  local emits, err = prepare_emits(opts.emits, doing)
  if err then return nil, err end
  local old = exe.version
  local adv = opts.advance or 1
  local data
  data, err = execution.to_json(exe, old + adv)
  if not data then return nil, doing .. ": " .. err end
  local dd = digests_of(exe)
  if dd == nil and old > 0 and (opts.processed_event_id ~= nil or opts.processed_event_ids ~= nil) then
    -- digests unknown (fields of another version, or built by hand): fetch
    -- them (the version check makes sure they are the ones at `old`)
    local got, _, fetched = self:_load(exe.id)
    if got ~= nil then dd = fetched end
  end
  return exe.id, exe.definition_id, old, data, {
    status = exe.status, parent_id = exe.parent_id, emits = emits, processed_event_id = opts.processed_event_id,
    processed_event_ids = opts.processed_event_ids, dedupe = dd, advance = adv, timers = opts.timers,
    spawns = opts.spawns, trace = opts.trace, fence = opts.fence, next_fire_at = opts.next_fire_at,
  }
end

-- store:commit(exe, { emits, processed_event_id, timers, spawns, trace, fence })
-- -> true | nil, msg, code[, found]. On success exe.version is one higher;
-- on any failure it stays where it was and nothing is written.
-- A group commit (the inbox's: several events of one execution applied in
-- order in memory) gives processed_event_ids = { id, ... } (at most 256,
-- distinct) instead of processed_event_id, and trace = { step, ... }, one
-- step per event: every id is marked in the one update, or none is, and a
-- "duplicate" answer means one of them was marked already. advance = n
-- moves the version on by n (a group of n events: as n commits would, so
-- the ids its events' emits and spawns derive from the version stay unique).
-- fence: the commit is made under an inbox claim with this fence
-- (mongostore.inbox); it lands only while no commit under a higher fence
-- has, else nil, msg, "stale", and the execution keeps the highest.
-- next_fire_at: the earliest timer armed once the commit is applied
-- (math.huge: none), from a caller that read every armed timer at this
-- version (the sweep, through load_many's timers): the mark is set to it,
-- where a commit otherwise only lowers it for the timers it schedules.
local function commit(self, exe, opts)
  local id, def, old, data, ops = commit_args(self, exe, opts or {})
  if not id then return invalid(def) end
  local ok, msg, code, found = self:_commit(id, def, old, data, ops)
  if ok then
    set_version(exe, old + ops.advance)
    if msg ~= nil then set_digests(exe, msg) end
    return true
  end
  return fail(code, msg, commit_detail(found))
end

function Store:commit(exe, opts)
  local bad = COMMIT:check(exe, opts)
  if bad then return invalid(bad) end
  return commit(self, exe, opts)
end

-- store:commit_many({ { exe, opts }, ... }) -> { [i] = { ok = true } | { index = i, message = msg, code = code,
-- detail = { found = n } | nil } }
-- Each item is a commit as store:commit takes it, of an execution loaded
-- before (version >= 1); they travel in one bulk write, the seqs of all
-- their emits and spawns reserved in one round trip per counter. Each is
-- atomic on its own and guarded as commit guards it; a committed one's
-- version is one higher, a failed one's is unchanged. A version-0 item
-- (a new execution) is committed alone, as store:commit does.
function Store:commit_many(items)
  COMMIT_MANY:check(items)
  local results, batch, where = {}, {}, {}
  for i, item in ipairs(items) do
    if type(item) ~= "table" then error(format("store:commit_many: items[%d] must be a table", i), 2) end
    local exe, opts = item[1], item[2]
    local bad = COMMIT:check_in(format("store:commit_many: items[%d]", i), exe, opts)
    opts = opts or {}
    if bad then
      results[i] = failed_item(i, bad, "invalid")
    elseif exe.version == 0 then
      local ok, err, code, detail = commit(self, exe, opts)
      results[i] = ok and { ok = true } or failed_item(i, err, code, detail)
    else
      local id, def, old, data, ops = commit_args(self, exe, opts)
      if not id then
        results[i] = failed_item(i, def, "invalid")
      else
        batch[#batch + 1] = { id = id, definition_id = def, version = old, data = data, opts = ops,
                              advance = ops.advance }
        where[#batch] = i
      end
    end
  end
  if #batch > 0 then
    local got, err, code = self:_commit_many(batch)
    if not got then
      for k = 1, #batch do results[where[k]] = failed_item(where[k], err, code) end
    else
      for k, r in ipairs(got) do
        local i = where[k]
        if r.ok then
          local exe = items[i][1]
          set_version(exe, batch[k].version + batch[k].advance)
          if r.digests ~= nil then set_digests(exe, r.digests) end
          results[i] = { ok = true }
        else
          results[i] = failed_item(i, r.err, r.code, commit_detail(r.found))
        end
      end
    end
  end
  return results
end

-- store:load_many({ id, ... }[, { timers = true }]) -> { [id] = Execution }[, armed] | nil, msg, code
-- One find for every id; an id with no execution has no entry. With
-- timers, the second result is each execution's armed timers now,
-- armed[id] = { [path] = fire_at } (the sweep's check, as load's timer_path).
local LOAD_MANY = define("store:load_many", {
  { "ids", "table" },
  { "opts", "table?", fields = { timers = "boolean" } },
})
function Store:load_many(ids, opts)
  LOAD_MANY:check(ids, opts)
  for i, id in ipairs(ids) do
    if type(id) ~= "string" then
      error(format("store:load_many: ids[%d] must be a string, got %s", i, type(id)), 2)
    end
  end
  local with_timers = opts ~= nil and opts.timers == true
  local rows, err, code = self:_load_many(ids, with_timers)
  if not rows then return nil, err, code end
  local out, armed = {}, with_timers and {} or nil
  for id, row in pairs(rows) do
    if row.data ~= nil then
      local exe, xerr = execution.from_json(row.data, row.digests)
      if not exe then return nil, "load_many " .. id .. ": stored data is not readable: " .. xerr, "server" end
      out[id] = exe
      if armed then armed[id] = row.timers end
    end
  end
  return out, armed
end

-- store:save(exe): a commit with nothing else.
function Store:save(exe)
  SAVE:check(exe)
  return commit(self, exe, nil)
end

local LOAD = define("store:load", { { "id", "string" }, { "timer_path", "string?" } })
local LOAD_FOR_EVENT = define("store:load_for_event", {
  { "id", "string" }, { "event_id", "string" }, { "timer_path", "string?" },
})

-- store:load(id[, timer_path]) -> Execution[, armed] | nil (absent) | nil, msg, code
-- One find by _id. Given a timer path, the second result is the fire_at
-- armed for it now (nil when none).
function Store:load(id, timer_path)
  LOAD:check(id, timer_path)
  local data, armed, dd = self:_load(id, timer_path)
  if data == nil then
    if type(armed) == "string" then return nil, armed, dd end -- nil, msg, code
    return nil
  end
  local exe, err = execution.from_json(data, dd)
  if not exe then return nil, "load " .. id .. ": stored data is not readable: " .. err, "server" end
  return exe, armed
end

-- store:load_for_event(id, event_id[, timer_path]) -> Execution|nil, processed[, armed]
-- One round trip: the execution, whether event_id is already processed, and,
-- given a timer path, the fire_at armed for it now (nil when none).
function Store:load_for_event(id, event_id, timer_path)
  LOAD_FOR_EVENT:check(id, event_id, timer_path)
  local data, hit, armed, dd = self:_load_for_event(id, event_id, timer_path)
  if data == nil then
    if type(hit) == "string" then return nil, hit, armed end
    return nil, false
  end
  local exe, err = execution.from_json(data, dd)
  if not exe then return nil, "load_for_event " .. id .. ": stored data is not readable: " .. err, "server" end
  return exe, hit, armed
end

-- Keyset cursors: the last _id a page scanned, signed (mongostore.cursor) with
-- the database's cursor secret (csrc/list.c) and bound to the filters of the
-- query it belongs to. A cursor is honoured only by the query it was issued
-- for; anything else, forged, altered or another query's, is refused as invalid.
local STATUS_OK = {}
for _, s in ipairs(execution.STATUSES) do STATUS_OK[s] = true end

local function cursor_binding(q, status_list)
  local statuses = {}
  for i, st in ipairs(status_list or {}) do statuses[i] = st end
  sort(statuses)
  local def = q.definition_id
  return format("list\0%s\0%s\0%s\0", def and (#def .. ":" .. def) or "-",
                status_list and concat(statuses, ",") or "-", q.roots_only and "roots" or "all")
end

local function encode_cursor(key, binding, id)
  return cursor.encode(key, binding, { id = id })
end

local function decode_cursor(key, binding, c)
  local t = cursor.decode(key, binding, c)
  if not t or type(t.id) ~= "string" then return nil end
  return t.id
end

-- The fields a commit of ours copies out of what it stores, so the server
-- can filter on them, and who else keeps them:
--   status, parent_id  from data (the listing's filters);
--   next_fire_at       from timers (the sweep's index: never later than the
--                      earliest armed timer);
--   dedupe             digests of the handled event ids; harel's store keeps
--                      `processed` only, which our commit's filter also checks
--                      (nothing to bring up to date);
--   inbox_fence        our inbox claims only; harel's store never claims;
--   definition_id      set once at the insert, by either store.
-- harel 0.9.0's MongoStore.commit $sets data, version and timers.<path> and
-- none of these, so on a document it committed last status, parent_id and
-- next_fire_at may be stale. Such a document has an int32 version (pymongo's
-- encoding of a Python int; ours are int64), found by the partial index
-- harel_written, which holds those documents only: the pass examines the
-- documents harel committed since (at most PROMOTE_BATCH a round trip, then one
-- unordered bulk to update them) and nothing else, and each is then filed
-- under its true status and earliest timer by the indexes, until harel commits
-- to it again.
local PROMOTE_BATCH = 500

function Store:_promote_foreign()
  while true do
    local rows, err, code = self:_foreign(PROMOTE_BATCH)
    if not rows then return nil, err, code end
    if #rows == 0 then return 0 end
    local fixes = {}
    for i, r in ipairs(rows) do
      -- unreadable data gets a null status: the listing reports it
      local sm = r.data and execution.summary_from_json(r.data, r.version)
      fixes[i] = {
        id = r.id, version = r.version, next_fire_at = r.next_fire_at,
        status = sm and STATUS_OK[sm.status] and sm.status or nil,
        parent_id = sm and type(sm.parent_id) == "string" and sm.parent_id or nil,
      }
    end
    local n, perr, pcode = self:_promote(fixes)
    if not n then return nil, perr, pcode end
    -- a batch harel committed to again meanwhile is not taken up twice here
    if #rows < PROMOTE_BATCH or n == 0 then return n end
  end
end

local LIST = define("store:list_executions", {
  { "q", "table?", fields = { status = "string|table", definition_id = "string", roots_only = "boolean",
                              limit = { "integer", min = 1, max = 10000 }, cursor = "string" } },
})

-- store:list_executions{ status, definition_id, roots_only, limit, cursor }
-- -> { items = { summary, ... }, next_cursor = string|nil }
function Store:list_executions(q)
  local bad = LIST:check(q)
  if bad then return invalid(bad) end
  q = q or {}
  local statuses
  local status_list
  if q.status ~= nil then
    statuses = {}
    status_list = type(q.status) == "table" and q.status or { q.status }
    local n = 0
    for _ in pairs(status_list) do n = n + 1 end
    if n ~= #status_list then
      return invalid("store:list_executions: q.status must be a list (keys 1..n) of strings")
    end
    for i, st in ipairs(status_list) do
      if type(st) ~= "string" then
        error(format("store:list_executions: q.status[%d] must be a string, got %s", i, type(st)), 2)
      end
      if not STATUS_OK[st] then
        return invalid(format("store:list_executions: q.status %q is not one of %s", st,
                              concat(execution.STATUSES, ", ")))
      end
      statuses[st] = true
    end
    if #status_list == 0 then return invalid("store:list_executions: q.status is an empty list") end
  end
  if q.definition_id ~= nil then
    local why = core.text_error(q.definition_id)
    if why then return invalid("store:list_executions: q.definition_id " .. why) end
  end
  local limit = q.limit == nil and 100 or q.limit
  local binding = cursor_binding(q, status_list)
  local after
  if q.cursor ~= nil then
    local key, kerr, kcode = self:_cursor_key(false)
    if kerr then return nil, kerr, kcode end
    after = key and decode_cursor(key, binding, q.cursor)
    if not after then return invalid("list_executions: cursor is not one this store issued for this query") end
  end
  local function full_page(items, id)
    local key, kerr, kcode = self:_cursor_key(true)
    if not key then return nil, kerr, kcode end
    return { items = items, next_cursor = encode_cursor(key, binding, id) }
  end
  -- the status filter runs on the promoted status: bring up to date that of
  -- what harel's store committed (see _promote_foreign). parent_id never
  -- changes after the insert, and one harel's insert left out is null,
  -- which the roots_only filter takes and the check below decides.
  if statuses then
    local ok, perr, pcode = self:_promote_foreign()
    if not ok then return nil, "store:list_executions: " .. tostring(perr), pcode end
  end
  -- the filters run on the server: a batch of `limit` is the page, unless
  -- documents without the promoted fields (harel's) had to be dropped here
  local items, batch = {}, limit
  while true do
    local rows, err, code = self:_scan(q.definition_id, after, batch, statuses and status_list, q.roots_only)
    if not rows then return nil, err, code end
    for _, row in ipairs(rows) do
      after = row.id
      if row.data then
        local s, serr = execution.summary_from_json(row.data, row.version)
        if not s then
          return nil, "store:list_executions: " .. row.id .. ": stored data is not readable: " .. serr, "server"
        end
        if (not statuses or statuses[s.status]) and (not q.roots_only or s.parent_id == nil) then
          items[#items + 1] = s
          if #items == limit then return full_page(items, after) end
        end
      end
    end
    if #rows < batch then return { items = items } end
  end
end

-- A claim's options: a limit claims (a lease needs one); without, every
-- pending entry is listed for inspection.
local LIMIT = { "integer", min = 1 }
local LEASE = { "number", gt = 0, max = 86400, needs = "limit" }
local PENDING_OUTBOX = define("store:pending_outbox", {
  { "opts", "table?", fields = { limit = LIMIT, lease = LEASE,
                                 targeted = { "boolean", needs = "limit", excludes = "external" },
                                 external = { "boolean", needs = "limit" } } },
})
local PENDING_SPAWNS = define("store:pending_spawns", {
  { "opts", "table?", fields = { limit = LIMIT, lease = LEASE } },
})

-- store:pending_outbox() -> { { seq, target_id, event }, ... } oldest first:
-- every pending entry, claimed by nobody (for inspection and tools).
-- store:pending_outbox{ limit = n[, lease = 30] } claims up to limit entries
-- for this caller: each comes with a token, no other relay gets it until the
-- lease runs out, and ack_outbox(seq, token) removes it only while the claim
-- is still this caller's. With targeted, only entries addressed to an
-- execution are claimed: external entries (no target_id) stay pending for a
-- relay that has an on_external handler, and rows.external_left counts the
-- ones this claim saw and left. With external, the opposite: only external
-- entries, and of them only those whose retry_at (retry_outbox, after a
-- failed try) has come (engine:claim_external). The C core adds
-- renew_outbox(source_id, token, lease) and retry_outbox(source_id, token,
-- seq, retry_at, tries[, release]) for such held claims.
function Store:pending_outbox(opts)
  local bad = PENDING_OUTBOX:check(opts)
  if bad then return invalid(bad) end
  local rows, err, code
  if opts ~= nil and opts.limit ~= nil then
    rows, err, code = self:_claim_outbox(opts.limit, opts.lease or 30, core.uuid(), opts.targeted == true,
                                         opts.external == true)
  else
    rows, err, code = self:_pending_outbox()
  end
  if not rows then return nil, err, code end
  for _, r in ipairs(rows) do
    local ev, eerr = execution.event_from_json(r.event)
    if not ev then return nil, format("store:pending_outbox: entry %s: %s", tostring(r.seq), eerr), "server" end
    r.event = ev
    if r.target_id == core.null then r.target_id = nil end
  end
  sort(rows, function(a, b) return a.seq < b.seq end)
  return rows
end

-- Given-up outbox entries (a dead letter with no on_dead_letter) are kept on
-- their source document, in outbox_failed, for an operator to see and put
-- back: store:fail_outbox(entry, { error =, attempts = }) moves a claimed
-- entry there (only while the claim is still the caller's);
-- store:failed_outbox{ limit = 1000 } lists them, each with source_id, seq,
-- target_id, event, error, failed_at and attempts;
-- store:redeliver_failed(source_id, seq) moves one back into the outbox
-- (true, moved).
local FAIL_OUTBOX = define("store:fail_outbox", {
  { "entry", "table" },
  { "opts", "table?", fields = { error = "string", attempts = { "integer", min = 0 } } },
})
local FAILED_OUTBOX = define("store:failed_outbox", { { "opts", "table?", fields = { limit = LIMIT } } })
local REDELIVER_FAILED = define("store:redeliver_failed", { { "source_id", "string" }, { "seq", "integer" } })

function Store:fail_outbox(entry, opts)
  local bad = FAIL_OUTBOX:check(entry, opts)
  if bad then return invalid(bad) end
  if math_type(entry.seq) ~= "integer" then error("store:fail_outbox: entry.seq must be an integer", 2) end
  if type(entry.token) ~= "string" then error("store:fail_outbox: entry.token must be the claim's token", 2) end
  if type(entry.event) ~= "table" then error("store:fail_outbox: entry.event must be the entry's event", 2) end
  local text, terr = execution.event_to_json(entry.event, "event")
  if not text then return invalid("store:fail_outbox: " .. tostring(terr)) end
  opts = opts or {}
  return self:_fail_outbox(entry.seq, entry.token, text, entry.target_id, opts.error or "given up",
    core.now(), opts.attempts or 0)
end

function Store:failed_outbox(opts)
  local bad = FAILED_OUTBOX:check(opts)
  if bad then return invalid(bad) end
  local rows, err, code = self:_failed_outbox(opts and opts.limit or 1000)
  if not rows then return nil, err, code end
  for _, r in ipairs(rows) do
    local ev, eerr = execution.event_from_json(r.event)
    if not ev then return nil, format("store:failed_outbox: entry %s: %s", tostring(r.seq), eerr), "server" end
    r.event = ev
    if r.target_id == core.null then r.target_id = nil end
  end
  sort(rows, function(a, b) return a.failed_at < b.failed_at end)
  return rows
end

function Store:redeliver_failed(source_id, seq)
  local bad = REDELIVER_FAILED:check(source_id, seq)
  if bad then return invalid(bad) end
  for _, r in ipairs(assert(self:_failed_outbox(1000000))) do
    if r.source_id == source_id and r.seq == seq then
      return self:_redeliver_failed(source_id, seq, r.target_id ~= core.null and r.target_id or nil, r.event)
    end
  end
  return true, false
end

-- store:pending_spawns([{ limit =, lease = }]) -> { { seq, parent_id, child_id, root_path, context }, ... }
-- claimed like pending_outbox when a limit is given.
function Store:pending_spawns(opts)
  local bad = PENDING_SPAWNS:check(opts)
  if bad then return invalid(bad) end
  local rows, err, code
  if opts ~= nil and opts.limit ~= nil then
    rows, err, code = self:_claim_spawns(opts.limit, opts.lease or 30, core.uuid())
  else
    rows, err, code = self:_pending_spawns()
  end
  if not rows then return nil, err, code end
  sort(rows, function(a, b) return a.seq < b.seq end)
  return rows
end

-- store:due_timers(now[, { limit = n }]) -> { { execution_id, path, fire_at }, ... } by fire_at, documents read
-- limit bounds the documents read (each may hold several due timers, or
-- none: a document whose mark was left low by a fired or cancelled timer is
-- read, its mark raised, and nothing of it listed).
local DUE_TIMERS = define("store:due_timers", {
  { "now", "number" },
  { "opts", "table?", fields = { limit = LIMIT } },
})
function Store:due_timers(now, opts)
  local bad = DUE_TIMERS:check(now, opts)
  if bad then return invalid(bad) end
  -- a timer harel's store armed is under a next_fire_at only once promoted
  local ok, perr, pcode = self:_promote_foreign()
  if not ok then return nil, "store:due_timers: " .. tostring(perr), pcode end
  local rows, read, code = self:_due_timers(now, opts and opts.limit)
  if not rows then return nil, read, code end
  sort(rows, function(a, b)
    if a.fire_at ~= b.fire_at then return a.fire_at < b.fire_at end
    if a.execution_id ~= b.execution_id then return a.execution_id < b.execution_id end
    return a.path < b.path
  end)
  return rows, read
end

-- The calls the core implements alone take their signatures here first: a
-- wrong type raises naming the argument, as every Store call does, before
-- the core sees it (the core keeps its own checks of the values).
local function checked(name, args)
  local sig = define("store:" .. name, args)
  local impl = Store[name]
  Store[name] = function(self, ...)
    local bad = sig:check(...)
    if bad then return invalid(bad) end
    return impl(self, ...)
  end
end
checked("is_processed", { { "id", "string" }, { "event_id", "string" } })
checked("ack_outbox", { { "seq", "integer" }, { "token", "string?" } })
checked("ack_spawn", { { "seq", "integer" }, { "token", "string?" } })
checked("ack_outbox_many", { { "acks", "table" } })
checked("release_outbox", { { "source_id", "string" }, { "token", "string" } })
checked("release_spawn", { { "source_id", "string" }, { "token", "string" } })
checked("renew_outbox", { { "source_id", "string" }, { "token", "string" }, { "lease", "number" } })
checked("retry_outbox", { { "source_id", "string" }, { "token", "string" }, { "seq", "integer" },
                          { "retry_at", "number" }, { "tries", "integer" }, { "release", "boolean?" } })
checked("delete_timer", { { "execution_id", "string" }, { "path", "string" }, { "fire_at", "number" } })
checked("delete_timers", { { "timers", "table" } })
checked("append_trace", { { "execution_id", "string" }, { "entry", "table" } })
checked("read_trace", { { "execution_id", "string" } })

M.Store = Store
return M
