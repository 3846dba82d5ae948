/*
 * session.c - the Session userdata (mongostore.Session, from db:session()):
 * a libmongoc client session on its database's client, its transaction
 * (start, commit, abort), and opts.session for every other operation
 * (ms_session_append), and whether an operation of its transaction failed
 * transiently (ms_session_note_transient). The retry loop of db:transaction is Lua's
 * (lua/mongostore/transaction.lua): nothing here calls back into Lua.
 */
#include "document.h"

#include <string.h>

#include <mongoc/mongoc.h>

/* A database's sessions, so that closing the database ends them before its
 * client goes back to the pool (a session's client must not be shared
 * while the session still talks through it). Kept in the registry under
 * the database's address: a table whose keys are light userdata, each
 * either an open session (value OPEN) or the libmongoc half of a session
 * already closed that a cursor may still use (value PARKED, below). */
#define OPEN 1
#define PARKED 2

static void push_sessions(lua_State *L, ms_database_t *db, int create) {
  lua_pushlightuserdata(L, (void *)db);
  lua_rawget(L, LUA_REGISTRYINDEX);
  if (lua_isnil(L, -1) && create) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushlightuserdata(L, (void *)db);
    lua_pushvalue(L, -2);
    lua_rawset(L, LUA_REGISTRYINDEX);
  }
}

/* Sets key's entry in db's table (value 0 removes it). */
static void mark(lua_State *L, ms_database_t *db, void *key, int value) {
  push_sessions(L, db, value != 0);
  if (lua_istable(L, -1)) {
    lua_pushlightuserdata(L, key);
    if (value) lua_pushinteger(L, value);
    else lua_pushnil(L);
    lua_rawset(L, -3);
  }
  lua_pop(L, 1);
}

/* libmongoc logs a warning when the server answers abortTransaction with an
 * error, as it does for a transaction it already ended itself (after a
 * write conflict, say): the transaction is over either way, so the line
 * says nothing the caller needs. */
static bool abort_quietly(mongoc_client_session_t *cs, bson_error_t *be) {
  bool ok;
  ms_log_quiet = 1;
  ok = mongoc_client_session_abort_transaction(cs, be);
  ms_log_quiet = 0;
  return ok;
}

static void destroy_quietly(mongoc_client_session_t *cs) {
  ms_log_quiet = 1;
  mongoc_client_session_destroy(cs);
  ms_log_quiet = 0;
}

/* A cursor made with a session reads its later batches, and kills itself,
 * through that session: libmongoc keeps the pointer. So a session closed
 * while its database has a live cursor (which one used it cannot be told
 * from here) is ended for Lua at once, its transaction aborted, but its
 * libmongoc half waits (PARKED) until no cursor of the database is live,
 * or the database closes, which closes its cursors first. */
static int has_live_cursor(const ms_database_t *db) {
  const ms_cursor_t *c;
  for (c = db->cursors; c; c = c->next)
    if (c->cur) return 1;
  return 0;
}

/* Starts a walk over db's session table with lua_next: pushes the table and
 * a nil key and returns the table's index, or 0 (nothing pushed) when db has
 * no sessions. The caller pops the table once lua_next is done. */
static int begin_walk(lua_State *L, ms_database_t *db) {
  push_sessions(L, db, 0);
  if (!lua_istable(L, -1)) {
    lua_pop(L, 1);
    return 0;
  }
  lua_pushnil(L);
  return lua_gettop(L) - 1;
}

/* Destroys the parked halves of db's sessions (all of them with all = 1:
 * the open ones too, for the database's close). */
static void sweep(lua_State *L, ms_database_t *db, int all) {
  int t = begin_walk(L, db);
  if (!t) return;
  while (lua_next(L, t)) {
    int kind = (int)lua_tointeger(L, -1);
    void *key = lua_touserdata(L, -2);
    lua_pop(L, 1);
    if (kind == PARKED) {
      destroy_quietly((mongoc_client_session_t *)key);
      /* clearing a field while walking the table is allowed */
      lua_pushvalue(L, -1);
      lua_pushnil(L);
      lua_rawset(L, t);
    } else if (all) {
      ms_session_t *s = (ms_session_t *)key;
      /* only the libmongoc half: the session's registry reference goes
       * when it is closed or collected */
      if (s->cs) destroy_quietly(s->cs);
      s->cs = NULL;
    }
  }
  lua_pop(L, 1);
}

/* Ends the session for Lua; libmongoc aborts a transaction still open when
 * it destroys the session, or here when that must wait. */
static void end_session(lua_State *L, ms_session_t *s) {
  mongoc_client_session_t *cs = s->cs;
  ms_database_t *db = s->db;
  s->cs = NULL;
  if (!db) return;
  mark(L, db, s, 0);
  if (cs) {
    if (db->client && has_live_cursor(db)) {
      bson_error_t be;
      if (mongoc_client_session_in_transaction(cs)) (void)abort_quietly(cs, &be);
      mark(L, db, cs, PARKED);
    } else {
      destroy_quietly(cs);
    }
  }
  if (db->client && !has_live_cursor(db)) sweep(L, db, 0);
  luaL_unref(L, LUA_REGISTRYINDEX, s->db_ref);
  s->db = NULL;
  s->db_ref = LUA_NOREF;
}

void ms_session_close_all(lua_State *L, ms_database_t *db) {
  sweep(L, db, 1);
  lua_pushlightuserdata(L, (void *)db);
  lua_pushnil(L);
  lua_rawset(L, LUA_REGISTRYINDEX);
}

void ms_session_note_transient(lua_State *L, ms_database_t *db) {
  int t = begin_walk(L, db);
  if (!t) return;
  while (lua_next(L, t)) {
    if (lua_tointeger(L, -1) == OPEN) {
      ms_session_t *s = (ms_session_t *)lua_touserdata(L, -2);
      if (s->cs && mongoc_client_session_in_transaction(s->cs)) s->txn_failed = 1;
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

/* ---- errors ---- */

static int reply_has_label(const bson_t *reply, const char *label) {
  bson_iter_t it, arr;
  if (!reply || !bson_iter_init_find(&it, reply, "errorLabels") || !BSON_ITER_HOLDS_ARRAY(&it) ||
      !bson_iter_recurse(&it, &arr))
    return 0;
  while (bson_iter_next(&arr))
    if (BSON_ITER_HOLDS_UTF8(&arr) && strcmp(bson_iter_utf8(&arr, NULL), label) == 0) return 1;
  return 0;
}

/* nil, msg, code, detail for a failed session call: transient for the
 * TransientTransactionError label, otherwise the code of the error;
 * detail = { server_code =, labels = array{...} } when the server or
 * libmongoc gave them. Not ms_document_push_error: a commit's network
 * failure has labels and no server code (UnknownTransactionCommitResult,
 * the one db:transaction must see), and a call in the wrong state is the
 * caller's mistake (invalid), not the server's. */
static int push_failure(lua_State *L, ms_database_t *db, const bson_error_t *be, const bson_t *reply,
                        const char *doing) {
  ms_err_t e;
  int64_t failed_us = ms_failed_attempt_us();
  double took_ms = failed_us >= 0 ? (double)failed_us / 1000.0 : (ms_now() - db->op_started) * 1000.0;
  bson_iter_t it, arr;
  int has_labels = reply && bson_iter_init_find(&it, reply, "errorLabels") && BSON_ITER_HOLDS_ARRAY(&it);
  int server_code = be->domain == MONGOC_ERROR_SERVER || be->domain == MONGOC_ERROR_WRITE_CONCERN;
  ms_err_from_bson_timed(&e, be, doing, took_ms, db->socket_timeout_ms);
  /* a call in the wrong state (commit with no transaction, abort after commit) */
  if (be->domain == MONGOC_ERROR_TRANSACTION) e.code = "invalid";
  if (reply_has_label(reply, "TransientTransactionError")) e.code = "transient";
  ms_scrub(db->password, &e);
  ms_push_error(L, &e);
  if (!has_labels && !server_code) return 3;
  lua_createtable(L, 0, 2);
  if (server_code) {
    lua_pushinteger(L, (lua_Integer)be->code);
    lua_setfield(L, -2, "server_code");
  }
  lua_newtable(L);
  if (has_labels && bson_iter_recurse(&it, &arr)) {
    lua_Integer n = 0;
    while (bson_iter_next(&arr)) {
      if (!BSON_ITER_HOLDS_UTF8(&arr)) continue;
      lua_pushstring(L, bson_iter_utf8(&arr, NULL));
      lua_rawseti(L, -2, ++n);
    }
  }
  ms_mark_array(L, -1);
  lua_setfield(L, -2, "labels");
  return 4;
}

static int push_invalid(lua_State *L, const char *code, const char *fmt, const char *doing) {
  ms_err_t e;
  ms_err_set(&e, code, fmt, doing);
  return ms_push_error(L, &e);
}

/* ---- the session argument ---- */

/* The session at idx (raises when it is not one), or NULL when it or its
 * database is closed; starts the call's clock. */
static ms_session_t *check_open(lua_State *L, int idx) {
  ms_session_t *s = (ms_session_t *)luaL_checkudata(L, idx, MS_SESSION_MT);
  if (!s->cs || !s->db || !s->db->client) return NULL;
  s->db->op_started = ms_now();
  ms_failed_reset();
  return s;
}

#define SESSION_OR_CLOSED(L, s, doing)                                              \
  ms_session_t *s = check_open(L, 1);                                               \
  if (!s) return push_invalid(L, "closed", "%s: the session is closed", doing)

int ms_session_new(lua_State *L, int db_idx, ms_database_t *db) {
  bson_error_t be;
  ms_session_t *s;
  db_idx = lua_absindex(L, db_idx);
  if (!db->client) return push_invalid(L, "closed", "%s: the database is closed", "session");
  /* the userdata first: nothing below raises while a libmongoc session is
   * held by no one */
  s = (ms_session_t *)lua_newuserdata(L, sizeof *s);
  s->db = NULL;
  s->cs = NULL;
  s->db_ref = LUA_NOREF;
  s->txn_failed = 0;
  luaL_setmetatable(L, MS_SESSION_MT);
  lua_pushvalue(L, db_idx);
  s->db_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  mark(L, db, s, OPEN);
  s->db = db;
  db->op_started = ms_now();
  ms_failed_reset();
  s->cs = mongoc_client_start_session(db->client, NULL, &be);
  if (!s->cs) {
    int n;
    end_session(L, s);
    /* libmongoc says so when the server reports no logical sessions */
    if (be.domain == MONGOC_ERROR_CLIENT && be.code == MONGOC_ERROR_CLIENT_SESSION_FAILURE) {
      ms_err_t e;
      ms_err_set(&e, "unavailable", "session: %s", be.message);
      ms_scrub(db->password, &e);
      n = ms_push_error(L, &e);
    } else {
      n = push_failure(L, db, &be, NULL, "session");
    }
    return n;
  }
  if (!has_live_cursor(db)) sweep(L, db, 0);
  return 1;
}

int ms_session_append(lua_State *L, int opts_idx, ms_database_t *db, bson_t *cmd_opts, ms_err_t *e) {
  ms_session_t *s;
  bson_error_t be;
  if (opts_idx == 0 || !lua_istable(L, opts_idx)) return 0;
  lua_getfield(L, opts_idx, "session");
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return 0;
  }
  s = (ms_session_t *)luaL_testudata(L, -1, MS_SESSION_MT);
  if (!s) {
    ms_err_set(e, "invalid", "opts.session must be a session (db:session()), got %s", luaL_typename(L, -1));
    lua_pop(L, 1);
    return -1;
  }
  lua_pop(L, 1);  /* the caller's opts table keeps the session alive */
  if (!s->cs || !s->db) {
    ms_err_set(e, "invalid", "opts.session is closed");
    return -1;
  }
  if (s->db != db) {
    ms_err_set(e, "invalid", "opts.session belongs to another database handle");
    return -1;
  }
  if (!mongoc_client_session_append(s->cs, cmd_opts, &be)) {
    ms_err_set(e, "invalid", "opts.session: %s", be.message);
    return -1;
  }
  return 0;
}

/* ---- start_transaction's options ---- */

static const char *const txn_keys[] = { "read_concern", "write_concern", "read_preference", "max_commit_time_ms",
                                        NULL };

/* Raises (a wrong type is a programming mistake, as everywhere). */
static void check_txn_keys(lua_State *L, int idx) {
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    int i, known = 0;
    lua_pop(L, 1);
    if (lua_type(L, -1) == LUA_TSTRING)
      for (i = 0; txn_keys[i]; i++)
        if (strcmp(lua_tostring(L, -1), txn_keys[i]) == 0) known = 1;
    if (!known) {
      /* luaL_tolstring so a non-string key is named too */
      luaL_tolstring(L, -1, NULL);
      luaL_error(L, "start_transaction: unknown option %s", lua_tostring(L, -1));
    }
  }
}

/* read_concern: "majority" or { level = "majority" } */
static const char *read_concern_level(lua_State *L, int idx) {
  const char *level;
  lua_getfield(L, idx, "read_concern");
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return NULL;
  }
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "level");
    lua_remove(L, -2);
  }
  if (lua_type(L, -1) != LUA_TSTRING)
    luaL_error(L, "start_transaction: read_concern must be a level string or { level = string }, got %s",
               luaL_typename(L, -1));
  level = lua_tostring(L, -1);
  lua_pop(L, 1);  /* opts keeps the string alive for the call */
  return level;
}

/* write_concern: w (1, "majority", a tag) or { w =, j =, wtimeout = } */
static void set_w(lua_State *L, int idx, mongoc_write_concern_t *wc) {
  if (lua_type(L, idx) == LUA_TSTRING) {
    if (strcmp(lua_tostring(L, idx), "majority") == 0) mongoc_write_concern_set_w(wc, MONGOC_WRITE_CONCERN_W_MAJORITY);
    else mongoc_write_concern_set_wtag(wc, lua_tostring(L, idx));
  } else if (lua_isinteger(L, idx) && lua_tointeger(L, idx) >= 0 && lua_tointeger(L, idx) <= INT32_MAX) {
    mongoc_write_concern_set_w(wc, (int32_t)lua_tointeger(L, idx));
  } else {
    mongoc_write_concern_destroy(wc);
    luaL_error(L, "start_transaction: write_concern.w must be a non-negative integer or a string, got %s",
               luaL_typename(L, idx));
  }
}

static mongoc_write_concern_t *write_concern(lua_State *L, int idx) {
  mongoc_write_concern_t *wc;
  int t;
  lua_getfield(L, idx, "write_concern");
  t = lua_type(L, -1);
  if (t == LUA_TNIL) {
    lua_pop(L, 1);
    return NULL;
  }
  if (t != LUA_TTABLE && t != LUA_TSTRING && t != LUA_TNUMBER)
    luaL_error(L, "start_transaction: write_concern must be a table, a w number or a w string, got %s",
               luaL_typename(L, -1));
  wc = mongoc_write_concern_new();
  if (t != LUA_TTABLE) {
    set_w(L, -1, wc);
  } else {
    lua_getfield(L, -1, "w");
    if (!lua_isnil(L, -1)) set_w(L, -1, wc);
    lua_pop(L, 1);
    lua_getfield(L, -1, "j");
    if (!lua_isnil(L, -1)) {
      if (!lua_isboolean(L, -1)) {
        mongoc_write_concern_destroy(wc);
        luaL_error(L, "start_transaction: write_concern.j must be a boolean, got %s", luaL_typename(L, -1));
      }
      mongoc_write_concern_set_journal(wc, lua_toboolean(L, -1));
    }
    lua_pop(L, 1);
    lua_getfield(L, -1, "wtimeout");
    if (!lua_isnil(L, -1)) {
      if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 0) {
        mongoc_write_concern_destroy(wc);
        luaL_error(L, "start_transaction: write_concern.wtimeout must be a non-negative integer (ms), got %s",
                   luaL_typename(L, -1));
      }
      mongoc_write_concern_set_wtimeout_int64(wc, (int64_t)lua_tointeger(L, -1));
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return wc;
}

static const char *const read_modes[] = { "primary", "primaryPreferred", "secondary", "secondaryPreferred",
                                          "nearest", NULL };
static const mongoc_read_mode_t read_mode_values[] = { MONGOC_READ_PRIMARY, MONGOC_READ_PRIMARY_PREFERRED,
                                                       MONGOC_READ_SECONDARY, MONGOC_READ_SECONDARY_PREFERRED,
                                                       MONGOC_READ_NEAREST };

static int read_mode(lua_State *L, int idx, mongoc_read_mode_t *mode) {
  int i;
  lua_getfield(L, idx, "read_preference");
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return 0;
  }
  if (lua_type(L, -1) == LUA_TSTRING)
    for (i = 0; read_modes[i]; i++)
      if (strcmp(lua_tostring(L, -1), read_modes[i]) == 0) {
        *mode = read_mode_values[i];
        lua_pop(L, 1);
        return 1;
      }
  return luaL_error(L, "start_transaction: read_preference must be one of primary, primaryPreferred, secondary, "
                       "secondaryPreferred, nearest");
}

static int64_t max_commit_ms(lua_State *L, int idx) {
  int64_t v = -1;
  lua_getfield(L, idx, "max_commit_time_ms");
  if (!lua_isnil(L, -1)) {
    if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 0)
      luaL_error(L, "start_transaction: max_commit_time_ms must be a non-negative integer, got %s",
                 luaL_typename(L, -1));
    v = (int64_t)lua_tointeger(L, -1);
  }
  lua_pop(L, 1);
  return v;
}

/* ---- methods ---- */

/* s:start_transaction([opts]) -> true | nil, msg, code */
static int l_start_transaction(lua_State *L) {
  const char *level = NULL;
  mongoc_write_concern_t *wc = NULL;
  mongoc_read_mode_t mode = MONGOC_READ_PRIMARY;
  int has_mode = 0;
  int64_t commit_ms = -1;
  mongoc_transaction_opt_t *topts;
  bson_error_t be;
  bool ok;
  SESSION_OR_CLOSED(L, s, "start_transaction");
  if (!lua_isnoneornil(L, 2)) {
    if (!lua_istable(L, 2))
      return luaL_error(L, "start_transaction: opts must be a table, got %s", luaL_typename(L, 2));
    /* every check that may raise comes before anything is allocated,
     * except the write concern, which frees itself before raising */
    check_txn_keys(L, 2);
    level = read_concern_level(L, 2);
    has_mode = read_mode(L, 2, &mode);
    commit_ms = max_commit_ms(L, 2);
    wc = write_concern(L, 2);
  }
  topts = mongoc_transaction_opts_new();
  if (level) {
    mongoc_read_concern_t *rc = mongoc_read_concern_new();
    mongoc_read_concern_set_level(rc, level);
    mongoc_transaction_opts_set_read_concern(topts, rc);
    mongoc_read_concern_destroy(rc);
  }
  if (wc) {
    mongoc_transaction_opts_set_write_concern(topts, wc);
    mongoc_write_concern_destroy(wc);
  }
  if (has_mode) {
    mongoc_read_prefs_t *rp = mongoc_read_prefs_new(mode);
    mongoc_transaction_opts_set_read_prefs(topts, rp);
    mongoc_read_prefs_destroy(rp);
  }
  if (commit_ms >= 0) mongoc_transaction_opts_set_max_commit_time_ms(topts, commit_ms);
  ok = mongoc_client_session_start_transaction(s->cs, topts, &be);
  mongoc_transaction_opts_destroy(topts);
  if (ok) s->txn_failed = 0;
  if (!ok) {
    ms_err_t e;
    /* a transaction already open, or a server (a standalone, an old
     * version) that has none: libmongoc refuses before sending anything */
    const char *code = mongoc_client_session_in_transaction(s->cs) ? "invalid" : "unavailable";
    if (be.domain != MONGOC_ERROR_TRANSACTION) return push_failure(L, s->db, &be, NULL, "start_transaction");
    ms_err_set(&e, code, "start_transaction: %s", be.message);
    ms_scrub(s->db->password, &e);
    return ms_push_error(L, &e);
  }
  lua_pushboolean(L, 1);
  return 1;
}

/* s:commit() -> true | nil, msg, code, detail (labels such as
 * UnknownTransactionCommitResult say whether it may have committed) */
static int l_commit(lua_State *L) {
  bson_t reply;
  bson_error_t be;
  bool ok;
  SESSION_OR_CLOSED(L, s, "commit");
  /* libmongoc refuses a wrong state itself; a commit that failed may be
   * tried again (its state is then "committed") */
  ok = mongoc_client_session_commit_transaction(s->cs, &reply, &be);
  if (!ok) {
    int n = push_failure(L, s->db, &be, &reply, "commit");
    bson_destroy(&reply);
    return n;
  }
  bson_destroy(&reply);
  lua_pushboolean(L, 1);
  return 1;
}

/* s:abort() -> true | nil, msg, code */
static int l_abort(lua_State *L) {
  bson_error_t be;
  SESSION_OR_CLOSED(L, s, "abort");
  /* libmongoc ignores the server's answer to abortTransaction (the
   * transaction is over either way) and fails only on a wrong state */
  if (!abort_quietly(s->cs, &be)) return push_failure(L, s->db, &be, NULL, "abort");
  lua_pushboolean(L, 1);
  return 1;
}

/* s:in_transaction() -> boolean (false once closed) */
static int l_in_transaction(lua_State *L) {
  ms_session_t *s = (ms_session_t *)luaL_checkudata(L, 1, MS_SESSION_MT);
  lua_pushboolean(L, s->cs && s->db && s->db->client && mongoc_client_session_in_transaction(s->cs));
  return 1;
}

/* s:transaction_failed() -> boolean: whether an operation of the current (or
 * the last) transaction failed with TransientTransactionError, which the
 * server gives when it aborted the transaction or may have; such a
 * transaction cannot commit, and is run again from start_transaction.
 * start_transaction clears it. */
static int l_transaction_failed(lua_State *L) {
  ms_session_t *s = (ms_session_t *)luaL_checkudata(L, 1, MS_SESSION_MT);
  lua_pushboolean(L, s->cs && s->txn_failed);
  return 1;
}

/* s:close() -> true; ends the session (an open transaction is aborted);
 * closing twice is harmless */
static int l_close(lua_State *L) {
  ms_session_t *s = (ms_session_t *)luaL_checkudata(L, 1, MS_SESSION_MT);
  end_session(L, s);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_gc(lua_State *L) {
  ms_session_t *s = (ms_session_t *)luaL_checkudata(L, 1, MS_SESSION_MT);
  end_session(L, s);
  return 0;
}

static int l_tostring(lua_State *L) {
  ms_session_t *s = (ms_session_t *)luaL_checkudata(L, 1, MS_SESSION_MT);
  if (!s->cs) lua_pushfstring(L, "mongostore.Session (closed): %p", (void *)s);
  else lua_pushfstring(L, "mongostore.Session: %p", (void *)s);
  return 1;
}

void ms_open_session(lua_State *L) {
  static const luaL_Reg methods[] = {
    { "start_transaction", l_start_transaction },
    { "commit", l_commit },
    { "abort", l_abort },
    { "in_transaction", l_in_transaction },
    { "transaction_failed", l_transaction_failed },
    { "close", l_close },
    { NULL, NULL }
  };
  /* __close as __gc: local s <close> = db:session() */
  ms_new_class(L, MS_SESSION_MT, methods, NULL, l_gc, l_gc, l_tostring);
}
