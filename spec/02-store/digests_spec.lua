-- spec/02-store/digests_spec.lua - the dedupe digests live with the
-- Execution: what a load then a commit costs in commands (store:stats), an
-- execution rebuilt from its plain fields (the OpenResty path, through JSON)
-- commits with no extra find and still refuses a duplicate, fields of an
-- older version fall back to one find, and the thread side of mongostore.ngx
-- (mongostore.ngx_thread, called here as nginx would call it) does the same.
local lu = require "luaunit"
local ms = require "mongostore"
local core = require "mongostore.core"
local execution = require "mongostore.execution"
local helper = require "helpers"
local raw = require "helpers.rawdb"

TestDigests = {}

function TestDigests:setUp()
  self.store, self.db = helper.connect()
end

function TestDigests:tearDown()
  if self.store then self.store:close() end
end

-- The commands a function sends, by name, from the pool's counts.
function TestDigests:cost(fn)
  local before = self.store:stats()
  local r = table.pack(fn())
  local after = self.store:stats()
  local d = {}
  for k, v in pairs(after) do
    if type(v) == "number" and k ~= "reply_bytes" and v ~= (before[k] or 0) then d[k] = v - (before[k] or 0) end
  end
  return d, table.unpack(r, 1, r.n)
end

-- Fields through JSON text and back, as they cross a thread boundary.
local function through_json(fields)
  return assert(core.json_decode(assert(core.json_encode(fields))))
end

-- The digests a document holds, read behind the library's back.
function TestDigests:stored_digests(id)
  local dd = raw.doc(self.db, id).dedupe
  return dd and dd.binary or ""
end

-- An execution at version 2 whose digests know evt-1.
function TestDigests:marked(id)
  assert(self.store:save(ms.execution{ definition_id = "dd", id = id }))
  local exe = assert(self.store:load(id))
  assert(self.store:commit(exe, { processed_event_id = "evt-1" }))
  return exe
end

function TestDigests:test_a_load_then_a_commit_is_one_find_and_one_update()
  self:marked("a-1")
  local cost, exe = self:cost(function() return self.store:load("a-1") end)
  lu.assertEquals(cost, { find = 1, total = 1 })
  cost = self:cost(function() return assert(self.store:commit(exe, { processed_event_id = "evt-2" })) end)
  lu.assertEquals(cost, { update = 1, total = 1 })
  -- load_for_event: one aggregate (the execution and whether the event is
  -- marked), and the commit after it one update
  local seen
  cost, exe, seen = self:cost(function() return self.store:load_for_event("a-1", "evt-3") end)
  lu.assertEquals(cost, { aggregate = 1, total = 1 })
  lu.assertFalse(seen)
  cost = self:cost(function() return assert(self.store:commit(exe, { processed_event_id = "evt-3" })) end)
  lu.assertEquals(cost, { update = 1, total = 1 })
  -- a redelivery is refused from the digests the execution carries: nothing is sent
  local ok, msg, code, found
  cost, ok, msg, code, found = self:cost(function() return self.store:commit(exe, { processed_event_id = "evt-2" }) end)
  lu.assertEquals(cost, {})
  lu.assertNil(ok)
  lu.assertEquals(code, "duplicate")
  lu.assertStrContains(msg, "evt-2")
  lu.assertEquals(found.found, exe.version)
  lu.assertEquals(#self:stored_digests("a-1"), 3 * 8)
end

function TestDigests:test_the_plain_fields_carry_the_stored_digests_as_hex()
  local exe = self:marked("p-1")
  local fields = execution.fields(exe)
  local at, hex = fields.dedupe:match("^(%d+):(%x*)$")
  lu.assertEquals(tonumber(at), exe.version)
  lu.assertEquals(execution.from_hex(hex), self:stored_digests("p-1"))
  lu.assertEquals(#hex, 16)
  -- pairs and the JSON form leave the digests out: they are no harel field
  for k in pairs(exe) do lu.assertNotEquals(k, "dedupe") end
  lu.assertNil(core.json_decode(assert(execution.to_json(exe))).dedupe)
  lu.assertNil(raw.doc(self.db, "p-1").data:find("dedupe", 1, true))
  -- a new execution has no digests yet, and its fields say nothing of them
  lu.assertNil(execution.fields(ms.execution{ definition_id = "dd" }).dedupe)
end

function TestDigests:test_a_rebuilt_execution_commits_without_a_find_and_refuses_a_duplicate()
  local exe = self:marked("r-1")
  local back = execution.from_fields(through_json(execution.fields(exe)))
  lu.assertTrue(ms.is_execution(back))
  lu.assertEquals(back.version, exe.version)
  local cost = self:cost(function() return assert(self.store:commit(back, { processed_event_id = "evt-2" })) end)
  lu.assertEquals(cost, { update = 1, total = 1 }, "no find: the digests came with the fields")
  lu.assertEquals(#self:stored_digests("r-1"), 2 * 8, "the list grew by one: nothing was lost")
  -- again from the fields after that commit: both events are known
  local again = execution.from_fields(through_json(execution.fields(back)))
  for _, ev in ipairs { "evt-1", "evt-2" } do
    local ok, code, found
    cost, ok, _, code, found = self:cost(function() return self.store:commit(again, { processed_event_id = ev }) end)
    lu.assertEquals(cost, {}, ev .. " refused before anything is sent")
    lu.assertNil(ok)
    lu.assertEquals(code, "duplicate")
    lu.assertEquals(found.found, again.version)
  end
  lu.assertTrue(self.store:commit(again, { processed_event_id = "evt-3" }))
  lu.assertTrue(self.store:is_processed("r-1", "evt-1"))
  lu.assertTrue(self.store:is_processed("r-1", "evt-3"))
end

function TestDigests:test_fields_of_another_version_fetch_the_digests_once()
  -- a handler moves version on by hand after a commit, keeping the old
  -- digests: they are dropped, and the commit reads the true ones first
  local exe = self:marked("v-1")
  local fields = through_json(execution.fields(exe))
  lu.assertTrue(self.store:commit(execution.from_fields(fields), { processed_event_id = "evt-2" }))
  fields.version = fields.version + 1
  fields.context = { moved = true }
  local stale = execution.from_fields(fields)
  lu.assertNil(execution.digests(stale))
  local cost = self:cost(function() return assert(self.store:commit(stale, { processed_event_id = "evt-3" })) end)
  lu.assertEquals(cost, { find = 1, update = 1, total = 2 })
  lu.assertEquals(#self:stored_digests("v-1"), 3 * 8)
  lu.assertTrue(self.store:is_processed("v-1", "evt-2"))
  local ok, _, code = self.store:commit(execution.from_fields(through_json(execution.fields(stale))),
                                        { processed_event_id = "evt-2" })
  lu.assertNil(ok)
  lu.assertEquals(code, "duplicate")
  -- fields without any digests (built by hand) take the same way
  fields = through_json(execution.fields(stale))
  fields.dedupe = nil
  local rebuilt = execution.from_fields(fields)
  cost = self:cost(function() return assert(self.store:commit(rebuilt, { processed_event_id = "evt-4" })) end)
  lu.assertEquals(cost, { find = 1, update = 1, total = 2 })
  lu.assertEquals(#self:stored_digests("v-1"), 4 * 8)
end

function TestDigests:test_from_fields_refuses_bad_plain_fields()
  local fields = execution.fields(self:marked("b-1"))
  local function with(k, v)
    local t = {}
    for a, b in pairs(fields) do t[a] = b end
    t[k] = v
    return t
  end
  lu.assertErrorMsgContains("dedupe must be", execution.from_fields, with("dedupe", "zz"))
  lu.assertErrorMsgContains("dedupe must be", execution.from_fields, with("dedupe", "2:abc"))
  lu.assertErrorMsgContains("dedupe must be", execution.from_fields, with("dedupe", "2:0011"))
  lu.assertErrorMsgContains("dedupe must be a string", execution.from_fields, with("dedupe", 5))
  lu.assertErrorMsgContains("version must be an integer >= 0", execution.from_fields, with("version", -1))
  lu.assertErrorMsgContains("version must be an integer >= 0", execution.from_fields, with("version", 1.5))
  lu.assertErrorMsgContains("no field 'bogus'", execution.from_fields, with("bogus", 1))
  lu.assertErrorMsgContains("expected a table", execution.from_fields, "b-1")
end

------------------------------------------------------------------------
-- The thread side of mongostore.ngx: arguments and answers as JSON text

-- The arguments as mongostore.ngx encodes them: { n, v = [...] }, nil as null.
local function args(...)
  local n = select("#", ...)
  local v = { ... }
  for i = 1, n do if v[i] == nil then v[i] = core.null end end
  return assert(core.json_encode({ n = n, v = core.array(v) }))
end

local function answer(text)
  local out = assert(core.json_decode(text))
  local v = out.v
  for i = 1, #v do if v[i] == core.null then v[i] = nil end end
  return table.unpack(v, 1, #v)
end

function TestDigests:test_the_thread_side_commits_loaded_fields_without_a_find()
  local thread = require "mongostore.ngx_thread"
  self:marked("t-1")
  local cfg = { uri = helper.uri(), db = self.db, wait = 10 }
  -- the thread's store shares this process's pool (same URI): its commands count here
  local fields = answer(thread.store(cfg, "load", args("t-1")))
  lu.assertEquals(fields.id, "t-1")
  lu.assertStrMatches(fields.dedupe, "^2:%x+$")
  local cost, ok, version = self:cost(function()
    return answer(thread.store(cfg, "commit", args(fields, { processed_event_id = "evt-2" })))
  end)
  lu.assertTrue(ok)
  lu.assertEquals(version, 3)
  lu.assertEquals(cost, { update = 1, total = 1 })
  -- the same fields again: the event they carry is refused from the digests
  local msg, code
  cost, ok, msg, code = self:cost(function()
    return answer(thread.store(cfg, "commit", args(fields, { processed_event_id = "evt-1" })))
  end)
  lu.assertNil(ok)
  lu.assertEquals(code, "duplicate")
  lu.assertStrContains(msg, "evt-1")
  lu.assertEquals(cost, {})
  -- save crosses the same way
  fields = answer(thread.store(cfg, "load", args("t-1")))
  fields.status = "DONE"
  ok, version = answer(thread.store(cfg, "save", args(fields)))
  lu.assertTrue(ok)
  lu.assertEquals(version, 4)
  lu.assertEquals(self.store:load("t-1").status, "DONE")
end

function TestDigests:test_the_thread_side_refuses_a_call_that_is_not_forwarded()
  local thread = require "mongostore.ngx_thread"
  local cfg = { uri = helper.uri(), db = self.db, wait = 10 }
  for _, method in ipairs { "close", "_commit", "_load", "nonesuch" } do
    local ok, msg, code = answer(thread.store(cfg, method, args()))
    lu.assertNil(ok, method)
    lu.assertEquals(code, "invalid", method)
    lu.assertStrContains(msg, "no store method", method)
  end
  -- the thread's store is still open
  local info = answer(thread.store(cfg, "info", args()))
  lu.assertEquals(info.db, self.db)
end
