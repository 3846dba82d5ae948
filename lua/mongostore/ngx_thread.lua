-- mongostore.ngx_thread - the side of mongostore.ngx that runs inside an
-- nginx worker thread (its own Lua VM). It keeps one store and one engine per
-- configuration for the life of the thread's VM, runs the app functions
-- msngx.run names (config() and database() serve them). Arguments arrive and
-- results leave as one encoded text, so boxed int64s and empty arrays survive:
-- JSON for the store calls (an execution holds plain values only), BSON in the
-- document API's form for msngx.run (every BSON type: ObjectIds, dates, ...).
local type, ipairs, pairs, tostring, select, pcall, xpcall = type, ipairs, pairs, tostring, select, pcall, xpcall
local unpack = unpack or table.unpack

local M = {}

local cache = {}

local function key_of(cfg)
  return table.concat({ cfg.uri, cfg.db or "", cfg.prefix or "", cfg.charts or "", tostring(cfg.trace),
                        tostring(cfg.inbox_group), tostring(cfg.sweep_batch), tostring(cfg.max_conflicts) }, "\0")
end

local function handles(cfg)
  local key = key_of(cfg)
  local h = cache[key]
  if h then return h end
  local ms = require "mongostore"
  local store, err, code = ms.connect(cfg.uri, { db = cfg.db, prefix = cfg.prefix, wait = cfg.wait,
                                                 trace_max = cfg.trace_max })
  if not store then return nil, err, code end
  local charts = cfg.charts and require(cfg.charts) or {}
  local by_id = {}
  for _, c in ipairs(charts) do by_id[c.id] = c end
  h = { store = store, charts = by_id,
        engine = require("mongostore.engine").new{ store = store, charts = charts, trace = cfg.trace,
                                                   inbox = cfg.inbox, inbox_group = cfg.inbox_group,
                                                   sweep_batch = cfg.sweep_batch,
                                                   max_conflicts = cfg.max_conflicts } }
  cache[key] = h
  return h
end

-- An Execution becomes the table of its fields; everything else is plain.
local function plain(v)
  local execution = require "mongostore.execution"
  if execution.is_execution(v) then return execution.fields(v) end
  return v
end

-- The two encodings of the values that cross the thread boundary, each a
-- table { n =, v = [...] } of one text (a copy by ngx.run_worker_thread
-- would drop the marks that keep empty arrays arrays, and refuse userdata).
local DOCUMENT = { document = true }
-- encode(t, label) -> text, or nil, msg (msg starts with label).
local function bson_encode(t, label)
  local text, err = require("mongostore.core").bson_encode(t)
  if text then return text end
  err = tostring(err)
  if label and err:sub(1, 11) == "bson_encode" then err = label .. err:sub(12) end
  return nil, err
end

local CODECS = {
  json = { encode = function(t, label) return require("mongostore.core").json_encode(t, label) end,
           decode = function(s) return require("mongostore.core").json_decode(s) end,
           carries = "JSON carries plain values, no boxes" },
  bson = { encode = bson_encode,
           decode = function(s) return require("mongostore.core").bson_decode(s, DOCUMENT) end,
           carries = "BSON carries strings, numbers, booleans, tables and the mongostore boxes" },
}
M.CODECS = CODECS

-- The results as one text { v = [ ... ] } in codec c (CODECS.json when nil);
-- label names msngx.run's function, whose answers the app chose.
local function pack_labelled(label, c, ...)
  local core = require "mongostore.core"
  c = c or CODECS.json
  local n = select("#", ...)
  local values = { ... }
  for i = 1, n do
    local v = plain(values[i])
    if v == nil then v = core.null end
    values[i] = v
  end
  local text, err = c.encode({ v = core.array(values) })
  if not text then
    local msg = "answer not encodable: " .. tostring(err)
    if label then msg = label .. ": " .. msg .. " (" .. c.carries .. ")" end
    text = c.encode({ v = core.array({ core.null, msg, "server" }) })
  end
  return text
end

local function pack(...) return pack_labelled(nil, nil, ...) end

-- A raised message without the position Lua put before it
-- ("/path/to/lua/mongostore/engine.lua:123: ", '[string "..."]:3: '): the
-- message goes to a caller that may hand it on to an HTTP client, which is
-- not to learn where the library lives. A message that merely mentions a
-- file further on is left as it is.
local function without_position(msg)
  msg = tostring(msg)
  while true do
    local rest = msg:match("^[%w_%.%-/~@+]*%.lua:%d+: (.*)$") or msg:match('^%[string ".-"%]:%d+: (.*)$')
    if not rest then return msg end
    msg = rest
  end
end
M.without_position = without_position

-- A raise inside the call (a wrong argument from the handler) comes back as
-- nil, msg, "invalid" rather than as a failed thread, without its position.
local function answer(ok, ...)
  if not ok then return pack(nil, without_position((...)), "invalid") end
  return pack(...)
end

-- A commit or save from a handler arrives as the execution's fields
-- (execution.fields): rebuild it at the version it was loaded at, with the
-- dedupe digests the fields carry, so the commit needs no extra read.
local function with_execution(store, method, fields, ...)
  local execution = require "mongostore.execution"
  if type(fields) ~= "table" then return nil, method .. ": expected the execution's fields", "invalid" end
  local ok, exe = pcall(execution.from_fields, fields)
  if not ok then return nil, method .. ": " .. tostring(exe), "invalid" end
  local done, err, code, found = store[method](store, exe, ...)
  if done then return true, exe.version end
  return nil, err, code, found
end

-- load_many and commit_many from a handler: the executions of the answer
-- become their fields, and commit_many's items arrive as { fields, opts }
-- and are rebuilt as with_execution rebuilds one; each item committed
-- answers its new version.
local function with_executions(store, method, list, ...)
  local execution = require "mongostore.execution"
  if method == "load_many" then
    local got, err, code = store:load_many(list, ...)
    if not got then return nil, err, code end
    local out = {}
    for id, exe in pairs(got) do out[id] = execution.fields(exe) end
    return out, err -- with { timers = true }, err is each execution's armed timers
  end
  if type(list) ~= "table" then return nil, "commit_many: expected a list of { fields, opts }", "invalid" end
  local items = {}
  for i, item in ipairs(list) do
    if type(item) ~= "table" or type(item[1]) ~= "table" then
      return nil, "commit_many: item " .. i .. " must be { fields, opts }", "invalid"
    end
    local ok, exe = pcall(execution.from_fields, item[1])
    if not ok then return nil, "commit_many: item " .. i .. ": " .. tostring(exe), "invalid" end
    items[i] = { exe, item[2] }
  end
  local got, err, code = store:commit_many(items, ...)
  if not got then return nil, err, code end
  for i, r in ipairs(got) do
    if r.ok then r.version = items[i][1].version end
  end
  return got
end

-- The arguments mongostore.ngx encoded (codec c, CODECS.json when nil):
-- { n, v = [...] }, null for nil at the top level (null inside a value stays
-- mongostore.null).
local function unpack_args(text, c)
  local core = require "mongostore.core"
  local t = type(text) == "string" and (c or CODECS.json).decode(text)
  if type(t) ~= "table" or type(t.v) ~= "table" or type(t.n) ~= "number" then return nil end
  local v, n, null = t.v, t.n, core.null
  for i = 1, n do if v[i] == null then v[i] = nil end end
  return true, unpack(v, 1, n)
end

-- The checks of an event from outside (send_external, enqueue_external):
-- the kind must be one the execution's chart takes from outside
-- (chart.is_external), checked on the execution as loaded, before anything
-- is written. The load also tells whether the event id was handled already.
-- exe, processed | nil, msg, code.
local function external_checked(h, fn, id, event)
  local chart = require "mongostore.chart"
  if type(id) ~= "string" then error(fn .. ": id must be a string, got " .. type(id), 3) end
  if type(event) ~= "table" then error(fn .. ": event must be a table, got " .. type(event), 3) end
  if type(event.kind) ~= "string" then
    error(fn .. ": event.kind must be a string, got " .. type(event.kind), 3)
  end
  local exe, processed, code
  if type(event.id) == "string" then
    exe, processed, code = h.store:load_for_event(id, event.id)
  else
    -- without a timer path load has no second result but a failure's message
    exe, processed, code = h.store:load(id)
  end
  if exe == nil then
    if type(processed) == "string" then return nil, processed, code end
    return nil, fn .. ": no execution '" .. id .. "'", "not_found"
  end
  local c = h.charts[exe.definition_id]
  if not c then
    return nil, fn .. ": execution '" .. id .. "' runs chart '" .. tostring(exe.definition_id) ..
      "', which this server does not have", "invalid"
  end
  if not chart.is_external(c, event.kind) then
    local why = chart.RESERVED[event.kind] and "is reserved for the engine and its control calls"
      or "is not an event chart '" .. c.id .. "' takes from outside"
    return nil, fn .. ": " .. event.kind .. " " .. why, "invalid"
  end
  return exe, processed == true
end

-- engine:send for an event from outside, after external_checked; a resend
-- answers true, "duplicate" (the engine would change nothing either). The
-- third value is the engine's delivery result (outcome, status, active path,
-- error).
local function send_external(h, id, event)
  local exe, processed, code = external_checked(h, "send_external", id, event)
  if not exe then return nil, processed, code end
  if processed then
    return true, "duplicate", require("mongostore.engine")._delivery_result("duplicate", exe)
  end
  return h.engine:send(id, event)
end

-- engine:enqueue for an event from outside, after external_checked: a kind
-- misspelt or refused, or an execution that does not exist, is told to the
-- caller now rather than logged by an inbox pass later; an event id the
-- execution has handled already answers true, "duplicate" (nothing queued).
local function enqueue_external(h, id, event, opts)
  local exe, processed, code = external_checked(h, "enqueue_external", id, event)
  if not exe then return nil, processed, code end
  if processed then return true, "duplicate" end
  return h.engine:enqueue(id, event, opts)
end

-- engine:start for a request from outside, which may name its own id: the
-- same id again answers the same execution from one read (no hook runs,
-- nothing is written), and one that exists under another chart is a
-- conflict, not that chart's execution passed off as this one's. A start
-- that races ours is told apart by engine:start itself.
local function start_external(h, chart_id, opts)
  local named = type(opts) == "table" and type(opts.id) == "string" and opts.id or nil
  if named and not require("mongostore.core").text_error(named) then
    local exe, lerr, lcode = h.store:load(named)
    if exe then
      if exe.definition_id ~= chart_id then
        return nil, "start_external: execution '" .. exe.id .. "' exists and runs chart '" ..
          tostring(exe.definition_id) .. "'", "conflict"
      end
      return exe.id, false, require("mongostore.engine")._delivery_result("duplicate", exe)
    end
    if type(lerr) == "string" then return nil, lerr, lcode end
  end
  return h.engine:start(chart_id, opts)
end

-- Runs call(decoded arguments...) and packs what it returns; a raise comes
-- back as nil, msg, "invalid" (see answer).
local function with_args(method, args, call)
  local function go(ok, ...)
    if not ok then return nil, method .. ": unreadable arguments", "invalid" end
    return call(...)
  end
  return answer(pcall(function() return go(unpack_args(args)) end))
end

function M.store(cfg, method, args)
  local h, err, code = handles(cfg)
  if not h then return pack(nil, err, code) end
  local how = require("mongostore.store").CALLS[method]
  return with_args(method, args, function(...)
    if how == "execution" then return with_execution(h.store, method, ...) end
    if how == "executions" then return with_executions(h.store, method, ...) end
    if how ~= "plain" then return nil, "no store method " .. tostring(method), "invalid" end
    return h.store[method](h.store, ...)
  end)
end

function M.engine(cfg, method, args)
  local h, err, code = handles(cfg)
  if not h then return pack(nil, err, code) end
  return with_args(method, args, function(...)
    if method == "send_external" then return send_external(h, ...) end
    if method == "enqueue_external" then return enqueue_external(h, ...) end
    if method == "start_external" then return start_external(h, ...) end
    local fn = h.engine[method]
    if type(fn) ~= "function" then return nil, "no engine method " .. tostring(method), "invalid" end
    return fn(h.engine, ...)
  end)
end

------------------------------------------------------------------------
-- msngx.run: an application function in this thread's VM

-- The configuration of the msngx.run call this VM is running (a thread VM
-- runs one call at a time), for M.config and M.database.
local current

-- A copy of msngx.configure's settings (uri with the timeouts mongostore.ngx
-- wrote into it, db, prefix, wait, ...), for a module that opens its own
-- handles; only during an msngx.run call.
function M.config()
  if not current then error("mongostore.ngx_thread.config: only inside an msngx.run call", 2) end
  local copy = {}
  for k, v in pairs(current) do copy[k] = v end
  return copy
end

local databases = {}

-- The Database of configure's uri (opts.db, else configure's db), opened on
-- the first call in this VM and kept for its life: each later msngx.run on
-- this VM reuses it (do not close it). Only during an msngx.run call.
-- db or nil, msg, code.
function M.database(opts)
  if not current then error("mongostore.ngx_thread.database: only inside an msngx.run call", 2) end
  if opts ~= nil and type(opts) ~= "table" then
    error("mongostore.ngx_thread.database: opts must be a table, got " .. type(opts), 2)
  end
  if opts then
    require("mongostore.store").check_keys(opts, { db = true }, "mongostore.ngx_thread.database", "option")
  end
  local name = opts and opts.db or current.db
  if type(name) ~= "string" then error("mongostore.ngx_thread.database: opts.db must be a string", 2) end
  local key = current.uri .. "\0" .. name
  local db = databases[key]
  if db then return db end
  local ms = require "mongostore"
  if type(ms.database) ~= "function" then return nil, "database: mongostore.database is missing", "unavailable" end
  local err, code
  db, err, code = ms.database(current.uri, { db = name, wait = current.wait })
  if not db then return nil, err, code end
  databases[key] = db
  return db
end

-- A raise inside the function: its message (for the answer) and the
-- traceback (for nginx's error log, which mongostore.ngx writes: a thread
-- VM has no ngx.log).
local function lua_error(e)
  return { msg = tostring(e), traceback = debug.traceback(tostring(e), 2) }
end

-- The answer to a raise: nil, msg, "server" (what was raised, without its
-- position), the message as raised and the traceback beside it for the log.
local function pack_raise(label, what, raised, traceback)
  local core = require "mongostore.core"
  local msg = label .. ": " .. what .. without_position(raised)
  return CODECS.bson.encode({ v = core.array({ core.null, msg, "server" }),
                              log = label .. ": " .. what .. tostring(raised) .. "\n" .. traceback })
end

-- require(module), told apart: nil, "missing" when no such module exists,
-- nil, { msg, traceback } when loading it raised.
local function load_module(module)
  local ok, mod = xpcall(require, lua_error, module)
  if ok then return mod end
  if mod.msg:find("module '" .. module .. "' not found", 1, true) then return nil, "missing" end
  return nil, mod
end

-- msngx.run's own answers, in its codec
local function run_pack(...) return pack_labelled(nil, CODECS.bson, ...) end

function M.run(cfg, module, fn, args)
  local label = "run " .. tostring(module) .. "." .. tostring(fn)
  if type(module) ~= "string" or type(fn) ~= "string" then
    return run_pack(nil, label .. ": module and fn must be strings", "invalid")
  end
  local mod, lerr = load_module(module)
  if lerr == "missing" then
    return run_pack(nil, label .. ": no module " .. module .. " on lua_package_path", "invalid")
  end
  if lerr then return pack_raise(label, "Lua error loading " .. module .. ": ", lerr.msg, lerr.traceback) end
  local f = type(mod) == "table" and mod[fn]
  if type(f) ~= "function" then
    return run_pack(nil, label .. ": module " .. module .. " has no function " .. fn, "invalid")
  end
  local function go(ok, ...)
    if not ok then return nil, label .. ": unreadable arguments", "invalid" end
    return f(...)
  end
  local function finish(ok, ...)
    current = nil
    if not ok then
      local e = ...
      return pack_raise(label, "Lua error: ", e.msg, e.traceback)
    end
    return pack_labelled(label, CODECS.bson, ...)
  end
  current = cfg
  return finish(xpcall(function() return go(unpack_args(args, CODECS.bson)) end, lua_error))
end

-- One step of the ngx worker (start_worker): spawns, the outbox and, when
-- asked, the timer sweep, with this thread's engine.
function M.worker_step(cfg, sweep)
  local h, err = handles(cfg)
  if not h then error(err, 0) end
  -- start_worker says at start whether this nginx delivers external
  -- entries (its on_external loop): not each thread VM's engine again
  h.engine.said_external = true
  local n = h.engine:relay_spawns() + h.engine:relay_outbox()
  if h.engine.inbox then n = n + require("mongostore.inbox").idle_pass(h.engine) end
  if sweep then n = n + h.engine:sweep() end
  return n
end

-- start_worker's on_external loop, whose handlers run in the nginx worker
-- (cosockets): it claims external entries here (engine:claim_external, the
-- entries answered as plain tables), renews their claims while the handlers
-- run, and settles each when its handler is done. The loop counts each
-- claim's entries itself (a thread VM's engine sees only its own calls), so
-- settle is told whether the entry ends its claim; it logs with ngx.log, so
-- the engine here does not (result.message).
function M.external_claim(cfg, limit)
  local h, err, code = handles(cfg)
  if not h then return pack(nil, err, code) end
  return answer(pcall(h.engine.claim_external, h.engine, limit))
end

function M.external_renew(cfg, args)
  local h, err, code = handles(cfg)
  if not h then return pack(nil, err, code) end
  return with_args("renew_external", args, function(entries) return h.engine:renew_external(entries) end)
end

function M.external_settle(cfg, args)
  local h, err, code = handles(cfg)
  if not h then return pack(nil, err, code) end
  return with_args("settle_external", args, function(entry, ok, why, release)
    return h.engine:settle_external(entry, ok, why, { release = release == true, log = false })
  end)
end

return M
