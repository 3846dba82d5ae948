/*
 * value.c - the value rules shared by every conversion (null, arrays, keys,
 * UTF-8, finite numbers, cycles, depth), the Lua -> BSON encoders and the
 * execution store's BSON -> Lua reader; the document API's reader is
 * decode.c's.
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
static int string_ok(const char *s, size_t len, int is_key) {
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
  if (string_ok(s, len, is_key)) return 0;
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
static int table_kind(lua_State *L, int idx, size_t *n, size_t *nkeys, ms_err_t *e);

int ms_table_kind(lua_State *L, int idx, size_t *n, ms_err_t *e) {
  size_t nkeys;
  return table_kind(L, idx, n, &nkeys, e);
}

static int table_kind(lua_State *L, int idx, size_t *n, size_t *nkeys, ms_err_t *e) {
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
  kind = table_kind(L, idx, n, nkeys, e);
  if (kind < 0) {
    ms_err_prefix(e, p->buf);
    ms_path_leave(p);
    return -1;
  }
  luaL_checkstack(L, 10, "mongostore: value too deep");
  return kind;
}

/* ---- Lua -> BSON ---- */

/* Marks a document's shape metatable (a light userdata key: no Lua code can
 * set it, so no other metatable passes for a shape); decode.c sets it. */
const char ms_shape_key = 0;

/* One encoding. The path of the value being written is kept as segments (a
 * key, or an array index) and printed into p only when an error is
 * reported, through the same ms_path_* calls as before, so a storable
 * document never pays for its messages and the messages are unchanged. */
typedef struct seg {
  const char *key;   /* a Lua string on the stack while it is a segment; NULL for an index */
  size_t len;        /* the key's length, or the 1-based index */
} seg_t;

/* A segment per table entered and one for its value: ms_path_enter stops
 * at MS_MAX_DEPTH tables. */
#define ENC_SEGS (MS_MAX_DEPTH + 4)

typedef struct enc {
  ms_path_t *p;
  ms_err_t *e;
  size_t base;       /* p->len when the encoding began: the segments follow */
  int nseg;
  int boxes;         /* the document API's encodings take boxes, the store's do not */
  int top;           /* the root table's keys are noted in found */
  int found;         /* MS_FOUND_* */
  seg_t seg[ENC_SEGS];
} enc_t;

static void enc_init(enc_t *c, ms_path_t *p, ms_err_t *e, int boxes) {
  c->p = p;
  c->e = e;
  c->base = p->len;
  c->nseg = 0;
  c->boxes = boxes;
  c->top = 0;
  c->found = 0;
}

static void seg_push(enc_t *c, const char *key, size_t len) {
  if (c->nseg < ENC_SEGS) {
    c->seg[c->nseg].key = key;
    c->seg[c->nseg].len = len;
  }
  c->nseg++;
}

/* Prints the segments into the path, for a message. */
static const char *path_show(enc_t *c) {
  int i, n = c->nseg < ENC_SEGS ? c->nseg : ENC_SEGS;
  ms_path_pop_key(c->p, c->base);
  for (i = 0; i < n; i++) {
    if (c->seg[i].key) ms_path_push_key(c->p, c->seg[i].key, c->seg[i].len);
    else ms_path_push_index(c->p, c->seg[i].len);
  }
  return c->p->buf;
}

static int path_hide(enc_t *c) {
  ms_path_pop_key(c->p, c->base);
  return -1;
}

static int fail_string(enc_t *c, const char *s, size_t len, int is_key) {
  path_show(c);
  ms_check_string(s, len, is_key, c->p, c->e);
  return path_hide(c);
}

/* Puts the table at idx on the path (the cycle guard, the depth bound). */
static int enc_enter(lua_State *L, enc_t *c, int idx) {
  ms_path_t *p = c->p;
  const void *t = lua_topointer(L, idx);
  int i;
  for (i = 0; i < p->depth; i++)
    if (p->seen[i] == t) break;
  if (i < p->depth || p->depth >= MS_MAX_DEPTH) {
    path_show(c);
    ms_path_enter(p, L, idx, c->e);                  /* fails as found, with its message */
    return path_hide(c);
  }
  p->seen[p->depth++] = t;
  luaL_checkstack(L, 10, "mongostore: value too deep");
  return 0;
}

/* Classifies the table entered at idx; on error it is left. */
static int enc_kind(lua_State *L, enc_t *c, int idx, size_t *n, size_t *nkeys) {
  int kind = table_kind(L, idx, n, nkeys, c->e);
  if (kind < 0) {
    ms_err_prefix(c->e, path_show(c));
    c->p->depth--;
    return path_hide(c);
  }
  return kind;
}

static int append_field(lua_State *L, int kidx, int vidx, bson_t *doc, enc_t *c, int hint);

/* A table with no metatable whose first key (on the stack with its value,
 * from lua_next) is a string is most likely a document: its fields are
 * written in the one pass that classifies it. When it is not one after all
 * (another key is not a string), or a field fails, the error is the one
 * the table's kind gives first, if any, as when the kind is read before
 * the fields: *bad is set then. */
static int append_plain_fields(lua_State *L, int idx, bson_t *doc, enc_t *c, int *bad) {
  int top = lua_gettop(L) - 2, rc = 0;
  *bad = 0;
  do {
    if (lua_type(L, -2) != LUA_TSTRING) {
      rc = -1;
      *bad = 1;
      break;
    }
    rc = append_field(L, -2, -1, doc, c, MS_SHAPE_OTHER);
    lua_pop(L, 1);
    if (rc) break;
  } while (lua_next(L, idx));
  lua_settop(L, top);
  if (rc) {
    size_t n, nkeys;
    ms_err_t ke;
    if (table_kind(L, idx, &n, &nkeys, &ke) < 0) {
      *c->e = ke;
      *bad = 1;
    }
  }
  return rc;
}

/* 1 when the table at idx has no metatable and a first key, which is a
 * string: then that key and its value are pushed. */
static int plain_candidate(lua_State *L, int idx) {
  if (lua_getmetatable(L, idx)) {
    lua_pop(L, 1);
    return 0;
  }
  lua_pushnil(L);
  if (!lua_next(L, idx)) return 0;
  if (lua_type(L, -2) == LUA_TSTRING) return 1;
  lua_pop(L, 2);
  return 0;
}

static int append_table(lua_State *L, int idx, bson_t *doc, const char *key, size_t keylen, enc_t *c);

/* The boxes whose BSON holds strings or a scope document. */
static int legacy_box(int kind) {
  return kind == MS_BOX_CODE || kind == MS_BOX_CODEWSCOPE || kind == MS_BOX_SYMBOL || kind == MS_BOX_REGEX ||
         kind == MS_BOX_DBPOINTER;
}

/* hint: the type letter a shape remembers for the field (MS_SHAPE_*): an
 * int32 stays one while the value fits, a double stays one even when
 * integral (LuaJIT, where every number is a double) or not finite (it came
 * from BSON that way); any other value is written by its own type. */
static int append_value(lua_State *L, int idx, bson_t *doc, const char *key, size_t keylen, enc_t *c, int hint) {
  int t = lua_type(L, idx);
  int kl = (int)keylen;
  switch (t) {
  case LUA_TBOOLEAN:
    bson_append_bool(doc, key, kl, lua_toboolean(L, idx));
    return 0;
  case LUA_TNUMBER: {
    int64_t iv;
    if (hint == MS_SHAPE_DOUBLE
#if LUA_VERSION_NUM >= 503
        && !lua_isinteger(L, idx)
#endif
    ) {
      double d = (double)lua_tonumber(L, idx);
#if LUA_VERSION_NUM < 503
      /* LuaJIT keeps one NaN of its own (its values are NaN-tagged): write
       * the quiet NaN other drivers write (Python's, Java's, JavaScript's) */
      if (isnan(d)) {
        uint64_t bits = UINT64_C(0x7ff8000000000000);
        memcpy(&d, &bits, sizeof d);
      }
#endif
      bson_append_double(doc, key, kl, d);
    } else if (ms_to_int64(L, idx, &iv)) {
      if (hint == MS_SHAPE_INT32 && iv >= INT32_MIN && iv <= INT32_MAX)
        bson_append_int32(doc, key, kl, (int32_t)iv);
      else
        bson_append_int64(doc, key, kl, iv);
    } else {
      lua_Number n = lua_tonumber(L, idx);
      if (isnan(n) || isinf(n)) {
        path_show(c);
        ms_check_number(n, c->p, c->e);
        return path_hide(c);
      }
      bson_append_double(doc, key, kl, (double)n);
    }
    return 0;
  }
  case LUA_TSTRING: {
    size_t len;
    const char *s = lua_tolstring(L, idx, &len);
    if (!string_ok(s, len, 0)) return fail_string(c, s, len, 0);
    bson_append_utf8(doc, key, kl, s, (int)len);
    return 0;
  }
  case LUA_TTABLE:
    return append_table(L, idx, doc, key, keylen, c);
  case LUA_TLIGHTUSERDATA:
    if (ms_is_null(L, idx)) {
      bson_append_null(doc, key, kl);
      return 0;
    }
    break;
  case LUA_TUSERDATA: {
    int64_t iv, kind;
    /* boxes are the document API's: the store's fields read back through
     * the plain codec, which has no form for them */
    if (c->boxes && (kind = ms_append_box(L, idx, doc, key, keylen)) != 0) {
      if (legacy_box((int)kind)) c->found |= MS_FOUND_LEGACY;
      return 0;
    }
    if (ms_to_int64(L, idx, &iv)) {
      bson_append_int64(doc, key, kl, iv);
      return 0;
    }
    break;
  }
  default:
    break;
  }
  ms_err_set(c->e, "invalid", "%s: a %s cannot be stored", path_show(c), luaL_typename(L, idx));
  return path_hide(c);
}

int ms_append_value(lua_State *L, int idx, bson_t *doc, const char *key, size_t keylen,
                    ms_path_t *p, ms_err_t *e) {
  enc_t c;
  enc_init(&c, p, e, 0);
  return append_value(L, idx, doc, key, keylen, &c, MS_SHAPE_OTHER);
}

int ms_document_append_value(lua_State *L, int idx, bson_t *doc, const char *key, size_t keylen, ms_path_t *p,
                             int *found, ms_err_t *e) {
  enc_t c;
  int rc;
  enc_init(&c, p, e, 1);
  rc = append_value(L, idx, doc, key, keylen, &c, MS_SHAPE_OTHER);
  *found |= c.found;
  return rc;
}

static int append_field(lua_State *L, int kidx, int vidx, bson_t *doc, enc_t *c, int hint) {
  size_t kl;
  const char *k = lua_tolstring(L, kidx, &kl);
  int rc;
  if (kl == 0) c->found |= MS_FOUND_EMPTY_KEY;
  if (c->top && c->nseg == 0) c->found |= k[0] == '$' ? MS_FOUND_TOP_DOLLAR : MS_FOUND_TOP_PLAIN;
  seg_push(c, k, kl);
  if (!string_ok(k, kl, 1)) rc = fail_string(c, k, kl, 1);
  else rc = append_value(L, vidx, doc, k, kl, c, hint);
  c->nseg--;
  return rc;
}

/* The fields of the document table at idx (nkeys string keys), in its
 * shape's order when it has one, then the keys the shape does not hold. */
static int append_fields(lua_State *L, int idx, bson_t *doc, size_t nkeys, enc_t *c) {
  int top = lua_gettop(L), rc = 0, shaped = 0;
  if (lua_getmetatable(L, idx)) {
    lua_rawgetp(L, top + 1, &ms_shape_key);
    lua_rawgeti(L, top + 1, 1);                       /* top + 3: the keys in order */
    lua_rawgeti(L, top + 1, 2);                       /* top + 4: a type letter per key */
    lua_rawgeti(L, top + 1, 3);                       /* top + 5: the keys as a set */
    shaped = lua_toboolean(L, top + 2) && lua_type(L, top + 3) == LUA_TTABLE &&
             lua_type(L, top + 5) == LUA_TTABLE;
  }
  if (shaped) {
    size_t tl = 0, written = 0, i, nk = (size_t)lua_rawlen(L, top + 3);
    const char *types = lua_type(L, top + 4) == LUA_TSTRING ? lua_tolstring(L, top + 4, &tl) : "";
    for (i = 1; i <= nk && rc == 0; i++) {
      lua_rawgeti(L, top + 3, (lua_Integer)i);
      if (lua_type(L, -1) == LUA_TSTRING) {
        lua_pushvalue(L, -1);
        lua_rawget(L, idx);
        if (!lua_isnil(L, -1)) {
          rc = append_field(L, -2, -1, doc, c, i <= tl ? types[i - 1] : MS_SHAPE_OTHER);
          written++;
        }
        lua_pop(L, 1);
      }
      lua_pop(L, 1);
    }
    if (rc == 0 && written < nkeys) {
      lua_pushnil(L);
      while (rc == 0 && lua_next(L, idx)) {
        lua_pushvalue(L, -2);
        lua_rawget(L, top + 5);
        if (lua_isnil(L, -1)) rc = append_field(L, -3, -2, doc, c, MS_SHAPE_OTHER);
        lua_pop(L, 2);
      }
    }
  } else {
    lua_settop(L, top);
    lua_pushnil(L);
    while (rc == 0 && lua_next(L, idx)) {
      rc = append_field(L, -2, -1, doc, c, MS_SHAPE_OTHER);
      lua_pop(L, 1);
    }
  }
  lua_settop(L, top);
  return rc;
}

static int append_table(lua_State *L, int idx, bson_t *doc, const char *key, size_t keylen, enc_t *c) {
  bson_t child;
  size_t n = 0, nkeys = 0;
  int kind, rc = 0, top;
  idx = lua_absindex(L, idx);
  if (enc_enter(L, c, idx)) return -1;
  /* below the root, keys are not the top level's */
  top = c->top;
  c->top = 0;
  if (plain_candidate(L, idx)) {
    int bad;
    bson_append_document_begin(doc, key, (int)keylen, &child);
    rc = append_plain_fields(L, idx, &child, c, &bad);
    bson_append_document_end(doc, &child);
    if (bad) {
      ms_err_prefix(c->e, path_show(c));
      path_hide(c);
    }
    c->top = top;
    ms_path_leave(c->p);
    return rc;
  }
  if ((kind = enc_kind(L, c, idx, &n, &nkeys)) < 0) {
    c->top = top;
    return -1;
  }
  if (kind == MS_KIND_ARRAY) {
    size_t i, tl = 0;
    const char *types = "";
    int stack = lua_gettop(L);
    /* an array's shape: a type letter per item at [2] */
    if (lua_getmetatable(L, idx)) {
      lua_rawgeti(L, -1, 2);
      if (lua_type(L, -1) == LUA_TSTRING) types = lua_tolstring(L, -1, &tl);
    }
    bson_append_array_begin(doc, key, (int)keylen, &child);
    for (i = 1; i <= n && rc == 0; i++) {
      char ibuf[24];
      const char *ikey;
      size_t ilen = bson_uint32_to_string((uint32_t)(i - 1), &ikey, ibuf, sizeof ibuf);
      lua_rawgeti(L, idx, (lua_Integer)i);
      seg_push(c, NULL, i);
      rc = append_value(L, -1, &child, ikey, ilen, c, i <= tl ? types[i - 1] : MS_SHAPE_OTHER);
      c->nseg--;
      lua_pop(L, 1);
    }
    bson_append_array_end(doc, &child);
    lua_settop(L, stack);
  } else {
    bson_append_document_begin(doc, key, (int)keylen, &child);
    rc = append_fields(L, idx, &child, nkeys, c);
    bson_append_document_end(doc, &child);
  }
  c->top = top;
  ms_path_leave(c->p);
  return rc;
}

static int encode_root(lua_State *L, int idx, bson_t *doc, const char *what, int boxes, int *found, ms_err_t *e) {
  ms_path_t p;
  enc_t c;
  size_t n, nkeys;
  int kind, rc;
  idx = lua_absindex(L, idx);
  ms_path_init(&p, what);
  if (lua_type(L, idx) != LUA_TTABLE) {
    ms_err_set(e, "invalid", "%s: expected a table, got %s", what, luaL_typename(L, idx));
    return -1;
  }
  if (ms_path_enter(&p, L, idx, e)) return -1;
  luaL_checkstack(L, 10, "mongostore: value too deep");
  enc_init(&c, &p, e, boxes);
  c.top = found != NULL;
  if (plain_candidate(L, idx)) {
    int bad;
    rc = append_plain_fields(L, idx, doc, &c, &bad);
    if (bad) ms_err_prefix(e, what);
  } else {
    kind = table_kind(L, idx, &n, &nkeys, e);
    if (kind != MS_KIND_DOC) {
      if (kind == MS_KIND_ARRAY) ms_err_set(e, "invalid", "%s: expected a table with string keys, got an array", what);
      else ms_err_prefix(e, what);
      return -1;
    }
    rc = append_fields(L, idx, doc, nkeys, &c);
  }
  if (found) *found = c.found;
  return rc;
}

int ms_table_to_bson(lua_State *L, int idx, bson_t *doc, const char *what, ms_err_t *e) {
  return encode_root(L, idx, doc, what, 0, NULL, e);
}

int ms_document_to_bson(lua_State *L, int idx, bson_t *doc, const char *what, int *found, ms_err_t *e) {
  return encode_root(L, idx, doc, what, 1, found, e);
}

/* ---- BSON -> Lua ---- */

static int push_bson_iter_table(lua_State *L, bson_iter_t *it, int is_array, int depth, ms_err_t *e) {
  lua_Integer i = 1;
  lua_newtable(L);
  while (bson_iter_next(it)) {
    if (is_array) {
      if (ms_push_bson_value(L, it, depth + 1, e)) { lua_pop(L, 1); return -1; }
      lua_rawseti(L, -2, i++);
    } else {
      lua_pushlstring(L, bson_iter_key(it), bson_iter_key_len(it));
      if (ms_push_bson_value(L, it, depth + 1, e)) { lua_pop(L, 2); return -1; }
      lua_rawset(L, -3);
    }
  }
  /* bson_iter_next ends on a corrupt element as it does at the end: without
   * this a cut document would read as a shorter one. */
  if (it->err_off != 0) {
    lua_pop(L, 1);
    ms_err_set(e, "server", "corrupt document from the server (at byte %u)", (unsigned)it->err_off);
    return -1;
  }
  if (is_array) ms_mark_array(L, -1);
  return 0;
}

int ms_push_bson_value(lua_State *L, const bson_iter_t *iter, int depth, ms_err_t *e) {
  bson_iter_t child;
  if (depth > MS_MAX_DEPTH) {
    ms_err_set(e, "invalid", "document nested deeper than %d levels", MS_MAX_DEPTH);
    return -1;
  }
  luaL_checkstack(L, 4, "mongostore: document too deep");
  switch (bson_iter_type(iter)) {
  case BSON_TYPE_DOUBLE: lua_pushnumber(L, bson_iter_double(iter)); break;
  case BSON_TYPE_UTF8: {
    uint32_t len;
    const char *s = bson_iter_utf8(iter, &len);
    lua_pushlstring(L, s, len);
    break;
  }
  case BSON_TYPE_DOCUMENT:
  case BSON_TYPE_ARRAY:
    /* The value at depth d is the (d+1)th table of the path: past
     * MS_MAX_DEPTH tables the encoder would refuse what was read. */
    if (depth >= MS_MAX_DEPTH) {
      ms_err_set(e, "invalid", "document nested deeper than %d levels", MS_MAX_DEPTH);
      return -1;
    }
    if (!bson_iter_recurse(iter, &child)) {
      ms_err_set(e, "server", "corrupt document from the server");
      return -1;
    }
    return push_bson_iter_table(L, &child, bson_iter_type(iter) == BSON_TYPE_ARRAY, depth, e);
  case BSON_TYPE_BINARY: {
    uint32_t len;
    const uint8_t *b;
    bson_iter_binary(iter, NULL, &len, &b);
    lua_pushlstring(L, (const char *)b, len);
    break;
  }
  case BSON_TYPE_OID: {
    char hex[25];
    bson_oid_to_string(bson_iter_oid(iter), hex);
    lua_pushstring(L, hex);
    break;
  }
  case BSON_TYPE_BOOL: lua_pushboolean(L, bson_iter_bool(iter)); break;
  case BSON_TYPE_DATE_TIME: lua_pushnumber(L, (double)bson_iter_date_time(iter) / 1000.0); break;
  case BSON_TYPE_INT32: ms_push_int64(L, (int64_t)bson_iter_int32(iter)); break;
  case BSON_TYPE_INT64: ms_push_int64(L, bson_iter_int64(iter)); break;
  case BSON_TYPE_TIMESTAMP: {
    uint32_t ts, inc;
    bson_iter_timestamp(iter, &ts, &inc);
    ms_push_int64(L, (int64_t)(((uint64_t)ts << 32) | inc));
    break;
  }
  case BSON_TYPE_DECIMAL128: {
    bson_decimal128_t d;
    char s[BSON_DECIMAL128_STRING];
    bson_iter_decimal128(iter, &d);
    bson_decimal128_to_string(&d, s);
    lua_pushstring(L, s);
    break;
  }
  case BSON_TYPE_NULL:
  case BSON_TYPE_UNDEFINED:
  default:
    /* Types with no Lua counterpart read as null rather than failing a load
     * of a document another program wrote. */
    ms_push_null(L);
    break;
  }
  return 0;
}

int ms_push_bson_doc(lua_State *L, const bson_t *doc, ms_err_t *e) {
  bson_iter_t it;
  if (!bson_iter_init(&it, doc)) {
    ms_err_set(e, "server", "corrupt document from the server");
    return -1;
  }
  return push_bson_iter_table(L, &it, 0, 0, e);
}

/* 1 when the table at idx is a non-empty list of {string, value} pairs. */
static int is_pair_list(lua_State *L, int idx, size_t *n) {
  size_t len = (size_t)lua_rawlen(L, idx), count = 0, i;
  if (len == 0) return 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) { count++; lua_pop(L, 1); }
  if (count != len) return 0;
  for (i = 1; i <= len; i++) {
    int ok;
    lua_rawgeti(L, idx, (lua_Integer)i);
    ok = lua_type(L, -1) == LUA_TTABLE && lua_rawlen(L, -1) == 2;
    if (ok) {
      lua_rawgeti(L, -1, 1);
      ok = lua_type(L, -1) == LUA_TSTRING;
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
    if (!ok) return 0;
  }
  *n = len;
  return 1;
}

int ms_ordered_to_bson(lua_State *L, int idx, bson_t *doc, const char *what, int mode, ms_err_t *e) {
  size_t n, i, keys = 0;
  ms_path_t p;
  enc_t c;
  idx = lua_absindex(L, idx);
  if (lua_type(L, idx) != LUA_TTABLE) {
    ms_err_set(e, "invalid", "%s: expected a table, got %s", what, luaL_typename(L, idx));
    return -1;
  }
  if (!is_pair_list(L, idx, &n)) {
    int found;
    lua_pushnil(L);
    while (lua_next(L, idx)) { keys++; lua_pop(L, 1); }
    if (mode == MS_ORDER_STRICT && keys > 1) {
      ms_err_set(e, "invalid", "%s: a table of %zu keys has no order: give a list of pairs "
                 "{ { key, value }, ... }", what, keys);
      return -1;
    }
    return ms_document_to_bson(L, idx, doc, what, &found, e);
  }
  ms_path_init(&p, what);
  if (ms_path_enter(&p, L, idx, e)) return -1;
  enc_init(&c, &p, e, 1);
  for (i = 1; i <= n; i++) {
    size_t kl;
    const char *k;
    int rc;
    lua_rawgeti(L, idx, (lua_Integer)i);
    lua_rawgeti(L, -1, 1);
    lua_rawgeti(L, -2, 2);
    k = lua_tolstring(L, -2, &kl);
    seg_push(&c, k, kl);
    if (!string_ok(k, kl, 1)) {
      rc = fail_string(&c, k, kl, 1);
    } else if (kl == 0) {
      ms_err_set(e, "invalid", "%s: an empty key", what);
      rc = -1;
    } else {
      rc = append_value(L, -1, doc, k, kl, &c, MS_SHAPE_OTHER);
    }
    c.nseg--;
    lua_pop(L, 3);
    if (rc) return -1;
  }
  ms_path_leave(&p);
  return 0;
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
