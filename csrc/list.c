/*
 * list.c - the listing's raw material: a page of executions by _id with the
 * filters the server applies (definition, statuses, roots only), and the
 * database's secret that signs listing cursors (lua/mongostore/store.lua
 * builds the cursors and checks them).
 */
#include "store.h"

#include <string.h>

/* statuses (a list of strings, at idx) as one $in with null: a document a
 * writer without the promoted fields left (harel's) has none, so it matches
 * and is checked by the caller against its data. */
static void append_statuses(lua_State *L, int idx, bson_t *filter) {
  bson_t in, arr;
  lua_Integer j, m = (lua_Integer)luaL_len(L, idx);
  char ik[24];
  const char *ikey;
  size_t iklen;
  bson_append_document_begin(filter, "status", 6, &in);
  bson_append_array_begin(&in, "$in", 3, &arr);
  for (j = 1; j <= m; j++) {
    size_t sl;
    const char *st;
    iklen = bson_uint32_to_string((uint32_t)(j - 1), &ikey, ik, sizeof ik);
    lua_rawgeti(L, idx, j);
    st = lua_tolstring(L, -1, &sl);
    if (st) bson_append_utf8(&arr, ikey, (int)iklen, st, (int)sl);
    lua_pop(L, 1);
  }
  iklen = bson_uint32_to_string((uint32_t)m, &ikey, ik, sizeof ik);
  bson_append_null(&arr, ikey, (int)iklen);
  bson_append_array_end(&in, &arr);
  bson_append_document_end(filter, &in);
}

/* The page's filter from _scan's arguments: definition_id (2), the cursor
 * position after which the page starts (3), statuses (5) and roots_only (6,
 * parent_id null or absent), all on fields the server indexes. */
static int scan_filter(lua_State *L, bson_t *filter, ms_err_t *e) {
  if (!lua_isnil(L, 2)) {
    size_t len;
    const char *d = ms_check_id(L, 2, "list_executions: definition_id", &len, e);
    if (!d) return -1;
    bson_append_utf8(filter, "definition_id", 13, d, (int)len);
  }
  if (!lua_isnil(L, 3)) {
    size_t len;
    bson_t gt;
    const char *a = ms_check_id(L, 3, "list_executions: cursor position", &len, e);
    if (!a) return -1;
    bson_append_document_begin(filter, "_id", 3, &gt);
    bson_append_utf8(&gt, "$gt", 3, a, (int)len);
    bson_append_document_end(filter, &gt);
  }
  if (lua_istable(L, 5)) append_statuses(L, 5, filter);
  if (lua_toboolean(L, 6)) bson_append_null(filter, "parent_id", 9);
  return 0;
}

/* n documents at most by _id, projecting version and data. */
static mongoc_cursor_t *scan_find(ms_store_t *s, const bson_t *filter, lua_Integer n) {
  bson_t opts = BSON_INITIALIZER, proj, sort;
  mongoc_cursor_t *cur;
  bson_append_document_begin(&opts, "projection", 10, &proj);
  bson_append_int32(&proj, "version", 7, 1);
  bson_append_int32(&proj, "data", 4, 1);
  bson_append_document_end(&opts, &proj);
  bson_append_document_begin(&opts, "sort", 4, &sort);
  bson_append_int32(&sort, "_id", 3, 1);
  bson_append_document_end(&opts, &sort);
  bson_append_int64(&opts, "limit", 5, (int64_t)n);
  cur = mongoc_collection_find_with_opts(s->exes, filter, &opts, NULL);
  bson_destroy(&opts);
  return cur;
}

/* One found document as { id, version, data }. */
static void push_row(lua_State *L, const bson_t *doc) {
  bson_iter_t it;
  lua_createtable(L, 0, 3);
  if (bson_iter_init_find(&it, doc, "_id") && BSON_ITER_HOLDS_UTF8(&it)) {
    uint32_t len;
    const char *v = bson_iter_utf8(&it, &len);
    lua_pushlstring(L, v, len);
    lua_setfield(L, -2, "id");
  }
  if (bson_iter_init_find(&it, doc, "version") && BSON_ITER_HOLDS_NUMBER(&it)) {
    lua_pushinteger(L, (lua_Integer)bson_iter_as_int64(&it));
    lua_setfield(L, -2, "version");
  }
  ms_push_data(L, doc);
  lua_setfield(L, -2, "data");
}

/* store:_scan(definition_id|nil, after_id|nil, n, statuses|nil, roots_only)
 * -> { {id, version, data}, ... }: n documents at most, by _id, after
 * after_id: the listing's raw material. */
static int l_scan(lua_State *L) {
  STORE_OR_CLOSED(L, s, "list_executions");
  bson_t filter = BSON_INITIALIZER;
  mongoc_cursor_t *cur;
  const bson_t *doc;
  bson_error_t be;
  lua_Integer n = (lua_Integer)ms_arg_integer(L, 4, "list_executions: limit"), i = 0;
  ms_err_t e;
  if (scan_filter(L, &filter, &e)) {
    bson_destroy(&filter);
    return ms_push_error(L, &e);
  }
  cur = scan_find(s, &filter, n);
  bson_destroy(&filter);
  lua_newtable(L);
  while (mongoc_cursor_next(cur, &doc)) {
    push_row(L, doc);
    lua_rawseti(L, -2, ++i);
  }
  if (mongoc_cursor_error(cur, &be)) {
    mongoc_cursor_destroy(cur);
    return ms_store_push_bson_err(L, s, &be, "list_executions");
  }
  mongoc_cursor_destroy(cur);
  return 1;
}

/* The secret that signs listing cursors: one per database, kept in the
 * counters collection, so a cursor one process or thread issued is honoured
 * by every other store on the same collections, and by nothing else. */
#define MS_CURSOR_KEY_ID "mongostore:cursor_key"

static int read_cursor_key(ms_store_t *s, bson_error_t *be) {
  bson_t filter = BSON_INITIALIZER;
  mongoc_cursor_t *cur;
  const bson_t *doc;
  bson_iter_t it;
  int found = 0;
  bson_append_utf8(&filter, "_id", 3, MS_CURSOR_KEY_ID, -1);
  cur = mongoc_collection_find_with_opts(s->counters, &filter, NULL, NULL);
  bson_destroy(&filter);
  if (mongoc_cursor_next(cur, &doc) && bson_iter_init_find(&it, doc, "key") && BSON_ITER_HOLDS_BINARY(&it)) {
    bson_subtype_t st;
    uint32_t len;
    const uint8_t *bin;
    bson_iter_binary(&it, &st, &len, &bin);
    if (len == sizeof s->cursor_key) {
      memcpy(s->cursor_key, bin, len);
      found = 1;
    }
  }
  if (!found && mongoc_cursor_error(cur, be)) found = -1;
  mongoc_cursor_destroy(cur);
  return found;
}

/* store:_cursor_key(create) -> the 32-byte secret | nil (none yet and not
 * create). Only issuing a cursor makes it: checking one never writes. */
static int l_cursor_key(lua_State *L) {
  STORE_OR_CLOSED(L, s, "list_executions");
  bson_error_t be;
  if (!s->has_cursor_key) {
    int got = read_cursor_key(s, &be);
    if (got == 0 && !lua_toboolean(L, 2)) {
      lua_pushnil(L);
      return 1;
    }
    if (got == 0) {
      uint8_t key[sizeof s->cursor_key];
      bson_t doc = BSON_INITIALIZER;
      int ok;
      if (ms_random(key, sizeof key)) return luaL_error(L, "list_executions: getrandom failed");
      bson_append_utf8(&doc, "_id", 3, MS_CURSOR_KEY_ID, -1);
      bson_append_binary(&doc, "key", 3, BSON_SUBTYPE_BINARY, key, sizeof key);
      ok = mongoc_collection_insert_one(s->counters, &doc, NULL, NULL, &be);
      bson_destroy(&doc);
      if (ok) {
        memcpy(s->cursor_key, key, sizeof key);
        got = 1;
      } else if (be.domain == MONGOC_ERROR_SERVER && be.code == MONGOC_ERROR_DUPLICATE_KEY) {
        got = read_cursor_key(s, &be);   /* another store made it first: use theirs */
      } else {
        got = -1;
      }
    }
    if (got < 0) return ms_store_push_bson_err(L, s, &be, "list_executions: cursor key");
    if (got == 0) {
      ms_err_t e;
      ms_err_set(&e, "server", "list_executions: the cursor key in %s is unreadable",
                 mongoc_collection_get_name(s->counters));
      return ms_push_error(L, &e);
    }
    s->has_cursor_key = 1;
  }
  lua_pushlstring(L, (const char *)s->cursor_key, sizeof s->cursor_key);
  return 1;
}

static const luaL_Reg list_methods[] = {
  {"_scan", l_scan},
  {"_cursor_key", l_cursor_key},
  {NULL, NULL}
};

void ms_open_list(lua_State *L) { luaL_setfuncs(L, list_methods, 0); }
