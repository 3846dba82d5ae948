-- spec/helpers/optimade_corpus.lua - the OPTIMADE filter corpus the optimade
-- specs share: the record types and records, the accepted filters each with
-- its meaning as a plain-Lua predicate over a record (written by hand and
-- composed here, independent of the parser), and the refused filters with the
-- text their message holds; `syntax = true` marks a refusal the grammar
-- itself makes (any OPTIMADE parser refuses it), the others are grammatical
-- filters refused for what they ask of this type.
local records = require "mongostore.records"

local Person = records.define { name = "person", fields = { name = "string", age = "integer" } }
local Thing = records.define {
  name = "thing", dedup = "none",
  fields = { k = "string", name = "string", n = "integer", x = "float", flag = "boolean", tags = "string[]",
             nums = "integer[]" },
  children = { parts = { fields = { w = "integer", label = "string" } } },
  refs = { owner = Person, friends = { Person } },
}

local ann = { name = "Ann", age = 30 }
local bob = { name = "Bob", age = 40 }
local DATA = {
  { k = "r1", name = "alpha", n = 1, x = 1.5, tags = { "a", "b" }, nums = { 1, 2, 3 }, owner = ann,
    parts = { { w = 1, label = "p" }, { w = 5, label = "q" } }, friends = { bob } },
  { k = "r2", name = "beta", n = 2, x = -2.0, tags = { "b" }, nums = { 7 }, owner = bob, friends = { ann, bob } },
  { k = "r3", name = "gamma", n = 3, tags = { "c", "a", "d" }, nums = { 5 }, owner = ann },
  { k = "r4", name = 'quo"te\\s', n = 10, x = 1000.0, tags = { "a" } },
  { k = "r5", name = "Alphabet", n = -1, x = 0.5, flag = true, parts = { { w = 7, label = "pq" } } },
  { k = "r6", n = 100, tags = { "x", "y" }, nums = { 1, 1 } },
  { k = "r7", name = "beta", n = 1000, x = 1e3, parts = { { w = 10, label = "r" } }, owner = bob },
  { k = "r8", name = "deltaalpha", n = 0, x = 0.25, flag = false },
}

-- plain-Lua meanings: a comparison with an unknown value is false
local function known(v) return v ~= nil end
local function cmp(v, op, c)
  if v == nil then return false end
  if op == "=" then return v == c elseif op == "!=" then return v ~= c
  elseif op == "<" then return v < c elseif op == "<=" then return v <= c
  elseif op == ">" then return v > c else return v >= c end
end
local function has(list, v)
  if list == nil then return false end
  for _, x in ipairs(list) do if x == v then return true end end
  return false
end
local function has_all(list, vs)
  if list == nil then return false end
  for _, v in ipairs(vs) do if not has(list, v) then return false end end
  return true
end
local function has_any(list, vs)
  for _, v in ipairs(vs) do if has(list, v) then return true end end
  return false
end
local function has_only(list, vs)
  if list == nil then return false end
  for _, x in ipairs(list) do if not has(vs, x) then return false end end
  return true
end
local function len(list, op, n) if list == nil then return false end return cmp(#list, op, n) end
local function starts(s, p) return s ~= nil and s:sub(1, #p) == p end
local function ends(s, p) return s ~= nil and (p == "" or s:sub(-#p) == p) end
local function contains(s, p) return s ~= nil and s:find(p, 1, true) ~= nil end
local function any_part(r, fn)
  for _, p in ipairs(r.parts or {}) do if fn(p) then return true end end
  return false
end
local function owner(r, f) return r.owner and r.owner[f] end
local function any_friend(r, fn)
  for _, p in ipairs(r.friends or {}) do if fn(p) then return true end end
  return false
end

-- atoms: { filter, predicate }
local ATOMS = {}
local function atom(f, p) ATOMS[#ATOMS + 1] = { f, p } end
for _, op in ipairs { "=", "!=", "<", "<=", ">", ">=" } do
  atom("n " .. op .. " 3", function(r) return cmp(r.n, op, 3) end)
  atom("x " .. op .. " 1.5", function(r) return cmp(r.x, op, 1.5) end)
  atom('name ' .. op .. ' "beta"', function(r) return cmp(r.name, op, "beta") end)
  atom("owner.age " .. op .. " 30", function(r) return cmp(owner(r, "age"), op, 30) end)
end
-- a value on the left
local FLIP = { ["="] = "=", ["!="] = "!=", ["<"] = ">", ["<="] = ">=", [">"] = "<", [">="] = "<=" }
for _, op in ipairs { "=", "!=", "<", "<=", ">", ">=" } do
  atom("10 " .. op .. " n", function(r) return cmp(r.n, FLIP[op], 10) end)
  atom('"beta" ' .. op .. " name", function(r) return cmp(r.name, FLIP[op], "beta") end)
end
atom("n = -1", function(r) return r.n == -1 end)
atom("x = -2.0", function(r) return r.x == -2.0 end)
atom("x < -1.5", function(r) return cmp(r.x, "<", -1.5) end)
atom("x >= 1e3", function(r) return cmp(r.x, ">=", 1000) end)
atom("x <= .5", function(r) return cmp(r.x, "<=", 0.5) end)
atom("x > 2.5E-1", function(r) return cmp(r.x, ">", 0.25) end)
atom("n = 1e3", function(r) return r.n == 1000 end)
atom("n > +2", function(r) return cmp(r.n, ">", 2) end)
atom("n < 1.0", function(r) return cmp(r.n, "<", 1) end)
atom('name CONTAINS "alpha"', function(r) return contains(r.name, "alpha") end)
atom('name CONTAINS "a.p"', function(r) return contains(r.name, "a.p") end)
atom('name STARTS WITH "Alph"', function(r) return starts(r.name, "Alph") end)
atom('name STARTS "al"', function(r) return starts(r.name, "al") end)
atom('name ENDS WITH "ta"', function(r) return ends(r.name, "ta") end)
atom('name ENDS "alpha"', function(r) return ends(r.name, "alpha") end)
atom('name = "quo\\"te\\\\s"', function(r) return r.name == 'quo"te\\s' end)
atom('name CONTAINS "\\""', function(r) return contains(r.name, '"') end)
atom('name ENDS "\\\\s"', function(r) return ends(r.name, "\\s") end)
atom('name CONTAINS "\\\\"', function(r) return contains(r.name, "\\") end)
atom('name STARTS WITH "quo\\""', function(r) return starts(r.name, 'quo"') end)
atom('name = "ünï"', function() return false end)
atom('tags HAS "a"', function(r) return has(r.tags, "a") end)
atom('tags HAS ALL "a", "b"', function(r) return has_all(r.tags, { "a", "b" }) end)
atom('tags HAS ANY "d","y"', function(r) return has_any(r.tags, { "d", "y" }) end)
atom('tags HAS ONLY "a", "b", "c", "d"', function(r) return has_only(r.tags, { "a", "b", "c", "d" }) end)
atom('tags HAS ONLY "b"', function(r) return has_only(r.tags, { "b" }) end)
atom("nums HAS 1", function(r) return has(r.nums, 1) end)
atom("nums HAS ALL 1, 2", function(r) return has_all(r.nums, { 1, 2 }) end)
atom("nums HAS ANY 5, 7", function(r) return has_any(r.nums, { 5, 7 }) end)
atom("nums HAS ONLY 1", function(r) return has_only(r.nums, { 1 }) end)
for _, op in ipairs { "=", "!=", "<", "<=", ">", ">=" } do
  atom("tags LENGTH " .. op .. " 2", function(r) return len(r.tags, op, 2) end)
end
atom("tags LENGTH 1", function(r) return len(r.tags, "=", 1) end)
atom("nums LENGTH 0", function(r) return len(r.nums, "=", 0) end)
atom("parts LENGTH >= 1", function(r) return len(r.parts, ">=", 1) end)
atom("parts LENGTH 2", function(r) return len(r.parts, "=", 2) end)
atom("friends LENGTH 2", function(r) return len(r.friends, "=", 2) end)
atom("name IS KNOWN", function(r) return known(r.name) end)
atom("name IS UNKNOWN", function(r) return not known(r.name) end)
atom("x IS UNKNOWN", function(r) return not known(r.x) end)
atom("flag IS KNOWN", function(r) return known(r.flag) end)
atom("owner IS KNOWN", function(r) return known(r.owner) end)
atom("owner IS UNKNOWN", function(r) return not known(r.owner) end)
atom("owner.name IS KNOWN", function(r) return known(owner(r, "name")) end)
atom('owner.name = "Ann"', function(r) return owner(r, "name") == "Ann" end)
atom('owner.name STARTS "B"', function(r) return starts(owner(r, "name"), "B") end)
atom('friends.name = "Ann"', function(r) return any_friend(r, function(p) return p.name == "Ann" end) end)
atom("friends.age > 35", function(r) return any_friend(r, function(p) return p.age > 35 end) end)
atom("parts.w > 4", function(r) return any_part(r, function(p) return p.w > 4 end) end)
atom("parts.w = 1", function(r) return any_part(r, function(p) return p.w == 1 end) end)
atom('parts.label CONTAINS "q"', function(r) return any_part(r, function(p) return contains(p.label, "q") end) end)
atom("n < x", function(r) return r.n and r.x and r.n < r.x or false end)
atom("n >= x", function(r) return r.n and r.x and r.n >= r.x or false end)
atom("  n\t=\n2  ", function(r) return r.n == 2 end)
atom("(n = 2)", function(r) return r.n == 2 end)
atom("((((n = 2))))", function(r) return r.n == 2 end)
atom("NOT n = 2", function(r) return r.n ~= 2 end)
atom("NOT (NOT n = 2)", function(r) return r.n == 2 end)
atom("NOT (NOT (NOT n = 2))", function(r) return r.n ~= 2 end)
atom("NOT(n = 2)", function(r) return r.n ~= 2 end)
atom("NOT name IS KNOWN", function(r) return not known(r.name) end)

local CORPUS = {}
for _, a in ipairs(ATOMS) do CORPUS[#CORPUS + 1] = a end
-- compositions: precedence NOT > AND > OR, and parentheses that change it
local picks = { 1, 7, 12, 25, 33, 41, 50, 58, 63, 70, 77, 84, 90 }
for i = 1, #picks - 2 do
  local A, B, Cc = ATOMS[picks[i]], ATOMS[picks[i + 1]], ATOMS[picks[i + 2]]
  local a, b, c = A[2], B[2], Cc[2]
  local fa, fb, fc = A[1], B[1], Cc[1]
  CORPUS[#CORPUS + 1] = { fa .. " AND " .. fb, function(r) return a(r) and b(r) end }
  CORPUS[#CORPUS + 1] = { fa .. " OR " .. fb, function(r) return a(r) or b(r) end }
  CORPUS[#CORPUS + 1] = { fa .. " OR " .. fb .. " AND " .. fc, function(r) return a(r) or (b(r) and c(r)) end }
  CORPUS[#CORPUS + 1] = { fa .. " AND " .. fb .. " OR " .. fc, function(r) return (a(r) and b(r)) or c(r) end }
  CORPUS[#CORPUS + 1] = { "(" .. fa .. " OR " .. fb .. ") AND " .. fc, function(r) return (a(r) or b(r)) and c(r) end }
  CORPUS[#CORPUS + 1] = { "NOT " .. fa .. " AND " .. fb, function(r) return (not a(r)) and b(r) end }
  CORPUS[#CORPUS + 1] = { "NOT (" .. fa .. " OR " .. fb .. ")", function(r) return not (a(r) or b(r)) end }
  CORPUS[#CORPUS + 1] = { "NOT " .. fa .. " OR NOT " .. fb .. " AND " .. fc,
                          function(r) return (not a(r)) or ((not b(r)) and c(r)) end }
end

-- refused: { filter, text the message holds }
local REFUSED = {
  { "nope = 1", "has no property nope" },
  { "owner.nope = 1", "has no property nope" },
  { "parts.zz > 1", "has no property zz" },
  { "n.x = 1", "is a field" },
  { 'n = 1 AND bogus IS KNOWN', "line 1, column 11: thing has no property bogus" },
  { "n = ", "line 1, column 5: unexpected end", syntax = true },
  { "n == 1", "line 1, column 4", syntax = true },
  { "n = 1 AND", "line 1, column 10", syntax = true },
  { "n = 1 AND\n  OR x = 2", "line 2, column 3", syntax = true },
  { "(n = 1", "unexpected end", syntax = true },
  { "n = 1)", "line 1, column 6", syntax = true },
  { "()", "line 1, column 2", syntax = true },
  { "", "empty", syntax = true },
  { "   ", "empty", syntax = true },
  { 'name = "open', "unexpected end", syntax = true },
  { 'name = "bad \\q escape"', "line 1, column 13", syntax = true },
  { "name = 'single'", "line 1, column 8", syntax = true },
  { "n = 1 and x = 2", "line 1, column 7", syntax = true },
  { "n = 1 && x = 2", "line 1, column 7", syntax = true },
  { "N = 1", "line 1, column 1", syntax = true },
  { "n = 1e", "line 1, column 5", syntax = true },
  { "n = 1.2.3", "line 1, column 8", syntax = true },
  { "n = --1", "line 1, column 5", syntax = true },
  { "n IS", "unexpected end", syntax = true },
  { "n IS NULL", "line 1, column 6", syntax = true },
  { "tags HAS", "unexpected end", syntax = true },
  { "tags HAS ALL", "unexpected end", syntax = true },
  { 'tags HAS ALL "a",', "unexpected end", syntax = true },
  { "name CONTAINS", "unexpected end", syntax = true },
  { "1 = 1", "a property on one side" },
  { '"a" = "a"', "a property on one side" },
  { 'n = "3"', "is an integer, got text" },
  { "name = 3", "is text, got the number 3" },
  { "n = 1.5", "is an integer, got 1.5" },
  { "n CONTAINS \"1\"", "is not text" },
  { "tags = \"a\"", "not a single value" },
  { "name HAS \"a\"", "not a list of values" },
  { "name LENGTH 2", "not a list" },
  { "tags LENGTH -1", "whole number" },
  { "tags LENGTH 1.5", "whole number" },
  { "owner LENGTH 1", "not a list" },
  { "owner = 1", "not a single value" },
  { "parts = 1", "not a single value" },
  { "flag = 1", "boolean" },
  { "tags HAS 1", "is text, got the number 1" },
  { "nums HAS ANY 1, \"x\"", "is an integer, got text" },
  { "n = 1e999", "out of range" },
  { "NOT", "unexpected end", syntax = true },
  { "NOT NOT n = 2", "line 1, column 5", syntax = true },
  { "n = 2 AND NOT NOT x > 1", "line 1, column 15", syntax = true },
  { "n = 1 OR OR n = 2", "line 1, column 10", syntax = true },
  { "owner.name = owner.age", "both are single fields" },
  { "name < n", "different kinds of value" },
}

return { Person = Person, Thing = Thing, DATA = DATA, CORPUS = CORPUS, REFUSED = REFUSED }
