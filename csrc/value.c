/*
 * value.c - the value rules shared by every conversion (null, arrays, keys,
 * UTF-8, finite numbers, cycles, depth), int64 boxes and the module's value
 * functions; the encoders are encode.c's, the store's reader read.c's and
 * the document API's reader decode.c's.
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

/* Round trip through BSON, for specs and for callers that want to check a
 * value before handing it to a store call. */
static int l_bson_roundtrip(lua_State *L) {
  bson_t doc = BSON_INITIALIZER;
  ms_err_t e;
  if (ms_table_to_bson(L, 1, &doc, "value", &e)) {
    bson_destroy(&doc);
    return ms_push_error(L, &e);
  }
  if (ms_push_bson_doc(L, &doc, &e)) {
    bson_destroy(&doc);
    return ms_push_error(L, &e);
  }
  bson_destroy(&doc);
  return 1;
}

/* bson_encode(doc) -> the BSON bytes of a table with string keys, or nil,
 * msg, code: the encoder every write uses (in the document API's form,
 * boxes taken, as bson_decode's opts.document reads them), for specs,
 * fuzzing and callers that keep documents of their own. */
static int l_bson_encode(lua_State *L) {
  bson_t doc = BSON_INITIALIZER;
  ms_err_t e;
  int found;
  if (lua_type(L, 1) != LUA_TTABLE)
    return luaL_error(L, "bson_encode: doc must be a table, got %s", luaL_typename(L, 1));
  luaL_checkstack(L, 4 * MS_MAX_DEPTH + 8, "mongostore: bson_encode");
  if (ms_document_to_bson(L, 1, &doc, "bson_encode", &found, &e)) {
    bson_destroy(&doc);
    return ms_push_error(L, &e);
  }
  lua_pushlstring(L, (const char *)bson_get_data(&doc), doc.len);
  bson_destroy(&doc);
  return 1;
}

/* The value rules over a whole document, so that whatever bson_decode returns
 * bson_encode takes back: UTF-8 keys and strings (libbson 1.23's
 * bson_validate lets a string value that is not UTF-8 through whatever the
 * flags, and binary reads as a Lua string), finite doubles, the depth limit. */
static int check_rules(bson_iter_t *it, int depth, int document, ms_path_t *p, ms_err_t *e) {
  while (bson_iter_next(it)) {
    size_t oldlen = p->len;
    const char *k = bson_iter_key(it);
    uint32_t klen = bson_iter_key_len(it), len = 0;
    const char *s = NULL;
    bson_iter_t child;
    int rc = 0;
    ms_path_push_key(p, k, klen);
    if (ms_check_string(k, klen, 1, p, e)) return -1;
    switch (bson_iter_type(it)) {
    case BSON_TYPE_UTF8: s = bson_iter_utf8(it, &len); break;
    /* the document form reads binary as a box and keeps a double's type,
     * so any bytes and any double write back */
    case BSON_TYPE_BINARY:
      if (!document) bson_iter_binary(it, NULL, &len, (const uint8_t **)&s);
      break;
    case BSON_TYPE_DOUBLE:
      if (!document) rc = ms_check_number(bson_iter_double(it), p, e);
      break;
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY:
      if (depth >= MS_MAX_DEPTH) {
        ms_err_set(e, "invalid", "%s: nested deeper than %d levels", p->buf, MS_MAX_DEPTH);
        return -1;
      }
      if (!bson_iter_recurse(it, &child)) {
        ms_err_set(e, "invalid", "%s: malformed document", p->buf);
        return -1;
      }
      rc = check_rules(&child, depth + 1, document, p, e);
      break;
    default: break;
    }
    if (rc == 0 && s && ms_check_string(s, len, 0, p, e)) rc = -1;
    if (rc) return -1;
    ms_path_pop_key(p, oldlen);
  }
  /* libbson 1.23's bson_validate misses a cut sub-document deep down */
  if (it->err_off != 0) {
    ms_err_set(e, "invalid", "%s: malformed document at byte %u", p->buf, (unsigned)it->err_off + 1);
    return -1;
  }
  return 0;
}

/* bson_decode(bytes [, opts]) -> table, or nil, msg, "invalid" when the bytes
 * are not exactly one well-formed document under the value rules. With
 * opts.document, the document API's form (ms_push_document): boxes, and
 * tables that remember their order and numeric types. */
static int l_bson_decode(lua_State *L) {
  size_t len;
  const char *s;
  bson_t doc;
  size_t off = 0;
  bson_iter_t it;
  ms_path_t p;
  ms_err_t e;
  int document = 0;
  if (lua_type(L, 1) != LUA_TSTRING)
    return luaL_error(L, "bson_decode: bytes must be a string, got %s", luaL_typename(L, 1));
  if (!lua_isnoneornil(L, 2)) {
    if (lua_type(L, 2) != LUA_TTABLE)
      return luaL_error(L, "bson_decode: opts must be a table or nil, got %s", luaL_typename(L, 2));
    lua_getfield(L, 2, "document");
    document = lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
  s = lua_tolstring(L, 1, &len);
  if (len > INT32_MAX || !bson_init_static(&doc, (const uint8_t *)s, len)) {
    ms_err_set(&e, "invalid", "bson_decode: not a BSON document (%zu bytes)", len);
    return ms_push_error(L, &e);
  }
  if (!bson_validate(&doc, BSON_VALIDATE_UTF8 | BSON_VALIDATE_UTF8_ALLOW_NULL, &off)) {
    ms_err_set(&e, "invalid", "bson_decode: malformed document at byte %zu", off + 1);
    return ms_push_error(L, &e);
  }
  ms_path_init(&p, "bson_decode");
  if (!bson_iter_init(&it, &doc) || check_rules(&it, 1, document, &p, &e)) return ms_push_error(L, &e);
  if ((document ? ms_push_document : ms_push_bson_doc)(L, &doc, &e)) {
    ms_err_prefix(&e, "bson_decode");
    return ms_push_error(L, &e);
  }
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
  lua_pushcfunction(L, l_bson_roundtrip);
  lua_setfield(L, -2, "bson_roundtrip");
  lua_pushcfunction(L, l_bson_encode);
  lua_setfield(L, -2, "bson_encode");
  lua_pushcfunction(L, l_bson_decode);
  lua_setfield(L, -2, "bson_decode");
  open_int64(L);
  ms_open_bsontypes(L);
  ms_open_decode(L);
}
