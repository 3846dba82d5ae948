-- mongostore.model - models on the document API: define (fields, roles, indexes),
-- tracked instances (a snapshot at load, the difference at save), atomic updates,
-- revisions, timestamps, soft delete, bulk writes, and registries that bind models
-- to a database and run transactions with in-memory rollback.
local query = require "mongostore.query"
local schema = require "mongostore.schema"

local type, error, pairs, ipairs, setmetatable, rawget, rawset, tostring =
  type, error, pairs, ipairs, setmetatable, rawget, rawset, tostring
local format = string.format

local P_shared = require "mongostore.model.shared"
local Session = P_shared.Session
local TOKEN = P_shared.TOKEN
local class_of = P_shared.class_of
local filter_ctx = P_shared.filter_ctx
local gone = P_shared.gone
local snaps = P_shared.snaps

local P_instance = require "mongostore.model.instance"
local Instance = P_instance.Instance

local P_query = require "mongostore.model.query"
local Query = P_query.Query

local P_class = require "mongostore.model.class"
local Model = P_class.Model

local P_registry = require "mongostore.model.registry"
local Registry = P_registry.Registry
local index_args = P_registry.index_args

local M = {}
M.Q, M.ops = query.Q, query.ops
M.options = P_shared.options
M.registry = P_registry.registry

-- ------------------------------------------------------------ bulk paths

-- insert_many, bulk_save, bulk_write (set on Model by mongostore.model.bulk) and bulk_write's constructors
do
  local bulk = require "mongostore.model.bulk"
  for _, k in ipairs { "insert_one", "update_one", "update_many", "upsert_one", "delete_one", "delete_many" } do
    M[k] = bulk[k]
  end
end


-- ------------------------------------------------------------ define

-- model.trusted(t): marks a filter or an update written as code; its operators are sent as written
-- (server-side JavaScript still refused). A client's table is never to be marked.
M.trusted = query.trusted

local RESERVED = { id = true, is_new = true, class = true, [TOKEN] = true }

local DEFINE_KEYS = { collection = true, fields = true, indexes = true, validate_writes = true, name = true,
                      methods = true }

--- model.define{ collection =, fields =, indexes =, validate_writes = true, name =, methods = } -> the model
-- define's checks of spec and its methods: -> the methods a document has.
local function define_methods(spec, S, name)
  if type(spec) ~= "table" then error("model.define: spec must be a table, got " .. type(spec), 3) end
  for k in pairs(spec) do
    if not DEFINE_KEYS[k] then error("model.define: unknown key " .. tostring(k), 3) end
  end
  local methods = {}
  for k, v in pairs(Instance) do methods[k] = v end
  if spec.methods ~= nil then
    if type(spec.methods) ~= "table" then error("model.define: methods must be a table of functions", 3) end
    for k, v in pairs(spec.methods) do
      if type(v) ~= "function" then error("model.define: methods." .. tostring(k) .. " must be a function", 3) end
      methods[k] = v
    end
  end
  for fname in pairs(S.by_name) do
    if methods[fname] or RESERVED[fname] then
      error(format("model.define: the field %s of %s has the name of a method or of one the model keeps "
        .. "(id, is_new, class, %s)", fname, name, TOKEN), 3)
    end
  end
  -- indexes checked now, so a typo fails at define rather than at registry
  for i, ix in ipairs(spec.indexes or {}) do
    if type(ix) ~= "table" or type(ix.keys) ~= "table" then
      error(format("model.define: indexes[%d] must be { keys = { { field, 1 } }, unique = ... }", i), 3)
    end
  end
  return methods
end

-- What the model reads from its fields: the immutable ones, the defaults,
-- the fields it writes itself, what a save never diffs.
local function derive_fields(C, S)
  local roles = S.roles
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
end

-- The metatable of the model's documents.
local function document_meta(C, methods, name)
  return {
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
end

function M.define(spec)
  if type(spec) ~= "table" then error("model.define: spec must be a table, got " .. type(spec), 2) end
  if type(spec.collection) ~= "string" or spec.collection == "" then
    for k in pairs(spec) do
      if not DEFINE_KEYS[k] then error("model.define: unknown key " .. tostring(k), 2) end
    end
    error("model.define: collection must be a non-empty string", 2)
  end
  local name = spec.name or spec.collection
  local fields = {}
  local id_decl
  for k, v in pairs(spec.fields or {}) do
    if k == "id" or k == "_id" then id_decl = v else fields[k] = v end
  end
  local where = "define " .. name
  local S = schema.compile(fields, where)
  local methods = define_methods(spec, S, name)
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
  derive_fields(C, S)
  C._imt = document_meta(C, methods, name)
  C._methods = methods
  C._fctx = filter_ctx(C)
  C._meta = {
    __index = Model,
    __call = function(cls, t) return cls:new(t) end,
    __tostring = function() return "model " .. name end,
  }
  return setmetatable(C, C._meta)
end

--- model.is_document(x): whether x is a document of a model.
function M.is_document(x) return class_of(x) ~= nil end

--- model.snapshot(doc): the document's snapshot (nil for one not from a tracked read); for tests and tools.
function M.snapshot(doc) return snaps[doc] end

-- The method tables, for the reference's checks (spec/01-unit/docs_spec.lua).
M._classes = { Model = Model, Document = Instance, Query = Query, Registry = Registry, ModelSession = Session }
M._index_args = index_args

return M

