/*
 * store.c - the Store userdata (mongostore.Store): connect (options and
 * indexes; the URI and the wait for the server are connect.c's, shared with
 * mongostore.database), close, info and stats, the helpers every store file
 * shares (arguments, errors, counters), and the method table, assembled from
 * each store file's ms_open_ function. The Lua half
 * (lua/mongostore/store.lua) turns Executions and Events into JSON text and
 * back; no C file sees an Execution as a Lua object.
 */
#include "document.h"

#include <stdio.h>
#include <string.h>

#include <mongoc/mongoc.h>

/* ---- arguments and errors ---- */

/* The store argument, or NULL once it is closed: a call on a closed store is
 * an ordinary failure (nil, msg, "closed"), since a worker may close its store
 * while another coroutine still holds it. */
ms_store_t *ms_store_check(lua_State *L) {
  ms_store_t *s = (ms_store_t *)luaL_checkudata(L, 1, MS_STORE_MT);
  if (!s->client) return NULL;
  s->op_started = ms_now();
  ms_failed_reset();
  return s;
}

int ms_push_closed(lua_State *L, const char *doing) {
  ms_err_t e;
  ms_err_set(&e, "closed", "%s: the store is closed", doing);
  return ms_push_error(L, &e);
}

int ms_store_push_err(lua_State *L, const ms_store_t *s, ms_err_t *e) {
  ms_scrub(s ? s->password : NULL, e);
  return ms_push_error(L, e);
}

int ms_store_push_bson_err(lua_State *L, const ms_store_t *s, const bson_error_t *be, const char *doing) {
  ms_err_t e;
  /* libmongoc says "socket error or timeout" for both: the time the failed
   * attempt took tells them apart (the whole call's, when the failure came
   * before any command was sent, as in a handshake) */
  int64_t failed_us = ms_failed_attempt_us();
  double took_ms = failed_us >= 0 ? (double)failed_us / 1000.0 : s ? (ms_now() - s->op_started) * 1000.0 : -1.0;
  ms_err_from_bson_timed(&e, be, doing, took_ms, s ? s->socket_timeout_ms : 0);
  return ms_store_push_err(L, s, &e);
}

/* An execution id or event id: a non-empty UTF-8 string. Not a string is a
 * programming error and raises; a bad string is an invalid value. */
const char *ms_check_id(lua_State *L, int idx, const char *name, size_t *len, ms_err_t *e) {
  size_t n;
  const char *s, *why;
  if (lua_type(L, idx) != LUA_TSTRING)
    luaL_error(L, "%s must be a string, got %s", name, luaL_typename(L, idx));
  s = lua_tolstring(L, idx, &n);
  if ((why = ms_text_error(s, n)) != NULL) {
    ms_err_set(e, "invalid", "%s %s", name, why);
    return NULL;
  }
  if (len) *len = n;
  return s;
}

/* Arguments of any other kind: the wrong Lua type is the caller's bug and
 * raises, naming the argument ("delete_timer: path must be a string, got
 * number"); nothing is coerced, so a number never passes for a path. */
const char *ms_arg_string(lua_State *L, int idx, const char *name, size_t *len) {
  if (lua_type(L, idx) != LUA_TSTRING)
    luaL_error(L, "%s must be a string, got %s", name, luaL_typename(L, idx));
  return lua_tolstring(L, idx, len);
}

double ms_arg_number(lua_State *L, int idx, const char *name) {
  if (lua_type(L, idx) != LUA_TNUMBER)
    luaL_error(L, "%s must be a number, got %s", name, luaL_typename(L, idx));
  return lua_tonumber(L, idx);
}

int64_t ms_arg_integer(lua_State *L, int idx, const char *name) {
  int64_t v;
  if (!ms_to_int64(L, idx, &v))
    luaL_error(L, "%s must be an integer, got %s", name,
               lua_type(L, idx) == LUA_TNUMBER ? "a number with a fraction" : luaL_typename(L, idx));
  return v;
}

void ms_arg_table(lua_State *L, int idx, const char *name) {
  if (lua_type(L, idx) != LUA_TTABLE)
    luaL_error(L, "%s must be a table, got %s", name, luaL_typename(L, idx));
}

/* How a document harel's store wrote is told from one ours wrote: every
 * commit of ours stores `version` as an int64; harel's (pymongo) stores a
 * Python int that fits in 32 bits as an int32, in its inserts and in the
 * `$set` of every commit, and touches none of the promoted fields. So
 * `version` of type int32 means "committed by harel since our last commit or
 * promotion", and the partial index store.c makes on exactly that filter
 * holds those documents only (promoted.c finds them by it). Numerically the
 * values are the same, so both sides' version checks match either type. */
void ms_foreign_index_filter(bson_t *filter) {
  bson_t cond;
  bson_append_document_begin(filter, "version", 7, &cond);
  bson_append_utf8(&cond, "$type", 5, "int", 3);
  bson_append_document_end(filter, &cond);
}

/* ---- counters and storable documents ---- */

/* Reserves count seqs from the counters collection and returns the first of
 * the block (seed: _next_seq). A block burned by a lost CAS leaves a gap,
 * which is harmless: seqs are unique and increasing, never gapless. */
int ms_next_seq(ms_store_t *s, const char *name, size_t namelen, int64_t count,
                int64_t *first, bson_error_t *be) {
  bson_t query = BSON_INITIALIZER, update = BSON_INITIALIZER, inc, reply;
  mongoc_find_and_modify_opts_t *opts = mongoc_find_and_modify_opts_new();
  bson_iter_t it;
  int ok = 0, attempt;
  bson_append_utf8(&query, "_id", 3, name, (int)namelen);
  bson_append_document_begin(&update, "$inc", 4, &inc);
  bson_append_int64(&inc, "n", 1, count);
  bson_append_document_end(&update, &inc);
  mongoc_find_and_modify_opts_set_update(opts, &update);
  mongoc_find_and_modify_opts_set_flags(opts, MONGOC_FIND_AND_MODIFY_UPSERT | MONGOC_FIND_AND_MODIFY_RETURN_NEW);
  /* An upsert that raced another one for a new counter, or a retried write
   * whose first attempt landed, can come back without the document
   * (SecantusDB) or as a duplicate key: the counter exists then, and the
   * next attempt finds it (a burned block is a harmless gap). */
  for (attempt = 0; attempt < 3; attempt++) {
    ok = mongoc_collection_find_and_modify_with_opts(s->counters, &query, opts, &reply, be);
    if (ok) {
      if (bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "value.n", &it) &&
          BSON_ITER_HOLDS_NUMBER(&it)) {
        *first = bson_iter_as_int64(&it) - count + 1;
        bson_destroy(&reply);
        break;
      }
      bson_set_error(be, MONGOC_ERROR_SERVER, 0, "counter %s: no value in the reply", name);
      ok = 0;
    }
    bson_destroy(&reply);
    if (be->domain != MONGOC_ERROR_SERVER || (be->code != 0 && be->code != MONGOC_ERROR_DUPLICATE_KEY)) break;
  }
  bson_destroy(&query);
  bson_destroy(&update);
  mongoc_find_and_modify_opts_destroy(opts);
  return ok;
}

/* Taking seqs from a block: every emitting commit of every worker used to
 * increment the one `outbox` counter document, so all workers queued on it.
 * A store now reserves seq_block seqs at a time (connect's opts.seq_block,
 * 1,000 by default) and hands them out itself: one counter round trip per
 * thousand emits; 1 is the old way, a round trip per emitting commit. Seqs stay unique (the
 * blocks are disjoint) and increasing per execution, because a commit's CAS
 * filter also requires that no pending entry of the execution holds a seq at
 * or above its first new one; a commit refused by that guard alone takes a
 * fresh block, whose seqs are above every seq handed out before it. Unused
 * seqs of a block are gaps, which the relays allow. */
int ms_take_seqs(ms_store_t *s, int which, int64_t count, int64_t *first, int *aged, bson_error_t *be) {
  static const char *const names[2] = {"outbox", "spawn"};
  static const size_t lens[2] = {6, 5};
  int64_t size;
  if (count <= 0) {
    *first = 0;
    return 1;
  }
  if (s->seq_end[which] - s->seq_next[which] >= count) {
    *first = s->seq_next[which];
    s->seq_next[which] += count;
    *aged = 1;
    return 1;
  }
  size = count > s->seq_block ? count : s->seq_block;
  if (!ms_next_seq(s, names[which], lens[which], size, first, be)) return 0;
  s->seq_next[which] = *first + count;
  s->seq_end[which] = *first + size;
  return 1;
}

void ms_drop_seq_blocks(ms_store_t *s) {
  s->seq_next[0] = s->seq_end[0] = s->seq_next[1] = s->seq_end[1] = 0;
}

/* What the server would refuse in a document only after the counters moved
 * (an empty key, at any depth) is refused here, before any write. */
int ms_check_storable(const bson_t *doc, const char *what, ms_err_t *e) {
  size_t offset = 0;
  if (!bson_validate(doc, BSON_VALIDATE_EMPTY_KEYS, &offset)) {
    ms_err_set(e, "invalid", "%s: an empty key (at byte %u)", what, (unsigned)offset);
    return -1;
  }
  return 0;
}

/* ---- connect ---- */

static int opt_field(lua_State *L, int opts, const char *name) {
  if (opts == 0) { lua_pushnil(L); return LUA_TNIL; }
  return lua_getfield(L, opts, name);
}

/* fields: up to three keys, ascending, NULL-terminated; partial: the
 * index's partialFilterExpression, or NULL */
static int create_partial_index(ms_store_t *s, const char *coll, const char *name, const char *const *fields,
                                const bson_t *partial, bson_error_t *be) {
  bson_t cmd = BSON_INITIALIZER, idxs, idx, key;
  mongoc_database_t *db = mongoc_client_get_database(s->client, s->db);
  int ok;
  bson_append_utf8(&cmd, "createIndexes", -1, coll, -1);
  bson_append_array_begin(&cmd, "indexes", -1, &idxs);
  bson_append_document_begin(&idxs, "0", 1, &idx);
  bson_append_document_begin(&idx, "key", 3, &key);
  for (; *fields; fields++) bson_append_int32(&key, *fields, -1, 1);
  bson_append_document_end(&idx, &key);
  bson_append_utf8(&idx, "name", 4, name, -1);
  if (partial) bson_append_document(&idx, "partialFilterExpression", 23, partial);
  bson_append_document_end(&idxs, &idx);
  bson_append_array_end(&cmd, &idxs);
  ok = mongoc_database_write_command_with_opts(db, &cmd, NULL, NULL, be);
  bson_destroy(&cmd);
  mongoc_database_destroy(db);
  return ok;
}

static int create_index(ms_store_t *s, const char *coll, const char *name, const char *const *fields,
                        bson_error_t *be) {
  return create_partial_index(s, coll, name, fields, NULL, be);
}

/* The indexes the relays and the listing need, created idempotently: an
 * index that already exists with the same name and key is a no-op. */
static int ensure_indexes(ms_store_t *s, bson_error_t *be) {
  static const char *const outbox[] = {"outbox.seq", NULL}, *const spawns[] = {"spawns.seq", NULL},
                           *const defn[] = {"definition_id", NULL},
                           *const listing[] = {"definition_id", "status", "_id", NULL},
                           *const timers[] = {"next_fire_at", NULL},
                           *const defn_id[] = {"definition_id", "_id", NULL},
                           *const version[] = {"version", NULL};
  const char *coll = mongoc_collection_get_name(s->exes);
  bson_t foreign = BSON_INITIALIZER;
  int ok;
  ms_foreign_index_filter(&foreign);
  /* harel_written holds only the documents harel's store committed last
   * (promoted.c), so finding them examines those and nothing else */
  ok = create_index(s, coll, "outbox_seq", outbox, be) && create_index(s, coll, "spawns_seq", spawns, be) &&
       create_index(s, coll, "definition_id", defn, be) &&
       create_index(s, coll, "definition_status_id", listing, be) &&
       create_index(s, coll, "next_fire_at", timers, be) &&
       create_index(s, coll, "definition_id_id", defn_id, be) &&
       create_partial_index(s, coll, "harel_written", version, &foreign, be);
  bson_destroy(&foreign);
  return ok;
}

/* What connect's opts ask for, defaults filled in. db and prefix point into
 * strings left on the Lua stack until connect returns. */
typedef struct connect_opts {
  const char *db, *prefix;
  double wait;
  int64_t trace_max, dedupe_window, seq_block;
} connect_opts_t;

/* A name option (opts.db, opts.prefix) pushed by opt_field: a wrong type
 * raises; a bad name is an invalid value. */
static int read_name_opt(lua_State *L, const char *what, int allow_dash, size_t max, const char **out) {
  size_t n;
  ms_arg_string(L, -1, what, NULL);
  *out = lua_tolstring(L, -1, &n);
  return ms_valid_name(*out, n, allow_dash) && n <= max ? 0 : -1;
}

/* connect's opts: a wrong type raises; a value out of range is invalid. */
static int read_connect_opts(lua_State *L, int opts, connect_opts_t *o, ms_err_t *e) {
  o->db = "harel";
  o->prefix = NULL;
  o->wait = MS_CONNECT_WAIT;
  o->trace_max = MS_TRACE_MAX;
  o->dedupe_window = MS_DEDUPE_WINDOW;
  o->seq_block = MS_SEQ_BLOCK;
  if (opts) luaL_checktype(L, opts, LUA_TTABLE);
  if (opt_field(L, opts, "db") != LUA_TNIL && read_name_opt(L, "connect: opts.db", 1, 60, &o->db)) {
    ms_err_set(e, "invalid", "connect: database name '%s' is not valid (letters, digits, _ and -)", o->db);
    return -1;
  }
  if (opt_field(L, opts, "prefix") != LUA_TNIL && read_name_opt(L, "connect: opts.prefix", 0, 30, &o->prefix)) {
    ms_err_set(e, "invalid", "connect: prefix '%s' is not valid (letters, digits and _)", o->prefix);
    return -1;
  }
  if (opt_field(L, opts, "trace_max") != LUA_TNIL) {
    ms_arg_number(L, -1, "connect: opts.trace_max");
    if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 0) {
      ms_err_set(e, "invalid", "connect: opts.trace_max must be an integer >= 0");
      return -1;
    }
    o->trace_max = (int64_t)lua_tointeger(L, -1);
  }
  if (opt_field(L, opts, "dedupe_window") != LUA_TNIL) {
    ms_arg_number(L, -1, "connect: opts.dedupe_window");
    if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1 || lua_tointeger(L, -1) > MS_DEDUPE_WINDOW_MAX) {
      ms_err_set(e, "invalid", "connect: opts.dedupe_window must be an integer from 1 to " MS_STR(MS_DEDUPE_WINDOW_MAX));
      return -1;
    }
    o->dedupe_window = (int64_t)lua_tointeger(L, -1);
  }
  if (opt_field(L, opts, "seq_block") != LUA_TNIL) {
    ms_arg_number(L, -1, "connect: opts.seq_block");
    if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1 || lua_tointeger(L, -1) > MS_SEQ_BLOCK_MAX) {
      ms_err_set(e, "invalid", "connect: opts.seq_block must be an integer from 1 to " MS_STR(MS_SEQ_BLOCK_MAX));
      return -1;
    }
    o->seq_block = (int64_t)lua_tointeger(L, -1);
  }
  if (opt_field(L, opts, "wait") != LUA_TNIL) {
    ms_arg_number(L, -1, "connect: opts.wait");
    if (!(lua_tonumber(L, -1) >= 0) || lua_tonumber(L, -1) > 86400) {
      ms_err_set(e, "invalid", "connect: opts.wait must be a number of seconds from 0 to 86400");
      return -1;
    }
    o->wait = lua_tonumber(L, -1);
  }
  return 0;
}

/* The store's collections, named <prefix>_executions, <prefix>_counters,
 * <prefix>_inbox and <prefix>_inbox_claims (or without a prefix). */
static void open_collections(ms_store_t *s, const char *prefix) {
  char coll[128];
  s->harel_named = prefix != NULL;
  snprintf(coll, sizeof coll, "%s%sexecutions", prefix ? prefix : "", prefix ? "_" : "");
  s->exes = mongoc_client_get_collection(s->client, s->db, coll);
  snprintf(coll, sizeof coll, "%s%scounters", prefix ? prefix : "", prefix ? "_" : "");
  s->counters = mongoc_client_get_collection(s->client, s->db, coll);
  snprintf(coll, sizeof coll, "%s%sinbox", prefix ? prefix : "", prefix ? "_" : "");
  s->inbox = mongoc_client_get_collection(s->client, s->db, coll);
  snprintf(coll, sizeof coll, "%s%sinbox_claims", prefix ? prefix : "", prefix ? "_" : "");
  s->inbox_claims = mongoc_client_get_collection(s->client, s->db, coll);
}

static void store_release(ms_store_t *s);

/* connect(uri, opts): parses the URI, then pings until the server answers or
 * opts.wait seconds have passed, so a worker started beside its server waits
 * for it instead of failing. */
static int l_connect(lua_State *L) {
  size_t urilen;
  const char *uristr = luaL_checklstring(L, 1, &urilen);
  connect_opts_t o;
  mongoc_uri_t *uri;
  bson_error_t be;
  ms_err_t e;
  ms_store_t *s;
  int32_t attempt_ms;

  if (read_connect_opts(L, lua_isnoneornil(L, 2) ? 0 : 2, &o, &e)) return ms_push_error(L, &e);
  attempt_ms = ms_attempt_ms(o.wait);
  if (!(uri = ms_parse_uri(uristr, urilen, attempt_ms, "connect", &e))) return ms_push_error(L, &e);

  s = (ms_store_t *)lua_newuserdatauv(L, sizeof *s, 1);
  memset(s, 0, sizeof *s);
  luaL_setmetatable(L, MS_STORE_MT);
  s->password = mongoc_uri_get_password(uri) ? bson_strdup(mongoc_uri_get_password(uri)) : NULL;
  s->db = bson_strdup(o.db);
  s->trace_max = o.trace_max;
  s->dedupe_window = o.dedupe_window;
  s->seq_block = o.seq_block;
  s->pool = ms_pool_for(uri, &be);
  if (!s->pool) {
    mongoc_uri_destroy(uri);
    ms_err_set(&e, "invalid", "connect: %s", be.message);
    return ms_store_push_err(L, s, &e);
  }
  s->socket_timeout_ms = mongoc_uri_get_option_as_int32(uri, MONGOC_URI_SOCKETTIMEOUTMS, MS_SOCKET_TIMEOUT_MS);
  mongoc_uri_destroy(uri);
  s->client = ms_pool_pop(s->pool);
  /* from here on a failure gives the client back to the pool at once:
   * waiting for the garbage collector would leave it taken, and with
   * maxPoolSize=1 the next connect to the URI would wait for it for good */
  if (!ms_wait_for_server(s->client, o.wait, attempt_ms, &be)) {
    int n;
    ms_err_from_bson(&e, &be, "connect");
    n = ms_store_push_err(L, s, &e);
    store_release(s);
    return n;
  }
  s->max_bson = ms_read_max_bson(s->client);
  open_collections(s, o.prefix);
  if (!ensure_indexes(s, &be)) {
    int n = ms_store_push_bson_err(L, s, &be, "connect: create indexes");
    store_release(s);
    return n;
  }
  return 1;
}

/* ---- lifecycle ---- */

static void store_release(ms_store_t *s) {
  if (s->exes) mongoc_collection_destroy(s->exes);
  if (s->counters) mongoc_collection_destroy(s->counters);
  if (s->inbox) mongoc_collection_destroy(s->inbox);
  if (s->inbox_claims) mongoc_collection_destroy(s->inbox_claims);
  if (s->client) ms_pool_push(s->pool, s->client);
  bson_free(s->password);
  bson_free(s->db);
  s->exes = s->counters = s->inbox = s->inbox_claims = NULL;
  s->client = NULL;
  s->password = s->db = NULL;
}

/* store:close(): idempotent; any later call raises "the store is closed". */
static int l_close(lua_State *L) {
  ms_store_t *s = (ms_store_t *)luaL_checkudata(L, 1, MS_STORE_MT);
  store_release(s);
  return 0;
}

static int l_tostring(lua_State *L) {
  ms_store_t *s = (ms_store_t *)luaL_checkudata(L, 1, MS_STORE_MT);
  if (s->client) lua_pushfstring(L, "mongostore.Store (%s.%s)", s->db, mongoc_collection_get_name(s->exes));
  else lua_pushliteral(L, "mongostore.Store (closed)");
  return 1;
}

/* store:stats() -> { find = n, update = n, ..., total = n, reply_bytes = n }:
 * commands started through this store's pool (every store of the process on
 * the same URI), from libmongoc's command monitoring. */
static int l_stats(lua_State *L) {
  STORE_OR_CLOSED(L, s, "stats");
  ms_pool_push_stats(L, s->pool);
  return 1;
}

/* store:info() -> { db, executions, counters, trace_max, max_bson, dedupe_window, seq_block } */
static int l_info(lua_State *L) {
  STORE_OR_CLOSED(L, s, "info");
  lua_createtable(L, 0, 5);
  lua_pushstring(L, s->db);
  lua_setfield(L, -2, "db");
  lua_pushstring(L, mongoc_collection_get_name(s->exes));
  lua_setfield(L, -2, "executions");
  lua_pushstring(L, mongoc_collection_get_name(s->counters));
  lua_setfield(L, -2, "counters");
  lua_pushinteger(L, (lua_Integer)s->trace_max);
  lua_setfield(L, -2, "trace_max");
  lua_pushinteger(L, (lua_Integer)s->max_bson);
  lua_setfield(L, -2, "max_bson");
  lua_pushinteger(L, (lua_Integer)s->dedupe_window);
  lua_setfield(L, -2, "dedupe_window");
  lua_pushinteger(L, (lua_Integer)s->seq_block);
  lua_setfield(L, -2, "seq_block");
  return 1;
}

/* The methods of this file; every other store file sets its own through
 * its ms_open_ function, so a method is registered once, beside its code. */
static const luaL_Reg store_methods[] = {
  {"info", l_info},
  {"stats", l_stats},
  {"close", l_close},
  {NULL, NULL}
};

/* Sets module.connect and module.Store (the method table, also the
 * metatable's __index) in the module table on top of the stack; parts add
 * the other store files' methods (core.c lists them: the module is
 * assembled there alone, so no file here calls back into the files it
 * serves). */
void ms_open_store(lua_State *L, ms_add_methods_t const *parts) {
  ms_new_class(L, MS_STORE_MT, store_methods, parts, l_close, l_close, l_tostring);
  luaL_getmetatable(L, MS_STORE_MT);
  lua_getfield(L, -1, "__index");
  lua_setfield(L, -3, "Store");           /* module.Store: the method table */
  lua_pop(L, 1);
  lua_pushcfunction(L, l_connect);
  lua_setfield(L, -2, "connect");
}
