-- mongostore.engine.deliver - how the engine applies events: one event
-- (deliver: a load, the interpreter, one commit, retried on a conflict) and
-- a list of them (deliver_many: one load_many, the commits of many
-- executions in one bulk write, several queued events of one execution in
-- one group commit). mongostore.engine puts these methods on its Engine.
local ms = require "mongostore"
local runtime = require "mongostore.runtime"
local execution = require "mongostore.execution"
local set_version = execution.set_version

local type, pairs, ipairs, tostring = type, pairs, ipairs, tostring
local format = string.format

local M = {}

-- The Engine methods defined here.
local Engine = {}
M.methods = Engine

local function trace_step(event, fx, exe, now)
  return {
    event = event.kind, event_id = event.id, from = fx.from, to = fx.to, outcome = fx.outcome,
    status = exe.status, at = now, actions = ms.array(fx.actions), error = fx.failed,
  }
end

-- What a delivery did (the third value of send, start and the control
-- calls; `result` of a send_many item): fx.outcome, or "duplicate" when the
-- event had been applied before (then exe is the copy as loaded), with the
-- status and active path after the commit and the error of a failed
-- execution.
local function delivery_result(outcome, exe, failed)
  return { outcome = outcome, status = exe.status, active_path = exe.active_path,
           error = failed or (exe.status == "FAILED" and exe.error or nil) }
end


-- The engine log's line for an event that left an execution FAILED: the
-- hook, guard, action or timer it failed in.
local function log_failed(self, id, kind, fx)
  self.log(format("execution %s failed on %s in %s: %s", id, kind, fx.failed_in or "the chart", fx.failed))
end

local function commit_opts(self, exe, event, fx, now, fence)
  return {
    emits = fx.emits,
    spawns = fx.spawns,
    timers = fx.timers,
    processed_event_id = event.id,
    trace = self.trace and trace_step(event, fx, exe, now) or nil,
    fence = fence,
  }
end

-- The one commit of a group: the events items[members[k]], applied in order
-- (fxs[k] what the k-th did, after[k] the execution as it left it). Emits
-- and spawns in order, each timer path as the last event left it, every
-- event id marked, a trace step per event.
local function group_commit_opts(self, items, members, fxs, after, now)
  local emits, spawns, timers, at, ids, steps = {}, {}, {}, {}, {}, {}
  for k, i in ipairs(members) do
    local fx, ev = fxs[k], items[i].event
    for _, e in ipairs(fx.emits or {}) do emits[#emits + 1] = e end
    for _, sp in ipairs(fx.spawns or {}) do spawns[#spawns + 1] = sp end
    for _, t in ipairs(fx.timers or {}) do
      local where = at[t.path]
      if where then timers[where] = t else
        timers[#timers + 1] = t
        at[t.path] = #timers
      end
    end
    if ev.id ~= nil then ids[#ids + 1] = ev.id end
    if self.trace then steps[#steps + 1] = trace_step(ev, fx, after[k], now) end
  end
  return {
    emits = emits, spawns = spawns, timers = timers,
    processed_event_ids = #ids > 0 and ids or nil,
    trace = self.trace and steps or nil,
    fence = items[members[1]].fence,
    advance = #members,
  }
end

-- Applies one event to one execution: a load by _id, the interpreter, one
-- commit; on a conflict it reloads and tries again. The commit is guarded on
-- the event not being marked processed yet, and refuses with "duplicate"
-- when it is: the dedupe check costs no round trip of its own, and a second
-- application is impossible. Returns true, "applied" | "duplicate", or
-- nil, msg, code ("not_found" when there is no such execution).
-- A chart read from .stm declares its events' fields (mongostore.stm): an
-- event sent from outside that does not fit them is refused before anything
-- is committed, as harel checks it when sent. Relayed and timer events were
-- made by the charts themselves and are not checked again.
local function fits_declared(c, event, id)
  local stm = package.loaded["mongostore.stm"]
  if not stm then return true end
  local fits, why = stm.check_event(c, event.kind, event.data or {})
  if fits then return true end
  return nil, format("deliver %s to %s: %s", event.kind, id, tostring(why)), "invalid"
end

-- fence: the inbox claim the event is delivered under (mongostore.inbox);
-- the commit carries it, and a later claim's commit makes it "stale".
function Engine:deliver(id, event, timer_path, from_outside, fence)
  local store = self.store
  for _ = 1, self.max_conflicts do
    local exe, armed, code = store:load(id, timer_path)
    if exe == nil then
      if type(armed) == "string" then return nil, armed, code end
      return nil, format("deliver %s to %s: no such execution", event.kind, id), "not_found"
    end
    local c = self:chart_of(exe)
    if not c then
      return nil, format("deliver %s to %s: no chart '%s' is registered", event.kind, id, exe.definition_id), "invalid"
    end
    if from_outside then
      local fits, ferr, fcode = fits_declared(c, event, id)
      if not fits then return nil, ferr, fcode end
      -- a control call on an execution that has ended has nothing to
      -- change: it writes nothing (no version, no dedupe mark) and says so
      if from_outside == "control" and runtime.FINISHED[exe.status] then
        return nil, format("%s %s: the execution is finished (%s)", event.kind:lower(), id, exe.status), "finished"
      end
    end
    local now = self.now()
    local before = { status = exe.status, active_path = exe.active_path, error = exe.error }
    local fx = runtime.apply(c, exe, event, now, { armed = armed, timer_checked = timer_path ~= nil })
    local ok, err
    ok, err, code = store:commit(exe, commit_opts(self, exe, event, fx, now, fence))
    if ok then
      if fx.failed then log_failed(self, id, event.kind, fx) end
      return true, "applied", delivery_result(fx.outcome, exe, fx.failed)
    end
    if code == "duplicate" then return true, "duplicate", delivery_result("duplicate", before) end
    if code ~= "conflict" then return nil, err, code end
  end
  return nil, format("deliver %s to %s: still conflicting after %d attempts", event.kind, id, self.max_conflicts),
    "conflict"
end

------------------------------------------------------------------------
-- Batched delivery

-- The steps of deliver_many share one batch table b: engine, items,
-- results, order (distinct targets, first seen first), queue (target -> its
-- item indexes in list order), pos (target -> the index in queue[target] of
-- its next event), timed (some item has a timer_path), exes and armed (as
-- load_many gave them), alone (target -> true: its events go through
-- deliver from now on), failed (target -> the result that stops its later
-- events), disarms (item -> its commit left its timer disarmed), deadline,
-- attempted, group.

-- The distinct targets of items in first-seen order, each target's item
-- indexes in list order, and whether any item is a timer's Timeout.
local function group_by_target(items)
  local order, queue = {}, {}
  local timed = false
  for i, it in ipairs(items) do
    if it.timer_path ~= nil then timed = true end
    local q = queue[it.id]
    if not q then
      q = {}
      queue[it.id] = q
      order[#order + 1] = it.id
    end
    q[#q + 1] = i
  end
  return order, queue, timed
end

-- Loads every target in one find. False when the find failed for a reason
-- other than the server (every item's result says so); a server failure
-- sends every target the one-event way, so that one unreadable execution
-- does not hold up the others.
local function load_targets(b)
  local exes, armed, code = b.engine.store:load_many(b.order, b.timed and { timers = true } or nil)
  if not exes then
    if code ~= "server" then
      for i in ipairs(b.items) do b.results[i] = { index = i, message = armed, code = code } end
      return false
    end
    exes, armed = {}, {}
    for _, id in ipairs(b.order) do b.alone[id] = true end
  end
  b.exes, b.armed = exes, armed
  return true
end

-- True once the deadline has passed; the first event is always attempted.
local function out_of_time(b)
  if b.deadline and b.attempted and ms.now() > b.deadline then return true end
  b.attempted = true
  return false
end

-- Records item i's result from ok, how, result (deliver's success) or nil,
-- err, code; a failure stops the target's later events.
local function settle(b, i, ok, derr, dcode)
  if ok then
    b.results[i] = { ok = true, how = derr, result = dcode }
  else
    b.results[i] = { index = i, message = derr, code = dcode }
    b.failed[b.items[i].id] = b.results[i]
  end
end

-- Delivers item i the one-event way, or marks it blocked behind its
-- target's failed event.
local function deliver_alone(b, i)
  local it = b.items[i]
  local f = b.failed[it.id]
  if f then
    b.results[i] = { index = i, message = f.message, code = f.code, blocked = true }
    return
  end
  settle(b, i, b.engine:deliver(it.id, it.event, it.timer_path, it.from_outside, it.fence))
end

-- The interpreter's options for item i: a Timeout is checked against its
-- timer as armed in the execution in hand.
local function apply_opts(b, i, id)
  local path = b.items[i].timer_path
  if path == nil then return {} end
  return { armed = b.armed[id] and b.armed[id][path], timer_checked = true }
end

-- Leaves target id's armed timers as fx's commit leaves them.
local function rearm(b, id, fx)
  local t = b.timed and b.armed[id]
  if not t then return end
  for _, op in ipairs(fx.timers or {}) do
    if op.action == "schedule" then t[op.path] = op.fire_at else t[op.path] = nil end
  end
end

-- Notes whether item i's timer is no longer armed with its fire_at once
-- its commit lands.
local function note_disarm(b, i, id)
  local path = b.items[i].timer_path
  if path == nil then return end
  local data = b.items[i].event.data
  local armed = b.armed[id]
  b.disarms[i] = not (armed and armed[path] == (data and data.fire_at))
end

-- The earliest of the timers t, for a commit's next_fire_at.
local function earliest(t)
  local at = math.huge
  for _, v in pairs(t) do if v < at then at = v end end
  return at
end

-- Whether item nxt may join the group of item first, whose event ids so
-- far are seen: a new id, the same fence, and fields that fit the chart.
local function joins_group(b, c, id, first, nxt, seen)
  local items = b.items
  local nev = items[nxt].event
  if (nev.id ~= nil and seen[nev.id]) or items[nxt].fence ~= items[first].fence then return false end
  return not items[nxt].from_outside or fits_declared(c, nev, id) == true
end

-- Applies item i's event, and (a group) the target's next ones while they
-- join it, to exe in hand; returns the commit { exe, opts } and what
-- settling it needs.
local function build_commit(b, id, i, exe, c)
  local items, q, group = b.items, b.queue[id], b.group
  local members, fxs, after, now = { i }, {}, {}, b.engine.now()
  local before = { status = exe.status, active_path = exe.active_path, error = exe.error }
  local seen, old = {}, exe.version
  while true do
    local m = members[#members]
    local ev = items[m].event
    if ev.id ~= nil then seen[ev.id] = true end
    -- the k-th event applies to the version k - 1 commits would have
    -- made, so the ids it derives from it are the ones it would get alone
    set_version(exe, old + #members - 1)
    local fx = runtime.apply(c, exe, ev, now, apply_opts(b, m, id))
    rearm(b, id, fx)
    note_disarm(b, m, id)
    fxs[#fxs + 1] = fx
    after[#after + 1] = { status = exe.status, active_path = exe.active_path, error = exe.error }
    local nxt = q[b.pos[id]]
    if #members >= group or not nxt or not joins_group(b, c, id, i, nxt, seen) then break end
    members[#members + 1] = nxt
    b.pos[id] = b.pos[id] + 1
  end
  set_version(exe, old)
  local opts
  if #members == 1 then
    opts = commit_opts(b.engine, exe, items[i].event, fxs[1], now, items[i].fence)
  else
    opts = group_commit_opts(b.engine, items, members, fxs, after, now)
  end
  -- every armed timer is known here: the commit sets the mark exactly
  if b.timed and b.armed[id] then opts.next_fire_at = earliest(b.armed[id]) end
  return { exe, opts }, { members = members, fxs = fxs, after = after, exe = exe, before = before, id = id }
end

-- One round: each target's next event (or group) is settled at once (the
-- target failed before, has no execution in hand, the event does not fit)
-- or built into a commit. Returns the commits, what settling each needs,
-- and whether any target had an event left.
local function build_round(b)
  local commits, which = {}, {}
  local any = false
  local items, results = b.items, b.results
  for _, id in ipairs(b.order) do
    local i = b.queue[id][b.pos[id]]
    if i then
      any = true
      b.pos[id] = b.pos[id] + 1
      local exe = b.exes[id]
      local c = exe and b.engine:chart_of(exe)
      if b.failed[id] then
        deliver_alone(b, i)
      elseif out_of_time(b) then
        results[i] = { index = i, message = "deferred to a later pass: the batch ran out of time", code = "blocked",
                       deferred = true }
        b.failed[id] = results[i]
      elseif b.alone[id] or not c then
        -- absent or unknown here: deliver says so in its own words
        b.alone[id] = true
        deliver_alone(b, i)
      elseif items[i].from_outside and not fits_declared(c, items[i].event, id) then
        settle(b, i, fits_declared(c, items[i].event, id))
      else
        local commit, settling = build_commit(b, id, i, exe, c)
        commits[#commits + 1] = commit
        which[#commits] = settling
      end
    end
  end
  return commits, which, any
end

-- Settles the results got of commit_many for the commits described by
-- which: a landed commit applies its events; one that did not sends its
-- target the one-event way from now on.
local function settle_round(b, got, which)
  local items, results = b.items, b.results
  for k, r in ipairs(got) do
    local w = which[k]
    local members, id = w.members, w.id
    if r.ok then
      for m, i in ipairs(members) do
        local fx = w.fxs[m]
        if fx.failed then log_failed(b.engine, id, items[i].event.kind, fx) end
        settle(b, i, true, "applied", delivery_result(fx.outcome, w.after[m], fx.failed))
        results[i].disarmed = b.disarms[i]
      end
    else
      -- the execution in hand went through the interpreter without its
      -- commit landing, or may be behind the stored one: reload from now on
      b.alone[id] = true
      if #members > 1 then
        -- nothing of the group landed: each of its events goes the one-event way
        if r.code == "stale" then
          settle(b, members[1], nil, r.message, r.code)
          for m = 2, #members do deliver_alone(b, members[m]) end
        else
          for _, i in ipairs(members) do deliver_alone(b, i) end
        end
      elseif r.code == "duplicate" then
        settle(b, members[1], true, "duplicate", delivery_result("duplicate", w.before))
      elseif r.code == "stale" then settle(b, members[1], nil, r.message, r.code)
      else deliver_alone(b, members[1]) end
    end
  end
end


-- Applies a list of events { { id = target, event = ev, from_outside = bool,
-- timer_path = path }, ... } together (from_outside: checked against a .stm
-- chart's declared fields, as deliver checks them; timer_path: the event is
-- the Timeout of that timer, applied only while the timer is still armed
-- with the event's fire_at, as deliver checks it):
-- one find loads every distinct target, the interpreter applies each event,
-- and one bulk write carries the commits, each the one-event commit (one
-- version, one dedupe mark, one trace step), atomic on its own. Several
-- events for one target are applied in list order, each in a commit of its
-- own: the r-th event of every target goes in the r-th bulk write, applied to
-- the execution as the (r-1)-th commit left it, with no reload. A commit that
-- loses (a conflict, a server-side duplicate) or fails alone falls back to
-- deliver, the one-event path, for that event only, and the target's later
-- events follow it on that path. After an event that could not be applied,
-- the target's later events are not attempted (results[i].blocked), so an
-- event never overtakes one sent before it. deadline (optional, ms.now()
-- seconds): once it has passed, no further event is applied and each one left
-- gets { index, message =, code = "blocked", deferred = true }; at least one event is
-- always attempted. A relay pass sets it inside its lease, so that its acks
-- reach the entries while the claim is still its own. Returns a result per
-- item: { ok = true, how = "applied" | "duplicate", result = delivery result }
-- or { index = i, message = msg, code = code, detail = table|nil }.
-- An item's fence (the inbox's) goes with each of its commits; a commit
-- refused as "stale" stops its target's later events, with no retry.
-- group (optional, default 1): up to that many events of one target in a
-- row go in one commit instead of one each (the inbox's group commit):
-- applied in order to the execution in hand, their emits, spawns and trace
-- steps in order, each timer as the last of them left it, every event id
-- marked in the one update. A group whose commit does not land (a conflict,
-- an event marked before) is delivered again one event at a time. A group
-- ends before an event that does not fit the chart's declared fields, that
-- repeats an id of the group, or that carries another fence.
-- The armed timers come with the one find when an item has a timer_path;
-- each event applied in memory then leaves them as its commit will (a
-- schedule arms, a cancel disarms), so a target's later Timeout is checked
-- against the timers its earlier events left, and each commit sets the
-- execution's next_fire_at to the earliest timer it leaves. A timer item
-- whose commit left its timer disarmed says so (results[i].disarmed).
function Engine:deliver_many(items, deadline, group)
  local order, queue, timed = group_by_target(items)
  local b = {
    engine = self, items = items, results = {}, order = order, queue = queue, pos = {}, timed = timed,
    alone = {}, failed = {}, disarms = {}, deadline = deadline, attempted = false, group = group or 1,
  }
  if #order == 0 then return b.results end
  if not load_targets(b) then return b.results end
  for _, id in ipairs(order) do b.pos[id] = 1 end
  while true do
    local commits, which, any = build_round(b)
    if not any then break end
    if #commits > 0 then settle_round(b, self.store:commit_many(commits), which) end
  end
  return b.results
end

M.delivery_result = delivery_result
M.log_failed = log_failed
M.commit_opts = commit_opts

return M
