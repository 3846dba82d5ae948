-- bench/models.lua - the model rows: the same writes done by mongostore models
-- (require "mongostore.model") and by the bare document API, one contender and one
-- round per run; bench/models_mongoose.js does them with Mongoose.
--
-- usage: lua5.4 bench/models.lua <uri> <db> <model|bare> <round> [n] [saves] [bulk] [updates]
--
-- The rows, on a fresh collection: insert n documents (one insert_many, unordered),
-- load them all, `saves` change-tracked saves of one field (views + 1), one bulk
-- save of `bulk` such deltas on other documents, `updates` atomic updates
-- (views + 1, the document after it returned). Every contender first creates a
-- unique index on { _id, rev } (see round_models). The bare API does what the model
-- sends: created_at/updated_at dates and rev 0 on insert; each save an update_one
-- guarded by _id and rev that sets views and updated_at and increments rev (a
-- matched count of 0 is an error); the bulk save one bulk_write of those
-- update_ones; each atomic update a find_one_and_update returning the new
-- document. The article: title, author, body, status (strings), views (integer),
-- score (double), published (bool), tags (3 strings), created_at, updated_at, rev.
-- Prints "RESULT models.<label>.r<round>.<op>_ms <ms>" per row (wall time) and
-- <op>_cpu_ms (the process's CPU time over the same span), after an untimed
-- warm-up round at a tenth of the sizes; ops: insert, load, save, bulk_save, update.
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local root = here .. "/.."
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path
package.cpath = root .. "/?.so;" .. package.cpath

local ms = require "mongostore"

local format = string.format

local BODY = "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et " ..
  "dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut aliquip."
local TAGS = { "news", "tech", "lua", "mongodb", "bench" }
local STATUS = { "draft", "published", "archived" }

local function make_doc(i)
  return {
    title = format("Article number %d about models", i),
    author = format("author-%d", i % 97),
    body = BODY,
    status = STATUS[i % 3 + 1],
    views = i % 1000,
    score = i + 0.5,
    published = i % 2 == 0,
    tags = ms.array { TAGS[i % 5 + 1], TAGS[(i + 1) % 5 + 1], TAGS[(i + 2) % 5 + 1] },
  }
end

-- The k-th document a row touches, spread over the collection; offset keeps
-- the rows on different documents.
local function pick(k, n, offset)
  return 1 + ((k - 1) * 7 + offset) % n
end

local function check(what, res, msg, code)
  if res == nil then error(format("%s: %s (%s)", what, tostring(msg), tostring(code)), 0) end
  if type(res) == "table" and type(res.errors) == "table" and #res.errors > 0 then
    local e = res.errors[1]
    error(format("%s: %d errors, the first at %s: %s", what, #res.errors, tostring(e.index), tostring(e.message)), 0)
  end
  return res
end

local clock = { wall = {}, cpu = {} }
function clock.start()
  clock.t0, clock.c0 = ms.now(), os.clock()
end
function clock.stop()
  clock.wall[#clock.wall + 1] = (ms.now() - clock.t0) * 1e3
  clock.cpu[#clock.cpu + 1] = (os.clock() - clock.c0) * 1e3
end

local function round_models(db, name, n, saves, bulk, updates)
  local model = require "mongostore.model"
  local ops = model.ops
  local Article = model.define {
    collection = name, name = "Article_" .. name,
    fields = {
      title = { "string", default = "" }, author = "string", body = "string", status = "string",
      views = { "integer", default = 0 }, score = "number", published = "boolean",
      tags = { "array", of = "string", default = {} },
      created_at = "created_at", updated_at = "updated_at", rev = "revision",
    },
    -- the guard of every save, { _id, rev }, as an index: mongo-java-server
    -- looks a filter up in an index only when the index has exactly its keys
    -- (otherwise it scans the collection on every save, for every contender)
    indexes = { { keys = { { "_id", 1 }, { "rev", 1 } }, unique = true } },
    validate_writes = true,
  }
  check("drop", db:collection(name):drop())
  check("registry", model.registry(db, { Article }))
  local list = {}
  for i = 1, n do list[i] = make_doc(i) end

  clock.start()
  check("insert_many", Article:insert_many(list, { ordered = false }))
  clock.stop()

  clock.start()
  local docs = check("find", Article:find():all())
  clock.stop()
  if #docs ~= n then error(format("find returned %d documents, expected %d", #docs, n), 0) end

  clock.start()
  for k = 1, saves do
    local doc = docs[pick(k, n, 0)]
    doc.views = doc.views + 1
    check("save", doc:save())
  end
  clock.stop()

  local batch = {}
  for k = 1, bulk do
    local doc = docs[pick(k, n, 3)]
    doc.views = doc.views + 1
    batch[k] = doc
  end
  clock.start()
  local written = check("bulk_save", Article:bulk_save(batch))
  clock.stop()
  if written ~= bulk then error(format("bulk_save wrote %s, expected %d", tostring(written), bulk), 0) end

  clock.start()
  for k = 1, updates do
    check("update", Article:update(docs[pick(k, n, 5)].id, ops.inc { views = 1 }))
  end
  clock.stop()
  check("drop", db:collection(name):drop())
end

local function round_bare(db, name, n, saves, bulk, updates)
  local c = check("collection", db:collection(name))
  check("drop", c:drop())
  check("create_index", c:create_index({ { "_id", 1 }, { "rev", 1 } }, { unique = true }))
  local list = {}
  for i = 1, n do list[i] = make_doc(i) end

  clock.start()
  local at = ms.date()
  for i = 1, n do
    local d = list[i]
    d.created_at, d.updated_at, d.rev = at, at, 0
  end
  check("insert_many", c:insert_many(list, { ordered = false }))
  clock.stop()

  clock.start()
  local docs = check("find", check("find", c:find({})):all())
  clock.stop()
  if #docs ~= n then error(format("find returned %d documents, expected %d", #docs, n), 0) end

  clock.start()
  for k = 1, saves do
    local doc = docs[pick(k, n, 0)]
    local views, now = doc.views + 1, ms.date()
    local r = check("update_one", c:update_one({ _id = doc._id, rev = doc.rev },
      { ["$set"] = { views = views, updated_at = now }, ["$inc"] = { rev = 1 } }))
    if r.matched ~= 1 then error("update_one: stale", 0) end
    doc.views, doc.updated_at, doc.rev = views, now, doc.rev + 1
  end
  clock.stop()

  local batch = {}
  for k = 1, bulk do batch[k] = docs[pick(k, n, 3)] end
  clock.start()
  local now = ms.date()
  local bops = {}
  for k = 1, bulk do
    local doc = batch[k]
    bops[k] = { update_one = { filter = { _id = doc._id, rev = doc.rev },
      update = { ["$set"] = { views = doc.views + 1, updated_at = now }, ["$inc"] = { rev = 1 } } } }
  end
  local r = check("bulk_write", c:bulk_write(bops, { ordered = false }))
  if r.matched ~= bulk then error(format("bulk_write matched %s, expected %d", tostring(r.matched), bulk), 0) end
  for k = 1, bulk do
    local doc = batch[k]
    doc.views, doc.updated_at, doc.rev = doc.views + 1, now, doc.rev + 1
  end
  clock.stop()

  clock.start()
  for k = 1, updates do
    check("find_one_and_update", c:find_one_and_update({ _id = docs[pick(k, n, 5)]._id },
      { ["$inc"] = { views = 1, rev = 1 }, ["$set"] = { updated_at = ms.date() } }, { new = true }))
  end
  clock.stop()
  check("drop", c:drop())
end

local uri, dbname, label, round = arg[1], arg[2], arg[3], arg[4]
if not round or arg[9] or (label ~= "model" and label ~= "bare") then
  io.stderr:write("usage: lua5.4 bench/models.lua <uri> <db> <model|bare> <round> [n] [saves] [bulk] [updates]\n")
  os.exit(2)
end
local n, saves = tonumber(arg[5] or 10000), tonumber(arg[6] or 1000)
local bulk, updates = tonumber(arg[7] or 1000), tonumber(arg[8] or 1000)
local run = label == "model" and round_models or round_bare
local db = assert(ms.database(uri, { db = dbname, wait = 30 }))
clock.wall, clock.cpu = {}, {}
run(db, "warm", n // 10 + 1, saves // 10 + 1, bulk // 10 + 1, updates // 10 + 1)
clock.wall, clock.cpu = {}, {}
run(db, "articles", n, saves, bulk, updates)
local OPS = { "insert", "load", "save", "bulk_save", "update" }
local parts = {}
for i, op in ipairs(OPS) do
  parts[i] = format("%s %.1f ms (cpu %.1f)", op, clock.wall[i], clock.cpu[i])
  io.stdout:write(format("RESULT models.%s.r%s.%s_ms %.2f\n", label, round, op, clock.wall[i]))
  io.stdout:write(format("RESULT models.%s.r%s.%s_cpu_ms %.2f\n", label, round, op, clock.cpu[i]))
end
io.stderr:write(format("models.lua %s round %s: %s\n", label, round, table.concat(parts, " ")))
io.stdout:write(format("RESULT models.%s.version mongostore %s%s, %s\n", label, tostring(ms._VERSION),
  label == "model" and " models" or " document API", jit and jit.version or _VERSION))
db:close()
