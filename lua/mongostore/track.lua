-- mongostore.track - change tracking for documents, in pure Lua: the snapshot a
-- model takes at load (copy), the equality that tells a change (equal), and the
-- difference a save sends ($set / $unset paths, diff).
--
--   track.copy(v)         a deep copy: tables recursively, each copy with its original's
--                         metatable (the array mark, a decoded table's shape: order and
--                         number types); boxes, null and other non-tables are shared
--                         (they are immutable).
--   track.snapshot(t)     copy(t) for a table whose top-level copy has no metatable.
--   track.equal(a, b)     deep equality as the server would store it: an integer and a
--                         float differ (math.type; LuaJIT has only doubles), 0.0 and -0.0
--                         differ, NaN equals NaN, an array and a document differ (an empty
--                         unmarked table is a document), mongostore.null is not nil, boxes
--                         compare with ==.
--   track.diff(old, new, opts) -> set, unset, n
--                         set: path -> value (deep copies of new's), unset: path -> true,
--                         n: the number of paths in both. Nested documents become dotted
--                         paths, a changed array is set whole, a removed key (nil) is unset;
--                         a differing key that cannot be a path segment ("" , a "." inside,
--                         a leading "$") makes its parent document set whole. Never a path
--                         and its prefix together. opts.skip: a set of top-level keys to
--                         ignore. old may be nil (everything is set). Raises when a
--                         top-level key that differs cannot be a path (no parent to set).
local values = require "mongostore.values"

local type, error, next, rawequal, setmetatable, tostring = type, error, next, rawequal, setmetatable, tostring
local concat, byte, find, format = table.concat, string.byte, string.find, string.format
local mtype = math.type -- nil on LuaJIT, where every number is a double
local is_array, null = values.is_array, values.null
local get_mt = debug and debug.getmetatable or getmetatable

local M = {}

local MAX_DEPTH = 200 -- the encoder stops at 100; this only stops a cycle

-- null is the core's light userdata; only without the core is it a table,
-- and only then does a table value need telling apart from it.
local null_is_table = type(null) == "table"

local copy_table

local function copy_table_null(t, depth)
  if depth > MAX_DEPTH then error("track.copy: tables nested deeper than " .. MAX_DEPTH .. " (a cycle?)", 0) end
  local c = {}
  for k, v in next, t do
    if type(v) == "table" and not rawequal(v, null) then v = copy_table(v, depth + 1) end
    c[k] = v
  end
  local mt = get_mt(t)
  if mt ~= nil then setmetatable(c, mt) end
  return c
end

local function copy_table_plain(t, depth)
  if depth > MAX_DEPTH then error("track.copy: tables nested deeper than " .. MAX_DEPTH .. " (a cycle?)", 0) end
  local c = {}
  for k, v in next, t do
    if type(v) == "table" then v = copy_table_plain(v, depth + 1) end
    c[k] = v
  end
  local mt = get_mt(t)
  if mt ~= nil then setmetatable(c, mt) end
  return c
end

copy_table = null_is_table and copy_table_null or copy_table_plain

local function copy(v)
  if type(v) ~= "table" or rawequal(v, null) then return v end
  return copy_table(v, 1)
end
M.copy = copy

--- track.snapshot(t) -> a deep copy of the table t whose top level has no
-- metatable (nested tables keep theirs, as in copy): a model's snapshot,
-- made without setting the document's metatable on the copy first.
function M.snapshot(t)
  if type(t) ~= "table" then error("track.snapshot: t must be a table, got " .. type(t), 2) end
  local c = {}
  for k, v in next, t do
    if type(v) == "table" and not rawequal(v, null) then v = copy_table(v, 2) end
    c[k] = v
  end
  return c
end

-- An array to the encoder: marked, or holding integer keys (1..n).
local function table_is_array(t)
  if is_array(t) then return true end
  return type((next(t))) == "number"
end

local equal

local function equal_tables(a, b, depth)
  if rawequal(a, null) or rawequal(b, null) then return false end
  if depth > MAX_DEPTH then error("track.equal: tables nested deeper than " .. MAX_DEPTH .. " (a cycle?)", 0) end
  local aa = table_is_array(a)
  if aa ~= table_is_array(b) then return false end
  if aa then
    local n = #a
    if n ~= #b then return false end
    for i = 1, n do
      local x, y = a[i], b[i]
      if not rawequal(x, y) or type(x) == "number" then
        if not equal(x, y, depth + 1) then return false end
      end
    end
    return true
  end
  local na = 0
  for k, x in next, a do
    na = na + 1
    local y = b[k]
    if y == nil then return false end
    if not rawequal(x, y) or type(x) == "number" then
      if not equal(x, y, depth + 1) then return false end
    end
  end
  for _ in next, b do
    na = na - 1
    if na < 0 then return false end
  end
  return na == 0
end

equal = function(a, b, depth)
  local ta = type(a)
  if ta ~= type(b) then return false end
  if ta == "number" then
    if a ~= b then return a ~= a and b ~= b end -- NaN is NaN
    if mtype and mtype(a) ~= mtype(b) then return false end
    if a == 0 then return 1 / a == 1 / b end   -- -0.0 keeps its sign
    return true
  elseif ta == "table" then
    if rawequal(a, b) then return true end
    return equal_tables(a, b, depth or 1)
  end
  return a == b -- strings, booleans, boxes (their __eq), null (light userdata)
end

function M.equal(a, b)
  return equal(a, b, 1)
end

-- A key the server cannot take as one segment of a dotted path.
local function bad_segment(k)
  return type(k) ~= "string" or k == "" or byte(k, 1) == 36 or find(k, ".", 1, true) ~= nil
end

-- A document to diff into: a table written as a document (not null, not an array).
local function is_doc(v)
  if type(v) ~= "table" or rawequal(v, null) then return false end
  if is_array(v) then return false end
  local k = next(v)
  return k == nil or type(k) == "string"
end

local function path_of(stack, depth, k)
  if depth == 0 then return k end
  return concat(stack, ".", 1, depth) .. "." .. k
end

-- Scratch space of diff, reused across calls so a diff allocates only its
-- results (a diff runs no code that could re-enter it: boxes' __eq is C).
-- stack[1..depth] is the path of the document being diffed; log[1..log_n]
-- the paths added below the top level, so that a subtree whose paths cannot
-- be written can be taken back and set whole.
local stack, log, log_n = {}, {}, 0

local function record(depth, k)
  local p = path_of(stack, depth, k)
  if depth > 0 then
    log_n = log_n + 1
    log[log_n] = p
  end
  return p
end

-- Diffs the documents old and new (at the path stack[1..depth]) into set and
-- unset. Returns the number of paths added, or false and the key when a key
-- that differs cannot be a path segment (the caller then sets the document whole).
local function diff_doc(old, new, depth, set, unset, skip)
  local added = 0
  for k, nv in next, new do
    if not (skip and skip[k]) then
      local ov = old[k]
      if not rawequal(ov, nv) or type(nv) == "number" then
        if is_doc(ov) and is_doc(nv) then
          if bad_segment(k) then
            if not equal(ov, nv, depth + 1) then return false, k end
          else
            stack[depth + 1] = k
            local mark = log_n
            local r = diff_doc(ov, nv, depth + 1, set, unset, nil)
            if r == false then
              for i = log_n, mark + 1, -1 do
                local p = log[i]
                set[p] = nil; unset[p] = nil
              end
              log_n = mark
              set[record(depth, k)] = copy(nv)
              added = added + 1
            else
              added = added + r
            end
          end
        elseif not equal(ov, nv, depth + 1) then
          if bad_segment(k) then return false, k end
          set[record(depth, k)] = copy(nv)
          added = added + 1
        end
      end
    end
  end
  for k in next, old do
    if new[k] == nil and not (skip and skip[k]) then
      if bad_segment(k) then return false, k end
      unset[record(depth, k)] = true
      added = added + 1
    end
  end
  return added
end

function M.diff(old, new, opts)
  if type(new) ~= "table" then error("track.diff: new must be a table, got " .. type(new), 2) end
  if old == nil then old = {} end
  if type(old) ~= "table" then error("track.diff: old must be a table or nil, got " .. type(old), 2) end
  local skip
  if opts ~= nil then
    if type(opts) ~= "table" then error("track.diff: opts must be a table or nil, got " .. type(opts), 2) end
    skip = opts.skip
    if skip ~= nil and type(skip) ~= "table" then
      error("track.diff: opts.skip must be a set of keys, got " .. type(skip), 2)
    end
  end
  local set, unset = {}, {}
  log_n = 0
  local n, bad = diff_doc(old, new, 0, set, unset, skip)
  if n == false then
    error(format("track.diff: the top-level key %q differs and cannot be written as a path", tostring(bad)), 2)
  end
  return set, unset, n
end

return M
