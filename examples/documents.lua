-- examples/documents.lua - the document API by hand: a collection of
-- articles is written, indexed, queried, updated in bulk and read back with
-- every type it was written with; on a server with transactions, a transfer
-- between two accounts runs in one. Run it with
-- `tools/with-server lua5.4 examples/documents.lua` (or set MONGOSTORE_URI).
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local ms = require "mongostore"

local uri = os.getenv("MONGOSTORE_URI") or "mongodb://127.0.0.1:27017"
local db = assert(ms.database(uri, { db = "mongostore_docs_" .. ms.uuid():sub(1, 8), wait = 30 }))
local articles = db:collection("articles")

-- A unique index on the slug: a second article with the same slug is refused.
assert(articles:create_index({ { "slug", 1 } }, { unique = true, name = "by_slug" }))

local now = ms.date()
local res = assert(articles:insert_many({
  { slug = "hello", title = "Hello", views = ms.int32(0), score = 4.5, tags = ms.array { "intro" }, at = now },
  { slug = "lua", title = "Lua and BSON", views = ms.int32(10), score = 3.0, tags = ms.array { "lua", "bson" },
    at = now, price = ms.decimal("9.90") },
  { slug = "hello", title = "A copy" },   -- refused: the slug is taken
}, { ordered = false }))
print(("inserted %d, refused %d (%s at index %d)"):format(#res.inserted, #res.errors, res.errors[1].code,
                                                          res.errors[1].index))

-- Keys, sorts and projections are ordered: a list of pairs keeps the order.
for doc in articles:find({}, { sort = { { "views", -1 } }, projection = { title = 1, views = 1 } }):each() do
  print(("  %-14s views %d (_id %s)"):format(doc.title, doc.views, tostring(doc._id)))
end

-- Atomic operators and a bulk write: each failed op is reported by its index.
local up = assert(articles:update_one({ slug = "lua" }, { ["$inc"] = { views = 1 }, ["$set"] = { score = 5.0 } }))
print(("update_one: matched %d, modified %d"):format(up.matched, up.modified))
local bulk = assert(articles:bulk_write({
  { update_one = { filter = { slug = "hello" }, update = { ["$push"] = { tags = "welcome" } } } },
  { insert_one = { slug = "lua", title = "Another copy" } },   -- refused: the slug is taken
  { delete_many = { filter = { views = { ["$gt"] = 100 } } } },
}, { ordered = false }))
print(("bulk_write: modified %d, inserted %d, errors at %d"):format(bulk.modified, bulk.inserted, bulk.errors[1].index))

-- A document read back remembers its types and order: int32 stays int32,
-- the decimal keeps its digits, the date its milliseconds.
local lua = assert(articles:find_one({ slug = "lua" }))
print(("lua: views %d (%s), price %s, at %s"):format(lua.views, math.type(lua.views), tostring(lua.price),
                                                   tostring(lua.at)))
assert(articles:replace_one({ _id = lua._id }, lua))

-- A transaction, where the server has them (replica sets; SecantusDB).
if db:info().transactions then
  local accounts = db:collection("accounts")
  assert(accounts:insert_many({ { _id = "alice", balance = 100 }, { _id = "bob", balance = 0 } }))
  local ok, err = db:transaction(function(session)
    local a, msg, code = accounts:update_one({ _id = "alice", balance = { ["$gte"] = 30 } },
                                             { ["$inc"] = { balance = -30 } }, { session = session })
    if not a then return nil, msg, code end
    if a.matched == 0 then return nil, "not enough money", "invalid" end
    return accounts:update_one({ _id = "bob" }, { ["$inc"] = { balance = 30 } }, { session = session })
  end)
  assert(ok, err)
  print(("transfer: alice %d, bob %d"):format(accounts:find_one({ _id = "alice" }).balance,
                                             accounts:find_one({ _id = "bob" }).balance))
else
  print("transactions: not on this server (" .. tostring(db:info().replica_set) .. ")")
end

assert(db:command({ { "dropDatabase", 1 } }))
db:close()
