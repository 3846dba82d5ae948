-- spec/05-secantus/model_index_spec.lua - a unique index declared on a
-- soft-deleting model does not count deleted documents (mongoose-delete #86):
-- model.registry creates it partial, holding only the documents whose
-- deleted_at is missing or null ({ deleted_at = null } is an equality, which
-- partial filters allow; $exists: false is not). mongo-java-server ignores
-- partial filters, so what the server does with it is checked on SecantusDB;
-- the declared filter is checked on both.
local lu = require "luaunit"
local ms = require "mongostore"
local model = require "mongostore.model"
local helper = require "helpers"

local Q = model.Q
local SERVER = os.getenv("MONGOSTORE_TEST_SERVER") or "other"

local ok = require("helpers").ok

TestModelIndex = {}

function TestModelIndex:setUp()
  self.name = helper.fresh_db("mix")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  self.Article = model.define {
    name = "Article", collection = "articles",
    fields = { title = "string", slug = "string", deleted_at = "deleted_at", rev = "revision" },
    indexes = {
      { keys = { { "slug", 1 } }, unique = true },
      { keys = { { "title", 1 } }, unique = true, include_deleted = true, name = "every_title" },
    },
  }
  ok(model.registry(self.db, { self.Article }))
end

function TestModelIndex:tearDown()
  if self.db then self.db:close() end
end

function TestModelIndex:index(name)
  for _, ix in ipairs(ok(self.db:collection("articles"):list_indexes())) do
    if ix.name == name then return ix end
  end
end

function TestModelIndex:test_declared_partial_filter()
  local ix = self:index("slug_1")
  lu.assertNotNil(ix, "the declared index exists")
  lu.assertTrue(ix.unique)
  if SERVER ~= "java" then
    lu.assertEquals(ix.partialFilterExpression, { deleted_at = ms.null })
  end
  lu.assertNil(self:index("every_title").partialFilterExpression, "include_deleted: a plain unique index")
end

function TestModelIndex:test_deleted_documents_do_not_count()
  if SERVER == "java" then return lu.skip("mongo-java-server ignores partial index filters") end
  local A = self.Article
  local first = ok(A:insert { title = "one", slug = "hello" })
  local v, err, code, detail = A:insert { title = "two", slug = "hello" }
  lu.assertEquals({ v, code, type(err) }, { nil, "duplicate", "string" }, "two live ones with one slug")
  lu.assertEquals(detail.server_code, 11000)
  ok(first:reload())
  ok(first:delete())
  local second = ok(A:insert { title = "two", slug = "hello" })
  lu.assertEquals(ok(A:count(Q.slug:eq("hello"), { unscoped = true })), 2, "the deleted one is still stored")
  -- restoring the deleted one now collides with the live one
  local n, e2, c2 = A:find(Q.id:eq(first.id)):unscoped():update { deleted_at = ms.null }
  lu.assertNil(n)
  lu.assertEquals({ c2, type(e2) }, { "duplicate", "string" })
  ok(second:reload())
  ok(second:delete())
  lu.assertEquals(A:find(Q.id:eq(first.id)):unscoped():update { deleted_at = ms.null }, 1)
  -- the index without the filter counts deleted ones
  local _, _, c3 = A:insert { title = "one", slug = "other" }
  lu.assertEquals(c3, "duplicate")
end
