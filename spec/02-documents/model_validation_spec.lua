-- spec/02-documents/model_validation_spec.lua - validation in mongostore.model:
-- every write checks the document (insert, save, insert_many, bulk_save) or the
-- values it is given (update, upsert, bulk_write) before anything is sent;
-- validate = false per call and validate_writes = false per model skip it;
-- define refuses malformed declarations (the seed's "Validation").
local lu = require "luaunit"
local ms = require "mongostore"
local model = require "mongostore.model"
local helper = require "helpers"

local Q = model.Q

local ok = require("helpers").ok

local FIELDS = {
  title = { "string", default = "", max = 20 }, views = { "integer", default = 0, min = 0 },
  tags = { "array", of = "string", default = {} },
  status = { "string", enum = { "draft", "live" } },
  slug = { "string", required = true, check = function(v) return v:match("^[a-z-]+$"), "lowercase and dashes" end },
  at = "date", score = "number", flag = "boolean", ref = "objectid",
  author = { "document", fields = { name = { "string", required = true } } },
  rev = "revision",
}

TestModelValidation = {}

function TestModelValidation:setUp()
  self.name = helper.fresh_db("mval")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  self.Article = model.define { name = "Article", collection = "articles", fields = FIELDS }
  self.Loose = model.define { name = "Loose", collection = "articles", fields = FIELDS, validate_writes = false }
  ok(model.registry(self.db, { self.Article }))
end

function TestModelValidation:tearDown()
  if self.db then self.db:close() end
end

function TestModelValidation:test_seed_validation()
  local A = self.Article
  local landing = ok(A:insert { title = "Landing", slug = "landing" })
  local v, err, code, detail = A:update(landing.id, { title = 123 })
  lu.assertEquals({ v, code, type(err) }, { nil, "validation", "string" })
  lu.assertEquals(detail.errors[1].field, "title")
  local draft = A:new { title = "Draft", slug = "draft" }
  draft.views = "many"
  v, err, code, detail = draft:insert()
  lu.assertNil(v)
  lu.assertEquals(code, "validation")
  lu.assertStrContains(err, "insert articles: views")
  lu.assertEquals(detail.errors[1].field, "views")
  lu.assertTrue(draft.is_new)
  lu.assertEquals(ok(A:count(Q.title:eq("Draft"))), 0)
end

function TestModelValidation:test_every_kind_of_check()
  local A = self.Article
  local cases = {
    { { slug = "s", title = ("x"):rep(21) }, "title" },
    { { slug = "s", views = -1 }, "views" },
    { { slug = "s", views = 1.5 }, "views" },
    { { slug = "s", tags = { "a", 2 } }, "tags[2]" },
    { { slug = "s", tags = { x = 1 } }, "tags" },
    { { slug = "s", status = "gone" }, "status" },
    { { title = "no slug" }, "slug" },
    { { slug = "Not OK" }, "slug" },
    { { slug = "s", at = 1234 }, "at" },
    { { slug = "s", score = "1" }, "score" },
    { { slug = "s", flag = 1 }, "flag" },
    { { slug = "s", ref = "abc" }, "ref" },
    { { slug = "s", author = {} }, "author.name" },
    { { slug = "s", author = { name = "a", age = 3 } }, "author.age" },
    { { slug = "s", unknown = 1 }, "unknown" },
  }
  local before = ok(self.db:stats())
  for i, c in ipairs(cases) do
    local v, err, code, detail = A:insert(c[1])
    lu.assertNil(v, "case " .. i)
    lu.assertEquals(code, "validation", "case " .. i)
    lu.assertEquals(detail.errors[1].field, c[2], "case " .. i .. ": " .. tostring(err))
    lu.assertStrContains(detail.errors[1].message, c[2])
  end
  lu.assertEquals(ok(self.db:stats()).total - before.total, 0, "nothing was sent")
  ok(A:insert { slug = "all-good", at = ms.date(), score = 1.5, flag = true, ref = ms.objectid(), status = "live",
                author = { name = "Ann" } })
end

-- save checks the document as it is about to be stored: a wrongly typed
-- attribute set after the read is an error at the write.
function TestModelValidation:test_save_validates_and_validate_false_skips()
  local A = self.Article
  local a = ok(A:insert { slug = "a" })
  a.views = "many"
  local v, _, code, detail = a:save()
  lu.assertEquals({ v, code, detail.errors[1].field }, { nil, "validation", "views" })
  lu.assertEquals(a.rev, 0)
  ok(a:save { validate = false })
  lu.assertEquals(a.rev, 1)
  -- the model-wide switch
  local L = self.Loose
  ok(model.registry(self.db, { L }))
  ok(L:insert { slug = "NOT VALID", views = "x" })
  lu.assertEquals(ok(self.db:collection("articles"):count({ views = "x" })), 1)
end

function TestModelValidation:test_define_refuses_malformed_declarations()
  local function bad(spec, msg) lu.assertErrorMsgContains(msg, model.define, spec) end
  bad({ fields = {} }, "collection")
  bad({ collection = "c", fields = { x = "strnig" } }, "unknown type")
  bad({ collection = "c", fields = { x = { "string", dflt = 1 } } }, "unknown key")
  bad({ collection = "c", fields = { x = { "integer", default = "0" } } }, "default")
  bad({ collection = "c", fields = { save = "string" } }, "method")
  bad({ collection = "c", fields = { is_new = "string" } }, "method")
  bad({ collection = "c", fields = { ["a.b"] = "string" } }, "not a field name")
  bad({ collection = "c", fields = { a = "revision", b = "revision" } }, "two revision")
  bad({ collection = "c", colection = "x" }, "unknown key")
  bad({ collection = "c", indexes = { { "title" } } }, "indexes[1]")
  lu.assertErrorMsgContains("not in a registry", function()
    model.define({ collection = "c", fields = { a = "string" } }):get("x")
  end)
  lu.assertErrorMsgContains("with a dot", function() self.Article.get("x") end)
end

-- Each plain field's one-test fast path agrees with the full check: what it lets through is valid, what
-- it sends to the full check gets that check's verdict and words.
function TestModelValidation:test_fast_path_verdicts()
  local A = self.Article
  local function fields_of(t, opts)
    local doc = A:new(t)
    local v, _, _, detail = doc:insert(opts)
    if v then return {} end
    local out = {}
    for i, e in ipairs(detail.errors) do out[i] = e.field end
    return out
  end
  lu.assertEquals(fields_of { slug = "a", views = 3.0 }, {})          -- an integral float is an integer
  lu.assertEquals(fields_of { slug = "b", views = 3.5 }, { "views" })
  lu.assertEquals(fields_of { slug = "c", score = 0 / 0 }, { "score" })
  lu.assertEquals(fields_of { slug = "d", score = 1 / 0 }, { "score" })
  lu.assertEquals(fields_of { slug = "e", score = "1" }, { "score" })
  lu.assertEquals(fields_of { slug = "f", score = 2, at = ms.date(), ref = ms.objectid() }, {})
  lu.assertEquals(fields_of { slug = "g", at = ms.objectid() }, { "at" })
  lu.assertEquals(fields_of { slug = "h", ref = "0123456789abcdef01234567" }, { "ref" })
  lu.assertEquals(fields_of { slug = "i", tags = ms.array { "a", 1 } }, { "tags[2]" })
  lu.assertEquals(fields_of { slug = "j", tags = { "a", "b" } }, {})  -- an unmarked list is an array too
  lu.assertEquals(fields_of { slug = "k", tags = { x = 1 } }, { "tags" })
  lu.assertEquals(fields_of { slug = "l", at = ms.null, flag = ms.null }, {})  -- null, not required
  lu.assertEquals(fields_of { views = 1 }, { "slug" })
end
