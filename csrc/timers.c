/*
 * timers.c - an execution's timers as keys of its `timers` sub-document:
 * the key encoding, the due-timer sweep over next_fire_at (which it keeps
 * honest), and the delete of one fired timer.
 */
#include "store.h"

#include <math.h>
#include <string.h>

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

static void push_decoded_path(lua_State *L, const char *key, size_t len) {
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

/* Raises a document's next_fire_at to its true earliest timer, only while
 * the document is still at the version the sweep read. */
static void raise_next_fire(ms_store_t *s, const char *id, uint32_t idlen, int64_t version, double at) {
  bson_t filter = BSON_INITIALIZER, update = BSON_INITIALIZER, set;
  bson_error_t be;
  bson_append_utf8(&filter, "_id", 3, id, (int)idlen);
  bson_append_int64(&filter, "version", 7, version);
  bson_append_document_begin(&update, "$set", 4, &set);
  bson_append_double(&set, "next_fire_at", 12, at);
  bson_append_document_end(&update, &set);
  mongoc_collection_update_one(s->exes, &filter, &update, NULL, NULL, &be); /* a miss is fine */
  bson_destroy(&filter);
  bson_destroy(&update);
}

/* Appends to the list on top of the stack the due timers of the documents
 * `filter` finds (at most limit documents when limit > 0), raising the mark
 * of a document that turns out to have nothing due. Returns the documents
 * read, or -1 with be set. */
static lua_Integer sweep_find(lua_State *L, ms_store_t *s, const bson_t *filter, lua_Integer limit, double now,
                              lua_Integer *n, bson_error_t *be) {
  bson_t opts = BSON_INITIALIZER, proj;
  mongoc_cursor_t *cur;
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
    double earliest = MS_NO_TIMER, marked = -1;
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
    if (bson_iter_init_find(&it, doc, "timers") && BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &t)) {
      while (bson_iter_next(&t)) {
        double at;
        if (!BSON_ITER_HOLDS_NUMBER(&t)) continue;
        at = bson_iter_as_double(&t);
        if (at < earliest) earliest = at;
        if (!(at <= now)) continue;
        due++;
        lua_createtable(L, 0, 3);
        lua_pushlstring(L, id, idlen);
        lua_setfield(L, -2, "execution_id");
        push_decoded_path(L, bson_iter_key(&t), bson_iter_key_len(&t));
        lua_setfield(L, -2, "path");
        lua_pushnumber(L, at);
        lua_setfield(L, -2, "fire_at");
        lua_rawseti(L, -2, ++*n);
      }
    }
    /* nothing due here: the mark was left low by a cancel or a fired timer */
    if (!due && version > 0 && (!has_mark || marked < earliest)) raise_next_fire(s, id, idlen, version, earliest);
  }
  if (mongoc_cursor_error(cur, be)) read = -1;
  mongoc_cursor_destroy(cur);
  return read;
}

/* store:_due_timers(now, limit) -> { {execution_id, path, fire_at}, ... } unsorted
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
  return 1;
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
  bson_t filter = BSON_INITIALIZER, update = BSON_INITIALIZER, unset;
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
  bson_append_utf8(&filter, "_id", 3, id, (int)idlen);
  bson_append_double(&filter, key->str, (int)key->len, at);
  bson_append_document_begin(&update, "$unset", 6, &unset);
  bson_append_utf8(&unset, key->str, (int)key->len, "", 0);
  bson_append_document_end(&update, &unset);
  ok = mongoc_collection_update_one(s->exes, &filter, &update, NULL, NULL, &be);
  bson_string_free(key, true);
  bson_destroy(&filter);
  bson_destroy(&update);
  if (!ok) return ms_store_push_bson_err(L, s, &be, "delete_timer");
  lua_pushboolean(L, 1);
  return 1;
}

static const luaL_Reg timers_methods[] = {
  {"_due_timers", l_due_timers},
  {"delete_timer", l_delete_timer},
  {NULL, NULL}
};

void ms_open_timers(lua_State *L) { luaL_setfuncs(L, timers_methods, 0); }
