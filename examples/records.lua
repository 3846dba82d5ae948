-- examples/records.lua - a small catalogue in the record store: authors and books
-- (chapters embedded, the author in its own collection by sid), the same author
-- stored once, a revised edition replacing a book in its lineage, a walk over the
-- books by keyset pages, a search and an fsck. Run it with
-- `tools/with-server lua5.4 examples/records.lua` (or set MONGOSTORE_URI).
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local ms = require "mongostore"
local records = require "mongostore.records"
local Q = records.Q

local uri = os.getenv("MONGOSTORE_URI") or "mongodb://127.0.0.1:27017"
local db = assert(ms.database(uri, { db = "mongostore_records_" .. ms.uuid():sub(1, 8), wait = 30 }))

local Author = records.define { name = "author", fields = { name = "string", born = "integer" } }
local Book = records.define {
  name = "book", dedup = "value",
  fields = { title = "string", year = "integer", note = { "string", identity = false } },
  children = { chapters = { fields = { title = "string", pages = "integer" } } },
  refs = { author = Author },
  indexes = { { "year" } },
}

-- "auto": transactions on a replica set, degraded (bottom-up writes) on a standalone
local store = assert(records.open(db, { types = { Book }, log = function() end }))
print("mode: " .. store:info().mode)

local austen = { name = "Jane Austen", born = 1775 }
local titles = { { "Sense and Sensibility", 1811 }, { "Pride and Prejudice", 1813 }, { "Mansfield Park", 1814 },
                 { "Emma", 1815 }, { "Persuasion", 1817 }, { "Northanger Abbey", 1817 } }
local sids = {}
for i, t in ipairs(titles) do
  sids[i] = assert(store:save(Book, { title = t[1], year = t[2], author = austen,
                                      chapters = { { title = "Chapter 1", pages = 12 } } }))
end
local emma = assert(store:fetch(Book, sids[4]))
print(("saved %d books; %s (%d) by %s, author sid shared: %s"):format(#sids, emma.title, emma.year, emma.author.name,
  tostring(emma.author._sid == assert(store:fetch(Book, sids[1])).author._sid)))

-- the same book again is the same record; other metadata for it is refused
print("saved again: same sid " .. tostring(assert(store:save(Book, { title = "Emma", year = 1815, author = austen,
  chapters = { { title = "Chapter 1", pages = 12 } } })) == sids[4]))
local _, err, code, detail = store:save(Book, { title = "Emma", year = 1815, author = austen, note = "signed",
                                                chapters = { { title = "Chapter 1", pages = 12 } } })
-- err is the message, detail the facts: here the sid of the stored record it differs from
print("other metadata: " .. code .. " (" .. err:match("dedup = \"value\"") .. "), detail.sid is Emma's: "
  .. tostring(detail.sid == sids[4]))

-- a revised edition: a new record in the same lineage
local emma2 = assert(store:replace(Book, sids[4], { title = "Emma", year = 1816, author = austen,
  chapters = { { title = "Chapter 1", pages = 12 }, { title = "Chapter 2", pages = 9 } } }))
local years = {}
for _, r in ipairs(assert(store:history(Book, emma2))) do years[#years + 1] = r.year end
print("history of Emma: " .. table.concat(years, " -> "))

-- every latest book from 1813 on, newest first, three to a page
local q = store:query(Book):where(Q.year:gte(1813)):only_latest():order_by { { "year", -1 }, { "title", 1 } }
print(("matching: %d"):format(assert(q:count())))
local cursor, n = nil, 0
repeat
  local page = assert(q:page { limit = 3, cursor = cursor })
  n = n + 1
  local names = {}
  for _, b in ipairs(page.items) do names[#names + 1] = b.title .. " " .. b.year end
  print(("page %d: %s"):format(n, table.concat(names, ", ")))
  cursor = page.next_cursor
until not cursor

-- the searcher: variables, conditions through the ref and on the child set, outputs
local s = store:searcher { only_latest = true }
local b = s:variable(Book)
s:add(b.year:ge(1814))
s:add(b.author.name:eq("Jane Austen"))
s:add(b.chapters:any(function(c) return c.pages:lt(10) end))
s:output(b, "book"):output(b.title, "title"):output(b.author.name, "author")
s:sort(b.year, -1)
local rows = assert(s:results())
for _, row in ipairs(rows) do
  print(("searched: %s by %s, %d chapters"):format(row.title, row.author, #row.book.chapters))
end
local any = store:searcher { only_latest = true }
local a = any:variable(Book)
any:add(any.any_of(a.title:prefix("P"), a.title:contains("Abbey")))
any:sort(a.title)
any:output(a.title, "title")
print("searched titles: " .. table.concat(assert(any:results()):scalars(), ", "))

-- the integrity pass (the store's own writer lease is not in its way)
local summary = assert(store:fsck { repair = false, collect_garbage = true })
local examined = 0
for _, c in pairs(summary.collections) do examined = examined + c.examined end
print(("fsck: %d records examined, clean: %s"):format(examined, tostring(summary.clean)))

store:close()
assert(db:command({ dropDatabase = 1 }))
db:close()
