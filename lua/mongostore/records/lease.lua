-- mongostore.records.lease - the writer side of the store's leases: one
-- `writer:<token>` document in `<prefix>_meta` per writing store handle, made at its
-- first write, renewed past half its ttl, checked (fenced) before every save unit
-- against its own existence and the fsck lease, and deleted when the store closes.
local core = require "mongostore.core"
local wire = require "mongostore.records.wire"

local type, setmetatable, tostring, floor = type, setmetatable, tostring, math.floor
local format = string.format
local fail = wire.fail
local date, array, null = core.date, core.array, core.null

local M = {}

local Lease = {}
Lease.__index = Lease

local function ms_of(d)
  if d == nil or d == null then return nil end
  if type(d) == "userdata" and d.ms then
    local v = d:ms()
    return type(v) == "number" and v or tonumber(tostring(v))
  end
  if type(d) == "number" then return d end
  return nil
end
M.ms_of = ms_of

local function now_ms() return floor(core.now() * 1000) end

local function new_token()
  return require("mongostore.records.canon").hex(core.random_bytes(16))
end

-- store: has wire, meta (the _meta collection's name); opts: ttl (seconds),
-- fsck_wait (seconds a save waits for a running fsck before `unavailable`).
function M.new(w, meta, opts)
  return setmetatable({
    wire = w, meta = meta, token = new_token(), ttl = opts.ttl or 30, fsck_wait = opts.fsck_wait or 10,
    created = false, lost = false, renewed_at = 0, id = nil,
  }, Lease)
end

local function lost_error(self)
  return fail("conflict", format("records: this store's writer lease %s was taken over or removed by fsck "
    .. "(forced, or after it lapsed): the store cannot write any more; open a new one", self.token),
    { token = self.token })
end

-- Whether the fsck document holds an unexpired lease (and by whom).
local function fsck_held(doc, token)
  if not doc then return false end
  local holder = doc.holder
  if holder == nil or holder == null or holder == token then return false end
  local exp = ms_of(doc.expires)
  return exp == nil or exp > now_ms()
end

local function read_both(self, session)
  local docs, e, c, d = self.wire:find(self.meta, { _id = { ["$in"] = array { self.id, "fsck" } } }, nil, session)
  if not docs then return nil, e, c, d end
  local mine, fsck
  for _, doc in ipairs(docs) do
    if doc._id == "fsck" then fsck = doc else mine = doc end
  end
  return mine or false, fsck or false
end

-- Waits while an unexpired fsck lease is held (outside a transaction only:
-- inside one the snapshot would not see it go).
local function wait_fsck(self, fsck, session)
  local deadline = core.now() + self.fsck_wait
  while fsck_held(fsck, self.token) do
    if session or core.now() >= deadline then
      return fail("unavailable", "records: fsck holds the store's lease (writes wait while it runs); try again later")
    end
    core.sleep(0.05)
    local mine, f2, c, d = read_both(self, nil)
    if mine == nil then return nil, f2, c, d end
    fsck = f2
  end
  return true
end

local function create(self)
  self.id = "writer:" .. self.token
  local f, e, c, d = self.wire:find_one(self.meta, { _id = "fsck" }, nil, nil)
  if f == nil then return nil, e, c, d end
  local ok
  ok, e, c, d = wait_fsck(self, f, nil)
  if not ok then return nil, e, c, d end
  local gen = f and f.gen or 0
  ok, e, c, d = self.wire:insert(self.meta, { { _id = self.id, expires = date(floor(now_ms() + self.ttl * 1000)),
                                               gen = gen } }, nil)
  if not ok then return nil, e, c, d end
  self.created, self.renewed_at = true, core.now()
  return true
end

local function renew(self, session)
  local r, e, c, d = self.wire:update(self.meta, { { q = { _id = self.id },
    u = { ["$set"] = { expires = date(floor(now_ms() + self.ttl * 1000)) } } } }, session)
  if not r then return nil, e, c, d end
  if (r.n or 0) == 0 then self.lost = true; return lost_error(self) end
  self.renewed_at = core.now()
  return true
end

-- Before a save unit. In a transaction (session given) the writer document
-- is written every time, so an fsck that removes it conflicts with the save,
-- and the fsck document is read in the same snapshot.
function Lease:check(session)
  if self.lost then return lost_error(self) end
  if not self.created then
    -- the document is made outside any transaction (so it outlives an aborted one)
    local ok, e, c, d = create(self)
    if not ok then return nil, e, c, d end
  end
  if session then
    local ok, e, c, d = renew(self, session)
    if not ok then return nil, e, c, d end
    local f
    f, e, c, d = self.wire:find_one(self.meta, { _id = "fsck" }, nil, session)
    if f == nil then return nil, e, c, d end
    return wait_fsck(self, f, session)
  end
  local mine, f, c, d = read_both(self, nil)
  if mine == nil then return nil, f, c, d end
  if not mine then self.lost = true; return lost_error(self) end
  local ok, e
  ok, e, c, d = wait_fsck(self, f, nil)
  if not ok then return nil, e, c, d end
  if core.now() - self.renewed_at > self.ttl / 2 then return renew(self, nil) end
  return true
end

-- Degraded mode, right before the root write: still ours, still no fsck.
function Lease:fence()
  if self.lost then return lost_error(self) end
  local mine, f, c, d = read_both(self, nil)
  if mine == nil then return nil, f, c, d end
  if not mine then self.lost = true; return lost_error(self) end
  if fsck_held(f, self.token) then
    return fail("unavailable", "records: fsck took the store's lease during the save; the record's "
      .. "dependencies written so far are left for fsck to collect")
  end
  return true
end

function Lease:release()
  if not self.created or self.lost then return true end
  self.created = false
  local r, e, c, d = self.wire:delete(self.meta, { _id = self.id }, nil)
  if not r then return nil, e, c, d end
  return true
end

return M
