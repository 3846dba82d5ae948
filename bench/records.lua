-- bench/records.lua - issue 13's record rows: save and fetch of small record graphs (a book
-- with 3 embedded chapters and an author record shared by 10 books) with mongostore.records,
-- and a walk over all of them by keyset pages, with the cost of a page at the first and at
-- the last position.
--
-- usage: lua5.4 bench/records.lua <uri> <db> [n] [page_size] [page_reps]
--
-- Prints "RESULT records.<key> <value>": save_ms, save_per_s (books saved per second),
-- save_records_per_s (records written or deduplicated: book + author), rt_per_save (commands
-- the pool sent per save, from db:stats()), fetch_ms, fetch_per_s, rt_per_fetch, walk_ms,
-- walk_pages, walk_items, page_first_ms and page_last_ms (the median of page_reps fetches of
-- the first and of the last page by its token), page_last_over_first, raw_page_first_ms (the
-- first page's find sent by the document API: the server's share), mode (transactions or
-- degraded), fsck_ms (a report-only fsck over the whole store), fsck_verify_ms (one that also
-- reads every record whole and computes its content id again), search_ms, search_rows and
-- rt_per_search (a searcher's results through the author ref and into the chapters: the median,
-- its rows, its commands).
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local root = here .. "/.."
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path
package.cpath = root .. "/?.so;" .. package.cpath

local ms = require "mongostore"
local records = require "mongostore.records"

local format = string.format
local uri, dbname = arg[1], arg[2]
local N = tonumber(arg[3] or "10000")
local PAGE = tonumber(arg[4] or "100")
local REPS = tonumber(arg[5] or "9")
if not (uri and dbname) then
  io.stderr:write("usage: lua5.4 bench/records.lua <uri> <db> [n] [page_size] [page_reps]\n")
  os.exit(2)
end

local function check(what, v, msg, code)
  if v == nil then error(format("%s: %s (%s)", what, tostring(msg), tostring(code)), 0) end
  return v
end

local function result(key, value)
  if type(value) == "number" then
    io.stdout:write(format("RESULT records.%s %s\n", key, math.type and math.type(value) == "integer"
      and tostring(value) or format("%.3f", value)))
  else
    io.stdout:write(format("RESULT records.%s %s\n", key, tostring(value)))
  end
end

local function median(list)
  table.sort(list)
  local n = #list
  if n % 2 == 1 then return list[(n + 1) / 2] end
  return (list[n / 2] + list[n / 2 + 1]) / 2
end

local db = check("database", ms.database(uri, { db = dbname, wait = 30 }))
local Author = records.define { name = "author", fields = { name = "string", born = "integer" }, dedup = "content" }
local Book = records.define {
  name = "book", dedup = "value", indexes = { { "year" } },
  fields = { title = "string", year = "integer", note = { "string", identity = false } },
  children = { chapters = { fields = { title = "string", pages = "integer" } } },
  refs = { author = Author },
}
local store = check("records.open", records.open(db, { types = { Author, Book }, transactions = "auto" }))
local mode = (store:info() or {}).mode or "?"

local function book(i)
  local a = math.floor((i - 1) / 10)
  return {
    title = format("Book number %d", i),
    year = 1900 + i % 120,
    note = "bench",
    chapters = {
      { title = "Opening", pages = 10 + i % 7 },
      { title = "Middle", pages = 20 + i % 11 },
      { title = "Ending", pages = 5 + i % 3 },
    },
    author = { name = format("Author %d", a), born = 1850 + a % 100 },
  }
end

local function total() return check("db:stats", db:stats()).total end

-- an untimed warm-up on a store of its own prefix, so the timed rows start from empty collections
do
  local warm = check("records.open (warm-up)", records.open(db, { types = { Author, Book }, transactions = "auto",
    prefix = "warm." }))
  for i = 1, math.max(10, N // 20) do check("warm-up save", warm:save(Book, book(i))) end
end

-- saves
local sids = {}
local t0, c0 = ms.now(), total()
for i = 1, N do sids[i] = check("save " .. i, store:save(Book, book(i))) end
local save_s, save_cmds = ms.now() - t0, total() - c0
result("mode", mode)
result("n", N)
result("save_ms", save_s * 1e3)
result("save_per_s", N / save_s)
result("save_records_per_s", 2 * N / save_s)
result("rt_per_save", save_cmds / N)

-- fetches, each the whole graph back
t0, c0 = ms.now(), total()
for i = 1, N do
  local b = check("fetch " .. i, store:fetch(Book, sids[i]))
  if b.title ~= format("Book number %d", i) then error("fetch " .. i .. ": another book came back", 0) end
end
local fetch_s, fetch_cmds = ms.now() - t0, total() - c0
result("fetch_ms", fetch_s * 1e3)
result("fetch_per_s", N / fetch_s)
result("rt_per_fetch", fetch_cmds / N)

-- the walk: every book exactly once, by keyset pages over (year, sid)
local function query() return store:query(Book):order_by { { "year", 1 } } end
local tokens, seen, items, pages = { false }, {}, 0, 0
t0 = ms.now()
local after
repeat
  local page = check("page " .. (pages + 1), query():page { limit = PAGE, cursor = after })
  pages = pages + 1
  for _, b in ipairs(page.items) do
    local key = b.title
    if seen[key] then error("the walk returned " .. key .. " twice", 0) end
    seen[key] = true
    items = items + 1
  end
  after = page.next_cursor
  if after then tokens[#tokens + 1] = after end
until not after
local walk_s = ms.now() - t0
if items ~= N then error(format("the walk returned %d books of %d", items, N), 0) end
result("walk_ms", walk_s * 1e3)
result("walk_pages", pages)
result("walk_items", items)

-- one page at the first and at the last position, by its token, REPS times each, interleaved
local first_list, last_list = {}, {}
local last_token = tokens[#tokens]
for _ = 1, REPS do
  local s = ms.now()
  check("first page", query():page { limit = PAGE })
  first_list[#first_list + 1] = (ms.now() - s) * 1e3
  s = ms.now()
  check("last page", query():page { limit = PAGE, cursor = last_token or nil })
  last_list[#last_list + 1] = (ms.now() - s) * 1e3
end
-- the first page's find sent by the document API itself (same sort and limit): what of a
-- page's cost is the server's
local raw_list = {}
local books_coll = check("collection", db:collection("records.book"))
for _ = 1, REPS do
  local s = ms.now()
  local cur = check("raw first page", books_coll:find({}, { sort = { { "year", 1 }, { "_id", 1 } }, limit = PAGE + 1 }))
  check("raw first page", cur:all())
  raw_list[#raw_list + 1] = (ms.now() - s) * 1e3
end
result("raw_page_first_ms", median(raw_list))
local first_ms, last_ms = median(first_list), median(last_list)
result("page_size", PAGE)
result("page_first_ms", first_ms)
result("page_last_ms", last_ms)
result("page_last_over_first", last_ms / first_ms)

-- a search through the ref and into the child set: one author's books with a long middle chapter,
-- REPS times (the median), with the commands each sent (the authors' find, the books' find, the
-- load of the matches' authors)
local function search()
  local s = store:searcher { only_latest = true }
  local b = s:variable(Book)
  s:add(b.author.name:eq("Author 3"))
  s:add(b.chapters:any(function(c) return c.pages:ge(25) end))
  s:output(b.title, "title"):output(b.author.born, "born")
  s:sort(b.year, 1)
  return check("search", s:results())
end
local search_list, search_rows = {}, 0
c0 = total()
for _ = 1, REPS do
  local s = ms.now()
  search_rows = #search()
  search_list[#search_list + 1] = (ms.now() - s) * 1e3
end
result("search_ms", median(search_list))
result("search_rows", search_rows)
result("rt_per_search", (total() - c0) / REPS)

-- a report-only fsck over the 10,000 books and their 1,000 authors
t0 = ms.now()
local summary = check("fsck", store:fsck {})
result("fsck_ms", (ms.now() - t0) * 1e3)
result("fsck_examined", summary.totals.examined)
t0 = ms.now()
summary = check("fsck verify_content", store:fsck { verify_content = true })
if not summary.clean then error("fsck verify_content: " .. summary.violations[1].message, 0) end
result("fsck_verify_ms", (ms.now() - t0) * 1e3)
result("version", format("mongostore %s, %s", tostring(ms._VERSION), _VERSION))
if store.close then store:close() end
db:close()
