-- examples/openresty/app/api.lua - the example's HTTP API over mongostore.ngx.
-- JSON in and out; every store or engine call goes through mongostore.ngx,
-- which runs it on nginx's thread pool, so a request waiting for MongoDB
-- yields and the worker's event loop keeps serving other requests.
--
--   POST /executions                    {chart, id?, context?, priority?} -> 201 {id}
--        (the same id again: 201, the same execution; the id of another
--        chart's execution: 409)
--   POST /executions/{id}/events        {kind, data?, id?}                -> 202 {ok: true, outcome, status}
--        (a resent event id: 202 {ok: true, duplicate: true}; only kinds the
--        execution's chart takes from outside, see chart.is_external)
--   POST /executions/{id}/{action}      cancel | terminate | suspend | resume -> 202 {ok: true, outcome, status}
--   GET  /executions/{id}               -> 200 {execution: {...}, trace: [...]}
--   GET  /executions?status=RUNNING&definition_id=order&limit=10&cursor=...&roots_only=true
--                                       -> 200 {items: [...], next_cursor: "..." | null}
--   HEAD on either GET resource answers as GET would, without the body.
--   POST /notes                         {text, tags?}                     -> 201 {id}
--   GET  /notes/{id}                    -> 200 {note: {id, text, tags}} or 404
--        (documents, through msngx.run and app/notes.lua in worker threads)
--
-- Who may call: every request carries `Authorization: Bearer <token>`, a
-- read token for GET and HEAD, a write token for everything else; writes
-- also need `Content-Type: application/json` and, when the browser sends an
-- Origin, one listed in MONGOSTORE_API_ORIGINS (mongostore.ngx_access; the
-- tokens come from MONGOSTORE_API_READ_TOKENS / MONGOSTORE_API_WRITE_TOKENS).
-- Refusals are 401 (no or unknown token), 403 (read token on a write, a
-- foreign Origin) and 415 (not JSON), with no detail.
--
-- Every error body carries the request's id ({error, code?, request_id});
-- what went wrong inside (a Lua error, libmongoc's message with the
-- server's host:port) goes to nginx's error log under that id, never to
-- the client.
--
-- A request the API cannot take gets a 4xx with a JSON body {error, code?};
-- it is checked here before anything reaches the library (whose argument
-- errors raise), so a bad request is never a 500. Bodies are read exactly
-- (json_decode's exact option): a number that could not be stored as
-- written, like 2^63, is a 400, and integers beyond 2^53 travel as boxed
-- int64s both ways. The library's run-time errors (nil, message, code) map
-- to statuses by code (STATUS_OF below).
local msngx = require "mongostore.ngx"
-- The JSON codec of mongostore's C core: Debian's nginx Lua module ships no
-- cjson, and this one keeps arrays (empty ones too) apart from objects,
-- decodes JSON null as ngx.null (both are the NULL light userdata), and
-- refuses what JSON cannot carry (infinities, functions) with nil, message.
local core = require "mongostore.core"
local chart = require "mongostore.chart"
local access = require "mongostore.ngx_access"
local charts = require "app.charts"

local ngx = ngx
local type, pairs, ipairs, tostring, tonumber, pcall = type, pairs, ipairs, tostring, tonumber, pcall
local format = string.format
local json_encode, json_decode, array, is_array = core.json_encode, core.json_decode, core.array, core.is_array
local text_error = core.text_error

local M = {}

-- Read when init_by_lua requires this module (nginx.conf's `env` lines keep
-- the variables for the workers too); no token configured: every request
-- is refused.
local ACCESS = access.from_env()

local KNOWN_CHARTS = {}
for _, c in ipairs(charts) do KNOWN_CHARTS[c.id] = true end

local STATUSES = { PENDING = true, RUNNING = true, DONE = true, CANCELLED = true, SUSPENDED = true,
                   CANCELLING = true, FAILED = true }

-- Reserved kinds never come through the events endpoint: the engine's own
-- (a client sending them would forge a start, a region's result or a timer),
-- the control events, which have their endpoints, and Reset and SetState,
-- which no client may send at all. chart.RESERVED is the full list.
local RESERVED_WHY = {
  Start = "is sent by the engine only", Finished = "is sent by the engine only",
  Timeout = "is sent by the engine only",
  Cancel = "is a control event: use POST /executions/{id}/cancel",
  Terminate = "is a control event: use POST /executions/{id}/terminate",
  Suspend = "is a control event: use POST /executions/{id}/suspend",
  Resume = "is a control event: use POST /executions/{id}/resume",
  Reset = "is a control event the HTTP API does not take",
  SetState = "is a control event the HTTP API does not take",
}

local ACTIONS = { cancel = msngx.cancel, terminate = msngx.terminate, suspend = msngx.suspend,
                  resume = msngx.resume }

-- The library's error codes (README, "Errors") as HTTP statuses.
local STATUS_OF = {
  invalid = 400,
  not_found = 404,
  conflict = 409,
  duplicate = 409, -- no call of this API returns it: a resent event id is a 202
  finished = 409, -- a control action on an execution that has ended: nothing written
  too_large = 413,
}

-- Codes that say MongoDB could not be reached or did not answer: 503, with
-- Retry-After and a message that says so (the library's own goes to the log).
local UNREACHABLE = { unavailable = true, network = true, timeout = true, closed = true }

local MAX_LIMIT = 1000
local MAX_ID = 200
local MAX_KIND = 200

------------------------------------------------------------------------
-- Responses

local function send(status, body, headers)
  local text, err = json_encode(body)
  if not text then
    ngx.log(ngx.ERR, "cannot encode the response: ", err)
    status, text = 500, '{"error":"the response could not be encoded"}'
  end
  ngx.status = status
  ngx.header["Content-Type"] = "application/json"
  for k, v in pairs(headers or {}) do ngx.header[k] = v end
  ngx.print(text, "\n")
  return ngx.exit(ngx.HTTP_OK) -- the status is already out: just end the request
end

-- nginx's $request_id, the same for the whole request (nginx.conf also
-- names it in X-Request-Id, which makes nginx keep it rather than draw a
-- new one on each read).
local function request_id()
  local ctx = ngx.ctx
  local id = ctx.request_id
  if not id then
    id = ngx.var.request_id
    ctx.request_id = id
  end
  return id
end

local function fail(status, msg, code)
  return send(status, { error = msg, code = code, request_id = request_id() })
end

-- A message for the client without a Lua position in front of it
-- ("/path/x.lua:12: "): where the code lives is not the client's business
-- (mongostore.ngx strips its own; this covers the app's).
local function without_position(msg)
  repeat
    local rest = msg:match("^[%w_%.%-/~@+]*%.lua:%d+: (.*)$") or msg:match('^%[string ".-"%]:%d+: (.*)$')
    msg = rest or msg
  until not rest
  return msg
end

-- An error the library returned: nil, message, code. A 4xx (the client's
-- data, an unknown id, a conflict) keeps the library's message, which is
-- about the request; a 5xx says only what kind of trouble it was, and the
-- message (which may name the server's host and port) goes to the log.
local function library_error(msg, code)
  local status = STATUS_OF[code] or 503
  msg = without_position(tostring(msg or "the store did not answer"))
  if status >= 500 then
    ngx.log(ngx.WARN, "mongostore ", tostring(request_id()), ": ", msg, " (", tostring(code), ")")
    if UNREACHABLE[code] then
      -- mongostore.ngx says "unavailable" too when every thread slot stayed
      -- busy or a thread failed: that is nginx, not MongoDB
      local ours = msg:find("calls in flight", 1, true) or msg:find("worker thread failed", 1, true)
      local text = ours and "the server is busy, try again"
        or "MongoDB is not reachable or did not answer, try again"
      return send(503, { error = text, code = code, request_id = request_id() }, { ["Retry-After"] = "1" })
    end
    return fail(503, "the store could not complete the request", code)
  end
  return fail(status, msg, code)
end

-- Calls a mongostore.ngx function; a raise (a bug here or there, never a
-- bad request) becomes a 500 with a JSON body rather than nginx's page,
-- the error in the log under the request id.
local function call(fn, ...)
  local res = { pcall(fn, ...) }
  if not res[1] then
    ngx.log(ngx.ERR, "mongostore ", tostring(request_id()), ": mongostore.ngx raised: ", tostring(res[2]))
    return fail(500, "internal error")
  end
  return res[2], res[3], res[4]
end

------------------------------------------------------------------------
-- Requests

-- The request body as a JSON object, or nil, message.
local function read_json_object()
  ngx.req.read_body()
  local body = ngx.req.get_body_data()
  if body == nil then
    local file = ngx.req.get_body_file() -- larger than client_body_buffer_size
    if file then
      local f = io.open(file, "rb")
      if f then body = f:read("*a"); f:close() end
    end
  end
  if body == nil or body:match("^%s*$") then return nil, "the request body must be a JSON object" end
  local v, err = json_decode(body, { exact = true })
  if v == nil then
    err = tostring(err)
    if err:find("64-bit range", 1, true) or err:find("too small", 1, true) or err:find("repeated key", 1, true) then
      return nil, "the request body cannot be stored as written: " .. err
    end
    return nil, "malformed JSON: " .. err
  end
  if type(v) ~= "table" or is_array(v) then return nil, "the request body must be a JSON object" end
  return v
end

local function is_object(v)
  return type(v) == "table" and not is_array(v)
end

-- Ids and kinds: non-empty UTF-8 without control characters (NUL
-- included), at most `max` bytes.
local function check_text(v, what, max)
  if type(v) ~= "string" or v == "" then return nil, what .. " must be a non-empty string" end
  if #v > max then return nil, format("%s must be at most %d bytes", what, max) end
  local why = text_error(v)
  if why then return nil, what .. " " .. why end
  if v:find("[%c]") then return nil, what .. " must not contain control characters" end
  return true
end

local function check_id(v, what)
  local ok, err = check_text(v, what, MAX_ID)
  if not ok then return nil, err end
  if v:find("/", 1, true) then return nil, what .. " must not contain '/'" end
  return true
end

local function check_integer(v, lo, hi)
  return type(v) == "number" and v == math.floor(v) and v >= lo and v <= hi
end

-- A query argument given once, as a string (nil when absent).
local function one_arg(args, name)
  local v = args[name]
  if v == nil then return nil end
  if type(v) == "table" then return nil, format("query argument %s is given more than once", name) end
  if v == true then return nil, format("query argument %s needs a value", name) end
  return v
end

------------------------------------------------------------------------
-- Handlers

-- POST /executions {chart, id?, context?, priority?} -> 201 {id}
local function start()
  local body, err = read_json_object()
  if not body then return fail(400, err) end
  if type(body.chart) ~= "string" or body.chart == "" then return fail(400, "chart must be a non-empty string") end
  if not KNOWN_CHARTS[body.chart] then return fail(400, format("unknown chart '%s'", body.chart)) end
  if body.id ~= nil then
    local ok, ierr = check_id(body.id, "id")
    if not ok then return fail(400, ierr) end
  end
  if body.context ~= nil and not is_object(body.context) then return fail(400, "context must be a JSON object") end
  if body.priority ~= nil and not check_integer(body.priority, 0, 4) then
    return fail(400, "priority must be an integer from 0 to 4")
  end
  local id, serr, code = call(msngx.start_external, body.chart,
                              { id = body.id, context = body.context, priority = body.priority })
  if not id then return library_error(serr, code) end
  return send(201, { id = id }, { Location = "/executions/" .. ngx.escape_uri(id) })
end

-- POST /executions/{id}/events {kind, data?, id?} -> 202 {ok: true}
local function post_event(id)
  local body, err = read_json_object()
  if not body then return fail(400, err) end
  local ok, kerr = check_text(body.kind, "kind", MAX_KIND)
  if not ok then return fail(400, kerr) end
  if chart.RESERVED[body.kind] then
    return fail(400, format("%s %s", body.kind, RESERVED_WHY[body.kind] or "is reserved"), "invalid")
  end
  if body.data ~= nil and not is_object(body.data) then return fail(400, "data must be a JSON object") end
  if body.id ~= nil then
    local iok, ierr = check_id(body.id, "event id")
    if not iok then return fail(400, ierr) end
  end
  -- the kind is checked against the execution's chart in the same thread
  -- call that sends it (msngx.send_external)
  local sent, how, r = call(msngx.send_external, id, { kind = body.kind, data = body.data or {}, id = body.id })
  if not sent then return library_error(how, r) end -- how: the message, r: the code
  if how == "duplicate" then return send(202, { ok = true, duplicate = true }) end
  -- what the event did (transition, ignored, held, failed, finished) and the status after it
  return send(202, { ok = true, outcome = r.outcome, status = r.status })
end

-- POST /executions/{id}/{cancel|terminate|suspend|resume} -> 202 {ok: true}
local function post_action(id, action)
  local ok, serr, r = call(ACTIONS[action], id)
  if not ok then return library_error(serr, r) end
  return send(202, { ok = true, outcome = r.outcome, status = r.status })
end

-- GET /executions/{id} -> 200 {execution, trace}
local function show(id)
  local exe, err, code = call(msngx.load, id)
  if exe == nil then
    if err == nil then return fail(404, format("no execution '%s'", id), "not_found") end
    return library_error(err, code)
  end
  local steps
  steps, err, code = call(msngx.read_trace, id)
  if steps == nil then
    if err ~= nil then return library_error(err, code) end
    steps = {}
  end
  -- the dedupe digests travel with the fields for a commit in this process;
  -- they are the store's, not part of what the API shows
  exe.dedupe = nil
  return send(200, { execution = exe, trace = array(steps) })
end

-- GET /executions?status=&definition_id=&limit=&cursor=&roots_only= -> {items, next_cursor}
local function list()
  local args, aerr = ngx.req.get_uri_args(100)
  if aerr == "truncated" then return fail(400, "too many query arguments") end
  local q = {}
  local statuses = args.status
  if statuses ~= nil then
    if type(statuses) ~= "table" then statuses = { statuses } end
    q.status = {}
    for _, s in ipairs(statuses) do
      if s == true then return fail(400, "query argument status needs a value") end
      for one in s:gmatch("[^,]+") do
        if not STATUSES[one] then return fail(400, format("unknown status '%s'", one)) end
        q.status[#q.status + 1] = one
      end
    end
    if #q.status == 0 then return fail(400, "query argument status needs a value") end
  end
  local v, err = one_arg(args, "definition_id")
  if err then return fail(400, err) end
  if v ~= nil then
    local ok, derr = check_text(v, "definition_id", MAX_ID)
    if not ok then return fail(400, derr) end
  end
  q.definition_id = v
  v, err = one_arg(args, "limit")
  if err then return fail(400, err) end
  if v ~= nil then
    local n = v:match("^%d+$") and tonumber(v)
    if not n or n < 1 or n > MAX_LIMIT then
      return fail(400, format("limit must be an integer from 1 to %d", MAX_LIMIT))
    end
    q.limit = n
  end
  v, err = one_arg(args, "cursor")
  if err then return fail(400, err) end
  if v == "" then return fail(400, "cursor must not be empty") end
  if v ~= nil then
    local ok, cerr = check_text(v, "cursor", 1024)
    if not ok then return fail(400, cerr) end
  end
  q.cursor = v
  v, err = one_arg(args, "roots_only")
  if err then return fail(400, err) end
  if v ~= nil then
    if v ~= "true" and v ~= "false" then return fail(400, "roots_only must be true or false") end
    q.roots_only = v == "true"
  end
  local page, lerr, code = call(msngx.list_executions, q)
  if not page then return library_error(lerr, code) end
  return send(200, { items = array(page.items or {}), next_cursor = page.next_cursor or ngx.null })
end

local function method_not_allowed(allowed)
  ngx.header["Allow"] = allowed
  return fail(405, format("method %s is not allowed here (allowed: %s)", ngx.req.get_method(), allowed))
end

-- POST /notes {text, tags?} -> 201 {id}: a document, written in a worker
-- thread by app/notes.lua (msngx.run).
local MAX_TEXT, MAX_TAGS = 10000, 20
local function create_note()
  local body, err = read_json_object()
  if not body then return fail(400, err) end
  if type(body.text) ~= "string" or body.text == "" or #body.text > MAX_TEXT then
    return fail(400, format("text must be a non-empty string of at most %d bytes", MAX_TEXT))
  end
  local why = text_error(body.text)
  if why then return fail(400, "text " .. why) end
  local tags = body.tags
  if tags ~= nil then
    if type(tags) ~= "table" or not is_array(tags) or #tags > MAX_TAGS then
      return fail(400, format("tags must be an array of at most %d strings", MAX_TAGS))
    end
    for i, t in ipairs(tags) do
      local ok, terr = check_text(t, "tags[" .. i .. "]", MAX_ID)
      if not ok then return fail(400, terr) end
    end
  end
  local id, nerr, code = call(msngx.run, "app.notes", "create", { text = body.text, tags = tags })
  if not id then return library_error(nerr, code) end
  return send(201, { id = id }, { Location = "/notes/" .. ngx.escape_uri(id) })
end

-- GET /notes/{id} -> 200 {note} or 404
local function show_note(id)
  local note, err, code = call(msngx.run, "app.notes", "get", id)
  if note == nil then
    if err == nil then return fail(404, format("no note '%s'", id), "not_found") end
    return library_error(err, code)
  end
  return send(200, { note = note })
end

local function notes(method, seg)
  local get = method == "GET" or method == "HEAD"
  if #seg == 1 then
    if method == "POST" then return create_note() end
    return method_not_allowed("POST")
  end
  local ok, err = check_id(seg[2], "note id")
  if not ok then return fail(400, err) end
  if get then return show_note(seg[2]) end
  return method_not_allowed("GET, HEAD")
end

-- The raw path (before nginx decodes %2F), split into decoded segments.
local function segments()
  local path = ngx.var.request_uri:match("^[^?]*")
  local out = {}
  for seg in path:gmatch("[^/]+") do out[#out + 1] = ngx.unescape_uri(seg) end
  return out, path:sub(-1) == "/" and #path > 1
end

-- content_by_lua entry point for everything but /ping.
function M.handle()
  local method = ngx.req.get_method()
  -- before anything else, even a 404: an anonymous client learns nothing
  ACCESS:check((method == "GET" or method == "HEAD") and "read" or "write")
  local seg, trailing = segments()
  if seg[1] == "notes" and #seg <= 2 and not trailing then return notes(method, seg) end
  if seg[1] ~= "executions" or #seg > 3 or trailing then
    return fail(404, "no such resource: " .. ngx.var.uri)
  end
  -- HEAD is GET without the body: nginx sends the headers only
  local get = method == "GET" or method == "HEAD"
  if #seg == 1 then
    if get then return list() end
    if method == "POST" then return start() end
    return method_not_allowed("GET, HEAD, POST")
  end
  local id = seg[2]
  local ok, err = check_id(id, "execution id")
  if not ok then return fail(400, err) end
  if #seg == 2 then
    if get then return show(id) end
    return method_not_allowed("GET, HEAD")
  end
  local sub = seg[3]
  if sub ~= "events" and not ACTIONS[sub] then
    return fail(404, "no such resource: " .. ngx.var.uri)
  end
  if method ~= "POST" then return method_not_allowed("POST") end
  if sub == "events" then return post_event(id) end
  return post_action(id, sub)
end

-- The error_page target: errors nginx produces itself (a body over
-- client_max_body_size, a malformed request) with a JSON body too.
function M.nginx_error()
  local status = ngx.status
  if not status or status < 400 then status = 500 end
  local reason = ({ [400] = "bad request", [404] = "not found", [405] = "method not allowed",
                    [408] = "request timed out", [413] = "request body too large", [429] = "too many requests",
                    [414] = "request URI too long", [494] = "request header too large" })[status]
  return fail(status, reason or ("error " .. status))
end

M.STATUS_OF = STATUS_OF
return M
