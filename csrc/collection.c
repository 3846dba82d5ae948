/*
 * collection.c - the Collection userdata (mongostore.Collection, from
 * db:collection(name)): inserts, finds, counts, updates, replaces, deletes,
 * find-and-modify, aggregate, distinct, and what every method shares
 * (document.h); insert_many and bulk_write are bulk.c's, the indexes and
 * drop indexes.c's. The Lua half (lua/mongostore/database.lua) checks
 * argument types and option keys first; every input is encoded before any
 * libmongoc call, and no Lua error is raised while one is on the C stack.
 */
#include "document.h"
#include "codec.h"

#include <stdio.h>
#include <string.h>

#include <mongoc/mongoc.h>

/* pre, the decimal i, then post, into buf ("docs[12]"): once per document
 * or op, where snprintf would cost more than some encodings. */
void ms_index_name(char *buf, size_t size, const char *pre, size_t i, const char *post) {
  char digits[24];
  size_t nd = 0, at = 0;
  do {
    digits[nd++] = (char)('0' + i % 10);
    i /= 10;
  } while (i && nd < sizeof digits);
  for (; *pre && at + 1 < size; pre++) buf[at++] = *pre;
  while (nd && at + 1 < size) buf[at++] = digits[--nd];
  for (; *post && at + 1 < size; post++) buf[at++] = *post;
  buf[at] = '\0';
}

/* a then b into buf, cut as snprintf would */
void ms_name_join(char *buf, size_t size, const char *a, const char *b) {
  size_t at = 0;
  for (; *a && at + 1 < size; a++) buf[at++] = *a;
  for (; *b && at + 1 < size; b++) buf[at++] = *b;
  buf[at] = '\0';
}

/* The first line of every method: the collection, its options at opts_idx
 * and the name of the call (its errors' prefix is made from it only when
 * one is reported); 0 when its database is closed. */
int ms_call_begin(lua_State *L, ms_call_t *k, const char *op, int opts_idx) {
  k->c = (ms_collection_t *)luaL_checkudata(L, 1, MS_COLLECTION_MT);
  k->db = k->c->db;
  k->opts = opts_idx && lua_istable(L, opts_idx) ? opts_idx : 0;
  k->op = op;
  k->doing[0] = '\0';
  if (!k->db->client) return 0;
  k->db->op_started = ms_now();
  ms_failed_reset();
  return 1;
}

const char *ms_call_doing(const ms_call_t *k) {
  /* the buffer is the call's own, filled on first use: const for callers */
  char *doing = ((ms_call_t *)k)->doing;
  if (!doing[0]) {
    size_t at;
    ms_name_join(doing, sizeof k->doing, k->op, " ");
    at = strlen(doing);
    ms_name_join(doing + at, sizeof k->doing - at, k->c->name, "");
  }
  return doing;
}

int ms_call_fail(lua_State *L, const ms_call_t *k, ms_err_t *e) {
  ms_err_prefix(e, ms_call_doing(k));
  ms_scrub(k->db->password, e);
  return ms_push_error(L, e);
}

int ms_call_fail_bson(lua_State *L, const ms_call_t *k, const bson_error_t *be, const bson_t *reply) {
  return ms_document_push_error(L, k->db, be, reply, ms_call_doing(k));
}

/* ---- encoding arguments and options (no Lua error, no libmongoc) ---- */

/* A document argument (filter, update, replacement); nil is {} when
 * may_be_nil; *found: what value.c's encoder saw (MS_FOUND_*). */
int ms_doc_arg(lua_State *L, int idx, bson_t *out, const char *what, int may_be_nil, int *found, ms_err_t *e) {
  *found = 0;
  if (lua_isnoneornil(L, idx) && may_be_nil) return 0;
  if (lua_type(L, idx) != LUA_TTABLE) {
    ms_err_set(e, "invalid", "%s must be a table, got %s", what, luaL_typename(L, idx));
    return -1;
  }
  return ms_document_to_bson(L, idx, out, what, found, e);
}

/* A list argument (a pipeline, an update pipeline) as a BSON array under key
 * in out. */
static int list_arg(lua_State *L, int idx, bson_t *out, const char *key, const char *what, int *found, ms_err_t *e) {
  bson_t arr;
  ms_path_t p;
  size_t n, i;
  int rc = 0;
  idx = lua_absindex(L, idx);
  if (lua_type(L, idx) != LUA_TTABLE) {
    ms_err_set(e, "invalid", "%s must be a list, got %s", what, luaL_typename(L, idx));
    return -1;
  }
  ms_path_init(&p, what);
  if ((rc = ms_table_enter(L, idx, &p, &n, e)) < 0) return -1;
  if (rc != MS_KIND_ARRAY) {
    lua_pushnil(L);
    n = lua_next(L, idx) ? 1 : 0;
    lua_pop(L, n ? 2 : 0);
    ms_path_leave(&p);
    if (n) {
      ms_err_set(e, "invalid", "%s must be a list, got a table with keys", what);
      return -1;
    }
  }
  rc = 0;
  bson_append_array_begin(out, key, -1, &arr);
  for (i = 1; i <= n && rc == 0; i++) {
    char kb[16];
    const char *ks;
    size_t kl, old = p.len;
    lua_rawgeti(L, idx, (lua_Integer)i);
    kl = bson_uint32_to_string((uint32_t)(i - 1), &ks, kb, sizeof kb);
    ms_path_push_index(&p, i);
    rc = ms_document_append_value(L, -1, &arr, ks, kl, &p, found, e);
    ms_path_pop_key(&p, old);
    lua_pop(L, 1);
  }
  bson_append_array_end(out, &arr);
  ms_path_leave(&p);
  return rc;
}

/* 1 when the table at idx is a non-empty list (an update pipeline). */
static int is_list(lua_State *L, int idx) {
  size_t n;
  ms_err_t e;
  return lua_type(L, idx) == LUA_TTABLE && lua_rawlen(L, idx) > 0 && ms_table_kind(L, idx, &n, &e) == MS_KIND_ARRAY;
}

/* An update: a document of operators, or a pipeline (a list of stages),
 * which libmongoc takes as a document keyed "0", "1", ... *found as
 * doc_arg's, MS_FOUND_PIPELINE for a pipeline. */
int ms_update_arg(lua_State *L, int idx, bson_t *out, const char *what, int *found, ms_err_t *e) {
  if (is_list(L, idx)) {
    bson_t tmp = BSON_INITIALIZER;
    bson_iter_t it;
    int rc;
    *found = MS_FOUND_PIPELINE;
    rc = list_arg(L, idx, &tmp, "u", what, found, e);
    if (rc == 0 && bson_iter_init_find(&it, &tmp, "u")) {
      uint32_t len;
      const uint8_t *data;
      bson_t arr;
      bson_iter_array(&it, &len, &data);
      if (bson_init_static(&arr, data, len)) bson_concat(out, &arr);
    }
    bson_destroy(&tmp);
    return rc;
  }
  if (ms_doc_arg(L, idx, out, what, 0, found, e)) return -1;
  return ms_storable(out, *found, what, e);
}

/* Reads an option: its Lua type, with the value pushed (nil pushed when there
 * are no options). */
int ms_call_opt(lua_State *L, const ms_call_t *k, const char *name) {
  if (!k->opts) {
    lua_pushnil(L);
    return LUA_TNIL;
  }
  return lua_getfield(L, k->opts, name);
}

/* A non-negative integer option into o under key; absent is fine. */
int ms_call_int_opt(lua_State *L, const ms_call_t *k, const char *name, bson_t *o, const char *key, ms_err_t *e) {
  int64_t v;
  int t = ms_call_opt(L, k, name), rc = 0;
  if (t != LUA_TNIL) {
    if (!ms_to_int64(L, -1, &v) || v < 0) {
      ms_err_set(e, "invalid", "opts.%s must be an integer >= 0", name);
      rc = -1;
    } else {
      bson_append_int64(o, key, -1, v);
    }
  }
  lua_pop(L, 1);
  return rc;
}

int ms_call_bool_opt(lua_State *L, const ms_call_t *k, const char *name, int *out) {
  int t = ms_call_opt(L, k, name);
  *out = t == LUA_TBOOLEAN ? lua_toboolean(L, -1) : 0;
  lua_pop(L, 1);
  return t == LUA_TNIL || t == LUA_TBOOLEAN ? 0 : -1;
}

/* An ordered option (sort, projection, keys, hint given as a document) into
 * o under key. */
static int ordered_opt(lua_State *L, const ms_call_t *k, const char *name, bson_t *o, const char *key, int mode,
                       ms_err_t *e) {
  int t = ms_call_opt(L, k, name), rc = 0;
  if (t == LUA_TSTRING && strcmp(name, "hint") == 0) {
    size_t n;
    const char *s = lua_tolstring(L, -1, &n);
    bson_append_utf8(o, key, -1, s, (int)n);
  } else if (t != LUA_TNIL) {
    bson_t child = BSON_INITIALIZER;
    char what[32];
    snprintf(what, sizeof what, "opts.%s", name);
    rc = ms_ordered_to_bson(L, -1, &child, what, mode, e);
    if (rc == 0) bson_append_document(o, key, -1, &child);
    bson_destroy(&child);
  }
  lua_pop(L, 1);
  return rc;
}

int ms_call_session(lua_State *L, const ms_call_t *k, bson_t *o, ms_err_t *e) {
  return ms_session_append(L, k->opts, k->db, o, e);
}

/* Refuses a document over the server's limit before it is sent. */
int ms_size_ok(const ms_call_t *k, const bson_t *doc, const char *what, ms_err_t *e) {
  if ((int64_t)doc->len > (int64_t)k->db->max_bson) {
    ms_err_set(e, "too_large", "%s is %u bytes, over the server's limit of %d", what, (unsigned)doc->len,
               (int)k->db->max_bson);
    return -1;
  }
  return 0;
}

/* ---- results ---- */

int64_t ms_reply_int(const bson_t *reply, const char *key) {
  bson_iter_t it;
  if (bson_iter_init_find(&it, reply, key) && BSON_ITER_HOLDS_NUMBER(&it)) return bson_iter_as_int64(&it);
  return 0;
}

/* Pushes the value under key of doc through the document codec, or nil. */
int ms_push_field(lua_State *L, const bson_t *doc, const char *key, ms_err_t *e) {
  bson_iter_t it;
  if (!bson_iter_init_find(&it, doc, key)) {
    lua_pushnil(L);
    return 0;
  }
  return ms_push_document_value(L, &it, e);
}

/* ---- inserts ---- */

/* A stored document (an insert, a replacement) may not have a top-level key
 * starting with '$': that is an update given where a document belongs, and
 * servers differ on storing it. Nested ones stay (a DBRef's $ref, $id). */
int ms_check_top_keys(const bson_t *doc, const char *what, ms_err_t *e) {
  bson_iter_t it;
  if (!bson_iter_init(&it, doc)) return 0;
  while (bson_iter_next(&it)) {
    if (bson_iter_key(&it)[0] == '$') {
      ms_err_set(e, "invalid", "%s: top-level key '%.64s' starts with '$' (an update operator where a document "
                 "belongs?)", what, bson_iter_key(&it));
      return -1;
    }
  }
  return 0;
}

/* The document at idx encoded into out (initialised by the caller, who
 * destroys it) with an ObjectId made here first when it has no _id, so the
 * caller knows the id of what it inserted. */
int ms_encode_insert(lua_State *L, const ms_call_t *k, int idx, bson_t *out, const char *what, int *found,
                         ms_err_t *e) {
  int has_id;
  *found = 0;
  idx = lua_absindex(L, idx);
  if (lua_type(L, idx) != LUA_TTABLE) {
    ms_err_set(e, "invalid", "%s must be a table, got %s", what, luaL_typename(L, idx));
    return -1;
  }
  lua_pushliteral(L, "_id");
  has_id = lua_rawget(L, idx) != LUA_TNIL;
  lua_pop(L, 1);
  if (!has_id) {
    bson_oid_t oid;
    bson_oid_init(&oid, NULL);
    bson_append_oid(out, "_id", 3, &oid);
  }
  if (ms_document_to_bson(L, idx, out, what, found, e) || ms_storable(out, *found, what, e) ||
      ((*found & MS_FOUND_TOP_DOLLAR) && ms_check_top_keys(out, what, e)))
    return -1;
  return ms_size_ok(k, out, what, e);
}

/* c:insert_one(doc, opts) -> { inserted_id = id } */
static int l_insert_one(lua_State *L) {
  bson_t doc = BSON_INITIALIZER, opts = BSON_INITIALIZER, reply;
  bson_error_t be;
  ms_err_t e;
  int ok, n, found;
  MS_CALL_BEGIN(L, k, "insert_one", 3);
  if (ms_call_session(L, &k, &opts, &e)) {
    bson_destroy(&opts);
    return ms_call_fail(L, &k, &e);
  }
  if (ms_encode_insert(L, &k, 2, &doc, "doc", &found, &e)) {
    bson_destroy(&opts);
    bson_destroy(&doc);
    return ms_call_fail(L, &k, &e);
  }
  if (!(found & MS_NEEDS_CHECKS)) ms_no_validation(&opts);
  ok = mongoc_collection_insert_one(k.c->coll, &doc, &opts, &reply, &be);
  bson_destroy(&opts);
  if (!ok) {
    n = ms_call_fail_bson(L, &k, &be, &reply);
  } else {
    lua_createtable(L, 0, 1);
    if (ms_push_field(L, &doc, "_id", &e)) n = ms_call_fail(L, &k, &e);
    else {
      lua_setfield(L, -2, "inserted_id");
      n = 1;
    }
  }
  bson_destroy(&reply);
  bson_destroy(&doc);
  return n;
}

/* ---- finds ---- */

/* find's options into o: projection, sort, skip, limit, batch_size, hint,
 * session. */
static int find_opts(lua_State *L, const ms_call_t *k, bson_t *o, ms_err_t *e) {
  if (ordered_opt(L, k, "projection", o, "projection", MS_ORDER_ANY, e) ||
      ordered_opt(L, k, "sort", o, "sort", MS_ORDER_STRICT, e) || ms_call_int_opt(L, k, "skip", o, "skip", e) ||
      ms_call_int_opt(L, k, "limit", o, "limit", e) || ms_call_int_opt(L, k, "batch_size", o, "batchSize", e) ||
      ordered_opt(L, k, "hint", o, "hint", MS_ORDER_STRICT, e) || ms_call_session(L, k, o, e))
    return -1;
  return 0;
}

/* c:find(filter, opts) -> a Cursor (the first batch already read). */
static int l_find(lua_State *L) {
  bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER;
  ms_err_t e;
  mongoc_cursor_t *cur;
  MS_CALL_BEGIN(L, k, "find", 3);
  if (ms_doc_arg(L, 2, &filter, "filter", 1, &k.found, &e) || find_opts(L, &k, &opts, &e)) {
    bson_destroy(&filter);
    bson_destroy(&opts);
    return ms_call_fail(L, &k, &e);
  }
  cur = mongoc_collection_find_with_opts(k.c->coll, &filter, &opts, NULL);
  bson_destroy(&filter);
  bson_destroy(&opts);
  ms_database_push_ref(L, k.c->db_ref);
  return ms_cursor_new(L, -1, k.db, cur, ms_call_doing(&k));
}

/* c:find_one(filter, { projection, sort, skip, hint, session }) -> doc, or
 * nil when nothing matches. */
static int l_find_one(lua_State *L) {
  bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER;
  bson_error_t be;
  const bson_t *doc, *reply = NULL;
  ms_err_t e;
  mongoc_cursor_t *cur;
  int n;
  MS_CALL_BEGIN(L, k, "find_one", 3);
  if (ms_doc_arg(L, 2, &filter, "filter", 1, &k.found, &e) || find_opts(L, &k, &opts, &e)) {
    bson_destroy(&filter);
    bson_destroy(&opts);
    return ms_call_fail(L, &k, &e);
  }
  bson_append_int64(&opts, "limit", 5, 1);
  bson_append_bool(&opts, "singleBatch", 11, true);
  cur = mongoc_collection_find_with_opts(k.c->coll, &filter, &opts, NULL);
  bson_destroy(&filter);
  bson_destroy(&opts);
  if (mongoc_cursor_next(cur, &doc)) {
    n = ms_push_document(L, doc, &e) ? ms_call_fail(L, &k, &e) : 1;
  } else if (mongoc_cursor_error_document(cur, &be, &reply)) {
    n = ms_call_fail_bson(L, &k, &be, reply);
  } else {
    lua_pushnil(L);
    n = 1;
  }
  mongoc_cursor_destroy(cur);
  return n;
}

/* c:count(filter, { skip, limit, hint, session }) -> n */
static int l_count(lua_State *L) {
  bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, reply;
  bson_error_t be;
  ms_err_t e;
  int64_t count;
  int n;
  MS_CALL_BEGIN(L, k, "count", 3);
  if (ms_doc_arg(L, 2, &filter, "filter", 1, &k.found, &e) || ms_call_int_opt(L, &k, "skip", &opts, "skip", &e) ||
      ms_call_int_opt(L, &k, "limit", &opts, "limit", &e) || ordered_opt(L, &k, "hint", &opts, "hint", MS_ORDER_STRICT, &e) ||
      ms_call_session(L, &k, &opts, &e)) {
    bson_destroy(&filter);
    bson_destroy(&opts);
    return ms_call_fail(L, &k, &e);
  }
  count = mongoc_collection_count_documents(k.c->coll, &filter, &opts, NULL, &reply, &be);
  bson_destroy(&filter);
  bson_destroy(&opts);
  if (count < 0) n = ms_call_fail_bson(L, &k, &be, &reply);
  else {
    lua_pushinteger(L, (lua_Integer)count);
    n = 1;
  }
  bson_destroy(&reply);
  return n;
}

/* ---- updates, replaces, deletes ---- */

enum { W_UPDATE_ONE, W_UPDATE_MANY, W_REPLACE_ONE, W_DELETE_ONE, W_DELETE_MANY };

void ms_write_opts(bson_t *b, int no_validate, int upsert) {
  static const uint8_t none[5] = {5, 0, 0, 0, 0};
  static const uint8_t unchecked[16] = {16, 0, 0, 0, BSON_TYPE_BOOL, 'v', 'a', 'l', 'i', 'd', 'a', 't', 'e', 0, 0, 0};
  static const uint8_t upserting[14] = {14, 0, 0, 0, BSON_TYPE_BOOL, 'u', 'p', 's', 'e', 'r', 't', 0, 1, 0};
  static const uint8_t both[25] = {25, 0, 0, 0, BSON_TYPE_BOOL, 'u', 'p', 's', 'e', 'r', 't', 0, 1,
                                   BSON_TYPE_BOOL, 'v', 'a', 'l', 'i', 'd', 'a', 't', 'e', 0, 0, 0};
  if (no_validate && upsert) bson_init_static(b, both, sizeof both);
  else if (no_validate) bson_init_static(b, unchecked, sizeof unchecked);
  else if (upsert) bson_init_static(b, upserting, sizeof upserting);
  else bson_init_static(b, none, sizeof none);
}

int ms_replacement_arg(lua_State *L, const ms_call_t *k, int idx, bson_t *out, const char *what, int *clean,
                       ms_err_t *e) {
  int found = 0;
  if (ms_doc_arg(L, idx, out, what, 0, &found, e) || ms_storable(out, found, what, e) ||
      ((found & MS_FOUND_TOP_DOLLAR) && ms_check_top_keys(out, what, e)) || ms_size_ok(k, out, what, e))
    return -1;
  *clean = !(found & MS_NEEDS_CHECKS);
  return 0;
}

/* The second argument of an update (a document of operators or a
 * pipeline) or of a replace; *clean when libmongoc need not validate it
 * again. */
static int write_body(lua_State *L, const ms_call_t *k, int kind, bson_t *body, int *clean, ms_err_t *e) {
  int found = 0;
  if (kind == W_REPLACE_ONE) return ms_replacement_arg(L, k, 3, body, "replacement", clean, e);
  if (ms_update_arg(L, 3, body, "update", &found, e)) return -1;
  *clean = ms_update_is_clean(found);
  return 0;
}

/* opts.upsert of an update or replace; an upsert stores the filter's
 * equality fields, so the filter is checked as a stored document then. */
static int write_upsert(lua_State *L, const ms_call_t *k, const bson_t *filter, int ffound, int *upsert,
                        ms_err_t *e) {
  if (ms_call_bool_opt(L, k, "upsert", upsert)) {
    ms_err_set(e, "invalid", "opts.upsert must be a boolean");
    return -1;
  }
  return *upsert ? ms_storable(filter, ffound, "filter", e) : 0;
}

/* An update's reply, read in one pass, as { matched, modified, upserted_id }. */
static int push_update_result(lua_State *L, const bson_t *reply, ms_err_t *e) {
  bson_iter_t it;
  int64_t matched = 0, modified = 0;
  lua_createtable(L, 0, 3);
  if (bson_iter_init(&it, reply)) {
    while (bson_iter_next(&it)) {
      const char *key = bson_iter_key(&it);
      if (strcmp(key, "matchedCount") == 0 && BSON_ITER_HOLDS_NUMBER(&it)) {
        matched = bson_iter_as_int64(&it);
      } else if (strcmp(key, "modifiedCount") == 0 && BSON_ITER_HOLDS_NUMBER(&it)) {
        modified = bson_iter_as_int64(&it);
      } else if (strcmp(key, "upsertedId") == 0) {
        if (ms_push_document_value(L, &it, e)) return -1;
        lua_setfield(L, -2, "upserted_id");
      }
    }
  }
  lua_pushinteger(L, (lua_Integer)matched);
  lua_setfield(L, -2, "matched");
  lua_pushinteger(L, (lua_Integer)modified);
  lua_setfield(L, -2, "modified");
  return 0;
}

static int run_write(const ms_call_t *k, int kind, const bson_t *filter, const bson_t *body, const bson_t *opts,
                     bson_t *reply, bson_error_t *be) {
  mongoc_collection_t *coll = k->c->coll;
  switch (kind) {
  case W_UPDATE_ONE: return mongoc_collection_update_one(coll, filter, body, opts, reply, be);
  case W_UPDATE_MANY: return mongoc_collection_update_many(coll, filter, body, opts, reply, be);
  case W_REPLACE_ONE: return mongoc_collection_replace_one(coll, filter, body, opts, reply, be);
  case W_DELETE_ONE: return mongoc_collection_delete_one(coll, filter, opts, reply, be);
  default: return mongoc_collection_delete_many(coll, filter, opts, reply, be);
  }
}

/* The result of a write that went through. */
static int push_write_result(lua_State *L, const ms_call_t *k, int is_delete, const bson_t *reply) {
  ms_err_t e;
  if (!is_delete) return push_update_result(L, reply, &e) ? ms_call_fail(L, k, &e) : 1;
  lua_createtable(L, 0, 1);
  lua_pushinteger(L, (lua_Integer)ms_reply_int(reply, "deletedCount"));
  lua_setfield(L, -2, "deleted");
  return 1;
}

/* The five single writes: every input encoded, then one libmongoc call.
 * Their options are static BSON (ms_write_opts) unless a session is given. */
static int write_one(lua_State *L, int kind, const char *op) {
  bson_t filter = BSON_INITIALIZER, body = BSON_INITIALIZER, own = BSON_INITIALIZER, fixed, reply;
  bson_error_t be;
  ms_err_t e;
  int is_delete = kind == W_DELETE_ONE || kind == W_DELETE_MANY, ok, n, rc, upsert = 0, ffound, clean = 0;
  MS_CALL_BEGIN(L, k, op, is_delete ? 3 : 4);
  rc = ms_doc_arg(L, 2, &filter, "filter", 0, &ffound, &e);
  if (rc == 0 && !is_delete) rc = write_body(L, &k, kind, &body, &clean, &e);
  if (rc == 0 && !is_delete) rc = write_upsert(L, &k, &filter, ffound, &upsert, &e);
  if (rc == 0) rc = ms_call_session(L, &k, &own, &e);
  if (rc) {
    bson_destroy(&filter);
    bson_destroy(&body);
    bson_destroy(&own);
    return ms_call_fail(L, &k, &e);
  }
  ms_write_opts(&fixed, clean, upsert);
  if (!bson_empty(&own)) bson_concat(&own, &fixed);
  ok = run_write(&k, kind, &filter, &body, bson_empty(&own) ? &fixed : &own, &reply, &be);
  bson_destroy(&filter);
  bson_destroy(&body);
  bson_destroy(&own);
  n = ok ? push_write_result(L, &k, is_delete, &reply) : ms_call_fail_bson(L, &k, &be, &reply);
  bson_destroy(&reply);
  return n;
}

/* c:update_one(filter, update, { upsert, session }) -> { matched, modified, upserted_id } */
static int l_update_one(lua_State *L) { return write_one(L, W_UPDATE_ONE, "update_one"); }
static int l_update_many(lua_State *L) { return write_one(L, W_UPDATE_MANY, "update_many"); }
/* c:replace_one(filter, doc, { upsert, session }) -> { matched, modified, upserted_id } */
static int l_replace_one(lua_State *L) { return write_one(L, W_REPLACE_ONE, "replace_one"); }
/* c:delete_one(filter, { session }) -> { deleted } */
static int l_delete_one(lua_State *L) { return write_one(L, W_DELETE_ONE, "delete_one"); }
static int l_delete_many(lua_State *L) { return write_one(L, W_DELETE_MANY, "delete_many"); }

/* ---- find and modify ---- */

/* Points *into at the document under key in from, without a copy (it lives
 * as long as from does): 1 when there is one. *into, an initialized
 * bson_t, is destroyed first. */
static int borrow_document(const bson_t *from, const char *key, bson_t *into) {
  bson_iter_t it;
  uint32_t len;
  const uint8_t *data;
  if (!bson_iter_init_find(&it, from, key) || !BSON_ITER_HOLDS_DOCUMENT(&it)) return 0;
  bson_iter_document(&it, &len, &data);
  bson_destroy(into);
  bson_init_static(into, data, len);
  return 1;
}

static int find_and_modify(lua_State *L, int remove, const char *op) {
  bson_t filter = BSON_INITIALIZER, update = BSON_INITIALIZER, sort = BSON_INITIALIZER,
         fields = BSON_INITIALIZER, extra = BSON_INITIALIZER, reply, tmp = BSON_INITIALIZER;
  bson_error_t be;
  ms_err_t e;
  mongoc_find_and_modify_opts_t *fam;
  bson_iter_t it;
  int rc, ok = 0, n, upsert = 0, ret_new = 0, flags = MONGOC_FIND_AND_MODIFY_NONE, ffound;
  MS_CALL_BEGIN(L, k, op, remove ? 3 : 4);
  rc = ms_doc_arg(L, 2, &filter, "filter", 0, &ffound, &e);
  if (rc == 0 && !remove) rc = ms_update_arg(L, 3, &update, "update", &k.found, &e);
  if (rc == 0) rc = ordered_opt(L, &k, "sort", &tmp, "sort", MS_ORDER_STRICT, &e);
  if (rc == 0) rc = ordered_opt(L, &k, "projection", &tmp, "projection", MS_ORDER_ANY, &e);
  if (rc == 0 && !remove && (ms_call_bool_opt(L, &k, "upsert", &upsert) || ms_call_bool_opt(L, &k, "new", &ret_new))) {
    ms_err_set(&e, "invalid", "opts.upsert and opts.new must be booleans");
    rc = -1;
  }
  if (rc == 0 && upsert) rc = ms_storable(&filter, ffound, "filter", &e);
  if (rc == 0) rc = ms_call_session(L, &k, &extra, &e);
  if (rc == 0) {
    fam = mongoc_find_and_modify_opts_new();
    if (remove) flags |= MONGOC_FIND_AND_MODIFY_REMOVE;
    else mongoc_find_and_modify_opts_set_update(fam, &update);
    if (upsert) flags |= MONGOC_FIND_AND_MODIFY_UPSERT;
    if (ret_new) flags |= MONGOC_FIND_AND_MODIFY_RETURN_NEW;
    mongoc_find_and_modify_opts_set_flags(fam, (mongoc_find_and_modify_flags_t)flags);
    if (borrow_document(&tmp, "sort", &sort)) mongoc_find_and_modify_opts_set_sort(fam, &sort);
    if (borrow_document(&tmp, "projection", &fields)) mongoc_find_and_modify_opts_set_fields(fam, &fields);
    mongoc_find_and_modify_opts_append(fam, &extra);
    ok = mongoc_collection_find_and_modify_with_opts(k.c->coll, &filter, fam, &reply, &be);
    mongoc_find_and_modify_opts_destroy(fam);
  }
  bson_destroy(&filter);
  bson_destroy(&update);
  bson_destroy(&sort);
  bson_destroy(&fields);
  bson_destroy(&extra);
  bson_destroy(&tmp);
  if (rc) return ms_call_fail(L, &k, &e);
  if (!ok) n = ms_call_fail_bson(L, &k, &be, &reply);
  else if (bson_iter_init_find(&it, &reply, "value") && BSON_ITER_HOLDS_DOCUMENT(&it))
    n = ms_push_field(L, &reply, "value", &e) ? ms_call_fail(L, &k, &e) : 1;
  else {
    lua_pushnil(L);
    n = 1;
  }
  bson_destroy(&reply);
  return n;
}

/* c:find_one_and_update(filter, update, { new, upsert, sort, projection,
 * session }) -> the document before (or after, with new) the update, or nil */
static int l_find_one_and_update(lua_State *L) { return find_and_modify(L, 0, "find_one_and_update"); }
/* c:find_one_and_delete(filter, { sort, projection, session }) -> the deleted document, or nil */
static int l_find_one_and_delete(lua_State *L) { return find_and_modify(L, 1, "find_one_and_delete"); }

/* ---- aggregate, distinct ---- */

/* c:aggregate(pipeline, { batch_size, hint, session }) -> a Cursor */
static int l_aggregate(lua_State *L) {
  bson_t pipeline = BSON_INITIALIZER, opts = BSON_INITIALIZER;
  ms_err_t e;
  mongoc_cursor_t *cur;
  MS_CALL_BEGIN(L, k, "aggregate", 3);
  if (list_arg(L, 2, &pipeline, "pipeline", "pipeline", &k.found, &e) ||
      ms_call_int_opt(L, &k, "batch_size", &opts, "batchSize", &e) ||
      ordered_opt(L, &k, "hint", &opts, "hint", MS_ORDER_STRICT, &e) || ms_call_session(L, &k, &opts, &e)) {
    bson_destroy(&pipeline);
    bson_destroy(&opts);
    return ms_call_fail(L, &k, &e);
  }
  cur = mongoc_collection_aggregate(k.c->coll, MONGOC_QUERY_NONE, &pipeline, &opts, NULL);
  bson_destroy(&pipeline);
  bson_destroy(&opts);
  ms_database_push_ref(L, k.c->db_ref);
  return ms_cursor_new(L, -1, k.db, cur, ms_call_doing(&k));
}

/* c:distinct(field, filter, { session }) -> the list of distinct values */
static int l_distinct(lua_State *L) {
  bson_t cmd = BSON_INITIALIZER, filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, reply;
  bson_error_t be;
  ms_err_t e;
  size_t fl = 0;
  const char *field;
  int n, ok;
  MS_CALL_BEGIN(L, k, "distinct", 4);
  field = lua_type(L, 2) == LUA_TSTRING ? lua_tolstring(L, 2, &fl) : NULL;
  if (!field || ms_text_error(field, fl)) {
    ms_err_set(&e, "invalid", "field must be a non-empty UTF-8 string without NUL");
    bson_destroy(&cmd);
    return ms_call_fail(L, &k, &e);
  }
  if (ms_doc_arg(L, 3, &filter, "filter", 1, &k.found, &e) || ms_call_session(L, &k, &opts, &e)) {
    bson_destroy(&cmd);
    bson_destroy(&filter);
    bson_destroy(&opts);
    return ms_call_fail(L, &k, &e);
  }
  bson_append_utf8(&cmd, "distinct", 8, k.c->name, -1);
  bson_append_utf8(&cmd, "key", 3, field, (int)fl);
  bson_append_document(&cmd, "query", 5, &filter);
  ok = mongoc_collection_read_command_with_opts(k.c->coll, &cmd, NULL, &opts, &reply, &be);
  bson_destroy(&cmd);
  bson_destroy(&filter);
  bson_destroy(&opts);
  if (!ok) n = ms_call_fail_bson(L, &k, &be, &reply);
  else if (ms_push_field(L, &reply, "values", &e)) n = ms_call_fail(L, &k, &e);
  else {
    if (lua_isnil(L, -1)) {
      lua_pop(L, 1);
      lua_newtable(L);
      ms_mark_array(L, -1);
    }
    n = 1;
  }
  bson_destroy(&reply);
  return n;
}

static int l_name(lua_State *L) {
  ms_collection_t *c = (ms_collection_t *)luaL_checkudata(L, 1, MS_COLLECTION_MT);
  lua_pushstring(L, c->name);
  return 1;
}

static int l_gc(lua_State *L) {
  ms_collection_t *c = (ms_collection_t *)luaL_checkudata(L, 1, MS_COLLECTION_MT);
  if (c->coll) mongoc_collection_destroy(c->coll);
  c->coll = NULL;
  bson_free(c->name);
  c->name = NULL;
  if (c->db_ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, c->db_ref);
  c->db_ref = LUA_NOREF;
  return 0;
}

static int l_tostring(lua_State *L) {
  ms_collection_t *c = (ms_collection_t *)luaL_checkudata(L, 1, MS_COLLECTION_MT);
  lua_pushfstring(L, "mongostore.Collection (%s.%s)", c->db->name ? c->db->name : "?", c->name ? c->name : "?");
  return 1;
}

void ms_open_collection(lua_State *L) {
  static const luaL_Reg methods[] = {
    {"insert_one", l_insert_one},
    {"find_one", l_find_one},
    {"find", l_find},
    {"count", l_count},
    {"update_one", l_update_one},
    {"update_many", l_update_many},
    {"replace_one", l_replace_one},
    {"delete_one", l_delete_one},
    {"delete_many", l_delete_many},
    {"find_one_and_update", l_find_one_and_update},
    {"find_one_and_delete", l_find_one_and_delete},
    {"aggregate", l_aggregate},
    {"distinct", l_distinct},
    {"name", l_name},
    {NULL, NULL}
  };
  static ms_add_methods_t const adders[] = { ms_collection_add_bulk, ms_collection_add_indexes, NULL };
  ms_new_class(L, MS_COLLECTION_MT, methods, adders, l_gc, NULL, l_tostring);
}
