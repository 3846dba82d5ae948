/* failed.c - outbox entries given up on: kept on their source document in
 * outbox_failed (with the error and when) instead of being dropped, listed
 * for an operator, and put back into the outbox by hand. */
#include "store.h"

/* The update that moves the entry `seq` from the array `from` to the array
 * `to` of its document: $pull it from one and $push it, with its seq,
 * target_id and event, onto the other. Returns with the pushed entry open
 * (in *entry, inside *push) for the caller to add to, and to close with
 * end_move. */
static void begin_move(bson_t *update, const char *from, const char *to, int64_t seq, const char *target,
                       size_t tlen, const char *event, size_t evlen, bson_t *push, bson_t *entry) {
  bson_t pull, cond;
  bson_append_document_begin(update, "$pull", 5, &pull);
  bson_append_document_begin(&pull, from, -1, &cond);
  bson_append_int64(&cond, "seq", 3, seq);
  bson_append_document_end(&pull, &cond);
  bson_append_document_end(update, &pull);
  bson_append_document_begin(update, "$push", 5, push);
  bson_append_document_begin(push, to, -1, entry);
  bson_append_int64(entry, "seq", 3, seq);
  if (target)
    bson_append_utf8(entry, "target_id", 9, target, (int)tlen);
  else
    bson_append_null(entry, "target_id", 9);
  bson_append_utf8(entry, "event", 5, event, (int)evlen);
}

static void end_move(bson_t *update, bson_t *push, bson_t *entry) {
  bson_append_document_end(push, entry);
  bson_append_document_end(update, push);
}

/* store:_fail_outbox(seq, token, entry_json_event, target_id|nil, err, at, attempts)
 * -> true (moved, or no longer this caller's) | nil, msg, code
 * One update: $pull the entry from outbox and $push it, with its error, onto
 * outbox_failed, only while the document still holds the entry under the
 * caller's claim. */
static int l_fail_outbox(lua_State *L) {
  STORE_OR_CLOSED(L, s, "fail_outbox");
  int64_t seq = ms_arg_integer(L, 2, "fail_outbox: seq");
  size_t toklen, evlen, errlen, tlen = 0;
  const char *token = ms_arg_string(L, 3, "fail_outbox: token", &toklen);
  const char *event = ms_arg_string(L, 4, "fail_outbox: event", &evlen);
  const char *target = lua_isnoneornil(L, 5) ? NULL : ms_arg_string(L, 5, "fail_outbox: target_id", &tlen);
  const char *err = ms_arg_string(L, 6, "fail_outbox: err", &errlen);
  double at = ms_arg_number(L, 7, "fail_outbox: at");
  int64_t attempts = ms_arg_integer(L, 8, "fail_outbox: attempts");
  bson_t filter = BSON_INITIALIZER, update = BSON_INITIALIZER, push, entry;
  bson_error_t be;
  int ok;
  bson_append_int64(&filter, "outbox.seq", -1, seq);
  bson_append_utf8(&filter, "outbox_claim.token", -1, token, (int)toklen);
  begin_move(&update, "outbox", "outbox_failed", seq, target, tlen, event, evlen, &push, &entry);
  bson_append_utf8(&entry, "error", 5, err, (int)(errlen > 2000 ? 2000 : errlen));
  bson_append_double(&entry, "failed_at", 9, at);
  bson_append_int64(&entry, "attempts", 8, attempts);
  end_move(&update, &push, &entry);
  ok = mongoc_collection_update_one(s->exes, &filter, &update, NULL, NULL, &be);
  bson_destroy(&filter);
  bson_destroy(&update);
  if (!ok) return ms_store_push_bson_err(L, s, &be, "fail_outbox");
  lua_pushboolean(L, 1);
  return 1;
}

/* store:_failed_outbox(limit) -> { { source_id, seq, target_id, event = json, error, failed_at, attempts }, ... }
 * The documents with given-up entries, up to limit entries (a scan: an
 * operator's listing, not a worker's path). */
static int l_failed_outbox(lua_State *L) {
  STORE_OR_CLOSED(L, s, "failed_outbox");
  lua_Integer limit = ms_arg_integer(L, 2, "failed_outbox: limit");
  bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, cond, proj;
  const bson_t *doc;
  bson_error_t be;
  ms_err_t e;
  lua_Integer n = 0;
  mongoc_cursor_t *cur;
  bson_append_document_begin(&filter, "outbox_failed.0", -1, &cond);
  bson_append_bool(&cond, "$exists", 7, true);
  bson_append_document_end(&filter, &cond);
  bson_append_document_begin(&opts, "projection", 10, &proj);
  bson_append_int32(&proj, "outbox_failed", -1, 1);
  bson_append_document_end(&opts, &proj);
  cur = mongoc_collection_find_with_opts(s->exes, &filter, &opts, NULL);
  bson_destroy(&filter);
  bson_destroy(&opts);
  lua_newtable(L);
  while (n < limit && mongoc_cursor_next(cur, &doc)) {
    bson_iter_t id_it, arr, it;
    if (!bson_iter_init_find(&id_it, doc, "_id") || !BSON_ITER_HOLDS_UTF8(&id_it)) continue;
    if (!bson_iter_init_find(&arr, doc, "outbox_failed") || !BSON_ITER_HOLDS_ARRAY(&arr)) continue;
    bson_iter_recurse(&arr, &it);
    while (n < limit && bson_iter_next(&it)) {
      uint32_t idl;
      const char *idv;
      if (!BSON_ITER_HOLDS_DOCUMENT(&it)) continue;
      if (ms_push_bson_value(L, &it, -1, &e)) {
        mongoc_cursor_destroy(cur);
        return ms_store_push_err(L, s, &e);
      }
      idv = bson_iter_utf8(&id_it, &idl);
      lua_pushlstring(L, idv, idl);
      lua_setfield(L, -2, "source_id");
      lua_rawseti(L, -2, ++n);
    }
  }
  if (mongoc_cursor_error(cur, &be)) {
    mongoc_cursor_destroy(cur);
    return ms_store_push_bson_err(L, s, &be, "failed_outbox");
  }
  mongoc_cursor_destroy(cur);
  return 1;
}

/* store:_redeliver_failed(source_id, seq, target_id|nil, event_json)
 * -> true, moved (false: no such failed entry) | nil, msg, code
 * Moves a given-up entry back into the outbox, with the seq it had (the
 * relays take it on their next pass; dedupe refuses a copy already applied). */
static int l_redeliver_failed(lua_State *L) {
  STORE_OR_CLOSED(L, s, "redeliver_failed");
  size_t idlen, evlen, tlen = 0;
  const char *id = ms_arg_string(L, 2, "redeliver_failed: source_id", &idlen);
  int64_t seq = ms_arg_integer(L, 3, "redeliver_failed: seq");
  const char *target = lua_isnoneornil(L, 4) ? NULL : ms_arg_string(L, 4, "redeliver_failed: target_id", &tlen);
  const char *event = ms_arg_string(L, 5, "redeliver_failed: event", &evlen);
  bson_t filter = BSON_INITIALIZER, update = BSON_INITIALIZER, reply, push, entry;
  bson_error_t be;
  bson_iter_t it;
  int ok, moved = 0;
  bson_append_utf8(&filter, "_id", 3, id, (int)idlen);
  bson_append_int64(&filter, "outbox_failed.seq", -1, seq);
  begin_move(&update, "outbox_failed", "outbox", seq, target, tlen, event, evlen, &push, &entry);
  end_move(&update, &push, &entry);
  ok = mongoc_collection_update_one(s->exes, &filter, &update, NULL, &reply, &be);
  bson_destroy(&filter);
  bson_destroy(&update);
  if (ok && bson_iter_init_find(&it, &reply, "modifiedCount") && BSON_ITER_HOLDS_NUMBER(&it))
    moved = bson_iter_as_int64(&it) > 0;
  bson_destroy(&reply);
  if (!ok) return ms_store_push_bson_err(L, s, &be, "redeliver_failed");
  lua_pushboolean(L, 1);
  lua_pushboolean(L, moved);
  return 2;
}

static const luaL_Reg failed_methods[] = {
  {"_fail_outbox", l_fail_outbox},
  {"_failed_outbox", l_failed_outbox},
  {"_redeliver_failed", l_redeliver_failed},
  {NULL, NULL}
};

void ms_open_failed(lua_State *L) { luaL_setfuncs(L, failed_methods, 0); }
