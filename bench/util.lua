-- bench/util.lua - small helpers the Lua benchmarks share (loaded with
-- dofile, not as a module of the library): options, process helpers, and a
-- tolerant reader of store:stats(), which may not exist (then every figure
-- that needs it reads n/a) and whose exact shape this file does not assume.
local U = {}

local format = string.format

-- "--key value" pairs from arg[first..] over the defaults.
function U.options(args, first, defaults)
  local o = {}
  for k, v in pairs(defaults) do o[k] = v end
  local i = first
  while args[i] do
    local key = args[i]:match("^%-%-([%w_%-]+)$")
    if not key or args[i + 1] == nil then error("bad option " .. tostring(args[i])) end
    o[key:gsub("%-", "_")] = args[i + 1]
    i = i + 2
  end
  return o
end

function U.q(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

function U.exists(path)
  local f = io.open(path, "r")
  if f then f:close() return true end
  return false
end

-- The interpreter running this script (arg[-1]), for starting workers.
function U.interpreter()
  local i, exe = -1, nil
  while arg[i] do exe = arg[i]; i = i - 1 end
  return exe or "lua5.4"
end

-- Resident memory of this process in KiB (VmRSS), 0 when unknown.
function U.rss_kb()
  local f = io.open("/proc/self/status", "r")
  if not f then return 0 end
  local text = f:read("a")
  f:close()
  return tonumber(text:match("VmRSS:%s*(%d+)")) or 0
end

function U.median(list)
  local t = {}
  for i, v in ipairs(list) do t[i] = v end
  table.sort(t)
  local n = #t
  if n == 0 then return nil end
  if n % 2 == 1 then return t[(n + 1) // 2] end
  return (t[n // 2] + t[n // 2 + 1]) / 2
end

------------------------------------------------------------------------
-- store:stats()

-- A copy of store:stats(), or nil when the store has no stats (or they fail).
function U.stats(store)
  local fn = store.stats
  if type(fn) ~= "function" then return nil end
  local ok, st = pcall(fn, store)
  if not ok or type(st) ~= "table" then return nil end
  local function copy(t, depth)
    local c = {}
    for k, v in pairs(t) do c[k] = (type(v) == "table" and depth < 4) and copy(v, depth + 1) or v end
    return c
  end
  return copy(st, 0)
end

local AGGREGATES = { total = true, commands = true, round_trips = true, count = true }

local function is_count_key(k)
  return not (k:find("byte") or k:find("time") or k:find("_us$") or k:find("_ms$") or k:find("fail")
    or k:find("error") or k:find("dur"))
end

-- Reads a stats table as { per = { command = count }, total = n|nil,
-- bytes = { name = n } }: counts per command either at the top level or
-- under commands/counts/by_command; a command's entry may be a number or a
-- table with count/n/calls (and its own byte counters); byte counters are
-- any numeric key containing "byte".
local function read(st)
  local per, bytes, total = {}, {}, nil
  local src = st
  for _, key in ipairs { "commands", "counts", "by_command", "per_command" } do
    if type(st[key]) == "table" then src = st[key] break end
  end
  for k, v in pairs(src) do
    if type(k) == "string" then
      if type(v) == "number" then
        if k:find("byte") then bytes[k] = v
        elseif AGGREGATES[k] then total = total or v
        elseif is_count_key(k) then per[k] = v end
      elseif type(v) == "table" then
        local c = v.count or v.n or v.calls or v.started or v.succeeded
        if type(c) == "number" then per[k] = c end
        for bk, bv in pairs(v) do
          if type(bk) == "string" and bk:find("byte") and type(bv) == "number" then bytes[k .. "." .. bk] = bv end
        end
      end
    end
  end
  if src ~= st then
    for k, v in pairs(st) do
      if type(k) == "string" and type(v) == "number" then
        if k:find("byte") then bytes[k] = v
        elseif AGGREGATES[k] then total = total or v end
      end
    end
  end
  return { per = per, bytes = bytes, total = total }
end

-- The difference after - before: { commands = n, per = {...}, bytes = {...} },
-- or nil when either side has no stats. Commands are the sum of the
-- per-command counts (or the aggregate when there is no breakdown).
function U.stats_diff(before, after)
  if not before or not after then return nil end
  local a, b = read(after), read(before)
  local per, bytes, sum, any = {}, {}, 0, false
  for k, v in pairs(a.per) do
    local d = v - (b.per[k] or 0)
    if d ~= 0 then per[k] = d end
    sum, any = sum + d, true
  end
  for k, v in pairs(a.bytes) do bytes[k] = v - (b.bytes[k] or 0) end
  local commands = sum
  if not any then
    if not (a.total and b.total) then return nil end
    commands = a.total - b.total
  end
  return { commands = commands, per = per, bytes = bytes }
end

-- The bytes the server shipped to us in a stats diff: the counter that says
-- reply/received/in when there is one; nil when stats have no such counter.
function U.reply_bytes(diff)
  if not diff then return nil end
  local best
  for k, v in pairs(diff.bytes) do
    local lk = k:lower()
    if lk:find("repl") or lk:find("recv") or lk:find("receiv") or lk:find("_in$") or lk:find("^in_")
      or lk:find("response") or lk:find("shipped") then
      best = (best or 0) + v
    end
  end
  return best
end

function U.fmt(v, pattern)
  if v == nil then return "n/a" end
  return format(pattern or "%s", v)
end

return U
