-- spec/helpers/init.lua - what every spec shares: the server URI, a fresh database
-- per call, and helpers to run Lua code in separate OS processes.
local M = {}

-- Fails the spec with the error of a call that was expected to work; returns its value.
function M.ok(v, err, code)
  if v == nil then error(string.format("unexpected failure: %s (%s)", tostring(err), tostring(code)), 2) end
  return v
end

function M.uri()
  local uri = os.getenv("MONGOSTORE_TEST_URI")
  assert(uri and uri ~= "", "MONGOSTORE_TEST_URI is not set (run the specs through `make test`)")
  return uri
end

local counter = 0
-- A database name no other spec (or earlier run) uses.
function M.fresh_db(tag)
  local ms = require "mongostore"
  counter = counter + 1
  return string.format("mst_%s_%s_%d", tag or "t", ms.uuid():sub(1, 10), counter)
end

-- Connects to a fresh database; opts are passed through (db is filled in).
function M.connect(opts)
  local ms = require "mongostore"
  opts = opts or {}
  opts.db = opts.db or M.fresh_db()
  if opts.wait == nil then opts.wait = 10 end
  local store, err, code = ms.connect(M.uri(), opts)
  assert(store, "connect failed: " .. tostring(err) .. " (" .. tostring(code) .. ")")
  return store, opts.db
end

-- The interpreter and flags that run this spec, so child processes load the
-- same build (plain, sanitized or under valgrind).
function M.lua_command()
  return os.getenv("MONGOSTORE_LUA") or "lua5.4"
end

function M.root()
  local src = debug.getinfo(1, "S").source:sub(2)
  return (src:match("^(.*)/spec/helpers/init%.lua$")) or "."
end

-- The package.path a spec and the processes it starts use: spec/helpers and
-- spec/fixtures as `helpers.x` and `fixtures.x`, then the library from lua/.
function M.lua_path()
  local root = M.root()
  return root .. "/spec/?.lua;" .. root .. "/spec/?/init.lua;" .. root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;"
end

-- Starts `lua -e code` in the background; returns a handle whose :wait()
-- returns the process's stdout and its exit status.
function M.spawn(code, env)
  local pre = string.format("package.path=%q..package.path;", M.lua_path())
  local envs = ""
  for k, v in pairs(env or {}) do envs = envs .. k .. "=" .. M.shell_quote(v) .. " " end
  local cmd = string.format("%s%s -e %s 2>&1", envs, M.lua_command(), M.shell_quote(pre .. code))
  local f = assert(io.popen(cmd, "r"))
  return {
    wait = function()
      local out = f:read("a")
      local ok, how, status = f:close()
      return out, ok and 0 or status, how
    end,
  }
end

function M.shell_quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

-- The python of the pinned virtualenv, where harel 0.9.0 is installed:
-- MONGOSTORE_PYTHON, else what tools/pyenv prints (it creates the
-- virtualenv on first use). Raises when there is none.
local python_path
function M.python()
  if python_path then return python_path end
  local py = os.getenv("MONGOSTORE_PYTHON")
  if not py or py == "" then
    local f = assert(io.popen(M.shell_quote(M.root() .. "/tools/pyenv"), "r"))
    py = f:read("a"):gsub("%s+$", "")
    local ok, _, status = f:close()
    assert(ok and py ~= "", "tools/pyenv failed (exit " .. tostring(status) .. "); its notes are on stderr")
  end
  python_path = py
  return py
end

return M
