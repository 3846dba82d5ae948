-- spec/helpers/snapshot.lua - cheap snapshots of a whole database, taken behind
-- the library's back by one long-lived pymongo process, so a spec can check
-- around every single call that nothing at all was written.
--
-- A snapshot names every collection of the database and, per collection,
-- every document's _id with a SHA-256 of its raw BSON bytes (so a change of
-- a value, of a field's type or of field order shows). One request costs a
-- few milliseconds instead of the ~1 s of starting Python (spec/helpers/rawdb.lua).
local helper = require "helpers"

local M = {}

local PY = [==[
import os, sys, hashlib
try:
    import pymongo, pymongo.common
    from bson.raw_bson import RawBSONDocument
    from bson.codec_options import CodecOptions
except ImportError as e:
    sys.stdout.write("return nil, 'pymongo is not installed: %s'\n" % str(e).replace("'", " "))
    sys.exit(3)
# mongo-java-server reports wire version 8; plain finds need no more
pymongo.common.MIN_SUPPORTED_WIRE_VERSION = min(pymongo.common.MIN_SUPPORTED_WIRE_VERSION, 6)

def luastr(b):
    out = []
    for c in b:
        if 32 <= c < 127 and c not in (34, 92):
            out.append(chr(c))
        else:
            out.append("\\%03d" % c)
    return '"' + "".join(out) + '"'

client = pymongo.MongoClient(os.environ["SNAP_URI"], serverSelectionTimeoutMS=10000)
raw = CodecOptions(document_class=RawBSONDocument, unicode_decode_error_handler="surrogateescape")
out = sys.stdout
for line in sys.stdin:
    name = line.strip()
    if name == "":
        break
    try:
        db = client[name]
        parts = []
        for cname in sorted(db.list_collection_names()):
            coll = db.get_collection(cname, codec_options=raw)
            docs = []
            for d in coll.find({}):
                key = repr(d["_id"]).encode("utf-8", "surrogateescape")
                docs.append("[%s]=%s" % (luastr(key), luastr(hashlib.sha256(d.raw).hexdigest().encode())))
            parts.append("[%s]={%s}" % (luastr(cname.encode()), ",".join(docs)))
        out.write("return {" + ",".join(parts) + "}\n")
    except Exception as e:
        out.write("return nil, %s\n" % luastr(("%s: %s" % (type(e).__name__, e)).encode("utf-8", "replace")))
    out.flush()
os._exit(0)
]==]

-- The Python with pymongo: MONGOSTORE_PYTHON (tools/run-suites sets it), else
-- the pinned virtualenv tools/pyenv prints, else python3.
local function python_command()
  local py = os.getenv("MONGOSTORE_PYTHON") or ""
  if py == "" then
    local f = io.popen("env -u LD_PRELOAD " .. helper.shell_quote(helper.root() .. "/tools/pyenv") .. " 2>/dev/null", "r")
    py = f and (f:read("a") or ""):match("^%s*(.-)%s*$") or ""
    if f then f:close() end
  end
  if py == "" then py = "python3" end
  return py
end

local proc, reply, fifo_path

local function start()
  if proc then return end
  fifo_path = os.tmpname()
  os.remove(fifo_path)
  assert(os.execute("mkfifo " .. helper.shell_quote(fifo_path)), "snapshot: mkfifo failed")
  -- the sanitizer preloaded into this Lua must not follow us into Python
  -- the shell opens the fifo before Python starts, so a Python that cannot
  -- start closes it and the read below ends instead of waiting forever
  local cmd = string.format("env -u LD_PRELOAD SNAP_URI=%s %s -c %s >%s",
    helper.shell_quote(helper.uri()), helper.shell_quote(python_command()), helper.shell_quote(PY),
    helper.shell_quote(fifo_path))
  proc = assert(io.popen(cmd, "w"))
  -- opening the fifo waits until the shell opened its end
  reply = assert(io.open(fifo_path, "r"))
end

-- { [collection] = { [repr(_id)] = sha256 } } of every collection of db.
function M.take(db)
  start()
  proc:write(db, "\n")
  proc:flush()
  local line = reply:read("l")
  if not line then error("snapshot: the pymongo process ended (is pymongo installed?)", 2) end
  local chunk = assert(load(line, "=snapshot", "t", {}))
  local snap, err = chunk()
  if not snap then error("snapshot: " .. tostring(err), 2) end
  return snap
end

-- nil when a and b are equal, else a sentence naming what differs.
function M.diff(a, b)
  local out = {}
  local names = {}
  for c in pairs(a) do names[c] = true end
  for c in pairs(b) do names[c] = true end
  local sorted = {}
  for c in pairs(names) do sorted[#sorted + 1] = c end
  table.sort(sorted)
  for _, c in ipairs(sorted) do
    local da, db = a[c], b[c]
    if not da then
      out[#out + 1] = "collection " .. c .. " was created"
      da = {}
    elseif not db then
      out[#out + 1] = "collection " .. c .. " was dropped"
      db = {}
    end
    local ids = {}
    for id in pairs(da) do ids[id] = true end
    for id in pairs(db) do ids[id] = true end
    local sids = {}
    for id in pairs(ids) do sids[#sids + 1] = id end
    table.sort(sids)
    for _, id in ipairs(sids) do
      if not da[id] then out[#out + 1] = c .. " " .. id .. " was inserted"
      elseif not db[id] then out[#out + 1] = c .. " " .. id .. " was deleted"
      elseif da[id] ~= db[id] then out[#out + 1] = c .. " " .. id .. " was changed" end
    end
  end
  if #out == 0 then return nil end
  return table.concat(out, "; ")
end

function M.close()
  if not proc then return end
  proc:write("\n")
  proc:close()
  reply:close()
  os.remove(fifo_path)
  proc, reply, fifo_path = nil, nil, nil
end

return M
