-- mongostore.ejson - MongoDB Extended JSON (v2) for documents: a table, boxes
-- and all, as relaxed or canonical Extended JSON text, and such text back as
-- the document API's tables ($oid, $date, $numberLong, ... as their boxes).
-- For answers that leave the process (an HTTP body) and documents that come in
-- from other drivers' tools; mongostore.json stays the codec of executions.
local core = require "mongostore.core"

local type, error, pairs, tostring = type, error, pairs, tostring

local M = {}

local DOCUMENT = { document = true }
local ENCODE_OPTS = { canonical = "boolean" }

local function renamed(err, from, to)
  err = tostring(err)
  if err:sub(1, #from) == from then return to .. err:sub(#from + 1) end
  return to .. ": " .. err
end

-- encode(doc[, { canonical = false }]) -> text, or nil, msg, code. Relaxed
-- (the default) writes numbers as JSON numbers and dates as ISO-8601 text;
-- canonical keeps every type ({"$numberInt": "7"}, {"$numberLong": ...}).
function M.encode(doc, opts)
  if type(doc) ~= "table" then error("mongostore.ejson.encode: doc must be a table, got " .. type(doc), 2) end
  local canonical = false
  if opts ~= nil then
    if type(opts) ~= "table" then error("mongostore.ejson.encode: opts must be a table, got " .. type(opts), 2) end
    for k, v in pairs(opts) do
      local want = ENCODE_OPTS[k]
      if not want then error("mongostore.ejson.encode: unknown option '" .. tostring(k) .. "'", 2) end
      if type(v) ~= want then
        error("mongostore.ejson.encode: opts." .. k .. " must be a " .. want .. ", got " .. type(v), 2)
      end
    end
    canonical = opts.canonical == true
  end
  local bytes, err, code = core.bson_encode(doc)
  if not bytes then return nil, renamed(err, "bson_encode", "ejson.encode"), code end
  return core.bson_to_ejson(bytes, canonical)
end

-- decode(text) -> the document (a table), or nil, msg, "invalid" for text
-- that is not one JSON object, breaks the value rules or holds JavaScript
-- code (a "$code" key: libbson 1.23's reader mishandles it).
function M.decode(text)
  if type(text) ~= "string" then error("mongostore.ejson.decode: text must be a string, got " .. type(text), 2) end
  local bytes, err, code = core.ejson_to_bson(text)
  if not bytes then return nil, renamed(err, "ejson_to_bson", "ejson.decode"), code end
  local doc, derr, dcode = core.bson_decode(bytes, DOCUMENT)
  if doc == nil then return nil, renamed(derr, "bson_decode", "ejson.decode"), dcode end
  return doc
end

return M
