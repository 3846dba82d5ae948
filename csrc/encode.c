/*
 * encode.c - Lua -> BSON: the encoders every write goes through (the
 * store's strict one, the document API's, which takes boxes, and the
 * ordered pair-list form of commands and sorts), the path of the value
 * being written kept for messages; the value rules are value.c's.
 */
#include "ms.h"
#include "codec.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>


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
  int kind = ms_table_kind_keys(L, idx, n, nkeys, c->e);
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
    if (ms_table_kind_keys(L, idx, &n, &nkeys, &ke) < 0) {
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
    if (!ms_string_ok(s, len, 0)) return fail_string(c, s, len, 0);
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
  if (!ms_string_ok(k, kl, 1)) rc = fail_string(c, k, kl, 1);
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
    kind = ms_table_kind_keys(L, idx, &n, &nkeys, e);
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
    if (!ms_string_ok(k, kl, 1)) {
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
