-- examples/openresty/app/gateway.lua - how the example's external events
-- leave nginx: on_external (given to msngx.start_worker in nginx.conf) posts
-- each order's Charge to a payment gateway over a cosocket, with the chart's
-- idempotency key; stand_in() is that gateway here (location
-- /_gateway/charge), which only logs the charge. Runs in the nginx worker's
-- own VM (light threads of a timer), never in a worker thread.
local core = require "mongostore.core"

local M = {}

local function post(host, port, path, body, key)
  local sock = ngx.socket.tcp()
  sock:settimeout(5000) -- connect, send and each read: a silent gateway is a failed try
  local ok, err = sock:connect(host, port)
  if not ok then return nil, "gateway connect: " .. tostring(err) end
  local req = table.concat({
    "POST " .. path .. " HTTP/1.1", "Host: " .. host, "Connection: close",
    "Content-Type: application/json", "Idempotency-Key: " .. key, "Content-Length: " .. #body, "", body,
  }, "\r\n")
  local sent, serr = sock:send(req)
  if not sent then
    sock:close()
    return nil, "gateway send: " .. tostring(serr)
  end
  local line, rerr = sock:receive("*l")
  sock:close()
  if not line then return nil, "gateway receive: " .. tostring(rerr) end
  return tonumber(line:match("^HTTP/1%.%d (%d%d%d)"))
end

-- on_external for start_worker: a Charge goes to http://host:port/path as
-- JSON; true (acked) on a 2xx, else nil and why (the entry is tried again
-- after a backoff, and the failure logged). The idempotency key is the
-- chart's (act.idempotency_key, the same on every redelivery), so a gateway
-- that honours it charges once even when an entry comes twice.
function M.deliver_to(host, port, path)
  path = path or "/_gateway/charge"
  return function(entry)
    local event = entry.event
    if event.kind ~= "Charge" then
      -- no other external event in these charts: say so rather than retry it for good
      ngx.log(ngx.WARN, "gateway: outbox ", entry.seq, ": no destination for external event ", event.kind)
      return true
    end
    local data = event.data or {}
    local body = assert(core.json_encode{ order = data.order, amount = data.amount })
    local status, err = post(host, port, path, body, tostring(data.key or event.id or entry.seq))
    if not status then return nil, err end
    if status >= 200 and status < 300 then return true end
    return nil, "gateway answered " .. status
  end
end

-- The stand-in gateway (POST /_gateway/charge): logs the charge and
-- accepts it. A real gateway would answer later through its callback,
-- POST /executions/{order}/events {"kind":"Paid",...}.
function M.stand_in()
  ngx.req.read_body()
  local req = core.json_decode(ngx.req.get_body_data() or "") or {}
  ngx.log(ngx.NOTICE, "gateway (stand-in): charge order ", tostring(req.order), " amount ", tostring(req.amount),
          " key ", tostring(ngx.var.http_idempotency_key))
  ngx.header["Content-Type"] = "application/json"
  ngx.say('{"ok":true}')
end

return M
