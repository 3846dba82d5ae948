-- examples/articles.lua - models (mongostore.model): the seed's whole example
-- in Lua: change tracking, atomic updates, optimistic locking, soft delete,
-- bulk writes, a transaction rolled back in the database and in memory (where
-- the server has transactions) and validation. Run it with
-- `tools/with-server lua5.4 examples/articles.lua` (or set MONGOSTORE_URI).
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local ms = require "mongostore"
local model = require "mongostore.model"
local Q, ops = model.Q, model.ops

local uri = os.getenv("MONGOSTORE_URI") or "mongodb://127.0.0.1:27017"
local db = assert(ms.database(uri, { db = "mongostore_articles_" .. ms.uuid():sub(1, 8), wait = 30 }))

local Article = model.define {
  name = "Article",
  collection = "articles",
  fields = {
    title = { "string", default = "" },
    views = { "integer", default = 0 },
    tags = { "array", of = "string", default = {} },
    created_at = "created_at", updated_at = "updated_at", deleted_at = "deleted_at",
    rev = "revision",
  },
  -- partial: a soft-deleted article does not hold on to its title
  indexes = { { keys = { { "title", 1 } }, unique = true } },
}
local registry = assert(model.registry(db, { Article }))

local function list(t) return "{" .. table.concat(t, ",") .. "}" end

-- Change tracking: a document remembers what it looked like when it was
-- loaded; save() sends only the difference, an unchanged one sends nothing.
local article = assert(Article:insert { title = "Draft" })
article.title = "Final"
article.tags[#article.tags + 1] = "news"
local ch = article:changes()
print(("changes: title=%s tags=%s"):format(ch["$set"].title, list(ch["$set"].tags)))
assert(article:save())
local before = db:stats().total
assert(article:save())
print(("saved: rev %d, changes left %d, an unchanged save sent %d commands"):format(article.rev,
  next(article:changes()) and 1 or 0, db:stats().total - before))

-- Atomic updates: one round trip, the document returned.
local updated = assert(Article:update(article.id, ops.inc { views = 1 }, ops.push { tags = "featured" },
                                      { title = "Final v2" }))
print(("update: views %d, tags %s, rev %d"):format(updated.views, list(updated.tags), updated.rev))
local n = assert(Article:find(Q.views:gte(1)):update(ops.inc { views = 10 }))   -- no documents loaded
print(("find():update: %d modified"):format(n))
local created = assert(Article:upsert(Q.title:eq("Landing"), ops.inc { views = 1 },
                                      ops.set_on_insert { tags = { "page" } }))
print(("upsert: views %d, created_at set %s, rev %d"):format(created.views, tostring(created.created_at ~= nil),
  created.rev))

-- Optimistic locking: the copy loaded at rev 1 is stale (the database is at 3).
local stale = article
stale.title = "Overwrite?"
local ok, _, code, detail = stale:save()
if not ok and code == "stale" then assert(stale:reload()) end
print(("stale: %s (stored at rev %d), reloaded title %q at rev %d"):format(code, detail.found, stale.title,
  stale.rev))

-- Soft delete: hidden, counted when unscoped, restored, then removed for good.
assert(stale:delete())
print(("soft delete: get -> %s, unscoped count %d"):format(tostring(Article:get(stale.id)),
  assert(Article:find():unscoped("soft_delete"):count())))
assert(Article:find(Q.id:eq(stale.id)):unscoped("soft_delete"):update { deleted_at = ms.null })   -- restore
assert(assert(Article:get(stale.id)):delete { hard = true })                                        -- really remove
print(("hard delete: unscoped count %d"):format(assert(Article:find():unscoped("soft_delete"):count())))

-- Bulk: insert_many, a bulk save of deltas in one round trip, bulk_write.
local drafts = {}
for i = 0, 2 do drafts[#drafts + 1] = Article:new { title = "bulk " .. i } end
local result = assert(Article:insert_many(drafts))
print(("insert_many: %d inserted, %d errors"):format(#result.inserted, #result.errors))
local docs = assert(Article:find(Q.title:prefix("bulk")):all())
for _, doc in ipairs(docs) do doc.views = doc.views + 5 end
before = db:stats().total
print(("bulk_save: %d saved in %d round trip"):format(assert(Article:bulk_save(docs)), db:stats().total - before))
assert(Article:bulk_write { model.update_one(Q.title:eq("bulk 0"), ops.inc { views = 1 }) })
print(("bulk_write: bulk 0 has %d views"):format(assert(Article:find(Q.title:eq("bulk 0")):one()).views))
local mixed = assert(Article:insert_many({ { title = "ok" }, { title = 42 }, { title = "ok" } }, { ordered = false }))
print(("insert_many unordered: %d inserted, errors at %d (%s: %s) and %d (%s, server code %d)"):format(
  #mixed.inserted, mixed.errors[1].index, mixed.errors[1].code, mixed.errors[1].detail.errors[1].field,
  mixed.errors[2].index, mixed.errors[2].code, mixed.errors[2].detail.server_code))

-- Transactions: fn raises, so the transaction aborts; the database and the
-- document in memory are put back.
if db:info().transactions then
  local landing = assert(Article:find(Q.title:eq("Landing")):one())
  local raised = not pcall(registry.transaction, registry, function(tx)
    landing.tags[#landing.tags + 1] = "promoted"
    assert(landing:save { session = tx })
    error("changed my mind")
  end)
  local changes = landing:changes()["$set"]
  print(("transaction: raised %s, stored tags %s, rev %d, pending tags %s"):format(tostring(raised),
    list(assert(Article:get(landing.id)).tags), landing.rev, list(changes.tags)))
else
  print("transactions: not on this server (" .. tostring(db:info().replica_set) .. ")")
end

-- Validation: every write is checked before anything is sent.
local landing = assert(Article:find(Q.title:eq("Landing")):one())
local _, _, vcode, vdetail = Article:update(landing.id, { title = 123 })
print(("validation: update -> %s (%s)"):format(vcode, vdetail.errors[1].field))
local draft = Article:new { title = "Draft" }
draft.views = "many"
_, _, vcode, vdetail = draft:insert()
print(("validation: insert -> %s (%s), still new %s, stored %d"):format(vcode, vdetail.errors[1].field,
  tostring(draft.is_new), assert(Article:count(Q.title:eq("Draft")))))
local _, nerr, ncode = Article:update(("0"):rep(24), { title = "nobody" })
print(("update of no document: %s (%s)"):format(ncode, nerr))

assert(db:command({ { "dropDatabase", 1 } }))
db:close()
