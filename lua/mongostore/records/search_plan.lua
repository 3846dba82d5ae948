-- mongostore.records.search_plan - what the searcher sends: its conditions as
-- filters (fields and lists as operators of the root type's find, child sets
-- as $elemMatch, refs as one find of the referenced type's sids, a semi-join),
-- in the operators both bundled servers run, and a condition's stable text
-- (what a page cursor is bound to).
local core = require "mongostore.core"
local wire = require "mongostore.records.wire"
local rquery = require "mongostore.records.query"

local type, error, pairs, ipairs, tostring, rawequal, next = type, error, pairs, ipairs, tostring, rawequal, next
local format, sort = string.format, table.sort
local fail = wire.fail
local array, null = core.array, core.null

local M = {}

-- ------------------------------------------------------------ building filters

local OPS = { eq = "$eq", ne = "$ne", lt = "$lt", le = "$lte", gt = "$gt", ge = "$gte" }

-- The conjunction of filters as one document where their keys allow it (an
-- operator document per field, merged when the operators differ), else an
-- $and: SecantusDB takes no $and inside an $elemMatch.
local function all_of(parts)
  local out = {}
  for _, p in ipairs(parts) do
    for k, v in pairs(p) do
      local have = out[k]
      if have == nil then
        out[k] = v
      else
        local merged = type(have) == "table" and type(v) == "table" and not rawequal(have, null)
          and not rawequal(v, null) and {} or nil
        if merged then
          for op, x in pairs(have) do
            if type(op) ~= "string" or op:sub(1, 1) ~= "$" then merged = nil; break end
            merged[op] = x
          end
        end
        if merged then
          for op, x in pairs(v) do
            if type(op) ~= "string" or op:sub(1, 1) ~= "$" or merged[op] ~= nil then merged = nil; break end
            merged[op] = x
          end
        end
        if not merged then return { ["$and"] = array(parts) } end
        out[k] = merged
      end
    end
  end
  return out
end

-- text matched as itself inside a $regex (the query builder's own escape:
-- ASCII metacharacters only, so a UTF-8 character stays whole)
local literal = require("mongostore.query").escape

local function length_filter(field, op, n)
  local function at_least(k)
    if k <= 0 then return { [field] = { ["$type"] = "array" } } end
    return { [field .. "." .. (k - 1)] = { ["$exists"] = true } }
  end
  local function below(k)
    if k <= 0 then return { [field] = { ["$size"] = 0 }, [field .. ".0"] = { ["$exists"] = true } } end -- never
    return all_of { { [field] = { ["$type"] = "array" } }, { [field .. "." .. (k - 1)] = { ["$exists"] = false } } }
  end
  if op == "eq" then return { [field] = { ["$size"] = n } }
  elseif op == "ne" then return { [field] = { ["$not"] = { ["$size"] = n } } }
  elseif op == "ge" then return at_least(n)
  elseif op == "gt" then return at_least(n + 1)
  elseif op == "lt" then return below(n)
  else return below(n + 1) end
end

local compile

-- The negation of a filter on a child element, pushed down to the fields
-- ({ f = { $not = ops } }), for what SecantusDB runs inside an $elemMatch
-- (no $nor there; a negated conjunction of several fields needs an $or,
-- which mongo-java-server runs and SecantusDB refuses).
local function negate(f)
  local keys = {}
  for k in pairs(f) do keys[#keys + 1] = k end
  if #keys == 1 then
    local k, v = keys[1], f[keys[1]]
    if k == "$and" then
      local out = {}
      for i, p in ipairs(v) do out[i] = negate(p) end
      return { ["$or"] = array(out) }
    elseif k == "$or" then
      local out = {}
      for i, p in ipairs(v) do out[i] = negate(p) end
      return all_of(out)
    elseif k == "$nor" then
      return #v == 1 and v[1] or { ["$or"] = v }
    end
    local ops = v
    if type(v) ~= "table" or rawequal(v, null) then ops = { ["$eq"] = v } end
    if ops["$not"] ~= nil and next(ops, next(ops)) == nil then return { [k] = ops["$not"] } end
    return { [k] = { ["$not"] = ops } }
  end
  sort(keys)
  local out = {}
  for i, k in ipairs(keys) do out[i] = negate({ [k] = f[k] }) end
  return { ["$or"] = array(out) }
end

-- The sids of the records of type T's collection matching filter: one find.
local function sids(ctx, T, filter)
  local store = ctx.store
  local docs, e, c, d = store.wire:find(store.colls[T.name], filter, { projection = { _id = 1 } }, store.session)
  if not docs then return nil, e, c, d end
  local out = {}
  for i, doc in ipairs(docs) do out[i] = doc._id end
  ctx.finds = ctx.finds + 1
  return array(out)
end

-- The filter of condition c in scope (root and ref scopes are documents of a
-- collection, child scopes elements of an $elemMatch); refs run their finds.
compile = function(ctx, c, scope)
  local op = c.op
  if op == "and" or op == "or" or op == "nor" then
    local parts = {}
    for i, p in ipairs(c.parts) do
      local f, e, code, d = compile(ctx, p, scope)
      if not f then return nil, e, code, d end
      parts[i] = f
    end
    if op == "and" then return all_of(parts) end
    if op == "nor" and scope.kind == "child" then
      -- no $nor inside an $elemMatch on SecantusDB: each part negated
      for i, p in ipairs(parts) do parts[i] = negate(p) end
      return all_of(parts)
    end
    return { ["$" .. op] = array(parts) }
  end
  if op == "any" or op == "all" or op == "none" then
    if c.holder ~= scope then
      return fail("invalid", format("search: %s belongs to another variable (a disconnected variable)", c.label))
    end
    if c.what == "child" then
      local inner, e, code, d = compile(ctx, c.inner, c.tscope)
      if not inner then return nil, e, code, d end
      if op == "any" then return { [c.field] = { ["$elemMatch"] = inner } } end
      if op == "none" then return { [c.field] = { ["$not"] = { ["$elemMatch"] = inner } } } end
      return { [c.field] = { ["$not"] = { ["$elemMatch"] = negate(inner) } } }
    end
    local inner, e, code, d = compile(ctx, c.inner, c.tscope)
    if not inner then return nil, e, code, d end
    if op == "all" then inner = { ["$nor"] = array { inner } } end
    local ids
    ids, e, code, d = sids(ctx, c.ref.type, inner)
    if not ids then return nil, e, code, d end
    if op == "any" then return { [c.field] = { ["$in"] = ids } } end
    return { [c.field] = { ["$nin"] = ids } }
  end
  if c.scope ~= scope then
    return fail("invalid", format("search: %s belongs to another variable (a disconnected variable)", c.label))
  end
  local field, v = c.field, c.v
  if c.other then
    if scope.kind == "child" then
      return fail("invalid", format("search: %s: fields of a child element are compared with values only", c.label))
    end
    return { ["$expr"] = { [OPS[op]] = array { "$" .. field, "$" .. c.other } } }
  end
  if OPS[op] then return { [field] = { [OPS[op]] = v } } end
  if op == "in_list" or op == "has_any" then return { [field] = { ["$in"] = array(v) } } end
  if op == "nin_list" then return { [field] = { ["$nin"] = array(v) } } end
  if op == "has" then return { [field] = { ["$eq"] = v } } end
  if op == "has_all" then
    if #v == 0 then return { [field] = { ["$type"] = "array" } } end
    return { [field] = { ["$all"] = array(v) } }
  end
  if op == "has_only" then
    return all_of { { [field] = { ["$type"] = "array" } },
      { [field] = { ["$not"] = { ["$elemMatch"] = { ["$nin"] = array(v) } } } } }
  end
  if op == "prefix" then return { [field] = { ["$regex"] = "^" .. literal(v) } } end
  if op == "suffix" then return { [field] = { ["$regex"] = literal(v) .. "$" } } end
  if op == "contains" then return { [field] = { ["$regex"] = literal(v) } } end
  if op == "is_known" then return { [field] = { ["$ne"] = null } } end
  if op == "is_unknown" then return { [field] = null } end
  if op == "length" then return length_filter(field, c.cmp, v) end
  error("search: unknown condition " .. tostring(op))
end

-- A condition's text, the same in every process: what a page cursor is bound to.
local function describe(c, out)
  out[#out + 1] = "(" .. c.op
  if c.cmp then out[#out + 1] = c.cmp end
  if c.field then out[#out + 1] = c.field end
  if c.desc then out[#out + 1] = c.desc end
  if c.v ~= nil then rquery.stable(c.v, out) end
  if c.parts then for _, p in ipairs(c.parts) do describe(p, out) end end
  if c.inner then describe(c.inner, out) end
  out[#out + 1] = ")"
end

M.compile, M.describe = compile, describe
return M
