/*
 * load.c - the reads of one execution: its data with its dedupe digests
 * (and the fire_at armed for a timer path), the load for an event that also
 * says whether the event was handled, and is_processed.
 */
#include "store.h"

const char *ms_utf8_field(const bson_t *doc, const char *key, uint32_t *len) {
  bson_iter_t it;
  if (!bson_iter_init_find(&it, doc, key) || !BSON_ITER_HOLDS_UTF8(&it)) return NULL;
  return bson_iter_utf8(&it, len);
}

/* A find whose filter is {_id} alone: every server answers it from the _id
 * index (mongo-java-server uses an index only for a filter with exactly its
 * keys). Projects the fields named, up to the first NULL (at most three). */
mongoc_cursor_t *ms_find_one(ms_store_t *s, const char *id, size_t idlen, const char *f1, const char *f2,
                             const char *f3) {
  bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, proj;
  mongoc_cursor_t *cur;
  bson_append_utf8(&filter, "_id", 3, id, (int)idlen);
  bson_append_document_begin(&opts, "projection", 10, &proj);
  bson_append_int32(&proj, f1, -1, 1);
  if (f2) bson_append_int32(&proj, f2, -1, 1);
  if (f2 && f3) bson_append_int32(&proj, f3, -1, 1);
  bson_append_document_end(&opts, &proj);
  bson_append_int64(&opts, "limit", 5, 1);
  cur = mongoc_collection_find_with_opts(s->exes, &filter, &opts, NULL);
  bson_destroy(&filter);
  bson_destroy(&opts);
  return cur;
}

/* Pushes doc.data (a string) or nil when the document has none (absent, or a
 * trace-only stub). */
void ms_push_data(lua_State *L, const bson_t *doc) {
  bson_iter_t it;
  if (doc && bson_iter_init_find(&it, doc, "data") && BSON_ITER_HOLDS_UTF8(&it)) {
    uint32_t len;
    const char *d = bson_iter_utf8(&it, &len);
    lua_pushlstring(L, d, len);
  } else {
    lua_pushnil(L);
  }
}

/* An optional timer path at idx, as its stored key ("timers.<path>" with
 * '.' encoded) in *out; nothing when the argument is absent or nil. */
static int opt_timer_key(lua_State *L, int idx, const char *fn, bson_string_t **out, ms_err_t *e) {
  size_t plen;
  const char *path;
  *out = NULL;
  if (lua_isnoneornil(L, idx)) return 0;
  if (lua_type(L, idx) != LUA_TSTRING)
    luaL_error(L, "%s: timer_path must be a string, got %s", fn, luaL_typename(L, idx));
  path = lua_tolstring(L, idx, &plen);
  if (ms_encode_path(path, plen, out, e)) {
    ms_err_prefix(e, fn);
    return -1;
  }
  return 0;
}

/* store:_load(id[, timer_path]) -> data_json, armed, digests | nil (absent) | nil, msg, code
 * With a timer path, armed is the fire_at armed for it now (nil when none):
 * the engine's Timeout check, in the same round trip. digests are the
 * execution's dedupe digests, for its next commit. */
static int l_load(lua_State *L) {
  STORE_OR_CLOSED(L, s, "load");
  size_t idlen;
  ms_err_t e;
  bson_error_t be;
  bson_iter_t it;
  const bson_t *doc = NULL;
  const char *id = ms_check_id(L, 2, "load: id", &idlen, &e);
  bson_string_t *tkey = NULL;
  mongoc_cursor_t *cur;
  if (!id) return ms_push_error(L, &e);
  if (opt_timer_key(L, 3, "load", &tkey, &e)) return ms_push_error(L, &e);
  cur = ms_find_one(s, id, idlen, "data", "dedupe", tkey ? tkey->str : NULL);
  if (!mongoc_cursor_next(cur, &doc) && mongoc_cursor_error(cur, &be)) {
    mongoc_cursor_destroy(cur);
    if (tkey) bson_string_free(tkey, true);
    return ms_store_push_bson_err(L, s, &be, "load");
  }
  ms_push_data(L, doc);
  if (tkey && doc && bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, tkey->str, &it) &&
      BSON_ITER_HOLDS_NUMBER(&it))
    lua_pushnumber(L, bson_iter_as_double(&it));
  else
    lua_pushnil(L);
  ms_push_digests(L, doc);
  if (tkey) bson_string_free(tkey, true);
  mongoc_cursor_destroy(cur);
  return 3;
}

/* {hit: {$in: [{$literal: ev}, {$ifNull: ["$processed", []]}]}} into proj:
 * the membership test runs on the server; the array never travels. An id
 * such as "$_id" is a value here, never a field path. */
static void append_hit(bson_t *proj, const char *ev, size_t evlen) {
  bson_t hit, in, lit, ifn, ifarr, empty;
  bson_append_document_begin(proj, "hit", 3, &hit);
  bson_append_array_begin(&hit, "$in", 3, &in);
  bson_append_document_begin(&in, "0", 1, &lit);
  bson_append_utf8(&lit, "$literal", 8, ev, (int)evlen);
  bson_append_document_end(&in, &lit);
  bson_append_document_begin(&in, "1", 1, &ifn);
  bson_append_array_begin(&ifn, "$ifNull", 7, &ifarr);
  bson_append_utf8(&ifarr, "0", 1, "$processed", 10);
  bson_append_array_begin(&ifarr, "1", 1, &empty);
  bson_append_array_end(&ifarr, &empty);
  bson_append_array_end(&ifn, &ifarr);
  bson_append_document_end(&in, &ifn);
  bson_append_array_end(&hit, &in);
  bson_append_document_end(proj, &hit);
}

/* {armed: {$ifNull: ["$timers.<path>", null]}} into proj: the fire_at armed
 * for a Timeout's path now. */
static void append_armed(bson_t *proj, const bson_string_t *tkey) {
  bson_t armed, arr;
  bson_string_t *ref = bson_string_new("$");
  bson_string_append(ref, tkey->str);
  bson_append_document_begin(proj, "armed", 5, &armed);
  bson_append_array_begin(&armed, "$ifNull", 7, &arr);
  bson_append_utf8(&arr, "0", 1, ref->str, (int)ref->len);
  bson_append_null(&arr, "1", 1);
  bson_append_array_end(&armed, &arr);
  bson_append_document_end(proj, &armed);
  bson_string_free(ref, true);
}

/* [{$match: {_id}}, {$project: {data, dedupe, hit[, armed]}}] */
static void event_pipeline(bson_t *pipe, const char *id, size_t idlen, const char *ev, size_t evlen,
                           const bson_string_t *tkey) {
  bson_t st, inner, proj;
  bson_append_document_begin(pipe, "0", 1, &st);
  bson_append_document_begin(&st, "$match", 6, &inner);
  bson_append_utf8(&inner, "_id", 3, id, (int)idlen);
  bson_append_document_end(&st, &inner);
  bson_append_document_end(pipe, &st);
  bson_append_document_begin(pipe, "1", 1, &st);
  bson_append_document_begin(&st, "$project", 8, &proj);
  bson_append_int32(&proj, "data", 4, 1);
  bson_append_int32(&proj, "dedupe", 6, 1);
  append_hit(&proj, ev, evlen);
  if (tkey) append_armed(&proj, tkey);
  bson_append_document_end(&st, &proj);
  bson_append_document_end(pipe, &st);
}

/* store:_load_for_event(id, event_id[, timer_path])
 * -> data_json|nil, processed, armed, digests
 * processed: the event is marked, in the `processed` tail or the digests. */
static int l_load_for_event(lua_State *L) {
  STORE_OR_CLOSED(L, s, "load_for_event");
  size_t idlen, evlen;
  ms_err_t e;
  bson_error_t be;
  const bson_t *doc = NULL;
  const char *id = ms_check_id(L, 2, "load_for_event: id", &idlen, &e), *ev;
  bson_t pipe = BSON_INITIALIZER;
  bson_string_t *tkey = NULL;
  mongoc_cursor_t *cur;
  bson_iter_t it;
  if (!id) return ms_push_error(L, &e);
  if (!(ev = ms_check_id(L, 3, "load_for_event: event_id", &evlen, &e))) return ms_push_error(L, &e);
  /* a Timeout's path: also bring back the fire_at armed for it now */
  if (opt_timer_key(L, 4, "load_for_event", &tkey, &e)) return ms_push_error(L, &e);
  event_pipeline(&pipe, id, idlen, ev, evlen, tkey);
  if (tkey) bson_string_free(tkey, true);
  cur = mongoc_collection_aggregate(s->exes, MONGOC_QUERY_NONE, &pipe, NULL, NULL);
  bson_destroy(&pipe);
  if (!mongoc_cursor_next(cur, &doc) && mongoc_cursor_error(cur, &be)) {
    mongoc_cursor_destroy(cur);
    return ms_store_push_bson_err(L, s, &be, "load_for_event");
  }
  ms_push_data(L, doc);
  lua_pushboolean(L, (doc && bson_iter_init_find(&it, doc, "hit") && bson_iter_as_bool(&it)) ||
                         ms_doc_marks(doc, ev, evlen));
  if (doc && bson_iter_init_find(&it, doc, "armed") && BSON_ITER_HOLDS_NUMBER(&it))
    lua_pushnumber(L, bson_iter_as_double(&it));
  else
    lua_pushnil(L);
  ms_push_digests(L, doc);
  mongoc_cursor_destroy(cur);
  return 4;
}

/* store:is_processed(id, event_id) -> bool: among the digests, else in the
 * `processed` array (harel's marks, or ours before the digests existed). */
static int l_is_processed(lua_State *L) {
  STORE_OR_CLOSED(L, s, "is_processed");
  size_t idlen, evlen;
  ms_err_t e;
  bson_error_t be;
  const bson_t *doc;
  ms_err_t e2;
  const char *id = ms_check_id(L, 2, "is_processed: id", &idlen, &e);
  const char *ev = ms_check_id(L, 3, "is_processed: event_id", &evlen, &e2);
  bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, proj;
  mongoc_cursor_t *cur;
  int hit;
  if (!id) return ms_push_error(L, &e);
  if (!ev) return ms_push_error(L, &e2);
  /* first the digests, by _id; then the `processed` array */
  cur = ms_find_one(s, id, idlen, "dedupe", NULL, NULL);
  hit = mongoc_cursor_next(cur, &doc);
  if (!hit && mongoc_cursor_error(cur, &be)) {
    mongoc_cursor_destroy(cur);
    return ms_store_push_bson_err(L, s, &be, "is_processed");
  }
  hit = hit && ms_doc_marks(doc, ev, evlen);
  mongoc_cursor_destroy(cur);
  if (hit) {
    lua_pushboolean(L, 1);
    return 1;
  }
  bson_append_utf8(&filter, "_id", 3, id, (int)idlen);
  bson_append_utf8(&filter, "processed", 9, ev, (int)evlen);
  bson_append_document_begin(&opts, "projection", 10, &proj);
  bson_append_int32(&proj, "_id", 3, 1);
  bson_append_document_end(&opts, &proj);
  bson_append_int64(&opts, "limit", 5, 1);
  cur = mongoc_collection_find_with_opts(s->exes, &filter, &opts, NULL);
  bson_destroy(&filter);
  bson_destroy(&opts);
  hit = mongoc_cursor_next(cur, &doc);
  if (!hit && mongoc_cursor_error(cur, &be)) {
    mongoc_cursor_destroy(cur);
    return ms_store_push_bson_err(L, s, &be, "is_processed");
  }
  mongoc_cursor_destroy(cur);
  lua_pushboolean(L, hit);
  return 1;
}

/* store:_load_many({ id, ... }[, with_timers]) -> { [id] = { data = json, digests = s[, timers] } } | nil, msg, code
 * One find of {_id: {$in: ids}} (a filter on _id alone, which every server
 * answers from the _id index); an id with no execution is absent. With
 * with_timers, each row also has the timers armed now, { [path] = fire_at }:
 * the sweep's Timeout check for every execution, in the same round trip. */
static int l_load_many(lua_State *L) {
  STORE_OR_CLOSED(L, s, "load_many");
  bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, in, arr, proj;
  mongoc_cursor_t *cur;
  const bson_t *doc;
  bson_error_t be;
  lua_Integer i, n;
  int with_timers = lua_toboolean(L, 3);
  ms_arg_table(L, 2, "load_many: ids");
  n = (lua_Integer)luaL_len(L, 2);
  for (i = 1; i <= n; i++) {
    ms_err_t e;
    lua_rawgeti(L, 2, i);
    if (!ms_check_id(L, -1, "load_many: ids[i]", NULL, &e)) {
      bson_destroy(&filter);
      bson_destroy(&opts);
      return ms_push_error(L, &e);
    }
    lua_pop(L, 1);
  }
  bson_append_document_begin(&filter, "_id", 3, &in);
  bson_append_array_begin(&in, "$in", 3, &arr);
  for (i = 1; i <= n; i++) {
    char ik[24];
    const char *ikey, *id;
    size_t iklen = bson_uint32_to_string((uint32_t)(i - 1), &ikey, ik, sizeof ik), idlen;
    lua_rawgeti(L, 2, i);
    id = lua_tolstring(L, -1, &idlen);
    bson_append_utf8(&arr, ikey, (int)iklen, id, (int)idlen);
    lua_pop(L, 1);
  }
  bson_append_array_end(&in, &arr);
  bson_append_document_end(&filter, &in);
  bson_append_document_begin(&opts, "projection", 10, &proj);
  bson_append_int32(&proj, "data", 4, 1);
  bson_append_int32(&proj, "dedupe", 6, 1);
  if (with_timers) bson_append_int32(&proj, "timers", 6, 1);
  bson_append_document_end(&opts, &proj);
  /* at most n documents match: with the limit the server closes the cursor
   * after them, where a batch size alone can leave it open (SecantusDB) and
   * cost a getMore that returns nothing */
  bson_append_int64(&opts, "batchSize", 9, n > 0 ? (int64_t)n : 1);
  bson_append_int64(&opts, "limit", 5, n > 0 ? (int64_t)n : 1);
  cur = mongoc_collection_find_with_opts(s->exes, &filter, &opts, NULL);
  bson_destroy(&filter);
  bson_destroy(&opts);
  lua_createtable(L, 0, (int)n);
  while (mongoc_cursor_next(cur, &doc)) {
    uint32_t idl;
    const char *idv = ms_utf8_field(doc, "_id", &idl);
    if (!idv) continue;
    lua_createtable(L, 0, 3);
    ms_push_data(L, doc);
    lua_setfield(L, -2, "data");
    ms_push_digests(L, doc);
    lua_setfield(L, -2, "digests");
    if (with_timers) {
      ms_push_timers(L, doc);
      lua_setfield(L, -2, "timers");
    }
    lua_pushlstring(L, idv, idl);
    lua_insert(L, -2);
    lua_rawset(L, -3);
  }
  if (mongoc_cursor_error(cur, &be)) {
    mongoc_cursor_destroy(cur);
    return ms_store_push_bson_err(L, s, &be, "load_many");
  }
  mongoc_cursor_destroy(cur);
  return 1;
}

static const luaL_Reg load_methods[] = {
  {"_load", l_load},
  {"_load_many", l_load_many},
  {"_load_for_event", l_load_for_event},
  {"is_processed", l_is_processed},
  {NULL, NULL}
};

void ms_open_load(lua_State *L) { luaL_setfuncs(L, load_methods, 0); }
