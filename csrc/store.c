/*
 * store.c - the Store userdata (mongostore.Store): connecting, the CAS commit
 * with its outbox, spawns, timers, dedupe mark and trace step in one update,
 * and the reads and sweeps of the execution-store seed. The Lua layer
 * (lua/mongostore/init.lua) turns Executions and Events into JSON text and
 * back; this file never sees an Execution as a Lua object.
 */
#include "store.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <mongoc/mongoc.h>

/* ---- helpers ---- */

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

/* Removes the URI's password from a message wherever libmongoc echoed it. */
static void scrub(const ms_store_t *s, ms_err_t *e) {
  const char *pw = s ? s->password : NULL;
  size_t pl;
  char *hit;
  if (!pw || !(pl = strlen(pw))) return;
  while ((hit = strstr(e->msg, pw)) != NULL) {
    memmove(hit + 3, hit + pl, strlen(hit + pl) + 1);
    memcpy(hit, "***", 3);
  }
}

int ms_store_push_err(lua_State *L, const ms_store_t *s, ms_err_t *e) {
  scrub(s, e);
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

/* ---- connect ---- */

static int opt_field(lua_State *L, int opts, const char *name) {
  if (opts == 0) { lua_pushnil(L); return LUA_TNIL; }
  return lua_getfield(L, opts, name);
}

/* A name for databases and collection prefixes: what MongoDB accepts. */
static int valid_name(const char *s, size_t n, int allow_dash) {
  size_t i;
  if (n == 0 || n > 60) return 0;
  for (i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          (allow_dash && c == '-')))
      return 0;
  }
  return 1;
}

static int ping(mongoc_client_t *client, bson_error_t *be) {
  bson_t cmd = BSON_INITIALIZER;
  int ok;
  bson_append_int32(&cmd, "ping", 4, 1);
  ok = mongoc_client_command_simple(client, "admin", &cmd, NULL, NULL, be);
  bson_destroy(&cmd);
  return ok;
}

static int32_t read_max_bson(mongoc_client_t *client) {
  bson_error_t be;
  int32_t max = MS_DEFAULT_MAX_BSON;
  mongoc_server_description_t *sd = mongoc_client_select_server(client, true, NULL, &be);
  if (sd) {
    const bson_t *hello = mongoc_server_description_hello_response(sd);
    bson_iter_t it;
    if (hello && bson_iter_init_find(&it, hello, "maxBsonObjectSize") && BSON_ITER_HOLDS_NUMBER(&it)) {
      int64_t v = bson_iter_as_int64(&it);
      if (v > 1024 && v < INT32_MAX) max = (int32_t)v;
    }
    mongoc_server_description_destroy(sd);
  }
  return max;
}

/* fields: up to three keys, ascending, NULL-terminated */
static int create_index(ms_store_t *s, const char *coll, const char *name, const char *const *fields,
                        bson_error_t *be) {
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
  bson_append_document_end(&idxs, &idx);
  bson_append_array_end(&cmd, &idxs);
  ok = mongoc_database_write_command_with_opts(db, &cmd, NULL, NULL, be);
  bson_destroy(&cmd);
  mongoc_database_destroy(db);
  return ok;
}

/* The indexes the relays and the listing need, created idempotently: an
 * index that already exists with the same name and key is a no-op. */
static int ensure_indexes(ms_store_t *s, bson_error_t *be) {
  static const char *const outbox[] = {"outbox.seq", NULL}, *const spawns[] = {"spawns.seq", NULL},
                           *const defn[] = {"definition_id", NULL},
                           *const listing[] = {"definition_id", "status", "_id", NULL},
                           *const timers[] = {"next_fire_at", NULL},
                           *const defn_id[] = {"definition_id", "_id", NULL};
  const char *coll = mongoc_collection_get_name(s->exes);
  return create_index(s, coll, "outbox_seq", outbox, be) && create_index(s, coll, "spawns_seq", spawns, be) &&
         create_index(s, coll, "definition_id", defn, be) &&
         create_index(s, coll, "definition_status_id", listing, be) &&
         create_index(s, coll, "next_fire_at", timers, be) &&
         create_index(s, coll, "definition_id_id", defn_id, be);
}

/* connect(uri, opts): parses the URI, then pings until the server answers or
 * opts.wait seconds have passed, so a worker started beside its server waits
 * for it instead of failing. */
static int l_connect(lua_State *L) {
  size_t urilen;
  const char *uristr = luaL_checklstring(L, 1, &urilen);
  int opts = lua_isnoneornil(L, 2) ? 0 : 2;
  const char *db = "harel", *prefix = NULL;
  double wait = 30;
  int64_t trace_max = 200, dedupe_window = MS_DEDUPE_WINDOW;
  mongoc_uri_t *uri;
  bson_error_t be;
  ms_err_t e;
  ms_store_t *s;
  double deadline;
  int32_t attempt_ms;
  char coll[128];

  if (opts) luaL_checktype(L, 2, LUA_TTABLE);
  if (opt_field(L, opts, "db") != LUA_TNIL) {
    size_t n;
    ms_arg_string(L, -1, "connect: opts.db", NULL);
    db = lua_tolstring(L, -1, &n);
    if (!valid_name(db, n, 1)) {
      ms_err_set(&e, "invalid", "connect: database name '%s' is not valid (letters, digits, _ and -)", db);
      return ms_push_error(L, &e);
    }
  }
  if (opt_field(L, opts, "prefix") != LUA_TNIL) {
    size_t n;
    ms_arg_string(L, -1, "connect: opts.prefix", NULL);
    prefix = lua_tolstring(L, -1, &n);
    if (!valid_name(prefix, n, 0) || n > 30) {
      ms_err_set(&e, "invalid", "connect: prefix '%s' is not valid (letters, digits and _)", prefix);
      return ms_push_error(L, &e);
    }
  }
  /* a wrong type raises; a number out of range is an invalid value */
  if (opt_field(L, opts, "trace_max") != LUA_TNIL) {
    ms_arg_number(L, -1, "connect: opts.trace_max");
    if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 0) {
      ms_err_set(&e, "invalid", "connect: opts.trace_max must be an integer >= 0");
      return ms_push_error(L, &e);
    }
    trace_max = (int64_t)lua_tointeger(L, -1);
  }
  if (opt_field(L, opts, "dedupe_window") != LUA_TNIL) {
    ms_arg_number(L, -1, "connect: opts.dedupe_window");
    /* at most 8 MB of digests, so a document always has room for them */
    if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1 || lua_tointeger(L, -1) > 1000000) {
      ms_err_set(&e, "invalid", "connect: opts.dedupe_window must be an integer from 1 to 1000000");
      return ms_push_error(L, &e);
    }
    dedupe_window = (int64_t)lua_tointeger(L, -1);
  }
  if (opt_field(L, opts, "wait") != LUA_TNIL) {
    ms_arg_number(L, -1, "connect: opts.wait");
    if (!(lua_tonumber(L, -1) >= 0) || lua_tonumber(L, -1) > 86400) {
      ms_err_set(&e, "invalid", "connect: opts.wait must be a number of seconds from 0 to 86400");
      return ms_push_error(L, &e);
    }
    wait = lua_tonumber(L, -1);
  }

  if (strlen(uristr) != urilen) {
    ms_err_set(&e, "invalid", "connect: the URI contains a NUL byte");
    return ms_push_error(L, &e);
  }
  ms_log_quiet = 1;
  uri = mongoc_uri_new_with_error(uristr, &be);
  ms_log_quiet = 0;
  if (!uri) {
    /* The message may quote the URI: report only that it is malformed. */
    ms_err_set(&e, "invalid", "connect: malformed MongoDB URI (%s)",
               strstr(be.message, "://") ? "see the URI format" : be.message);
    return ms_push_error(L, &e);
  }
  attempt_ms = (int32_t)fmin(fmax(wait * 1000.0, 100.0), MS_CONNECT_ATTEMPT_MS);
  if (!mongoc_uri_has_option(uri, MONGOC_URI_CONNECTTIMEOUTMS))
    mongoc_uri_set_option_as_int32(uri, MONGOC_URI_CONNECTTIMEOUTMS, attempt_ms);
  if (!mongoc_uri_has_option(uri, MONGOC_URI_SERVERSELECTIONTIMEOUTMS))
    mongoc_uri_set_option_as_int32(uri, MONGOC_URI_SERVERSELECTIONTIMEOUTMS, attempt_ms);
  if (!mongoc_uri_has_option(uri, MONGOC_URI_SOCKETTIMEOUTMS))
    mongoc_uri_set_option_as_int32(uri, MONGOC_URI_SOCKETTIMEOUTMS, MS_SOCKET_TIMEOUT_MS);

  s = (ms_store_t *)lua_newuserdatauv(L, sizeof *s, 1);
  memset(s, 0, sizeof *s);
  luaL_setmetatable(L, MS_STORE_MT);
  s->password = mongoc_uri_get_password(uri) ? bson_strdup(mongoc_uri_get_password(uri)) : NULL;
  s->db = bson_strdup(db);
  s->trace_max = trace_max;
  s->dedupe_window = dedupe_window;

  s->pool = ms_pool_for(uri, &be);
  if (!s->pool) {
    mongoc_uri_destroy(uri);
    ms_err_set(&e, "invalid", "connect: %s", be.message);
    return ms_store_push_err(L, s, &e);
  }
  s->socket_timeout_ms = mongoc_uri_get_option_as_int32(uri, MONGOC_URI_SOCKETTIMEOUTMS, MS_SOCKET_TIMEOUT_MS);
  s->client = ms_pool_pop(s->pool);
  deadline = ms_now() + wait;
  /* The pool's monitor reconnects in the background; each ping waits at most
   * one attempt for a server, and the loop keeps trying until `wait` is up. */
  while (!ping(s->client, &be)) {
    /* another attempt may take attempt_ms: do not start one that ends past `wait` */
    if (be.domain == MONGOC_ERROR_SERVER || ms_now() + attempt_ms / 1000.0 > deadline + 0.05) {
      mongoc_uri_destroy(uri);
      ms_err_from_bson(&e, &be, "connect");
      return ms_store_push_err(L, s, &e);
    }
    {
      double left = deadline - ms_now();
      struct timespec ts;
      double pause = left < 0.25 ? (left > 0 ? left : 0) : 0.25;
      ts.tv_sec = 0;
      ts.tv_nsec = (long)(pause * 1e9);
      nanosleep(&ts, NULL);
    }
  }
  mongoc_uri_destroy(uri);

  s->max_bson = read_max_bson(s->client);
  snprintf(coll, sizeof coll, "%s%sexecutions", prefix ? prefix : "", prefix ? "_" : "");
  s->exes = mongoc_client_get_collection(s->client, s->db, coll);
  snprintf(coll, sizeof coll, "%s%scounters", prefix ? prefix : "", prefix ? "_" : "");
  s->counters = mongoc_client_get_collection(s->client, s->db, coll);
  if (!ensure_indexes(s, &be)) return ms_store_push_bson_err(L, s, &be, "connect: create indexes");
  return 1;
}

/* ---- commit ---- */


typedef struct commit_in {
  const char *id, *definition_id, *data, *processed, *status, *parent_id;
  size_t id_len, def_len, data_len, processed_len, status_len, parent_len;
  double min_fire;         /* earliest fire_at scheduled by this commit, or MS_NO_TIMER */
  int64_t old;
  int n_emits, n_spawns;
  bson_t emits;            /* array of { target_id, event } without seq */
  bson_t spawns;           /* array of { child_id, root_path, context } without seq */
  bson_t set_timers;       /* "timers.<enc>" -> fire_at */
  bson_t unset_timers;     /* "timers.<enc>" -> "" */
  bson_t trace;            /* the step, without index unless the caller gave one */
  int has_trace;
  const char *dd_in;       /* the dedupe digests the caller loaded (see below) */
  size_t dd_in_len;
  uint8_t digest[MS_DIGEST];
  uint8_t *dd_out;         /* the digests this commit stores, when it marks an event */
  size_t dd_out_len;
} commit_in_t;

static void commit_in_destroy(commit_in_t *c) {
  bson_free(c->dd_out);
  c->dd_out = NULL;
  bson_destroy(&c->emits);
  bson_destroy(&c->spawns);
  bson_destroy(&c->set_timers);
  bson_destroy(&c->unset_timers);
  bson_destroy(&c->trace);
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

/* The list at the top of the stack: a table whose keys are 1..n (or marked
 * as an array), never a table with other keys, which would be half-read. */
static int list_length(lua_State *L, const char *what, lua_Integer *n, ms_err_t *e) {
  size_t len = 0;
  if (!lua_istable(L, -1) || ms_table_kind(L, -1, &len, e) != MS_KIND_ARRAY) {
    /* an empty table is an empty list */
    if (lua_istable(L, -1)) {
      lua_pushnil(L);
      if (lua_next(L, -2) == 0) { *n = 0; return 0; }
      lua_pop(L, 2);
    }
    ms_err_set(e, "invalid", "%s must be a list (keys 1..n) of tables", what);
    return -1;
  }
  *n = (lua_Integer)len;
  return 0;
}

/* Reads ops.emits: { { target_id = string|nil, event = "<Event JSON>" }, ... }
 * (the Lua layer has serialised each event already). */
static int read_emits(lua_State *L, int ops, commit_in_t *c, ms_err_t *e) {
  lua_Integer i, n;
  if (lua_getfield(L, ops, "emits") == LUA_TNIL) { lua_pop(L, 1); return 0; }
  if (list_length(L, "emits", &n, e)) {
    lua_pop(L, 1);
    return -1;
  }
  for (i = 1; i <= n; i++) {
    char ik[24];
    const char *ikey;
    size_t iklen = bson_uint32_to_string((uint32_t)(i - 1), &ikey, ik, sizeof ik);
    bson_t entry;
    size_t len;
    const char *s;
    lua_rawgeti(L, -1, i);
    bson_append_document_begin(&c->emits, ikey, (int)iklen, &entry);
    lua_getfield(L, -1, "target_id");
    if (lua_isnil(L, -1) || ms_is_null(L, -1)) {
      bson_append_null(&entry, "target_id", 9);
    } else if (lua_type(L, -1) == LUA_TSTRING) {
      s = lua_tolstring(L, -1, &len);
      if (ms_text_error(s, len)) {
        ms_err_set(e, "invalid", "emits[%d].target_id %s", (int)i, ms_text_error(s, len));
        lua_pop(L, 3);
        return -1;
      }
      bson_append_utf8(&entry, "target_id", 9, s, (int)len);
    } else {
      ms_err_set(e, "invalid", "emits[%d].target_id must be a string, got %s", (int)i, luaL_typename(L, -1));
      lua_pop(L, 3);
      return -1;
    }
    lua_pop(L, 1);
    lua_getfield(L, -1, "event");
    s = lua_tolstring(L, -1, &len);
    bson_append_utf8(&entry, "event", 5, s, (int)len);
    lua_pop(L, 2);
    bson_append_document_end(&c->emits, &entry);
  }
  c->n_emits = (int)n;
  lua_pop(L, 1);
  return 0;
}

static int read_spawns(lua_State *L, int ops, commit_in_t *c, ms_err_t *e) {
  lua_Integer i, n;
  if (lua_getfield(L, ops, "spawns") == LUA_TNIL) { lua_pop(L, 1); return 0; }
  if (list_length(L, "spawns", &n, e)) {
    lua_pop(L, 1);
    return -1;
  }
  for (i = 1; i <= n; i++) {
    char ik[24], what[48];
    const char *ikey, *s;
    size_t iklen = bson_uint32_to_string((uint32_t)(i - 1), &ikey, ik, sizeof ik), len;
    bson_t entry;
    ms_path_t p;
    int rc;
    lua_rawgeti(L, -1, i);
    if (!lua_istable(L, -1)) {
      ms_err_set(e, "invalid", "spawns[%d] must be a table, got %s", (int)i, luaL_typename(L, -1));
      lua_pop(L, 2);
      return -1;
    }
    bson_append_document_begin(&c->spawns, ikey, (int)iklen, &entry);
    bson_append_utf8(&entry, "parent_id", 9, c->id, (int)c->id_len);
    lua_getfield(L, -1, "child_id");
    if (lua_type(L, -1) != LUA_TSTRING || (s = lua_tolstring(L, -1, &len), ms_text_error(s, len))) {
      ms_err_set(e, "invalid", "spawns[%d].child_id must be a non-empty string", (int)i);
      lua_pop(L, 3);
      return -1;
    }
    bson_append_utf8(&entry, "child_id", 8, s, (int)len);
    lua_pop(L, 1);
    lua_getfield(L, -1, "root_path");
    if (lua_type(L, -1) != LUA_TSTRING || (s = lua_tolstring(L, -1, &len), !bson_utf8_validate(s, len, false))) {
      ms_err_set(e, "invalid", "spawns[%d].root_path must be a string", (int)i);
      lua_pop(L, 3);
      return -1;
    }
    bson_append_utf8(&entry, "root_path", 9, s, (int)len);
    lua_pop(L, 1);
    snprintf(what, sizeof what, "spawns[%d].context", (int)i);
    ms_path_init(&p, what);
    if (lua_getfield(L, -1, "context") == LUA_TNIL) {
      bson_t empty;
      bson_append_document_begin(&entry, "context", 7, &empty);
      bson_append_document_end(&entry, &empty);
      rc = 0;
    } else if (!lua_istable(L, -1)) {
      ms_err_set(e, "invalid", "%s must be a table", what);
      rc = -1;
    } else {
      size_t alen;
      rc = ms_table_kind(L, -1, &alen, e);
      if (rc == MS_KIND_ARRAY) {
        ms_err_set(e, "invalid", "%s must be a table with string keys", what);
        rc = -1;
      } else if (rc < 0) {
        ms_err_prefix(e, what);
      } else {
        rc = ms_append_value(L, -1, &entry, "context", 7, &p, e);
      }
    }
    lua_pop(L, 2);
    if (rc) { lua_pop(L, 1); return -1; }
    bson_append_document_end(&c->spawns, &entry);
  }
  c->n_spawns = (int)n;
  lua_pop(L, 1);
  return ms_check_storable(&c->spawns, "spawns", e);
}

static int read_timers(lua_State *L, int ops, commit_in_t *c, ms_err_t *e) {
  lua_Integer i, n;
  if (lua_getfield(L, ops, "timers") == LUA_TNIL) { lua_pop(L, 1); return 0; }
  if (list_length(L, "timers", &n, e)) {
    lua_pop(L, 1);
    return -1;
  }
  for (i = 1; i <= n; i++) {
    const char *action, *path;
    size_t plen;
    bson_string_t *key = NULL;
    int schedule;
    lua_rawgeti(L, -1, i);
    if (!lua_istable(L, -1)) {
      ms_err_set(e, "invalid", "timers[%d] must be a table, got %s", (int)i, luaL_typename(L, -1));
      lua_pop(L, 2);
      return -1;
    }
    lua_getfield(L, -1, "action");
    action = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
    schedule = strcmp(action, "schedule") == 0;
    if (!schedule && strcmp(action, "cancel") != 0) {
      ms_err_set(e, "invalid", "timers[%d].action must be \"schedule\" or \"cancel\"", (int)i);
      lua_pop(L, 3);
      return -1;
    }
    lua_pop(L, 1);
    lua_getfield(L, -1, "path");
    if (lua_type(L, -1) != LUA_TSTRING) {
      ms_err_set(e, "invalid", "timers[%d].path must be a string", (int)i);
      lua_pop(L, 3);
      return -1;
    }
    path = lua_tolstring(L, -1, &plen);
    if (ms_encode_path(path, plen, &key, e)) {
      ms_err_prefix(e, "timers");
      lua_pop(L, 3);
      return -1;
    }
    lua_pop(L, 1);
    if (schedule) {
      double at;
      lua_getfield(L, -1, "fire_at");
      if (lua_type(L, -1) != LUA_TNUMBER || !isfinite(at = lua_tonumber(L, -1))) {
        ms_err_set(e, "invalid", "timers[%d].fire_at must be a finite number (epoch seconds)", (int)i);
        bson_string_free(key, true);
        lua_pop(L, 3);
        return -1;
      }
      bson_append_double(&c->set_timers, key->str, (int)key->len, at);
      if (at < c->min_fire) c->min_fire = at;
      lua_pop(L, 1);
    } else {
      bson_append_utf8(&c->unset_timers, key->str, (int)key->len, "", 0);
    }
    bson_string_free(key, true);
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  {
    /* one update cannot both set and unset a key: the server would refuse it */
    bson_iter_t it, other;
    if (bson_iter_init(&it, &c->unset_timers)) {
      while (bson_iter_next(&it)) {
        if (bson_iter_init_find(&other, &c->set_timers, bson_iter_key(&it))) {
          ms_err_set(e, "invalid", "timers: '%s' is both scheduled and cancelled", bson_iter_key(&it) + 7);
          return -1;
        }
      }
    }
  }
  return 0;
}

static int read_trace_step(lua_State *L, int ops, commit_in_t *c, ms_err_t *e) {
  if (lua_getfield(L, ops, "trace") == LUA_TNIL) { lua_pop(L, 1); return 0; }
  if (ms_table_to_bson(L, -1, &c->trace, "trace", e) || ms_check_step(&c->trace, "trace", e)) {
    lua_pop(L, 1);
    return -1;
  }
  c->has_trace = 1;
  lua_pop(L, 1);
  return 0;
}

/* Appends entries of src (an array of documents) to dst under key as an
 * array, giving the i-th entry seq = first + i as its first field. */
static void append_with_seqs(bson_t *dst, const char *key, const bson_t *src, int64_t first) {
  bson_t arr;
  bson_iter_t it;
  int64_t i = 0;
  bson_append_array_begin(dst, key, -1, &arr);
  if (bson_iter_init(&it, src)) {
    while (bson_iter_next(&it)) {
      char ik[24];
      const char *ikey;
      size_t iklen = bson_uint32_to_string((uint32_t)i, &ikey, ik, sizeof ik);
      bson_t entry, inner;
      const uint8_t *data;
      uint32_t len;
      bson_iter_document(&it, &len, &data);
      bson_init_static(&inner, data, len);
      bson_append_document_begin(&arr, ikey, (int)iklen, &entry);
      bson_append_int64(&entry, "seq", 3, first + i);
      bson_concat(&entry, &inner);
      bson_append_document_end(&arr, &entry);
      i++;
    }
  }
  bson_append_array_end(dst, &arr);
}

typedef struct seqs {
  int64_t outbox, spawn, trace;
} seqs_t;

/* status and parent_id, promoted from data so the listing filters on the
 * server; every commit keeps them current. */
static void append_promoted(bson_t *d, const commit_in_t *c) {
  bson_append_utf8(d, "status", 6, c->status, (int)c->status_len);
  if (c->parent_id) bson_append_utf8(d, "parent_id", 9, c->parent_id, (int)c->parent_len);
  else bson_append_null(d, "parent_id", 9);
}

static void build_update(const ms_store_t *s, const commit_in_t *c, const seqs_t *q, bson_t *u) {
  bson_t set, push, each, spec, min;
  bson_append_document_begin(u, "$set", 4, &set);
  bson_append_utf8(&set, "data", 4, c->data, (int)c->data_len);
  bson_append_int64(&set, "version", 7, c->old + 1);
  if (c->old == 0) bson_append_utf8(&set, "definition_id", 13, c->definition_id, (int)c->def_len);
  append_promoted(&set, c);
  if (c->processed) bson_append_binary(&set, "dedupe", 6, BSON_SUBTYPE_BINARY, c->dd_out, (uint32_t)c->dd_out_len);
  bson_concat(&set, &c->set_timers);
  bson_append_document_end(u, &set);
  if (c->min_fire < MS_NO_TIMER) {
    /* never later than the earliest armed timer; the sweep raises it */
    bson_append_document_begin(u, "$min", 4, &min);
    bson_append_double(&min, "next_fire_at", 12, c->min_fire);
    bson_append_document_end(u, &min);
  }
  if (!bson_empty(&c->unset_timers)) bson_append_document(u, "$unset", 6, &c->unset_timers);
  if (c->n_emits || c->n_spawns || c->has_trace || c->processed) {
    bson_append_document_begin(u, "$push", 5, &push);
    if (c->n_emits) {
      bson_append_document_begin(&push, "outbox", 6, &spec);
      append_with_seqs(&spec, "$each", &c->emits, q->outbox);
      bson_append_document_end(&push, &spec);
    }
    if (c->n_spawns) {
      bson_append_document_begin(&push, "spawns", 6, &spec);
      append_with_seqs(&spec, "$each", &c->spawns, q->spawn);
      bson_append_document_end(&push, &spec);
    }
    if (c->has_trace) ms_append_trace_push(&push, &c->trace, q->trace, s->trace_max);
    if (c->processed) {
      /* the readable tail of the dedupe marks; the filter made sure the id
       * is not in it yet */
      bson_append_document_begin(&push, "processed", 9, &spec);
      bson_append_array_begin(&spec, "$each", 5, &each);
      bson_append_utf8(&each, "0", 1, c->processed, (int)c->processed_len);
      bson_append_array_end(&spec, &each);
      bson_append_int64(&spec, "$slice", 6, -ms_dedupe_tail(s));
      bson_append_document_end(&push, &spec);
    }
    bson_append_document_end(u, &push);
  }
}

/* The first insert carries every embedded field, so later $push, $set and
 * $addToSet always find an array or sub-document to work on. */
static void build_insert(const ms_store_t *s, const commit_in_t *c, const seqs_t *q, bson_t *d) {
  bson_t arr, timers;
  bson_iter_t it;
  bson_append_utf8(d, "_id", 3, c->id, (int)c->id_len);
  bson_append_utf8(d, "definition_id", 13, c->definition_id, (int)c->def_len);
  bson_append_int64(d, "version", 7, c->old + 1);
  bson_append_utf8(d, "data", 4, c->data, (int)c->data_len);
  append_promoted(d, c);
  bson_append_double(d, "next_fire_at", 12, c->min_fire);
  append_with_seqs(d, "outbox", &c->emits, q->outbox);
  append_with_seqs(d, "spawns", &c->spawns, q->spawn);
  bson_append_array_begin(d, "processed", 9, &arr);
  if (c->processed) bson_append_utf8(&arr, "0", 1, c->processed, (int)c->processed_len);
  bson_append_array_end(d, &arr);
  bson_append_binary(d, "dedupe", 6, BSON_SUBTYPE_BINARY, c->dd_out ? c->dd_out : (const uint8_t *)"",
                     (uint32_t)c->dd_out_len);
  bson_append_document_begin(d, "timers", 6, &timers);
  if (bson_iter_init(&it, &c->set_timers)) {
    while (bson_iter_next(&it))   /* keys are "timers.<enc>": drop the prefix */
      bson_append_double(&timers, bson_iter_key(&it) + 7, (int)bson_iter_key_len(&it) - 7,
                         bson_iter_double(&it));
  }
  bson_append_document_end(d, &timers);
  bson_append_array_begin(d, "trace", 5, &arr);
  if (c->has_trace) ms_append_trace_step(&arr, "0", &c->trace, q->trace);
  bson_append_array_end(d, &arr);
  (void)s;
}

/* The version of the stored document: 1 and *found set, 0 when there is no
 * document, -1 on error. A document with no version (a trace-only stub made
 * by append_trace) reports found = 0. */
static int find_version(ms_store_t *s, const char *id, size_t idlen, int64_t *found, bson_error_t *be) {
  bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, proj;
  mongoc_cursor_t *cur;
  const bson_t *doc;
  int rc = 0;
  bson_append_utf8(&filter, "_id", 3, id, (int)idlen);
  bson_append_document_begin(&opts, "projection", 10, &proj);
  bson_append_int32(&proj, "version", 7, 1);
  bson_append_document_end(&opts, &proj);
  bson_append_int64(&opts, "limit", 5, 1);
  cur = mongoc_collection_find_with_opts(s->exes, &filter, &opts, NULL);
  if (mongoc_cursor_next(cur, &doc)) {
    bson_iter_t it;
    rc = 1;
    *found = (bson_iter_init_find(&it, doc, "version") && BSON_ITER_HOLDS_NUMBER(&it)) ? bson_iter_as_int64(&it) : 0;
  } else if (mongoc_cursor_error(cur, be)) {
    rc = -1;
  }
  mongoc_cursor_destroy(cur);
  bson_destroy(&filter);
  bson_destroy(&opts);
  return rc;
}

static int64_t reply_count(const bson_t *reply, const char *field) {
  bson_iter_t it;
  if (bson_iter_init_find(&it, reply, field) && BSON_ITER_HOLDS_NUMBER(&it)) return bson_iter_as_int64(&it);
  return 0;
}

/* The CAS update: filter on _id and the loaded version, and, when the commit
 * marks an event processed, on that event not being marked yet. For a
 * version-0 commit the filter also takes a document with no version, which
 * is a stub that append_trace created before the first commit. */
static int cas_update(ms_store_t *s, const commit_in_t *c, const bson_t *update, int64_t *matched,
                      bson_error_t *be) {
  bson_t filter = BSON_INITIALIZER, reply;
  int ok;
  bson_append_utf8(&filter, "_id", 3, c->id, (int)c->id_len);
  if (c->old == 0) {
    bson_t in, arr;
    bson_append_document_begin(&filter, "version", 7, &in);
    bson_append_array_begin(&in, "$in", 3, &arr);
    bson_append_int64(&arr, "0", 1, 0);
    bson_append_null(&arr, "1", 1);
    bson_append_array_end(&in, &arr);
    bson_append_document_end(&filter, &in);
  } else {
    bson_append_int64(&filter, "version", 7, c->old);
  }
  if (c->processed) {
    /* the dedupe guard: an event is marked once, whatever the caller loaded */
    bson_t ne;
    bson_append_document_begin(&filter, "processed", 9, &ne);
    bson_append_utf8(&ne, "$ne", 3, c->processed, (int)c->processed_len);
    bson_append_document_end(&filter, &ne);
  }
  ok = mongoc_collection_update_one(s->exes, &filter, update, NULL, &reply, be);
  if (ok) *matched = reply_count(&reply, "matchedCount");
  bson_destroy(&reply);
  bson_destroy(&filter);
  return ok;
}

/* nil, msg, "duplicate", version: the commit's event is marked already */
static int push_duplicate(lua_State *L, const commit_in_t *c) {
  lua_pushnil(L);
  lua_pushfstring(L, "commit %s: event %s is already processed", c->id, c->processed);
  lua_pushliteral(L, "duplicate");
  lua_pushinteger(L, (lua_Integer)c->old);
  return 4;
}

static int push_conflict(lua_State *L, const commit_in_t *c, int have, int64_t found) {
  /* the version is the loaded one, so the filter's dedupe guard refused it */
  if (have && found == c->old && c->processed) return push_duplicate(L, c);
  lua_pushnil(L);
  if (have)
    lua_pushfstring(L, "commit %s: version conflict: expected %I, found %I", c->id, (lua_Integer)c->old,
                    (lua_Integer)found);
  else
    lua_pushfstring(L, "commit %s: version conflict: expected %I, found no document", c->id,
                    (lua_Integer)c->old);
  lua_pushliteral(L, "conflict");
  if (have) lua_pushinteger(L, (lua_Integer)found);
  else lua_pushnil(L);
  return 4;
}

/* A commit landed: true, and the digests it stored when it marked an event
 * (the Lua layer keeps them with the execution for its next commit). */
static int push_committed(lua_State *L, commit_in_t *c) {
  lua_pushboolean(L, 1);
  if (c->processed) lua_pushlstring(L, (const char *)c->dd_out, c->dd_out_len);
  commit_in_destroy(c);
  return c->processed ? 2 : 1;
}

/* store:_commit(id, definition_id, old_version, data_json, ops)
 * -> true[, digests] | nil, msg, code[, found] */
static int l_commit(lua_State *L) {
  STORE_OR_CLOSED(L, s, "commit");
  commit_in_t c;
  ms_err_t e;
  bson_error_t be;
  seqs_t q = {0, 0, 0};
  bson_t update = BSON_INITIALIZER;
  int64_t matched = 0, found = 0;
  int rc, have;
  char doing[160];

  memset(&c, 0, sizeof c);
  if (!(c.id = ms_check_id(L, 2, "commit: execution id", &c.id_len, &e))) return ms_push_error(L, &e);
  if (!(c.definition_id = ms_check_id(L, 3, "commit: definition_id", &c.def_len, &e))) return ms_push_error(L, &e);
  c.old = ms_arg_integer(L, 4, "commit: version");
  c.data = ms_arg_string(L, 5, "commit: data", &c.data_len);
  ms_arg_table(L, 6, "commit: opts");
  snprintf(doing, sizeof doing, "commit %.100s", c.id);
  if (c.old < 0) {
    ms_err_set(&e, "invalid", "%s: version %lld is negative", doing, (long long)c.old);
    return ms_push_error(L, &e);
  }
  c.min_fire = MS_NO_TIMER;
  c.status = "PENDING";
  c.status_len = 7;
  if (lua_getfield(L, 6, "status") == LUA_TSTRING) c.status = lua_tolstring(L, -1, &c.status_len);
  lua_pop(L, 1);
  if (lua_getfield(L, 6, "parent_id") == LUA_TSTRING) c.parent_id = lua_tolstring(L, -1, &c.parent_len);
  lua_pop(L, 1);
  if (lua_getfield(L, 6, "processed_event_id") != LUA_TNIL) {
    if (!(c.processed = ms_check_id(L, -1, "commit: processed_event_id", &c.processed_len, &e)))
      return ms_push_error(L, &e);
  }
  lua_pop(L, 1);
  /* the digests loaded with the execution (a string kept by the Lua layer;
   * the Lua strings stay referenced by the caller's table while we run) */
  if (lua_getfield(L, 6, "dedupe") == LUA_TSTRING) c.dd_in = lua_tolstring(L, -1, &c.dd_in_len);
  lua_pop(L, 1);
  if (c.processed) {
    ms_ev_digest(c.processed, c.processed_len, c.digest);
    if (ms_digests_hold((const uint8_t *)c.dd_in, c.dd_in_len, c.digest)) return push_duplicate(L, &c);
    c.dd_out = ms_digests_add(s, c.dd_in, c.dd_in_len, c.digest, &c.dd_out_len);
  }
  bson_init(&c.emits);
  bson_init(&c.spawns);
  bson_init(&c.set_timers);
  bson_init(&c.unset_timers);
  bson_init(&c.trace);
  if (read_emits(L, 6, &c, &e) || read_spawns(L, 6, &c, &e) || read_timers(L, 6, &c, &e) ||
      read_trace_step(L, 6, &c, &e)) {
    commit_in_destroy(&c);
    ms_err_prefix(&e, doing);
    return ms_push_error(L, &e);
  }
  /* What the update itself ships is known now: refuse it before any write
   * when it cannot fit the server's limit. */
  if ((int64_t)c.data_len + c.emits.len + c.spawns.len + c.set_timers.len + c.trace.len + (int64_t)c.dd_out_len + 1024 >
      (int64_t)s->max_bson) {
    commit_in_destroy(&c);
    ms_err_set(&e, "too_large", "%s: the update is larger than the server's maximum document size (%d bytes)",
               doing, (int)s->max_bson);
    return ms_push_error(L, &e);
  }

  if ((c.n_emits && !ms_next_seq(s, "outbox", 6, c.n_emits, &q.outbox, &be)) ||
      (c.n_spawns && !ms_next_seq(s, "spawn", 5, c.n_spawns, &q.spawn, &be))) {
    commit_in_destroy(&c);
    return ms_store_push_bson_err(L, s, &be, doing);
  }
  if (c.has_trace) {
    int64_t given = ms_step_index(&c.trace, -1);
    if (given >= 0) {
      q.trace = given;
    } else {
      if (!ms_next_trace_index(s, c.id, c.id_len, &q.trace, &be)) {
        commit_in_destroy(&c);
        return ms_store_push_bson_err(L, s, &be, doing);
      }
    }
  }

  if (c.old == 0) {
    /* A first commit is usually a new execution: insert it in one round
     * trip. A duplicate key means the id exists (another writer's, or a
     * trace-only stub that the version-0 update below adopts). */
    bson_t doc = BSON_INITIALIZER;
    build_insert(s, &c, &q, &doc);
    rc = mongoc_collection_insert_one(s->exes, &doc, NULL, NULL, &be);
    bson_destroy(&doc);
    if (rc) return push_committed(L, &c);
    if (!(be.domain == MONGOC_ERROR_SERVER && be.code == MONGOC_ERROR_DUPLICATE_KEY)) {
      commit_in_destroy(&c);
      return ms_store_push_bson_err(L, s, &be, doing);
    }
  }
  build_update(s, &c, &q, &update);
  rc = cas_update(s, &c, &update, &matched, &be);
  bson_destroy(&update);
  if (!rc) {
    commit_in_destroy(&c);
    return ms_store_push_bson_err(L, s, &be, doing);
  }
  if (matched == 1) return push_committed(L, &c);
  /* No document at the loaded version: a stale write (or one that vanished). */
  have = find_version(s, c.id, c.id_len, &found, &be);
  if (have < 0) {
    commit_in_destroy(&c);
    return ms_store_push_bson_err(L, s, &be, doing);
  }
  rc = push_conflict(L, &c, have, found);
  commit_in_destroy(&c);
  return rc;
}

/* ---- reads ---- */

/* A find whose filter is {_id} alone: every server answers it from the _id
 * index (mongo-java-server uses an index only for a filter with exactly its
 * keys). Projects the fields named, up to the first NULL (at most three). */
mongoc_cursor_t *ms_find_one(ms_store_t *s, const char *id, size_t idlen, const char *f1, const char *f2,
                                 const char *f3) {
  bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, proj;
  mongoc_cursor_t *cur;
  bson_append_utf8(&filter, "_id", 3, id, (int)idlen);
  bson_append_document_begin(&opts, "projection", 10, &proj);
  bson_append_int32(&proj, f1, -1, 1);
  if (f2) bson_append_int32(&proj, f2, -1, 1);
  if (f2 && f3) bson_append_int32(&proj, f3, -1, 1);
  bson_append_document_end(&opts, &proj);
  bson_append_int64(&opts, "limit", 5, 1);
  cur = mongoc_collection_find_with_opts(s->exes, &filter, &opts, NULL);
  bson_destroy(&filter);
  bson_destroy(&opts);
  return cur;
}

/* Pushes doc.data (a string) or nil when the document has none (absent, or a
 * trace-only stub). */
void ms_push_data(lua_State *L, const bson_t *doc) {
  bson_iter_t it;
  if (doc && bson_iter_init_find(&it, doc, "data") && BSON_ITER_HOLDS_UTF8(&it)) {
    uint32_t len;
    const char *d = bson_iter_utf8(&it, &len);
    lua_pushlstring(L, d, len);
  } else {
    lua_pushnil(L);
  }
}

/* An optional timer path at idx, as its stored key ("timers.<path>" with
 * '.' encoded) in *out; nothing when the argument is absent or nil. */
static int opt_timer_key(lua_State *L, int idx, const char *fn, bson_string_t **out, ms_err_t *e) {
  size_t plen;
  const char *path;
  *out = NULL;
  if (lua_isnoneornil(L, idx)) return 0;
  if (lua_type(L, idx) != LUA_TSTRING)
    luaL_error(L, "%s: timer_path must be a string, got %s", fn, luaL_typename(L, idx));
  path = lua_tolstring(L, idx, &plen);
  if (ms_encode_path(path, plen, out, e)) {
    ms_err_prefix(e, fn);
    return -1;
  }
  return 0;
}

/* store:_load(id[, timer_path]) -> data_json, armed, digests | nil (absent) | nil, msg, code
 * With a timer path, armed is the fire_at armed for it now (nil when none):
 * the engine's Timeout check, in the same round trip. digests are the
 * execution's dedupe digests, for its next commit. */
static int l_load(lua_State *L) {
  STORE_OR_CLOSED(L, s, "load");
  size_t idlen;
  ms_err_t e;
  bson_error_t be;
  bson_iter_t it;
  const bson_t *doc = NULL;
  const char *id = ms_check_id(L, 2, "load: id", &idlen, &e);
  bson_string_t *tkey = NULL;
  mongoc_cursor_t *cur;
  if (!id) return ms_push_error(L, &e);
  if (opt_timer_key(L, 3, "load", &tkey, &e)) return ms_push_error(L, &e);
  cur = ms_find_one(s, id, idlen, "data", "dedupe", tkey ? tkey->str : NULL);
  if (!mongoc_cursor_next(cur, &doc) && mongoc_cursor_error(cur, &be)) {
    mongoc_cursor_destroy(cur);
    if (tkey) bson_string_free(tkey, true);
    return ms_store_push_bson_err(L, s, &be, "load");
  }
  ms_push_data(L, doc);
  if (tkey && doc && bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, tkey->str, &it) &&
      BSON_ITER_HOLDS_NUMBER(&it))
    lua_pushnumber(L, bson_iter_as_double(&it));
  else
    lua_pushnil(L);
  ms_push_digests(L, doc);
  if (tkey) bson_string_free(tkey, true);
  mongoc_cursor_destroy(cur);
  return 3;
}

/* store:_load_for_event(id, event_id) -> data_json|nil, processed */
static int l_load_for_event(lua_State *L) {
  STORE_OR_CLOSED(L, s, "load_for_event");
  size_t idlen, evlen;
  ms_err_t e;
  bson_error_t be;
  const bson_t *doc = NULL;
  const char *id = ms_check_id(L, 2, "load_for_event: id", &idlen, &e), *ev;
  bson_t pipe = BSON_INITIALIZER, st, inner, proj, hit, in, arr, ifn, ifarr, empty;
  mongoc_cursor_t *cur;
  bson_iter_t it;
  if (!id) return ms_push_error(L, &e);
  bson_string_t *tkey = NULL;
  if (!(ev = ms_check_id(L, 3, "load_for_event: event_id", &evlen, &e))) return ms_push_error(L, &e);
  /* a Timeout's path: also bring back the fire_at armed for it now */
  if (opt_timer_key(L, 4, "load_for_event", &tkey, &e)) return ms_push_error(L, &e);
  /* [{$match:{_id}}, {$project:{data:1, hit:{$in:[ev, {$ifNull:["$processed", []]}]}}}]:
   * the membership test runs on the server; the array never travels. */
  bson_append_document_begin(&pipe, "0", 1, &st);
  bson_append_document_begin(&st, "$match", 6, &inner);
  bson_append_utf8(&inner, "_id", 3, id, (int)idlen);
  bson_append_document_end(&st, &inner);
  bson_append_document_end(&pipe, &st);
  bson_append_document_begin(&pipe, "1", 1, &st);
  bson_append_document_begin(&st, "$project", 8, &proj);
  bson_append_int32(&proj, "data", 4, 1);
  bson_append_int32(&proj, "dedupe", 6, 1);
  bson_append_document_begin(&proj, "hit", 3, &hit);
  bson_append_array_begin(&hit, "$in", 3, &in);
  {
    /* an id such as "$_id" is a value here, never a field path */
    bson_t lit;
    bson_append_document_begin(&in, "0", 1, &lit);
    bson_append_utf8(&lit, "$literal", 8, ev, (int)evlen);
    bson_append_document_end(&in, &lit);
  }
  bson_append_document_begin(&in, "1", 1, &ifn);
  bson_append_array_begin(&ifn, "$ifNull", 7, &ifarr);
  bson_append_utf8(&ifarr, "0", 1, "$processed", 10);
  bson_append_array_begin(&ifarr, "1", 1, &empty);
  bson_append_array_end(&ifarr, &empty);
  bson_append_array_end(&ifn, &ifarr);
  bson_append_document_end(&in, &ifn);
  bson_append_array_end(&hit, &in);
  bson_append_document_end(&proj, &hit);
  if (tkey) {
    bson_t armed, arr2;
    bson_string_t *ref = bson_string_new("$");
    bson_string_append(ref, tkey->str);
    bson_append_document_begin(&proj, "armed", 5, &armed);
    bson_append_array_begin(&armed, "$ifNull", 7, &arr2);
    bson_append_utf8(&arr2, "0", 1, ref->str, (int)ref->len);
    bson_append_null(&arr2, "1", 1);
    bson_append_array_end(&armed, &arr2);
    bson_append_document_end(&proj, &armed);
    bson_string_free(ref, true);
    bson_string_free(tkey, true);
  }
  bson_append_document_end(&st, &proj);
  bson_append_document_end(&pipe, &st);
  (void)arr;
  cur = mongoc_collection_aggregate(s->exes, MONGOC_QUERY_NONE, &pipe, NULL, NULL);
  bson_destroy(&pipe);
  if (!mongoc_cursor_next(cur, &doc) && mongoc_cursor_error(cur, &be)) {
    mongoc_cursor_destroy(cur);
    return ms_store_push_bson_err(L, s, &be, "load_for_event");
  }
  ms_push_data(L, doc);
  lua_pushboolean(L, (doc && bson_iter_init_find(&it, doc, "hit") && bson_iter_as_bool(&it)) ||
                         ms_doc_marks(doc, ev, evlen));
  if (doc && bson_iter_init_find(&it, doc, "armed") && BSON_ITER_HOLDS_NUMBER(&it))
    lua_pushnumber(L, bson_iter_as_double(&it));
  else
    lua_pushnil(L);
  ms_push_digests(L, doc);
  mongoc_cursor_destroy(cur);
  return 4;
}

/* store:is_processed(id, event_id) -> bool: among the digests, else in the
 * `processed` array (harel's marks, or ours before the digests existed). */
static int l_is_processed(lua_State *L) {
  STORE_OR_CLOSED(L, s, "is_processed");
  size_t idlen, evlen;
  ms_err_t e;
  bson_error_t be;
  const bson_t *doc;
  ms_err_t e2;
  const char *id = ms_check_id(L, 2, "is_processed: id", &idlen, &e);
  const char *ev = ms_check_id(L, 3, "is_processed: event_id", &evlen, &e2);
  bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, proj;
  mongoc_cursor_t *cur;
  int hit;
  if (!id) return ms_push_error(L, &e);
  if (!ev) return ms_push_error(L, &e2);
  /* first the digests, by _id; then the `processed` array */
  cur = ms_find_one(s, id, idlen, "dedupe", NULL, NULL);
  hit = mongoc_cursor_next(cur, &doc);
  if (!hit && mongoc_cursor_error(cur, &be)) {
    mongoc_cursor_destroy(cur);
    return ms_store_push_bson_err(L, s, &be, "is_processed");
  }
  hit = hit && ms_doc_marks(doc, ev, evlen);
  mongoc_cursor_destroy(cur);
  if (hit) {
    lua_pushboolean(L, 1);
    return 1;
  }
  bson_append_utf8(&filter, "_id", 3, id, (int)idlen);
  bson_append_utf8(&filter, "processed", 9, ev, (int)evlen);
  bson_append_document_begin(&opts, "projection", 10, &proj);
  bson_append_int32(&proj, "_id", 3, 1);
  bson_append_document_end(&opts, &proj);
  bson_append_int64(&opts, "limit", 5, 1);
  cur = mongoc_collection_find_with_opts(s->exes, &filter, &opts, NULL);
  bson_destroy(&filter);
  bson_destroy(&opts);
  hit = mongoc_cursor_next(cur, &doc);
  if (!hit && mongoc_cursor_error(cur, &be)) {
    mongoc_cursor_destroy(cur);
    return ms_store_push_bson_err(L, s, &be, "is_processed");
  }
  mongoc_cursor_destroy(cur);
  lua_pushboolean(L, hit);
  return 1;
}

/* store:_scan(definition_id|nil, after_id|nil, n) -> { {id, version, data}, ... }
 * n documents at most, by _id, after after_id: the listing's raw material. */
static int l_scan(lua_State *L) {
  STORE_OR_CLOSED(L, s, "list_executions");
  bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, proj, sort, gt;
  mongoc_cursor_t *cur;
  const bson_t *doc;
  bson_error_t be;
  lua_Integer n = (lua_Integer)ms_arg_integer(L, 4, "list_executions: limit"), i = 0;
  ms_err_t e;
  if (!lua_isnil(L, 2)) {
    size_t len;
    const char *d = ms_check_id(L, 2, "list_executions: definition_id", &len, &e);
    if (!d) {
      bson_destroy(&filter);
      return ms_push_error(L, &e);
    }
    bson_append_utf8(&filter, "definition_id", 13, d, (int)len);
  }
  if (!lua_isnil(L, 3)) {
    size_t len;
    const char *a = ms_check_id(L, 3, "list_executions: cursor position", &len, &e);
    if (!a) {
      bson_destroy(&filter);
      return ms_push_error(L, &e);
    }
    bson_append_document_begin(&filter, "_id", 3, &gt);
    bson_append_utf8(&gt, "$gt", 3, a, (int)len);
    bson_append_document_end(&filter, &gt);
  }
  /* statuses (a list) and roots_only on the promoted fields; a document a
   * writer without them left (harel) matches too and is checked by the
   * caller against its data */
  /* statuses as one $in with null (a document a writer without the promoted
   * fields left, harel's, has none: it matches and is checked by the caller
   * against its data); roots_only as parent_id null or absent */
  if (lua_istable(L, 5)) {
    bson_t in, arr;
    lua_Integer j, m = (lua_Integer)luaL_len(L, 5);
    char ik[24];
    const char *ikey;
    size_t iklen;
    bson_append_document_begin(&filter, "status", 6, &in);
    bson_append_array_begin(&in, "$in", 3, &arr);
    for (j = 1; j <= m; j++) {
      size_t sl;
      const char *st;
      iklen = bson_uint32_to_string((uint32_t)(j - 1), &ikey, ik, sizeof ik);
      lua_rawgeti(L, 5, j);
      st = lua_tolstring(L, -1, &sl);
      if (st) bson_append_utf8(&arr, ikey, (int)iklen, st, (int)sl);
      lua_pop(L, 1);
    }
    iklen = bson_uint32_to_string((uint32_t)m, &ikey, ik, sizeof ik);
    bson_append_null(&arr, ikey, (int)iklen);
    bson_append_array_end(&in, &arr);
    bson_append_document_end(&filter, &in);
  }
  if (lua_toboolean(L, 6)) bson_append_null(&filter, "parent_id", 9);
  bson_append_document_begin(&opts, "projection", 10, &proj);
  bson_append_int32(&proj, "version", 7, 1);
  bson_append_int32(&proj, "data", 4, 1);
  bson_append_document_end(&opts, &proj);
  bson_append_document_begin(&opts, "sort", 4, &sort);
  bson_append_int32(&sort, "_id", 3, 1);
  bson_append_document_end(&opts, &sort);
  bson_append_int64(&opts, "limit", 5, (int64_t)n);
  cur = mongoc_collection_find_with_opts(s->exes, &filter, &opts, NULL);
  bson_destroy(&filter);
  bson_destroy(&opts);
  lua_newtable(L);
  while (mongoc_cursor_next(cur, &doc)) {
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

static void store_release(ms_store_t *s) {
  if (s->exes) mongoc_collection_destroy(s->exes);
  if (s->counters) mongoc_collection_destroy(s->counters);
  if (s->client) ms_pool_push(s->pool, s->client);
  bson_free(s->password);
  bson_free(s->db);
  s->exes = s->counters = NULL;
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

/* store:info() -> { db, executions, counters, trace_max, max_bson, dedupe_window } */
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
  return 1;
}

static const luaL_Reg commit_methods[] = {
  {"_commit", l_commit},
  {NULL, NULL}
};

void ms_open_commit(lua_State *L) { luaL_setfuncs(L, commit_methods, 0); }

static const luaL_Reg load_methods[] = {
  {"_load", l_load},
  {"_load_for_event", l_load_for_event},
  {"is_processed", l_is_processed},
  {NULL, NULL}
};

void ms_open_load(lua_State *L) { luaL_setfuncs(L, load_methods, 0); }

static const luaL_Reg list_methods[] = {
  {"_scan", l_scan},
  {"_cursor_key", l_cursor_key},
  {NULL, NULL}
};

void ms_open_list(lua_State *L) { luaL_setfuncs(L, list_methods, 0); }

/* The methods of this file; every other store file sets its own through
 * its ms_open_ function, so a method is registered once, beside its code. */
static const luaL_Reg store_methods[] = {
  {"info", l_info},
  {"stats", l_stats},
  {"close", l_close},
  {NULL, NULL}
};

static void (*const store_parts[])(lua_State *L) = {
  ms_open_commit, ms_open_load, ms_open_list, ms_open_relay, ms_open_timers, ms_open_trace, NULL
};

/* Sets module.connect and module.Store (the method table, also the
 * metatable's __index) in the module table on top of the stack. */
void ms_open_store(lua_State *L) {
  if (luaL_newmetatable(L, MS_STORE_MT)) {
    int i;
    lua_newtable(L);
    luaL_setfuncs(L, store_methods, 0);
    for (i = 0; store_parts[i]; i++) store_parts[i](L);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, l_close);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, l_close);
    lua_setfield(L, -2, "__close");
    lua_pushcfunction(L, l_tostring);
    lua_setfield(L, -2, "__tostring");
  }
  lua_getfield(L, -1, "__index");
  lua_setfield(L, -3, "Store");           /* module.Store: the method table */
  lua_pop(L, 1);
  lua_pushcfunction(L, l_connect);
  lua_setfield(L, -2, "connect");
}
