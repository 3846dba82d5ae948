-- examples/order_chart.lua - the README's order chart, shared by
-- examples/order.lua and the OpenResty example (app/charts.lua). Plain Lua
-- with no ngx.* calls, since OpenResty requires it in worker threads and
-- timers. The payment timeout is read from the context (seconds, default
-- 900), so a caller can ask for a short one.
local chart = require "mongostore.chart"

-- AwaitingPayment's on_enter: count the attempt, default the timeout (read
-- from the context right after this hook), and ask the payment service for
-- the money. Charge has no target execution: it is an external event, handed
-- to the engine's on_external.
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

return chart.define{
  id = "order",
  initial = "Cart",
  external = { "PlaceOrder", "Paid", "Declined", "Picked", "Packed", "Go" },
  -- what a caller may put in the context at start: attempts is the chart's
  -- own count, so a client cannot start with it (or with anything else)
  inputs = {
    total = { type = "number", min = 0, optional = true },
    payment_timeout = { type = "number", min = 0, max = 86400, optional = true },
    -- the caller's own data kept with the order (no hook reads it)
    meta = "object?",
  },
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
