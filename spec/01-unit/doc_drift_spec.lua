-- spec/01-unit/doc_drift_spec.lua - catches the next drift between the docs
-- and the code where a rule can: every repository path the docs and the
-- tools name exists; what the docs say about how msngx.run's values cross
-- agrees with the codec it uses (BSON, boxes included); no CLI help says a
-- sentence twice. No server.
local lu = require "luaunit"
local helper = require "helpers"

local root = helper.root()

local function read(path)
  local f = io.open(root .. "/" .. path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

local function exists(path)
  local f = io.open(root .. "/" .. path, "rb")
  if f then f:close() return true end
  return os.execute("test -d '" .. root .. "/" .. path .. "'") == true
end

local function tracked(pattern)
  local p = assert(io.popen("cd '" .. root .. "' && git ls-files " .. pattern .. " 2>/dev/null"))
  local out = {}
  for line in p:lines() do out[#out + 1] = line end
  p:close()
  return out
end

-- The files whose text names other files: the docs, the examples' docs and
-- comments, the tools.
local function sources()
  local out = {}
  for _, pattern in ipairs { "'*.md'", "tools", "examples", "docs/api.lua" } do
    for _, f in ipairs(tracked(pattern)) do
      if not f:match("^CHANGELOG") and not f:match("%.svg$") and not f:match("%.png$") and not f:match("%.json$") then
        out[#out + 1] = f
      end
    end
  end
  return out
end

local TOP = { "README.md", "DURABILITY.md", "CHANGELOG.md", "LICENSE", "Makefile" }
local DIRS = { "tools/", "spec/", "docs/", "examples/", "bench/", "lua/", "csrc/", "bin/", "fuzz/", "types/", ".ci/" }

-- The repository paths a text names: a top-level file, or a path under one
-- of the project's folders (no wildcard, no placeholder).
local function named_paths(text)
  local out = {}
  for word in text:gmatch("[%w_%.%-/]+") do
    word = word:gsub("[%.,:;]+$", "")
    local candidate = false
    for _, d in ipairs(DIRS) do
      -- (a short rest is a unit, as in docs/s)
      if word:sub(1, #d) == d and #word >= #d + 3 then candidate = true end
    end
    for _, t in ipairs(TOP) do
      if word == t then candidate = true end
    end
    if word:match("^[%u]+%.md$") then candidate = true end -- DESIGN.md and its kind
    if candidate and not word:find("[<>%*]") and not word:match("/%.%.") then out[word] = true end
  end
  return out
end

TestDocDrift = {}

function TestDocDrift:test_every_repository_path_the_docs_and_tools_name_exists()
  local missing = {}
  for _, f in ipairs(sources()) do
    local text = read(f) or ""
    for path in pairs(named_paths(text)) do
      local bare = path:gsub("/$", "")
      -- a program built from its .c (bench/batch_limit) counts as there
      if not exists(bare) and not exists(bare .. ".c")
         and not exists(f:match("^(.*/)") and (f:match("^(.*/)") .. bare) or bare) then
        missing[#missing + 1] = f .. ": " .. path
      end
    end
  end
  table.sort(missing)
  lu.assertEquals(missing, {})
end

-- msngx.run's values cross as BSON (mongostore.ngx_thread's CODECS.bson):
-- a paragraph about msngx.run that speaks of JSON must be contrasting it
-- (naming BSON too), and none may say that boxes do not cross.
function TestDocDrift:test_what_the_docs_say_msngx_run_carries_agrees_with_its_codec()
  local ngx_thread = read("lua/mongostore/ngx_thread.lua")
  lu.assertStrContains(ngx_thread, "local function run_pack(...) return pack_labelled(nil, CODECS.bson, ...) end")
  local wrong = {}
  for _, f in ipairs(sources()) do
    local text = (read(f) or ""):gsub("\r", "")
    for para in (text .. "\n\n"):gmatch("(.-)\n%s*\n") do
      local about_run = para:find("msngx.run", 1, true) or para:find("app.notes", 1, true)
      if about_run and para:find("cross", 1, true) and para:find("JSON", 1, true)
         and not para:find("BSON", 1, true) then
        wrong[#wrong + 1] = f .. ": " .. para:sub(1, 120)
      end
      if about_run and (para:find("do not cross") or para:find("cannot cross") or para:find("carries no ObjectId")) then
        wrong[#wrong + 1] = f .. ": " .. para:sub(1, 120)
      end
    end
  end
  lu.assertEquals(wrong, {})
end

local STOP = { the = true, ["and"] = true, are = true, its = true, with = true, that = true, ["for"] = true,
               ["not"] = true, one = true, all = true }

-- The set of a text's words, stemmed (releases, release -> releas).
local function words(text)
  local out = {}
  for w in text:lower():gmatch("%a+") do
    if #w >= 3 and not STOP[w] then
      w = w:gsub("ing$", ""):gsub("ed$", ""):gsub("es$", ""):gsub("s$", ""):gsub("e$", "")
      out[w] = true
    end
  end
  return out
end

-- Each command's --help, sentence by sentence: none said twice, and the
-- detail under the summary says more than the summary.
function TestDocDrift:test_no_cli_help_repeats_a_sentence()
  local function run(args)
    local p = assert(io.popen(string.format("cd '%s' && %s bin/mongostore %s 2>&1", root, helper.lua_command(),
      args)))
    local text = p:read("a")
    p:close()
    return text
  end
  -- every command the top-level help lists
  local names = {}
  for name in (run("--help"):match("\nCommands:\n(.-)\n\n") or ""):gmatch("\n?  (%l+) ") do
    names[#names + 1] = name
  end
  lu.assertTrue(#names >= 10, "the command list was not found in mongostore --help")
  local repeated = {}
  for _, name in ipairs(names) do
    local text = run(name .. " --help")
    local body = text:match("^(.-)\nGlobal options") or text
    local seen = {}
    for sentence in body:gsub("%s+", " "):gmatch("([%u][^%.]-%.)%s") do
      local key = sentence:lower():gsub("%s+", " ")
      if seen[key] then repeated[#repeated + 1] = name .. ": " .. sentence end
      seen[key] = true
    end
    -- a summary line and a detail that say the same thing in other words:
    -- half or more of the detail's words (stemmed, past a few short ones)
    -- are the summary's
    local summary, detail = body:match("\n\n([^\n]+)\n\n([^\n]+)")
    if summary and detail and not detail:match("^%s") then
      local a, b = words(summary), words(detail)
      local shared, n = 0, 0
      for w in pairs(b) do
        n = n + 1
        if a[w] then shared = shared + 1 end
      end
      if n >= 2 and shared * 2 >= n then
        repeated[#repeated + 1] = string.format("%s: %q says %q again", name, detail, summary)
      end
    end
  end
  lu.assertEquals(repeated, {})
end

-- The error codes: mongostore.codes, README's table and ms.h's comment name
-- the same ones.
function TestDocDrift:test_the_error_code_lists_agree()
  local ms = require "mongostore"
  local want = {}
  for _, c in ipairs(ms.codes) do want[#want + 1] = c end
  table.sort(want)
  local readme = assert(read("README.md"))
  local block = assert(readme:match("\n| code | meaning |\n(.-)\n\n"), "README.md's table of codes")
  local table_codes = {}
  for code in block:gmatch("| `([%w_]+)` | ") do table_codes[#table_codes + 1] = code end
  table.sort(table_codes)
  lu.assertEquals(table_codes, want, "README.md's table of codes")
  local header = assert(read("csrc/ms.h"))
  local comment = assert(header:match("/%* An error on its way to Lua.-%*/"), "ms.h's comment on ms_err_t")
  local listed = comment:match("against both by [^:]+:(.-)%.%s*%*/")
  local h = {}
  for code in assert(listed, "the list in ms.h's comment"):gmatch("[%w_]+") do h[#h + 1] = code end
  table.sort(h)
  lu.assertEquals(h, want, "csrc/ms.h's list")
end

-- README's layout names every file of the C core: a file added (or
-- renamed) without a word there fails here.
function TestDocDrift:test_the_readme_layout_names_every_source_file()
  local readme = assert(read("README.md"))
  local layout = readme:match("\n## Layout\n(.-)\n## ") or readme:match("\n## Layout\n(.*)$")
  lu.assertNotNil(layout, "README.md has a Layout section")
  local missing = {}
  for _, path in ipairs(tracked("csrc/*")) do
    local name = path:match("([^/]+)$")
    if not layout:find("`" .. name .. "`", 1, true) then missing[#missing + 1] = path end
  end
  lu.assertEquals(missing, {}, "C files the README's layout does not name")
end
