-- spec/02-store/cli_spec.lua - bin/mongostore run as a user runs it (a
-- separate process on the bundled server) for every command: its output as
-- text and as --json, its exit codes (0 ok, 1 failed, 2 usage), bad usage
-- and hostile input. The executions are made through the library beside it.
local lu = require "luaunit"
local helper = require "helpers"
local ms = require "mongostore"
local engine_mod = require "mongostore.engine"
local cli = require "fixtures.cli.run"
local charts = require "fixtures.cli.charts"
local diagram = require "mongostore.diagram"

TestCli = {}

function TestCli:setUp()
  self.store, self.db = helper.connect()
  self.engine = engine_mod.new{ store = self.store, charts = charts, trace = true, log = function() end }
end

function TestCli:tearDown()
  self.store:close()
end

-- runs `mongostore <global options for this db> argv...`
function TestCli:run(argv, opts)
  return cli.run(cli.concat(cli.base(self.db), argv), opts)
end

function TestCli:run_charts(argv, opts)
  return cli.run(cli.concat(cli.base(self.db, { "--charts", cli.charts_file }), argv), opts)
end

local function lines(s)
  local t = {}
  for l in s:gmatch("([^\n]*)\n") do t[#t + 1] = l end
  return t
end

local function assert_ok(r)
  lu.assertEquals(r.code, 0, "exit " .. tostring(r.code) .. "; stderr: " .. r.err .. "; stdout: " .. r.out)
end

-- An operation that failed: exit 1 and exactly one line on stderr, no traceback.
local function assert_failed(r, pattern)
  lu.assertEquals(r.code, 1, "stdout: " .. r.out .. " stderr: " .. r.err)
  local l = lines(r.err)
  lu.assertEquals(#l, 1, "one line on stderr: " .. r.err)
  lu.assertNotStrContains(r.err, "traceback")
  lu.assertNotStrContains(r.err, "stack")
  lu.assertStrMatches(l[1], "^mongostore[%w ]*: .*")
  if pattern then lu.assertStrContains(r.err, pattern) end
end

-- Bad usage: exit 2, the error, then a usage line; no traceback.
local function assert_usage(r, pattern)
  lu.assertEquals(r.code, 2, "stdout: " .. r.out .. " stderr: " .. r.err)
  local l = lines(r.err)
  lu.assertEquals(#l, 2, "the error and a usage line: " .. r.err)
  lu.assertStrMatches(l[2], "^usage: mongostore.*")
  lu.assertNotStrContains(r.err, "traceback")
  if pattern then lu.assertStrContains(l[1], pattern) end
end

local function json(r)
  assert_ok(r)
  local v, err = ms.json.decode(r.out)
  lu.assertNotNil(v, "not JSON: " .. tostring(err) .. ": " .. r.out)
  return v
end

local function ids_of(items)
  local t = {}
  for _, s in ipairs(items) do t[#t + 1] = s.id end
  table.sort(t)
  return t
end

------------------------------------------------------------------------
-- help and usage

local COMMANDS = { "list", "show", "start", "send", "cancel", "terminate", "suspend", "resume", "recover", "timers",
                   "outbox", "doctor", "render" }

function TestCli:test_help_lists_every_command_and_each_has_its_own()
  local r = cli.run({ "--help" })
  assert_ok(r)
  for _, c in ipairs(COMMANDS) do lu.assertStrMatches(r.out, ".*\n  " .. c .. " .*") end
  lu.assertStrContains(r.out, "Exit codes: 0 ok, 1 the operation failed, 2 bad usage")
  for _, c in ipairs(COMMANDS) do
    local h = cli.run({ c, "--help" })
    assert_ok(h)
    lu.assertStrMatches(h.out, "^usage: mongostore " .. c .. ".*")
    lu.assertEquals(h.err, "")
  end
  -- -h too, and the help needs no server
  local h = cli.run({ "-h", "show" })
  assert_ok(h)
  lu.assertStrMatches(h.out, "^usage: mongostore show ID.*")
end

function TestCli:test_bad_usage_exits_2_with_a_usage_line()
  assert_usage(cli.run({}), "no command")
  assert_usage(cli.run({ "frobnicate" }), "unknown command")
  assert_usage(self:run({ "list", "--bogus" }), "unknown option --bogus")
  assert_usage(self:run({ "list", "--limit" }), "needs a value")
  assert_usage(self:run({ "list", "--limit", "0" }), "--limit")
  assert_usage(self:run({ "list", "--limit", "ten" }), "--limit")
  assert_usage(self:run({ "list", "--status", "SLEEPING" }), "SLEEPING")
  assert_usage(self:run({ "list", "--all", "--cursor", "x" }), "--all")
  assert_usage(self:run({ "list", "extra" }), "no arguments")
  assert_usage(self:run({ "show" }), "one execution id")
  assert_usage(self:run({ "show", "a", "b" }), "one execution id")
  assert_usage(self:run({ "send", "only-id" }))
  assert_usage(self:run({ "cancel" }), "--definition")
  assert_usage(self:run({ "render", "x.lua" }), "--format")
  assert_usage(self:run({ "render", cli.root .. "/spec/fixtures/cli/one_chart.lua", "--format", "png" }), "png")
  assert_usage(self:run({ "render", "--json", "x.lua", "--format", "dot" }), "no --json")
  assert_usage(self:run({ "--db", "no spaces", "list" }), "--db")
  assert_usage(self:run({ "timers", "--limit", "-1" }), "--limit")
  -- no server at all: neither --uri nor MONGOSTORE_URI
  assert_usage(cli.run({ "list" }), "MONGOSTORE_URI")
  -- MONGOSTORE_URI is enough
  assert_ok(cli.run({ "--db", self.db, "list" }, { env = { MONGOSTORE_URI = helper.uri() } }))
  -- `--` ends the options: what follows is an id even when it looks like one
  assert_failed(self:run({ "show", "--", "--json" }), "no such execution")
end

function TestCli:test_control_commands_say_when_the_charts_are_missing()
  self.engine:start("cli_flow", { id = "f-1" })
  for _, c in ipairs { { "send", "f-1", "Begin" }, { "cancel", "f-1" }, { "terminate", "f-1" }, { "suspend", "f-1" },
                       { "resume", "f-1" }, { "recover" }, { "start", "cli_flow" } } do
    local r = self:run(c)
    assert_usage(r, "--charts MODULE")
  end
  -- a charts module that lacks the execution's chart: the operation fails, naming it
  local r = cli.run(cli.concat(cli.base(self.db, { "--charts", cli.root .. "/spec/fixtures/cli/polite_only.lua" }),
    { "send", "f-1", "Begin" }))
  assert_failed(r, "cli_flow")
  lu.assertStrContains(r.err, "cli_polite")
  lu.assertEquals(self.store:load("f-1").active_path, "Idle")
  -- a module name found on package.path works as well as a file, and so does MONGOSTORE_CHARTS
  r = cli.run(cli.concat(cli.base(self.db, { "--charts", cli.charts_module }), { "send", "f-1", "Begin" }))
  assert_ok(r)
  r = cli.run(cli.concat(cli.base(self.db), { "send", "f-1", "Finish" }),
    { env = { MONGOSTORE_CHARTS = cli.charts_module } })
  assert_ok(r)
  lu.assertEquals(self.store:load("f-1").status, "DONE")
  -- a module that is not there, or returns no chart
  assert_usage(cli.run(cli.concat(cli.base(self.db, { "--charts", "no.such.module" }), { "recover" })), "no.such.module")
  assert_usage(cli.run(cli.concat(cli.base(self.db, { "--charts", "helpers" }), { "recover" })), "no chart")
end

function TestCli:test_a_server_that_does_not_answer_is_a_failure()
  local r = cli.run({ "--uri", "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=200", "--wait", "0", "list" })
  assert_failed(r, "cannot connect")
  r = cli.run({ "--uri", "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=200", "--wait", "0", "doctor" })
  assert_failed(r, "cannot connect")
end

------------------------------------------------------------------------
-- list

-- With --json a failure is also the library's failure shape on stdout,
-- { message, code, detail }, for a program that reads it; without, stdout
-- stays empty.
function TestCli:test_a_failure_with_json_prints_message_code_and_detail()
  local r = self:run({ "show", "no-such-execution", "--json" })
  assert_failed(r, "no-such-execution")
  local v, err = ms.json.decode(r.out)
  lu.assertNotNil(v, "not JSON: " .. tostring(err) .. ": " .. r.out)
  lu.assertEquals(v.code, "not_found")
  lu.assertStrContains(v.message, "show no-such-execution")
  lu.assertIs(v.detail, ms.null)
  r = self:run({ "list", "--json", "--cursor", "c3.forged.cursor" })
  assert_failed(r, "cursor")
  v = ms.json.decode(r.out)
  lu.assertEquals(v.code, "invalid")
  r = self:run({ "list", "--json", "--status", "NOPE" })
  assert_usage(r, "NOPE")
  lu.assertEquals(ms.json.decode(r.out).code, "usage")
  r = self:run({ "show", "no-such-execution" })
  assert_failed(r)
  lu.assertEquals(r.out, "", "no JSON without --json")
end

function TestCli:test_list_filters_pages_and_prints_json()
  local want_flow, want_all = {}, {}
  for i = 1, 7 do
    local id = string.format("f-%02d", i)
    assert(self.engine:start("cli_flow", { id = id }))
    want_flow[#want_flow + 1] = id
    want_all[#want_all + 1] = id
  end
  assert(self.engine:start("cli_fork", { id = "k-1" }))
  assert(self.engine:send("k-1", { kind = "Begin" }))
  self.engine:recover()
  assert(self.engine:send("f-01", { kind = "Begin" }))
  assert(self.engine:send("f-01", { kind = "Finish" }))
  want_all[#want_all + 1] = "k-1"
  local children = {}
  for _, s in ipairs(self.store:list_executions{ definition_id = "cli_fork" }.items) do
    if s.parent_id then children[#children + 1] = s.id end
  end
  lu.assertEquals(#children, 2)

  -- text: a header, a row per execution, a count
  local r = self:run({ "list" })
  assert_ok(r)
  local l = lines(r.out)
  lu.assertStrMatches(l[1], "^ID%s+CHART%s+STATUS%s+OUTCOME%s+ACTIVE%s+VER%s+PARENT%s+FINISHED$")
  lu.assertEquals(#l, 1 + 10 + 1)
  lu.assertEquals(l[#l], "10 executions")
  local f01 = self.store:load("f-01")
  lu.assertStrMatches(r.out, ".*\nf%-01%s+cli_flow%s+DONE%s+success%s+Done%s+" .. f01.version ..
    "%s+%-%s+%d%d%d%d%-%d%d%-%d%dT[^\n]*\n.*")
  lu.assertNotStrContains(r.out, "\r")

  -- --json, --roots, --definition, --status (repeated and comma-separated)
  local v = json(self:run({ "list", "--json", "--roots" }))
  lu.assertEquals(ids_of(v.items), want_all)
  lu.assertIs(v.next_cursor, ms.null)
  v = json(self:run({ "list", "--json", "--definition", "cli_flow" }))
  lu.assertEquals(ids_of(v.items), want_flow)
  v = json(self:run({ "--json", "list", "--definition", "cli_flow", "--status", "running" }))
  lu.assertEquals(#v.items, 6)
  for _, s in ipairs(v.items) do
    lu.assertEquals(s.status, "RUNNING")
    lu.assertEquals(s.definition_id, "cli_flow")
  end
  v = json(self:run({ "list", "--json", "--status", "DONE,RUNNING", "--definition", "cli_flow" }))
  lu.assertEquals(#v.items, 7)
  v = json(self:run({ "list", "--json", "--status", "DONE", "--status=CANCELLED" }))
  lu.assertEquals(ids_of(v.items), { "f-01" })
  lu.assertEquals(v.items[1].outcome, "success")
  lu.assertEquals(v.items[1].version, f01.version)

  -- paging with the store's cursor: three at a time until there is none
  local seen, cursor, pages = {}, nil, 0
  repeat
    local argv = { "list", "--json", "--limit", "3" }
    if cursor then argv[#argv + 1] = "--cursor"; argv[#argv + 1] = cursor end
    v = json(self:run(argv))
    pages = pages + 1
    lu.assertTrue(#v.items <= 3)
    for _, s in ipairs(v.items) do
      lu.assertNil(seen[s.id], "listed twice: " .. s.id)
      seen[s.id] = true
    end
    cursor = v.next_cursor ~= ms.null and v.next_cursor or nil
  until not cursor
  lu.assertEquals(pages, 4)
  local all = {}
  for id in pairs(seen) do all[#all + 1] = id end
  table.sort(all)
  local want = { table.unpack(want_all) }
  for _, c in ipairs(children) do want[#want + 1] = c end
  table.sort(want)
  lu.assertEquals(all, want)

  -- the text form says where the next page starts, and that cursor works
  r = self:run({ "list", "--limit", "4" })
  assert_ok(r)
  local next_cursor = r.out:match("\nmore: %-%-cursor (%S+)\n$")
  lu.assertNotNil(next_cursor, r.out)
  v = json(self:run({ "list", "--json", "--limit", "4", "--cursor", next_cursor }))
  lu.assertEquals(#v.items, 4)
  -- a cursor issued for other filters, or made up, is refused by the store
  assert_failed(self:run({ "list", "--limit", "4", "--cursor", next_cursor, "--definition", "cli_flow" }), "cursor")
  assert_failed(self:run({ "list", "--cursor", "c2.made.up" }), "cursor")

  -- --all walks every page; no progress bar on a pipe
  r = self:run({ "list", "--all", "--limit", "2" })
  assert_ok(r)
  lu.assertStrContains(r.out, "\n10 executions\n")
  lu.assertNotStrContains(r.out, "more:")
  lu.assertNotStrContains(r.out, "\r")
  lu.assertNotStrContains(r.out, "listing")
end

------------------------------------------------------------------------
-- show

function TestCli:test_show_prints_the_execution_its_children_and_its_trace()
  assert(self.engine:start("cli_fork", { id = "k-1", context = { n = 2, who = "ann" } }))
  assert(self.engine:send("k-1", { kind = "Begin", id = "evt-begin" }))
  self.engine:recover()
  local exe = self.store:load("k-1")
  local child_ids = {}
  for cid in pairs(exe.children) do child_ids[#child_ids + 1] = cid end
  table.sort(child_ids)
  lu.assertEquals(#child_ids, 2)
  assert(self.engine:send(child_ids[1], { kind = "GoA" }))

  local r = self:run({ "show", "k-1" })
  assert_ok(r)
  lu.assertStrMatches(r.out, "^execution\nFIELD%s+VALUE\nid%s+k%-1\ndefinition_id%s+cli_fork\nstatus%s+RUNNING\n.*")
  lu.assertStrMatches(r.out, ".*\ncontext%s+{[^\n]*\"who\":\"ann\"[^\n]*}\n.*")
  lu.assertStrContains(r.out, "\nchildren (2)\n")
  local a, b = self.store:load(child_ids[1]), self.store:load(child_ids[2])
  lu.assertEquals(a.status, "DONE")
  local function quoted(x) return (x:gsub("%p", "%%%0")) end
  lu.assertStrMatches(r.out, ".*\n" .. quoted(child_ids[1]) .. "%s+Fork%.A%s+DONE%s+" .. quoted(a.active_path) ..
    "%s+success%s+%a+\n.*")
  lu.assertStrMatches(r.out, ".*\n" .. quoted(child_ids[2]) .. "%s+Fork%.B%s+RUNNING%s+" .. quoted(b.active_path) ..
    "%s+%-%s+no\n.*")
  lu.assertStrContains(r.out, "\ntrace (")
  lu.assertStrMatches(r.out, ".*\n#%s+AT%s+EVENT%s+FROM%s+TO%s+STATUS%s+ACTIONS%s+ERROR\n.*")
  lu.assertStrMatches(r.out, ".*\n0%s+%d[^\n]*%s+Start%s+%-%s+Idle%s+RUNNING.*")
  lu.assertStrMatches(r.out, ".*\n1%s+%d[^\n]*%s+Begin%s+Idle%s+Fork%s+RUNNING.*")

  local v = json(self:run({ "show", "k-1", "--json" }))
  lu.assertEquals(v.execution.id, "k-1")
  lu.assertEquals(v.execution.version, exe.version)
  lu.assertEquals(v.execution.context, { n = 2, who = "ann" })
  lu.assertEquals(#v.children, 2)
  lu.assertEquals(v.children[1].id, child_ids[1])
  lu.assertEquals(v.children[1].status, "DONE")
  lu.assertEquals(v.children[2].root_path, "Fork.B")
  local trace = self.store:read_trace("k-1")
  lu.assertEquals(#v.trace, #trace)
  for i, s in ipairs(trace) do
    lu.assertEquals(v.trace[i].event, s.event)
    lu.assertEquals(v.trace[i].event_id, s.event_id)
    lu.assertEquals(v.trace[i].to, s.to)
  end
  -- --last keeps the newest steps
  v = json(self:run({ "show", "k-1", "--json", "--last", "1" }))
  lu.assertEquals(#v.trace, 1)
  lu.assertEquals(v.trace[1].event_id, trace[#trace].event_id)

  assert_failed(self:run({ "show", "nobody" }), "no such execution")
end

------------------------------------------------------------------------
-- start, send and the control commands

function TestCli:test_start_and_send_apply_once_per_event_id()
  local r = self:run_charts({ "start", "cli_flow", '{"total": 30}', "--id", "o-1" })
  assert_ok(r)
  lu.assertEquals(r.out, "start o-1: created; now RUNNING at Idle\n")
  lu.assertEquals(self.store:load("o-1").context, { total = 30 })
  r = self:run_charts({ "start", "cli_flow", "--id", "o-1" })
  assert_ok(r)
  lu.assertStrContains(r.out, "existed already")
  assert_failed(self:run_charts({ "start", "cli_fork", "--id", "o-1" }), "cli_flow")
  assert_failed(self:run_charts({ "start", "no_chart" }), "no_chart")

  r = self:run_charts({ "send", "o-1", "Begin", '{"by": "ops"}', "--event-id", "evt-1" })
  assert_ok(r)
  local handled = self.store:load("o-1").processed_events
  lu.assertStrMatches(r.out, "^send Begin %(event evt%-1%) to o%-1: applied; now RUNNING at Working\n$")
  local v = json(self:run_charts({ "send", "o-1", "Begin", "--event-id", "evt-1", "--json" }))
  lu.assertEquals(v.result, "duplicate")
  lu.assertEquals(v.active_path, "Working")
  local exe = self.store:load("o-1")
  lu.assertEquals(exe.processed_events, handled)
  lu.assertEquals(exe.version, 2)
  local trace = self.store:read_trace("o-1")
  lu.assertEquals(trace[#trace].event_id, "evt-1")

  -- a kind the chart does not take from outside needs --any-kind
  assert_failed(self:run_charts({ "send", "o-1", "Timeout" }), "not an external event")
  assert_failed(self:run_charts({ "send", "nobody", "Begin" }), "no such execution")
  -- data from stdin and from a file
  r = self:run_charts({ "send", "o-1", "Finish", "-" }, { stdin = '{"from": "stdin"}' })
  assert_ok(r)
  lu.assertEquals(self.store:load("o-1").status, "DONE")
  assert_usage(self:run_charts({ "send", "o-1", "Finish", "[1, 2]" }), "JSON object")
  assert_usage(self:run_charts({ "send", "o-1", "Finish", "{nope" }), "not JSON")
  assert_usage(self:run_charts({ "send", "o-1", "Finish", "@/no/such/file.json" }), "cannot read")
  assert_usage(self:run_charts({ "start", "cli_flow", "--priority", "9" }), "--priority")
end

function TestCli:test_suspend_resume_cancel_terminate()
  assert(self.engine:start("cli_flow", { id = "s-1" }))
  local r = self:run_charts({ "suspend", "s-1" })
  assert_ok(r)
  lu.assertEquals(r.out, "suspend s-1: applied; now SUSPENDED\n")
  assert_ok(self:run_charts({ "send", "s-1", "Begin" }))
  lu.assertEquals(self.store:load("s-1").active_path, "Idle") -- held while suspended
  lu.assertEquals(#self.store:load("s-1").deferred, 1)
  r = self:run_charts({ "resume", "s-1" })
  assert_ok(r)
  lu.assertStrContains(r.out, "now RUNNING")
  lu.assertEquals(self.store:load("s-1").active_path, "Working")

  -- cooperative: the chart's own Cancel transition
  assert(self.engine:start("cli_polite", { id = "p-1" }))
  local v = json(self:run_charts({ "cancel", "p-1", "--json" }))
  lu.assertEquals(v.failed, 0)
  lu.assertEquals(v.results[1].result, "applied")
  local exe = self.store:load("p-1")
  lu.assertEquals(exe.active_path, "Aborted")
  lu.assertEquals(exe.outcome, "aborted")
  -- not cooperative: ends CANCELLED at once
  assert(self.engine:start("cli_flow", { id = "c-1" }))
  assert_ok(self:run_charts({ "cancel", "c-1" }))
  lu.assertEquals(self.store:load("c-1").status, "CANCELLED")
  assert(self.engine:start("cli_polite", { id = "t-1" }))
  r = self:run_charts({ "terminate", "t-1" })
  assert_ok(r)
  lu.assertEquals(self.store:load("t-1").status, "CANCELLED")
  lu.assertEquals(self.store:load("t-1").active_path, "Busy") -- no Cancel transition taken, no hook

  -- several at once, and a selection; any failure makes the exit code 1
  for i = 1, 5 do assert(self.engine:start("cli_flow", { id = "b-" .. i })) end
  r = self:run_charts({ "suspend", "b-1", "b-2", "nobody" })
  lu.assertEquals(r.code, 1, r.err)
  lu.assertStrContains(r.out, "suspend: 2 applied, 0 duplicate, 1 failed (of 3)")
  lu.assertStrContains(r.err, "nobody")
  lu.assertNotStrContains(r.out, "\r")
  r = self:run_charts({ "terminate", "--definition", "cli_flow", "--status", "RUNNING" })
  assert_ok(r)
  lu.assertEquals(r.out, "terminate: 4 applied, 0 duplicate, 0 failed (of 4)\n") -- b-3..b-5 and s-1
  for i = 1, 5 do
    local s = self.store:load("b-" .. i).status
    lu.assertEquals(s, i <= 2 and "SUSPENDED" or "CANCELLED")
  end
  lu.assertEquals(self.store:load("s-1").status, "CANCELLED")
  assert_usage(self:run_charts({ "cancel", "b-1", "--definition", "cli_flow" }), "not both")
  assert_usage(self:run_charts({ "cancel", "--status", "RUNNING" }), "--definition")
end

------------------------------------------------------------------------
-- recover, timers, outbox

function TestCli:test_recover_timers_and_outbox()
  -- a fork whose spawns are pending: recover creates the children
  assert(self.engine:start("cli_fork", { id = "k-1" }))
  assert(self.engine:send("k-1", { kind = "Begin" }))
  lu.assertEquals(#self.store:pending_spawns(), 2)
  local v = json(self:run({ "outbox", "--json" }))
  lu.assertEquals(v.spawns, 2)
  lu.assertEquals(v.total, 0)
  local r = self:run_charts({ "recover" })
  assert_ok(r)
  lu.assertStrMatches(r.out, "^recover: %d+ items? handled in %d+ pass[es]*\n$")
  lu.assertNotStrContains(r.out, "\r")
  lu.assertEquals(#self.store:pending_spawns(), 0)
  lu.assertEquals(#ids_of(self.store:list_executions{ definition_id = "cli_fork" }.items), 3)

  -- cancelling the parent queues Cancel for each child: the backlog by target
  assert_ok(self:run_charts({ "cancel", "k-1" }))
  r = self:run({ "outbox" })
  assert_ok(r)
  lu.assertStrContains(r.out, "outbox: 2 entries for 2 targets\n")
  lu.assertStrMatches(r.out, ".*\nTARGET%s+ENTRIES%s+OLDEST SEQ%s+AGE%s+KINDS%s+FROM\n.*")
  lu.assertStrMatches(r.out, ".*\nk%-1:Fork%.A:%d+%s+1%s+%d+%s+%d+s%s+Cancel%s+k%-1\n.*")
  v = json(self:run({ "outbox", "--json" }))
  lu.assertEquals(v.total, 2)
  lu.assertEquals(#v.targets, 2)
  for _, t in ipairs(v.targets) do
    lu.assertEquals(t.count, 1)
    lu.assertEquals(t.kinds, { "Cancel" })
    lu.assertEquals(t.sources, { "k-1" })
    lu.assertTrue(t.age >= 0)
  end
  v = json(self:run_charts({ "recover", "--json" }))
  lu.assertTrue(v.handled >= 2)
  v = json(self:run({ "outbox", "--json" }))
  lu.assertEquals(v.total, 0)

  -- timers: one armed in the past (an engine whose clock is two hours
  -- behind), one an hour ahead
  local late = engine_mod.new{ store = self.store, charts = charts, now = function() return ms.now() - 7200 end }
  assert(late:start("cli_flow", { id = "late" }))
  assert(late:send("late", { kind = "Begin" }))
  assert(self.engine:start("cli_flow", { id = "soon" }))
  assert(self.engine:send("soon", { kind = "Begin" }))
  r = self:run({ "timers" })
  assert_ok(r)
  lu.assertStrMatches(r.out, "^due: 1\nEXECUTION%s+PATH%s+FIRE AT%s+OVERDUE\nlate%s+Working%s+%d[^\n]+%s+%d+[dhms][%dhms]*\n\nnext: 1\n" ..
    "EXECUTION%s+PATH%s+FIRE AT%s+IN\nsoon%s+Working%s+%d[^\n]+%s+%d+[dhms][%dhms]*\n$")
  v = json(self:run({ "timers", "--json" }))
  lu.assertEquals(v.due_count, 1)
  lu.assertEquals(v.next_count, 1)
  lu.assertEquals(v.due[1].execution_id, "late")
  lu.assertTrue(v.due[1].fire_at <= v.now)
  lu.assertEquals(v.next[1].execution_id, "soon")
  lu.assertTrue(v.next[1].fire_at > v.now)
  -- recover fires the due one
  assert_ok(self:run_charts({ "recover" }))
  lu.assertEquals(self.store:load("late").active_path, "TimedOut")
  v = json(self:run({ "timers", "--json" }))
  lu.assertEquals(v.due_count, 0)
  lu.assertEquals(v.next_count, 1)
end

------------------------------------------------------------------------
-- doctor

function TestCli:test_doctor_reports_the_server_and_the_indexes()
  local r = self:run({ "doctor" })
  assert_ok(r)
  lu.assertStrMatches(r.out, "^CHECK%s+RESULT\nserver%s+%S+\nwire version%s+%d+\ntransactions%s+%S.*")
  local v = json(self:run({ "doctor", "--json" }))
  local db = assert(ms.database(helper.uri(), { db = self.db }))
  local info = assert(db:info())
  lu.assertEquals(v.wire_version, info.wire_version)
  lu.assertEquals(v.transactions, info.transactions)
  lu.assertEquals(type(v.server_version), "string")
  lu.assertEquals(v.missing_indexes, 0)
  lu.assertEquals(#v.indexes, 7)
  for _, ix in ipairs(v.indexes) do lu.assertEquals(ix.state, "present", ix.name) end
  lu.assertEquals(v.collections[1].name, "executions")
  lu.assertEquals(v.collections[1].exists, true)

  assert(self.engine:start("cli_flow", { id = "d-1" }))
  assert(self.engine:start("cli_flow", { id = "d-2" }))
  v = json(self:run({ "doctor", "--json" }))
  lu.assertEquals(v.collections[1].documents, 2)

  -- an index dropped behind the store's back is reported, exit 1, until --fix
  assert(db:collection("executions"):drop_index("next_fire_at"))
  r = self:run({ "doctor" })
  lu.assertEquals(r.code, 1, r.err)
  lu.assertStrMatches(r.out, ".*\nnext_fire_at%s+next_fire_at%s+missing%s+the timer sweep\n.*")
  lu.assertStrContains(r.out, "1 index is missing")
  v = ms.json.decode(r.code == 1 and self:run({ "doctor", "--json" }).out)
  lu.assertEquals(v.missing_indexes, 1)
  r = self:run({ "doctor", "--fix" })
  assert_ok(r)
  lu.assertNotStrContains(r.out, "missing")

  -- another prefix: its own collections, listed and checked apart
  local other = helper.connect({ db = self.db, prefix = "hx" })
  local eng = engine_mod.new{ store = other, charts = charts, log = function() end }
  assert(eng:start("cli_flow", { id = "in-hx" }))
  v = json(self:run({ "list", "--json", "--prefix", "hx" }))
  lu.assertEquals(ids_of(v.items), { "in-hx" })
  v = json(self:run({ "doctor", "--json", "--prefix", "hx" }))
  lu.assertEquals(v.collections[1].name, "hx_executions")
  lu.assertEquals(v.collections[1].documents, 1)
  lu.assertEquals(v.missing_indexes, 0)
  other:close()

  -- another prefix: nothing there yet
  v = ms.json.decode(self:run({ "doctor", "--json", "--prefix", "other" }).out)
  lu.assertEquals(v.collections[1].name, "other_executions")
  lu.assertEquals(v.collections[1].exists, false)
  lu.assertEquals(v.missing_indexes, 7)
  db:close()
end

------------------------------------------------------------------------
-- render

-- Only a .lua file or a module name is run as code: a chart.json (here
-- holding Lua that would leave a mark) is refused, and nothing of it runs.
function TestCli:test_render_runs_no_file_but_lua_as_code()
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p '" .. dir .. "'"))
  local mark = dir .. "/ran"
  local code = "io.open('" .. mark .. "', 'w'):close() return require('mongostore.chart').define{ id = 'x', " ..
    "initial = 'A', states = { { 'A' } } }"
  for _, name in ipairs { "chart.json", "chart.stm", "chart.txt", "chart" } do
    local f = assert(io.open(dir .. "/" .. name, "w"))
    f:write(code)
    f:close()
    assert_usage(cli.run({ "render", dir .. "/" .. name, "--format", "dot" }), "only a .lua file or a module name")
  end
  assert_usage(cli.run({ "render", "chart.json", "--format", "dot" }), "a .json file is not code")
  lu.assertNil(io.open(mark, "r"), "a file that is not .lua ran as code")
  os.execute("rm -rf '" .. dir .. "'")
end

function TestCli:test_render_draws_a_chart_or_says_why_not()
  local file = cli.root .. "/spec/fixtures/cli/one_chart.lua"
  if type(diagram.to_dot) ~= "function" then
    -- before the diagrams land: a clear failure, not a traceback
    assert_failed(cli.run({ "render", file, "--format", "dot" }), "not available")
    return
  end
  local r = cli.run({ "render", file, "--format", "dot" })
  assert_ok(r)
  lu.assertEquals(r.out, diagram.to_dot(dofile(file)) .. (diagram.to_dot(dofile(file)):sub(-1) == "\n" and "" or "\n"))
  r = cli.run({ "render", file, "--format", "mermaid" })
  assert_ok(r)
  lu.assertStrContains(r.out, "Paid")
  r = cli.run({ "render", file, "--format", "svg" })
  assert_ok(r)
  lu.assertStrContains(r.out, "<svg")
  lu.assertStrContains(r.out, "Paid")
  -- a list of charts: --id picks one
  assert_usage(cli.run({ "render", cli.charts_file, "--format", "dot" }), "--id")
  r = cli.run({ "render", cli.charts_module, "--format", "dot", "--id", "cli_fork" })
  assert_ok(r)
  lu.assertStrContains(r.out, "GoA")
  local out = os.tmpname()
  assert_ok(cli.run({ "render", file, "--format", "mermaid", "--output", out }))
  lu.assertStrContains(cli.read_file(out), "Paid")
  os.remove(out)

  -- an execution's place and path: the chart from --charts, drawn as
  -- diagram.to_mermaid draws it given the execution, its children and its trace
  assert(self.engine:start("cli_fork", { id = "k-1" }))
  assert(self.engine:send("k-1", { kind = "Begin" }))
  self.engine:recover()
  local exes = { self.store:load("k-1") }
  local cids = {}
  for cid in pairs(exes[1].children) do cids[#cids + 1] = cid end
  table.sort(cids)
  for _, cid in ipairs(cids) do exes[#exes + 1] = self.store:load(cid) end
  local fork
  for _, c in ipairs(charts) do if c.id == "cli_fork" then fork = c end end
  local want = diagram.to_mermaid(fork, { execution = exes, trace = self.store:read_trace("k-1") })
  r = self:run_charts({ "render", "--execution", "k-1", "--format", "mermaid" })
  assert_ok(r)
  lu.assertEquals(r.out, want .. (want:sub(-1) == "\n" and "" or "\n"))
  lu.assertNotEquals(r.out, cli.run({ "render", cli.charts_module, "--id", "cli_fork", "--format", "mermaid" }).out)
  assert_failed(self:run_charts({ "render", "--execution", "nobody", "--format", "dot" }), "no such execution")
end

------------------------------------------------------------------------
-- hostile input

function TestCli:test_hostile_ids_and_payloads()
  -- spaces, quotes, a shell's metacharacters: one id, shown as it is
  local odd = "a b \"c\" 'd' $(x) `y` ; | *"
  local r = self:run_charts({ "start", "cli_flow", "--id", odd })
  assert_ok(r)
  lu.assertNotNil(self.store:load(odd))
  r = self:run({ "show", odd })
  assert_ok(r)
  lu.assertStrContains(r.out, odd)
  local v = json(self:run({ "list", "--json" }))
  lu.assertEquals(v.items[1].id, odd)
  assert_ok(self:run_charts({ "send", odd, "Begin" }))
  lu.assertEquals(self.store:load(odd).active_path, "Working")

  -- terminal escapes in an id never reach the terminal raw
  local esc = "red\27[31m\27]0;title\7-id"
  assert_ok(self:run_charts({ "start", "cli_flow", "--id", esc }))
  r = self:run({ "list" })
  assert_ok(r)
  lu.assertNotStrContains(r.out, "\27")
  lu.assertNotStrContains(r.out, "\7")
  lu.assertStrContains(r.out, "red\\x1B[31m")
  r = self:run({ "show", esc })
  assert_ok(r)
  lu.assertNotStrContains(r.out, "\27")
  v = json(self:run({ "show", esc, "--json" }))
  lu.assertEquals(v.execution.id, esc) -- JSON carries it exactly

  -- not UTF-8: refused by the store, the message stays printable UTF-8
  local bad = "caf\xE9 \xFF\xFE"
  r = self:run({ "show", bad })
  assert_failed(r, "UTF-8")
  lu.assertNotNil(utf8.len(r.err))
  lu.assertStrContains(r.err, "\\xE9")
  r = self:run_charts({ "send", odd, "Fin\xFFish", "--any-kind" })
  assert_failed(r)
  lu.assertNotNil(utf8.len(r.err))
  r = self:run_charts({ "send", odd, "Finish", '{"k": "\xFF"}' })
  lu.assertTrue(r.code == 1 or r.code == 2, r.err)
  lu.assertNotNil(utf8.len(r.err))
  lu.assertEquals(#lines(r.err), r.code == 2 and 2 or 1)
  lu.assertEquals(self.store:load(odd).active_path, "Working")

  -- huge JSON: 100 KiB on the command line is taken, 2 MiB from a file is
  -- refused by the engine's max_event_bytes, nothing written
  local big = '{"blob": "' .. string.rep("x", 100 * 1024) .. '"}'
  assert_ok(self:run_charts({ "send", odd, "Begin", big, "--any-kind" }))
  local path = os.tmpname()
  local f = assert(io.open(path, "wb"))
  f:write('{"blob": "', string.rep("y", 2 * 1024 * 1024), '"}')
  f:close()
  local before = self.store:load(odd).version
  r = self:run_charts({ "send", odd, "Finish", "@" .. path })
  assert_failed(r, "max_event_bytes")
  r = self:run_charts({ "send", odd, "Finish", "-" }, { stdin = cli.read_file(path) })
  assert_failed(r, "max_event_bytes")
  os.remove(path)
  lu.assertEquals(self.store:load(odd).version, before)
  -- nested past the JSON codec's depth: a usage error, no traceback
  assert_usage(self:run_charts({ "send", odd, "Finish", string.rep('{"a":', 500) .. "1" .. string.rep("}", 500) }),
    "not JSON")
  -- an empty id
  assert_failed(self:run({ "show", "" }))
end

