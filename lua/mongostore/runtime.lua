-- mongostore.runtime - the pure interpreter: (chart, execution, event, now)
-- -> the execution advanced in memory plus the effects of the step (events to
-- emit, children to spawn, timers to arm or cancel). No I/O and no C module.

-- It needs nothing but Lua (mongostore.values gives it null and the array
-- mark), so it runs wherever a chart must be stepped: a worker, OpenResty,
-- a test, a tool. The engine hands the effects to one store commit.
--
-- The algorithm follows SCXML's, in the names XState's core gives it: an
-- event is a macrostep (select a transition, take it as a microstep, then
-- complete the macrostep with eventless transitions until the configuration
-- is stable); a microstep exits states up to the transition's domain, runs
-- its action and enters states down to its target and the target's
-- descendants. Orthogonal regions run as child executions of their own.
local chart_mod = require "mongostore.chart"
local values = require "mongostore.values"
local children = require "mongostore.runtime.children"

local type, pairs, ipairs, error, tostring, pcall, require = type, pairs, ipairs, error, tostring, pcall, require
local setmetatable, getmetatable = setmetatable, getmetatable
local format, insert, remove = string.format, table.insert, table.remove
local is_ancestor = chart_mod.is_ancestor
local array = values.array
local copy = children.copy

local M = {}
M.copy = copy

local FINISHED = { DONE = true, CANCELLED = true, FAILED = true }
M.FINISHED = FINISHED

-- How many eventless microsteps one macrostep may take before the chart is
-- declared not to settle (a cycle of automatic transitions).
local MAX_EVENTLESS = 10000

-- The id of an event the runtime creates itself: the emitting execution's id,
-- the version the step applies to and the event's 1-based position in the
-- step's emits. Replaying a step (after a crash, or on a second worker) gives
-- the same ids, so the target's dedupe refuses a copy; and no two steps of
-- one execution share a version. The "emit:" prefix keeps them apart from
-- harel's ids (uuid hex, "timeout:..."), from ours ("start:", "finished:",
-- "<id>@<child>") and from act.idempotency_key ("<id>:<version>:<n>"); the
-- version and position are the last two fields, so an execution id holding
-- ':' cannot make two of them equal.
local function emit_id(execution_id, version, n)
  return format("emit:%s:%d:%d", execution_id, version, n)
end
M.emit_id = emit_id

------------------------------------------------------------------------
-- Errors

-- An action's failure, carried up through the step as an error object.
local ActionError = {}
ActionError.__index = ActionError
ActionError.__tostring = function(e) return e.message end

local function action_error(err)
  if type(err) == "table" and getmetatable(err) == ActionError then return err end
  local kind, msg = "error", tostring(err)
  if type(err) == "table" then
    kind = type(err.type) == "string" and err.type or kind
    msg = err.message ~= nil and tostring(err.message) or msg
  end
  return setmetatable({ message = kind .. ": " .. msg }, ActionError)
end

------------------------------------------------------------------------
-- A step: one event applied to one execution, and the effects it collects.

local Step = {}
Step.__index = Step
-- regions, invoked charts and their joins (mongostore.runtime.children)
for name, fn in pairs(children.methods) do Step[name] = fn end

local function new_step(chart, exe, event, now)
  return setmetatable({
    chart = chart, exe = exe, event = event, now = now,
    emits = {}, spawns = {}, timer_ops = {}, timer_order = {}, n_actions = 0, actions = {},
  }, Step)
end

function Step:node(path)
  return self.chart.index[path or ""]
end

function Step:root()
  return self.chart.index[self.exe.root_path] or self.chart.root
end

function Step:emit(target_id, event)
  local n = #self.emits + 1
  if event.id == nil then event.id = emit_id(self.exe.id, self.exe.version or 0, n) end
  if event.data == nil then event.data = {} end
  self.emits[n] = { target_id = target_id, event = event }
end

-- Timer ops collapse per path: the last one in the step wins, so a state left
-- and entered again in one step ends armed, and one update never both sets
-- and unsets a key.
function Step:timer(action, path, fire_at)
  if self.timer_ops[path] == nil then self.timer_order[#self.timer_order + 1] = path end
  self.timer_ops[path] = { action = action, path = path, fire_at = fire_at }
end

-- Fails the step as an action would, with msg.
function Step:fail(msg, where)
  local e = action_error(msg)
  e.where = where
  error(e, 0)
end

-- Runs a user function (hook, guard, selector) as an action: its error fails
-- the step with "<type>: <message>".
function Step:call(name, fn, ...)
  local ok, r = pcall(fn, ...)
  if not ok then
    local e = action_error(r)
    e.where = e.where or name
    error(e, 0)
  end
  return r
end

-- The act table a hook receives: emit into this commit's outbox, and a key
-- that is the same each time this event is applied at this version.
function Step:act(name)
  local exe, step = self.exe, self
  local n = self.n_actions
  self.n_actions = n + 1
  self.actions[#self.actions + 1] = name
  return {
    execution_id = exe.id,
    parent_id = exe.parent_id,
    now = self.now,
    idempotency_key = format("%s:%d:%d", exe.id, exe.version, n),
    emit = function(target_id, kind, data)
      if target_id ~= nil and (type(target_id) ~= "string" or target_id == "") then
        error("act.emit: target_id must be a non-empty string or nil", 2)
      end
      if type(kind) ~= "string" or kind == "" then error("act.emit: kind must be a non-empty string", 2) end
      if data ~= nil and type(data) ~= "table" then error("act.emit: data must be a table", 2) end
      step:emit(target_id, { kind = kind, data = data or {} })
    end,
  }
end

function Step:run_hook(node, which)
  local fn = node[which]
  if fn then
    local label = which .. " " .. (node.path == "" and "(root)" or node.path)
    self:call(label, fn, self.exe.context, self.event, self:act(label))
  end
end

------------------------------------------------------------------------
-- Entering and exiting one state: its hook, its timer, its history

function Step:timeout_seconds(node)
  local t = node.timeout
  if type(t) == "number" then return t end
  local v = self.exe.context[t.context]
  if type(v) ~= "number" or v ~= v or v < 0 or v == math.huge then
    local e = action_error(format("timeout of %s: context.%s must be a number of seconds, got %s",
      node.path, t.context, type(v)))
    e.where = "timeout of " .. node.path
    error(e, 0)
  end
  return v
end

function Step:enter_state(node)
  self.exe.active_path = node.path
  self:run_hook(node, "on_enter")
  if node.timeout then self:timer("schedule", node.path, self.now + self:timeout_seconds(node)) end
  if node.parent then self.exe.history[node.parent.path] = node.path end
end

function Step:exit_state(node)
  self.exe.active_path = node.path
  self:run_hook(node, "on_exit")
  if node.timeout then self:timer("cancel", node.path) end
  if node.parent then self.exe.history[node.parent.path] = node.path end
  if node.joins then
    self:stop_regions(node)
  elseif node.invoke then
    self:stop_invoke(node)
  end
end

------------------------------------------------------------------------
-- Selecting transitions

-- The active configuration, innermost first, from the active state up to
-- (not including) the execution's root.
function Step:configuration()
  local out, n = {}, self:node(self.exe.active_path)
  local root = self:root()
  while n and n ~= root do
    out[#out + 1] = n
    n = n.parent
  end
  return out
end

-- A transition is enabled by its event (an eventless one by none) and its
-- guard.
function Step:is_enabled(t, event)
  if event then
    if not t.events or not t.events[event.kind] then return false end
  elseif t.events then
    return false
  end
  if t.guard then
    local data = event and event.data or {}
    return self:call(t.label .. " (where)", t.guard, data, self.exe.context, event) and true or false
  end
  return true
end

-- Whether a state is inside what this execution runs (a region child runs
-- only its region).
function Step:within(node)
  local root = self:root()
  return root == self.chart.root or node == root or is_ancestor(root, node)
end

-- A transition out of a region's own root may only lead further into it.
function Step:stays_inside(t)
  if t.targetless then return true end
  if t.target then return t.target ~= self:root() and self:within(t.target) end
  for _, x in pairs(t.targets) do
    if x == self:root() or not self:within(x) then return false end
  end
  return true
end

-- Whether t may be taken from its source node n by this execution.
function Step:may_take(n, t)
  return not t.join and (n ~= self:root() or self:stays_inside(t))
end

-- The first enabled transition for event, innermost source first,
-- declaration order within a source. `from` limits the search to that state
-- and its ancestors (a Timeout resolves from the state that timed out upward).
function Step:select_transition(event, from)
  local nodes = self:configuration()
  local root = self:root()
  if root ~= self.chart.root then nodes[#nodes + 1] = root end
  local start = 1
  if from then
    start = nil
    for i, n in ipairs(nodes) do if n == from then start = i break end end
    if not start then return nil end
  end
  for i = start, #nodes do
    local n = nodes[i]
    for _, t in ipairs(n.outgoing) do
      if self:may_take(n, t) and self:is_enabled(t, event) then return t end
    end
  end
  return nil
end

-- An automatic transition of the active state itself: a composite's
-- completion transition waits until its active child has finished.
function Step:select_eventless_transition(active)
  for _, t in ipairs(active.outgoing) do
    if self:may_take(active, t) and self:is_enabled(t, nil) then return t end
  end
  return nil
end

-- The target of a transition: its own, or the one its selector names.
function Step:resolve_target(t, event)
  if not t.select then return t.target end
  local key = self:call(t.label .. " (select)", t.select, self.exe.context, event)
  local target = t.targets[tostring(key)]
  if not target then
    local e = action_error(format("%s: selector returned '%s', which names no target", t.label, tostring(key)))
    e.where = t.label .. " (selector)"
    error(e, 0)
  end
  return target
end

-- The transition's domain: the closest proper ancestor of its source that
-- contains the target (the state a transition does not leave), nil for none.
local function transition_domain(source, target)
  local p = source.parent
  while p do
    if p == target or is_ancestor(p, target) then return p end
    p = p.parent
  end
  return nil
end

------------------------------------------------------------------------
-- Microstep: one transition, with UML's external semantics

-- Exits the active configuration innermost first up to (not including) domain.
function Step:exit_states(domain)
  local n = self:node(self.exe.active_path)
  while n and n ~= domain do
    self:exit_state(n)
    n = n.parent
  end
  self.exe.active_path = domain.path
end

-- Enters outermost first from below domain down to target, then the
-- target's descendants.
function Step:enter_states(target, domain)
  local path = {}
  local n = target
  while n and n ~= domain do
    insert(path, 1, n)
    n = n.parent
  end
  for _, node in ipairs(path) do self:enter_state(node) end
  self:enter_descendants(target)
end

-- From a composite just entered down to a leaf: its remembered child (deep
-- history, unless the state says history = false) or its initial state. An
-- orthogonal state spawns its regions and parks there.
function Step:enter_descendants(node)
  local exe = self.exe
  while true do
    if node.orthogonal then
      self:spawn_regions(node)
      return
    end
    if node.invoke then return end -- its child starts when the macrostep settles here
    if #node.children == 0 then return end
    local child
    if node.history then child = self:node(exe.history[node.path]) end
    if not child or child.parent ~= node then child = node.initial end
    self:enter_state(child)
    node = child
  end
end

-- Takes transition t to target: exits up to its domain, runs its action,
-- enters down to the target. A targetless transition runs its action only:
-- the configuration, its history and its timers stay as they are.
function Step:microstep(t, target, event)
  self.took = true
  if t.targetless then
    if t.action then self:call(t.label .. " (action)", t.action, self.exe.context, event, self:act(t.label)) end
    return
  end
  local domain = transition_domain(t.source, target) or self.chart.root
  if not self:within(domain) then domain = self:root() end -- a region never leaves itself
  self:exit_states(domain)
  if t.action then
    local label = t.label
    self:call(label .. " (action)", t.action, self.exe.context, event, self:act(label))
  end
  self:enter_states(target, domain)
end

------------------------------------------------------------------------
-- Completing a macrostep: joins, automatic transitions, deferred events, sinks

function Step:deferred_kinds()
  local kinds = {}
  for _, n in ipairs(self:configuration()) do
    for k in pairs(n.defer) do kinds[k] = true end
  end
  return kinds
end

-- A deferred event that the configuration now handles, oldest first:
-- taken out of the deferred list and taken as a microstep. True if one was.
function Step:take_deferred()
  local exe = self.exe
  for i, ev in ipairs(exe.deferred) do
    local t = self:select_transition(ev)
    if t then
      remove(exe.deferred, i)
      self.event = ev
      self:microstep(t, self:resolve_target(t, ev), ev)
      return true
    end
  end
  return false
end

-- Takes eventless transitions until the configuration is stable: a join, an
-- automatic transition, a deferred event the new configuration handles, or a
-- sink, which finishes its parent with its outcome (at the top, the execution).
function Step:complete_macrostep()
  local exe = self.exe
  local root = self:root()
  for _ = 1, MAX_EVENTLESS do
    if FINISHED[exe.status] or exe.status ~= "RUNNING" then return end
    local active = self:node(exe.active_path)
    if active.invoke then
      self:spawn_invoke(active)
      if not active.each then return end -- waits for Returned
    end
    local orthogonal = active.joins and self:complete_orthogonal(active)
    if orthogonal == "wait" then return end
    if orthogonal ~= "taken" then
      local auto = self:select_eventless_transition(active)
      if auto then
        self:microstep(auto, self:resolve_target(auto, nil), nil)
      elseif not self:take_deferred() then
        if #active.outgoing > 0 and not active.final then return end
        -- a sink: it finishes its parent with its outcome
        if active.outcome ~= nil and exe.outcome == nil then exe.outcome = active.outcome end
        self:exit_state(active)
        local parent = active.parent
        if not parent or parent == root then
          self:finish()
          return
        end
        exe.history[parent.path] = nil
        exe.active_path = parent.path
      end
    end
  end
  local e = action_error(format("the chart does not settle: more than %d automatic steps", MAX_EVENTLESS))
  e.where = "automatic transitions from " .. tostring(exe.active_path)
  error(e, 0)
end

-- The execution reached the end of its chart (or of its region).
function Step:finish()
  local exe = self.exe
  local root = self:root()
  if exe.parent_id ~= nil and root ~= self.chart.root then
    local at = exe.active_path
    self:exit_state(root)
    -- harel's region rests on the final state it reached
    if self.chart.dialect == "harel" then exe.active_path = at end
  end
  exe.status = "DONE"
  exe.finished_at = self.now
  self:report_finished()
end

------------------------------------------------------------------------
-- Macrostep: one event of the chart's own

function Step:macrostep(event)
  local exe = self.exe
  local active = self:node(exe.active_path)
  if self.chart.dialect == "harel" and active.orthogonal and self:forward_to_regions(event) then
    self.forwarded = true
    return
  end
  local t = self:select_transition(event)
  if t then
    self:microstep(t, self:resolve_target(t, event), event)
  elseif active.orthogonal and #self:live_children(false) > 0 then
    -- the regions run the chart below this state: they get the event
    for _, cid in ipairs(self:live_children()) do
      self:emit(cid, { id = event.id .. "@" .. cid, kind = event.kind, data = copy(event.data),
                       created_time = event.created_time })
    end
    self.forwarded = true
  elseif self:deferred_kinds()[event.kind] then
    exe.deferred[#exe.deferred + 1] = event
    self.held = true
  else
    self:run_hook(active, "on_activity")
  end
  self:complete_macrostep()
  exe.processed_events = exe.processed_events + 1
end

------------------------------------------------------------------------
-- The events the engine gives meaning to

function Step:start(data)
  local exe = self.exe
  if exe.status ~= "PENDING" then return end
  if type(data) == "table" then
    for k, v in pairs(data) do exe.context[k] = v end
  end
  exe.status = "RUNNING"
  exe.created_at = exe.created_at or self.now
  local root = self:root()
  if root ~= self.chart.root then
    -- a region runs its own state's hooks and timer
    self:enter_state(root)
  end
  self:enter_descendants(root)
  self:complete_macrostep()
end

-- Cancels every timer the active configuration may hold.
function Step:cancel_all_timers()
  local root = self:root()
  for _, n in ipairs(self:configuration()) do
    if n.timeout then self:timer("cancel", n.path) end
  end
  if root.timeout then self:timer("cancel", root.path) end
end

function Step:stop(status, child_event)
  local exe = self.exe
  self:cancel_all_timers()
  self:emit_to_regions(child_event)
  exe.status = status
  exe.finished_at = self.now
  self:report_finished()
end

function Step:timeout(event, armed, opts)
  local exe = self.exe
  local data = event.data or {}
  local path, fire_at = data.path, data.fire_at
  if type(path) ~= "string" then return end
  if exe.status ~= "RUNNING" then return end
  -- opts.timer_checked: the engine read the timer armed now (armed, nil for
  -- none); a different fire_at means the state was re-armed or left since
  if (opts.timer_checked or armed ~= nil) and armed ~= fire_at then return end
  local node = self:node(path)
  if not node then return end
  local in_config = node == self:root()
  for _, n in ipairs(self:configuration()) do if n == node then in_config = true break end end
  if not in_config then return end -- left since: stale
  -- the timer this event came from is spent, unless the step arms it again
  self:timer("cancel", path)
  local t = self:select_transition(event, node)
  if t then
    self:microstep(t, self:resolve_target(t, event), event)
    self:complete_macrostep()
    exe.processed_events = exe.processed_events + 1
  end
end

function Step:cancel(event)
  local exe = self.exe
  if FINISHED[exe.status] then return end
  if exe.status == "RUNNING" or exe.status == "CANCELLING" then
    exe.status = "RUNNING"
    local t = self:select_transition(event)
    if t then
      -- cooperative: the chart models its own cleanup
      -- (leaving a fork on the way tells its regions)
      self:microstep(t, self:resolve_target(t, event), event)
      self:complete_macrostep()
      return
    end
  end
  -- no cleanup modelled here: it ends now, and its regions get the Cancel
  -- to handle their own way
  self:stop("CANCELLED", "Cancel")
end

function Step:reset()
  local exe = self.exe
  local active = self:node(exe.active_path)
  if active and active.joins then
    self:stop_regions(active)
  elseif active and active.invoke then
    self:stop_invoke(active)
  end
  self:cancel_all_timers()
  exe.children, exe.context, exe.history, exe.deferred = {}, {}, {}, array()
  exe.active_path, exe.outcome, exe.error, exe.finished_at = nil, nil, nil, nil
  exe.status = "PENDING"
  self:start(self.event.data)
end

function Step:set_state(event)
  local exe = self.exe
  local path = event.data and event.data.path
  local node = type(path) == "string" and self:node(path)
  if not node or #node.children > 0 or exe.status ~= "RUNNING" or #self:live_children(true) > 0 then return end
  local root = self:root()
  if not (root == self.chart.root or is_ancestor(root, node)) then return end
  local p = node.parent
  while p and p ~= root do
    if p.orthogonal then return end
    p = p.parent
  end
  exe.deferred = array()
  exe.active_path = node.path
  self:complete_macrostep()
end

function Step:suspend()
  local exe = self.exe
  if exe.status ~= "RUNNING" then return end
  exe.status = "SUSPENDED"
  self:emit_to_regions("Suspend")
end

-- How an event held while suspended is applied on Resume, by kind.
local ON_HELD = {
  Timeout = function(step, ev) step:timeout(ev, nil, {}) end,
}
local function on_held_event(step, ev)
  step.event = ev
  step:macrostep(ev)
end

function Step:resume()
  local exe = self.exe
  if exe.status ~= "SUSPENDED" then return end
  exe.status = "RUNNING"
  self:emit_to_regions("Resume")
  -- what arrived while suspended is delivered now, in order
  local held = exe.deferred
  exe.deferred = array()
  for _, ev in ipairs(held) do
    if exe.status ~= "RUNNING" then
      exe.deferred[#exe.deferred + 1] = ev
    else
      (ON_HELD[ev.kind] or on_held_event)(self, ev)
    end
  end
  self:complete_macrostep()
end

------------------------------------------------------------------------
-- Dispatch by kind

-- An event a suspended execution cannot apply is held, not lost: Resume
-- delivers it.
local function hold(step, event)
  local deferred = step.exe.deferred
  deferred[#deferred + 1] = event
  step.held = true
end

-- The engine's events, which apply in any status (each handler says when it
-- acts); every other kind is the chart's own (on_chart_event).
local ON_KIND = {
  Start = function(step, event) step:start(event.data) end,
  Reset = function(step) if step.exe.status ~= "CANCELLING" then step:reset() end end,
  Cancel = function(step, event) step:cancel(event) end,
  Terminate = function(step) if not FINISHED[step.exe.status] then step:stop("CANCELLED", "Terminate") end end,
  Suspend = function(step) step:suspend() end,
  Resume = function(step) step:resume() end,
  Finished = function(step, event) step:child_finished(event) end,
  SetState = function(step, event) step:set_state(event) end, -- RUNNING only
  Timeout = function(step, event, opts)
    if step.exe.status == "SUSPENDED" then return hold(step, event) end
    step:timeout(event, opts.armed, opts)
  end,
}

local function on_chart_event(step, event)
  local status = step.exe.status
  if status == "SUSPENDED" then return hold(step, event) end
  if status ~= "RUNNING" then return end
  step:macrostep(event)
end

function Step:apply(event, opts)
  local handler = ON_KIND[event.kind] or on_chart_event
  handler(self, event, opts)
end

------------------------------------------------------------------------
-- The interface

-- Applies event to exe (mutated in place) at time now. opts.armed is the
-- fire_at currently armed for a Timeout's path (nil: unknown or none).
-- exe is an Execution or a plain table of its fields (id, version, status,
-- root_path, active_path, context, history, children, deferred, invoke_seq,
-- processed_events, parent_id, child_id, ...).
-- Returns the effects:
--   { emits = { {target_id, event} }, spawns = { {child_id, root_path, context} },
--     timers = { {action, path, fire_at} }, from = path, to = path, actions = {names},
--     failed = message|nil, failed_in = where|nil,
--     outcome = "transition" | "ignored" | "held" | "forwarded" | "failed" | "finished" }
-- An action that raises leaves the execution FAILED with its error, its
-- timers cancelled and nothing else of the step kept.
-- What the event did, for the caller and the trace: "finished" (the
-- execution had ended before it), "transition" (a transition was taken, or
-- the status changed: Start, Cancel, Suspend, ...), "held" (deferred, or held
-- while suspended), "forwarded" (handed to the live regions or children),
-- else "ignored" (nothing changed; the commit still marks it processed).
local function outcome_of(step, status_before)
  if FINISHED[status_before] then return "finished" end
  if step.took or step.exe.status ~= status_before then return "transition" end
  if step.held then return "held" end
  if step.forwarded then return "forwarded" end
  return "ignored"
end

function M.apply(chart, exe, event, now, opts)
  opts = opts or {}
  local step = new_step(chart, exe, event, now)
  local from, status_before = exe.active_path, exe.status
  local ok, err = pcall(Step.apply, step, event, opts)
  local failed, failed_in
  if not ok then
    if getmetatable(err) ~= ActionError then error(err, 0) end -- a bug in the runtime itself
    failed = err.message
    failed_in = err.where
    step.emits, step.spawns = {}, {}
    for _, p in ipairs(step.timer_order) do
      if step.timer_ops[p].action == "schedule" then step.timer_ops[p] = { action = "cancel", path = p } end
    end
    step:cancel_all_timers()
    step:emit_to_regions("Terminate", { reason = "parent failed" })
    exe.status = "FAILED"
    exe.error = failed
    exe.finished_at = now
    step:report_finished()
  end
  exe.updated_at = now
  local timers = {}
  for _, p in ipairs(step.timer_order) do timers[#timers + 1] = step.timer_ops[p] end
  return {
    emits = step.emits,
    spawns = step.spawns,
    timers = timers,
    from = from,
    to = exe.active_path,
    actions = step.actions,
    failed = failed,
    failed_in = failed_in,
    outcome = failed and "failed" or outcome_of(step, status_before),
  }
end

-- The Timeout event of a timer. Its id is harel's, and so its form lives with
-- the other harel formats in mongostore.execution (which needs the C core);
-- kept here for callers that step charts with the engine.
function M.timeout_event(execution_id, path, fire_at)
  return require("mongostore.execution").timeout_event(execution_id, path, fire_at)
end

return M
