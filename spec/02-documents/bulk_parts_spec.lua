-- spec/02-documents/bulk_parts_spec.lua - the parts of a bulk_write op (by
-- name or by position, the name winning), the errors that name the part at
-- fault with its 1-based op index (nothing written), the results of the
-- single writes (matched, modified, upserted_id, deleted) with and without
-- upsert, and every write with opts.session where the server has sessions.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local rawdb = require "helpers.rawdb"

local ok = require("helpers").ok

local function raw_by_id(name)
  local out = {}
  for _, d in ipairs(rawdb.docs(name, "things")) do out[d._id] = d end
  return out
end

TestBulkParts = {}

function TestBulkParts:setUp()
  self.name = helper.fresh_db("bulkparts")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  self.c = ok(self.db:collection("things"))
  ok(self.c:insert_many({ { _id = 1, n = 0 }, { _id = 2, n = 0 } }))
end

function TestBulkParts:tearDown()
  if self.db then self.db:close() end
end

function TestBulkParts:test_parts_by_name_or_position_the_name_winning()
  local r = ok(self.c:bulk_write({
    { update_one = { { _id = 1 }, { ["$inc"] = { n = 1 } } } },
    -- both a name and a position: the named filter and update are used
    { update_one = { filter = { _id = 2 }, { _id = 1 }, update = { ["$inc"] = { n = 10 } }, { ["$inc"] = { n = 100 } } } },
    { replace_one = { { _id = 1 }, { n = 5, r = true } } },
    { delete_one = { { _id = 9 } } },
  }))
  lu.assertEquals(r.errors, {})
  lu.assertEquals(r.matched, 3)
  lu.assertEquals(r.modified, 3)
  lu.assertEquals(r.deleted, 0)
  local raw = raw_by_id(self.name)
  lu.assertEquals(raw[1], { _id = 1, n = 5, r = true })
  lu.assertEquals(raw[2], { _id = 2, n = 10 })
end

function TestBulkParts:test_errors_name_the_part_and_write_nothing()
  local set = { ["$set"] = { a = 1 } }
  local cases = {
    { { delete_one = { filter = { x = function() end } } }, "ops[2].delete_one.filter" },
    { { update_one = { filter = { _id = 1 }, update = { ["$set"] = { f = function() end } } } },
      "ops[2].update_one.update" },
    { { replace_one = { filter = { _id = 1 }, replacement = { ["$set"] = {} } } }, "ops[2].replace_one.replacement" },
    { { update_many = { update = set } }, "ops[2].update_many needs a filter" },
    { { update_one = { filter = {} } }, "ops[2].update_one needs an update" },
    { { replace_one = { filter = {} } }, "ops[2].replace_one needs a replacement" },
    { { update_one = { filter = {}, update = set, upsrt = true } }, "ops[2].update_one: unknown key upsrt" },
    { { update_one = { {}, set, true } }, "ops[2].update_one: unknown key (not a name)" },
    { { delete_many = { {}, set } }, "ops[2].delete_many: unknown key (not a name)" },
    { { delete_one = { filter = {}, upsert = true } }, "ops[2].delete_one: unknown key upsert" },
    { { update_one = { filter = {}, update = set, upsert = "yes" } }, "ops[2].update_one.upsert must be a boolean" },
    { { update_one = { filter = { [""] = 1 }, update = set, upsert = true } }, "ops[2].update_one.filter" },
    { { insert_one = { _id = 40 }, delete_one = { filter = {} } }, "ops[2] must hold one of" },
    { { update_one = "not a table" }, "ops[2].update_one must be a table, got string" },
  }
  for i, case in ipairs(cases) do
    local v, err, code = self.c:bulk_write({ { insert_one = { _id = 30 } }, case[1] })
    lu.assertNil(v, "case " .. i)
    lu.assertEquals(code, "invalid", "case " .. i .. ": " .. tostring(err))
    lu.assertStrContains(err, "bulk_write things: " .. case[2], false, "case " .. i)
  end
  -- the index is the op's own, 1-based, past the first few
  local ops = {}
  for i = 1, 11 do ops[i] = { insert_one = { _id = 100 + i } } end
  ops[12] = { update_one = { filter = {} } }
  local v, err = self.c:bulk_write(ops)
  lu.assertNil(v)
  lu.assertStrContains(err, "ops[12].update_one needs an update")
  local raw = raw_by_id(self.name)
  lu.assertEquals({ raw[1], raw[2], raw[30], raw[101] }, { { _id = 1, n = 0 }, { _id = 2, n = 0 } })
end

function TestBulkParts:test_single_write_results()
  local r = ok(self.c:update_one({ _id = 1 }, { ["$inc"] = { n = 1 } }))
  lu.assertEquals(r, { matched = 1, modified = 1 })
  r = ok(self.c:update_one({ _id = 7 }, { ["$set"] = { n = 7 } }))
  lu.assertEquals(r, { matched = 0, modified = 0 })
  r = ok(self.c:update_one({ _id = 7 }, { ["$set"] = { n = 7 } }, { upsert = true }))
  lu.assertEquals(r, { matched = 0, modified = 0, upserted_id = 7 })
  r = ok(self.c:update_many({ n = { ["$lt"] = 5 } }, { ["$set"] = { low = true } }))
  lu.assertEquals(r, { matched = 2, modified = 2 })
  r = ok(self.c:replace_one({ _id = 8 }, { n = 8 }, { upsert = true }))
  lu.assertEquals(r, { matched = 0, modified = 0, upserted_id = 8 })
  r = ok(self.c:replace_one({ _id = 8 }, { n = 9 }, { upsert = false }))
  lu.assertEquals(r, { matched = 1, modified = 1 })
  r = ok(self.c:delete_one({ _id = 2 }))
  lu.assertEquals(r, { deleted = 1 })
  r = ok(self.c:delete_many({ n = { ["$gte"] = 0 } }))
  lu.assertEquals(r, { deleted = 3 })
  lu.assertEquals(rawdb.count(self.name, "things"), 0)
end

function TestBulkParts:test_single_write_refusals_write_nothing()
  local cases = {
    { function() return self.c:update_one({ _id = 1 }, { plain = 1 }) end, "update_one things" },
    { function() return self.c:update_one({ [""] = 1 }, { ["$set"] = { n = 1 } }, { upsert = true }) end,
      "update_one things: filter" },
    { function() return self.c:replace_one({ _id = 1 }, { ["$set"] = { n = 1 } }) end,
      "replace_one things: replacement" },
    { function() return self.c:update_many({ _id = 1 }, { ["$set"] = { f = function() end } }) end,
      "update_many things: update" },
  }
  for i, case in ipairs(cases) do
    local v, err, code = case[1]()
    lu.assertNil(v, "case " .. i)
    lu.assertEquals(code, "invalid", "case " .. i .. ": " .. tostring(err))
    lu.assertStrContains(err, case[2], false, "case " .. i)
  end
  lu.assertEquals(raw_by_id(self.name), { { _id = 1, n = 0 }, { _id = 2, n = 0 } })
end

function TestBulkParts:test_writes_with_a_session()
  local s, err, code = self.db:session()
  if not s then
    lu.assertEquals(code, "unavailable", err)
    return lu.skip("the server has no sessions (mongo-java-server)")
  end
  local o = { session = s }
  lu.assertEquals(ok(self.c:update_one({ _id = 1 }, { ["$inc"] = { n = 1 } }, o)), { matched = 1, modified = 1 })
  lu.assertEquals(ok(self.c:update_one({ _id = 5 }, { ["$set"] = { n = 5 } }, { session = s, upsert = true })),
    { matched = 0, modified = 0, upserted_id = 5 })
  lu.assertEquals(ok(self.c:replace_one({ _id = 2 }, { n = 2 }, o)), { matched = 1, modified = 1 })
  local r = ok(self.c:bulk_write({
    { update_one = { filter = { _id = 6 }, update = { ["$set"] = { n = 6 } }, upsert = true } },
    { delete_one = { filter = { _id = 5 } } },
  }, { session = s, ordered = false }))
  lu.assertEquals(r.errors, {})
  lu.assertEquals(r.upserted_ids, { [1] = 6 })
  lu.assertEquals(ok(self.c:delete_many({ _id = { ["$in"] = ms.array { 1, 2 } } }, o)), { deleted = 2 })
  ok(s:close())
  lu.assertEquals(raw_by_id(self.name), { [6] = { _id = 6, n = 6 } })
end
