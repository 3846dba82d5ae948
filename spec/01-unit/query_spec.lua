-- spec/01-unit/query_spec.lua - mongostore.query with no server: the filter each Q
-- condition makes, renames, and_/or_/not_, the update document the ops make, the
-- conflicts update refuses (naming the path), paths(), and arrays marked where emitted.
-- spec/02-documents/query_server_spec.lua sends the same shapes to a server.
local lu = require "luaunit"
local ms = require "mongostore"
local query = require "mongostore.query"
local Q, ops = query.Q, query.ops

local function rename_id(path)
  if path == "id" then return "_id" end
  return path
end

local function assert_raises(fn, fragment)
  local ok, err = pcall(fn)
  lu.assertFalse(ok, "expected an error containing " .. fragment)
  lu.assertStrContains(tostring(err), fragment)
end

TestQueryFields = {}

function TestQueryFields:test_a_field_per_path()
  lu.assertTrue(query.is_field(Q.title))
  lu.assertTrue(query.is_field(Q["author.name"]))
  lu.assertEquals(tostring(Q["author.name"]), 'Q["author.name"]')
  lu.assertFalse(query.is_cond(Q.title))
  assert_raises(function() return Q[""] end, "non-empty string")
  assert_raises(function() return Q[1] end, "non-empty string")
  assert_raises(function() return Q.title:equals(1) end, "no method equals")
  assert_raises(function() Q.x = 1 end, "read-only")
end

function TestQueryFields:test_comparisons()
  lu.assertEquals(query.filter(Q.title:eq("Final")), { title = "Final" })
  lu.assertEquals(query.filter(Q["author.name"]:eq("ann")), { ["author.name"] = "ann" })
  lu.assertEquals(query.filter(Q.title:ne("x")), { title = { ["$ne"] = "x" } })
  lu.assertEquals(query.filter(Q.views:gt(1)), { views = { ["$gt"] = 1 } })
  lu.assertEquals(query.filter(Q.views:gte(1)), { views = { ["$gte"] = 1 } })
  lu.assertEquals(query.filter(Q.views:lt(1)), { views = { ["$lt"] = 1 } })
  lu.assertEquals(query.filter(Q.views:lte(1)), { views = { ["$lte"] = 1 } })
  lu.assertTrue(query.is_cond(Q.views:lte(1)))
  -- null is a value; nil is a mistake
  lu.assertEquals(query.filter(Q.deleted_at:eq(ms.null)), { deleted_at = ms.null })
  assert_raises(function() return Q.x:eq(nil) end, "mongostore.null")
  assert_raises(function() return Q.x:gt(nil) end, "gt: value must not be nil")
end

function TestQueryFields:test_eq_of_a_document_or_regex_says_eq()
  -- a bare document would be an exact-match document or, with $ keys, operators
  local f = query.filter(Q.meta:eq({ ["$gt"] = 1 }))
  lu.assertEquals(f, { meta = { ["$eq"] = { ["$gt"] = 1 } } })
  local re = ms.regex("^a", "i")
  f = query.filter(Q.pattern:eq(re))
  lu.assertTrue(f.pattern["$eq"] == re)
  -- an ObjectId stays a bare value (an _id lookup)
  local oid = ms.objectid()
  f = query.filter(Q.id:eq(oid), rename_id)
  lu.assertTrue(f._id == oid)
end

function TestQueryFields:test_lists_are_copied_and_marked()
  local list = { 1, 2 }
  local c = Q.views:in_(list)
  list[3] = 3
  local f = query.filter(c)
  lu.assertEquals(f, { views = { ["$in"] = { 1, 2 } } })
  lu.assertTrue(ms.is_array(f.views["$in"]))
  -- each filter is fresh: changing one does not change the next
  f.views["$in"][1] = 99
  lu.assertEquals(query.filter(c).views["$in"][1], 1)
  local empty = query.filter(Q.views:nin({}))
  lu.assertTrue(ms.is_array(empty.views["$nin"]))
  lu.assertEquals(query.filter(Q.tags:all_({ "a", "b" })), { tags = { ["$all"] = { "a", "b" } } })
  lu.assertTrue(ms.is_array(query.filter(Q.tags:all_({ "a" })).tags["$all"]))
  assert_raises(function() return Q.x:in_("a") end, "in_: list must be a list")
  assert_raises(function() return Q.x:in_({ a = 1 }) end, "keys 1..n")
end

function TestQueryFields:test_exists_size_regex_prefix()
  lu.assertEquals(query.filter(Q.x:exists()), { x = { ["$exists"] = true } })
  lu.assertEquals(query.filter(Q.x:exists(false)), { x = { ["$exists"] = false } })
  assert_raises(function() return Q.x:exists(1) end, "exists: b must be a boolean")
  lu.assertEquals(query.filter(Q.tags:size(2)), { tags = { ["$size"] = 2 } })
  assert_raises(function() return Q.tags:size("2") end, "size: n must be a number")
  lu.assertEquals(query.filter(Q.title:regex("^b.*k$")), { title = { ["$regex"] = "^b.*k$" } })
  lu.assertEquals(query.filter(Q.title:regex("^b", "i")), { title = { ["$regex"] = "^b", ["$options"] = "i" } })
  local re = ms.regex("x", "m")
  lu.assertTrue(query.filter(Q.title:regex(re)).title == re)
  lu.assertTrue(query.filter(Q.not_(Q.title:regex(re))).title["$not"] == re)
  assert_raises(function() return Q.title:regex(1) end, "regex: pattern must be")
  lu.assertEquals(query.filter(Q.title:prefix("bulk")), { title = { ["$regex"] = "^bulk" } })
end

function TestQueryFields:test_prefix_escapes_every_metacharacter()
  local s = "a.b*c+d?e(f)g[h]i{j}k|l^m$n\\o-p/q"
  local f = query.filter(Q.title:prefix(s))
  lu.assertEquals(f.title["$regex"], "^a\\.b\\*c\\+d\\?e\\(f\\)g\\[h\\]i\\{j\\}k\\|l\\^m\\$n\\\\o\\-p\\/q")
  lu.assertEquals(query.escape("plain words 123"), "plain words 123")
  -- every escaped character is the metacharacter itself, once: unescaping gives s back
  lu.assertEquals((f.title["$regex"]:sub(2):gsub("\\(.)", "%1")), s)
end

function TestQueryFields:test_elem_match_paths_are_the_elements()
  local f = query.filter(Q.comments:elem_match(Q.id:eq(1)), rename_id)
  lu.assertEquals(f, { comments = { ["$elemMatch"] = { id = 1 } } })
  f = query.filter(Q.scores:elem_match({ ["$gte"] = 80, ["$lt"] = 85 }))
  lu.assertEquals(f, { scores = { ["$elemMatch"] = { ["$gte"] = 80, ["$lt"] = 85 } } })
  assert_raises(function() return Q.x:elem_match(5) end, "elem_match: c must be a Cond or a filter table")
  assert_raises(function() return Q.x:elem_match(Q.y) end, "the Field")
end

TestQueryCombine = {}

function TestQueryCombine:test_and_merges_distinct_paths()
  local f = query.filter(Q.and_(Q.title:eq("a"), Q.views:gte(1), Q.views:lt(10)))
  lu.assertEquals(f, { title = "a", views = { ["$gte"] = 1, ["$lt"] = 10 } })
end

function TestQueryCombine:test_and_falls_back_to_and_list_on_collisions()
  local f = query.filter(Q.and_(Q.views:gte(1), Q.views:gte(5)))
  lu.assertEquals(f, { ["$and"] = { { views = { ["$gte"] = 1 } }, { views = { ["$gte"] = 5 } } } })
  lu.assertTrue(ms.is_array(f["$and"]))
  f = query.filter(Q.and_(Q.title:eq("a"), Q.title:ne("b")))
  lu.assertEquals(f, { ["$and"] = { { title = "a" }, { title = { ["$ne"] = "b" } } } })
  f = query.filter(Q.and_(Q.or_(Q.a:eq(1), Q.b:eq(1)), Q.or_(Q.c:eq(1), Q.d:eq(1))))
  lu.assertEquals(#f["$and"], 2)
  lu.assertEquals(f["$and"][2], { ["$or"] = { { c = 1 }, { d = 1 } } })
end

function TestQueryCombine:test_and_of_one_and_of_none()
  lu.assertEquals(query.filter(Q.and_(Q.a:eq(1))), { a = 1 })
  lu.assertEquals(query.filter(Q.and_()), {})
end

function TestQueryCombine:test_or()
  local f = query.filter(Q.or_(Q.a:eq(1), { b = 2 }))
  lu.assertEquals(f, { ["$or"] = { { a = 1 }, { b = 2 } } })
  lu.assertTrue(ms.is_array(f["$or"]))
  assert_raises(function() return Q.or_() end, "at least one")
  assert_raises(function() return Q.or_(Q.a:eq(1), "x") end, "or_: argument 2")
end

function TestQueryCombine:test_not()
  lu.assertEquals(query.filter(Q.not_(Q.views:gt(5))), { views = { ["$not"] = { ["$gt"] = 5 } } })
  lu.assertEquals(query.filter(Q.not_(Q.title:eq("a"))), { title = { ["$not"] = { ["$eq"] = "a" } } })
  lu.assertEquals(query.filter(Q.not_(Q.title:prefix("a"))), { title = { ["$not"] = { ["$regex"] = "^a" } } })
  lu.assertEquals(query.filter(Q.not_(Q.tags:elem_match({ ["$gt"] = 1 }))),
    { tags = { ["$not"] = { ["$elemMatch"] = { ["$gt"] = 1 } } } })
  local f = query.filter(Q.not_(Q.or_(Q.a:eq(1), Q.b:eq(2))))
  lu.assertEquals(f, { ["$nor"] = { { ["$or"] = { { a = 1 }, { b = 2 } } } } })
  lu.assertTrue(ms.is_array(f["$nor"]))
  lu.assertEquals(query.filter(Q.not_({ a = 1 })), { ["$nor"] = { { a = 1 } } })
end

function TestQueryCombine:test_tostring_shows_the_filter()
  local s = tostring(Q.and_(Q.title:eq("a"), Q.views:in_({ 1, 2 })))
  lu.assertStrContains(s, "Cond")
  lu.assertStrContains(s, 'title = "a"')
  lu.assertStrContains(s, '["$in"] = [1, 2]')
end

TestQueryFilter = {}

function TestQueryFilter:test_nil_is_everything()
  lu.assertEquals(query.filter(nil), {})
end

function TestQueryFilter:test_rename_every_path_of_a_cond()
  local f = query.filter(Q.and_(Q.id:eq(1), Q.or_(Q.id:gt(5), Q["id.x"]:eq(2)), Q.not_(Q.id:eq(3))), rename_id)
  lu.assertEquals(f["$and"][1], { _id = 1 })
  lu.assertEquals(f["$and"][2], { ["$or"] = { { _id = { ["$gt"] = 5 } }, { ["id.x"] = 2 } } })
  lu.assertEquals(f["$and"][3], { _id = { ["$not"] = { ["$eq"] = 3 } } })
end

function TestQueryFilter:test_rename_a_plain_table()
  local raw = { id = 1, title = "a", ["$or"] = { { id = 2 }, { views = 3 } }, ["$where"] = "x" }
  local f = query.filter(raw, rename_id)
  lu.assertEquals(f, { _id = 1, title = "a", ["$or"] = { { _id = 2 }, { views = 3 } }, ["$where"] = "x" })
  lu.assertTrue(ms.is_array(f["$or"]))
  -- a fresh table: the caller's is unchanged
  lu.assertEquals(raw.id, 1)
  lu.assertNil(raw._id)
  lu.assertFalse(rawequal(query.filter(raw), raw))
  -- a plain table inside a Cond is renamed too
  lu.assertEquals(query.filter(Q.and_({ id = 1 }, Q.views:eq(2)), rename_id), { _id = 1, views = 2 })
end

function TestQueryFilter:test_argument_checks()
  assert_raises(function() return query.filter(5) end, "filter: x must be a Cond or a filter table")
  assert_raises(function() return query.filter({}, "id") end, "rename must be a function")
  assert_raises(function() return query.filter(Q.title) end, "the Field")
  assert_raises(function() return query.filter(Q.id:eq(1), function() return 1 end) end, "rename must return a string")
end

TestQueryOps = {}

function TestQueryOps:test_each_operator()
  local now = ms.date(0)
  local u = query.update({
    ops.set({ title = "a" }), ops.unset({ "old" }), ops.inc({ views = 1 }), ops.mul({ price = 2.5 }),
    ops.min({ low = 1 }), ops.max({ high = 9 }), ops.push({ tags = "x" }), ops.add_to_set({ labels = "y" }),
    ops.pull({ drop = "z" }), ops.pop({ queue = -1 }), ops.set_on_insert({ created = now }),
    ops.current_date({ seen = true, stamp = "timestamp" }),
  })
  lu.assertEquals(u["$set"], { title = "a" })
  lu.assertEquals(u["$unset"], { old = true })
  lu.assertEquals(u["$inc"], { views = 1 })
  lu.assertEquals(u["$mul"], { price = 2.5 })
  lu.assertEquals(u["$min"], { low = 1 })
  lu.assertEquals(u["$max"], { high = 9 })
  lu.assertEquals(u["$push"], { tags = "x" })
  lu.assertEquals(u["$addToSet"], { labels = "y" })
  lu.assertEquals(u["$pull"], { drop = "z" })
  lu.assertEquals(u["$pop"], { queue = -1 })
  lu.assertTrue(u["$setOnInsert"].created == now)
  lu.assertEquals(u["$currentDate"], { seen = true, stamp = { ["$type"] = "timestamp" } })
  for _, name in ipairs({ "set", "unset", "inc", "mul", "min", "max", "push", "add_to_set", "pull", "pop",
                          "set_on_insert", "current_date" }) do
    local v = (name == "pop" or name == "inc" or name == "mul") and 1 or true
    lu.assertTrue(query.is_op(ops[name]({ x = v })), name)
  end
end

function TestQueryOps:test_unset_forms()
  lu.assertEquals(query.update({ ops.unset({ "a", "b.c" }) }), { ["$unset"] = { a = true, ["b.c"] = true } })
  lu.assertEquals(query.update({ ops.unset({ a = true, b = "" }) }), { ["$unset"] = { a = true, b = true } })
  assert_raises(function() return ops.unset({ a = false }) end, "ops.unset: a = false")
  assert_raises(function() return ops.unset({ 1 }) end, "ops.unset: paths must be non-empty strings")
end

function TestQueryOps:test_each_for_push_and_add_to_set()
  local u = query.update({ ops.push({ tags = ops.each({ "a", "b" }) }), ops.add_to_set({ labels = ops.each({}) }) })
  lu.assertEquals(u["$push"].tags, { ["$each"] = { "a", "b" } })
  lu.assertTrue(ms.is_array(u["$push"].tags["$each"]))
  lu.assertTrue(ms.is_array(u["$addToSet"].labels["$each"]))
  u = query.update({ ops.push({ scores = ops.each({ 3, 1 }, { sort = -1, slice = 5, position = 0 }) }) })
  lu.assertEquals(u["$push"].scores, { ["$each"] = { 3, 1 }, ["$sort"] = -1, ["$slice"] = 5, ["$position"] = 0 })
  assert_raises(function() return ops.set({ x = ops.each({ 1 }) }) end, "ops.each goes only in push and add_to_set")
  assert_raises(function() return ops.add_to_set({ x = ops.each({ 1 }, { slice = 1 }) }) end, "without options")
  assert_raises(function() return ops.each({ 1 }, { limit = 1 }) end, "unknown option limit")
  assert_raises(function() return ops.each("a") end, "ops.each: list must be a list")
  lu.assertTrue(query.is_each(ops.each({})))
  lu.assertStrContains(tostring(ops.each({ 1 })), "Each[1]")
end

function TestQueryOps:test_value_checks()
  assert_raises(function() return ops.inc({ views = "1" }) end, "ops.inc: views must be a number")
  assert_raises(function() return ops.mul({ views = true }) end, "ops.mul: views must be a number")
  lu.assertEquals(query.update({ ops.inc({ big = ms.int64(5) }) })["$inc"].big, ms.int64(5))
  assert_raises(function() return ops.pop({ q = 2 }) end, "ops.pop: q must be 1 (last) or -1 (first)")
  assert_raises(function() return ops.current_date({ d = "now" }) end, "ops.current_date: d must be true")
  assert_raises(function() return ops.set("x") end, "ops.set: fields must be a table")
  assert_raises(function() return ops.set(Q.a:eq(1)) end, "got a Cond")
  assert_raises(function() return ops.set({ [""] = 1 }) end, "paths must be non-empty strings")
end

function TestQueryOps:test_pull_takes_a_condition()
  local u = query.update({ ops.pull({ comments = Q.author:eq("spam") }), ops.pull({ scores = { ["$gte"] = 6 } }) })
  lu.assertEquals(u["$pull"], { comments = { author = "spam" }, scores = { ["$gte"] = 6 } })
end

function TestQueryOps:test_ops_copy_their_fields()
  local fields = { views = 1 }
  local op = ops.inc(fields)
  fields.views = 2
  fields.other = 3
  lu.assertEquals(query.update({ op }), { ["$inc"] = { views = 1 } })
  lu.assertStrContains(tostring(op), "$inc")
  lu.assertStrContains(tostring(op), "views = 1")
end

TestQueryUpdate = {}

function TestQueryUpdate:test_ops_and_plain_tables_merge()
  local u = query.update({ ops.inc({ views = 1 }), ops.push({ tags = "featured" }), { title = "Final v2" },
                           ops.set({ ["author.name"] = "ann" }) })
  lu.assertEquals(u, {
    ["$inc"] = { views = 1 }, ["$push"] = { tags = "featured" },
    ["$set"] = { title = "Final v2", ["author.name"] = "ann" },
  })
end

function TestQueryUpdate:test_plain_operator_keys_merge()
  local u = query.update({ { ["$inc"] = { views = 1 }, title = "x" }, ops.inc({ likes = 2 }) })
  lu.assertEquals(u, { ["$inc"] = { views = 1, likes = 2 }, ["$set"] = { title = "x" } })
  assert_raises(function() return query.update({ { ["$inc"] = 1 } }) end, "$inc must be a table")
  -- in a plain table too, an Each goes only in push/add_to_set and a Cond only in pull
  assert_raises(function() return query.update({ { tags = ops.each({ 1 }) } }) end, "tags: ops.each goes only")
  assert_raises(function() return query.update({ { x = Q.a:eq(1) } }) end, "x: a Cond is a value only of $pull")
  lu.assertEquals(query.update({ { ["$push"] = { tags = ops.each({ "a" }) }, ["$pull"] = { c = Q.a:eq(1) } } }),
    { ["$push"] = { tags = { ["$each"] = { "a" } } }, ["$pull"] = { c = { a = 1 } } })
end

function TestQueryUpdate:test_empty()
  lu.assertEquals(query.update({}), {})
  lu.assertEquals(query.update({ ops.set({}) }), {})
end

function TestQueryUpdate:test_rename()
  local u = query.update({ ops.set({ id = 1 }), { ["id.x"] = 2 } }, rename_id)
  lu.assertEquals(u, { ["$set"] = { _id = 1, ["id.x"] = 2 } })
end

function TestQueryUpdate:test_same_path_twice_raises_naming_it()
  assert_raises(function() return query.update({ ops.inc({ views = 1 }), { views = 2 } }) end,
    'path "views" is given twice ($inc and $set)')
  assert_raises(function() return query.update({ ops.set({ a = 1 }), ops.set({ a = 2 }) }) end,
    'path "a" is given twice')
  -- after renaming: "id" and "_id" are one path
  assert_raises(function() return query.update({ ops.set({ id = 1 }), { _id = 2 } }, rename_id) end,
    'path "_id" is given twice')
end

function TestQueryUpdate:test_parent_and_child_raise_naming_both()
  assert_raises(function() return query.update({ ops.set({ a = {} }), ops.inc({ ["a.b"] = 1 }) }) end,
    'path "a.b" ($inc) and its parent "a" ($set)')
  assert_raises(function() return query.update({ ops.inc({ ["a.b.c"] = 1 }), { a = 1 } }) end,
    'path "a" ($set) and its child "a.b.c" ($inc)')
  assert_raises(function() return query.update({ { ["a.b"] = 1 }, ops.unset({ "a.b.c" }) }) end,
    'path "a.b.c" ($unset) and its parent "a.b" ($set)')
  -- siblings and look-alike prefixes are fine
  lu.assertEquals(query.update({ { ["a.b"] = 1, ["a.c"] = 2, ab = 3 } }),
    { ["$set"] = { ["a.b"] = 1, ["a.c"] = 2, ab = 3 } })
end

function TestQueryUpdate:test_argument_checks()
  assert_raises(function() return query.update(ops.inc({ a = 1 })) end, "update: list must be a list")
  assert_raises(function() return query.update({ "x" }) end, "update: item 1 must be an Op or a table")
  assert_raises(function() return query.update({ Q.a:eq(1) }) end, "got a Cond")
  assert_raises(function() return query.update({}, 5) end, "rename must be a function")
end

TestQueryPaths = {}

function TestQueryPaths:test_paths_of_an_update()
  local u = query.update({ ops.inc({ views = 1 }), { title = "x", ["a.b"] = 2 }, ops.push({ tags = ops.each({ "n" }) }) })
  local p = query.paths(u)
  lu.assertEquals(#p, 4)
  lu.assertEquals(p[1], { op = "$inc", path = "views", value = 1 })
  lu.assertEquals(p[2].op, "$push")
  lu.assertEquals(p[2].path, "tags")
  lu.assertEquals(p[2].each, { "n" })
  lu.assertEquals(p[3], { op = "$set", path = "a.b", value = 2 })
  lu.assertEquals(p[4], { op = "$set", path = "title", value = "x" })
  -- a list of Ops is turned into its update first
  lu.assertEquals(query.paths({ ops.set({ a = 1 }) }), { { op = "$set", path = "a", value = 1 } })
  lu.assertEquals(query.paths(ops.unset({ "z" })), { { op = "$unset", path = "z", value = true } })
  assert_raises(function() return query.paths({ title = "x" }) end, "paths: update must be an update document")
end
