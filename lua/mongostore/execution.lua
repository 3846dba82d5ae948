-- mongostore.execution - the Execution and Event values: construction, field
-- rules, the dedupe digests an Execution carries, its plain form for thread
-- boundaries, and the JSON form, which is harel's (field names, order,
-- ISO-8601 times) so harel's own stores read what we write and we read theirs.
local core = require "mongostore.core"
local util = require "mongostore.util"

local type, pairs, ipairs, next, error, tostring = type, pairs, ipairs, next, error, tostring
local setmetatable, getmetatable = setmetatable, getmetatable
local concat, format = table.concat, string.format
-- LuaJIT has no math.type: an integral number (or a boxed int64) is an integer there.
local math_type = math.type or function(v)
  if type(v) == "number" then return (v % 1 == 0 and v > -2^63 and v < 2^63) and "integer" or "float" end
  local mt = type(v) == "userdata" and getmetatable(v)
  if mt and mt.__name == "mongostore.int64" then return "integer" end
  return nil
end
local json_encode, json_decode = core.json_encode, core.json_decode
local null = core.null

local M = {}
M.math_type = math_type

M.STATUSES = { "PENDING", "RUNNING", "DONE", "CANCELLED", "SUSPENDED", "CANCELLING", "FAILED" }
local STATUS = {}
for _, s in ipairs(M.STATUSES) do STATUS[s] = true end

-- harel's Execution fields in its declaration order, with their kinds.
local FIELDS = {
  { "id", "id" }, { "definition_id", "id" }, { "definition_fqn", "string?" },
  { "root_path", "string" }, { "status", "status" }, { "outcome", "string?" },
  { "error", "string?" }, { "active_path", "string?" }, { "history", "map" },
  { "context", "map" }, { "processed_events", "count" }, { "version", "count" },
  { "priority", "priority" }, { "parent_id", "id?" }, { "child_id", "id?" },
  { "deferred", "events" }, { "children", "children" }, { "invoke_seq", "map" },
  { "created_at", "time?" }, { "updated_at", "time?" }, { "finished_at", "time?" },
  { "expires_at", "time?" },
}
local KIND = {}
for _, f in ipairs(FIELDS) do KIND[f[1]] = f[2] end
local READ_ONLY = { id = true, definition_id = true, version = true }

local function is_null(v) return v == nil or v == null end

-- Checks a value for a field; returns the value to keep (nil for null) or
-- nil plus a message.
local function check(field, kind, v)
  if kind == "string?" then
    if is_null(v) then return nil end
    if type(v) ~= "string" then return nil, field .. " must be a string or nil, got " .. type(v) end
    return v
  elseif kind == "id?" then
    if is_null(v) then return nil end
    if type(v) ~= "string" then return nil, field .. " must be a string or nil, got " .. type(v) end
    local why = core.text_error(v)
    if why then return nil, field .. " " .. why end
    return v
  elseif kind == "string" then
    if type(v) ~= "string" then return nil, field .. " must be a string, got " .. type(v) end
    return v
  elseif kind == "id" then
    if type(v) ~= "string" or v == "" then
      return nil, field .. " must be a non-empty string, got " .. (type(v) == "string" and "''" or type(v))
    end
    local why = core.text_error(v)
    if why then return nil, field .. " " .. why end
    return v
  elseif kind == "status" then
    if not STATUS[v] then
      return nil, "status must be one of " .. concat(M.STATUSES, ", ") .. ", got " .. tostring(v)
    end
    return v
  elseif kind == "count" then
    if math_type(v) ~= "integer" or v < 0 then return nil, field .. " must be an integer >= 0" end
    return v
  elseif kind == "priority" then
    if math_type(v) ~= "integer" or v < 0 or v > 4 then return nil, "priority must be an integer from 0 to 4" end
    return v
  elseif kind == "time?" then
    if is_null(v) then return nil end
    if type(v) ~= "number" or v ~= v or v == math.huge or v == -math.huge then
      return nil, field .. " must be a finite number of epoch seconds or nil"
    end
    return v
  elseif kind == "map" or kind == "children" then
    if type(v) ~= "table" or core.is_array(v) then return nil, field .. " must be a table with string keys" end
    return v
  elseif kind == "events" then
    if type(v) ~= "table" then return nil, field .. " must be a list of events" end
    return v
  end
  return v
end

-- The private fields of each Execution, keyed by the proxy the caller holds.
-- Besides harel's fields the record holds, under the private key DIGESTS,
-- the execution's dedupe digests: the `dedupe` bytes of its document at its
-- version (csrc/dedupe.c), which its next commit checks the event against
-- and stores one longer; nil while unknown. They are not a harel field:
-- pairs and the JSON form leave them out.
local state = setmetatable({}, { __mode = "k" })
local DIGESTS = {}

-- next over a record, skipping the digests.
local function next_field(f, k)
  local nk, v = next(f, k)
  if nk == DIGESTS then nk, v = next(f, nk) end
  return nk, v
end

local Execution = {}
Execution.__name = "mongostore.Execution"
Execution.__index = function(exe, k)
  return state[exe][k]
end
Execution.__newindex = function(exe, k, v)
  local kind = KIND[k]
  if not kind then error(format("Execution has no field '%s'", tostring(k)), 2) end
  if READ_ONLY[k] then error(format("Execution.%s is read-only", k), 2) end
  local val, err = check(k, kind, v)
  if err then error("Execution." .. err, 2) end
  state[exe][k] = val
end
Execution.__pairs = function(exe)
  return next_field, state[exe], nil
end
Execution.__tostring = function(exe)
  local s = state[exe]
  return format("mongostore.Execution(%s %s v%d %s)", s.definition_id, s.id, s.version, s.status)
end

local function defaults(f)
  f.root_path = f.root_path or ""
  f.status = f.status or "PENDING"
  f.history = f.history or {}
  f.context = f.context or {}
  f.processed_events = f.processed_events or 0
  f.version = f.version or 0
  f.priority = f.priority or 0
  f.deferred = f.deferred or core.array()
  f.children = f.children or {}
  f.invoke_seq = f.invoke_seq or {}
  return f
end

local function wrap(fields)
  local exe = setmetatable({}, Execution)
  state[exe] = fields
  return exe
end

function M.is_execution(v)
  return getmetatable(v) == Execution
end
require("mongostore.contract").kind("mongostore.Execution", M.is_execution,
  "an Execution (mongostore.execution{...})")

-- The checked fields of t (all but `skip`), defaults filled in, or nil and
-- what is wrong.
local function checked_fields(t, skip)
  local f = {}
  for k, v in pairs(t) do
    if not skip[k] then
      local kind = KIND[k]
      if not kind then return nil, format("no field '%s'", tostring(k)) end
      if k == "version" then return nil, "version is read-only (a new execution starts at 0)" end
      if not (k == "id" and is_null(v)) then
        local val, err = check(k, kind, v)
        if err then return nil, err end
        f[k] = val
      end
    end
  end
  if f.definition_id == nil then return nil, "definition_id is required" end
  f.id = f.id or core.uuid()
  return defaults(f)
end

local NOTHING = {}

-- mongostore.execution{ definition_id = ..., id = nil, context = {}, ... }
-- Raises on a wrong field: it is a programming error, caught at once.
function M.new(t)
  if type(t) ~= "table" then error("execution: expected a table of fields, got " .. type(t), 2) end
  local f, err = checked_fields(t, NOTHING)
  if not f then error("execution: " .. err, 2) end
  return wrap(f)
end

------------------------------------------------------------------------
-- The plain form: a table of fields that crosses a thread boundary as JSON
-- (mongostore.ngx). The dedupe digests travel in it as `dedupe`, the text
-- "<version>:<hex>": the version they were read at, then the digests'
-- bytes as lowercase hex (binary would not survive JSON). The version tag
-- makes a stale copy harmless: a caller who moves `version` on by hand
-- keeps digests of an older version, and those are dropped on the way back.

-- Hex text of a binary string, and back (nil when s is not hex of whole bytes).
M.to_hex, M.from_hex = util.hex, util.from_hex

-- Bytes per digest (MS_DIGEST, csrc/ms.h): a list of another length was cut.
local DIGEST_BYTES = 8

-- A plain table of the execution's fields (a shallow copy) with its digests
-- as `dedupe`, for callers that cannot use pairs on it (LuaJIT has no
-- __pairs) or must pass plain values.
function M.fields(exe)
  local f = state[exe]
  local t = {}
  for k, v in next_field, f do t[k] = v end
  if f[DIGESTS] ~= nil then t.dedupe = tostring(f.version) .. ":" .. M.to_hex(f[DIGESTS]) end
  return t
end

local PLAIN_ONLY = { version = true, dedupe = true }

-- The inverse of fields: an Execution at t.version (0 when absent) with the
-- digests t.dedupe carries if they were read at that version (otherwise
-- they are unknown, and a commit that marks an event fetches them first).
-- Raises on a wrong field, as new does.
function M.from_fields(t)
  if type(t) ~= "table" then error("execution: expected a table of fields, got " .. type(t), 2) end
  local f, err = checked_fields(t, PLAIN_ONLY)
  if not f then error("execution: " .. err, 2) end
  local version = t.version
  if version == nil then version = 0 end
  if type(version) == "number" and math.tointeger then version = math.tointeger(version) or version end
  if math_type(version) ~= "integer" or version < 0 then error("execution: version must be an integer >= 0", 2) end
  f.version = version
  local dedupe = t.dedupe
  if dedupe ~= nil then
    if type(dedupe) ~= "string" then error("execution: dedupe must be a string, got " .. type(dedupe), 2) end
    local at, hex = dedupe:match("^(%d+):(%x*)$")
    local bytes = hex and M.from_hex(hex)
    if not bytes or #bytes % DIGEST_BYTES ~= 0 then
      error("execution: dedupe must be \"<version>:<hex digests>\" as fields() gives it", 2)
    end
    if at == tostring(version) then f[DIGESTS] = bytes end
  end
  return wrap(f)
end

-- Raw access for the store: the version is read-only to callers, and the
-- digests are the store's to keep.
function M.set_version(exe, v)
  state[exe].version = v
end

function M.digests(exe)
  return state[exe][DIGESTS]
end

function M.set_digests(exe, d)
  state[exe][DIGESTS] = d
end

------------------------------------------------------------------------
-- Events

local function enc(v, what)
  if v == nil then return "null" end
  local s, err = json_encode(v, what)
  if not s then error(err, 0) end
  return s
end

local function time_json(v, what)
  if is_null(v) then return "null" end
  if type(v) == "string" then
    if not core.iso_to_time(v) then error(what .. " is not an ISO-8601 time: " .. v, 0) end
    return enc(v, what)
  end
  if type(v) ~= "number" then error(what .. " must be epoch seconds or an ISO-8601 string", 0) end
  local iso, err = core.time_to_iso(v)
  if not iso then error(what .. ": " .. tostring(err), 0) end
  return '"' .. iso .. '"'
end

-- An Event as harel's JSON: {id, kind, created_time, received_time, data}.
-- A missing id is filled into the caller's table with a fresh uuid, so the
-- caller learns the id its event was stored under.
local function event_json(ev, what)
  if type(ev) ~= "table" then error(what .. " must be a table, got " .. type(ev), 0) end
  if type(ev.kind) ~= "string" then error(what .. ".kind must be a string, got " .. type(ev.kind), 0) end
  local why = core.text_error(ev.kind)
  if why then error(what .. ".kind " .. why, 0) end
  if is_null(ev.id) then ev.id = core.uuid() end
  if type(ev.id) ~= "string" then error(what .. ".id must be a string, got " .. type(ev.id), 0) end
  why = core.text_error(ev.id)
  if why then error(what .. ".id " .. why, 0) end
  local data = ev.data
  if is_null(data) then data = {} end
  if type(data) ~= "table" or core.is_array(data) then error(what .. ".data must be a table with string keys", 0) end
  return concat {
    '{"id":', enc(ev.id, what .. ".id"),
    ',"kind":', enc(ev.kind, what .. ".kind"),
    ',"created_time":', time_json(ev.created_time, what .. ".created_time"),
    ',"received_time":', time_json(ev.received_time, what .. ".received_time"),
    ',"data":', enc(data, what .. ".data"), "}",
  }
end

-- Returns the JSON text of an event, or nil and a message.
function M.event_to_json(ev, what)
  local ok, s = pcall(event_json, ev, what or "event")
  if ok then return s end
  return nil, s
end

local function time_value(v)
  if type(v) == "string" then return core.iso_to_time(v) end
  if type(v) == "number" then return v end
  return nil
end

local function event_from(t)
  if type(t) ~= "table" then return nil end
  local data = t.data
  if type(data) ~= "table" then data = {} end
  return {
    id = type(t.id) == "string" and t.id or nil,
    kind = t.kind,
    data = data,
    created_time = time_value(t.created_time),
    received_time = time_value(t.received_time),
  }
end

-- Parses an event's JSON text into an event table, or nil and a message.
function M.event_from_json(s)
  local t, err = json_decode(s)
  if t == nil then return nil, err end
  local ev = event_from(t)
  if not ev or type(ev.kind) ~= "string" then return nil, "event JSON has no kind" end
  return ev
end

------------------------------------------------------------------------
-- Execution JSON

local function children_json(children)
  local parts = {}
  for cid, ch in pairs(children) do
    if type(cid) ~= "string" then error("children: keys must be child ids (strings)", 0) end
    if type(ch) ~= "table" then error("children." .. cid .. " must be a table", 0) end
    local result = ch.result
    if is_null(result) then result = {} end
    parts[#parts + 1] = enc(cid, "children") .. ":" .. concat {
      '{"root_path":', enc(ch.root_path or "", "children." .. cid .. ".root_path"),
      ',"finished":', ch.finished and "true" or "false",
      ',"outcome":', enc(not is_null(ch.outcome) and ch.outcome or nil, "children." .. cid .. ".outcome"),
      ',"result":', enc(result, "children." .. cid .. ".result"),
      ',"submachine":', ch.submachine and "true" or "false",
      ',"key":', enc(ch.key or "", "children." .. cid .. ".key"), "}",
    }
  end
  return "{" .. concat(parts, ",") .. "}"
end

local function execution_json(f, version)
  local parts = {}
  for i, fd in ipairs(FIELDS) do
    local name, kind = fd[1], fd[2]
    local v = f[name]
    if name == "version" then v = version end
    local s
    if kind == "events" then
      local evs = {}
      for j, ev in ipairs(v) do evs[j] = event_json(ev, "deferred[" .. j .. "]") end
      s = "[" .. concat(evs, ",") .. "]"
    elseif kind == "children" then
      s = children_json(v)
    else
      s = enc(v, name)
    end
    parts[i] = '"' .. name .. '":' .. s
  end
  return "{" .. concat(parts, ",") .. "}"
end

-- The JSON text of an Execution as it will be stored at `version`, or nil
-- and a message naming the bad value.
function M.to_json(exe, version)
  local ok, s = pcall(execution_json, state[exe], version or state[exe].version)
  if ok then return s end
  return nil, s
end

local function map_or_empty(v)
  if type(v) == "table" then return v end
  return {}
end

-- Builds an Execution from stored JSON text (ours or harel's), or nil and a
-- message. Unknown fields are ignored, so newer writers do not break us.
-- digests: the document's dedupe digests, which the store read with it.
function M.from_json(s, digests)
  local t, err = json_decode(s)
  if t == nil then return nil, err end
  if type(t) ~= "table" or type(t.id) ~= "string" or type(t.definition_id) ~= "string" then
    return nil, "stored execution has no id or definition_id"
  end
  local f = {}
  for _, fd in ipairs(FIELDS) do
    local name, kind = fd[1], fd[2]
    local v = t[name]
    if v == null then v = nil end
    if kind == "events" then
      local evs = core.array()
      for j, ev in ipairs(type(v) == "table" and v or {}) do evs[j] = event_from(ev) end
      v = evs
    elseif kind == "map" or kind == "children" then
      v = map_or_empty(v)
    elseif kind == "status" then
      v = STATUS[v] and v or "PENDING"
    elseif kind == "count" or kind == "priority" then
      v = math_type(v) == "integer" and v or nil
    elseif kind == "string" then
      v = type(v) == "string" and v or nil
    end
    f[name] = v
  end
  if f.children then
    for _, ch in pairs(f.children) do
      if type(ch) == "table" then
        if ch.outcome == null then ch.outcome = nil end
        if type(ch.result) ~= "table" then ch.result = {} end
      end
    end
  end
  f[DIGESTS] = digests
  return wrap(defaults(f))
end

-- A listing summary from stored JSON text: no context, history or children.
function M.summary_from_json(s, version)
  local t, err = json_decode(s)
  if type(t) ~= "table" then return nil, err or "stored execution is not an object" end
  local function opt(v) if v == null then return nil end return v end
  return {
    id = t.id,
    definition_id = t.definition_id,
    status = t.status,
    outcome = opt(t.outcome),
    active_path = opt(t.active_path),
    version = version or t.version,
    parent_id = opt(t.parent_id),
    finished_at = opt(t.finished_at),
  }
end

------------------------------------------------------------------------
-- Timeout events (harel's id form)

-- The Timeout event of a timer, with harel's id for it:
-- "timeout:<execution id>:<path>:<fire_at>", fire_at written as Python's
-- repr() writes a float (harel's f-string does): the fewest significant
-- digits that read back to the same double, positional for decimal
-- exponents -4..15 (".0" on an integral value), d.ddde+XX otherwise. Pure
-- Lua, and the same text as the C core's JSON writer on Lua 5.4 and LuaJIT.
function M.timeout_event(execution_id, path, fire_at)
  local v = fire_at + 0.0
  if v ~= v or v == math.huge or v == -math.huge then
    error("timeout_event: fire_at must be a finite number, got " .. tostring(fire_at), 2)
  end
  -- digits and exponent only, so a locale's decimal comma never matters
  local function split(text)
    local m, e = text:match("^%-?([^eE]+)[eE]([-+]%d+)$")
    return (m:gsub("%D", "")), tonumber(e)
  end
  -- v's first 100 digits: exact whenever v has fewer, as on a tie below
  local exact, exact_exp = split(format("%.99e", v))
  local magnitude = v < 0 and -v or v
  -- 15 digits read back exactly for a normal double, so the search starts
  -- there; a subnormal has fewer significant bits and starts from 1
  local p = (v ~= 0 and v > -2.2250738585072014e-308 and v < 2.2250738585072014e-308) and 1 or 15
  local digits, exp10
  while true do
    digits, exp10 = split(format("%." .. (p - 1) .. "e", v))
    -- a tie rounds to even, as glibc's printf does (LuaJIT's formatter
    -- takes it away from zero)
    if exact:sub(p + 1, p + 1) == "5" and not exact:find("[1-9]", p + 2) and exact:sub(p, p):find("[02468]") then
      digits, exp10 = exact:sub(1, p), exact_exp
    end
    if p == 17 or tonumber("0." .. digits .. "e" .. (exp10 + 1)) == magnitude then break end
    p = p + 1
  end
  digits = digits:gsub("0+$", "")
  if digits == "" then digits = "0" end
  local nd, decpt = #digits, exp10 + 1 -- the value is 0.DIGITS x 10^decpt
  local s
  if exp10 < -4 or exp10 >= 16 then
    s = digits:sub(1, 1) .. (nd > 1 and "." .. digits:sub(2) or "") ..
        format("e%s%02d", exp10 < 0 and "-" or "+", exp10 < 0 and -exp10 or exp10)
  elseif decpt <= 0 then
    s = "0." .. ("0"):rep(-decpt) .. digits
  elseif decpt < nd then
    s = digits:sub(1, decpt) .. "." .. digits:sub(decpt + 1)
  else
    s = digits .. ("0"):rep(decpt - nd) .. ".0"
  end
  if v < 0 or (v == 0 and 1 / v < 0) then s = "-" .. s end
  return {
    id = format("timeout:%s:%s:%s", execution_id, path, s),
    kind = "Timeout",
    data = { path = path, fire_at = fire_at },
  }
end

return M
