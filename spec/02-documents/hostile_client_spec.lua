-- spec/02-documents/hostile_client_spec.lua - client JSON handed to models and
-- to the document API, as a web handler would (issue 29, parts 1 to 3): ids
-- cast to the declared type or refused, plain-table filters compared as data,
-- server-side JavaScript refused, plain updates setting declared fields only,
-- managed fields never writable; the document API's sanitize. Every attack is
-- decoded by the core json.decode, by ejson.decode and by lua-cjson, and each
-- asserts what was read or written, not only the error.
local lu = require "luaunit"
local ms = require "mongostore"
local model = require "mongostore.model"
local helper = require "helpers"

local Q, ops = model.Q, model.ops
local articles = require "fixtures.articles"
local ok, invalid = articles.ok, articles.invalid

local has_cjson, cjson = pcall(require, "cjson")

-- The decoders a handler may use, each giving the client's body as Lua tables.
local DECODERS = {
  { "json", function(s) return assert(ms.json.decode(s)) end },
  { "ejson", function(s) return assert(ms.ejson.decode(s)) end },
}
if has_cjson then DECODERS[#DECODERS + 1] = { "cjson", function(s) return cjson.decode(s) end } end

TestHostileClient = {}

function TestHostileClient:setUp()
  self.name = helper.fresh_db("mhostile")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  self.Token = model.define { name = "Token", collection = "tokens",
                              fields = { _id = "string", user = "string" } }
  self.User = model.define { name = "User", collection = "users", fields = {
    name = "string", password = "string", age = "integer", born = "date", friend = "objectid",
    note = { "string", default = "" }, created_at = "created_at", updated_at = "updated_at",
    deleted_at = "deleted_at", rev = "revision",
  } }
  self.Counter = model.define { name = "Counter", collection = "counters", fields = { _id = "integer", n = "integer" } }
  ok(model.registry(self.db, { self.Token, self.User, self.Counter }))
  ok(self.Token:insert { id = "t-alice", user = "alice" })
  ok(self.Token:insert { id = "t-bob", user = "bob" })
  self.alice = ok(self.User:insert { name = "alice", password = "secret", age = 30,
                                      born = ms.date(0), friend = ms.objectid() })
  ok(self.Counter:insert { id = 2, n = 20 })
end

function TestHostileClient:tearDown()
  if self.db then self.db:close() end
end

-- The raw stored documents of a collection (what was written, whatever a model says).
function TestHostileClient:raw(coll)
  return ok(ok(self.db:collection(coll):find({}, { sort = { _id = 1 } })):all())
end

-- Part 1: an id from a client is cast to the declared type or refused.
function TestHostileClient:test_ids_are_cast_or_refused()
  local T, U, C = self.Token, self.User, self.Counter
  local before = { tokens = self:raw("tokens"), users = self:raw("users") }
  for _, d in ipairs(DECODERS) do
    local name, decode = d[1], d[2]
    for _, body in ipairs { '{"token":{"$gt":""}}', '{"token":{"$ne":null}}', '{"token":{"$regex":".*"}}',
                            '{"token":["t-alice"]}', '{"token":{"$in":["t-alice","t-bob"]}}' } do
      local b = decode(body)
      local what = name .. " " .. body
      invalid("the id cannot be taken", T.get, T, b.token)
      invalid("the id cannot be taken", T.update, T, b.token, { user = "mallory" })
      invalid("the id cannot be taken", T.delete, T, b.token)
      invalid("the id cannot be taken", T.exists, T, b.token)
      invalid("the id cannot be taken", U.get, U, b.token)
      invalid("the id cannot be taken", U.restore, U, b.token)
      local _, err = T:get(b.token)
      lu.assertStrContains(tostring(err), "it is a string", what)
      lu.assertNil(tostring(err):find("$", 1, true), what .. ": the message names the type, not the content")
    end
    -- a missing id is refused too (the filter {} would be any document)
    invalid("the id is missing", T.update, T, decode('{"a":1}').token, { user = "mallory" })
    invalid("the id is missing", T.get, T, decode('{"token":null}').token)
  end
  lu.assertEquals(self:raw("tokens"), before.tokens, "no token read and changed")
  lu.assertEquals(self:raw("users"), before.users)
  -- the exact conversions are made: a hex string to an ObjectId, decimal text to an integer
  lu.assertEquals(ok(U:get(tostring(self.alice.id))).name, "alice")
  lu.assertEquals(ok(C:get("2")).n, 20, "a query string's \"2\" is the id 2")
  invalid("the id cannot be taken", C.get, C, "2.5")
  invalid("the id cannot be taken", C.get, C, "2 ")
  invalid("the id cannot be taken", C.get, C, "99999999999999999999999")
  invalid("the id cannot be taken", U.get, U, "not-an-objectid")
  invalid("the id cannot be taken", T.get, T, 12)
  lu.assertTrue(ok(T:exists("t-bob")))
  lu.assertEquals(T:exists("t-nobody"), false)
end

-- Part 2: a plain-table filter compares values as data.
function TestHostileClient:test_filters_take_values_as_data()
  local U = self.User
  for _, d in ipairs(DECODERS) do
    local name, decode = d[1], d[2]
    for _, pw in ipairs { '{"$ne":null}', '{"$gt":""}', '{"$regex":".*"}', '{"$exists":true}', '{"$in":["secret"]}',
                          '{"$where":"return true"}', '{"$not":{"$eq":"x"}}', '{"a":{"$gt":""}}' } do
      local b = decode('{"name":"alice","password":' .. pw .. '}')
      local what = name .. " " .. pw
      local v, err, code = U:find({ name = b.name, password = b.password }):first()
      lu.assertNil(v, what .. ": logged in without the password")
      lu.assertEquals(code, "invalid", what)
      lu.assertStrContains(tostring(err), "field 'password'", what)
      lu.assertStrContains(tostring(err), "model.trusted", what .. ": the message points at the way to write operators")
      invalid("field 'password'", function() return U:find { name = b.name, password = b.password }:count() end)
      invalid("field 'password'", function() return U:count { name = b.name, password = b.password } end)
      invalid("field 'password'", function() return U:lean { name = b.name, password = b.password } end)
      invalid("field 'password'", function() return U:distinct("name", { password = b.password }) end)
      invalid("field 'password'", function() return U:find { password = b.password }:update { note = "x" } end)
      invalid("field 'password'", function() return U:find { password = b.password }:delete() end)
      invalid("field 'password'", function() return U:upsert({ password = b.password }, { note = "x" }) end)
      invalid("field 'password'", function()
        return U:bulk_write { model.update_one({ password = b.password }, { note = "x" }) }
      end)
    end
    -- the whole body as a filter: a top-level operator is refused
    for _, body in ipairs { '{"$or":[{"name":"alice"},{"name":{"$ne":""}}]}', '{"$where":"sleep(100)"}',
                            '{"$expr":{"$eq":["$password","$password"]}}', '{"name":"alice","$comment":"x"}' } do
      invalid("is an operator", function() return U:find(decode(body)):first() end)
    end
  end
  -- a regex from Extended JSON is an operator in effect: refused
  local b = ms.ejson.decode('{"name":{"$regularExpression":{"pattern":".*","options":""}}}')
  invalid("regular expression", function() return U:find { name = b.name }:first() end)
  -- nothing was changed by the refused writes
  local raw = self:raw("users")
  lu.assertEquals(#raw, 1)
  lu.assertEquals({ raw[1].note, raw[1].rev }, { "", 0 })
  -- the right password still logs in, and values are cast where exact
  lu.assertEquals(ok(U:find({ name = "alice", password = "secret" }):first()).age, 30)
  lu.assertEquals(ok(U:find({ age = "30" }):count()), 1, "decimal text to the integer field")
  lu.assertEquals(ok(U:find({ born = "1970-01-01T00:00:00Z" }):count()), 1, "ISO text with a zone to the date field")
  lu.assertEquals(ok(U:find({ friend = tostring(self.alice.friend) }):count()), 1, "24 hex digits to the ObjectId")
  lu.assertEquals(ok(U:find(Q.age:gte("30")):count()), 1, "Q operands are cast the same way")
  lu.assertEquals(ok(U:find(Q.age:in_ { "29", "30" }):count()), 1)
  invalid("cannot take the value", function() return U:find({ age = "30 or 1=1" }):count() end)
  invalid("cannot take the value", function() return U:find({ born = "1970-01-01T00:00:00" }):count() end)
  invalid("cannot take the value", function() return U:find({ name = 5 }):count() end)
  invalid("cannot take the value", function() return U:find(Q.name:eq { ["$gt"] = "" }):count() end)
  -- operators written as code: Q, or a table marked trusted
  lu.assertEquals(ok(U:find(Q.password:ne(ms.null)):count()), 1)
  lu.assertEquals(ok(U:find(model.trusted { password = { ["$exists"] = true } }):count()), 1)
end

-- $where, $function and $accumulator are refused in every model route, trusted or not.
function TestHostileClient:test_server_javascript_is_refused_everywhere()
  local U = self.User
  local js = { ["$where"] = "return true" }
  invalid("$where is refused", function() return U:find(model.trusted(js)):first() end)
  invalid("$function is refused", function()
    return U:find(model.trusted { ["$expr"] = { ["$function"] = { body = "function() { return true }",
                                                                  args = ms.array {}, lang = "js" } } }):first()
  end)
  invalid("$where is refused", function() return U:find(Q.and_(Q.name:eq("alice"), model.trusted(js))):first() end)
  invalid("$function is refused", U.aggregate, U, { { ["$match"] = { ["$expr"] = { ["$function"] = {} } } } })
  invalid("$accumulator is refused", U.aggregate, U, {
    { ["$group"] = { _id = 1, x = { ["$accumulator"] = {} } } } })
  invalid("$where is refused", U.update, U, self.alice.id, model.trusted { ["$set"] = { note = js } })
end

-- Part 3: a plain update sets declared fields; operators and managed fields are refused.
function TestHostileClient:test_updates_set_declared_fields_only()
  local U = self.User
  local id = self.alice.id
  local before = self:raw("users")
  for _, d in ipairs(DECODERS) do
    local decode = d[2]
    for _, body in ipairs {
      '{"$rename":{"note":"deleted_at"}}', '{"$set":{"created_at":"2000-01-01T00:00:00Z"}}',
      '{"$unset":{"password":""}}', '{"$inc":{"rev":100}}', '{"isAdmin":true}',
      '{"note":"x","$set":{"isAdmin":true}}', '{"note":{"$gt":1}}', '{"created_at":"2000-01-01T00:00:00Z"}',
      '{"updated_at":"2000-01-01T00:00:00Z"}', '{"deleted_at":"2000-01-01T00:00:00Z"}', '{"rev":1}',
      '{"_id":"5f0000000000000000000000"}', '{"id":"5f0000000000000000000000"}',
    } do
      local v, err, code = U:update(id, decode(body))
      lu.assertNil(v, body)
      lu.assertEquals(code, "invalid", body .. ": " .. tostring(err))
      v, _, code = U:find({ name = "alice" }):update(decode(body))
      lu.assertNil(v, body)
      lu.assertEquals(code, "invalid", body)
    end
  end
  -- trusted updates are code, but the managed fields stay the model's, $rename's destinations too
  invalid("$rename's destination", U.update, U, id, model.trusted { ["$rename"] = { note = "deleted_at" } })
  invalid("$rename's destination", U.update, U, id, ops.rename { note = "isAdmin" })
  invalid("written by the model", U.update, U, id, model.trusted { ["$currentDate"] = { updated_at = true } })
  invalid("written by the model", U.update, U, id, model.trusted { ["$set"] = { deleted_at = ms.date() } })
  invalid("immutable", U.update, U, id, model.trusted { ["$setOnInsert"] = { created_at = ms.date() } })
  lu.assertEquals(self:raw("users"), before, "nothing was written")
  -- a declared field from the body is set, and the model's own fields move as always
  local doc = ok(U:update(id, ms.json.decode('{"note":"hello","age":31}')))
  lu.assertEquals({ doc.note, doc.age, doc.rev, doc.deleted_at }, { "hello", 31, 1, nil })
  doc = ok(U:update(id, model.trusted { ["$inc"] = { age = 1 } }))
  lu.assertEquals(doc.age, 32)
end

-- Soft delete and restore are the model's own calls; an unscoped update may clear deleted_at (the seed's restore).
function TestHostileClient:test_delete_and_restore_by_id()
  local U = self.User
  local id = tostring(self.alice.id)
  lu.assertTrue(ok(U:delete(id)))
  lu.assertNil(U:get(id))
  lu.assertFalse(ok(U:exists(id)))
  lu.assertTrue(ok(U:exists(id, { unscoped = true })))
  local _, _, code = U:delete(id)
  lu.assertEquals(code, "not_found", "deleted already")
  invalid("written by the model", U.update, U, id, { deleted_at = ms.null })
  invalid("written by the model", U.update, U, id, { deleted_at = ms.date() }, model.options { unscoped = true })
  local back = ok(U:restore(id))
  lu.assertEquals({ back.name, back.deleted_at, back.rev }, { "alice", nil, 2 })
  _, _, code = U:restore(id)
  lu.assertEquals(code, "not_found", "not deleted")
  -- the seed's restore: an unscoped update that clears deleted_at
  ok(U:delete(id))
  lu.assertEquals(U:find(Q.id:eq(id)):unscoped("soft_delete"):update { deleted_at = ms.null }, 1)
  lu.assertEquals(ok(U:get(id)).name, "alice")
  lu.assertTrue(ok(U:delete(id, { hard = true })))
  lu.assertEquals(#self:raw("users"), 0)
end

-- The document API stays driver-like; sanitize takes a client's filter as data.
function TestHostileClient:test_document_api_sanitize()
  local users = self.db:collection("users")
  for _, d in ipairs(DECODERS) do
    local name, decode = d[1], d[2]
    local b = decode('{"name":"alice","password":{"$ne":null}}')
    lu.assertNotNil(ok(users:find_one({ name = b.name, password = b.password })), "driver-like: the operator runs")
    local v, err = users:find_one({ name = b.name, password = b.password }, { sanitize = true })
    lu.assertNil(v, name .. ": sanitized, the operator is a value compared with $eq")
    lu.assertNil(err)
    lu.assertEquals(ok(users:count({ password = b.password }, { sanitize = true })), 0)
    local f = ok(ms.sanitize(decode('{"$or":[{"name":"x"},{"password":{"$gt":""}}]}')))
    lu.assertEquals(f["$or"][2].password, { ["$eq"] = { ["$gt"] = "" } })
    lu.assertEquals(ok(users:count(f)), 0)
    for _, body in ipairs { '{"$where":"true"}', '{"$expr":{"$eq":[1,1]}}',
                            '{"name":{"$where":"true"}}', '{"$and":[{"a":{"$function":{}}}]}', '{"$or":{"a":1}}' } do
      local _, e, code = ms.sanitize(decode(body))
      lu.assertEquals(code, "invalid", body)
      lu.assertNotNil(e)
      local r, _, c2 = users:update_many(decode(body), { ["$set"] = { note = "pwned" } }, { sanitize = true })
      lu.assertNil(r, body)
      lu.assertEquals(c2, "invalid", body)
      r, _, c2 = users:delete_many(decode(body), { sanitize = true })
      lu.assertNil(r, body)
      lu.assertEquals(c2, "invalid", body)
    end
  end
  -- the caller's table is left as it was; sanitize = false is the driver's behaviour
  local mine = { password = { ["$ne"] = ms.null } }
  ok(ms.sanitize(mine))
  lu.assertEquals(mine, { password = { ["$ne"] = ms.null } })
  lu.assertEquals(ok(users:count(mine, { sanitize = false })), 1)
  local raw = self:raw("users")
  lu.assertEquals(raw[1].note, "", "no sanitized write reached a document")
  lu.assertErrorMsgContains("opts.sanitize must be a boolean", users.find_one, users, {}, { sanitize = "yes" })
end

function TestHostileClient:test_cjson_is_covered()
  if not has_cjson then lu.skip("lua-cjson is not installed (tools/deps.sh installs it)") end
  local b = cjson.decode('{"token":{"$gt":""}}')
  invalid("the id cannot be taken", self.Token.get, self.Token, b.token)
  -- cjson's null (a light userdata) is null: no id
  invalid("the id is missing", self.Token.get, self.Token, cjson.decode('{"t":null}').t)
end
