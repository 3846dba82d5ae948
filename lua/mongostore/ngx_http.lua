-- mongostore.ngx_http - a small HTTP/1.1 client on nginx cosockets, for the
-- webhooks mongostore.webhook sends from the nginx event loop (where
-- cosockets work: timers, light threads, handlers; not worker threads). One
-- request per connection (Connection: close), TLS verified by default,
-- bounded in time and in the size of what it reads back. It needs
-- ngx.socket.tcp and nothing else.
local type, tostring, tonumber, pairs, concat = type, tostring, tonumber, pairs, table.concat
local format, lower = string.format, string.lower

local M = {}

local MAX_BODY = 1024 * 1024 -- bytes of an answer's body read at most
local MAX_HEADERS = 100

-- parse_url("https://host:8443/path?q") -> { scheme, host, port, path } or
-- nil, msg. Only http and https; no user info; an IPv6 literal in brackets.
function M.parse_url(url)
  if type(url) ~= "string" then return nil, "url must be a string, got " .. type(url) end
  local scheme, rest = url:match("^(%a[%w+.-]*)://(.*)$")
  if not scheme then return nil, "url must start with http:// or https://" end
  scheme = lower(scheme)
  if scheme ~= "http" and scheme ~= "https" then return nil, "url scheme must be http or https, got " .. scheme end
  local authority, path = rest:match("^([^/?#]*)(.*)$")
  if authority == "" then return nil, "url has no host" end
  if authority:find("@", 1, true) then return nil, "url must not carry user info" end
  local host, port
  if authority:sub(1, 1) == "[" then
    host, port = authority:match("^%[([%x:.]+)%]:?(%d*)$")
  else
    host, port = authority:match("^([%w.-]+):?(%d*)$")
  end
  if not host then return nil, "url has a malformed host: " .. authority end
  port = port ~= "" and tonumber(port) or (scheme == "https" and 443 or 80)
  if port < 1 or port > 65535 then return nil, "url port out of range" end
  path = path:gsub("#.*$", "")
  if path == "" then path = "/" elseif path:sub(1, 1) == "?" then path = "/" .. path end
  if path:find("[%c ]") then return nil, "url path has spaces or control characters" end
  return { scheme = scheme, host = host, port = port, path = path }
end

-- The code of a cosocket's error: "timeout", else "network".
local function code_of(err)
  return err == "timeout" and "timeout" or "network"
end

-- A header name or value that would split the request (CR, LF, NUL) is refused.
local function clean_header(k, v)
  k, v = tostring(k), tostring(v)
  if not k:match("^[%w!#$%%&'*+.^_`|~-]+$") then return nil, "header name " .. format("%q", k) .. " is not a token" end
  if v:find("[\r\n%z]") then return nil, "header " .. k .. " has a line break in its value" end
  return k, v
end

-- Reads the answer's headers: status, { [lower name] = value }, or nil, msg.
local function read_head(sock)
  local line, err = sock:receive("*l")
  if not line then return nil, "reading the status line: " .. tostring(err), code_of(err) end
  local status = line:match("^HTTP/1%.[01] (%d%d%d)")
  if not status then return nil, "not an HTTP/1.x answer: " .. line:sub(1, 60), "server" end
  local headers = {}
  for _ = 1, MAX_HEADERS do
    line, err = sock:receive("*l")
    if not line then return nil, "reading the headers: " .. tostring(err), code_of(err) end
    if line == "" then return tonumber(status), headers end
    local k, v = line:match("^([^:]+):%s*(.-)%s*$")
    if k then headers[lower(k)] = v end
  end
  return nil, "more than " .. MAX_HEADERS .. " header lines", "server"
end

local function read_chunked(sock)
  local parts, n = {}, 0
  while true do
    local line, err = sock:receive("*l")
    if not line then return nil, "reading a chunk size: " .. tostring(err), code_of(err) end
    local size = tonumber(line:match("^%s*(%x+)"), 16)
    if not size then return nil, "malformed chunk size", "server" end
    if size == 0 then
      repeat line = sock:receive("*l") until not line or line == "" -- trailers
      return concat(parts)
    end
    n = n + size
    if n > MAX_BODY then return nil, "answer body larger than " .. MAX_BODY .. " bytes", "too_large" end
    local data
    data, err = sock:receive(size)
    if not data then return nil, "reading a chunk: " .. tostring(err), code_of(err) end
    parts[#parts + 1] = data
    sock:receive("*l") -- the CRLF after the chunk
  end
end

local function read_body(sock, headers)
  if headers["transfer-encoding"] and lower(headers["transfer-encoding"]):find("chunked", 1, true) then
    return read_chunked(sock)
  end
  local len = headers["content-length"] and tonumber(headers["content-length"])
  if len then
    if len > MAX_BODY then return nil, "answer body larger than " .. MAX_BODY .. " bytes", "too_large" end
    if len == 0 then return "" end
    local data, err = sock:receive(len)
    if not data then return nil, "reading the body: " .. tostring(err), code_of(err) end
    return data
  end
  -- until the server closes (Connection: close), bounded
  local data, err, partial = sock:receive(MAX_BODY + 1)
  data = data or partial
  if err and err ~= "closed" then return nil, "reading the body: " .. tostring(err), code_of(err) end
  if #data > MAX_BODY then return nil, "answer body larger than " .. MAX_BODY .. " bytes", "too_large" end
  return data
end

-- request{ url = "https://...", method = "POST", headers = { ... }, body = "...",
--          timeout = 10, verify = true, server_name = nil }
-- -> { status = n, headers = { [lower name] = value }, body = "..." } or nil, msg, code
-- (code: "invalid" for a bad request table, "network", "timeout", "server"
-- for an answer that is not HTTP, "too_large" past 1 MiB).
-- timeout bounds each step (connect, send, each read) in seconds; verify
-- checks the server's certificate against lua_ssl_trusted_certificate and
-- its name (server_name, default the url's host).
function M.request(req)
  if type(req) ~= "table" then error("ngx_http.request: expected a table, got " .. type(req), 2) end
  local u, uerr = M.parse_url(req.url)
  if not u then return nil, uerr, "invalid" end
  local method = req.method or "POST"
  if type(method) ~= "string" or not method:match("^%u+$") then
    return nil, "method must be an upper-case word", "invalid"
  end
  local body = req.body or ""
  if type(body) ~= "string" then return nil, "body must be a string", "invalid" end
  local timeout = req.timeout or 10
  if type(timeout) ~= "number" or timeout ~= timeout or timeout <= 0 then
    return nil, "timeout must be a number of seconds > 0", "invalid"
  end
  local lines = { format("%s %s HTTP/1.1", method, u.path) }
  local default_port = (u.scheme == "https" and 443 or 80)
  local host_header = u.host:find(":", 1, true) and ("[" .. u.host .. "]") or u.host
  if u.port ~= default_port then host_header = host_header .. ":" .. u.port end
  local given = {}
  for k, v in pairs(req.headers or {}) do
    local ck, cv = clean_header(k, v)
    if not ck then return nil, cv, "invalid" end
    given[lower(ck)] = true
    lines[#lines + 1] = ck .. ": " .. cv
  end
  if not given.host then lines[#lines + 1] = "Host: " .. host_header end
  if not given["user-agent"] then lines[#lines + 1] = "User-Agent: mongostore" end
  lines[#lines + 1] = "Content-Length: " .. #body
  lines[#lines + 1] = "Connection: close"
  local head = concat(lines, "\r\n") .. "\r\n\r\n"

  local sock = ngx.socket.tcp()
  sock:settimeout(timeout * 1000)
  local ok, err = sock:connect(u.host, u.port)
  if not ok then return nil, format("connect %s:%d: %s", u.host, u.port, tostring(err)), code_of(err) end
  if u.scheme == "https" then
    local verify = req.verify ~= false
    local session
    session, err = sock:sslhandshake(nil, req.server_name or u.host, verify)
    if not session then
      sock:close()
      return nil, "TLS handshake with " .. u.host .. ": " .. tostring(err), code_of(err)
    end
  end
  ok, err = sock:send(head .. body)
  if not ok then
    sock:close()
    return nil, "sending: " .. tostring(err), code_of(err)
  end
  local status, headers, herr = read_head(sock)
  if not status then
    sock:close()
    return nil, headers, herr
  end
  local data, code
  if method == "HEAD" or status == 204 or status == 304 or (status >= 100 and status < 200) then
    data = ""
  else
    data, err, code = read_body(sock, headers)
  end
  sock:close()
  if not data then return nil, err, code end
  return { status = status, headers = headers, body = data }
end

return M
