-- mongostore.runtime.children - the interpreter's steps that concern child
-- executions: orthogonal regions, invoked charts and their fan-outs (starting
-- them, stopping them, what they report and the joins that wait on them).
-- Pure Lua like mongostore.runtime, which puts these methods on its Step.
local values = require "mongostore.values"

local type, pairs, ipairs = type, pairs, ipairs
local format, sort = string.format, table.sort
local null, array, is_array = values.null, values.array, values.is_array

local M = {}

-- The Step methods defined here (runtime.lua's Step gets each of them).
local Step = {}
M.methods = Step

-- Sends the same control event to every child still running: regions and
-- invoked charts alike (a cancel, a suspend reaches them all).
function Step:emit_to_regions(kind, data)
  for _, cid in ipairs(self:live_children(true)) do
    self:emit(cid, { kind = kind, data = data or {} })
  end
end


------------------------------------------------------------------------
-- Orthogonal regions: each region runs as a child execution

-- The children still running, sorted: the regions, which share the chart
-- and see its events, and with submachines also the invoked charts, which
-- are black boxes to the parent's events.
function Step:live_children(submachines)
  local out = {}
  for cid, ch in pairs(self.exe.children) do
    if not ch.finished and (submachines or not ch.submachine) then out[#out + 1] = cid end
  end
  sort(out)
  return out
end

-- Deep copy of a context for a child: the child's context is its own.
local function copy(v, seen)
  if type(v) ~= "table" or v == null then return v end
  seen = seen or {}
  if seen[v] then return seen[v] end
  local t = {}
  seen[v] = t
  for k, x in pairs(v) do t[k] = copy(x, seen) end
  if is_array(v) then array(t) end
  return t
end
M.copy = copy

-- Entering an orthogonal state: one child per region, ids fixed by the
-- state's entry count so a replay names the same children.
function Step:spawn_regions(node)
  local exe = self.exe
  local seq = exe.invoke_seq[node.path] or 0
  exe.children = {}
  for _, region in ipairs(node.children) do
    local cid = format("%s:%s:%d", exe.id, region.path, seq)
    exe.children[cid] = { root_path = region.path, finished = false, result = {}, submachine = false,
                          key = region.path }
    local context
    if node.with then
      -- the orthogonal state's `with`: each region starts with those keys only
      context = {}
      for ck, pk in pairs(node.with) do
        if exe.context[pk] ~= nil then context[ck] = copy(exe.context[pk]) end
      end
    else
      context = copy(exe.context)
    end
    self.spawns[#self.spawns + 1] = { child_id = cid, root_path = region.path, context = context }
  end
end

-- Leaving an orthogonal state (or a fan-out): a later entry spawns fresh
-- children, and any child still running is told to stop.
function Step:stop_regions(node)
  local exe = self.exe
  exe.invoke_seq[node.path] = (exe.invoke_seq[node.path] or 0) + 1
  self:emit_to_regions("Cancel", { reason = "left " .. node.path })
end

------------------------------------------------------------------------
-- Invoke: another chart runs as a child execution

-- The child id of a single invoke at its current entry.
function Step:invoke_id(node)
  return format("%s:%s:%d", self.exe.id, node.path, self.exe.invoke_seq[node.path] or 0)
end

-- What a child of an invoke starts with: the keys `with` names, copied from
-- the parent's context (a fan-out's `as` name standing for the entry), and
-- the chart to run, which the spawn relay takes out (harel's form, so
-- either side's relay can create the child).
function Step:invoke_context(node, item)
  local ctx, context = {}, self.exe.context
  for ck, pk in pairs(node.with) do
    if node.as ~= nil and pk == node.as then
      ctx[ck] = copy(item)
    elseif context[pk] ~= nil then
      ctx[ck] = copy(context[pk])
    elseif node.each then
      ctx[ck] = null -- a fan-out's child gets the key, as harel passes it
    end
  end
  if node.each and not node.with_given then ctx[node.as] = copy(item) end
  ctx.__invoke_fqn__ = node.invoke
  return ctx
end

function Step:spawn_child(cid, node, key, item)
  self.exe.children[cid] = { root_path = "", finished = false, result = {}, submachine = true, key = key }
  self.spawns[#self.spawns + 1] = { child_id = cid, root_path = "", context = self:invoke_context(node, item) }
end

-- Reaching an invoke state starts its child once per entry: one for a
-- single invoke, one per entry of the context list for a fan-out (none for
-- an empty list, and the join passes at once).
function Step:spawn_invoke(node)
  local exe = self.exe
  if node.each == nil then
    local cid = self:invoke_id(node)
    if exe.children[cid] == nil then self:spawn_child(cid, node, node.path) end
    return
  end
  local marker = self:invoke_id(node)
  local owned = marker .. ":"
  for c in pairs(exe.children) do
    if c:sub(1, #owned) == owned then return end -- this entry fanned out already
  end
  exe.children = {}
  local list = exe.context[node.each]
  if type(list) ~= "table" or list == null then
    if list ~= nil and list ~= null then
      self:fail(format("invoke of %s for each entry: context.%s must be a list, got %s", node.path,
        node.each, type(list)), "invoke of " .. node.path)
    end
    list = {}
  end
  for i, item in ipairs(list) do
    self:spawn_child(format("%s:%d", marker, i - 1), node, format("%s:%d", node.path, i - 1), item)
  end
end

-- Leaving a single invoke state before its child returned: the child is
-- told to stop, and a later entry starts a fresh one.
function Step:stop_invoke(node)
  local exe = self.exe
  local cid = self:invoke_id(node)
  exe.invoke_seq[node.path] = (exe.invoke_seq[node.path] or 0) + 1
  local ch = exe.children[cid]
  if ch and not ch.finished then
    self:emit(cid, { kind = "Cancel", data = { reason = "left " .. node.path } })
  end
end

-- The child of the active single invoke finished: its outcome and result
-- come to the chart as a Returned event. A chart with no transition for it
-- stays where it is. True when a transition was taken.
function Step:returned(cid)
  local exe = self.exe
  local ch = exe.children[cid]
  local data = {}
  for k, v in pairs(ch.result or {}) do data[k] = v end
  data.outcome = ch.outcome == nil and null or ch.outcome
  local event = { id = "returned:" .. cid, kind = "Returned", data = data }
  local t = self:select_transition(event)
  if not t then return false end
  -- spent: leaving the state starts no Cancel, a later entry a fresh child
  exe.children[cid] = nil
  self.event = event
  self:microstep(t, self:resolve_target(t, event), event)
  return true
end

local function region_ok(outcome)
  return outcome == nil or outcome == "success"
end

-- A chart of harel's conventions (dialect = "harel") keys
-- every child's { outcome, carried keys... } and sets region_results only
-- when some child reported something; the default keys each finished
-- child's { outcome, context }.
function Step:collect_region_results()
  local results = {}
  if self.chart.dialect == "harel" then
    local any = false
    for _, ch in pairs(self.exe.children) do
      local r = { outcome = ch.outcome == nil and null or ch.outcome }
      if ch.outcome ~= nil then any = true end
      for k, v in pairs(ch.result or {}) do
        r[k] = v
        any = true
      end
      results[ch.key ~= "" and ch.key or ch.root_path] = r
    end
    if any then self.exe.context.region_results = results end
    return
  end
  for _, ch in pairs(self.exe.children) do
    if ch.finished then
      results[ch.key ~= "" and ch.key or ch.root_path] = { outcome = ch.outcome or null, context = ch.result or {} }
    end
  end
  self.exe.context.region_results = results
end


-- A join out of an orthogonal state, once its regions are done as it asks
-- ("all" or "any"). Returns the join and whether every finished region
-- succeeded, or nil and whether every region has finished.
function Step:select_join_transition(node)
  local all, any, ok_all = true, false, true
  local n = 0
  for _, ch in pairs(self.exe.children) do
    n = n + 1
    if ch.finished then
      any = true
      if not region_ok(ch.outcome) then ok_all = false end
    else
      all = false
    end
  end
  if n == 0 then all = true end
  for _, t in ipairs(node.outgoing) do
    if t.join and ((t.join == "all" and all) or (t.join == "any" and any)) and self:is_enabled(t, nil) then
      return t, ok_all
    end
  end
  return nil, all
end


-- Whether the active orthogonal state keeps the macrostep going: "taken"
-- when a join was taken, "wait" while regions run or a transition may still
-- lead out, nil when the state is done and is to be handled as a sink.
function Step:complete_orthogonal(active)
  local t, ok = self:select_join_transition(active)
  if t then
    self:collect_region_results()
    local target = (not ok and t.else_target) or self:resolve_target(t, nil)
    self:microstep(t, target, nil)
    return "taken"
  end
  if not ok then return "wait" end -- regions still running
  -- every region finished and no join leads out: the state is done
  self:collect_region_results()
  if #active.outgoing > 0 then return "wait" end
  return nil
end


function Step:report_finished()
  local exe = self.exe
  if exe.parent_id == nil then return end
  -- a region stopped from outside has no outcome of its own: say how it ended,
  -- so a join does not count it as a success
  local outcome = exe.outcome or (exe.status == "CANCELLED" and "cancelled") or
                  (exe.status == "FAILED" and "failed") or null
  local data = { child_id = exe.child_id or exe.id, outcome = outcome }
  if self.chart.dialect == "harel" then
    -- harel's form: the carried keys beside the outcome, nothing else
    for _, k in ipairs(self:root().carry or {}) do
      if exe.context[k] ~= nil then data[k] = copy(exe.context[k]) end
    end
  else
    local result = copy(exe.context)
    result.region_results = nil
    data.status, data.result = exe.status, result
  end
  self:emit(exe.parent_id, { id = "finished:" .. exe.id, kind = "Finished", data = data })
end


-- harel's conventions: while regions run, a domain event is theirs, before
-- any transition of the parent's, with its own id (so either side's
-- dedupe knows it), and the parent does not count it.
function Step:forward_to_regions(event)
  local live = self:live_children(false)
  if #live == 0 then return false end
  for _, cid in ipairs(live) do
    self:emit(cid, { id = event.id, kind = event.kind, data = copy(event.data), created_time = event.created_time })
  end
  return true
end


-- What a child reported: ours carry its context as result; harel's (and a
-- chart with dialect = "harel") put the carried keys beside the outcome.
local FINISHED_KEYS = { child_id = true, outcome = true, status = true, result = true, __deferred__ = true }
local function reported(data)
  if type(data.result) == "table" and data.result ~= null then return data.result end
  local out = {}
  for k, v in pairs(data) do
    if not FINISHED_KEYS[k] then out[k] = v end
  end
  return out
end

function Step:child_finished(event)
  local exe = self.exe
  local data = event.data or {}
  local cid = data.child_id
  local ch = exe.children[cid]
  if ch and not ch.finished then
    ch.finished = true
    ch.outcome = data.outcome ~= null and data.outcome or nil
    ch.result = reported(data)
  end
  if exe.status ~= "RUNNING" then return end
  local active = self:node(exe.active_path)
  if active and active.invoke and not active.each then
    -- only the child of this entry returns to it; an earlier one's is spent
    if not (ch and cid == self:invoke_id(active) and self:returned(cid)) then return end
  end
  self:complete_macrostep()
end

return M
