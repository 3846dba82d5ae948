-- spec/02-documents/bulk_spec.lua - insert_many and bulk_write: results, the
-- 1-based index of each failed document or op, ordered stopping at the first
-- failure and unordered going on, and malformed input refused whole before
-- anything is sent (checked with raw reads).
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local rawdb = require "helpers.rawdb"

local ok = require("helpers").ok

local function raw_ids(name)
  local out = {}
  for i, d in ipairs(rawdb.docs(name, "things")) do out[i] = d._id end
  return out
end

TestBulk = {}

function TestBulk:setUp()
  self.name = helper.fresh_db("bulk")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  self.c = ok(self.db:collection("things"))
  ok(self.c:insert_one({ _id = 3, seed = true }))
end

function TestBulk:tearDown()
  if self.db then self.db:close() end
end

function TestBulk:test_insert_many_all_good()
  local r = ok(self.c:insert_many({ { _id = 1 }, { _id = 2, a = "x" }, { b = true } }))
  lu.assertEquals(r.inserted[1], 1)
  lu.assertEquals(r.inserted[2], 2)
  lu.assertEquals(#tostring(r.inserted[3]), 24, "an ObjectId made for the third")
  lu.assertEquals(r.errors, {})
  lu.assertEquals(rawdb.count(self.name, "things"), 4)
end

function TestBulk:test_insert_many_ordered_stops_at_the_first_error()
  local r = ok(self.c:insert_many({ { _id = 1 }, { _id = 3 }, { _id = 4 } }))
  lu.assertEquals(#r.errors, 1)
  lu.assertEquals(r.errors[1].index, 2)
  lu.assertEquals(r.errors[1].code, "duplicate")
  lu.assertEquals(r.errors[1].detail, { server_code = 11000 })
  lu.assertNil(r.errors[1].server_code, "the server's code is in detail")
  lu.assertStrContains(r.errors[1].message, "3")
  lu.assertEquals(r.inserted, { [1] = 1 })
  lu.assertEquals(raw_ids(self.name), { 1, 3 })
end

function TestBulk:test_insert_many_unordered_goes_on()
  local r = ok(self.c:insert_many({ { _id = 3 }, { _id = 5 }, { _id = 3 }, { _id = 6 } }, { ordered = false }))
  local idx = {}
  for i, e in ipairs(r.errors) do idx[i] = e.index end
  lu.assertEquals(idx, { 1, 3 })
  lu.assertEquals(r.inserted, { [2] = 5, [4] = 6 })
  lu.assertEquals(raw_ids(self.name), { 3, 5, 6 })
end

function TestBulk:test_insert_many_bad_document_writes_nothing()
  local v, err, code = self.c:insert_many({ { _id = 10 }, { _id = 11, f = function() end }, { _id = 12 } })
  lu.assertNil(v)
  lu.assertEquals(code, "invalid")
  lu.assertStrContains(err, "docs[2]")
  v, err, code = self.c:insert_many({ { _id = 10 }, { _id = 11, ["$bad"] = 1 } })
  lu.assertNil(v)
  lu.assertEquals(code, "invalid", err)
  lu.assertStrContains(err, "docs[2]")
  v, err, code = self.c:insert_many({})
  lu.assertEquals({ v, code }, { nil, "invalid" }, err)
  v, err, code = self.c:insert_many({ a = { _id = 1 } })
  lu.assertEquals({ v, code }, { nil, "invalid" }, err)
  lu.assertEquals(raw_ids(self.name), { 3 })
end

function TestBulk:test_bulk_write_mixed()
  local r = ok(self.c:bulk_write({
    { insert_one = { _id = 1, n = 0 } },
    { insert_one = { _id = 2, n = 0 } },
    { update_one = { filter = { _id = 1 }, update = { ["$inc"] = { n = 1 } } } },
    { update_many = { { n = 0 }, { ["$set"] = { m = true } } } },          -- positional filter, update
    { replace_one = { filter = { _id = 7 }, replacement = { r = 1 }, upsert = true } },
    { delete_one = { filter = { _id = 3 } } },
    { update_one = { filter = { _id = 8 }, update = { ["$set"] = { u = 1 } }, upsert = true } },
    { delete_many = { { r = 1 } } },
  }))
  lu.assertEquals(r.errors, {})
  lu.assertEquals(r.inserted, 2)
  lu.assertEquals(r.matched, 2)          -- update_one of 1, update_many of 2 (n = 0 by then)
  lu.assertEquals(r.modified, 2)
  lu.assertEquals(r.upserted, 2)
  lu.assertEquals(r.deleted, 2)
  lu.assertEquals(r.upserted_ids, { [5] = 7, [7] = 8 })
  lu.assertEquals(raw_ids(self.name), { 1, 2, 8 })
  local raw = rawdb.docs(self.name, "things")
  lu.assertEquals(raw[1], { _id = 1, n = 1 })
  lu.assertEquals(raw[2], { _id = 2, n = 0, m = true })
end

function TestBulk:test_bulk_write_ordered_error_index()
  local r = ok(self.c:bulk_write({
    { insert_one = { _id = 1 } },
    { update_one = { filter = { _id = 1 }, update = { ["$set"] = { a = 1 } } } },
    { insert_one = { _id = 3 } },
    { insert_one = { _id = 4 } },
  }))
  lu.assertEquals(#r.errors, 1)
  lu.assertEquals(r.errors[1].index, 3)
  lu.assertEquals(r.errors[1].code, "duplicate")
  lu.assertEquals(r.errors[1].detail, { server_code = 11000 })
  lu.assertIsString(r.errors[1].message)
  lu.assertEquals(r.inserted, 1)
  lu.assertEquals(raw_ids(self.name), { 1, 3 })
end

function TestBulk:test_bulk_write_unordered_error_indexes()
  local r = ok(self.c:bulk_write({
    { insert_one = { _id = 3 } },
    { insert_one = { _id = 20 } },
    { delete_one = { filter = { _id = 20 } } },
    { insert_one = { _id = 3 } },
    { insert_one = { _id = 21 } },
  }, { ordered = false }))
  local idx = {}
  for i, e in ipairs(r.errors) do idx[i] = e.index end
  table.sort(idx)
  lu.assertEquals(idx, { 1, 4 })
  lu.assertEquals(r.inserted, 2)
  lu.assertEquals(r.deleted, 1)
  lu.assertEquals(raw_ids(self.name), { 3, 21 })
end

function TestBulk:test_bulk_write_malformed_op_writes_nothing()
  local cases = {
    { { insert_one = { _id = 30 } }, { nonsense = {} } },
    { { insert_one = { _id = 30 } }, { insert_one = { _id = 31 }, delete_one = { filter = {} } } },
    { { insert_one = { _id = 30 } }, { update_one = { filter = { _id = 30 } } } },
    { { insert_one = { _id = 30 } }, { update_one = { filter = { _id = 30 }, update = { plain = 1 } } } },
    { { insert_one = { _id = 30 } }, { replace_one = { filter = { _id = 30 }, replacement = { ["$set"] = {} } } } },
    { { insert_one = { _id = 30 } }, { delete_one = {} } },
    { { insert_one = { _id = 30 } }, { delete_one = { filter = { x = function() end } } } },
    { { insert_one = { _id = 30 } }, "not a table" },
    { { insert_one = { _id = 30 } }, { update_one = { filter = {}, update = { ["$set"] = { a = 1 } }, upsert = 1 } } },
    { { insert_one = { _id = 30 } }, { update_one = { filter = {}, update = { ["$set"] = { a = 1 } }, upsrt = true } } },
    { { insert_one = { _id = 30 } }, { delete_one = { filter = {}, update = { ["$set"] = { a = 1 } } } } },
    { { insert_one = { _id = 30 } }, { delete_many = { {}, {} } } },
    { { insert_one = { _id = 30 } }, { update_one = { filter = { [""] = 1 }, update = { ["$set"] = { a = 1 } },
                                                     upsert = true } } },
  }
  for i, ops in ipairs(cases) do
    local v, err, code = self.c:bulk_write(ops)
    lu.assertNil(v, "case " .. i)
    lu.assertEquals(code, "invalid", "case " .. i .. ": " .. tostring(err))
    lu.assertStrContains(err, "ops[2]", false, "case " .. i)
  end
  lu.assertEquals(raw_ids(self.name), { 3 })
end
