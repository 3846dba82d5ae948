-- examples/openresty/render.lua - renders nginx.conf (the template beside
-- this file) into a prefix directory nginx can run from.
--
--   lua5.4 examples/openresty/render.lua <prefix> [port] [workers]
--
-- writes <prefix>/conf/nginx.conf, creates <prefix>/logs and <prefix>/temp,
-- and prints the command that runs nginx there in the foreground. As a
-- module (dofile), it returns { render = fn(opts) -> conf path, command =
-- fn(prefix, conf) -> argv string }; spec/04-ngx/ renders its servers this way.
local M = {}

local function here()
  local src = debug.getinfo(1, "S").source:sub(2)
  return src:match("^(.*)/[^/]*$") or "."
end

local function shell_quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

local function run(cmd)
  local f = assert(io.popen(cmd, "r"))
  local out = f:read("a")
  f:close()
  return (out:gsub("%s+$", ""))
end

local function absolute(path)
  return run("cd " .. shell_quote(path) .. " && pwd")
end

-- render{ prefix = dir, port = 8080, workers = 2, threads = 8, vm_pool = 16,
--         root = <repo>, log_level = "info", user = nil,
--         start_rate = "10r/s", start_burst = 20 } -> path of the rendered config
-- user: the `user` directive's argument ("name [group]"). nginx started as
-- root runs its workers as this user, by default "nobody nogroup"; never as
-- root (refused here). A master that is not root runs its workers as
-- itself and ignores the directive, so then none is written.
-- start_rate, start_burst: POST /executions per client address (429 past them).
function M.render(opts)
  assert(type(opts) == "table" and opts.prefix, "render: opts.prefix is required")
  local root = opts.root or absolute(here() .. "/../..")
  assert(os.execute("mkdir -p " .. shell_quote(opts.prefix .. "/conf") .. " " .. shell_quote(opts.prefix .. "/logs")
    .. " " .. shell_quote(opts.prefix .. "/temp")), "render: cannot create " .. opts.prefix)
  local user = opts.user
  if user ~= nil then
    assert(type(user) == "string" and user:match("^[%w_%-%.]+ ?[%w_%-%.]*$"), "render: user must be 'name [group]'")
    local name = user:match("^(%S+)")
    assert(name ~= "root" and name ~= "0", "render: nginx's workers must not run as root")
  end
  if run("id -u") == "0" then
    user = user or "nobody nogroup"
    -- the workers (not root) go through the prefix to its temp directories
    assert(os.execute("chmod 755 " .. shell_quote(opts.prefix)), "render: cannot chmod " .. opts.prefix)
  else
    user = nil
  end
  local rate = opts.start_rate or "10r/s"
  assert(type(rate) == "string" and rate:match("^%d+r/[sm]$"), "render: start_rate must look like 10r/s")
  local burst = opts.start_burst or 20
  assert(math.type(burst) == "integer" and burst >= 0, "render: start_burst must be an integer >= 0")
  local values = {
    ROOT = root,
    PORT = tostring(opts.port or 8080),
    WORKERS = tostring(opts.workers or 2),
    THREADS = tostring(opts.threads or 8),
    VM_POOL = tostring(opts.vm_pool or 16),
    LOG_LEVEL = opts.log_level or "info",
    USER = user and ("user " .. user .. ";") or "# (not root: the workers run as the user starting nginx)",
    START_RATE = rate,
    START_BURST = tostring(burst),
  }
  local f = assert(io.open(here() .. "/nginx.conf", "r"))
  local text = f:read("a")
  f:close()
  text = text:gsub("{{([%u_]+)}}", function(k)
    return assert(values[k], "render: no value for {{" .. k .. "}}")
  end)
  local conf = opts.prefix .. "/conf/nginx.conf"
  f = assert(io.open(conf, "w"))
  f:write(text)
  f:close()
  return conf
end

-- The nginx command line for a rendered prefix: in the foreground, its
-- startup errors in the prefix's log instead of /var/log/nginx.
function M.command(prefix, conf)
  return string.format("nginx -p %s -c %s -e logs/error.log -g 'daemon off;'",
    shell_quote(prefix), shell_quote(conf or (prefix .. "/conf/nginx.conf")))
end

local args = { ... }
if #args > 0 then
  assert(os.execute("mkdir -p " .. shell_quote(args[1])), "cannot create " .. args[1])
  local prefix = absolute(args[1])
  local conf = M.render{ prefix = prefix, port = tonumber(args[2]) or 8080, workers = tonumber(args[3]) }
  print("wrote " .. conf)
  print("run:   MONGOSTORE_URI=mongodb://... MONGOSTORE_DB=orders MONGOSTORE_API_READ_TOKENS=... " ..
        "MONGOSTORE_API_WRITE_TOKENS=... " .. M.command(prefix, conf))
end

return M
