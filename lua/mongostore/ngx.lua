-- mongostore.ngx - mongostore inside OpenResty: request handlers reach the
-- store and the engine through nginx worker threads (ngx.run_worker_thread),
-- so they yield instead of blocking the event loop, and so do the app's own
-- functions through msngx.run (document operations, say); start_worker runs
-- the relays and the inbox on ngx.timer.every in every nginx worker, the
-- timer sweep in one at a time. Arguments and results cross the thread
-- boundary as one encoded text (JSON for the store calls, BSON for
-- msngx.run: mongostore.ngx_thread.CODECS).
local type, error, tostring, pairs, ipairs, select = type, error, tostring, pairs, ipairs, select
local unpack = unpack or table.unpack
local function pack(...) return { n = select("#", ...), ... } end
local format = string.format
local contract = require "mongostore.contract"

local M = {}

local THREAD_MODULE = "mongostore.ngx_thread"
local config

-- The Store calls forwarded: every one mongostore.store lists as not local.
local STORE_CALLS = {}
for name, how in pairs(require("mongostore.store").CALLS) do
  if how ~= "local" then STORE_CALLS[name] = true end
end
local ENGINE_CALLS = { start = true, send = true, send_external = true, start_external = true, cancel = true,
                       terminate = true, suspend = true, resume = true, enqueue = true, send_many = true,
                       enqueue_external = true }

-- The calls that take an event second: a missing event id is filled into the
-- caller's table here, before the call crosses (the thread fills only its
-- own copy), so a caller whose call timed out can send the same event again.
local EVENT_CALLS = { send = true, send_external = true, enqueue = true, enqueue_external = true }

local function fill_event_id(event)
  if type(event) == "table" and event.id == nil then event.id = require("mongostore.core").uuid() end
end

-- send_many's list: each pair's event.
local function fill_event_ids(list)
  if type(list) ~= "table" then return end
  for _, pair in ipairs(list) do
    if type(pair) == "table" then fill_event_id(pair[2]) end
  end
end

-- With no server answering, a call waits this long for one (libmongoc's
-- serverSelectionTimeoutMS and connectTimeoutMS, put in the URI unless it
-- sets them itself; its own default is 30 s), and the first connect of a
-- thread tries once (wait 0): a request gets its 503 after about 2 s, and a
-- graceful stop is not held longer than that.
local DEFAULT_SELECTION_TIMEOUT = 2

-- A server that accepted the connection and then stops answering (stopped,
-- swapping, a network that drops packets) is not told by selection: a call
-- waits for its reply up to libmongoc's socketTimeoutMS, 5 minutes unless the
-- URI says. socket_timeout (seconds) is written into the URI as it, unless
-- the URI sets it; 10 s outlasts any reply of a working server to the
-- execution store's calls, and holds a request at most about twice that
-- (libmongoc retries a retryable read or write once) plus a selection.
local DEFAULT_SOCKET_TIMEOUT = 10

local function ms_of(seconds) return tostring(math.floor(seconds * 1000 + 0.5)) end

-- The URI with serverSelectionTimeoutMS and connectTimeoutMS (seconds) and
-- socketTimeoutMS (socket_seconds, when given) added where it does not set
-- them.
local function with_timeouts(uri, seconds, socket_seconds)
  local lower = uri:lower()
  local opts = { { "serverSelectionTimeoutMS", seconds }, { "connectTimeoutMS", seconds } }
  if socket_seconds then opts[3] = { "socketTimeoutMS", socket_seconds } end
  for _, o in ipairs(opts) do
    local opt, ms = o[1], ms_of(o[2])
    if not lower:find("[?&]" .. opt:lower() .. "=") then
      local sep
      if uri:find("?", 1, true) then
        sep = "&"
      else
        -- options follow "/?" after the hosts (or "?" after /database)
        local rest = uri:match("^[%w+.-]+://(.*)$") or uri
        sep = rest:find("/", 1, true) and "?" or "/?"
      end
      uri = uri .. sep .. opt .. "=" .. ms
    end
  end
  return uri
end

-- A Lua module name: dotted identifiers (what require takes from app code).
local MODULE_NAME = "^[%a_][%w_]*$"
local function is_module_name(s)
  for part in (s .. "."):gmatch("([^.]*)%.") do
    if not part:match(MODULE_NAME) then return false end
  end
  return true
end

-- run_modules: the modules msngx.run may call, each a module name or a
-- prefix ending with "." (every module below it). A copy is kept.
local function check_run_modules(list)
  if list == nil then return {} end
  local what = "msngx.configure: cfg.run_modules must be a list of module names or prefixes ending with '.'"
  if type(list) ~= "table" then error(what, 3) end
  local out = {}
  for i, name in ipairs(list) do
    if type(name) ~= "string" then error(what .. ", entry " .. i .. " is a " .. type(name), 3) end
    local bare = name:sub(-1) == "." and name:sub(1, -2) or name
    if bare == "" or not is_module_name(bare) then error(what .. ", got '" .. name .. "'", 3) end
    out[i] = name
  end
  local n = 0
  for _ in pairs(list) do n = n + 1 end
  if n ~= #out then error(what .. " (a list)", 3) end
  return out
end

-- msngx.configure{ uri, db, prefix, wait = 0, server_selection_timeout = 2, socket_timeout = 10, trace_max,
--                  thread_pool = "mongostore", charts = "module.returning.charts",
--                  trace = false, max_inflight = 32, call_timeout = 30,
--                  run_modules = { "app.", "shop.orders" }, inbox = false, inbox_group = 32, sweep_batch = 500,
--                  max_conflicts = 50 }
-- inbox: msngx.start_worker's passes also deliver the inbox (engine inbox),
-- backing off while it is idle; on by default, false opts out.
-- inbox_group, sweep_batch, max_conflicts: the engines' options of those names (engine.new).
-- Call it in init_by_lua: it only records the settings. Connections are made
-- lazily in the processes and threads that use them, never in the master.
-- wait is connect's (seconds to keep retrying the first ping of a thread);
-- server_selection_timeout (seconds) bounds every wait for a server;
-- socket_timeout (seconds) every wait for a reply of a server that went silent.
-- run_modules: the modules msngx.run may call (none when absent).
-- configure's settings (mongostore.contract): a misspelt one raises, as
-- every options table does, and so does a value it cannot take (the
-- configuration is the program's).
local SECONDS_T = { "number", min = 0.1, max = 3600 }
local CONFIGURE = contract.define("msngx.configure", {
  { "cfg", "table", fields = {
      uri = { "string", required = true, check = function(v) return v == "" and "must not be empty" or nil end },
      db = "string", prefix = "string", charts = "string", trace_max = { "integer", min = 0 },
      max_inflight = { "integer", min = 1 }, wait = { "number", min = 0, max = 86400 },
      server_selection_timeout = SECONDS_T, socket_timeout = SECONDS_T, run_modules = "table",
      thread_pool = "string", trace = "boolean", call_timeout = { "number", gt = 0 }, inbox = "boolean",
      inbox_group = { "integer", min = 1, max = 256 }, sweep_batch = { "integer", min = 1 },
      max_conflicts = { "integer", min = 1 } } },
})

function M.configure(cfg)
  local bad = CONFIGURE:check(cfg)
  if bad then error(bad, 2) end
  local sst, sto = cfg.server_selection_timeout, cfg.socket_timeout
  local group, sb, mc = cfg.inbox_group, cfg.sweep_batch, cfg.max_conflicts
  local run_modules = check_run_modules(cfg.run_modules)
  config = {
    run_modules = run_modules,
    uri = with_timeouts(cfg.uri, sst or DEFAULT_SELECTION_TIMEOUT, sto or DEFAULT_SOCKET_TIMEOUT),
    db = cfg.db or "harel", prefix = cfg.prefix,
    wait = cfg.wait or 0,
    trace_max = cfg.trace_max, thread_pool = cfg.thread_pool or "mongostore",
    charts = cfg.charts, trace = cfg.trace == true, max_inflight = cfg.max_inflight or 32,
    call_timeout = cfg.call_timeout or 30, inbox = cfg.inbox ~= false,
    inbox_group = group, sweep_batch = sb, max_conflicts = mc,
  }
  return true
end

function M.config()
  return config
end
M._with_timeouts = with_timeouts -- for the specs

-- Calls in flight per worker process are bounded (max_inflight, at most the
-- lua_worker_thread_vm_pool_size): a burst waits its turn instead of failing
-- with "no available Lua vm". Each thread VM keeps one store, which holds one
-- client of the process's pool (maxPoolSize, 100 unless the URI says), so
-- the VM pool must stay below it.
local inflight

local function codecs() return require("mongostore.ngx_thread").CODECS end

-- The arguments as one text { n, v = [...] } in codec c, nil as null: a
-- copy by ngx.run_worker_thread would refuse a boxed int64 (userdata) and
-- drop the marks that keep empty arrays arrays. Not encodable: nil, msg.
local function encode_args(c, ...)
  local core = require "mongostore.core"
  local n = select("#", ...)
  local v = { ... }
  for i = 1, n do if v[i] == nil then v[i] = core.null end end
  return c.encode({ n = n, v = core.array(v) }, "arguments")
end

-- Every thread call of this process, the worker's steps included, takes a
-- slot: pcall-status, ok, results... of ngx.run_worker_thread, or nil, msg.
local function thread_call(timeout, func, ...)
  if not inflight then inflight = require("ngx.semaphore").new(config.max_inflight) end
  local got, werr = inflight:wait(timeout)
  if not got then return nil, "too many calls in flight (" .. tostring(werr) .. ")" end
  local res = { pcall(ngx.run_worker_thread, config.thread_pool, THREAD_MODULE, func, ...) }
  inflight:post(1)
  return res
end

-- What a thread call answered (thread_call's res, or nil, werr), as the
-- call's results; label starts the messages of mongostore.ngx's own errors.
local function results(label, c, res, werr)
  if not res then return nil, format("%s: %s", label, werr), "unavailable" end
  if not res[1] then error(res[2], 0) end
  if not res[2] then
    -- the whole message for the operator; the caller's has no file position
    ngx.log(ngx.ERR, "mongostore.ngx ", label, ": worker thread failed: ", tostring(res[3]))
    local why = require("mongostore.ngx_thread").without_position(res[3])
    return nil, format("%s: worker thread failed: %s", label, why), "unavailable"
  end
  local out = type(res[3]) == "string" and c.decode(res[3])
  if type(out) ~= "table" or type(out.v) ~= "table" then
    return nil, label .. ": unreadable answer from the worker thread", "server"
  end
  -- a raise in an msngx.run function: its traceback, for the operator
  if type(out.log) == "string" then ngx.log(ngx.ERR, "mongostore.ngx ", out.log) end
  local v, null = out.v, require("mongostore.core").null
  local n = #v
  for i = 1, n do if v[i] == null then v[i] = nil end end -- a nil result travels as null
  return unpack(v, 1, n)
end

local function run(kind, method, ...)
  if not config then error("mongostore.ngx: call configure{...} first", 3) end
  local c = codecs().json
  local args, aerr = encode_args(c, ...)
  if not args then return nil, format("%s: %s", method, tostring(aerr)), "invalid" end
  return results(method, c, thread_call(config.call_timeout, kind, config, method, args))
end

-- Store calls: msngx.load(id), msngx.list_executions{...}, msngx.read_trace(id), ...
-- An Execution comes back as a plain table of its fields (execution.fields:
-- its dedupe digests ride along as `dedupe`), and msngx.commit(fields, opts)
-- and msngx.save(fields) take that table back, answering true, the new version.
for name in pairs(STORE_CALLS) do
  M[name] = function(...) return run("store", name, ...) end
end

-- Engine calls: msngx.start(chart_id, opts), msngx.send(id, event),
-- msngx.send_many(list), cancel, terminate, suspend, resume (a missing event
-- id is filled into the caller's event table before the call crosses);
-- msngx.enqueue(id, event, opts), the inbox's
-- one insert (a handler that need not wait for the delivery); and msngx.send_external(id, event), the send
-- for events from outside (an HTTP client): it refuses, with nil, msg,
-- "invalid" and nothing written, a kind the execution's chart does not take
-- from outside (chart.is_external), and answers true, "duplicate" for an
-- event id the execution has handled already; msngx.start_external(chart_id,
-- opts), the start for requests from outside: an opts.id that exists under
-- another chart is nil, msg, "conflict" rather than that execution's id;
-- msngx.enqueue_external(id, event, opts), the enqueue for events from
-- outside: send_external's checks (the execution exists, its chart takes the
-- kind from outside; else nil, msg, code and nothing written), then the
-- inbox's one insert.
-- The calls that commit to the execution they name first: in one nginx
-- worker they run one at a time per execution id (the others wait, in
-- order, up to call_timeout), so requests racing on a hot execution queue
-- here instead of spending the engine's conflict retries against each other
-- and answering conflict; only other processes' commits still race them.
local SERIAL = { send = true, send_external = true, cancel = true, terminate = true, suspend = true, resume = true }
local queues = {} -- execution id -> { sema = ngx.semaphore, waiting = n }

local function one_at_a_time(id, name, call, ...)
  if type(id) ~= "string" then return call(...) end
  local q = queues[id]
  if q then
    q.waiting = q.waiting + 1
    local ok, err = q.sema:wait(config and config.call_timeout or 30)
    q.waiting = q.waiting - 1
    if not ok then
      return nil, format("%s: waited for the calls before it on %s: %s", name, id, tostring(err)), "unavailable"
    end
  else
    q = { sema = require("ngx.semaphore").new(0), waiting = 0 }
    queues[id] = q
  end
  local r = pack(pcall(call, ...))
  if q.waiting > 0 then q.sema:post(1) else queues[id] = nil end
  if not r[1] then error(r[2], 0) end
  return unpack(r, 2, r.n)
end

-- Whether start_worker runs in this nginx worker: its passes drain the inbox.
local worker_started = false

-- A send that still lost its version check after the engine's retries
-- (other processes' commits, or this nginx's other workers, kept moving the
-- execution on) is not answered conflict: with the inbox on and a worker
-- draining it, its event is queued there under the same id, applied in order
-- behind the others (exactly once: the id is its dedupe mark), and the call
-- answers true, "queued", { outcome = "queued" }.
local QUEUE_ON_CONFLICT = { send = true, send_external = true }

local function engine_call(name)
  if not SERIAL[name] then return function(...) return run("engine", name, ...) end end
  if not QUEUE_ON_CONFLICT[name] then
    return function(id, ...) return one_at_a_time(id, name, run, "engine", name, id, ...) end
  end
  return function(id, event, ...)
    local r = pack(one_at_a_time(id, name, run, "engine", name, id, event, ...))
    if r[1] == nil and r[3] == "conflict" and worker_started and config.inbox then
      local q = pack(run("engine", "enqueue", id, event))
      if q[1] ~= nil then return true, "queued", { outcome = "queued" } end
    end
    return unpack(r, 1, r.n)
  end
end

for name in pairs(ENGINE_CALLS) do
  local call = engine_call(name)
  if EVENT_CALLS[name] then
    M[name] = function(id, event, ...)
      fill_event_id(event)
      return call(id, event, ...)
    end
  elseif name == "send_many" then
    M[name] = function(list, ...)
      fill_event_ids(list)
      return run("engine", name, list, ...)
    end
  else
    M[name] = call
  end
end

------------------------------------------------------------------------
-- msngx.run: the application's own functions in a worker thread

local function run_allowed(module)
  for _, name in ipairs(config.run_modules) do
    if name == module or (name:sub(-1) == "." and module:sub(1, #name) == name) then return true end
  end
  return false
end

-- msngx.run(module, fn, ...) calls require(module)[fn](...) in a worker
-- thread's VM and answers what it returns: the handler yields meanwhile,
-- so the function may block (document operations, any C library). The
-- arguments and the results cross as BSON in the document API's form
-- (bson_encode, bson_decode{ document = true }: every box comes back as the
-- box it was, ObjectIds and dates included, an int32 stays an int32, integers
-- stay exact, arrays stay arrays, a nil travels as null); they take the same in-flight slots as every other call
-- (max_inflight, call_timeout), with the same errors. Failures:
--   what fn returns, unchanged (its own nil, msg, code)
--   nil, "run m.f: arguments: ...", "invalid"          an argument BSON cannot carry
--   nil, "run m.f: no module m ...", "invalid"         require found no such module
--   nil, "run m.f: module m has no function f", "invalid"
--   nil, "run m.f: Lua error: ...", "server"           a raise in fn or while loading m
--   nil, "run m.f: answer not encodable: ...", "server"
--   nil, "run m.f: too many calls in flight ...", "unavailable" (or the thread failed)
-- module and fn are the app's choice, never a client's: module must be
-- listed in configure's run_modules (a name, or a prefix ending with "."),
-- else the call raises, as it does for a name that is not a string or not
-- a module or function name.
function M.run(module, fn, ...)
  if not config then error("mongostore.ngx.run: call configure{...} first", 2) end
  if type(module) ~= "string" then error("mongostore.ngx.run: module must be a string, got " .. type(module), 2) end
  if type(fn) ~= "string" then error("mongostore.ngx.run: fn must be a string, got " .. type(fn), 2) end
  if not is_module_name(module) then
    error("mongostore.ngx.run: module must be a module name (a.b.c), got '" .. module .. "'", 2)
  end
  if not fn:match(MODULE_NAME) then
    error("mongostore.ngx.run: fn must be a function name, got '" .. fn .. "'", 2)
  end
  if not run_allowed(module) then
    error("mongostore.ngx.run: module '" .. module .. "' is not in configure's run_modules", 2)
  end
  local label = "run " .. module .. "." .. fn
  local c = codecs().bson
  local args, aerr = encode_args(c, ...)
  if not args then return nil, format("%s: %s", label, tostring(aerr)), "invalid" end
  return results(label, c, thread_call(config.call_timeout, "run", config, module, fn, args))
end

------------------------------------------------------------------------
-- The worker: relays and sweep on a timer in each nginx worker process

local worker

-- What the on_external loop asks of a thread (mongostore.ngx_thread's
-- external_*): the decoded answer, or nil, msg, code.
local function external_call(func, label, timeout, ...)
  local c = codecs().json
  local n = select("#", ...)
  local res, werr
  if n == 0 then
    res, werr = thread_call(timeout, func, config)
  else
    local args, aerr = encode_args(c, ...)
    if not args then return nil, format("%s: %s", label, tostring(aerr)), "invalid" end
    res, werr = thread_call(timeout, func, config, args)
  end
  local ok, a, b, d = pcall(results, label, c, res, werr)
  if not ok then return nil, label .. ": " .. tostring(a), "unavailable" end
  return a, b, d
end

-- The claim's limit travels bare (no encoding): a number.
local function external_claim(limit)
  local c = codecs().json
  local ok, a, b, d = pcall(results, "claim_external", c, thread_call(1, "external_claim", config, limit))
  if not ok then return nil, "claim_external: " .. tostring(a), "unavailable" end
  return a, b, d
end

-- Seconds between renewals of the claims a handler holds: a third of the
-- engine's lease (10 s), so that one failed renewal still leaves time.
local EXTERNAL_RENEW = 10 / 3
-- The loop's wait when there is nothing to claim: 50 ms doubling to 1 s.
local EXTERNAL_IDLE_MIN, EXTERNAL_IDLE_MAX = 0.05, 1

-- The steps of external_loop share one loop table x: fn and concurrency as
-- given, wake (a semaphore a finished handler posts), queue[qhead..qlen]
-- (claimed entries not started yet, with a count of its own: the length of
-- a list whose head was set to nil is not reliable), live (light threads ->
-- their entry), running (handlers at work) and open (source_id .. token ->
-- entries of the claim not settled).

-- The key of the claim an entry came with.
local function claim_key(e) return e.source_id .. "\0" .. e.token end

-- Settles an entry through a thread once its handler is done: ok true acks
-- it, anything else is a failed try (why), logged, with its backoff.
local function settle_entry(x, e, ok, why)
  e.settling = true -- its claim may be given back from here: not renewed
  local k = claim_key(e)
  local left = (x.open[k] or 1) - 1
  x.open[k] = left > 0 and left or nil
  local r, err = external_call("external_settle", "settle_external", config.call_timeout, e, ok == true,
                               why ~= nil and tostring(why) or nil, left <= 0)
  if not r then
    ngx.log(ngx.ERR, "mongostore: on_external: outbox ", tostring(e.seq), ": ", tostring(err),
            " (its claim lapses and it comes again)")
  elseif r.outcome == "given_up" then
    ngx.log(ngx.ERR, "mongostore: on_external: ", r.message)
  elseif r.outcome == "retry" then
    ngx.log(ngx.WARN, "mongostore: on_external: ", r.message)
  end
end

-- The body of an entry's light thread: runs the handler, settles the entry
-- and frees its slot.
local function run_entry(x, e)
  local ok, res, why = pcall(x.fn, e)
  if not ok then
    why = res
  elseif res ~= true then
    why = why ~= nil and why or ("on_external returned " .. tostring(res))
  end
  settle_entry(x, e, ok and res == true, why)
  x.running = x.running - 1
  x.wake:post(1)
end

-- The claims held: the entries running and not settling, and those queued.
local function held_claims(x)
  local list = {}
  for _, e in pairs(x.live) do
    if not e.settling then list[#list + 1] = { seq = e.seq, source_id = e.source_id, token = e.token } end
  end
  for i = x.qhead, x.qlen do
    local e = x.queue[i]
    list[#list + 1] = { seq = e.seq, source_id = e.source_id, token = e.token }
  end
  return list
end

-- Renews the claims held; logs each one that ran out meanwhile.
local function renew_claims(x)
  local list = held_claims(x)
  if #list == 0 then return end
  local _, lost = external_call("external_renew", "renew_external", config.call_timeout, list)
  if type(lost) == "table" then
    for _, e in ipairs(lost) do
      ngx.log(ngx.WARN, "mongostore: on_external: outbox ", tostring(e.seq),
              ": its claim ran out while its handler ran; another worker may deliver it too")
    end
  end
end

-- Waits for the light threads that are done, forgetting them.
local function reap_threads(x)
  for t in pairs(x.live) do
    if coroutine.status(t) == "dead" then
      ngx.thread.wait(t)
      x.live[t] = nil
    end
  end
end

-- Claims entries for the free slots into the queue; the number claimed, or
-- nil when the claim failed (logged unless every thread slot was busy).
local function claim_into_queue(x)
  local entries, err = external_claim(x.concurrency - x.running)
  if entries == nil then
    -- every slot busy is load, not a fault: the next round tries again
    if not tostring(err):find("too many calls in flight", 1, true) then
      ngx.log(ngx.WARN, "mongostore: on_external: ", tostring(err))
    end
    return nil
  end
  x.queue, x.qhead, x.qlen = entries, 1, #entries
  for _, e in ipairs(entries) do
    local k = claim_key(e)
    x.open[k] = (x.open[k] or 0) + 1
  end
  return #entries
end

-- Starts a light thread for each queued entry while slots are free; an
-- entry no thread can be had for is settled as a failed try.
local function start_queued(x)
  while x.running < x.concurrency and x.qhead <= x.qlen do
    local e = x.queue[x.qhead]
    x.queue[x.qhead] = nil
    x.qhead = x.qhead + 1
    x.running = x.running + 1
    local t, serr = ngx.thread.spawn(run_entry, x, e)
    if t then
      x.live[t] = e
    else
      x.running = x.running - 1
      ngx.log(ngx.ERR, "mongostore: on_external: could not start a light thread: ", tostring(serr))
      settle_entry(x, e, false, "no light thread: " .. tostring(serr))
    end
  end
end

-- On stopping: lets the running handlers finish and settle, and gives the
-- claims of the entries not started back.
local function drain_external(x)
  for t in pairs(x.live) do ngx.thread.wait(t) end
  local given = {}
  for i = x.qhead, x.qlen do
    local e = x.queue[i]
    local k = claim_key(e)
    if not given[k] then
      given[k] = true
      pcall(M.release_outbox, e.source_id, e.token)
    end
  end
end

-- The on_external loop of one nginx worker (every worker runs one: the
-- claims keep them apart). It claims external entries through a thread,
-- runs fn(entry) in a light thread of this timer for each (cosockets work
-- there), at most `concurrency` at once, renews the claims of the entries it
-- holds every EXTERNAL_RENEW seconds, and settles each entry through a
-- thread once its fn is done: true acks it, anything else (false or nil, err,
-- or a raise) is a failed try, logged, with its backoff on the entry.
local function external_loop(state, fn, concurrency)
  local semaphore = require "ngx.semaphore"
  local x = { fn = fn, concurrency = concurrency, wake = semaphore.new(0), queue = {}, qhead = 1, qlen = 0,
              live = {}, running = 0, open = {} }
  return function(premature)
    if premature then return end
    local idle, last_renew = EXTERNAL_IDLE_MIN, ngx.now()
    while not (state.stopped or ngx.worker.exiting()) do
      local claimed = 0
      if x.qhead > x.qlen and x.running < concurrency then
        claimed = claim_into_queue(x)
        if not claimed then claimed, idle = 0, EXTERNAL_IDLE_MAX end
      end
      start_queued(x)
      reap_threads(x)
      if ngx.now() - last_renew >= EXTERNAL_RENEW then
        last_renew = ngx.now()
        renew_claims(x)
      end
      if x.running >= concurrency then
        x.wake:wait(EXTERNAL_RENEW / 2) -- every slot busy: until a handler is done
      elseif claimed > 0 then
        idle = EXTERNAL_IDLE_MIN -- there was work: claim again at once
      else
        x.wake:wait(idle)
        idle = math.min(idle * 2, EXTERNAL_IDLE_MAX)
      end
    end
    -- stopping: let the running handlers finish and settle, give the rest back
    drain_external(x)
  end
end

-- start_worker's options checked (misuse raises, at start_worker's caller):
-- the handler of external events (on_external, or deliver's webhook) and
-- how many run at once.
local function start_external_opts(opts)
  if opts.on_external ~= nil and type(opts.on_external) ~= "function" then
    error("mongostore.ngx.start_worker: on_external must be a function", 3)
  end
  local on_external = opts.on_external
  local concurrency = opts.external_concurrency or 16
  if opts.deliver ~= nil then
    if on_external then error("mongostore.ngx.start_worker: give on_external or deliver, not both", 3) end
    local webhook = require "mongostore.webhook"
    local ok, herr = pcall(webhook.handler, opts.deliver)
    if not ok then error("mongostore.ngx.start_worker: " .. tostring(herr):gsub("^.-:%d+: ", ""), 3) end
    on_external = herr
    concurrency = opts.deliver.concurrency or opts.external_concurrency or 16
  end
  if type(concurrency) ~= "number" or concurrency % 1 ~= 0 or concurrency < 1 or concurrency > 1024 then
    error("mongostore.ngx.start_worker: external_concurrency must be an integer from 1 to 1024", 3)
  end
  return on_external, concurrency
end

-- Connects the worker's own store and engine (for the direct calls) unless
-- it has them; false when the server cannot be had this tick.
local function ensure_worker_engine(state, log)
  if state.engine then return true end
  local ms = require "mongostore"
  -- one quick attempt per tick: a server that is down must not hold the
  -- worker; the next tick tries again
  local store, err = ms.connect(config.uri, { db = config.db, prefix = config.prefix, wait = 0,
                                              trace_max = config.trace_max })
  if not store then
    log("worker: " .. tostring(err))
    return false
  end
  local charts = config.charts and require(config.charts) or {}
  state.store = store
  state.engine = require("mongostore.engine").new{ store = store, charts = charts, trace = config.trace, log = log,
                                                   inbox = config.inbox, inbox_group = config.inbox_group,
                                                   sweep_batch = config.sweep_batch,
                                                   max_conflicts = config.max_conflicts }
  return true
end

-- One worker step (the relays, the inbox's idle pass, the sweep when asked):
-- in a worker thread while threads work from timers, else directly. A
-- failed step in a thread backs the worker off, doubling up to 5 s.
local function worker_step(state, sweep, log)
  if state.threads ~= false then
    -- the step runs in a worker thread: the timer yields meanwhile
    local res = thread_call(1, "worker_step", config, sweep)
    if not res then return end -- every slot busy: the next tick tries again
    local stepped, terr
    if res[1] then stepped, terr = res[2], res[3] else terr = res[2] end
    if stepped then
      state.backoff, state.retry_at = nil, nil
      return
    end
    if state.threads == nil and tostring(terr):find("context", 1, true) then
      state.threads = false -- this lua module cannot run threads from timers: step directly
    else
      state.backoff = math.min((state.backoff or 0.25) * 2, 5)
      state.retry_at = ngx.now() + state.backoff
      log("worker step: " .. tostring(terr))
      return
    end
  end
  if not ensure_worker_engine(state, log) then return end
  local e = state.engine
  e:relay_spawns()
  e:relay_outbox()
  if e.inbox then require("mongostore.inbox").idle_pass(e) end
  if sweep then e:sweep() end
end

-- The worker's timer callback: one step per tick at most, the sweep on one
-- nginx worker at a time under the lock in dict.
local function worker_tick(state, dict, sweep_interval, lock_ttl, log)
  return function(premature)
    if premature or state.stopped then
      -- reload or shutdown: stop cleanly and let go of the connection
      state.stopped = true
      if state.store then state.store:close() end
      state.store, state.engine = nil, nil
      return
    end
    -- after a failed step (no server, most likely) this worker pauses,
    -- doubling up to 5 s, rather than log and hold a thread every tick
    if state.retry_at and ngx.now() < state.retry_at then return end
    -- one step at a time in this worker: a tick that finds the last step
    -- still running (a slow or silent server) lets it be, so steps never
    -- pile up on the thread slots the requests need
    if state.stepping then return end
    -- the relays and the inbox run on every nginx worker at once (their
    -- claims keep them apart); the sweep on one at a time, under the lock
    local me = tostring(ngx.worker.pid())
    local now = ngx.now()
    local sweep = now - state.last_sweep >= sweep_interval and dict:add("sweep", me, lock_ttl)
    if sweep then state.last_sweep = now end
    state.stepping = true
    local done, err = pcall(worker_step, state, sweep, log)
    state.stepping = false
    if sweep and dict:get("sweep") == me then dict:delete("sweep") end
    if not done then log("worker step: " .. tostring(err)) end
  end
end


-- msngx.start_worker{ interval = 0.1, sweep_interval = 1, lock_dict = "mongostore_locks",
--                     lock_ttl = 10, on_external = fn(entry), external_concurrency = 16 }
-- In init_worker_by_lua. Each step runs in a worker thread (the timer yields
-- meanwhile); where the lua module cannot start threads from a timer it
-- falls back to direct calls, which block this worker's event loop for one
-- short round trip each.
-- on_external: external events (emits with no target) are handed to
-- fn(entry) in light threads of this nginx worker, where cosockets work
-- (external_loop); without it they stay pending, which is logged once.
-- deliver = { url =, secret =, concurrency = 16, timeout = 10, verify = true,
-- headers = }: a ready on_external, the signed webhook of mongostore.webhook
-- (one POST per event), concurrency its external_concurrency.
local START_OPTS = { interval = true, sweep_interval = true, lock_dict = true, lock_ttl = true, on_external = true,
                     external_concurrency = true, deliver = true }

function M.start_worker(opts)
  if not config then error("mongostore.ngx.start_worker: call configure{...} first", 2) end
  opts = opts or {}
  if type(opts) ~= "table" then error("mongostore.ngx.start_worker: opts must be a table", 2) end
  for k in pairs(opts) do
    if not START_OPTS[k] then error("mongostore.ngx.start_worker: unknown option " .. tostring(k), 2) end
  end
  local on_external, concurrency = start_external_opts(opts)
  local interval = opts.interval or 0.1
  local sweep_interval = opts.sweep_interval or 1
  local dict_name = opts.lock_dict or "mongostore_locks"
  local dict = ngx.shared[dict_name]
  if not dict then error("mongostore.ngx.start_worker: lua_shared_dict " .. dict_name .. " is not declared", 2) end
  local lock_ttl = opts.lock_ttl or 10
  local log = function(msg) ngx.log(ngx.WARN, "mongostore: ", msg) end
  local state = { last_sweep = 0, engine = nil, store = nil, stopped = false }
  worker = state

  local ok, err = ngx.timer.every(interval, worker_tick(state, dict, sweep_interval, lock_ttl, log))
  if not ok then return nil, "start_worker: " .. tostring(err), "unavailable" end
  worker_started = true
  if on_external then
    ok, err = ngx.timer.at(0, external_loop(state, on_external, concurrency))
    if not ok then return nil, "start_worker: on_external: " .. tostring(err), "unavailable" end
  elseif ngx.worker.id() == 0 then
    ngx.log(ngx.WARN, "mongostore: start_worker has no on_external: external events (emits with no target) ",
            "are not delivered by this nginx; they stay pending for a worker that has one")
  end
  return true
end

-- Stops this process's worker at its next tick (it also stops by itself on
-- reload and shutdown).
function M.stop_worker()
  if worker then worker.stopped = true end
  worker_started = false
end

return M
