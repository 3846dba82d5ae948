-- spec/02-records/optimade_filters_spec.lua - records.optimade: a corpus of
-- OPTIMADE filters (every construct, precedence, escapes, value-first
-- comparisons, dotted paths through refs and child sets) run against records
-- stored on the test server; each accepted filter's matches are compared with
-- a predicate written by hand in plain Lua over the same records (the
-- predicates are composed here, not derived from the parser); unknown
-- properties, type mismatches and syntax errors are refused as invalid, with
-- the line and column, and nothing is sent.
local lu = require "luaunit"
local ms = require "mongostore"
local helper = require "helpers"
local records = require "mongostore.records"

local ok = helper.ok

local corpus = require "helpers.optimade_corpus"
local Thing, DATA, CORPUS, REFUSED = corpus.Thing, corpus.DATA, corpus.CORPUS, corpus.REFUSED

local function sorted(t) table.sort(t); return t end

local function expected(pred)
  local out = {}
  for _, r in ipairs(DATA) do if pred(r) then out[#out + 1] = r.k end end
  return sorted(out)
end

TestOptimadeFilters = {}

function TestOptimadeFilters:setUp()
  self.name = helper.fresh_db("roptimade")
  self.db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  self.store = ok(records.open(self.db, { types = { Thing }, log = function() end }))
  for _, r in ipairs(DATA) do ok(self.store:save(Thing, r)) end
end

function TestOptimadeFilters:tearDown()
  if self.store then self.store:close() end
  if self.db then self.db:close() end
end

local function keys(rows)
  local out = {}
  for i, row in ipairs(rows) do out[i] = row.thing.k end
  return sorted(out)
end

function TestOptimadeFilters:test_corpus_is_large_enough()
  lu.assertTrue(#CORPUS + #REFUSED >= 150, tostring(#CORPUS + #REFUSED))
  lu.assertTrue(#REFUSED >= 40)
end

function TestOptimadeFilters:test_accepted_filters_match_the_plain_lua_meaning()
  local matched_some, matched_none = 0, 0
  for _, case in ipairs(CORPUS) do
    local rows, msg, code = records.optimade(self.store, Thing, case[1])
    lu.assertNotNil(rows, string.format("%q refused: %s %s", case[1], tostring(msg), tostring(code)))
    local want = expected(case[2])
    lu.assertEquals(keys(rows), want, string.format("%q", case[1]))
    if #want > 0 and #want < #DATA then matched_some = matched_some + 1 else matched_none = matched_none + 1 end
  end
  -- the corpus tells records apart: most filters match some but not all
  lu.assertTrue(matched_some > matched_none, matched_some .. " " .. matched_none)
end

function TestOptimadeFilters:test_refused_filters_are_invalid_and_nothing_is_sent()
  local db = ok(ms.database(helper.uri(), { db = self.name, wait = 10 }))
  local store = ok(records.open(db, { types = { Thing }, log = function() end }))
  db:close()
  for _, case in ipairs(REFUSED) do
    local r, msg, code, detail = records.optimade(store, Thing, case[1])
    lu.assertNil(r, string.format("%q", case[1]))
    lu.assertEquals(code, "invalid", string.format("%q: %s", case[1], tostring(msg)))
    lu.assertEquals(type(msg), "string")
    lu.assertStrContains(msg, "optimade: ")
    lu.assertStrContains(msg, case[2], false)
    lu.assertTrue(detail == nil or type(detail) == "table")
  end
  -- an accepted filter on the closed database is not invalid: it was sent
  local r, _, code = records.optimade(store, Thing, "n = 1")
  lu.assertNil(r)
  lu.assertNotEquals(code, "invalid")
  store:close()
end
