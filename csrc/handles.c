/*
 * handles.c - the document API's handles and how a failed operation reaches
 * Lua: a database checked open (its call's clock started), the closed
 * answer, and ms_document_push_error (the library's code, a duplicate key
 * named, a transient transaction failure noted on the open sessions, the
 * server's code and labels in the detail). database.c, collection.c,
 * cursor.c, bulk.c and indexes.c call it; it calls none of them.
 */
#include "document.h"

#include <string.h>

#include <mongoc/mongoc.h>

/* ---- handles and errors ---- */

ms_database_t *ms_database_check(lua_State *L, int idx) {
  ms_database_t *db = (ms_database_t *)luaL_checkudata(L, idx, MS_DATABASE_MT);
  if (!db->client) return NULL;
  db->op_started = ms_now();
  ms_failed_reset();
  return db;
}

int ms_document_closed(lua_State *L, const char *doing) {
  ms_err_t e;
  ms_err_set(&e, "closed", "%s: the database is closed", doing);
  return ms_push_error(L, &e);
}

void ms_database_push_ref(lua_State *L, int db_ref) { lua_rawgeti(L, LUA_REGISTRYINDEX, db_ref); }

/* The first write error of a reply (insert, update, delete, bulk), if any. */
static int first_write_error(const bson_t *reply, bson_iter_t *err) {
  bson_iter_t it;
  if (!reply || !bson_iter_init_find(&it, reply, "writeErrors") || !BSON_ITER_HOLDS_ARRAY(&it) ||
      !bson_iter_recurse(&it, err))
    return 0;
  return bson_iter_next(err) && BSON_ITER_HOLDS_DOCUMENT(err);
}

static int32_t int_field(const bson_iter_t *doc, const char *key, int32_t dflt) {
  bson_iter_t it;
  if (bson_iter_recurse(doc, &it) && bson_iter_find(&it, key) && BSON_ITER_HOLDS_NUMBER(&it))
    return (int32_t)bson_iter_as_int64(&it);
  return dflt;
}

/* A duplicate key error names the key: servers that leave "dup key" out of
 * the message (or write keyValue only) get it appended from keyValue. */
static void name_duplicate_key(ms_err_t *e, const bson_t *reply) {
  bson_iter_t err, kv;
  if (strstr(e->msg, "dup key") || !first_write_error(reply, &err) || !bson_iter_recurse(&err, &kv) ||
      !bson_iter_find(&kv, "keyValue") || !BSON_ITER_HOLDS_DOCUMENT(&kv))
    return;
  {
    uint32_t len;
    const uint8_t *data;
    bson_t key;
    char *json;
    bson_iter_document(&kv, &len, &data);
    if (!bson_init_static(&key, data, len)) return;
    json = bson_as_relaxed_extended_json(&key, NULL);
    if (json) {
      size_t ml = strlen(e->msg);
      snprintf(e->msg + ml, sizeof e->msg - ml, " (dup key: %s)", json);
      bson_free(json);
    }
  }
}

static void push_labels(lua_State *L, const bson_t *reply) {
  bson_iter_t it, child;
  lua_Integer n = 0;
  lua_newtable(L);
  if (reply && bson_iter_init_find(&it, reply, "errorLabels") && BSON_ITER_HOLDS_ARRAY(&it) &&
      bson_iter_recurse(&it, &child)) {
    while (bson_iter_next(&child)) {
      if (BSON_ITER_HOLDS_UTF8(&child)) {
        lua_pushstring(L, bson_iter_utf8(&child, NULL));
        lua_rawseti(L, -2, ++n);
      }
    }
  }
  ms_mark_array(L, -1);
}

int ms_document_push_error(lua_State *L, ms_database_t *db, const bson_error_t *be, const bson_t *reply,
                           const char *doing) {
  ms_err_t e;
  bson_iter_t werr;
  int64_t failed_us = ms_failed_attempt_us();
  double took_ms = failed_us >= 0 ? (double)failed_us / 1000.0 : (ms_now() - db->op_started) * 1000.0;
  uint32_t server_code = 0;
  int transient;
  int from_server = be->domain == MONGOC_ERROR_SERVER || be->domain == MONGOC_ERROR_WRITE_CONCERN;
  ms_err_from_bson_timed(&e, be, doing, took_ms, db->socket_timeout_ms);
  if (from_server) server_code = be->code;
  else if (first_write_error(reply, &werr)) server_code = (uint32_t)int_field(&werr, "code", 0);
  if (server_code == 11000 || server_code == 11001) {
    e.code = "duplicate";
    name_duplicate_key(&e, reply);
  }
  transient = reply && mongoc_error_has_label(reply, "TransientTransactionError");
  if (transient) {
    e.code = "transient";
    ms_session_note_transient(L, db);
  }
  ms_scrub(db->password, &e);
  ms_push_error(L, &e);
  if (!server_code && !transient) return 3;
  lua_createtable(L, 0, 2);
  if (server_code) {
    lua_pushinteger(L, (lua_Integer)server_code);
    lua_setfield(L, -2, "server_code");
  }
  push_labels(L, reply);
  lua_setfield(L, -2, "labels");
  return 4;
}
