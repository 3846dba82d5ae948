-- spec/02-records/hostile_client_spec.lua - the record store given a hostile client's
-- values, decoded by the core json.decode, by lua-cjson when it is installed and by
-- ejson: sids and content ids that are operator tables, floats or junk text are
-- refused as invalid naming their type, with nothing sent; where{} takes a plain
-- table as data (operators, top-level $or, $regex refused; values cast to the field's
-- type), JavaScript is refused even in a trusted filter, a Q condition and $expr;
-- nothing is read that the caller should not reach, nothing is written; and the
-- exact casts work ("2" finds sid 2 and integer field 2).
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local rawdb = require "helpers.rawdb"
local records = require "mongostore.records"
local Q = records.Q

local ok = require("helpers").ok

-- The types, as text: the LuaJIT process below declares the same ones.
local TYPES = [[
local records = require "mongostore.records"
local Token = records.define { name = "token", dedup = "none",
  fields = { owner = "string", secret = "string", level = "integer", active = "boolean", tags = "string[]",
             score = "float" } }
local Grant = records.define { name = "grant", dedup = "none", fields = { what = "string" },
                               refs = { token = Token } }
]]
local Token, Grant = assert(load(TYPES .. " return Token, Grant", "=types"))()

local HATCH = "records.trusted{...} (a filter written as code)"

-- The decoders a web handler may use on a client's body.
local DECODERS = {
  core = function() return ms.json.decode end,
  cjson = function()
    local found, cjson = pcall(require, "cjson")
    if not found then return nil end
    return cjson.new().decode
  end,
}

TestRecordsHostileClient = {}

function TestRecordsHostileClient:setUp()
  self.name = helper.fresh_db("rhostile")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  self.store = ok(records.open(self.db, { types = { Token, Grant }, log = function() end }))
  self.alice = ok(self.store:save(Token, { owner = "alice", secret = "alicepw7", level = 1, active = true,
                                           tags = { "x", "y" }, score = 0.5 }))
  self.bob = ok(self.store:save(Token, { owner = "bob", secret = "bobpw9", level = 2, active = false,
                                         tags = { "z" }, score = 2.5 }))
end

function TestRecordsHostileClient:tearDown()
  if self.store then self.store:close() end
  if self.db then self.db:close() end
end

-- How many commands the store has sent: a refusal sends none.
function TestRecordsHostileClient:snapshot()
  return { commands = self.store:info().commands }
end

-- Every document of the store's collections, read behind its back (pymongo).
function TestRecordsHostileClient:raw()
  return { tokens = rawdb.docs(self.name, "records.token"), grants = rawdb.docs(self.name, "records.grant") }
end

function TestRecordsHostileClient:assert_refused(before, want, v, err, code)
  lu.assertNil(v, want)
  lu.assertEquals(code, "invalid", tostring(err))
  lu.assertEquals(type(err), "string", "the message is text")
  lu.assertEquals(tostring(err), want)
  lu.assertNotStrContains(tostring(err), "alicepw7", "the message names no stored value")
  lu.assertNotStrContains(tostring(err), "bobpw9", "the message names no stored value")
  local after = self:snapshot()
  lu.assertEquals(after, before, "nothing sent: " .. want)
end

-- Every call that runs a query returns the refusal the query carries.
function TestRecordsHostileClient:assert_query_refused(q, want)
  local before = self:snapshot()
  self:assert_refused(before, want, q:all())
  self:assert_refused(before, want, q:count())
  self:assert_refused(before, want, q:page { limit = 10 })
  -- builders after the refusal keep it
  self:assert_refused(before, want, q:only_latest():order_by { { "level", 1 } }:all())
end

function TestRecordsHostileClient:lookups(decode)
  local store = self.store
  local stored = self:raw()
  for _, body in ipairs { '{"sid":{"$gt":0}}', '{"sid":{"$ne":null}}', '{"sid":{"$in":[1,2,3]}}' } do
    local sid = decode(body).sid
    local before = self:snapshot()
    local want = "%s token: sid must be an integer (a number or its decimal text), got a table"
    self:assert_refused(before, want:format("fetch"), store:fetch(Token, sid))
    self:assert_refused(before, want:format("history"), store:history(Token, sid))
    self:assert_refused(before, want:format("replace"), store:replace(Token, sid, { owner = "mallory" }))
    self:assert_refused(before, "fetch_by_content_id token: cid must be a content id (64 hex digits), got a table",
      store:fetch_by_content_id(Token, sid))
    -- a ref given as an operator table is a record of undeclared keys, not a lookup
    self:assert_refused(before, "save grant: grant.token." .. next(sid) .. " is not declared",
      store:save(Grant, { what = "all", token = sid }))
  end
  local cases = {
    { '{"sid":1.5}', "a number with a fraction" },
    { '{"sid":"12abc"}', "a string that is not one" },
    { '{"sid":"1e3"}', "a string that is not one" },
    { '{"sid":" 1"}', "a string that is not one" },
    { '{"sid":"99999999999999999999999"}', "a string that is not one" },
    { '{"sid":true}', "a boolean" },
    { '{"sid":[1]}', "an array" },
    { '{}', "nil" },
    { '{"sid":null}', "null" },
  }
  for _, case in ipairs(cases) do
    local sid = decode(case[1]).sid
    local before = self:snapshot()
    self:assert_refused(before, "fetch token: sid must be an integer (a number or its decimal text), got " .. case[2],
      store:fetch(Token, sid))
    self:assert_refused(before, "history token: sid must be an integer (a number or its decimal text), got "
      .. case[2], store:history(Token, sid))
  end
  -- the content id: 64 hex digits, nothing else
  local before = self:snapshot()
  self:assert_refused(before, "fetch_by_content_id token: cid must be a content id (64 hex digits), got a string "
    .. "that is not one", store:fetch_by_content_id(Token, decode('{"c":"abc"}').c))
  lu.assertEquals(self:raw(), stored, "nothing written")
end

function TestRecordsHostileClient:filters(decode)
  local store = self.store
  local stored = self:raw()
  local function q(body) return store:query(Token):where(decode(body)) end
  -- the password check a login handler makes, with a client's operator instead of the password
  for _, op in ipairs { '{"$ne":null}', '{"$gt":""}', '{"$exists":true}', '{"$regex":"."}', '{"$in":["alicepw7"]}' } do
    local name = decode(op)
    name = next(name)
    self:assert_query_refused(q('{"owner":"alice","secret":' .. op .. '}'),
      "where token: field 'secret' holds an operator (" .. name .. "); write operators with Q (Q.secret:ne(v) and "
      .. "the others) or " .. HATCH)
  end
  -- an operator deeper in the value
  self:assert_query_refused(q('{"tags":{"x":{"$gt":""}}}'),
    "where token: field 'tags' holds an operator ($gt); write operators with Q (Q.tags:ne(v) and the others) or "
    .. HATCH)
  -- a top-level $or, $where, $expr
  self:assert_query_refused(q('{"$or":[{"owner":"alice"},{"owner":"bob"}]}'),
    "where token: the filter's key $or is an operator; write operators with Q (Q.and_, Q.or_, ...) or " .. HATCH)
  self:assert_query_refused(q('{"$where":"this.owner == \'alice\' || true"}'),
    "where token: the filter's key $where is an operator; write operators with Q (Q.and_, Q.or_, ...) or " .. HATCH)
  self:assert_query_refused(q('{"$expr":{"$function":{"body":"function() { return true }","args":[],'
      .. '"lang":"js"}}}'),
    "where token: the filter's key $expr is an operator; write operators with Q (Q.and_, Q.or_, ...) or " .. HATCH)
  -- JavaScript inside a filter marked as code, inside $expr, inside a Q condition
  local js = "where token: $where is refused (it runs JavaScript on the server)"
  self:assert_query_refused(store:query(Token):where(records.trusted(decode('{"$where":"true"}'))), js)
  self:assert_query_refused(store:query(Token):where(records.trusted(decode(
    '{"owner":"alice","$expr":{"$function":{"body":"function() { return true }","args":[],"lang":"js"}}}'))),
    "where token: $function is refused (it runs JavaScript on the server)")
  self:assert_query_refused(store:query(Token):where(records.trusted(decode(
    '{"$expr":{"$gt":[{"$accumulator":{"init":"function() {}"}},0]}}'))),
    "where token: $accumulator is refused (it runs JavaScript on the server)")
  self:assert_query_refused(store:query(Token):where(Q.and_(Q.owner:eq("alice"),
    records.trusted(decode('{"$where":"true"}')))), js)
  self:assert_query_refused(store:query(Token):where(Q.or_(Q.owner:eq("alice"), decode('{"$where":"true"}'))),
    "where token: the filter's key $where is an operator; write operators with Q (Q.and_, Q.or_, ...) or " .. HATCH)
  -- a client's value inside a Q condition is a value too
  self:assert_query_refused(store:query(Token):where(Q.secret:eq(decode('{"s":{"$ne":null}}').s)),
    "where token: field 'secret' takes a string, got a table")
  self:assert_query_refused(store:query(Token):where(Q.level:in_(decode('{"l":[1,{"$gt":0}]}').l)),
    "where token: field 'level' takes an integer (a number or its decimal text), got a table")
  -- values of the wrong type, undeclared fields, a filter that is not a table
  self:assert_query_refused(q('{"level":"high"}'),
    "where token: field 'level' takes an integer (a number or its decimal text), got a string that is not one")
  self:assert_query_refused(q('{"level":1.5}'),
    "where token: field 'level' takes an integer (a number or its decimal text), got a number with a fraction")
  self:assert_query_refused(q('{"active":"yes"}'),
    "where token: field 'active' takes a boolean (or the text true or false), got a string that is not one")
  self:assert_query_refused(q('{"owner":7}'), "where token: field 'owner' takes a string, got a number")
  self:assert_query_refused(q('{"isAdmin":true}'), "where token: isAdmin is not a field of token")
  self:assert_query_refused(q('{"tags":["x",1]}'),
    "where token: field 'tags' takes strings, got a number at [2]")
  self:assert_query_refused(store:query(Token):where(decode('[{"owner":"alice"}]')),
    "where token: the filter must be a Q condition or a table of field = value, got an array")
  self:assert_query_refused(store:query(Token):where(decode('{"f":"owner"}').f),
    "where token: the filter must be a Q condition or a table of field = value, got a string")
  -- what the attacks would have matched is still unreachable with the right filter and a wrong secret
  lu.assertEquals(ok(q('{"owner":"alice","secret":"guess"}'):count()), 0)
  lu.assertEquals(ok(q('{"owner":"alice","secret":"alicepw7"}'):count()), 1)
  lu.assertEquals(self:raw(), stored, "nothing written")
end

function TestRecordsHostileClient:casts(decode)
  local store = self.store
  local args = decode(string.format('{"alice":"%s","bob":"%s","level":"2","active":"false","score":"2.5"}',
    tostring(self.alice), tostring(self.bob)))
  -- a sid as text finds that record, through every lookup
  lu.assertEquals(ok(store:fetch(Token, args.bob))._sid, self.bob)
  lu.assertEquals(ok(store:fetch(Token, args.bob)).owner, "bob")
  lu.assertEquals(#ok(store:history(Token, args.alice)), 1)
  local cid = ok(store:fetch(Token, self.alice))._cid
  lu.assertEquals(ok(store:fetch_by_content_id(Token, cid:upper()))._sid, self.alice)
  -- filter values cast to the fields' types
  local function owners(cond)
    local out = {}
    for i, r in ipairs(ok(store:query(Token):where(cond):all())) do out[i] = r.owner end
    return out
  end
  lu.assertEquals(owners { level = args.level }, { "bob" })
  lu.assertEquals(owners { sid = args.bob }, { "bob" })
  lu.assertEquals(owners { active = args.active }, { "bob" })
  lu.assertEquals(owners { score = args.score }, { "bob" })
  lu.assertEquals(owners { tags = "x" }, { "alice" })
  lu.assertEquals(owners(Q.level:in_ { "1", args.level }), { "alice", "bob" })
  lu.assertEquals(owners(Q.sid:gte(args.bob)), { "bob" })
  lu.assertEquals(owners(Q.and_({ owner = "alice" }, Q.level:lt("2"))), { "alice" })
  -- a trusted filter, written as code, keeps its operators
  lu.assertEquals(owners(records.trusted { level = { ["$gte"] = 2 } }), { "bob" })
  -- a page size and a time as text
  lu.assertEquals(#ok(store:query(Token):page { limit = "1" }).items, 1)
  lu.assertEquals(ok(store:query(Token):as_of(tostring(os.time() * 1000000000 + 60000000000)):count()), 2)
  -- a ref by its sid's text, and a replace by the sid's text
  local g = ok(store:save(Grant, { what = "read", token = args.bob }))
  lu.assertEquals(ok(store:fetch(Grant, g)).token._sid, self.bob)
  local s2 = ok(store:replace(Token, args.alice, { owner = "alice", secret = "rotated", level = 1 }))
  lu.assertEquals(ok(store:fetch(Token, self.alice))._next, s2)
end

for name, get in pairs(DECODERS) do
  local label = name:sub(1, 1):upper() .. name:sub(2)
  TestRecordsHostileClient["test_lookups_" .. label] = function(self)
    local decode = get()
    if not decode then lu.skip("lua-cjson is not installed") end
    self:lookups(decode)
  end
  TestRecordsHostileClient["test_filters_" .. label] = function(self)
    local decode = get()
    if not decode then lu.skip("lua-cjson is not installed") end
    self:filters(decode)
  end
  TestRecordsHostileClient["test_casts_" .. label] = function(self)
    local decode = get()
    if not decode then lu.skip("lua-cjson is not installed") end
    self:casts(decode)
  end
end

-- A client's record that names store fields (_id, _sid, _lin, _prev, _role, _w) gets none of them: the store
-- sets them, so a save cannot join, overwrite or hide another record.
function TestRecordsHostileClient:test_store_fields_in_a_client_record_are_ignored()
  for _, get in pairs(DECODERS) do
    local decode = get()
    if decode then
      local body = decode(string.format('{"owner":"eve","_id":%d,"_sid":%d,"_lin":%d,"_prev":%d,"_role":"dep",'
        .. '"_w":"x","_ts":1}', self.alice, self.alice, self.alice, self.alice))
      local sid = ok(self.store:save(Token, body))
      lu.assertNotEquals(sid, self.alice)
      local r = ok(self.store:fetch(Token, sid))
      lu.assertEquals(r.owner, "eve")
      lu.assertEquals(r._lin, sid)
      lu.assertNil(r._prev)
      lu.assertEquals(r._role, "main")
      lu.assertTrue(r._ts > 1)
      local alice = ok(self.store:fetch(Token, self.alice))
      lu.assertEquals(alice.owner, "alice")
      lu.assertNil(alice._next)
    end
  end
end

-- Extended JSON turns {"$regex": ...} into a regex box and {"$numberInt": ...} into a number: a box
-- where a string belongs is refused, a number where an integer belongs is taken.
function TestRecordsHostileClient:test_ejson_boxes()
  local body = ms.ejson.decode('{"secret":{"$regex":"."},"level":{"$numberInt":"2"}}')
  local before = self:snapshot()
  self:assert_refused(before, "where token: field 'secret' takes a string, got a mongostore.Regex",
    self.store:query(Token):where({ secret = body.secret }):all())
  lu.assertEquals(ok(self.store:query(Token):where({ level = body.level }):all())[1].owner, "bob")
end

-- Values beyond what a field, a page or a clock can hold are invalid, with nothing sent: the
-- ends of the int64 range, floats past it, times past 2262 (as nanoseconds they wrap).
function TestRecordsHostileClient:test_out_of_range_values()
  local before = self:snapshot()
  local q = self.store:query(Token)
  for _, v in ipairs { math.maxinteger, math.mininteger, 2 ^ 63, -2 ^ 64, 1e300, 0 / 0, math.huge,
                       "9223372036854775808", "99999999999999999999" } do
    local p, err, code = q:page { limit = v }
    lu.assertNil(p, tostring(v))
    lu.assertEquals(code, "invalid", tostring(err))
    lu.assertStrContains(err, "page token: limit must be an integer from 1 to 10000")
  end
  for _, v in ipairs { 2 ^ 63, -2 ^ 64, 1e300, math.huge, 0 / 0, "9999-12-31T23:59:59Z", "2262-04-12T00:00:00Z",
                       "1677-09-21T00:00:00Z", "99999999999999999999" } do
    local r, err, code = q:as_of(v):all()
    lu.assertNil(r, tostring(v))
    lu.assertEquals(code, "invalid", tostring(err))
    lu.assertStrContains(err, "as_of: ")
  end
  for _, v in ipairs { 2 ^ 63, -2 ^ 64, 1e300, "9223372036854775808" } do
    local r, err, code = self.store:fetch(Token, v)
    lu.assertNil(r, tostring(v))
    lu.assertEquals(code, "invalid", tostring(err))
  end
  lu.assertEquals(self:snapshot(), before, "nothing sent")
  -- the ends of the range themselves are instants: nothing before, everything after (no wrap)
  lu.assertEquals(#ok(q:as_of(math.mininteger):all()), 0)
  lu.assertEquals(#ok(q:as_of(math.maxinteger):all()), 2)
  lu.assertEquals(#ok(q:as_of("2262-04-11T00:00:00Z"):all()), 2)
end

-- The same attacks from a LuaJIT process (numbers are doubles there, so text beyond 2^53 is no exact sid), with
-- the core json.decode and lua-cjson when LuaJIT has it.
function TestRecordsHostileClient:test_luajit()
  local f = io.open(helper.root() .. "/build/jit/mongostore/core.so", "rb")
  if not f then lu.skip("the LuaJIT core is not built (make jit)") end
  f:close()
  local root = helper.root()
  local code = string.format("package.path=%q; package.cpath=%q .. ';' .. package.cpath; URI=%q; DB=%q; BOB=%d; ",
    root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path, root .. "/build/jit/?.so", helper.uri(),
    self.name, self.bob) .. TYPES .. [[
    local ms = require "mongostore"
    local db = assert(ms.database(URI, { db = DB, wait = 10 }))
    local store = assert(records.open(db, { types = { Token, Grant }, log = function() end }))
    local decoders = { core = ms.json.decode }
    local found, cjson = pcall(require, "cjson")
    if found then decoders.cjson = cjson.new().decode end
    -- each line: the name, what came back and how many commands the call sent
    local function try(name, fn)
      local before = store:info().commands
      local v, err, code = fn()
      print(string.format("%s %s %s %s [%d]", name, tostring(v), tostring(code), tostring(err),
        store:info().commands - before))
    end
    for dname, decode in pairs(decoders) do
      local function q(body) return store:query(Token):where(decode(body)) end
      try(dname .. ":fetch_gt", function() return store:fetch(Token, decode('{"s":{"$gt":0}}').s) end)
      try(dname .. ":replace_ne", function()
        return store:replace(Token, decode('{"s":{"$ne":null}}').s, { owner = "mallory" })
      end)
      try(dname .. ":where_ne", function() return q('{"owner":"alice","secret":{"$ne":null}}'):count() end)
      try(dname .. ":where_or", function() return q('{"$or":[{"owner":"alice"},{"owner":"bob"}]}'):all() end)
      try(dname .. ":trusted_js", function()
        return store:query(Token):where(records.trusted(decode('{"$where":"true"}'))):count()
      end)
      try(dname .. ":big", function() return store:fetch(Token, "9007199254740993") end)
      try(dname .. ":cast_sid", function() return assert(store:fetch(Token, tostring(BOB))).owner end)
      try(dname .. ":cast_level", function() return #assert(q('{"level":"2"}'):all()) end)
      -- a limit or sid beyond a double's exact range (a decoder may box it): out of range, never a raise
      try(dname .. ":page_big", function()
        return store:query(Token):page { limit = decode('{"n":9223372036854775807}').n }
      end)
      try(dname .. ":page_huge", function() return store:query(Token):page { limit = 1 / 0 } end)
      try(dname .. ":fetch_huge", function() return store:fetch(Token, 1e300) end)
    end
    store:close()
  ]]
  local p = assert(io.popen(string.format("LD_PRELOAD= luajit -e %s 2>&1", helper.shell_quote(code)), "r"))
  local out = p:read("a")
  lu.assertTrue(p:close(), out)
  local decoders = { "core" }
  if os.execute("luajit -e 'require \"cjson\"' >/dev/null 2>&1") then decoders[2] = "cjson" end
  local sid_msg = "sid must be an integer (a number or its decimal text), got "
  for _, d in ipairs(decoders) do
    local want = {
      fetch_gt = "nil invalid fetch token: " .. sid_msg .. "a table [0]",
      replace_ne = "nil invalid replace token: " .. sid_msg .. "a table [0]",
      where_ne = "nil invalid where token: field 'secret' holds an operator ($ne); write operators with Q "
        .. "(Q.secret:ne(v) and the others) or " .. HATCH .. " [0]",
      where_or = "nil invalid where token: the filter's key $or is an operator; write operators with Q (Q.and_, "
        .. "Q.or_, ...) or " .. HATCH .. " [0]",
      trusted_js = "nil invalid where token: $where is refused (it runs JavaScript on the server) [0]",
      big = "nil invalid fetch token: " .. sid_msg .. "a string that is not one [0]",
      cast_sid = "bob nil nil [1]",
      cast_level = "1 nil nil [1]",
      page_big = "nil invalid page token: limit must be an integer from 1 to 10000, got one out of range [0]",
      page_huge = "nil invalid page token: limit must be an integer from 1 to 10000, got a number that is not "
        .. "finite [0]",
      fetch_huge = "nil invalid fetch token: " .. sid_msg .. "a number [0]",
    }
    for k, line in pairs(want) do
      lu.assertStrContains(out, d .. ":" .. k .. " " .. line .. "\n", false)
    end
  end
  lu.assertEquals(ok(self.store:query(Token):count()), 2, "nothing written")
  lu.assertNil(ok(self.store:fetch(Token, self.alice))._next)
  lu.assertNil(ok(self.store:fetch(Token, self.bob))._next)
end
