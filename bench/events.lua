-- bench/events.lua - mongostore events/s on a flat chart: N executions x 2
-- events each (engine:start, whose Start reaches Waiting, then
-- engine:send of Go, which reaches the final state Done), trace off, run by W
-- worker processes at once, each its own share of the executions.
--
-- usage: lua5.4 bench/events.lua <uri> [--n N] [--workers W] [--db DB] [--label L]
--                                       [--emit 0|1] [--seq-block B]
--
-- --emit 1: both states' on_enter emit one event (to no execution: an
-- external event, left pending in the outbox, since no relay runs), so every
-- commit takes an outbox seq; with --seq-block B each worker connects with
-- seq_block = B (1: a counter round trip per emitting commit, the old way;
-- the default 1000: one per thousand seqs). Events/s is then commits/s with
-- emits, the figure of the counter change.
--
-- The workers are real OS processes (this script again, with --worker,
-- through io.popen). Each connects and builds its engine, says READY, and
-- waits for a go file; the wall time runs from the earliest worker start to
-- the latest worker end, so connecting is not counted. Events/s = 2N / wall.
-- When store:stats() exists, the commands each worker sent while it ran are
-- summed into round trips per delivered event; otherwise that reads n/a.
-- Each worker also reports its resident memory (VmRSS) at the end.
--
-- Output: a human summary on stderr, "RESULT <label>.<key> <value>" lines on
-- stdout (bench/run.sh collects them).
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local root = here .. "/.."
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path
package.cpath = root .. "/?.so;" .. package.cpath

local ms = require "mongostore"
local chart = require "mongostore.chart"
local engine_mod = require "mongostore.engine"
local util = dofile(here .. "/util.lua")

local format = string.format

local function note(_, _, act) act.emit(nil, "Note", {}) end

local function flat_chart(emit)
  return chart.define {
    id = "flat",
    initial = "Waiting",
    states = { { "Waiting", on_enter = emit and note or nil }, { "Done", final = "success", on_enter = emit and note or nil } },
    transitions = { { from = "Waiting", to = "Done", on = "Go" } },
  }
end

------------------------------------------------------------------------
-- A worker: its share of the executions, timed between the go file and the
-- last commit.

local function worker(uri, db, tag, count, gofile, emit, seq_block)
  local store = assert(ms.connect(uri, { db = db, wait = 60, seq_block = seq_block }))
  local engine = engine_mod.new { store = store, charts = { flat_chart(emit) }, trace = false }
  local ids = {}
  for i = 1, count do ids[i] = format("%s-%07d", tag, i) end
  io.stdout:write("READY\n")
  io.stdout:flush()
  while not util.exists(gofile) do ms.sleep(0.001) end

  local before = util.stats(store)
  local t0 = ms.now()
  for i = 1, count do
    local id = ids[i]
    local got, err = engine:start("flat", { id = id })
    if got ~= id then error(format("start %s: %s", id, tostring(err))) end
    local ok, serr = engine:send(id, { kind = "Go", data = {} })
    if not ok then error(format("send %s: %s", id, tostring(serr))) end
  end
  local t1 = ms.now()
  local after = util.stats(store)
  local rss = util.rss_kb()

  -- Not timed: every execution this worker drove must have finished.
  local done = 0
  for i = 1, count do
    local exe = store:load(ids[i])
    if exe and exe.status == "DONE" then done = done + 1 end
  end

  local d = util.stats_diff(before, after)
  io.stdout:write(format("W start %.6f\n", t0), format("W stop %.6f\n", t1), format("W events %d\n", 2 * count),
    format("W done %d\n", done), format("W rss_kb %d\n", rss))
  if d then
    io.stdout:write(format("W commands %d\n", d.commands))
    for name, n in pairs(d.per) do io.stdout:write(format("W cmd.%s %d\n", name, n)) end
  end
  io.stdout:flush()
  store:close()
end

------------------------------------------------------------------------
-- The coordinator.

local function coordinator(uri, opts)
  local n, w = opts.n, opts.workers
  local gofile = os.tmpname()
  os.remove(gofile)
  local lua = util.interpreter()
  local pipes = {}
  for k = 1, w do
    local share = n // w + (k <= n % w and 1 or 0)
    local cmd = format("%s %s --worker %s %s %s %d %s %d %s", lua, util.q(arg[0]), util.q(uri), util.q(opts.db),
      util.q(format("w%d", k)), share, util.q(gofile), opts.emit, opts.seq_block or "default")
    pipes[k] = assert(io.popen(cmd, "r"))
  end
  for k = 1, w do
    local line = pipes[k]:read("l")
    if line ~= "READY" then
      pipes[k]:close()
      error(format("worker %d did not get ready (said %s)", k, tostring(line)))
    end
  end
  local go = assert(io.open(gofile, "w"))
  go:close()

  local first, last, events, done, rss_max, rss_sum = math.huge, -math.huge, 0, 0, 0, 0
  local commands, have_stats, per = 0, true, {}
  for k = 1, w do
    local got = {}
    for line in pipes[k]:lines() do
      local key, val = line:match("^W (%S+) (%S+)$")
      if key then got[key] = val end
    end
    local ok, how, code = pipes[k]:close()
    if not ok or not got.stop then error(format("worker %d failed (%s %s)", k, tostring(how), tostring(code))) end
    first = math.min(first, tonumber(got.start))
    last = math.max(last, tonumber(got.stop))
    events = events + tonumber(got.events)
    done = done + tonumber(got.done)
    local rss = tonumber(got.rss_kb)
    rss_max, rss_sum = math.max(rss_max, rss), rss_sum + rss
    if got.commands then
      commands = commands + tonumber(got.commands)
      for key, val in pairs(got) do
        local name = key:match("^cmd%.(.+)$")
        if name then per[name] = (per[name] or 0) + tonumber(val) end
      end
    else
      have_stats = false
    end
  end
  os.remove(gofile)

  local wall = last - first
  local eps = events / wall
  local label = opts.label
  local rt = have_stats and commands / events or nil
  io.stderr:write(format("mongostore events: %d executions x 2 events, %d worker process(es): %.0f events/s " ..
    "(%.2f s wall), %d/%d DONE, round trips/event %s, worker RSS max %d KiB\n",
    n, w, eps, wall, done, n, rt and format("%.2f", rt) or "n/a", rss_max))
  if have_stats then
    local names = {}
    for name in pairs(per) do names[#names + 1] = name end
    table.sort(names)
    for _, name in ipairs(names) do
      io.stderr:write(format("  %-16s %8d  (%.2f per event)\n", name, per[name], per[name] / events))
    end
  end
  local out = {
    { "executions", n }, { "workers", w }, { "events", events }, { "wall_s", format("%.3f", wall) },
    { "eps", format("%.0f", eps) }, { "done", done }, { "rss_kb_max", rss_max },
    { "rss_kb_mean", format("%.0f", rss_sum / w) },
    { "emit", opts.emit }, { "seq_block", opts.seq_block or "default" },
    { "commands", have_stats and commands or "n/a" },
    { "rt_per_event", rt and format("%.3f", rt) or "n/a" },
  }
  for name, c in pairs(per) do out[#out + 1] = { "cmd." .. name, c } end
  for _, kv in ipairs(out) do io.stdout:write(format("RESULT %s.%s %s\n", label, kv[1], tostring(kv[2]))) end
  if done ~= n then
    io.stderr:write(format("mongostore events: only %d of %d executions reached DONE\n", done, n))
    os.exit(1)
  end
end

if arg[1] == "--worker" then
  worker(arg[2], arg[3], arg[4], tonumber(arg[5]), arg[6], arg[7] == "1", math.tointeger(tonumber(arg[8])))
else
  local uri = arg[1] or os.getenv("MONGOSTORE_URI")
  if not uri or uri:sub(1, 2) == "--" then
    io.stderr:write("usage: lua5.4 bench/events.lua <uri> [--n N] [--workers W] [--db DB] [--label L]\n")
    os.exit(2)
  end
  local opts = util.options(arg, 2, { n = 2000, workers = 1, db = "mongostore_bench_events", label = "ms", emit = "0" })
  opts.n, opts.workers, opts.emit = tonumber(opts.n), tonumber(opts.workers), tonumber(opts.emit)
  opts.seq_block = opts.seq_block and math.tointeger(tonumber(opts.seq_block))
  coordinator(uri, opts)
end
