-- .luacheckrc - luacheck over every Lua file of the project (`make lint`;
-- `make test` runs it first). The library runs on Lua 5.4 and on LuaJIT
-- (OpenResty), so it may use what either provides; nginx's `ngx` only in the
-- files nginx runs.
std = "max"
codes = true
self = false            -- methods need not use self
max_line_length = 120

files["lua/mongostore/ngx.lua"] = { read_globals = { "ngx" } }
files["lua/mongostore/ngx_thread.lua"] = { read_globals = { "ngx" } }
files["lua/mongostore/ngx_http.lua"] = { read_globals = { "ngx" } }
files["lua/mongostore/ngx_access.lua"] = { globals = { "ngx" } } -- it sets ngx.status and headers
files["examples/openresty"] = { globals = { "ngx" } }   -- the app sets ngx.status and headers
-- luaunit finds test classes as globals named Test*; a matrix of cases reads
-- best one case to a line, so specs and benchmarks may run longer.
files["spec"] = { allow_defined_top = true, max_line_length = 160 }
files["bench"] = { max_line_length = 160 }
