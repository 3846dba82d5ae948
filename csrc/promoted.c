/*
 * promoted.c - the fields a commit copies out of data and timers so the
 * server can filter on them (status, parent_id, next_fire_at), on documents
 * that a writer which does not keep them (harel's own store) committed:
 * finding those documents by index, and bringing their fields up to date.
 */
#include "store.h"

#include <math.h>


/* store:_foreign(limit) -> { { id, version, data|nil, next_fire_at }, ... }:
 * up to limit documents harel's store committed last, with what the
 * promoted fields are derived from (next_fire_at already derived). harel's
 * store names its collections <prefix>_executions, with a prefix it cannot
 * leave empty, so a store without a prefix has none to look for and sends
 * nothing. */
static int l_foreign(lua_State *L) {
  STORE_OR_CLOSED(L, s, "promote");
  lua_Integer limit = (lua_Integer)ms_arg_integer(L, 2, "promote: limit"), n = 0;
  bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, proj;
  mongoc_cursor_t *cur;
  const bson_t *doc;
  bson_error_t be;
  if (!s->harel_named) {
    lua_newtable(L);
    return 1;
  }
  ms_foreign_index_filter(&filter);
  bson_append_document_begin(&opts, "projection", 10, &proj);
  bson_append_int32(&proj, "version", 7, 1);
  bson_append_int32(&proj, "data", 4, 1);
  bson_append_int32(&proj, "timers", 6, 1);
  bson_append_document_end(&opts, &proj);
  if (limit > 0) bson_append_int64(&opts, "limit", 5, (int64_t)limit);
  cur = mongoc_collection_find_with_opts(s->exes, &filter, &opts, NULL);
  bson_destroy(&filter);
  bson_destroy(&opts);
  lua_newtable(L);
  while (mongoc_cursor_next(cur, &doc)) {
    bson_iter_t it;
    uint32_t len;
    const char *id;
    if (!bson_iter_init_find(&it, doc, "_id") || !BSON_ITER_HOLDS_UTF8(&it)) continue;
    id = bson_iter_utf8(&it, &len);
    lua_createtable(L, 0, 4);
    lua_pushlstring(L, id, len);
    lua_setfield(L, -2, "id");
    if (bson_iter_init_find(&it, doc, "version") && BSON_ITER_HOLDS_INT32(&it)) {
      lua_pushinteger(L, (lua_Integer)bson_iter_int32(&it));
      lua_setfield(L, -2, "version");
    }
    ms_push_data(L, doc);
    lua_setfield(L, -2, "data");
    lua_pushnumber(L, ms_earliest_timer(doc));
    lua_setfield(L, -2, "next_fire_at");
    lua_rawseti(L, -2, ++n);
  }
  if (mongoc_cursor_error(cur, &be)) {
    mongoc_cursor_destroy(cur);
    return ms_store_push_bson_err(L, s, &be, "promote");
  }
  mongoc_cursor_destroy(cur);
  return 1;
}

/* The string field `name` of the table on top of the stack as a BSON string,
 * or null when it is not a string. */
static void append_opt_string(lua_State *L, bson_t *d, const char *name) {
  size_t len;
  const char *v;
  lua_getfield(L, -1, name);
  v = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &len) : NULL;
  if (v) bson_append_utf8(d, name, -1, v, (int)len);
  else bson_append_null(d, name, -1);
  lua_pop(L, 1);
}

/* store:_promote({ { id, version, status|nil, parent_id|nil, next_fire_at }, ... })
 * -> documents updated. One unordered bulk: each update sets the promoted
 * fields only while the document is still at the version they were derived
 * from, and turns its version into an int64 (an $inc of 0: the same number,
 * so no version check anywhere is disturbed), which takes it out of the
 * partial index until harel's store commits to it again. */
static int l_promote(lua_State *L) {
  STORE_OR_CLOSED(L, s, "promote");
  lua_Integer i, m;
  mongoc_bulk_operation_t *bulk;
  bson_t opts = BSON_INITIALIZER, reply;
  bson_error_t be;
  bson_iter_t it;
  int ok = 1, queued = 0;
  luaL_checktype(L, 2, LUA_TTABLE);
  m = (lua_Integer)luaL_len(L, 2);
  if (m == 0) {
    lua_pushinteger(L, 0);
    return 1;
  }
  bson_append_bool(&opts, "ordered", 7, false);
  bulk = mongoc_collection_create_bulk_operation_with_opts(s->exes, &opts);
  bson_destroy(&opts);
  for (i = 1; i <= m && ok; i++) {
    bson_t filter = BSON_INITIALIZER, update = BSON_INITIALIZER, set, inc;
    size_t idlen;
    const char *id;
    double at;
    lua_rawgeti(L, 2, i);
    lua_getfield(L, -1, "id");
    id = lua_tolstring(L, -1, &idlen);
    lua_pop(L, 1);
    lua_getfield(L, -1, "version");
    if (!id || !lua_isinteger(L, -1)) {
      lua_pop(L, 2);
      continue;
    }
    bson_append_utf8(&filter, "_id", 3, id, (int)idlen);
    bson_append_int64(&filter, "version", 7, (int64_t)lua_tointeger(L, -1));
    lua_pop(L, 1);
    lua_getfield(L, -1, "next_fire_at");
    at = lua_isnumber(L, -1) ? lua_tonumber(L, -1) : MS_NO_TIMER;
    lua_pop(L, 1);
    if (!isfinite(at)) at = MS_NO_TIMER;
    bson_append_document_begin(&update, "$set", 4, &set);
    append_opt_string(L, &set, "status");
    append_opt_string(L, &set, "parent_id");
    bson_append_double(&set, "next_fire_at", 12, at);
    bson_append_document_end(&update, &set);
    bson_append_document_begin(&update, "$inc", 4, &inc);
    bson_append_int64(&inc, "version", 7, 0);
    bson_append_document_end(&update, &inc);
    lua_pop(L, 1);
    ok = mongoc_bulk_operation_update_one_with_opts(bulk, &filter, &update, NULL, &be);
    queued++;
    bson_destroy(&filter);
    bson_destroy(&update);
  }
  if (ok && queued) ok = mongoc_bulk_operation_execute(bulk, &reply, &be) != 0;
  else bson_init(&reply);
  mongoc_bulk_operation_destroy(bulk);
  if (!ok) {
    bson_destroy(&reply);
    return ms_store_push_bson_err(L, s, &be, "promote");
  }
  lua_pushinteger(L, bson_iter_init_find(&it, &reply, "nMatched") && BSON_ITER_HOLDS_NUMBER(&it)
                       ? (lua_Integer)bson_iter_as_int64(&it) : 0);
  bson_destroy(&reply);
  return 1;
}

static const luaL_Reg promoted_methods[] = {
  {"_foreign", l_foreign},
  {"_promote", l_promote},
  {NULL, NULL}
};

void ms_open_promoted(lua_State *L) { luaL_setfuncs(L, promoted_methods, 0); }
