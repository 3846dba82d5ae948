-- mongostore.database - the Lua half of the document API: mongostore.database(uri, opts)
-- and the argument rules of every Database, Collection and Cursor method (a wrong type
-- raises naming the argument, an unknown option key raises); the C core
-- (csrc/database.c, collection.c, cursor.c) does the rest.
local core = require "mongostore.core"
local store = require "mongostore.store"
local transaction = require "mongostore.transaction"

local check_keys = store.check_keys
local type, error, pairs, tostring, format = type, error, pairs, tostring, string.format

local M = {}

-- kinds: "table", "string", "number", "boolean", "userdata" (a Session),
-- "hint" (a string or a table); a trailing "?" lets nil through.
local function matches(v, kind)
  local t = type(v)
  if kind == "hint" then return t == "string" or t == "table" end
  return t == kind
end

local function check_arg(fn, name, v, kind)
  local optional = kind:sub(-1) == "?"
  if optional then
    if v == nil then return end
    kind = kind:sub(1, -2)
  end
  if not matches(v, kind) then
    local want = kind == "hint" and "a string or a table" or ("a " .. kind)
    error(format("%s: %s must be %s, got %s", fn, name, want, type(v)), 4)
  end
end

-- check_arg's test without its strings (the calls that pass never build
-- one); kinds as check_arg's, optional already taken off.
local function fits(v, kind)
  local t = type(v)
  return t == kind or (kind == "hint" and (t == "string" or t == "table"))
end

local function check_opts(fn, opts, known)
  if opts == nil then return end
  if type(opts) ~= "table" then error(format("%s: opts must be a table or nil, got %s", fn, type(opts)), 4) end
  for k, v in pairs(opts) do
    -- as mongostore.store's check_keys, one level further from the caller
    local kind = known[k]
    if not kind then error(format("%s: unknown option %s", fn, tostring(k)), 4) end
    if not fits(v, kind) then check_arg(fn, "opts." .. k, v, kind) end
  end
end

-- ------------------------------------------------------------ client values

-- mongostore.sanitize(filter): a client's filter taken as data, as the
-- document API sends it. A field's value holding an operator key (or a regex)
-- is wrapped in $eq, so it is compared, not run; $and, $or and $nor keep their
-- meaning, their items sanitized alike; any other top-level operator ($expr,
-- $text, $where, ...) and server-side JavaScript anywhere ($where, $function,
-- $accumulator) make the filter invalid. Returns a new table; the caller's is
-- left as it was.
local query = require "mongostore.query"
local find_js, describe = query.find_js, query.describe
local is_array, null = core.is_array, core.null
local byte, next, rawequal = string.byte, next, rawequal

local is_regex = query.is_regex

local function has_operator_key(v)
  for k in next, v do
    if type(k) == "string" and byte(k, 1) == 36 then return true end
  end
  return false
end

local LOGICAL = { ["$and"] = true, ["$or"] = true, ["$nor"] = true }

local sanitize_into
sanitize_into = function(fn, t, depth)
  if depth > 50 then return nil, fn .. ": the filter nests $and/$or/$nor deeper than 50" end
  local out = {}
  for k, v in pairs(t) do
    if type(k) ~= "string" then return nil, format("%s: the filter's key %s is not a field name", fn, describe(k)) end
    if byte(k, 1) == 36 then
      if not LOGICAL[k] then
        return nil, format("%s: the filter's key %s is an operator, which a sanitized filter does not take", fn, k)
      end
      if type(v) ~= "table" or rawequal(v, null) or (next(v) ~= nil and v[1] == nil) then
        return nil, format("%s: %s must be a list of filters, got %s", fn, k, describe(v))
      end
      local list = {}
      for i = 1, #v do
        if type(v[i]) ~= "table" or rawequal(v[i], null) or is_array(v[i]) then
          return nil, format("%s: %s item %d must be a filter, got %s", fn, k, i, describe(v[i]))
        end
        local part, err = sanitize_into(fn, v[i], depth + 1)
        if not part then return nil, err end
        list[i] = part
      end
      out[k] = core.array(list)
    elseif (type(v) == "table" and not rawequal(v, null) and has_operator_key(v)) or is_regex(v) then
      out[k] = { ["$eq"] = v }
    else
      out[k] = v
    end
  end
  return out
end

local function sanitize_for(fn, filter)
  if filter == nil then return {} end
  if type(filter) ~= "table" or rawequal(filter, null) or is_array(filter) then
    return nil, format("%s: the filter must be a table of fields, got %s", fn, describe(filter)), "invalid"
  end
  local js = find_js(filter)
  if js then return nil, format("%s: %s is refused (it runs JavaScript on the server)", fn, js), "invalid" end
  local out, err = sanitize_into(fn, filter, 0)
  if not out then return nil, err, "invalid" end
  return out
end

--- mongostore.sanitize(filter) -> a copy of filter with the client's values as data, or nil, msg, "invalid".
function M.sanitize(filter) return sanitize_for("sanitize", filter) end

-- The `sanitize = true` option of the methods that take a filter: the filter
-- goes through sanitize first (an invalid one is returned, nothing sent), and
-- the option is taken off before the method's own checks.
local function strip_sanitize(fn, filter, opts)
  local on = opts.sanitize
  local o = {}
  for k, v in pairs(opts) do
    if k ~= "sanitize" then o[k] = v end
  end
  if not on then return filter, o end
  local f, err = sanitize_for(fn, filter)
  if not f then return nil, err end
  return f, o
end

-- Replaces t[name] (a C method) with one that checks its arguments first.
-- args: { { "filter", "table?" }, ... } before the options; known: the
-- option keys and their kinds (nil: the method takes no options). The
-- kinds are read once here; check_arg, which raises, runs only for an
-- argument that does not fit.
local function wrap(t, name, args, known, filter_at)
  local f = t[name]
  local nargs = #args
  local base, optional = {}, {}
  for i = 1, nargs do
    local kind = args[i][2]
    optional[i] = kind:sub(-1) == "?"
    base[i] = optional[i] and kind:sub(1, -2) or kind
  end
  local k1, k2, o1, o2 = base[1], base[2], optional[1], optional[2]
  -- fixed parameters, not varargs: select() over ... costs more than the
  -- checks themselves on every call
  if nargs == 0 then
    t[name] = function(self, opts)
      if known and opts ~= nil then check_opts(name, opts, known) end
      return f(self, opts)
    end
  elseif nargs == 1 then
    t[name] = function(self, a, opts)
      if not ((a == nil and o1) or fits(a, k1)) then check_arg(name, args[1][1], a, args[1][2]) end
      if known and opts ~= nil then
        check_opts(name, opts, known)
        if filter_at and opts.sanitize ~= nil then
          a, opts = strip_sanitize(name, a, opts)
          if a == nil then return nil, opts, "invalid" end
        end
      end
      return f(self, a, opts)
    end
  else
    assert(nargs == 2, "wrap: at most two arguments before the options")
    t[name] = function(self, a, b, opts)
      if not ((a == nil and o1) or fits(a, k1)) then check_arg(name, args[1][1], a, args[1][2]) end
      if not ((b == nil and o2) or fits(b, k2)) then check_arg(name, args[2][1], b, args[2][2]) end
      if known and opts ~= nil then
        check_opts(name, opts, known)
        if filter_at and opts.sanitize ~= nil then
          local sf
          sf, opts = strip_sanitize(name, filter_at == 1 and a or b, opts)
          if sf == nil then return nil, opts, "invalid" end
          if filter_at == 1 then a = sf else b = sf end
        end
      end
      return f(self, a, b, opts)
    end
  end
end

local S = { session = "userdata" }
local function with_session(t)
  t.session = "userdata"
  return t
end

wrap(core.Database, "collection", { { "name", "string" } })
wrap(core.Database, "command", { { "cmd", "table" } }, S)
wrap(core.Database, "list_collections", {}, S)
wrap(core.Database, "stats", {})
-- db:transaction(fn, opts): the retry loop is Lua's (mongostore.transaction)
core.Database.transaction = transaction.run

local C = core.Collection
local FILTER, FILTER_OPT = { "filter", "table" }, { "filter", "table?" }
wrap(C, "insert_one", { { "doc", "table" } }, S)
wrap(C, "insert_many", { { "docs", "table" } }, with_session { ordered = "boolean" })
wrap(C, "find_one", { FILTER_OPT },
  with_session { projection = "table", sort = "table", skip = "number", hint = "hint", sanitize = "boolean" }, 1)
wrap(C, "find", { FILTER_OPT }, with_session {
  projection = "table", sort = "table", skip = "number", limit = "number", batch_size = "number", hint = "hint",
  sanitize = "boolean",
}, 1)
wrap(C, "count", { FILTER_OPT },
  with_session { skip = "number", limit = "number", hint = "hint", sanitize = "boolean" }, 1)
local UPDATE_OPTS = with_session { upsert = "boolean", sanitize = "boolean" }
local FILTER_OPTS = with_session { sanitize = "boolean" }
wrap(C, "update_one", { FILTER, { "update", "table" } }, UPDATE_OPTS, 1)
wrap(C, "update_many", { FILTER, { "update", "table" } }, UPDATE_OPTS, 1)
wrap(C, "replace_one", { FILTER, { "replacement", "table" } }, UPDATE_OPTS, 1)
wrap(C, "delete_one", { FILTER }, FILTER_OPTS, 1)
wrap(C, "delete_many", { FILTER }, FILTER_OPTS, 1)
wrap(C, "find_one_and_update", { FILTER, { "update", "table" } },
  with_session { new = "boolean", upsert = "boolean", sort = "table", projection = "table", sanitize = "boolean" },
  1)
wrap(C, "find_one_and_delete", { FILTER }, with_session { sort = "table", projection = "table", sanitize = "boolean" },
  1)
wrap(C, "bulk_write", { { "ops", "table" } }, with_session { ordered = "boolean" })
wrap(C, "aggregate", { { "pipeline", "table" } }, with_session { batch_size = "number", hint = "hint" })
wrap(C, "distinct", { { "field", "string" }, FILTER_OPT }, FILTER_OPTS, 2)
wrap(C, "create_index", { { "keys", "table" } }, with_session {
  unique = "boolean", name = "string", partial_filter = "table", sparse = "boolean", expire_after = "number",
})
wrap(C, "list_indexes", {}, S)
wrap(C, "drop_index", { { "name", "string" } }, S)
wrap(C, "drop", {}, S)

local DATABASE_OPTS = { db = "string", wait = "number" }

--- mongostore.database(uri, { db = <the URI's>, wait = 30 }) -> Database, or nil, msg, code.
-- Same process-wide client pool as connect() for the same URI and wait.
function M.database(uri, opts)
  if type(uri) ~= "string" then error("database: uri must be a string, got " .. type(uri), 2) end
  if opts ~= nil then
    if type(opts) ~= "table" then error("database: opts must be a table or nil, got " .. type(opts), 2) end
    check_keys(opts, DATABASE_OPTS, "database", "option")
    for k, v in pairs(opts) do
      if type(v) ~= DATABASE_OPTS[k] then
        error(format("database: opts.%s must be a %s, got %s", k, DATABASE_OPTS[k], type(v)), 2)
      end
    end
  end
  return core.database(uri, opts)
end

M.Database = core.Database
M.Collection = core.Collection
M.Cursor = core.Cursor

return M
