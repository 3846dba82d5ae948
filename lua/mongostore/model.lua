-- mongostore.model - models on the document API: define (fields, roles, indexes),
-- tracked instances (a snapshot at load, the difference at save), atomic updates,
-- revisions, timestamps, soft delete, bulk writes, and registries that bind models
-- to a database and run transactions with in-memory rollback.
local core = require "mongostore.core"
local query = require "mongostore.query"
local track = require "mongostore.track"
local schema = require "mongostore.schema"

local type, error, pairs, ipairs, next, select, setmetatable, getmetatable, rawget, rawset, tostring, pcall =
  type, error, pairs, ipairs, next, select, setmetatable, getmetatable, rawget, rawset, tostring, pcall
local format, concat, byte = string.format, table.concat, string.byte
local unpack = table.unpack or unpack  -- luacheck: ignore 143

local null, array, objectid, date = core.null, core.array, core.objectid, core.date
local copy, equal, diff, snapshot = track.copy, track.equal, track.diff, track.snapshot
local to_filter, to_update = query.filter, query.update
local check_doc, check_value, field_at = schema.check, schema.check_value, schema.field_at
local mark, mark_value = schema.mark, schema.mark_value

local M = {}
M.Q, M.ops = query.Q, query.ops

-- ------------------------------------------------------------ errors

local Error = {}
Error.__index = Error
Error.__name = "mongostore.model.Error"
Error.__tostring = function(e) return e.message end

local function new_error(code, message, fields)
  local e = fields or {}
  e.code, e.message = code, message
  return setmetatable(e, Error)
end

-- nil, err, code[, detail]: the fourth value keeps a driver's labels, so a
-- transient failure returned from a transaction's fn runs it again.
local function fail(code, message, fields)
  local e = new_error(code, message, fields)
  return nil, e, code, e.detail
end

local function driver_fail(msg, code, detail)
  return fail(code or "server", tostring(msg), { detail = detail })
end

function M.is_error(x) return getmetatable(x) == Error end

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

local OPTS = { session = true, validate = true, unscoped = true, hard = true, ordered = true }

local function check_opts(fn, opts, allowed)
  if opts == nil then return end
  if type(opts) ~= "table" then error(format("%s: opts must be a table or nil, got %s", fn, type(opts)), 3) end
  for k in pairs(opts) do
    if not allowed[k] then error(format("%s: unknown option %s", fn, tostring(k)), 3) end
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

local function is_regex(v)
  if type(v) ~= "userdata" then return false end
  local mt = getmetatable(v)
  return type(mt) == "table" and rawget(mt, "__name") == "mongostore.Regex"
end

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

function M.options(t)
  if type(t) ~= "table" then error("options: t must be a table, got " .. type(t), 2) end
  check_opts("options", t, OPTS)
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

-- ------------------------------------------------------------ instances

local Instance = {}  -- the methods of every model's documents

local function ensure_defaults(C, t)
  local defaults = C._defaults
  for i = 1, #defaults do
    local d = defaults[i]
    local name = d.name
    if rawget(t, name) == nil then
      local v = d.value
      if d.call then v = v() elseif d.copy then v = copy(v) end
      rawset(t, name, v)
    end
  end
end

-- Takes the model's own fields of a write, to put back when it fails (a
-- new document has none: one shared empty table stands for that).
local NONE = setmetatable({}, { __newindex = function() error("model: NONE is read-only", 2) end })

local function save_managed(C, doc)
  local managed = C._managed
  local vals
  for i = 1, #managed do
    local name = managed[i]
    local v = rawget(doc, name)
    if v ~= nil then
      vals = vals or {}
      vals[name] = v
    end
  end
  return vals or NONE
end

local function restore_managed(C, doc, vals)
  local managed = C._managed
  for i = 1, #managed do
    local name = managed[i]
    rawset(doc, name, vals[name])
  end
end

local NO_SNAPSHOT = "the document has no snapshot (it is not from a tracked read: a lean() result or a copy), "
  .. "so save tried to insert it and its _id is taken; read it with get or find, or adopt a raw document "
  .. "with %s:hydrate(raw)"

-- The one preparation of a document about to be inserted, for every insert
-- path (insert, a save of a new document, insert_many, bulk_save,
-- bulk_write): its defaults, the array marks, the check (a model whose ids are
-- not ObjectIds needs an id: the server would make one up), then the journal
-- note and the model's own fields (the id, the timestamps, revision 0).
-- Returns the values to put back if the write fails (restore_managed), or
-- nil and the errors, with nothing set.
local ID_REQUIRED = { field = "id", message = "id is required (the model's ids are not ObjectIds)" }

local function prepare_insert(C, doc, validate, journal, at)
  ensure_defaults(C, doc)
  mark(C._schema, doc)
  local errs = validate and check_doc(C._schema, doc, C._check_skip) or nil
  local no_id = rawget(doc, "_id") == nil
  if no_id and not C._oid then
    errs = errs or {}
    table.insert(errs, 1, { field = ID_REQUIRED.field, message = ID_REQUIRED.message })
  end
  if errs then return nil, errs end
  journal_note(journal, C, doc)
  local vals = save_managed(C, doc)
  if no_id then rawset(doc, "_id", objectid()) end
  local r = C._roles
  if r.created_at then rawset(doc, r.created_at, at) end
  if r.updated_at then rawset(doc, r.updated_at, at) end
  if r.revision then rawset(doc, r.revision, 0) end
  return vals
end

-- A bulk path's item to insert: a document of this model not stored yet, or
-- a table of fields made one (Model:new).
local function insert_item(C, doc, fn, i)
  if type(doc) ~= "table" then error(format("%s: item %d must be a table, got %s", fn, i, type(doc)), 3) end
  if class_of(doc) ~= C then return C:new(doc) end
  if snaps[doc] then error(format("%s: item %d is stored already", fn, i), 3) end
  return doc
end

-- Inserts a new document (or one with no snapshot), all put back if the
-- server refuses it.
local function insert_doc(C, doc, opts, fn)
  local coll = bound(C, fn)
  if gone[doc] then return fail("not_found", format("%s %s: the document was deleted", fn, C.collection)) end
  local raw, journal = session_of(opts)
  local r = C._roles
  local vals, errs = prepare_insert(C, doc, wants_validation(C, opts), journal,
    (r.created_at or r.updated_at) and now())
  if not vals then return validation_error(C, fn, errs) end
  local had_id = vals._id ~= nil
  local ok, msg, code, detail = coll:insert_one(doc, dopts(raw))
  if not ok then
    restore_managed(C, doc, vals)
    if code == "duplicate" and had_id and fn == "save" then
      msg = tostring(msg) .. "; " .. format(NO_SNAPSHOT, C.name)
    end
    return driver_fail(msg, code, detail)
  end
  snaps[doc] = snapshot(doc)
  return doc
end

-- Zero matches: stale when the document is there (at another revision),
-- not_found when it is not (or is hidden by the soft-delete scope).
local function stale_or_missing(C, doc, fn, raw, unscoped)
  local id = rawget(doc, "_id")
  local f = scope(C, { _id = id }, unscoped)
  local found, msg, code, detail = C._coll:find_one(f, { session = raw, projection = C._rev_projection })
  if found == nil and msg ~= nil then return driver_fail(msg, code, detail) end
  if found then
    local rev = C._roles.revision
    return fail("stale", format("%s %s: document %s is at revision %s, this copy at %s: reload it", fn,
      C.collection, tostring(id), tostring(rev and found[rev]), tostring(rev and rawget(doc, rev))))
  end
  return fail("not_found", format("%s %s: no document %s", fn, C.collection, tostring(id)))
end

-- What a save sends for a tracked document: the update, and how many paths
-- changed (0: nothing to send). Raises on a change to the id or an immutable field.
local function delta(C, doc, snap, fn)
  if not equal(rawget(doc, "_id"), snap._id) then error(format("%s: %s.id is immutable", fn, C.name), 4) end
  local immutable = C._immutable_list
  for i = 1, #immutable do
    local name = immutable[i]
    if not equal(rawget(doc, name), snap[name]) then error(format("%s: %s.%s is immutable", fn, C.name, name), 4) end
  end
  return diff(snap, doc, C._diff_opts)
end

-- The update document of a save, and the filter that guards it.
local function save_update(C, snap, set, unset, at, token)
  local u = {}
  local r = C._roles
  if r.updated_at then set[r.updated_at] = at end
  if token then
    -- a copy: `set` is what the snapshot takes after the write, the token is not
    local s = { [TOKEN] = token }
    for k, v in pairs(set) do s[k] = v end
    u["$set"] = s
  elseif next(set) then
    u["$set"] = set
  end
  if next(unset) then u["$unset"] = unset end
  local f = { _id = snap._id }
  if r.revision then
    u["$inc"] = { [r.revision] = 1 }
    f[r.revision] = snap[r.revision]
  end
  -- a deleted document (in memory) is written as such; any other is scoped
  local soft = C._soft
  local unscoped = soft ~= nil and snap[soft] ~= nil and snap[soft] ~= null
  return u, scope(C, f, unscoped), unscoped
end

-- After a write: the document's own fields and its snapshot brought in sync.
local function applied(C, doc, snap, set, unset, at)
  for path, v in pairs(set) do put_path(snap, path, v) end
  for path in pairs(unset) do drop_path(snap, path) end
  local r = C._roles
  if r.updated_at then rawset(doc, r.updated_at, at); snap[r.updated_at] = at end
  if r.revision then
    local n = (snap[r.revision] or 0) + 1
    rawset(doc, r.revision, n)
    snap[r.revision] = n
  end
end

-- The model of a document method's self; a dot for a colon (doc.save())
-- raises naming the method.
local function doc_class(doc, fn)
  local C = class_of(doc)
  if C == nil then
    error(format("%s: call it with a colon, doc:%s(...), not with a dot (the document came as %s)", fn, fn,
      type(doc)), 3)
  end
  return C
end

function Instance:save(opts)
  local C = doc_class(self, "save")
  check_opts("save", opts, OPTS)
  local snap = snaps[self]
  if snap == nil then return insert_doc(C, self, opts, "save") end
  local coll = bound(C, "save")
  if gone[self] then return fail("not_found", format("save %s: the document was deleted", C.collection)) end
  mark(C._schema, self)
  local set, unset, n = delta(C, self, snap, "save")
  if n == 0 then return self end
  if wants_validation(C, opts) then
    local errs = check_doc(C._schema, self, C._check_skip)
    if errs then return validation_error(C, "save", errs) end
  end
  local raw, journal = session_of(opts)
  local at = now()
  local u, f, unscoped = save_update(C, snap, set, unset, at)
  local r, msg, code, detail = coll:update_one(f, u, dopts(raw))
  if not r then return driver_fail(msg, code, detail) end
  if r.matched == 0 then return stale_or_missing(C, self, "save", raw, unscoped) end
  journal_note(journal, C, self)
  applied(C, self, snaps[self], set, unset, at)
  return self
end

function Instance:insert(opts)
  local C = doc_class(self, "insert")
  check_opts("insert", opts, OPTS)
  if snaps[self] then error(format("insert: this %s is stored already (save it)", C.name), 2) end
  return insert_doc(C, self, opts, "insert")
end

--- a:changes() -> { ["$set"] = {...}, ["$unset"] = {...} }, what save would send ({} when nothing).
function Instance:changes()
  local C = doc_class(self, "changes")
  mark(C._schema, self)  -- as save does, so what is shown is what save sends
  local set, unset, n = diff(snaps[self], self, C._diff_opts)
  local out = {}
  if n > 0 then
    if next(set) then out["$set"] = set end
    if next(unset) then out["$unset"] = unset end
  end
  return out
end

function Instance:delete(opts)
  local C = doc_class(self, "delete")
  check_opts("delete", opts, OPTS)
  local coll = bound(C, "delete")
  local snap = snaps[self]
  if snap == nil then error(format("delete: this %s is not stored (or not from a tracked read)", C.name), 2) end
  if gone[self] then
    return fail("not_found", format("delete %s: document %s is deleted already (for good)", C.collection,
      tostring(rawget(self, "_id"))))
  end
  local raw, journal = session_of(opts)
  local r = C._roles
  local soft = C._soft
  if soft and not (opts and opts.hard) then
    -- soft-deleted as last read or written: nothing to delete, and deleted_at
    -- and the revision stay where they are (delete { hard = true } removes it)
    local was = snap[soft]
    if was ~= nil and was ~= null then
      return fail("not_found", format("delete %s: document %s is deleted already (at %s)", C.collection,
        tostring(rawget(self, "_id")), tostring(was)))
    end
    local at = now()
    local set = { [soft] = at }
    local u, f, unscoped = save_update(C, snap, set, {}, at)
    local res, msg, code, detail = coll:update_one(f, u, dopts(raw))
    if not res then return driver_fail(msg, code, detail) end
    if res.matched == 0 then return stale_or_missing(C, self, "delete", raw, unscoped) end
    journal_note(journal, C, self)
    rawset(self, soft, at)
    applied(C, self, snaps[self], set, {}, at)
    return true
  end
  local f = { _id = snap._id }
  if r.revision then f[r.revision] = snap[r.revision] end
  local res, msg, code, detail = coll:delete_one(f, dopts(raw))
  if not res then return driver_fail(msg, code, detail) end
  if res.deleted == 0 then return stale_or_missing(C, self, "delete", raw, true) end
  journal_note(journal, C, self)
  gone[self] = true
  return true
end

function Instance:reload(opts)
  local C = doc_class(self, "reload")
  check_opts("reload", opts, OPTS)
  local coll = bound(C, "reload")
  local id = rawget(self, "_id")
  if id == nil then error("reload: the document has no id", 2) end
  local soft = C._soft
  local unscoped = (opts and opts.unscoped) or (soft and rawget(self, soft) ~= nil and rawget(self, soft) ~= null)
  local raw = session_of(opts)
  local doc, msg, code, detail = coll:find_one(scope(C, { _id = id }, unscoped), dopts(raw))
  if doc == nil then
    if msg ~= nil then return driver_fail(msg, code, detail) end
    return fail("not_found", format("reload %s: no document %s", C.collection, tostring(id)))
  end
  for k in pairs(self) do rawset(self, k, nil) end
  if soft and rawget(doc, soft) == null then rawset(doc, soft, nil) end
  rawset(doc, TOKEN, nil)
  for k, v in pairs(doc) do rawset(self, k, v) end
  snaps[self] = copy(doc)
  setmetatable(snaps[self], nil)
  gone[self] = nil
  return self
end

function Instance:to_table()
  doc_class(self, "to_table")
  local t = {}
  for k, v in pairs(self) do t[k] = copy(v) end
  return t
end

-- ------------------------------------------------------------ queries

local Query = {}
Query.__index = Query
Query.__name = "mongostore.model.Query"

-- A refused filter is kept in the query (bad) and returned by the call that
-- runs it: nothing is sent.
local function new_query(C, q)
  local filter, bad = model_filter(C, q)
  return setmetatable({ C = C, filter = filter or {}, bad = bad, opts = {}, unscoped_ = false, raw = nil }, Query)
end

function Query:sort(spec)
  if type(spec) ~= "table" then error("sort: spec must be a table, got " .. type(spec), 2) end
  local s = {}
  for i, pair in ipairs(spec) do
    if type(pair) == "table" then s[i] = { rename(pair[1]), pair[2] } else s = spec; break end
  end
  if #spec == 0 then
    s = {}
    for k, v in pairs(spec) do s[rename(k)] = v end
  end
  self.opts.sort = s
  return self
end

function Query:limit(n)
  if type(n) ~= "number" then error("limit: n must be a number, got " .. type(n), 2) end
  self.opts.limit = n
  return self
end

function Query:skip(n)
  if type(n) ~= "number" then error("skip: n must be a number, got " .. type(n), 2) end
  self.opts.skip = n
  return self
end

--- q:unscoped("soft_delete") (or q:unscoped()): the soft-deleted documents too.
function Query:unscoped(name)
  if name ~= nil and name ~= "soft_delete" then
    error("unscoped: the only scope is \"soft_delete\", got " .. tostring(name), 2)
  end
  self.unscoped_ = true
  return self
end

--- q:session(s): run the query's calls in the session (a raw Session or a registry's).
function Query:session(s)
  self.session_ = s
  return self
end

local function q_raw(self, opts)
  check_opts("query", opts, OPTS)
  local s = (opts and opts.session) or self.session_
  if getmetatable(s) == Session then s = s.raw end
  return s, journals[s or false]
end

local function q_filter(self)
  if self.bad then return nil, self.bad end
  local f = {}
  for k, v in pairs(self.filter) do f[k] = v end
  return scope(self.C, f, self.unscoped_)
end

local function find_opts(self, raw, limit)
  local o = {}
  for k, v in pairs(self.opts) do o[k] = v end
  if limit then o.limit = limit end
  o.session = raw
  return o
end

function Query:all(opts)
  local C = self.C
  local coll = bound(C, "all")
  local raw = q_raw(self, opts)
  local f, bad = q_filter(self)
  if not f then return fail("invalid", bad) end
  local cur, msg, code, detail = coll:find(f, find_opts(self, raw))
  if not cur then return driver_fail(msg, code, detail) end
  local docs
  docs, msg, code, detail = cur:all()
  if not docs then return driver_fail(msg, code, detail) end
  for i = 1, #docs do adopt(C, docs[i]) end
  return docs
end

--- q:lean(): the documents as read, untracked (plain tables).
function Query:lean(opts)
  local coll = bound(self.C, "lean")
  local raw = q_raw(self, opts)
  local f, bad = q_filter(self)
  if not f then return fail("invalid", bad) end
  local cur, msg, code, detail = coll:find(f, find_opts(self, raw))
  if not cur then return driver_fail(msg, code, detail) end
  local docs
  docs, msg, code, detail = cur:all()
  if not docs then return driver_fail(msg, code, detail) end
  return docs
end

function Query:first(opts)
  local C = self.C
  local coll = bound(C, "first")
  local raw = q_raw(self, opts)
  local o = find_opts(self, raw)
  o.limit = nil
  local f, bad = q_filter(self)
  if not f then return fail("invalid", bad) end
  local doc, msg, code, detail = coll:find_one(f, o)
  if doc == nil then
    if msg ~= nil then return driver_fail(msg, code, detail) end
    return nil
  end
  return adopt(C, doc)
end

--- q:one(): the one document that matches: not_found when none does, invalid when more than one.
function Query:one(opts)
  local C = self.C
  local coll = bound(C, "one")
  local raw = q_raw(self, opts)
  local f, bad = q_filter(self)
  if not f then return fail("invalid", bad) end
  local cur, msg, code, detail = coll:find(f, find_opts(self, raw, 2))
  if not cur then return driver_fail(msg, code, detail) end
  local docs
  docs, msg, code, detail = cur:all()
  if not docs then return driver_fail(msg, code, detail) end
  if #docs == 0 then return fail("not_found", format("one %s: no document matches", C.collection)) end
  if #docs > 1 then return fail("invalid", format("one %s: more than one document matches", C.collection)) end
  return adopt(C, docs[1])
end

function Query:count(opts)
  local coll = bound(self.C, "count")
  local raw = q_raw(self, opts)
  local o = { session = raw, skip = self.opts.skip, limit = self.opts.limit }
  local f, bad = q_filter(self)
  if not f then return fail("invalid", bad) end
  local n, msg, code, detail = coll:count(f, o)
  if not n then return driver_fail(msg, code, detail) end
  return n
end

function Query:distinct(field, opts)
  if type(field) ~= "string" then error("distinct: field must be a string, got " .. type(field), 2) end
  local coll = bound(self.C, "distinct")
  local raw = q_raw(self, opts)
  local f, bad = q_filter(self)
  if not f then return fail("invalid", bad) end
  local vals, msg, code, detail = coll:distinct(rename(field), f, dopts(raw))
  if not vals then return driver_fail(msg, code, detail) end
  return vals
end

--- for doc in q:each() do ... end: tracked documents one at a time; a failure raises.
function Query:each(opts)
  local C = self.C
  local coll = bound(C, "each")
  local raw = q_raw(self, opts)
  local f, bad = q_filter(self)
  if not f then error(bad, 2) end
  local cur, msg, code = coll:find(f, find_opts(self, raw))
  if not cur then error(format("%s (%s)", tostring(msg), tostring(code)), 2) end
  local step, state, init, closing = cur:each()
  return function(s, v)
    local doc = step(s, v)
    if doc == nil then return nil end
    return adopt(C, doc)
  end, state, init, closing
end

--- q:update(op, ...) -> n (documents modified), { matched =, modified = }; every match, none loaded.
function Query:update(...)
  local C = self.C
  local coll = bound(C, "update")
  local list, opts = split_args(...)
  local raw = q_raw(self, opts)
  local f, bad = q_filter(self)
  if not f then return fail("invalid", bad) end
  local u, errs
  u, errs, bad = build_update(C, list, "update", wants_validation(C, opts), nil,
    self.unscoped_ and "restore" or nil)
  if not u then return update_fail(C, "update", errs, bad) end
  local r, msg, code, detail = coll:update_many(f, u, dopts(raw))
  if not r then return driver_fail(msg, code, detail) end
  return r.modified, { matched = r.matched, modified = r.modified }
end

--- q:delete{ hard = } -> n: soft deletes (or removes) every match.
function Query:delete(opts)
  local C = self.C
  local coll = bound(C, "delete")
  local raw = q_raw(self, opts)
  local f, bad = q_filter(self)
  if not f then return fail("invalid", bad) end
  if C._soft and not (opts and opts.hard) then
    local u = build_update(C, { { [C._soft] = now() } }, "delete", false, nil, "delete")
    local r, msg, code, detail = coll:update_many(f, u, dopts(raw))
    if not r then return driver_fail(msg, code, detail) end
    return r.modified
  end
  local r, msg, code, detail = coll:delete_many(f, dopts(raw))
  if not r then return driver_fail(msg, code, detail) end
  return r.deleted
end

-- ------------------------------------------------------------ the model (class) methods

local Model = {}
Model.__index = Model

-- A class method called with a dot (Article.insert{...}) gets its first
-- argument as the model: said as such, before anything inside trips on it.
-- rawget: a plain table has no _meta, and nil == nil would let it through.
local function check_class(C, fn)
  local meta = type(C) == "table" and rawget(C, "_meta")
  if not meta or getmetatable(C) ~= meta then
    error(format("%s: call it with a colon, Model:%s(...), not with a dot (the model came as %s)", fn, fn,
      class_of(C) and "a document" or type(C)), 3)
  end
end

--- Model:new(fields) -> an unsaved document (the table itself, defaults filled in).
function Model:new(t)
  check_class(self, "new")
  if t == nil then t = {} end
  if type(t) ~= "table" then error("new: fields must be a table or nil, got " .. type(t), 2) end
  if snaps[t] then error("new: this table is a stored document already", 2) end
  local id = rawget(t, "id")
  -- an id that cannot be cast is kept as given: validation names it
  if id ~= nil then rawset(t, "id", nil); rawset(t, "_id", id_of(self, id) or id) end
  setmetatable(t, self._imt)
  ensure_defaults(self, t)
  return t
end

function Model:insert(t, opts)
  check_class(self, "insert")
  check_opts("insert", opts, OPTS)
  local doc = self:new(t)
  return insert_doc(self, doc, opts, "insert")
end

--- Model:hydrate(raw): a raw document (from lean, or any read) adopted as tracked, as it is now.
function Model:hydrate(raw)
  check_class(self, "hydrate")
  if type(raw) ~= "table" then error("hydrate: raw must be a table, got " .. type(raw), 2) end
  if rawget(raw, "_id") == nil then error("hydrate: raw has no _id (use Model:new for a new document)", 2) end
  if self._soft and rawget(raw, self._soft) == null then rawset(raw, self._soft, nil) end
  rawset(raw, TOKEN, nil)
  local snap = copy(raw)
  setmetatable(snap, nil)
  snaps[raw] = snap
  gone[raw] = nil
  return setmetatable(raw, self._imt)
end

function Model:find(q)
  check_class(self, "find")
  return new_query(self, q)
end

function Model:get(id, opts)
  check_class(self, "get")
  check_opts("get", opts, OPTS)
  local coll = bound(self, "get")
  local raw = session_of(opts)
  local bad
  id, bad = id_of(self, id, "get")
  if id == nil then return fail("invalid", bad) end
  local doc, msg, code, detail = coll:find_one(scope(self, { _id = id }, opts and opts.unscoped), dopts(raw))
  if doc == nil then
    if msg ~= nil then return driver_fail(msg, code, detail) end
    return nil
  end
  return adopt(self, doc)
end

function Model:count(q, opts)
  check_class(self, "count")
  local qq = new_query(self, q)
  if opts and opts.unscoped then qq.unscoped_ = true end
  return qq:count(opts and { session = opts.session })
end

function Model:distinct(field, q, opts)
  check_class(self, "distinct")
  local qq = new_query(self, q)
  if opts and opts.unscoped then qq.unscoped_ = true end
  return qq:distinct(field, opts and { session = opts.session })
end

function Model:lean(q, opts)
  check_class(self, "lean")
  local qq = new_query(self, q)
  if opts and opts.unscoped then qq.unscoped_ = true end
  return qq:lean(opts and { session = opts.session })
end

--- Model:aggregate(pipeline, opts) -> the raw results; the soft-delete scope is the first stage.
function Model:aggregate(pipeline, opts)
  check_class(self, "aggregate")
  check_opts("aggregate", opts, OPTS)
  if type(pipeline) ~= "table" then error("aggregate: pipeline must be a list of stages, got " .. type(pipeline), 2) end
  local coll = bound(self, "aggregate")
  local js = find_js(pipeline)
  if js then return fail("invalid", format("aggregate %s: %s is refused (it runs JavaScript on the server)",
    self.name, js)) end
  local stages = array {}
  if self._soft and not (opts and opts.unscoped) then stages[1] = { ["$match"] = { [self._soft] = null } } end
  for i = 1, #pipeline do stages[#stages + 1] = pipeline[i] end
  local raw = session_of(opts)
  local cur, msg, code, detail = coll:aggregate(stages, dopts(raw))
  if not cur then return driver_fail(msg, code, detail) end
  local docs
  docs, msg, code, detail = cur:all()
  if not docs then return driver_fail(msg, code, detail) end
  return docs
end

--- Model:update(id, op, ...) -> the document after the update, tracked; one round trip.
function Model:update(id, ...)
  check_class(self, "update")
  local coll = bound(self, "update")
  local list, opts = split_args(...)
  local raw = session_of(opts)
  local bad
  id, bad = id_of(self, id, "update")
  if id == nil then return fail("invalid", bad) end
  local u, errs
  u, errs, bad = build_update(self, list, "update", wants_validation(self, opts), nil,
    opts and opts.unscoped and "restore" or nil)
  if not u then return update_fail(self, "update", errs, bad) end
  local doc, msg, code, detail = coll:find_one_and_update(scope(self, { _id = id }, opts and opts.unscoped), u,
    { new = true, session = raw })
  if doc == nil then
    if msg ~= nil then return driver_fail(msg, code, detail) end
    return fail("not_found", format("update %s: no document %s", self.collection, tostring(id)))
  end
  return adopt(self, doc)
end

--- Model:delete(id, { hard =, session = }) -> true, or nil, err, "not_found": soft deletes (or removes) by id.
function Model:delete(id, opts)
  check_class(self, "delete")
  check_opts("delete", opts, OPTS)
  local coll = bound(self, "delete")
  local bad
  id, bad = id_of(self, id, "delete")
  if id == nil then return fail("invalid", bad) end
  local raw = session_of(opts)
  local res, msg, code, detail
  if self._soft and not (opts and opts.hard) then
    local u = build_update(self, { { [self._soft] = now() } }, "delete", false, nil, "delete")
    res, msg, code, detail = coll:update_one(scope(self, { _id = id }), u, dopts(raw))
    if res and res.matched == 1 then return true end
  else
    res, msg, code, detail = coll:delete_one({ _id = id }, dopts(raw))
    if res and res.deleted == 1 then return true end
  end
  if not res then return driver_fail(msg, code, detail) end
  return fail("not_found", format("delete %s: no document %s", self.collection, tostring(id)))
end

--- Model:restore(id, { session = }) -> the document, tracked, or nil, err, "not_found" (none soft-deleted with it).
function Model:restore(id, opts)
  check_class(self, "restore")
  check_opts("restore", opts, OPTS)
  local coll = bound(self, "restore")
  local soft = self._soft
  if not soft then error(format("restore: %s has no deleted_at field (no soft delete)", self.name), 2) end
  local bad
  id, bad = id_of(self, id, "restore")
  if id == nil then return fail("invalid", bad) end
  local u = build_update(self, { { [soft] = null } }, "restore", false, nil, "restore")
  local doc, msg, code, detail = coll:find_one_and_update({ _id = id, [soft] = { ["$ne"] = null } }, u,
    { new = true, session = session_of(opts) })
  if doc == nil then
    if msg ~= nil then return driver_fail(msg, code, detail) end
    return fail("not_found", format("restore %s: no soft-deleted document %s", self.collection, tostring(id)))
  end
  return adopt(self, doc)
end

--- Model:exists(id, { unscoped =, session = }) -> true or false (or nil, err, code).
function Model:exists(id, opts)
  check_class(self, "exists")
  check_opts("exists", opts, OPTS)
  local coll = bound(self, "exists")
  local bad
  id, bad = id_of(self, id, "exists")
  if id == nil then return fail("invalid", bad) end
  local n, msg, code, detail = coll:count(scope(self, { _id = id }, opts and opts.unscoped),
    { limit = 1, session = session_of(opts) })
  if not n then return driver_fail(msg, code, detail) end
  return n > 0
end

--- Model:upsert(q, op, ...) -> the document after the update (inserted when none matched), tracked.
function Model:upsert(q, ...)
  check_class(self, "upsert")
  local coll = bound(self, "upsert")
  local list, opts = split_args(...)
  local raw = session_of(opts)
  local filter, bad = model_filter(self, q)
  if not filter then return fail("invalid", bad) end
  local u, errs
  u, errs, bad = build_update(self, list, "upsert", wants_validation(self, opts), filter)
  if not u then return update_fail(self, "upsert", errs, bad) end
  local doc, msg, code, detail = coll:find_one_and_update(scope(self, filter, opts and opts.unscoped), u,
    { new = true, upsert = true, session = raw })
  if doc == nil then
    if msg ~= nil then return driver_fail(msg, code, detail) end
    return fail("not_found", format("upsert %s: the server returned no document", self.collection))
  end
  return adopt(self, doc)
end

-- ------------------------------------------------------------ bulk paths

-- insert_many, bulk_save, bulk_write and its constructors (mongostore.model.bulk)
require("mongostore.model.bulk").install(Model, M, {
  NO_SNAPSHOT = NO_SNAPSHOT,
  OPTS = OPTS,
  TOKEN = TOKEN,
  applied = applied,
  bound = bound,
  build_update = build_update,
  update_fail = update_fail,
  model_filter = model_filter,
  check_class = check_class,
  check_opts = check_opts,
  class_of = class_of,
  delta = delta,
  driver_fail = driver_fail,
  fail = fail,
  gone = gone,
  insert_item = insert_item,
  journal_note = journal_note,
  now = now,
  prepare_insert = prepare_insert,
  rename = rename,
  restore_managed = restore_managed,
  save_update = save_update,
  scope = scope,
  session_of = session_of,
  snaps = snaps,
  validation_error = validation_error,
  wants_validation = wants_validation,
})

-- ------------------------------------------------------------ define

-- model.trusted(t): marks a filter or an update written as code; its operators are sent as written
-- (server-side JavaScript still refused). A client's table is never to be marked.
M.trusted = query.trusted

local RESERVED = { id = true, is_new = true, class = true, [TOKEN] = true }

local DEFINE_KEYS = { collection = true, fields = true, indexes = true, validate_writes = true, name = true,
                      methods = true }

--- model.define{ collection =, fields =, indexes =, validate_writes = true, name =, methods = } -> the model
function M.define(spec)
  if type(spec) ~= "table" then error("define: spec must be a table, got " .. type(spec), 2) end
  for k in pairs(spec) do
    if not DEFINE_KEYS[k] then error("define: unknown key " .. tostring(k), 2) end
  end
  if type(spec.collection) ~= "string" or spec.collection == "" then
    error("define: collection must be a non-empty string", 2)
  end
  local name = spec.name or spec.collection
  local fields = {}
  local id_decl
  for k, v in pairs(spec.fields or {}) do
    if k == "id" or k == "_id" then id_decl = v else fields[k] = v end
  end
  local where = "define " .. name
  local S = schema.compile(fields, where)
  local methods = {}
  for k, v in pairs(Instance) do methods[k] = v end
  if spec.methods ~= nil then
    if type(spec.methods) ~= "table" then error("define: methods must be a table of functions", 2) end
    for k, v in pairs(spec.methods) do
      if type(v) ~= "function" then error("define: methods." .. tostring(k) .. " must be a function", 2) end
      methods[k] = v
    end
  end
  for fname in pairs(S.by_name) do
    if methods[fname] or RESERVED[fname] then
      error(format("define: the field %s of %s has the name of a method or of one the model keeps "
        .. "(id, is_new, class, %s)", fname, name, TOKEN), 2)
    end
  end
  local id_field
  if id_decl ~= nil then
    local idS = schema.compile({ _id = id_decl }, where)
    id_field = idS.by_name._id
    S.by_name._id = id_field
    S.list[#S.list + 1] = id_field
    id_field.required = false
  end
  local roles = S.roles
  local C = {
    name = name, collection = spec.collection, validate_writes = spec.validate_writes ~= false,
    fields = S.by_name, _schema = S, _roles = roles, _soft = roles.deleted_at,
    _oid = id_field == nil or id_field.type == "objectid",
    _id_field = id_field or schema.compile({ _id = "objectid" }, where).by_name._id,
    _check_skip = { _id = id_field == nil or nil, [TOKEN] = true },
    _immutable = {}, _auto = {}, _managed = { "_id" }, _defaults = {},
    _indexes = spec.indexes or {}, _coll = nil, _db = nil, _registry = nil,
  }
  for _, f in ipairs(S.list) do
    if f.immutable and f.name ~= "_id" then C._immutable[f.name] = true end
    if f.default ~= nil then
      local d = f.default
      C._defaults[#C._defaults + 1] = { name = f.name, value = d, call = type(d) == "function",
                                        copy = type(d) == "table" }
    end
  end
  C._immutable_list = {}
  for k in pairs(C._immutable) do C._immutable_list[#C._immutable_list + 1] = k end
  table.sort(C._immutable_list)
  if roles.revision then C._auto[roles.revision] = "revision" end
  if roles.updated_at then C._auto[roles.updated_at] = "updated_at" end
  for _, role in ipairs { "revision", "created_at", "updated_at", "deleted_at" } do
    if roles[role] then C._managed[#C._managed + 1] = roles[role] end
  end
  -- what a save never diffs: the id and the fields the model writes itself
  -- (created_at is compared on its own: a change to it raises)
  local skip = { _id = true, [TOKEN] = true }
  for k in pairs(C._auto) do skip[k] = true end
  for k in pairs(C._immutable) do skip[k] = true end
  C._diff_opts = { skip = skip }
  C._rev_projection = roles.revision and { [roles.revision] = 1 } or { _id = 1 }
  local imt = {
    class = C,
    __name = "mongostore.model." .. name,
    __index = function(self, k)
      local m = methods[k]
      if m ~= nil then return m end
      if k == "id" then return rawget(self, "_id") end
      if k == "is_new" then return snaps[self] == nil and not gone[self] end
      return nil
    end,
    __newindex = function(self, k, v)
      if k == "id" then k = "_id" elseif k == "is_new" then error("is_new is read-only", 2) end
      rawset(self, k, v)
    end,
    __tostring = function(self) return format("%s(%s)", name, tostring(rawget(self, "_id"))) end,
  }
  C._imt = imt
  C._methods = methods
  C._fctx = filter_ctx(C)
  local meta = {
    __index = Model,
    __call = function(cls, t) return cls:new(t) end,
    __tostring = function() return "model " .. name end,
  }
  C._meta = meta
  -- indexes checked now, so a typo fails at define rather than at registry
  for i, ix in ipairs(C._indexes) do
    if type(ix) ~= "table" or type(ix.keys) ~= "table" then
      error(format("define: indexes[%d] must be { keys = { { field, 1 } }, unique = ... }", i), 2)
    end
  end
  return setmetatable(C, meta)
end

--- model.is_document(x): whether x is a document of a model.
function M.is_document(x) return class_of(x) ~= nil end

--- model.snapshot(doc): the document's snapshot (nil for one not from a tracked read); for tests and tools.
function M.snapshot(doc) return snaps[doc] end

-- ------------------------------------------------------------ registries

local Registry = {}
Registry.__index = Registry
Registry.__name = "mongostore.model.Registry"

-- A model's declared index, as create_index takes it. A unique index of a
-- soft-deleting model is partial: it holds only the documents whose
-- deleted_at is missing or null ({ deleted_at = null } matches both and is an
-- equality, which partial filters allow, where $exists: false is not), so a
-- deleted document never blocks a live one with the same key.
local function index_args(C, ix)
  local keys = {}
  for i, pair in ipairs(ix.keys) do keys[i] = { rename(pair[1]), pair[2] } end
  if #keys == 0 then for k, v in pairs(ix.keys) do keys[rename(k)] = v end end
  local o = { unique = ix.unique, name = ix.name, sparse = ix.sparse, expire_after = ix.expire_after }
  local pf = ix.partial_filter
  if pf ~= nil then pf = to_filter(pf, rename) end
  if ix.unique and C._soft and not ix.include_deleted then
    pf = pf or {}
    if pf[C._soft] == nil then pf[C._soft] = null end
  end
  o.partial_filter = pf
  return keys, o
end

--- model.registry(db, { Model... }) -> a registry, the declared indexes created; or nil, err.
function M.registry(db, models, opts)
  if type(db) ~= "userdata" and type(db) ~= "table" then
    error("registry: db must be a Database, got " .. type(db), 2)
  end
  if type(models) ~= "table" then error("registry: models must be a list of models, got " .. type(models), 2) end
  check_opts("registry", opts, { indexes = true })
  local reg = setmetatable({ db = db, models = {}, depth = 0 }, Registry)
  for i, C in ipairs(models) do
    if type(C) ~= "table" or getmetatable(C) ~= C._meta then
      error(format("registry: models[%d] is not a model", i), 2)
    end
    local coll, msg, code, detail = db:collection(C.collection)
    if not coll then return driver_fail(msg, code, detail) end
    C._coll, C._db, C._registry = coll, db, reg
    reg.models[C.name] = C
    if not (opts and opts.indexes == false) then
      for _, ix in ipairs(C._indexes) do
        local keys, o = index_args(C, ix)
        local ok
        ok, msg, code, detail = coll:create_index(keys, o)
        if not ok then
          return driver_fail(format("registry: index on %s: %s", C.collection, tostring(msg)), code, detail)
        end
      end
    end
  end
  return reg
end

local TX_OPTS = { timeout = true, read_concern = true, write_concern = true, read_preference = true,
                  max_commit_time_ms = true, independent = true }

-- A stand-in for the database handle, so an independent transaction is not
-- taken for one nested in the handle's running one.
local function handle_for(db)
  return setmetatable({}, { __index = {
    info = function() return db:info() end,
    session = function() return db:session() end,
  } })
end

local function pack(...) return { n = select("#", ...), ... } end

local function is_transient_err(e)
  if getmetatable(e) ~= Error then return false end
  if e.code == "transient" then return true end
  local d = e.detail
  if type(d) == "table" and type(d.labels) == "table" then
    for _, l in ipairs(d.labels) do
      if l == "TransientTransactionError" then return true end
    end
  end
  return false
end

--- registry:transaction(fn, opts) -> true, fn's values; or nil, err. fn(tx) runs again on transient
-- errors, after every document it wrote is put back as it was in memory; on abort too.
function Registry:transaction(fn, opts)
  if type(fn) ~= "function" then error("transaction: fn must be a function, got " .. type(fn), 2) end
  check_opts("transaction", opts, TX_OPTS)
  local independent = opts and opts.independent
  if self.depth > 0 and not independent then
    return fail("transaction", "transaction: transactions do not nest (MongoDB has no savepoints): pass the "
      .. "outer transaction's session on, or give { independent = true } for a separate commit")
  end
  local topts
  if opts then
    topts = {}
    for k, v in pairs(opts) do if k ~= "independent" then topts[k] = v end end
  end
  local journal = new_journal()
  local raised, raised_set = nil, false
  local function attempt(s)
    journal_rollback(journal)   -- the last attempt's writes, undone in memory
    journals[s] = journal
    local r = pack(pcall(fn, s))
    if not r[1] then
      local e = r[2]
      -- a model error raised by assert() that is transient: returned, so it is retried
      if is_transient_err(e) then return nil, e, e.code, e.detail end
      raised, raised_set = e, true
      error(e, 0)
    end
    -- nil, err from a model call: its code and detail go with it, so a
    -- transient one is retried
    if r[2] == nil and getmetatable(r[3]) == Error and r.n < 4 then return nil, r[3], r[3].code, r[3].detail end
    return unpack(r, 2, r.n)
  end
  local target = independent and handle_for(self.db) or self.db
  self.depth = self.depth + 1
  local res = pack(pcall(self.db.transaction, target, attempt, topts))
  self.depth = self.depth - 1
  local n = res.n
  if not res[1] then
    journal_rollback(journal)
    error(res[2], 0)
  end
  if res[2] == true then
    return true, unpack(res, 3, n)
  end
  journal_rollback(journal)
  if raised_set then error(raised, 0) end
  local msg, code, detail = res[3], res[4], res[5]
  if getmetatable(msg) == Error then return nil, msg, msg.code, msg.detail end
  return driver_fail(msg, code, detail)
end

--- registry:session() -> a session for transactions run by hand (no retry): start_transaction, commit, abort.
function Registry:session()
  local raw, msg, code, detail = self.db:session()
  if not raw then return driver_fail(msg, code, detail) end
  return setmetatable({ raw = raw, session = raw }, Session)
end

function Session:start_transaction(opts)
  local ok, msg, code, detail = self.raw:start_transaction(opts)
  if not ok then return driver_fail(msg, code, detail) end
  journals[self.raw] = new_journal()
  return true
end

function Session:commit()
  local ok, msg, code, detail = self.raw:commit()
  if not ok then return driver_fail(msg, code, detail) end
  journals[self.raw] = nil
  return true
end

function Session:abort()
  local journal = journals[self.raw]
  local ok, msg, code, detail = self.raw:abort()
  if journal then journal_rollback(journal); journals[self.raw] = nil end
  if not ok then return driver_fail(msg, code, detail) end
  return true
end

function Session:in_transaction() return self.raw:in_transaction() end

function Session:close()
  local journal = journals[self.raw]
  if journal and self.raw:in_transaction() then journal_rollback(journal) end
  journals[self.raw] = nil
  return self.raw:close()
end
Session.__close = Session.close
Session.__gc = nil

function Registry:model(name) return self.models[name] end

-- The method tables, for the reference's checks (spec/01-unit/docs_spec.lua).
M._classes = { Model = Model, Document = Instance, Query = Query, Registry = Registry, ModelSession = Session }
M._index_args = index_args

return M
