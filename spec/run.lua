-- spec/run.lua - runs one spec file with luaunit and prints its counts on a
-- last line `SPEC-RESULT passed=N failed=N skipped=N` for tools/run-suites.
-- Usage: lua5.4 spec/run.lua spec/02-store/commit_spec.lua [luaunit options]
local file = assert(arg[1], "usage: run.lua <spec file> [luaunit options]")
local root = file:match("^(.*)/spec/") or "."
package.path = root .. "/spec/?.lua;" .. root .. "/spec/?/init.lua;" .. root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;"
  .. package.path

local lu = require "luaunit"
local ok, err = pcall(dofile, file)
if not ok then
  io.stderr:write("could not load ", file, ": ", tostring(err), "\n")
  print("SPEC-RESULT passed=0 failed=1 skipped=0")
  os.exit(1)
end

local runner = lu.LuaUnit.new()
runner:setOutputType("text")
local opts = { table.unpack(arg, 2) }
if #opts == 0 then opts = { "-v" } end
runner:runSuite(table.unpack(opts))
local r = runner.result
local total = #r.allTests
local failed = r.failureCount + r.errorCount
local skipped = r.skippedCount
print(string.format("SPEC-RESULT passed=%d failed=%d skipped=%d", total - failed - skipped, failed, skipped))
-- close the state so __gc runs (the sanitizer and valgrind runs check it)
os.exit(failed == 0 and 0 or 1, true)
