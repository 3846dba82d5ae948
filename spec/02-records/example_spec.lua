-- spec/02-records/example_spec.lua - examples/records.lua runs against the test
-- server with the interpreter that runs this spec and says what it should: the
-- mode the server gives, one shared author, dedup, the lineage, the page walk and fsck.
local lu = require "luaunit"
local helper = require "helpers"

TestRecordsExample = {}

function TestRecordsExample:test_records_example()
  local cmd = string.format("cd %s && MONGOSTORE_URI=%s %s examples/records.lua 2>&1",
    helper.shell_quote(helper.root()), helper.shell_quote(helper.uri()), helper.lua_command())
  local f = assert(io.popen(cmd, "r"))
  local out = f:read("a")
  local ok = f:close()
  lu.assertTrue(ok, out)
  local server = os.getenv("MONGOSTORE_TEST_SERVER")
  if server == "java" then lu.assertStrContains(out, "mode: degraded\n") end
  if server == "secantus" then lu.assertStrContains(out, "mode: transactions\n") end
  lu.assertStrContains(out, "saved 6 books; Emma (1815) by Jane Austen, author sid shared: true")
  lu.assertStrContains(out, "saved again: same sid true")
  lu.assertStrContains(out, 'other metadata: conflict (dedup = "value"), detail.sid is Emma\'s: true\n')
  lu.assertStrContains(out, "history of Emma: 1815 -> 1816")
  lu.assertStrContains(out, "matching: 5")
  lu.assertStrContains(out, "page 1: Northanger Abbey 1817, Persuasion 1817, Emma 1816\n")
  lu.assertStrContains(out, "page 2: Mansfield Park 1814, Pride and Prejudice 1813\n")
  lu.assertNotStrContains(out, "page 3")
  lu.assertStrContains(out, "searched: Emma by Jane Austen, 2 chapters\n")
  lu.assertNotStrContains(out, "searched: Persuasion")
  lu.assertStrContains(out, "searched titles: Northanger Abbey, Persuasion, Pride and Prejudice\n")
  lu.assertStrContains(out, "fsck: 8 records examined, clean: true")
end
