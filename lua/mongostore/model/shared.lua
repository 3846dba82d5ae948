-- mongostore.model.shared - what the parts of mongostore.model share: the failure
-- shape, the per-document state (snapshots, deletions, transaction journals),
-- path and scope helpers, a client's values taken as data (ids, filters) and
-- the checked update every write path sends.
local core = require "mongostore.core"
local query = require "mongostore.query"
local track = require "mongostore.track"
local schema = require "mongostore.schema"

local type, error, pairs, ipairs, next, select, setmetatable, getmetatable, rawget, rawset, tostring, pcall =
  type, error, pairs, ipairs, next, select, setmetatable, getmetatable, rawget, rawset, tostring, pcall
local format = string.format
local concat = table.concat
local byte = string.byte
local null = core.null
local array = core.array
local date = core.date
local copy = track.copy
local to_update = query.update
local check_value = schema.check_value
local field_at = schema.field_at
local mark_value = schema.mark_value

local P = {}

-- ------------------------------------------------------------ failures

-- nil, message, code, detail: the message a string, every structured fact in
-- detail. A driver's detail (its labels, server_code) stays the detail table,
-- the model's own facts added to it, so a transient failure returned from a
-- transaction's fn runs it again.
local function fail(code, message, detail)
  return nil, message, code, detail
end

-- A failure of the document API handed on: its message (a string), its code
-- and its detail table as they came.
local function driver_fail(msg, code, detail)
  return nil, tostring(msg), code or "server", detail
end

-- ------------------------------------------------------------ instance state

-- The snapshot of each tracked document (what it was when last read or
-- written), and the documents deleted for good. Weak keys: a document
-- dropped by its caller takes its state with it.
local snaps = setmetatable({}, { __mode = "k" })
local gone = setmetatable({}, { __mode = "k" })

-- The journal of the transaction a raw session runs (registry:transaction,
-- registry:session): the state of every document written in it before its
-- first write there, to put back on abort and before a retry.
local journals = setmetatable({}, { __mode = "k" })

local Session = {}   -- registry:session()'s wrapper
Session.__index = Session

-- Each call's own options, as docs/api.lua gives them; any other key raises,
-- naming the call. model.options takes those of the calls it is given to
-- (Model:update, Model:upsert, q:update); each of them checks its own.
local function keys(...)
  local t = {}
  for i = 1, select("#", ...) do t[(select(i, ...))] = true end
  return t
end

local OPTS = {
  ["Model:insert"] = keys("session", "validate"),
  ["Model:get"] = keys("session", "unscoped"),
  ["Model:count"] = keys("session", "unscoped"),
  ["Model:distinct"] = keys("session", "unscoped"),
  ["Model:lean"] = keys("session", "unscoped"),
  ["Model:aggregate"] = keys("session", "unscoped"),
  ["Model:update"] = keys("session", "validate", "unscoped"),
  ["Model:upsert"] = keys("session", "validate", "unscoped"),
  ["Model:delete"] = keys("session", "hard"),
  ["Model:restore"] = keys("session"),
  ["Model:exists"] = keys("session", "unscoped"),
  ["Model:insert_many"] = keys("session", "validate", "ordered"),
  ["Model:bulk_save"] = keys("session", "validate"),
  ["Model:bulk_write"] = keys("session", "validate", "unscoped", "ordered"),
  ["doc:save"] = keys("session", "validate"),
  ["doc:insert"] = keys("session", "validate"),
  ["doc:delete"] = keys("session", "hard"),
  ["doc:reload"] = keys("session", "unscoped"),
  ["q:all"] = keys("session"),
  ["q:first"] = keys("session"),
  ["q:one"] = keys("session"),
  ["q:lean"] = keys("session"),
  ["q:count"] = keys("session"),
  ["q:distinct"] = keys("session"),
  ["q:each"] = keys("session"),
  ["q:update"] = keys("session", "validate"),
  ["q:delete"] = keys("session", "hard"),
  ["model.options"] = keys("session", "validate", "unscoped"),
}

-- Raises at the caller of the method (level: 3, the method's caller, unless a
-- helper between them says more).
local function check_opts(fn, opts, allowed, level)
  if opts == nil then return end
  allowed = allowed or OPTS[fn]
  level = level or 3
  if type(opts) ~= "table" then error(format("%s: opts must be a table or nil, got %s", fn, type(opts)), level) end
  for k in pairs(opts) do
    if not allowed[k] then error(format("%s: unknown option %s", fn, tostring(k)), level) end
  end
end

-- opts.session -> the raw session, and its transaction's journal.
local function session_of(opts)
  local s = opts and opts.session
  if s == nil then return nil, nil end
  if getmetatable(s) == Session then s = s.raw end
  return s, journals[s]
end

local function dopts(raw)
  if raw == nil then return nil end
  return { session = raw }
end

-- Notes a document's state in a journal before its first write in the
-- transaction: its snapshot (kept unchanged: later writes use a copy), its
-- flags, and the fields the model itself writes.
local function journal_note(journal, C, doc)
  if journal == nil or journal.by_doc[doc] then return end
  local snap = snaps[doc]
  local entry = { doc = doc, C = C, snap = snap, gone = gone[doc], vals = {} }
  for _, name in ipairs(C._managed) do entry.vals[name] = rawget(doc, name) end
  journal.by_doc[doc] = entry
  journal[#journal + 1] = entry
  if snap ~= nil then snaps[doc] = copy(snap) end
end

local function journal_rollback(journal)
  for i = #journal, 1, -1 do
    local e = journal[i]
    local doc = e.doc
    snaps[doc] = e.snap
    gone[doc] = e.gone
    for _, name in ipairs(e.C._managed) do rawset(doc, name, e.vals[name]) end
    journal[i] = nil
  end
  journal.by_doc = {}
end

local function new_journal() return { by_doc = {} } end

-- ------------------------------------------------------------ helpers

local function rename(path)
  if path == "id" then return "_id" end
  if path:sub(1, 3) == "id." then return "_id" .. path:sub(3) end
  return path
end

local function now() return date() end

-- The field bulk_save stamps on every document it updates: a value unique to
-- that one op of that one call (the call's ObjectId and the op's index). When
-- fewer updates matched than were sent, the read that follows tells a write of
-- this call from another writer's by it alone: a revision or a timestamp can be
-- another writer's too (a single bump in the same millisecond). Tracked
-- documents never hold it: reads drop it, saves and checks skip it.
local TOKEN = "_bulk"

local function class_of(doc)
  local mt = getmetatable(doc)
  return type(mt) == "table" and rawget(mt, "class") or nil
end

local function bound(C, fn)
  local coll = C._coll
  if coll == nil then error(format("%s: the model %s is not in a registry (model.registry(db, { %s }))",
    fn, C.name, C.name), 3) end
  return coll
end

-- Sets path (dotted) to v inside t, making documents on the way.
local find = string.find

local function put_path(t, path, v)
  if not find(path, ".", 1, true) then t[path] = v; return end
  local start = 1
  while true do
    local dot = path:find(".", start, true)
    if not dot then break end
    local k = path:sub(start, dot - 1)
    local nt = t[k]
    if type(nt) ~= "table" then nt = {}; t[k] = nt end
    t = nt
    start = dot + 1
  end
  t[path:sub(start)] = v
end

local function drop_path(t, path)
  if not find(path, ".", 1, true) then t[path] = nil; return end
  local start = 1
  while true do
    local dot = path:find(".", start, true)
    if not dot then break end
    t = t[path:sub(start, dot - 1)]
    if type(t) ~= "table" then return end
    start = dot + 1
  end
  t[path:sub(start)] = nil
end

-- The soft-delete scope added to a filter (a fresh table from query.filter).
local function scope(C, filter, unscoped)
  local soft = C._soft
  if soft == nil or unscoped then return filter end
  if filter[soft] ~= nil then
    return { ["$and"] = array { filter, { [soft] = null } } }
  end
  filter[soft] = null
  return filter
end

-- ------------------------------------------------------------ client values

-- A client's value never reaches the server as an operator: plain-table
-- filters compare values as data (query.client_filter), cast to the field's
-- declared type where the conversion is exact; ids are cast or refused.
local cast_value, client_filter, refuse, describe = query.cast_value, query.client_filter, query.refuse,
  query.describe
local HATCH = "model.trusted(filter)"

local is_regex = query.is_regex

-- v cast to the field f (its type, or its elements' for an array field given
-- one element), or nil, why. Numbers pass numeric fields as they are (a
-- comparison with 2.5 on an integer field is a fair question).
local function cast_field(f, v)
  local t = f.type
  if t == "array" then
    if type(v) == "table" then return v end
    f = f.of
    if not f then return v end
    t = f.type
  end
  if t == "any" or t == "document" then return v end
  if t == "decimal" or t == "binary" then
    if f.test(v) then return v end
  elseif (t == "integer" or t == "number") and type(v) == "number" then
    return v
  else
    local x = cast_value(t, v)
    if x ~= nil then return x end
  end
  return nil, format("it is %s, and %s is not one", f.words, describe(v))
end

local function id_field_of(C) return C._id_field end

-- ctx.cast of the model's filters: path (renamed: _id) and a client's value.
local function filter_cast(ctx, path, v)
  if v == null then return v end
  if is_regex(v) then
    refuse(format("%s: field '%s' holds a regular expression; match patterns with Q.%s:regex(...) or %s",
      ctx.fn, path, path == "_id" and "id" or path, HATCH))
  end
  local C = ctx.C
  local f
  if path == "_id" then f = id_field_of(C) else f = field_at(C._schema, path) end
  if not f then return v end -- undeclared (inside an any, or an element path): compared as given
  local x, why = cast_field(f, v)
  if x == nil then refuse(format("%s: field '%s' cannot take the value: %s", ctx.fn, path, why)) end
  return x
end

local function filter_field() end

local function filter_ctx(C)
  local ctx = { fn = "find " .. C.name, hatch = HATCH, cast = filter_cast, field = filter_field, C = C,
                elem = query.elem_ctx("find " .. C.name, HATCH) }
  return ctx
end

-- The filter of a model call: (filter) or (nil, the refusal).
local function model_filter(C, q)
  return client_filter(q, rename, C._fctx)
end

-- The id of a model call cast to the declared _id type: (id) or (nil, msg).
-- A table never reaches the server as an id.
local function id_of(C, id, fn)
  if type(id) == "table" and class_of(id) == C then id = rawget(id, "_id") end
  if id == nil or id == null then
    return nil, format("%s %s: the id is missing (got %s)", fn or "model", C.name, id == nil and "nil" or "null")
  end
  local x, why = cast_field(id_field_of(C), id)
  if x == nil or type(x) == "table" then
    return nil, format("%s %s: the id cannot be taken: %s", fn or "model", C.name,
      why or ("it is " .. id_field_of(C).words .. ", and " .. describe(id) .. " is not one"))
  end
  return x
end

-- Takes a document in as tracked: its snapshot, then the model's metatable
-- (the snapshot is copied first, so it keeps the read's shapes and no method).
-- A stored deleted_at of null (an upsert's, a restore's) reads as absent, so
-- `if doc.deleted_at` means deleted.
local function adopt(C, raw)
  local soft = C._soft
  if soft and rawget(raw, soft) == null then rawset(raw, soft, nil) end
  if rawget(raw, TOKEN) ~= nil then rawset(raw, TOKEN, nil) end
  snaps[raw] = copy(raw)
  return setmetatable(raw, C._imt)
end

local function validation_error(C, doing, errs)
  local words = {}
  for i, e in ipairs(errs) do words[i] = e.message end
  return fail("validation", format("%s %s: %s", doing, C.collection, concat(words, "; ")), { errors = errs })
end

local function wants_validation(C, opts)
  if opts and opts.validate == false then return false end
  return C.validate_writes
end

-- ------------------------------------------------------------ update checks

local NUMERIC = { integer = true, number = true, any = true }

-- Checks an update document (after query.update) against the model: a path
-- that is not a declared field, the id, an immutable field or one the model
-- writes itself (its revision, updated_at, created_at, deleted_at), through
-- any operator, $rename's destinations too, make the update invalid: the
-- second value is the message. Wrong values are listed as validation errors
-- (the first value). allow: "delete" (the model's own soft delete sets
-- deleted_at), "restore" (an unscoped update may clear it: the seed's restore).
local function check_path(C, fn, op, path, value, allow)
  local top = path:match("^[^.]+")
  if top == "_id" then return format("%s: %s.id is immutable", fn, C.name) end
  if C._immutable[top] then return format("%s: %s.%s is immutable", fn, C.name, top) end
  if C._auto[top] then
    return format("%s: %s.%s is written by the model (its %s)", fn, C.name, top, C._auto[top])
  end
  if top == C._soft and allow ~= "delete" then
    if allow == "restore" and path == top and (op == "$unset" or (op == "$set" and value == null)) then
      return nil
    end
    return format("%s: %s.%s is written by the model (its soft delete: delete and restore)", fn, C.name, top)
  end
  local f, why = field_at(C._schema, path)
  if f == nil then return format("%s: %s is not a field of %s (%s)", fn, path, C.name, why) end
  return nil, f
end

local function check_update(C, doc, fn, validate, allow)
  local errs = {}
  -- the update's sections read in place (query.paths would list and sort them)
  for op, fields in pairs(doc) do
    for path, value in pairs(fields) do
      local each = type(value) == "table" and rawget(value, "$each") or nil
      local bad, f = check_path(C, fn, op, path, value, allow)
      if bad then return nil, bad end
      if op == "$rename" then
        if type(value) ~= "string" or value == "" then
          return nil, format("%s: $rename of %s must name a field, got %s", fn, path, describe(value))
        end
        bad = check_path(C, fn, op, value, nil, allow)
        if bad then return nil, bad .. " ($rename's destination)" end
      end
      -- array marks whether or not the values are validated (an empty table is sent as [])
      if f and type(value) == "table" then
        if op == "$set" or op == "$setOnInsert" or op == "$min" or op == "$max" then
          mark_value(f, value)
        elseif (op == "$push" or op == "$addToSet") and f.of then
          if each then
            for i = 1, #each do mark_value(f.of, each[i]) end
          else
            mark_value(f.of, value)
          end
        end
      end
      if validate and f then
        local t = f.type
        if op == "$set" or op == "$setOnInsert" or op == "$min" or op == "$max" then
          local v = value
          if v == null then
            if f.required then errs[#errs + 1] = { field = path, message = path .. " is required" } end
          else
            check_value(f, v, path, errs)
          end
        elseif op == "$unset" then
          if f.required then errs[#errs + 1] = { field = path, message = path .. " is required (cannot be unset)" } end
        elseif op == "$inc" or op == "$mul" then
          if not NUMERIC[t] then
            errs[#errs + 1] = { field = path, message = format("%s is %s, not a number (%s)", path, f.words, op) }
          elseif t == "integer" then
            check_value(f, value, path, errs)
          end
        elseif op == "$push" or op == "$addToSet" or op == "$pull" or op == "$pop" or op == "$pullAll" then
          if t ~= "array" and t ~= "any" then
            errs[#errs + 1] = { field = path, message = format("%s is %s, not an array (%s)", path, f.words, op) }
          elseif (op == "$push" or op == "$addToSet") and f.of then
            local items = each or { value }
            for i = 1, #items do check_value(f.of, items[i], path .. "[]", errs) end
          end
        elseif op == "$currentDate" then
          if t ~= "date" and t ~= "any" then
            errs[#errs + 1] = { field = path, message = format("%s is %s, not a date (%s)", path, f.words, op) }
          end
        end
      end
    end
  end
  if #errs > 0 then
    table.sort(errs, function(x, y) return x.field < y.field end)
    return errs
  end
  return nil
end

-- A plain update table is data: its keys are fields ($set), and neither a key
-- nor a value anywhere in it is an operator. Operators come from ops.* or a
-- table marked with model.trusted. -> nil, or the message.
local is_op, is_trusted, find_dollar, find_js = query.is_op, query.is_trusted, query.find_dollar, query.find_js

local function check_items(C, list, fn)
  for i = 1, #list do
    local item = list[i]
    if type(item) == "table" and not is_op(item) then
      if is_trusted(item) then
        local js = find_js(item)
        if js then return format("%s %s: %s is refused (it runs JavaScript on the server)", fn, C.name, js) end
      else
        for k, v in pairs(item) do
          if type(k) ~= "string" then
            return format("%s %s: the update's key %s is not a field name", fn, C.name, describe(k))
          end
          if byte(k, 1) == 36 then
            return format("%s %s: the update's key %s is an operator; write operators with ops (ops.inc, ...) or "
              .. "model.trusted(update)", fn, C.name, k)
          end
          if type(v) == "table" then
            local op = find_dollar(v)
            if op then
              return format("%s %s: field '%s' holds an operator key (%s); a plain update sets values, and "
                .. "operators come from ops (ops.set, ...) or model.trusted(update)", fn, C.name, k, op)
            end
          end
        end
      end
    end
  end
  return nil
end

-- The update a write path sends: the caller's pieces, checked, then the
-- model's own fields: the revision incremented, updated_at now; an upsert
-- also sets created_at and the defaults on insert. -> doc, at, or nil, errs
-- (validation), or nil, nil, message (invalid).
local function build_update(C, list, fn, validate, upsert_filter, allow)
  if #list == 0 then error(fn .. ": no update given", 4) end
  local bad = check_items(C, list, fn)
  if bad then return nil, nil, bad end
  local ok, doc = pcall(to_update, list, rename)
  if not ok then return nil, nil, format("%s %s: %s", fn, C.name, (tostring(doc):gsub("^[^:]*:%d+: ", ""))) end
  local errs
  errs, bad = check_update(C, doc, fn, validate, allow)
  if bad then return nil, nil, bad end
  if errs then return nil, errs end
  local at = now()
  local r = C._roles
  if r.revision then
    local inc = doc["$inc"]
    if inc == nil then inc = {}; doc["$inc"] = inc end
    inc[r.revision] = 1
  end
  if r.updated_at then
    local set = doc["$set"]
    if set == nil then set = {}; doc["$set"] = set end
    set[r.updated_at] = at
  end
  if upsert_filter then
    local soi = doc["$setOnInsert"]
    if soi == nil then soi = {}; doc["$setOnInsert"] = soi end
    if r.created_at then soi[r.created_at] = at end
    -- defaults of the fields neither the update nor the filter's equalities give
    local touched = {}
    for _, fields in pairs(doc) do
      for path in pairs(fields) do touched[path:match("^[^.]+")] = true end
    end
    for k in pairs(upsert_filter) do touched[k] = true end
    for _, d in ipairs(C._defaults) do
      if not touched[d.name] then
        local v = d.value
        if type(v) == "function" then v = v() else v = copy(v) end
        soi[d.name] = v
      end
    end
    if next(soi) == nil then doc["$setOnInsert"] = nil end
  end
  return doc, at
end

-- Splits a method's varargs into update pieces and a model.options table.
local Options = { __name = "mongostore.model.Options" }

function P.options(t)
  if type(t) ~= "table" then error("model.options: t must be a table, got " .. type(t), 2) end
  check_opts("model.options", t)
  local o = {}
  for k, v in pairs(t) do o[k] = v end
  return setmetatable(o, Options)
end

local function update_fail(C, doing, errs, bad)
  if bad then return fail("invalid", bad) end
  return validation_error(C, doing, errs)
end

local function split_args(...)
  local list, opts = {}, nil
  for i = 1, select("#", ...) do
    local v = (select(i, ...))
    if getmetatable(v) == Options then opts = v
    elseif v ~= nil then list[#list + 1] = v end
  end
  return list, opts
end

for k, v in pairs {
  fail = fail,
  driver_fail = driver_fail,
  snaps = snaps,
  gone = gone,
  journals = journals,
  Session = Session,
  OPTS = OPTS,
  check_opts = check_opts,
  session_of = session_of,
  dopts = dopts,
  journal_note = journal_note,
  journal_rollback = journal_rollback,
  new_journal = new_journal,
  rename = rename,
  now = now,
  TOKEN = TOKEN,
  class_of = class_of,
  bound = bound,
  find = find,
  put_path = put_path,
  drop_path = drop_path,
  scope = scope,
  cast_value = cast_value,
  client_filter = client_filter,
  refuse = refuse,
  describe = describe,
  HATCH = HATCH,
  is_regex = is_regex,
  cast_field = cast_field,
  id_field_of = id_field_of,
  filter_cast = filter_cast,
  filter_field = filter_field,
  filter_ctx = filter_ctx,
  model_filter = model_filter,
  id_of = id_of,
  adopt = adopt,
  validation_error = validation_error,
  wants_validation = wants_validation,
  NUMERIC = NUMERIC,
  check_path = check_path,
  check_update = check_update,
  is_op = is_op,
  is_trusted = is_trusted,
  find_dollar = find_dollar,
  find_js = find_js,
  check_items = check_items,
  build_update = build_update,
  Options = Options,
  update_fail = update_fail,
  split_args = split_args,
} do P[k] = v end

return P
