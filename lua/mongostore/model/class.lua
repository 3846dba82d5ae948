-- mongostore.model.class - the class methods of a model: new, insert, get,
-- find and the other reads, update, upsert, delete, restore, exists.
local core = require "mongostore.core"
local track = require "mongostore.track"

local type, error, setmetatable, getmetatable, rawget, rawset, tostring =
  type, error, setmetatable, getmetatable, rawget, rawset, tostring
local format = string.format
local null = core.null
local array = core.array
local copy = track.copy

local P_shared = require "mongostore.model.shared"
local TOKEN = P_shared.TOKEN
local adopt = P_shared.adopt
local bound = P_shared.bound
local build_update = P_shared.build_update
local check_opts = P_shared.check_opts
local class_of = P_shared.class_of
local dopts = P_shared.dopts
local driver_fail = P_shared.driver_fail
local fail = P_shared.fail
local find_js = P_shared.find_js
local gone = P_shared.gone
local id_of = P_shared.id_of
local model_filter = P_shared.model_filter
local now = P_shared.now
local scope = P_shared.scope
local session_of = P_shared.session_of
local snaps = P_shared.snaps
local split_args = P_shared.split_args
local update_fail = P_shared.update_fail
local wants_validation = P_shared.wants_validation

local P_instance = require "mongostore.model.instance"
local ensure_defaults = P_instance.ensure_defaults
local insert_doc = P_instance.insert_doc

local P_query = require "mongostore.model.query"
local new_query = P_query.new_query

-- ------------------------------------------------------------ the model (class) methods

local Model = {}
Model.__index = Model

-- A class method called with a dot (Article.insert{...}) gets its first
-- argument as the model: said as such, before anything inside trips on it.
-- rawget: a plain table has no _meta, and nil == nil would let it through.
local function check_class(C, fn)
  local meta = type(C) == "table" and rawget(C, "_meta")
  if not meta or getmetatable(C) ~= meta then
    error(format("Model:%s: call it with a colon, Model:%s(...), not with a dot (the model came as %s)", fn, fn,
      class_of(C) and "a document" or type(C)), 3)
  end
end

--- Model:new(fields) -> an unsaved document (the table itself, defaults filled in).
function Model:new(t)
  check_class(self, "new")
  if t == nil then t = {} end
  if type(t) ~= "table" then error("Model:new: fields must be a table or nil, got " .. type(t), 2) end
  if snaps[t] then error("Model:new: this table is a stored document already", 2) end
  local id = rawget(t, "id")
  -- an id that cannot be cast is kept as given: validation names it
  if id ~= nil then rawset(t, "id", nil); rawset(t, "_id", id_of(self, id) or id) end
  setmetatable(t, self._imt)
  ensure_defaults(self, t)
  return t
end

function Model:insert(t, opts)
  check_class(self, "insert")
  check_opts("Model:insert", opts)
  local doc = self:new(t)
  return insert_doc(self, doc, opts, "insert", "Model:insert")
end

--- Model:hydrate(raw): a raw document (from lean, or any read) adopted as tracked, as it is now.
function Model:hydrate(raw)
  check_class(self, "hydrate")
  if type(raw) ~= "table" then error("Model:hydrate: raw must be a table, got " .. type(raw), 2) end
  if rawget(raw, "_id") == nil then error("Model:hydrate: raw has no _id (use Model:new for a new document)", 2) end
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
  check_opts("Model:get", opts)
  local coll = bound(self, "Model:get")
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
  check_opts("Model:count", opts)
  local qq = new_query(self, q)
  if opts and opts.unscoped then qq.unscoped_ = true end
  return qq:count(opts and { session = opts.session })
end

function Model:distinct(field, q, opts)
  check_class(self, "distinct")
  check_opts("Model:distinct", opts)
  local qq = new_query(self, q)
  if opts and opts.unscoped then qq.unscoped_ = true end
  return qq:distinct(field, opts and { session = opts.session })
end

function Model:lean(q, opts)
  check_class(self, "lean")
  check_opts("Model:lean", opts)
  local qq = new_query(self, q)
  if opts and opts.unscoped then qq.unscoped_ = true end
  return qq:lean(opts and { session = opts.session })
end

--- Model:aggregate(pipeline, opts) -> the raw results; the soft-delete scope is the first stage.
function Model:aggregate(pipeline, opts)
  check_class(self, "aggregate")
  check_opts("Model:aggregate", opts)
  if type(pipeline) ~= "table" then
    error("Model:aggregate: pipeline must be a list of stages, got " .. type(pipeline), 2)
  end
  local coll = bound(self, "Model:aggregate")
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
  local coll = bound(self, "Model:update")
  local list, opts = split_args(...)
  check_opts("Model:update", opts)
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
  check_opts("Model:delete", opts)
  local coll = bound(self, "Model:delete")
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
  check_opts("Model:restore", opts)
  local coll = bound(self, "Model:restore")
  local soft = self._soft
  if not soft then error(format("Model:restore: %s has no deleted_at field (no soft delete)", self.name), 2) end
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
  check_opts("Model:exists", opts)
  local coll = bound(self, "Model:exists")
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
  local coll = bound(self, "Model:upsert")
  local list, opts = split_args(...)
  check_opts("Model:upsert", opts)
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

return {
  Model = Model,
  check_class = check_class,
}
