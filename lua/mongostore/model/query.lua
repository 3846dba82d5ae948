-- mongostore.model.query - Model:find's queries: chained options, the reads
-- (tracked or lean), and updates and deletes of every match.

local type, error, pairs, ipairs, setmetatable, getmetatable, tostring =
  type, error, pairs, ipairs, setmetatable, getmetatable, tostring
local format = string.format

local P_shared = require "mongostore.model.shared"
local Session = P_shared.Session
local adopt = P_shared.adopt
local bound = P_shared.bound
local build_update = P_shared.build_update
local check_opts = P_shared.check_opts
local dopts = P_shared.dopts
local driver_fail = P_shared.driver_fail
local fail = P_shared.fail
local journals = P_shared.journals
local model_filter = P_shared.model_filter
local now = P_shared.now
local rename = P_shared.rename
local scope = P_shared.scope
local split_args = P_shared.split_args
local update_fail = P_shared.update_fail
local wants_validation = P_shared.wants_validation

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
  if type(spec) ~= "table" then error("q:sort: spec must be a table, got " .. type(spec), 2) end
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
  if type(n) ~= "number" then error("q:limit: n must be a number, got " .. type(n), 2) end
  self.opts.limit = n
  return self
end

function Query:skip(n)
  if type(n) ~= "number" then error("q:skip: n must be a number, got " .. type(n), 2) end
  self.opts.skip = n
  return self
end

--- q:unscoped("soft_delete") (or q:unscoped()): the soft-deleted documents too.
function Query:unscoped(name)
  if name ~= nil and name ~= "soft_delete" then
    error("q:unscoped: the only scope is \"soft_delete\", got " .. tostring(name), 2)
  end
  self.unscoped_ = true
  return self
end

--- q:session(s): run the query's calls in the session (a raw Session or a registry's).
function Query:session(s)
  self.session_ = s
  return self
end

local function q_raw(self, opts, fn)
  check_opts(fn, opts, nil, 4)
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

-- The documents q matches (at most limit), as read: -> docs, or nil, err,
-- code, detail (a refused filter is invalid, nothing sent).
local function find_all(self, coll, raw, limit)
  local f, bad = q_filter(self)
  if not f then return fail("invalid", bad) end
  local cur, msg, code, detail = coll:find(f, find_opts(self, raw, limit))
  if not cur then return driver_fail(msg, code, detail) end
  local docs
  docs, msg, code, detail = cur:all()
  if not docs then return driver_fail(msg, code, detail) end
  return docs
end

function Query:all(opts)
  local C = self.C
  local docs, err, code, detail = find_all(self, bound(C, "q:all"), (q_raw(self, opts, "q:all")))
  if not docs then return nil, err, code, detail end
  for i = 1, #docs do adopt(C, docs[i]) end
  return docs
end

--- q:lean(): the documents as read, untracked (plain tables).
function Query:lean(opts)
  return find_all(self, bound(self.C, "q:lean"), (q_raw(self, opts, "q:lean")))
end

function Query:first(opts)
  local C = self.C
  local coll = bound(C, "q:first")
  local raw = q_raw(self, opts, "q:first")
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
  local docs, err, code, detail = find_all(self, bound(C, "q:one"), q_raw(self, opts, "q:one"), 2)
  if not docs then return nil, err, code, detail end
  if #docs == 0 then return fail("not_found", format("one %s: no document matches", C.collection)) end
  if #docs > 1 then return fail("invalid", format("one %s: more than one document matches", C.collection)) end
  return adopt(C, docs[1])
end

function Query:count(opts)
  local coll = bound(self.C, "q:count")
  local raw = q_raw(self, opts, "q:count")
  local o = { session = raw, skip = self.opts.skip, limit = self.opts.limit }
  local f, bad = q_filter(self)
  if not f then return fail("invalid", bad) end
  local n, msg, code, detail = coll:count(f, o)
  if not n then return driver_fail(msg, code, detail) end
  return n
end

function Query:distinct(field, opts)
  if type(field) ~= "string" then error("q:distinct: field must be a string, got " .. type(field), 2) end
  local coll = bound(self.C, "q:distinct")
  local raw = q_raw(self, opts, "q:distinct")
  local f, bad = q_filter(self)
  if not f then return fail("invalid", bad) end
  local vals, msg, code, detail = coll:distinct(rename(field), f, dopts(raw))
  if not vals then return driver_fail(msg, code, detail) end
  return vals
end

--- for doc in q:each() do ... end: tracked documents one at a time; a failure raises.
function Query:each(opts)
  local C = self.C
  local coll = bound(C, "q:each")
  local raw = q_raw(self, opts, "q:each")
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
  local coll = bound(C, "q:update")
  local list, opts = split_args(...)
  local raw = q_raw(self, opts, "q:update")
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
  local coll = bound(C, "q:delete")
  local raw = q_raw(self, opts, "q:delete")
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

return {
  Query = Query,
  new_query = new_query,
  q_raw = q_raw,
  q_filter = q_filter,
  find_opts = find_opts,
}
