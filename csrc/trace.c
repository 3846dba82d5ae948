/*
 * trace.c - the trace of an execution's steps: the standalone writer
 * (append_trace) and reader (read_trace), and the pieces a commit uses to
 * push its own step in the same update (index from counter trace:<id>).
 */
#include "store.h"

/* The first of the next count 0-based trace indexes of an execution, from
 * counter trace:<id> (the whole id: two ids that share a long prefix are
 * two counters). */
int ms_next_trace_index(ms_store_t *s, const char *id, size_t idlen, int count, int64_t *index, bson_error_t *be) {
  bson_string_t *name = bson_string_new("trace:");
  int ok;
  bson_string_append_printf(name, "%.*s", (int)idlen, id);
  ok = ms_next_seq(s, name->str, name->len, count, index, be);
  bson_string_free(name, true);
  if (ok) *index -= 1;
  return ok;
}

/* A trace step's own index, when it gives one, is a whole number >= 0 that
 * a double holds exactly (the trace is read back by harel too). */
int ms_check_step(const bson_t *step, const char *what, ms_err_t *e) {
  bson_iter_t it;
  if (ms_check_storable(step, what, e)) return -1;
  if (!bson_iter_init_find(&it, step, "index")) return 0;
  if ((BSON_ITER_HOLDS_INT32(&it) || BSON_ITER_HOLDS_INT64(&it)) && bson_iter_as_int64(&it) >= 0 &&
      bson_iter_as_int64(&it) <= ((int64_t)1 << 53))
    return 0;
  ms_err_set(e, "invalid", "%s.index must be an integer from 0 to 2^53", what);
  return -1;
}

void ms_append_trace_step(bson_t *dst, const char *key, const bson_t *step, int64_t index) {
  bson_t doc;
  bson_iter_t it;
  bson_append_document_begin(dst, key, -1, &doc);
  bson_concat(&doc, step);
  if (!bson_iter_init_find(&it, step, "index")) bson_append_int64(&doc, "index", 5, index);
  bson_append_document_end(dst, &doc);
}

int64_t ms_step_index(const bson_t *step, int64_t fallback) {
  bson_iter_t it;
  if (bson_iter_init_find(&it, step, "index") && BSON_ITER_HOLDS_NUMBER(&it)) return bson_iter_as_int64(&it);
  return fallback;
}

/* The steps of an array (keys "0".."n-1") as entries of dst, the k-th
 * indexed first + k unless it gives its own index. */
void ms_append_trace_steps(bson_t *dst, const bson_t *steps, int64_t first) {
  bson_iter_t it;
  int64_t k = 0;
  if (!bson_iter_init(&it, steps)) return;
  while (bson_iter_next(&it)) {
    const uint8_t *data;
    uint32_t len;
    bson_t step;
    char ik[24];
    const char *ikey;
    if (!BSON_ITER_HOLDS_DOCUMENT(&it)) continue;
    bson_iter_document(&it, &len, &data);
    if (!bson_init_static(&step, data, len)) continue;
    bson_uint32_to_string((uint32_t)k, &ikey, ik, sizeof ik);
    ms_append_trace_step(dst, ikey, &step, first + k);
    k++;
  }
}

/* $push of the steps (an array of them), trimmed to the last trace_max in
 * the same update. */
void ms_append_trace_push(bson_t *push, const bson_t *steps, int64_t first, int64_t trace_max) {
  bson_t spec, each;
  bson_append_document_begin(push, "trace", 5, &spec);
  bson_append_array_begin(&spec, "$each", 5, &each);
  ms_append_trace_steps(&each, steps, first);
  bson_append_array_end(&spec, &each);
  if (trace_max > 0) bson_append_int64(&spec, "$slice", 6, -trace_max);
  bson_append_document_end(push, &spec);
}

/* store:append_trace(id, entry): the standalone trace writer, upserting. */
static int l_append_trace(lua_State *L) {
  STORE_OR_CLOSED(L, s, "append_trace");
  size_t idlen;
  ms_err_t e;
  bson_error_t be;
  const char *id = ms_check_id(L, 2, "append_trace: execution_id", &idlen, &e);
  bson_t step = BSON_INITIALIZER, filter = BSON_INITIALIZER, update = BSON_INITIALIZER, opts = BSON_INITIALIZER, push;
  int64_t index;
  int ok;
  ms_arg_table(L, 3, "append_trace: entry");
  if (!id) return ms_push_error(L, &e);
  if (ms_table_to_bson(L, 3, &step, "append_trace: entry", &e) || ms_check_step(&step, "append_trace: entry", &e)) {
    bson_destroy(&step);
    return ms_push_error(L, &e);
  }
  index = ms_step_index(&step, -1);
  if (index < 0) {
    if (!ms_next_trace_index(s, id, idlen, 1, &index, &be)) {
      bson_destroy(&step);
      return ms_store_push_bson_err(L, s, &be, "append_trace");
    }
  }
  bson_append_utf8(&filter, "_id", 3, id, (int)idlen);
  bson_append_document_begin(&update, "$push", 5, &push);
  {
    bson_t steps = BSON_INITIALIZER;
    bson_append_document(&steps, "0", 1, &step);
    ms_append_trace_push(&push, &steps, index, s->trace_max);
    bson_destroy(&steps);
  }
  bson_append_document_end(&update, &push);
  bson_append_bool(&opts, "upsert", 6, true);
  ok = mongoc_collection_update_one(s->exes, &filter, &update, &opts, NULL, &be);
  bson_destroy(&step);
  bson_destroy(&filter);
  bson_destroy(&update);
  bson_destroy(&opts);
  if (!ok) return ms_store_push_bson_err(L, s, &be, "append_trace");
  lua_pushboolean(L, 1);
  return 1;
}

/* store:read_trace(id) -> { step, ... } (empty when absent) */
static int l_read_trace(lua_State *L) {
  STORE_OR_CLOSED(L, s, "read_trace");
  size_t idlen;
  ms_err_t e;
  bson_error_t be;
  const bson_t *doc;
  const char *id = ms_check_id(L, 2, "read_trace: execution_id", &idlen, &e);
  mongoc_cursor_t *cur;
  bson_iter_t it;
  if (!id) return ms_push_error(L, &e);
  cur = ms_find_one(s, id, idlen, "trace", NULL, NULL);
  if (mongoc_cursor_next(cur, &doc) && bson_iter_init_find(&it, doc, "trace") && BSON_ITER_HOLDS_ARRAY(&it)) {
    if (ms_push_bson_value(L, &it, -1, &e)) {
      mongoc_cursor_destroy(cur);
      return ms_store_push_err(L, s, &e);
    }
  } else if (mongoc_cursor_error(cur, &be)) {
    mongoc_cursor_destroy(cur);
    return ms_store_push_bson_err(L, s, &be, "read_trace");
  } else {
    lua_newtable(L);
    ms_mark_array(L, -1);
  }
  mongoc_cursor_destroy(cur);
  return 1;
}

static const luaL_Reg trace_methods[] = {
  {"append_trace", l_append_trace},
  {"read_trace", l_read_trace},
  {NULL, NULL}
};

void ms_open_trace(lua_State *L) { luaL_setfuncs(L, trace_methods, 0); }
