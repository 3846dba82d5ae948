/*
 * bulk.c - the Collection's many-document writes: insert_many and
 * bulk_write, each encoding every document or op before anything is sent,
 * and their results (write errors with 1-based indexes, inserted ids).
 */
#include "document.h"

#include <string.h>

#include <mongoc/mongoc.h>

/* The writeErrors of a bulk reply as { { index = i (1-based), message =,
 * code =, detail = { server_code = } } } (the per-item shape every batch
 * result shares), and the indexes that failed into failed[] (when given). */
static void push_write_errors(lua_State *L, const ms_call_t *k, const bson_t *reply, char *failed, size_t nops) {
  bson_iter_t it, arr, doc;
  lua_Integer i = 0;
  lua_newtable(L);
  ms_mark_array(L, -1);
  if (!bson_iter_init_find(&it, reply, "writeErrors") || !BSON_ITER_HOLDS_ARRAY(&it) || !bson_iter_recurse(&it, &arr))
    return;
  while (bson_iter_next(&arr)) {
    int64_t index = -1, code = 0;
    const char *msg = "";
    ms_err_t e;
    if (!BSON_ITER_HOLDS_DOCUMENT(&arr) || !bson_iter_recurse(&arr, &doc)) continue;
    while (bson_iter_next(&doc)) {
      const char *key = bson_iter_key(&doc);
      if (strcmp(key, "index") == 0 && BSON_ITER_HOLDS_NUMBER(&doc)) index = bson_iter_as_int64(&doc);
      else if (strcmp(key, "code") == 0 && BSON_ITER_HOLDS_NUMBER(&doc)) code = bson_iter_as_int64(&doc);
      else if (strcmp(key, "errmsg") == 0 && BSON_ITER_HOLDS_UTF8(&doc)) msg = bson_iter_utf8(&doc, NULL);
    }
    if (failed && index >= 0 && (size_t)index < nops) failed[index] = 1;
    ms_err_set(&e, code == 11000 || code == 11001 ? "duplicate" : "server", "%s: %s (server code %d)",
               ms_call_doing(k), msg, (int)code);
    ms_scrub(k->db->password, &e);
    lua_createtable(L, 0, 4);
    lua_pushinteger(L, (lua_Integer)(index + 1));
    lua_setfield(L, -2, "index");
    lua_pushstring(L, e.msg);
    lua_setfield(L, -2, "message");
    lua_pushstring(L, e.code);
    lua_setfield(L, -2, "code");
    lua_createtable(L, 0, 1);
    lua_pushinteger(L, (lua_Integer)code);
    lua_setfield(L, -2, "server_code");
    lua_setfield(L, -2, "detail");
    lua_rawseti(L, -2, ++i);
  }
}

/* A bulk's options: ordered (default true) and the session. */
static int bulk_opts(lua_State *L, const ms_call_t *k, bson_t *o, ms_err_t *e) {
  int ordered = 1;
  if (ms_call_opt(L, k, "ordered") == LUA_TBOOLEAN) ordered = lua_toboolean(L, -1);
  lua_pop(L, 1);
  bson_append_bool(o, "ordered", 7, ordered);
  return ms_call_session(L, k, o, e);
}

/* A reply that holds no write errors yet failed (a network error, a write
 * concern error, a refused command): the whole call failed. */
static int whole_failure(const bson_t *reply) {
  bson_iter_t it;
  return !(bson_iter_init_find(&it, reply, "writeErrors") && BSON_ITER_HOLDS_ARRAY(&it) &&
           bson_iter_recurse(&it, &it) && bson_iter_next(&it));
}

/* insert_many's answer after the bulk ran: { inserted = { [i] = id },
 * errors = {...} } from the reply and the ids kept while encoding (failed
 * gets a mark per refused document). Returns what it pushed. */
static int push_insert_result(lua_State *L, const ms_call_t *k, const bson_t *reply, const bson_t *ids,
                              char *failed, size_t n) {
  size_t first_failed = n, i;
  int ordered = 1, rc = 0;
  bson_iter_t it;
  ms_err_t e;
  if (ms_call_opt(L, k, "ordered") == LUA_TBOOLEAN) ordered = lua_toboolean(L, -1);
  lua_pop(L, 1);
  lua_createtable(L, 0, 2);
  push_write_errors(L, k, reply, failed, n);
  for (i = 0; i < n; i++)
    if (failed[i] && i < first_failed) first_failed = i;
  lua_createtable(L, (int)(n < INT32_MAX ? n : 0), 0);
  if (bson_iter_init(&it, ids)) {
    for (i = 0; i < n && rc == 0 && bson_iter_next(&it); i++) {
      /* an ordered insert stops at its first error */
      if (failed[i] || (ordered && i > first_failed)) continue;
      if (ms_push_document_value(L, &it, &e)) rc = -1;
      else lua_rawseti(L, -2, (lua_Integer)(i + 1));
    }
  }
  if (rc) return ms_call_fail(L, k, &e);
  lua_setfield(L, -3, "inserted");
  lua_setfield(L, -2, "errors");
  return 1;
}

/* insert_many's documents on their way into the bulk: scratch is the one
 * reused buffer of the documents added as soon as they are encoded; late
 * holds the documents kept from first_late on (made of them so far), checks
 * marks those libmongoc validates, ids the _id of each document in order. */
typedef struct {
  mongoc_bulk_operation_t *bulk;
  bson_t scratch, ids, unchecked, **late;
  size_t n, made, first_late;
  char *checks;
} insert_batch_t;

/* Encodes docs[i] (at the top of the stack) into the buffer its turn gives
 * it (the scratch, or a kept document of its own from the first that
 * libmongoc validates on), adds it to the bulk if it goes at once (a
 * refusal noted in *irc and *ie, the first one kept) and keeps its _id. */
static int encode_insert_doc(lua_State *L, const ms_call_t *k, insert_batch_t *b, size_t i, int *irc, ms_err_t *ie,
                             ms_err_t *e) {
  char what[32];
  int found, rc;
  bson_t *doc;
  bson_iter_t it;
  bson_error_t be;
  ms_index_name(what, sizeof what, "docs[", i + 1, "]");
  if (b->first_late == b->n) {
    bson_reinit(&b->scratch);
    doc = &b->scratch;
  } else {
    /* sized as the one before: one allocation, not a chain of reallocs */
    doc = b->late[b->made] = bson_sized_new(b->late[b->made - 1]->len + 64);
    b->made++;
  }
  rc = ms_encode_insert(L, k, -1, doc, what, &found, e);
  if (rc) return rc;
  b->checks[i] = (found & MS_NEEDS_CHECKS) != 0;
  if (b->first_late == b->n && b->checks[i]) {
    b->first_late = i;
    b->late = (bson_t **)bson_malloc0((b->n - i) * sizeof *b->late);
    doc = b->late[0] = bson_copy(&b->scratch);
    b->made = 1;
  }
  if (b->first_late == b->n && *irc == 0 && !mongoc_bulk_operation_insert_with_opts(b->bulk, doc, &b->unchecked, &be)) {
    ms_err_set(ie, "invalid", "docs[%zu]: %s", i + 1, be.message);
    *irc = -1;
  }
  if (bson_iter_init_find(&it, doc, "_id")) bson_append_iter(&b->ids, "", 0, &it);
  else bson_append_null(&b->ids, "", 0);
  return 0;
}

/* Nothing is sent before every document is encoded (a bad one refuses the
 * call whole), but a document libmongoc need not validate goes into the
 * bulk (which copies it) as soon as it is encoded, through one reused
 * buffer, and only its _id is kept. From the first that libmongoc validates
 * on, the rest are kept (each its own heap bson_t: an array of bson_t from
 * malloc lacks their alignment) and added after the last is encoded, so the
 * errors come as before: the first document that does not encode, else the
 * first libmongoc refuses. -1 with e set on either. */
static int encode_insert_docs(lua_State *L, const ms_call_t *k, insert_batch_t *b, ms_err_t *e) {
  bson_error_t be;
  ms_err_t ie;
  size_t i;
  int rc = 0, irc = 0;
  b->first_late = b->n;
  for (i = 0; i < b->n && rc == 0; i++) {
    lua_rawgeti(L, 2, (lua_Integer)(i + 1));
    rc = encode_insert_doc(L, k, b, i, &irc, &ie, e);
    lua_pop(L, 1);
  }
  for (i = b->first_late; rc == 0 && irc == 0 && i < b->n; i++) {
    if (!mongoc_bulk_operation_insert_with_opts(b->bulk, b->late[i - b->first_late],
                                                b->checks[i] ? NULL : &b->unchecked, &be)) {
      ms_err_set(&ie, "invalid", "docs[%zu]: %s", i + 1, be.message);
      irc = -1;
    }
  }
  if (rc == 0 && irc) {
    *e = ie;
    rc = -1;
  }
  return rc;
}

/* c:insert_many(docs, { ordered = true }) -> { inserted = { [i] = id },
 * errors = { { index =, message =, code =, detail = } } }: every document is encoded
 * (and refused whole, nothing written) before any is sent. */
static int l_insert_many(lua_State *L) {
  bson_t opts = BSON_INITIALIZER, reply;
  insert_batch_t b = { NULL, BSON_INITIALIZER, BSON_INITIALIZER, BSON_INITIALIZER, NULL, 0, 0, 0, NULL };
  bson_error_t be;
  ms_err_t e;
  size_t i;
  char *failed = NULL;
  int nret;
  MS_CALL_BEGIN(L, k, "insert_many", 3);
  if (lua_type(L, 2) != LUA_TTABLE || ms_table_kind(L, 2, &b.n, &e) != MS_KIND_ARRAY || b.n == 0) {
    ms_err_set(&e, "invalid", "docs must be a non-empty list of documents");
    bson_destroy(&opts);
    return ms_call_fail(L, &k, &e);
  }
  if (bulk_opts(L, &k, &opts, &e)) {
    bson_destroy(&opts);
    return ms_call_fail(L, &k, &e);
  }
  ms_no_validation(&b.unchecked);
  b.bulk = mongoc_collection_create_bulk_operation_with_opts(k.c->coll, &opts);
  bson_destroy(&opts);
  b.checks = (char *)bson_malloc0(b.n);
  if (encode_insert_docs(L, &k, &b, &e)) {
    nret = ms_call_fail(L, &k, &e);
  } else {
    failed = (char *)bson_malloc0(b.n);
    if (!mongoc_bulk_operation_execute(b.bulk, &reply, &be) && whole_failure(&reply)) {
      nret = ms_call_fail_bson(L, &k, &be, &reply);
    } else {
      nret = push_insert_result(L, &k, &reply, &b.ids, failed, b.n);
    }
    bson_destroy(&reply);
  }
  mongoc_bulk_operation_destroy(b.bulk);
  for (i = 0; i < b.made; i++) bson_destroy(b.late[i]);
  bson_free(b.late);
  bson_destroy(&b.scratch);
  bson_destroy(&b.ids);
  bson_destroy(&b.unchecked);
  bson_free(b.checks);
  bson_free(failed);
  return nret;
}

/* ---- bulk_write ---- */

enum { OP_INSERT_ONE, OP_UPDATE_ONE, OP_UPDATE_MANY, OP_REPLACE_ONE, OP_DELETE_ONE, OP_DELETE_MANY };
static const char *const op_names[] = {"insert_one", "update_one", "update_many", "replace_one", "delete_one",
                                       "delete_many", NULL};
/* what follows "ops[i" in the name of each kind's errors */
static const char *const op_tails[] = {"].insert_one", "].update_one", "].update_many", "].replace_one",
                                       "].delete_one", "].delete_many"};

/* The string key at -2 among op_names, or -1. */
static int op_name_of(lua_State *L) {
  size_t n;
  const char *s;
  int j;
  if (lua_type(L, -2) != LUA_TSTRING) return -1;
  s = lua_tolstring(L, -2, &n);
  for (j = 0; op_names[j]; j++)
    if (strlen(op_names[j]) == n && memcmp(s, op_names[j], n) == 0) return j;
  return -1;
}

/* Which of op_names the op at idx holds (its one key), its spec pushed;
 * or -1 with e set, nothing pushed. */
static int op_kind(lua_State *L, int idx, size_t i, ms_err_t *e) {
  int which = -1, nkeys = 0;
  if (lua_type(L, idx) != LUA_TTABLE) {
    ms_err_set(e, "invalid", "ops[%zu] must be a table, got %s", i, luaL_typename(L, idx));
    return -1;
  }
  lua_pushnil(L);   /* the spec's slot */
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    int j = op_name_of(L);
    if (++nkeys == 1 && j >= 0) {
      which = j;
      lua_copy(L, -1, -3);
    }
    lua_pop(L, 1);
  }
  if (nkeys != 1 || which < 0) {
    lua_pop(L, 1);
    ms_err_set(e, "invalid", "ops[%zu] must hold one of insert_one, update_one, update_many, replace_one, "
               "delete_one, delete_many", i);
    return -1;
  }
  return which;
}

/* The parts of an update, replace or delete's spec, each in a stack slot
 * from base (nil when absent): by name, or by position (filter 1, update
 * or replacement 2), the name winning. */
enum { PART_FILTER, PART_BODY, PART_UPSERT, PART_FILTER_AT, PART_BODY_AT, PART_N };

/* The part the key at -2 of an op of kind which names, or -1. */
static int part_of(lua_State *L, int which) {
  size_t n;
  const char *s;
  if (lua_type(L, -2) == LUA_TNUMBER) {
    lua_Number x = lua_tonumber(L, -2);
    return x == 1 ? PART_FILTER_AT : x == 2 && which <= OP_REPLACE_ONE ? PART_BODY_AT : -1;
  }
  if (lua_type(L, -2) != LUA_TSTRING) return -1;
  s = lua_tolstring(L, -2, &n);
  if (n == 6 && memcmp(s, "filter", 6) == 0) return PART_FILTER;
  if (which > OP_REPLACE_ONE) return -1;
  if (n == 6 && memcmp(s, "upsert", 6) == 0) return PART_UPSERT;
  if (which < OP_REPLACE_ONE) return n == 6 && memcmp(s, "update", 6) == 0 ? PART_BODY : -1;
  return n == 11 && memcmp(s, "replacement", 11) == 0 ? PART_BODY : -1;
}

/* Reads the spec at spec into PART_N slots pushed from base (one pass over
 * its keys); -1 with e set on an unknown key. */
static int op_parts(lua_State *L, int spec, int which, const char *what, int *base, ms_err_t *e) {
  int j;
  *base = lua_gettop(L) + 1;
  for (j = 0; j < PART_N; j++) lua_pushnil(L);
  lua_pushnil(L);
  while (lua_next(L, spec)) {
    int part = part_of(L, which);
    if (part < 0) {
      const char *key = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
      ms_err_set(e, "invalid", "%s: unknown key %s", what, key ? key : "(not a name)");
      lua_pop(L, 2);
      return -1;
    }
    lua_copy(L, -1, *base + part);
    lua_pop(L, 1);
  }
  for (j = PART_FILTER; j <= PART_BODY; j++)
    if (lua_isnil(L, *base + j)) lua_copy(L, *base + PART_FILTER_AT + j, *base + j);
  return 0;
}

/* The update or replacement (the part at idx) into b, named what; *clean
 * when libmongoc need not validate it again. */
static int encode_body(lua_State *L, const ms_call_t *k, int idx, int which, const char *what, bson_t *b,
                       int *clean, ms_err_t *e) {
  int found = 0;
  if (which == OP_REPLACE_ONE) return ms_replacement_arg(L, k, idx, b, what, clean, e);
  if (ms_update_arg(L, idx, b, what, &found, e)) return -1;
  *clean = ms_update_is_clean(found);
  return 0;
}

/* The filter (a) and the update or replacement (b) of an update, replace
 * or delete op from its parts at base; *upsert, *clean (libmongoc need not
 * validate b again). what is "ops[i].<name>", with room for a suffix (the
 * part's name while it is encoded). */
static int encode_parts(lua_State *L, const ms_call_t *k, int base, int which, char *what, size_t size, bson_t *a,
                        bson_t *b, int *upsert, int *clean, ms_err_t *e) {
  size_t wl = strlen(what);
  int afound = 0, rc;
  if (lua_isnil(L, base + PART_FILTER)) {
    ms_err_set(e, "invalid", "%s needs a filter", what);
    return -1;
  }
  ms_name_join(what + wl, size - wl, ".filter", "");
  rc = ms_doc_arg(L, base + PART_FILTER, a, what, 0, &afound, e);
  what[wl] = '\0';
  if (rc || which > OP_REPLACE_ONE) return rc;
  if (lua_isnil(L, base + PART_BODY)) {
    ms_err_set(e, "invalid", "%s needs %s", what, which == OP_REPLACE_ONE ? "a replacement" : "an update");
    return -1;
  }
  ms_name_join(what + wl, size - wl, which == OP_REPLACE_ONE ? ".replacement" : ".update", "");
  rc = encode_body(L, k, base + PART_BODY, which, what, b, clean, e);
  what[wl] = '\0';
  if (rc) return rc;
  if (!lua_isnil(L, base + PART_UPSERT) && !lua_isboolean(L, base + PART_UPSERT)) {
    ms_err_set(e, "invalid", "%s.upsert must be a boolean", what);
    return -1;
  }
  if (!(*upsert = lua_toboolean(L, base + PART_UPSERT))) return 0;
  /* an upsert stores the filter's equality fields */
  ms_name_join(what + wl, size - wl, ".filter", "");
  rc = ms_storable(a, afound, what, e);
  what[wl] = '\0';
  return rc;
}

/* Hands an encoded op to libmongoc (which copies it). */
static int bulk_add(mongoc_bulk_operation_t *bulk, int which, const bson_t *a, const bson_t *b, const bson_t *o,
                    bson_error_t *be) {
  switch (which) {
  case OP_INSERT_ONE: return mongoc_bulk_operation_insert_with_opts(bulk, a, o, be);
  case OP_UPDATE_ONE: return mongoc_bulk_operation_update_one_with_opts(bulk, a, b, o, be);
  case OP_UPDATE_MANY: return mongoc_bulk_operation_update_many_with_opts(bulk, a, b, o, be);
  case OP_REPLACE_ONE: return mongoc_bulk_operation_replace_one_with_opts(bulk, a, b, o, be);
  case OP_DELETE_ONE: return mongoc_bulk_operation_remove_one_with_opts(bulk, a, NULL, be);
  default: return mongoc_bulk_operation_remove_many_with_opts(bulk, a, NULL, be);
  }
}

/* Adds ops[i] (the table at idx) to bulk; its kind, or -1 with e set
 * (invalid) when it is malformed or libmongoc refuses it. */
static int add_op(lua_State *L, const ms_call_t *k, mongoc_bulk_operation_t *bulk, int idx, size_t i, ms_err_t *e) {
  bson_t a = BSON_INITIALIZER, b = BSON_INITIALIZER, o;
  bson_error_t be;
  char what[64];
  int which, rc, spec, base, found = 0, clean = 0, upsert = 0;
  idx = lua_absindex(L, idx);
  if ((which = op_kind(L, idx, i, e)) < 0) return -1;
  spec = lua_gettop(L);
  ms_index_name(what, sizeof what - 16, "ops[", i, op_tails[which]);
  if (which == OP_INSERT_ONE) {
    rc = ms_encode_insert(L, k, spec, &a, what, &found, e);
    clean = !(found & MS_NEEDS_CHECKS);
  } else if (lua_type(L, spec) != LUA_TTABLE) {
    ms_err_set(e, "invalid", "%s must be a table, got %s", what, luaL_typename(L, spec));
    rc = -1;
  } else {
    rc = op_parts(L, spec, which, what, &base, e) ||
         encode_parts(L, k, base, which, what, sizeof what, &a, &b, &upsert, &clean, e) ? -1 : 0;
  }
  ms_write_opts(&o, clean, upsert);
  if (rc == 0 && !bulk_add(bulk, which, &a, &b, &o, &be)) {
    ms_err_set(e, "invalid", "%s: %s", what, be.message);
    rc = -1;
  }
  lua_settop(L, idx);
  bson_destroy(&a);
  bson_destroy(&b);
  return rc ? -1 : which;
}

/* upserted: [{ index, _id }] as { [i] = id } */
static int push_upserted(lua_State *L, const bson_t *reply, ms_err_t *e) {
  bson_iter_t it, arr;
  lua_newtable(L);
  if (!bson_iter_init_find(&it, reply, "upserted") || !BSON_ITER_HOLDS_ARRAY(&it) || !bson_iter_recurse(&it, &arr))
    return 0;
  while (bson_iter_next(&arr)) {
    uint32_t len;
    const uint8_t *data;
    bson_t one;
    int64_t index;
    if (!BSON_ITER_HOLDS_DOCUMENT(&arr)) continue;
    bson_iter_document(&arr, &len, &data);
    if (!bson_init_static(&one, data, len)) continue;
    index = ms_reply_int(&one, "index");
    if (ms_push_field(L, &one, "_id", e)) return -1;
    lua_rawseti(L, -2, (lua_Integer)(index + 1));
  }
  return 0;
}

/* c:bulk_write(ops, { ordered = true, session }) -> { inserted, matched,
 * modified, deleted, upserted (counts), upserted_ids = { [i] = id }, errors =
 * { { index =, message =, code =, detail = } } }; every op is checked before any is
 * sent. */
static int l_bulk_write(lua_State *L) {
  bson_t opts = BSON_INITIALIZER, reply;
  bson_error_t be;
  ms_err_t e;
  mongoc_bulk_operation_t *bulk;
  size_t n = 0, i;
  char *is_insert, *failed;
  int rc = 0, nret;
  MS_CALL_BEGIN(L, k, "bulk_write", 3);
  if (lua_type(L, 2) != LUA_TTABLE || ms_table_kind(L, 2, &n, &e) != MS_KIND_ARRAY || n == 0) {
    ms_err_set(&e, "invalid", "ops must be a non-empty list of operations");
    bson_destroy(&opts);
    return ms_call_fail(L, &k, &e);
  }
  if (bulk_opts(L, &k, &opts, &e)) {
    bson_destroy(&opts);
    return ms_call_fail(L, &k, &e);
  }
  bulk = mongoc_collection_create_bulk_operation_with_opts(k.c->coll, &opts);
  bson_destroy(&opts);
  is_insert = (char *)bson_malloc0(n);
  failed = (char *)bson_malloc0(n);
  for (i = 1; i <= n && rc == 0; i++) {
    int which;
    lua_rawgeti(L, 2, (lua_Integer)i);
    which = add_op(L, &k, bulk, -1, i, &e);
    lua_pop(L, 1);
    if (which < 0) rc = -1;
    else is_insert[i - 1] = which == OP_INSERT_ONE;
  }
  if (rc) {
    mongoc_bulk_operation_destroy(bulk);
    bson_free(is_insert);
    bson_free(failed);
    return ms_call_fail(L, &k, &e);
  }
  if (!mongoc_bulk_operation_execute(bulk, &reply, &be) && whole_failure(&reply)) {
    nret = ms_call_fail_bson(L, &k, &be, &reply);
  } else {
    static const char *const counts[][2] = {{"inserted", "nInserted"}, {"matched", "nMatched"},
                                            {"modified", "nModified"}, {"deleted", "nRemoved"},
                                            {"upserted", "nUpserted"}};
    size_t first_failed = n, inserted = 0;
    int ordered = 1;
    lua_createtable(L, 0, 7);
    for (i = 0; i < sizeof counts / sizeof counts[0]; i++) {
      lua_pushinteger(L, (lua_Integer)ms_reply_int(&reply, counts[i][1]));
      lua_setfield(L, -2, counts[i][0]);
    }
    push_write_errors(L, &k, &reply, failed, n);
    lua_setfield(L, -2, "errors");
    /* inserts counted from the errors: an insert either lands or has one,
     * and an ordered bulk stops at its first (some servers count a whole
     * unordered batch as inserted) */
    if (ms_call_opt(L, &k, "ordered") == LUA_TBOOLEAN) ordered = lua_toboolean(L, -1);
    lua_pop(L, 1);
    for (i = 0; i < n; i++)
      if (failed[i] && i < first_failed) first_failed = i;
    for (i = 0; i < n; i++)
      if (is_insert[i] && !failed[i] && (!ordered || i < first_failed)) inserted++;
    lua_pushinteger(L, (lua_Integer)inserted);
    lua_setfield(L, -2, "inserted");
    if (push_upserted(L, &reply, &e)) nret = ms_call_fail(L, &k, &e);
    else {
      lua_setfield(L, -2, "upserted_ids");
      nret = 1;
    }
  }
  bson_destroy(&reply);
  mongoc_bulk_operation_destroy(bulk);
  bson_free(is_insert);
  bson_free(failed);
  return nret;
}

void ms_collection_add_bulk(lua_State *L) {
  lua_pushcfunction(L, l_insert_many);
  lua_setfield(L, -2, "insert_many");
  lua_pushcfunction(L, l_bulk_write);
  lua_setfield(L, -2, "bulk_write");
}
