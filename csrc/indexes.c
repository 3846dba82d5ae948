/*
 * indexes.c - a collection's indexes and its drop: create_index (the
 * createIndexes command: libmongoc 1.23 has no index model), list_indexes,
 * drop_index, drop. collection.c adds these to the Collection's methods.
 */
#include "document.h"
#include "codec.h"

#include <stdio.h>
#include <string.h>

#include <mongoc/mongoc.h>

/* c:create_index(keys, { unique, name, partial_filter, sparse,
 * expire_after, session }) -> the index's name. libmongoc 1.23 has no index
 * model: this is the createIndexes command. */
static int l_create_index(lua_State *L) {
  bson_t keys = BSON_INITIALIZER, tmp = BSON_INITIALIZER, cmd = BSON_INITIALIZER, opts = BSON_INITIALIZER, idxs,
         idx, reply;
  bson_error_t be;
  ms_err_t e;
  char *name = NULL;
  int rc, ok, n, unique = 0, sparse = 0;
  MS_CALL_BEGIN(L, k, "create_index", 3);
  rc = ms_ordered_to_bson(L, 2, &keys, "keys", MS_ORDER_STRICT, &e);
  if (rc == 0 && bson_count_keys(&keys) == 0) {
    ms_err_set(&e, "invalid", "keys: an index needs at least one key");
    rc = -1;
  }
  if (rc == 0 && (ms_call_bool_opt(L, &k, "unique", &unique) || ms_call_bool_opt(L, &k, "sparse", &sparse))) {
    ms_err_set(&e, "invalid", "opts.unique and opts.sparse must be booleans");
    rc = -1;
  }
  if (rc == 0 && ms_call_opt(L, &k, "name") != LUA_TNIL) {
    size_t nl;
    const char *s = lua_tolstring(L, -1, &nl);
    if (!s || ms_text_error(s, nl)) {
      ms_err_set(&e, "invalid", "opts.name must be a non-empty UTF-8 string without NUL");
      rc = -1;
    } else {
      name = bson_strdup(s);
    }
  }
  if (rc == 0) lua_pop(L, 1);
  if (rc == 0 && ms_call_opt(L, &k, "partial_filter") != LUA_TNIL) {
    bson_t pf = BSON_INITIALIZER;
    rc = ms_doc_arg(L, -1, &pf, "opts.partial_filter", 0, &k.found, &e);
    if (rc == 0) bson_append_document(&tmp, "partialFilterExpression", -1, &pf);
    bson_destroy(&pf);
  }
  if (rc == 0) lua_pop(L, 1);
  if (rc == 0) rc = ms_call_int_opt(L, &k, "expire_after", &tmp, "expireAfterSeconds", &e);
  if (rc == 0) rc = ms_call_session(L, &k, &opts, &e);
  if (rc) {
    bson_destroy(&keys);
    bson_destroy(&tmp);
    bson_destroy(&cmd);
    bson_destroy(&opts);
    bson_free(name);
    return ms_call_fail(L, &k, &e);
  }
  if (!name) name = mongoc_collection_keys_to_index_string(&keys);
  bson_append_utf8(&cmd, "createIndexes", -1, k.c->name, -1);
  bson_append_array_begin(&cmd, "indexes", -1, &idxs);
  bson_append_document_begin(&idxs, "0", 1, &idx);
  bson_append_document(&idx, "key", 3, &keys);
  bson_append_utf8(&idx, "name", 4, name ? name : "", -1);
  if (unique) bson_append_bool(&idx, "unique", 6, true);
  if (sparse) bson_append_bool(&idx, "sparse", 6, true);
  bson_concat(&idx, &tmp);
  bson_append_document_end(&idxs, &idx);
  bson_append_array_end(&cmd, &idxs);
  ok = mongoc_collection_write_command_with_opts(k.c->coll, &cmd, &opts, &reply, &be);
  if (!ok) n = ms_call_fail_bson(L, &k, &be, &reply);
  else {
    lua_pushstring(L, name ? name : "");
    n = 1;
  }
  bson_destroy(&reply);
  bson_destroy(&keys);
  bson_destroy(&tmp);
  bson_destroy(&cmd);
  bson_destroy(&opts);
  bson_free(name);
  return n;
}

/* The start of a method whose one option is the session: opts initialised
 * with it, 0; or the error pushed (its count returned), opts left empty. */
static int session_only(lua_State *L, const ms_call_t *k, bson_t *opts) {
  ms_err_t e;
  bson_init(opts);
  if (ms_call_session(L, k, opts, &e) == 0) return 0;
  bson_destroy(opts);
  return ms_call_fail(L, k, &e);
}

/* The end of a call that returns true: opts destroyed, then true or the
 * call's failure. */
static int push_done(lua_State *L, const ms_call_t *k, bson_t *opts, int ok, const bson_error_t *be) {
  bson_destroy(opts);
  if (!ok) return ms_call_fail_bson(L, k, be, NULL);
  lua_pushboolean(L, 1);
  return 1;
}

/* c:list_indexes({ session }) -> a list of index entries ({ key, name, ... }) */
static int l_list_indexes(lua_State *L) {
  bson_t opts;
  mongoc_cursor_t *cur;
  int n;
  MS_CALL_BEGIN(L, k, "list_indexes", 2);
  if ((n = session_only(L, &k, &opts))) return n;
  cur = mongoc_collection_find_indexes_with_opts(k.c->coll, &opts);
  bson_destroy(&opts);
  return ms_document_push_list(L, k.db, cur, ms_call_doing(&k));
}

/* c:drop_index(name, { session }) -> true */
static int l_drop_index(lua_State *L) {
  bson_t opts;
  bson_error_t be;
  ms_err_t e;
  size_t nl = 0;
  const char *name;
  int n, ok;
  MS_CALL_BEGIN(L, k, "drop_index", 3);
  name = lua_type(L, 2) == LUA_TSTRING ? lua_tolstring(L, 2, &nl) : NULL;
  if (!name || ms_text_error(name, nl)) {
    ms_err_set(&e, "invalid", "name must be a non-empty UTF-8 string without NUL");
    return ms_call_fail(L, &k, &e);
  }
  if ((n = session_only(L, &k, &opts))) return n;
  ok = mongoc_collection_drop_index_with_opts(k.c->coll, name, &opts, &be);
  return push_done(L, &k, &opts, ok, &be);
}

/* c:drop({ session }) -> true; a collection that does not exist is dropped
 * already. */
static int l_drop(lua_State *L) {
  bson_t opts;
  bson_error_t be;
  int n, ok;
  MS_CALL_BEGIN(L, k, "drop", 2);
  if ((n = session_only(L, &k, &opts))) return n;
  ok = mongoc_collection_drop_with_opts(k.c->coll, &opts, &be) ||
       (be.domain == MONGOC_ERROR_SERVER && be.code == 26) || strstr(be.message, "ns not found");
  return push_done(L, &k, &opts, ok, &be);
}

void ms_collection_add_indexes(lua_State *L) {
  static const luaL_Reg methods[] = {
    {"create_index", l_create_index},
    {"list_indexes", l_list_indexes},
    {"drop_index", l_drop_index},
    {"drop", l_drop},
    {NULL, NULL}
  };
  luaL_setfuncs(L, methods, 0);
}
