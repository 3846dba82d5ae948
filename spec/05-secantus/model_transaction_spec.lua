-- spec/05-secantus/model_transaction_spec.lua - registry:transaction and
-- registry:session of mongostore.model on a server with transactions
-- (SecantusDB): commit on return; on abort every document written inside is
-- put back in memory (revision, snapshot, new and deleted flags); a real write
-- conflict between two transactions runs fn again, after the same rollback, so
-- the retried save sends its delta again (Mongoose #8740, #13726, #14268); no
-- nesting unless independent; manual sessions. Skipped on mongo-java-server.
local lu = require "luaunit"
local ms = require "mongostore"
local model = require "mongostore.model"
local helper = require "helpers"

local Q, ops = model.Q, model.ops
local SERVER = os.getenv("MONGOSTORE_TEST_SERVER") or "other"

local articles = require "fixtures.articles"
local ok = articles.ok

local function define() return articles.define() end

TestModelTransactions = {}

function TestModelTransactions:setUp()
  self.name = helper.fresh_db("mtx")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  self.Article = define()
  self.registry = ok(model.registry(self.db, { self.Article }))
  self.has_tx = ok(self.db:info()).transactions
  -- the collection exists before any transaction writes to it
  self.landing = ok(self.Article:insert { title = "Landing", tags = { "page" } })
  ok(self.landing:reload())
end

function TestModelTransactions:tearDown()
  if self.db then self.db:close() end
  if self.other then self.other:close() end
end

function TestModelTransactions:test_unavailable_without_transactions()
  if self.has_tx then return lu.skip("the server has transactions") end
  local ran = false
  local v, err, code = self.registry:transaction(function() ran = true end)
  lu.assertEquals({ v, code, type(err), ran }, { nil, "unavailable", "string", false })
end

function TestModelTransactions:need_tx()
  if SERVER == "java" or not self.has_tx then lu.skip("mongo-java-server has no transactions") end
end

-- The seed: fn raises; the database and the document in memory are as before.
function TestModelTransactions:test_seed_abort_rolls_back_memory()
  self:need_tx()
  local A, landing = self.Article, self.landing
  lu.assertEquals(landing.rev, 0)
  local function promote(tx)
    landing.tags[#landing.tags + 1] = "promoted"
    ok(landing:save { session = tx })
    lu.assertEquals(landing.rev, 1, "inside, the save is applied")
    error("changed my mind")
  end
  local done, e = pcall(self.registry.transaction, self.registry, promote)
  lu.assertFalse(done)
  lu.assertStrContains(tostring(e), "changed my mind")
  lu.assertEquals(ok(A:get(landing.id)).tags, { "page" }, "rolled back in the database")
  lu.assertEquals(landing.rev, 0, "and in memory")
  lu.assertEquals(landing:changes(), { ["$set"] = { tags = { "page", "promoted" } } })
  -- the pending change still saves, at the right revision
  ok(landing:save())
  lu.assertEquals({ landing.rev, ok(A:get(landing.id)).rev }, { 1, 1 })
end

function TestModelTransactions:test_commit_and_fn_values()
  self:need_tx()
  local A = self.Article
  local ok_, n = self.registry:transaction(function(tx)
    local d = ok(A:insert({ title = "in tx" }, { session = tx }))
    self.landing.views = 5
    ok(self.landing:save { session = tx })
    lu.assertEquals(ok(A:count(nil, { session = tx })), 2)
    return d.rev + 41
  end)
  lu.assertEquals({ ok_, n }, { true, 41 })
  lu.assertEquals(ok(A:count()), 2)
  lu.assertEquals(self.landing.rev, 1)
  lu.assertEquals(self.landing:changes(), {})
end

-- fn returns nil, err: aborted, every kind of write put back in memory.
function TestModelTransactions:test_abort_restores_new_deleted_and_revision()
  self:need_tx()
  local A = self.Article
  local other = ok(A:insert { title = "other" })
  ok(other:reload())
  local fresh = A:new { title = "fresh" }
  local v, _, code = self.registry:transaction(function(tx)
    ok(fresh:insert { session = tx })
    ok(other:delete { session = tx })
    self.landing.title = "renamed"
    ok(self.landing:save { session = tx })
    local docs = ok(A:find(Q.title:eq("renamed")):all { session = tx })
    docs[1].views = 3
    ok(A:bulk_save({ docs[1] }, { session = tx }))
    return nil, "changed my mind", "conflict"
  end)
  lu.assertNil(v)
  lu.assertEquals(code, "conflict")
  lu.assertTrue(fresh.is_new, "the insert is undone in memory")
  lu.assertNil(fresh.rev)
  lu.assertNil(fresh.created_at)
  lu.assertNil(other.deleted_at, "the soft delete is undone")
  lu.assertEquals(other.rev, 0)
  lu.assertEquals(self.landing.rev, 0)
  lu.assertEquals(self.landing:changes(), { ["$set"] = { title = "renamed" } })
  lu.assertEquals(ok(A:count()), 2, "and nothing is in the database")
  lu.assertEquals(ok(A:get(self.landing.id)).title, "Landing")
  -- all of them write again afterwards
  ok(fresh:insert())
  ok(other:delete())
  ok(self.landing:save())
  lu.assertEquals(ok(A:count()), 2)
end

-- Issue 21, item 8a: bulk_write's insert goes through the journal as insert
-- does: on abort the document is new again, nothing the model set left on it;
-- after a commit it is tracked.
function TestModelTransactions:test_bulk_write_insert_is_rolled_back_in_memory()
  self:need_tx()
  local A = self.Article
  local fresh, plain = A:new { title = "bw fresh" }, { title = "bw plain" }
  local v, _, code = self.registry:transaction(function(tx)
    ok(A:bulk_write({ model.insert_one(fresh), model.insert_one(plain) }, { session = tx }))
    lu.assertFalse(fresh.is_new, "inside, the insert is applied")
    lu.assertEquals(plain.rev, 0)
    return nil, "changed my mind", "conflict"
  end)
  lu.assertEquals({ v, code }, { nil, "conflict" })
  for _, d in ipairs { fresh, plain } do
    lu.assertTrue(d.is_new, "the insert is undone in memory")
    lu.assertNil(rawget(d, "_id"))
    lu.assertNil(d.rev)
    lu.assertNil(d.created_at)
  end
  lu.assertEquals(ok(A:count(Q.title:prefix("bw"))), 0)
  -- committed: tracked, and it saves
  ok(self.registry:transaction(function(tx)
    return ok(A:bulk_write({ model.insert_one(fresh) }, { session = tx }))
  end))
  lu.assertFalse(fresh.is_new)
  fresh.views = 2
  ok(fresh:save())
  lu.assertEquals({ ok(A:get(fresh.id)).views, fresh.rev }, { 2, 1 })
end

-- A real write conflict: another handle's transaction writes the document
-- after ours read it; ours fails TransientTransactionError and runs again.
-- The document ours saved in the first attempt is put back first, so the
-- second attempt sends its delta again (rather than nothing).
function TestModelTransactions:test_write_conflict_retries_with_memory_rolled_back()
  self:need_tx()
  local A = self.Article
  self.other = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  local B = define()
  local reg2 = ok(model.registry(self.other, { B }, { indexes = false }))
  local hot = ok(A:insert { title = "hot" })
  ok(hot:reload())
  local landing = self.landing
  landing.views = 7
  local runs, first_code, first_labels, saved_revs = 0, nil, nil, {}
  local res = ok(self.registry:transaction(function(tx)
    runs = runs + 1
    ok(landing:save { session = tx })              -- written in this attempt
    saved_revs[runs] = landing.rev
    local mine = ok(A:get(hot.id, { session = tx }))
    if runs == 1 then
      -- the other transaction writes the hot document and commits first
      ok(reg2:transaction(function(tx2)
        ok(B:update(hot.id, ops.inc { views = 100 }, model.options { session = tx2 }))
      end))
    end
    mine.views = mine.views + 1
    local v, err, code, detail = mine:save { session = tx }
    if runs == 1 then first_code, first_labels = code, detail and detail.labels end
    if not v then return nil, err, code, detail end
    return runs
  end))
  lu.assertTrue(res)
  lu.assertEquals(runs, 2, "fn ran again")
  lu.assertEquals(first_code, "transient")
  local labelled = false
  for _, l in ipairs(first_labels or {}) do labelled = labelled or l == "TransientTransactionError" end
  lu.assertTrue(labelled, "the driver's labels are in the model call's detail")
  lu.assertEquals(saved_revs, { 1, 1 }, "the retry started from revision 0 again")
  local back = ok(A:get(landing.id))
  lu.assertEquals({ back.views, back.rev }, { 7, 1 }, "the retried save sent its delta")
  lu.assertEquals({ landing.rev, landing:changes() }, { 1, {} })
  lu.assertEquals(ok(A:get(hot.id)).views, 101, "each increment once")
end

-- Raised with assert(), a transient failure is retried all the same.
function TestModelTransactions:test_asserted_transient_failure_is_retried()
  self:need_tx()
  local A = self.Article
  self.other = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  local B = define()
  local reg2 = ok(model.registry(self.other, { B }, { indexes = false }))
  local runs = 0
  ok(self.registry:transaction(function(tx)
    runs = runs + 1
    local mine = assert(A:get(self.landing.id, { session = tx }))
    if runs == 1 then
      ok(reg2:transaction(function(tx2)
        ok(B:update(self.landing.id, ops.inc { views = 1 }, model.options { session = tx2 }))
      end))
    end
    mine.title = "asserted"
    assert(mine:save { session = tx })
  end))
  lu.assertEquals(runs, 2)
  local back = ok(A:get(self.landing.id))
  lu.assertEquals({ back.title, back.views, back.rev }, { "asserted", 1, 2 })
end

-- Returned as nil, message alone (no code, no detail), a transient failure is
-- retried too: the session knows an operation of the transaction failed.
function TestModelTransactions:test_returned_model_error_is_retried()
  self:need_tx()
  local A = self.Article
  self.other = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  local B = define()
  local reg2 = ok(model.registry(self.other, { B }, { indexes = false }))
  local runs = 0
  ok(self.registry:transaction(function(tx)
    runs = runs + 1
    local mine = ok(A:get(self.landing.id, { session = tx }))
    if runs == 1 then
      ok(reg2:transaction(function(tx2)
        ok(B:update(self.landing.id, ops.inc { views = 1 }, model.options { session = tx2 }))
      end))
    end
    mine.title = "returned"
    local v, e = mine:save { session = tx }
    if not v then return nil, e end
    return true
  end))
  lu.assertEquals(runs, 2)
  lu.assertEquals(ok(A:get(self.landing.id)).title, "returned")
end

function TestModelTransactions:test_no_nesting_unless_independent()
  self:need_tx()
  local A = self.Article
  local inner_err
  local v, err, code = self.registry:transaction(function(tx)
    local r, e, c = self.registry:transaction(function() error("never runs") end)
    inner_err = { message = e, code = c }
    lu.assertNil(r)
    -- an independent one commits on its own: an audit record that survives the abort
    ok(self.registry:transaction(function(tx2)
      ok(A:insert({ title = "audit" }, { session = tx2 }))
    end, { independent = true }))
    ok(A:insert({ title = "outer" }, { session = tx }))
    return nil, "abort the outer one", "conflict"
  end)
  lu.assertEquals({ v, code }, { nil, "conflict" })
  lu.assertEquals(err, "abort the outer one")
  lu.assertEquals(inner_err.code, "transaction")
  lu.assertStrContains(inner_err.message, "do not nest")
  lu.assertEquals(ok(A:count(Q.title:eq("audit"))), 1, "the independent one stayed committed")
  lu.assertEquals(ok(A:count(Q.title:eq("outer"))), 0)
end

function TestModelTransactions:test_manual_session()
  self:need_tx()
  local A = self.Article
  local s = ok(self.registry:session())
  ok(s:start_transaction())
  lu.assertTrue(s:in_transaction())
  self.landing.views = 3
  ok(self.landing:save { session = s })
  lu.assertEquals(self.landing.rev, 1)
  ok(s:abort())
  lu.assertEquals(self.landing.rev, 0, "abort puts memory back")
  lu.assertEquals(self.landing:changes(), { ["$set"] = { views = 3 } })
  ok(s:start_transaction())
  ok(self.landing:save { session = s })
  ok(A:insert({ title = "manual" }, { session = s }))
  -- s.session is the raw session, for the document API
  ok(self.db:collection("articles"):insert_one({ title = "raw" }, { session = s.session }))
  ok(s:commit())
  s:close()
  lu.assertEquals(self.landing.rev, 1)
  lu.assertEquals(ok(A:get(self.landing.id)).views, 3)
  lu.assertEquals(ok(self.db:collection("articles"):count()), 3)
end
