-- spec/05-secantus/transaction_spec.lua - db:transaction and db:session on a
-- server with transactions (SecantusDB, a single-node replica set): what a
-- transaction commits is visible and what it aborts is not, conflicts and
-- transient failures run fn again, the timeout ends it, nesting and foreign
-- or closed sessions are refused. Skipped on mongo-java-server, which has no
-- transactions (spec/02-documents/session_spec.lua covers that side).
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local rawdb = require "helpers.rawdb"
local faults = require "helpers.faults"

local SERVER = os.getenv("MONGOSTORE_TEST_SERVER") or "other"
local PROCS, EACH = 2, 15

local function open(name)
  local db, err, code = ms.database(helper.uri(), { db = name, wait = 10 })
  assert(db, "database failed: " .. tostring(err) .. " (" .. tostring(code) .. ")")
  return db
end

-- the first value of every call that may fail, asserted with its message
local ok = require("helpers").ok

-- fn's way to hand an operation's failure to db:transaction
local function pass(r, err, code, detail)
  if r == nil then return nil, err, code, detail end
  return r
end

TestTransactions = {}

function TestTransactions:setUp()
  if SERVER == "java" then lu.skip("mongo-java-server has no sessions or transactions") end
  self.name = helper.fresh_db("tx")
  self.db = open(self.name)
  self.other = open(self.name)  -- a second handle: what others see meanwhile
  self.c = self.db:collection("orders")
  -- collections exist before any transaction writes to them
  ok(self.c:insert_one({ _id = "seed", n = 0 }))
  ok(self.db:collection("lines"):insert_one({ _id = "seed" }))
end

function TestTransactions:tearDown()
  if self.db then self.db:close() end
  if self.other then self.other:close() end
end

function TestTransactions:test_info_says_transactions()
  lu.assertTrue(ok(self.db:info()).transactions)
end

function TestTransactions:test_commit_is_visible_and_returns_fn_values()
  local seen_inside, own_read
  local res = table.pack(self.db:transaction(function(s)
    lu.assertTrue(s:in_transaction())
    ok(self.c:insert_one({ _id = "o1", total = 30 }, { session = s }))
    ok(self.db:collection("lines"):insert_one({ _id = "l1", order = "o1" }, { session = s }))
    own_read = self.c:find_one({ _id = "o1" }, { session = s })
    seen_inside = self.other:collection("orders"):find_one({ _id = "o1" })
    return "placed", 2
  end))
  lu.assertEquals(res.n, 3)
  lu.assertEquals({ res[1], res[2], res[3] }, { true, "placed", 2 })
  lu.assertEquals(own_read and own_read.total, 30, "the transaction reads its own write")
  lu.assertNil(seen_inside, "another handle saw the write before the commit")
  lu.assertEquals(ok(self.other:collection("orders"):find_one({ _id = "o1" })).total, 30)
  lu.assertEquals(rawdb.count(self.name, "orders"), 2)
  lu.assertEquals(rawdb.count(self.name, "lines"), 2)
end

function TestTransactions:test_lua_error_aborts_everything()
  local v, err, code, detail = self.db:transaction(function(s)
    ok(self.c:insert_one({ _id = "o1" }, { session = s }))
    ok(self.db:collection("lines"):insert_one({ _id = "l1" }, { session = s }))
    error({ reason = "out of stock" })
  end)
  lu.assertNil(v)
  lu.assertEquals(code, "invalid")
  lu.assertStrContains(err, "transaction: fn raised")
  lu.assertEquals(detail.error, { reason = "out of stock" }, "the value raised comes back as detail.error")
  lu.assertEquals(ok(self.c:count({ _id = "o1" })), 0)
  lu.assertEquals(rawdb.count(self.name, "orders"), 1)
  lu.assertEquals(rawdb.count(self.name, "lines"), 1)

  -- a string raised: its text in the message
  v, err = self.db:transaction(function(s)
    ok(self.c:insert_one({ _id = "o2" }, { session = s }))
    error("boom")
  end)
  lu.assertNil(v)
  lu.assertStrContains(err, "boom")
  lu.assertNil(self.c:find_one({ _id = "o2" }))
end

function TestTransactions:test_fn_returning_an_error_aborts_with_it()
  local runs = 0
  local v, err, code, detail = self.db:transaction(function(s)
    runs = runs + 1
    ok(self.c:insert_one({ _id = "o1" }, { session = s }))
    return nil, "customer changed their mind", "conflict", { why = "test" }
  end)
  lu.assertEquals({ v, err, code, detail }, { nil, "customer changed their mind", "conflict", { why = "test" } })
  lu.assertEquals(runs, 1, "an error that is not transient is not tried again")
  lu.assertNil(self.c:find_one({ _id = "o1" }))
  lu.assertEquals(rawdb.count(self.name, "orders"), 1)
end

function TestTransactions:test_session_by_hand_commit_and_abort()
  local s = ok(self.db:session())
  lu.assertFalse(s:in_transaction())
  ok(s:start_transaction({ read_concern = "snapshot", write_concern = { w = "majority" },
                           read_preference = "primary", max_commit_time_ms = 5000 }))
  lu.assertTrue(s:in_transaction())
  local again, err, code = s:start_transaction()
  lu.assertNil(again)
  lu.assertEquals(code, "invalid", err)
  ok(self.c:insert_one({ _id = "kept" }, { session = s }))
  lu.assertNil(self.other:collection("orders"):find_one({ _id = "kept" }))
  ok(s:commit())
  lu.assertFalse(s:in_transaction())
  lu.assertTrue(s:commit(), "a commit may be sent again (what the UnknownTransactionCommitResult retry does)")
  lu.assertNotNil(self.other:collection("orders"):find_one({ _id = "kept" }))

  ok(s:start_transaction({ read_concern = { level = "majority" }, write_concern = 1 }))
  ok(self.c:insert_one({ _id = "dropped" }, { session = s }))
  ok(s:abort())
  lu.assertFalse(s:in_transaction())
  local v
  v, err, code = s:abort()
  lu.assertNil(v, err)
  lu.assertEquals(code, "invalid", err)
  v, err, code = s:commit()
  lu.assertNil(v, err)
  lu.assertEquals(code, "invalid", err)
  lu.assertNil(self.c:find_one({ _id = "dropped" }))

  -- closing a session aborts the transaction it still has open
  ok(s:start_transaction())
  ok(self.c:insert_one({ _id = "left_open" }, { session = s }))
  lu.assertTrue(s:close())
  lu.assertNil(self.c:find_one({ _id = "left_open" }))
  lu.assertEquals(rawdb.count(self.name, "orders"), 2)
end

function TestTransactions:test_start_transaction_refuses_bad_options()
  local s = ok(self.db:session())
  for _, bad in ipairs {
    { nope = 1 }, { read_concern = 5 }, { write_concern = { w = -1 } }, { write_concern = { j = "yes" } },
    { read_preference = "anywhere" }, { max_commit_time_ms = -1 }, { max_commit_time_ms = 1.5 },
  } do
    local fine, err = pcall(s.start_transaction, s, bad)
    lu.assertFalse(fine, "accepted " .. next(bad))
    lu.assertStrContains(err, "start_transaction")
    lu.assertFalse(s:in_transaction())
  end
  lu.assertErrorMsgContains("opts must be a table", s.start_transaction, s, "snapshot")
  s:close()
  lu.assertErrorMsgContains("fn must be a function", self.db.transaction, self.db, "fn")
  lu.assertErrorMsgContains("unknown option", self.db.transaction, self.db, function() end, { retries = 3 })
  lu.assertErrorMsgContains("timeout", self.db.transaction, self.db, function() end, { timeout = -1 })
  -- a bad transaction option raises from inside; the handle is free afterwards
  lu.assertError(self.db.transaction, self.db, function() end, { read_preference = "anywhere" })
  lu.assertTrue(self.db:transaction(function() end))
end

-- Two transactions interleaved in this process: the other handle's
-- transaction writes the document first, so ours meets a write conflict
-- (TransientTransactionError) and fn runs again once the other committed.
function TestTransactions:test_write_conflict_from_an_operation_runs_fn_again()
  ok(self.c:insert_one({ _id = "k", v = 0 }))
  local runs, first_code = 0, nil
  local v = ok(self.db:transaction(function(s)
    runs = runs + 1
    if runs == 1 then
      local o = ok(self.other:session())
      ok(o:start_transaction())
      ok(self.other:collection("orders"):update_one({ _id = "k" }, { ["$inc"] = { v = 100 } }, { session = o }))
      local r, err, code, detail = self.c:update_one({ _id = "k" }, { ["$inc"] = { v = 1 } }, { session = s })
      first_code = code
      ok(o:commit())
      o:close()
      return pass(r, err, code, detail)
    end
    ok(self.c:update_one({ _id = "k" }, { ["$inc"] = { v = 1 } }, { session = s }))
    return runs
  end))
  lu.assertTrue(v)
  lu.assertEquals(first_code, "transient")
  lu.assertEquals(runs, 2)
  lu.assertEquals(ok(self.c:find_one({ _id = "k" })).v, 101, "each increment applied once")
end

-- The same conflict with fn ignoring the failed update: the commit fails
-- with TransientTransactionError (the server ended the transaction) and fn
-- runs again from the start.
function TestTransactions:test_transient_commit_failure_runs_fn_again()
  ok(self.c:insert_one({ _id = "k", v = 0 }))
  local runs = 0
  ok(self.db:transaction(function(s)
    runs = runs + 1
    ok(self.c:insert_one({ _id = "run" .. runs }, { session = s }))
    if runs == 1 then
      local o = ok(self.other:session())
      ok(o:start_transaction())
      ok(self.other:collection("orders"):update_one({ _id = "k" }, { ["$inc"] = { v = 100 } }, { session = o }))
      local r = self.c:update_one({ _id = "k" }, { ["$inc"] = { v = 1 } }, { session = s })
      lu.assertNil(r)
      ok(o:commit())
      o:close()
      return  -- the failure is not handed on: the commit finds it
    end
    ok(self.c:update_one({ _id = "k" }, { ["$inc"] = { v = 1 } }, { session = s }))
  end))
  lu.assertEquals(runs, 2)
  lu.assertEquals(ok(self.c:find_one({ _id = "k" })).v, 101)
  lu.assertNil(self.c:find_one({ _id = "run1" }), "the first run's insert went with its transaction")
  lu.assertNotNil(self.c:find_one({ _id = "run2" }))
end

-- fn written the idiomatic way, with assert: a second session holds a write
-- on the document, so the update fails with WriteConflict (labelled
-- TransientTransactionError) and assert raises. The session knows an
-- operation of its transaction failed that way, so fn runs again from the
-- start and commits once.
function TestTransactions:test_assert_on_a_write_conflict_runs_fn_again()
  ok(self.c:insert_one({ _id = "k", v = 0 }))
  local o = ok(self.other:session())
  ok(o:start_transaction())
  ok(self.other:collection("orders"):update_one({ _id = "k" }, { ["$inc"] = { v = 100 } }, { session = o }))
  local runs, raised_in_transaction = 0, nil
  local v, n = self.db:transaction(function(s)
    runs = runs + 1
    if runs == 2 then
      -- the holder lets go before the second run
      raised_in_transaction = s:in_transaction()
      ok(o:commit())
    end
    ok(self.c:insert_one({ _id = "run" .. runs }, { session = s }))
    assert(self.c:update_one({ _id = "k" }, { ["$inc"] = { v = 1 } }, { session = s }))
    return runs
  end)
  o:close()
  lu.assertTrue(v, tostring(n))
  lu.assertEquals(n, 2, "fn's values are the committed run's")
  lu.assertEquals(runs, 2, "fn ran again after assert raised, once")
  lu.assertTrue(raised_in_transaction)
  lu.assertEquals(ok(self.c:find_one({ _id = "k" })).v, 101, "the other's write and ours, each once")
  lu.assertNil(self.c:find_one({ _id = "run1" }), "the first run's insert went with its transaction")
  lu.assertNotNil(self.c:find_one({ _id = "run2" }))
end

-- The same raise with the write still held at the deadline: it gives up as
-- a transient failure would, the raised value kept.
function TestTransactions:test_assert_on_a_held_write_gives_up_at_the_timeout()
  ok(self.c:insert_one({ _id = "k", v = 0 }))
  local o = ok(self.other:session())
  ok(o:start_transaction())
  ok(self.other:collection("orders"):update_one({ _id = "k" }, { ["$inc"] = { v = 100 } }, { session = o }))
  local runs = 0
  local v, err, code, detail = self.db:transaction(function(s)
    runs = runs + 1
    assert(self.c:update_one({ _id = "k" }, { ["$inc"] = { v = 1 } }, { session = s }))
  end, { timeout = 1 })
  o:close()
  lu.assertNil(v)
  lu.assertEquals(code, "timeout", err)
  lu.assertStrContains(err, "fn raised")
  lu.assertEquals(detail.cause, "transient")
  lu.assertStrContains(tostring(detail.error), "update_one orders")
  lu.assertTrue(runs > 1, "fn ran again before giving up")
  lu.assertEquals(ok(self.c:find_one({ _id = "k" })).v, 0)
end

-- A Lua error that no failed operation of the transaction is behind stays
-- the code's: aborted, never run again, nothing committed.
function TestTransactions:test_unrelated_error_is_not_retried()
  ok(self.c:insert_one({ _id = "k", v = 0 }))
  local runs = 0
  local v, err, code, detail = self.db:transaction(function(s)
    runs = runs + 1
    ok(self.c:update_one({ _id = "k" }, { ["$inc"] = { v = 1 } }, { session = s }))
    ok(self.c:insert_one({ _id = "o1" }, { session = s }))
    local order = self.c:find_one({ _id = "nope" }, { session = s })
    return order.total   -- a bug in fn: order is nil
  end)
  lu.assertNil(v)
  lu.assertEquals(runs, 1, "an unrelated error is not retried")
  lu.assertEquals(code, "invalid")
  lu.assertStrContains(err, "transaction: fn raised")
  lu.assertStrContains(tostring(detail.error), "attempt to index")
  lu.assertEquals(ok(self.c:find_one({ _id = "k" })).v, 0, "nothing committed")
  lu.assertNil(self.c:find_one({ _id = "o1" }))
  -- the same session-free error after a transient failure of another
  -- transaction on another handle: still not this transaction's
  local o = ok(self.other:session())
  ok(o:start_transaction())
  ok(self.other:collection("orders"):update_one({ _id = "k" }, { ["$inc"] = { v = 100 } }, { session = o }))
  local r = self.db:collection("orders"):find_one({ _id = "k" })
  lu.assertEquals(r.v, 0)
  runs = 0
  v, err, code = self.db:transaction(function(s)
    runs = runs + 1
    ok(self.c:insert_one({ _id = "o2" }, { session = s }))
    error("not the server's")
  end)
  o:close()
  lu.assertEquals({ v, code, runs }, { nil, "invalid", 1 }, err)
  lu.assertStrContains(err, "not the server's")
  lu.assertNil(self.c:find_one({ _id = "o2" }))
end

-- The db:transaction example of docs/documents.md, as written (assert on the
-- debit), while another process holds a write on the debited account: the
-- debit meets a WriteConflict, fn runs again once the holder has committed,
-- and the transfer commits once.
local HOLDER = [[
local ms = require "mongostore"
local db = assert(ms.database(os.getenv("MONGOSTORE_TEST_URI"), { db = os.getenv("DB"), wait = 10 }))
local s = assert(db:session())
assert(s:start_transaction())
assert(db:collection("accounts"):update_one({ _id = "a" }, { ["$set"] = { held = true } }, { session = s }))
local f = assert(io.open(os.getenv("FLAG"), "w")) f:write("held") f:close()
ms.sleep(tonumber(os.getenv("HOLD")))
assert(s:commit())
print("RELEASED")
db:close()
]]

local function docs_example(page, heading)
  local f = assert(io.open(helper.root() .. "/docs/" .. page, "r"))
  local text = f:read("a")
  f:close()
  local at = assert(text:find(heading, 1, true), heading .. " not in docs/" .. page)
  return assert(text:match("```lua\n(.-)```", at), "no example after " .. heading)
end

function TestTransactions:test_docs_transfer_example_under_contention()
  local code = docs_example("documents.md", "### `db:transaction(fn, opts?)`")
  lu.assertStrContains(code, "assert(accounts:find_one_and_update(")  -- the debit raises on failure
  local accounts = self.db:collection("accounts")
  ok(accounts:insert_many({ { _id = "a", balance = 100 }, { _id = "b", balance = 0 } }))
  local flag = os.tmpname()
  os.remove(flag)
  local holder = helper.spawn(HOLDER, { DB = self.name, FLAG = flag, HOLD = "0.6" })
  for _ = 1, 1000 do
    local fh = io.open(flag, "r")
    if fh then fh:close() break end
    ms.sleep(0.01)
  end
  lu.assertNotNil(io.open(flag, "r"), "the holder never held its write")
  os.remove(flag)
  local env = setmetatable({ db = self.db, accounts = accounts }, { __index = _G })
  local chunk = assert(load(code .. "\nreturn ok, err, code", "=docs/documents.md", "t", env))
  local v, err, c = chunk()
  local out, status = holder.wait()
  lu.assertEquals(status, 0, out)
  lu.assertStrContains(out, "RELEASED")
  lu.assertEquals({ v, c }, { true, nil }, tostring(err))
  local a, b = ok(accounts:find_one({ _id = "a" })), ok(accounts:find_one({ _id = "b" }))
  lu.assertEquals({ a.balance, b.balance, a.held }, { 90, 10, true }, "the transfer and the holder's write, once each")
end

local WORKER = [[
local ms = require "mongostore"
local db = assert(ms.database(os.getenv("MONGOSTORE_TEST_URI"), { db = os.getenv("DB"), wait = 10 }))
local c, log = db:collection("orders"), db:collection("lines")
local start_at, me, each = tonumber(os.getenv("START")), os.getenv("ME"), tonumber(os.getenv("EACH"))
while ms.now() < start_at do ms.sleep(0.005) end
local runs = 0
local function pass(r, err, code, detail)
  if r == nil then return nil, err, code, detail end
  return r
end
for i = 1, each do
  local ok, err, code = db:transaction(function(s)
    runs = runs + 1
    -- read, then write what was read: without isolation and retries two
    -- processes lose each other's increments
    local doc, err1, code1, d1 = c:find_one({ _id = "counter" }, { session = s })
    if not doc then return nil, err1 or "no counter", code1, d1 end
    local r, err2, code2, d2 = c:update_one({ _id = "counter" }, { ["$set"] = { n = doc.n + 1 } }, { session = s })
    if not r then return nil, err2, code2, d2 end
    return pass(log:insert_one({ who = me, i = i, saw = doc.n }, { session = s }))
  end, { timeout = 120 })
  if not ok then print("ERROR " .. tostring(err) .. " " .. tostring(code)) os.exit(1) end
end
print(string.format("DONE %s %d", me, runs))
db:close()
]]

-- Two processes each run read-modify-write transactions on one counter:
-- every increment lands exactly once, whatever conflicts they met.
function TestTransactions:test_concurrent_processes_never_lose_an_increment()
  ok(self.c:insert_one({ _id = "counter", n = 0 }))
  local start_at = ms.now() + 1.5
  local procs = {}
  for p = 1, PROCS do
    procs[p] = helper.spawn(WORKER, { DB = self.name, ME = "p" .. p, EACH = tostring(EACH),
                                      START = string.format("%.6f", start_at) })
  end
  local runs = 0
  for p = 1, PROCS do
    local out, status = procs[p].wait()
    lu.assertEquals(status, 0, "worker p" .. p .. " failed:\n" .. out)
    local me, n = out:match("DONE (%S+) (%d+)")
    lu.assertEquals(me, "p" .. p, out)
    runs = runs + tonumber(n)
  end
  lu.assertEquals(ok(self.c:find_one({ _id = "counter" })).n, PROCS * EACH)
  local lines = ok(self.db:collection("lines"):find({ who = { ["$exists"] = true } }):all())
  lu.assertEquals(#lines, PROCS * EACH)
  local saw = {}
  for _, l in ipairs(lines) do
    lu.assertNil(saw[l.saw], "two transactions read the same counter value " .. tostring(l.saw))
    saw[l.saw] = true
  end
  print(string.format("   (%d transactions, fn ran %d times)", PROCS * EACH, runs))
end

function TestTransactions:test_duplicate_key_aborts_the_whole_transaction()
  ok(self.db:collection("users"):create_index({ email = 1 }, { unique = true }))
  ok(self.db:collection("users"):insert_one({ _id = "u0", email = "a@example.org" }))
  local runs = 0
  local v, err, code = self.db:transaction(function(s)
    runs = runs + 1
    ok(self.c:insert_one({ _id = "o1", user = "u1" }, { session = s }))
    ok(self.db:collection("users"):insert_one({ _id = "u1", email = "b@example.org" }, { session = s }))
    return pass(self.db:collection("users"):insert_one({ _id = "u2", email = "a@example.org" }, { session = s }))
  end)
  lu.assertNil(v)
  lu.assertEquals(code, "duplicate")
  lu.assertStrContains(err, "a@example.org")
  lu.assertEquals(runs, 1)
  lu.assertNil(self.c:find_one({ _id = "o1" }))
  lu.assertNil(self.db:collection("users"):find_one({ _id = "u1" }))
  lu.assertEquals(rawdb.count(self.name, "users"), 1)
  lu.assertEquals(rawdb.count(self.name, "orders"), 1)
end

-- A document held by another open transaction conflicts on every run:
-- db:transaction gives up once opts.timeout has passed.
function TestTransactions:test_timeout_ends_the_retries()
  ok(self.c:insert_one({ _id = "k", v = 0 }))
  local o = ok(self.other:session())
  ok(o:start_transaction())
  ok(self.other:collection("orders"):update_one({ _id = "k" }, { ["$inc"] = { v = 100 } }, { session = o }))
  local runs = 0
  local v, err, code, detail = self.db:transaction(function(s)
    runs = runs + 1
    return pass(self.c:update_one({ _id = "k" }, { ["$inc"] = { v = 1 } }, { session = s }))
  end, { timeout = 1 })
  o:close()
  lu.assertNil(v)
  lu.assertEquals(code, "timeout")
  lu.assertStrContains(err, "gave up after 1 s")
  lu.assertEquals(detail.cause, "transient")
  lu.assertEquals(detail.server_code, 112, "WriteConflict")
  lu.assertTrue(runs > 1, "fn ran again before giving up")
  lu.assertEquals(ok(self.c:find_one({ _id = "k" })).v, 0)
  print(string.format("   (gave up after %d runs)", runs))
end

function TestTransactions:test_nested_transaction_refused()
  local inner_ran, res = false, nil
  ok(self.db:transaction(function(s)
    ok(self.c:insert_one({ _id = "outer" }, { session = s }))
    res = table.pack(self.db:transaction(function() inner_ran = true end))
    -- another handle is another client: its own transaction may run
    ok(self.other:transaction(function(s2)
      ok(self.other:collection("orders"):insert_one({ _id = "beside" }, { session = s2 }))
    end))
  end))
  lu.assertFalse(inner_ran)
  lu.assertNil(res[1])
  lu.assertEquals(res[3], "invalid")
  lu.assertStrContains(res[2], "already running on this database handle")
  lu.assertNotNil(self.c:find_one({ _id = "outer" }))
  lu.assertNotNil(self.c:find_one({ _id = "beside" }))
  -- the handle is free again once the outer one ended, also after an error
  lu.assertNil(self.db:transaction(function() error("x") end))
  lu.assertTrue(self.db:transaction(function() end))
end

function TestTransactions:test_session_of_another_handle_refused()
  local foreign = ok(self.other:session())
  local v, err, code = self.c:insert_one({ _id = "x" }, { session = foreign })
  lu.assertNil(v)
  lu.assertEquals(code, "invalid")
  lu.assertStrContains(err, "another database handle")
  ok(foreign:start_transaction())
  v, err, code = self.c:find_one({ _id = "seed" }, { session = foreign })
  lu.assertNil(v, err)
  lu.assertEquals(code, "invalid")
  foreign:close()
  -- a userdata that is not a session is refused; any other type raises (session_spec)
  v, err, code = self.c:insert_one({ _id = "y" }, { session = self.other })
  lu.assertNil(v, err)
  lu.assertEquals(code, "invalid")
  lu.assertEquals(rawdb.count(self.name, "orders"), 1)
end

function TestTransactions:test_closed_sessions()
  local s = ok(self.db:session())
  lu.assertTrue(s:close())
  lu.assertTrue(s:close(), "closing twice is harmless")
  lu.assertFalse(s:in_transaction())
  local v, err, code = s:start_transaction()
  lu.assertNil(v)
  lu.assertEquals(code, "closed", err)
  v, err, code = s:commit()
  lu.assertEquals({ v, code }, { nil, "closed" }, err)
  v, err, code = self.c:insert_one({ _id = "x" }, { session = s })
  lu.assertEquals({ v, code }, { nil, "invalid" }, err)

  -- the session db:transaction hands to fn ends with it
  local kept
  ok(self.db:transaction(function(s2) kept = s2 end))
  v, err, code = self.c:insert_one({ _id = "y" }, { session = kept })
  lu.assertEquals({ v, code }, { nil, "invalid" }, err)

  -- closing the database ends its sessions and aborts what they left open
  local db2 = open(self.name)
  local s3 = ok(db2:session())
  ok(s3:start_transaction())
  ok(db2:collection("orders"):insert_one({ _id = "z" }, { session = s3 }))
  db2:close()
  lu.assertFalse(s3:in_transaction())
  v, err, code = s3:start_transaction()
  lu.assertEquals({ v, code }, { nil, "closed" }, err)
  s3:close()
  lu.assertEquals(rawdb.count(self.name, "orders"), 1)

  -- a to-be-closed session ends (its transaction aborted) when its block does
  local leaked
  do
    local s4 <close> = ok(self.db:session())
    ok(s4:start_transaction())
    ok(self.c:insert_one({ _id = "w" }, { session = s4 }))
    leaked = s4
  end
  lu.assertFalse(leaked:in_transaction())
  v, err, code = leaked:commit()
  lu.assertEquals({ v, code }, { nil, "closed" }, err)
  lu.assertNil(self.c:find_one({ _id = "w" }))
end

-- Sessions dropped without close are ended by the collector, open
-- transactions aborted.
function TestTransactions:test_collected_sessions_end()
  for i = 1, 20 do
    local s = ok(self.db:session())
    ok(s:start_transaction())
    ok(self.c:insert_one({ _id = "gc" .. i }, { session = s }))
  end
  collectgarbage()
  collectgarbage()
  lu.assertEquals(rawdb.count(self.name, "orders"), 1)
  lu.assertTrue(self.db:transaction(function(s) ok(self.c:insert_one({ _id = "after" }, { session = s })) end))
  lu.assertEquals(rawdb.count(self.name, "orders"), 2)
end

-- The replies to commitTransaction are lost (tools/fault-proxy): the commit
-- reached the server, the client cannot know. libmongoc tries it once more
-- itself, then reports UnknownTransactionCommitResult; db:transaction sends
-- the commit again (never fn) until an answer comes or the timeout passes.
local function through_lost_commits(self, lost, timeout)
  local proxy = faults.start_proxy(helper.uri())
  local pdb = ok(ms.database(proxy.uri(), { db = self.name, wait = 10 }))
  ok(self.c:insert_one({ _id = "k", v = 0 }))
  local runs = 0
  local res = table.pack(pdb:transaction(function(s)
    runs = runs + 1
    ok(pdb:collection("orders"):update_one({ _id = "k" }, { ["$inc"] = { v = 1 } }, { session = s }))
    proxy.bump("lose_next", lost, { target = "committransaction" })
    return "placed"
  end, { timeout = timeout }))
  pdb:close()
  proxy.stop()
  return res, runs, proxy.final_stats
end

function TestTransactions:test_unknown_commit_result_retries_only_the_commit()
  local res, runs, stats = through_lost_commits(self, 2, 30)
  lu.assertEquals({ res[1], res[2] }, { true, "placed" }, tostring(res[2]))
  lu.assertEquals(runs, 1, "fn ran again: only the commit may be")
  lu.assertEquals(stats.replies_lost, 2)
  lu.assertEquals(ok(self.c:find_one({ _id = "k" })).v, 1, "the increment applied once")
end

function TestTransactions:test_unknown_commit_result_until_the_timeout()
  local res, runs = through_lost_commits(self, 100000, 1)
  lu.assertNil(res[1])
  lu.assertEquals(res[3], "timeout", res[2])
  lu.assertStrContains(res[2], "outcome is unknown")
  lu.assertEquals(res[4].cause, "network")
  local labels = {}
  for _, l in ipairs(res[4].labels) do labels[l] = true end
  lu.assertTrue(labels.UnknownTransactionCommitResult, table.concat(res[4].labels, ","))
  lu.assertEquals(runs, 1)
  -- the first commit reached the server: unknown to the caller, applied
  lu.assertEquals(ok(self.c:find_one({ _id = "k" })).v, 1)
end

-- A cursor reads its later batches through the session it was made with:
-- closing (or collecting) the session first leaves the cursor working.
function TestTransactions:test_cursor_outlives_its_session()
  for i = 1, 9 do ok(self.c:insert_one({ _id = "d" .. i, i = i })) end
  local s = ok(self.db:session())
  local cur = ok(self.c:find({ i = { ["$gte"] = 1 } }, { session = s, batch_size = 2, sort = { i = 1 } }))
  lu.assertEquals(ok(cur:next()).i, 1)
  s:close()
  local rest = ok(cur:all())
  lu.assertEquals(#rest, 8)
  lu.assertEquals(rest[8].i, 9)

  local cur2
  do
    local s2 = ok(self.db:session())
    cur2 = ok(self.c:find({ i = { ["$gte"] = 1 } }, { session = s2, batch_size = 2 }))
  end
  collectgarbage()
  collectgarbage()
  lu.assertEquals(#ok(cur2:all()), 9)
  -- the sessions left behind for the cursors end with the next one, or the database
  ok(self.db:session()):close()
  lu.assertTrue(self.db:transaction(function() end))
end
