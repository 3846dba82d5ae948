/*
 * decode.c - BSON documents into Lua tables for the document API
 * (ms_push_document, ms_push_document_value): every BSON type kept, each
 * table carrying its shape (field order, numeric types) from a per-state cache.
 */
#include "ms.h"
#include "codec.h"

#include <stdlib.h>
#include <string.h>

/* Shapes are cached per state in a table of SHAPE_SLOTS open-addressed
 * slots, keyed by the shape's bytes ('D' then a type letter, the key and its
 * NUL per field; 'A' then a type letter per item); a cache past SHAPE_MAX
 * shapes (documents with ever new keys) starts again empty. The metatables
 * live in a Lua list (the registry's, at &shapes_list_key), the slot holds
 * the index. */
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
  char *bytes;
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

static const char shapes_key = 0, shapes_list_key = 0;
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
static void open_shapes(lua_State *L) {
  shapes_t *sh;
  lua_rawgetp(L, LUA_REGISTRYINDEX, &shapes_key);
  if (!lua_isnil(L, -1)) { lua_pop(L, 1); return; }
  lua_pop(L, 1);
  sh = (shapes_t *)lua_newuserdatauv(L, sizeof *sh, 0);
  memset(sh, 0, sizeof *sh);
  if (luaL_newmetatable(L, MS_SHAPES_MT)) {
    lua_pushcfunction(L, shapes_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &shapes_key);
  lua_newtable(L);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &shapes_list_key);
}

/* What one ms_push_document call reads with: the cache, and the stack
 * slots of the metatable list and the array mark. */
typedef struct dctx {
  shapes_t *sh;
  int list, mark;
  ms_err_t *e;
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
    lua_rawsetp(L, LUA_REGISTRYINDEX, &shapes_list_key);
    lua_replace(L, c->list);
    j = h & (SHAPE_SLOTS - 1);
  }
  unique = shape_build(L, c, s, n);
  if (n > UINT32_MAX || (copy = (char *)malloc(n)) == NULL) return -1;   /* used, not cached */
  memcpy(copy, s, n);
  slot = &sh->slot[j];
  slot->hash = h;
  slot->len = (uint32_t)n;
  slot->ref = ++sh->count;
  slot->unique = unique;
  slot->bytes = copy;
  lua_pushvalue(L, -1);
  lua_rawseti(L, c->list, slot->ref);
  return (int)j;
}

static int doc_table(lua_State *L, dctx_t *c, bson_iter_t *it, int is_array, int depth);

/* The iterator's element, read without libbson's calls: bson_iter_next has
 * checked its bounds already (these are libbson's own inline readers). */
#define ITER_TYPE(it) bson_iter_type_unsafe(it)
#define ITER_KEY(it) bson_iter_key_unsafe(it)
/* the value starts right after the key's NUL */
#define ITER_KEY_LEN(it) ((uint32_t)((it)->d1 - (it)->key - 1))

static int doc_value(lua_State *L, dctx_t *c, const bson_iter_t *it, int depth) {
  bson_iter_t child;
  switch (ITER_TYPE(it)) {
  case BSON_TYPE_DOUBLE: lua_pushnumber(L, bson_iter_double_unsafe(it)); break;
  case BSON_TYPE_UTF8: {
    size_t len;
    const char *s = bson_iter_utf8_unsafe(it, &len);
    lua_pushlstring(L, s, len);
    break;
  }
  case BSON_TYPE_INT32:
#if LUA_VERSION_NUM >= 503
    lua_pushinteger(L, (lua_Integer)bson_iter_int32_unsafe(it));
#else
    lua_pushnumber(L, (lua_Number)bson_iter_int32_unsafe(it));
#endif
    break;
  case BSON_TYPE_INT64: ms_push_int64(L, bson_iter_int64_unsafe(it)); break;
  case BSON_TYPE_BOOL: lua_pushboolean(L, bson_iter_bool_unsafe(it)); break;
  case BSON_TYPE_NULL: ms_push_null(L); break;
  case BSON_TYPE_DOCUMENT:
  case BSON_TYPE_ARRAY:
    /* the same bound as ms_push_bson_value's: what is read can be written */
    if (depth >= MS_MAX_DEPTH) {
      ms_err_set(c->e, "invalid", "document nested deeper than %d levels", MS_MAX_DEPTH);
      return -1;
    }
    if (!bson_iter_recurse(it, &child)) {
      ms_err_set(c->e, "server", "corrupt document from the server");
      return -1;
    }
    return doc_table(L, c, &child, ITER_TYPE(it) == BSON_TYPE_ARRAY, depth);
  default:
    if (!ms_push_box(L, it)) {
      ms_err_set(c->e, "server", "document holds an unknown BSON type 0x%02x", (unsigned)ITER_TYPE(it));
      return -1;
    }
    break;
  }
  return 0;
}

static char type_letter(bson_type_t t) {
  return t == BSON_TYPE_INT32 ? MS_SHAPE_INT32 : t == BSON_TYPE_DOUBLE ? MS_SHAPE_DOUBLE : MS_SHAPE_OTHER;
}

static int doc_array(lua_State *L, dctx_t *c, bson_iter_t *it, int depth) {
  shapes_t *sh = c->sh;
  size_t start = sh->len;
  int n = 0, typed = 0;
  lua_createtable(L, sh->hint_arr[depth], 0);
  shape_put(L, sh, "A", 1);
  while (bson_iter_next(it)) {
    char letter = type_letter(ITER_TYPE(it));
    shape_put(L, sh, &letter, 1);
    typed |= letter != MS_SHAPE_OTHER;
    if (doc_value(L, c, it, depth + 1)) { lua_pop(L, 1); return -1; }
    lua_rawseti(L, -2, (lua_Integer)++n);
  }
  if (it->err_off != 0) {
    lua_pop(L, 1);
    ms_err_set(c->e, "server", "corrupt document from the server (at byte %u)", (unsigned)it->err_off);
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

/* Writes the shape bytes of the first n fields from the iterator first. */
static void unpredict(lua_State *L, shapes_t *sh, const bson_iter_t *first, int n) {
  bson_iter_t it = *first;
  shape_put(L, sh, "D", 1);
  while (n-- > 0 && bson_iter_next(&it))
    shape_put_field(L, sh, type_letter(ITER_TYPE(&it)), ITER_KEY(&it), ITER_KEY_LEN(&it));
}

/* A document. The shape last read at the same depth is the likely one (a
 * cursor's documents are mostly alike): while the fields match it, their
 * keys come from its list (no string to hash) and, when all of them do,
 * it is the shape, with no lookup; at the first difference the bytes of
 * the fields so far are written and the read goes on as for a new shape. */
static int doc_object(lua_State *L, dctx_t *c, bson_iter_t *it, int depth) {
  shapes_t *sh = c->sh;
  size_t start = sh->len, poff = 1, plen = 0;
  int n = 0, t, matching = 0, unique = 0, ps = sh->pred[depth] - 1;
  unsigned gen = sh->gen;
  const char *pb = NULL;
  bson_iter_t first = *it;
  lua_createtable(L, 0, sh->hint_doc[depth]);
  t = lua_gettop(L);
  if (ps >= 0 && sh->slot[ps].bytes) {
    lua_rawgeti(L, c->list, sh->slot[ps].ref);       /* t + 1: the likely shape */
    lua_rawgeti(L, t + 1, 1);                         /* t + 2: its keys */
    if (lua_type(L, t + 2) == LUA_TTABLE) {
      matching = 1;
      unique = sh->slot[ps].unique;
      pb = sh->slot[ps].bytes;
      plen = sh->slot[ps].len;
    }
  }
  if (!matching) {
    lua_settop(L, t);
    shape_put(L, sh, "D", 1);
  }
  while (bson_iter_next(it)) {
    char letter = type_letter(ITER_TYPE(it));
    uint32_t kl = ITER_KEY_LEN(it);
    const char *k = ITER_KEY(it);
    int pushed = 0;
    if (matching) {
      if (poff + kl + 2 <= plen && pb[poff] == letter && memcmp(pb + poff + 1, k, (size_t)kl + 1) == 0) {
        poff += kl + 2;
        /* the list holds the keys the bytes spell, one to one unless a key
         * repeats (then the list is behind) */
        if (unique) {
          lua_rawgeti(L, t + 2, (lua_Integer)n + 1);
          pushed = lua_type(L, -1) == LUA_TSTRING;
          if (!pushed) lua_pop(L, 1);
        }
      } else {
        matching = 0;
        unpredict(L, sh, &first, n);
      }
    }
    if (!matching) shape_put_field(L, sh, letter, k, kl);
    if (!pushed) lua_pushlstring(L, k, kl);
    if (doc_value(L, c, it, depth + 1)) { lua_settop(L, t - 1); return -1; }
    /* a nested read that filled the cache emptied it: pb is gone */
    if (matching && sh->gen != gen) {
      matching = 0;
      unpredict(L, sh, &first, n + 1);
    }
    lua_rawset(L, t);
    n++;
  }
  if (it->err_off != 0) {
    lua_settop(L, t - 1);
    ms_err_set(c->e, "server", "corrupt document from the server (at byte %u)", (unsigned)it->err_off);
    return -1;
  }
  sh->hint_doc[depth] = n < SHAPE_HINT_MAX ? n : SHAPE_HINT_MAX;
  if (matching && poff == plen) {
    lua_pushvalue(L, t + 1);
    lua_setmetatable(L, t);
  } else {
    if (matching) unpredict(L, sh, &first, n);
    if (n > 0) {                                      /* an empty document needs no shape */
      sh->pred[depth] = shape_push(L, c, start) + 1;
      lua_setmetatable(L, t);
    }
  }
  lua_settop(L, t);
  sh->len = start;
  return 0;
}

static int doc_table(lua_State *L, dctx_t *c, bson_iter_t *it, int is_array, int depth) {
  luaL_checkstack(L, 8, "mongostore: document too deep");
  return is_array ? doc_array(L, c, it, depth) : doc_object(L, c, it, depth);
}

/* Pushes the cache, its list and the array mark (three slots) for a read
 * with c. */
static void dctx_open(lua_State *L, dctx_t *c, ms_err_t *e) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &shapes_key);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    open_shapes(L);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &shapes_key);
  }
  c->sh = (shapes_t *)lua_touserdata(L, -1);
  c->sh->len = 0;                                    /* a read cut short by a Lua error left some */
  c->e = e;
  lua_rawgetp(L, LUA_REGISTRYINDEX, &shapes_list_key);
  c->list = lua_gettop(L);
  luaL_getmetatable(L, MS_ARRAY_MT);
  c->mark = lua_gettop(L);
}

int ms_push_document_value(lua_State *L, const bson_iter_t *it, ms_err_t *e) {
  dctx_t c;
  int rc;
  switch (bson_iter_type(it)) {
  case BSON_TYPE_DOCUMENT:
  case BSON_TYPE_ARRAY:
    break;
  default:
    /* a value that is not a table needs no cache */
    c.e = e;
    c.sh = NULL;
    return doc_value(L, &c, it, 1);
  }
  luaL_checkstack(L, 8, "mongostore: document too deep");
  dctx_open(L, &c, e);
  /* a field of a document: one level down, as ms_push_document reads it */
  rc = doc_value(L, &c, it, 1);
  if (rc == 0) lua_replace(L, c.list - 1);
  lua_settop(L, c.list - 1 - (rc != 0));
  return rc;
}

int ms_push_document(lua_State *L, const bson_t *doc, ms_err_t *e) {
  bson_iter_t it;
  dctx_t c;
  int rc;
  if (!bson_iter_init(&it, doc)) {
    ms_err_set(e, "server", "corrupt document from the server");
    return -1;
  }
  dctx_open(L, &c, e);
  rc = doc_table(L, &c, &it, 0, 0);
  if (rc == 0) lua_replace(L, c.list - 1);
  lua_settop(L, c.list - 1 - (rc != 0));
  return rc;
}
