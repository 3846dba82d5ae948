-- mongostore.engine - drives executions through the store: each event is
-- one load by _id, the pure interpreter, and one commit; the spawn relay
-- creates forked children, the outbox relay delivers emitted events, and the
-- timer sweep fires durable timeouts. Every step is safe to repeat, so a
-- crash or a second worker loses nothing and applies no event twice.
local ms = require "mongostore"
local core = require "mongostore.core"
local execution = require "mongostore.execution"
local chart_mod = require "mongostore.chart"
local runtime = require "mongostore.runtime"
local inbox = require "mongostore.inbox"
local contract = require "mongostore.contract"

local type, pairs, ipairs, error, tostring, setmetatable = type, pairs, ipairs, error, tostring, setmetatable
local text_error = core.text_error
local format = string.format

local M = {}

------------------------------------------------------------------------
-- Bounded caches

-- What the engine remembers per process (an execution's chart for the
-- spawn relay, an outbox entry's failed deliveries) is held in an LRU of
-- cache_size entries, so a long-lived worker does not grow with every
-- execution and entry it ever saw (counts of entries another worker
-- delivered were kept for ever before). Losing an entry costs a reload (a
-- chart id never changes) or restarts an entry's count of failed deliveries.
local DEFAULT_CACHE_SIZE = 10000

local new_lru = require("mongostore.lru").new

local Engine = {}
Engine.__index = Engine
-- the relay passes (mongostore.engine.relays)
for name, fn in pairs(require("mongostore.engine.relays").methods) do Engine[name] = fn end
-- claim_external, renew_external, settle_external (mongostore.engine.external)
for name, fn in pairs(require("mongostore.engine.external").methods) do Engine[name] = fn end
-- deliver and deliver_many (mongostore.engine.deliver)
local deliver_mod = require "mongostore.engine.deliver"
for name, fn in pairs(deliver_mod.methods) do Engine[name] = fn end
local delivery_result, log_failed, commit_opts =
  deliver_mod.delivery_result, deliver_mod.log_failed, deliver_mod.commit_opts
M._delivery_result = delivery_result -- for mongostore.ngx_thread

local function default_log(msg)
  io.stderr:write("mongostore.engine: ", msg, "\n")
end

-- The signatures of the public calls (mongostore.contract): a wrong type
-- or a misspelt option raises, naming it.
local COUNT = { "integer", min = 1 }
local NEW = contract.define("engine.new", {
  { "opts", "table", fields = {
      store = { "mongostore.Store", required = true }, charts = "table", trace = "boolean", now = "function",
      max_conflicts = COUNT, max_attempts = COUNT, max_event_bytes = COUNT, batch = COUNT,
      lease = { "number", gt = 0, max = 86400 }, on_external = "function", on_dead_letter = "function",
      log = "function", cache_size = COUNT, batch_delivery = "boolean", inbox = "boolean",
      inbox_max_events = COUNT, inbox_group = { "integer", min = 1, max = 256 }, sweep_batch = COUNT } },
})
local REGISTER = contract.define("engine:register", { { "c", "mongostore.Chart" } })
local SEND = contract.define("engine:send", { { "id", "string" }, { "event", "table" } })
local SEND_MANY = contract.define("engine:send_many", { { "list", "table" } })
local ENQUEUE = contract.define("engine:enqueue", {
  { "id", "string" }, { "event", "table" },
  { "opts", "table?", fields = { priority = { "integer", min = 0, max = 4 } } },
})
local START = contract.define("engine:start", {
  { "chart_id", "string" },
  { "opts", "table?", fields = { id = "string", context = "table", priority = { "integer", min = 0, max = 4 } } },
})
local RECOVER = contract.define("engine:recover", { { "max_passes", "integer?", min = 1 } })
local SECONDS = { "number", min = 0 }
local RUN = contract.define("engine:run", {
  { "opts", "table?", fields = { stop = "function", idle_sleep = SECONDS, sweep_interval = SECONDS } },
})
local SWEEP = contract.define("engine:sweep", { { "now", "number?" } })
local CONTROL = {}
for _, name in ipairs { "cancel", "terminate", "suspend", "resume" } do
  CONTROL[name] = contract.define("engine:" .. name, { { "id", "string" } })
end

-- A chart and, for a .stm chart, the charts of its inline invoke bodies.
local function add_chart(charts, c)
  charts[c.id] = c
  local stm = package.loaded["mongostore.stm"]
  if stm then
    for _, sub in ipairs(stm.submachines(c)) do charts[sub.id] = sub end
  end
end

-- engine.new{ store = store, charts = { chart, ... }, trace = false,
--             now = mongostore.now, max_conflicts = 50, max_attempts = 100, max_event_bytes = 1048576,
--             batch = 100, lease = 10, cache_size = 10000, batch_delivery = true,
--             on_external = fn(entry), on_dead_letter = fn(entry, err), log = fn(msg) }
-- cache_size: the entries each per-process cache holds (see Bounded caches).
-- batch_delivery: true (the default) makes a relay pass deliver its entries
-- together (Batched delivery), within the first half of its lease so that
-- its acks land while its claims hold; false delivers them one at a time.
-- inbox: step and run also run the inbox pass (relay_inbox); on by
-- default, so that what engine:enqueue accepts is delivered. run backs off
-- while the inbox is idle (inbox.idle_pass: 50 ms doubling to 1 s); step
-- always runs it. false opts out (no producer enqueues: save the find).
-- inbox_max_events: the queued events one inbox pass takes at most (1000).
-- inbox_group: how many queued events of one execution the inbox applies in
-- one commit at most (32; 1 to 256): applied in order in memory, one version
-- check, every event marked in the one update.
-- sweep_batch: how many documents with due timers the sweep reads and fires
-- together at most (500): one load, bulk commits and one delete per page.
function M.new(opts)
  -- the engine's configuration is the program's: a value it cannot take raises too
  local bad = NEW:check(opts)
  if bad then error(bad, 2) end
  local charts = {}
  for i, c in ipairs(opts.charts or {}) do
    if not chart_mod.is_chart(c) then
      error(format("engine.new: opts.charts[%d] is not a chart (chart.define)", i), 2)
    end
    add_chart(charts, c)
  end
  local cache_size = opts.cache_size or DEFAULT_CACHE_SIZE
  return setmetatable({
    store = opts.store,
    charts = charts,
    trace = opts.trace == true,
    batch_delivery = opts.batch_delivery ~= false,
    inbox = opts.inbox ~= false,
    inbox_max_events = opts.inbox_max_events or 1000,
    inbox_group = opts.inbox_group or 32,
    sweep_batch = opts.sweep_batch or 500,
    now = opts.now or ms.now,
    max_conflicts = opts.max_conflicts or 50,
    max_attempts = opts.max_attempts or 100,
    on_external = opts.on_external,
    on_dead_letter = opts.on_dead_letter,
    log = opts.log or default_log,
    max_event_bytes = opts.max_event_bytes or 1048576,
    batch = opts.batch or 100,  -- entries a relay pass claims
    lease = opts.lease or 10,   -- seconds a claimed entry is this worker's
    attempts = new_lru(cache_size, true), -- outbox seq -> failed deliveries in this process
    external_retry = new_lru(cache_size), -- outbox seq -> when a failed external entry is tried again
    external_open = new_lru(cache_size),  -- claim_external's claims -> their entries not settled yet
    definitions = new_lru(cache_size),    -- execution id -> definition id (for the spawn relay)
    unresolved = new_lru(cache_size),     -- child id -> true once its unregistered chart was logged
  }, Engine)
end

-- The chart an execution runs: by its definition id, else (a child that
-- another runner, harel's, started for an invoke) by the name it was
-- invoked by.
function Engine:chart_of(exe)
  return self.charts[exe.definition_id] or (exe.definition_fqn and self.charts[exe.definition_fqn])
end

-- Adds a chart after construction.
function Engine:register(c)
  REGISTER:check(c)
  add_chart(self.charts, c)
end

-- The one check of a caller's event, whole, before anything is sent: a
-- wrong Lua type raises (a programming error); a kind or id that is empty or
-- not UTF-8, data that cannot be stored, or an encoded event larger than
-- max_event_bytes returns nil, msg, code and nothing is written.
-- How deep an event's data may nest (data itself is level 1). The core's
-- codecs stop at 100 levels, and an accepted event must stay readable
-- wherever it goes: held in an execution's deferred list (3 levels above
-- it), recorded in its context by an action, and loaded back through
-- mongostore.ngx's thread crossing (4 more) into an HTTP answer (1 more).
-- Refusing it here, before anything is written, keeps every such read
-- within the limit, with room to spare.
local MAX_EVENT_DEPTH = 80
M.MAX_EVENT_DEPTH = MAX_EVENT_DEPTH

-- Whether t nests deeper than `left` levels (stops there, so a cycle ends too).
local function deeper_than(t, left)
  if left <= 0 then return true end
  for _, v in pairs(t) do
    if type(v) == "table" and deeper_than(v, left - 1) then return true end
  end
  return false
end

local function checked_event(self, event, fn)
  if type(event) ~= "table" then error(fn .. ": event must be a table, got " .. type(event), 3) end
  if type(event.kind) ~= "string" then error(fn .. ": event.kind must be a string, got " .. type(event.kind), 3) end
  if event.id ~= nil and type(event.id) ~= "string" then
    error(fn .. ": event.id must be a string, got " .. type(event.id), 3)
  end
  if event.data ~= nil and type(event.data) ~= "table" then
    error(fn .. ": event.data must be a table, got " .. type(event.data), 3)
  end
  if event.created_time ~= nil and type(event.created_time) ~= "number" then
    error(fn .. ": event.created_time must be a number (epoch seconds), got " .. type(event.created_time), 3)
  end
  local why = text_error(event.kind)
  if why then return nil, format("%s: event.kind %s", fn, why), "invalid" end
  if event.id ~= nil then
    why = text_error(event.id)
    if why then return nil, format("%s: event.id %s", fn, why), "invalid" end
  end
  if event.data ~= nil and deeper_than(event.data, MAX_EVENT_DEPTH) then
    return nil, format("%s: event.data is nested deeper than %d levels", fn, MAX_EVENT_DEPTH), "invalid"
  end
  local ev = { id = event.id or ms.uuid(), kind = event.kind, data = event.data or {},
               created_time = event.created_time or self.now(), received_time = self.now() }
  local text, err = execution.event_to_json(ev, "event")
  if not text then return nil, fn .. ": " .. err, "invalid" end
  if #text > self.max_event_bytes then
    return nil, format("%s: the event is %d bytes encoded, more than max_event_bytes (%d)", fn, #text,
      self.max_event_bytes), "too_large"
  end
  return ev
end

local function checked_id(id, fn)
  local why = text_error(id)
  if why then return nil, format("%s: id %s", fn, why) end
  return id
end

local function send_checked(self, id, event, fn, how)
  local _, iderr = checked_id(id, fn)
  local ev, err, code = checked_event(self, event, fn)
  if iderr then return nil, iderr, "invalid" end
  if not ev then return nil, err, code end
  event.id = ev.id
  local ok
  ok, err, code = self:deliver(id, ev, nil, how or true)
  if not ok then return nil, err, code end
  return true, err, code
end

-- engine:send(id, { kind, data, id }) -> true, "applied" | "duplicate", result | nil, msg, code
-- result: { outcome = "transition" | "ignored" | "held" | "forwarded" | "failed" | "finished" | "duplicate",
--           status, active_path, error } (see delivery_result)
-- Delivered once per event id: sending the same id again changes nothing.
function Engine:send(id, event)
  SEND:check(id, event)
  return send_checked(self, id, event, "engine:send")
end

-- engine:send_many({ { id, event }, ... }) -> { [i] = { ok = true, how = "applied" | "duplicate" }
--                                               | { index = i, message = msg, code = code } }
-- send for many events at once (Batched delivery): a few round trips for
-- the whole list, each event still applied once per event id, in list order
-- for one execution. A bad item is refused on its own (its result says why);
-- an item after a failed one for the same execution is not attempted.
function Engine:send_many(list)
  SEND_MANY:check(list)
  local results, items, where = {}, {}, {}
  local bad = {} -- target -> result: the later items of a target whose item was refused wait behind it
  for i, pair in ipairs(list) do
    if type(pair) ~= "table" then error(format("engine:send_many: list[%d] must be a table { id, event }", i), 2) end
    local id, event = pair[1], pair[2]
    local fn = format("engine:send_many: list[%d]", i)
    SEND:check_in(fn, id, event)
    local _, iderr = checked_id(id, fn)
    local ev, err, code = checked_event(self, event, fn)
    if iderr then
      results[i] = contract.failed_item(i, iderr, "invalid")
    elseif not ev then
      results[i] = contract.failed_item(i, err, code)
      bad[id] = results[i]
    elseif bad[id] then
      results[i] = contract.failed_item(i, bad[id].message, bad[id].code)
      results[i].blocked = true
    else
      event.id = ev.id
      items[#items + 1] = { id = id, event = ev, from_outside = true }
      where[#items] = i
    end
  end
  for k, r in ipairs(self:deliver_many(items)) do
    if not r.ok then r.index = where[k] end
    results[where[k]] = r
  end
  return results
end

-- engine:enqueue(id, event[, { priority = 0 }]) -> true, "queued" | "duplicate" | nil, msg, code
-- Hands the event over to the inbox in one insert, without loading the
-- execution: a worker (inbox is on by default; or relay_inbox) delivers it. The
-- event is checked as send checks it (kind, id, data, size), not against a
-- chart's declared types, since the execution is not read. The event id is
-- the entry's key: the same event enqueued again is one entry ("duplicate";
-- "conflict" when that id is queued for another execution). priority: 0
-- (normal, the default, as an execution's own and harel's) to 4 (the most
-- urgent): a pass takes the executions with the most urgent queued event
-- first, the oldest first within a priority.
function Engine:enqueue(id, event, opts)
  local bad = ENQUEUE:check(id, event, opts)
  local _, iderr = checked_id(id, "engine:enqueue")
  local ev, err, code = checked_event(self, event, "engine:enqueue")
  if iderr then return nil, iderr, "invalid" end
  if not ev then return nil, err, code end
  if bad then return nil, bad, "invalid" end
  local priority = opts and opts.priority or 0
  local text
  text, err = execution.event_to_json(ev, "event")
  if not text then return nil, "engine:enqueue: " .. tostring(err), "invalid" end
  event.id = ev.id
  return self.store:_inbox_put(ev.id, id, priority, text)
end

-- Creates an execution from its spec and applies Start in the same first
-- commit. Returns true and the delivery result when this call created it,
-- false when it existed.
function Engine:create(spec)
  local c = self.charts[spec.definition_id]
  if not c then
    return nil, format("engine:start: no chart '%s' is registered", tostring(spec.definition_id)), "invalid"
  end
  local exe = ms.execution(spec)
  local event = { id = "start:" .. exe.id, kind = "Start", data = {} }
  local now = self.now()
  local fx = runtime.apply(c, exe, event, now)
  if fx.failed then log_failed(self, exe.id, "Start", fx) end
  local ok, err, code = self.store:commit(exe, commit_opts(self, exe, event, fx, now))
  if ok then return true, delivery_result(fx.outcome, exe, fx.failed) end
  if code == "conflict" then return false end -- someone created it first: no second Start
  return nil, err, code
end

-- The context values a state's timeout = { context = "key" } reads, checked
-- when start is given them (a hook may set them later, so a key left out is
-- not refused): a number of seconds, >= 0 and finite, or nil and the error.
local function check_timeout_context(c, context)
  local bad
  local function visit(node)
    local t = node.timeout
    if type(t) == "table" and t.context ~= nil then
      local v = context[t.context]
      if v ~= nil and (type(v) ~= "number" or v ~= v or v < 0 or v == math.huge) and not bad then
        bad = format("engine:start: opts.context.%s must be a number of seconds (the timeout of %s), got %s", t.context,
          node.path, type(v) == "number" and tostring(v) or type(v))
      end
    end
    for _, child in ipairs(node.children or {}) do visit(child) end
  end
  visit(c.root)
  return bad
end

-- engine:start("order", { id = "o-1", context = {}, priority = 0 }) -> id, created, result | nil, msg, code
-- The same id again is the same execution: no second Start (created is
-- false, result.outcome "duplicate"); an id that holds another chart's
-- execution is a conflict.
function Engine:start(chart_id, opts)
  local bad = START:check(chart_id, opts)
  opts = opts or {}
  -- values are checked before the chart's Start runs any hook
  local why = text_error(chart_id)
  if why then return nil, "engine:start: chart_id " .. why, "invalid" end
  if opts.id ~= nil then
    why = text_error(opts.id)
    if why then return nil, "engine:start: opts.id " .. why, "invalid" end
  end
  if bad then return nil, bad, "invalid" end
  if opts.context ~= nil then
    if deeper_than(opts.context, MAX_EVENT_DEPTH) then
      return nil, format("engine:start: opts.context is nested deeper than %d levels", MAX_EVENT_DEPTH), "invalid"
    end
    local text, err = ms.json.encode(opts.context, "context")
    if not text then return nil, "engine:start: " .. tostring(err), "invalid" end
    if text:sub(1, 1) ~= "{" then
      return nil, "engine:start: opts.context must be a table with string keys", "invalid"
    end
    local c = self.charts[chart_id]
    local why_not = c and check_timeout_context(c, opts.context)
    if why_not then return nil, why_not, "invalid" end
  end
  -- a chart that declares its inputs takes those and no other field
  local declared = self.charts[chart_id]
  if declared and declared.inputs then
    local fits, ierr = chart_mod.check_inputs(declared, opts.context)
    if not fits then return nil, "engine:start: " .. ierr, "invalid" end
  end
  local id = opts.id or ms.uuid()
  -- no read first: the first commit is an insert, and an id that exists
  -- already conflicts, which means it was started before
  local ok, err, code = self:create{ definition_id = chart_id, id = id, context = opts.context or {},
                                     priority = opts.priority }
  if ok == nil then return nil, err, code end
  if ok == false then
    -- the id exists: the same execution only when it runs the same chart
    local exe, lerr, lcode = self.store:load(id)
    if exe == nil and lerr then return nil, lerr, lcode end
    if exe and exe.definition_id ~= chart_id then
      return nil, format("start %s: the id holds an execution of chart '%s', not '%s'", id, exe.definition_id,
        chart_id), "conflict"
    end
    return id, false, delivery_result("duplicate", exe or {})
  end
  return id, true, err
end

------------------------------------------------------------------------
-- The sweep and the worker loop (the relays are in mongostore.engine.relays)

-- Fires every due timer as its Timeout event; the commit that applies it
-- also disarms it. The due timers are read sweep_batch documents at a time,
-- and each such page is fired together: one find loads every execution with
-- its armed timers, the Timeouts land in bulk writes (deliver_many, each
-- still applied only while its timer is armed with that fire_at; each
-- commit disarms its timer and sets the mark to the earliest timer left),
-- and one bulk write removes the timers no commit disarmed (a Timeout held
-- while suspended, or refused). A timer whose delivery says
-- not_found or invalid is removed too (logged), so that it cannot fire for
-- ever; one that failed otherwise stays for the next sweep. Another page is
-- read while a full page made progress. Returns how many timers it handled.
local SWEEP_PAGES = 1000 -- pages one sweep reads at most
function Engine:sweep(now)
  SWEEP:check(now)
  now = now or self.now()
  local n = 0
  for _ = 1, SWEEP_PAGES do
    local due, read = self.store:due_timers(now, { limit = self.sweep_batch })
    if not due then
      self.log("due_timers: " .. tostring(read))
      return n
    end
    local items = {}
    for i, t in ipairs(due) do
      items[i] = { id = t.execution_id, event = execution.timeout_event(t.execution_id, t.path, t.fire_at),
                   timer_path = t.path }
    end
    local done, handled = {}, 0
    for i, r in ipairs(self:deliver_many(items)) do
      local t = due[i]
      if r.ok or r.code == "not_found" or r.code == "invalid" then
        -- a timer nobody can apply must not fire forever
        if not r.ok then self.log(format("timer %s %s: %s", t.execution_id, t.path, tostring(r.message))) end
        -- a Timeout whose commit disarmed the timer needs no delete
        if not r.disarmed then done[#done + 1] = t end
        handled = handled + 1
      else
        self.log(format("timer %s %s: %s", t.execution_id, t.path, tostring(r.message)))
      end
    end
    if #done > 0 then
      local ok, derr = self.store:delete_timers(done)
      if not ok then self.log("delete_timers: " .. tostring(derr)) end
    end
    n = n + handled
    -- a page of fewer documents than asked for was the last; one whose
    -- timers all failed would be read again as it is. A full page with
    -- nothing due (marks left low, raised as it was read) is read past.
    if read < self.sweep_batch or (handled == 0 and #due > 0) then break end
  end
  return n
end

-- One pass: spawns, then the outbox, the inbox (inbox = true), then due
-- timers. Returns items handled.
function Engine:step()
  local n = self:relay_spawns() + self:relay_outbox()
  if self.inbox then n = n + self:relay_inbox() end
  return n + self:sweep()
end

-- Drains what a crash left in the spawns and the outbox (and due timers).
function Engine:recover(max_passes)
  local bad = RECOVER:check(max_passes)
  if bad then error(bad, 2) end
  local total = 0
  for _ = 1, max_passes or 100 do
    local n = self:step()
    total = total + n
    if n == 0 then break end
  end
  return total
end

-- engine:run{ stop = fn, idle_sleep = 0.05, sweep_interval = 1 }
-- The worker loop: relays as long as there is work, sleeps when there is
-- none, and sweeps timers at least every sweep_interval even under load.
function Engine:run(opts)
  local bad = RUN:check(opts)
  if bad then error(bad, 2) end
  opts = opts or {}
  local stop, idle = opts.stop, opts.idle_sleep or 0.05
  local interval = opts.sweep_interval or 1
  local last_sweep = -math.huge
  while not (stop and stop()) do
    local n = self:relay_spawns() + self:relay_outbox()
    if self.inbox then n = n + inbox.idle_pass(self) end
    local now = self.now()
    if now - last_sweep >= interval then
      last_sweep = now
      n = n + self:sweep(now)
    end
    if n == 0 then ms.sleep(idle) end
  end
end

------------------------------------------------------------------------
-- Control

local function control(self, id, kind, fn)
  return send_checked(self, id, { kind = kind, data = {} }, "engine:" .. fn, "control")
end

-- Cooperative when the chart has a Cancel transition in the active
-- configuration, otherwise it terminates. Reaches the children too.
function Engine:cancel(id) CONTROL.cancel:check(id) return control(self, id, "Cancel", "cancel") end
function Engine:terminate(id) CONTROL.terminate:check(id) return control(self, id, "Terminate", "terminate") end
function Engine:suspend(id) CONTROL.suspend:check(id) return control(self, id, "Suspend", "suspend") end
function Engine:resume(id) CONTROL.resume:check(id) return control(self, id, "Resume", "resume") end

return M
