-- spec/02-store/luajit_spec.lua - the LuaJIT build of the core (make jit), run
-- by luajit in its own process: the same store calls work, and integers
-- beyond 2^53, which LuaJIT's doubles cannot hold, round-trip as boxed
-- int64 values (mongostore.int64).
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"

local function luajit(code)
  local root = helper.root()
  local cmd = string.format("LD_PRELOAD= luajit -e %s 2>&1",
    helper.shell_quote(string.format("package.path=%q; package.cpath=%q; URI=%q; DB=%q; ",
      root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path,
      root .. "/build/jit/?.so", helper.uri(), helper.fresh_db("jit")) .. code))
  local f = assert(io.popen(cmd, "r"))
  local out = f:read("a")
  local ok = f:close()
  return ok, out
end

TestLuaJIT = {}

function TestLuaJIT:test_big_integers_round_trip_as_boxes()
  local ok, out = luajit([[
    local ms = require "mongostore"
    local store = assert(ms.connect(URI, { db = DB, wait = 10 }))
    local big = ms.int64("9007199254740993")          -- 2^53 + 1
    local small = ms.int64("42")
    assert(type(small) == "number" and small == 42, "small integers stay numbers")
    assert(type(big) == "userdata", "beyond 2^53 is a box")
    local exe = ms.execution{ definition_id = "jit", context = { big = big, neg = ms.int64("-9223372036854775808"),
                                                                  f = 0.5, n = 7, list = { big, 1 } } }
    assert(store:commit(exe, { emits = { { target_id = "t", event = { kind = "K", data = { big = big } } } },
                               spawns = { { child_id = "c", root_path = "R", context = { big = big } } } }))
    local back = store:load(exe.id)
    print("ctx", tostring(back.context.big), tostring(back.context.neg), back.context.f, back.context.n,
          tostring(back.context.list[1]), back.context.big == big)
    print("outbox", tostring(store:pending_outbox()[1].event.data.big))
    print("spawn", tostring(store:pending_spawns()[1].context.big))
    print("json", require("mongostore.core").json_encode({ v = big }))
    print("lt", big < ms.int64("9007199254740995"), big:tonumber())
    store:close()
  ]])
  lu.assertTrue(ok, out)
  lu.assertStrContains(out, "ctx\t9007199254740993\t-9223372036854775808\t0.5\t7\t9007199254740993\ttrue")
  lu.assertStrContains(out, "outbox\t9007199254740993")
  lu.assertStrContains(out, "spawn\t9007199254740993")
  lu.assertStrContains(out, 'json\t{"v":9007199254740993}')
  lu.assertStrContains(out, "lt\ttrue\t9.007199254741e+15")
end

function TestLuaJIT:test_the_jit_build_reads_what_lua54_wrote()
  local store, db = helper.connect()
  local exe = ms.execution{ definition_id = "jit", context = { big = 9007199254740993, text = "h\u{e9}" } }
  lu.assertTrue(store:save(exe))
  store:close()
  local root = helper.root()
  local cmd = string.format("LD_PRELOAD= luajit -e %s 2>&1", helper.shell_quote(string.format(
    "package.path=%q; package.cpath=%q; local ms = require 'mongostore'; " ..
    "local s = assert(ms.connect(%q, { db = %q })); local e = s:load(%q); " ..
    "print(tostring(e.context.big), e.context.text, e.version)",
    root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path, root .. "/build/jit/?.so",
    helper.uri(), db, exe.id)))
  local f = assert(io.popen(cmd, "r"))
  local out = f:read("a")
  lu.assertTrue(f:close(), out)
  lu.assertEquals(out, "9007199254740993\th\u{e9}\t1\n")
end

function TestLuaJIT:test_int64_on_lua54_is_a_plain_integer()
  lu.assertEquals(ms.int64("9007199254740993"), 9007199254740993)
  lu.assertEquals(math.type(ms.int64("9007199254740993")), "integer")
  lu.assertEquals(ms.int64(5), 5)
  lu.assertErrorMsgContains("not a decimal", function() ms.int64("12x") end)
  lu.assertErrorMsgContains("not a decimal", function() ms.int64("99999999999999999999") end)
  lu.assertErrorMsgContains("expected an integer", function() ms.int64(1.5) end)
end
