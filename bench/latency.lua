-- bench/latency.lua - latency as an execution's history and the number of
-- executions grow.
--
-- usage: lua5.4 bench/latency.lua <uri> [--part commit|scale|both] [--db DB]
--          [--points 1,1000,10000,100000] [--budget SECONDS] [--dedupe-window W]
--          [--scales 10000,100000,1000000] [--reps R] [--python PY]
--          [--op-budget SECONDS] [--skip SECONDS]
--
-- Part "commit": one execution, committed with store:commit directly, each
-- commit carrying a fresh processed_event_id (so the dedupe mark is part of
-- every commit, as it is for a delivered event). At each point p (the p-th
-- event) it reports the median of the 200 commits around it (events p-100 ..
-- p+99, or 1..200 for the first). A point the run cannot reach within
-- --budget seconds is reported as not reached, with the event the run
-- stopped at and the median of its last 200 commits. The store keeps its
-- default dedupe window unless --dedupe-window W is given; then the series
-- runs in its own database and its keys read commit.w<W>.* instead of
-- commit.*, so both series can be collected from one bench run.
--
-- Part "scale": with 10k, 100k and 1M executions in the db (clones of
-- documents mongostore itself wrote, inserted in bulk by bench/populate.py),
-- the latency of due_timers (10 timers due, about half of all executions
-- holding a timer far in the future), pending_outbox and pending_spawns (10
-- pending entries each), and list_executions (a first page of 50, and a
-- first page of 50 FAILED executions, 1% of them). Each is the median of up
-- to R calls (fewer once --op-budget seconds are spent on it), with the rows
-- the call returned
-- and, when store:stats() counts them, the commands it sent and the bytes
-- the server shipped back (else n/a). A call that the previous scale
-- predicts (its median times the growth in executions) to take more than
-- --skip seconds is skipped at the larger scale and reported as skipped.
--
-- Output: a human summary on stderr, "RESULT lat.<key> <value>" lines on
-- stdout.
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local root = here .. "/.."
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path
package.cpath = root .. "/?.so;" .. package.cpath

local ms = require "mongostore"
local util = dofile(here .. "/util.lua")

local format = string.format
local now = ms.now

local function result(key, value)
  io.stdout:write(format("RESULT lat.%s %s\n", key, tostring(value)))
  io.stdout:flush()
end

local function say(...)
  io.stderr:write(format(...), "\n")
  io.stderr:flush()
end

local function list_of_numbers(s)
  local t = {}
  for v in s:gmatch("[^,]+") do t[#t + 1] = assert(math.tointeger(tonumber(v)), "not an integer: " .. v) end
  return t
end

------------------------------------------------------------------------
-- Part 1: commit latency at an execution's n-th event.

local function commit_part(uri, db, points, budget, window)
  local series = window and format("commit.w%d", window) or "commit"
  if window then db = format("%s_w%d", db, window) end
  local store = assert(ms.connect(uri, { db = db, wait = 60, dedupe_window = window }))
  window = store:info().dedupe_window
  local exe = ms.execution {
    id = "lat-commit-1", definition_id = "flat", status = "RUNNING", active_path = "Waiting",
    context = { n = 0, note = string.rep("x", 200) },
  }
  assert(store:save(exe))

  local windows, last = {}, 0
  for k, p in ipairs(points) do
    local lo = math.max(1, p - 100)
    windows[k] = { point = p, lo = lo, hi = lo + 199, samples = {} }
    last = math.max(last, lo + 199)
  end
  local ring, rn = {}, 0
  local t_start = now()
  local reached = 0
  for i = 1, last do
    exe.context.n = i
    exe.processed_events = i
    local t0 = now()
    local ok, err = store:commit(exe, { processed_event_id = format("evt-%09d", i) })
    local dt = now() - t0
    if not ok then error(format("commit %d: %s", i, tostring(err))) end
    reached = i
    rn = rn % 200 + 1
    ring[rn] = dt
    for _, w in ipairs(windows) do
      if i >= w.lo and i <= w.hi then w.samples[#w.samples + 1] = dt end
    end
    if i % 100 == 0 and now() - t_start > budget then break end
  end
  local elapsed = now() - t_start
  say("commit latency of one execution (store:commit with processed_event_id, dedupe_window %d; median of 200"
    .. " commits around each point):", window)
  result(series .. ".dedupe_window", window)
  local first
  for _, w in ipairs(windows) do
    local key = format("%s.p%d", series, w.point)
    if #w.samples == 200 then
      local m = util.median(w.samples) * 1e6
      first = first or m
      say("  event %7d: %8.0f us", w.point, m)
      result(key .. ".median_us", format("%.0f", m))
    else
      say("  event %7d: not reached (stopped at event %d after %.0f s, the --budget)", w.point, reached, elapsed)
      result(key .. ".median_us", "not_reached")
    end
  end
  local tail = util.median(ring) * 1e6
  say("  last 200 commits before event %d: median %.0f us; %d commits in %.1f s", reached, tail, reached, elapsed)
  result(series .. ".reached", reached)
  result(series .. ".elapsed_s", format("%.1f", elapsed))
  result(series .. ".tail_median_us", format("%.0f", tail))

  -- Side by side: the same young-versus-old comparison without the drift of
  -- a shared machine between the first point and the last (minutes apart).
  -- In 40 alternating rounds, 10 commits of a fresh execution (its events
  -- 1-10, the first an insert) and the old execution's next 10.
  local young, old, i = {}, {}, reached
  for r = 1, 40 do
    local y = ms.execution {
      id = format("lat-young-%d", r), definition_id = "flat", status = "RUNNING", active_path = "Waiting",
      context = { n = 0, note = string.rep("x", 200) },
    }
    for j = 1, 10 do
      y.context.n = j
      y.processed_events = j
      local t0 = now()
      local ok, err = store:commit(y, { processed_event_id = format("young-%d-%d", r, j) })
      young[#young + 1] = now() - t0
      if not ok then error(format("young commit %d/%d: %s", r, j, tostring(err))) end
    end
    for _ = 1, 10 do
      i = i + 1
      exe.context.n = i
      exe.processed_events = i
      local t0 = now()
      local ok, err = store:commit(exe, { processed_event_id = format("evt-%09d", i) })
      old[#old + 1] = now() - t0
      if not ok then error(format("commit %d: %s", i, tostring(err))) end
    end
  end
  local ym, om = util.median(young) * 1e6, util.median(old) * 1e6
  say("  side by side, 40 alternating rounds: events 1-10 of fresh executions %.0f us, events %d-%d of this one"
    .. " %.0f us (%.2fx)", ym, reached + 1, i, om, om / ym)
  result(series .. ".sbs.young_us", format("%.0f", ym))
  result(series .. ".sbs.old_us", format("%.0f", om))
  result(series .. ".sbs.old_from", reached + 1)
  result(series .. ".sbs.old_to", i)
  store:close()
end

------------------------------------------------------------------------
-- Part 2: sweeps, relays and listing with many executions in the db.

local FAR = 4102444800.0 -- 2100-01-01: armed, never due

-- Writes, through the store, what the clones are copied from: one RUNNING
-- execution with a timer far in the future, one DONE, one FAILED. Ids are
-- 13 characters long, as populate.py needs.
local function write_templates(store)
  local t = now()
  local function one(id, fields, opts)
    fields.id, fields.definition_id = id, "flat"
    fields.created_at, fields.updated_at = t, t
    fields.context = { order = "o-123456", amount = 42, customer = "c-0001" }
    local exe = ms.execution(fields)
    assert(store:commit(exe, { processed_event_id = "start:" .. id }))
    assert(store:commit(exe, opts))
  end
  one("tmplRUN000000", { status = "RUNNING", active_path = "Waiting" },
    { processed_event_id = "evt-1:tmplRUN000000", timers = { { action = "schedule", path = "Waiting", fire_at = FAR } } })
  one("tmplDONE00000", { status = "DONE", outcome = "success", active_path = "Done", finished_at = t },
    { processed_event_id = "evt-1:tmplDONE00000" })
  one("tmplFAIL00000", { status = "FAILED", error = "error: bench", active_path = "Waiting", finished_at = t },
    { processed_event_id = "evt-1:tmplFAIL00000" })
end

-- The fixed work that does not grow with the executions: 10 due timers, 10
-- pending outbox entries (to a target that does not exist) and 10 pending
-- spawns (nothing relays them here, so they all stay).
local function write_due(store)
  for i = 1, 10 do
    local exe = ms.execution { id = format("due-%02d", i), definition_id = "flat", status = "RUNNING",
                               active_path = "Waiting" }
    assert(store:commit(exe, { processed_event_id = "start:" .. exe.id,
                               timers = { { action = "schedule", path = "Waiting", fire_at = 1000.0 + i } } }))
    local src = ms.execution { id = format("obx-%02d", i), definition_id = "flat", status = "RUNNING",
                               active_path = "Waiting" }
    assert(store:commit(src, { processed_event_id = "start:" .. src.id,
                               emits = { { target_id = "nowhere", event = { kind = "Ping", data = { i = i } } } } }))
    local par = ms.execution { id = format("spn-%02d", i), definition_id = "flat", status = "RUNNING",
                               active_path = "Waiting" }
    assert(store:commit(par, { processed_event_id = "start:" .. par.id,
                               spawns = { { child_id = par.id .. ":Waiting:1", root_path = "Waiting", context = {} } } }))
  end
end

local function sh(cmd)
  local ok, how, code = os.execute(cmd)
  if not ok then error(format("command failed (%s %s): %s", tostring(how), tostring(code), cmd)) end
end

local OPS = {
  { "due_timers", function(s) return s:due_timers(now(), { limit = 1000 }) end },
  { "pending_outbox", function(s) return s:pending_outbox{ limit = 100 } end },
  { "pending_spawns", function(s) return s:pending_spawns{ limit = 100 } end },
  { "list_page", function(s) return s:list_executions { definition_id = "flat", limit = 50 } end },
  { "list_failed", function(s) return s:list_executions { definition_id = "flat", status = { "FAILED" }, limit = 50 } end },
}

local function rows_of(r)
  if type(r) ~= "table" then return nil end
  if type(r.items) == "table" then return #r.items end
  return #r
end

-- Calls each op up to reps times (stopping once op_budget seconds are
-- spent on it); an op whose previous scale's median, scaled by the growth
-- in executions, predicts more than skip_s seconds per call is skipped.
local function measure(store, reps, op_budget, skip_s, prev, growth)
  local out = {}
  for _, op in ipairs(OPS) do
    local name, fn = op[1], op[2]
    local p = prev and prev[name]
    if p and (p.skipped or p.ms / 1e3 * growth > skip_s) then
      out[name] = { skipped = true }
      goto continue
    end
    local samples, rows, cmds, bytes = {}, {}, {}, {}
    local spent = 0
    for _ = 1, reps do
      local before = util.stats(store)
      local t0 = now()
      local r, err = fn(store)
      local dt = now() - t0
      local after = util.stats(store)
      if r == nil then error(name .. ": " .. tostring(err)) end
      samples[#samples + 1], rows[#rows + 1] = dt, rows_of(r)
      local d = util.stats_diff(before, after)
      if d then
        cmds[#cmds + 1] = d.commands
        bytes[#bytes + 1] = util.reply_bytes(d)
      end
      spent = spent + dt
      if spent > op_budget then break end
    end
    out[name] = {
      ms = util.median(samples) * 1e3, n = #samples, rows = math.max(table.unpack(rows)),
      rows_min = math.min(table.unpack(rows)),
      commands = #cmds > 0 and util.median(cmds) or nil,
      bytes = #bytes > 0 and util.median(bytes) or nil,
    }
    ::continue::
  end
  return out
end

-- A clone must read back as the execution it stands for.
local function check_clone(store, n, status)
  local id = format("x%012d", n)
  local exe, err = store:load(id)
  if not exe or exe.id ~= id or exe.status ~= status then
    error(format("populate: clone %s reads back as %s (%s)", id, tostring(exe), tostring(err)))
  end
end

local function scale_part(uri, db, scales, reps, python, op_budget, skip_s)
  local tdb = db .. "_tpl"
  local tstore = assert(ms.connect(uri, { db = tdb, wait = 60 }))
  write_templates(tstore)
  local tcoll = tstore:info().executions
  tstore:close()
  local store = assert(ms.connect(uri, { db = db, wait = 60 }))
  local coll = store:info().executions
  write_due(store)
  local fixed = 30
  local pattern = {}
  for j = 0, 99 do
    pattern[#pattern + 1] = j == 0 and "tmplFAIL00000" or (j % 2 == 1 and "tmplRUN000000" or "tmplDONE00000")
  end
  local have = fixed
  local prev, prev_total
  say("sweeps, relays and listing (median of up to %d calls; rows = what the call returned):", reps)
  say("  %-10s %-15s %10s %6s %9s %12s %6s", "executions", "call", "ms", "rows", "commands", "bytes in", "calls")
  for _, total in ipairs(scales) do
    if total > have then
      local t0 = now()
      sh(format("%s %s %s %s %s %s %s %d %d %s", python, util.q(here .. "/populate.py"), util.q(uri), util.q(tdb),
        util.q(tcoll), util.q(db), util.q(coll), have - fixed + 1, total - fixed, table.concat(pattern, " ")))
      result(format("scale.%d.insert_s", total), format("%.1f", now() - t0))
      check_clone(store, have - fixed + 1, (have - fixed + 1) % 100 == 0 and "FAILED" or
        ((have - fixed + 1) % 2 == 1 and "RUNNING" or "DONE"))
      check_clone(store, total - fixed, (total - fixed) % 100 == 0 and "FAILED" or
        ((total - fixed) % 2 == 1 and "RUNNING" or "DONE"))
      have = total
    end
    local m = measure(store, reps, op_budget, skip_s, prev, prev_total and total / prev_total or 1)
    prev, prev_total = m, total
    for _, op in ipairs(OPS) do
      local name = op[1]
      local r = m[name]
      local key = format("scale.%d.%s", total, name)
      if r.skipped then
        say("  %-10d %-15s %10s   (skipped: the previous scale predicts more than %.0f s per call)", total, name,
          "skipped", skip_s)
        result(key .. ".ms", "skipped")
        goto continue
      end
      say("  %-10d %-15s %10.1f %6s %9s %12s %6d", total, name, r.ms,
        r.rows == r.rows_min and tostring(r.rows) or format("%d-%d", r.rows_min, r.rows),
        util.fmt(r.commands, "%.0f"), util.fmt(r.bytes, "%.0f"), r.n)
      result(key .. ".ms", format("%.1f", r.ms))
      result(key .. ".rows", r.rows)
      result(key .. ".rows_min", r.rows_min)
      result(key .. ".commands", util.fmt(r.commands, "%.0f"))
      result(key .. ".bytes", util.fmt(r.bytes, "%.0f"))
      result(key .. ".calls", r.n)
      ::continue::
    end
  end
  store:close()
end

------------------------------------------------------------------------

local uri = arg[1] or os.getenv("MONGOSTORE_URI")
if not uri or uri:sub(1, 2) == "--" then
  io.stderr:write("usage: lua5.4 bench/latency.lua <uri> [--part commit|scale|both] [--db DB] [--points ...]" ..
    " [--budget S] [--dedupe-window W] [--scales ...] [--reps R] [--python PY] [--op-budget S] [--skip S]\n")
  os.exit(2)
end
local opts = util.options(arg, 2, {
  part = "both", db = "mongostore_bench_latency", points = "1,1000,10000,100000", budget = "600",
  scales = "10000,100000,1000000", reps = "5", python = "python3", op_budget = "20", skip = "300",
})
if opts.part == "commit" or opts.part == "both" then
  local window
  if opts.dedupe_window then
    window = math.tointeger(tonumber(opts.dedupe_window))
    if not window or window < 1 then error("--dedupe-window: not an integer >= 1: " .. opts.dedupe_window) end
  end
  commit_part(uri, opts.db .. "_commit", list_of_numbers(opts.points), tonumber(opts.budget), window)
end
if opts.part == "scale" or opts.part == "both" then
  scale_part(uri, opts.db .. "_scale", list_of_numbers(opts.scales), tonumber(opts.reps), opts.python,
    tonumber(opts.op_budget), tonumber(opts.skip))
end
