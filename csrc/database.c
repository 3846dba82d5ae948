/*
 * database.c - the Database userdata (mongostore.database): opening one on
 * the process's client pool, collection, command, list_collections, info,
 * stats, session and close, and the module's document metatables (the
 * handles and how a failure reaches Lua are handles.c's).
 */
#include "document.h"

#include <stdio.h>
#include <string.h>

#include <mongoc/mongoc.h>

/* ---- mongostore.database(uri, opts) ---- */

/* The Lua half has checked the option keys and types; what is left are the
 * values. opts.wait first: the URI is parsed with its attempt bound, so the
 * pool is the one connect() makes with the same wait. */
static int read_wait(lua_State *L, int opts, double *wait, ms_err_t *e) {
  *wait = MS_CONNECT_WAIT;
  if (opts && lua_getfield(L, opts, "wait") != LUA_TNIL) {
    if (lua_type(L, -1) != LUA_TNUMBER || !(lua_tonumber(L, -1) >= 0) || lua_tonumber(L, -1) > 86400) {
      ms_err_set(e, "invalid", "database: opts.wait must be a number of seconds from 0 to 86400");
      return -1;
    }
    *wait = lua_tonumber(L, -1);
  }
  return 0;
}

/* opts.db, else the URI's own database; the name stays valid while the
 * URI and the options table do. */
static const char *read_name(lua_State *L, int opts, const mongoc_uri_t *uri, ms_err_t *e) {
  size_t n;
  const char *name;
  if (opts) lua_getfield(L, opts, "db");
  else lua_pushnil(L);
  if (lua_type(L, -1) == LUA_TSTRING) {
    name = lua_tolstring(L, -1, &n);
    if (strlen(name) == n && ms_valid_name(name, n, 1)) return name;
    ms_err_set(e, "invalid", "database: database name '%s' is not valid (letters, digits, _ and -)", name);
    return NULL;
  }
  if (!lua_isnil(L, -1)) {
    ms_err_set(e, "invalid", "database: opts.db must be a string");
    return NULL;
  }
  if ((name = mongoc_uri_get_database(uri)) != NULL && ms_valid_name(name, strlen(name), 1)) return name;
  ms_err_set(e, "invalid", "database: no valid database named (opts.db, or one in the URI)");
  return NULL;
}

static void database_release(lua_State *L, ms_database_t *db);

/* mongostore.database(uri, opts): as connect, pings until the server
 * answers or opts.wait seconds have passed. */
static int l_open(lua_State *L) {
  size_t urilen;
  const char *uristr = luaL_checklstring(L, 1, &urilen), *name;
  int opts = lua_istable(L, 2) ? 2 : 0;
  mongoc_uri_t *uri;
  bson_error_t be;
  ms_err_t e;
  ms_database_t *db;
  int32_t attempt_ms;
  double wait;

  if (read_wait(L, opts, &wait, &e)) return ms_push_error(L, &e);
  attempt_ms = ms_attempt_ms(wait);
  if (!(uri = ms_parse_uri(uristr, urilen, attempt_ms, "database", &e))) return ms_push_error(L, &e);
  if (!(name = read_name(L, opts, uri, &e))) {
    mongoc_uri_destroy(uri);
    return ms_push_error(L, &e);
  }
  db = (ms_database_t *)lua_newuserdatauv(L, sizeof *db, 1);
  memset(db, 0, sizeof *db);
  luaL_setmetatable(L, MS_DATABASE_MT);
  db->password = mongoc_uri_get_password(uri) ? bson_strdup(mongoc_uri_get_password(uri)) : NULL;
  db->name = bson_strdup(name);
  db->pool = ms_pool_for(uri, &be);
  db->socket_timeout_ms = mongoc_uri_get_option_as_int32(uri, MONGOC_URI_SOCKETTIMEOUTMS, MS_SOCKET_TIMEOUT_MS);
  mongoc_uri_destroy(uri);
  if (!db->pool) {
    ms_err_set(&e, "invalid", "database: %s", be.message);
    ms_scrub(db->password, &e);
    return ms_push_error(L, &e);
  }
  db->client = ms_pool_pop(db->pool);
  db->op_started = ms_now();
  ms_failed_reset();
  if (!ms_wait_for_server(db->client, wait, attempt_ms, &be)) {
    int n;
    ms_err_from_bson(&e, &be, "database");
    ms_scrub(db->password, &e);
    n = ms_push_error(L, &e);
    /* the client goes back to the pool now, not at garbage collection */
    database_release(L, db);
    return n;
  }
  db->max_bson = ms_read_max_bson(db->client);
  db->db = mongoc_client_get_database(db->client, db->name);
  return 1;
}

/* ---- lifecycle ---- */

static void database_release(lua_State *L, ms_database_t *db) {
  while (db->cursors) ms_cursor_close(L, db->cursors);
  if (db->client) ms_session_close_all(L, db);
  if (db->db) mongoc_database_destroy(db->db);
  if (db->client) ms_pool_push(db->pool, db->client);
  bson_free(db->password);
  bson_free(db->name);
  db->db = NULL;
  db->client = NULL;
  db->password = db->name = NULL;
}

/* db:close(): idempotent; its cursors and sessions end first, and every
 * later call on it or its collections is nil, msg, "closed". */
static int l_close(lua_State *L) {
  database_release(L, (ms_database_t *)luaL_checkudata(L, 1, MS_DATABASE_MT));
  return 0;
}

static int l_tostring(lua_State *L) {
  ms_database_t *db = (ms_database_t *)luaL_checkudata(L, 1, MS_DATABASE_MT);
  if (db->client) lua_pushfstring(L, "mongostore.Database (%s)", db->name);
  else lua_pushliteral(L, "mongostore.Database (closed)");
  return 1;
}

/* ---- methods ---- */

#define DB_OR_CLOSED(L, db, doing)             \
  ms_database_t *db = ms_database_check(L, 1); \
  if (!db) return ms_document_closed(L, doing)

/* db:collection(name): a name MongoDB takes (non-empty UTF-8, no NUL, no
 * '$', within 200 bytes); a bad one is nil, msg, "invalid". */
static int l_collection(lua_State *L) {
  size_t n;
  const char *name, *why;
  ms_collection_t *c;
  ms_err_t e;
  DB_OR_CLOSED(L, db, "collection");
  name = ms_arg_string(L, 2, "collection: name", &n);
  if ((why = ms_text_error(name, n)) != NULL || memchr(name, '$', n) || n > 200) {
    ms_err_set(&e, "invalid", "collection: name %s", why ? why : n > 200 ? "is longer than 200 bytes" : "holds '$'");
    return ms_push_error(L, &e);
  }
  c = (ms_collection_t *)lua_newuserdatauv(L, sizeof *c, 1);
  memset(c, 0, sizeof *c);
  c->db_ref = LUA_NOREF;
  luaL_setmetatable(L, MS_COLLECTION_MT);
  c->db = db;
  c->name = bson_strdup(name);
  c->coll = mongoc_database_get_collection(db->db, name);
  lua_pushvalue(L, 1);
  c->db_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  return 1;
}

/* db:command(cmd, opts) -> the server's reply, as a document. cmd is
 * ordered (its first key names the command): a list of pairs, or a table
 * of one key. */
static int l_command(lua_State *L) {
  bson_t cmd = BSON_INITIALIZER, opts = BSON_INITIALIZER, reply;
  bson_error_t be;
  ms_err_t e;
  int n, ok;
  DB_OR_CLOSED(L, db, "command");
  if (ms_ordered_to_bson(L, 2, &cmd, "command", MS_ORDER_STRICT, &e) ||
      ms_session_append(L, lua_istable(L, 3) ? 3 : 0, db, &opts, &e)) {
    bson_destroy(&cmd);
    bson_destroy(&opts);
    ms_err_prefix(&e, "command");
    return ms_push_error(L, &e);
  }
  ok = mongoc_database_command_with_opts(db->db, &cmd, NULL, &opts, &reply, &be);
  bson_destroy(&cmd);
  bson_destroy(&opts);
  if (!ok) n = ms_document_push_error(L, db, &be, &reply, "command");
  else if (ms_push_document(L, &reply, &e)) n = ms_push_error(L, &e);
  else n = 1;
  bson_destroy(&reply);
  return n;
}

/* Drains a cursor of listings (collections, indexes) into a list. */
int ms_document_push_list(lua_State *L, ms_database_t *db, mongoc_cursor_t *cur, const char *doing) {
  const bson_t *doc;
  bson_error_t be;
  const bson_t *reply = NULL;
  ms_err_t e;
  lua_Integer i = 0;
  int n;
  lua_newtable(L);
  ms_mark_array(L, -1);
  while (mongoc_cursor_next(cur, &doc)) {
    if (ms_push_document(L, doc, &e)) {
      mongoc_cursor_destroy(cur);
      ms_err_prefix(&e, doing);
      return ms_push_error(L, &e);
    }
    lua_rawseti(L, -2, ++i);
  }
  if (mongoc_cursor_error_document(cur, &be, &reply)) {
    lua_pop(L, 1);
    n = ms_document_push_error(L, db, &be, reply, doing);
    mongoc_cursor_destroy(cur);
    return n;
  }
  mongoc_cursor_destroy(cur);
  return 1;
}

/* db:list_collections(opts) -> a list of the server's collection entries
 * ({ name =, type =, options = ... }). */
static int l_list_collections(lua_State *L) {
  bson_t opts = BSON_INITIALIZER;
  ms_err_t e;
  mongoc_cursor_t *cur;
  DB_OR_CLOSED(L, db, "list_collections");
  if (ms_session_append(L, lua_istable(L, 2) ? 2 : 0, db, &opts, &e)) {
    bson_destroy(&opts);
    ms_err_prefix(&e, "list_collections");
    return ms_push_error(L, &e);
  }
  cur = mongoc_database_find_collections_with_opts(db->db, &opts);
  bson_destroy(&opts);
  return ms_document_push_list(L, db, cur, "list_collections");
}

/* db:info() -> { wire_version, replica_set, transactions, max_bson_size }
 * from the selected server's hello: transactions need sessions and a
 * replica set (or a mongos) at wire version 7 or more. */
static int l_info(lua_State *L) {
  bson_error_t be;
  mongoc_server_description_t *sd;
  const bson_t *hello;
  bson_iter_t it;
  int32_t wire = 0;
  const char *set = NULL;
  int sessions = 0, mongos = 0, n;
  DB_OR_CLOSED(L, db, "info");
  sd = mongoc_client_select_server(db->client, true, NULL, &be);
  if (!sd) return ms_document_push_error(L, db, &be, NULL, "info");
  hello = mongoc_server_description_hello_response(sd);
  if (hello && bson_iter_init_find(&it, hello, "maxWireVersion") && BSON_ITER_HOLDS_NUMBER(&it))
    wire = (int32_t)bson_iter_as_int64(&it);
  if (hello && bson_iter_init_find(&it, hello, "setName") && BSON_ITER_HOLDS_UTF8(&it)) set = bson_iter_utf8(&it, NULL);
  if (hello && bson_iter_init_find(&it, hello, "logicalSessionTimeoutMinutes") && BSON_ITER_HOLDS_NUMBER(&it))
    sessions = 1;
  if (hello && bson_iter_init_find(&it, hello, "msg") && BSON_ITER_HOLDS_UTF8(&it) &&
      strcmp(bson_iter_utf8(&it, NULL), "isdbgrid") == 0)
    mongos = 1;
  lua_createtable(L, 0, 5);
  lua_pushinteger(L, wire);
  lua_setfield(L, -2, "wire_version");
  if (set) lua_pushstring(L, set);
  else lua_pushboolean(L, 0);
  lua_setfield(L, -2, "replica_set");
  lua_pushboolean(L, sessions && wire >= 7 && (set || (mongos && wire >= 8)));
  lua_setfield(L, -2, "transactions");
  lua_pushinteger(L, db->max_bson);
  lua_setfield(L, -2, "max_bson_size");
  lua_pushstring(L, db->name);
  lua_setfield(L, -2, "db");
  n = 1;
  mongoc_server_description_destroy(sd);
  return n;
}

/* db:session() (session.c makes it) */
static int l_session(lua_State *L) {
  DB_OR_CLOSED(L, db, "session");
  return ms_session_new(L, 1, db);
}

static int l_name(lua_State *L) {
  ms_database_t *db = (ms_database_t *)luaL_checkudata(L, 1, MS_DATABASE_MT);
  if (!db->name) return ms_document_closed(L, "name");
  lua_pushstring(L, db->name);
  return 1;
}

/* db:stats() -> { find = n, update = n, ..., total = n, reply_bytes = n }:
 * the commands started on the handle's pool (the process's for its URI, so
 * every handle and store on that URI counts in it), as store:stats(). A
 * caller compares two readings: the model's specs count what a save sent. */
static int l_stats(lua_State *L) {
  DB_OR_CLOSED(L, db, "stats");
  ms_pool_push_stats(L, db->pool);
  return 1;
}

static const luaL_Reg database_methods[] = {
  {"collection", l_collection},
  {"stats", l_stats},
  {"command", l_command},
  {"list_collections", l_list_collections},
  {"info", l_info},
  {"session", l_session},
  {"name", l_name},
  {"close", l_close},
  {NULL, NULL}
};

/* Each document metatable's method table as module.<Name>, for the Lua
 * half (lua/mongostore/database.lua) to wrap. */
static void export_methods(lua_State *L, const char *mt, const char *field) {
  luaL_getmetatable(L, mt);
  lua_getfield(L, -1, "__index");
  lua_setfield(L, -3, field);
  lua_pop(L, 1);
}

void ms_open_database(lua_State *L) {
  ms_new_class(L, MS_DATABASE_MT, database_methods, NULL, l_close, l_close, l_tostring);
  export_methods(L, MS_DATABASE_MT, "Database");
  export_methods(L, MS_COLLECTION_MT, "Collection");
  export_methods(L, MS_CURSOR_MT, "Cursor");
  export_methods(L, MS_SESSION_MT, "Session");
  lua_pushcfunction(L, l_open);
  lua_setfield(L, -2, "database");
}
