-- examples/openresty/app/charts.lua - the charts the OpenResty example runs:
-- the README's order chart (examples/order_chart.lua). mongostore.ngx
-- requires this module (by the name given as `charts` to msngx.configure) in
-- every worker thread and timer. The payment timeout comes from the
-- execution's context, so a request can ask for a short one: POST /executions
-- {"chart":"order","context":{"total":30,"payment_timeout":0.5}}.
return { require "order_chart" }
