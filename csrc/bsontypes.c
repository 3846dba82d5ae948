/*
 * bsontypes.c - the boxes: typed values for the BSON types Lua has no type
 * for (ObjectId, Date, Binary, Decimal128, Int32, Timestamp, Regex, MinKey,
 * MaxKey, and the legacy Code, CodeWScope, Symbol, Undefined, DBPointer),
 * their constructors, tostring, ==, and their BSON form both ways.
 */
#include "ms.h"
#include "codec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One layout for every box: a kind, two counters (lengths, a subtype, a
 * timestamp's halves), a fixed value, then the box's bytes (strings, the
 * scope document). Boxes are zeroed when made, so == may compare bytes. */
typedef struct box {
  int kind;
  uint32_t a, b;
  union {
    int64_t i64;
    int32_t i32;
    bson_oid_t oid;
    bson_decimal128_t dec;
  } v;
  char s[];
} box_t;

/* A box's metatable holds its kind under this key: a light userdata no Lua
 * code can make, so a metatable set from Lua cannot pass for a box's. */
static const char box_key = 0;

static const char *const box_names[MS_BOX_LAST + 1] = {
  NULL, "mongostore.ObjectId", "mongostore.Date", "mongostore.Binary", "mongostore.Decimal128",
  "mongostore.Int32", "mongostore.Timestamp", "mongostore.Regex", "mongostore.MinKey",
  "mongostore.MaxKey", "mongostore.Code", "mongostore.CodeWScope", "mongostore.Symbol",
  "mongostore.Undefined", "mongostore.DBPointer",
};

int ms_box_kind(lua_State *L, int idx) {
  int k = 0;
  if (lua_type(L, idx) != LUA_TUSERDATA || !lua_getmetatable(L, idx)) return 0;
  lua_rawgetp(L, -1, &box_key);
  if (lua_type(L, -1) == LUA_TNUMBER) k = (int)lua_tointeger(L, -1);
  lua_pop(L, 2);
  return (k > 0 && k <= MS_BOX_LAST) ? k : 0;
}

static box_t *box_new(lua_State *L, int kind, size_t extra) {
  box_t *b = (box_t *)lua_newuserdatauv(L, sizeof *b + extra, 0);
  memset(b, 0, sizeof *b + extra);
  b->kind = kind;
  luaL_setmetatable(L, box_names[kind]);
  return b;
}

/* A box holding one string, or two (a then b bytes, each NUL-ended). */
static box_t *box_new_strings(lua_State *L, int kind, const char *s1, size_t n1, const char *s2, size_t n2) {
  box_t *b = box_new(L, kind, n1 + n2 + 2);
  b->a = (uint32_t)n1;
  b->b = (uint32_t)n2;
  if (n1) memcpy(b->s, s1, n1);
  if (n2) memcpy(b->s + n1 + 1, s2, n2);
  return b;
}

static box_t *box_at(lua_State *L, int idx, int kind) {
  int k = ms_box_kind(L, idx);
  if (k != kind) {
    luaL_error(L, "%s expected, got %s", box_names[kind], k ? box_names[k] : luaL_typename(L, idx));
    return NULL;
  }
  return (box_t *)lua_touserdata(L, idx);
}

static void push_singleton(lua_State *L, int kind) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &box_names[kind]);
}

static void push_oid(lua_State *L, const bson_oid_t *oid) {
  box_t *b = box_new(L, MS_BOX_OBJECTID, 0);
  bson_oid_copy(oid, &b->v.oid);
}

/* ---- BSON -> box ---- */

int ms_push_box(lua_State *L, const bson_iter_t *it) {
  box_t *b;
  uint32_t n1, n2;
  const char *s1;
  const uint8_t *u;
  switch (bson_iter_type(it)) {
  case BSON_TYPE_OID: push_oid(L, bson_iter_oid(it)); return 1;
  case BSON_TYPE_DATE_TIME:
    b = box_new(L, MS_BOX_DATE, 0);
    b->v.i64 = bson_iter_date_time(it);
    return 1;
  case BSON_TYPE_BINARY: {
    bson_subtype_t st;
    bson_iter_binary(it, &st, &n1, &u);
    b = box_new_strings(L, MS_BOX_BINARY, (const char *)u, n1, NULL, 0);
    b->b = (uint32_t)st;
    return 1;
  }
  case BSON_TYPE_DECIMAL128:
    b = box_new(L, MS_BOX_DECIMAL, 0);
    bson_iter_decimal128(it, &b->v.dec);
    return 1;
  case BSON_TYPE_TIMESTAMP:
    b = box_new(L, MS_BOX_TIMESTAMP, 0);
    bson_iter_timestamp(it, &b->a, &b->b);
    return 1;
  case BSON_TYPE_REGEX: {
    const char *opts;
    s1 = bson_iter_regex(it, &opts);
    box_new_strings(L, MS_BOX_REGEX, s1, strlen(s1), opts, strlen(opts));
    return 1;
  }
  case BSON_TYPE_MINKEY: push_singleton(L, MS_BOX_MINKEY); return 1;
  case BSON_TYPE_MAXKEY: push_singleton(L, MS_BOX_MAXKEY); return 1;
  case BSON_TYPE_UNDEFINED: push_singleton(L, MS_BOX_UNDEFINED); return 1;
  case BSON_TYPE_CODE:
    s1 = bson_iter_code(it, &n1);
    box_new_strings(L, MS_BOX_CODE, s1, n1, NULL, 0);
    return 1;
  case BSON_TYPE_SYMBOL:
    s1 = bson_iter_symbol(it, &n1);
    box_new_strings(L, MS_BOX_SYMBOL, s1, n1, NULL, 0);
    return 1;
  case BSON_TYPE_CODEWSCOPE:
    /* the scope is kept as its bytes: it writes back as it came */
    s1 = bson_iter_codewscope(it, &n1, &n2, &u);
    box_new_strings(L, MS_BOX_CODEWSCOPE, s1, n1, (const char *)u, n2);
    return 1;
  case BSON_TYPE_DBPOINTER: {
    const bson_oid_t *oid;
    bson_iter_dbpointer(it, &n1, &s1, &oid);
    b = box_new_strings(L, MS_BOX_DBPOINTER, s1, n1, NULL, 0);
    bson_oid_copy(oid, &b->v.oid);
    return 1;
  }
  default:
    return 0;
  }
}

/* ---- box -> BSON ---- */

/* Returns the box's kind (MS_BOX_*), 0 when not a box. */
int ms_append_box(lua_State *L, int idx, bson_t *doc, const char *key, size_t keylen) {
  int kind = ms_box_kind(L, idx), kl = (int)keylen;
  box_t *b;
  bson_value_t v;
  if (!kind) return 0;
  b = (box_t *)lua_touserdata(L, idx);
  switch (kind) {
  case MS_BOX_OBJECTID: bson_append_oid(doc, key, kl, &b->v.oid); break;
  case MS_BOX_DATE: bson_append_date_time(doc, key, kl, b->v.i64); break;
  case MS_BOX_BINARY:
    bson_append_binary(doc, key, kl, (bson_subtype_t)b->b, (const uint8_t *)b->s, b->a);
    break;
  case MS_BOX_DECIMAL: bson_append_decimal128(doc, key, kl, &b->v.dec); break;
  case MS_BOX_INT32: bson_append_int32(doc, key, kl, b->v.i32); break;
  case MS_BOX_TIMESTAMP: bson_append_timestamp(doc, key, kl, b->a, b->b); break;
  case MS_BOX_REGEX: bson_append_regex_w_len(doc, key, kl, b->s, (int)b->a, b->s + b->a + 1); break;
  case MS_BOX_MINKEY: bson_append_minkey(doc, key, kl); break;
  case MS_BOX_MAXKEY: bson_append_maxkey(doc, key, kl); break;
  case MS_BOX_UNDEFINED: bson_append_undefined(doc, key, kl); break;
  case MS_BOX_CODE:
    v.value_type = BSON_TYPE_CODE;
    v.value.v_code.code = b->s;
    v.value.v_code.code_len = b->a;
    bson_append_value(doc, key, kl, &v);
    break;
  case MS_BOX_SYMBOL:
    v.value_type = BSON_TYPE_SYMBOL;
    v.value.v_symbol.symbol = b->s;
    v.value.v_symbol.len = b->a;
    bson_append_value(doc, key, kl, &v);
    break;
  case MS_BOX_CODEWSCOPE:
    v.value_type = BSON_TYPE_CODEWSCOPE;
    v.value.v_codewscope.code = b->s;
    v.value.v_codewscope.code_len = b->a;
    v.value.v_codewscope.scope_data = (uint8_t *)(b->s + b->a + 1);
    v.value.v_codewscope.scope_len = b->b;
    bson_append_value(doc, key, kl, &v);
    break;
  case MS_BOX_DBPOINTER:
    v.value_type = BSON_TYPE_DBPOINTER;
    v.value.v_dbpointer.collection = b->s;
    v.value.v_dbpointer.collection_len = b->a;
    bson_oid_copy(&b->v.oid, &v.value.v_dbpointer.oid);
    bson_append_value(doc, key, kl, &v);
    break;
  default: return 0;
  }
  return kind;
}

/* ---- constructors ---- */

static int invalid(lua_State *L, const char *fmt, const char *what) {
  ms_err_t e;
  ms_err_set(&e, "invalid", fmt, what);
  return ms_push_error(L, &e);
}

/* An integer argument (a number or an int64 box) within [lo, hi]: 1 with *v
 * set; 0 when it is a number out of range or not integral (nil, msg,
 * invalid); raises for any other Lua type, naming the argument. */
static int int_arg(lua_State *L, int idx, const char *fn, const char *name, int64_t lo, int64_t hi, int64_t *v) {
  if (lua_type(L, idx) != LUA_TNUMBER && ms_box_kind(L, idx) == 0 && !luaL_testudata(L, idx, MS_INT64_MT))
    luaL_error(L, "%s: %s must be an integer, got %s", fn, name, luaL_typename(L, idx));
  return ms_to_int64(L, idx, v) && *v >= lo && *v <= hi;
}

static const char *str_arg(lua_State *L, int idx, const char *fn, const char *name, size_t *len) {
  if (lua_type(L, idx) != LUA_TSTRING)
    luaL_error(L, "%s: %s must be a string, got %s", fn, name, luaL_typename(L, idx));
  return lua_tolstring(L, idx, len);
}

static int l_objectid(lua_State *L) {
  bson_oid_t oid;
  if (lua_isnoneornil(L, 1)) {
    bson_oid_init(&oid, NULL);
  } else {
    size_t len;
    const char *s = str_arg(L, 1, "objectid", "hex", &len);
    if (len != 24 || !bson_oid_is_valid(s, len)) return invalid(L, "objectid: %s", "hex must be 24 hex digits");
    bson_oid_init_from_string(&oid, s);
  }
  push_oid(L, &oid);
  return 1;
}

static int l_date(lua_State *L) {
  int64_t ms;
  if (lua_isnoneornil(L, 1)) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  } else if (!int_arg(L, 1, "date", "ms", INT64_MIN, INT64_MAX, &ms)) {
    return invalid(L, "date: %s", "ms must be an integer (UTC milliseconds)");
  }
  box_new(L, MS_BOX_DATE, 0)->v.i64 = ms;
  return 1;
}

static int l_binary(lua_State *L) {
  size_t len;
  const char *s = str_arg(L, 1, "binary", "data", &len);
  int64_t st = 0;
  if (!lua_isnoneornil(L, 2) && !int_arg(L, 2, "binary", "subtype", 0, 255, &st))
    return invalid(L, "binary: %s", "subtype must be an integer from 0 to 255");
  if (len > UINT32_MAX / 2) return invalid(L, "binary: %s", "data too long");
  box_new_strings(L, MS_BOX_BINARY, s, len, NULL, 0)->b = (uint32_t)st;
  return 1;
}

static int l_decimal(lua_State *L) {
  size_t len;
  const char *s = str_arg(L, 1, "decimal", "text", &len);
  bson_decimal128_t d;
  if (len > 256 || !bson_decimal128_from_string_w_len(s, (int)len, &d))
    return invalid(L, "decimal: %s", "text is not a decimal number");
  box_new(L, MS_BOX_DECIMAL, 0)->v.dec = d;
  return 1;
}

static int l_int32(lua_State *L) {
  int64_t v;
  if (!int_arg(L, 1, "int32", "n", INT32_MIN, INT32_MAX, &v))
    return invalid(L, "int32: %s", "n must be an integer within the int32 range");
  box_new(L, MS_BOX_INT32, 0)->v.i32 = (int32_t)v;
  return 1;
}

static int l_timestamp(lua_State *L) {
  int64_t t, i;
  box_t *b;
  if (!int_arg(L, 1, "timestamp", "t", 0, UINT32_MAX, &t))
    return invalid(L, "timestamp: %s", "t must be an integer from 0 to 2^32-1");
  if (!int_arg(L, 2, "timestamp", "i", 0, UINT32_MAX, &i))
    return invalid(L, "timestamp: %s", "i must be an integer from 0 to 2^32-1");
  b = box_new(L, MS_BOX_TIMESTAMP, 0);
  b->a = (uint32_t)t;
  b->b = (uint32_t)i;
  return 1;
}

/* A string a box will hold: UTF-8, and without NUL where BSON ends it with one. */
static int text_ok(const char *s, size_t len, int cstring) {
  if (cstring && memchr(s, '\0', len)) return 0;
  return len < UINT32_MAX / 4 && bson_utf8_validate(s, len, !cstring) && !memchr(s, 0xC0, len);
}

static int l_regex(lua_State *L) {
  static const char order[] = "ilmsux";
  size_t plen, flen = 0, i;
  const char *p = str_arg(L, 1, "regex", "pattern", &plen);
  const char *f = lua_isnoneornil(L, 2) ? "" : str_arg(L, 2, "regex", "flags", &flen);
  char sorted[8];
  size_t n = 0;
  if (!text_ok(p, plen, 1)) return invalid(L, "regex: %s", "pattern must be UTF-8 without NUL");
  for (i = 0; i < flen; i++)
    if (!strchr(order, f[i]) || f[i] == '\0' || memchr(f, f[i], i))
      return invalid(L, "regex: %s", "flags must be distinct letters of ilmsux");
  /* BSON keeps them in alphabetical order, and libbson writes them so */
  for (i = 0; order[i]; i++)
    if (memchr(f, order[i], flen)) sorted[n++] = order[i];
  box_new_strings(L, MS_BOX_REGEX, p, plen, sorted, n);
  return 1;
}

/* code(text [, scope]): Code, or CodeWScope with the scope table encoded now. */
static int l_code(lua_State *L) {
  size_t len;
  const char *s = str_arg(L, 1, "code", "text", &len);
  if (!text_ok(s, len, 0)) return invalid(L, "code: %s", "text must be UTF-8");
  if (lua_isnoneornil(L, 2)) {
    box_new_strings(L, MS_BOX_CODE, s, len, NULL, 0);
  } else {
    bson_t scope = BSON_INITIALIZER;
    ms_err_t e;
    int found;
    if (lua_type(L, 2) != LUA_TTABLE)
      return luaL_error(L, "code: scope must be a table or nil, got %s", luaL_typename(L, 2));
    /* a scope is a document of the document API's: boxes in it are values */
    if (ms_document_to_bson(L, 2, &scope, "code: scope", &found, &e)) {
      bson_destroy(&scope);
      return ms_push_error(L, &e);
    }
    box_new_strings(L, MS_BOX_CODEWSCOPE, s, len, (const char *)bson_get_data(&scope), scope.len);
    bson_destroy(&scope);
  }
  return 1;
}

static int l_symbol(lua_State *L) {
  size_t len;
  const char *s = str_arg(L, 1, "symbol", "text", &len);
  if (!text_ok(s, len, 0)) return invalid(L, "symbol: %s", "text must be UTF-8");
  box_new_strings(L, MS_BOX_SYMBOL, s, len, NULL, 0);
  return 1;
}

/* dbpointer(collection, id): id an ObjectId or its 24 hex digits. */
static int l_dbpointer(lua_State *L) {
  size_t len;
  const char *s = str_arg(L, 1, "dbpointer", "collection", &len);
  bson_oid_t oid;
  box_t *b;
  if (!text_ok(s, len, 1)) return invalid(L, "dbpointer: %s", "collection must be UTF-8 without NUL");
  if (ms_box_kind(L, 2) == MS_BOX_OBJECTID) {
    oid = ((box_t *)lua_touserdata(L, 2))->v.oid;
  } else {
    size_t hl;
    const char *h = str_arg(L, 2, "dbpointer", "id", &hl);
    if (hl != 24 || !bson_oid_is_valid(h, hl)) return invalid(L, "dbpointer: %s", "id must be 24 hex digits");
    bson_oid_init_from_string(&oid, h);
  }
  b = box_new_strings(L, MS_BOX_DBPOINTER, s, len, NULL, 0);
  b->v.oid = oid;
  return 1;
}

/* ---- methods ---- */

static int m_hex(lua_State *L) {
  char hex[25];
  bson_oid_to_string(&box_at(L, 1, MS_BOX_OBJECTID)->v.oid, hex);
  lua_pushstring(L, hex);
  return 1;
}
static int m_time(lua_State *L) {
  ms_push_int64(L, (int64_t)bson_oid_get_time_t(&box_at(L, 1, MS_BOX_OBJECTID)->v.oid));
  return 1;
}
static int m_ms(lua_State *L) { ms_push_int64(L, box_at(L, 1, MS_BOX_DATE)->v.i64); return 1; }
static int m_data(lua_State *L) {
  box_t *b = box_at(L, 1, MS_BOX_BINARY);
  lua_pushlstring(L, b->s, b->a);
  return 1;
}
static int m_subtype(lua_State *L) { lua_pushinteger(L, (lua_Integer)box_at(L, 1, MS_BOX_BINARY)->b); return 1; }
static int m_int32_value(lua_State *L) { lua_pushinteger(L, box_at(L, 1, MS_BOX_INT32)->v.i32); return 1; }
static int m_t(lua_State *L) { ms_push_int64(L, box_at(L, 1, MS_BOX_TIMESTAMP)->a); return 1; }
static int m_i(lua_State *L) { ms_push_int64(L, box_at(L, 1, MS_BOX_TIMESTAMP)->b); return 1; }
static int m_pattern(lua_State *L) {
  box_t *b = box_at(L, 1, MS_BOX_REGEX);
  lua_pushlstring(L, b->s, b->a);
  return 1;
}
static int m_flags(lua_State *L) {
  box_t *b = box_at(L, 1, MS_BOX_REGEX);
  lua_pushlstring(L, b->s + b->a + 1, b->b);
  return 1;
}
static int m_code(lua_State *L) {
  box_t *b;
  int k = ms_box_kind(L, 1);
  b = box_at(L, 1, k == MS_BOX_CODEWSCOPE ? MS_BOX_CODEWSCOPE : MS_BOX_CODE);
  lua_pushlstring(L, b->s, b->a);
  return 1;
}
static int m_scope(lua_State *L) {
  box_t *b = box_at(L, 1, MS_BOX_CODEWSCOPE);
  bson_t scope;
  ms_err_t e;
  if (!bson_init_static(&scope, (const uint8_t *)(b->s + b->a + 1), b->b) || ms_push_document(L, &scope, &e))
    return luaL_error(L, "scope: corrupt scope document");
  return 1;
}
static int m_symbol(lua_State *L) {
  box_t *b = box_at(L, 1, MS_BOX_SYMBOL);
  lua_pushlstring(L, b->s, b->a);
  return 1;
}
static int m_collection(lua_State *L) {
  box_t *b = box_at(L, 1, MS_BOX_DBPOINTER);
  lua_pushlstring(L, b->s, b->a);
  return 1;
}
static int m_id(lua_State *L) {
  push_oid(L, &box_at(L, 1, MS_BOX_DBPOINTER)->v.oid);
  return 1;
}

/* ---- metamethods, shared by every kind ---- */

/* UTC calendar date of a day count since 1970-01-01 (proleptic Gregorian),
 * valid for every day an int64 of milliseconds reaches. */
static void civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d) {
  int64_t era, yoe, doy, mp;
  z += 719468;
  era = (z >= 0 ? z : z - 146096) / 146097;
  yoe = z - era * 146097;
  yoe = (yoe - yoe / 1460 + yoe / 36524 - yoe / 146096) / 365;
  doy = z - era * 146097 - (365 * yoe + yoe / 4 - yoe / 100);
  mp = (5 * doy + 2) / 153;
  *d = (unsigned)(doy - (153 * mp + 2) / 5 + 1);
  *m = (unsigned)(mp < 10 ? mp + 3 : mp - 9);
  *y = yoe + era * 400 + (*m <= 2);
}

static void date_text(int64_t ms, char *out, size_t n) {
  int64_t days = ms / 86400000, rem = ms % 86400000, y;
  unsigned mo, d;
  if (rem < 0) { rem += 86400000; days--; }
  civil_from_days(days, &y, &mo, &d);
  snprintf(out, n, "%04lld-%02u-%02uT%02u:%02u:%02u.%03uZ", (long long)y, mo, d,
           (unsigned)(rem / 3600000), (unsigned)(rem / 60000 % 60), (unsigned)(rem / 1000 % 60),
           (unsigned)(rem % 1000));
}

static int mm_tostring(lua_State *L) {
  int kind = ms_box_kind(L, 1);
  box_t *b;
  char buf[64];
  if (!kind) return luaL_error(L, "tostring: not a mongostore box");
  b = (box_t *)lua_touserdata(L, 1);
  switch (kind) {
  case MS_BOX_OBJECTID: bson_oid_to_string(&b->v.oid, buf); lua_pushstring(L, buf); break;
  case MS_BOX_DATE: date_text(b->v.i64, buf, sizeof buf); lua_pushstring(L, buf); break;
  case MS_BOX_BINARY: lua_pushfstring(L, "Binary(%d, %d bytes)", (int)b->b, (int)b->a); break;
  case MS_BOX_DECIMAL: {
    char s[BSON_DECIMAL128_STRING];
    bson_decimal128_to_string(&b->v.dec, s);
    lua_pushstring(L, s);
    break;
  }
  case MS_BOX_INT32: lua_pushfstring(L, "%d", (int)b->v.i32); break;
  case MS_BOX_TIMESTAMP:
    snprintf(buf, sizeof buf, "Timestamp(%u, %u)", (unsigned)b->a, (unsigned)b->b);
    lua_pushstring(L, buf);
    break;
  case MS_BOX_REGEX: lua_pushfstring(L, "/%s/%s", b->s, b->s + b->a + 1); break;
  case MS_BOX_MINKEY: lua_pushliteral(L, "MinKey"); break;
  case MS_BOX_MAXKEY: lua_pushliteral(L, "MaxKey"); break;
  case MS_BOX_UNDEFINED: lua_pushliteral(L, "undefined"); break;
  case MS_BOX_CODE:
  case MS_BOX_CODEWSCOPE:
  case MS_BOX_SYMBOL: lua_pushlstring(L, b->s, b->a); break;
  case MS_BOX_DBPOINTER: {
    char hex[25];
    bson_oid_to_string(&b->v.oid, hex);
    lua_pushfstring(L, "DBPointer(%s, %s)", b->s, hex);
    break;
  }
  }
  return 1;
}

static int mm_eq(lua_State *L) {
  int k1 = ms_box_kind(L, 1), k2 = ms_box_kind(L, 2);
  box_t *x, *y;
  int eq = 0;
  if (k1 && k1 == k2) {
    x = (box_t *)lua_touserdata(L, 1);
    y = (box_t *)lua_touserdata(L, 2);
    eq = x->a == y->a && x->b == y->b && memcmp(&x->v, &y->v, sizeof x->v) == 0;
    if (eq && (k1 == MS_BOX_BINARY || k1 == MS_BOX_REGEX || k1 == MS_BOX_CODE || k1 == MS_BOX_CODEWSCOPE ||
               k1 == MS_BOX_SYMBOL || k1 == MS_BOX_DBPOINTER))
      /* a binary's b is its subtype, not a length */
      eq = memcmp(x->s, y->s, (size_t)x->a + (k1 == MS_BOX_BINARY ? 0 : x->b) + 2) == 0;
  }
  lua_pushboolean(L, eq);
  return 1;
}

/* Order for the kinds that have one: dates, ObjectIds (their bytes, hence
 * time first) and timestamps. */
static int box_cmp(lua_State *L) {
  int k = ms_box_kind(L, 1);
  box_t *x, *y;
  if (!k || k != ms_box_kind(L, 2) || (k != MS_BOX_DATE && k != MS_BOX_OBJECTID && k != MS_BOX_TIMESTAMP))
    return luaL_error(L, "attempt to compare %s with %s", luaL_typename(L, 1), luaL_typename(L, 2));
  x = (box_t *)lua_touserdata(L, 1);
  y = (box_t *)lua_touserdata(L, 2);
  if (k == MS_BOX_DATE) return (x->v.i64 > y->v.i64) - (x->v.i64 < y->v.i64);
  if (k == MS_BOX_OBJECTID) {
    int c = bson_oid_compare(&x->v.oid, &y->v.oid);
    return (c > 0) - (c < 0);
  }
  if (x->a != y->a) return x->a < y->a ? -1 : 1;
  return (x->b > y->b) - (x->b < y->b);
}
static int mm_lt(lua_State *L) { lua_pushboolean(L, box_cmp(L) < 0); return 1; }
static int mm_le(lua_State *L) { lua_pushboolean(L, box_cmp(L) <= 0); return 1; }

/* ---- opening ---- */

static const luaL_Reg oid_methods[] = {{"hex", m_hex}, {"time", m_time}, {NULL, NULL}};
static const luaL_Reg date_methods[] = {{"ms", m_ms}, {NULL, NULL}};
static const luaL_Reg binary_methods[] = {{"data", m_data}, {"subtype", m_subtype}, {NULL, NULL}};
static const luaL_Reg int32_methods[] = {{"tonumber", m_int32_value}, {NULL, NULL}};
static const luaL_Reg ts_methods[] = {{"t", m_t}, {"i", m_i}, {NULL, NULL}};
static const luaL_Reg regex_methods[] = {{"pattern", m_pattern}, {"flags", m_flags}, {NULL, NULL}};
static const luaL_Reg code_methods[] = {{"code", m_code}, {NULL, NULL}};
static const luaL_Reg cws_methods[] = {{"code", m_code}, {"scope", m_scope}, {NULL, NULL}};
static const luaL_Reg symbol_methods[] = {{"symbol", m_symbol}, {NULL, NULL}};
static const luaL_Reg dbp_methods[] = {{"collection", m_collection}, {"id", m_id}, {NULL, NULL}};
static const luaL_Reg no_methods[] = {{NULL, NULL}};

static const luaL_Reg *const box_methods[MS_BOX_LAST + 1] = {
  NULL, oid_methods, date_methods, binary_methods, no_methods, int32_methods, ts_methods,
  regex_methods, no_methods, no_methods, code_methods, cws_methods, symbol_methods, no_methods, dbp_methods,
};

void ms_open_bsontypes(lua_State *L) {
  static const luaL_Reg meta[] = {
    {"__tostring", mm_tostring}, {"__eq", mm_eq}, {"__lt", mm_lt}, {"__le", mm_le}, {NULL, NULL}
  };
  static const luaL_Reg ctors[] = {
    {"objectid", l_objectid}, {"date", l_date}, {"binary", l_binary}, {"decimal", l_decimal},
    {"int32", l_int32}, {"timestamp", l_timestamp}, {"regex", l_regex}, {"code", l_code},
    {"symbol", l_symbol}, {"dbpointer", l_dbpointer}, {NULL, NULL}
  };
  int k;
  for (k = 1; k <= MS_BOX_LAST; k++) {
    if (luaL_newmetatable(L, box_names[k])) {
      luaL_setfuncs(L, meta, 0);
      lua_newtable(L);
      luaL_setfuncs(L, box_methods[k], 0);
      lua_setfield(L, -2, "__index");
      lua_pushinteger(L, k);
      lua_rawsetp(L, -2, &box_key);
      lua_pushstring(L, box_names[k]);
      lua_setfield(L, -2, "__name");
    }
    lua_pop(L, 1);
  }
  /* MinKey, MaxKey and undefined have one value each, made once per state */
  for (k = 0; k < 3; k++) {
    static const int kinds[3] = {MS_BOX_MINKEY, MS_BOX_MAXKEY, MS_BOX_UNDEFINED};
    static const char *const names[3] = {"minkey", "maxkey", "undefined"};
    push_singleton(L, kinds[k]);
    if (lua_isnil(L, -1)) {
      lua_pop(L, 1);
      box_new(L, kinds[k], 0);
      lua_pushvalue(L, -1);
      lua_rawsetp(L, LUA_REGISTRYINDEX, &box_names[kinds[k]]);
    }
    lua_setfield(L, -2, names[k]);
  }
  luaL_setfuncs(L, ctors, 0);
}
