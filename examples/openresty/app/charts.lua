-- examples/openresty/app/charts.lua - the charts the OpenResty example runs:
-- the README's order chart. mongostore.ngx requires this module (by the name
-- given as `charts` to msngx.configure) in every worker thread and timer, so
-- it must be plain Lua that builds its charts when required: no ngx.* calls.
--
-- The payment timeout comes from the execution's context (seconds), so a
-- request can ask for a short one: POST /executions
-- {"chart":"order","context":{"total":30,"payment_timeout":0.5}}.
local chart = require "mongostore.chart"

-- AwaitingPayment's on_enter: count the attempt, default the timeout (it is
-- read from the context right after this hook), and ask the payment service
-- for the money. The Charge event has no target execution: it is an external
-- event (the engine's on_external; the example has none, so it is dropped).
local function request_payment(context, _, act)
  context.attempts = (context.attempts or 0) + 1
  if context.payment_timeout == nil then context.payment_timeout = 900 end
  act.emit(nil, "Charge", { order = act.execution_id, amount = context.total, key = act.idempotency_key })
end

local function retry_or_give_up(context)
  return context.attempts < 3 and "retry" or "giveup"
end

-- A Paid event must carry a positive amount; anything else (a missing or
-- non-numeric amount from an HTTP client) leaves the order waiting.
local function paid_enough(data)
  return type(data.amount) == "number" and data.amount > 0
end

local order = chart.define{
  id = "order",
  initial = "Cart",
  states = {
    { "Cart" },
    { "AwaitingPayment", timeout = { context = "payment_timeout" }, on_enter = request_payment },
    { "Fulfilling", initial = "Picking",
      states = { { "Picking" }, { "Packing" } },
      transitions = { { from = "Picking", to = "Packing", on = "Picked" } } },
    { "Fork", orthogonal = true, states = {
        { "A", initial = "A1", states = { { "A1" }, { "A2", final = "success" } },
          transitions = { { from = "A1", to = "A2", on = "Go" } } },
        { "B", initial = "B1", states = { { "B1" }, { "B2", final = "success" } },
          transitions = { { from = "B1", to = "B2", on = "Go" } } } } },
    { "Done", final = "success" },
    { "Cancelled", final = "cancelled" },
  },
  transitions = {
    { from = "Cart", to = "AwaitingPayment", on = "PlaceOrder" },
    { from = "AwaitingPayment", to = "Fulfilling", on = "Paid", where = paid_enough },
    { from = "AwaitingPayment", on = "Declined", select = retry_or_give_up,
      to = { retry = "AwaitingPayment", giveup = "Cancelled" } },
    { from = "AwaitingPayment", to = "Cancelled", on = "Timeout" },
    { from = "Fulfilling", to = "Fork", on = "Packed" },
    { from = "Fork", join = "all", to = "Done", else_to = "Cancelled" },
  },
}

return { order }
