/*
 * timers.c - an execution's timers as keys of its `timers` sub-document:
 * the key encoding, the due-timer sweep over next_fire_at (which it keeps
 * honest), and the delete of fired timers, one or a sweep's at once.
 */
#include "store.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The earliest number in doc.timers, or MS_NO_TIMER. */
double ms_earliest_timer(const bson_t *doc) {
  bson_iter_t it, t;
  double earliest = MS_NO_TIMER;
  if (bson_iter_init_find(&it, doc, "timers") && BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &t)) {
    while (bson_iter_next(&t)) {
      double at;
      if (!BSON_ITER_HOLDS_NUMBER(&t)) continue;
      at = bson_iter_as_double(&t);
      if (at < earliest) earliest = at;
    }
  }
  return earliest;
}

/* U+FF0E FULLWIDTH FULL STOP: stands for '.' in timer keys (seed: _enc). */
#define MS_DOT_ENC "\xef\xbc\x8e"

/* Timer paths become keys of the timers sub-document: '.' is encoded as
 * U+FF0E, and what cannot be a key at all is refused before any I/O. */
int ms_encode_path(const char *path, size_t len, bson_string_t **out, ms_err_t *e) {
  size_t i;
  if (len == 0) {
    ms_err_set(e, "invalid", "timer path is empty");
    return -1;
  }
  if (path[0] == '$') {
    ms_err_set(e, "invalid", "timer path '%s' starts with '$'", path);
    return -1;
  }
  if (ms_text_error(path, len)) {
    ms_err_set(e, "invalid", "timer path %s", ms_text_error(path, len));
    return -1;
  }
  if (strstr(path, MS_DOT_ENC)) {
    ms_err_set(e, "invalid", "timer path '%s' contains U+FF0E, which stands for '.' in stored keys", path);
    return -1;
  }
  *out = bson_string_new("timers.");
  for (i = 0; i < len; i++) {
    if (path[i] == '.') bson_string_append(*out, MS_DOT_ENC);
    else bson_string_append_c(*out, path[i]);
  }
  return 0;
}

void ms_push_decoded_path(lua_State *L, const char *key, size_t len) {
  luaL_Buffer b;
  size_t i = 0;
  luaL_buffinit(L, &b);
  while (i < len) {
    if (i + 3 <= len && memcmp(key + i, MS_DOT_ENC, 3) == 0) {
      luaL_addchar(&b, '.');
      i += 3;
    } else {
      luaL_addchar(&b, key[i]);
      i++;
    }
  }
  luaL_pushresult(&b);
}

void ms_push_timers(lua_State *L, const bson_t *doc) {
  bson_iter_t it, t;
  lua_newtable(L);
  if (!doc || !bson_iter_init_find(&it, doc, "timers") || !BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &t))
    return;
  while (bson_iter_next(&t)) {
    if (!BSON_ITER_HOLDS_NUMBER(&t)) continue;
    ms_push_decoded_path(L, bson_iter_key(&t), bson_iter_key_len(&t));
    lua_pushnumber(L, bson_iter_as_double(&t));
    lua_rawset(L, -3);
  }
}

/* Adds to *bulk (made on first use) the raise of a document's next_fire_at
 * to its true earliest timer, only while the document is still at the
 * version the sweep read. */
static void raise_next_fire(ms_store_t *s, mongoc_bulk_operation_t **bulk, const char *id, uint32_t idlen,
                            int64_t version, double at) {
  bson_t filter = BSON_INITIALIZER, update = BSON_INITIALIZER, set;
  bson_error_t be;
  if (!*bulk) {
    bson_t opts = BSON_INITIALIZER;
    bson_append_bool(&opts, "ordered", 7, false);
    *bulk = mongoc_collection_create_bulk_operation_with_opts(s->exes, &opts);
    bson_destroy(&opts);
  }
  bson_append_utf8(&filter, "_id", 3, id, (int)idlen);
  bson_append_int64(&filter, "version", 7, version);
  bson_append_document_begin(&update, "$set", 4, &set);
  bson_append_double(&set, "next_fire_at", 12, at);
  bson_append_document_end(&update, &set);
  mongoc_bulk_operation_update_one_with_opts(*bulk, &filter, &update, NULL, &be);
  bson_destroy(&filter);
  bson_destroy(&update);
}

/* Appends to the list on top of the stack the due timers of the documents
 * `filter` finds (at most limit documents when limit > 0), raising the mark
 * of each document that turns out to have nothing due (one bulk write for
 * them all, after the read). Returns the documents read, or -1 with be set. */
static lua_Integer sweep_find(lua_State *L, ms_store_t *s, const bson_t *filter, lua_Integer limit, double now,
                              lua_Integer *n, bson_error_t *be) {
  bson_t opts = BSON_INITIALIZER, proj;
  mongoc_cursor_t *cur;
  mongoc_bulk_operation_t *raises = NULL;
  const bson_t *doc;
  lua_Integer read = 0;
  bson_append_document_begin(&opts, "projection", 10, &proj);
  bson_append_int32(&proj, "timers", 6, 1);
  bson_append_int32(&proj, "version", 7, 1);
  bson_append_int32(&proj, "next_fire_at", 12, 1);
  bson_append_document_end(&opts, &proj);
  if (limit > 0) bson_append_int64(&opts, "limit", 5, (int64_t)limit);
  cur = mongoc_collection_find_with_opts(s->exes, filter, &opts, NULL);
  bson_destroy(&opts);
  while (mongoc_cursor_next(cur, &doc)) {
    bson_iter_t it, t;
    uint32_t idlen;
    const char *id;
    double earliest, marked = -1;
    int due = 0, has_mark = 0;
    int64_t version = 0;
    read++;
    if (!bson_iter_init_find(&it, doc, "_id") || !BSON_ITER_HOLDS_UTF8(&it)) continue;
    id = bson_iter_utf8(&it, &idlen);
    if (bson_iter_init_find(&it, doc, "version") && BSON_ITER_HOLDS_NUMBER(&it)) version = bson_iter_as_int64(&it);
    if (bson_iter_init_find(&it, doc, "next_fire_at") && BSON_ITER_HOLDS_NUMBER(&it)) {
      has_mark = 1;
      marked = bson_iter_as_double(&it);
    }
    earliest = ms_earliest_timer(doc);
    if (bson_iter_init_find(&it, doc, "timers") && BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &t)) {
      while (bson_iter_next(&t)) {
        double at;
        if (!BSON_ITER_HOLDS_NUMBER(&t)) continue;
        at = bson_iter_as_double(&t);
        if (!(at <= now)) continue;
        due++;
        lua_createtable(L, 0, 3);
        lua_pushlstring(L, id, idlen);
        lua_setfield(L, -2, "execution_id");
        ms_push_decoded_path(L, bson_iter_key(&t), bson_iter_key_len(&t));
        lua_setfield(L, -2, "path");
        lua_pushnumber(L, at);
        lua_setfield(L, -2, "fire_at");
        lua_rawseti(L, -2, ++*n);
      }
    }
    /* nothing due here: the mark was left low by a cancel or a fired timer */
    if (!due && version > 0 && (!has_mark || marked < earliest))
      raise_next_fire(s, &raises, id, idlen, version, earliest);
  }
  if (mongoc_cursor_error(cur, be)) read = -1;
  mongoc_cursor_destroy(cur);
  if (raises) {
    bson_t reply;
    bson_error_t rbe;
    mongoc_bulk_operation_execute(raises, &reply, &rbe); /* a miss, or a failure, leaves a mark low: fine */
    bson_destroy(&reply);
    mongoc_bulk_operation_destroy(raises);
  }
  return read;
}

/* store:_due_timers(now, limit) -> { {execution_id, path, fire_at}, ... } unsorted, documents read
 * One find, a plain index lookup on next_fire_at. Documents harel's store
 * committed last (without next_fire_at, or with a stale one) are brought
 * under it by the caller first (promoted.c, store.lua's due_timers). */
static int l_due_timers(lua_State *L) {
  STORE_OR_CLOSED(L, s, "due_timers");
  double now = ms_arg_number(L, 2, "due_timers: now");
  lua_Integer limit = lua_isnoneornil(L, 3) ? 0 : (lua_Integer)ms_arg_integer(L, 3, "due_timers: limit");
  lua_Integer n = 0, read;
  bson_t due = BSON_INITIALIZER, cond;
  bson_error_t be;
  if (!isfinite(now)) {
    ms_err_t e;
    ms_err_set(&e, "invalid", "due_timers: now must be a finite number (epoch seconds)");
    return ms_push_error(L, &e);
  }
  bson_append_document_begin(&due, "next_fire_at", 12, &cond);
  bson_append_double(&cond, "$lte", 4, now);
  bson_append_document_end(&due, &cond);
  lua_newtable(L);
  read = sweep_find(L, s, &due, limit, now, &n, &be);
  bson_destroy(&due);
  if (read < 0) return ms_store_push_bson_err(L, s, &be, "due_timers");
  lua_pushinteger(L, read);
  return 2;
}

/* The update that unsets a timer key, and its filter: the execution, only
 * while the key still holds exactly this fire_at. */
static void unset_while_armed(bson_t *filter, bson_t *update, const char *id, size_t idlen, const bson_string_t *key,
                              double at) {
  bson_t unset;
  bson_append_utf8(filter, "_id", 3, id, (int)idlen);
  bson_append_double(filter, key->str, (int)key->len, at);
  bson_append_document_begin(update, "$unset", 6, &unset);
  bson_append_utf8(&unset, key->str, (int)key->len, "", 0);
  bson_append_document_end(update, &unset);
}

/* store:delete_timer(id, path, fire_at): unsets the timer only while it still
 * holds exactly this fire_at, so a stale sweep cannot remove a re-armed timer. */
static int l_delete_timer(lua_State *L) {
  STORE_OR_CLOSED(L, s, "delete_timer");
  size_t idlen, plen;
  ms_err_t e;
  bson_error_t be;
  const char *id = ms_check_id(L, 2, "delete_timer: execution_id", &idlen, &e), *path;
  bson_string_t *key = NULL;
  bson_t filter = BSON_INITIALIZER, update = BSON_INITIALIZER;
  double at;
  int ok;
  path = ms_arg_string(L, 3, "delete_timer: path", &plen);
  at = ms_arg_number(L, 4, "delete_timer: fire_at");
  if (!id) return ms_push_error(L, &e);
  if (!isfinite(at)) {
    ms_err_set(&e, "invalid", "delete_timer: fire_at must be a finite number (epoch seconds)");
    return ms_push_error(L, &e);
  }
  if (ms_encode_path(path, plen, &key, &e)) {
    ms_err_prefix(&e, "delete_timer");
    return ms_push_error(L, &e);
  }
  unset_while_armed(&filter, &update, id, idlen, key, at);
  ok = mongoc_collection_update_one(s->exes, &filter, &update, NULL, NULL, &be);
  bson_string_free(key, true);
  bson_destroy(&filter);
  bson_destroy(&update);
  if (!ok) return ms_store_push_bson_err(L, s, &be, "delete_timer");
  lua_pushboolean(L, 1);
  return 1;
}

/* timers[i] (on top of the stack, popped) as its execution id, stored key
 * and fire_at; 0, or -1 with e set for a value that cannot be one (a wrong
 * Lua type raises, as delete_timer's arguments do). The id stays alive in
 * the item, which the list holds. */
static int read_due(lua_State *L, lua_Integer i, const char **id, size_t *idlen, bson_string_t **key, double *at,
                    ms_err_t *e) {
  char name[64];
  const char *path;
  size_t plen;
  if (!lua_istable(L, -1))
    return luaL_error(L, "delete_timers: timers[%d] must be a table, got %s", (int)i, luaL_typename(L, -1));
  snprintf(name, sizeof name, "delete_timers: timers[%d].execution_id", (int)i);
  lua_getfield(L, -1, "execution_id");
  *id = ms_check_id(L, -1, name, idlen, e);
  snprintf(name, sizeof name, "delete_timers: timers[%d].path", (int)i);
  lua_getfield(L, -2, "path");
  path = ms_arg_string(L, -1, name, &plen);
  snprintf(name, sizeof name, "delete_timers: timers[%d].fire_at", (int)i);
  lua_getfield(L, -3, "fire_at");
  *at = ms_arg_number(L, -1, name);
  *key = NULL;
  if (!*id) {
    lua_pop(L, 4);
    return -1;
  }
  if (!isfinite(*at)) {
    ms_err_set(e, "invalid", "%s must be a finite number (epoch seconds)", name);
    lua_pop(L, 4);
    return -1;
  }
  if (ms_encode_path(path, plen, key, e)) {
    snprintf(name, sizeof name, "delete_timers: timers[%d]", (int)i);
    ms_err_prefix(e, name);
    lua_pop(L, 4);
    return -1;
  }
  lua_pop(L, 4);
  return 0;
}

/* store:delete_timers({ { execution_id, path, fire_at }, ... }): delete_timer
 * for a sweep's timers in one unordered bulk write, each update guarded on
 * its own fire_at. Every item is checked before anything is sent. */
static int l_delete_timers(lua_State *L) {
  STORE_OR_CLOSED(L, s, "delete_timers");
  bson_t opts = BSON_INITIALIZER, reply;
  bson_error_t be;
  mongoc_bulk_operation_t *bulk = NULL;
  lua_Integer i, n;
  int pass, ok = 1;
  ms_arg_table(L, 2, "delete_timers: timers");
  n = (lua_Integer)luaL_len(L, 2);
  /* pass 0 checks every item, pass 1 adds each to the bulk write */
  for (pass = 0; pass < 2 && n > 0; pass++) {
    if (pass == 1) {
      bson_append_bool(&opts, "ordered", 7, false);
      bulk = mongoc_collection_create_bulk_operation_with_opts(s->exes, &opts);
    }
    for (i = 1; i <= n && ok; i++) {
      ms_err_t e;
      const char *id = NULL;
      size_t idlen = 0;
      bson_string_t *key = NULL;
      double at = 0;
      lua_rawgeti(L, 2, i);
      if (read_due(L, i, &id, &idlen, &key, &at, &e)) {
        bson_destroy(&opts);
        return ms_push_error(L, &e); /* pass 0 only: pass 1 reads the same items */
      }
      if (pass == 1) {
        bson_t filter = BSON_INITIALIZER, update = BSON_INITIALIZER;
        unset_while_armed(&filter, &update, id, idlen, key, at);
        ok = mongoc_bulk_operation_update_one_with_opts(bulk, &filter, &update, NULL, &be);
        bson_destroy(&filter);
        bson_destroy(&update);
      }
      bson_string_free(key, true);
    }
  }
  bson_destroy(&opts);
  if (!bulk) {
    lua_pushboolean(L, 1);
    return 1;
  }
  if (ok) {
    ok = (int)mongoc_bulk_operation_execute(bulk, &reply, &be);
    bson_destroy(&reply);
  }
  mongoc_bulk_operation_destroy(bulk);
  if (!ok) return ms_store_push_bson_err(L, s, &be, "delete_timers");
  lua_pushboolean(L, 1);
  return 1;
}

static const luaL_Reg timers_methods[] = {
  {"_due_timers", l_due_timers},
  {"delete_timer", l_delete_timer},
  {"delete_timers", l_delete_timers},
  {NULL, NULL}
};

void ms_open_timers(lua_State *L) { luaL_setfuncs(L, timers_methods, 0); }
