-- spec/helpers/rawdb.lua - reads (and, for set-up, deletes) raw documents behind
-- the library's back with pymongo, so the store specs can check the exact
-- stored shape and that a failed call wrote nothing.
--
-- Values come back as Lua values built by Python, not by the library's own
-- codec: integers are Lua integers, doubles are floats, BSON arrays are
-- marked with mongostore.array, BSON null is mongostore.null.
local ms = require "mongostore"
local helper = require "helpers"

local M = {}

-- mongo-java-server reports wire version 8 and a current pymongo refuses
-- anything below 9; for plain finds the older protocol is all we need.
local PY = [==[
import os, sys, json, math
try:
    import pymongo, pymongo.common, bson
    from bson.codec_options import CodecOptions
except ImportError as e:
    sys.stderr.write("rawdb: pymongo is not installed: %s\n" % e)
    sys.exit(3)
pymongo.common.MIN_SUPPORTED_WIRE_VERSION = min(pymongo.common.MIN_SUPPORTED_WIRE_VERSION, 6)

def luastr(b):
    out = []
    for c in b:
        if 32 <= c < 127 and c not in (34, 92):
            out.append(chr(c))
        else:
            out.append("\\%03d" % c)
    return '"' + "".join(out) + '"'

def lua(v):
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        if v == -2**63:
            return "math.mininteger"
        if -2**63 < v < 2**63:
            return "(%d)" % v
        return "(%r)" % float(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "(0/0)"
        if math.isinf(v):
            return "(1/0)" if v > 0 else "(-1/0)"
        r = repr(v)
        if "." not in r and "e" not in r and "n" not in r:
            r += ".0"
        return "(%s)" % r
    if isinstance(v, str):
        return luastr(v.encode("utf-8", "surrogateescape"))
    if isinstance(v, (bytes, bytearray)):
        return "BIN(%s)" % luastr(bytes(v))
    if isinstance(v, dict):
        return "{" + ",".join("[%s]=%s" % (luastr(str(k).encode("utf-8", "surrogateescape")), lua(x))
                              for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "A{" + ",".join(lua(x) for x in v) + "}"
    return "OTHER(%s,%s)" % (luastr(type(v).__name__.encode()), luastr(str(v).encode()))

op = os.environ["RAW_OP"]
client = pymongo.MongoClient(os.environ["RAW_URI"], serverSelectionTimeoutMS=10000)
db = client[os.environ["RAW_DB"]]
coll = db[os.environ.get("RAW_COLL") or "executions"]
opts = CodecOptions(unicode_decode_error_handler="surrogateescape")
coll = coll.with_options(codec_options=opts)
arg = os.environ.get("RAW_ARG")
if op == "find":
    out = list(coll.find({}).sort("_id", 1))
elif op == "get":
    out = coll.find_one({"_id": arg})
elif op == "data":
    d = coll.find_one({"_id": arg}, {"data": 1})
    out = None if d is None else json.loads(d["data"])
elif op == "json":
    out = json.loads(arg)
elif op == "collections":
    out = sorted(db.list_collection_names())
elif op == "delete":
    out = coll.delete_one({"_id": arg}).deleted_count
elif op == "unset":
    out = coll.update_one({"_id": arg}, {"$unset": {os.environ["RAW_FIELD"]: ""}}).modified_count
elif op == "indexes":
    out = [ix for ix in coll.list_indexes()]
elif op == "drop":
    client.drop_database(os.environ["RAW_DB"])
    out = True
elif op == "counts":
    out = {n: db[n].count_documents({}) for n in (arg or "executions,counters").split(",")}
elif op == "max_bson":
    out = client.server_info().get("maxBsonObjectSize")
else:
    raise SystemExit("rawdb: unknown op " + op)
sys.stdout.write("return " + lua(out))
sys.stdout.flush()
# skip the client's slow shutdown of its monitor threads
os._exit(0)
]==]

-- The Python with pymongo: MONGOSTORE_PYTHON (tools/run-suites sets it),
-- else the virtualenv tools/pyenv prints (the interop spec's, pinned), else
-- python3 itself, resolved past any version manager's shim (a shim costs a
-- process per call).
local python
local function first_line(cmd)
  local f = io.popen("env -u LD_PRELOAD " .. cmd .. " 2>/dev/null", "r")
  local out = f and f:read("a") or ""
  local ok = f and f:close()
  return ok and out:match("^%s*(.-)%s*$") or ""
end
local function python_command()
  if python then return python end
  local py = os.getenv("MONGOSTORE_PYTHON") or ""
  if py == "" then
    local pyenv = helper.root() .. "/tools/pyenv"
    local f = io.open(pyenv, "r")
    if f then
      f:close()
      py = first_line(helper.shell_quote(pyenv))
    end
  end
  if py == "" then py = first_line("python3 -c 'import sys; print(sys.executable)'") end
  if py == "" then py = "python3" end
  python = helper.shell_quote(py)
  return python
end

local function run(op, db, coll, arg, extra)
  local env = {
    RAW_OP = op, RAW_URI = helper.uri(), RAW_DB = db or "admin",
    RAW_COLL = coll or "", RAW_ARG = arg or "",
  }
  for k, v in pairs(extra or {}) do env[k] = v end
  local envs = ""
  for k, v in pairs(env) do envs = envs .. k .. "=" .. helper.shell_quote(v) .. " " end
  local tmp = os.tmpname()
  -- a sanitizer preloaded into this Lua must not follow us into Python
  local f = assert(io.popen("env -u LD_PRELOAD " .. envs .. python_command() .. " -c " .. helper.shell_quote(PY) .. " 2>" .. tmp, "r"))
  local out = f:read("a")
  local ok, _, status = f:close()
  local efile = io.open(tmp, "r")
  local err = efile and efile:read("a") or ""
  if efile then efile:close() end
  os.remove(tmp)
  if not ok then
    error(string.format("rawdb %s failed (exit %s): %s", op, tostring(status), err), 2)
  end
  local env_lua = {
    NULL = ms.null,
    A = function(t) return ms.array(t) end,
    BIN = function(s) return { binary = s } end,
    OTHER = function(ty, s) return { other = ty, text = s } end,
    math = math,
  }
  local chunk, lerr = load(out, "=rawdb", "t", env_lua)
  if not chunk then error("rawdb: cannot read python's output: " .. tostring(lerr), 2) end
  local value = chunk()
  if value == ms.null then return nil end      -- find_one found nothing
  return value
end

-- Every document of a collection (default `executions`), sorted by _id.
function M.docs(db, coll) return run("find", db, coll) end

-- One document by _id, or nil.
function M.doc(db, id, coll) return run("get", db, coll, id) end

-- The `data` JSON of one execution document, parsed by Python's json module
-- (so big integers, floats and empty arrays show what the JSON text says).
function M.data(db, id, coll) return run("data", db, coll, id) end

-- Parses a JSON text with Python's json module.
function M.json(text) return run("json", nil, nil, text) end

-- Collection names of a database (empty when it does not exist).
function M.collections(db) return run("collections", db) end

function M.count(db, coll) return run("counts", db, nil, coll or "executions")[coll or "executions"] end

-- How many documents each named collection holds: { executions = n, counters = n }.
function M.counts(db, colls) return run("counts", db, nil, table.concat(colls or { "executions", "counters" }, ",")) end

-- Deletes one document behind the store's back; returns how many went.
function M.delete(db, id, coll) return run("delete", db, coll, id) end

-- $unsets one field of a document behind the store's back.
function M.unset(db, id, field, coll) return run("unset", db, coll, id, { RAW_FIELD = field }) end

function M.indexes(db, coll) return run("indexes", db, coll) end

-- Drops a whole database (the specs that store many megabytes free them).
function M.drop(db) return run("drop", db) end

function M.max_bson_size() return run("max_bson", "admin") end

-- Sorted list of a table's keys (for "exactly these fields" checks).
function M.keys(t)
  local ks = {}
  for k in pairs(t) do ks[#ks + 1] = k end
  table.sort(ks, function(a, b) return tostring(a) < tostring(b) end)
  return ks
end

-- The database holds nothing at all: no execution and no counter document.
function M.assert_empty(lu, db, what)
  local n = M.counts(db)
  if n.executions ~= 0 or n.counters ~= 0 then
    local lines = {}
    for _, d in ipairs(M.docs(db, "executions")) do
      lines[#lines + 1] = "execution " .. tostring(d._id) .. ": " .. tostring(d.data):sub(1, 300)
    end
    for _, d in ipairs(M.docs(db, "counters")) do
      lines[#lines + 1] = "counter " .. tostring(d._id) .. " = " .. tostring(d.n)
    end
    lu.fail(string.format("%s: something was written (%d executions, %d counters):\n%s",
      what or "", n.executions, n.counters, table.concat(lines, "\n")))
  end
end

return M
