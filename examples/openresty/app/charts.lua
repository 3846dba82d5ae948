-- examples/openresty/app/charts.lua - the charts the OpenResty example runs:
-- the README's order chart (examples/order_chart.lua) and a small refund
-- chart that declares which of its events come from outside. mongostore.ngx
-- requires this module (by the name given as `charts` to msngx.configure) in
-- every worker thread and timer, so it stays plain Lua without ngx.* calls.
-- The payment timeout comes from the execution's context, so a request can
-- ask for a short one: POST /executions
-- {"chart":"order","context":{"total":30,"payment_timeout":0.5}}.
local chart = require "mongostore.chart"

-- A refund is approved (the approval's data is kept in the context) or
-- rejected by a client; once approved it settles itself: Approved's
-- on_enter sends Settle to its own execution through the outbox (the
-- worker's relay delivers it). Settle is the chart's own event, so it is
-- not in `external`, and the HTTP API refuses it from a client.
local function record_approval(context, event)
  context.approval = event.data
end

local function settle(context, _, act)
  act.emit(act.execution_id, "Settle", { amount = context.amount, key = act.idempotency_key })
end

local refund = chart.define{
  id = "refund",
  initial = "Requested",
  external = { "Approve", "Reject" },
  inputs = { amount = { type = "number", min = 0, optional = true } },
  states = {
    { "Requested" },
    { "Approved", on_enter = settle },
    { "Settled", final = "success" },
    { "Rejected", final = "rejected" },
  },
  transitions = {
    { from = "Requested", to = "Approved", on = "Approve", action = record_approval },
    { from = "Requested", to = "Rejected", on = "Reject" },
    { from = "Approved", to = "Settled", on = "Settle" },
  },
}

return { require "order_chart", refund }
