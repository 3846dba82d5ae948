/*
 * inbox.c - the inbox: events handed over by producers that do not run the
 * interpreter, one document each in <prefix>_inbox, and the per-execution
 * claims in <prefix>_inbox_claims ({ _id = execution id, token, until,
 * fence }) under which workers deliver them. Lua's half is mongostore.inbox.
 */
#include "store.h"

#include <stdio.h>
#include <string.h>

/* How many queued entries a claim pass reads to find its candidate
 * executions, per execution it may claim: one execution with a long queue
 * fills the window with its own entries, so the window is wider than the
 * batch. */
#if !defined(MS_INBOX_SCAN_FACTOR)
#define MS_INBOX_SCAN_FACTOR 4
#endif

/* The enqueue time of an entry, in microseconds, strictly increasing within
 * the process (every thread of it): two enqueues in one microsecond keep
 * their order. Across processes the order is their clocks'. */
static int64_t next_at(void) {
  static int64_t last = 0;
  int64_t now = (int64_t)(ms_now() * 1e6), prev = __atomic_load_n(&last, __ATOMIC_RELAXED), want;
  do {
    want = now > prev ? now : prev + 1;
  } while (!__atomic_compare_exchange_n(&last, &prev, want, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
  return want;
}

static void index_keys(bson_t *idxs, const char *ikey, const char *name, const char *k1, int d1, const char *k2,
                       int d2) {
  bson_t idx, key;
  bson_append_document_begin(idxs, ikey, -1, &idx);
  bson_append_document_begin(&idx, "key", 3, &key);
  bson_append_int32(&key, k1, -1, d1);
  bson_append_int32(&key, k2, -1, d2);
  bson_append_document_end(&idx, &key);
  bson_append_utf8(&idx, "name", 4, name, -1);
  bson_append_document_end(idxs, &idx);
}

/* The inbox's indexes, once per store and only where a worker claims: the
 * candidates' order (priority, then age) and an execution's queue in age
 * order. A producer's enqueue never pays for them. */
static int ensure_inbox_indexes(ms_store_t *s, bson_error_t *be) {
  bson_t cmd = BSON_INITIALIZER, idxs;
  mongoc_database_t *db;
  int ok;
  if (s->inbox_indexed) return 1;
  db = mongoc_client_get_database(s->client, s->db);
  bson_append_utf8(&cmd, "createIndexes", -1, mongoc_collection_get_name(s->inbox), -1);
  bson_append_array_begin(&cmd, "indexes", -1, &idxs);
  index_keys(&idxs, "0", "priority_at", "priority", -1, "at", 1);
  index_keys(&idxs, "1", "execution_at", "execution_id", 1, "at", 1);
  bson_append_array_end(&cmd, &idxs);
  ok = mongoc_database_write_command_with_opts(db, &cmd, NULL, NULL, be);
  bson_destroy(&cmd);
  mongoc_database_destroy(db);
  if (ok) s->inbox_indexed = 1;
  return ok;
}

/* The execution id an existing entry `_id` is queued for, into *out (a
 * bson_strdup), or NULL when it is gone; 0 on error. */
static int queued_for(ms_store_t *s, const char *ev, size_t evlen, char **out, bson_error_t *be) {
  bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, proj;
  mongoc_cursor_t *cur;
  const bson_t *doc;
  int ok = 1;
  *out = NULL;
  bson_append_utf8(&filter, "_id", 3, ev, (int)evlen);
  bson_append_document_begin(&opts, "projection", 10, &proj);
  bson_append_int32(&proj, "execution_id", 12, 1);
  bson_append_document_end(&opts, &proj);
  cur = mongoc_collection_find_with_opts(s->inbox, &filter, &opts, NULL);
  if (mongoc_cursor_next(cur, &doc)) {
    bson_iter_t it;
    if (bson_iter_init_find(&it, doc, "execution_id") && BSON_ITER_HOLDS_UTF8(&it))
      *out = bson_strdup(bson_iter_utf8(&it, NULL));
    else
      *out = bson_strdup("");
  } else if (mongoc_cursor_error(cur, be)) {
    ok = 0;
  }
  mongoc_cursor_destroy(cur);
  bson_destroy(&filter);
  bson_destroy(&opts);
  return ok;
}

/* store:_inbox_put(event_id, execution_id, priority, event_json)
 * -> true, "queued" | true, "duplicate" | nil, msg, code
 * One insert. The event id is the entry's _id, so the same event queued
 * twice is one entry: the second answers "duplicate" (after one find that
 * tells it from the same id queued for another execution: "conflict"). */
static int l_inbox_put(lua_State *L) {
  STORE_OR_CLOSED(L, s, "enqueue");
  size_t evlen, idlen, jlen;
  ms_err_t e;
  const char *ev = ms_check_id(L, 2, "enqueue: event id", &evlen, &e), *id, *json;
  int64_t priority;
  bson_t doc = BSON_INITIALIZER;
  bson_error_t be;
  char doing[160];
  int ok;
  if (!ev) return ms_push_error(L, &e);
  if (!(id = ms_check_id(L, 3, "enqueue: id", &idlen, &e))) return ms_push_error(L, &e);
  priority = ms_arg_integer(L, 4, "enqueue: priority");
  json = ms_arg_string(L, 5, "enqueue: event", &jlen);
  snprintf(doing, sizeof doing, "enqueue %.60s for %.60s", ev, id);
  if (priority < 0 || priority > 4) {
    ms_err_set(&e, "invalid", "%s: priority must be an integer from 0 to 4", doing);
    return ms_push_error(L, &e);
  }
  bson_append_utf8(&doc, "_id", 3, ev, (int)evlen);
  bson_append_utf8(&doc, "execution_id", 12, id, (int)idlen);
  bson_append_int32(&doc, "priority", 8, (int32_t)priority);
  bson_append_int64(&doc, "at", 2, next_at());
  bson_append_utf8(&doc, "event", 5, json, (int)jlen);
  if ((int64_t)doc.len > (int64_t)s->max_bson) {
    bson_destroy(&doc);
    ms_err_set(&e, "too_large", "%s: the entry is larger than the server's maximum document size (%d bytes)",
               doing, (int)s->max_bson);
    return ms_push_error(L, &e);
  }
  ok = mongoc_collection_insert_one(s->inbox, &doc, NULL, NULL, &be);
  bson_destroy(&doc);
  if (!ok) {
    char *other = NULL;
    bson_error_t fe;
    if (!(be.domain == MONGOC_ERROR_SERVER && be.code == MONGOC_ERROR_DUPLICATE_KEY))
      return ms_store_push_bson_err(L, s, &be, doing);
    if (!queued_for(s, ev, evlen, &other, &fe)) return ms_store_push_bson_err(L, s, &fe, doing);
    if (other && strcmp(other, id) != 0) {
      lua_pushnil(L);
      lua_pushfstring(L, "%s: the event id is queued for execution %s", doing, other);
      lua_pushliteral(L, "conflict");
      bson_free(other);
      return 3;
    }
    bson_free(other);
    lua_pushboolean(L, 1);
    lua_pushliteral(L, "duplicate");
    return 2;
  }
  lua_pushboolean(L, 1);
  lua_pushliteral(L, "queued");
  return 2;
}

/* One claim pass: who claims, and until when. */
typedef struct inbox_claim {
  const char *token;
  size_t toklen;
  double now, until;
} inbox_claim_t;

/* { _id: { $in: [ ids... ] } } under key of d */
static void append_in(bson_t *d, const char *key, char **ids, size_t n) {
  bson_t in, arr;
  size_t i;
  bson_append_document_begin(d, key, -1, &in);
  bson_append_array_begin(&in, "$in", 3, &arr);
  for (i = 0; i < n; i++) {
    char ik[24];
    const char *ikey;
    size_t iklen = bson_uint32_to_string((uint32_t)i, &ikey, ik, sizeof ik);
    bson_append_utf8(&arr, ikey, (int)iklen, ids[i], -1);
  }
  bson_append_array_end(&in, &arr);
  bson_append_document_end(d, &in);
}

static void free_ids(char **ids, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) bson_free(ids[i]);
  bson_free(ids);
}

/* Every read of a pass is one batch of at most n documents: a server that
 * leaves an exhausted cursor open (SecantusDB) costs no getMore. */
static void single_batch(bson_t *opts, int64_t n) {
  bson_append_int64(opts, "batchSize", 9, n);
  bson_append_bool(opts, "singleBatch", 11, true);
}

/* The candidates: the executions of the most urgent, oldest entries that no
 * live claim stamped, distinct, in that order, at most limit. */
static int find_candidates(ms_store_t *s, const inbox_claim_t *k, lua_Integer limit, char ***out, size_t *nout,
                           bson_error_t *be) {
  bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, proj, sort, or, b0, b1, c0, c1;
  mongoc_cursor_t *cur;
  const bson_t *doc;
  char **ids = bson_malloc0(sizeof(char *) * (size_t)limit);
  size_t n = 0, i;
  int ok = 1;
  bson_append_array_begin(&filter, "$or", 3, &or);
  bson_append_document_begin(&or, "0", 1, &b0);
  bson_append_document_begin(&b0, "claim_until", -1, &c0);
  bson_append_bool(&c0, "$exists", 7, false);
  bson_append_document_end(&b0, &c0);
  bson_append_document_end(&or, &b0);
  bson_append_document_begin(&or, "1", 1, &b1);
  bson_append_document_begin(&b1, "claim_until", -1, &c1);
  bson_append_double(&c1, "$lte", 4, k->now);
  bson_append_document_end(&b1, &c1);
  bson_append_document_end(&or, &b1);
  bson_append_array_end(&filter, &or);
  bson_append_document_begin(&opts, "projection", 10, &proj);
  bson_append_int32(&proj, "execution_id", 12, 1);
  bson_append_document_end(&opts, &proj);
  bson_append_document_begin(&opts, "sort", 4, &sort);
  bson_append_int32(&sort, "priority", 8, -1);
  bson_append_int32(&sort, "at", 2, 1);
  bson_append_document_end(&opts, &sort);
  bson_append_int64(&opts, "limit", 5, (int64_t)limit * MS_INBOX_SCAN_FACTOR);
  single_batch(&opts, (int64_t)limit * MS_INBOX_SCAN_FACTOR);
  cur = mongoc_collection_find_with_opts(s->inbox, &filter, &opts, NULL);
  while (n < (size_t)limit && mongoc_cursor_next(cur, &doc)) {
    bson_iter_t it;
    const char *v;
    int seen = 0;
    if (!bson_iter_init_find(&it, doc, "execution_id") || !BSON_ITER_HOLDS_UTF8(&it)) continue;
    v = bson_iter_utf8(&it, NULL);
    for (i = 0; i < n && !seen; i++) seen = strcmp(ids[i], v) == 0;
    if (!seen) ids[n++] = bson_strdup(v);
  }
  if (mongoc_cursor_error(cur, be)) ok = 0;
  mongoc_cursor_destroy(cur);
  bson_destroy(&filter);
  bson_destroy(&opts);
  if (!ok) {
    free_ids(ids, n);
    return 0;
  }
  *out = ids;
  *nout = n;
  return 1;
}

/* Takes the claim of each candidate whose lease ran out (or that has none
 * yet) in one unordered bulk of upserts: a claim still held elsewhere
 * fails its upsert with a duplicate key, which only means "not ours". Every
 * taking raises the claim's fence. */
static int take_claims(ms_store_t *s, const inbox_claim_t *k, char **ids, size_t n, bson_error_t *be) {
  bson_t bopts = BSON_INITIALIZER, uopts = BSON_INITIALIZER, reply;
  mongoc_bulk_operation_t *bulk;
  size_t i;
  int ok = 1;
  bson_append_bool(&bopts, "ordered", 7, false);
  bulk = mongoc_collection_create_bulk_operation_with_opts(s->inbox_claims, &bopts);
  bson_destroy(&bopts);
  bson_append_bool(&uopts, "upsert", 6, true);
  for (i = 0; i < n && ok; i++) {
    bson_t q = BSON_INITIALIZER, u = BSON_INITIALIZER, lte, set, inc;
    bson_append_utf8(&q, "_id", 3, ids[i], -1);
    bson_append_document_begin(&q, "until", 5, &lte);
    bson_append_double(&lte, "$lte", 4, k->now);
    bson_append_document_end(&q, &lte);
    bson_append_document_begin(&u, "$set", 4, &set);
    bson_append_utf8(&set, "token", 5, k->token, (int)k->toklen);
    bson_append_double(&set, "until", 5, k->until);
    bson_append_document_end(&u, &set);
    bson_append_document_begin(&u, "$inc", 4, &inc);
    bson_append_int64(&inc, "fence", 5, 1);
    bson_append_document_end(&u, &inc);
    ok = mongoc_bulk_operation_update_one_with_opts(bulk, &q, &u, &uopts, be);
    bson_destroy(&q);
    bson_destroy(&u);
  }
  bson_destroy(&uopts);
  if (ok && !mongoc_bulk_operation_execute(bulk, &reply, be)) {
    /* write errors alone (claims held elsewhere) are the expected answer;
     * anything else (network, timeout) fails the pass */
    bson_iter_t it, arr, op;
    ok = bson_iter_init_find(&it, &reply, "writeErrors") && BSON_ITER_HOLDS_ARRAY(&it) &&
         bson_iter_recurse(&it, &arr);
    while (ok && bson_iter_next(&arr)) {
      int dup = 0;
      if (BSON_ITER_HOLDS_DOCUMENT(&arr) && bson_iter_recurse(&arr, &op))
        while (bson_iter_next(&op))
          if (strcmp(bson_iter_key(&op), "code") == 0 && BSON_ITER_HOLDS_NUMBER(&op))
            dup = bson_iter_as_int64(&op) == MONGOC_ERROR_DUPLICATE_KEY;
      if (!dup) ok = 0;
    }
    if (bson_iter_init_find(&it, &reply, "writeConcernErrors") && BSON_ITER_HOLDS_ARRAY(&it) &&
        bson_iter_recurse(&it, &arr) && bson_iter_next(&arr))
      ok = 0;
    bson_destroy(&reply);
  } else if (ok) {
    bson_destroy(&reply);
  }
  mongoc_bulk_operation_destroy(bulk);
  return ok;
}

/* The claims of ids that carry this pass's token: their ids (into held, in
 * candidate order) and fences (pushed as claims[id] = fence). */
static int read_claims(lua_State *L, ms_store_t *s, const inbox_claim_t *k, char **ids, size_t n, int claims,
                       char **held, size_t *nheld, bson_error_t *be) {
  bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER;
  mongoc_cursor_t *cur;
  const bson_t *doc;
  size_t i, m = 0;
  int ok = 1;
  char *got = bson_malloc0(n ? n : 1);
  /* the _id alone, which every server answers from its index (SecantusDB
   * plans _id with another condition as a scan): the token is checked here */
  append_in(&filter, "_id", ids, n);
  single_batch(&opts, (int64_t)n);
  cur = mongoc_collection_find_with_opts(s->inbox_claims, &filter, &opts, NULL);
  while (mongoc_cursor_next(cur, &doc)) {
    bson_iter_t it;
    const char *v;
    uint32_t tl;
    int64_t fence = 0;
    if (!(bson_iter_init_find(&it, doc, "token") && BSON_ITER_HOLDS_UTF8(&it))) continue;
    v = bson_iter_utf8(&it, &tl);
    if (tl != k->toklen || memcmp(v, k->token, tl) != 0) continue;  /* another worker's */
    if (!bson_iter_init_find(&it, doc, "_id") || !BSON_ITER_HOLDS_UTF8(&it)) continue;
    v = bson_iter_utf8(&it, NULL);
    for (i = 0; i < n; i++) {
      if (got[i] || strcmp(ids[i], v) != 0) continue;
      got[i] = 1;
      if (bson_iter_init_find(&it, doc, "fence") && BSON_ITER_HOLDS_NUMBER(&it)) fence = bson_iter_as_int64(&it);
      lua_pushinteger(L, (lua_Integer)fence);
      lua_setfield(L, claims, ids[i]);
      break;
    }
  }
  if (mongoc_cursor_error(cur, be)) ok = 0;
  mongoc_cursor_destroy(cur);
  bson_destroy(&filter);
  bson_destroy(&opts);
  for (i = 0; i < n; i++)
    if (got[i]) held[m++] = ids[i];
  bson_free(got);
  *nheld = m;
  return ok;
}

/* Stamps the queued entries of the held executions with the pass's token
 * (what guards its acks) and lease (what keeps them out of others'
 * candidates), in one update. */
static int stamp_entries(ms_store_t *s, const inbox_claim_t *k, char **held, size_t n, bson_error_t *be) {
  bson_t q = BSON_INITIALIZER, u = BSON_INITIALIZER, set;
  int ok;
  append_in(&q, "execution_id", held, n);
  bson_append_document_begin(&u, "$set", 4, &set);
  bson_append_utf8(&set, "claim_token", 11, k->token, (int)k->toklen);
  bson_append_double(&set, "claim_until", 11, k->until);
  bson_append_document_end(&u, &set);
  ok = mongoc_collection_update_many(s->inbox, &q, &u, NULL, NULL, be);
  bson_destroy(&q);
  bson_destroy(&u);
  return ok;
}

/* The stamped entries, oldest first, at most max: pushed into the list at
 * index list as { id, execution_id, priority, at, event }. */
static int read_entries(lua_State *L, ms_store_t *s, const inbox_claim_t *k, char **held, size_t n,
                        lua_Integer max, int list, bson_error_t *be, ms_err_t *e) {
  bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, sort;
  mongoc_cursor_t *cur;
  const bson_t *doc;
  lua_Integer count = 0;
  int ok = 1;
  /* the execution ids alone, which the execution_at index answers (a
   * server may plan another condition as a scan): the token is checked
   * here, so an entry queued after the stamp waits for a later pass */
  append_in(&filter, "execution_id", held, n);
  bson_append_document_begin(&opts, "sort", 4, &sort);
  bson_append_int32(&sort, "at", 2, 1);
  bson_append_int32(&sort, "_id", 3, 1);
  bson_append_document_end(&opts, &sort);
  bson_append_int64(&opts, "limit", 5, (int64_t)max);
  single_batch(&opts, (int64_t)max);
  cur = mongoc_collection_find_with_opts(s->inbox, &filter, &opts, NULL);
  while (mongoc_cursor_next(cur, &doc)) {
    bson_iter_t it;
    static const char *const fields[] = {"execution_id", "event"};
    size_t f;
    int good = 1;
    if (!(bson_iter_init_find(&it, doc, "claim_token") && BSON_ITER_HOLDS_UTF8(&it))) continue;
    {
      uint32_t tl;
      const char *tv = bson_iter_utf8(&it, &tl);
      if (tl != k->toklen || memcmp(tv, k->token, tl) != 0) continue;
    }
    if (!bson_iter_init_find(&it, doc, "_id") || !BSON_ITER_HOLDS_UTF8(&it)) continue;
    lua_createtable(L, 0, 5);
    lua_pushstring(L, bson_iter_utf8(&it, NULL));
    lua_setfield(L, -2, "id");
    for (f = 0; f < 2 && good; f++) {
      good = bson_iter_init_find(&it, doc, fields[f]) && BSON_ITER_HOLDS_UTF8(&it);
      if (good) {
        uint32_t l;
        const char *v = bson_iter_utf8(&it, &l);
        lua_pushlstring(L, v, l);
        lua_setfield(L, -2, fields[f]);
      }
    }
    if (!good) {
      ms_err_set(e, "server", "claim_inbox: an entry lacks its execution_id or event");
      lua_pop(L, 1);
      ok = -1;
      break;
    }
    if (bson_iter_init_find(&it, doc, "priority") && BSON_ITER_HOLDS_NUMBER(&it)) {
      lua_pushinteger(L, (lua_Integer)bson_iter_as_int64(&it));
      lua_setfield(L, -2, "priority");
    }
    if (bson_iter_init_find(&it, doc, "at") && BSON_ITER_HOLDS_NUMBER(&it)) {
      lua_pushinteger(L, (lua_Integer)bson_iter_as_int64(&it));
      lua_setfield(L, -2, "at");
    }
    lua_rawseti(L, list, ++count);
  }
  if (ok == 1 && mongoc_cursor_error(cur, be)) ok = 0;
  mongoc_cursor_destroy(cur);
  bson_destroy(&filter);
  bson_destroy(&opts);
  return ok;
}

/* store:_inbox_claim(limit, lease, token, max_events)
 * -> { claims = { [execution_id] = fence }, entries = { entry, ... } } | nil, msg, code
 * Claims the queued events of up to limit executions, the most urgent and
 * oldest first, in five round trips: the candidates, the claims (one bulk),
 * their read back, the stamp on their entries, and the entries. */
static int l_inbox_claim(lua_State *L) {
  STORE_OR_CLOSED(L, s, "claim_inbox");
  inbox_claim_t k;
  lua_Integer limit = (lua_Integer)ms_arg_integer(L, 2, "claim_inbox: limit"), max;
  double lease = ms_arg_number(L, 3, "claim_inbox: lease");
  char **ids = NULL, **held;
  size_t n = 0, nheld = 0;
  bson_error_t be;
  ms_err_t e;
  int result, claims, list, rc;
  k.token = ms_arg_string(L, 4, "claim_inbox: token", &k.toklen);
  max = (lua_Integer)ms_arg_integer(L, 5, "claim_inbox: max_events");
  if (limit < 1 || max < 1 || !(lease > 0)) {
    ms_err_set(&e, "invalid", "claim_inbox: limit and max_events must be >= 1 and lease > 0");
    return ms_push_error(L, &e);
  }
  k.now = ms_now();
  k.until = k.now + lease;
  if (!ensure_inbox_indexes(s, &be)) return ms_store_push_bson_err(L, s, &be, "claim_inbox: create indexes");
  lua_createtable(L, 0, 2);
  result = lua_gettop(L);
  lua_newtable(L);
  claims = lua_gettop(L);
  lua_newtable(L);
  list = lua_gettop(L);
  if (!find_candidates(s, &k, limit, &ids, &n, &be)) return ms_store_push_bson_err(L, s, &be, "claim_inbox");
  if (n > 0) {
    held = bson_malloc0(sizeof(char *) * n);
    if (!take_claims(s, &k, ids, n, &be) || !read_claims(L, s, &k, ids, n, claims, held, &nheld, &be) ||
        (nheld > 0 && !stamp_entries(s, &k, held, nheld, &be))) {
      bson_free(held);
      free_ids(ids, n);
      return ms_store_push_bson_err(L, s, &be, "claim_inbox");
    }
    rc = nheld > 0 ? read_entries(L, s, &k, held, nheld, max, list, &be, &e) : 1;
    bson_free(held);
    free_ids(ids, n);
    if (rc < 0) return ms_push_error(L, &e);
    if (rc == 0) return ms_store_push_bson_err(L, s, &be, "claim_inbox");
  } else {
    bson_free(ids);
  }
  lua_setfield(L, result, "entries");
  lua_setfield(L, result, "claims");
  return 1;
}

/* The strings of the list at idx, as bson_strdup'ed ids (a wrong type raises). */
static char **arg_ids(lua_State *L, int idx, const char *what, size_t *n) {
  size_t i, len;
  char **ids;
  ms_arg_table(L, idx, what);
  len = (size_t)luaL_len(L, idx);
  for (i = 1; i <= len; i++) {
    if (lua_rawgeti(L, idx, (lua_Integer)i) != LUA_TSTRING)
      luaL_error(L, "%s[%d] must be a string, got %s", what, (int)i, luaL_typename(L, -1));
    lua_pop(L, 1);
  }
  ids = bson_malloc0(sizeof(char *) * (len ? len : 1));
  for (i = 1; i <= len; i++) {
    lua_rawgeti(L, idx, (lua_Integer)i);
    ids[i - 1] = bson_strdup(lua_tostring(L, -1));
    lua_pop(L, 1);
  }
  *n = len;
  return ids;
}

/* store:_inbox_ack(ids, token) -> deleted | nil, msg, code
 * One delete of the delivered entries that still carry the token: once a
 * later claim stamped them with its own, this deletes nothing. */
static int l_inbox_ack(lua_State *L) {
  STORE_OR_CLOSED(L, s, "ack_inbox");
  size_t n, toklen;
  char **ids = arg_ids(L, 2, "ack_inbox: ids", &n);
  const char *token = ms_arg_string(L, 3, "ack_inbox: token", &toklen);
  bson_t q = BSON_INITIALIZER, reply;
  bson_error_t be;
  int ok;
  if (n == 0) {
    bson_free(ids);
    lua_pushinteger(L, 0);
    return 1;
  }
  append_in(&q, "_id", ids, n);
  bson_append_utf8(&q, "claim_token", 11, token, (int)toklen);
  ok = mongoc_collection_delete_many(s->inbox, &q, NULL, &reply, &be);
  free_ids(ids, n);
  bson_destroy(&q);
  if (!ok) {
    bson_destroy(&reply);
    return ms_store_push_bson_err(L, s, &be, "ack_inbox");
  }
  {
    bson_iter_t it;
    lua_pushinteger(L, (bson_iter_init_find(&it, &reply, "deletedCount") && BSON_ITER_HOLDS_NUMBER(&it))
                           ? (lua_Integer)bson_iter_as_int64(&it)
                           : 0);
  }
  bson_destroy(&reply);
  return 1;
}

/* store:_inbox_release(execution_ids, token, left) -> true | nil, msg, code
 * Gives back the claims that still carry the token, in one update, so what
 * was queued since is claimable at once rather than after the lease. The
 * fence stays: the next taking raises it. left: some of their stamped
 * entries were not acked, so their stamps are given back too (one more
 * update), or they would stay out of the candidates until the lease ends. */
static int l_inbox_release(lua_State *L) {
  STORE_OR_CLOSED(L, s, "release_inbox");
  size_t n, toklen;
  char **ids = arg_ids(L, 2, "release_inbox: execution_ids", &n);
  const char *token = ms_arg_string(L, 3, "release_inbox: token", &toklen);
  int left = lua_toboolean(L, 4);
  bson_t q = BSON_INITIALIZER, u = BSON_INITIALIZER, set;
  bson_error_t be;
  int ok = 1;
  if (n > 0 && left) {
    bson_t eq = BSON_INITIALIZER, eu = BSON_INITIALIZER, eset;
    append_in(&eq, "execution_id", ids, n);
    bson_append_utf8(&eq, "claim_token", 11, token, (int)toklen);
    bson_append_document_begin(&eu, "$set", 4, &eset);
    bson_append_double(&eset, "claim_until", 11, 0);
    bson_append_document_end(&eu, &eset);
    ok = mongoc_collection_update_many(s->inbox, &eq, &eu, NULL, NULL, &be);
    bson_destroy(&eq);
    bson_destroy(&eu);
  }
  if (n > 0 && ok) {
    append_in(&q, "_id", ids, n);
    bson_append_utf8(&q, "token", 5, token, (int)toklen);
    bson_append_document_begin(&u, "$set", 4, &set);
    bson_append_double(&set, "until", 5, 0);
    bson_append_document_end(&u, &set);
    ok = mongoc_collection_update_many(s->inbox_claims, &q, &u, NULL, NULL, &be);
  }
  free_ids(ids, n);
  bson_destroy(&q);
  bson_destroy(&u);
  if (!ok) return ms_store_push_bson_err(L, s, &be, "release_inbox");
  lua_pushboolean(L, 1);
  return 1;
}

static const luaL_Reg inbox_methods[] = {
  {"_inbox_put", l_inbox_put},
  {"_inbox_claim", l_inbox_claim},
  {"_inbox_ack", l_inbox_ack},
  {"_inbox_release", l_inbox_release},
  {NULL, NULL}
};

void ms_open_inbox(lua_State *L) { luaL_setfuncs(L, inbox_methods, 0); }
