-- bench/contract.lua - what a signature check of mongostore.contract costs
-- a call, beside the hand-written checks it replaced, in one run:
--   lua5.4 bench/contract.lua [calls]
-- Prints ns per call for each and their ratio. No server.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "./?.so;" .. package.cpath
local contract = require "mongostore.contract"

local N = tonumber(arg[1]) or 1000000
local format, clock = string.format, os.clock
local math_type = math.type

-- the claim of store:pending_outbox{ limit =, lease = }, as a signature and by hand
local SIG = contract.define("bench:claim", {
  { "opts", "table?", fields = { limit = { "integer", min = 1 }, lease = { "number", gt = 0, max = 86400 },
                                 targeted = "boolean", external = "boolean" } },
})
local KNOWN = { limit = true, lease = true, targeted = true, external = true }
local function by_hand(opts)
  if opts == nil then return nil end
  if type(opts) ~= "table" then error("opts must be a table", 2) end
  for k in pairs(opts) do if not KNOWN[k] then error("unknown option " .. tostring(k), 2) end end
  local limit, lease = opts.limit, opts.lease
  if limit ~= nil and type(limit) ~= "number" then error("limit must be a number", 2) end
  if lease ~= nil and type(lease) ~= "number" then error("lease must be a number", 2) end
  if opts.targeted ~= nil and type(opts.targeted) ~= "boolean" then error("targeted must be a boolean", 2) end
  if limit ~= nil and (math_type(limit) ~= "integer" or limit < 1) then return "limit must be an integer >= 1" end
  if lease ~= nil and not (lease > 0 and lease <= 86400) then return "lease must be > 0 and at most a day" end
  return nil
end

-- a call of two plain arguments (store:ack_outbox(seq, token))
local ACK = contract.define("bench:ack", { { "seq", "integer" }, { "token", "string?" } })
local function ack_by_hand(seq, token)
  if math_type(seq) ~= "integer" then error("seq must be an integer", 2) end
  if token ~= nil and type(token) ~= "string" then error("token must be a string", 2) end
end

local function time(f)
  local t = clock()
  f()
  return (clock() - t) / N * 1e9
end

local opts = { limit = 100, lease = 30, targeted = true }
local rows = {}
for round = 1, 3 do -- side by side, interleaved, so both see the same machine
  local hand = time(function() for _ = 1, N do by_hand(opts) end end)
  local sig = time(function() for _ = 1, N do SIG:check(opts) end end)
  local ahand = time(function() for _ = 1, N do ack_by_hand(42, "tok") end end)
  local asig = time(function() for _ = 1, N do ACK:check(42, "tok") end end)
  rows[round] = { hand, sig, ahand, asig }
end
table.sort(rows, function(a, b) return a[2] < b[2] end)
local r = rows[2] -- the median round
print(format("options table (3 of 4 options): by hand %.0f ns, contract %.0f ns per call (%.2fx)", r[1], r[2],
  r[2] / r[1]))
print(format("two plain arguments:             by hand %.0f ns, contract %.0f ns per call (%.2fx)", r[3], r[4],
  r[4] / r[3]))
