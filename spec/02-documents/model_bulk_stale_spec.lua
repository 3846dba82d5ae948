-- spec/02-documents/model_bulk_stale_spec.lua - bulk_save against a second
-- writer: a copy another writer moved on by one revision is reported stale
-- every time, however close in time the two writes land (issue 21, item 1:
-- the check compared timestamps of millisecond resolution), and the stale copy
-- keeps its pending change and its old revision. The secantus flavour runs
-- this file on SecantusDB too.
local lu = require "luaunit"
local model = require "mongostore.model"

local ops = model.ops

local articles = require "fixtures.articles"
local ok = articles.ok

TestModelBulkStale = {}

function TestModelBulkStale:setUp()
  articles.open(self, "mbstale")
end

function TestModelBulkStale:tearDown()
  if self.db then self.db:close() end
end

local ROUNDS = 300

-- Each round: three documents inserted, one moved on by Model:update (a
-- single revision bump by another writer), all three changed in memory, then
-- one bulk_save: the moved one must come back stale, the other two written.
function TestModelBulkStale:test_a_single_bump_by_another_writer_is_always_stale()
  local A = self.Article
  local misreports, wrong = 0, {}
  for round = 1, ROUNDS do
    local docs = {}
    for i = 1, 3 do docs[i] = ok(A:insert { title = ("r%d-%d"):format(round, i) }) end
    local k = round % 3 + 1
    ok(A:update(docs[k].id, ops.inc { views = 100 }))
    for i = 1, 3 do docs[i].views = docs[i].views + 1 end
    local n, _, code, detail = A:bulk_save(docs)
    if n ~= nil or code ~= "stale" or #detail.failed ~= 1 or detail.failed[1].index ~= k or detail.written ~= 2 then
      misreports = misreports + 1
      if #wrong < 5 then wrong[#wrong + 1] = ("round %d: n=%s code=%s"):format(round, tostring(n), tostring(code)) end
    else
      -- the stale copy: its change still pending, its revision the old one
      local d = docs[k]
      if d.rev ~= 0 or d.views ~= 1 or not (d:changes()["$set"] and d:changes()["$set"].views == 1) then
        misreports = misreports + 1
        if #wrong < 5 then wrong[#wrong + 1] = ("round %d: the stale copy was touched"):format(round) end
      end
      for i = 1, 3 do
        if i ~= k and (docs[i].rev ~= 1 or next(docs[i]:changes()) ~= nil) then
          misreports = misreports + 1
          if #wrong < 5 then wrong[#wrong + 1] = ("round %d: written copy %d not in sync"):format(round, i) end
        end
      end
    end
  end
  lu.assertEquals(misreports, 0, table.concat(wrong, "; "))
  -- and the database holds the other writer's value for every moved document
  lu.assertEquals(ok(A:count { views = 100 }), ROUNDS)
  lu.assertEquals(ok(A:count { views = 1 }), 2 * ROUNDS)
end

-- Two copies of one document in one call: the first write moves the
-- revision on, so the second matches nothing. Its revision and updated_at in
-- the database are exactly what its own write would have left; only the
-- op's token tells it was not written.
function TestModelBulkStale:test_two_copies_of_one_document_in_one_call()
  local A = self.Article
  local a = ok(A:insert { title = "twice" })
  local b = ok(A:get(a.id))
  a.views, b.views = 1, 2
  local n, _, code, detail = A:bulk_save { a, b }
  lu.assertNil(n)
  lu.assertEquals({ code, detail.written, #detail.failed, detail.failed[1].index }, { "stale", 1, 1, 2 })
  lu.assertIs(detail.failed[1].doc, b)
  lu.assertEquals({ a.rev, b.rev }, { 1, 0 })
  lu.assertEquals(b:changes(), { ["$set"] = { views = 2 } })
  lu.assertEquals(ok(A:get(a.id)).views, 1)
end

-- The token is the model's own: the database holds it, tracked documents
-- never do (reads drop it, so a save never sends it back or unsets it).
function TestModelBulkStale:test_tracked_documents_do_not_carry_the_token()
  local A = self.Article
  local a = ok(A:insert { title = "t" })
  a.views = 1
  lu.assertEquals(ok(A:bulk_save { a }), 1)
  local raw = ok(self.db:collection("articles"):find_one { _id = a.id })
  lu.assertEquals(type(raw._bulk), "string")
  for _, d in ipairs { ok(A:get(a.id)), ok(A:find():first()), ok(A:find():all())[1], ok(A:hydrate(raw)),
                       ok(A:update(a.id, ops.inc { views = 1 })) } do
    lu.assertNil(rawget(d, "_bulk"))
    lu.assertNil(model.snapshot(d)._bulk)
    lu.assertEquals(d:changes(), {})
  end
  ok(a:reload())
  lu.assertNil(rawget(a, "_bulk"))
  a.views = 10
  lu.assertEquals(a:changes(), { ["$set"] = { views = 10 } })
  ok(a:save())
  lu.assertErrorMsgContains("_bulk", model.define, { collection = "x", fields = { _bulk = "string" } })
end
