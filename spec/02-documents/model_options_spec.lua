-- spec/02-documents/model_options_spec.lua - every model call takes its own
-- options, the ones its reference (docs/api.lua) lists, and raises naming the
-- call and the key on any other (issue 22: Model:get(id, { ordered = true,
-- hard = true }) passed), before anything is sent; the calls are enumerated
-- from the reference, so a new one cannot be missed.
local lu = require "luaunit"
local model = require "mongostore.model"
local helper = require "helpers"

local articles = require "fixtures.articles"
local ok = articles.ok
local Q, ops = model.Q, model.ops

local root = helper.root()
local docgen = dofile(root .. "/tools/docgen.lua")
local api_model = docgen.model(docgen.load_api(root))

TestModelOptions = {}

function TestModelOptions:setUp()
  articles.open(self, "moptions")
  self.doc = ok(self.Article:insert { title = "there" })
end

function TestModelOptions:tearDown()
  if self.db then self.db:close() end
end

-- Every option a model call can take (mongostore.ModelOptions' fields).
local ALL = {}
for _, f in ipairs(api_model.types["mongostore.ModelOptions"].fields) do ALL[#ALL + 1] = f.name end
table.sort(ALL)

-- A harmless value of each option: a call given it (alone) must not refuse it.
local function value_of(name, self)
  if name == "session" then return self.session end
  if name == "validate" then return true end
  if name == "ordered" then return true end
  return false   -- unscoped, hard: the default
end

-- Each call that takes options: how to call it with opts (the update paths
-- take theirs through model.options, which takes the union of theirs). No
-- tail calls: the probe's frame is the caller a refusal must point at.
local CALLS = {
  ["Model:insert"] = function(t, o) local r = t.Article:insert({ title = "x" }, o); return r end,
  ["Model:get"] = function(t, o) local r = t.Article:get(t.doc.id, o); return r end,
  ["Model:delete"] = function(t, o)
    local r = t.Article:delete(ok(t.Article:insert { title = "d" }).id, o)
    return r
  end,
  ["Model:restore"] = function(t, o) local r = t.Article:restore(t.doc.id, o); return r end,
  ["Model:exists"] = function(t, o) local r = t.Article:exists(t.doc.id, o); return r end,
  ["Model:count"] = function(t, o) local r = t.Article:count(nil, o); return r end,
  ["Model:distinct"] = function(t, o) local r = t.Article:distinct("title", nil, o); return r end,
  ["Model:lean"] = function(t, o) local r = t.Article:lean(nil, o); return r end,
  ["Model:aggregate"] = function(t, o) local r = t.Article:aggregate({}, o); return r end,
  ["Model:insert_many"] = function(t, o) local r = t.Article:insert_many({ { title = "m" } }, o); return r end,
  ["Model:bulk_save"] = function(t, o) local r = t.Article:bulk_save({ t.doc }, o); return r end,
  ["Model:bulk_write"] = function(t, o)
    local r = t.Article:bulk_write({ model.update_one(Q.title:eq("there"), ops.inc { views = 1 }) }, o)
    return r
  end,
  ["Model:update"] = function(t, o)
    local r = t.Article:update(t.doc.id, ops.inc { views = 1 }, model.options(o))
    return r
  end,
  ["Model:upsert"] = function(t, o)
    local r = t.Article:upsert(Q.title:eq("up"), ops.inc { views = 1 }, model.options(o))
    return r
  end,
  ["doc:save"] = function(t, o)
    t.doc.views = t.doc.views + 1
    local r = t.doc:save(o)
    return r
  end,
  ["doc:insert"] = function(t, o) local r = t.Article:new { title = "n" }:insert(o); return r end,
  ["doc:delete"] = function(t, o) local r = ok(t.Article:insert { title = "dd" }):delete(o); return r end,
  ["doc:reload"] = function(t, o) local r = t.doc:reload(o); return r end,
  ["q:all"] = function(t, o) local r = t.Article:find():all(o); return r end,
  ["q:first"] = function(t, o) local r = t.Article:find():first(o); return r end,
  ["q:one"] = function(t, o) local r = t.Article:find(Q.title:eq("there")):one(o); return r end,
  ["q:lean"] = function(t, o) local r = t.Article:find():lean(o); return r end,
  ["q:count"] = function(t, o) local r = t.Article:find():count(o); return r end,
  ["q:distinct"] = function(t, o) local r = t.Article:find():distinct("title", o); return r end,
  ["q:each"] = function(t, o) for _ in t.Article:find():each(o) do end return true end,
  ["q:update"] = function(t, o)
    local r = t.Article:find():update(ops.inc { views = 1 }, model.options(o))
    return r
  end,
  ["q:delete"] = function(t, o) local r = t.Article:find(Q.title:eq("none")):delete(o); return r end,
}

-- The calls whose options come through model.options, and what it takes (the
-- union of theirs).
local VIA_OPTIONS = { ["Model:update"] = true, ["Model:upsert"] = true, ["q:update"] = true }
local OPTIONS_TAKE = { session = true, validate = true, unscoped = true }

-- The options the reference gives a call: its opts param's description (a
-- list of names), or, for the update paths, the names after `model.options`.
local function documented(e)
  for _, p in ipairs(e.params) do
    local list
    if p.name == "opts" and p.type == "mongostore.ModelOptions" then list = p.desc
    elseif p.name == "..." then list = p.desc:match("`model%.options` %(([^)]*)%)") end
    if list then
      local set = {}
      for name in list:gmatch("[%a_]+") do set[name] = true end
      return set
    end
  end
  return nil
end

local function reference_calls()
  local out = {}
  for _, class in ipairs { "mongostore.Model", "mongostore.Document", "mongostore.Query" } do
    for _, e in ipairs(api_model.methods[class] or {}) do
      local set = documented(e)
      if set then
        local prefix = ({ ["mongostore.Model"] = "Model", ["mongostore.Document"] = "doc",
                          ["mongostore.Query"] = "q" })[class]
        out[prefix .. ":" .. e.name] = set
      end
    end
  end
  return out
end

function TestModelOptions:test_every_documented_call_is_probed()
  local calls = reference_calls()
  local missing, stray = {}, {}
  for name in pairs(calls) do if not CALLS[name] then missing[#missing + 1] = name end end
  for name in pairs(CALLS) do if not calls[name] then stray[#stray + 1] = name end end
  table.sort(missing); table.sort(stray)
  lu.assertEquals(missing, {}, "calls the reference gives options to, not probed here")
  lu.assertEquals(stray, {}, "calls probed here whose reference lists no options")
  lu.assertTrue(#ALL >= 5, table.concat(ALL, " "))
end

function TestModelOptions:test_each_call_takes_its_own_options_and_refuses_the_others()
  -- a session where the server has them (mongo-java-server has none: there
  -- the session's acceptance is left to the SecantusDB pass)
  local session = self.db:session()
  self.session = session
  local calls = reference_calls()
  local names = {}
  for name in pairs(calls) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    local own = calls[name]
    for _, opt in ipairs(ALL) do
      if not own[opt] then
        local before = ok(self.db:stats()).total
        local okc, err = pcall(CALLS[name], self, { [opt] = value_of(opt, self) })
        lu.assertFalse(okc, name .. " took " .. opt)
        -- through model.options, a key none of the update paths takes is refused there first
        local by = (VIA_OPTIONS[name] and not OPTIONS_TAKE[opt]) and "model.options" or name
        lu.assertStrContains(tostring(err), by .. ": unknown option " .. opt, false)
        lu.assertStrContains(tostring(err), "model_options_spec.lua", false, "raised at the caller's side")
        -- the probes write only what a helper inserted first: nothing of the refused call was sent
        lu.assertTrue(ok(self.db:stats()).total - before <= 2, name .. " " .. opt .. ": sent")
      elseif opt ~= "session" or session then
        local okc, err = pcall(CALLS[name], self, { [opt] = value_of(opt, self) })
        lu.assertNotStrContains(tostring(okc and "" or err), "unknown option", false, name .. " refused " .. opt)
      end
    end
    -- a made-up key is named the same way
    local okc, err = pcall(CALLS[name], self, { orderd = true })
    lu.assertFalse(okc, name .. " took orderd")
    lu.assertStrContains(tostring(err), (VIA_OPTIONS[name] and "model.options" or name) .. ": unknown option orderd",
                         false)
  end
  if session then session:close() end
end

-- The one in the issue, and model.options' own set.
function TestModelOptions:test_get_with_the_union_raises()
  local A = self.Article
  lu.assertErrorMsgContains("Model:get: unknown option", A.get, A, self.doc.id, { ordered = true, hard = true })
  lu.assertErrorMsgContains("model.options: unknown option hard", model.options, { hard = true })
  lu.assertErrorMsgContains("model.options: unknown option ordered", model.options, { ordered = true })
  for opt in pairs(OPTIONS_TAKE) do lu.assertNotNil(model.options { [opt] = false }, opt) end
  lu.assertErrorMsgContains("q:update: unknown option unscoped", function()
    return A:find():update(ops.inc { views = 1 }, model.options { unscoped = true })
  end)
  lu.assertErrorMsgContains("Model:count: opts must be a table or nil, got string", A.count, A, nil, "x")
  lu.assertEquals(ok(A:get(self.doc.id)).views, 0, "nothing written")
end

-- A wrong argument raises naming the call the way the option checks do.
function TestModelOptions:test_argument_raises_name_the_call()
  local A = self.Article
  lu.assertErrorMsgContains("Model:insert_many: list must be a table, got string", A.insert_many, A, "x")
  lu.assertErrorMsgContains("Model:bulk_save: docs must be a table, got number", A.bulk_save, A, 5)
  lu.assertErrorMsgContains("Model:bulk_write: item 1 is not a model op", A.bulk_write, A, { {} })
  lu.assertErrorMsgContains("Model:hydrate: raw must be a table", A.hydrate, A, "x")
  lu.assertErrorMsgContains("Model:new: fields must be a table or nil", A.new, A, 5)
  lu.assertErrorMsgContains("q:limit: n must be a number", function() return A:find():limit("ten") end)
  lu.assertErrorMsgContains("q:distinct: field must be a string", function() return A:find():distinct(5) end)
  lu.assertErrorMsgContains("doc:insert: this Article is stored already", self.doc.insert, self.doc)
  lu.assertErrorMsgContains("model.registry: models must be a list", model.registry, self.db, 5)
  lu.assertErrorMsgContains("model.define: collection must be a non-empty string", model.define, {})
  lu.assertErrorMsgContains("registry:transaction: fn must be a function", self.registry.transaction,
                            self.registry, 5)
  lu.assertEquals(ok(A:count()), 1, "nothing written")
end
