-- spec/02-store/diagram_trace_spec.lua - diagram.to_dot and diagram.to_mermaid
-- highlight what the engine really did: executions run against the server
-- (the order chart through its selector, guard, composite, fork and join; a
-- durable timer firing), their traces read back with store:read_trace.
local lu = require "luaunit"
local C = require "fixtures.charts"
local diagram = require "mongostore.diagram"

-- The DOT edge lines drawn as taken: "from->to label" -> { order numbers }.
local function taken(dot)
  local out = {}
  for line in dot:gmatch("[^\n]+") do
    if line:find('class="taken"', 1, true) then
      local a, b = line:match("^%s*([%w_]+) %-> ([%w_]+)")
      local label = line:match('label="([^"]*)"') or ""
      local base, nums = label:match("^(.-) ?%(([%d, ]+)%)$")
      local list = {}
      for n in nums:gmatch("%d+") do list[#list + 1] = tonumber(n) end
      out[a .. "->" .. b .. (base ~= "" and (" " .. base) or "")] = list
    end
  end
  return out
end

local function keys(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = k end
  table.sort(out)
  return out
end

local function render_svg(dot)
  local src, out = os.tmpname(), os.tmpname()
  local f = assert(io.open(src, "wb"))
  f:write(dot)
  f:close()
  local ok = os.execute(string.format("dot -Tsvg %s -o %s 2>/dev/null", src, out))
  local g = assert(io.open(out, "rb"))
  local svg = g:read("a")
  g:close()
  os.remove(src); os.remove(out)
  lu.assertTrue(ok == true or ok == 0, "dot -Tsvg failed")
  return svg
end

TestDiagramTrace = {}

function TestDiagramTrace:setUp()
  self.store = C.store()
  self.engine = C.engine(self.store, { charts = { C.order() } })
end

function TestDiagramTrace:tearDown()
  if self.store then self.store:close() end
end

function TestDiagramTrace:test_an_order_run_through_fork_and_join_is_highlighted_in_order()
  local e, s = self.engine, self.store
  local id = "order-diagram"
  lu.assertEquals(e:start("order", { id = id, context = { total = 12 } }), id)
  for _, ev in ipairs { { "PlaceOrder" }, { "Declined" }, { "Paid", { amount = 12 } }, { "Picked" }, { "Packed" } } do
    lu.assertTrue(e:send(id, { kind = ev[1], data = ev[2] or {} }))
    C.drain(e)
  end
  local parent = C.load(s, id)
  lu.assertEquals(parent.active_path, "Fork")
  local a_id, b_id = C.child(parent, "Fork.A"), C.child(parent, "Fork.B")
  lu.assertTrue(e:send(id, { kind = "Go", data = {} })) -- the parent hands it to both regions
  local done = C.wait_for(function() return C.load(s, id).status == "DONE" end, e)
  lu.assertTrue(done, "the order did not finish")
  parent = C.load(s, id)
  lu.assertEquals(parent.active_path, "Done")

  local traces, exes = {}, { parent }
  for _, x in ipairs { id, a_id, b_id } do traces[#traces + 1] = assert(s:read_trace(x)) end
  exes[2], exes[3] = C.load(s, a_id), C.load(s, b_id)
  local c = C.order()
  local dot = assert(diagram.to_dot(c, { execution = exes, traces = traces }))
  local t = taken(dot)
  lu.assertEquals(keys(t), {
    "c1->s2 retry", "j1->s13 success", "s0_start->s1", "s1->s2 PlaceOrder", "s10_start->s11", "s11->s12 Go",
    "s2->c1 Declined", "s2->s3_start Paid [guard]", "s3_start->s4", "s3_start->s6_anchor Packed", "s4->s5 Picked",
    "s6_anchor->j1 join all", "s7_start->s8", "s8->s9 Go",
  })
  -- the parent's path in the order it took it
  local path = { "s0_start->s1", "s1->s2 PlaceOrder", "s2->c1 Declined", "c1->s2 retry", "s2->s3_start Paid [guard]",
                 "s3_start->s4", "s4->s5 Picked", "s3_start->s6_anchor Packed", "s6_anchor->j1 join all",
                 "j1->s13 success" }
  for i = 2, #path do
    lu.assertTrue(t[path[i - 1]][1] < t[path[i]][1], path[i - 1] .. " before " .. path[i])
  end
  -- the regions ran after the fork was entered and before the join
  for _, edge in ipairs { "s7_start->s8", "s8->s9 Go", "s10_start->s11", "s11->s12 Go" } do
    lu.assertTrue(t[edge][1] > t["s3_start->s6_anchor Packed"][1], edge .. " after Packed")
    lu.assertTrue(t[edge][1] < t["s6_anchor->j1 join all"][1], edge .. " before the join")
  end
  -- numbered 1..n with none repeated
  local all = {}
  for _, nums in pairs(t) do for _, n in ipairs(nums) do all[#all + 1] = n end end
  table.sort(all)
  for i, n in ipairs(all) do lu.assertEquals(n, i) end
  -- where it is: Done, and not the states it left
  lu.assertStrContains(dot, 's13 [label="Done\\nfinal: success", peripheries=2, style="rounded,filled,bold"')
  lu.assertNotStrContains(dot, 's1 [label="Cart", style="rounded,filled,bold"')
  local svg = render_svg(dot)
  local n_taken = select(2, svg:gsub('class="edge taken"', ""))
  lu.assertEquals(n_taken, #keys(t))
  lu.assertStrContains(svg, 'class="node current"')

  local m = assert(diagram.to_mermaid(c, { execution = exes, traces = traces }))
  lu.assertStrContains(m, "class s13 current")
  lu.assertStrContains(m, "s1 --> s2 : PlaceOrder #40;" .. t["s1->s2 PlaceOrder"][1] .. "#41;")
end

function TestDiagramTrace:test_a_fired_timer_shows_as_the_timeout_taken()
  local e, s = self.engine, self.store
  lu.assertEquals(e:start("timed", { id = "timed-diagram", context = { wait = 0.05 } }), "timed-diagram")
  lu.assertTrue(e:send("timed-diagram", { kind = "Begin", data = {} }))
  local fired = C.wait_for(function() return C.load(s, "timed-diagram").active_path == "TimedOut" end, e)
  lu.assertTrue(fired, "the timer did not fire")
  local trace = assert(s:read_trace("timed-diagram"))
  local c = C.timed()
  -- from the trace alone: where its last step ended
  local dot = assert(diagram.to_dot(c, { trace = trace }))
  lu.assertEquals(taken(dot), { ["s0_start->s1"] = { 1 }, ["s1->s2 Begin"] = { 2 }, ["s2->s4 Timeout"] = { 3 } })
  lu.assertStrContains(dot, 's4 [label="TimedOut\\nentry", style="rounded,filled,bold"')
  render_svg(dot)
end
