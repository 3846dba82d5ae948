-- mongostore.ngx_thread - the side of mongostore.ngx that runs inside an
-- nginx worker thread (its own Lua VM). It keeps one store and one engine per
-- configuration for the life of the thread's VM, and answers with plain
-- values only, since nothing else crosses the thread boundary.
local type, pairs, tostring, select, pcall = type, pairs, tostring, select, pcall
local unpack = unpack or table.unpack

local M = {}

local cache = {}

local function key_of(cfg)
  return table.concat({ cfg.uri, cfg.db or "", cfg.prefix or "", cfg.charts or "", tostring(cfg.trace) }, "\0")
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
  h = { store = store, engine = require("mongostore.engine").new{ store = store, charts = charts, trace = cfg.trace } }
  cache[key] = h
  return h
end

-- An Execution becomes the table of its fields; everything else is plain.
local function plain(v)
  local execution = require "mongostore.execution"
  if execution.is_execution(v) then return execution.fields(v) end
  return v
end

-- The results travel as one JSON text, { v = [ ... ] }: a copy across the
-- thread boundary would drop the marks that keep empty arrays arrays.
local function pack(...)
  local core = require "mongostore.core"
  local n = select("#", ...)
  local values = { ... }
  for i = 1, n do
    local v = plain(values[i])
    if v == nil then v = core.null end
    values[i] = v
  end
  local text, err = core.json_encode({ v = core.array(values) })
  if not text then
    text = core.json_encode({ v = core.array({ core.null, "answer not encodable: " .. tostring(err), "server" }) })
  end
  return text
end

-- A raise inside the call (a wrong argument from the handler) comes back as
-- nil, msg, "invalid" rather than as a failed thread.
local function answer(ok, ...)
  if not ok then return pack(nil, tostring((...)), "invalid") end
  return pack(...)
end

-- A commit from a handler arrives as the execution's fields: rebuild it at
-- the version it was loaded at.
local function commit(store, fields, opts)
  local ms = require "mongostore"
  local execution = require "mongostore.execution"
  if type(fields) ~= "table" then return nil, "commit: expected the execution's fields", "invalid" end
  local version = fields.version or 0
  local spec = {}
  for k, v in pairs(fields) do if k ~= "version" then spec[k] = v end end
  local ok, exe = pcall(ms.execution, spec)
  if not ok then return nil, "commit: " .. tostring(exe), "invalid" end
  execution.set_version(exe, version)
  local done, err, code, found = store:commit(exe, opts)
  if done then return true, exe.version end
  return nil, err, code, found
end

function M.store(cfg, method, ...)
  local h, err, code = handles(cfg)
  if not h then return pack(nil, err, code) end
  if method == "commit" then return answer(pcall(commit, h.store, ...)) end
  local fn = h.store[method]
  if type(fn) ~= "function" then return pack(nil, "no store method " .. tostring(method), "invalid") end
  return answer(pcall(fn, h.store, ...))
end

function M.engine(cfg, method, ...)
  local h, err, code = handles(cfg)
  if not h then return pack(nil, err, code) end
  local fn = h.engine[method]
  if type(fn) ~= "function" then return pack(nil, "no engine method " .. tostring(method), "invalid") end
  return answer(pcall(fn, h.engine, ...))
end

-- One step of the ngx worker (start_worker): spawns, the outbox and, when
-- asked, the timer sweep, with this thread's engine.
function M.worker_step(cfg, sweep)
  local h, err = handles(cfg)
  if not h then error(err, 0) end
  local n = h.engine:relay_spawns() + h.engine:relay_outbox()
  if sweep then n = n + h.engine:sweep() end
  return n
end

return M
