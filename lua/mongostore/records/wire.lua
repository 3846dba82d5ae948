-- mongostore.records.wire - the record store's commands to the server: inserts,
-- updates, finds (with their getMores) and counts, each sent with the store's write
-- and read concerns outside a transaction and with only the session inside one.
local core = require "mongostore.core"

local type, tostring, setmetatable, ipairs, pairs, select, rawequal = type, tostring, setmetatable, ipairs, pairs,
  select, rawequal
local unpack = table.unpack or unpack  -- luacheck: ignore 143
local format = string.format
local array = core.array

local M = {}

-- The one failure shape: nil, message (a string), code, detail (a table of
-- the structured facts, or nil).
local function fail(code, message, detail)
  return nil, message, code, detail
end
M.fail = fail

-- A driver failure (nil, msg, code, detail) as the store returns it: the
-- message says what was being done, the driver's detail table stays the
-- detail (its labels let a transaction run a transient failure again) and
-- the store's own facts are added to it.
local function driver(doing, msg, code, detail, facts)
  if facts then
    if type(detail) == "table" then
      for k, v in pairs(facts) do detail[k] = v end
    else
      detail = facts
    end
  end
  return nil, doing .. ": " .. tostring(msg), code or "server", detail
end
M.driver = driver

local function pack(...) return { n = select("#", ...), ... } end

-- db:transaction(fn, opts) -> true, fn's values, or the failure: one fn
-- returned passes as it is (it says what was being done already), the
-- transaction's own (start, commit, giving up) is prefixed with doing.
function M.transaction(db, doing, fn, opts)
  local own
  local r = pack(db:transaction(function(s)
    own = nil
    local res = pack(fn(s))
    if res[1] == nil and res.n >= 2 then own = res[2] end
    return unpack(res, 1, res.n)
  end, opts))
  if r[1] then return unpack(r, 1, r.n) end
  local msg, code, detail = r[2], r[3], r[4]
  if own ~= nil and rawequal(msg, own) then
    if type(msg) ~= "string" then
      -- a caller's fn gave something else than a message: kept as detail.error
      if detail == nil then detail = { error = msg } end
      msg = tostring(msg)
    end
    return nil, msg, code or "server", detail
  end
  return driver(doing, msg, code, detail)
end

local Wire = {}
Wire.__index = Wire

local char, concat, floor = string.char, table.concat, math.floor

local function int32le(n)
  if n < 0 then n = n + 4294967296 end
  return char(n % 256, floor(n / 256) % 256, floor(n / 65536) % 256, floor(n / 16777216) % 256)
end

-- An ordered document of { { key, 1 | -1 }, ... } for a sort or a key list
-- nested in a command (only the command itself is taken as a list of pairs):
-- built as BSON and decoded, since a decoded table keeps its fields' order.
local function ordered(list)
  local parts = {}
  for i, p in ipairs(list) do parts[i] = "\16" .. p[1] .. "\0" .. int32le(p[2]) end
  local body = concat(parts)
  return core.bson_decode(int32le(#body + 5) .. body .. "\0", { document = true })
end
M.ordered = ordered

-- db: the database handle; wc, rc: the write and read concern documents.
function M.new(db, wc, rc)
  return setmetatable({ db = db, wc = wc, rc = rc, commands = 0 }, Wire)
end

local function run(self, doing, cmd, session)
  self.commands = self.commands + 1
  local reply, msg, code, detail = self.db:command(cmd, session and { session = session } or nil)
  if not reply then return driver(doing, msg, code, detail) end
  return reply
end

-- Write errors and write concern errors come in an ok reply.
local function write_result(doing, reply)
  local we = reply.writeErrors
  if type(we) == "table" and we[1] then
    local e = we[1]
    local code = e.code == 11000 and "duplicate" or "server"
    return fail(code, format("%s: %s", doing, tostring(e.errmsg)), { server_code = e.code, key = e.keyValue })
  end
  local wce = reply.writeConcernError
  if type(wce) == "table" then
    return fail("server", format("%s: write concern: %s", doing, tostring(wce.errmsg)),
      { server_code = wce.code, labels = reply.errorLabels })
  end
  return reply
end

function Wire:insert(coll, docs, session)
  local cmd = { { "insert", coll }, { "documents", array(docs) }, { "ordered", true } }
  if not session then cmd[#cmd + 1] = { "writeConcern", self.wc } end
  local reply, e, c, d = run(self, "insert " .. coll, cmd, session)
  if not reply then return nil, e, c, d end
  return write_result("insert " .. coll, reply)
end

-- updates: { { q = filter, u = update, upsert = bool, multi = bool } }
function Wire:update(coll, updates, session)
  local cmd = { { "update", coll }, { "updates", array(updates) }, { "ordered", true } }
  if not session then cmd[#cmd + 1] = { "writeConcern", self.wc } end
  local reply, e, c, d = run(self, "update " .. coll, cmd, session)
  if not reply then return nil, e, c, d end
  return write_result("update " .. coll, reply)
end

function Wire:delete(coll, filter, session)
  local cmd = { { "delete", coll }, { "deletes", array { { q = filter, limit = 0 } } } }
  if not session then cmd[#cmd + 1] = { "writeConcern", self.wc } end
  local reply, e, c, d = run(self, "delete " .. coll, cmd, session)
  if not reply then return nil, e, c, d end
  return write_result("delete " .. coll, reply)
end

-- findAndModify returning the document after the update.
function Wire:find_and_modify(coll, query, update, upsert, session)
  local cmd = { { "findAndModify", coll }, { "query", query }, { "update", update }, { "new", true },
                { "upsert", upsert and true or false } }
  if not session then cmd[#cmd + 1] = { "writeConcern", self.wc } end
  local reply, e, c, d = run(self, "findAndModify " .. coll, cmd, session)
  if not reply then return nil, e, c, d end
  local ok, e2, c2, d2 = write_result("findAndModify " .. coll, reply)
  if not ok then return nil, e2, c2, d2 end
  return reply.value
end

-- Every document matching; opts: sort (list of pairs), skip, limit, projection.
function Wire:find(coll, filter, opts, session)
  opts = opts or {}
  local cmd = { { "find", coll }, { "filter", filter } }
  if opts.sort then cmd[#cmd + 1] = { "sort", ordered(opts.sort) } end
  if opts.projection then cmd[#cmd + 1] = { "projection", opts.projection } end
  if opts.skip and opts.skip > 0 then cmd[#cmd + 1] = { "skip", opts.skip } end
  if opts.limit then
    cmd[#cmd + 1] = { "limit", opts.limit }
    cmd[#cmd + 1] = { "batchSize", opts.limit }
  end
  if not session and self.rc then cmd[#cmd + 1] = { "readConcern", self.rc } end
  local reply, e, c, d = run(self, "find " .. coll, cmd, session)
  if not reply then return nil, e, c, d end
  local out = {}
  local cur = reply.cursor
  for _, doc in ipairs(cur.firstBatch or {}) do out[#out + 1] = doc end
  local id = cur.id
  while id ~= nil and id ~= 0 and tostring(id) ~= "0" do
    if opts.limit and #out >= opts.limit then
      run(self, "killCursors " .. coll, { { "killCursors", coll }, { "cursors", array { id } } }, session)
      break
    end
    reply, e, c, d = run(self, "getMore " .. coll, { { "getMore", id }, { "collection", coll } }, session)
    if not reply then return nil, e, c, d end
    cur = reply.cursor
    for _, doc in ipairs(cur.nextBatch or {}) do out[#out + 1] = doc end
    id = cur.id
  end
  return out
end

function Wire:find_one(coll, filter, opts, session)
  local o = { limit = 1, sort = opts and opts.sort, projection = opts and opts.projection }
  local docs, e, c, d = self:find(coll, filter, o, session)
  if not docs then return nil, e, c, d end
  return docs[1] or false
end

function Wire:count(coll, filter, session)
  local cmd = { { "aggregate", coll }, { "pipeline", array { { ["$match"] = filter }, { ["$count"] = "n" } } },
                { "cursor", {} } }
  if not session and self.rc then cmd[#cmd + 1] = { "readConcern", self.rc } end
  local reply, e, c, d = run(self, "count " .. coll, cmd, session)
  if not reply then return nil, e, c, d end
  local first = reply.cursor and reply.cursor.firstBatch and reply.cursor.firstBatch[1]
  return first and first.n or 0
end

return M
