-- spec/01-unit/cursor_spec.lua - mongostore.cursor, the one signed cursor format: base64url
-- both ways (one spelling per byte string), encode/decode round trips, and every cursor
-- that was not issued for this key and binding (altered, forged, truncated, too long,
-- another binding's, not text) refused with a reason, never raised.
local lu = require "luaunit"
local ms = require "mongostore"
local cursor = require "mongostore.cursor"
local core = require "mongostore.core"

TestCursorModule = {}

function TestCursorModule:test_base64url_round_trip()
  for _, s in ipairs { "", "a", "ab", "abc", "abcd", "\0\255\128", string.rep("\7", 100), "\251\255\191" } do
    local e = cursor.b64(s)
    lu.assertNotNil(e:match("^[%w%-_]*$"), e)
    lu.assertEquals(cursor.unb64(e), s)
  end
  lu.assertEquals(cursor.b64("\251\255\191"), "-_-_")
  lu.assertNil(cursor.unb64("a"))
  lu.assertNil(cursor.unb64("ab!c"))
  lu.assertNil(cursor.unb64("ab=="), "no padding")
  -- the bits past the last byte must be zero: "QQ" is "A", "QR" stands for nothing
  lu.assertEquals(cursor.unb64("QQ"), "A")
  lu.assertNil(cursor.unb64("QR"))
  lu.assertNil(cursor.unb64("QUF"))
  lu.assertEquals(cursor.unb64("QUE"), "AA")
end

function TestCursorModule:test_round_trip()
  local key, binding = "k\0ey", "list\0order"
  local payload = { id = "exe-1", v = ms.array { 1990, ms.null, "t" }, s = 42 }
  local text = cursor.encode(key, binding, payload)
  lu.assertNotNil(text:match("^c3%.[%w%-_]+%.[%w%-_]+$"), text)
  lu.assertEquals(#cursor.unb64(text:match("%.([^.]+)$")), cursor.MAC_BYTES)
  local back = assert(cursor.decode(key, binding, text))
  lu.assertEquals(back.id, "exe-1")
  lu.assertEquals(back.s, 42)
  lu.assertEquals(back.v[1], 1990)
  lu.assertTrue(rawequal(back.v[2], ms.null))
  lu.assertEquals(back.v[3], "t")
  lu.assertTrue(ms.is_array(back.v))
  -- the same payload and binding give the same text (a cursor is a position, not a nonce)
  lu.assertEquals(cursor.encode(key, binding, payload), text)
end

function TestCursorModule:test_what_was_not_issued_is_refused()
  local key, binding = "secret", "q1"
  local text = cursor.encode(key, binding, { id = "e-007" })
  local p64, m64 = text:match("^c3%.([^.]+)%.([^.]+)$")
  local function flip(s, i)
    local c = s:sub(i, i)
    return s:sub(1, i - 1) .. (c == "A" and "B" or "A") .. s:sub(i + 1)
  end
  local other_payload = cursor.b64(core.bson_encode { id = "e-999" })
  local cases = {
    { text, "another binding", "signature", "q2" },
    { text, "a binding that runs into the payload", "signature", "q" },
    { cursor.encode("other", binding, { id = "e-007" }), "another key", "signature" },
    { "c3." .. p64 .. "." .. flip(m64, 2), "a MAC altered", "signature" },
    { "c3." .. flip(p64, 5) .. "." .. m64, "a payload altered", "signature" },
    { "c3." .. other_payload .. "." .. m64, "another position with this MAC", "signature" },
    { "c3." .. p64 .. "." .. m64:sub(1, -3), "a short MAC", "malformed" },
    { "c3." .. p64 .. "." .. m64 .. "AAAA", "a long MAC", "malformed" },
    { "c3." .. p64, "no MAC", "malformed" },
    { "c2." .. p64 .. "." .. m64, "another format", "malformed" },
    { "c3." .. p64 .. "." .. m64 .. ".x", "a third part", "malformed" },
    { "c3.!!." .. m64, "not base64url", "malformed" },
    { "", "empty", "malformed" },
    { "c3.\0." .. m64, "a NUL", "malformed" },
    { "c3.\255\254." .. m64, "not UTF-8", "malformed" },
    { "c3." .. string.rep("A", 100000) .. "." .. m64, "100 KB", "too long" },
    { 42, "a number", "not a string" },
    { nil, "nil", "not a string" },
  }
  for _, case in ipairs(cases) do
    local t, why = cursor.decode(key, case[4] or binding, case[1])
    lu.assertNil(t, case[2])
    lu.assertStrContains(why, case[3], false, case[2])
  end
  -- a caller's own bound: what it issued may be longer than the default
  local long = cursor.encode(key, binding, { v = ms.array { string.rep("x", 9000) } })
  lu.assertEquals(select(2, cursor.decode(key, binding, long)), "too long")
  lu.assertEquals(assert(cursor.decode(key, binding, long, 20000)).v[1], string.rep("x", 9000))
  lu.assertEquals(select(2, cursor.decode(key, binding, long, 100)), "too long")
  -- a payload signed with the key but that is no BSON document is malformed, not a crash
  local junk = "\1\2\3"
  local mac = core.hmac_sha256(key, "c3\0" .. #binding .. ":" .. binding .. junk):sub(1, cursor.MAC_BYTES)
  local t, why = cursor.decode(key, binding, "c3." .. cursor.b64(junk) .. "." .. cursor.b64(mac))
  lu.assertNil(t)
  lu.assertEquals(why, "malformed")
end

function TestCursorModule:test_misuse_raises()
  lu.assertErrorMsgContains("cursor.encode: key must be", cursor.encode, nil, "b", {})
  lu.assertErrorMsgContains("cursor.encode: key must be", cursor.encode, "", "b", {})
  lu.assertErrorMsgContains("cursor.encode: binding must be a string", cursor.encode, "k", 5, {})
  lu.assertErrorMsgContains("cursor.encode: payload must be a table", cursor.encode, "k", "b", "x")
  lu.assertErrorMsgContains("cursor.decode: key must be", cursor.decode, 5, "b", "c3.x.y")
  lu.assertErrorMsgContains("cursor.decode: max_text must be a number", cursor.decode, "k", "b", "c3.x.y", "9")
end
