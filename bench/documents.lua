-- bench/documents.lua - the document rows done by mongostore's document API
-- (mongostore.database(uri, { db = }):collection(name)): insert_many, find
-- and decode, update_one, bulk_write; one round per run, as its contenders.
--
-- usage: lua5.4 bench/documents.lua <uri> <db> <label> <round> [n] [updates] [bulk]
--
-- The same sizes and document shape as bench/documents_limit.c (libmongoc
-- alone), bench/documents_pymongo.py and bench/documents_node.js: twelve
-- fields, _id and bytes int64 (plain Lua integers), views and meta.words
-- int32 (mongostore.int32), a double, a bool, a date (mongostore.date), an
-- array of three strings and a nested document. Documents are built as Lua
-- tables before the clock starts; decoding is cursor:each() with every field
-- of every document visited, nested ones too. After an untimed warm-up
-- round at a tenth of the sizes, prints "RESULT docs.<label>.r<round>.<op>_ms
-- <ms>" per operation (wall time), <op>_cpu_ms (the process's CPU time over
-- the same span) and docs.<label>.fields / .version / .shape.
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local root = here .. "/.."
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path
package.cpath = root .. "/?.so;" .. package.cpath

local ms = require "mongostore"
local core = require "mongostore.core"

local format = string.format

local BODY = "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et " ..
  "dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut aliquip."
local TAGS = { "news", "tech", "lua", "mongodb", "bench" }
local STATUS = { "draft", "published", "archived" }
local BASE_DATE = 1700000000000
local BIG = 5000000000

-- The value constructors (the core's, until the face has them). Without them
-- the row still runs, on a shape that says what it lacks (report.lua prints
-- docs.<label>.shape).
local int32 = ms.int32 or core.int32
local date = ms.date or core.date
local shape_note = (int32 and date) and "same" or
  format("mongostore.%s missing: those fields sent as int64", int32 and "date" or (date and "int32" or "int32 and date"))
int32 = int32 or function(n) return n end
date = date or function(n) return n end

local function make_doc(i)
  return {
    _id = i,
    title = format("Article number %d about documents", i),
    author = format("author-%d", i % 97),
    body = BODY,
    status = STATUS[i % 3 + 1],
    views = int32(i % 1000),
    bytes = BIG + i,
    score = i + 0.5,
    published = i % 2 == 0,
    created = date(BASE_DATE + i * 1000),
    tags = ms.array { TAGS[i % 5 + 1], TAGS[(i + 1) % 5 + 1], TAGS[(i + 2) % 5 + 1] },
    meta = { lang = "en", words = int32(100 + i % 50), source = format("feed-%d", i % 7) },
  }
end

local function update_id(k, n, offset)
  return 1 + ((k - 1) * 7 + offset) % n
end

local function make_update(k)
  return { ["$set"] = { score = k + 0.25, status = "edited" }, ["$inc"] = { views = int32(1) } }
end

-- Every field of a decoded document, recursively (arrays too); the count.
local function visit(t)
  local fields = 0
  for _, v in pairs(t) do
    fields = fields + 1
    if type(v) == "table" then fields = fields + visit(v) end
  end
  return fields
end

local function check(what, res, msg, code)
  if res == nil then error(format("%s: %s (%s)", what, tostring(msg), tostring(code)), 0) end
  if type(res) == "table" and type(res.errors) == "table" and #res.errors > 0 then
    local e = res.errors[1]
    error(format("%s: %d errors, the first at %s: %s", what, #res.errors, tostring(e.index), tostring(e.message)), 0)
  end
  return res
end

-- Wall time (ms.now) and this process's CPU time (os.clock) of each timed
-- span, in order: the CPU time is what the client itself spent, whatever the
-- server and the rest of a shared machine were doing meanwhile.
local clock = { wall = {}, cpu = {} }
function clock.start()
  clock.t0, clock.c0 = ms.now(), os.clock()
end
function clock.stop()
  clock.wall[#clock.wall + 1] = (ms.now() - clock.t0) * 1e3
  clock.cpu[#clock.cpu + 1] = (os.clock() - clock.c0) * 1e3
end

local function round_of(db, name, n, updates, bulk)
  local c = db:collection(name)
  c:drop()
  clock.wall, clock.cpu = {}, {}
  local docs = {}
  for i = 1, n do docs[i] = make_doc(i) end
  clock.start()
  check("insert_many", c:insert_many(docs, { ordered = false }))
  clock.stop()

  clock.start()
  local fields, count = 0, 0
  local cursor = check("find", c:find({}))
  for doc in cursor:each() do
    fields = fields + visit(doc)
    count = count + 1
  end
  clock.stop()
  if count ~= n then error(format("find returned %d documents, expected %d", count, n), 0) end

  clock.start()
  for k = 1, updates do
    check("update_one", c:update_one({ _id = update_id(k, n, 0) }, make_update(k)))
  end
  clock.stop()

  local ops = {}
  for k = 1, bulk do
    ops[k] = { update_one = { filter = { _id = update_id(k, n, 3) }, update = make_update(k) } }
  end
  clock.start()
  check("bulk_write", c:bulk_write(ops, { ordered = false }))
  clock.stop()
  c:drop()
  return clock.wall, clock.cpu, fields
end

local uri, dbname, label, round = arg[1], arg[2], arg[3], arg[4]
if not round or arg[8] then
  io.stderr:write("usage: lua5.4 bench/documents.lua <uri> <db> <label> <round> [n] [updates] [bulk]\n")
  os.exit(2)
end
local n, updates, bulk = tonumber(arg[5] or 10000), tonumber(arg[6] or 1000), tonumber(arg[7] or 1000)
if type(ms.database) ~= "function" then
  io.stderr:write("documents.lua: this mongostore has no mongostore.database (the document API)\n")
  os.exit(1)
end
local db = assert(ms.database(uri, { db = dbname, wait = 30 }))
round_of(db, "warm", n // 10 + 1, updates // 10 + 1, bulk // 10 + 1)
local times, cpu, fields = round_of(db, "docs", n, updates, bulk)
local OPS = { "insert_many", "find", "update_one", "bulk_write" }
local parts = {}
for i, op in ipairs(OPS) do
  parts[i] = format("%s %.1f ms (cpu %.1f)", op, times[i], cpu[i])
  io.stdout:write(format("RESULT docs.%s.r%s.%s_ms %.2f\n", label, round, op, times[i]))
  io.stdout:write(format("RESULT docs.%s.r%s.%s_cpu_ms %.2f\n", label, round, op, cpu[i]))
end
io.stderr:write(format("documents.lua %s round %s: %s (%d fields decoded)\n", label, round, table.concat(parts, " "),
  fields))
io.stdout:write(format("RESULT docs.%s.fields %d\n", label, fields))
io.stdout:write(format("RESULT docs.%s.version mongostore %s, %s\n", label, tostring(ms._VERSION),
  jit and jit.version or _VERSION))
io.stdout:write(format("RESULT docs.%s.shape %s\n", label, shape_note))
if db.close then db:close() end
