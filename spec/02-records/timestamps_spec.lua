-- spec/02-records/timestamps_spec.lua - store timestamps: one per save unit (a
-- graph's records share it), in store units of timestamp_resolution ns,
-- first-stored-wins on a dedup hit, the clock-regression guard (a step back under
-- 1 ms waits, a larger one fails clock_regression; clock_regression_grace and
-- allow_clock_regression), the guard seeded from stored rows at reopen, and as_of
-- with a nanosecond integer or ISO-8601 text, alone and with only_latest.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local rawdb = require "helpers.rawdb"
local records = require "mongostore.records"

local ok = require("helpers").ok

local Author = records.define { name = "author", fields = { name = "string" } }
local Book = records.define { name = "book", fields = { title = "string", edition = "integer" },
                              refs = { author = Author } }

-- 2026-01-01T00:00:00Z in nanoseconds
local T0 = 1767225600 * 1000000000

-- A clock a spec sets: each read takes the next queued value, then the last one again.
local function fake_clock(start)
  local c = { now = start, queue = {} }
  c.fn = function()
    if #c.queue > 0 then c.now = table.remove(c.queue, 1) end
    return c.now
  end
  return c
end

local idiv = require("mongostore.records.canon").idiv   -- floor division, exact past 2^53

TestRecordsTimestamps = {}

function TestRecordsTimestamps:setUp()
  self.name = helper.fresh_db("rts")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
end

function TestRecordsTimestamps:tearDown()
  if self.store then self.store:close() end
  if self.db then self.db:close() end
end

function TestRecordsTimestamps:open(extra)
  local opts = { types = { Book }, log = function() end }
  for k, v in pairs(extra or {}) do opts[k] = v end
  if self.store then self.store:close() end
  self.store = ok(records.open(self.db, opts))
  return self.store
end

function TestRecordsTimestamps:test_one_per_save_unit_in_store_units()
  local clock = fake_clock(T0 + 123456789)
  local store = self:open({ clock = clock.fn })
  local sid = ok(store:save(Book, { title = "Dune", author = { name = "Herbert" } }))
  local b = rawdb.docs(self.name, "records.book")[1]
  local a = rawdb.docs(self.name, "records.author")[1]
  lu.assertEquals(b._ts, idiv(T0 + 123456789, 1000), "microseconds by default")
  lu.assertEquals(a._ts, b._ts)
  lu.assertEquals(ok(store:fetch(Book, sid))._ts, b._ts)
  -- another resolution
  local Other = records.define { name = "other", fields = { x = "integer" } }
  local s2 = ok(records.open(self.db, { types = { Other }, prefix = "ms.", timestamp_resolution = 1000000,
                                       clock = clock.fn, log = function() end }))
  ok(s2:save(Other, { x = 1 }))
  lu.assertEquals(rawdb.docs(self.name, "ms.other")[1]._ts, idiv(T0 + 123456789, 1000000))
  s2:close()
end

function TestRecordsTimestamps:test_first_stored_wins()
  local clock = fake_clock(T0)
  local store = self:open({ clock = clock.fn })
  local sid = ok(store:save(Book, { title = "Dune", author = { name = "Herbert" } }))
  clock.now = T0 + 5000000000
  lu.assertEquals(ok(store:save(Book, { title = "Dune", author = { name = "Herbert" } })), sid)
  -- the author met again in a new book keeps its first timestamp too
  ok(store:save(Book, { title = "Messiah", author = { name = "Herbert" } }))
  lu.assertEquals(ok(store:fetch(Book, sid))._ts, idiv(T0, 1000))
  lu.assertEquals(rawdb.docs(self.name, "records.author")[1]._ts, idiv(T0, 1000))
end

function TestRecordsTimestamps:test_clock_regression_guard()
  local clock = fake_clock(T0 + 10000000)
  local store = self:open({ clock = clock.fn })
  ok(store:save(Book, { title = "A" }))
  -- half a millisecond back: waited out (the clock has moved on when read again)
  clock.queue = { T0 + 9500000, T0 + 10000001 }
  ok(store:save(Book, { title = "B" }))
  -- five milliseconds back: refused, nothing written
  clock.queue = { T0 + 5000000 }
  local v, err, code = store:save(Book, { title = "C" })
  lu.assertNil(v)
  lu.assertEquals(code, "clock_regression")
  lu.assertStrContains(tostring(err), "behind")
  lu.assertEquals(rawdb.count(self.name, "records.book"), 2)
  -- a small step the clock does not make up in the wait fails too
  clock.queue = { T0 + 9900000, T0 + 9900000 }
  v, err, code = store:save(Book, { title = "D" })
  lu.assertEquals({ v, code }, { nil, "clock_regression" }, tostring(err))
end

function TestRecordsTimestamps:test_grace_off_and_guard_off()
  local clock = fake_clock(T0 + 10000000)
  local store = self:open({ clock = clock.fn, clock_regression_grace = false })
  ok(store:save(Book, { title = "A" }))
  clock.queue = { T0 + 9500000, T0 + 10000001 }
  local v, err, code = store:save(Book, { title = "B" })
  lu.assertEquals({ v, code }, { nil, "clock_regression" }, tostring(err))
  store = self:open({ clock = clock.fn, allow_clock_regression = true })
  clock.queue, clock.now = {}, T0
  local sid = ok(store:save(Book, { title = "C" }))
  lu.assertEquals(ok(store:fetch(Book, sid))._ts, idiv(T0, 1000))
end

function TestRecordsTimestamps:test_reopen_seeds_the_guard_from_stored_rows()
  local clock = fake_clock(T0 + 60000000000)
  local store = self:open({ clock = clock.fn })
  ok(store:save(Book, { title = "A" }))
  -- a new process whose clock is a minute behind what is stored
  clock.now = T0
  store = self:open({ clock = clock.fn })
  local v, err, code = store:save(Book, { title = "B" })
  lu.assertEquals({ v, code }, { nil, "clock_regression" }, tostring(err))
end

function TestRecordsTimestamps:test_as_of()
  local clock = fake_clock(T0 - 1000000000)        -- 2025-12-31T23:59:59Z
  local store = self:open({ clock = clock.fn })
  local s1 = ok(store:save(Book, { title = "Dune", edition = 1 }))
  clock.now = T0 + 1000000000                        -- 2026-01-01T00:00:01Z
  local s2 = ok(store:replace(Book, s1, { title = "Dune", edition = 2 }))
  local e1 = ok(store:save(Book, { title = "Emma", edition = 1 }))
  local function sids(q)
    local out = {}
    for i, r in ipairs(ok(q:all())) do out[i] = r._sid end
    return out
  end
  lu.assertEquals(sids(store:query(Book):as_of(T0)), { s1 })
  lu.assertEquals(sids(store:query(Book):as_of("2026-01-01T00:00:00Z")), { s1 })
  lu.assertEquals(sids(store:query(Book):as_of("2026-01-01T01:00:00+01:00")), { s1 })
  lu.assertEquals(sids(store:query(Book):as_of("2026-01-01T00:00:00.999999999Z")), { s1 })
  lu.assertEquals(sids(store:query(Book):as_of("2026-01-01T00:00:01Z")), { s1, s2, e1 })
  lu.assertEquals(sids(store:query(Book):as_of(T0 + 1000000000)), { s1, s2, e1 })
  -- latest as of then: the first edition, whose successor came later
  lu.assertEquals(sids(store:query(Book):only_latest():as_of(T0)), { s1 })
  lu.assertEquals(sids(store:query(Book):only_latest():as_of(T0 + 1000000000)), { s2, e1 })
  lu.assertEquals(sids(store:query(Book):only_latest()), { s2, e1 })
  lu.assertEquals(ok(store:query(Book):as_of(T0):count()), 1)
  for _, t in ipairs { "yesterday", 1.5, { 1 } } do
    local v, err, code = store:query(Book):as_of(t):all()
    lu.assertNil(v)
    lu.assertEquals(code, "invalid")
    lu.assertStrContains(tostring(err), "as_of")
  end
  -- nanoseconds as decimal text are taken
  lu.assertEquals(sids(store:query(Book):as_of(tostring(T0))), { s1 })
  local plain = ok(records.open(self.db, { types = { Book }, prefix = "nots.", store_timestamps = false,
                                          log = function() end }))
  local sid = ok(plain:save(Book, { title = "X" }))
  lu.assertNil(ok(plain:fetch(Book, sid))._ts)
  lu.assertErrorMsgContains("store_timestamps", function() plain:query(Book):as_of(T0) end)
  plain:close()
end

-- Text without a zone names no instant: as_of refuses it (invalid, the value
-- named) wherever a query takes a time, instead of reading it as UTC.
function TestRecordsTimestamps:test_as_of_refuses_text_without_a_zone()
  local clock = fake_clock(T0 - 1000000000)
  local store = self:open({ clock = clock.fn })
  ok(store:save(Book, { title = "Dune", edition = 1 }))
  local function refused(build, t, why)
    local q = build(t)
    for _, run in ipairs { function() return q:all() end, function() return q:count() end,
                           function() return q:page { limit = 10 } end } do
      local v, err, code, detail = run()
      lu.assertNil(v, "as_of(" .. t .. ") was taken")
      lu.assertEquals(code, "invalid")
      lu.assertEquals(type(err), "string", tostring(err))
      lu.assertEquals(detail.value, t)
      lu.assertStrContains(tostring(err), string.format("%q", t))
      lu.assertStrContains(tostring(err), why)
    end
  end
  local entries = {
    function(t) return store:query(Book):as_of(t) end,
    function(t) return store:query(Book):only_latest():as_of(t) end,
    function(t) return store:query(Book):where({ edition = 1 }):order_by({ { "_ts", -1 } }):as_of(t) end,
  }
  for _, build in ipairs(entries) do
    for _, t in ipairs({ "2026-01-01T00:00:00", "2026-01-01", "2026-01-01T00:00", "2026-01-01T00:00:00.5",
                         "2026-01-01 00:00:00" }) do
      refused(build, t, "with its zone")
    end
    refused(build, "yesterday", "ISO-8601")
    refused(build, "2026-01-01T00:00:00.1234567891Z", "9 fractional digits")
  end
  -- with a zone each form is taken, and the query runs at that instant
  for _, t in ipairs({ "2026-01-01T00:00:00Z", "2026-01-01t00:00z", "2026-01-01T01:00:00+01:00",
                       "2026-01-01T01:00:00+0100", "2025-12-31T19:00:00.000000001-05:00" }) do
    local q = store:query(Book):as_of(t)
    lu.assertEquals(ok(q:count()), 1, t)
    lu.assertEquals(#ok(q:all()), 1, t)
    lu.assertEquals(#ok(q:page({ limit = 10 })).items, 1, t)
  end
  lu.assertEquals(ok(store:query(Book):as_of("2025-12-31T23:59:58Z"):count()), 0)
end

-- The records layer's other time inputs, the durations: NaN passes every
-- comparison, so it was taken wherever only "< 0" was refused; a lease of no
-- length or a negative one is expired as written, an endless one never ends.
function TestRecordsTimestamps:test_other_time_inputs_are_checked()
  local nan = 0 / 0
  for _, bad in ipairs({ { lease_ttl = -5 }, { lease_ttl = 0 }, { lease_ttl = nan }, { lease_ttl = math.huge },
                         { fsck_wait = -1 }, { fsck_wait = nan } }) do
    local k = next(bad)
    bad.types, bad.log = { Book }, function() end
    lu.assertErrorMsgContains("open: opts." .. k .. " must be", function() records.open(self.db, bad) end)
  end
  local store = self:open({ lease_ttl = 0.5, fsck_wait = 0 })
  ok(store:save(Book, { title = "A" }))
  for _, bad in ipairs({ { wait = -1 }, { wait = nan }, { future_slack = -1 }, { future_slack = nan } }) do
    local k = next(bad)
    lu.assertErrorMsgContains("fsck: opts." .. k .. " must be", function() store:fsck(bad) end)
  end
  ok(store:fsck({ wait = 0, future_slack = 0 }))
end
