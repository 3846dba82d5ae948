-- mongostore.cli.args - the admin CLI's command line: options anywhere
-- among the words (`--name value`, `--name=value`, flags), `--` ends them,
-- and every mistake is a usage error naming the option.
local M = {}

-- spec: name -> { value = true (takes a value), multi = true (may repeat) }.
-- Returns opts (name -> value, a list for multi, true for a flag) and the
-- positional words, or nil, message.
function M.parse(argv, spec)
  local opts, words = {}, {}
  local i, n = 1, #argv
  local only_words = false
  while i <= n do
    local a = argv[i]
    if only_words or a == "-" or a:sub(1, 1) ~= "-" then
      words[#words + 1] = a
    elseif a == "--" then
      only_words = true
    else
      local name, value = a:match("^%-%-([%w][%w%-]*)=(.*)$")
      if not name then name = a:match("^%-%-([%w][%w%-]*)$") end
      if not name and a == "-h" then name = "help" end
      local o = name and spec[name]
      if not o then
        return nil, "unknown option " .. a
      end
      if o.value then
        if value == nil then
          i = i + 1
          value = argv[i]
          if value == nil then return nil, "option --" .. name .. " needs a value" end
        end
        if o.multi then
          local list = opts[name] or {}
          list[#list + 1] = value
          opts[name] = list
        else
          if opts[name] ~= nil then return nil, "option --" .. name .. " given twice" end
          opts[name] = value
        end
      else
        if value ~= nil then return nil, "option --" .. name .. " takes no value" end
        opts[name] = true
      end
    end
    i = i + 1
  end
  return opts, words
end

-- A whole number from an option's text, within [lo, hi].
function M.integer(text, name, lo, hi)
  local v = math.tointeger(tonumber(text))
  if not v or v < lo or (hi and v > hi) then
    return nil, string.format("--%s must be an integer from %d%s, got %q", name, lo, hi and (" to " .. hi) or " up",
      text)
  end
  return v
end

return M
