-- spec/02-documents/model_arrays_spec.lua - an empty table in a declared array
-- field is stored as a BSON array on every write path (save, insert,
-- insert_many, bulk_save, update, upsert, bulk_write), with and without
-- validation: the schema marks it before the diff and the encoding.
local lu = require "luaunit"
local ms = require "mongostore"
local model = require "mongostore.model"
local helper = require "helpers"
local rawdb = require "helpers.rawdb"

local Q, ops = model.Q, model.ops

local ok = require("helpers").ok

local FIELDS = {
  title = { "string", default = "" },
  tags = { "array", of = "string", default = {} },
  grid = { "array", of = { "array", of = "integer" } },
  author = { "document", fields = { name = "string", aliases = { "array", of = "string" } } },
  parts = { "array", fields = { label = "string", notes = "array" } },
  free = "any",
  rev = "revision",
}

TestModelArrays = {}

function TestModelArrays:setUp()
  self.name = helper.fresh_db("marr")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  self.Strict = model.define { name = "Strict", collection = "articles", fields = FIELDS }
  self.Loose = model.define { name = "Loose", collection = "articles", fields = FIELDS, validate_writes = false }
  ok(model.registry(self.db, { self.Strict, self.Loose }))
  self.coll = ok(self.db:collection("articles"))
end

function TestModelArrays:tearDown()
  if self.db then self.db:close() end
end

-- The stored document, decoded by the library (a BSON array reads back marked).
function TestModelArrays:stored(id)
  return ok(self.coll:find_one({ _id = id }))
end

-- The three ways of writing: validated, validate = false on the call, a model with validate_writes = false.
local function each_way(self, fn)
  fn(self.Strict, nil, "validated")
  fn(self.Strict, { validate = false }, "validate = false")
  fn(self.Loose, nil, "validate_writes = false")
end

local function assert_array(v, what)
  lu.assertEquals(type(v), "table", what .. " is missing")
  lu.assertTrue(ms.is_array(v), what .. " is stored as a document, not an array")
end

function TestModelArrays:test_save_of_an_emptied_array()
  each_way(self, function(M, opts, how)
    local a = ok(M:insert { title = "with tags " .. how, tags = { "x", "y" } })
    a.tags = {}
    ok(a:save(opts))
    local d = self:stored(a.id)
    assert_array(d.tags, "save (" .. how .. "): tags")
    lu.assertEquals(#d.tags, 0)
    lu.assertTrue(ms.is_array(a.tags), "the document's own tags are marked too")
    lu.assertEquals(a:changes(), {})
  end)
end

function TestModelArrays:test_save_of_an_empty_array_over_an_empty_array_sends_nothing()
  each_way(self, function(M, opts, how)
    local a = ok(M:insert { title = "empty " .. how })
    local before = a.rev
    a.tags = {}
    lu.assertEquals(a:changes(), {}, how)
    ok(a:save(opts))
    lu.assertEquals(a.rev, before, "an unchanged save sends nothing (" .. how .. ")")
    assert_array(self:stored(a.id).tags, "tags (" .. how .. ")")
  end)
end

function TestModelArrays:test_nested_declared_arrays_on_save()
  each_way(self, function(M, opts, how)
    local a = ok(M:insert { title = "nested " .. how })
    a.grid = { {}, { 1, 2 }, {} }
    a.author = { name = "Ann", aliases = {} }
    a.parts = { { label = "p", notes = {} } }
    ok(a:save(opts))
    local d = self:stored(a.id)
    assert_array(d.grid, "grid")
    assert_array(d.grid[1], "grid[1]")
    assert_array(d.grid[3], "grid[3]")
    lu.assertEquals(d.grid[2], { 1, 2 })
    assert_array(d.author.aliases, "author.aliases (" .. how .. ")")
    assert_array(d.parts[1].notes, "parts[1].notes (" .. how .. ")")
    -- a nested change diffs into a dotted path, still an array
    a.author.aliases = { "A" }
    ok(a:save(opts))
    a.author.aliases = {}
    ok(a:save(opts))
    assert_array(self:stored(a.id).author.aliases, "author.aliases after a dotted $set (" .. how .. ")")
  end)
end

function TestModelArrays:test_a_free_form_field_is_left_alone()
  local a = ok(self.Strict:insert { title = "free", free = {} })
  local d = self:stored(a.id)
  lu.assertEquals(type(d.free), "table")
  lu.assertFalse(ms.is_array(d.free), "an undeclared shape stays what the encoder makes of it")
end

function TestModelArrays:test_insert()
  each_way(self, function(M, opts, how)
    local a = ok(M:insert({ title = "insert " .. how, tags = {}, grid = { {} }, author = { aliases = {} } }, opts))
    local d = self:stored(a.id)
    assert_array(d.tags, "insert (" .. how .. "): tags")
    assert_array(d.grid[1], "insert (" .. how .. "): grid[1]")
    assert_array(d.author.aliases, "insert (" .. how .. "): author.aliases")
    -- the instance method and a default too
    local b = M:new { title = "new " .. how }
    ok(b:insert(opts))
    assert_array(self:stored(b.id).tags, "insert of a default (" .. how .. ")")
  end)
end

function TestModelArrays:test_insert_many()
  each_way(self, function(M, opts, how)
    local o = { ordered = false }
    if opts then o.validate = opts.validate end
    local res = ok(M:insert_many({ { title = "many a " .. how, tags = {} },
                                   M:new { title = "many b " .. how, parts = { { notes = {} } } } }, o))
    lu.assertEquals(#res.errors, 0)
    lu.assertEquals(#res.inserted, 2)
    assert_array(self:stored(res.inserted[1].id).tags, "insert_many (" .. how .. "): tags")
    assert_array(self:stored(res.inserted[2].id).parts[1].notes, "insert_many (" .. how .. "): parts[1].notes")
  end)
end

function TestModelArrays:test_bulk_save()
  each_way(self, function(M, opts, how)
    local a = ok(M:insert { title = "bulk a " .. how, tags = { "t" } })
    local b = ok(M:insert { title = "bulk b " .. how, author = { aliases = { "x" } } })
    local c = M:new { title = "bulk c " .. how, tags = {} }
    a.tags = {}
    b.author.aliases = {}
    lu.assertEquals(ok(M:bulk_save({ a, b, c }, opts)), 3)
    assert_array(self:stored(a.id).tags, "bulk_save update (" .. how .. "): tags")
    assert_array(self:stored(b.id).author.aliases, "bulk_save update (" .. how .. "): author.aliases")
    assert_array(self:stored(c.id).tags, "bulk_save insert (" .. how .. "): tags")
    lu.assertEquals(a:changes(), {})
    lu.assertEquals(b:changes(), {})
  end)
end

function TestModelArrays:test_update_with_set()
  each_way(self, function(M, opts, how)
    local a = ok(M:insert { title = "update " .. how, tags = { "t" }, grid = { { 1 } } })
    local args = { ops.set { tags = {}, grid = { {} }, author = { aliases = {} } } }
    if opts then args[2] = model.options(opts) end
    local u = ok(M:update(a.id, table.unpack(args)))
    local d = self:stored(a.id)
    assert_array(d.tags, "update (" .. how .. "): tags")
    assert_array(d.grid[1], "update (" .. how .. "): grid[1]")
    assert_array(d.author.aliases, "update (" .. how .. "): author.aliases")
    lu.assertTrue(ms.is_array(u.tags), "the returned document's tags")
    -- a plain table is a $set too, and a dotted path reaches a nested array
    args[1] = { ["author.aliases"] = {}, tags = {} }
    ok(M:update(a.id, table.unpack(args)))
    d = self:stored(a.id)
    assert_array(d.author.aliases, "update with a dotted path (" .. how .. ")")
    -- find():update sends every match the same marks
    args[1] = ops.set { tags = {} }
    ok(M:find(Q.title:eq("update " .. how)):update(table.unpack(args)))
    assert_array(self:stored(a.id).tags, "find():update (" .. how .. ")")
    -- pushing an empty row onto an array of arrays
    args[1] = ops.push { grid = {} }
    ok(M:update(a.id, table.unpack(args)))
    d = self:stored(a.id)
    assert_array(d.grid[2], "$push of {} onto grid (" .. how .. ")")
  end)
end

function TestModelArrays:test_upsert()
  each_way(self, function(M, opts, how)
    local o = opts and model.options(opts) or nil
    local u = ok(M:upsert(Q.title:eq("upsert " .. how), ops.set_on_insert { tags = {} },
                          ops.set { author = { aliases = {} } }, o))
    local d = self:stored(u.id)
    assert_array(d.tags, "upsert's $setOnInsert (" .. how .. "): tags")
    assert_array(d.author.aliases, "upsert's $set (" .. how .. "): author.aliases")
    -- an upsert that inserts without naming tags gets its default, an array
    u = ok(M:upsert(Q.title:eq("upsert default " .. how), ops.set { grid = { {} } }, o))
    d = self:stored(u.id)
    assert_array(d.tags, "upsert's default (" .. how .. ")")
    assert_array(d.grid[1], "upsert's $set (" .. how .. "): grid[1]")
  end)
end

function TestModelArrays:test_bulk_write()
  each_way(self, function(M, opts, how)
    local a = ok(M:insert { title = "bw " .. how, tags = { "t" } })
    ok(M:bulk_write({
      model.insert_one { title = "bw new " .. how, tags = {} },
      model.update_one(Q.title:eq("bw " .. how), ops.set { tags = {} }),
      model.upsert_one(Q.title:eq("bw up " .. how), ops.set { grid = { {} } }),
    }, opts))
    assert_array(self:stored(a.id).tags, "bulk_write update_one (" .. how .. ")")
    local n = ok(self.coll:find_one({ title = "bw new " .. how }))
    assert_array(n.tags, "bulk_write insert_one (" .. how .. ")")
    local up = ok(self.coll:find_one({ title = "bw up " .. how }))
    assert_array(up.grid[1], "bulk_write upsert_one (" .. how .. ")")
  end)
end

-- The same shapes as pymongo reads them, behind the library's decoder.
function TestModelArrays:test_raw_bson_types()
  local a = ok(self.Loose:insert { title = "raw" , tags = { "x" } })
  a.tags = {}
  a.author = { aliases = {} }
  ok(a:save())
  local docs = rawdb.docs(self.name, "articles")
  lu.assertEquals(#docs, 1)
  lu.assertTrue(ms.is_array(docs[1].tags), "tags is a BSON array")
  lu.assertTrue(ms.is_array(docs[1].author.aliases), "author.aliases is a BSON array")
  lu.assertFalse(ms.is_array(docs[1].author), "author is a BSON document")
end
