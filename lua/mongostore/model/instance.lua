-- mongostore.model.instance - a model's documents: insert preparation, the
-- change-tracked save (the delta against the snapshot, guarded by the
-- revision), delete, reload.
local core = require "mongostore.core"
local track = require "mongostore.track"
local schema = require "mongostore.schema"

local type, error, pairs, next, setmetatable, rawget, rawset, tostring =
  type, error, pairs, next, setmetatable, rawget, rawset, tostring
local format = string.format
local null = core.null
local objectid = core.objectid
local copy = track.copy
local equal = track.equal
local diff = track.diff
local snapshot = track.snapshot
local check_doc = schema.check
local mark = schema.mark

local P_shared = require "mongostore.model.shared"
local TOKEN = P_shared.TOKEN
local bound = P_shared.bound
local check_opts = P_shared.check_opts
local class_of = P_shared.class_of
local dopts = P_shared.dopts
local driver_fail = P_shared.driver_fail
local drop_path = P_shared.drop_path
local fail = P_shared.fail
local gone = P_shared.gone
local journal_note = P_shared.journal_note
local now = P_shared.now
local put_path = P_shared.put_path
local scope = P_shared.scope
local session_of = P_shared.session_of
local snaps = P_shared.snaps
local validation_error = P_shared.validation_error
local wants_validation = P_shared.wants_validation

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
local function insert_doc(C, doc, opts, fn, who)
  local coll = bound(C, who)
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
      C.collection, tostring(id), tostring(rev and found[rev]), tostring(rev and rawget(doc, rev))),
      rev and { found = found[rev] } or nil)
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
    error(format("doc:%s: call it with a colon, doc:%s(...), not with a dot (the document came as %s)", fn, fn,
      type(doc)), 3)
  end
  return C
end

function Instance:save(opts)
  local C = doc_class(self, "save")
  check_opts("doc:save", opts)
  local snap = snaps[self]
  if snap == nil then return insert_doc(C, self, opts, "save", "doc:save") end
  local coll = bound(C, "doc:save")
  if gone[self] then return fail("not_found", format("save %s: the document was deleted", C.collection)) end
  mark(C._schema, self)
  local set, unset, n = delta(C, self, snap, "doc:save")
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
  check_opts("doc:insert", opts)
  if snaps[self] then error(format("doc:insert: this %s is stored already (save it)", C.name), 2) end
  return insert_doc(C, self, opts, "insert", "doc:insert")
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
  check_opts("doc:delete", opts)
  local coll = bound(C, "doc:delete")
  local snap = snaps[self]
  if snap == nil then error(format("doc:delete: this %s is not stored (or not from a tracked read)", C.name), 2) end
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
  check_opts("doc:reload", opts)
  local coll = bound(C, "doc:reload")
  local id = rawget(self, "_id")
  if id == nil then error("doc:reload: the document has no id", 2) end
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

return {
  Instance = Instance,
  ensure_defaults = ensure_defaults,
  NONE = NONE,
  save_managed = save_managed,
  restore_managed = restore_managed,
  NO_SNAPSHOT = NO_SNAPSHOT,
  ID_REQUIRED = ID_REQUIRED,
  prepare_insert = prepare_insert,
  insert_item = insert_item,
  insert_doc = insert_doc,
  stale_or_missing = stale_or_missing,
  delta = delta,
  save_update = save_update,
  applied = applied,
  doc_class = doc_class,
}
