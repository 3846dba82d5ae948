-- spec/01-unit/diagram_spec.lua - diagram.to_dot and diagram.to_mermaid without
-- a server: what they draw for each construct, labels a hostile chart cannot
-- break out of, the same text from every process, an interpreter run
-- highlighted; DOT rendered by Graphviz (dot -Tsvg), Mermaid parsed by
-- mermaid's own parser (tools/mermaid/check).
local lu = require "luaunit"
local ms = require "mongostore"
local chart = require "mongostore.chart"
local runtime = require "mongostore.runtime"
local helper = require "helpers"
local charts = require "fixtures.charts"
local diagram = require "mongostore.diagram"

local root = helper.root()

local function tmpfile(text)
  local name = os.tmpname()
  local f = assert(io.open(name, "wb"))
  f:write(text)
  f:close()
  return name
end

local function slurp(name)
  local f = assert(io.open(name, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

-- Renders DOT text to SVG with Graphviz; fails the test on any error.
local function svg_of(dot)
  local src, err = tmpfile(dot), os.tmpname()
  local out = os.tmpname()
  local ok = os.execute(string.format("dot -Tsvg %s -o %s 2>%s", src, out, err))
  local errors = slurp(err)
  local svg = slurp(out)
  os.remove(src); os.remove(err); os.remove(out)
  lu.assertTrue(ok == true or ok == 0, "dot -Tsvg failed: " .. errors .. "\n" .. dot)
  lu.assertNotStrContains(errors, "Error", false, "dot reported an error: " .. errors)
  lu.assertStrContains(svg, "</svg>")
  return svg, errors
end

-- The SVG's node ids, edge ends ("s1->s2") and cluster ids, from Graphviz's
-- <title> elements, and every text it draws.
local function svg_parts(svg)
  local titles, texts = {}, {}
  for t in svg:gmatch("<title>(.-)</title>") do
    titles[(t:gsub("&#45;", "-"):gsub("&gt;", ">"))] = true
  end
  for t in svg:gmatch("<text[^>]*>(.-)</text>") do texts[#texts + 1] = t end
  return titles, table.concat(texts, "\n")
end

-- Runs the Mermaid checker over the texts; returns ok, output (skips the
-- test when npm cannot reach the registry, exit 3).
local function mermaid_check(texts)
  local files = {}
  for i, text in ipairs(texts) do files[i] = tmpfile(text) end
  local cmd = helper.shell_quote(root .. "/tools/mermaid/check") .. " " .. table.concat(files, " ") .. " 2>&1"
  local p = assert(io.popen(cmd, "r"))
  local out = p:read("a")
  local _, _, status = p:close()
  for _, f in ipairs(files) do os.remove(f) end
  if status == 3 then lu.skip("mermaid's parser could not be installed: " .. out) end
  return status == 0, out, files
end

local function lines_matching(text, pattern)
  local n = 0
  for line in text:gmatch("[^\n]+") do
    if line:match(pattern) then n = n + 1 end
  end
  return n
end

local function count_states(c)
  local n = 0
  for path in pairs(c.index) do if path ~= "" then n = n + 1 end end
  return n
end

------------------------------------------------------------------------
-- What is drawn

TestStructure = {}

function TestStructure:test_order_chart_dot()
  local dot = diagram.to_dot(charts.order())
  -- composites and regions are clusters, regions dashed
  for _, name in ipairs { "Fulfilling", "Fork\\northogonal" } do
    lu.assertStrContains(dot, 'label="' .. name)
  end
  lu.assertEquals(lines_matching(dot, "^%s*subgraph cluster_s%d+ {$"), 4) -- Fulfilling, Fork, A, B
  lu.assertEquals(lines_matching(dot, 'style="dashed"'), 2)
  -- a guard, a timeout from the context, finals with outcomes
  lu.assertStrContains(dot, 'label="Paid [guard]"')
  lu.assertStrContains(dot, "timeout context.payment_timeout")
  lu.assertStrContains(dot, 'label="Done\\nfinal: success", peripheries=2')
  lu.assertStrContains(dot, 'label="Cancelled\\nfinal: cancelled", peripheries=2')
  -- the selector: a choice with one edge per key, the join: a bar with success and else
  lu.assertStrContains(dot, "c1 [shape=diamond")
  lu.assertStrContains(dot, 'c1 -> s14 [label="giveup"]')
  lu.assertStrContains(dot, 'c1 -> s2 [label="retry"]')
  lu.assertStrContains(dot, 'label="join all", ltail=cluster_s6')
  lu.assertStrContains(dot, 'j1 -> s13 [label="success"]')
  lu.assertStrContains(dot, 'j1 -> s14 [label="else", style=dashed]')
  -- into and out of a composite: at its border
  lu.assertStrContains(dot, 's2 -> s3_start [label="Paid [guard]", lhead=cluster_s3]')
end

function TestStructure:test_order_chart_mermaid()
  local m = diagram.to_mermaid(charts.order())
  lu.assertStrContains(m, "stateDiagram-v2\n")
  lu.assertStrContains(m, 'state "Fulfilling" as s3\n  state s3 {\n')
  lu.assertStrContains(m, 'state "Fork #40;orthogonal#41;" as s6')
  lu.assertEquals(lines_matching(m, "^%s*%-%-$"), 1) -- the regions' divider
  lu.assertStrContains(m, "state c1 <<choice>>")
  lu.assertStrContains(m, "state j1 <<join>>")
  lu.assertStrContains(m, "s2 --> s3 : Paid #91;guard#93;")
  lu.assertStrContains(m, "s2 : timeout context#46;payment_timeout")
  lu.assertStrContains(m, "s13 : final#58; success")
  lu.assertStrContains(m, "s13 --> [*]")
  lu.assertStrContains(m, "j1 --> s14 : else")
  lu.assertStrContains(m, "      [*] --> s8\n") -- region A's initial, inside its block
end

function TestStructure:test_names_label_guards_selectors_actions_and_hooks()
  local function ok() return true end
  local function pick() return "a" end
  local function act() end
  local function enter() end
  local c = chart.define{
    id = "named", initial = "A",
    states = { { "A", on_enter = enter, defer = { "Z", "Y" }, timeout = 2.5 }, { "B" }, { "C", final = true } },
    transitions = {
      { from = "A", to = "B", on = { "Go", "Again" }, where = ok, action = act },
      { from = "B", on = "Pick", select = pick, to = { b = "C", a = "A" } },
    },
  }
  local names = { [ok] = "ok", [pick] = "pick", [act] = "act", [enter] = "enter" }
  local dot = diagram.to_dot(c, { names = names, direction = "LR", title = false })
  lu.assertStrContains(dot, 'label="Again | Go [ok] / act"')
  lu.assertStrContains(dot, 'label="Pick select pick"')
  lu.assertStrContains(dot, 'label="A\\ntimeout 2.5s\\ndefer Y, Z\\nentry / enter"')
  lu.assertStrContains(dot, 'label="C\\nfinal", peripheries=2')
  lu.assertStrContains(dot, "rankdir=LR")
  lu.assertNotStrContains(dot, "labelloc")
  local m = diagram.to_mermaid(c, { names = names, direction = "LR" })
  lu.assertStrContains(m, "s1 --> s2 : Again #124; Go #91;ok#93; #47; act")
  lu.assertStrContains(m, "direction LR")
end

-- An invoke state names the chart it runs, and a fan-out the list; the
-- fan-out's join is drawn as a region join is.
local function invoke_chart()
  return chart.define{ id = "invoking", initial = "Pay",
    states = { { "Pay", invoke = "payment", with = { amount = "total" } },
               { "Ship", invoke = "parcel", each = "parcels", as = "p" },
               { "Done", final = "success" }, { "Lost", final = "lost" } },
    transitions = { { from = "Pay", on = "Returned", to = "Ship" },
                    { from = "Ship", join = "all", to = "Done", else_to = "Lost" } },
  }
end

function TestStructure:test_invoke_states_name_their_chart()
  local c = invoke_chart()
  local dot = diagram.to_dot(c)
  lu.assertStrContains(dot, 'label="Pay\\ninvoke payment"')
  lu.assertStrContains(dot, 'label="Ship\\ninvoke parcel for p in parcels"')
  lu.assertStrContains(dot, 'label="else"')
  svg_of(dot)
  local m = diagram.to_mermaid(c)
  lu.assertStrContains(m, "invoke payment")
  lu.assertStrContains(m, "invoke parcel for p in parcels")
end

function TestStructure:test_bad_arguments_raise_naming_them()
  local c = charts.flat()
  for _, fname in ipairs { "to_dot", "to_mermaid" } do
    local f = diagram[fname]
    local ok, err = pcall(f, {})
    lu.assertFalse(ok)
    lu.assertStrContains(tostring(err), "c must be a chart")
    ok, err = pcall(f, c, "x")
    lu.assertFalse(ok)
    lu.assertStrContains(tostring(err), "opts must be a table")
    ok, err = pcall(f, c, { colour = true })
    lu.assertFalse(ok)
    lu.assertStrContains(tostring(err), "unknown option colour")
    ok, err = pcall(f, c, { direction = "up" })
    lu.assertFalse(ok)
    lu.assertStrContains(tostring(err), "opts.direction")
    ok, err = pcall(f, c, { execution = 42 })
    lu.assertFalse(ok)
    lu.assertStrContains(tostring(err), "opts.execution must be an Execution (mongostore.execution{...}) or a table, got integer")
    ok, err = pcall(f, c, { trace = { 1, 2 } })
    lu.assertFalse(ok)
    lu.assertStrContains(tostring(err), "step 1 must be a table")
  end
end

function TestStructure:test_an_execution_of_another_chart_or_state_is_invalid()
  local c = charts.flat()
  for _, fname in ipairs { "to_dot", "to_mermaid" } do
    local text, err, code = diagram[fname](c, { execution = { definition_id = "fork", active_path = "Idle" } })
    lu.assertNil(text)
    lu.assertEquals(code, "invalid")
    lu.assertStrContains(err, "runs chart fork, not flat")
    text, err, code = diagram[fname](c, { execution = { definition_id = "flat", active_path = "Gone" } })
    lu.assertNil(text)
    lu.assertEquals(code, "invalid")
    lu.assertStrContains(err, "state 'Gone' is not in chart flat")
    text, err, code = diagram[fname](c, { trace = { { event = "Begin", from = "Idle", to = "Nowhere" } } })
    lu.assertNil(text)
    lu.assertEquals(code, "invalid")
    lu.assertStrContains(err, "'Nowhere'")
  end
end

------------------------------------------------------------------------
-- Graphviz renders every fixture chart, with every state and edge

TestGraphviz = {}

-- The edges a chart must show: each transition from its source's id (or a
-- pseudo state) to its target's, read from the compiled chart itself.
function TestGraphviz:test_every_fixture_chart_renders_with_its_states_and_edges()
  local list = charts.all()
  list[#list + 1] = charts.order()
  for _, c in ipairs(list) do
    local dot = diagram.to_dot(c)
    local svg = svg_of(dot)
    local titles, texts = svg_parts(svg)
    -- every state: a leaf is a node, a composite or region a cluster, and its name is drawn
    for path, node in pairs(c.index) do
      if path ~= "" then
        lu.assertStrContains(texts, node.name, false, c.id .. ": state " .. path .. " is not drawn")
        if #node.children > 0 then
          lu.assertStrContains(dot, "subgraph cluster_", false)
        end
      end
    end
    local clusters, nodes, edges = 0, 0, 0
    for t in pairs(titles) do
      if t:match("^cluster_s%d+$") then clusters = clusters + 1
      elseif t:match("^s%d+$") then nodes = nodes + 1
      elseif t:match("%->") then edges = edges + 1 end
    end
    local leaves, containers = 0, 0
    for path, node in pairs(c.index) do
      if path ~= "" then
        if #node.children > 0 then containers = containers + 1 else leaves = leaves + 1 end
      end
    end
    lu.assertEquals(nodes, leaves, c.id .. ": leaf nodes in the SVG")
    lu.assertEquals(clusters, containers, c.id .. ": clusters in the SVG")
    -- every transition's edges, and every initial
    local want = 0
    for path, node in pairs(c.index) do
      if node.initial then want = want + 1 end
      if path ~= "" then
        for _, t in ipairs(node.outgoing) do
          if t.select then
            for _ in pairs(t.targets) do want = want + 1 end
            want = want + 1
          elseif t.join then
            want = want + 1 + 1 + (t.else_target and 1 or 0)
          else
            want = want + 1
          end
        end
      end
    end
    local distinct = {}
    for line in dot:gmatch("[^\n]+") do
      local a, b = line:match("^%s*([%w_]+) %-> ([%w_]+)")
      if a then distinct[a .. "->" .. b] = true end
    end
    local n_distinct = 0
    for e in pairs(distinct) do
      n_distinct = n_distinct + 1
      lu.assertTrue(titles[e], c.id .. ": edge " .. e .. " is not in the SVG")
    end
    lu.assertEquals(lines_matching(dot, "^%s*[%w_]+ %-> [%w_]+"), want, c.id .. ": edges drawn")
    lu.assertEquals(edges, n_distinct, c.id .. ": edges in the SVG")
  end
end

------------------------------------------------------------------------
-- A hostile chart: names, kinds and outcomes that would end a label, open a
-- block or start a statement in either format

local HOSTILE_NAMES = {
  'say "hi"', "a]b[c", "x{y}z", "<b>&amp;</b>", "back\\slash\\n", "semi;colon:colon", "arrow-->state",
  "%% comment", "Überprüfung ✓", "bad\255byte", "s1", "cluster_s1", "--", "[*]", "#quot;", "note left of",
}

local function hostile_chart()
  local states, transitions = {}, {}
  for i, name in ipairs(HOSTILE_NAMES) do
    states[i] = { name }
    local nxt = HOSTILE_NAMES[i + 1]
    if nxt then
      transitions[#transitions + 1] = { from = name, to = nxt, on = 'go "' .. i .. '"\n} digraph { x' }
    end
  end
  states[#states + 1] = { "End", final = "out\"come\n]; evil -> x [" }
  transitions[#transitions + 1] = { from = HOSTILE_NAMES[#HOSTILE_NAMES], to = "End", on = "ünïcode\226\128\168" }
  states[#states + 1] = { 'Box "1"', initial = "in{ner}", states = { { "in{ner}" }, { "--x", final = "a\nb" } },
                          transitions = { { from = "in{ner}", to = "--x", on = "%%" } } }
  transitions[#transitions + 1] = { from = "End", to = 'Box "1"', on = "never" }
  -- End is final: give the box another way in
  transitions[#transitions] = { from = HOSTILE_NAMES[1], to = 'Box "1"', on = "into" }
  return chart.define{ id = 'hostile "id"\n{', initial = HOSTILE_NAMES[1], states = states, transitions = transitions }
end

TestEscaping = {}

function TestEscaping:test_dot_renders_every_hostile_name_as_text()
  local c = hostile_chart()
  local dot = diagram.to_dot(c)
  lu.assertNil(dot:find("[\128-\255]"), "raw non-ASCII bytes in the DOT text")
  local svg = svg_of(dot)
  local titles, texts = svg_parts(svg)
  local nodes, clusters = 0, 0
  for t in pairs(titles) do
    if t:match("^s%d+$") then nodes = nodes + 1 elseif t:match("^cluster_") then clusters = clusters + 1 end
  end
  lu.assertEquals(nodes, count_states(c) - 1, "one node per leaf, nothing injected")
  lu.assertEquals(clusters, 1)
  -- the names come back as text (Graphviz writes XML entities in SVG)
  local function xml(s)
    return (s:gsub("&", "&amp;"):gsub("<", "&lt;"):gsub(">", "&gt;"):gsub('"', "&quot;"):gsub("%-", "&#45;"))
  end
  for _, name in ipairs { 'say "hi"', "a]b[c", "x{y}z", "<b>&amp;</b>", "back\\slash\\n", "arrow-->state",
                          "Überprüfung ✓", "[*]" } do
    lu.assertStrContains(texts, xml(name), false, "name not drawn as text: " .. name)
  end
  lu.assertStrContains(texts, "bad\239\191\189byte") -- the invalid byte as U+FFFD
  lu.assertStrContains(texts, "} digraph { x")     -- a newline in a kind is a line break
end

function TestEscaping:test_mermaid_text_is_ascii_and_each_name_one_statement()
  local c = hostile_chart()
  local m = diagram.to_mermaid(c)
  lu.assertNil(m:find("[\128-\255]"), "raw non-ASCII bytes in the Mermaid text")
  -- one state statement per state; every quote is a delimiter
  lu.assertEquals(lines_matching(m, '^%s*state "[^"]*" as s%d+$'), count_states(c))
  for line in m:gmatch("[^\n]+") do
    lu.assertTrue(nil ~= (line:match('^%s*state "[^"]*" as s%d+$') or line:match("^%s*state s%d+ {$")
      or line:match("^%s*[%w%[%]%*_]+ %-%-> [%w%[%]%*_]+[^\"{}]*$") or line:match("^%s*s%d+ : [^\"{}]*$")
      or line:match("^%s*[{}]$") or line:match("^%s*}$") or line:match("^%s*%-%-$")
      or line:match("^stateDiagram%-v2$") or line:match("^%s*direction %u%u$")
      or line:match("^%s*state [cj]%d+ <<%l+>>$") or line:match("^%s*class") or line:match("^%s*classDef")),
      "unexpected Mermaid line: " .. line)
  end
  lu.assertStrContains(m, 'state "say #34;hi#34;" as s1')
end

------------------------------------------------------------------------
-- The same text from every process (Lua's pairs order differs between runs)

TestDeterminism = {}

local DETERMINISM = [[
local chart = require "mongostore.chart"
local diagram = require "mongostore.diagram"
local to = {}
for i = 1, 24 do to["k" .. i] = "S" .. (i % 5 + 1) end
local kinds = {}
for i = 1, 20 do kinds[i] = "E" .. i end
local states = {}
for i = 1, 5 do states[i] = { "S" .. i, defer = { "D3", "D1", "D2" } } end
local c = chart.define{ id = "det", initial = "S1", states = states, transitions = {
  { from = "S1", on = kinds, select = function() return "k1" end, to = to },
  { from = "S2", to = "S1", on = "Back" } } }
local exe = { definition_id = "det", active_path = "S2", status = "RUNNING" }
local trace = { { event = "E7", from = "S1", to = "S2", at = 1 }, { event = "Back", from = "S2", to = "S1", at = 2 } }
io.write(diagram.to_dot(c, { execution = exe, trace = trace }), "\n=====\n",
         diagram.to_mermaid(c, { execution = exe, trace = trace }))
]]

function TestDeterminism:test_two_processes_write_the_same_text()
  local a, sa = helper.spawn(DETERMINISM):wait()
  local b, sb = helper.spawn(DETERMINISM .. "\nlocal junk = {} for i = 1, 1000 do junk['x' .. i] = i end"):wait()
  lu.assertEquals(sa, 0, a)
  lu.assertEquals(sb, 0, b)
  lu.assertEquals(a, b)
  -- sorted: the selector's keys, the event kinds, the deferred kinds
  local keys = {}
  for k in a:match("^(.-)\n=====\n"):gmatch('c1 %-> s%d+ %[label="(k%d+)') do keys[#keys + 1] = k end
  local sorted = {}
  for i, k in ipairs(keys) do sorted[i] = k end
  table.sort(sorted)
  lu.assertEquals(#keys, 24)
  lu.assertEquals(keys, sorted)
  lu.assertStrContains(a, "defer D1, D2, D3")
  lu.assertStrContains(a, 'label="E1 | E10 | E11')
end

------------------------------------------------------------------------
-- Highlighting an interpreter run (runtime.apply, as the engine steps it)

local seq = 0
-- Steps c from a fresh execution through the events, as the engine would:
-- { "Kind", data } or { "Timeout", path = "State" } (the timer armed there).
local function run(c, events, fields)
  local f = { definition_id = c.id, id = "hl-" .. c.id }
  for k, v in pairs(fields or {}) do f[k] = v end
  local exe = ms.execution(f)
  local trace, armed = {}, {}
  for i, item in ipairs(events) do
    seq = seq + 1
    local ev, opts = { id = "e" .. seq, kind = item[1], data = item[2] or {} }, nil
    if item.path then
      ev = runtime.timeout_event(exe.id, item.path, armed[item.path])
      opts = { armed = armed[item.path] }
    end
    local fx = runtime.apply(c, exe, ev, i, opts)
    for _, t in ipairs(fx.timers) do armed[t.path] = t.action == "schedule" and t.fire_at or nil end
    trace[#trace + 1] = { event = ev.kind, event_id = ev.id, from = fx.from, to = fx.to, at = i,
                          status = exe.status }
  end
  return exe, trace
end

-- The DOT edge lines drawn as taken, "from -> to label", in file order.
local function taken_edges(dot)
  local out = {}
  for line in dot:gmatch("[^\n]+") do
    if line:find('class="taken"', 1, true) then
      local a, b = line:match("^%s*([%w_]+) %-> ([%w_]+)")
      out[#out + 1] = a .. "->" .. b .. " " .. (line:match('label="([^"]*)"') or "")
    end
  end
  table.sort(out)
  return out
end

TestHighlight = {}

function TestHighlight:test_flat_run_in_order_and_where_it_is()
  local c = charts.flat()
  local exe, trace = run(c, { { "Start" }, { "Begin" } })
  local dot = diagram.to_dot(c, { execution = exe, trace = trace })
  lu.assertEquals(taken_edges(dot), { "s0_start->s1 (1)", "s1->s2 Begin (2)" })
  lu.assertStrContains(dot, 's2 [label="Working\\nentry", style="rounded,filled,bold"')
  lu.assertStrContains(dot, 'class="current"')
  lu.assertStrContains(dot, 's1 [label="Idle", style="rounded,filled"') -- visited
  lu.assertStrContains(dot, 's3 [label="Done\\nfinal: success\\nentry", peripheries=2];') -- untouched
  local svg = svg_of(dot)
  lu.assertStrContains(svg, 'class="edge taken"')
  lu.assertStrContains(svg, 'class="node current"')
  local m = diagram.to_mermaid(c, { execution = exe, trace = trace })
  lu.assertStrContains(m, "[*] --> s1 : #40;1#41;")
  lu.assertStrContains(m, "s1 --> s2 : Begin #40;2#41;")
  lu.assertStrContains(m, "class s2 current")
  lu.assertStrContains(m, "class s1 visited")
end

function TestHighlight:test_order_run_through_selector_guard_and_composite()
  local c = charts.order()
  local exe, trace = run(c, { { "Start", { total = 5 } }, { "PlaceOrder" }, { "Declined" }, { "Paid", { amount = 5 } },
                              { "Picked" } })
  -- Packing has no way out: a sink, which finishes Fulfilling (waiting for Packed)
  lu.assertEquals(exe.active_path, "Fulfilling")
  local dot = diagram.to_dot(c, { execution = exe, trace = trace })
  lu.assertEquals(taken_edges(dot), {
    "c1->s2 retry (4)",
    "s0_start->s1 (1)",
    "s1->s2 PlaceOrder (2)",
    "s2->c1 Declined (3)",
    "s2->s3_start Paid [guard] (5)",
    "s3_start->s4 (6)",
    "s4->s5 Picked (7)",
  })
  -- where it is: the composite; the leaf it passed is visited
  lu.assertStrContains(dot, 's5 [label="Packing", style="rounded,filled", fillcolor="#eaf2fb"')
  lu.assertStrContains(dot, 'label="Fulfilling";\n    style="rounded,bold";\n    color="#d35400"')
  svg_of(dot)
  -- the trace alone: the same path, and where its last step ended
  local dot2 = diagram.to_dot(c, { trace = trace })
  lu.assertEquals(taken_edges(dot2), taken_edges(dot))
  lu.assertStrContains(dot2, 'label="Fulfilling";\n    style="rounded,bold";\n    color="#d35400"')
end

function TestHighlight:test_timeout_resolves_at_the_composite_that_handles_it()
  local c = charts.retry()
  local exe, trace = run(c, { { "Start" }, { "Fail" }, { "Timeout", path = "Job.Backoff" } },
                         { context = { budget = 60, attempt_t = 5, backoff = 1 } })
  lu.assertEquals(exe.active_path, "Job.Attempt")
  local dot = diagram.to_dot(c, { execution = exe, trace = trace })
  lu.assertEquals(taken_edges(dot), {
    "s0_start->s1_start (1)", "s1_start->s2 (2)", "s2->s3 Fail | Timeout (3)", "s3->s2 Timeout (4)",
  })
end

function TestHighlight:test_fork_with_its_regions()
  local c = charts.fork()
  local parent, ptrace = run(c, { { "Start" }, { "Begin" } })
  lu.assertEquals(parent.active_path, "Fork")
  local a, atrace = run(c, { { "Start" }, { "GoA" } }, { id = "hl-a", root_path = "Fork.A", parent_id = parent.id })
  local b, btrace = run(c, { { "Start" } }, { id = "hl-b", root_path = "Fork.B", parent_id = parent.id })
  lu.assertEquals(a.active_path, "Fork.A") -- region A finished
  local dot = diagram.to_dot(c, { execution = { parent, a, b }, traces = { ptrace, atrace, btrace } })
  -- steps at the same time order by trace: parent's, then A's, then B's
  lu.assertEquals(taken_edges(dot), { "s0_start->s1 (1)", "s1->s2_anchor Begin (4)", "s3_start->s4 (2)",
                                      "s4->s5 GoA (5)", "s7_start->s8 (3)" })
  -- region A finished: passed, like its A2; B waits in B1, so Fork is active
  lu.assertStrContains(dot, 'label="A";\n      style="dashed";\n      color="#2e86c1"')
  lu.assertStrContains(dot, 'label="Fork\\northogonal";\n    style="rounded,bold";\n    color="#d35400"')
  lu.assertStrContains(dot, 's5 [label="A2\\nfinal: success", peripheries=2, style="rounded,filled", fillcolor="#eaf2fb"')
  lu.assertStrContains(dot, 's8 [label="B1\\nentry", style="rounded,filled,bold"')
  svg_of(dot)
  -- the trace form that nests: a list of traces
  lu.assertEquals(taken_edges(diagram.to_dot(c, { trace = { ptrace, atrace, btrace } })), taken_edges(dot))
end

function TestHighlight:test_a_failed_execution_is_marked_failed()
  local c = chart.define{ id = "boom", initial = "A",
    states = { { "A" }, { "B", on_enter = function() error("no") end } },
    transitions = { { from = "A", to = "B", on = "Go" } } }
  local exe, trace = run(c, { { "Start" }, { "Go" } })
  lu.assertEquals(exe.status, "FAILED")
  local dot = diagram.to_dot(c, { execution = exe, trace = trace })
  lu.assertStrContains(dot, 'class="failed"')
  lu.assertStrContains(diagram.to_mermaid(c, { execution = exe }), "class s")
end

------------------------------------------------------------------------
-- Mermaid's own parser takes every diagram above

TestMermaid = {}

function TestMermaid:test_mermaid_parses_every_fixture_hostile_and_highlighted_diagram()
  local texts = {}
  local list = charts.all()
  list[#list + 1] = charts.order()
  for _, c in ipairs(list) do texts[#texts + 1] = diagram.to_mermaid(c) end
  texts[#texts + 1] = diagram.to_mermaid(hostile_chart(), { title = 'a "title": {x}\n---' })
  texts[#texts + 1] = diagram.to_mermaid(invoke_chart())
  local c = charts.order()
  local exe, trace = run(c, { { "Start", { total = 5 } }, { "PlaceOrder" }, { "Declined" }, { "Paid", { amount = 5 } } })
  texts[#texts + 1] = diagram.to_mermaid(c, { execution = exe, trace = trace, direction = "LR" })
  local ok, out = mermaid_check(texts)
  lu.assertTrue(ok, out)
  local oks = select(2, out:gsub(": ok %(stateDiagram%)", ""))
  lu.assertEquals(oks, #texts, out)
end

function TestMermaid:test_the_checker_fails_on_a_broken_diagram()
  local ok, out = mermaid_check { "stateDiagram-v2\n  s1 --> \n" }
  lu.assertFalse(ok)
  lu.assertStrContains(out, "Parse error")
end
