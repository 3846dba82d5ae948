-- bench/report.lua - turns the RESULT lines of one bench/run.sh run into
-- tables: prints the summary (with its ratios) and writes the whole report
-- as Markdown.
--
-- usage: lua5.4 bench/report.lua <results.txt> <RESULTS.md> <mode> <command> <server> <date> [parts]
--
-- parts: "all" (the default: issue 5's execution rows, issue 14's batching
-- rows, then issue 11's document rows, issue 12's model rows and issue 13's
-- record rows), or a comma list of the sets bench/run.sh was asked for:
-- documents (--documents), models (--models), records (--records),
-- batching (--batching).
--
-- Every figure comes from the results file of the same run; a figure that
-- is missing reads n/a. A target of issue 5 is marked "yes" only when the
-- measured figure meets it; when it could not be measured it says so.
local results_path, md_path, mode, command, server, date, report_parts = table.unpack(arg, 1, 7)
-- a comma list of row sets, or all
local PART = { documents = true, models = true, records = true, batching = true, openresty = true }
local function parts_ok(p)
  if p == "all" then return true end
  for name in p:gmatch("[^,]+") do if not PART[name] then return false end end
  return p:match("^[%a,]+$") ~= nil
end
if not date or (report_parts and not parts_ok(report_parts)) then
  io.stderr:write("usage: lua5.4 bench/report.lua <results.txt> <RESULTS.md> <mode> <command> <server> <date> [parts]\n")
  os.exit(2)
end
local which = report_parts or "all"
local show_docs = which == "all" or which:find("documents", 1, true) ~= nil
local show_models = which == "all" or which:find("models", 1, true) ~= nil
local show_records = which == "all" or which:find("records", 1, true) ~= nil
local show_batching = which == "all" or which:find("batching", 1, true) ~= nil
local show_openresty = which == "all" or which:find("openresty", 1, true) ~= nil

local format, concat = string.format, table.concat

local R = {}
for line in io.lines(results_path) do
  local key, val = line:match("^RESULT (%S+) (.*)$")
  if key then R[key] = val end
end

local function num(key)
  return tonumber(R[key])
end

local function sh(cmd)
  local p = io.popen(cmd .. " 2>/dev/null")
  if not p then return "" end
  local s = p:read("a") or ""
  p:close()
  return (s:gsub("%s+$", ""))
end

local function f0(v) return v and format("%.0f", v) or "n/a" end
local function f1(v) return v and format("%.1f", v) or "n/a" end
local function f2(v) return v and format("%.2f", v) or "n/a" end
local function f3(v) return v and format("%.3f", v) or "n/a" end
local function ratio(a, b) return (a and b and b > 0) and a / b or nil end
local function x(v) return v and format("%.2fx", v) or "n/a" end
local function with_commas(n)
  local s = tostring(math.floor(n))
  repeat
    local k
    s, k = s:gsub("^(%d+)(%d%d%d)", "%1,%2")
  until k == 0
  return s
end

local out = {}
local function w(...) out[#out + 1] = format(...) end

local function table_md(head, rows)
  w("| %s |", concat(head, " | "))
  local sep = {}
  for i = 1, #head do sep[i] = "---" end
  w("| %s |", concat(sep, " | "))
  for _, r in ipairs(rows) do
    local cells = {}
    for i = 1, #head do cells[i] = tostring(r[i] == nil and "n/a" or r[i]) end
    w("| %s |", concat(cells, " | "))
  end
  w("")
end

------------------------------------------------------------------------
-- The figures the summary compares.

local ms1, ms4, h1, h4 = num("ms1.eps"), num("ms4.eps"), num("h1.eps"), num("h4.eps")
-- The raw limit on one document (the issue's definition), and the events
-- benchmark's own workload done by libmongoc alone (what the summary
-- compares against).
local limit, raw_docs = num("raw.limit_eps"), num("raw.flow.executions")
-- measured right before and right after mongostore's 1-worker run: the mean
local flow_before, flow_after = num("raw.flow.eps"), num("raw.after.flow.eps")
local limit_n = flow_before and flow_after and (flow_before + flow_after) / 2 or flow_before
local rt1, rt4 = num("ms1.rt_per_event"), num("ms4.rt_per_event")
local points = {}
for key, val in pairs(R) do
  local p = key:match("^lat%.commit%.p(%d+)%.median_us$")
  if p then points[#points + 1] = { p = tonumber(p), v = tonumber(val), raw = val } end
end
table.sort(points, function(a, b) return a.p < b.p end)
local lat = {}
for _, pt in ipairs(points) do lat[pt.p] = pt end
local first = lat[1] and lat[1].v
local far = lat[100000]
local scales = {}
do
  local seen = {}
  for key in pairs(R) do
    local n = key:match("^lat%.scale%.(%d+)%.")
    if n and not seen[n] then seen[n] = true scales[#scales + 1] = tonumber(n) end
  end
  table.sort(scales)
end

local function verdict(ok, unmeasured)
  if unmeasured then return unmeasured end
  return ok and "yes" or "no"
end

local r_h1, r_h4, r_lim, r_lim_n = ratio(ms1, h1), ratio(ms4, h4), ratio(ms1, limit), ratio(ms1, limit_n)
local function pct(v) return v and format("%.0f%%", v * 100) or "n/a" end
local lat_ratio = far and far.v and first and far.v / first or nil
local lat_cell, lat_verdict
-- the furthest point this run measured, for the cell when 100,000 is missing
local last_pt
for _, pt in ipairs(points) do if pt.v and pt.p > 1 then last_pt = pt end end
local so_far = last_pt and first and format("; at event %s: %s us = %s", with_commas(last_pt.p), f0(last_pt.v),
  x(last_pt.v / first)) or ""
if not far then
  lat_cell = format("%s us / not measured%s", f0(first), so_far)
  lat_verdict = "not measured (this run's last point is event " ..
    (points[#points] and with_commas(points[#points].p) or "?") .. ")"
elseif not far.v then
  lat_cell = format("%s us / not reached (stopped at event %s after %s s; last 200 commits: median %s us)%s", f0(first),
    R["lat.commit.reached"] or "?", R["lat.commit.elapsed_s"] or "?", R["lat.commit.tail_median_us"] or "?", so_far)
  lat_verdict = "not measured (not reached within the budget)"
else
  lat_cell = format("%s us / %s us = %s", f0(first), f0(far.v), x(lat_ratio))
  lat_verdict = verdict(lat_ratio <= 1.2)
end
-- The side-by-side figure, when the long execution got past 100,000 events:
-- both ends measured in the same minute, so the machine's drift cancels.
local sbs_y, sbs_o, sbs_from = num("lat.commit.sbs.young_us"), num("lat.commit.sbs.old_us"),
  num("lat.commit.sbs.old_from")
local sbs_ratio = ratio(sbs_o, sbs_y)
if sbs_ratio and sbs_from and sbs_from > 100000 then
  lat_cell = format("side by side: %s us (events 1-10 of fresh executions) / %s us (events %s-%s of one execution) = %s;"
    .. " sequential medians %s", f0(sbs_y), f0(sbs_o), with_commas(sbs_from),
    with_commas(num("lat.commit.sbs.old_to") or 0), x(sbs_ratio), lat_cell)
  lat_verdict = verdict(sbs_ratio <= 1.2)
end

local rt_all
do
  local c, e = num("ms1.commands"), num("ms1.events")
  local c4, e4 = num("ms4.commands"), num("ms4.events")
  if c and e and c4 and e4 then rt_all = (c + c4) / (e + e4) end
end

-- Bytes shipped by the sweep/relay/listing calls: smallest vs largest scale.
local function growth(op)
  local lo, hi = scales[1], scales[#scales]
  if not lo or lo == hi then return nil end
  local a, b = num(format("lat.scale.%d.%s.bytes", lo, op)), num(format("lat.scale.%d.%s.bytes", hi, op))
  if not (a and b) then return nil end
  return a, b
end
local ship_rows, ship_ok, ship_measured = {}, true, true
for _, op in ipairs { "due_timers", "pending_outbox", "pending_spawns", "list_page", "list_failed" } do
  local a, b = growth(op)
  if a then
    ship_rows[#ship_rows + 1] = format("%s %s->%s", op, f0(a), f0(b))
    if b > a * 1.2 + 1024 then ship_ok = false end
  else
    ship_measured = false
  end
end

------------------------------------------------------------------------
-- Issue 11's document rows (keys docs.<contender>.r<round>.<op>_ms): the
-- medians over the rounds, and each ratio as the median of the ratios of
-- the rounds in which both contenders ran, since the two ran minutes apart
-- at most there and the machine's drift falls on both.

local DOC_OPS = {
  { key = "insert_many", what = "insert_many of %s documents", size = 1, unit = "docs/s" },
  { key = "find", what = "find and decode of %s documents", size = 1, unit = "docs/s" },
  { key = "update_one", what = "%s single-document update_one", size = 2, unit = "updates/s" },
  { key = "bulk_write", what = "bulk_write of %s update_one", size = 3, unit = "updates/s" },
}
local DOC_WHO = {
  { key = "lua", name = "mongostore" },
  { key = "c", name = "libmongoc alone" },
  { key = "py", name = "pymongo" },
  { key = "node", name = "Node.js mongodb" },
}

local function median(list)
  local t = {}
  for i, v in ipairs(list) do t[i] = v end
  table.sort(t)
  local n = #t
  if n == 0 then return nil end
  if n % 2 == 1 then return t[(n + 1) // 2] end
  return (t[n // 2] + t[n // 2 + 1]) / 2
end

local models_section
local function documents_section()
  -- rounds[who][op][round] = wall ms; op "<op>_cpu": the client's CPU ms
  local rounds = {}
  for key, val in pairs(R) do
    local who, r, op = key:match("^docs%.(%w+)%.r(%d+)%.([%w_]+)_ms$")
    if who and tonumber(val) then
      rounds[who] = rounds[who] or {}
      rounds[who][op] = rounds[who][op] or {}
      rounds[who][op][tonumber(r)] = tonumber(val)
    end
  end
  local sizes = {}
  for v in (R["meta.doc_sizes"] or ""):gmatch("%d+") do sizes[#sizes + 1] = tonumber(v) end
  local function values(who, op)
    local list = {}
    for _, v in pairs(rounds[who] and rounds[who][op] or {}) do list[#list + 1] = v end
    return list
  end
  local function med(who, op) return median(values(who, op)) end
  -- median over the rounds of a's time / b's time
  local function paired(a, b, op)
    local ra, rb = rounds[a] and rounds[a][op], rounds[b] and rounds[b][op]
    if not (ra and rb) then return nil end
    local list = {}
    for r, v in pairs(ra) do
      if rb[r] and rb[r] > 0 then list[#list + 1] = v / rb[r] end
    end
    return median(list)
  end
  local function cell(who, op)
    local m = med(who, op.key)
    if not m then return "not measured" end
    local count = sizes[op.size]
    return count and format("%s ms (%s %s)", f1(m), with_commas(count / (m / 1e3)), op.unit) or format("%s ms", f1(m))
  end
  local function what(op)
    return format(op.what, sizes[op.size] and with_commas(sizes[op.size]) or "?")
  end

  w("## Documents")
  w("")
  w("Issue 11's document rows: the same four operations on the same server, in the same run, by mongostore's document")
  w("API (`bench/documents.lua`: `mongostore.database(uri, { db = }):collection(name)`, `insert_many`, `find(...):each()`,")
  w("`update_one`, `bulk_write`), by libmongoc alone in C (`bench/documents_limit.c`, the limit), by pymongo and by the")
  w("Node.js `mongodb` driver. %s rounds; in each, every contender runs once, as its own process, in an order that turns",
    R["meta.doc_rounds"] or "?")
  w("each round; a process connects, runs an untimed warm-up of every operation at a tenth of the sizes, then the timed")
  w("operations on a fresh collection. Figures are medians over the rounds; a ratio is the median of that ratio in")
  w("each round.")
  w("")
  local versions = {}
  for _, who in ipairs(DOC_WHO) do
    local v = R["docs." .. who.key .. ".version"]
    versions[#versions + 1] = format("%s: %s", who.name, v or "not measured")
  end
  w("- contenders: %s", concat(versions, "; "))
  w("- the document: 12 fields, `_id` and `bytes` int64, `views` int32, `score` a double, `published` a bool,")
  w("  `created` a date, `title`/`author`/`body`/`status` strings, `tags` an array of 3 strings,")
  w("  `meta` a document of 3 fields (about 500 bytes of BSON); documents are built in each language before the clock")
  w("  starts, so encoding is in the timed call (libmongoc: building the `bson_t` is its encoding, inside the clock)")
  w("- decoding: every field of every document visited, nested ones too (Lua `pairs`, Python `dict.items`, JavaScript")
  w("  `for...in`, C `bson_iter` reading each value)")
  w("- updates: `{$set: {score, status}, $inc: {views: 1}}` by `_id`, spread over the collection; inserts and the")
  w("  bulk_write unordered")
  local fields, fields_same = {}, true
  for _, who in ipairs(DOC_WHO) do
    local v = R["docs." .. who.key .. ".fields"]
    if v then
      fields[#fields + 1] = format("%s %s", who.name, with_commas(tonumber(v)))
      if v ~= R["docs.c.fields"] then fields_same = false end
    end
  end
  w("- fields visited by one find: %s%s", #fields > 0 and concat(fields, ", ") or "n/a",
    fields_same and "" or " (NOT the same: the contenders did not decode the same documents)")
  local failed = {}
  for key, val in pairs(R) do
    if key:match("^meta%.failed%.") and val:match("^documents ") then failed[#failed + 1] = val end
  end
  table.sort(failed)
  if #failed > 0 then w("- **failed in this run** (not in the medians): %s", concat(failed, "; ")) end
  local shape = R["docs.lua.shape"]
  if shape and shape ~= "same" then w("- mongostore's document this run: %s", shape) end
  w("")

  local head = { "operation" }
  for _, who in ipairs(DOC_WHO) do head[#head + 1] = who.name end
  local rows = {}
  for _, op in ipairs(DOC_OPS) do
    local row = { what(op) }
    for _, who in ipairs(DOC_WHO) do row[#row + 1] = cell(who.key, op) end
    rows[#rows + 1] = row
  end
  table_md(head, rows)

  local function met(v, ok) return v and (ok(v) and "yes" or "no") or "not measured" end
  local rows2 = {}
  for _, op in ipairs(DOC_OPS) do
    local lim, py, node = paired("lua", "c", op.key), paired("py", "lua", op.key), paired("node", "lua", op.key)
    rows2[#rows2 + 1] = {
      what(op),
      lim and format("%s (%+.0f%%)", x(lim), (lim - 1) * 100) or "n/a", met(lim, function(v) return v <= 1.10 end),
      x(py), met(py, function(v) return v >= 2 end),
      x(node), met(node, function(v) return v > 1 end),
    }
  end
  table_md({ "operation", "mongostore time / libmongoc time", "within 10%", "pymongo time / mongostore time", ">= 2x",
    "Node time / mongostore time", "ahead" }, rows2)
  w("\"met\" columns say yes only when this run's ratio meets issue 11's target: mongostore within 10%% of libmongoc")
  w("alone, at least 2x pymongo, ahead of the Node.js driver.")
  w("")

  -- The same spans in the client's own CPU time: on a shared machine the
  -- wall times carry the server's and the neighbours' noise, and the server's
  -- work is the same for every contender; this is the part that differs.
  w("The client's own CPU time over the same spans (the process's user + system time: `clock_gettime`")
  w("CPU time in C, `os.clock` in Lua, `time.process_time` in Python, `process.cpuUsage` in Node), median over the")
  w("rounds. The server's work is the same for every contender, so this is the part that differs between them, and")
  w("it carries far less of the shared machine's noise than the wall times:")
  w("")
  local rows_cpu = {}
  for _, op in ipairs(DOC_OPS) do
    local row = { what(op) }
    for _, who in ipairs(DOC_WHO) do
      local m = med(who.key, op.key .. "_cpu")
      row[#row + 1] = m and format("%s ms", f1(m)) or "not measured"
    end
    local lim, py, node = paired("lua", "c", op.key .. "_cpu"), paired("py", "lua", op.key .. "_cpu"),
      paired("node", "lua", op.key .. "_cpu")
    row[#row + 1] = lim and format("%s: %s", x(lim), met(lim, function(v) return v <= 1.10 end)) or "n/a"
    row[#row + 1] = py and format("%s: %s", x(py), met(py, function(v) return v >= 2 end)) or "n/a"
    row[#row + 1] = node and format("%s: %s", x(node), met(node, function(v) return v > 1 end)) or "n/a"
    rows_cpu[#rows_cpu + 1] = row
  end
  local head_cpu = { "operation" }
  for _, who in ipairs(DOC_WHO) do head_cpu[#head_cpu + 1] = who.name .. " CPU" end
  head_cpu[#head_cpu + 1] = "mongostore / libmongoc: within 10%"
  head_cpu[#head_cpu + 1] = "pymongo / mongostore: >= 2x"
  head_cpu[#head_cpu + 1] = "Node / mongostore: ahead"
  table_md(head_cpu, rows_cpu)

  local rows3 = {}
  for _, op in ipairs(DOC_OPS) do
    for _, who in ipairs(DOC_WHO) do
      local list, rs = {}, {}
      for r in pairs(rounds[who.key] and rounds[who.key][op.key] or {}) do rs[#rs + 1] = r end
      table.sort(rs)
      local cpu = rounds[who.key] and rounds[who.key][op.key .. "_cpu"] or {}
      for _, r in ipairs(rs) do
        list[#list + 1] = cpu[r] and format("%s (cpu %s)", f1(rounds[who.key][op.key][r]), f1(cpu[r]))
          or f1(rounds[who.key][op.key][r])
      end
      if #list > 0 then rows3[#rows3 + 1] = { op.key, who.name, concat(list, ", ") } end
    end
  end
  -- How far apart one contender's rounds were: the noise the medians face.
  local function spread(suffix)
    local worst
    for _, who in ipairs(DOC_WHO) do
      for _, op in ipairs(DOC_OPS) do
        local list = values(who.key, op.key .. suffix)
        if #list > 1 then
          table.sort(list)
          local r = list[1] > 0 and list[#list] / list[1] or nil
          if r and (not worst or r > worst.r) then worst = { r = r, who = who.name, op = op.key } end
        end
      end
    end
    return worst
  end
  local sw, sc = spread(""), spread("_cpu")
  if sw then
    w("In this run the slowest round of one contender's operation took up to %s its fastest in wall time (%s, %s)%s.",
      x(sw.r), sw.who, sw.op, sc and format(" and up to %s in CPU time (%s, %s)", x(sc.r), sc.who, sc.op) or "")
    w("")
  end
  w("Every round's wall time in ms (and the client's CPU ms), round 1 first:")
  w("")
  table_md({ "operation", "contender", "ms per round" }, rows3)
end

------------------------------------------------------------------------
-- Issue 12's model rows (keys models.<contender>.r<round>.<op>_ms): mongostore
-- models, the bare document API doing the same writes, and Mongoose; medians
-- over the rounds and paired ratios, as the document rows.

local MODEL_OPS = {
  { key = "insert", what = "insert of %s documents", size = 1, unit = "docs/s" },
  { key = "load", what = "load of %s documents", size = 1, unit = "docs/s" },
  { key = "save", what = "%s change-tracked saves of one field", size = 2, unit = "saves/s" },
  { key = "bulk_save", what = "one bulk save of %s deltas", size = 3, unit = "docs/s" },
  { key = "update", what = "%s atomic updates", size = 4, unit = "updates/s" },
}
local MODEL_WHO = {
  { key = "model", name = "mongostore models" },
  { key = "bare", name = "mongostore document API" },
  { key = "mongoose", name = "Mongoose" },
}

models_section = function()
  local rounds = {}
  for key, val in pairs(R) do
    local who, r, op = key:match("^models%.(%w+)%.r(%d+)%.([%w_]+)_ms$")
    if who and tonumber(val) then
      rounds[who] = rounds[who] or {}
      rounds[who][op] = rounds[who][op] or {}
      rounds[who][op][tonumber(r)] = tonumber(val)
    end
  end
  local sizes = {}
  for v in (R["meta.model_sizes"] or ""):gmatch("%d+") do sizes[#sizes + 1] = tonumber(v) end
  local function values(who, op)
    local list = {}
    for _, v in pairs(rounds[who] and rounds[who][op] or {}) do list[#list + 1] = v end
    return list
  end
  local function med(who, op) return median(values(who, op)) end
  local function paired(a, b, op)
    local ra, rb = rounds[a] and rounds[a][op], rounds[b] and rounds[b][op]
    if not (ra and rb) then return nil end
    local list = {}
    for r, v in pairs(ra) do
      if rb[r] and rb[r] > 0 then list[#list + 1] = v / rb[r] end
    end
    return median(list)
  end
  local function what(op)
    return format(op.what, sizes[op.size] and with_commas(sizes[op.size]) or "?")
  end
  local function cell(who, op, suffix)
    local m = med(who, op.key .. suffix)
    if not m then return "not measured" end
    local count = sizes[op.size]
    if suffix == "" and count then
      return format("%s ms (%s %s)", f1(m), with_commas(count / (m / 1e3)), op.unit)
    end
    return format("%s ms", f1(m))
  end
  local function met(v, ok) return v and (ok(v) and "yes" or "no") or "not measured" end
  local function within(v) return v <= 1.25 end
  local function ahead(v) return v > 1 end

  w("## Models")
  w("")
  w("Issue 12's model rows: the same writes on the same server, in the same run, by mongostore models")
  w("(`bench/models.lua model`: `model.define`, `Model:insert_many`, `Model:find():all()`, `doc:save()`,")
  w("`Model:bulk_save`, `Model:update(id, ops.inc{ views = 1 })`), by mongostore's bare document API sending what the")
  w("model sends (`bench/models.lua bare`: `insert_many`, `find():all()`, `update_one` guarded by `_id` and `rev`,")
  w("one `bulk_write`, `find_one_and_update` returning the new document), and by Mongoose")
  w("(`bench/models_mongoose.js`: `insertMany`, `find`, `doc.save()`, `Model.bulkSave`, `findByIdAndUpdate`).")
  w("%s rounds; in each, every contender runs once, as its own process, in an order that turns each round, after an",
    R["meta.model_rounds"] or "?")
  w("untimed warm-up at a tenth of the sizes. Figures are medians over the rounds; a ratio is the median of that ratio")
  w("in each round.")
  w("")
  local versions = {}
  for _, who in ipairs(MODEL_WHO) do
    versions[#versions + 1] = format("%s: %s", who.name, R["models." .. who.key .. ".version"] or "not measured")
  end
  w("- contenders: %s", concat(versions, "; "))
  w("- the article: `title`, `author`, `body`, `status` strings, `views` an integer, `score` a double, `published` a")
  w("  bool, `tags` 3 strings, `created_at` and `updated_at` dates set by the model (Mongoose: `timestamps`), `rev` a")
  w("  revision (Mongoose: the version key named `rev` with `optimisticConcurrency`), an ObjectId `_id`; models")
  w("  validate every write (`validate_writes`), Mongoose casts and validates as it always does")
  w("- a save changes `views` (+1): the model and Mongoose diff the document and send `$set` of `views` and")
  w("  `updated_at` and `$inc` of `rev`, guarded by `_id` and `rev`; the bare API sends that update itself; the bulk")
  w("  save does the same to 1,000 other documents in one round trip; an atomic update increments `views` (and `rev`)")
  w("  and returns the document")
  local failed = {}
  for key, val in pairs(R) do
    if key:match("^meta%.failed%.") and val:match("^models ") then failed[#failed + 1] = val end
  end
  table.sort(failed)
  if #failed > 0 then w("- **failed in this run** (not in the medians): %s", concat(failed, "; ")) end
  w("")

  local head = { "row" }
  for _, who in ipairs(MODEL_WHO) do head[#head + 1] = who.name end
  local rows = {}
  for _, op in ipairs(MODEL_OPS) do
    local row = { what(op) }
    for _, who in ipairs(MODEL_WHO) do row[#row + 1] = cell(who.key, op, "") end
    rows[#rows + 1] = row
  end
  table_md(head, rows)

  local rows2 = {}
  for _, op in ipairs(MODEL_OPS) do
    local vb, mg = paired("model", "bare", op.key), paired("mongoose", "model", op.key)
    local vbc, mgc = paired("model", "bare", op.key .. "_cpu"), paired("mongoose", "model", op.key .. "_cpu")
    rows2[#rows2 + 1] = {
      what(op),
      vb and format("%s (%+.0f%%)", x(vb), (vb - 1) * 100) or "n/a", met(vb, within),
      x(mg), met(mg, ahead),
      vbc and format("%s (%+.0f%%)", x(vbc), (vbc - 1) * 100) or "n/a", met(vbc, within),
      x(mgc), met(mgc, ahead),
    }
  end
  table_md({ "row", "models / document API, wall", "within 25%", "Mongoose / models, wall", "ahead",
    "models / document API, CPU", "within 25%", "Mongoose / models, CPU", "ahead" }, rows2)
  w("\"within 25%%\" and \"ahead\" say yes only when this run's ratio meets issue 12's targets: models within 25%% of")
  w("the bare document API doing the same writes, and faster than Mongoose on every row. CPU is the client process's")
  w("own time over the same span (`os.clock` in Lua, `process.cpuUsage` in Node).")
  w("")

  local rows_cpu = {}
  for _, op in ipairs(MODEL_OPS) do
    local row = { what(op) }
    for _, who in ipairs(MODEL_WHO) do row[#row + 1] = cell(who.key, op, "_cpu") end
    rows_cpu[#rows_cpu + 1] = row
  end
  local head_cpu = { "row" }
  for _, who in ipairs(MODEL_WHO) do head_cpu[#head_cpu + 1] = who.name .. " CPU" end
  w("The client's CPU time over the same spans, median over the rounds:")
  w("")
  table_md(head_cpu, rows_cpu)

  local rows3 = {}
  for _, op in ipairs(MODEL_OPS) do
    for _, who in ipairs(MODEL_WHO) do
      local list, rs = {}, {}
      for r in pairs(rounds[who.key] and rounds[who.key][op.key] or {}) do rs[#rs + 1] = r end
      table.sort(rs)
      local cpu = rounds[who.key] and rounds[who.key][op.key .. "_cpu"] or {}
      for _, r in ipairs(rs) do
        list[#list + 1] = cpu[r] and format("%s (cpu %s)", f1(rounds[who.key][op.key][r]), f1(cpu[r]))
          or f1(rounds[who.key][op.key][r])
      end
      if #list > 0 then rows3[#rows3 + 1] = { op.key, who.name, concat(list, ", ") } end
    end
  end
  w("Every round's wall time in ms (and the client's CPU ms), round 1 first:")
  w("")
  table_md({ "row", "contender", "ms per round" }, rows3)
end

------------------------------------------------------------------------
-- Issue 14's batching rows (bench/run.sh's Batching section): keys
-- ping.*, b.<net>.<path>.<one|batch>.k<K>.* (bench/batch.lua),
-- bl.<net>.<batch|one>.k<K>.eps (bench/batch_limit.c), ms<W>/h<W> and
-- sec.ms<W>/sec.h<W> (the workers), c<B>.r<round>.* (commits with emits at
-- seq_block B). <net>: lo (loopback), px (through tools/delay-proxy), sec
-- (SecantusDB, loopback).

local function batching_section()
  local ks = {}
  local ks_list, ev, d = (R["meta.batch_sizes"] or "1,10,100,1000"):match("^(%S+)%s*(%S*)%s*(%S*)")
  for v in (ks_list or ""):gmatch("%d+") do ks[#ks + 1] = tonumber(v) end
  local events_n, delay = tonumber(ev), tonumber(d)
  local delay_s = delay and format("%g ms", delay) or "?"
  local function b(net, path, mode_, k, key) return num(format("b.%s.%s.%s.k%d.%s", net, path, mode_, k, key)) end
  local function bl(net, mode_, k) return num(format("bl.%s.%s.k%d.eps", net, mode_, k)) end
  local function met(v, ok) return v and (ok(v) and "yes" or "no") or "not measured" end
  local function within10(v) return v >= 0.9 end
  local function pct_of(a, c) local r = ratio(a, c) return r and format("%s / %s = %s", f0(a), f0(c), pct(r)) or "n/a" end

  -- the counter change: the mean of the rounds of each setting
  local function rounds_of(sb, key)
    local sum, n = 0, 0
    for r = 1, 9 do
      local v = num(format("c%d.r%d.%s", sb, r, key))
      if v then sum, n = sum + v, n + 1 end
    end
    return n > 0 and sum / n or nil, n
  end
  local c1, c1n = rounds_of(1, "eps")
  local c1000 = rounds_of(1000, "eps")
  local function fam(sb)
    local f, e = rounds_of(sb, "cmd.findAndModify"), rounds_of(sb, "events")
    return ratio(f or 0, e)
  end

  w("## Batching")
  w("")
  w("Issue 14's rows. One worker delivers events to K executions of a two-state chart (trace off), at K = %s, one",
    concat((function() local t = {} for i, k in ipairs(ks) do t[i] = with_commas(k) end return t end)(), ", "))
  w("event at a time against batched delivery (`bench/batch.lua`): for producers, K `engine:send` calls against one")
  w("`engine:send_many` of K events, round after round; for the relay, a source execution emits one event to each of")
  w("the K executions and the relay passes that deliver them are timed, with `batch_delivery = false` against the")
  w("default `true` (a pass claims its entries, loads every target with one find `$in`, commits with one unordered")
  w("bulk write, acks with one update per source). About %s events per figure (at least 3 rounds); each figure in a",
    events_n and with_commas(events_n) or "?")
  w("database of its own that holds the K executions and no more. `bench/batch_limit.c` is libmongoc alone doing the")
  w("same batched round trips on K execution-shaped documents: one find with `$in` of the K `_id`s, then one unordered")
  w("bulk write of K CAS updates filtered on `{_id, version}` (`$set` of a ~300-byte data string, `$inc` of version),")
  w("and beside it the same with what a mongostore commit adds for exactly-once delivery (\"+ mark\": the dedupe guard")
  w("`processed: {$ne: event id}` in the filter, the id pushed onto `processed` with `$slice`, a digests field, the")
  w("promoted status) and the one-event loop (a find then a CAS `update_one` per document); its collection carries the")
  w("secondary indexes a store creates. Round trips are the commands")
  w("`store:stats()` counted; client CPU is the worker's own `os.clock` time per event. \"Through the proxy\" is")
  w("`tools/delay-proxy --delay-ms %s`, which holds every chunk %s each way (a same-datacenter network).", delay or "?",
    delay_s)
  w("")
  local failed = {}
  for key, val in pairs(R) do
    if key:match("^meta%.failed%.") and (val:find("batch", 1, true) or val:find("16 worker", 1, true)
      or val:find("seq_block", 1, true) or val:find("SecantusDB", 1, true) or val:find("proxy", 1, true)
      or val:find("worker%(s%)")) then
      failed[#failed + 1] = val
    end
  end
  table.sort(failed)
  if #failed > 0 then
    w("**Failed in this run** (their figures read n/a): %s.", concat(failed, "; "))
    w("")
  end

  -- the summary of the targets
  local K = 100
  local rows = {}
  for _, net in ipairs { { "lo", "loopback" }, { "px", "through the proxy" } } do
    for _, path in ipairs { { "send", "send_many" }, { "relay", "relay pass" } } do
      local v, c = b(net[1], path[1], "batch", K, "eps"), bl(net[1], "batch", K)
      rows[#rows + 1] = { format("K = %d, %s: mongostore batched (%s) / libmongoc alone batched", K, net[2], path[2]),
        pct_of(v, c), "within 10% (>= 90%)", met(ratio(v, c), within10) }
    end
  end
  for _, path in ipairs { { "send", "send_many / send" }, { "relay", "relay batched / one at a time" } } do
    local v, o = b("px", path[1], "batch", K, "eps"), b("px", path[1], "one", K, "eps")
    local r = ratio(v, o)
    rows[#rows + 1] = { format("K = %d, through the proxy: %s", K, path[2]),
      r and format("%s / %s = %s", f0(v), f0(o), x(r)) or "n/a", ">= 3x", met(r, function(q) return q >= 3 end) }
  end
  for _, path in ipairs { { "send", "send_many" }, { "relay", "relay pass" } } do
    local lo, px = b("lo", path[1], "batch", K, "rt_per_event"), b("px", path[1], "batch", K, "rt_per_event")
    local worst = (lo or px) and math.max(lo or 0, px or 0) or nil
    rows[#rows + 1] = { format("round trips per delivered event, K = %d, batched %s (loopback, proxy)", K, path[2]),
      format("%s, %s", lo and format("%.3f", lo) or "n/a", px and format("%.3f", px) or "n/a"), "<= 0.1",
      met(worst, function(q) return q <= 0.1 end) }
  end
  for _, wk in ipairs { 1, 4, 16 } do
    local m, h = num("ms" .. wk .. ".eps"), num("h" .. wk .. ".eps")
    local r = ratio(m, h)
    rows[#rows + 1] = { format("events/s, %d worker process%s: mongostore / harel 0.9.0", wk, wk > 1 and "es" or ""),
      r and format("%s / %s = %s", f0(m), f0(h), x(r)) or "n/a", ">= 10x", met(r, function(q) return q >= 10 end) }
  end
  local cr = ratio(c1000, c1)
  rows[#rows + 1] = { "commits/s with emits, 16 worker processes: seq_block 1000 / seq_block 1 (counter round trips per commit)",
    cr and format("%s / %s = %s (%s, %s)", f0(c1000), f0(c1), x(cr), f3(fam(1000)), f3(fam(1))) or "n/a",
    "faster, no counter round trip per commit", met(cr, function(q) return q > 1 end) }
  table_md({ "measure", "measured", "issue 14 target", "met" }, rows)
  w("\"met\" is yes only when this run's figure meets the target. On loopback both bundled servers spend most of an")
  w("update inside the server (mongo-java-server scans the collection for a `{_id, version}` filter), so batching")
  w("removes little there; through the proxy it removes the network's share.")
  w("")

  -- the proxy's own cost
  local pd, p0, pp = num("ping.direct_us"), num("ping.proxy0_us"), num("ping.proxy_us")
  w("### The proxy")
  w("")
  w("A `ping` round trip, median of 20 blocks of 100 in which the three connections take turns (`bench/batch_limit ping`):")
  w("")
  table_md({ "connection", "ping us", "added to the direct round trip" }, {
    { "direct (loopback)", f1(pd), "" },
    { "through tools/delay-proxy, delay 0 (the proxy's own cost)", f1(p0), p0 and pd and format("%+.1f us", p0 - pd) or "n/a" },
    { format("through tools/delay-proxy, %s each way", delay_s), f1(pp),
      pp and pd and format("%+.1f us (nominal %s us)", pp - pd, delay and f0(2000 * delay) or "?") or "n/a" },
  })
  w("The proxy has one thread per direction of a connection: it reads a chunk with the time the kernel received it,")
  w("sleeps to that time plus the delay (an absolute `clock_nanosleep`, timer slack 1 ns) and writes it on. What it")
  w("adds beyond the nominal delay is its wake-up on a loaded machine; it falls on mongostore and on libmongoc alike.")
  w("")

  -- per network: the K table
  local function k_table(net, title)
    -- the Ks this server was measured at (the quick pass on SecantusDB has fewer)
    local here_ks = {}
    for _, k in ipairs(ks) do
      if b(net, "send", "batch", k, "eps") or bl(net, "batch", k) then here_ks[#here_ks + 1] = k end
    end
    w("### %s", title)
    w("")
    if #here_ks == 0 then
      w("not measured in this run.")
      w("")
      return
    end
    local rows2 = {}
    for _, k in ipairs(here_ks) do
      local so, sb = b(net, "send", "one", k, "eps"), b(net, "send", "batch", k, "eps")
      local ro, rb = b(net, "relay", "one", k, "eps"), b(net, "relay", "batch", k, "eps")
      local lo, lb, lm = bl(net, "one", k), bl(net, "batch", k), bl(net, "marked", k)
      rows2[#rows2 + 1] = { with_commas(k), f0(so), f0(sb), x(ratio(sb, so)), f0(ro), f0(rb), x(ratio(rb, ro)),
        f0(lo), f0(lb), f0(lm), pct(ratio(sb, lb)), pct(ratio(rb, lb)), pct(ratio(sb, lm)) }
    end
    table_md({ "K", "send ev/s", "send_many ev/s", "gain", "relay one ev/s", "relay batched ev/s", "gain",
      "libmongoc one ev/s", "libmongoc batched ev/s", "libmongoc batched + mark ev/s", "send_many / libmongoc",
      "relay batched / libmongoc", "send_many / libmongoc + mark" }, rows2)
    local rows3 = {}
    for _, k in ipairs(here_ks) do
      local function rt(path, m) local v = b(net, path, m, k, "rt_per_event") return v and format("%.3f", v) or "n/a" end
      local function cpu(path, m) return f1(b(net, path, m, k, "cpu_us")) end
      rows3[#rows3 + 1] = { with_commas(k), rt("send", "one"), rt("send", "batch"), rt("relay", "one"), rt("relay", "batch"),
        f3(num(format("bl.%s.batch.k%d.rt_per_event", net, k))), cpu("send", "one"), cpu("send", "batch"), cpu("relay", "one"), cpu("relay", "batch"),
        f1(num(format("bl.%s.one.k%d.cpu_us", net, k))), f1(num(format("bl.%s.batch.k%d.cpu_us", net, k))) }
    end
    table_md({ "K", "send rt/ev", "send_many rt/ev", "relay one rt/ev", "relay batched rt/ev", "libmongoc batched rt/ev",
      "send cpu us/ev", "send_many cpu us/ev", "relay one cpu us/ev", "relay batched cpu us/ev", "libmongoc one cpu us/ev",
      "libmongoc batched cpu us/ev" }, rows3)
  end
  k_table("lo", "Loopback")
  k_table("px", format("Through the proxy (%s each way)", delay_s))
  w("On mongo-java-server an update filtered on `{_id, version}` scans the collection, so a bulk write of K CAS updates")
  w("costs K x K document visits: the batched figures fall from K = 100 to K = 1,000 for libmongoc alone too. The")
  w("client CPU per event is what the worker itself spends (interpreter, codec, driver); the rest of its wall time per")
  w("event is the network and the server, which on this machine share its 2 cores with the client.")
  w("")

  w("### Worker processes against harel")
  w("")
  w("The Events/s workload (N executions x 2 events, `bench/events.lua` against `bench/harel_events.py`, harel 0.9.0's")
  w("`DurableRunner` over its own `MongoStore`), 1, 4 and 16 worker processes on the same server; 16 processes on 2")
  w("cores measure contention.")
  w("")
  local rows4 = {}
  for _, wk in ipairs { 1, 4, 16 } do
    local m, h = "ms" .. wk, "h" .. wk
    rows4[#rows4 + 1] = { wk, R[m .. ".executions"], f0(num(m .. ".eps")), f2(num(m .. ".rt_per_event")),
      f0(num(h .. ".eps")), x(ratio(num(m .. ".eps"), num(h .. ".eps"))) }
  end
  table_md({ "workers", "executions", "mongostore events/s", "mongostore rt/event", "harel events/s", "mongostore / harel" },
    rows4)
  w("harel's `process` runs its relay pass after every call and its MongoStore finds pending entries by scanning the")
  w("collection, so its events/s falls as the collection grows: the ratios hold for this number of executions only")
  w("(`bench/run.sh --batching --quick` uses fewer than the full run, which makes harel look faster).")
  w("")

  w("### Commits per second with emits: the counter change")
  w("")
  w("`bench/events.lua --emit 1`, 16 worker processes: the same workload, but both states' `on_enter` emit one event, so")
  w("every commit takes an outbox seq. `seq_block = 1` is the old way (every emitting commit increments the one")
  w("`counters` document: a findAndModify that all 16 workers queue on), `seq_block = 1000` the default (a store reserves")
  w("1,000 seqs per counter round trip). %s round(s) of each, taking turns; the mean.", c1n > 0 and c1n or "?")
  w("")
  local rows5 = {}
  for _, sb in ipairs { 1, 1000 } do
    local eps = rounds_of(sb, "eps")
    local rt = rounds_of(sb, "rt_per_event")
    local list = {}
    for r = 1, 9 do
      local v = R[format("c%d.r%d.eps", sb, r)]
      if v then list[#list + 1] = v end
    end
    rows5[#rows5 + 1] = { sb, R[format("c%d.r1.executions", sb)], f0(eps), #list > 0 and concat(list, ", ") or "n/a",
      f2(rt), f3(fam(sb)) }
  end
  table_md({ "seq_block", "executions", "commits/s (mean)", "per round", "round trips per commit",
    "counter findAndModify per commit" }, rows5)

  w("### SecantusDB")
  w("")
  if not R["meta.secantus"] then
    w("not measured in this run (BENCH_SECANTUS=0, or SecantusDB did not start).")
    w("")
    return
  end
  local sev, swn = R["meta.secantus"]:match("^(%S+)%s+(%S+)")
  w("One short pass of the same rows on SecantusDB 0.7.0b3 (tools/secantus-server: WiredTiger, a single-node replica")
  w("set, real indexes: an update is not a collection scan), loopback only, about %s events per batching figure and",
    sev or "?")
  w("%s executions for the worker rows.", swn or "?")
  w("")
  k_table("sec", "SecantusDB: batched against one event at a time")
  local rows6 = {}
  for _, wk in ipairs { 1, 4, 16 } do
    local m, h = "sec.ms" .. wk, "sec.h" .. wk
    local r = ratio(num(m .. ".eps"), num(h .. ".eps"))
    rows6[#rows6 + 1] = { wk, R[m .. ".executions"], f0(num(m .. ".eps")), f0(num(h .. ".eps")), x(r),
      met(r, function(q) return q >= 10 end) }
  end
  table_md({ "workers", "executions", "mongostore events/s", "harel events/s", "mongostore / harel", ">= 10x" }, rows6)
end

------------------------------------------------------------------------
-- The Markdown.

local n_exec = R["ms1.executions"] or "?"
w("# mongostore benchmarks")
w("")
local doc_title
if which == "all" then
  doc_title = "Issue 5's benchmarks (executions), issue 11's (documents) and issue 12's (models); issue 13's (records);" ..
    " issue 14's (batching)"
else
  local TITLE_OF = { documents = "issue 11's document benchmarks", models = "issue 12's model benchmarks",
                     records = "issue 13's record benchmarks", batching = "issue 14's batching benchmarks" }
  local names = {}
  for name in which:gmatch("[^,]+") do names[#names + 1] = TITLE_OF[name] end
  doc_title = concat(names, " and "):gsub("^i", "I")
end
w("%s, from one run of `bench/run.sh` (%s mode). Every figure below was measured in this run,", doc_title, mode)
w("against one server, with the implementations side by side; nothing is carried over from other runs.")
w("")
w("- command: `%s`", command)
w("- date: %s", date)
w("- machine: %s CPUs (`nproc`), kernel %s", sh("nproc"), sh("uname -srm"))
w("- server: %s", server)
local git = "git -C '" .. (arg[0]:match("^(.*)/[^/]*$") or ".") .. "/..' "
w("- mongostore: commit %s%s", sh(git .. "rev-parse --short HEAD"),
  sh(git .. "status --porcelain -- csrc lua | grep -q . && echo ' plus uncommitted changes in csrc/ or lua/'"))
w("- load average (1, 5, 15 min) when the measured round started: %s; when it ended: %s (the machine may be shared)",
  R["meta.loadavg_start"] or "?", R["meta.loadavg_end"] or "?")
if which == "all" or show_batching then
  w("- harel: 0.9.0, its `DurableRunner` (execution=\"%s\") over its own `MongoStore` (pymongo 4.10.1)", R["h1.mode"] or "?")
end
w("")
w("```")
w("$ free -g")
w("%s", sh("free -g"))
w("```")
w("")
if which == "all" then
  w("## Summary")
  w("")
  do
    local failed = {}
    for key, val in pairs(R) do
      if key:match("^meta%.failed%.") then failed[#failed + 1] = val end
    end
    table.sort(failed)
    if #failed > 0 then
      w("**Failed in this run** (their figures read n/a): %s.", concat(failed, "; "))
      w("")
    end
  end
  table_md({ "measure", "measured", "issue 5 target", "met" }, {
    { "events/s, 1 worker process: mongostore / harel", format("%s / %s = %s", f0(ms1), f0(h1), x(r_h1)), ">= 5x",
      verdict(r_h1 and r_h1 >= 5, not r_h1 and "not measured") },
    { "events/s, 4 worker processes: mongostore / harel", format("%s / %s = %s", f0(ms4), f0(h4), x(r_h4)), ">= 5x",
      verdict(r_h4 and r_h4 >= 5, not r_h4 and "not measured") },
    { raw_docs and format("1 worker / raw libmongoc loop doing the same work (%s executions x 2 events)",
        with_commas(raw_docs)) or "1 worker / raw libmongoc loop doing the same work",
      format("%s / %s = %s", f0(ms1), f0(limit_n), pct(r_lim_n)),
      ">= 80%", verdict(r_lim_n and r_lim_n >= 0.8, not r_lim_n and "not measured") },
    { "round trips per delivered event (1 and 4 workers)",
      (rt1 or rt4) and format("%s, %s", f2(rt1), f2(rt4)) or "n/a (store:stats() not available)", "<= 2.2",
      verdict(rt_all and rt_all <= 2.2, not rt_all and "not measured (no store:stats())") },
    { "commit latency, 1st vs 100,000th event", lat_cell, "within 20%", lat_verdict },
    { "bytes shipped by sweep/relays/listing, " .. (scales[1] and with_commas(scales[1]) or "?") .. " -> " ..
        (scales[#scales] and with_commas(scales[#scales]) or "?") .. " executions",
      ship_measured and #ship_rows > 0 and concat(ship_rows, "; ") or "n/a (store:stats() gives no byte counts)",
      "does not grow", verdict(ship_ok, not (ship_measured and #ship_rows > 0) and "not measured") },
  })
  w("\"met\" is yes only when the figure of this run meets the target (bytes: within 20%% + 1 KiB of the smallest scale).")
  w("harel's events/s depends on how many executions the collection holds (see Events/s); the ratios hold for %s",
    R["ms1.executions"] or "?")
  w("executions.")
  w("")

  w("## Events/s")
  w("")
  w("%s executions x 2 events on a flat chart (Start reaches `Waiting`, then `Go` reaches the final `Done`), trace off;",
    n_exec)
  w("each worker is its own OS process with its share of the executions. Events/s = events / wall time from the")
  w("earliest worker start to the latest worker end (connecting excluded). mongostore: `engine:start` + `engine:send`;")
  w("harel: `DurableRunner.create` + `DurableRunner.process` (which also runs harel's relay pass after each call).")
  w("Each side starts from an empty database. harel's `process` runs its relay pass after every call, and")
  w("its MongoStore finds pending outbox and spawn entries by scanning the collection, so harel's events/s falls as")
  w("the collection grows: the two sides are compared at the same number of executions only.")
  w("")
  local rows = {}
  for _, k in ipairs { 1, 4, 16 } do
    local m, h = "ms" .. k, "h" .. k
    rows[#rows + 1] = { k, R[m .. ".executions"], R[m .. ".events"], f0(num(m .. ".eps")), f2(num(m .. ".wall_s")),
      f0(num(h .. ".eps")), f2(num(h .. ".wall_s")), x(ratio(num(m .. ".eps"), num(h .. ".eps"))) }
  end
  table_md({ "workers", "executions", "events", "mongostore events/s", "mongostore wall s", "harel events/s",
    "harel wall s", "mongostore / harel" }, rows)

  w("## One worker against the raw two-round-trip limit")
  w("")
  local docs_s = raw_docs and with_commas(raw_docs) or "?"
  w("`bench/raw_limit.c`: libmongoc alone, no codec, no interpreter, no Lua, on execution-shaped documents (a ~300-byte")
  w("`data` string). First the issue's limit: %s iterations of each operation after warm-up on the only document of",
    R["raw.iterations"] or "?")
  w("its collection, 1e6 / (find + CAS) events/s; a bare `ping` took %s us. Then the events benchmark's own workload:", f1(num("raw.ping_us")))
  w("on an empty collection, for each of %s executions in turn an insert (its start) and a find by `_id` plus a CAS", docs_s)
  w("`update_one` (its event), the round trips mongostore's engine makes for the same two events; the median of three")
  w("rounds.")
  w("")
  table_md({ "loop", "projected find us", "CAS update_one us", "events/s", "mongostore, 1 worker, events/s",
    "mongostore / loop" }, {
    { "find + CAS on one document (the issue's limit)", f1(num("raw.find_us")), f1(num("raw.cas_us")), f0(limit),
      f0(ms1), pct(r_lim) },
    { format("the events workload, %s executions (insert, find + CAS each): right before / right after", docs_s),
      "", "", format("%s / %s, mean %s", f0(flow_before), f0(flow_after), f0(limit_n)), f0(ms1), pct(r_lim_n) },
  })
  w("The summary compares against the second loop, the same work on the same server, run right before and right after")
  w("mongostore's own 1-worker run so that the machine's drift falls on both. On this server the one-document")
  w("figure is not the limit of a workload with many executions: the CAS filter names `_id` and `version`, and")
  w("mongo-java-server's in-memory backend uses its `_id` index only for a filter on `_id` alone, so every CAS scans")
  w("the collection, which grows to %s executions during the run (the find, on `_id` alone, uses the index). A real", docs_s)
  w("MongoDB answers both from the `_id` index.")
  w("")

  w("## Round trips per delivered event")
  w("")
  if R["ms1.commands"] and R["ms1.commands"] ~= "n/a" then
    w("Commands counted by `store:stats()` (libmongoc command monitoring) while the workers ran, divided by the events.")
    w("")
    local names, seen = {}, {}
    for key in pairs(R) do
      local name = key:match("^ms%d+%.cmd%.(.+)$")
      if name and not seen[name] then seen[name] = true names[#names + 1] = name end
    end
    table.sort(names)
    local rows2 = {}
    for _, k in ipairs { 1, 4, 16 } do
      local m = "ms" .. k
      local parts = {}
      for _, name in ipairs(names) do
        local c = num(m .. ".cmd." .. name)
        if c then parts[#parts + 1] = format("%s %.2f", name, c / num(m .. ".events")) end
      end
      rows2[#rows2 + 1] = { k, R[m .. ".commands"], R[m .. ".events"], f2(num(m .. ".rt_per_event")), concat(parts, ", ") }
    end
    table_md({ "workers", "commands", "events", "per event", "per event, by command" }, rows2)
  else
    w("n/a: this build of mongostore has no `store:stats()`, so the commands could not be counted.")
    w("")
  end

  w("## Commit latency as one execution's history grows")
  w("")
  -- Shorter series with a small dedupe window (keys lat.commit.w<W>.*) go
  -- next to the default one.
  local wins = {}
  do
    local seen = {}
    for key, val in pairs(R) do
      local win, p = key:match("^lat%.commit%.w(%d+)%.p(%d+)%.median_us$")
      if win then
        win, p = tonumber(win), tonumber(p)
        if not seen[win] then
          seen[win] = { win = win, lat = {} }
          wins[#wins + 1] = seen[win]
        end
        seen[win].lat[p] = { p = p, v = tonumber(val) }
      end
    end
    table.sort(wins, function(a, b) return a.win < b.win end)
  end
  local default_window = num("lat.commit.dedupe_window") and with_commas(num("lat.commit.dedupe_window")) or "?"
  w("`store:commit` of one execution with a fresh `processed_event_id` each time (so the dedupe mark is written, as for")
  w("every delivered event); median of the 200 commits around each point. The run stops after %s s; a point it",
    R["meta.commit_budget_s"] or "?")
  w("does not reach by then reads \"not reached\". The execution keeps its last `dedupe_window` event ids (default %s);",
    default_window)
  if #wins > 0 then
    local ws = {}
    for i, s2 in ipairs(wins) do ws[i] = tostring(s2.win) end
    w("a shorter series runs the same commits with a window of %s.", concat(ws, " and "))
  else
    w("no shorter series with a smaller window was measured in this run.")
  end
  w("")
  local all_pts, seen_pt = {}, {}
  local function add_pt(p)
    if not seen_pt[p] then
      seen_pt[p] = true
      all_pts[#all_pts + 1] = p
    end
  end
  for _, pt in ipairs(points) do add_pt(pt.p) end
  for _, s2 in ipairs(wins) do for p in pairs(s2.lat) do add_pt(p) end end
  table.sort(all_pts)
  local function lat_cells(series, p)
    local pt, one = series[p], series[1] and series[1].v
    if not pt then return "not measured", "" end
    if not pt.v then return "not reached", "" end
    return f0(pt.v), one and x(pt.v / one) or "n/a"
  end
  local head3 = { "event", format("median us, dedupe_window %s (default)", default_window), "vs 1st" }
  for _, s2 in ipairs(wins) do
    head3[#head3 + 1] = format("median us, dedupe_window %d", s2.win)
    head3[#head3 + 1] = "vs 1st"
  end
  local rows3 = {}
  for _, p in ipairs(all_pts) do
    local row = { with_commas(p) }
    row[2], row[3] = lat_cells(lat, p)
    for _, s2 in ipairs(wins) do
      local v, r = lat_cells(s2.lat, p)
      row[#row + 1] = v
      row[#row + 1] = r
    end
    rows3[#rows3 + 1] = row
  end
  table_md(head3, rows3)
  w("The window is kept as the ids of the last 16 events in `processed` plus one binary field of 8-byte digests of the")
  w("last %s ids, so the document does not grow with the window by one element per id. That matters on this server,", default_window)
  w("which copies the whole document element by element on every update:")
  if num("raw.cas_window_us") and num("raw.cas_us") then
    w("in the same run `bench/raw_limit.c` (libmongoc alone) timed a bare CAS `update_one` at %s us on a document with",
      f1(num("raw.cas_us")))
    w("an empty `processed` array and at %s us on one whose array holds %s event ids (%s), which is what a window of",
      f1(num("raw.cas_window_us")), R["raw.window_ids"] or "?", x(ratio(num("raw.cas_window_us"), num("raw.cas_us"))))
    w("plain ids in the array would cost.")
  else
    w("a window of plain ids in the array would make each commit slower by one element per id.")
  end
  w("The default series committed %s events in %s s; the median of its last 200 commits was %s us.",
    R["lat.commit.reached"] or "?", R["lat.commit.elapsed_s"] or "?", R["lat.commit.tail_median_us"] or "?")
  if sbs_ratio then
    w("The medians above are minutes apart on a shared machine. Side by side, after the default series, in 40")
    w("alternating rounds of 10 commits to a fresh execution (its events 1-10, the first an insert) and 10 to the long")
    w("one (events %s-%s): %s us against %s us, %s. The summary uses this figure once the long execution is past its",
      with_commas(sbs_from or 0), with_commas(num("lat.commit.sbs.old_to") or 0), f0(sbs_y), f0(sbs_o), x(sbs_ratio))
    w("100,000th event.")
  end
  for _, s2 in ipairs(wins) do
    local k = format("lat.commit.w%d.", s2.win)
    w("The series with dedupe_window %d committed %s events in %s s; the median of its last 200 commits was %s us.",
      s2.win, R[k .. "reached"] or "?", R[k .. "elapsed_s"] or "?", R[k .. "tail_median_us"] or "?")
  end
  w("")

  w("## Sweeps, relays and listing with many executions")
  w("")
  w("The executions are clones of documents mongostore wrote (half RUNNING with a timer far in the future, half DONE,")
  w("1%% FAILED), inserted in bulk; besides them 10 timers are due, 10 outbox entries and 10 spawns are pending at")
  w("every scale.")
  w("Each call: median of up to %s calls (fewer once %s s are spent on one call); rows = what the call returned;",
    R["meta.reps"] or "?", R["meta.op_budget_s"] or "?")
  w("commands and bytes in (bytes the server shipped back) from `store:stats()` when it counts them, else n/a.")
  w("`list_page` is a first page of 50;")
  w("`list_failed` a first page of 50 FAILED executions.")
  w("")
  local rows4 = {}
  for _, n in ipairs(scales) do
    for _, op in ipairs { "due_timers", "pending_outbox", "pending_spawns", "list_page", "list_failed" } do
      local k = format("lat.scale.%d.%s", n, op)
      if R[k .. ".ms"] then
        local rws = R[k .. ".rows"]
        if R[k .. ".rows_min"] and R[k .. ".rows_min"] ~= rws then rws = R[k .. ".rows_min"] .. "-" .. rws end
        rows4[#rows4 + 1] = { with_commas(n), op, R[k .. ".ms"], R[k .. ".ms"] == "skipped" and "" or rws,
          R[k .. ".commands"] or "", R[k .. ".bytes"] or "", R[k .. ".calls"] or "" }
      end
    end
  end
  table_md({ "executions", "call", "ms", "rows", "commands", "bytes in", "calls" }, rows4)
  local ins = {}
  for _, n in ipairs(scales) do
    if R[format("lat.scale.%d.insert_s", n)] then
      ins[#ins + 1] = format("%s in %s s", with_commas(n), R[format("lat.scale.%d.insert_s", n)])
    end
  end
  w("Filling the collection up to each size took: %s.", #ins > 0 and concat(ins, ", ") or "n/a")
  if mode == "quick" then
    w("Quick mode stops at %s executions; the full mode (`bench/run.sh`) goes on to 1,000,000.",
      scales[#scales] and with_commas(scales[#scales]) or "?")
  end
  w("A call marked skipped was not run at that size: at the previous size its median, times the growth in executions,")
  w("predicted more than %s s per call.", R["meta.skip_s"] or "?")
  w("")

  w("## Resident memory of a worker")
  w("")
  table_md({ "workers", "mongostore VmRSS KiB (max)", "harel VmRSS KiB (max)" }, {
    { 1, R["ms1.rss_kb_max"], R["h1.rss_kb_max"] },
    { 4, R["ms4.rss_kb_max"], R["h4.rss_kb_max"] },
    { 16, R["ms16.rss_kb_max"], R["h16.rss_kb_max"] },
  })
  w("VmRSS from /proc/self/status at the end of each worker's timed loop.")
  w("")
end
if show_batching then batching_section() end
if show_docs then documents_section() end
if show_models then models_section() end
if show_records then
  -- Issue 13's record rows (keys records.*, from bench/records.lua)
  local function n(key) return tonumber(R["records." .. key]) end
  local sizes = {}
  for v in (R["meta.records_sizes"] or ""):gmatch("%d+") do sizes[#sizes + 1] = tonumber(v) end
  local books = n("n") or sizes[1]
  local function per_s(v) return v and with_commas(v) or "n/a" end
  w("## Records")
  w("")
  w("Issue 13's record rows (`bench/records.lua`, one process, after an untimed warm-up on a store of its own prefix):")
  w("%s book graphs saved one `store:save(Book, book)` each (a book with 3 embedded chapters and a ref to an author",
    books and with_commas(books) or "?")
  w("record shared by 10 books, so one save in ten writes a new author and nine find it by its content id), fetched")
  w("back whole one `store:fetch(Book, sid)` each, and walked by keyset pages of %s ordered by `year` (the sid breaks",
    R["records.page_size"] or "?")
  w("ties). A page at the first and at the last position is the median of %s fetches of each, interleaved.",
    sizes[3] or "?")
  w("Store mode: %s; round trips are the commands the pool sent (`db:stats()`), divided by the saves or fetches.",
    R["records.mode"] or "?")
  local failed = {}
  for key, val in pairs(R) do
    if key:match("^meta%.failed%.") and val:match("^records") then failed[#failed + 1] = val end
  end
  if #failed > 0 then w("- **failed in this run**: %s", concat(failed, "; ")) end
  w("")
  local ratio_v = n("page_last_over_first")
  table_md({ "row", "figure" }, {
    { "save of a book graph", format("%s ms for %s (%s books/s, %s records/s)", f1(n("save_ms")),
      books and with_commas(books) or "?", per_s(n("save_per_s")), per_s(n("save_records_per_s"))) },
    { "round trips per save", f2(n("rt_per_save")) },
    { "fetch of a book graph", format("%s ms for %s (%s books/s)", f1(n("fetch_ms")), books and with_commas(books) or "?",
      per_s(n("fetch_per_s"))) },
    { "round trips per fetch", f2(n("rt_per_fetch")) },
    { "keyset walk over every book", format("%s ms, %s pages, %s books", f1(n("walk_ms")), R["records.walk_pages"] or "?",
      R["records.walk_items"] or "?") },
    { "one page at the first position", format("%s ms", f2(n("page_first_ms"))) },
    { "one page at the last position", format("%s ms (%s the first; does not grow with the position: %s)",
      f2(n("page_last_ms")), x(ratio_v), ratio_v and (ratio_v <= 1.5 and "yes" or "no") or "not measured") },
    { "the first page's find by the document API (the server's share)", format("%s ms", f2(n("raw_page_first_ms"))) },
    { "a search through the author ref and into the chapters", format("%s ms, %s rows, %s round trips",
      f2(n("search_ms")), R["records.search_rows"] or "?", f2(n("rt_per_search"))) },
    { "report-only fsck", format("%s ms over %s records", f1(n("fsck_ms")), R["records.fsck_examined"] or "?") },
    { "fsck with verify_content", format("%s ms", f1(n("fsck_verify_ms"))) },
  })
  w("")
end

if show_openresty then
  -- Issue 31's OpenResty load rows (keys openresty.*, from bench/openresty.lua)
  local function n(key) return tonumber(R["openresty." .. key]) end
  local function t(key) return R["openresty." .. key] or "not measured" end
  local secs, burst = (R["meta.openresty"] or ""):match("(%d+) (%d+)")
  w("## OpenResty")
  w("")
  w("Issue 31's load rows (`bench/openresty.lua`): the example server (`examples/openresty`, real nginx, 2 workers,")
  w("`msngx.start_worker` running the relays, the sweep and the inbox) driven by `wrk` over HTTP for %s s a row",
    secs or "?")
  w("at 64 connections; each figure is checked against the database afterwards (what it holds lies between the")
  w("answers counted and that plus the requests in flight when wrk stopped: nothing lost, nothing applied twice).")
  w("The hot rows send to one execution (an event its guard ignores, so each is one commit); the inbox row runs twice,")
  w("on this nginx (`inbox_group` at its default, 32) and on a second one configured with `inbox_group = 1` (one")
  w("commit per event, as before the group commit), the same load on each. The timer row creates and places orders")
  w("for %s s over %s connections (one wrk thread each) with a payment timeout of %s s and reads, from each trace,",
    burst or "?", t("timers.burst_connections"), t("timers.timeout_s"))
  w("how late its Timeout fired after its due time. Each row's executions are deleted once it is checked:")
  w("mongo-java-server answers a commit's update (its filter has more than `_id`) by scanning the collection, so a")
  w("row run on what the rows before it left would measure the collection's size rather than the row.")
  if R["openresty.missing"] then w("- **not measured**: %s is not installed (`tools/deps.sh bench`)", t("missing")) end
  w("")
  local function checked(key) return t("check." .. key) end
  table_md({ "row", "figure", "checked" }, {
    { "creates (POST /executions)", format("%s/s (p50 %s ms, p99 %s ms)", f0(n("create.per_s")), f1(n("create.p50_ms")),
      f1(n("create.p99_ms"))), checked("create") },
    { "events over 1,000 executions", format("%s/s (p50 %s ms, p99 %s ms)", f0(n("events.per_s")),
      f1(n("events.p50_ms")), f1(n("events.p99_ms"))), checked("events") },
    { "one hot execution by send", format("%s/s, %s conflicts (409), %s other, p99 %s ms", f0(n("hot.send.per_s")),
      t("hot.send.conflicts"), t("hot.send.other"), f1(n("hot.send.p99_ms"))), checked("hot.send") },
    { "one hot execution by the inbox", format("%s enqueued/s; drained at %s events/s (%s s)",
      f0(n("hot.inbox.enqueued_per_s")), f0(n("hot.inbox.applied_per_s")), f1(n("hot.inbox.drain_s"))),
      checked("hot.inbox") .. ", drained " .. checked("hot.inbox.drained") },
    { "the same, `inbox_group = 1`", format("%s enqueued/s; drained at %s events/s (%s s); grouped / one each %sx",
      f0(n("hot.inbox1.enqueued_per_s")), f0(n("hot.inbox1.applied_per_s")), f1(n("hot.inbox1.drain_s")),
      f1(n("hot.inbox.ratio"))),
      checked("hot.inbox1") .. ", drained " .. checked("hot.inbox1.drained") },
    { "timers after the burst", format("%s requests/s in the burst; %s fired of %s due; lag p50 %s s, p99 %s s, "
      .. "max %s s", f0(n("timers.burst_per_s")), t("timers.fired"), t("timers.due"), f2(n("timers.lag_p50_s")),
      f2(n("timers.lag_p99_s")), f2(n("timers.lag_max_s"))), checked("timers") },
  })
  w("")
  local p99 = n("timers.lag_p99_s")
  w("Goals: every timer of the burst fired within 5 s of its due time: %s; 0 conflicts answered at 64-way",
    p99 and ((n("timers.lag_max_s") or p99) <= 5 and "met" or "not met") or "not measured")
  w("contention: %s; the inbox draining a hot execution at 10x the rate of one commit per event (`inbox_group = 1`,",
    n("hot.send.conflicts") and (n("hot.send.conflicts") == 0 and "met" or "not met") or "not measured")
  w("side by side): %s (%sx).",
    n("hot.inbox.ratio") and (n("hot.inbox.ratio") >= 10 and "met" or "not met") or "not measured",
    f1(n("hot.inbox.ratio")))
  w("")
end

local text = concat(out, "\n")
local f = assert(io.open(md_path, "w"))
f:write(text, "\n")
f:close()

-- The console gets the summary, the events table and the document rows.
if which == "all" then
  local stop = text:find("\n## One worker", 1, true)
  io.stdout:write(text:sub((text:find("## Summary", 1, true)) or 1, stop or #text), "\n")
end
-- each row section up to its per-round table
do
  local at = text:find("## Batching", 1, true)
  if at then io.stdout:write(text:sub(at, (text:find("\n### The proxy", at + 1, true) or #text))) end
end
for _, title in ipairs({ "## Documents", "## Models" }) do
  local at = text:find(title, 1, true)
  if at then
    io.stdout:write(text:sub(at, (text:find("Every round's wall time", at, true) or #text + 1) - 1))
  end
end
do
  local at = text:find("## OpenResty", 1, true)
  if at then io.stdout:write(text:sub(at, (text:find("\n## ", at + 1, true) or #text))) end
end
do
  local at = text:find("## Records", 1, true)
  if at then io.stdout:write(text:sub(at, (text:find("\n## ", at + 1, true) or #text))) end
end
io.stdout:write("(full report: ", md_path, ")\n")
