-- spec/03-engine/examples_spec.lua - the bundled examples run against the test
-- server (MONGOSTORE_URI) with the interpreter that runs this spec, and say
-- what they should.
local lu = require "luaunit"
local helper = require "helpers"

-- Runs `<lua> examples/<name>` from the repository's root; returns its
-- output (stdout and stderr) and exit status.
local function run_example(name)
  local cmd = string.format("cd %s && MONGOSTORE_URI=%s %s %s 2>&1",
    helper.shell_quote(helper.root()), helper.shell_quote(helper.uri()), helper.lua_command(),
    helper.shell_quote("examples/" .. name))
  local f = assert(io.popen(cmd, "r"))
  local out = f:read("a")
  local ok, how, status = f:close()
  return out, ok and 0 or status, how
end

-- The trace lines printed under an execution's heading, as { event, from, to, status }.
local function trace_of(out, id)
  local steps, inside = {}, false
  for line in out:gmatch("[^\n]+") do
    if line:match("^%S") then
      inside = line:find(id .. ": ", 1, true) == 1
    elseif inside then
      local idx, event, from, to, status = line:match("^%s+(%d+)%s+(%S+)%s+(%S+)%s+%->%s+(%S+)%s+(%S+)%s*$")
      if idx then steps[#steps + 1] = { event, from, to, status } end
    end
  end
  return steps
end

TestExamples = {}

function TestExamples:test_order_example()
  local out, status = run_example("order.lua")
  lu.assertEquals(status, 0, out)
  lu.assertStrMatches(out, ".*o%-1: DONE success at Done %(version %d+%).*")
  lu.assertStrMatches(out, ".*o%-2: DONE cancelled at Cancelled %(version %d+%).*")
  lu.assertStrMatches(out, ".*o%-3: DONE cancelled at Cancelled %(version %d+%).*")

  -- o-1: paid, fulfilled, both regions finished, joined
  local o1 = trace_of(out, "o-1")
  lu.assertEquals(o1[1], { "Start", "-", "Cart", "RUNNING" })
  lu.assertEquals(o1[#o1], { "Finished", "Fork", "Done", "DONE" })
  local kinds = {}
  for _, s in ipairs(o1) do kinds[#kinds + 1] = s[1] end
  lu.assertEquals(kinds, { "Start", "PlaceOrder", "Paid", "Picked", "Packed", "Go", "Finished", "Finished" },
    "o-1's trace (Go sent twice with one id must appear once)")

  -- o-2: declined three times, the selector gives up on the third
  local o2 = trace_of(out, "o-2")
  local declines = 0
  for _, s in ipairs(o2) do if s[1] == "Declined" then declines = declines + 1 end end
  lu.assertEquals(declines, 3)
  lu.assertEquals(o2[#o2], { "Declined", "AwaitingPayment", "Cancelled", "DONE" })

  -- o-3: nobody paid: the timer's Timeout cancelled it
  local o3 = trace_of(out, "o-3")
  lu.assertEquals(o3[#o3], { "Timeout", "AwaitingPayment", "Cancelled", "DONE" })
  for _, s in ipairs(o3) do lu.assertNotEquals(s[1], "Paid") end

  -- o-1 asked once, o-2 three times (one per attempt), o-3 once
  lu.assertStrContains(out, "payment requests sent: 5")
end

function TestExamples:test_store_basics_example()
  local out, status = run_example("store_basics.lua")
  lu.assertEquals(status, 0, out)
  lu.assertStrContains(out, "connected: ")
  lu.assertStrMatches(out, ".*created %x+ at version 1\n.*")
  lu.assertStrContains(out, "PlaceOrder committed: version 2")
  lu.assertStrContains(out, "redelivery of evt-place-1: already processed = true (version 2)")
  lu.assertStrMatches(out, ".*relay: seq %d+ %-> payments: Charge %x+\n.*")
  lu.assertStrMatches(out, ".*timer due: %x+ AwaitingPayment at [%d.]+\n.*")
  lu.assertStrMatches(out, ".*stale writer: ok=nil code=conflict found=3 .*")
  lu.assertStrContains(out, "trace 0: PlaceOrder Cart -> AwaitingPayment")
  lu.assertStrContains(out, "trace 1: Timeout AwaitingPayment -> Cancelled")
  lu.assertStrMatches(out, ".*listed: %x+ CANCELLED Cancelled v3\n.*")
  lu.assertStrContains(out, "demo finished")
end
