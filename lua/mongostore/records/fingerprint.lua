-- mongostore.records.fingerprint - schema fingerprints of the record store: the resolved shape
-- and content identity of each type (fields, their types and identity flags, children, refs,
-- dedup), stamped in <prefix>_meta "schema:<type>" at first open, checked at every later open,
-- the diff naming the collections, and the purely additive upgrade (re-stamped last).
local core = require "mongostore.core"

local type, error, pairs, ipairs, tostring, format = type, error, pairs, ipairs, tostring, string.format
local sort, concat = table.sort, table.concat

local M = {}

-- Bumped when the shape's encoding changes, so a new encoding never passes for an old one.
M.FORMAT = 1

-- the record store's failure shape (mongostore.records.wire): nil, message, code, detail
local wire = require "mongostore.records.wire"
local fail = wire.fail

local function driver_fail(what, msg, code, detail)
  return wire.driver("schema fingerprint: " .. what, msg, code, detail)
end

local hex = require("mongostore.util").hex

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  return keys
end

-- ------------------------------------------------------------ the shape

-- A field as stored: { name, type, identity, required } from "string" or
-- { "string", identity = false, required = true } (records.define's forms).
local function field_shape(name, spec)
  if type(spec) ~= "table" then
    return { name = name, type = tostring(spec), identity = true, required = false }
  end
  return { name = name, type = tostring(spec[1] or spec.type), identity = spec.identity ~= false,
           required = spec.required == true }
end

local function fields_shape(fields)
  local out = {}
  if type(fields) ~= "table" then return out end
  for _, name in ipairs(sorted_keys(fields)) do out[#out + 1] = field_shape(name, fields[name]) end
  return out
end

local function children_shape(children)
  local out = {}
  if type(children) ~= "table" then return out end
  for _, name in ipairs(sorted_keys(children)) do
    local c = children[name]
    out[#out + 1] = { name = name, fields = fields_shape(c.fields), children = children_shape(c.children) }
  end
  return out
end

local function ref_target(r)
  if type(r) == "string" then return r, false end
  if type(r) == "table" then
    if type(r.name) == "string" then return r.name, false end
    if type(r[1]) == "table" and type(r[1].name) == "string" then return r[1].name, true end
    if type(r.type) == "table" and type(r.type.name) == "string" then return r.type.name, r.many == true end
  end
  return tostring(r), false
end

local function refs_shape(refs)
  local out = {}
  if type(refs) ~= "table" then return out end
  for _, name in ipairs(sorted_keys(refs)) do
    local target, many = ref_target(refs[name])
    out[#out + 1] = { name = name, target = target, many = many }
  end
  return out
end

-- The declaration a defined type keeps: the type itself, or what it was defined from.
local function decl_of(t)
  if type(t) ~= "table" then error("fingerprint: a type must be a table, got " .. type(t), 3) end
  local d = t.decl or t._decl or t.spec or t
  if type(d.name) ~= "string" then d = t end
  if type(d.name) ~= "string" then error("fingerprint: a type has no name", 3) end
  return d
end

--- The resolved shape of a type: BSON-safe (user names are values, never keys), ordered.
function M.shape(t)
  local d = decl_of(t)
  return {
    format = M.FORMAT,
    name = d.name,
    dedup = d.dedup or "content",
    fields = fields_shape(d.fields),
    children = children_shape(d.children),
    refs = refs_shape(d.refs),
  }
end

-- One canonical text for a shape: keys sorted, every value tagged with its type.
local function encode(v, out)
  local tv = type(v)
  if tv == "table" then
    if #v > 0 or next(v) == nil then
      out[#out + 1] = "["
      for _, x in ipairs(v) do encode(x, out); out[#out + 1] = "," end
      out[#out + 1] = "]"
    else
      out[#out + 1] = "{"
      for _, k in ipairs(sorted_keys(v)) do
        out[#out + 1] = format("%q:", tostring(k))
        encode(v[k], out)
        out[#out + 1] = ","
      end
      out[#out + 1] = "}"
    end
  elseif tv == "string" then
    out[#out + 1] = format("s%q", v)
  elseif tv == "number" then
    out[#out + 1] = "n" .. format("%.17g", v)
  elseif tv == "boolean" then
    out[#out + 1] = v and "T" or "F"
  else
    out[#out + 1] = "?" .. tostring(v)
  end
end

function M.of_shape(shape)
  local out = {}
  encode(shape, out)
  return hex(core.sha256(concat(out)))
end

--- The fingerprint of a type: 64 hex characters.
function M.of(t) return M.of_shape(M.shape(t)) end

-- ------------------------------------------------------------ the diff

local function by_name(list)
  local m = {}
  if type(list) == "table" then
    for _, x in ipairs(list) do if type(x) == "table" and x.name ~= nil then m[x.name] = x end end
  end
  return m
end

local function same(a, b) return M.of_shape(a) == M.of_shape(b) end

-- "year (integer)", "note (string, identity = false)": the flags that differ from a plain field
local function describe_field(f)
  local flags = {}
  if f.identity == false then flags[#flags + 1] = "identity = false" end
  if f.required == true then flags[#flags + 1] = "required = true" end
  return format("%s (%s%s)", f.name, tostring(f.type), #flags > 0 and ", " .. concat(flags, ", ") or "")
end

-- The changes from the stored shape to the declared one, each { text, additive }.
local function changes(old, new)
  local out = {}
  local function add(text, additive) out[#out + 1] = { text = text, additive = additive } end
  for _, k in ipairs { "format", "dedup" } do
    if old[k] ~= new[k] then add(format("%s %s -> %s", k, tostring(old[k]), tostring(new[k])), false) end
  end
  local of, nf = by_name(old.fields), by_name(new.fields)
  for _, name in ipairs(sorted_keys(nf)) do
    local f = nf[name]
    if not of[name] then
      -- a field left out of the content id, never required: old documents are still valid
      -- records with it nil, and keep their content ids
      local additive = f.identity == false and f.required ~= true
      add("field added: " .. describe_field(f), additive)
    elseif not same(of[name], f) then
      add(format("field changed: %s -> %s", describe_field(of[name]), describe_field(f)), false)
    end
  end
  for _, name in ipairs(sorted_keys(of)) do
    if not nf[name] then add("field removed: " .. describe_field(of[name]), false) end
  end
  for _, part in ipairs { "children", "refs" } do
    local o, n = by_name(old[part]), by_name(new[part])
    local what = part == "children" and "child" or "ref"
    for _, name in ipairs(sorted_keys(n)) do
      if not o[name] then add(format("%s added: %s", what, name), false)
      elseif not same(o[name], n[name]) then add(format("%s changed: %s", what, name), false) end
    end
    for _, name in ipairs(sorted_keys(o)) do
      if not n[name] then add(format("%s removed: %s", what, name), false) end
    end
  end
  if #out == 0 then add("the shape's encoding differs", false) end
  return out
end

-- ------------------------------------------------------------ check and stamp

local function context(store)
  if type(store) ~= "table" then error("fingerprint: store must be a record store, got " .. type(store), 3) end
  local db = store.db or store._db
  if db == nil then error("fingerprint: store has no database handle (store.db)", 3) end
  return db, store.prefix or store._prefix or "records."
end

--- fingerprint.check(store, types, { upgrade = false }) -> true, or nil, err, code.
-- A type met for the first time is stamped; a stored fingerprint that differs fails
-- invalid with err.diff = { schema = { [collection] = { expected =, actual =, changes = } } },
-- unless upgrade is true and every difference is additive: then the new shapes are stamped,
-- after every check has passed (nothing is stamped on a failure).
function M.check(store, types, opts)
  local db, prefix = context(store)
  if type(types) ~= "table" then error("fingerprint: types must be a list of types, got " .. type(types), 2) end
  if opts ~= nil and type(opts) ~= "table" then error("fingerprint: opts must be a table or nil", 2) end
  local upgrade = opts and opts.upgrade
  if upgrade ~= nil and type(upgrade) ~= "boolean" then
    error("fingerprint: opts.upgrade must be a boolean, got " .. type(upgrade), 2)
  end
  local meta, err, code, detail = db:collection(prefix .. "_meta")
  if not meta then return driver_fail("the meta collection", err, code, detail) end

  local fresh, upgrades, diffs, ndiff, all_additive = {}, {}, {}, 0, true
  local names = {}
  for _, t in pairs(types) do
    local shape = M.shape(t)
    local fp = M.of_shape(shape)
    local id = "schema:" .. shape.name
    local doc, e, c, d = meta:find_one({ _id = id })
    if doc == nil and e ~= nil then return driver_fail("reading " .. id, e, c, d) end
    if doc == nil then
      fresh[#fresh + 1] = { _id = id, fingerprint = fp, shape = shape }
    elseif doc.fingerprint ~= fp then
      local list = type(doc.shape) == "table" and changes(doc.shape, shape)
        or { { text = "no stored shape to compare", additive = false } }
      local texts, additive = {}, true
      for i, ch in ipairs(list) do
        texts[i] = ch.text
        additive = additive and ch.additive
      end
      local coll = prefix .. shape.name
      diffs[coll] = { expected = doc.fingerprint, actual = fp, changes = texts, additive = additive }
      names[#names + 1] = coll
      ndiff = ndiff + 1
      all_additive = all_additive and additive
      upgrades[#upgrades + 1] = { id = id, old = doc.fingerprint, fingerprint = fp, shape = shape }
    end
  end

  if ndiff > 0 and not (upgrade and all_additive) then
    sort(names)
    local parts = {}
    for i, coll in ipairs(names) do parts[i] = format("%s (%s)", coll, concat(diffs[coll].changes, "; ")) end
    local msg = format("records.open: the schema of %s changed since the store was created: %s", concat(names, ", "),
      concat(parts, "; "))
    if all_additive then
      msg = msg .. "; every change is additive (new fields with identity = false): open with upgrade = true to apply it"
    elseif upgrade then
      msg = msg .. "; upgrade = true applies only additive changes (new fields with identity = false)"
    end
    return fail("invalid", msg, { diff = { schema = diffs } })
  end

  -- every check passed: stamp the new types, then re-stamp the upgraded ones
  for _, doc in ipairs(fresh) do
    local r, e, c, d = meta:insert_one(doc)
    if not r then
      if c ~= "duplicate" then return driver_fail("stamping " .. doc._id, e, c, d) end
      -- another process stamped it first: it must have stamped the same shape
      local other = meta:find_one({ _id = doc._id })
      if not other or other.fingerprint ~= doc.fingerprint then
        return fail("conflict", format("records.open: %s was stamped with another shape by a concurrent open",
          doc._id))
      end
    end
  end
  for _, u in ipairs(upgrades) do
    local r, e, c, d = meta:update_one({ _id = u.id, fingerprint = u.old },
      { ["$set"] = { fingerprint = u.fingerprint, shape = u.shape } })
    if not r then return driver_fail("re-stamping " .. u.id, e, c, d) end
    if r.matched == 0 then
      return fail("conflict", format("records.open: %s changed while this open upgraded it", u.id))
    end
  end
  return true
end

return M
