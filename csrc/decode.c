/*
 * decode.c - BSON documents into Lua tables for the document API
 * (ms_push_document, ms_push_document_value): a reader of its own over the
 * bytes, every BSON type kept, each table carrying its shape (field order,
 * numeric types) from a per-state cache.
 */
#include "ms.h"
#include "codec.h"

#include <stdlib.h>
#include <string.h>

/* Shapes are cached per state in a table of SHAPE_SLOTS open-addressed
 * slots, keyed by the shape's bytes ('D' then a type letter, the key and its
 * NUL per field; 'A' then a type letter per item); a cache past SHAPE_MAX
 * shapes (documents with ever new keys) starts again empty. The metatables
 * live in a Lua list, the slot holds the index. */
#define SHAPE_SLOTS 4096
#define SHAPE_MAX 2048
/* A table is made sized for as many fields as the last one decoded at the
 * same depth (documents of one cursor are mostly alike), up to this. */
#define SHAPE_HINT_MAX 64

typedef struct shape_slot {
  uint64_t hash;
  uint32_t len;
  int ref;
  int unique;         /* no key repeated: the keys list matches the bytes one to one */
  char *bytes;        /* one block with klens */
  uint32_t *klens;    /* a document shape's key lengths, field by field, nfields of them */
  uint32_t nfields;
} shape_slot_t;

typedef struct shapes {
  shape_slot_t slot[SHAPE_SLOTS];
  int count;
  char *buf;          /* the shapes being read, one after the other by depth */
  size_t cap, len;
  int hint_doc[MS_MAX_DEPTH + 1], hint_arr[MS_MAX_DEPTH + 1];
  int pred[MS_MAX_DEPTH + 1];  /* 1 + the slot of the last document shape per depth, 0 for none */
  unsigned gen;                /* counts the times the cache was emptied */
} shapes_t;

/* The registry holds, at &decoder_key, the decoder's state: a table with
 * the cache (CTX_SHAPES, a userdata), its list of metatables (CTX_LIST) and
 * the array mark (CTX_MARK), so a read finds them with one lookup. */
static const char decoder_key = 0;
#define CTX_SHAPES 1
#define CTX_LIST 2
#define CTX_MARK 3
#define MS_SHAPES_MT "mongostore.shapes"

static void shapes_clear(shapes_t *sh) {
  int i;
  for (i = 0; i < SHAPE_SLOTS; i++) {
    free(sh->slot[i].bytes);
    sh->slot[i].bytes = NULL;
  }
  sh->count = 0;
  memset(sh->pred, 0, sizeof sh->pred);
  sh->gen++;
}

static int shapes_gc(lua_State *L) {
  shapes_t *sh = (shapes_t *)luaL_checkudata(L, 1, MS_SHAPES_MT);
  shapes_clear(sh);
  free(sh->buf);
  sh->buf = NULL;
  sh->cap = sh->len = 0;
  return 0;
}

/* Made at a state's first document read: a state that only runs
 * executions never pays for the cache. */
static void open_decoder(lua_State *L) {
  shapes_t *sh;
  lua_createtable(L, 3, 0);
  sh = (shapes_t *)lua_newuserdatauv(L, sizeof *sh, 0);
  memset(sh, 0, sizeof *sh);
  if (luaL_newmetatable(L, MS_SHAPES_MT)) {
    lua_pushcfunction(L, shapes_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  lua_rawseti(L, -2, CTX_SHAPES);
  lua_newtable(L);
  lua_rawseti(L, -2, CTX_LIST);
  luaL_getmetatable(L, MS_ARRAY_MT);
  lua_rawseti(L, -2, CTX_MARK);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &decoder_key);
}

/* What one ms_push_document call reads with: the cache, the stack slots
 * of the decoder's state, its metatable list and the array mark, and the
 * first byte of the outermost document (errors give offsets from it). */
typedef struct dctx {
  shapes_t *sh;
  int ctx, list, mark;
  ms_err_t *e;
  const uint8_t *base;
} dctx_t;

static void shape_grow(lua_State *L, shapes_t *sh, size_t n) {
  if (sh->len + n > sh->cap) {
    size_t cap = sh->cap ? sh->cap : 1024;
    char *nb;
    while (cap < sh->len + n) cap *= 2;
    if ((nb = (char *)realloc(sh->buf, cap)) == NULL) luaL_error(L, "mongostore: out of memory");
    sh->buf = nb;
    sh->cap = cap;
  }
}

static void shape_put(lua_State *L, shapes_t *sh, const char *s, size_t n) {
  shape_grow(L, sh, n);
  memcpy(sh->buf + sh->len, s, n);
  sh->len += n;
}

/* a document's field: its letter, then its key with the NUL */
static void shape_put_field(lua_State *L, shapes_t *sh, char letter, const char *k, size_t kl) {
  char *at;
  shape_grow(L, sh, kl + 2);
  at = sh->buf + sh->len;
  at[0] = letter;
  memcpy(at + 1, k, kl + 1);
  sh->len += kl + 2;
}

/* 64-bit FNV-1a over 8-byte words: the keys of a shape are short and many */
static uint64_t shape_hash(const char *s, size_t n) {
  uint64_t h = 14695981039346656037ULL;
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, s, 8);
    h = (h ^ w) * 1099511628211ULL;
    h ^= h >> 29;
    s += 8;
    n -= 8;
  }
  while (n--) h = (h ^ (unsigned char)*s++) * 1099511628211ULL;
  return h ^ (h >> 32);
}

/* Pushes a new shape metatable for the bytes s[0..n); 1 when no key
 * repeats. */
static int shape_build(lua_State *L, dctx_t *c, const char *s, size_t n) {
  size_t i, count = 0, fields;
  char *types;
  if (s[0] == 'A') {
    lua_createtable(L, 2, 1);
    lua_pushvalue(L, c->mark);
    lua_rawseti(L, -2, 0);
    lua_pushlstring(L, s + 1, n - 1);
    lua_rawseti(L, -2, 2);
    lua_pushliteral(L, "array");
    lua_setfield(L, -2, "__name");
    return 1;
  }
  for (i = 1; i < n; i += 2 + strlen(s + i + 1)) count++;
  fields = count;
  lua_createtable(L, 3, 2);                          /* the metatable */
  types = (char *)lua_newuserdatauv(L, count + 1, 0); /* scratch for the letters */
  lua_createtable(L, (int)count, 0);                 /* keys in order */
  lua_createtable(L, 0, (int)count);                 /* keys as a set */
  count = 0;
  for (i = 1; i < n; ) {
    size_t kl = strlen(s + i + 1);
    lua_pushlstring(L, s + i + 1, kl);
    lua_pushvalue(L, -1);
    lua_rawget(L, -3);
    if (lua_isnil(L, -1)) {                          /* a repeated key keeps its first place */
      lua_pop(L, 1);
      lua_pushvalue(L, -1);
      lua_rawseti(L, -4, (lua_Integer)(count + 1));
      lua_pushinteger(L, (lua_Integer)(count + 1));
      lua_rawset(L, -3);
      types[count++] = s[i];
    } else {
      lua_pop(L, 2);
    }
    i += 2 + kl;
  }
  lua_rawseti(L, -4, 3);
  lua_rawseti(L, -3, 1);
  lua_pushlstring(L, types, count);
  lua_rawseti(L, -3, 2);
  lua_pop(L, 1);                                     /* the scratch */
  lua_pushboolean(L, 1);
  lua_rawsetp(L, -2, &ms_shape_key);
  lua_pushliteral(L, "mongostore.document");
  lua_setfield(L, -2, "__name");
  return count == fields;
}

/* A cache's copy of the shape bytes s[0..n), with (for a document) the
 * length of each key after them, in slot; NULL when out of memory. */
static char *shape_copy(const char *s, size_t n, shape_slot_t *slot) {
  size_t i, count = 0, at = (n + 7) & ~(size_t)7;
  char *copy;
  if (s[0] == 'D')
    for (i = 1; i < n; i += 2 + strlen(s + i + 1)) count++;
  if ((copy = (char *)malloc(at + count * sizeof(uint32_t))) == NULL) return NULL;
  memcpy(copy, s, n);
  slot->klens = (uint32_t *)(void *)(copy + at);
  slot->nfields = (uint32_t)count;
  for (i = 1, count = 0; s[0] == 'D' && i < n; i += 2 + slot->klens[count++])
    slot->klens[count] = (uint32_t)strlen(s + i + 1);
  return copy;
}

/* Pushes the shape metatable for the bytes from start to the end of the
 * buffer: the cached one, or a new one, cached. Returns its slot, or -1
 * when it could not be cached. */
static int shape_push(lua_State *L, dctx_t *c, size_t start) {
  shapes_t *sh = c->sh;
  const char *s = sh->buf + start;
  size_t n = sh->len - start, j;
  uint64_t h = shape_hash(s, n);
  shape_slot_t *slot;
  char *copy;
  int unique;
  for (j = h & (SHAPE_SLOTS - 1); sh->slot[j].bytes; j = (j + 1) & (SHAPE_SLOTS - 1)) {
    slot = &sh->slot[j];
    if (slot->hash == h && slot->len == n && memcmp(slot->bytes, s, n) == 0) {
      lua_rawgeti(L, c->list, slot->ref);
      return (int)j;
    }
  }
  if (sh->count >= SHAPE_MAX) {
    shapes_clear(sh);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_rawseti(L, c->ctx, CTX_LIST);
    lua_replace(L, c->list);
    j = h & (SHAPE_SLOTS - 1);
  }
  unique = shape_build(L, c, s, n);
  slot = &sh->slot[j];
  if (n > UINT32_MAX || (copy = shape_copy(s, n, slot)) == NULL) return -1;   /* used, not cached */
  slot->hash = h;
  slot->len = (uint32_t)n;
  slot->ref = ++sh->count;
  slot->unique = unique;
  slot->bytes = copy;
  lua_pushvalue(L, -1);
  lua_rawseti(L, c->list, slot->ref);
  return (int)j;
}

/* ---- the walker: a document's bytes, every length checked ---- */

/* The bytes come from the network: no length is used before it is checked
 * against the bytes left in the document that holds it, so a cut or
 * malformed document fails with its offset and nothing is read past its
 * end. The rules are libbson's (bson_iter_next and bson_iter_recurse). */

/* One document being read: start is its length header, end its final NUL
 * (both checked by span_open), at the next element's type byte. */
typedef struct span {
  const uint8_t *start, *at, *end;
} span_t;

/* One element: its type byte, its key (klen bytes, then a NUL) and its
 * value, size bytes at v. */
typedef struct elem {
  uint8_t type;
  const char *key;
  size_t klen;
  const uint8_t *v;
  size_t size;
} elem_t;

static uint32_t read_u32(const uint8_t *p) {
  uint32_t x;
  memcpy(&x, p, sizeof x);
  return BSON_UINT32_FROM_LE(x);
}

static uint64_t read_u64(const uint8_t *p) {
  uint64_t x;
  memcpy(&x, p, sizeof x);
  return BSON_UINT64_FROM_LE(x);
}

static double read_double(const uint8_t *p) {
  uint64_t u = read_u64(p);
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}

/* 0 when the n bytes at p are one document: a header that says n, and a
 * final NUL. */
static int span_open(span_t *s, const uint8_t *p, size_t n) {
  if (n < 5 || read_u32(p) != n || p[n - 1] != 0) return -1;
  s->start = p;
  s->at = p + 4;
  s->end = p + n - 1;
  return 0;
}

/* Each *_size below is the size of a value at v that fits in room bytes,
 * or 0 when it does not (no valid value of these types is empty). */

/* a string: its length (the NUL counted), its bytes, the NUL */
static size_t string_size(const uint8_t *v, size_t room) {
  uint32_t l;
  if (room < 5) return 0;
  l = read_u32(v);
  if (l < 1 || l > room - 4 || v[4 + l - 1] != 0) return 0;
  return 4 + (size_t)l;
}

/* a document or an array (its own header and final NUL: span_open) */
static size_t table_size(const uint8_t *v, size_t room) {
  uint32_t l;
  if (room < 5) return 0;
  l = read_u32(v);
  return (l >= 5 && l <= room) ? l : 0;
}

static size_t binary_size(const uint8_t *v, size_t room) {
  uint32_t l;
  if (room < 5) return 0;
  l = read_u32(v);
  if (l > room - 5) return 0;
  /* the old subtype 2 holds its length again inside: both must agree */
  if (v[4] == BSON_SUBTYPE_BINARY_DEPRECATED && (l < 4 || read_u32(v + 5) != l - 4)) return 0;
  return 5 + (size_t)l;
}

/* count NUL-ended strings one after the other (a regex: pattern, flags) */
static size_t cstrings_size(const uint8_t *v, size_t room, int count) {
  size_t used = 0;
  while (count-- > 0) {
    const uint8_t *nul = (const uint8_t *)memchr(v + used, 0, room - used);
    if (!nul) return 0;
    used = (size_t)(nul - v) + 1;
  }
  return used;
}

static size_t dbpointer_size(const uint8_t *v, size_t room) {
  size_t n = string_size(v, room);
  return (n && room - n >= 12) ? n + 12 : 0;
}

/* code with scope: a total length, the code as a string, the scope as a
 * document, which together make the total */
static size_t codewscope_size(const uint8_t *v, size_t room) {
  uint32_t total;
  size_t code, scope;
  if (room < 14) return 0;
  total = read_u32(v);
  if (total < 14 || total > room) return 0;
  if ((code = string_size(v + 4, total - 4)) == 0 || total - 4 - code < 5) return 0;
  scope = total - 4 - code;
  if (read_u32(v + 4 + code) != scope || v[total - 1] != 0) return 0;
  return total;
}

/* Each type's value size plus one when it is fixed, VARIABLE when the
 * value says; 0 (the default) for a byte that is no BSON type. */
#define VARIABLE 100
static const unsigned char fixed_sizes[256] = {
  [BSON_TYPE_DOUBLE] = 9, [BSON_TYPE_INT64] = 9, [BSON_TYPE_DATE_TIME] = 9, [BSON_TYPE_TIMESTAMP] = 9,
  [BSON_TYPE_INT32] = 5, [BSON_TYPE_OID] = 13, [BSON_TYPE_DECIMAL128] = 17,
  [BSON_TYPE_NULL] = 1, [BSON_TYPE_UNDEFINED] = 1, [BSON_TYPE_MINKEY] = 1, [BSON_TYPE_MAXKEY] = 1,
  [BSON_TYPE_BOOL] = VARIABLE, [BSON_TYPE_UTF8] = VARIABLE, [BSON_TYPE_CODE] = VARIABLE,
  [BSON_TYPE_SYMBOL] = VARIABLE, [BSON_TYPE_DOCUMENT] = VARIABLE, [BSON_TYPE_ARRAY] = VARIABLE,
  [BSON_TYPE_BINARY] = VARIABLE, [BSON_TYPE_REGEX] = VARIABLE, [BSON_TYPE_DBPOINTER] = VARIABLE,
  [BSON_TYPE_CODEWSCOPE] = VARIABLE,
};

/* The size of a value whose bytes say it, at v within room bytes (0 when
 * it does not fit). */
static size_t variable_size(uint8_t type, const uint8_t *v, size_t room) {
  switch (type) {
  case BSON_TYPE_BOOL: return (room >= 1 && v[0] <= 1) ? 1 : 0;
  case BSON_TYPE_UTF8: case BSON_TYPE_CODE: case BSON_TYPE_SYMBOL: return string_size(v, room);
  case BSON_TYPE_DOCUMENT: case BSON_TYPE_ARRAY: return table_size(v, room);
  case BSON_TYPE_BINARY: return binary_size(v, room);
  case BSON_TYPE_REGEX: return cstrings_size(v, room, 2);
  case BSON_TYPE_DBPOINTER: return dbpointer_size(v, room);
  case BSON_TYPE_CODEWSCOPE: return codewscope_size(v, room);
  default: return 0;
  }
}

/* The size of the value of a type at v, within room bytes: 0 and *size
 * set, -1 when it does not fit, -2 for a type BSON does not have. */
static int value_size(uint8_t type, const uint8_t *v, size_t room, size_t *size) {
  unsigned fixed = fixed_sizes[type];
  size_t n;
  if (fixed == 0) return -2;
  if (fixed != VARIABLE) {
    *size = fixed - 1;
    return fixed - 1 <= room ? 0 : -1;
  }
  n = variable_size(type, v, room);
  *size = n;
  return n ? 0 : -1;
}

static int corrupt(dctx_t *c, const uint8_t *at) {
  ms_err_set(c->e, "server", "corrupt document from the server (at byte %u)", (unsigned)(at - c->base));
  return -1;
}

static int unknown_type(dctx_t *c, const uint8_t *at) {
  ms_err_set(c->e, "server", "document holds an unknown BSON type 0x%02x (at byte %u)", (unsigned)at[0],
             (unsigned)(at - c->base));
  return -1;
}

/* Reads the element at s->at into el and steps over it: 1, or 0 at the
 * document's end, or -1 with the error set. */
static int read_elem(dctx_t *c, span_t *s, elem_t *el) {
  const uint8_t *p = s->at, *nul;
  int rc;
  if (p == s->end) return 0;
  el->type = p[0];
  nul = (const uint8_t *)memchr(p + 1, 0, (size_t)(s->end - p - 1));
  if (el->type == 0 || nul == NULL) return corrupt(c, p);
  el->key = (const char *)p + 1;
  el->klen = (size_t)(nul - p - 1);
  el->v = nul + 1;
  rc = value_size(el->type, el->v, (size_t)(s->end - el->v), &el->size);
  if (rc) return rc == -2 ? unknown_type(c, p) : corrupt(c, p);
  s->at = el->v + el->size;
  return 1;
}

/* ---- the tables ---- */

static int doc_object(lua_State *L, dctx_t *c, span_t *s, int depth);
static int doc_array(lua_State *L, dctx_t *c, span_t *s, int depth);

static int too_deep(dctx_t *c) {
  ms_err_set(c->e, "invalid", "document nested deeper than %d levels", MS_MAX_DEPTH);
  return -1;
}

/* A document or array value at depth: the value at depth d is the (d+1)th
 * table of its path, and past MS_MAX_DEPTH tables the encoder would refuse
 * what was read. */
static int push_table(lua_State *L, dctx_t *c, const elem_t *el, int depth) {
  span_t child;
  if (depth >= MS_MAX_DEPTH) return too_deep(c);
  if (span_open(&child, el->v, el->size)) return corrupt(c, el->v);
  luaL_checkstack(L, 12, "mongostore: document too deep");
  return el->type == BSON_TYPE_ARRAY ? doc_array(L, c, &child, depth) : doc_object(L, c, &child, depth);
}

/* The types with a box (bsontypes.c) are read by libbson's iterator, set
 * on this element of the document s (it checks the element once more). */
static int push_box(lua_State *L, dctx_t *c, const span_t *s, const elem_t *el) {
  bson_iter_t it;
  const uint8_t *at = (const uint8_t *)el->key - 1;
  if (!bson_iter_init_from_data_at_offset(&it, s->start, (size_t)(s->end - s->start) + 1,
                                          (uint32_t)(at - s->start), (uint32_t)el->klen))
    return corrupt(c, at);
  if (!ms_push_box(L, &it)) return unknown_type(c, at);
  return 0;
}

static void push_int32(lua_State *L, int32_t v) {
#if LUA_VERSION_NUM >= 503
  lua_pushinteger(L, (lua_Integer)v);
#else
  lua_pushnumber(L, (lua_Number)v);
#endif
}

/* Pushes the value of el, an element of s, at depth. */
static int push_value(lua_State *L, dctx_t *c, const span_t *s, const elem_t *el, int depth) {
  switch (el->type) {
  case BSON_TYPE_DOUBLE: lua_pushnumber(L, read_double(el->v)); return 0;
  case BSON_TYPE_UTF8: lua_pushlstring(L, (const char *)el->v + 4, el->size - 5); return 0;
  case BSON_TYPE_INT32: push_int32(L, (int32_t)read_u32(el->v)); return 0;
  case BSON_TYPE_INT64: ms_push_int64(L, (int64_t)read_u64(el->v)); return 0;
  case BSON_TYPE_BOOL: lua_pushboolean(L, el->v[0]); return 0;
  case BSON_TYPE_NULL: ms_push_null(L); return 0;
  case BSON_TYPE_DOCUMENT:
  case BSON_TYPE_ARRAY: return push_table(L, c, el, depth);
  default: return push_box(L, c, s, el);
  }
}

static char type_letter(uint8_t t) {
  return t == BSON_TYPE_INT32 ? MS_SHAPE_INT32 : t == BSON_TYPE_DOUBLE ? MS_SHAPE_DOUBLE : MS_SHAPE_OTHER;
}

static int doc_array(lua_State *L, dctx_t *c, span_t *s, int depth) {
  shapes_t *sh = c->sh;
  size_t start = sh->len;
  int n = 0, typed = 0, rc;
  elem_t el;
  lua_createtable(L, sh->hint_arr[depth], 0);
  shape_put(L, sh, "A", 1);
  while ((rc = read_elem(c, s, &el)) > 0) {
    char letter = type_letter(el.type);
    shape_put(L, sh, &letter, 1);
    typed |= letter != MS_SHAPE_OTHER;
    if ((rc = push_value(L, c, s, &el, depth + 1)) != 0) break;
    lua_rawseti(L, -2, (lua_Integer)++n);
  }
  if (rc != 0) {
    lua_pop(L, 1);
    sh->len = start;
    return -1;
  }
  sh->hint_arr[depth] = n < SHAPE_HINT_MAX ? n : SHAPE_HINT_MAX;
  /* items that write back as they are need only the mark */
  if (!typed) {
    lua_pushvalue(L, c->mark);
  } else {
    shape_push(L, c, start);
  }
  lua_setmetatable(L, -2);
  sh->len = start;
  return 0;
}

/* The shape a document is likely to have (the one last read at its depth)
 * and how far its bytes have matched the fields read. */
typedef struct pred {
  int matching, unique;
  const char *bytes;
  const uint32_t *klens;
  size_t len, off, nfields;
  unsigned gen;
} pred_t;

/* Pushes the likely shape (t + 1) and its keys (t + 2) when there is one
 * to follow. */
static void pred_open(lua_State *L, dctx_t *c, int depth, int t, pred_t *pr) {
  shapes_t *sh = c->sh;
  int ps = sh->pred[depth] - 1;
  memset(pr, 0, sizeof *pr);
  pr->off = 1;
  pr->gen = sh->gen;
  if (ps >= 0 && sh->slot[ps].bytes) {
    lua_rawgeti(L, c->list, sh->slot[ps].ref);
    lua_rawgeti(L, t + 1, 1);
    if (lua_type(L, t + 2) == LUA_TTABLE) {
      pr->matching = 1;
      pr->unique = sh->slot[ps].unique;
      pr->bytes = sh->slot[ps].bytes;
      pr->len = sh->slot[ps].len;
      pr->klens = sh->slot[ps].klens;
      pr->nfields = sh->slot[ps].nfields;
      return;
    }
  }
  lua_settop(L, t);
}

/* Reads the element at s->at as read_elem does when it is field n
 * (0-based) of the likely shape, whose key is known, so no NUL is searched
 * for: 1, or 0 when it is not that field (nothing read), or -1 with the
 * error set. */
static int pred_read(dctx_t *c, span_t *s, elem_t *el, pred_t *pr, int n) {
  const uint8_t *p = s->at;
  const char *b = pr->bytes + pr->off;
  size_t kl;
  int rc;
  if ((size_t)n >= pr->nfields) return 0;
  kl = pr->klens[n];
  /* the key and its NUL, compared at once, lie before the final NUL */
  if ((size_t)(s->end - p) < kl + 2 || p[0] == 0 || type_letter(p[0]) != b[0] || memcmp(p + 1, b + 1, kl + 1) != 0)
    return 0;
  el->type = p[0];
  el->key = (const char *)p + 1;
  el->klen = kl;
  el->v = p + 2 + kl;
  rc = value_size(el->type, el->v, (size_t)(s->end - el->v), &el->size);
  if (rc) return rc == -2 ? unknown_type(c, p) : corrupt(c, p);
  s->at = el->v + el->size;
  pr->off += kl + 2;
  return 1;
}

/* Pushes field n's key from the likely shape's list (a key hashed once per
 * shape, not per document): 1, or 0 when the list cannot say. */
static int pred_key(lua_State *L, const pred_t *pr, int keys, int n) {
  /* the list holds the keys the bytes spell, one to one unless a key
   * repeats (then the list is behind) */
  if (!pr->unique) return 0;
  if (lua_rawgeti(L, keys, (lua_Integer)n + 1) == LUA_TSTRING) return 1;
  lua_pop(L, 1);
  return 0;
}

/* Writes the shape bytes of the first n fields of the document first. */
static void unpredict(lua_State *L, dctx_t *c, const span_t *first, int n) {
  span_t s = *first;
  elem_t el;
  shape_put(L, c->sh, "D", 1);
  while (n-- > 0 && read_elem(c, &s, &el) > 0)
    shape_put_field(L, c->sh, type_letter(el.type), el.key, el.klen);
}

/* Sets the document's shape: the likely one when every field matched it,
 * else the cached (or new) one for the bytes written. */
static void doc_shape(lua_State *L, dctx_t *c, const pred_t *pr, const span_t *first, int n, int depth,
                      size_t start, int t) {
  shapes_t *sh = c->sh;
  if (pr->matching && pr->off == pr->len) {
    lua_pushvalue(L, t + 1);
    lua_setmetatable(L, t);
    return;
  }
  if (pr->matching) unpredict(L, c, first, n);
  if (n > 0) {                                       /* an empty document needs no shape */
    sh->pred[depth] = shape_push(L, c, start) + 1;
    lua_setmetatable(L, t);
  }
}

/* One document being read: its bytes, where its fields began, the likely
 * shape, its table's stack slot, its depth and the fields read so far. */
typedef struct dobj {
  span_t *s;
  span_t first;
  pred_t pr;
  int t, depth, n;
} dobj_t;

/* Reads the next field into the table: 1, or 0 at the end, or -1 with the
 * error set. */
static int doc_field(lua_State *L, dctx_t *c, dobj_t *d) {
  elem_t el;
  int rc = 0, pushed = 0;
  if (d->s->at == d->s->end) return 0;              /* where the likely shape may end too */
  if (d->pr.matching && (rc = pred_read(c, d->s, &el, &d->pr, d->n)) == 0) {
    d->pr.matching = 0;
    unpredict(L, c, &d->first, d->n);
  }
  if (d->pr.matching) {
    if (rc < 0) return -1;
    pushed = pred_key(L, &d->pr, d->t + 2, d->n);
  } else {
    if ((rc = read_elem(c, d->s, &el)) <= 0) return rc;
    shape_put_field(L, c->sh, type_letter(el.type), el.key, el.klen);
  }
  if (!pushed) lua_pushlstring(L, el.key, el.klen);
  if (push_value(L, c, d->s, &el, d->depth + 1)) return -1;
  /* a nested read that filled the cache emptied it: the bytes are gone */
  if (d->pr.matching && c->sh->gen != d->pr.gen) {
    d->pr.matching = 0;
    unpredict(L, c, &d->first, d->n + 1);
  }
  lua_rawset(L, d->t);
  return 1;
}

/* A document. The shape last read at the same depth is the likely one (a
 * cursor's documents are mostly alike): while the fields match it, their
 * keys come from its list (no string to hash) and, when all of them do,
 * it is the shape, with no lookup; at the first difference the bytes of
 * the fields so far are written and the read goes on as for a new shape. */
static int doc_object(lua_State *L, dctx_t *c, span_t *s, int depth) {
  shapes_t *sh = c->sh;
  size_t start = sh->len;
  dobj_t d;
  int rc;
  d.s = s;
  d.first = *s;
  d.depth = depth;
  d.n = 0;
  lua_createtable(L, 0, sh->hint_doc[depth]);
  d.t = lua_gettop(L);
  pred_open(L, c, depth, d.t, &d.pr);
  if (!d.pr.matching) shape_put(L, sh, "D", 1);
  while ((rc = doc_field(L, c, &d)) > 0) d.n++;
  if (rc < 0) {
    lua_settop(L, d.t - 1);
    sh->len = start;
    return -1;
  }
  sh->hint_doc[depth] = d.n < SHAPE_HINT_MAX ? d.n : SHAPE_HINT_MAX;
  doc_shape(L, c, &d.pr, &d.first, d.n, depth, start, d.t);
  lua_settop(L, d.t);
  sh->len = start;
  return 0;
}

/* Pushes the decoder's state, its list and the array mark (three slots)
 * for a read with c of the bytes from base. */
static void dctx_open(lua_State *L, dctx_t *c, const uint8_t *base, ms_err_t *e) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &decoder_key) == LUA_TNIL) {
    lua_pop(L, 1);
    open_decoder(L);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &decoder_key);
  }
  c->ctx = lua_gettop(L);
  lua_rawgeti(L, c->ctx, CTX_SHAPES);
  c->sh = (shapes_t *)lua_touserdata(L, -1);
  lua_pop(L, 1);                                     /* the state keeps it */
  c->sh->len = 0;                                    /* a read cut short by a Lua error left some */
  c->e = e;
  c->base = base;
  lua_rawgeti(L, c->ctx, CTX_LIST);
  c->list = c->ctx + 1;
  lua_rawgeti(L, c->ctx, CTX_MARK);
  c->mark = c->ctx + 2;
}

/* Leaves the value read (rc 0) where the state was, nothing on failure. */
static int dctx_close(lua_State *L, dctx_t *c, int rc) {
  if (rc == 0) lua_replace(L, c->ctx);
  lua_settop(L, c->ctx - (rc != 0));
  return rc;
}

int ms_push_document_value(lua_State *L, const bson_iter_t *it, ms_err_t *e) {
  dctx_t c;
  span_t s;
  elem_t el;
  int rc;
  /* the element under it, read again by the walker over its document */
  s.start = it->raw;
  s.end = it->raw + it->len - 1;
  s.at = it->raw + it->off;
  c.e = e;
  c.sh = NULL;
  c.base = it->raw;
  if ((rc = read_elem(&c, &s, &el)) <= 0) return rc == 0 ? corrupt(&c, s.at) : -1;
  luaL_checkstack(L, 12, "mongostore: document too deep");
  /* a value that is not a table needs no cache */
  if (el.type != BSON_TYPE_DOCUMENT && el.type != BSON_TYPE_ARRAY) return push_value(L, &c, &s, &el, 1);
  dctx_open(L, &c, it->raw, e);
  /* a field of a document: one level down, as ms_push_document reads it */
  return dctx_close(L, &c, push_value(L, &c, &s, &el, 1));
}

/* The document in the len bytes at data, which nothing has checked. */
static int push_document_bytes(lua_State *L, const uint8_t *data, size_t len, ms_err_t *e) {
  dctx_t c;
  span_t s;
  luaL_checkstack(L, 12, "mongostore: document too deep");
  c.e = e;
  c.base = data;
  if (span_open(&s, data, len)) return corrupt(&c, data);
  dctx_open(L, &c, data, e);
  return dctx_close(L, &c, doc_object(L, &c, &s, 0));
}

int ms_push_document(lua_State *L, const bson_t *doc, ms_err_t *e) {
  return push_document_bytes(L, bson_get_data(doc), doc->len, e);
}

/* core.test_decode_raw(bytes) -> table, or nil, msg, code: FOR SPECS ONLY.
 * The decoder on bytes that nothing checked first (bson_decode validates
 * with libbson before it decodes), as bytes from the network reach it, so
 * specs can feed it malformed BSON; the bytes are copied into a buffer of
 * exactly their size, so a sanitizer sees any read past the end. */
static int l_test_decode_raw(lua_State *L) {
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  uint8_t *copy = (uint8_t *)malloc(len ? len : 1);
  ms_err_t e;
  int rc;
  if (!copy) return luaL_error(L, "mongostore: out of memory");
  memcpy(copy, s, len);
  rc = push_document_bytes(L, copy, len, &e);
  free(copy);
  return rc ? ms_push_error(L, &e) : 1;
}

void ms_open_decode(lua_State *L) {
  lua_pushcfunction(L, l_test_decode_raw);
  lua_setfield(L, -2, "test_decode_raw");
}
