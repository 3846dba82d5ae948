-- spec/01-unit/docs_spec.lua - the reference (docs/*.md, types/) against its
-- source (docs/api.lua) and the source against the modules: generated files
-- are current, every documented name exists with the documented arity and
-- options, and every public name of the modules is documented. No server.
local lu = require "luaunit"
local mongostore = require "mongostore"
local chart = require "mongostore.chart"
local engine_mod = require "mongostore.engine"
local msngx = require "mongostore.ngx"
local database_mod = require "mongostore.database"
local transaction_mod = require "mongostore.transaction"
local ngx_thread = require "mongostore.ngx_thread"
local model_mod = require "mongostore.model"
local records_mod = require "mongostore.records"
local records_query = require "mongostore.records.query"
local records_search = require "mongostore.records.search"
local records_fsck = require "mongostore.records.fsck"
local records_canon = require "mongostore.records.canon"

local format, concat, sort = string.format, table.concat, table.sort

local root = (debug.getinfo(1, "S").source:match("^@(.*)/spec/[^/]+/[^/]+$")) or "."
local docgen = dofile(root .. "/tools/docgen.lua")
local api = docgen.load_api(root)
local _, model = docgen.render(api)

-- The Engine method table: engine.new's metatable for the engines it makes.
local function engine_methods()
  if type(engine_mod.Engine) == "table" then return engine_mod.Engine end
  for i = 1, 200 do
    local name, v = debug.getupvalue(engine_mod.new, i)
    if not name then break end
    if name == "Engine" and type(v) == "table" then return v end
  end
  error("cannot find the Engine method table (engine.new's upvalue Engine, or engine.Engine)")
end

local function a_chart()
  return chart.define{ id = "docs_probe", initial = "A", states = { { "A" }, { "B" } },
                       transitions = { { from = "A", to = "B", on = "Go" } } }
end

-- The userdata classes of the C core (the document API's handles and the
-- BSON boxes): the metatables luaL_newmetatable registers under the class
-- name, reachable without a server.
-- Q's fields look their methods up in a function (mongostore.query's Field
-- table, an upvalue of it): the table itself is what is walked.
local function field_methods()
  local index = getmetatable(model_mod.Q.title).__index
  for i = 1, 255 do
    local n, v = debug.getupvalue(index, i)
    if not n then break end
    if n == "Field" then return v end
  end
  error("mongostore.query's Field methods not found")
end

-- The record store's method table: records.open's upvalue Store (the
-- metatable of the stores it opens), so no server is needed to walk it.
local function record_store_methods()
  for i = 1, 255 do
    local n, v = debug.getupvalue(records_mod.open, i)
    if not n then break end
    if n == "Store" and type(v) == "table" then return v end
  end
  error("cannot find the record store's method table (records.open's upvalue Store)")
end

local REGISTRY = debug.getregistry()
local function userdata_methods(class)
  local mt = REGISTRY[class]
  if type(mt) == "table" and type(mt.__index) == "table" then return mt.__index end
  return nil
end

-- What each class's methods are looked up in.
local function method_table(class)
  if class == "mongostore.Store" then return mongostore.Store end
  if class == "mongostore.Engine" then return engine_methods() end
  if class == "mongostore.Chart" then return a_chart() end
  if class == "mongostore.Access" then return getmetatable(require("mongostore.ngx_access").new{}).__index end
  -- the models' method tables (lua/mongostore/model.lua), and Q's fields' (mongostore.query)
  local m = class:match("^mongostore%.(%u%w*)$")
  if m and model_mod._classes[m] then return model_mod._classes[m] end
  if class == "mongostore.Field" then return field_methods() end
  if class == "mongostore.RecordStore" then return record_store_methods() end
  if class == "mongostore.RecordQuery" then return records_query.Query end
  if class == "mongostore.Searcher" then return records_search.Searcher end
  if class == "mongostore.SearchPath" then return records_search.PathMethods end
  if class == "mongostore.SearchLength" then return records_search.Length end
  if class == "mongostore.SearchResults" then return records_search.Rows end
  local t = userdata_methods(class)
  if t then return t end
  error("no method table known for " .. class)
end

-- Every class with methods a user calls: the ones "every public method is
-- documented" walks.
local METHOD_CLASSES = {
  "mongostore.Store", "mongostore.Engine", "mongostore.Database", "mongostore.Collection", "mongostore.Cursor",
  "mongostore.Session", "mongostore.ObjectId", "mongostore.Date", "mongostore.Binary", "mongostore.Decimal128",
  "mongostore.Int32", "mongostore.Timestamp", "mongostore.Regex", "mongostore.MinKey", "mongostore.MaxKey",
  "mongostore.Code", "mongostore.CodeWScope", "mongostore.Symbol", "mongostore.Undefined", "mongostore.DBPointer",
  "mongostore.Model", "mongostore.Document", "mongostore.Query", "mongostore.Registry", "mongostore.ModelSession",
  "mongostore.Field", "mongostore.RecordStore", "mongostore.RecordQuery",
  "mongostore.Searcher", "mongostore.SearchPath", "mongostore.SearchLength", "mongostore.SearchResults",
}

-- A class's fields with its parents' (`parent =`), by name.
local function all_fields(class)
  local out, t = {}, model.types[class]
  while t do
    for _, f in ipairs(t.fields or {}) do
      if out[f.name] == nil then out[f.name] = f end
    end
    t = t.parent and model.types[t.parent]
  end
  return out
end

local function walk(t, dotted)
  for part in dotted:gmatch("[^.]+") do
    if type(t) ~= "table" then return nil end
    t = t[part]
  end
  return t
end

local function sorted_keys(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = k end
  sort(out, function(a, b) return tostring(a) < tostring(b) end)
  return out
end

local function lines_of(s)
  local out = {}
  for line in (s .. "\n"):gmatch("(.-)\n") do out[#out + 1] = line end
  return out
end

------------------------------------------------------------------------

TestGenerated = {}

function TestGenerated:test_files_are_what_the_generator_makes_now()
  local stale, strays = docgen.stale(root)
  local problems = {}
  for _, p in ipairs(stale) do problems[#problems + 1] = p .. " is out of date" end
  for _, p in ipairs(strays) do problems[#problems + 1] = p .. " is not generated from docs/api.lua" end
  lu.assertEquals(problems, {}, "run `lua5.4 tools/docgen.lua` (make docs): " .. concat(problems, "; "))
end

-- A stale file is named, with the first line that differs.
function TestGenerated:test_a_stale_page_shows_where_it_differs()
  local files = docgen.render(api)
  for _, f in ipairs(files) do
    local h = io.open(root .. "/" .. f.path, "rb")
    local have = h and h:read("a") or ""
    if h then h:close() end
    if have ~= f.text then
      local a, b = lines_of(have), lines_of(f.text)
      for i = 1, math.max(#a, #b) do
        if a[i] ~= b[i] then
          lu.fail(format("%s line %d: the file has %q, docs/api.lua gives %q", f.path, i, tostring(a[i]),
                         tostring(b[i])))
        end
      end
    end
  end
end

function TestGenerated:test_the_definitions_are_lua_and_declare_what_the_pages_describe()
  local files = docgen.render(api)
  local meta = 0
  for _, f in ipairs(files) do
    if f.path:match("^types/") then
      meta = meta + 1
      local fn, err = load(f.text, "=" .. f.path)
      lu.assertNotNil(fn, err)
      lu.assertStrContains(f.text, "---@meta ")
    end
  end
  lu.assertTrue(meta >= 4, "a definition file per module")
  local all = {}
  for _, f in ipairs(files) do all[#all + 1] = f.text end
  all = concat(all, "\n")
  for _, e in ipairs(model.entries) do
    if e.kind == "class" then lu.assertStrContains(all, "---@class " .. e.name, false)
    elseif e.kind == "alias" then lu.assertStrContains(all, "---@alias " .. e.name, false) end
  end
end

-- Each call's definition carries its parameters and, position by position,
-- what it returns when it succeeds.
function TestGenerated:test_each_definition_has_the_documented_signature()
  local files = docgen.render(api)
  local text = {}
  for _, f in ipairs(files) do
    if f.path:match("^types/") then text[#text + 1] = f.text end
  end
  local lines = lines_of(concat(text, "\n"))
  local at = {}
  for i, line in ipairs(lines) do
    local target = line:match("^function ([%w_.:]+)%(")
    if target then at[target] = i end
  end
  for _, e in ipairs(model.entries) do
    if e.kind == "fn" or e.kind == "method" then
      local target = e.kind == "method" and e.class:match("([%w_]+)$") .. ":" .. e.name
        or model.module_var[e.module] .. "." .. e.name
      local i = at[target]
      lu.assertNotNil(i, "no definition of " .. target)
      local params, returns = {}, {}
      local j = i - 1
      while j > 0 and lines[j]:match("^%-%-%-") do
        local p = lines[j]:match("^%-%-%-@param ([%w_]+)") or lines[j]:match("^%-%-%-@param (%.%.%.)")
        if p then table.insert(params, 1, p) end
        local r = lines[j]:match("^%-%-%-@return (.*)$")
        if r then table.insert(returns, 1, r) end
        j = j - 1
      end
      local want = {}
      for k, p in ipairs(e.params) do want[k] = p.name end
      lu.assertEquals(params, want, target .. ": params")
      for k, r in ipairs(e.returns) do
        lu.assertNotNil(returns[k], target .. ": no @return for " .. r.name)
        lu.assertStrContains(returns[k], r.type, false, target .. ": @return " .. k)
      end
      if #e.fails > 0 then
        lu.assertTrue(#returns >= 3, target .. ": fails, so it returns nil, message, code")
        lu.assertStrContains(returns[3], format("%q", e.fails[1]))
      end
    end
  end
end

-- An example is Lua a reader can paste: it must at least compile.
function TestGenerated:test_every_example_compiles()
  local bad = {}
  for _, e in ipairs(model.entries) do
    if e.example then
      local f, err = load(e.example, "=" .. e.display)
      if not f then bad[#bad + 1] = tostring(err) end
    end
  end
  lu.assertEquals(bad, {})
end

function TestGenerated:test_the_same_source_gives_the_same_bytes()
  local a, b = docgen.render(docgen.load_api(root)), docgen.render(docgen.load_api(root))
  lu.assertEquals(#a, #b)
  for i = 1, #a do
    lu.assertEquals(a[i].path, b[i].path)
    lu.assertTrue(a[i].text == b[i].text, a[i].path .. " differs between two runs")
  end
end

------------------------------------------------------------------------

TestDocumentedExists = {}

-- Lua functions declare their parameters: the documented ones must match
-- in number (C functions and varargs cannot be asked).
local function check_arity(f, e, extra)
  local info = debug.getinfo(f, "Su")
  -- the document API's wrappers (lua/mongostore/database.lua) take a
  -- trailing opts whether or not the method has options: their argument
  -- lists are held against the page by the wrapper test below
  for i = 1, 255 do
    local n = debug.getupvalue(f, i)
    if not n then break end
    if n == "known" then return end
  end
  if info.what ~= "Lua" or info.isvararg then return end
  lu.assertEquals(info.nparams, #e.params + extra,
                  format("%s: documented with %d parameters, defined with %d", e.display, #e.params,
                         info.nparams - extra))
end

function TestDocumentedExists:test_every_documented_function_and_field_exists()
  for _, e in ipairs(model.entries) do
    if e.kind == "fn" or e.kind == "field" then
      local mod = require(e.module)
      local v = walk(mod, e.name)
      lu.assertNotNil(v, format("%s is documented but %s has no %s", e.display, e.module, e.name))
      if e.kind == "fn" then
        lu.assertEquals(type(v), "function", e.display .. " is documented as a function")
        check_arity(v, e, 0)
      end
    end
  end
end

function TestDocumentedExists:test_every_documented_method_exists()
  for _, e in ipairs(model.entries) do
    if e.kind == "method" then
      local f = method_table(e.class)[e.name]
      lu.assertEquals(type(f), "function", format("%s is documented but %s has no method %s", e.display,
                                                   e.class, e.name))
      check_arity(f, e, 1)
    end
  end
end

function TestDocumentedExists:test_exposed_classes_and_internal_names_exist()
  for _, e in ipairs(model.entries) do
    if e.kind == "class" and e.exposed_as then
      lu.assertNotNil(walk({ mongostore = mongostore }, e.exposed_as), e.exposed_as .. " is documented")
    end
  end
  for _, name in ipairs(sorted_keys(api.internal)) do
    local class, method = name:match("^(mongostore%.%u%w*)%.([%w_]+)$")
    local v
    if class then
      v = method_table(class)[method]
    else
      local mod, fn = name:match("^(.*)%.([%w_]+)$")
      v = require(mod)[fn]
    end
    lu.assertNotNil(v, name .. " is listed in api.internal but does not exist: remove it from the list")
  end
end

function TestDocumentedExists:test_the_error_codes_are_mongostore_codes()
  local documented = {}
  for i, c in ipairs(model.codes) do documented[i] = c.code end
  lu.assertEquals(documented, mongostore.codes)
end

function TestDocumentedExists:test_a_chart_has_its_documented_fields()
  local c = a_chart()
  for _, f in ipairs(model.types["mongostore.Chart"].fields) do
    lu.assertNotNil(c[f.name], "mongostore.Chart." .. f.name .. " is documented")
  end
end

-- An option table's documented keys are the ones the call takes: each is
-- passed on its own with a value of no use, and must not be refused as
-- unknown, while a made-up key is (so the probe can tell).
local PROBE = setmetatable({}, { __name = "docs_probe" })
local fake_engine = setmetatable({}, {})
local fake_db = { info = function() return { transactions = false } end }

-- Calls f(arg) the way msngx.run's thread side does (ngx_thread.run, with a
-- module of this spec's), raising what f raised.
local probe_call
package.preload["docs_spec_probe"] = function()
  return { call = function() return probe_call() end }
end
local function in_ngx_run(f, arg)
  local raised
  probe_call = function()
    local ok, err = pcall(f, arg)
    if not ok then raised = err end
    return true
  end
  ngx_thread.run({ uri = "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=100", db = "docs", wait = 0 },
                 "docs_spec_probe", "call", ngx_thread.CODECS.bson.encode({ n = 0, v = mongostore.array() }))
  if raised ~= nil then error(raised, 0) end
  return true
end

local OPTION_PROBES = {
  ["mongostore.ConnectOptions"] = { "unknown option", function(o) return mongostore.connect("not a uri", o) end },
  ["mongostore.CommitOptions"] = { "unknown option", function(o)
    return mongostore.Store.commit(nil, mongostore.execution{ definition_id = "docs" }, o)
  end },
  ["mongostore.ListQuery"] = { "unknown option", function(o) return mongostore.Store.list_executions(nil, o) end },
  ["mongostore.EngineOptions"] = { "unknown option", function(o) return engine_mod.new(o) end },
  ["mongostore.StartOptions"] = { "unknown option", function(o)
    return engine_methods().start(fake_engine, "docs", o)
  end },
  ["mongostore.RunOptions"] = { "unknown option", function(o) return engine_methods().run(fake_engine, o) end },
  ["mongostore.ExecutionFields"] = { "no field", function(o)
    if o.definition_id == nil then o.definition_id = "docs" end
    return mongostore.execution(o)
  end },
  ["mongostore.DatabaseOptions"] = { "unknown option", function(o) return mongostore.database("not a uri", o) end },
  -- check_opts comes first; then a handle with no transactions ends the call
  ["mongostore.TransactionOptions"] = { "unknown option", function(o)
    return transaction_mod.run(fake_db, function() end, o)
  end },
  -- only inside an msngx.run call: run in this VM as the thread side does
  ["mongostore.NgxDatabaseOptions"] = { "unknown option", function(o) return in_ngx_run(ngx_thread.database, o) end },
  ["mongostore.ChartDef"] = { "unknown key", function(o)
    if o.id == nil then o.id = "docs" end
    return chart.define(o)
  end },
  ["mongostore.StateDef"] = { "unknown key", function(o)
    o[1] = "A"
    return chart.define{ id = "docs", initial = "A", states = { o } }
  end },
  ["mongostore.TransitionDef"] = { "unknown key", function(o)
    if o.from == nil then o.from = "A" end
    return chart.define{ id = "docs", initial = "A", states = { { "A" }, { "B" } }, transitions = { o } }
  end },
  -- the option checks come before anything is asked of the database
  ["mongostore.RecordsOpenOptions"] = { "unknown option", function(o) return records_mod.open(fake_db, o) end },
  ["mongostore.RecordSpec"] = { "unknown key", function(o)
    if o.name == nil then o.name = "docs" end
    return records_mod.define(o)
  end },
  ["mongostore.RecordFieldSpec"] = { "unknown key", function(o)
    o[1] = "string"
    return records_mod.define{ name = "docs", fields = { f = o } }
  end },
  ["mongostore.RecordChildSpec"] = { "unknown key", function(o)
    return records_mod.define{ name = "docs", children = { c = o } }
  end },
  ["mongostore.FsckOptions"] = { "unknown option", function(o) return records_fsck.run({ db = fake_db }, o) end },
  -- rq:page checks its options before it looks at the query
  ["mongostore.RecordPageOptions"] = { "unknown option", function(o) return records_query.Query.page({}, o) end },
  ["mongostore.SearcherOptions"] = { "unknown option", function(o)
    return records_search.new({ colls = {}, ts = { enabled = true, resolution = 1000 } }, o)
  end },
}

local function refused_as_unknown(probe, opts)
  local ok, err = pcall(probe[2], opts)
  return not ok and tostring(err):find(probe[1], 1, true) ~= nil, err
end

function TestDocumentedExists:test_documented_options_are_taken_and_unknown_ones_refused()
  for _, class in ipairs(sorted_keys(OPTION_PROBES)) do
    local probe = OPTION_PROBES[class]
    lu.assertTrue(refused_as_unknown(probe, { docs_no_such_option = PROBE }),
                  class .. ": the probe does not see a made-up key refused")
    for _, name in ipairs(sorted_keys(all_fields(class))) do
      local f = all_fields(class)[name]
      if f.name:match("^[%a_][%w_]*$") then
        local unknown, err = refused_as_unknown(probe, { [f.name] = PROBE })
        lu.assertFalse(unknown, format("%s.%s is documented but refused: %s", class, f.name, tostring(err)))
      end
    end
  end
end

-- The key tables the calls check their options against are locals of the
-- modules; found as upvalues, here or further down the functions they call.
local function find_upvalue(f, name, seen)
  seen = seen or {}
  if seen[f] then return nil end
  seen[f] = true
  local inner = {}
  for i = 1, 255 do
    local n, v = debug.getupvalue(f, i)
    if not n then break end
    if n == name then return v end
    if type(v) == "function" then inner[#inner + 1] = v end
  end
  for _, g in ipairs(inner) do
    local v = find_upvalue(g, name, seen)
    if v ~= nil then return v end
  end
  return nil
end

-- (The calls under mongostore.contract, the store's and the engine's, are
-- held against the docs both ways by spec/01-unit/contract_spec.lua.)
local OPTION_TABLES = {
  ["mongostore.DatabaseOptions"] = { function() return mongostore.database end, "DATABASE_OPTS" },
  ["mongostore.TransactionOptions"] = { function() return transaction_mod.run end, "OPTS" },
  ["mongostore.StateDef"] = { function() return chart.define end, "STATE_KEYS" },
  ["mongostore.TransitionDef"] = { function() return chart.define end, "TRANSITION_KEYS" },
  ["mongostore.RecordSpec"] = { function() return records_mod.define end, "DEFINE_KEYS" },
  ["mongostore.RecordFieldSpec"] = { function() return records_canon.compile_field end, "FIELD_KEYS" },
  ["mongostore.FsckOptions"] = { function() return records_fsck.run end, "OPTS" },
}

------------------------------------------------------------------------

TestEverythingDocumented = {}

function TestEverythingDocumented:test_every_option_a_call_takes_is_documented()
  local missing = {}
  for _, class in ipairs(sorted_keys(OPTION_TABLES)) do
    local how = OPTION_TABLES[class]
    local keys = find_upvalue(how[1](), how[2])
    lu.assertEquals(type(keys), "table", format("%s: no table %s behind the call it documents (renamed? "
      .. "update OPTION_TABLES in this spec)", class, how[2]))
    local documented = all_fields(class)
    for _, k in ipairs(sorted_keys(keys)) do
      if type(k) == "string" and not documented[k] then missing[#missing + 1] = class .. "." .. k end
    end
  end
  lu.assertEquals(missing, {}, "options the calls take but docs/api.lua does not describe")
end

-- s:start_transaction checks its option keys in C (a Session needs a
-- server): its key list is read from csrc/session.c instead.
function TestEverythingDocumented:test_the_start_transaction_options_are_the_documented_ones()
  local h = assert(io.open(root .. "/csrc/session.c", "rb"))
  local src = h:read("a")
  h:close()
  local list = src:match("txn_keys%[%]%s*=%s*(%b{})")
  lu.assertNotNil(list, "csrc/session.c has no txn_keys[] = { ... } (renamed? update this spec)")
  local keys = {}
  for k in list:gmatch('"([%w_]+)"') do keys[k] = true end
  local documented = all_fields("mongostore.StartTransactionOptions")
  local problems = {}
  for _, k in ipairs(sorted_keys(keys)) do
    if not documented[k] then problems[#problems + 1] = k .. " is taken but not documented" end
  end
  for _, k in ipairs(sorted_keys(documented)) do
    if not keys[k] then problems[#problems + 1] = k .. " is documented but not taken" end
  end
  lu.assertEquals(problems, {}, "mongostore.StartTransactionOptions against csrc/session.c's txn_keys")
end

local function documented_sets()
  local fns, methods = {}, {}
  for _, e in ipairs(model.entries) do
    if e.kind == "fn" or e.kind == "field" then fns[e.module .. "." .. e.name] = true
    elseif e.kind == "method" then methods[e.class .. "." .. e.name] = true
    elseif e.kind == "class" and e.exposed_as then fns[e.exposed_as] = true end
  end
  return fns, methods
end

local function undocumented_in(mod_name, mod, fns, missing)
  for _, k in ipairs(sorted_keys(mod)) do
    if type(k) == "string" and k:sub(1, 1) ~= "_" then
      local full = mod_name .. "." .. k
      -- a table some documented functions live in (mongostore.json) is
      -- looked into as well
      local nested = false
      for name in pairs(fns) do
        if name:sub(1, #full + 1) == full .. "." then nested = true end
      end
      if nested and type(mod[k]) == "table" then
        for _, kk in ipairs(sorted_keys(mod[k])) do
          local sub = full .. "." .. tostring(kk)
          if not fns[sub] and not api.internal[sub] then missing[#missing + 1] = sub end
        end
      end
      if not fns[full] and not api.internal[full] then missing[#missing + 1] = full end
    end
  end
end

function TestEverythingDocumented:test_every_public_module_name_is_documented()
  local fns = documented_sets()
  local missing = {}
  undocumented_in("mongostore", mongostore, fns, missing)
  undocumented_in("mongostore.chart", chart, fns, missing)
  undocumented_in("mongostore.engine", engine_mod, fns, missing)
  undocumented_in("mongostore.ngx", msngx, fns, missing)
  undocumented_in("mongostore.values", require "mongostore.values", fns, missing)
  undocumented_in("mongostore.database", database_mod, fns, missing)
  undocumented_in("mongostore.transaction", transaction_mod, fns, missing)
  undocumented_in("mongostore.ngx_thread", ngx_thread, fns, missing)
  undocumented_in("mongostore.model", model_mod, fns, missing)
  undocumented_in("mongostore.records", records_mod, fns, missing)
  undocumented_in("mongostore.stm", require "mongostore.stm", fns, missing)
  lu.assertEquals(missing, {}, "describe them in docs/api.lua (or list them in api.internal, saying why): "
    .. concat(missing, ", "))
end

function TestEverythingDocumented:test_every_public_method_is_documented()
  local _, methods = documented_sets()
  local missing = {}
  for _, class in ipairs(METHOD_CLASSES) do
    local t = method_table(class)
    for _, k in ipairs(sorted_keys(t)) do
      local full = class .. "." .. k
      if type(k) == "string" and k:sub(1, 1) ~= "_" and type(t[k]) == "function"
        and not methods[full] and not api.internal[full] then
        missing[#missing + 1] = full
      end
    end
  end
  lu.assertEquals(missing, {}, "describe them in docs/api.lua: " .. concat(missing, ", "))
end

-- The ngx page lists exactly the calls mongostore.ngx forwards.
function TestEverythingDocumented:test_the_ngx_calls_are_the_documented_ones()
  local documented, real = {}, {}
  for _, e in ipairs(model.entries) do
    if e.kind == "fn" and e.module == "mongostore.ngx" then documented[#documented + 1] = e.name end
  end
  for _, k in ipairs(sorted_keys(msngx)) do
    if type(k) == "string" and k:sub(1, 1) ~= "_" and type(msngx[k]) == "function" then real[#real + 1] = k end
  end
  sort(documented)
  lu.assertEquals(documented, real)
end

-- configure refuses no key it does not know, so the settings it records
-- are held against the page instead: each one is an NgxConfig field.
function TestEverythingDocumented:test_every_setting_configure_records_is_documented()
  local documented = all_fields("mongostore.NgxConfig")
  msngx.configure{ uri = "mongodb://127.0.0.1:1", run_modules = { "docs." } }
  local missing = {}
  for _, k in ipairs(sorted_keys(msngx.config())) do
    if not documented[k] then missing[#missing + 1] = k end
  end
  lu.assertEquals(missing, {}, "settings msngx.configure records that mongostore.NgxConfig does not describe")
end

function TestEverythingDocumented:test_every_field_of_an_execution_is_documented()
  local known = {}
  for _, class in ipairs { "mongostore.ExecutionFields", "mongostore.Execution" } do
    for _, f in ipairs(model.types[class].fields) do known[f.name] = true end
  end
  local exe = mongostore.execution{ definition_id = "docs", outcome = "x", error = "e", active_path = "A",
                                    parent_id = "p", child_id = "c", definition_fqn = "f", created_at = 1,
                                    updated_at = 1, finished_at = 1, expires_at = 1 }
  local missing = {}
  for k in pairs(exe) do
    if not known[k] then missing[#missing + 1] = k end
  end
  sort(missing)
  lu.assertEquals(missing, {}, "Execution fields not in docs/api.lua")
end

-- mongostore.store's CALLS is the one list of the Store's public methods:
-- each is documented, and each one mongostore.ngx forwards has its page entry.
function TestEverythingDocumented:test_the_store_calls_list_matches_the_pages()
  local calls = require("mongostore.store").CALLS
  local _, methods = documented_sets()
  local fns = documented_sets()
  local problems = {}
  for _, name in ipairs(sorted_keys(calls)) do
    if not methods["mongostore.Store." .. name] then problems[#problems + 1] = "store:" .. name .. " undocumented" end
    if calls[name] ~= "local" and not fns["mongostore.ngx." .. name] then
      problems[#problems + 1] = "msngx." .. name .. " undocumented"
    end
  end
  for name in pairs(methods) do
    local m = name:match("^mongostore%.Store%.(.*)$")
    if m and not calls[m] then problems[#problems + 1] = "store:" .. m .. " is documented but not in CALLS" end
  end
  sort(problems)
  lu.assertEquals(problems, {})
end

-- Every metatable the core registers under a class name (the document
-- API's handles, the BSON boxes, the Store) is a documented class, so a new
-- userdata type cannot arrive undocumented; and each is walked for methods.
function TestEverythingDocumented:test_every_userdata_class_is_documented()
  local missing, unwalked = {}, {}
  local walked = {}
  for _, class in ipairs(METHOD_CLASSES) do walked[class] = true end
  for _, k in ipairs(sorted_keys(REGISTRY)) do
    if type(k) == "string" and k:match("^mongostore%.%u") and type(REGISTRY[k]) == "table" then
      if not model.types[k] then missing[#missing + 1] = k end
      if not walked[k] then unwalked[#unwalked + 1] = k end
    end
  end
  lu.assertEquals(missing, {}, "userdata classes the core registers that docs/api.lua does not describe")
  lu.assertEquals(unwalked, {}, "add them to METHOD_CLASSES in this spec")
end

-- The document API's methods check their arguments in Lua
-- (lua/mongostore/database.lua wraps each C method): the wrapper's argument
-- list and option keys are the ones documented, name for name, both ways.
local function wrapper_of(f)
  local args, known, has_known, wrapped
  for i = 1, 255 do
    local n, v = debug.getupvalue(f, i)
    if not n then break end
    if n == "args" and type(v) == "table" then args = v end
    -- known is nil for a method that takes no options
    if n == "known" then known, has_known, wrapped = v, v ~= nil, true end
  end
  -- a wrapper of a method without arguments does not keep its (empty) list
  if wrapped and not args then args = {} end
  return args, known, has_known
end

function TestDocumentedExists:test_the_document_methods_take_the_documented_arguments_and_options()
  local problems, checked = {}, 0
  for _, class in ipairs { "mongostore.Database", "mongostore.Collection" } do
    for _, e in ipairs(model.methods[class] or {}) do
      local f = method_table(class)[e.name]
      local args, known, has_known = wrapper_of(f)
      if args then
        checked = checked + 1
        local want, got = {}, {}
        for i, a in ipairs(args) do got[i] = a[1] end
        if has_known then got[#got + 1] = "opts" end
        for i, p in ipairs(e.params) do want[i] = p.name end
        if table.concat(want, ",") ~= table.concat(got, ",") then
          problems[#problems + 1] = format("%s: documented (%s), takes (%s)", e.display, table.concat(want, ", "),
                                           table.concat(got, ", "))
        end
        local last = e.params[#e.params]
        if has_known and known then
          local class_name = last and last.name == "opts" and last.type:match("^(mongostore%.[%w_]+)$")
          if not class_name or not model.types[class_name] then
            problems[#problems + 1] = e.display .. ": opts is documented without an options class"
          else
            local fields = all_fields(class_name)
            for _, k in ipairs(sorted_keys(known)) do
              if not fields[k] then problems[#problems + 1] = format("%s: option %s is not in %s", e.display, k,
                                                                      class_name) end
            end
            for _, k in ipairs(sorted_keys(fields)) do
              if known[k] == nil then
                problems[#problems + 1] = format("%s: %s.%s is documented but not taken", e.display, class_name, k)
              end
            end
          end
        end
      end
    end
  end
  lu.assertTrue(checked >= 20, "the wrappers of lua/mongostore/database.lua were not found (" .. checked .. ")")
  lu.assertEquals(problems, {})
end

-- The value constructors named on the values page are the face's, and
-- each makes a box of its documented class.
function TestDocumentedExists:test_the_constructors_make_their_documented_boxes()
  local made = {
    objectid = mongostore.objectid(), date = mongostore.date(0), binary = mongostore.binary("x", 4),
    decimal = mongostore.decimal("1.10"), int32 = mongostore.int32(7), timestamp = mongostore.timestamp(1, 2),
    regex = mongostore.regex("^a", "i"), code = mongostore.code("x()"), symbol = mongostore.symbol("s"),
    dbpointer = mongostore.dbpointer("db.c", mongostore.objectid()),
  }
  for _, e in ipairs(model.entries) do
    if e.kind == "fn" and e.module == "mongostore" and made[e.name] then
      local want = e.returns[1].type:match("^(mongostore%.[%w_]+)")
      lu.assertEquals(getmetatable(made[e.name]).__name, want, e.display .. " returns " .. want)
    end
  end
  for _, name in ipairs { "minkey", "maxkey", "undefined" } do
    local e = model.by_anchor["mongostore-" .. name]
    lu.assertNotNil(e, "mongostore." .. name .. " is documented")
    lu.assertEquals(getmetatable(mongostore[name]).__name, e.type)
  end
end

-- rs:info() builds its table from the store's own fields: run on a stand-in
-- with every one of them set, each key it gives is a documented field.
function TestEverythingDocumented:test_every_field_of_a_record_store_info_is_documented()
  local stand_in = {
    mode = "degraded", prefix = "records.", degraded_reason = "docs", type_list = { { name = "book" } },
    ts = { enabled = true, resolution = 1000 }, lease = { token = "t" }, max_bson_size = 16,
    wire = { commands = 0, wc = { w = 1 }, rc = { level = "local" } },
  }
  local info = record_store_methods().info(stand_in)
  local documented = all_fields("mongostore.RecordStoreInfo")
  local missing = {}
  for _, k in ipairs(sorted_keys(info)) do
    if not documented[k] then missing[#missing + 1] = k end
  end
  lu.assertEquals(missing, {}, "rs:info() fields that mongostore.RecordStoreInfo does not describe")
  for _, k in ipairs(sorted_keys(documented)) do
    lu.assertNotNil(info[k], "mongostore.RecordStoreInfo." .. k .. " is documented but rs:info() has no " .. k)
  end
end
