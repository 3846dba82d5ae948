/*
 * commit.c - the CAS commit: an execution's new data with its outbox,
 * spawns, timers, dedupe marks and trace steps in one update (or one insert
 * for a new execution), filtered on the loaded version (and, under an
 * inbox claim, on no later claim's fence). What a commit carries is
 * converted and checked before any I/O, so bad input writes nothing, not
 * even a counter. A commit usually marks one event; a group commit (the
 * inbox's, several queued events of one execution applied in order in
 * memory) marks up to MS_GROUP_MAX, all or none.
 */
#include "store.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MS_GROUP_MAX 256

typedef struct commit_in {
  const char *id, *definition_id, *data, *processed, *status, *parent_id;
  size_t id_len, def_len, data_len, processed_len, status_len, parent_len;
  double min_fire;         /* earliest fire_at scheduled by this commit, or MS_NO_TIMER */
  double next_fire;        /* with has_next_fire: the earliest timer armed after the commit */
  int has_next_fire;       /* the caller knows every armed timer: next_fire_at is set, not lowered */
  int64_t old;
  int64_t advance;         /* how far the version moves on: 1, or a group's event count */
  int64_t fence;           /* the inbox claim's fence the commit is made under (0: none) */
  int n_emits, n_spawns;
  bson_t emits;            /* array of { target_id, event } without seq */
  bson_t spawns;           /* array of { child_id, root_path, context } without seq */
  bson_t set_timers;       /* "timers.<enc>" -> fire_at */
  bson_t unset_timers;     /* "timers.<enc>" -> "" */
  bson_t trace;            /* the steps as an array, without index unless the caller gave one */
  int has_trace;           /* how many steps */
  int n_processed;         /* event ids the commit marks (processed is the first) */
  const char *pids[MS_GROUP_MAX];
  size_t plens[MS_GROUP_MAX];
  const char *dd_in;       /* the dedupe digests the caller loaded (dedupe.c) */
  size_t dd_in_len;
  uint8_t *dd_out;         /* the digests this commit stores, when it marks an event */
  size_t dd_out_len;
  char doing[160];         /* "commit <id>", the prefix of its messages */
} commit_in_t;

static void commit_in_destroy(commit_in_t *c) {
  bson_free(c->dd_out);
  c->dd_out = NULL;
  bson_destroy(&c->emits);
  bson_destroy(&c->spawns);
  bson_destroy(&c->set_timers);
  bson_destroy(&c->unset_timers);
  bson_destroy(&c->trace);
}

/* The list at the top of the stack: a table whose keys are 1..n (or marked
 * as an array), never a table with other keys, which would be half-read. */
static int list_length(lua_State *L, const char *what, lua_Integer *n, ms_err_t *e) {
  size_t len = 0;
  if (!lua_istable(L, -1) || ms_table_kind(L, -1, &len, e) != MS_KIND_ARRAY) {
    /* an empty table is an empty list */
    if (lua_istable(L, -1)) {
      lua_pushnil(L);
      if (lua_next(L, -2) == 0) { *n = 0; return 0; }
      lua_pop(L, 2);
    }
    ms_err_set(e, "invalid", "%s must be a list (keys 1..n) of tables", what);
    return -1;
  }
  *n = (lua_Integer)len;
  return 0;
}

/* Reads ops.emits: { { target_id = string|nil, event = "<Event JSON>" }, ... }
 * (the Lua layer has serialised each event already). */
static int read_emits(lua_State *L, int ops, commit_in_t *c, ms_err_t *e) {
  lua_Integer i, n;
  if (lua_getfield(L, ops, "emits") == LUA_TNIL) { lua_pop(L, 1); return 0; }
  if (list_length(L, "emits", &n, e)) {
    lua_pop(L, 1);
    return -1;
  }
  for (i = 1; i <= n; i++) {
    char ik[24];
    const char *ikey;
    size_t iklen = bson_uint32_to_string((uint32_t)(i - 1), &ikey, ik, sizeof ik);
    bson_t entry;
    size_t len;
    const char *s;
    lua_rawgeti(L, -1, i);
    bson_append_document_begin(&c->emits, ikey, (int)iklen, &entry);
    lua_getfield(L, -1, "target_id");
    if (lua_isnil(L, -1) || ms_is_null(L, -1)) {
      bson_append_null(&entry, "target_id", 9);
    } else if (lua_type(L, -1) == LUA_TSTRING) {
      s = lua_tolstring(L, -1, &len);
      if (ms_text_error(s, len)) {
        ms_err_set(e, "invalid", "emits[%d].target_id %s", (int)i, ms_text_error(s, len));
        lua_pop(L, 3);
        return -1;
      }
      bson_append_utf8(&entry, "target_id", 9, s, (int)len);
    } else {
      ms_err_set(e, "invalid", "emits[%d].target_id must be a string, got %s", (int)i, luaL_typename(L, -1));
      lua_pop(L, 3);
      return -1;
    }
    lua_pop(L, 1);
    lua_getfield(L, -1, "event");
    s = lua_tolstring(L, -1, &len);
    bson_append_utf8(&entry, "event", 5, s, (int)len);
    lua_pop(L, 2);
    bson_append_document_end(&c->emits, &entry);
  }
  c->n_emits = (int)n;
  lua_pop(L, 1);
  return 0;
}

/* The context of spawns[i] (the table on top of the stack) into entry: a
 * table with string keys, or {} when absent. */
static int append_spawn_context(lua_State *L, lua_Integer i, bson_t *entry, ms_err_t *e) {
  char what[48];
  ms_path_t p;
  int rc;
  snprintf(what, sizeof what, "spawns[%d].context", (int)i);
  ms_path_init(&p, what);
  if (lua_getfield(L, -1, "context") == LUA_TNIL) {
    bson_t empty;
    bson_append_document_begin(entry, "context", 7, &empty);
    bson_append_document_end(entry, &empty);
    rc = 0;
  } else if (!lua_istable(L, -1)) {
    ms_err_set(e, "invalid", "%s must be a table", what);
    rc = -1;
  } else {
    size_t alen;
    rc = ms_table_kind(L, -1, &alen, e);
    if (rc == MS_KIND_ARRAY) {
      ms_err_set(e, "invalid", "%s must be a table with string keys", what);
      rc = -1;
    } else if (rc < 0) {
      ms_err_prefix(e, what);
    } else {
      rc = ms_append_value(L, -1, entry, "context", 7, &p, e);
    }
  }
  lua_pop(L, 1);
  return rc;
}

static int read_spawns(lua_State *L, int ops, commit_in_t *c, ms_err_t *e) {
  lua_Integer i, n;
  if (lua_getfield(L, ops, "spawns") == LUA_TNIL) { lua_pop(L, 1); return 0; }
  if (list_length(L, "spawns", &n, e)) {
    lua_pop(L, 1);
    return -1;
  }
  for (i = 1; i <= n; i++) {
    char ik[24];
    const char *ikey, *s;
    size_t iklen = bson_uint32_to_string((uint32_t)(i - 1), &ikey, ik, sizeof ik), len;
    bson_t entry;
    int rc;
    lua_rawgeti(L, -1, i);
    if (!lua_istable(L, -1)) {
      ms_err_set(e, "invalid", "spawns[%d] must be a table, got %s", (int)i, luaL_typename(L, -1));
      lua_pop(L, 2);
      return -1;
    }
    bson_append_document_begin(&c->spawns, ikey, (int)iklen, &entry);
    bson_append_utf8(&entry, "parent_id", 9, c->id, (int)c->id_len);
    lua_getfield(L, -1, "child_id");
    if (lua_type(L, -1) != LUA_TSTRING || (s = lua_tolstring(L, -1, &len), ms_text_error(s, len))) {
      ms_err_set(e, "invalid", "spawns[%d].child_id must be a non-empty string", (int)i);
      lua_pop(L, 3);
      return -1;
    }
    bson_append_utf8(&entry, "child_id", 8, s, (int)len);
    lua_pop(L, 1);
    lua_getfield(L, -1, "root_path");
    if (lua_type(L, -1) != LUA_TSTRING || (s = lua_tolstring(L, -1, &len), !bson_utf8_validate(s, len, false))) {
      ms_err_set(e, "invalid", "spawns[%d].root_path must be a string", (int)i);
      lua_pop(L, 3);
      return -1;
    }
    bson_append_utf8(&entry, "root_path", 9, s, (int)len);
    lua_pop(L, 1);
    rc = append_spawn_context(L, i, &entry, e);
    lua_pop(L, 1);
    if (rc) { lua_pop(L, 1); return -1; }
    bson_append_document_end(&c->spawns, &entry);
  }
  c->n_spawns = (int)n;
  lua_pop(L, 1);
  return ms_check_storable(&c->spawns, "spawns", e);
}

/* timers[i] (the table on top of the stack): a schedule into set_timers
 * (lowering min_fire), a cancel into unset_timers. */
static int read_timer(lua_State *L, lua_Integer i, commit_in_t *c, ms_err_t *e) {
  const char *action, *path;
  size_t plen;
  bson_string_t *key = NULL;
  int schedule;
  lua_getfield(L, -1, "action");
  action = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
  schedule = strcmp(action, "schedule") == 0;
  if (!schedule && strcmp(action, "cancel") != 0) {
    ms_err_set(e, "invalid", "timers[%d].action must be \"schedule\" or \"cancel\"", (int)i);
    lua_pop(L, 1);
    return -1;
  }
  lua_pop(L, 1);
  lua_getfield(L, -1, "path");
  if (lua_type(L, -1) != LUA_TSTRING) {
    ms_err_set(e, "invalid", "timers[%d].path must be a string", (int)i);
    lua_pop(L, 1);
    return -1;
  }
  path = lua_tolstring(L, -1, &plen);
  if (ms_encode_path(path, plen, &key, e)) {
    ms_err_prefix(e, "timers");
    lua_pop(L, 1);
    return -1;
  }
  lua_pop(L, 1);
  if (schedule) {
    double at;
    lua_getfield(L, -1, "fire_at");
    if (lua_type(L, -1) != LUA_TNUMBER || !isfinite(at = lua_tonumber(L, -1))) {
      ms_err_set(e, "invalid", "timers[%d].fire_at must be a finite number (epoch seconds)", (int)i);
      bson_string_free(key, true);
      lua_pop(L, 1);
      return -1;
    }
    bson_append_double(&c->set_timers, key->str, (int)key->len, at);
    if (at < c->min_fire) c->min_fire = at;
    lua_pop(L, 1);
  } else {
    bson_append_utf8(&c->unset_timers, key->str, (int)key->len, "", 0);
  }
  bson_string_free(key, true);
  return 0;
}

/* One update cannot both set and unset a key: the server would refuse it. */
static int check_set_unset(const commit_in_t *c, ms_err_t *e) {
  bson_iter_t it, other;
  if (bson_iter_init(&it, &c->unset_timers)) {
    while (bson_iter_next(&it)) {
      if (bson_iter_init_find(&other, &c->set_timers, bson_iter_key(&it))) {
        ms_err_set(e, "invalid", "timers: '%s' is both scheduled and cancelled", bson_iter_key(&it) + 7);
        return -1;
      }
    }
  }
  return 0;
}

static int read_timers(lua_State *L, int ops, commit_in_t *c, ms_err_t *e) {
  lua_Integer i, n;
  if (lua_getfield(L, ops, "timers") == LUA_TNIL) { lua_pop(L, 1); return 0; }
  if (list_length(L, "timers", &n, e)) {
    lua_pop(L, 1);
    return -1;
  }
  for (i = 1; i <= n; i++) {
    lua_rawgeti(L, -1, i);
    if (!lua_istable(L, -1)) {
      ms_err_set(e, "invalid", "timers[%d] must be a table, got %s", (int)i, luaL_typename(L, -1));
      lua_pop(L, 2);
      return -1;
    }
    if (read_timer(L, i, c, e)) {
      lua_pop(L, 2);
      return -1;
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return check_set_unset(c, e);
}

/* One step (the table on top of the stack) appended to c->trace as entry
 * c->has_trace. */
static int read_one_step(lua_State *L, commit_in_t *c, const char *what, ms_err_t *e) {
  bson_t step = BSON_INITIALIZER;
  char ik[24];
  const char *ikey;
  size_t iklen;
  if (ms_table_to_bson(L, -1, &step, what, e) || ms_check_step(&step, what, e)) {
    bson_destroy(&step);
    return -1;
  }
  iklen = bson_uint32_to_string((uint32_t)c->has_trace, &ikey, ik, sizeof ik);
  bson_append_document(&c->trace, ikey, (int)iklen, &step);
  bson_destroy(&step);
  c->has_trace++;
  return 0;
}

/* ops.trace: one step, or (a group commit) a list of them, one per event. */
static int read_trace_step(lua_State *L, int ops, commit_in_t *c, ms_err_t *e) {
  lua_Integer i, n;
  int list = 0;
  if (lua_getfield(L, ops, "trace") == LUA_TNIL) { lua_pop(L, 1); return 0; }
  if (lua_istable(L, -1)) {
    list = lua_rawgeti(L, -1, 1) != LUA_TNIL;
    lua_pop(L, 1);
  }
  if (list) {
    if (list_length(L, "trace", &n, e)) {
      lua_pop(L, 1);
      return -1;
    }
    for (i = 1; i <= n; i++) {
      char what[32];
      snprintf(what, sizeof what, "trace[%d]", (int)i);
      lua_rawgeti(L, -1, i);
      if (read_one_step(L, c, what, e)) {
        lua_pop(L, 2);
        return -1;
      }
      lua_pop(L, 1);
    }
  } else {
    if (read_one_step(L, c, "trace", e)) {
      lua_pop(L, 1);
      return -1;
    }
  }
  lua_pop(L, 1);
  return 0;
}

/* The commit's first trace step (its own index, when it gives one). */
static int64_t first_step_index(const commit_in_t *c) {
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

typedef struct seqs {
  int64_t outbox, spawn, trace;
  int aged;  /* some come from a block reserved before (ms_take_seqs) */
} seqs_t;

/* status and parent_id, promoted from data so the listing filters on the
 * server; every commit keeps them current. */
static void append_promoted(bson_t *d, const commit_in_t *c) {
  bson_append_utf8(d, "status", 6, c->status, (int)c->status_len);
  if (c->parent_id) bson_append_utf8(d, "parent_id", 9, c->parent_id, (int)c->parent_len);
  else bson_append_null(d, "parent_id", 9);
}

static void build_update(const ms_store_t *s, const commit_in_t *c, const seqs_t *q, bson_t *u) {
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

static int64_t reply_count(const bson_t *reply, const char *field) {
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

static void build_cas_filter(const commit_in_t *c, const seqs_t *q, bson_t *filter) {
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
  build_cas_filter(c, q, &filter);
  ok = mongoc_collection_update_one(s->exes, &filter, update, NULL, &reply, be);
  if (ok) *matched = reply_count(&reply, "matchedCount");
  bson_destroy(&reply);
  bson_destroy(&filter);
  return ok;
}

/* nil, msg, "duplicate", version: the commit's event is marked already */
static int push_duplicate(lua_State *L, const commit_in_t *c) {
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
static int push_stale(lua_State *L, const commit_in_t *c, int64_t found, int64_t fence) {
  lua_pushnil(L);
  lua_pushfstring(L, "commit %s: the inbox claim passed to another worker (fence %I, the execution's is %I)", c->id,
                  (lua_Integer)c->fence, (lua_Integer)fence);
  lua_pushliteral(L, "stale");
  lua_pushinteger(L, (lua_Integer)found);
  return 4;
}

static int push_conflict(lua_State *L, const commit_in_t *c, int have, int64_t found) {
  /* the version is the loaded one, so the filter's dedupe guard refused it */
  if (have && found == c->old && c->processed) return push_duplicate(L, c);
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
static int push_marked(lua_State *L, ms_store_t *s, const commit_in_t *c) {
  int64_t found = 0, fence = 0;
  bson_error_t be;
  int have;
  if (!c->fence) return push_duplicate(L, c);
  have = find_version(s, c->id, c->id_len, &found, &fence, &be);
  if (have < 0) return ms_store_push_bson_err(L, s, &be, c->doing);
  if (have && fence > c->fence) return push_stale(L, c, found, fence);
  return push_duplicate(L, c);
}

/* A commit landed: true, and the digests it stored when it marked an event
 * (the Lua layer keeps them with the execution for its next commit). */
static int push_committed(lua_State *L, commit_in_t *c) {
  lua_pushboolean(L, 1);
  if (c->processed) lua_pushlstring(L, (const char *)c->dd_out, c->dd_out_len);
  commit_in_destroy(c);
  return c->processed ? 2 : 1;
}

/* ops.processed_event_id (one id) or ops.processed_event_ids (a group's,
 * 1..MS_GROUP_MAX distinct ids, in the order applied). */
static int read_processed(lua_State *L, int ops, commit_in_t *c, ms_err_t *e) {
  lua_Integer i, n;
  int k;
  if (lua_getfield(L, ops, "processed_event_id") != LUA_TNIL) {
    if (!(c->pids[0] = ms_check_id(L, -1, "commit: processed_event_id", &c->plens[0], e))) return -1;
    c->n_processed = 1;
  }
  lua_pop(L, 1);
  if (lua_getfield(L, ops, "processed_event_ids") != LUA_TNIL) {
    if (c->n_processed) {
      lua_pop(L, 1);
      ms_err_set(e, "invalid", "%s: processed_event_id and processed_event_ids are exclusive", c->doing);
      return -1;
    }
    if (!lua_istable(L, -1) || (n = (lua_Integer)lua_rawlen(L, -1)) < 1 || n > MS_GROUP_MAX) {
      lua_pop(L, 1);
      ms_err_set(e, "invalid", "%s: processed_event_ids must be a list of 1 to %d ids", c->doing, MS_GROUP_MAX);
      return -1;
    }
    for (i = 1; i <= n; i++) {
      lua_rawgeti(L, -1, i);
      /* the strings stay referenced by the caller's list while we run */
      if (!(c->pids[i - 1] = ms_check_id(L, -1, "commit: processed_event_ids[i]", &c->plens[i - 1], e))) {
        lua_pop(L, 2);
        return -1;
      }
      lua_pop(L, 1);
      for (k = 0; k < (int)i - 1; k++) {
        if (c->plens[k] == c->plens[i - 1] && memcmp(c->pids[k], c->pids[i - 1], c->plens[k]) == 0) {
          lua_pop(L, 1);
          ms_err_set(e, "invalid", "%s: processed_event_ids holds %s twice", c->doing, c->pids[k]);
          return -1;
        }
      }
    }
    c->n_processed = (int)n;
  }
  lua_pop(L, 1);
  c->processed = c->n_processed ? c->pids[0] : NULL;
  c->processed_len = c->n_processed ? c->plens[0] : 0;
  return 0;
}

/* Whether the loaded digests hold any of the commit's events (1: then it
 * is a duplicate, with no round trip); else the digests it stores, in
 * c->dd_out. */
static int mark_digests(const ms_store_t *s, commit_in_t *c) {
  uint8_t ds[MS_GROUP_MAX * MS_DIGEST];
  int k;
  for (k = 0; k < c->n_processed; k++) {
    ms_ev_digest(c->pids[k], c->plens[k], ds + k * MS_DIGEST);
    if (ms_digests_hold((const uint8_t *)c->dd_in, c->dd_in_len, ds + k * MS_DIGEST)) return 1;
  }
  c->dd_out = ms_digests_add(s, c->dd_in, c->dd_in_len, ds, (size_t)c->n_processed, &c->dd_out_len);
  return 0;
}

/* The positional arguments and the scalar opts: a wrong type raises, a bad
 * id or a negative version is invalid. */
static int read_commit_args(lua_State *L, int base, commit_in_t *c, ms_err_t *e) {
  int ops = base + 4;
  if (!(c->id = ms_check_id(L, base, "commit: execution id", &c->id_len, e))) return -1;
  if (!(c->definition_id = ms_check_id(L, base + 1, "commit: definition_id", &c->def_len, e))) return -1;
  c->old = ms_arg_integer(L, base + 2, "commit: version");
  c->data = ms_arg_string(L, base + 3, "commit: data", &c->data_len);
  ms_arg_table(L, ops, "commit: opts");
  snprintf(c->doing, sizeof c->doing, "commit %.100s", c->id);
  if (c->old < 0) {
    ms_err_set(e, "invalid", "%s: version %lld is negative", c->doing, (long long)c->old);
    return -1;
  }
  c->min_fire = MS_NO_TIMER;
  c->status = "PENDING";
  c->status_len = 7;
  if (lua_getfield(L, ops, "status") == LUA_TSTRING) c->status = lua_tolstring(L, -1, &c->status_len);
  lua_pop(L, 1);
  if (lua_getfield(L, ops, "parent_id") == LUA_TSTRING) c->parent_id = lua_tolstring(L, -1, &c->parent_len);
  lua_pop(L, 1);
  if (read_processed(L, ops, c, e)) return -1;
  /* a group commit moves the version on by one per event, as one commit
   * each would have, so what the events derived from it stays unique */
  c->advance = 1;
  if (lua_getfield(L, ops, "advance") != LUA_TNIL) {
    if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1 || lua_tointeger(L, -1) > MS_GROUP_MAX) {
      lua_pop(L, 1);
      ms_err_set(e, "invalid", "%s: advance must be an integer from 1 to %d", c->doing, MS_GROUP_MAX);
      return -1;
    }
    c->advance = (int64_t)lua_tointeger(L, -1);
  }
  lua_pop(L, 1);
  /* the digests loaded with the execution (a string kept by the Lua layer;
   * the Lua strings stay referenced by the caller's table while we run) */
  if (lua_getfield(L, ops, "dedupe") == LUA_TSTRING) c->dd_in = lua_tolstring(L, -1, &c->dd_in_len);
  lua_pop(L, 1);
  /* the inbox claim's fence (mongostore.inbox): an integer >= 1 */
  if (lua_getfield(L, ops, "fence") != LUA_TNIL) {
    if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1) {
      lua_pop(L, 1);
      ms_err_set(e, "invalid", "%s: fence must be an integer >= 1", c->doing);
      return -1;
    }
    c->fence = (int64_t)lua_tointeger(L, -1);
  }
  lua_pop(L, 1);
  /* the earliest timer armed once the commit is applied, from a caller that
   * read every armed timer at this version (the sweep): set exactly, so the
   * sweep need not read the document again to raise its mark */
  if (lua_getfield(L, ops, "next_fire_at") != LUA_TNIL) {
    double at = lua_type(L, -1) == LUA_TNUMBER ? lua_tonumber(L, -1) : NAN;
    if (isnan(at)) {
      lua_pop(L, 1);
      ms_err_set(e, "invalid", "%s: next_fire_at must be a number (epoch seconds)", c->doing);
      return -1;
    }
    c->has_next_fire = 1;
    c->next_fire = at < MS_NO_TIMER ? at : MS_NO_TIMER;
  }
  lua_pop(L, 1);
  return 0;
}

/* The lists of opts (emits, spawns, timers, trace) as BSON, and the check
 * that the update they make fits the server's limit: what the update ships
 * is known now, so it is refused before any write. On failure c is
 * destroyed and e says why. */
static int read_commit_ops(lua_State *L, const ms_store_t *s, commit_in_t *c, int ops, ms_err_t *e) {
  bson_init(&c->emits);
  bson_init(&c->spawns);
  bson_init(&c->set_timers);
  bson_init(&c->unset_timers);
  bson_init(&c->trace);
  if (read_emits(L, ops, c, e) || read_spawns(L, ops, c, e) || read_timers(L, ops, c, e) ||
      read_trace_step(L, ops, c, e)) {
    commit_in_destroy(c);
    ms_err_prefix(e, c->doing);
    return -1;
  }
  if ((int64_t)c->data_len + c->emits.len + c->spawns.len + c->set_timers.len + c->trace.len +
          (int64_t)c->dd_out_len + 1024 >
      (int64_t)s->max_bson) {
    commit_in_destroy(c);
    ms_err_set(e, "too_large", "%s: the update is larger than the server's maximum document size (%d bytes)",
               c->doing, (int)s->max_bson);
    return -1;
  }
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
    int64_t given = c->has_trace == 1 ? first_step_index(c) : -1;
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
      commit_in_destroy(c);
      return ms_store_push_bson_err(L, s, &be, c->doing);
    }
  }
  for (;;) {
    build_update(s, c, q, &update);
    rc = cas_update(s, c, q, &update, &matched, &be);
    bson_destroy(&update);
    bson_init(&update);
    if (!rc) {
      commit_in_destroy(c);
      return ms_store_push_bson_err(L, s, &be, c->doing);
    }
    if (matched == 1) return push_committed(L, c);
    /* No document at the loaded version: a stale write (or one that vanished). */
    have = find_version(s, c->id, c->id_len, &found, &fence, &be);
    if (have < 0) {
      commit_in_destroy(c);
      return ms_store_push_bson_err(L, s, &be, c->doing);
    }
    if (have && c->fence && fence > c->fence) {
      rc = push_stale(L, c, found, fence);
      commit_in_destroy(c);
      return rc;
    }
    /* At the loaded version, the seq guard may be what refused it: once
     * more with fresh seqs, which no pending entry can be above */
    if (!(have && found == c->old && q->aged)) break;
    ms_drop_seq_blocks(s);
    if (!reserve_seqs(s, c, q, &be)) {
      commit_in_destroy(c);
      return ms_store_push_bson_err(L, s, &be, c->doing);
    }
  }
  rc = push_conflict(L, c, have, found);
  commit_in_destroy(c);
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
  if (read_commit_args(L, 2, &c, &e)) return ms_push_error(L, &e);
  /* marked already among the loaded digests: no round trip at all */
  if (c.processed && mark_digests(s, &c)) return push_marked(L, s, &c);
  if (read_commit_ops(L, s, &c, 6, &e)) return ms_push_error(L, &e);
  if (!reserve_seqs(s, &c, &q, &be)) {
    commit_in_destroy(&c);
    return ms_store_push_bson_err(L, s, &be, c.doing);
  }
  return write_commit(L, s, &c, &q);
}

/* ---- many commits in one bulk write ---- */

/* One commit of a batch: its input, and what it came to. */
typedef enum { ITEM_PENDING, ITEM_DONE, ITEM_SENT } item_state_t;

typedef struct batch_item {
  commit_in_t c;
  seqs_t q;
  item_state_t state;
  int bulk_index;          /* its position among the bulk's operations */
} batch_item_t;

/* results[i] = { ok = true, digests = "..." } */
static void result_committed(lua_State *L, int results, int i, const commit_in_t *c) {
  lua_createtable(L, 0, 2);
  lua_pushboolean(L, 1);
  lua_setfield(L, -2, "ok");
  if (c->processed) {
    lua_pushlstring(L, (const char *)c->dd_out, c->dd_out_len);
    lua_setfield(L, -2, "digests");
  }
  lua_rawseti(L, results, i);
}

/* results[i] = { err = msg, code = code[, found = version] } from the
 * nil, msg, code[, found] that a push_ function left on the stack. */
static void result_from_stack(lua_State *L, int results, int i, int nret) {
  int top = lua_gettop(L), base = top - nret + 1;
  lua_createtable(L, 0, 3);
  lua_pushvalue(L, base + 1);
  lua_setfield(L, -2, "err");
  lua_pushvalue(L, base + 2);
  lua_setfield(L, -2, "code");
  if (nret > 3) {
    lua_pushvalue(L, base + 3);
    lua_setfield(L, -2, "found");
  }
  lua_rawseti(L, results, i);
  lua_settop(L, base - 1);
}

static void result_error(lua_State *L, int results, int i, ms_err_t *e) {
  result_from_stack(L, results, i, ms_push_error(L, e));
}

static void result_bson_error(lua_State *L, ms_store_t *s, int results, int i, const bson_error_t *be,
                              const char *doing) {
  result_from_stack(L, results, i, ms_store_push_bson_err(L, s, be, doing));
}

/* Reads items[i] = { id, definition_id, version, data, opts } into it; a
 * version-0 commit is an insert, which the one-commit path makes. */
static int read_item(lua_State *L, const ms_store_t *s, int items, lua_Integer i, batch_item_t *it, ms_err_t *e) {
  int base, rc;
  static const char *const fields[] = {"id", "definition_id", "version", "data", "opts"};
  size_t f;
  lua_rawgeti(L, items, i);
  if (!lua_istable(L, -1)) luaL_error(L, "commit_many: items[%d] must be a table", (int)i);
  base = lua_gettop(L) + 1;
  for (f = 0; f < 5; f++) lua_getfield(L, base - 1, fields[f]);
  /* the strings stay referenced by items[i] once these copies are popped */
  rc = read_commit_args(L, base, &it->c, e);
  if (rc == 0 && it->c.old == 0) {
    ms_err_set(e, "invalid", "%s: a new execution (version 0) is committed alone", it->c.doing);
    rc = -1;
  }
  if (rc == 0 && it->c.processed && mark_digests(s, &it->c)) rc = 1;  /* marked already among the loaded digests */
  if (rc == 0 && read_commit_ops(L, s, &it->c, base + 4, e)) rc = -2;  /* c destroyed */
  lua_settop(L, base - 2);
  return rc;
}

/* The outbox and spawn seqs of every commit of the batch: one take per
 * counter for the whole batch (ms_take_seqs: no round trip while the store's
 * block lasts), then a run of it for each commit in turn; trace indexes
 * (when the steps give none) per execution. */
static int reserve_batch_seqs(ms_store_t *s, batch_item_t *items, size_t n, bson_error_t *be) {
  int64_t emits = 0, spawns = 0, next_outbox = 0, next_spawn = 0;
  int aged = 0;
  size_t i;
  for (i = 0; i < n; i++) {
    if (items[i].state != ITEM_PENDING) continue;
    emits += items[i].c.n_emits;
    spawns += items[i].c.n_spawns;
  }
  if ((emits && !ms_take_seqs(s, MS_SEQ_OUTBOX, emits, &next_outbox, &aged, be)) ||
      (spawns && !ms_take_seqs(s, MS_SEQ_SPAWN, spawns, &next_spawn, &aged, be)))
    return 0;
  for (i = 0; i < n; i++) {
    commit_in_t *c = &items[i].c;
    if (items[i].state != ITEM_PENDING) continue;
    items[i].q.aged = aged;
    items[i].q.outbox = next_outbox;
    items[i].q.spawn = next_spawn;
    next_outbox += c->n_emits;
    next_spawn += c->n_spawns;
    if (c->has_trace) {
      int64_t given = c->has_trace == 1 ? first_step_index(c) : -1;
      if (given >= 0) items[i].q.trace = given;
      else if (!ms_next_trace_index(s, c->id, c->id_len, c->has_trace, &items[i].q.trace, be)) return 0;
    }
  }
  return 1;
}

/* Marks the bulk's operations that failed on their own (writeErrors by
 * index); returns how many. */
static int64_t mark_write_errors(lua_State *L, ms_store_t *s, batch_item_t *items, size_t n, const bson_t *reply,
                                 int results) {
  bson_iter_t it, arr, op;
  int64_t count = 0;
  if (!(bson_iter_init_find(&it, reply, "writeErrors") && BSON_ITER_HOLDS_ARRAY(&it) &&
        bson_iter_recurse(&it, &arr)))
    return 0;
  while (bson_iter_next(&arr)) {
    int64_t index = -1;
    uint32_t code = 0;
    const char *msg = "write error";
    size_t i;
    if (!BSON_ITER_HOLDS_DOCUMENT(&arr) || !bson_iter_recurse(&arr, &op)) continue;
    while (bson_iter_next(&op)) {
      if (strcmp(bson_iter_key(&op), "index") == 0 && BSON_ITER_HOLDS_NUMBER(&op)) index = bson_iter_as_int64(&op);
      else if (strcmp(bson_iter_key(&op), "code") == 0 && BSON_ITER_HOLDS_NUMBER(&op))
        code = (uint32_t)bson_iter_as_int64(&op);
      else if (strcmp(bson_iter_key(&op), "errmsg") == 0 && BSON_ITER_HOLDS_UTF8(&op))
        msg = bson_iter_utf8(&op, NULL);
    }
    for (i = 0; i < n; i++) {
      if (items[i].state == ITEM_SENT && items[i].bulk_index == index) {
        bson_error_t be;
        bson_set_error(&be, MONGOC_ERROR_SERVER, code, "%s", msg);
        result_bson_error(L, s, results, (int)i + 1, &be, items[i].c.doing);
        items[i].state = ITEM_DONE;
        commit_in_destroy(&items[i].c);
        count++;
        break;
      }
    }
  }
  return count;
}

/* Whether a fetched document holds event ev's mark (digests or harel's
 * `processed` array). */
static int doc_marked_one(const bson_t *doc, const char *ev, size_t evlen) {
  bson_iter_t it, arr;
  if (ms_doc_marks(doc, ev, evlen)) return 1;
  if (bson_iter_init_find(&it, doc, "processed") && BSON_ITER_HOLDS_ARRAY(&it) && bson_iter_recurse(&it, &arr)) {
    while (bson_iter_next(&arr)) {
      uint32_t l;
      const char *v;
      if (!BSON_ITER_HOLDS_UTF8(&arr)) continue;
      v = bson_iter_utf8(&arr, &l);
      if (l == evlen && memcmp(v, ev, evlen) == 0) return 1;
    }
  }
  return 0;
}

/* Whether it holds every mark of the commit: a group's update marks all of
 * its events at once, so a document that holds them all took it (or a
 * writer that applied the same events). */
static int doc_marked(const bson_t *doc, const commit_in_t *c) {
  int k;
  for (k = 0; k < c->n_processed; k++)
    if (!doc_marked_one(doc, c->pids[k], c->plens[k])) return 0;
  return c->n_processed > 0;
}

/* The bulk matched fewer documents than it held commits: one find of the
 * sent commits' documents tells them apart. A document that does not hold
 * the commit's event mark lost (a conflict: the one-event path reloads). One
 * that holds it applied the event, ours or a concurrent writer's of the same
 * event at the same version; when the count of matches says every marked one
 * is ours they are committed, otherwise they are reported as duplicates (the
 * event is applied once either way; the caller reloads before going on). */
static void settle_unmatched(lua_State *L, ms_store_t *s, batch_item_t *items, size_t n, int64_t matched,
                             int results) {
  bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, in, ids, proj;
  mongoc_cursor_t *cur;
  const bson_t *doc;
  bson_error_t be;
  size_t i, k = 0;
  int64_t sent = 0, lost = 0;
  char *marked = bson_malloc0(n ? n : 1);
  int64_t *found = bson_malloc0(sizeof(int64_t) * (n ? n : 1));
  int64_t *fences = bson_malloc0(sizeof(int64_t) * (n ? n : 1));
  char *have = bson_malloc0(n ? n : 1);
  bson_append_document_begin(&filter, "_id", 3, &in);
  bson_append_array_begin(&in, "$in", 3, &ids);
  for (i = 0; i < n; i++) {
    char ik[24];
    const char *ikey;
    size_t iklen;
    if (items[i].state != ITEM_SENT) continue;
    iklen = bson_uint32_to_string((uint32_t)k++, &ikey, ik, sizeof ik);
    bson_append_utf8(&ids, ikey, (int)iklen, items[i].c.id, (int)items[i].c.id_len);
    sent++;
  }
  bson_append_array_end(&in, &ids);
  bson_append_document_end(&filter, &in);
  bson_append_document_begin(&opts, "projection", 10, &proj);
  bson_append_int32(&proj, "version", 7, 1);
  bson_append_int32(&proj, "dedupe", 6, 1);
  bson_append_int32(&proj, "processed", 9, 1);
  bson_append_int32(&proj, "inbox_fence", 11, 1);
  bson_append_document_end(&opts, &proj);
  cur = mongoc_collection_find_with_opts(s->exes, &filter, &opts, NULL);
  while (mongoc_cursor_next(cur, &doc)) {
    bson_iter_t it;
    uint32_t idl;
    const char *idv;
    if (!bson_iter_init_find(&it, doc, "_id") || !BSON_ITER_HOLDS_UTF8(&it)) continue;
    idv = bson_iter_utf8(&it, &idl);
    for (i = 0; i < n; i++) {
      commit_in_t *c = &items[i].c;
      if (items[i].state != ITEM_SENT || c->id_len != idl || memcmp(c->id, idv, idl) != 0) continue;
      have[i] = 1;
      found[i] = (bson_iter_init_find(&it, doc, "version") && BSON_ITER_HOLDS_NUMBER(&it)) ? bson_iter_as_int64(&it)
                                                                                            : 0;
      marked[i] = doc_marked(doc, c);
      fences[i] = (bson_iter_init_find(&it, doc, "inbox_fence") && BSON_ITER_HOLDS_NUMBER(&it))
                    ? bson_iter_as_int64(&it) : 0;
    }
  }
  if (mongoc_cursor_error(cur, &be)) {
    for (i = 0; i < n; i++) {
      if (items[i].state != ITEM_SENT) continue;
      result_bson_error(L, s, results, (int)i + 1, &be, items[i].c.doing);
      items[i].state = ITEM_DONE;
      commit_in_destroy(&items[i].c);
    }
  } else {
    for (i = 0; i < n; i++)
      if (items[i].state == ITEM_SENT && !marked[i]) lost++;
    for (i = 0; i < n; i++) {
      commit_in_t *c = &items[i].c;
      if (items[i].state != ITEM_SENT) continue;
      if (have[i] && c->fence && fences[i] > c->fence && !(marked[i] && matched == sent - lost)) {
        result_from_stack(L, results, (int)i + 1, push_stale(L, c, found[i], fences[i]));
      } else if (marked[i] && matched == sent - lost) {
        result_committed(L, results, (int)i + 1, c);
      } else if (marked[i]) {
        result_from_stack(L, results, (int)i + 1, push_duplicate(L, c));
      } else if (have[i] && found[i] == c->old) {
        /* at its version and not marked: the seq guard refused it (its
         * execution holds an entry from a newer block); the one-event path
         * commits it with fresh seqs */
        lua_pushnil(L);
        lua_pushfstring(L, "commit %s: a pending entry is newer than the batch's seqs", c->id);
        lua_pushliteral(L, "conflict");
        lua_pushinteger(L, (lua_Integer)found[i]);
        result_from_stack(L, results, (int)i + 1, 4);
      } else {
        result_from_stack(L, results, (int)i + 1, push_conflict(L, c, have[i], found[i]));
      }
      items[i].state = ITEM_DONE;
      commit_in_destroy(c);
    }
  }
  mongoc_cursor_destroy(cur);
  bson_destroy(&filter);
  bson_destroy(&opts);
  bson_free(marked);
  bson_free(found);
  bson_free(fences);
  bson_free(have);
}

/* The batch's pending commits as one unordered bulk write of CAS updates;
 * each is the one-commit update and filter, atomic on its own. */
static void write_batch(lua_State *L, ms_store_t *s, batch_item_t *items, size_t n, int results) {
  bson_t opts = BSON_INITIALIZER, reply;
  bson_error_t be;
  mongoc_bulk_operation_t *bulk;
  size_t i;
  int sent = 0, ok;
  int64_t matched, failed;
  bson_append_bool(&opts, "ordered", 7, false);
  bulk = mongoc_collection_create_bulk_operation_with_opts(s->exes, &opts);
  bson_destroy(&opts);
  for (i = 0; i < n; i++) {
    bson_t filter = BSON_INITIALIZER, update = BSON_INITIALIZER;
    if (items[i].state != ITEM_PENDING) continue;
    build_cas_filter(&items[i].c, &items[i].q, &filter);
    build_update(s, &items[i].c, &items[i].q, &update);
    ok = mongoc_bulk_operation_update_one_with_opts(bulk, &filter, &update, NULL, &be);
    bson_destroy(&filter);
    bson_destroy(&update);
    if (!ok) {
      result_bson_error(L, s, results, (int)i + 1, &be, items[i].c.doing);
      items[i].state = ITEM_DONE;
      commit_in_destroy(&items[i].c);
      continue;
    }
    items[i].state = ITEM_SENT;
    items[i].bulk_index = sent++;
  }
  if (sent == 0) {
    mongoc_bulk_operation_destroy(bulk);
    return;
  }
  ok = (int)mongoc_bulk_operation_execute(bulk, &reply, &be);
  mongoc_bulk_operation_destroy(bulk);
  failed = ok ? 0 : mark_write_errors(L, s, items, n, &reply, results);
  if (!ok && failed == 0) {
    /* the whole write failed (network, timeout, write concern): any of it
     * may or may not have been applied */
    for (i = 0; i < n; i++) {
      if (items[i].state != ITEM_SENT) continue;
      result_bson_error(L, s, results, (int)i + 1, &be, items[i].c.doing);
      items[i].state = ITEM_DONE;
      commit_in_destroy(&items[i].c);
    }
    bson_destroy(&reply);
    return;
  }
  matched = reply_count(&reply, "nMatched");
  bson_destroy(&reply);
  if (matched == sent - failed) {
    for (i = 0; i < n; i++) {
      if (items[i].state != ITEM_SENT) continue;
      result_committed(L, results, (int)i + 1, &items[i].c);
      items[i].state = ITEM_DONE;
      commit_in_destroy(&items[i].c);
    }
    return;
  }
  settle_unmatched(L, s, items, n, matched, results);
}

/* store:_commit_many({ { id, definition_id, version, data, opts }, ... })
 * -> { [i] = { ok = true[, digests] } | { err, code[, found] } }
 * Every commit is read and checked first (a bad one is refused on its own),
 * the seqs of all of them are reserved together, and they travel in one
 * unordered bulk write. */
static int l_commit_many(lua_State *L) {
  STORE_OR_CLOSED(L, s, "commit_many");
  batch_item_t *items;
  size_t n, i;
  int results;
  bson_error_t be;
  ms_arg_table(L, 2, "commit_many: items");
  n = (size_t)luaL_len(L, 2);
  lua_createtable(L, (int)n, 0);
  results = lua_gettop(L);
  if (n == 0) return 1;
  items = bson_malloc0(sizeof *items * n);
  for (i = 0; i < n; i++) {
    ms_err_t e;
    int rc = read_item(L, s, 2, (lua_Integer)i + 1, &items[i], &e);
    if (rc == 0) continue;
    items[i].state = ITEM_DONE;
    if (rc == 1) result_from_stack(L, results, (int)i + 1, push_marked(L, s, &items[i].c));
    else result_error(L, results, (int)i + 1, &e);
    /* nothing of c is allocated before read_commit_ops, which destroys it
     * when it fails */
  }
  if (!reserve_batch_seqs(s, items, n, &be)) {
    for (i = 0; i < n; i++) {
      if (items[i].state != ITEM_PENDING) continue;
      result_bson_error(L, s, results, (int)i + 1, &be, items[i].c.doing);
      items[i].state = ITEM_DONE;
      commit_in_destroy(&items[i].c);
    }
  } else {
    write_batch(L, s, items, n, results);
  }
  bson_free(items);
  lua_settop(L, results);
  return 1;
}

static const luaL_Reg commit_methods[] = {
  {"_commit", l_commit},
  {"_commit_many", l_commit_many},
  {NULL, NULL}
};

void ms_open_commit(lua_State *L) { luaL_setfuncs(L, commit_methods, 0); }
