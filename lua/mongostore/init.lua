-- mongostore - the public face: it only assembles the module table from the
-- C core (values, JSON, time), the Store (mongostore.store) and the
-- Execution (mongostore.execution); the engine and charts have their own modules.
local core = require "mongostore.core"
local store = require "mongostore.store"
local execution = require "mongostore.execution"

return {
  _VERSION = core.version,
  null = core.null,
  array = core.array,
  is_array = core.is_array,
  now = core.now,
  sleep = core.sleep,
  uuid = core.uuid,
  int64 = core.int64,
  -- BSON values Lua has no type for (csrc/bsontypes.c): each with tostring and ==
  objectid = core.objectid,
  date = core.date,
  binary = core.binary,
  decimal = core.decimal,
  int32 = core.int32,
  timestamp = core.timestamp,
  regex = core.regex,
  code = core.code,
  symbol = core.symbol,
  dbpointer = core.dbpointer,
  minkey = core.minkey,
  maxkey = core.maxkey,
  undefined = core.undefined,
  -- the core's JSON codec: arrays stay arrays (mongostore.array), null is
  -- mongostore.null, integers are exact; encode/decode return nil, msg on bad input
  json = { encode = core.json_encode, decode = core.json_decode },
  -- MongoDB Extended JSON for documents with boxes (mongostore.ejson)
  ejson = require("mongostore.ejson"),
  execution = execution.new,
  is_execution = execution.is_execution,
  -- The codes an operation can return as its third value (see README.md).
  codes = { "conflict", "duplicate", "network", "timeout", "server", "invalid", "too_large",
            "unavailable", "closed", "not_found", "transient", "stale", "validation", "transaction",
            "clock_regression", "finished" },
  connect = store.connect,
  database = require("mongostore.database").database,
  -- a client's filter taken as data for the document API (mongostore.database)
  sanitize = require("mongostore.database").sanitize,
  check_keys = store.check_keys,
  Store = store.Store,
}
