-- bench/inbox_phases.lua <uri> [--events N] [--passes P] [--db NAME]
-- Where an inbox pass spends its time on one hot execution: N events are
-- queued for it, then P passes are taken step by step (mongostore.inbox's
-- claim, deliver, ack and release), at inbox_group 32 and at 1, trace on as
-- in the OpenResty example. Prints one line per pass and group:
--   PASS group=<g> n=<events> claim=<s> deliver=<s> ack=<s> release=<s>
-- (`tools/with-server lua5.4 bench/inbox_phases.lua '$MONGOSTORE_TEST_URI'`
-- against the test server, or any URI).
local here = arg[0]:match("^(.*)/bench/[^/]*$") or "."
package.path = here .. "/lua/?.lua;" .. here .. "/lua/?/init.lua;" .. package.path
package.cpath = here .. "/?.so;" .. package.cpath

local ms = require "mongostore"
local chart = require "mongostore.chart"
local engine_mod = require "mongostore.engine"
local inbox = require "mongostore.inbox"

local uri = arg[1]
if not uri or uri:sub(1, 1) == "-" then
  io.stderr:write("usage: lua5.4 bench/inbox_phases.lua <uri> [--events N] [--passes P] [--db NAME]\n")
  os.exit(2)
end
local opts = { events = 10000, passes = 3, db = "msbench_phases_" .. tostring(os.time()) }
for i = 2, #arg, 2 do
  local k = arg[i]:match("^%-%-(.+)$")
  if not k or opts[k] == nil then io.stderr:write("inbox_phases.lua: unknown option ", arg[i], "\n") os.exit(2) end
  opts[k] = k == "db" and arg[i + 1] or tonumber(arg[i + 1])
end

-- an event the chart ignores: each is one commit and changes nothing else
local quiet = chart.define{ id = "quiet", initial = "Open", states = { { "Open" } }, transitions = {} }

for _, group in ipairs { 32, 1 } do
  local name = opts.db .. "_g" .. group
  local store = assert(ms.connect(uri, { db = name, wait = 10 }))
  local e = engine_mod.new{ store = store, charts = { quiet }, trace = true, inbox_group = group,
                            log = function() end }
  e:relay_inbox() -- the inbox's indexes
  assert(e:start("quiet", { id = "hot" }))
  for i = 1, opts.events do assert(e:enqueue("hot", { kind = "Nope", id = "q-" .. i })) end
  for _ = 1, opts.passes do
    local t0 = ms.now()
    local claim = assert(inbox.claim(e))
    local t1 = ms.now()
    inbox.deliver(e, claim)
    local t2 = ms.now()
    assert(inbox.ack(e, claim))
    local t3 = ms.now()
    assert(inbox.release(e, claim))
    local t4 = ms.now()
    io.stdout:write(string.format("PASS group=%d n=%d claim=%.3f deliver=%.3f ack=%.3f release=%.3f\n", group,
      #claim.entries, t1 - t0, t2 - t1, t3 - t2, t4 - t3))
  end
  store:close()
  local db = assert(ms.database(uri, { db = name, wait = 10 }))
  assert(db:command({ dropDatabase = 1 }))
  db:close()
end
