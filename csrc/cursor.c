/*
 * cursor.c - the Cursor userdata (mongostore.Cursor) of find, aggregate and
 * the listings: next, all, each, close and id; the server cursor is killed
 * when the Cursor closes, is exhausted or is collected, and a database
 * closes its cursors before its client goes back to the pool.
 */
#include "document.h"

#include <string.h>

#include <mongoc/mongoc.h>

static void link_cursor(ms_cursor_t *c) {
  c->prev = NULL;
  c->next = c->db->cursors;
  if (c->next) c->next->prev = c;
  c->db->cursors = c;
}

static void unlink_cursor(ms_cursor_t *c) {
  if (c->prev) c->prev->next = c->next;
  else if (c->db->cursors == c) c->db->cursors = c->next;
  if (c->next) c->next->prev = c->prev;
  c->next = c->prev = NULL;
}

/* The server cursor goes (mongoc_cursor_destroy sends killCursors when it
 * is still open on the server); the Cursor stays on its database's list,
 * and keeps its database alive, until it closes. */
static void drop_cur(ms_cursor_t *c) {
  if (c->cur) {
    mongoc_cursor_destroy(c->cur);
    c->cur = NULL;
  }
  if (c->first) {
    bson_destroy(c->first);
    c->first = NULL;
  }
}

void ms_cursor_close(lua_State *L, ms_cursor_t *c) {
  drop_cur(c);
  c->closed = 1;
  if (c->db) {
    unlink_cursor(c);
    c->db = NULL;
    luaL_unref(L, LUA_REGISTRYINDEX, c->db_ref);
    c->db_ref = LUA_NOREF;
  }
}

/* The query's error, with its reply: the first next() tells, since a find
 * or an aggregate is only sent then. */
static int push_cursor_error(lua_State *L, ms_cursor_t *c) {
  bson_error_t be;
  const bson_t *reply = NULL;
  int n;
  if (!mongoc_cursor_error_document(c->cur, &be, &reply)) return 0;
  n = ms_document_push_error(L, c->db, &be, reply, c->doing);
  ms_cursor_close(L, c);
  return n;
}

int ms_cursor_new(lua_State *L, int db_idx, ms_database_t *db, mongoc_cursor_t *cur, const char *doing) {
  ms_cursor_t *c;
  const bson_t *doc;
  int n;
  db_idx = lua_absindex(L, db_idx);
  c = (ms_cursor_t *)lua_newuserdatauv(L, sizeof *c, 1);
  memset(c, 0, sizeof *c);
  c->db_ref = LUA_NOREF;
  c->cur = cur;
  luaL_setmetatable(L, MS_CURSOR_MT);
  c->db = db;
  lua_pushvalue(L, db_idx);
  c->db_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  link_cursor(c);
  strncpy(c->doing, doing, sizeof c->doing - 1);
  /* the first batch is fetched now, so that a bad query fails here, as
   * every other operation does, rather than at the first next() */
  if (mongoc_cursor_next(cur, &doc)) {
    c->first = bson_copy(doc);
  } else if ((n = push_cursor_error(L, c)) > 0) {
    return n;
  } else {
    drop_cur(c);   /* nothing matched: no server cursor is left */
  }
  return 1;
}

static ms_cursor_t *check_cursor(lua_State *L) { return (ms_cursor_t *)luaL_checkudata(L, 1, MS_CURSOR_MT); }

static int push_closed(lua_State *L, ms_cursor_t *c) {
  ms_err_t e;
  ms_err_set(&e, "closed", "%s: the cursor is closed", c->doing);
  return ms_push_error(L, &e);
}

/* Pushes the next document and returns 1; 0 at the end (the server cursor
 * is gone then); or pushes nil, msg, code and returns their count. */
static int step(lua_State *L, ms_cursor_t *c) {
  const bson_t *doc;
  ms_err_t e;
  int n;
  if (c->first) {
    n = ms_push_document(L, c->first, &e);
    bson_destroy(c->first);
    c->first = NULL;
  } else {
    if (!c->cur) return 0;
    c->db->op_started = ms_now();
    ms_failed_reset();
    if (!mongoc_cursor_next(c->cur, &doc)) {
      if ((n = push_cursor_error(L, c)) > 0) return -n;
      drop_cur(c);
      return 0;
    }
    n = ms_push_document(L, doc, &e);
  }
  if (n) {
    ms_err_prefix(&e, c->doing);
    return -ms_push_error(L, &e);
  }
  return 1;
}

/* cursor:next() -> doc, or nil at the end; nil, msg, code on failure and
 * nil, msg, "closed" once closed (or its database closed). */
static int l_next(lua_State *L) {
  ms_cursor_t *c = check_cursor(L);
  int n;
  if (c->closed || !c->db || !c->db->client) return push_closed(L, c);
  n = step(L, c);
  if (n == 0) {
    lua_pushnil(L);
    return 1;
  }
  return n < 0 ? -n : n;
}

/* cursor:all() -> the remaining documents as a list (then the cursor is
 * exhausted), or nil, msg, code. */
static int l_all(lua_State *L) {
  ms_cursor_t *c = check_cursor(L);
  lua_Integer i = 0;
  int n;
  if (c->closed || !c->db || !c->db->client) return push_closed(L, c);
  lua_newtable(L);
  ms_mark_array(L, -1);
  while ((n = step(L, c)) == 1) lua_rawseti(L, -2, ++i);
  return n < 0 ? -n : 1;
}

/* each()'s iterator: a failure raises (a for loop has no place for it),
 * here, outside any libmongoc call. */
static int each_step(lua_State *L) {
  /* the upvalue is the Cursor l_each checked (no Lua code can change it) */
  ms_cursor_t *c = (ms_cursor_t *)lua_touserdata(L, lua_upvalueindex(1));
  int n;
  lua_settop(L, 0);
  if (c->closed || !c->db || !c->db->client) return luaL_error(L, "%s: the cursor is closed", c->doing);
  n = step(L, c);
  if (n < 0) {
    /* nil, msg, code[, detail] on the stack: the message and its code */
    int base = lua_gettop(L) + n;
    lua_pushfstring(L, "%s (%s)", lua_tostring(L, base + 2), lua_tostring(L, base + 3));
    return lua_error(L);
  }
  if (n == 0) {
    ms_cursor_close(L, c);
    return 0;
  }
  return 1;
}

/* for doc in cursor:each() do ... end: closes the cursor at the end, and on
 * Lua 5.4 at a break or an error too (the cursor is the loop's closing
 * value, its __close). */
static int l_each(lua_State *L) {
  check_cursor(L);
  lua_settop(L, 1);
  lua_pushvalue(L, 1);
  lua_pushcclosure(L, each_step, 1);
  lua_pushnil(L);
  lua_pushnil(L);
  lua_pushvalue(L, 1);
  return 4;
}

/* cursor:close(): idempotent; kills the server cursor if still open. */
static int l_close(lua_State *L) {
  ms_cursor_close(L, check_cursor(L));
  return 0;
}

/* cursor:id() -> the server's cursor id (0 once nothing is left on the
 * server), for a getMore or killCursors of one's own. */
static int l_id(lua_State *L) {
  ms_cursor_t *c = check_cursor(L);
  ms_push_int64(L, c->cur ? mongoc_cursor_get_id(c->cur) : 0);
  return 1;
}

static int l_tostring(lua_State *L) {
  ms_cursor_t *c = check_cursor(L);
  lua_pushfstring(L, "mongostore.Cursor (%s%s)", c->doing, c->closed ? ", closed" : "");
  return 1;
}

void ms_open_cursor(lua_State *L) {
  static const luaL_Reg methods[] = {
    {"next", l_next},
    {"all", l_all},
    {"each", l_each},
    {"close", l_close},
    {"id", l_id},
    {NULL, NULL}
  };
  ms_new_class(L, MS_CURSOR_MT, methods, NULL, l_close, l_close, l_tostring);
}
