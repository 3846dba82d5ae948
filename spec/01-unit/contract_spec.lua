-- spec/01-unit/contract_spec.lua - mongostore.contract: how a signature
-- checks a call (a wrong type or option raises naming it, a bad value is a
-- message for nil, msg, "invalid"), the one failure shape, and every
-- signature the modules define held against its entry in docs/api.lua, both
-- ways: the same parameters in the same order, the same types, the same
-- option keys with the same types. No server.
local lu = require "luaunit"
local contract = require "mongostore.contract"
-- the modules whose public calls go through the contract
require "mongostore.store"
require "mongostore.engine"
require "mongostore.ngx"
require "mongostore.stm"
require "mongostore.records"
require "mongostore.ngx_access"

local format, concat, sort = string.format, table.concat, table.sort

local root = (debug.getinfo(1, "S").source:match("^@(.*)/spec/[^/]+/[^/]+$")) or "."
local api = dofile(root .. "/docs/api.lua")

TestContract = {}

local n = 0
local function fresh(name) n = n + 1 return format("test.%s_%d", name, n) end

function TestContract:test_a_wrong_type_raises_naming_the_argument_at_the_callers_line()
  local sig = contract.define(fresh("f"), { { "id", "string" }, { "opts", "table?" } })
  local function f(id, opts)
    local bad = sig:check(id, opts)
    return bad
  end
  local ok, err = pcall(function() f(5) end)
  lu.assertFalse(ok)
  lu.assertStrContains(err, sig.name .. ": id must be a string, got integer")
  lu.assertStrContains(err, "contract_spec.lua", "blamed on the caller's line, not the library's")
  lu.assertErrorMsgContains("opts must be a table, got string", f, "x", "y")
  lu.assertErrorMsgContains("id must be a string, got nil", f)
  lu.assertNil(f("x"))
  lu.assertNil(f("x", {}))
end

function TestContract:test_an_old_positional_form_raises_and_extra_arguments_are_left_alone()
  local sig = contract.define(fresh("g"), { { "opts", "table?" } })
  lu.assertErrorMsgContains("opts must be a table, got integer", function() return sig:check(10, 30) end)
  lu.assertNil(sig:check({}, 2), "a second result passed along (f(g())) is Lua's to drop")
  lu.assertNil(sig:check(nil, nil))
end

function TestContract:test_options_unknown_keys_raise_and_values_are_checked()
  local sig = contract.define(fresh("h"), {
    { "opts", "table?", fields = { limit = { "integer", min = 1, max = 10 }, lease = { "number", gt = 0, needs = "limit" },
                                   a = { "boolean", excludes = "b" }, b = "boolean", mode = { "string", one_of = { "x", "y" } },
                                   must = { "string", required = true } } },
  })
  local function c(o) return sig:check(o) end
  lu.assertErrorMsgContains("unknown option limt", c, { must = "m", limt = 1 })
  lu.assertErrorMsgContains("opts.must must be a string, got nil", c, {})
  lu.assertErrorMsgContains("opts.limit must be an integer, got string", c, { must = "m", limit = "5" })
  lu.assertErrorMsgContains("opts.lease needs opts.limit", c, { must = "m", lease = 5 })
  lu.assertErrorMsgContains("opts.a and opts.b exclude each other", c, { must = "m", a = true, b = false })
  lu.assertEquals(c { must = "m", limit = 0 }, sig.name .. ": opts.limit must be an integer from 1 to 10, got 0")
  lu.assertEquals(c { must = "m", limit = 1.5 }, sig.name .. ": opts.limit must be an integer from 1 to 10, got 1.5")
  lu.assertEquals(c { must = "m", limit = 11 }, sig.name .. ": opts.limit must be an integer from 1 to 10, got 11")
  lu.assertStrContains(c { must = "m", limit = 1, lease = 0 }, "opts.lease must be a number > 0, got 0")
  lu.assertStrContains(c { must = "m", limit = 1, lease = 0 / 0 }, "opts.lease must be a number > 0")
  lu.assertStrContains(c { must = "m", mode = "z" }, "opts.mode must be one of x, y, got z")
  lu.assertNil(c { must = "m", limit = 10, lease = 0.5, a = true, mode = "y" })
  lu.assertNil(c(nil))
end

function TestContract:test_union_and_named_kinds()
  contract.kind("test.Even", function(v) return math.type(v) == "integer" and v % 2 == 0 end, "an even integer")
  local sig = contract.define(fresh("u"), { { "v", "string|test.Even" }, { "w", "integer|number?" } })
  local function c(...) return sig:check(...) end
  lu.assertNil(c("s"))
  lu.assertNil(c(4, 1.5), "a union with number takes a fraction")
  lu.assertErrorMsgContains("v must be a string or an even integer, got integer", c, 3)
  lu.assertErrorMsgContains("unknown kind Nope", contract.define, fresh("bad"), { { "v", "Nope" } })
end

function TestContract:test_check_in_puts_an_items_messages_under_the_batch_call()
  local sig = contract.define(fresh("item"), { { "id", "string" }, { "opts", "table?", fields = { n = { "integer", min = 1 } } } })
  lu.assertErrorMsgContains("batch: items[3]: id must be a string", function() return sig:check_in("batch: items[3]", 1) end)
  lu.assertEquals(sig:check_in("batch: items[2]", "x", { n = 0 }), "batch: items[2]: opts.n must be an integer >= 1, got 0")
end

function TestContract:test_the_failure_shape()
  local a, b, c, d = contract.fail("invalid", "f: why", { found = 2 })
  lu.assertNil(a)
  lu.assertEquals({ b, c, d }, { "f: why", "invalid", { found = 2 } })
  local _, msg = contract.fail("server", setmetatable({}, { __tostring = function() return "text" end }))
  lu.assertEquals(msg, "text", "a message is always a string")
  lu.assertErrorMsgContains("detail must be a table", contract.fail, "x", "m", "not a table")
  lu.assertEquals(contract.failed_item(3, "m", "conflict", { found = 1 }),
    { index = 3, message = "m", code = "conflict", detail = { found = 1 } })
end

------------------------------------------------------------------------
-- The signatures against docs/api.lua

local classes, aliases = {}, {}
local by_method, by_fn = {}, {}
for _, page in ipairs(api.pages) do
  for _, section in ipairs(page.sections) do
    for _, e in ipairs(section.entries) do
      if e.class then classes[e.class] = e end
      if e.alias then aliases[e.alias] = e end
      if e.method then by_method[e.of .. ":" .. e.method] = e end
      if e.fn then by_fn[e.module .. "." .. e.fn] = e end
    end
  end
end
local class_of_receiver, module_of_as = {}, {}
for class, recv in pairs(api.receivers) do class_of_receiver[recv] = class end
for _, m in ipairs(api.modules) do module_of_as[m.as] = m.name end

-- "store:commit" -> its docs entry; "engine.new" -> the module's fn
local function doc_entry(name)
  local recv, method = name:match("^([%w_]+):([%w_]+)$")
  if recv then
    local class = class_of_receiver[recv]
    return class and by_method[class .. ":" .. method]
  end
  local as, fn = name:match("^(.+)%.([%w_]+)$")
  local module = as and module_of_as[as]
  return module and by_fn[module .. "." .. fn]
end

-- Splits a docs type at its top-level `|`s.
local function alternatives(t)
  local out, depth, cur = {}, 0, {}
  for ch in t:gmatch(".") do
    if ch == "{" or ch == "<" or ch == "(" then depth = depth + 1 elseif ch == "}" or ch == ">" or ch == ")" then depth = depth - 1 end
    if ch == "|" and depth == 0 then out[#out + 1] = concat(cur); cur = {} else cur[#cur + 1] = ch end
  end
  out[#out + 1] = concat(cur)
  return out
end

-- The kinds a docs type admits, as the contract names them, and whether it is optional.
local function doc_kinds(t)
  t = t:gsub("^%s+", ""):gsub("%s+$", "")
  local optional = t:sub(-1) == "?"
  if optional then t = t:sub(1, -2) end
  local set = {}
  for _, alt in ipairs(alternatives(t)) do
    alt = alt:gsub("^%s+", ""):gsub("%s+$", ""):gsub("%?$", "")
    local kind
    if alt:sub(-2) == "[]" or alt:sub(1, 1) == "{" or alt:match("^table") then kind = "table"
    elseif alt:match("^fun%(") then kind = "function"
    elseif contract.kinds[alt] then kind = alt
    elseif classes[alt] then kind = "table"
    elseif aliases[alt] then
      local first = aliases[alt].values and aliases[alt].values[1] and aliases[alt].values[1][1] or ""
      kind = first:match('^"') and "string" or (first:match("^%d") and "integer" or "string")
    elseif alt == "true" or alt == "false" then kind = "boolean"
    elseif alt:match('^"') then kind = "string"
    else kind = alt end
    set[kind] = true
  end
  return set, optional
end

local function sig_kinds(spec)
  local set = {}
  for _, k in ipairs(spec.kinds) do set[k] = true end
  return set
end

local function show(set)
  local l = {}
  for k in pairs(set) do l[#l + 1] = k end
  sort(l)
  return concat(l, "|")
end

-- The option keys a docs param describes: a class's fields, or an inline { k: T, ... }.
local function doc_fields(t)
  t = t:gsub("%?$", "")
  if classes[t] then
    local out = {}
    for _, f in ipairs(classes[t].fields or {}) do out[f[1]] = f[2] end
    return out
  end
  local inner = t:match("^{(.*)}$")
  if inner then
    local out = {}
    for k, v in inner:gmatch("([%w_]+):%s*([^,]+)") do out[k] = v:gsub("%s+$", "") end
    return out
  end
end

local function compare(name, sig, entry, problems)
  local params = entry.params or {}
  local names_doc, names_sig = {}, {}
  for i, p in ipairs(params) do names_doc[i] = p[1] end
  for i, a in ipairs(sig.args) do names_sig[i] = a.name end
  if concat(names_doc, ",") ~= concat(names_sig, ",") then
    problems[#problems + 1] = format("%s: docs parameters (%s), contract (%s)", name, concat(names_doc, ", "),
      concat(names_sig, ", "))
    return
  end
  for i, a in ipairs(sig.args) do
    local dk, dopt = doc_kinds(params[i][2])
    if show(dk) ~= show(sig_kinds(a)) or dopt ~= a.optional then
      problems[#problems + 1] = format("%s: %s is %s%s in the docs, %s%s in the contract", name, a.name, show(dk),
        dopt and "?" or "", show(sig_kinds(a)), a.optional and "?" or "")
    end
    if a.fields then
      local df = doc_fields(params[i][2])
      if not df then
        problems[#problems + 1] = format("%s: %s takes options in the contract; the docs list none", name, a.name)
      else
        for k, f in pairs(a.fields) do
          if not df[k] then
            problems[#problems + 1] = format("%s: option %s.%s is not in the docs", name, a.name, k)
          else
            local fk, fopt = doc_kinds(df[k])
            if show(fk) ~= show(sig_kinds(f)) or fopt ~= f.optional then
              problems[#problems + 1] = format("%s: option %s.%s is %s%s in the docs, %s%s in the contract", name,
                a.name, k, show(fk), fopt and "?" or "", show(sig_kinds(f)), f.optional and "?" or "")
            end
          end
        end
        for k in pairs(df) do
          if not a.fields[k] then
            problems[#problems + 1] = format("%s: option %s.%s is in the docs, not in the contract", name, a.name, k)
          end
        end
      end
    end
  end
end

function TestContract:test_every_signature_agrees_with_its_docs_entry()
  local problems, checked = {}, 0
  for _, name in ipairs(contract.names) do
    if not name:match("^test%.") then
      local entry = doc_entry(name)
      if not entry then
        problems[#problems + 1] = name .. ": no entry in docs/api.lua"
      else
        compare(name, contract.signatures[name], entry, problems)
        checked = checked + 1
      end
    end
  end
  lu.assertTrue(checked >= 25, "the store's and the engine's calls are under the contract: " .. checked)
  lu.assertEquals(problems, {})
end

function TestContract:test_the_comparison_sees_a_difference()
  -- the check above can fail: a signature that differs from its entry is reported
  local entry = doc_entry("store:due_timers")
  lu.assertNotNil(entry)
  local problems = {}
  local wrong = contract.define(fresh("due_timers_wrong"), { { "now", "integer" }, { "opts", "table?", fields = { limit = "integer", page = "string" } } })
  compare("store:due_timers", wrong, entry, problems)
  lu.assertStrContains(concat(problems, "\n"), "now is number in the docs, integer in the contract")
  lu.assertStrContains(concat(problems, "\n"), "option opts.page is not in the docs")
end

