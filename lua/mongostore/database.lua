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

-- Replaces t[name] (a C method) with one that checks its arguments first.
-- args: { { "filter", "table?" }, ... } before the options; known: the
-- option keys and their kinds (nil: the method takes no options). The
-- kinds are read once here; check_arg, which raises, runs only for an
-- argument that does not fit.
local function wrap(t, name, args, known)
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
      if known and opts ~= nil then check_opts(name, opts, known) end
      return f(self, a, opts)
    end
  else
    assert(nargs == 2, "wrap: at most two arguments before the options")
    t[name] = function(self, a, b, opts)
      if not ((a == nil and o1) or fits(a, k1)) then check_arg(name, args[1][1], a, args[1][2]) end
      if not ((b == nil and o2) or fits(b, k2)) then check_arg(name, args[2][1], b, args[2][2]) end
      if known and opts ~= nil then check_opts(name, opts, known) end
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
  with_session { projection = "table", sort = "table", skip = "number", hint = "hint" })
wrap(C, "find", { FILTER_OPT }, with_session {
  projection = "table", sort = "table", skip = "number", limit = "number", batch_size = "number", hint = "hint",
})
wrap(C, "count", { FILTER_OPT }, with_session { skip = "number", limit = "number", hint = "hint" })
wrap(C, "update_one", { FILTER, { "update", "table" } }, with_session { upsert = "boolean" })
wrap(C, "update_many", { FILTER, { "update", "table" } }, with_session { upsert = "boolean" })
wrap(C, "replace_one", { FILTER, { "replacement", "table" } }, with_session { upsert = "boolean" })
wrap(C, "delete_one", { FILTER }, S)
wrap(C, "delete_many", { FILTER }, S)
wrap(C, "find_one_and_update", { FILTER, { "update", "table" } },
  with_session { new = "boolean", upsert = "boolean", sort = "table", projection = "table" })
wrap(C, "find_one_and_delete", { FILTER }, with_session { sort = "table", projection = "table" })
wrap(C, "bulk_write", { { "ops", "table" } }, with_session { ordered = "boolean" })
wrap(C, "aggregate", { { "pipeline", "table" } }, with_session { batch_size = "number", hint = "hint" })
wrap(C, "distinct", { { "field", "string" }, FILTER_OPT }, S)
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
