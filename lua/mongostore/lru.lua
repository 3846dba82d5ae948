-- mongostore.lru - a bounded cache: size entries, the least recently used
-- evicted first, with an optional pin on what the current round touched.
-- The engine keeps its per-process memory in these (see mongostore.engine).
local setmetatable = setmetatable

local M = {}

local Lru = {}
Lru.__index = Lru

-- pinned: what was touched since the last new_round() is never evicted; a
-- new key that finds only such entries is not kept (set returns false). The
-- failed-delivery counts need it: a relay pass can claim more failing
-- entries than the cache holds (a claim takes a source's whole outbox), and
-- evicting them in turn would restart every count each pass, so that none
-- ever reaches max_attempts. Pinned, the oldest entries of a pass keep their
-- counts, are given up, and make room for the next.
function M.new(size, pinned)
  local head = {} -- the list's sentinel: head.next is the newest, head.prev the oldest
  head.next, head.prev = head, head
  return setmetatable({ size = size, count = 0, evicted = 0, refused = 0, nodes = {}, head = head,
                        pinned = pinned or false, round = 0 }, Lru)
end

local function unlink(node)
  node.prev.next, node.next.prev = node.next, node.prev
end

function Lru:touch(node)
  local head = self.head
  node.prev, node.next = head, head.next
  head.next.prev = node
  head.next = node
  node.round = self.round
end

function Lru:new_round()
  self.round = self.round + 1
end

function Lru:get(key)
  local node = self.nodes[key]
  if node == nil then return nil end
  unlink(node)
  self:touch(node)
  return node.value
end

-- set(key, nil) forgets key; a new key past the size evicts the oldest.
-- Returns whether the value is held.
function Lru:set(key, value)
  local node = self.nodes[key]
  if value == nil then
    if node then
      unlink(node)
      self.nodes[key] = nil
      self.count = self.count - 1
    end
    return true
  end
  if node then
    unlink(node)
  else
    if self.count >= self.size then
      local oldest = self.head.prev
      if self.pinned and oldest.round == self.round then
        self.refused = self.refused + 1
        return false
      end
      unlink(oldest)
      self.nodes[oldest.key] = nil
      self.count = self.count - 1
      self.evicted = self.evicted + 1
    end
    node = { key = key }
    self.nodes[key] = node
    self.count = self.count + 1
  end
  node.value = value
  self:touch(node)
  return true
end

function Lru:len()
  return self.count
end

return M
