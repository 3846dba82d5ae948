-- mongostore.model.bulk - the bulk paths of models: insert_many, bulk_save
-- (every delta in one round trip, and the follow-up read that tells stale
-- copies by bulk_save's write token) and bulk_write with its constructors.
-- The Model methods are set on mongostore.model.class's Model; the
-- constructors are this module's, which model.lua hands on.
local core = require "mongostore.core"
local track = require "mongostore.track"
local schema = require "mongostore.schema"

local type, error, ipairs, setmetatable, getmetatable, rawget, tostring =
  type, error, ipairs, setmetatable, getmetatable, rawget, tostring
local format, concat = string.format, table.concat

local array, null, objectid = core.array, core.null, core.objectid
local snapshot = track.snapshot
local check_doc, mark = schema.check, schema.mark

local M = {}

local shared = require "mongostore.model.shared"
local TOKEN = shared.TOKEN
local bound = shared.bound
local build_update = shared.build_update
local check_opts = shared.check_opts
local class_of = shared.class_of
local driver_fail = shared.driver_fail
local fail = shared.fail
local gone = shared.gone
local journal_note = shared.journal_note
local model_filter = shared.model_filter
local now = shared.now
local scope = shared.scope
local session_of = shared.session_of
local snaps = shared.snaps
local update_fail = shared.update_fail
local validation_error = shared.validation_error
local wants_validation = shared.wants_validation

local instance = require "mongostore.model.instance"
local NO_SNAPSHOT = instance.NO_SNAPSHOT
local applied = instance.applied
local delta = instance.delta
local insert_item = instance.insert_item
local prepare_insert = instance.prepare_insert
local restore_managed = instance.restore_managed
local save_update = instance.save_update

local class = require "mongostore.model.class"
local Model, check_class = class.Model, class.check_class

--- Model:insert_many(list, { ordered = true }) -> { inserted = { doc... },
--   errors = { { index =, message =, code =, detail = }... } }
function Model:insert_many(list, opts)
  check_class(self, "insert_many")
  check_opts("Model:insert_many", opts)
  if type(list) ~= "table" then error("Model:insert_many: list must be a table, got " .. type(list), 2) end
  local coll = bound(self, "Model:insert_many")
  local ordered = not (opts and opts.ordered == false)
  local validate = wants_validation(self, opts)
  local raw, journal = session_of(opts)
  local r = self._roles
  local at = (r.created_at or r.updated_at) and now()
  local send, where, saved, errors = {}, {}, {}, {}
  for i = 1, #list do
    local doc = insert_item(self, list[i], "Model:insert_many", i)
    local vals, errs = prepare_insert(self, doc, validate, journal, at)
    if not vals then
      local _, message, code, detail = validation_error(self, "insert_many", errs)
      errors[#errors + 1] = { index = i, message = message, code = code, detail = detail }
      if ordered then break end
    else
      send[#send + 1] = doc
      saved[#send] = vals
      where[#send] = i
    end
  end
  local inserted = {}
  if #send > 0 then
    local res, msg, code, detail = coll:insert_many(send, { ordered = ordered, session = raw })
    if not res then
      for j = 1, #send do restore_managed(self, send[j], saved[j]) end
      return driver_fail(msg, code, detail)
    end
    for _, e in ipairs(res.errors) do
      errors[#errors + 1] = { index = where[e.index], message = e.message, code = e.code, detail = e.detail }
    end
    for j = 1, #send do
      local doc = send[j]
      if res.inserted[j] ~= nil then
        snaps[doc] = snapshot(doc)
        inserted[#inserted + 1] = doc
      else
        restore_managed(self, doc, saved[j])
      end
    end
  end
  table.sort(errors, function(a, b) return a.index < b.index end)
  return { inserted = inserted, errors = errors }
end

-- bulk_save's plan: an insert_one per new document, an update_one (guarded
-- by its revision, stamped with this call's token) per changed one; the
-- documents that cannot be sent are failed already.
local function plan_saves(C, docs, validate, journal, at)
  local call = tostring(objectid())
  local ops, plan, failed = {}, {}, {}
  for i = 1, #docs do
    local doc = docs[i]
    if class_of(doc) ~= C then error(format("Model:bulk_save: item %d is not a %s", i, C.name), 3) end
    local snap = snaps[doc]
    if gone[doc] then
      failed[#failed + 1] = { index = i, doc = doc, message = "the document was deleted", code = "not_found" }
    elseif snap == nil then
      local vals, errs = prepare_insert(C, doc, validate, journal, at)
      if not vals then
        local _, message, code, detail = validation_error(C, "bulk_save", errs)
        failed[#failed + 1] = { index = i, doc = doc, message = message, code = code, detail = detail }
      else
        ops[#ops + 1] = { insert_one = doc }
        plan[#ops] = { index = i, doc = doc, insert = true, vals = vals, had_id = vals._id ~= nil }
      end
    else
      mark(C._schema, doc)
      local set, unset, n = delta(C, doc, snap, "Model:bulk_save")
      if n > 0 then
        local errs = validate and check_doc(C._schema, doc, C._check_skip)
        if errs then
          local _, message, code, detail = validation_error(C, "bulk_save", errs)
          failed[#failed + 1] = { index = i, doc = doc, message = message, code = code, detail = detail }
        else
          local token = call .. "." .. (#ops + 1)
          local u, f, unscoped = save_update(C, snap, set, unset, at, token)
          ops[#ops + 1] = { update_one = { filter = f, update = u } }
          plan[#ops] = { index = i, doc = doc, set = set, unset = unset, token = token, unscoped = unscoped }
        end
      end
    end
  end
  return ops, plan, failed
end

-- Updates that matched nothing are not errors to the server: when fewer
-- matched than were sent, one read tells which. Only this op's token says
-- it was written: a revision one above the copy's, or this call's
-- updated_at, can be another writer's. Read unscoped: a document deleted
-- meanwhile is not_found, one at another revision stale. -> missed (op index
-- -> { code, message }), or nil, err, code, detail.
local function find_missed(C, coll, raw, plan, ok_updates)
  local ids = array {}
  for _, j in ipairs(ok_updates) do ids[#ids + 1] = rawget(plan[j].doc, "_id") end
  local rev, soft = C._roles.revision, C._soft
  local proj = { _id = 1, [TOKEN] = 1 }
  if rev then proj[rev] = 1 end
  if soft then proj[soft] = 1 end
  local cur, msg, code, detail = coll:find({ _id = { ["$in"] = ids } }, { projection = proj, session = raw })
  if not cur then return driver_fail(msg, code, detail) end
  local list
  list, msg, code, detail = cur:all()
  if not list then return driver_fail(msg, code, detail) end
  local found, missed = {}, {}
  for _, d in ipairs(list) do found[tostring(d._id)] = d end
  for _, j in ipairs(ok_updates) do
    local p = plan[j]
    local id = tostring(rawget(p.doc, "_id"))
    local d = found[id]
    if d == nil then
      missed[j] = { code = "not_found", message = "no document " .. id }
    elseif d[TOKEN] ~= p.token then
      if soft and not p.unscoped and d[soft] ~= nil and d[soft] ~= null then
        missed[j] = { code = "not_found", message = format("document %s was deleted", id) }
      elseif rev then
        missed[j] = { code = "stale", message = format(
          "document %s is at revision %s, this copy at %s: reload it", id, tostring(d[rev]),
          tostring(snaps[p.doc][rev])), detail = { found = d[rev] } }
      else
        missed[j] = { code = "stale", message = format("document %s was not written: reload it", id) }
      end
    end
  end
  return missed
end

-- Each op's outcome on its document: written (tracked as written, noted in
-- the journal) or failed (an insert's managed fields put back). -> written
local function settle_saves(C, ops, plan, refused, missed, failed, journal, at)
  local written = 0
  for j = 1, #ops do
    local p = plan[j]
    local doc = p.doc
    local e = refused[j] or missed[j]
    if e then
      local message = e.message
      if p.insert then
        restore_managed(C, doc, p.vals)
        if e.code == "duplicate" and p.had_id then
          message = tostring(message) .. "; " .. format(NO_SNAPSHOT, C.name)
        end
      end
      failed[#failed + 1] = { index = p.index, doc = doc, message = message, code = e.code, detail = e.detail }
    else
      if p.insert then
        snaps[doc] = snapshot(doc)
      else
        journal_note(journal, C, doc)
        applied(C, doc, snaps[doc], p.set, p.unset, at)
      end
      written = written + 1
    end
  end
  return written
end

--- Model:bulk_save(docs) -> n written; or nil, message, code, { failed = { { index =, doc =, message =, code =,
-- detail = }... }, written = n }
function Model:bulk_save(docs, opts)
  check_class(self, "bulk_save")
  check_opts("Model:bulk_save", opts)
  if type(docs) ~= "table" then error("Model:bulk_save: docs must be a table, got " .. type(docs), 2) end
  local coll = bound(self, "Model:bulk_save")
  local validate = wants_validation(self, opts)
  local raw, journal = session_of(opts)
  local at = now()
  local ops, plan, failed = plan_saves(self, docs, validate, journal, at)
  local written = 0
  if #ops > 0 then
    local res, msg, code, detail = coll:bulk_write(ops, { ordered = false, session = raw })
    if not res then
      for j = 1, #ops do
        if plan[j].insert then restore_managed(self, plan[j].doc, plan[j].vals) end
      end
      return driver_fail(msg, code, detail)
    end
    local refused = {}
    for _, e in ipairs(res.errors) do refused[e.index] = e end
    local updates, ok_updates = 0, {}
    for j = 1, #ops do
      if not plan[j].insert and not refused[j] then updates = updates + 1; ok_updates[#ok_updates + 1] = j end
    end
    local missed = {}
    if res.matched < updates then
      missed, msg, code, detail = find_missed(self, coll, raw, plan, ok_updates)
      if not missed then return nil, msg, code, detail end
    end
    written = settle_saves(self, ops, plan, refused, missed, failed, journal, at)
  end
  if #failed > 0 then
    table.sort(failed, function(a, b) return a.index < b.index end)
    local words = {}
    for i, f in ipairs(failed) do words[i] = format("%d: %s", f.index, tostring(f.message)) end
    return fail(failed[1].code, format("bulk_save %s: %d of %d not written (%s)", self.collection, #failed, #docs,
      concat(words, "; ")), { failed = failed, written = written })
  end
  return written
end

-- bulk_write's constructors: plain descriptions, turned into the document
-- API's ops by the model they are given to (which adds its scope, revision
-- and timestamps and checks the fields).
local Bulk = { __name = "mongostore.model.BulkOp" }

function M.insert_one(doc) return setmetatable({ kind = "insert_one", doc = doc }, Bulk) end
function M.update_one(q, ...) return setmetatable({ kind = "update_one", q = q, list = { ... } }, Bulk) end
function M.update_many(q, ...) return setmetatable({ kind = "update_many", q = q, list = { ... } }, Bulk) end
function M.upsert_one(q, ...) return setmetatable({ kind = "upsert_one", q = q, list = { ... } }, Bulk) end
function M.delete_one(q, opts)
  return setmetatable({ kind = "delete_one", q = q, hard = opts and opts.hard }, Bulk)
end
function M.delete_many(q, opts)
  return setmetatable({ kind = "delete_many", q = q, hard = opts and opts.hard }, Bulk)
end

-- bulk_write's failure for the values its ops refused (errors: { index =,
-- errs = } by op): every refused value (by its op's index), and each
-- refused op in the per-item shape (detail.failed).
local function bulk_validation_fail(self, errors)
  local all, failed = {}, {}
  for _, e in ipairs(errors) do
    for _, x in ipairs(e.errs) do all[#all + 1] = { field = x.field, message = x.message, index = e.index } end
    local _, message, code, detail = validation_error(self, "bulk_write", e.errs)
    failed[#failed + 1] = { index = e.index, message = message, code = code, detail = detail }
  end
  local _, message, code, detail = validation_error(self, "bulk_write", all)
  detail.failed = failed
  return nil, message, code, detail
end

-- After bulk_write: the inserted documents tracked, as insert leaves them;
-- a refused one (or, ordered, one after the first refusal, never attempted)
-- as it was.
local function track_bulk_inserts(self, res, inserts, ordered)
  local refused, first = {}, math.huge
  for _, e in ipairs(res.errors) do
    refused[e.index] = true
    if e.index < first then first = e.index end
  end
  for _, x in ipairs(inserts) do
    if refused[x.index] or (ordered and x.index > first) then
      restore_managed(self, x.doc, x.vals)
    else
      snaps[x.doc] = snapshot(x.doc)
    end
  end
end

--- Model:bulk_write{ model.update_one(q, ...), ... } -> the document API's BulkWriteResult.
function Model:bulk_write(list, opts)
  check_class(self, "bulk_write")
  check_opts("Model:bulk_write", opts)
  if type(list) ~= "table" then error("Model:bulk_write: list must be a table, got " .. type(list), 2) end
  local coll = bound(self, "Model:bulk_write")
  local validate = wants_validation(self, opts)
  local unscoped = opts and opts.unscoped
  local raw, journal = session_of(opts)
  local at = now()
  local out, errors, inserts = {}, {}, {}
  local invalid_item -- an item a client's value made invalid: nothing is sent
  for i, b in ipairs(list) do
    if getmetatable(b) ~= Bulk then
      error(format("Model:bulk_write: item %d is not a model op (model.update_one(...) and the others)", i), 2)
    end
    local kind = b.kind
    if kind == "insert_one" then
      local doc = insert_item(self, b.doc, "Model:bulk_write", i)
      local vals, errs = prepare_insert(self, doc, validate, journal, at)
      if not vals then errors[#errors + 1] = { index = i, errs = errs } else
        out[i] = { insert_one = doc }
        inserts[#inserts + 1] = { index = i, doc = doc, vals = vals }
      end
    elseif kind == "delete_one" or kind == "delete_many" then
      local f, bad = model_filter(self, b.q)
      if not f then invalid_item = format("bulk_write item %d: %s", i, bad); break end
      f = scope(self, f, unscoped)
      if self._soft and not b.hard then
        local u = build_update(self, { { [self._soft] = now() } }, "bulk_write", false, nil, "delete")
        out[i] = { [kind == "delete_one" and "update_one" or "update_many"] = { filter = f, update = u } }
      else
        out[i] = { [kind] = { filter = f } }
      end
    else
      local filter, bad = model_filter(self, b.q)
      if not filter then invalid_item = format("bulk_write item %d: %s", i, bad); break end
      local upsert = kind == "upsert_one"
      local u, errs
      u, errs, bad = build_update(self, b.list, "bulk_write", validate, upsert and filter or nil,
        unscoped and "restore" or nil)
      if bad then invalid_item = format("bulk_write item %d: %s", i, bad); break end
      if not u then errors[#errors + 1] = { index = i, errs = errs } else
        out[i] = { [upsert and "update_one" or kind] = { filter = scope(self, filter, unscoped), update = u,
                                                        upsert = upsert or nil } }
      end
    end
  end
  if invalid_item then
    for _, x in ipairs(inserts) do restore_managed(self, x.doc, x.vals) end
    return update_fail(self, "bulk_write", nil, invalid_item)
  end
  if #errors > 0 then
    for _, x in ipairs(inserts) do restore_managed(self, x.doc, x.vals) end
    return bulk_validation_fail(self, errors)
  end
  local ordered = not (opts and opts.ordered == false)
  local res, msg, code, detail = coll:bulk_write(out, { ordered = ordered, session = raw })
  if not res then
    for _, x in ipairs(inserts) do restore_managed(self, x.doc, x.vals) end
    return driver_fail(msg, code, detail)
  end
  track_bulk_inserts(self, res, inserts, ordered)
  return res
end

return M
