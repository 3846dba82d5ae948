/*
 * commit.c - the CAS commit: an execution's new data with its outbox,
 * spawns, timers, dedupe marks and trace steps in one update (or one insert
 * for a new execution), filtered on the loaded version (and, under an
 * inbox claim, on no later claim's fence). What a commit carries is
 * converted and checked before any I/O (commit_read.c), so bad input writes nothing, not
 * even a counter. A commit usually marks one event; a group commit (the
 * inbox's, several queued events of one execution applied in order in
 * memory) marks up to MS_GROUP_MAX, all or none.
 */
#include "commit.h"

#include <math.h>
#include <stdio.h>
#include <string.h>


/* The commit's first trace step (its own index, when it gives one). */
int64_t ms_commit_first_step_index(const commit_in_t *c) {
  bson_iter_t it;
  const uint8_t *data;
  uint32_t len;
  bson_t step;
  if (!(bson_iter_init_find(&it, &c->trace, "0") && BSON_ITER_HOLDS_DOCUMENT(&it))) return -1;
  bson_iter_document(&it, &len, &data);
  if (!bson_init_static(&step, data, len)) return -1;
  return ms_step_index(&step, -1);
}

/* Appends entries of src (an array of documents) to dst under key as an
 * array, giving the i-th entry seq = first + i as its first field. */
static void append_with_seqs(bson_t *dst, const char *key, const bson_t *src, int64_t first) {
  bson_t arr;
  bson_iter_t it;
  int64_t i = 0;
  bson_append_array_begin(dst, key, -1, &arr);
  if (bson_iter_init(&it, src)) {
    while (bson_iter_next(&it)) {
      char ik[24];
      const char *ikey;
      size_t iklen = bson_uint32_to_string((uint32_t)i, &ikey, ik, sizeof ik);
      bson_t entry, inner;
      const uint8_t *data;
      uint32_t len;
      bson_iter_document(&it, &len, &data);
      bson_init_static(&inner, data, len);
      bson_append_document_begin(&arr, ikey, (int)iklen, &entry);
      bson_append_int64(&entry, "seq", 3, first + i);
      bson_concat(&entry, &inner);
      bson_append_document_end(&arr, &entry);
      i++;
    }
  }
  bson_append_array_end(dst, &arr);
}

/* The commit's event ids as the entries of an array. */
static void append_pids(bson_t *arr, const commit_in_t *c) {
  int k;
  for (k = 0; k < c->n_processed; k++) {
    char ik[24];
    const char *ikey;
    size_t iklen = bson_uint32_to_string((uint32_t)k, &ikey, ik, sizeof ik);
    bson_append_utf8(arr, ikey, (int)iklen, c->pids[k], (int)c->plens[k]);
  }
}

/* status and parent_id, promoted from data so the listing filters on the
 * server; every commit keeps them current. */
static void append_promoted(bson_t *d, const commit_in_t *c) {
  bson_append_utf8(d, "status", 6, c->status, (int)c->status_len);
  if (c->parent_id) bson_append_utf8(d, "parent_id", 9, c->parent_id, (int)c->parent_len);
  else bson_append_null(d, "parent_id", 9);
}

void ms_commit_build_update(const ms_store_t *s, const commit_in_t *c, const seqs_t *q, bson_t *u) {
  bson_t set, push, each, spec, min;
  bson_append_document_begin(u, "$set", 4, &set);
  bson_append_utf8(&set, "data", 4, c->data, (int)c->data_len);
  bson_append_int64(&set, "version", 7, c->old + c->advance);
  if (c->old == 0) bson_append_utf8(&set, "definition_id", 13, c->definition_id, (int)c->def_len);
  append_promoted(&set, c);
  if (c->processed) bson_append_binary(&set, "dedupe", 6, BSON_SUBTYPE_BINARY, c->dd_out, (uint32_t)c->dd_out_len);
  if (c->fence) bson_append_int64(&set, "inbox_fence", 11, c->fence);
  bson_concat(&set, &c->set_timers);
  if (c->has_next_fire) bson_append_double(&set, "next_fire_at", 12, c->next_fire);
  bson_append_document_end(u, &set);
  if (!c->has_next_fire && c->min_fire < MS_NO_TIMER) {
    /* never later than the earliest armed timer; the sweep raises it */
    bson_append_document_begin(u, "$min", 4, &min);
    bson_append_double(&min, "next_fire_at", 12, c->min_fire);
    bson_append_document_end(u, &min);
  }
  if (!bson_empty(&c->unset_timers)) bson_append_document(u, "$unset", 6, &c->unset_timers);
  if (c->n_emits || c->n_spawns || c->has_trace || c->processed) {
    bson_append_document_begin(u, "$push", 5, &push);
    if (c->n_emits) {
      bson_append_document_begin(&push, "outbox", 6, &spec);
      append_with_seqs(&spec, "$each", &c->emits, q->outbox);
      bson_append_document_end(&push, &spec);
    }
    if (c->n_spawns) {
      bson_append_document_begin(&push, "spawns", 6, &spec);
      append_with_seqs(&spec, "$each", &c->spawns, q->spawn);
      bson_append_document_end(&push, &spec);
    }
    if (c->has_trace) ms_append_trace_push(&push, &c->trace, q->trace, s->trace_max);
    if (c->processed) {
      /* the readable tail of the dedupe marks; the filter made sure the ids
       * are not in it yet */
      bson_append_document_begin(&push, "processed", 9, &spec);
      bson_append_array_begin(&spec, "$each", 5, &each);
      append_pids(&each, c);
      bson_append_array_end(&spec, &each);
      bson_append_int64(&spec, "$slice", 6, -ms_dedupe_tail(s));
      bson_append_document_end(&push, &spec);
    }
    bson_append_document_end(u, &push);
  }
}

/* The first insert carries every embedded field, so later $push, $set and
 * $addToSet always find an array or sub-document to work on. */
static void build_insert(const ms_store_t *s, const commit_in_t *c, const seqs_t *q, bson_t *d) {
  bson_t arr, timers;
  bson_iter_t it;
  bson_append_utf8(d, "_id", 3, c->id, (int)c->id_len);
  bson_append_utf8(d, "definition_id", 13, c->definition_id, (int)c->def_len);
  bson_append_int64(d, "version", 7, c->old + c->advance);
  bson_append_utf8(d, "data", 4, c->data, (int)c->data_len);
  append_promoted(d, c);
  if (c->fence) bson_append_int64(d, "inbox_fence", 11, c->fence);
  bson_append_double(d, "next_fire_at", 12, c->min_fire);
  append_with_seqs(d, "outbox", &c->emits, q->outbox);
  append_with_seqs(d, "spawns", &c->spawns, q->spawn);
  bson_append_array_begin(d, "processed", 9, &arr);
  append_pids(&arr, c);
  bson_append_array_end(d, &arr);
  bson_append_binary(d, "dedupe", 6, BSON_SUBTYPE_BINARY, c->dd_out ? c->dd_out : (const uint8_t *)"",
                     (uint32_t)c->dd_out_len);
  bson_append_document_begin(d, "timers", 6, &timers);
  if (bson_iter_init(&it, &c->set_timers)) {
    while (bson_iter_next(&it))   /* keys are "timers.<enc>": drop the prefix */
      bson_append_double(&timers, bson_iter_key(&it) + 7, (int)bson_iter_key_len(&it) - 7,
                         bson_iter_double(&it));
  }
  bson_append_document_end(d, &timers);
  bson_append_array_begin(d, "trace", 5, &arr);
  ms_append_trace_steps(&arr, &c->trace, q->trace);
  bson_append_array_end(d, &arr);
  (void)s;
}

/* The version of the stored document: 1 and *found set, 0 when there is no
 * document, -1 on error. A document with no version (a trace-only stub made
 * by append_trace) reports found = 0. */
static int find_version(ms_store_t *s, const char *id, size_t idlen, int64_t *found, int64_t *fence,
                        bson_error_t *be) {
  bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, proj;
  mongoc_cursor_t *cur;
  const bson_t *doc;
  int rc = 0;
  *fence = 0;
  bson_append_utf8(&filter, "_id", 3, id, (int)idlen);
  bson_append_document_begin(&opts, "projection", 10, &proj);
  bson_append_int32(&proj, "version", 7, 1);
  bson_append_int32(&proj, "inbox_fence", 11, 1);
  bson_append_document_end(&opts, &proj);
  bson_append_int64(&opts, "limit", 5, 1);
  cur = mongoc_collection_find_with_opts(s->exes, &filter, &opts, NULL);
  if (mongoc_cursor_next(cur, &doc)) {
    bson_iter_t it;
    rc = 1;
    *found = (bson_iter_init_find(&it, doc, "version") && BSON_ITER_HOLDS_NUMBER(&it)) ? bson_iter_as_int64(&it) : 0;
    if (bson_iter_init_find(&it, doc, "inbox_fence") && BSON_ITER_HOLDS_NUMBER(&it)) *fence = bson_iter_as_int64(&it);
  } else if (mongoc_cursor_error(cur, be)) {
    rc = -1;
  }
  mongoc_cursor_destroy(cur);
  bson_destroy(&filter);
  bson_destroy(&opts);
  return rc;
}

int64_t ms_commit_reply_count(const bson_t *reply, const char *field) {
  bson_iter_t it;
  if (bson_iter_init_find(&it, reply, field) && BSON_ITER_HOLDS_NUMBER(&it)) return bson_iter_as_int64(&it);
  return 0;
}

/* The CAS update: filter on _id and the loaded version, and, when the commit
 * marks an event processed, on that event not being marked yet. For a
 * version-0 commit the filter also takes a document with no version, which
 * is a stub that append_trace created before the first commit. */
/* The guard of seqs taken from a block: no pending entry of the execution
 * holds a seq at or above the commit's first, so its entries come after
 * every entry it emitted before, whichever process reserved those:
 * $nor: [ { outbox.seq: { $gte: first } }, { spawns.seq: { $gte: first } } ]
 * ($nor rather than $not, which mongo-java-server gets wrong on an empty
 * array). */
/* The fence guard rides in the same $nor (a filter has one $nor key): no
 * commit made under a later inbox claim, { inbox_fence: { $gt: fence } }. */
static void append_nor(bson_t *filter, const commit_in_t *c, const seqs_t *q, int seq_floor) {
  bson_t nor, alt, gte;
  int k = 0;
  bson_append_array_begin(filter, "$nor", 4, &nor);
  if (c->fence) {
    bson_append_document_begin(&nor, k++ ? "1" : "0", 1, &alt);
    bson_append_document_begin(&alt, "inbox_fence", 11, &gte);
    bson_append_int64(&gte, "$gt", 3, c->fence);
    bson_append_document_end(&alt, &gte);
    bson_append_document_end(&nor, &alt);
  }
  if (seq_floor && c->n_emits) {
    bson_append_document_begin(&nor, k++ ? "1" : "0", 1, &alt);
    bson_append_document_begin(&alt, "outbox.seq", 10, &gte);
    bson_append_int64(&gte, "$gte", 4, q->outbox);
    bson_append_document_end(&alt, &gte);
    bson_append_document_end(&nor, &alt);
  }
  if (seq_floor && c->n_spawns) {
    bson_append_document_begin(&nor, k > 1 ? "2" : k ? "1" : "0", 1, &alt);
    k++;
    bson_append_document_begin(&alt, "spawns.seq", 10, &gte);
    bson_append_int64(&gte, "$gte", 4, q->spawn);
    bson_append_document_end(&alt, &gte);
    bson_append_document_end(&nor, &alt);
  }
  bson_append_array_end(filter, &nor);
}

void ms_commit_build_cas_filter(const commit_in_t *c, const seqs_t *q, bson_t *filter) {
  bson_append_utf8(filter, "_id", 3, c->id, (int)c->id_len);
  int seq_floor = q->aged && (c->n_emits || c->n_spawns);
  if (seq_floor || c->fence) append_nor(filter, c, q, seq_floor);
  if (c->old == 0) {
    bson_t in, arr;
    bson_append_document_begin(filter, "version", 7, &in);
    bson_append_array_begin(&in, "$in", 3, &arr);
    bson_append_int64(&arr, "0", 1, 0);
    bson_append_null(&arr, "1", 1);
    bson_append_array_end(&in, &arr);
    bson_append_document_end(filter, &in);
  } else {
    bson_append_int64(filter, "version", 7, c->old);
  }
  if (c->n_processed == 1) {
    /* the dedupe guard: an event is marked once, whatever the caller loaded */
    bson_t ne;
    bson_append_document_begin(filter, "processed", 9, &ne);
    bson_append_utf8(&ne, "$ne", 3, c->processed, (int)c->processed_len);
    bson_append_document_end(filter, &ne);
  } else if (c->n_processed > 1) {
    bson_t nin, arr;
    bson_append_document_begin(filter, "processed", 9, &nin);
    bson_append_array_begin(&nin, "$nin", 4, &arr);
    append_pids(&arr, c);
    bson_append_array_end(&nin, &arr);
    bson_append_document_end(filter, &nin);
  }
}

static int cas_update(ms_store_t *s, const commit_in_t *c, const seqs_t *q, const bson_t *update,
                      int64_t *matched, bson_error_t *be) {
  bson_t filter = BSON_INITIALIZER, reply;
  int ok;
  ms_commit_build_cas_filter(c, q, &filter);
  ok = mongoc_collection_update_one(s->exes, &filter, update, NULL, &reply, be);
  if (ok) *matched = ms_commit_reply_count(&reply, "matchedCount");
  bson_destroy(&reply);
  bson_destroy(&filter);
  return ok;
}

/* nil, msg, "duplicate", version: the commit's event is marked already */
int ms_commit_push_duplicate(lua_State *L, const commit_in_t *c) {
  lua_pushnil(L);
  if (c->n_processed > 1)
    lua_pushfstring(L, "commit %s: an event of the group (%s, ... %d in all) is already processed", c->id,
                    c->processed, c->n_processed);
  else
    lua_pushfstring(L, "commit %s: event %s is already processed", c->id, c->processed);
  lua_pushliteral(L, "duplicate");
  lua_pushinteger(L, (lua_Integer)c->old);
  return 4;
}

/* nil, msg, "stale", version: a commit under a later inbox claim landed */
int ms_commit_push_stale(lua_State *L, const commit_in_t *c, int64_t found, int64_t fence) {
  lua_pushnil(L);
  lua_pushfstring(L, "commit %s: the inbox claim passed to another worker (fence %I, the execution's is %I)", c->id,
                  (lua_Integer)c->fence, (lua_Integer)fence);
  lua_pushliteral(L, "stale");
  lua_pushinteger(L, (lua_Integer)found);
  return 4;
}

int ms_commit_push_conflict(lua_State *L, const commit_in_t *c, int have, int64_t found) {
  /* the version is the loaded one, so the filter's dedupe guard refused it */
  if (have && found == c->old && c->processed) return ms_commit_push_duplicate(L, c);
  lua_pushnil(L);
  if (have)
    lua_pushfstring(L, "commit %s: version conflict: expected %I, found %I", c->id, (lua_Integer)c->old,
                    (lua_Integer)found);
  else
    lua_pushfstring(L, "commit %s: version conflict: expected %I, found no document", c->id,
                    (lua_Integer)c->old);
  lua_pushliteral(L, "conflict");
  if (have) lua_pushinteger(L, (lua_Integer)found);
  else lua_pushnil(L);
  return 4;
}

/* The answer for a commit whose event the loaded digests hold: a duplicate,
 * unless it is made under an inbox claim that a later one replaced, which
 * one read of the fence tells (only then is there a round trip): a stale
 * worker learns that it is stale, not that its events were handled. */
int ms_commit_push_marked(lua_State *L, ms_store_t *s, const commit_in_t *c) {
  int64_t found = 0, fence = 0;
  bson_error_t be;
  int have;
  if (!c->fence) return ms_commit_push_duplicate(L, c);
  have = find_version(s, c->id, c->id_len, &found, &fence, &be);
  if (have < 0) return ms_store_push_bson_err(L, s, &be, c->doing);
  if (have && fence > c->fence) return ms_commit_push_stale(L, c, found, fence);
  return ms_commit_push_duplicate(L, c);
}

/* A commit landed: true, and the digests it stored when it marked an event
 * (the Lua layer keeps them with the execution for its next commit). */
static int push_committed(lua_State *L, commit_in_t *c) {
  lua_pushboolean(L, 1);
  if (c->processed) lua_pushlstring(L, (const char *)c->dd_out, c->dd_out_len);
  ms_commit_in_destroy(c);
  return c->processed ? 2 : 1;
}

/* Whether the loaded digests hold any of the commit's events (1: then it
 * is a duplicate, with no round trip); else the digests it stores, in
 * c->dd_out. */
int ms_commit_mark_digests(const ms_store_t *s, commit_in_t *c) {
  uint8_t ds[MS_GROUP_MAX * MS_DIGEST];
  int k;
  for (k = 0; k < c->n_processed; k++) {
    ms_ev_digest(c->pids[k], c->plens[k], ds + k * MS_DIGEST);
    if (ms_digests_hold((const uint8_t *)c->dd_in, c->dd_in_len, ds + k * MS_DIGEST)) return 1;
  }
  c->dd_out = ms_digests_add(s, c->dd_in, c->dd_in_len, ds, (size_t)c->n_processed, &c->dd_out_len);
  return 0;
}

/* The seqs of the commit's emits and spawns, and its trace step's index
 * when the step gives none. */
static int reserve_seqs(ms_store_t *s, const commit_in_t *c, seqs_t *q, bson_error_t *be) {
  q->aged = 0;
  if ((c->n_emits && !ms_take_seqs(s, MS_SEQ_OUTBOX, c->n_emits, &q->outbox, &q->aged, be)) ||
      (c->n_spawns && !ms_take_seqs(s, MS_SEQ_SPAWN, c->n_spawns, &q->spawn, &q->aged, be)))
    return 0;
  if (c->has_trace) {
    int64_t given = c->has_trace == 1 ? ms_commit_first_step_index(c) : -1;
    if (given >= 0) q->trace = given;
    else if (!ms_next_trace_index(s, c->id, c->id_len, c->has_trace, &q->trace, be)) return 0;
  }
  return 1;
}

/* The write itself, and what it answers; c is destroyed on every path. */
static int write_commit(lua_State *L, ms_store_t *s, commit_in_t *c, seqs_t *q) {
  bson_t update = BSON_INITIALIZER;
  bson_error_t be;
  int64_t matched = 0, found = 0, fence = 0;
  int rc, have;
  if (c->old == 0) {
    /* A first commit is usually a new execution: insert it in one round
     * trip. A duplicate key means the id exists (another writer's, or a
     * trace-only stub that the version-0 update below adopts). */
    bson_t doc = BSON_INITIALIZER;
    build_insert(s, c, q, &doc);
    rc = mongoc_collection_insert_one(s->exes, &doc, NULL, NULL, &be);
    bson_destroy(&doc);
    if (rc) return push_committed(L, c);
    if (!(be.domain == MONGOC_ERROR_SERVER && be.code == MONGOC_ERROR_DUPLICATE_KEY)) {
      ms_commit_in_destroy(c);
      return ms_store_push_bson_err(L, s, &be, c->doing);
    }
  }
  for (;;) {
    ms_commit_build_update(s, c, q, &update);
    rc = cas_update(s, c, q, &update, &matched, &be);
    bson_destroy(&update);
    bson_init(&update);
    if (!rc) {
      ms_commit_in_destroy(c);
      return ms_store_push_bson_err(L, s, &be, c->doing);
    }
    if (matched == 1) return push_committed(L, c);
    /* No document at the loaded version: a stale write (or one that vanished). */
    have = find_version(s, c->id, c->id_len, &found, &fence, &be);
    if (have < 0) {
      ms_commit_in_destroy(c);
      return ms_store_push_bson_err(L, s, &be, c->doing);
    }
    if (have && c->fence && fence > c->fence) {
      rc = ms_commit_push_stale(L, c, found, fence);
      ms_commit_in_destroy(c);
      return rc;
    }
    /* At the loaded version, the seq guard may be what refused it: once
     * more with fresh seqs, which no pending entry can be above */
    if (!(have && found == c->old && q->aged)) break;
    ms_drop_seq_blocks(s);
    if (!reserve_seqs(s, c, q, &be)) {
      ms_commit_in_destroy(c);
      return ms_store_push_bson_err(L, s, &be, c->doing);
    }
  }
  rc = ms_commit_push_conflict(L, c, have, found);
  ms_commit_in_destroy(c);
  return rc;
}

/* store:_commit(id, definition_id, old_version, data_json, ops)
 * -> true[, digests] | nil, msg, code[, found] */
static int l_commit(lua_State *L) {
  STORE_OR_CLOSED(L, s, "commit");
  commit_in_t c;
  ms_err_t e;
  bson_error_t be;
  seqs_t q = {0, 0, 0, 0};
  memset(&c, 0, sizeof c);
  if (ms_commit_read_args(L, 2, &c, &e)) return ms_push_error(L, &e);
  /* marked already among the loaded digests: no round trip at all */
  if (c.processed && ms_commit_mark_digests(s, &c)) return ms_commit_push_marked(L, s, &c);
  if (ms_commit_read_ops(L, s, &c, 6, &e)) return ms_push_error(L, &e);
  if (!reserve_seqs(s, &c, &q, &be)) {
    ms_commit_in_destroy(&c);
    return ms_store_push_bson_err(L, s, &be, c.doing);
  }
  return write_commit(L, s, &c, &q);
}

static const luaL_Reg commit_methods[] = {
  {"_commit", l_commit},
  {NULL, NULL}
};

void ms_open_commit(lua_State *L) { luaL_setfuncs(L, commit_methods, 0); }
