/*
 * commit_read.c - a commit's arguments read and checked before any I/O:
 * the id, version and data, the event ids it marks, and its opts (emits,
 * spawns, timers, trace steps) converted to BSON, with the size check of
 * the update they make. Bad input is refused here, so nothing is written.
 */
#include "commit.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Frees what reading a commit built (commit_read fills it, commit.c and
 * commit_batch.c use it). */
void ms_commit_in_destroy(commit_in_t *c) {
  bson_free(c->dd_out);
  c->dd_out = NULL;
  bson_destroy(&c->emits);
  bson_destroy(&c->spawns);
  bson_destroy(&c->set_timers);
  bson_destroy(&c->unset_timers);
  bson_destroy(&c->trace);
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

/* The context of spawns[i] (the table on top of the stack) into entry: a
 * table with string keys, or {} when absent. */
static int append_spawn_context(lua_State *L, lua_Integer i, bson_t *entry, ms_err_t *e) {
  char what[48];
  ms_path_t p;
  int rc;
  snprintf(what, sizeof what, "spawns[%d].context", (int)i);
  ms_path_init(&p, what);
  if (lua_getfield(L, -1, "context") == LUA_TNIL) {
    bson_t empty;
    bson_append_document_begin(entry, "context", 7, &empty);
    bson_append_document_end(entry, &empty);
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
      rc = ms_append_value(L, -1, entry, "context", 7, &p, e);
    }
  }
  lua_pop(L, 1);
  return rc;
}

static int read_spawns(lua_State *L, int ops, commit_in_t *c, ms_err_t *e) {
  lua_Integer i, n;
  if (lua_getfield(L, ops, "spawns") == LUA_TNIL) { lua_pop(L, 1); return 0; }
  if (list_length(L, "spawns", &n, e)) {
    lua_pop(L, 1);
    return -1;
  }
  for (i = 1; i <= n; i++) {
    char ik[24];
    const char *ikey, *s;
    size_t iklen = bson_uint32_to_string((uint32_t)(i - 1), &ikey, ik, sizeof ik), len;
    bson_t entry;
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
    rc = append_spawn_context(L, i, &entry, e);
    lua_pop(L, 1);
    if (rc) { lua_pop(L, 1); return -1; }
    bson_append_document_end(&c->spawns, &entry);
  }
  c->n_spawns = (int)n;
  lua_pop(L, 1);
  return ms_check_storable(&c->spawns, "spawns", e);
}

/* timers[i] (the table on top of the stack): a schedule into set_timers
 * (lowering min_fire), a cancel into unset_timers. */
static int read_timer(lua_State *L, lua_Integer i, commit_in_t *c, ms_err_t *e) {
  const char *action, *path;
  size_t plen;
  bson_string_t *key = NULL;
  int schedule;
  lua_getfield(L, -1, "action");
  action = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
  schedule = strcmp(action, "schedule") == 0;
  if (!schedule && strcmp(action, "cancel") != 0) {
    ms_err_set(e, "invalid", "timers[%d].action must be \"schedule\" or \"cancel\"", (int)i);
    lua_pop(L, 1);
    return -1;
  }
  lua_pop(L, 1);
  lua_getfield(L, -1, "path");
  if (lua_type(L, -1) != LUA_TSTRING) {
    ms_err_set(e, "invalid", "timers[%d].path must be a string", (int)i);
    lua_pop(L, 1);
    return -1;
  }
  path = lua_tolstring(L, -1, &plen);
  if (ms_encode_path(path, plen, &key, e)) {
    ms_err_prefix(e, "timers");
    lua_pop(L, 1);
    return -1;
  }
  lua_pop(L, 1);
  if (schedule) {
    double at;
    lua_getfield(L, -1, "fire_at");
    if (lua_type(L, -1) != LUA_TNUMBER || !isfinite(at = lua_tonumber(L, -1))) {
      ms_err_set(e, "invalid", "timers[%d].fire_at must be a finite number (epoch seconds)", (int)i);
      bson_string_free(key, true);
      lua_pop(L, 1);
      return -1;
    }
    bson_append_double(&c->set_timers, key->str, (int)key->len, at);
    if (at < c->min_fire) c->min_fire = at;
    lua_pop(L, 1);
  } else {
    bson_append_utf8(&c->unset_timers, key->str, (int)key->len, "", 0);
  }
  bson_string_free(key, true);
  return 0;
}

/* One update cannot both set and unset a key: the server would refuse it. */
static int check_set_unset(const commit_in_t *c, ms_err_t *e) {
  bson_iter_t it, other;
  if (bson_iter_init(&it, &c->unset_timers)) {
    while (bson_iter_next(&it)) {
      if (bson_iter_init_find(&other, &c->set_timers, bson_iter_key(&it))) {
        ms_err_set(e, "invalid", "timers: '%s' is both scheduled and cancelled", bson_iter_key(&it) + 7);
        return -1;
      }
    }
  }
  return 0;
}

static int read_timers(lua_State *L, int ops, commit_in_t *c, ms_err_t *e) {
  lua_Integer i, n;
  if (lua_getfield(L, ops, "timers") == LUA_TNIL) { lua_pop(L, 1); return 0; }
  if (list_length(L, "timers", &n, e)) {
    lua_pop(L, 1);
    return -1;
  }
  for (i = 1; i <= n; i++) {
    lua_rawgeti(L, -1, i);
    if (!lua_istable(L, -1)) {
      ms_err_set(e, "invalid", "timers[%d] must be a table, got %s", (int)i, luaL_typename(L, -1));
      lua_pop(L, 2);
      return -1;
    }
    if (read_timer(L, i, c, e)) {
      lua_pop(L, 2);
      return -1;
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return check_set_unset(c, e);
}

/* One step (the table on top of the stack) appended to c->trace as entry
 * c->has_trace. */
static int read_one_step(lua_State *L, commit_in_t *c, const char *what, ms_err_t *e) {
  bson_t step = BSON_INITIALIZER;
  char ik[24];
  const char *ikey;
  size_t iklen;
  if (ms_table_to_bson(L, -1, &step, what, e) || ms_check_step(&step, what, e)) {
    bson_destroy(&step);
    return -1;
  }
  iklen = bson_uint32_to_string((uint32_t)c->has_trace, &ikey, ik, sizeof ik);
  bson_append_document(&c->trace, ikey, (int)iklen, &step);
  bson_destroy(&step);
  c->has_trace++;
  return 0;
}

/* ops.trace: one step, or (a group commit) a list of them, one per event. */
static int read_trace_step(lua_State *L, int ops, commit_in_t *c, ms_err_t *e) {
  lua_Integer i, n;
  int list = 0;
  if (lua_getfield(L, ops, "trace") == LUA_TNIL) { lua_pop(L, 1); return 0; }
  if (lua_istable(L, -1)) {
    list = lua_rawgeti(L, -1, 1) != LUA_TNIL;
    lua_pop(L, 1);
  }
  if (list) {
    if (list_length(L, "trace", &n, e)) {
      lua_pop(L, 1);
      return -1;
    }
    for (i = 1; i <= n; i++) {
      char what[32];
      snprintf(what, sizeof what, "trace[%d]", (int)i);
      lua_rawgeti(L, -1, i);
      if (read_one_step(L, c, what, e)) {
        lua_pop(L, 2);
        return -1;
      }
      lua_pop(L, 1);
    }
  } else {
    if (read_one_step(L, c, "trace", e)) {
      lua_pop(L, 1);
      return -1;
    }
  }
  lua_pop(L, 1);
  return 0;
}

/* ops.processed_event_id (one id) or ops.processed_event_ids (a group's,
 * 1..MS_GROUP_MAX distinct ids, in the order applied). */
static int read_processed(lua_State *L, int ops, commit_in_t *c, ms_err_t *e) {
  lua_Integer i, n;
  int k;
  if (lua_getfield(L, ops, "processed_event_id") != LUA_TNIL) {
    if (!(c->pids[0] = ms_check_id(L, -1, "commit: processed_event_id", &c->plens[0], e))) return -1;
    c->n_processed = 1;
  }
  lua_pop(L, 1);
  if (lua_getfield(L, ops, "processed_event_ids") != LUA_TNIL) {
    if (c->n_processed) {
      lua_pop(L, 1);
      ms_err_set(e, "invalid", "%s: processed_event_id and processed_event_ids are exclusive", c->doing);
      return -1;
    }
    if (!lua_istable(L, -1) || (n = (lua_Integer)lua_rawlen(L, -1)) < 1 || n > MS_GROUP_MAX) {
      lua_pop(L, 1);
      ms_err_set(e, "invalid", "%s: processed_event_ids must be a list of 1 to %d ids", c->doing, MS_GROUP_MAX);
      return -1;
    }
    for (i = 1; i <= n; i++) {
      lua_rawgeti(L, -1, i);
      /* the strings stay referenced by the caller's list while we run */
      if (!(c->pids[i - 1] = ms_check_id(L, -1, "commit: processed_event_ids[i]", &c->plens[i - 1], e))) {
        lua_pop(L, 2);
        return -1;
      }
      lua_pop(L, 1);
      for (k = 0; k < (int)i - 1; k++) {
        if (c->plens[k] == c->plens[i - 1] && memcmp(c->pids[k], c->pids[i - 1], c->plens[k]) == 0) {
          lua_pop(L, 1);
          ms_err_set(e, "invalid", "%s: processed_event_ids holds %s twice", c->doing, c->pids[k]);
          return -1;
        }
      }
    }
    c->n_processed = (int)n;
  }
  lua_pop(L, 1);
  c->processed = c->n_processed ? c->pids[0] : NULL;
  c->processed_len = c->n_processed ? c->plens[0] : 0;
  return 0;
}

/* The positional arguments and the scalar opts: a wrong type raises, a bad
 * id or a negative version is invalid. */
int ms_commit_read_args(lua_State *L, int base, commit_in_t *c, ms_err_t *e) {
  int ops = base + 4;
  if (!(c->id = ms_check_id(L, base, "commit: execution id", &c->id_len, e))) return -1;
  if (!(c->definition_id = ms_check_id(L, base + 1, "commit: definition_id", &c->def_len, e))) return -1;
  c->old = ms_arg_integer(L, base + 2, "commit: version");
  c->data = ms_arg_string(L, base + 3, "commit: data", &c->data_len);
  ms_arg_table(L, ops, "commit: opts");
  snprintf(c->doing, sizeof c->doing, "commit %.100s", c->id);
  if (c->old < 0) {
    ms_err_set(e, "invalid", "%s: version %lld is negative", c->doing, (long long)c->old);
    return -1;
  }
  c->min_fire = MS_NO_TIMER;
  c->status = "PENDING";
  c->status_len = 7;
  if (lua_getfield(L, ops, "status") == LUA_TSTRING) c->status = lua_tolstring(L, -1, &c->status_len);
  lua_pop(L, 1);
  if (lua_getfield(L, ops, "parent_id") == LUA_TSTRING) c->parent_id = lua_tolstring(L, -1, &c->parent_len);
  lua_pop(L, 1);
  if (read_processed(L, ops, c, e)) return -1;
  /* a group commit moves the version on by one per event, as one commit
   * each would have, so what the events derived from it stays unique */
  c->advance = 1;
  if (lua_getfield(L, ops, "advance") != LUA_TNIL) {
    if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1 || lua_tointeger(L, -1) > MS_GROUP_MAX) {
      lua_pop(L, 1);
      ms_err_set(e, "invalid", "%s: advance must be an integer from 1 to %d", c->doing, MS_GROUP_MAX);
      return -1;
    }
    c->advance = (int64_t)lua_tointeger(L, -1);
  }
  lua_pop(L, 1);
  /* the digests loaded with the execution (a string kept by the Lua layer;
   * the Lua strings stay referenced by the caller's table while we run) */
  if (lua_getfield(L, ops, "dedupe") == LUA_TSTRING) c->dd_in = lua_tolstring(L, -1, &c->dd_in_len);
  lua_pop(L, 1);
  /* the inbox claim's fence (mongostore.inbox): an integer >= 1 */
  if (lua_getfield(L, ops, "fence") != LUA_TNIL) {
    if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1) {
      lua_pop(L, 1);
      ms_err_set(e, "invalid", "%s: fence must be an integer >= 1", c->doing);
      return -1;
    }
    c->fence = (int64_t)lua_tointeger(L, -1);
  }
  lua_pop(L, 1);
  /* the earliest timer armed once the commit is applied, from a caller that
   * read every armed timer at this version (the sweep): set exactly, so the
   * sweep need not read the document again to raise its mark */
  if (lua_getfield(L, ops, "next_fire_at") != LUA_TNIL) {
    double at = lua_type(L, -1) == LUA_TNUMBER ? lua_tonumber(L, -1) : NAN;
    if (isnan(at)) {
      lua_pop(L, 1);
      ms_err_set(e, "invalid", "%s: next_fire_at must be a number (epoch seconds)", c->doing);
      return -1;
    }
    c->has_next_fire = 1;
    c->next_fire = at < MS_NO_TIMER ? at : MS_NO_TIMER;
  }
  lua_pop(L, 1);
  return 0;
}

/* The lists of opts (emits, spawns, timers, trace) as BSON, and the check
 * that the update they make fits the server's limit: what the update ships
 * is known now, so it is refused before any write. On failure c is
 * destroyed and e says why. */
int ms_commit_read_ops(lua_State *L, const ms_store_t *s, commit_in_t *c, int ops, ms_err_t *e) {
  bson_init(&c->emits);
  bson_init(&c->spawns);
  bson_init(&c->set_timers);
  bson_init(&c->unset_timers);
  bson_init(&c->trace);
  if (read_emits(L, ops, c, e) || read_spawns(L, ops, c, e) || read_timers(L, ops, c, e) ||
      read_trace_step(L, ops, c, e)) {
    ms_commit_in_destroy(c);
    ms_err_prefix(e, c->doing);
    return -1;
  }
  if ((int64_t)c->data_len + c->emits.len + c->spawns.len + c->set_timers.len + c->trace.len +
          (int64_t)c->dd_out_len + 1024 >
      (int64_t)s->max_bson) {
    ms_commit_in_destroy(c);
    ms_err_set(e, "too_large", "%s: the update is larger than the server's maximum document size (%d bytes)",
               c->doing, (int)s->max_bson);
    return -1;
  }
  return 0;
}
