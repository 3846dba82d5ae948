-- spec/02-records/optimade_interop_spec.lua - the corpus of the optimade specs
-- against the optimade Python package's Lark grammar (optimade 1.5.0, filter
-- language v1.1, pinned in tools/requirements-test.txt, run through
-- tools/optimade_interop.py): every filter records.optimade accepts parses
-- there, every one it refuses as a syntax error is refused there, and every
-- one it refuses for what it asks of the type (an unknown property, a value
-- of the wrong kind) is grammatical there. The differences are listed, each
-- with its reason.
local lu = require "luaunit"
local core = require "mongostore.core"
local helper = require "helpers"
local optimade = require "mongostore.records.optimade"
local corpus = require "helpers.optimade_corpus"

-- filter -> what the Lark grammar answers where ours differs, and why
local DIFFERENCES = {
  -- ours takes \" and \\ only, as the grammar of the specification writes it;
  -- the package's grammar takes a backslash before any character
  ['name = "bad \\q escape"'] = true,
  -- an empty filter is no filter to the package (an endpoint without ?filter=);
  -- records.optimade is called with a filter, and refuses an empty one
  [""] = true,
  ["   "] = true,
  -- the package's grammar takes only digits after LENGTH; ours reads a number
  -- there and refuses one that is not a whole number of at least 0
  ["tags LENGTH 1.5"] = false,
}

local function lark(filters)
  local tmp = os.tmpname()
  local f = assert(io.open(tmp, "w"))
  f:write(core.json_encode(filters))
  f:close()
  local cmd = string.format("%s %s < %s 2>&1", helper.shell_quote(helper.python()),
    helper.shell_quote(helper.root() .. "/tools/optimade_interop.py"), helper.shell_quote(tmp))
  local p = assert(io.popen(cmd, "r"))
  local out = p:read("a")
  local fine = p:close()
  os.remove(tmp)
  lu.assertTrue(fine, "optimade_interop.py failed:\n" .. out)
  local v = core.json_decode(out)
  lu.assertEquals(type(v), "table", out)
  return v
end

TestOptimadeInterop = {}

function TestOptimadeInterop:test_accept_and_refuse_agree_with_the_lark_grammar()
  local filters, want, ours = {}, {}, {}
  for _, case in ipairs(corpus.CORPUS) do
    filters[#filters + 1] = case[1]; want[#want + 1] = true; ours[#ours + 1] = "accepted"
  end
  for _, case in ipairs(corpus.REFUSED) do
    filters[#filters + 1] = case[1]; want[#want + 1] = not case.syntax
    ours[#ours + 1] = case.syntax and "a syntax error" or "refused for what it asks"
  end
  -- our parser's side: accepted parse, syntax refusals are refused by parse itself
  for i, text in ipairs(filters) do
    local tree = optimade.parse(text)
    if ours[i] == "a syntax error" then lu.assertNil(tree, text) else lu.assertNotNil(tree, text) end
  end
  local got = lark(filters)
  lu.assertEquals(#got, #filters)
  local differ = {}
  for i, text in ipairs(filters) do
    local expect = want[i]
    if DIFFERENCES[text] ~= nil then expect = DIFFERENCES[text] end
    if got[i] ~= expect then differ[#differ + 1] = string.format("%q (ours: %s)", text, ours[i]) end
  end
  lu.assertEquals(differ, {})
  -- each listed difference is one
  for text, lark_says in pairs(DIFFERENCES) do
    local r = lark { text }
    lu.assertEquals(r[1], lark_says, text)
    lu.assertEquals(optimade.parse(text) ~= nil, not lark_says, text)
  end
end
