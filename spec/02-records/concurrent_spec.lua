-- spec/02-records/concurrent_spec.lua - two real processes saving the same records
-- at the same moment get the same sids: the unique content-id index decides, the
-- loser of each race takes the winner's record (in degraded mode from the duplicate
-- key, with transactions by running its transaction again), and each content is
-- stored once. Runs in the server's mode.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local rawdb = require "helpers.rawdb"

local ok = require("helpers").ok

local K = 30

-- Each process: open, wait for the common start, save K books (each with an
-- author shared by three of them), print "i sid author_sid" per book.
local CHILD = [[
local ms = require "mongostore"
local records = require "mongostore.records"
local Author = records.define { name = "author", fields = { name = "string" } }
local Book = records.define { name = "book", dedup = "value", fields = { title = "string", n = "integer" },
                              refs = { author = Author } }
local db = assert(ms.database(os.getenv("URI"), { db = os.getenv("DB"), wait = 10 }))
local store = assert(records.open(db, { types = { Book }, log = function() end }))
local start = tonumber(os.getenv("START"))
while ms.now() < start do ms.sleep(0.001) end
for i = 1, tonumber(os.getenv("K")) do
  local sid, err, code = store:save(Book, { title = "book " .. i, n = i, author = { name = "author " .. (i % 10) } })
  if not sid then print("FAIL " .. i .. " " .. tostring(err) .. " " .. tostring(code)) os.exit(1) end
  local b = assert(store:fetch(Book, sid))
  print(i .. " " .. sid .. " " .. b.author._sid)
end
store:close()
]]

TestRecordsConcurrent = {}

function TestRecordsConcurrent:test_two_processes_same_records_same_sids()
  local name = helper.fresh_db("rconc")
  local db = ok(ms.database(helper.uri(), { db = name, wait = 10 }))
  -- the store exists (indexes, fingerprints) before the race
  local records = require "mongostore.records"
  local Author = records.define { name = "author", fields = { name = "string" } }
  local Book = records.define { name = "book", dedup = "value", fields = { title = "string", n = "integer" },
                                refs = { author = Author } }
  ok(records.open(db, { types = { Book }, log = function() end })):close()
  local env = { URI = helper.uri(), DB = name, K = tostring(K), START = string.format("%.3f", ms.now() + 1.5) }
  local a, b = helper.spawn(CHILD, env), helper.spawn(CHILD, env)
  local out_a, st_a = a.wait()
  local out_b, st_b = b.wait()
  lu.assertEquals(st_a, 0, out_a)
  lu.assertEquals(st_b, 0, out_b)
  local function parse(out)
    local m = {}
    for i, sid, asid in out:gmatch("(%d+) (%d+) (%d+)\n") do m[tonumber(i)] = { tonumber(sid), tonumber(asid) } end
    return m
  end
  local ma, mb = parse(out_a), parse(out_b)
  for i = 1, K do
    lu.assertNotNil(ma[i], out_a)
    lu.assertEquals(ma[i], mb[i], "book " .. i)
  end
  lu.assertEquals(rawdb.count(name, "records.book"), K)
  lu.assertEquals(rawdb.count(name, "records.author"), 10)
  db:close()
end
