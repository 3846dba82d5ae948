-- mongostore.engine.relays - the engine's relay passes: the spawn relay
-- (creating each pending child, an invoked chart's included), the outbox
-- relay one entry at a time and batched, and the inbox pass. engine.lua
-- puts these methods on its Engine.
local ms = require "mongostore"
local inbox = require "mongostore.inbox"
local external_backoff = require("mongostore.engine.external").backoff

local type, pairs, ipairs, tostring, pcall = type, pairs, ipairs, tostring, pcall
local format = string.format

local M = {}

-- The Engine methods defined here.
local Engine = {}
M.methods = Engine

function Engine:definition_of(id)
  local d = self.definitions:get(id)
  if d then return d end
  local exe, err, code = self.store:load(id)
  if not exe then return nil, err, code end
  d = exe.definition_id
  self.definitions:set(id, d)
  return d
end

-- Gives back the documents a pass claimed, so what was queued on them since
-- (or could not be delivered yet) is claimable at once, not after the lease.
local function release_claims(entries, release)
  local done = {}
  for _, e in ipairs(entries) do
    if e.source_id and e.token and not done[e.source_id] then
      done[e.source_id] = true
      release(e.source_id, e.token)
    end
  end
end

-- An invoke's spawn names the chart in its context (harel's __invoke_fqn__):
-- the child starts with the rest. Returns the context, the name and the
-- chart id (nil when no such chart is registered).
local function invoke_spawn(self, s)
  local context = {}
  for k, v in pairs(s.context) do
    if k ~= "__invoke_fqn__" then context[k] = v end
  end
  local fqn = s.context.__invoke_fqn__
  local c = type(fqn) == "string" and self.charts[fqn]
  return context, fqn, c and c.id or nil
end

-- Creates each pending child (idempotently: an existing child is left as it
-- is) and acks its entry. Returns how many entries it handled.
function Engine:relay_spawns()
  local entries, err = self.store:pending_spawns{ limit = self.batch, lease = self.lease }
  if not entries then
    self.log("pending_spawns: " .. tostring(err))
    return 0
  end
  local n = 0
  for _, s in ipairs(entries) do
    local def, derr = self:definition_of(s.parent_id)
    local context, fqn = s.context or {}, nil
    if def and context.__invoke_fqn__ ~= nil then
      -- an invoke: the child runs the chart it names, not the parent's
      context, fqn, def = invoke_spawn(self, s)
    end
    local done
    if not def then
      if fqn then
        -- it waits in the spawns until the chart is registered: said once
        if not self.unresolved:get(s.child_id) then
          self.unresolved:set(s.child_id, true)
          self.log(format("spawn %s: invoke of chart '%s', which is not registered", s.child_id, tostring(fqn)))
        end
      else
        self.log(format("spawn %s: parent %s: %s", s.child_id, s.parent_id, tostring(derr or "not found")))
        done = derr == nil -- the parent is gone: nothing to spawn for
      end
    else
      local ok, cerr = self:create{ definition_id = def, definition_fqn = fqn, id = s.child_id,
                                    root_path = s.root_path, parent_id = s.parent_id, child_id = s.child_id,
                                    context = context }
      done = ok ~= nil
      if ok == nil then self.log(format("spawn %s: %s", s.child_id, tostring(cerr))) end
    end
    if done then
      self.store:ack_spawn(s.seq, s.token)
      n = n + 1
    end
  end
  release_claims(entries, function(id, token) self.store:release_spawn(id, token) end)
  return n
end

-- An entry given up on: to on_dead_letter when there is one (then acked),
-- else kept in its source's outbox_failed (store:fail_outbox) for an
-- operator to list (mongostore outbox --failed) and put back by hand.
function Engine:dead_letter(entry, err)
  local attempts = self.attempts:get(entry.seq)
  self.attempts:set(entry.seq, nil)
  self.external_retry:set(entry.seq, nil)
  if self.on_dead_letter then
    self.on_dead_letter(entry, err)
    self.store:ack_outbox(entry.seq, entry.token)
    return
  end
  self.log(format("outbox %d: %s to %s given up, kept as failed: %s", entry.seq, entry.event.kind,
                  entry.target_id and tostring(entry.target_id) or "on_external", err))
  local ok, ferr = self.store:fail_outbox(entry, { error = tostring(err or "given up"), attempts = attempts })
  -- not kept: it stays pending, and a later pass gives it up again
  if not ok then self.log(format("outbox %d: could not keep it as failed: %s", entry.seq, tostring(ferr))) end
end

-- What a pass does with one entry's outcome (ok, or derr and code): the
-- attempts count, a dead letter, the blocked targets. Returns whether the
-- entry is done (delivered or given up) and whether it was acked already.
local function entry_outcome(self, e, ok, derr, code, blocked)
  if ok then
    self.attempts:set(e.seq, nil)
    return true, false
  elseif code == "not_found" or code == "invalid" or code == "external" then
    if e.target_id ~= nil then blocked[e.target_id] = true end
    local a = (self.attempts:get(e.seq) or 0) + 1
    self.attempts:set(e.seq, a)
    if a >= self.max_attempts then
      self:dead_letter(e, derr)
      return true, true
    end
  elseif code ~= "blocked" then -- a blocked entry is left for the next pass, behind the one that blocks it
    if e.target_id ~= nil then blocked[e.target_id] = true end
    self.log(format("outbox %d: %s", e.seq, tostring(derr)))
  end
  return false, false
end

-- Hands an external entry (no target) to on_external. Only a relay that
-- has one claims such entries (claim_outbox), so this is never reached
-- without it. A failure is logged and the entry waits out its backoff
-- (its next try is "blocked" until then, without counting an attempt; the
-- wait is mongostore.engine.external's). Past the pass's deadline (half its
-- lease) an entry is left for the next pass, blocked too: a handler started
-- later could outlast the claim, and the pass's acks would come too late.
local function external(self, e, deadline)
  if deadline and ms.now() >= deadline then return false, nil, "blocked" end
  local wait = self.external_retry:get(e.seq)
  if wait and self.now() < wait then return false, nil, "blocked" end
  local ok, derr = pcall(self.on_external, e)
  if ok then
    self.external_retry:set(e.seq, nil)
    return true
  end
  local a = (self.attempts:get(e.seq) or 0) + 1
  local delay = external_backoff(a)
  self.external_retry:set(e.seq, self.now() + delay)
  self.log(format("outbox %d: on_external failed on %s (try %d, next in %.1fs): %s", e.seq,
                  tostring(e.event and e.event.kind), a, delay, tostring(derr)))
  return false, tostring(derr), "external"
end

-- The entries a pass claims, its round of attempt counts begun; nil (and
-- logged) when the claim fails. A relay with no on_external claims only
-- entries addressed to an execution: external ones stay pending for a
-- relay that can hand them over, which its log says once.
local function claim_outbox(self)
  local targeted = self.on_external == nil
  local entries, err = self.store:pending_outbox{ limit = self.batch, lease = self.lease, targeted = targeted or nil }
  if not entries then
    self.log("pending_outbox: " .. tostring(err))
    return nil
  end
  if targeted and (entries.external_left or 0) > 0 and not self.said_external then
    self.said_external = true
    self.log(format("outbox: %d external entr%s left pending: this engine has no on_external, "
                    .. "a worker with one delivers them", entries.external_left,
                    entries.external_left == 1 and "y" or "ies"))
  end
  self.attempts:new_round() -- the counts this pass touches stay (see Bounded caches)
  return entries
end

-- How entry k went: blocked behind an earlier entry of its target, handed
-- to on_external when it has none (until the deadline), else deliver(e, k).
local function settle(self, e, k, blocked, deliver, deadline)
  if e.target_id == nil then return external(self, e, deadline) end
  if blocked[e.target_id] then return false, nil, "blocked" end
  return deliver(e, k)
end

-- Delivers each pending outbox entry (oldest first) and acks it. A target
-- that does not exist yet (a child whose spawn is still pending) is retried
-- on later passes, and given up after max_attempts.
function Engine:relay_outbox()
  if self.batch_delivery then return self:relay_outbox_batch() end
  local deadline = ms.now() + self.lease / 2 -- for on_external (see external)
  local entries = claim_outbox(self)
  if not entries then return 0 end
  local n = 0
  local blocked = {} -- a target whose entry waits: its later entries wait too, in order
  local function deliver(e) return self:deliver(e.target_id, e.event) end
  for k, e in ipairs(entries) do
    local ok, derr, code = settle(self, e, k, blocked, deliver, deadline)
    local done, acked = entry_outcome(self, e, ok, derr, code, blocked)
    if done then
      if not acked then self.store:ack_outbox(e.seq, e.token) end
      n = n + 1
    end
  end
  release_claims(entries, function(id, token) self.store:release_outbox(id, token) end)
  return n
end

-- The batched pass: every entry with a target goes to deliver_many at
-- once (one load of the targets, one bulk write of the commits), and the
-- acks go in one bulk write, an update per source document that also gives
-- back the claim of a source whose entries are all done.
function Engine:relay_outbox_batch()
  local store = self.store
  -- the claims are this pass's for self.lease seconds from here: the events
  -- are applied in the first half of it, so that the acks arrive in time
  local deadline = ms.now() + self.lease / 2
  local entries = claim_outbox(self)
  if not entries then return 0 end
  local items, item_of = {}, {}
  for k, e in ipairs(entries) do
    if e.target_id ~= nil then
      items[#items + 1] = { id = e.target_id, event = e.event }
      item_of[k] = #items
    end
  end
  local got = self:deliver_many(items, deadline)
  local function delivered(_, k)
    local r = got[item_of[k]]
    if r.ok then return true end
    if r.blocked then return false, nil, "blocked" end
    return false, r.message, r.code
  end
  local n, blocked = 0, {}
  local acks, ack_of, open = {}, {}, {} -- source -> its ack; source -> an entry of it not done
  for k, e in ipairs(entries) do
    local ok, derr, code = settle(self, e, k, blocked, delivered, deadline)
    local done, acked = entry_outcome(self, e, ok, derr, code, blocked)
    if done then
      n = n + 1
      if not acked then
        if e.source_id and e.token then
          local a = ack_of[e.source_id]
          if not a then
            a = { source_id = e.source_id, token = e.token, seqs = {} }
            ack_of[e.source_id] = a
            acks[#acks + 1] = a
          end
          a.seqs[#a.seqs + 1] = e.seq
        else
          store:ack_outbox(e.seq, e.token)
        end
      end
    elseif e.source_id then
      open[e.source_id] = true
    end
  end
  for _, a in ipairs(acks) do a.release = not open[a.source_id] end
  if #acks > 0 then
    local ok, aerr = store:ack_outbox_many(acks)
    -- unacked entries stay pending and come again; their targets refuse the copy
    if not ok then self.log("ack_outbox_many: " .. tostring(aerr)) end
  end
  local rest = {}
  for _, e in ipairs(entries) do
    if not (ack_of[e.source_id] and ack_of[e.source_id].release) then rest[#rest + 1] = e end
  end
  release_claims(rest, function(id, token) store:release_outbox(id, token) end)
  return n
end

-- The inbox pass (mongostore.inbox): claims the queued events of up to
-- batch executions, most urgent first, under a fenced lease, delivers them
-- in order per execution in batched commits, acks and releases. Returns
-- how many entries it handled.
function Engine:relay_inbox()
  return inbox.pass(self)
end

return M
