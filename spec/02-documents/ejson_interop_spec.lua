-- spec/02-documents/ejson_interop_spec.lua - mongostore.ejson against pymongo's
-- bson.json_util on the every-type document (spec/helpers/bsontypes.py):
-- pymongo's canonical Extended JSON read here encodes to pymongo's own bytes,
-- and ours read by pymongo encodes to the same bytes. No server is used; the
-- legacy types pymongo no longer reads as themselves (undefined, symbol,
-- DBPointer) and JavaScript code (mongostore.ejson does not read it: libbson
-- 1.23's reader mishandles it, see spec/01-unit/ejson_spec.lua) are left out.
local lu = require "luaunit"
local ms = require "mongostore"
local core = require "mongostore.core"
local helper = require "helpers"

local SKIP = "undefined,symbol,dbpointer,code,code_with_scope"

local function python()
  local py = os.getenv("MONGOSTORE_PYTHON") or ""
  return py ~= "" and py or nil
end

-- bsontypes.py's one line of output for op (no server: URI, db and
-- collection are not used)
local function pyrun(op, arg)
  local cmd = string.format("env -u LD_PRELOAD BSONTYPES_SKIP=%s %s %s x x x %s %s",
    SKIP, helper.shell_quote(python()), helper.shell_quote(helper.root() .. "/spec/helpers/bsontypes.py"),
    op, helper.shell_quote(arg))
  local tmp = os.tmpname()
  local f = assert(io.popen(cmd .. " 2>" .. tmp, "r"))
  local out = f:read("a")
  local ok, _, status = f:close()
  local ef = io.open(tmp, "r")
  local err = ef and ef:read("a") or ""
  if ef then ef:close() end
  os.remove(tmp)
  if not ok then error(string.format("bsontypes %s failed (exit %s): %s", op, tostring(status), err), 2) end
  return (out:gsub("%s+$", ""))
end

local function hex(s) return (s:gsub(".", function(c) return string.format("%02x", c:byte()) end)) end
local function unhex(h) return (h:gsub("..", function(x) return string.char(tonumber(x, 16)) end)) end

TestEjsonInterop = {}

function TestEjsonInterop:setUp()
  if not python() then lu.skip("needs MONGOSTORE_PYTHON (pymongo's bson.json_util)") end
end

function TestEjsonInterop:test_pymongos_canonical_text_reads_as_pymongos_bytes()
  local text = pyrun("ejson", "ej-1")
  local want = pyrun("bytes", "ej-1")
  local doc, err = ms.ejson.decode(text)
  lu.assertNotNil(doc, err)
  lu.assertEquals(hex(assert(core.bson_encode(doc))), want)
end

function TestEjsonInterop:test_our_canonical_text_reads_in_pymongo_as_the_same_bytes()
  local want = pyrun("bytes", "ej-2")
  local doc = assert(core.bson_decode(unhex(want), { document = true }))
  local text = assert(ms.ejson.encode(doc, { canonical = true }))
  lu.assertEquals(pyrun("from_ejson", text), want)
end
