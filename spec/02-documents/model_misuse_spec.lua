-- spec/02-documents/model_misuse_spec.lua - a method called with a dot for a
-- colon (Article.insert{...}, doc.save()) raises naming the method and the
-- colon, at the caller, before anything is sent (issue 21, item 8d: it failed
-- inside the library with "attempt to call a nil value (method 'new')"). The
-- methods are enumerated from the method tables, so a new one cannot be missed.
local lu = require "luaunit"
local model = require "mongostore.model"

local articles = require "fixtures.articles"
local ok = articles.ok

TestModelMisuse = {}

function TestModelMisuse:setUp()
  articles.open(self, "mmisuse")
end

function TestModelMisuse:tearDown()
  if self.db then self.db:close() end
end

local function sorted_names(t)
  local names = {}
  for k, v in pairs(t) do
    if type(v) == "function" and type(k) == "string" and k:sub(1, 2) ~= "__" then names[#names + 1] = k end
  end
  table.sort(names)
  return names
end

-- Calls fn(self_value) from a Lua frame of this file, so the error's position
-- shows whether it was raised at the caller.
local function call_with(fn, first)
  local function here()
    local r = fn(first)   -- not a tail call: this frame is the caller
    return r
  end
  return pcall(here)
end

local function check_misuse(name, how, okc, msg, colon)
  lu.assertFalse(okc, name .. " with " .. how .. " did not raise")
  msg = tostring(msg)
  lu.assertStrContains(msg, name .. ":", false, name .. " with " .. how .. ": " .. msg)
  lu.assertStrContains(msg, colon .. name .. "(", false, name .. " with " .. how .. ": " .. msg)
  lu.assertStrContains(msg, "not with a dot", false, msg)
  lu.assertNotStrContains(msg, "attempt to", false, msg)
  lu.assertStrContains(msg, "model_misuse_spec.lua", false, "raised at the caller: " .. msg)
end

function TestModelMisuse:test_every_class_method_called_with_a_dot()
  local A = self.Article
  local doc = ok(A:insert { title = "there" })
  local names = sorted_names(model._classes.Model)
  lu.assertTrue(#names >= 14, "the class methods: " .. table.concat(names, " "))
  local firsts = {
    { "a table of fields", { title = "x" } }, { "a list", { { title = "x" } } }, { "a string", "x" },
    { "a number", 1 }, { "nil", nil }, { "a document", doc }, { "a condition", model.Q.title:eq("x") },
  }
  for _, name in ipairs(names) do
    for _, f in ipairs(firsts) do
      local okc, msg = call_with(A[name], f[2])
      check_misuse(name, f[1], okc, msg, "Model:")
    end
  end
  lu.assertEquals(ok(A:count()), 1, "nothing written")
  -- the colon form still works, and A(fields) too
  lu.assertEquals(ok(A:insert { title = "y" }).title, "y")
  lu.assertTrue(A { title = "z" }.is_new)
end

function TestModelMisuse:test_every_document_method_called_with_a_dot()
  local A = self.Article
  local names = sorted_names(model._classes.Document)
  lu.assertTrue(#names >= 6, "the document methods: " .. table.concat(names, " "))
  for _, name in ipairs(names) do
    local doc = ok(A:insert { title = "d-" .. name })
    for _, f in ipairs { { "nil", nil }, { "a table", { hard = true } }, { "a string", "x" } } do
      local okc, msg = call_with(doc[name], f[2])
      check_misuse(name, f[1], okc, msg, "doc:")
    end
  end
  lu.assertEquals(ok(A:count()), #names, "nothing written, nothing deleted")
end
