/*
 * value.c - the value rules shared by every conversion (null, arrays, keys,
 * UTF-8, finite numbers, cycles, depth), int64 boxes and the module's null,
 * array and is_array; the encoders are encode.c's, the store's reader
 * read.c's, the document API's reader decode.c's, and bson_encode,
 * bson_decode and bson_roundtrip bson.c's.
 */
#include "ms.h"
#include "codec.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

/* mongostore.null is the NULL light userdata, as in lua-cjson: it survives
 * every copy, compares equal to itself and needs no registry lookup. */
void ms_push_null(lua_State *L) { lua_pushlightuserdata(L, NULL); }

int ms_is_null(lua_State *L, int idx) {
  return lua_type(L, idx) == LUA_TLIGHTUSERDATA && lua_touserdata(L, idx) == NULL;
}

void ms_mark_array(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  luaL_getmetatable(L, MS_ARRAY_MT);
  lua_setmetatable(L, idx);
}

/* The one rule (values.lua's is_array says the same): a table is marked as
 * an array when its metatable is the mark itself, or an array's shape,
 * which holds the mark at [0]. */
int ms_is_marked_array(lua_State *L, int idx) {
  int r = 0;
  if (lua_getmetatable(L, idx)) {
    luaL_getmetatable(L, MS_ARRAY_MT);
    r = lua_rawequal(L, -1, -2);
    if (!r) {
      lua_rawgeti(L, -2, 0);
      r = lua_rawequal(L, -1, -2);
      lua_pop(L, 1);
    }
    lua_pop(L, 2);
  }
  return r;
}

/* ---- the path of a conversion, for cycles and messages ---- */

void ms_path_init(ms_path_t *p, const char *root) {
  size_t n = strlen(root);
  if (n >= sizeof p->buf) n = sizeof p->buf - 1;
  memcpy(p->buf, root, n);
  p->buf[n] = '\0';
  p->len = n;
  p->depth = 0;
}

static void path_append(ms_path_t *p, const char *s, size_t n) {
  size_t room = sizeof p->buf - 1 - p->len;
  if (n > room) n = room;
  memcpy(p->buf + p->len, s, n);
  p->len += n;
  p->buf[p->len] = '\0';
}

/* Keys go into messages that get logged and stored, so the path stays
 * printable ASCII whatever the key holds: other bytes are written \xNN, and a
 * long key is cut. */
void ms_path_push_key(ms_path_t *p, const char *key, size_t keylen) {
  static const char hex[] = "0123456789abcdef";
  size_t i, shown = keylen > 40 ? 37 : keylen;
  path_append(p, ".", 1);
  for (i = 0; i < shown; i++) {
    unsigned char c = (unsigned char)key[i];
    if (c >= 0x20 && c < 0x7f) {
      path_append(p, (const char *)&key[i], 1);
    } else {
      char esc[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};
      path_append(p, esc, 4);
    }
  }
  if (shown < keylen) path_append(p, "...", 3);
}

void ms_path_push_index(ms_path_t *p, size_t i) {
  char tmp[32];
  int n = snprintf(tmp, sizeof tmp, "[%zu]", i);
  path_append(p, tmp, (size_t)n);
}

void ms_path_pop_key(ms_path_t *p, size_t oldlen) {
  p->len = oldlen;
  p->buf[oldlen] = '\0';
}

int ms_path_enter(ms_path_t *p, lua_State *L, int idx, ms_err_t *e) {
  const void *t = lua_topointer(L, idx);
  int i;
  for (i = 0; i < p->depth; i++) {
    if (p->seen[i] == t) {
      ms_err_set(e, "invalid", "%s: cycle: the table contains itself", p->buf);
      return -1;
    }
  }
  if (p->depth >= MS_MAX_DEPTH) {
    ms_err_set(e, "invalid", "%s: nested deeper than %d levels", p->buf, MS_MAX_DEPTH);
    return -1;
  }
  p->seen[p->depth++] = t;
  return 0;
}

void ms_path_leave(ms_path_t *p) { p->depth--; }

/* 1 when s is a storable string: UTF-8 (NUL allowed in a value, not in a
 * key). Most text is ASCII, which is UTF-8: eight bytes are looked at a
 * time for a high bit (and, in a key, a zero byte) before the full check. */
int ms_string_ok(const char *s, size_t len, int is_key) {
  const uint64_t ones = UINT64_C(0x0101010101010101), highs = UINT64_C(0x8080808080808080);
  uint64_t seen = 0, w;
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    memcpy(&w, s + i, 8);
    seen |= w;
    if (is_key) seen |= (w - ones) & ~w & highs;   /* a high bit for each zero byte (and maybe more) */
  }
  for (; i < len; i++) {
    unsigned char b = (unsigned char)s[i];
    seen |= b;
    if (is_key && b == 0) seen |= 0x80;
  }
  if ((seen & highs) == 0) return 1;
  if (is_key && memchr(s, '\0', len)) return 0;
  /* libbson's validator, with NUL allowed, also lets through C0 80 (the
   * "modified UTF-8" NUL), which is not UTF-8; in a string it accepted, a C0
   * byte can only be that pair. */
  return bson_utf8_validate(s, len, true) && !memchr(s, 0xC0, len);
}

int ms_check_string(const char *s, size_t len, int is_key, ms_path_t *p, ms_err_t *e) {
  if (ms_string_ok(s, len, is_key)) return 0;
  if (is_key && memchr(s, '\0', len)) {
    ms_err_set(e, "invalid", "%s: key contains a NUL byte", p->buf);
    return -1;
  }
  ms_err_set(e, "invalid", "%s: %s is not valid UTF-8", p->buf, is_key ? "key" : "string");
  return -1;
}

int ms_check_number(lua_Number n, ms_path_t *p, ms_err_t *e) {
  if (isnan(n) || isinf(n)) {
    ms_err_set(e, "invalid", "%s: %s cannot be stored (numbers must be finite)", p->buf,
               isnan(n) ? "NaN" : "infinity");
    return -1;
  }
  return 0;
}

/* A table is an array when it is marked with mongostore.array or when its
 * keys are exactly 1..n (a Lua sequence); a document when all keys are
 * strings. Anything else (mixed, sparse, boolean or float keys) is an error,
 * because it has no faithful BSON or JSON form. An empty unmarked table is a
 * document. */

int ms_table_kind(lua_State *L, int idx, size_t *n, ms_err_t *e) {
  size_t nkeys;
  return ms_table_kind_keys(L, idx, n, &nkeys, e);
}

int ms_table_kind_keys(lua_State *L, int idx, size_t *n, size_t *nkeys, ms_err_t *e) {
  size_t nstr = 0, nint = 0;
  lua_Integer maxk = 0;
  int marked = ms_is_marked_array(L, idx);
  idx = lua_absindex(L, idx);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    int kt = lua_type(L, -2);
    lua_pop(L, 1);
    if (kt == LUA_TSTRING) {
      nstr++;
    } else if (kt == LUA_TNUMBER && lua_isinteger(L, -1) && lua_tointeger(L, -1) >= 1) {
      lua_Integer k = lua_tointeger(L, -1);
      nint++;
      if (k > maxk) maxk = k;
    } else {
      ms_err_set(e, "invalid", "keys must be strings (found a %s key)", luaL_typename(L, -1));
      lua_pop(L, 1);
      return -1;
    }
  }
  if (nstr && (nint || marked)) {
    ms_err_set(e, "invalid", "a table mixes string keys with array items");
    return -1;
  }
  if (nint && (size_t)maxk != nint) {
    ms_err_set(e, "invalid", "an array has holes (%zu items, highest index %lld)", nint, (long long)maxk);
    return -1;
  }
  *n = nint;
  *nkeys = nstr;
  return (nint || marked) ? MS_KIND_ARRAY : MS_KIND_DOC;
}

/* ---- integers ---- */

/* Doubles hold every integer up to 2^53 exactly; past that an integer read
 * on LuaJIT (or Lua 5.1) is boxed so it survives a round trip. */
#define MS_EXACT_INT ((int64_t)1 << 53)

static int64_t *check_box(lua_State *L, int idx) {
  return (int64_t *)luaL_testudata(L, idx, MS_INT64_MT);
}

void ms_push_int64(lua_State *L, int64_t v) {
#if LUA_VERSION_NUM >= 503
  lua_pushinteger(L, (lua_Integer)v);
#else
  if (v > MS_EXACT_INT || v < -MS_EXACT_INT) {
    int64_t *box = (int64_t *)lua_newuserdata(L, sizeof *box);
    *box = v;
    luaL_setmetatable(L, MS_INT64_MT);
  } else {
    lua_pushnumber(L, (lua_Number)v);
  }
#endif
}

int ms_to_int64(lua_State *L, int idx, int64_t *v) {
  int64_t *box;
  if (lua_type(L, idx) == LUA_TNUMBER && lua_isinteger(L, idx)) {
#if LUA_VERSION_NUM >= 503
    *v = (int64_t)lua_tointeger(L, idx);
    return 1;
#else
    /* an integral double: exact only within 2^63 */
    lua_Number n = lua_tonumber(L, idx);
    if (n >= -9223372036854775808.0 && n < 9223372036854775808.0) {
      *v = (int64_t)n;
      return 1;
    }
    return 0;
#endif
  }
  if ((box = check_box(L, idx)) != NULL) {
    *v = *box;
    return 1;
  }
  return 0;
}

/* mongostore.int64(v): v a decimal string, a number or a box. On Lua 5.3+
 * the result is a plain integer; on LuaJIT a box when beyond 2^53. */
static int l_int64(lua_State *L) {
  int64_t v;
  if (lua_type(L, 1) == LUA_TSTRING) {
    size_t len;
    const char *s = lua_tolstring(L, 1, &len);
    char *end;
    long long x;
    errno = 0;
    x = strtoll(s, &end, 10);
    if (len == 0 || end != s + len || errno == ERANGE)
      return luaL_argerror(L, 1, "not a decimal 64-bit integer");
    v = (int64_t)x;
  } else if (!ms_to_int64(L, 1, &v)) {
    return luaL_argerror(L, 1, "expected an integer, a decimal string or an int64");
  }
  ms_push_int64(L, v);
  return 1;
}

static int64_t box_operand(lua_State *L, int idx) {
  int64_t v;
  if (!ms_to_int64(L, idx, &v)) luaL_error(L, "int64: cannot compare with a %s", luaL_typename(L, idx));
  return v;
}

static int box_tostring(lua_State *L) {
  char buf[32];
  snprintf(buf, sizeof buf, "%lld", (long long)*(int64_t *)luaL_checkudata(L, 1, MS_INT64_MT));
  lua_pushstring(L, buf);
  return 1;
}
static int box_eq(lua_State *L) { lua_pushboolean(L, box_operand(L, 1) == box_operand(L, 2)); return 1; }
static int box_lt(lua_State *L) { lua_pushboolean(L, box_operand(L, 1) < box_operand(L, 2)); return 1; }
static int box_le(lua_State *L) { lua_pushboolean(L, box_operand(L, 1) <= box_operand(L, 2)); return 1; }
static int box_tonumber(lua_State *L) {
  lua_pushnumber(L, (lua_Number)*(int64_t *)luaL_checkudata(L, 1, MS_INT64_MT));
  return 1;
}

static void open_int64(lua_State *L) {
  static const luaL_Reg meta[] = {
    {"__tostring", box_tostring}, {"__eq", box_eq}, {"__lt", box_lt}, {"__le", box_le}, {NULL, NULL}
  };
  if (luaL_newmetatable(L, MS_INT64_MT)) {
    luaL_setfuncs(L, meta, 0);
    lua_newtable(L);
    lua_pushcfunction(L, box_tonumber);
    lua_setfield(L, -2, "tonumber");
    lua_setfield(L, -2, "__index");
    lua_pushliteral(L, "mongostore.int64");
    lua_setfield(L, -2, "__name");
  }
  lua_pop(L, 1);
  lua_pushcfunction(L, l_int64);
  lua_setfield(L, -2, "int64");
}

static int table_enter(lua_State *L, int idx, ms_path_t *p, size_t *n, size_t *nkeys, ms_err_t *e);

int ms_table_enter(lua_State *L, int idx, ms_path_t *p, size_t *n, ms_err_t *e) {
  size_t nkeys;
  return table_enter(L, idx, p, n, &nkeys, e);
}

static int table_enter(lua_State *L, int idx, ms_path_t *p, size_t *n, size_t *nkeys, ms_err_t *e) {
  int kind;
  if (ms_path_enter(p, L, idx, e)) return -1;
  kind = ms_table_kind_keys(L, idx, n, nkeys, e);
  if (kind < 0) {
    ms_err_prefix(e, p->buf);
    ms_path_leave(p);
    return -1;
  }
  luaL_checkstack(L, 10, "mongostore: value too deep");
  return kind;
}

/* ---- module functions ---- */

static int l_array(lua_State *L) {
  if (lua_isnoneornil(L, 1)) lua_newtable(L);
  else luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  if (lua_isnil(L, 1)) { lua_pop(L, 1); lua_newtable(L); }
  ms_mark_array(L, 1);
  return 1;
}

static int l_is_array(lua_State *L) {
  lua_pushboolean(L, lua_type(L, 1) == LUA_TTABLE && ms_is_marked_array(L, 1));
  return 1;
}

void ms_open_value(lua_State *L) {
  if (luaL_newmetatable(L, MS_ARRAY_MT)) {
    lua_pushliteral(L, "array");
    lua_setfield(L, -2, "__name");
  }
  lua_pop(L, 1);
  ms_push_null(L);
  lua_setfield(L, -2, "null");
  lua_pushcfunction(L, l_array);
  lua_setfield(L, -2, "array");
  lua_pushcfunction(L, l_is_array);
  lua_setfield(L, -2, "is_array");
  open_int64(L);
}
