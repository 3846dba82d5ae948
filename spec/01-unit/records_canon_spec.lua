-- spec/01-unit/records_canon_spec.lua - the record store's pure parts, no server:
-- content ids (sorted keys, integers and floats kept apart, identity = false
-- fields left out, children in order, refs by their content ids), type
-- declarations refused at define, the keyset condition of a page (an $or of
-- branches, never $and, nulls matched explicitly), the ISO-8601 to nanoseconds
-- conversion, and what a client's sid and filter paths are cast to (the page
-- cursors' format: spec/01-unit/cursor_spec.lua).
local lu = require "luaunit"
local ms = require "mongostore"
local records = require "mongostore.records"
local canon = require "mongostore.records.canon"
local rquery = require "mongostore.records.query"

local Author = records.define { name = "author", fields = { name = "string" } }
local T = records.define { name = "thing", fields = { a = "integer", f = "float", s = "string", b = "boolean",
                                                      l = "integer[]", m = { "string", identity = false } },
                           children = { parts = { fields = { n = "integer", tag = { "string", identity = false } } } },
                           refs = { by = Author } }

local function cid(t) return assert(records.content_id(T, t)) end

TestRecordsCanon = {}

function TestRecordsCanon:test_content_id_is_sha256_hex()
  local c = cid({ a = 1 })
  lu.assertStrMatches(c, string.rep("%x", 64))
  local bytes = canon.encode(T, { a = 1 }, function(_, i) if i == nil then return 0 end return nil end)
  lu.assertEquals(c, canon.hex(ms.sha256 and ms.sha256(bytes) or require("mongostore.core").sha256(bytes)))
end

function TestRecordsCanon:test_key_order_does_not_matter()
  local x = {}
  x.a = 1; x.s = "x"; x.b = true
  local y = {}
  y.b = true; y.s = "x"; y.a = 1
  lu.assertEquals(cid(x), cid(y))
end

function TestRecordsCanon:test_integers_and_floats_kept_apart()
  local I = records.define { name = "i", fields = { v = "integer" } }
  local F = records.define { name = "i", fields = { v = "float" } }
  local bi = canon.encode(I, { v = 1 }, function() return 0 end)
  local bf = canon.encode(F, { v = 1 }, function() return 0 end)
  lu.assertNotEquals(bi, bf)
  lu.assertStrContains(bi, "i1;")
  lu.assertStrContains(bf, "d1;")
  -- a float field given an integral number is the same float either way
  lu.assertEquals(cid({ f = 2 }), cid({ f = 2.0 }))
  lu.assertNotEquals(cid({ f = 0.0 }), cid({ f = -0.0 }))
  lu.assertNotEquals(cid({ f = 0.1 }), cid({ f = 0.30000000000000004 - 0.2 }), "every bit of a double counts")
end

function TestRecordsCanon:test_what_counts()
  local base = cid({ a = 1, s = "x" })
  lu.assertNotEquals(base, cid({ a = 2, s = "x" }))
  lu.assertNotEquals(base, cid({ a = 1, s = "y" }))
  lu.assertNotEquals(base, cid({ a = 1, s = "x", b = false }), "absent and false differ")
  lu.assertEquals(base, cid({ a = 1, s = "x", m = "metadata" }), "identity = false is left out")
  lu.assertEquals(base, cid({ a = 1, s = "x", _sid = 5, _cid = "whatever" }), "store fields are left out")
  lu.assertNotEquals(cid({ l = { 1, 2 } }), cid({ l = { 2, 1 } }), "lists keep their order")
  lu.assertNotEquals(cid({ parts = { { n = 1 }, { n = 2 } } }), cid({ parts = { { n = 2 }, { n = 1 } } }))
  lu.assertEquals(cid({ parts = { { n = 1, tag = "a" } } }), cid({ parts = { { n = 1, tag = "b" } } }))
  lu.assertEquals(cid({ parts = {} }), cid({}), "no children and an empty list are the same")
  -- lengths are part of the encoding: a string cannot pass for a string and a key
  lu.assertNotEquals(cid({ s = "1k1:a" }), cid({ s = "1" }))
  -- refs count by their own content
  lu.assertNotEquals(cid({ by = { name = "A" } }), cid({ by = { name = "B" } }))
  lu.assertEquals(cid({ by = { name = "A" } }), cid({ by = { name = "A" } }))
  lu.assertNotEquals(cid({ by = { name = "A" } }), cid({}))
  -- the type's name is part of it
  local T2 = records.define { name = "thing2", fields = { a = "integer" } }
  lu.assertNotEquals(cid({ a = 1 }), assert(records.content_id(T2, { a = 1 })))
end

function TestRecordsCanon:test_define_refuses()
  lu.assertErrorMsgContains("declared twice", function()
    records.define { name = "x", fields = { a = "string" }, children = { a = { fields = {} } } }
  end)
  lu.assertErrorMsgContains("starting with a letter", function() records.define { name = "x", fields = { _a = "string" } } end)
  lu.assertErrorMsgContains("record type", function() records.define { name = "x", refs = { a = "author" } } end)
  lu.assertErrorMsgContains("unknown key refs", function()
    records.define { name = "x", children = { c = { refs = { a = Author } } } }
  end)
  lu.assertErrorMsgContains("unknown key", function() records.define { name = "x", fields = { a = { "string", idx = 1 } } } end)
  lu.assertErrorMsgContains("name", function() records.define { name = "bad name" } end)
end

function TestRecordsCanon:test_keyset_condition_is_an_or_of_branches()
  local b = rquery.after({ { "year", 1 }, { "title", -1 } }, { 1999, "m" }, 42)
  lu.assertEquals(#b, 3)
  lu.assertEquals(b[1], { year = { ["$gt"] = 1999 } })
  lu.assertEquals(b[2].year, 1999)
  lu.assertEquals(b[2]["$or"], ms.array { { title = { ["$lt"] = "m" } }, { title = ms.null } })
  lu.assertEquals(b[3], { year = 1999, title = "m", _id = { ["$gt"] = 42 } })
  for _, br in ipairs(b) do lu.assertNil(br["$and"]) end
  -- a null key: ascending, everything not null comes after; descending, nothing does
  local n = rquery.after({ { "year", 1 } }, { ms.null }, 7)
  lu.assertEquals(n, { { year = { ["$ne"] = ms.null } }, { year = ms.null, _id = { ["$gt"] = 7 } } })
  n = rquery.after({ { "year", -1 } }, { ms.null }, 7)
  lu.assertEquals(n, { { year = ms.null, _id = { ["$gt"] = 7 } } })
  -- no order keys: the sid alone
  lu.assertEquals(rquery.after({}, {}, 3), { { _id = { ["$gt"] = 3 } } })
end

function TestRecordsCanon:test_iso_to_nanoseconds()
  lu.assertEquals(rquery.to_ns("2026-01-01T00:00:00Z"), 1767225600 * 1000000000)
  lu.assertEquals(rquery.to_ns("2026-01-01T00:00:00.000000001Z"), 1767225600 * 1000000000 + 1)
  lu.assertEquals(rquery.to_ns("2026-01-01T02:00:00.5+02:00"), 1767225600 * 1000000000 + 500000000)
  lu.assertEquals(rquery.to_ns(12345), 12345)
  lu.assertNil(rquery.to_ns("yesterday"))
  lu.assertNil(rquery.to_ns("2026-01-01T00:00:00.0000000001Z"))
  -- a client's time: decimal text is nanoseconds; a fraction or a table is invalid, not raised
  lu.assertEquals(rquery.to_ns("12345"), 12345)
  for _, t in ipairs { 1.5, {}, true } do
    local v, err, code = rquery.to_ns(t)
    lu.assertNil(v)
    lu.assertEquals(code, "invalid")
    lu.assertStrContains(tostring(err), "as_of")
  end
end

function TestRecordsCanon:test_client_sids_cast_only_where_exact()
  lu.assertEquals(canon.cast_sid(12), 12)
  lu.assertEquals(canon.cast_sid(12.0), 12)
  lu.assertEquals(math.type(canon.cast_sid(12.0)), "integer")
  lu.assertEquals(canon.cast_sid("12"), 12)
  lu.assertEquals(canon.cast_sid("-3"), -3)
  lu.assertEquals(canon.cast_sid("9223372036854775807"), math.maxinteger)
  for _, v in ipairs { "9223372036854775808", "12abc", " 12", "1e3", "0x10", "", 1.5, 0 / 0, math.huge, true,
                       { 1 }, { ["$gt"] = 0 }, ms.null } do
    lu.assertNil(canon.cast_sid(v), tostring(v))
  end
  lu.assertNil(canon.cast_sid(nil))
  lu.assertEquals(canon.got({ ["$gt"] = 0 }), "a table")
  lu.assertEquals(canon.got({ 1 }), "an array")
  lu.assertEquals(canon.got("12abc"), "a string that is not one")
  lu.assertEquals(canon.got(1.5), "a number with a fraction")
  lu.assertEquals(canon.got(nil), "nil")
  lu.assertEquals(canon.got(ms.null), "null")
end

function TestRecordsCanon:test_filter_paths_and_their_kinds()
  local function kind(path) return { rquery.path_kind(T, path) } end
  lu.assertEquals(kind("a"), { "integer", false })
  lu.assertEquals(kind("f"), { "number", false })
  lu.assertEquals(kind("s"), { "string", false })
  lu.assertEquals(kind("b"), { "boolean", false })
  lu.assertEquals(kind("l"), { "integer", true })
  lu.assertEquals(kind("l.0"), { "integer", false })
  lu.assertEquals(kind("m"), { "string", false })
  lu.assertEquals(kind("parts"), { "any", true })
  lu.assertEquals(kind("parts.0"), { "any", false })
  lu.assertEquals(kind("parts.n"), { "integer", false })
  lu.assertEquals(kind("parts.3.tag"), { "string", false })
  lu.assertEquals(kind("by"), { "integer", false })
  lu.assertEquals(kind("_id"), { "integer", false })
  lu.assertEquals(kind("_cid"), { "string", false })
  for _, p in ipairs { "nope", "a.b", "parts.x", "parts.0.x", "by.name", "l.x", "", ".", "a.", "_secret" } do
    lu.assertEquals(kind(p), {}, p)
  end
end

function TestRecordsCanon:test_idiv_exact()
  lu.assertEquals(canon.idiv(1767225600999999999, 1000), 1767225600999999)
  lu.assertEquals(canon.idiv(-1, 1000), -1)
  lu.assertEquals(canon.idiv(999, 1000), 0)
end

-- The failure shape of a driver failure: the message says what was being done, the driver's
-- detail table stays the detail (its labels are what a transaction's retry reads) with the
-- store's facts added to it; without a detail of the driver's, the facts are the detail.
function TestRecordsCanon:test_a_driver_failure_keeps_its_detail()
  local wire = require "mongostore.records.wire"
  local d = { labels = ms.array { "TransientTransactionError" }, server_code = 112 }
  local v, msg, code, detail = wire.driver("insert records.book", "WriteConflict", "conflict", d, { sid = 7 })
  lu.assertNil(v)
  lu.assertEquals(msg, "insert records.book: WriteConflict")
  lu.assertEquals(code, "conflict")
  lu.assertTrue(rawequal(detail, d), "the driver's own table")
  lu.assertEquals(detail.labels[1], "TransientTransactionError")
  lu.assertEquals(detail.server_code, 112)
  lu.assertEquals(detail.sid, 7)
  v, msg, code, detail = wire.driver("find records.book", nil, nil, nil, { sid = 8 })
  lu.assertEquals({ v, msg, code, detail }, { nil, "find records.book: nil", "server", { sid = 8 } })
  v, msg, code, detail = wire.driver("count records.book", "down", "network")
  lu.assertEquals({ v, msg, code, detail }, { nil, "count records.book: down", "network", nil })
  -- the store's own failures: a string message, the facts as the detail
  v, msg, code, detail = wire.fail("conflict", "save book: taken", { sid = 3 })
  lu.assertEquals({ v, msg, code, detail }, { nil, "save book: taken", "conflict", { sid = 3 } })
end
