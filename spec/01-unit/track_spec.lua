-- spec/01-unit/track_spec.lua - mongostore.track with no server: copies keep marks and
-- shapes and share boxes, equality keeps integer/float, array/document and null/nil
-- apart, and diffs give dotted paths, whole arrays, unsets, whole parents for keys that
-- cannot be paths, never a path with its prefix. Decoded documents come from bson_decode.
local lu = require "luaunit"
local ms = require "mongostore"
local core = require "mongostore.core"
local track = require "mongostore.track"

local has_int = math.type ~= nil -- Lua 5.4 has integers; LuaJIT only doubles

local function decoded(doc)
  -- a table as the document API reads it: shapes (order, number types) as metatables
  local bytes = assert(core.bson_encode(doc))
  return assert(core.bson_decode(bytes, { document = true }))
end

local function keys(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = k end
  table.sort(out)
  return out
end

-- Every path of set/unset, and no path that is a prefix of another.
local function assert_no_prefix_pairs(set, unset)
  local all = {}
  for p in pairs(set) do all[#all + 1] = p end
  for p in pairs(unset) do all[#all + 1] = p end
  for _, a in ipairs(all) do
    for _, b in ipairs(all) do
      if a ~= b then lu.assertNotEquals(b:sub(1, #a + 1), a .. ".", a .. " is a prefix of " .. b) end
    end
  end
end

TestTrackCopy = {}

function TestTrackCopy:test_deep_and_independent()
  local doc = { title = "a", tags = ms.array({ "x" }), author = { name = "ann", langs = { "en" } } }
  local c = track.copy(doc)
  lu.assertEquals(c, doc)
  lu.assertFalse(rawequal(c, doc))
  lu.assertFalse(rawequal(c.author, doc.author))
  lu.assertFalse(rawequal(c.author.langs, doc.author.langs))
  doc.author.name = "bob"
  doc.tags[2] = "y"
  lu.assertEquals(c.author.name, "ann")
  lu.assertEquals(#c.tags, 1)
  lu.assertTrue(ms.is_array(c.tags))
  lu.assertTrue(ms.is_array(track.copy(ms.array())))
end

function TestTrackCopy:test_scalars_boxes_and_null_are_shared()
  lu.assertEquals(track.copy(5), 5)
  lu.assertEquals(track.copy("s"), "s")
  lu.assertNil(track.copy(nil))
  lu.assertTrue(rawequal(track.copy(ms.null), ms.null))
  local oid, d = ms.objectid(), ms.date(1000)
  local c = track.copy({ _id = oid, at = d, gone = ms.null })
  lu.assertTrue(rawequal(c._id, oid))
  lu.assertTrue(rawequal(c.at, d))
  lu.assertTrue(rawequal(c.gone, ms.null))
end

function TestTrackCopy:test_decoded_shape_is_kept()
  -- a copy of a decoded document encodes to the same bytes: field order and
  -- int32/double types are in the metatable the copy shares
  local bytes = assert(core.bson_encode({ z = ms.int32(1), a = 2.0, sub = { n = ms.int32(3), xs = { 1.0, 2 } } }))
  local doc = assert(core.bson_decode(bytes, { document = true }))
  local c = track.copy(doc)
  lu.assertEquals(core.bson_encode(c), bytes)
  lu.assertTrue(getmetatable(c) == getmetatable(doc))
  lu.assertTrue(ms.is_array(c.sub.xs))
end

function TestTrackCopy:test_a_cycle_raises()
  local t = {}
  t.self = t
  local ok, err = pcall(track.copy, t)
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "cycle")
end

function TestTrackCopy:test_snapshot_drops_only_the_top_metatable()
  local bytes = assert(core.bson_encode({ z = ms.int32(1), sub = { n = ms.int32(3), xs = { 1.0, 2 } }, e = ms.array() }))
  local doc = assert(core.bson_decode(bytes, { document = true }))
  local inst = setmetatable({}, { __index = function() return "method" end })
  for k, v in pairs(doc) do rawset(inst, k, v) end
  rawset(inst, "gone", ms.null)
  local s = track.snapshot(inst)
  lu.assertNil(getmetatable(s))
  lu.assertTrue(getmetatable(s.sub) == getmetatable(doc.sub))
  lu.assertFalse(rawequal(s.sub, doc.sub))
  lu.assertFalse(rawequal(s.sub.xs, doc.sub.xs))
  lu.assertTrue(ms.is_array(s.sub.xs))
  lu.assertTrue(ms.is_array(s.e))
  lu.assertTrue(rawequal(s.gone, ms.null))
  lu.assertTrue(track.equal(s, doc) == false) -- gone is there
  s.gone = nil
  lu.assertTrue(track.equal(s, doc))
  lu.assertFalse(pcall(track.snapshot, 5))
  local t = {}
  t.self = { t }
  lu.assertFalse(pcall(track.snapshot, t))
end

TestTrackEqual = {}

function TestTrackEqual:test_scalars()
  lu.assertTrue(track.equal(1, 1))
  lu.assertTrue(track.equal("a", "a"))
  lu.assertFalse(track.equal("a", "b"))
  lu.assertFalse(track.equal(1, "1"))
  lu.assertTrue(track.equal(true, true))
  lu.assertFalse(track.equal(true, false))
  lu.assertTrue(track.equal(nil, nil))
  lu.assertFalse(track.equal(0, false))
end

function TestTrackEqual:test_integer_and_float_differ()
  if not has_int then return lu.skip("LuaJIT has no integers: 1 and 1.0 are one number") end
  lu.assertFalse(track.equal(1, 1.0))
  lu.assertFalse(track.equal({ a = 1 }, { a = 1.0 }))
  lu.assertFalse(track.equal({ 1 }, { 1.0 }))
  lu.assertTrue(track.equal(1.0, 1.0))
end

function TestTrackEqual:test_signed_zero_and_nan()
  lu.assertFalse(track.equal(0.0, -0.0))
  lu.assertTrue(track.equal(-0.0, -0.0))
  local nan = 0 / 0
  lu.assertTrue(track.equal(nan, nan))
  lu.assertFalse(track.equal(nan, 1.5))
end

function TestTrackEqual:test_null_is_not_nil()
  lu.assertTrue(track.equal(ms.null, ms.null))
  lu.assertFalse(track.equal(ms.null, nil))
  lu.assertFalse(track.equal({ a = ms.null }, {}))
  lu.assertFalse(track.equal({}, { a = ms.null }))
  lu.assertFalse(track.equal(ms.null, {}))
end

function TestTrackEqual:test_arrays_and_documents_apart()
  lu.assertTrue(track.equal(ms.array(), ms.array()))
  lu.assertFalse(track.equal(ms.array(), {}))        -- [] is not {}
  lu.assertTrue(track.equal({ 1, 2 }, ms.array({ 1, 2 }))) -- both written as [1, 2]
  lu.assertFalse(track.equal({ 1, 2 }, { 1, 2, 3 }))
  lu.assertFalse(track.equal({ 1, 2 }, { 2, 1 }))
  lu.assertFalse(track.equal({ a = 1 }, { 1 }))
  lu.assertTrue(track.equal({ a = { b = { 1, { c = 2 } } } }, { a = { b = { 1, { c = 2 } } } }))
  lu.assertFalse(track.equal({ a = { b = { 1, { c = 2 } } } }, { a = { b = { 1, { c = 3 } } } }))
  lu.assertFalse(track.equal({ a = 1 }, { a = 1, b = 2 }))
  lu.assertFalse(track.equal({ a = 1, b = 2 }, { a = 1 }))
end

function TestTrackEqual:test_boxes_compare_with_eq()
  local hex = "5f0000000000000000000001"
  lu.assertTrue(track.equal(ms.objectid(hex), ms.objectid(hex)))
  lu.assertFalse(track.equal(ms.objectid(hex), ms.objectid("5f0000000000000000000002")))
  lu.assertTrue(track.equal({ at = ms.date(5) }, { at = ms.date(5) }))
  lu.assertFalse(track.equal(ms.date(5), ms.date(6)))
  lu.assertFalse(track.equal(ms.date(5), 5))
  lu.assertTrue(track.equal(ms.decimal("1.5"), ms.decimal("1.5")))
end

function TestTrackEqual:test_decoded_equals_its_copy_and_plain_form()
  local doc = decoded({ title = "a", n = 2, tags = { "x", "y" }, sub = { k = 1.5 } })
  lu.assertTrue(track.equal(doc, track.copy(doc)))
  lu.assertTrue(track.equal(doc, { title = "a", n = 2, tags = { "x", "y" }, sub = { k = 1.5 } }))
end

TestTrackDiff = {}

function TestTrackDiff:test_unchanged_is_empty()
  local doc = decoded({ title = "a", tags = { "x" }, author = { name = "ann" }, empty = ms.array() })
  local set, unset, n = track.diff(track.copy(doc), doc)
  lu.assertEquals(set, {})
  lu.assertEquals(unset, {})
  lu.assertEquals(n, 0)
end

function TestTrackDiff:test_the_seeds_change()
  local old = decoded({ title = "Draft", views = 0, tags = ms.array() })
  local new = track.copy(old)
  new.title = "Final"
  new.tags[#new.tags + 1] = "news"
  local set, unset, n = track.diff(old, new)
  lu.assertEquals(set, { title = "Final", tags = { "news" } })
  lu.assertTrue(ms.is_array(set.tags))
  lu.assertEquals(unset, {})
  lu.assertEquals(n, 2)
end

function TestTrackDiff:test_nested_documents_become_dotted_paths()
  local old = { a = { b = { c = 1, d = 2 }, e = "x" }, f = 1 }
  local new = { a = { b = { c = 5, d = 2, g = ms.null }, e = "x" }, f = 1 }
  local set, unset, n = track.diff(old, new)
  lu.assertEquals(set, { ["a.b.c"] = 5, ["a.b.g"] = ms.null })
  lu.assertEquals(unset, {})
  lu.assertEquals(n, 2)
end

function TestTrackDiff:test_a_changed_array_is_set_whole()
  local old = { tags = { "a", "b" }, list = { { x = 1 }, { x = 2 } } }
  local new = { tags = { "a", "c" }, list = { { x = 1 }, { x = 3 } } }
  local set, _, n = track.diff(old, new)
  lu.assertEquals(set, { tags = { "a", "c" }, list = { { x = 1 }, { x = 3 } } })
  lu.assertEquals(n, 2)
end

function TestTrackDiff:test_removed_keys_are_unset_at_every_level()
  local old = { a = 1, b = { c = 1, d = 2 } }
  local new = { b = { c = 1 } }
  local set, unset, n = track.diff(old, new)
  lu.assertEquals(set, {})
  lu.assertEquals(unset, { a = true, ["b.d"] = true })
  lu.assertEquals(n, 2)
  -- every key of a nested document removed: the paths, not the parent
  set, unset = track.diff({ b = { c = 1 } }, { b = {} })
  lu.assertEquals(set, {})
  lu.assertEquals(unset, { ["b.c"] = true })
end

function TestTrackDiff:test_null_and_nil()
  local set, unset = track.diff({ a = 1 }, { a = ms.null })
  lu.assertEquals(keys(set), { "a" })
  lu.assertTrue(rawequal(set.a, ms.null))
  lu.assertEquals(unset, {})
  set, unset = track.diff({ a = ms.null }, {})
  lu.assertEquals(set, {})
  lu.assertEquals(unset, { a = true })
  set = track.diff({}, { a = ms.null })
  lu.assertTrue(rawequal(set.a, ms.null))
  -- null to a document: set whole, not descended into
  set = track.diff({ a = ms.null }, { a = { b = 1 } })
  lu.assertEquals(set, { a = { b = 1 } })
end

function TestTrackDiff:test_integer_to_float_is_a_change()
  if not has_int then return lu.skip("LuaJIT has no integers") end
  local set, _, n = track.diff({ views = 1, sub = { k = 2 } }, { views = 1.0, sub = { k = 2 } })
  lu.assertEquals(n, 1)
  lu.assertEquals(math.type(set.views), "float")
end

function TestTrackDiff:test_array_versus_document()
  local set = track.diff({ a = ms.array() }, { a = {} })
  lu.assertEquals(keys(set), { "a" })
  lu.assertFalse(ms.is_array(set.a))
  set = track.diff({ a = { x = 1 } }, { a = { 1 } })
  lu.assertEquals(set, { a = { 1 } })
  set = track.diff({ a = { 1 } }, { a = { x = 1 } })
  lu.assertEquals(set, { a = { x = 1 } })
  set = track.diff({ a = 5 }, { a = { x = 1 } })
  lu.assertEquals(set, { a = { x = 1 } })
end

function TestTrackDiff:test_boxes_compared_with_eq()
  local hex = "5f0000000000000000000001"
  local set, _, n = track.diff({ _id = ms.objectid(hex), at = ms.date(1) },
                               { _id = ms.objectid(hex), at = ms.date(2) })
  lu.assertEquals(n, 1)
  lu.assertTrue(set.at == ms.date(2))
end

function TestTrackDiff:test_keys_that_cannot_be_paths_set_their_parent()
  local old = { meta = { ["a.b"] = 1, plain = 1 }, other = 1 }
  local new = { meta = { ["a.b"] = 2, plain = 1 }, other = 1 }
  local set, unset, n = track.diff(old, new)
  lu.assertEquals(set, { meta = { ["a.b"] = 2, plain = 1 } })
  lu.assertEquals(unset, {})
  lu.assertEquals(n, 1)
  -- a "$" key removed, with another change already found in the same document
  old = { meta = { ok = 1, ["$x"] = 1 } }
  new = { meta = { ok = 2 } }
  set, unset, n = track.diff(old, new)
  lu.assertEquals(set, { meta = { ok = 2 } })
  lu.assertEquals(unset, {})
  lu.assertEquals(n, 1)
  -- deeper: the change below the bad key is taken back, the bad key's parent set
  old = { a = { b = { ["x.y"] = { c = 1 } }, keep = 1 } }
  new = { a = { b = { ["x.y"] = { c = 2 } }, keep = 2 } }
  set, unset = track.diff(old, new)
  lu.assertEquals(set, { ["a.b"] = { ["x.y"] = { c = 2 } }, ["a.keep"] = 2 })
  assert_no_prefix_pairs(set, unset)
  -- an empty key
  set = track.diff({ m = { [""] = 1 } }, { m = { [""] = 2 } })
  lu.assertEquals(set, { m = { [""] = 2 } })
  -- an unchanged bad key does not matter
  set = track.diff({ m = { ["a.b"] = 1, c = 1 } }, { m = { ["a.b"] = 1, c = 2 } })
  lu.assertEquals(set, { ["m.c"] = 2 })
end

function TestTrackDiff:test_a_top_level_key_that_cannot_be_a_path_raises()
  local ok, err = pcall(track.diff, { ["a.b"] = 1 }, { ["a.b"] = 2 })
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), '"a.b"')
  -- unchanged, it is fine
  local _, _, n = track.diff({ ["a.b"] = 1, x = 1 }, { ["a.b"] = 1, x = 2 })
  lu.assertEquals(n, 1)
end

function TestTrackDiff:test_skip_and_nil_old()
  local set, unset = track.diff({ _id = 1, rev = 1, a = 1 }, { _id = 2, a = 2 }, { skip = { _id = true, rev = true } })
  lu.assertEquals(set, { a = 2 })
  lu.assertEquals(unset, {})
  local n
  set, unset, n = track.diff(nil, { a = 1, b = { c = 1 } })
  lu.assertEquals(set, { a = 1, b = { c = 1 } })
  lu.assertEquals(unset, {})
  lu.assertEquals(n, 2)
end

function TestTrackDiff:test_set_values_are_copies()
  local new = { tags = { "a" }, sub = { list = { 1 } } }
  local set = track.diff({}, new)
  new.tags[2] = "b"
  new.sub.list[2] = 2
  lu.assertEquals(set.tags, { "a" })
  lu.assertEquals(set.sub.list, { 1 })
end

function TestTrackDiff:test_never_a_path_and_its_prefix_on_random_documents()
  local rng = 12345
  local function rand(n)
    rng = (rng * 1103515245 + 12345) % 2147483648
    return rng % n + 1
  end
  local names = { "a", "b", "c", "d.e", "$f" }
  local function gen(depth)
    local t = {}
    for _ = 1, rand(4) - 1 do
      local k = names[rand(depth == 0 and 3 or #names)]
      local r = rand(depth < 3 and 5 or 3)
      if r == 1 then t[k] = rand(3)
      elseif r == 2 then t[k] = ms.null
      elseif r == 3 then t[k] = { rand(2) }
      else t[k] = gen(depth + 1) end
    end
    return t
  end
  for _ = 1, 300 do
    local old, new = gen(0), gen(0)
    local set, unset, n = track.diff(old, new)
    assert_no_prefix_pairs(set, unset)
    local count = 0
    for _ in pairs(set) do count = count + 1 end
    for _ in pairs(unset) do count = count + 1 end
    lu.assertEquals(n, count)
    -- applying the diff to old gives new
    local applied = track.copy(old)
    local function walk(path)
      local t = applied
      local segs = {}
      for seg in path:gmatch("[^.]+") do segs[#segs + 1] = seg end
      for i = 1, #segs - 1 do
        if type(t[segs[i]]) ~= "table" then t[segs[i]] = {} end
        t = t[segs[i]]
      end
      return t, segs[#segs]
    end
    for p, v in pairs(set) do local t, k = walk(p); t[k] = track.copy(v) end
    for p in pairs(unset) do local t, k = walk(p); t[k] = nil end
    lu.assertTrue(track.equal(applied, new), "diff applied to old is new")
  end
end

function TestTrackDiff:test_argument_checks()
  lu.assertFalse(pcall(track.diff, {}, nil))
  lu.assertFalse(pcall(track.diff, 5, {}))
  lu.assertFalse(pcall(track.diff, {}, {}, { skip = 1 }))
end
