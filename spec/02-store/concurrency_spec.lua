-- spec/02-store/concurrency_spec.lua - several OS processes commit to one
-- execution at once (load, change, commit with one emit, retry on conflict):
-- every version is won exactly once, no update is lost, and the outbox holds
-- exactly one entry per win.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local raw = require "helpers.rawdb"

local PROCS = 4
local WINS_EACH = 25

-- Each worker waits for a common start time (only to make the commits
-- overlap; nothing asserts on timing), then wins WINS_EACH commits.
local WORKER = [[
  local ms = require "mongostore"
  local store, err, code = ms.connect(os.getenv("MONGOSTORE_TEST_URI"), { db = os.getenv("DB"), wait = 10 })
  if not store then print("ERROR connect " .. tostring(err) .. " " .. tostring(code)); os.exit(2) end
  local me, id = os.getenv("ME"), os.getenv("ID")
  local wins, conflicts = tonumber(os.getenv("WINS")), 0
  local t = tonumber(os.getenv("START"))
  while ms.now() < t do ms.sleep(0.005) end
  local won = 0
  while won < wins do
    local exe = store:load(id)
    if not exe then print("ERROR load returned nil"); os.exit(2) end
    local from = exe.version
    exe.context.n = exe.context.n + 1
    local list = exe.context.log
    list[#list + 1] = me
    local evt = ms.uuid()
    local ok, msg, ecode, detail = store:commit(exe, {
      emits = { { target_id = "sink", event = { id = evt, kind = "Tick",
                                                data = { proc = me, version = from + 1, n = exe.context.n } } } },
      processed_event_id = "in-" .. evt,
    })
    if ok then
      if exe.version ~= from + 1 then print("ERROR version " .. exe.version .. " after winning from " .. from); os.exit(2) end
      won = won + 1
      print("WON " .. exe.version .. " " .. evt)
    elseif ecode == "conflict" then
      if exe.version ~= from then print("ERROR loser version " .. exe.version .. " not rolled back to " .. from); os.exit(2) end
      local found = detail and detail.found
      if type(found) ~= "number" or found <= from then print("ERROR conflict found " .. tostring(found) .. " from " .. from); os.exit(2) end
      conflicts = conflicts + 1
    else
      print("ERROR commit " .. tostring(msg) .. " " .. tostring(ecode)); os.exit(2)
    end
  end
  print("DONE " .. me .. " " .. won .. " " .. conflicts)
  store:close()
]]

TestConcurrency = {}

function TestConcurrency:setUp()
  self.store, self.db = helper.connect()
end

function TestConcurrency:tearDown()
  if self.store then self.store:close() end
end

function TestConcurrency:test_processes_committing_to_one_execution()
  local exe = ms.execution { definition_id = "counter", context = { n = 0, log = ms.array {} } }
  lu.assertTrue(self.store:save(exe))
  local start_at = ms.now() + 2
  local procs = {}
  for p = 1, PROCS do
    procs[p] = helper.spawn(WORKER, {
      DB = self.db, ID = exe.id, ME = "p" .. p, WINS = tostring(WINS_EACH),
      START = string.format("%.6f", start_at),
    })
  end

  local versions, events, per_proc = {}, {}, {}
  local total, conflicts = 0, 0
  for p = 1, PROCS do
    local out, status = procs[p].wait()
    lu.assertEquals(status, 0, "worker p" .. p .. " failed:\n" .. out)
    lu.assertNil(out:find("ERROR", 1, true), out)
    local done_me, done_won, done_conflicts = out:match("DONE (%S+) (%d+) (%d+)")
    lu.assertEquals(done_me, "p" .. p, out)
    lu.assertEquals(tonumber(done_won), WINS_EACH)
    conflicts = conflicts + tonumber(done_conflicts)
    per_proc[p] = 0
    for v, evt in out:gmatch("WON (%d+) (%x+)") do
      v = tonumber(v)
      lu.assertNil(versions[v], "version " .. v .. " was won twice")
      versions[v] = "p" .. p
      lu.assertNil(events[evt], "event id " .. evt .. " reported twice")
      events[evt] = v
      total = total + 1
      per_proc[p] = per_proc[p] + 1
    end
    lu.assertEquals(per_proc[p], WINS_EACH, "worker p" .. p .. " reported the wrong number of wins")
  end

  -- each version from 2 to 1 + total was won exactly once: no duplicates, no gaps
  lu.assertEquals(total, PROCS * WINS_EACH)
  for v = 2, total + 1 do
    lu.assertNotNil(versions[v], "nobody won version " .. v)
  end
  local final = self.store:load(exe.id)
  lu.assertEquals(final.version, total + 1)
  lu.assertEquals(raw.doc(self.db, exe.id).version, total + 1)
  -- no lost update: the read-modify-write counter saw every win
  lu.assertEquals(final.context.n, total)
  lu.assertEquals(#final.context.log, total)
  local by_proc = {}
  for _, who in ipairs(final.context.log) do by_proc[who] = (by_proc[who] or 0) + 1 end
  for p = 1, PROCS do lu.assertEquals(by_proc["p" .. p], WINS_EACH) end

  -- the outbox holds exactly one entry per win, each with the version that won
  local outbox = self.store:pending_outbox()
  lu.assertEquals(#outbox, total, "outbox entries lost or duplicated")
  local seen_evt, seen_seq, seen_version = {}, {}, {}
  for i, e in ipairs(outbox) do
    lu.assertNil(seen_evt[e.event.id], "event " .. e.event.id .. " twice in the outbox")
    seen_evt[e.event.id] = true
    lu.assertNil(seen_seq[e.seq], "seq " .. e.seq .. " twice in the outbox")
    seen_seq[e.seq] = true
    if i > 1 then lu.assertTrue(e.seq > outbox[i - 1].seq, "outbox not in seq order") end
    lu.assertNotNil(events[e.event.id], "an outbox event nobody reported winning: " .. e.event.id)
    lu.assertEquals(e.event.data.version, events[e.event.id], "an emit landed with the wrong version")
    lu.assertEquals(e.event.data.proc, versions[e.event.data.version])
    lu.assertEquals(e.event.data.n, e.event.data.version - 1)
    seen_version[e.event.data.version] = true
  end
  for v = 2, total + 1 do lu.assertTrue(seen_version[v], "no outbox entry for version " .. v) end

  -- dedupe marks: exactly one per win (the ids of the last 16 in
  -- `processed`, a digest of each in `dedupe`)
  local doc = raw.doc(self.db, exe.id)
  lu.assertEquals(#doc.processed, math.min(total, 16))
  lu.assertEquals(#doc.dedupe.binary, 8 * total)
  for evt in pairs(events) do lu.assertTrue(self.store:is_processed(exe.id, "in-" .. evt)) end

  -- report how much contention there was (information only)
  print(string.format("  %d commits won, %d conflicts retried", total, conflicts))
end

function TestConcurrency:test_processes_acking_the_outbox_at_once()
  -- one execution with many entries; several processes ack disjoint halves
  -- and overlapping entries: every entry goes, none survives, nothing else moves
  local exe = ms.execution { definition_id = "counter", context = {} }
  local emits = {}
  for i = 1, 40 do emits[i] = { target_id = "t", event = { id = "e" .. i, kind = "K" } } end
  lu.assertTrue(self.store:commit(exe, { emits = emits }))
  local entries = self.store:pending_outbox()
  lu.assertEquals(#entries, 40)
  local seqs = {}
  for i, e in ipairs(entries) do seqs[i] = tostring(e.seq) end
  local start_at = ms.now() + 1.5
  local code = [[
    local ms = require "mongostore"
    local store = assert(ms.connect(os.getenv("MONGOSTORE_TEST_URI"), { db = os.getenv("DB"), wait = 10 }))
    local t = tonumber(os.getenv("START"))
    while ms.now() < t do ms.sleep(0.005) end
    for s in os.getenv("SEQS"):gmatch("%d+") do store:ack_outbox(math.tointeger(tonumber(s))) end
    print("ACKED")
    store:close()
  ]]
  local procs = {}
  for p = 1, PROCS do
    -- each process acks every other entry starting at an offset, so every
    -- entry is acked by two processes at about the same time
    local mine = {}
    for i = 1, #seqs do
      if (i + p) % 2 == 0 then mine[#mine + 1] = seqs[i] end
    end
    procs[p] = helper.spawn(code, { DB = self.db, SEQS = table.concat(mine, " "),
                                    START = string.format("%.6f", start_at) })
  end
  for p = 1, PROCS do
    local out, status = procs[p].wait()
    lu.assertEquals(status, 0, out)
    lu.assertStrContains(out, "ACKED")
  end
  lu.assertEquals(#self.store:pending_outbox(), 0)
  local doc = raw.doc(self.db, exe.id)
  lu.assertEquals(#doc.outbox, 0)
  lu.assertEquals(doc.version, 1)
end
