-- spec/02-store/interop_spec.lua - interoperation with harel's own Python
-- MongoStore (PyPI harel 0.9.0, driven by tools/harel_interop.py) on the same
-- server: each side reads what the other committed, context intact.
local lu = require "luaunit"
local ms = require "mongostore"
local core = require "mongostore.core"
local helper = require "helpers"

local BIG = 9007199254740993                    -- 2^53 + 1: not representable as a double
local DEFERRED_AT = 1764504000.5                 -- 2025-11-30T12:00:00.5Z
local A = ms.array

------------------------------------------------------------------------
-- Running harel

local python = helper.python

-- Runs one harel_interop.py command and returns its output, decoded.
local function harel(cmd, db, ...)
  local args = { python(), helper.root() .. "/tools/harel_interop.py", cmd, helper.uri(), db, ... }
  for i, a in ipairs(args) do args[i] = helper.shell_quote(a) end
  local tmp = os.tmpname()
  local f = assert(io.popen(table.concat(args, " ") .. " 2>" .. tmp, "r"))
  local out = f:read("a")
  local ok, _, status = f:close()
  local ef = io.open(tmp, "r")
  local err = ef and ef:read("a") or ""
  if ef then ef:close() end
  os.remove(tmp)
  if not ok then error(string.format("harel %s failed (exit %s):\n%s", cmd, tostring(status), err), 2) end
  local v, derr = core.json_decode(out)
  if v == nil then error("harel " .. cmd .. " printed no JSON: " .. tostring(derr) .. "\n" .. out, 2) end
  return v
end

------------------------------------------------------------------------
-- Comparing values exactly: integers stay integers, floats floats, arrays
-- arrays (marked), objects objects, nulls ms.null.

local function kind(v)
  if type(v) == "number" then return math.type(v) end
  if type(v) == "table" and v ~= ms.null then return ms.is_array(v) and "array" or "object" end
  if v == ms.null then return "null" end
  return type(v)
end

-- nil when a and b are the same value, else where and how they differ.
local function diff(a, b, path)
  path = path or "$"
  local ka, kb = kind(a), kind(b)
  if ka ~= kb then return string.format("%s: %s %s vs %s %s", path, ka, tostring(a), kb, tostring(b)) end
  if ka == "array" or ka == "object" then
    for k, v in pairs(a) do
      local d = diff(v, b[k], path .. "." .. tostring(k))
      if d then return d end
    end
    for k in pairs(b) do
      if a[k] == nil then return string.format("%s.%s: missing on the left", path, tostring(k)) end
    end
    return nil
  end
  if a ~= b then return string.format("%s: %q vs %q", path, tostring(a), tostring(b)) end
  return nil
end

local function assert_same(actual, expected, what)
  local d = diff(actual, expected)
  if d then lu.fail((what or "value") .. " differs at " .. d) end
end

local function copy(v)
  if type(v) ~= "table" or v == ms.null then return v end
  local t = {}
  for k, x in pairs(v) do t[k] = copy(x) end
  return ms.is_array(v) and A(t) or t
end

------------------------------------------------------------------------
-- What each side commits

-- Every array is marked, so the expected value has the shape a decoder gives.
local function lua_context()
  return {
    text = "plain",
    empty_string = "",
    unicode = "h\u{e9}llo \u{2014} \u{65e5}\u{672c}\u{8a9e} \u{1f389} \u{10ffff}",
    escapes = "quote\" backslash\\ slash/ newline\n tab\t cr\r bell\7 unit\31",
    nul_inside = "a\0b",
    numeric_text = "007",
    yes = true,
    no = false,
    nothing = ms.null,
    int_small = 42,
    int_negative = -7,
    int_zero = 0,
    int_big = BIG,
    int_big_negative = -BIG,
    int_max = math.maxinteger,
    int_min = math.mininteger,
    float_tenth = 0.1,
    float_negative = -2.5,
    float_integral = 1.0,
    float_huge = 1e300,
    float_tiny = 5e-324,
    float_beyond_int64 = 2.0 ^ 63,
    nested = { a = { b = { c = { d = { e = "deep" } } } } },
    list = A { 1, "two", 3.5, true, ms.null, { k = "v" }, A { 9 } },
    empty_array = A {},
    empty_object = {},
    nested_empty = { inner_array = A {}, inner_object = {} },
    array_of_empties = A { A {}, {} },
    ["dotted.key"] = 1,
    ["$dollar"] = 2,
    ["1"] = "string key that looks like an index",
    ["k\u{e9}y"] = "unicode key",
  }
end

-- What tools/harel_interop.py's `write` commits, as Lua values.
local function harel_context()
  return {
    text = "plain",
    unicode = "h\u{e9}llo \u{2014} \u{65e5}\u{672c}\u{8a9e} \u{1f389}",
    escapes = "quote\" backslash\\ newline\n tab\t nul\0",
    nested = { a = { b = { c = A { 1, 2, { d = "deep" } } } } },
    list = A { 1, "two", 3.5, true, ms.null, { k = "v" }, A { 9 } },
    empty_list = A {},
    empty_dict = {},
    nothing = ms.null,
    yes = true,
    no = false,
    big = BIG,
    big_negative = -BIG,
    int64_max = math.maxinteger,
    float = 0.1,
    float_negative = -2.5,
    float_integral = 1.0,
    float_huge = 1e300,
    ["dotted.key"] = 1,
    ["$dollar"] = 2,
  }
end

local function connect(db)
  local store, err, code = ms.connect(helper.uri(), { db = db, prefix = "harel", wait = 10 })
  assert(store, "connect failed: " .. tostring(err) .. " (" .. tostring(code) .. ")")
  return store
end

------------------------------------------------------------------------

TestInteropLuaToHarel = {}

function TestInteropLuaToHarel:setUp()
  self.db = helper.fresh_db("interop")
  self.store = connect(self.db)
  local exe = ms.execution { definition_id = "invoice", context = lua_context() }
  exe.definition_fqn = "billing.invoice"
  exe.status = "RUNNING"
  exe.active_path = "Invoice.Open.Wait"
  exe.history = { Invoice = "Invoice.Open", ["Invoice.Open"] = "Invoice.Open.Wait" }
  exe.processed_events = 5
  exe.priority = 3
  exe.deferred = A { { id = "evt-deferred", kind = "Reminder", created_time = DEFERRED_AT,
                       data = { n = 1, big = BIG, tags = A { "x" } } } }
  exe.children = { ["c-1"] = { root_path = "Invoice.Fork.A", finished = true, outcome = "paid",
                               result = { total = 12.5 }, submachine = false, key = "A" } }
  exe.invoke_seq = { ["Invoice.Fork"] = 2 }
  exe.created_at = 1764504000.25
  exe.updated_at = 1764504001.75
  local ok, err, code = self.store:commit(exe, {
    emits = {
      { target_id = "target-9", event = { id = "evt-out", kind = "Go", created_time = DEFERRED_AT,
                                          data = { big = BIG, list = A { 1, "x" }, empty = A {} } } },
      { event = { id = "evt-broadcast", kind = "Broadcast", data = {} } },
    },
    processed_event_id = "evt-in",
    timers = { { action = "schedule", path = "Invoice.Open.Wait", fire_at = 1764504100.5 } },
    spawns = { { child_id = "c-2", root_path = "Invoice.Fork.B", context = { seed = 7, tags = A { "a" } } } },
    trace = { event = "Go", from = "A", to = "B" },
  })
  lu.assertTrue(ok, tostring(err) .. " (" .. tostring(code) .. ")")
  self.exe = exe
end

function TestInteropLuaToHarel:tearDown()
  if self.store then self.store:close() end
end

function TestInteropLuaToHarel:test_harel_loads_every_field()
  local got = harel("read", self.db, self.exe.id)
  lu.assertEquals(got.id, self.exe.id)
  lu.assertEquals(got.definition_id, "invoice")
  lu.assertEquals(got.definition_fqn, "billing.invoice")
  lu.assertEquals(got.root_path, "")
  lu.assertEquals(got.status, "RUNNING")
  lu.assertEquals(got.outcome, ms.null)
  lu.assertEquals(got.error, ms.null)
  lu.assertEquals(got.active_path, "Invoice.Open.Wait")
  assert_same(got.history, { Invoice = "Invoice.Open", ["Invoice.Open"] = "Invoice.Open.Wait" }, "history")
  lu.assertEquals(got.processed_events, 5)
  lu.assertEquals(got.version, 1)
  lu.assertEquals(got.priority, 3)
  lu.assertEquals(got.parent_id, ms.null)
  lu.assertEquals(got.child_id, ms.null)
  assert_same(got.invoke_seq, { ["Invoice.Fork"] = 2 }, "invoke_seq")
  lu.assertEquals(got.created_at, 1764504000.25)
  lu.assertEquals(got.updated_at, 1764504001.75)
  lu.assertEquals(got.finished_at, ms.null)

  lu.assertEquals(#got.deferred, 1)
  local ev = got.deferred[1]
  lu.assertEquals(ev.id, "evt-deferred")
  lu.assertEquals(ev.kind, "Reminder")
  lu.assertEquals(core.iso_to_time(ev.created_time), DEFERRED_AT)
  lu.assertEquals(ev.received_time, ms.null)
  assert_same(ev.data, { n = 1, big = BIG, tags = A { "x" } }, "deferred[1].data")

  assert_same(got.children, { ["c-1"] = { root_path = "Invoice.Fork.A", finished = true, outcome = "paid",
                                          result = { total = 12.5 }, submachine = false, key = "A" } },
              "children")
end

function TestInteropLuaToHarel:test_harel_loads_the_context_exactly()
  local got = harel("read", self.db, self.exe.id)
  assert_same(got.context, lua_context(), "context")
end

function TestInteropLuaToHarel:test_harel_lists_it()
  local page = harel("list", self.db, "invoice")
  lu.assertEquals(#page.items, 1)
  local s = page.items[1]
  lu.assertEquals(s.id, self.exe.id)
  lu.assertEquals(s.definition_id, "invoice")
  lu.assertEquals(s.status, "RUNNING")
  lu.assertEquals(s.active_path, "Invoice.Open.Wait")
  lu.assertEquals(s.parent_id, ms.null)
  lu.assertEquals(s.version, 1)
  lu.assertEquals(page.next_cursor, ms.null)
  lu.assertEquals(#harel("list", self.db, "order").items, 0)
end

-- One part of harel's `pending` output; fails the test when harel could not read it.
local function pending(db, id, part)
  local v = harel("pending", db, id)[part]
  if type(v) == "table" and not ms.is_array(v) and v.error then
    lu.fail("harel's reading of " .. part .. " failed: " .. tostring(v.error))
  end
  return v
end

function TestInteropLuaToHarel:test_harel_reads_the_outbox()
  local outbox = pending(self.db, self.exe.id, "outbox")
  lu.assertEquals(#outbox, 2)
  local first, second = outbox[1], outbox[2]
  lu.assertTrue(first.seq < second.seq, "outbox in commit order")
  lu.assertEquals(first.target_id, "target-9")
  lu.assertEquals(first.event.id, "evt-out")
  lu.assertEquals(first.event.kind, "Go")
  lu.assertEquals(core.iso_to_time(first.event.created_time), DEFERRED_AT)
  lu.assertEquals(first.event.received_time, ms.null)
  assert_same(first.event.data, { big = BIG, list = A { 1, "x" }, empty = A {} }, "outbox[1].event.data")
  lu.assertEquals(second.target_id, ms.null)
  lu.assertEquals(second.event.id, "evt-broadcast")
  lu.assertEquals(second.event.kind, "Broadcast")
  assert_same(second.event.data, {}, "outbox[2].event.data")
end

function TestInteropLuaToHarel:test_harel_reads_the_spawns()
  local spawns = pending(self.db, self.exe.id, "spawns")
  lu.assertEquals(#spawns, 1)
  local sp = spawns[1]
  lu.assertEquals(math.type(sp.seq), "integer")
  lu.assertEquals(sp.parent_id, self.exe.id)
  lu.assertEquals(sp.child_id, "c-2")
  lu.assertEquals(sp.root_path, "Invoice.Fork.B")
  assert_same(sp.context, { seed = 7, tags = A { "a" } }, "spawn context")
end

function TestInteropLuaToHarel:test_harel_reads_the_timers()
  assert_same(pending(self.db, self.exe.id, "timers"),
              A { A { self.exe.id, "Invoice.Open.Wait", 1764504100.5 } }, "due timers")
end

function TestInteropLuaToHarel:test_harel_reads_the_trace()
  assert_same(pending(self.db, self.exe.id, "trace"),
              A { { event = "Go", from = "A", to = "B", index = 0 } }, "trace")
end

------------------------------------------------------------------------

TestInteropHarelToLua = {}

function TestInteropHarelToLua:setUp()
  self.db = helper.fresh_db("interop")
  self.id = "h-" .. ms.uuid()
  self.written = harel("write", self.db, self.id)
  self.store = connect(self.db)
end

function TestInteropHarelToLua:tearDown()
  if self.store then self.store:close() end
end

function TestInteropHarelToLua:test_harel_wrote_what_the_spec_expects()
  assert_same(self.written.context, harel_context(), "harel's own JSON")
end

function TestInteropHarelToLua:test_mongostore_loads_every_field()
  local exe, err, code = self.store:load(self.id)
  lu.assertNotNil(exe, tostring(err) .. " (" .. tostring(code) .. ")")
  lu.assertEquals(exe.id, self.id)
  lu.assertEquals(exe.definition_id, "order")
  lu.assertEquals(exe.definition_fqn, "shop.order")
  lu.assertEquals(exe.root_path, "")
  lu.assertEquals(exe.version, 1)
  lu.assertEquals(exe.status, "RUNNING")
  lu.assertNil(exe.outcome)
  lu.assertNil(exe.error)
  lu.assertEquals(exe.active_path, "Order.Processing.Waiting")
  assert_same(exe.history, { Order = "Order.Processing", ["Order.Processing"] = "Order.Processing.Waiting" },
              "history")
  lu.assertEquals(exe.processed_events, 3)
  lu.assertEquals(exe.priority, 2)
  lu.assertNil(exe.parent_id)
  lu.assertNil(exe.child_id)
  assert_same(exe.invoke_seq, { ["Order.Fork"] = 1 }, "invoke_seq")
  lu.assertEquals(exe.created_at, 1764504000.25)
  lu.assertEquals(exe.updated_at, 1764504001.75)
  lu.assertNil(exe.finished_at)
  lu.assertNil(exe.expires_at)

  lu.assertEquals(#exe.deferred, 1)
  local ev = exe.deferred[1]
  lu.assertEquals(ev.id, "evt-deferred")
  lu.assertEquals(ev.kind, "Payment")
  lu.assertEquals(ev.created_time, DEFERRED_AT)
  lu.assertNil(ev.received_time)
  assert_same(ev.data, { amount = 12.5, currency = "EUR" }, "deferred[1].data")

  local ch = exe.children["child-1"]
  lu.assertNotNil(ch, "children['child-1']")
  lu.assertEquals(ch.root_path, "Order.Fork.A")
  lu.assertTrue(ch.finished)
  lu.assertEquals(ch.outcome, "ok")
  assert_same(ch.result, { x = 1 }, "children['child-1'].result")
  lu.assertFalse(ch.submachine)
  lu.assertEquals(ch.key, "A")
end

function TestInteropHarelToLua:test_mongostore_loads_the_context_exactly()
  local exe = assert(self.store:load(self.id))
  assert_same(exe.context, harel_context(), "context")
end

function TestInteropHarelToLua:test_mongostore_reads_harels_bookkeeping()
  lu.assertTrue(self.store:is_processed(self.id, "evt-processed"))
  lu.assertFalse(self.store:is_processed(self.id, "evt-other"))
  local exe, processed = self.store:load_for_event(self.id, "evt-processed")
  lu.assertNotNil(exe)
  lu.assertTrue(processed)

  local out = assert(self.store:pending_outbox())
  lu.assertEquals(#out, 1)
  lu.assertEquals(out[1].target_id, "target-1")
  lu.assertEquals(out[1].event.id, "evt-emit")
  lu.assertEquals(out[1].event.kind, "Shipped")
  assert_same(out[1].event.data, { n = 1, tags = A { "a" } }, "outbox event data")

  local due = assert(self.store:due_timers(1764504100.25))
  lu.assertEquals(#due, 1)
  lu.assertEquals(due[1].execution_id, self.id)
  lu.assertEquals(due[1].path, "Order.Processing.Waiting")
  lu.assertEquals(due[1].fire_at, 1764504100.25)
  lu.assertEquals(#assert(self.store:due_timers(1764504100.0)), 0)

  local spawns = assert(self.store:pending_spawns())
  lu.assertEquals(#spawns, 1)
  lu.assertEquals(spawns[1].parent_id, self.id)
  lu.assertEquals(spawns[1].child_id, "child-2")
  lu.assertEquals(spawns[1].root_path, "Order.Fork.B")
  assert_same(spawns[1].context, { seed = 1, tags = A { "b" } }, "spawn context")

  assert_same(assert(self.store:read_trace(self.id)),
              A { { event = "Pay", from = "Order.Processing", to = "Order.Processing.Waiting", index = 0 } },
              "trace")

  local page = assert(self.store:list_executions { definition_id = "order" })
  lu.assertEquals(#page.items, 1)
  lu.assertEquals(page.items[1].id, self.id)
  lu.assertEquals(page.items[1].status, "RUNNING")
  lu.assertEquals(page.items[1].version, 1)
end

function TestInteropHarelToLua:test_mongostore_commits_on_top_and_harel_loads_it()
  local exe = assert(self.store:load(self.id))
  exe.status = "DONE"
  exe.outcome = "shipped"
  exe.active_path = "Order.Done"
  exe.context.paid = true
  exe.context.receipt = { lines = A { { sku = "X-1", qty = 2 } }, total = BIG }
  exe.finished_at = 1764504200.5
  local ok, err, code = self.store:commit(exe, {
    emits = { { target_id = "target-2", event = { id = "evt-done", kind = "Done", data = { by = "lua" } } } },
    processed_event_id = "evt-lua",
    timers = { { action = "cancel", path = "Order.Processing.Waiting" } },
  })
  lu.assertTrue(ok, tostring(err) .. " (" .. tostring(code) .. ")")
  lu.assertEquals(exe.version, 2)

  -- harel sees exactly what it wrote, plus what Lua changed.
  local expected = copy(self.written)
  expected.version = 2
  expected.status = "DONE"
  expected.outcome = "shipped"
  expected.active_path = "Order.Done"
  expected.context.paid = true
  expected.context.receipt = { lines = A { { sku = "X-1", qty = 2 } }, total = BIG }
  expected.finished_at = 1764504200.5
  assert_same(harel("read", self.db, self.id), expected, "harel's load after the Lua commit")

  local page = harel("list", self.db, "order")
  lu.assertEquals(#page.items, 1)
  lu.assertEquals(page.items[1].status, "DONE")
  lu.assertEquals(page.items[1].version, 2)

  -- Both sides draw outbox seqs from the same counter: Lua's entry comes after harel's.
  local p = harel("pending", self.db, self.id)
  lu.assertEquals(#p.outbox, 2)
  lu.assertEquals(p.outbox[1].event.id, "evt-emit")
  lu.assertEquals(p.outbox[2].event.id, "evt-done")
  lu.assertTrue(p.outbox[1].seq < p.outbox[2].seq)
  assert_same(p.outbox[2].event.data, { by = "lua" }, "Lua's outbox event data")
  assert_same(p.timers, A {}, "the Lua commit cancelled harel's timer")
  lu.assertTrue(self.store:is_processed(self.id, "evt-lua"))
  lu.assertTrue(self.store:is_processed(self.id, "evt-processed"))
end
