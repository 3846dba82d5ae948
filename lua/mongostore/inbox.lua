-- mongostore.inbox - the worker's half of the inbox (csrc/inbox.c): a pass
-- claims the queued events of some executions under a fenced lease, delivers
-- them in order through the engine's batched path with the fence on every
-- commit, deletes what it delivered while its claim holds, and gives the
-- claims back. Each step is its own function, so a spec can interleave two.
local core = require "mongostore.core"
local execution = require "mongostore.execution"

local ipairs, pairs, next, tostring, format = ipairs, pairs, next, tostring, string.format
local ms_now = core.now

local M = {}

-- claim(engine) -> claim | nil, msg, code
-- claim = { token, deadline, fences = { [execution_id] = fence },
--           entries = { { id, execution_id, priority, at, event }, ... } oldest first }
-- At most engine.batch executions, the most urgent first (priority 4 before
-- 0, as harel's), then the oldest; each execution's queued events (up to
-- engine.inbox_max_events in the pass) are this claim's until the lease ends.
function M.claim(engine)
  local store = engine.store
  local token = core.uuid()
  -- the events are applied in the first half of the lease, so that the acks
  -- land while the claims still hold (as the outbox relay does)
  local deadline = core.now() + engine.lease / 2
  local got, err, code = store:_inbox_claim(engine.batch, engine.lease, token, engine.inbox_max_events)
  if not got then return nil, err, code end
  local entries = got.entries
  for _, e in ipairs(entries) do
    local ev, eerr = execution.event_from_json(e.event)
    if not ev then return nil, format("claim_inbox: entry %s: %s", tostring(e.id), eerr), "server" end
    e.event = ev
  end
  return { token = token, deadline = deadline, fences = got.claims, entries = entries }
end

local function dead_letter(engine, e, err)
  if engine.on_dead_letter then
    engine.on_dead_letter({ seq = e.id, target_id = e.execution_id, event = e.event, inbox = true }, err)
  else
    engine.log(format("inbox %s: %s to %s given up: %s", e.id, e.event.kind, e.execution_id, err))
  end
end

-- deliver(engine, claim) -> the claim, each entry with .done (to be acked)
-- and .result (deliver_many's). An entry whose execution does not exist (or
-- whose chart is unknown here) is tried again on later passes and given up
-- after engine.max_attempts; a "stale" answer means the claim passed to
-- another worker, and nothing of that execution is acked here.
function M.deliver(engine, claim)
  local items = {}
  for k, e in ipairs(claim.entries) do
    items[k] = { id = e.execution_id, event = e.event, fence = claim.fences[e.execution_id], from_outside = true }
  end
  local got = engine:deliver_many(items, claim.deadline, engine.inbox_group)
  for k, e in ipairs(claim.entries) do
    local r = got[k]
    e.result = r
    if r.ok then
      e.done = true
    elseif r.code == "not_found" or r.code == "invalid" then
      local key = "inbox:" .. e.id
      local a = (engine.attempts:get(key) or 0) + 1
      engine.attempts:set(key, a)
      if a >= engine.max_attempts then
        engine.attempts:set(key, nil)
        dead_letter(engine, e, r.message)
        e.done = true
      end
    elseif r.code ~= "blocked" and r.code ~= "stale" then
      engine.log(format("inbox %s: %s", e.id, tostring(r.message)))
    end
    if e.done then engine.attempts:set("inbox:" .. e.id, nil) end
  end
  return claim
end

-- ack(engine, claim) -> how many entries it deleted | nil, msg, code
-- One delete of the done entries that still carry the claim's token.
function M.ack(engine, claim)
  local ids = {}
  for _, e in ipairs(claim.entries) do
    if e.done then ids[#ids + 1] = e.id end
  end
  if #ids == 0 then return 0 end
  return engine.store:_inbox_ack(ids, claim.token)
end

-- release(engine, claim) -> true | nil, msg, code: the claims back, so the
-- next pass (anyone's) takes what is queued on them at once. The claim
-- stamped every entry queued on its executions but read at most
-- inbox_max_events of them: when it read that many, the stamps of those it
-- did not read are given back too, or they would stay out of the
-- candidates until the lease ends (a queue longer than a pass drained one
-- pass per lease).
function M.release(engine, claim)
  local ids, left = {}, #claim.entries >= engine.inbox_max_events
  for id in pairs(claim.fences) do ids[#ids + 1] = id end
  if #ids == 0 then return true end
  for _, e in ipairs(claim.entries) do
    if not e.done then left = true end
  end
  return engine.store:_inbox_release(ids, claim.token, left)
end

-- pass(engine) -> entries handled (delivered, or given up)
function M.pass(engine)
  local claim, err = M.claim(engine)
  if not claim then
    engine.log("claim_inbox: " .. tostring(err))
    return 0
  end
  if next(claim.fences) == nil then return 0 end
  M.deliver(engine, claim)
  local n = 0
  for _, e in ipairs(claim.entries) do
    if e.done then n = n + 1 end
  end
  local acked, aerr = M.ack(engine, claim)
  -- what is not acked stays queued and comes again; its executions refuse the copy
  if not acked then engine.log("ack_inbox: " .. tostring(aerr)) end
  local ok, rerr = M.release(engine, claim)
  if not ok then engine.log("release_inbox: " .. tostring(rerr)) end
  return n
end

-- The idle backoff of the worker loops (engine:run, msngx.start_worker):
-- after a pass that found nothing the next one waits 50 ms, doubling up to
-- 1 s while the inbox stays empty, and a pass that finds work resets it. An
-- idle worker so pays its claim's find at most once a second, and an event
-- enqueued into an idle inbox waits at most about a second.
local IDLE_FIRST, IDLE_MAX = 0.05, 1

-- idle_pass(engine) -> entries handled (0 when this pass was skipped)
function M.idle_pass(engine)
  local now = ms_now()
  if engine.inbox_idle_until and now < engine.inbox_idle_until then return 0 end
  local n = M.pass(engine)
  if n > 0 then
    engine.inbox_idle, engine.inbox_idle_until = nil, nil
  else
    local wait = engine.inbox_idle and math.min(engine.inbox_idle * 2, IDLE_MAX) or IDLE_FIRST
    engine.inbox_idle, engine.inbox_idle_until = wait, now + wait
  end
  return n
end

return M
