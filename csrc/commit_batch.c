/*
 * commit_batch.c - commit_many: many commits (one per execution) in one
 * unordered bulk write, each checked and built as commit.c builds one; the
 * items the bulk did not match are settled one by one (a conflict, a
 * duplicate, a stale claim, or written after all).
 */
#include "commit.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- many commits in one bulk write ---- */

/* One commit of a batch: its input, and what it came to. */
typedef enum { ITEM_PENDING, ITEM_DONE, ITEM_SENT } item_state_t;

typedef struct batch_item {
  commit_in_t c;
  seqs_t q;
  item_state_t state;
  int bulk_index;          /* its position among the bulk's operations */
} batch_item_t;

/* results[i] = { ok = true, digests = "..." } */
static void result_committed(lua_State *L, int results, int i, const commit_in_t *c) {
  lua_createtable(L, 0, 2);
  lua_pushboolean(L, 1);
  lua_setfield(L, -2, "ok");
  if (c->processed) {
    lua_pushlstring(L, (const char *)c->dd_out, c->dd_out_len);
    lua_setfield(L, -2, "digests");
  }
  lua_rawseti(L, results, i);
}

/* results[i] = { err = msg, code = code[, found = version] } from the
 * nil, msg, code[, found] that a push_ function left on the stack. */
static void result_from_stack(lua_State *L, int results, int i, int nret) {
  int top = lua_gettop(L), base = top - nret + 1;
  lua_createtable(L, 0, 3);
  lua_pushvalue(L, base + 1);
  lua_setfield(L, -2, "err");
  lua_pushvalue(L, base + 2);
  lua_setfield(L, -2, "code");
  if (nret > 3) {
    lua_pushvalue(L, base + 3);
    lua_setfield(L, -2, "found");
  }
  lua_rawseti(L, results, i);
  lua_settop(L, base - 1);
}

static void result_error(lua_State *L, int results, int i, ms_err_t *e) {
  result_from_stack(L, results, i, ms_push_error(L, e));
}

static void result_bson_error(lua_State *L, ms_store_t *s, int results, int i, const bson_error_t *be,
                              const char *doing) {
  result_from_stack(L, results, i, ms_store_push_bson_err(L, s, be, doing));
}

/* Reads items[i] = { id, definition_id, version, data, opts } into it; a
 * version-0 commit is an insert, which the one-commit path makes. */
static int read_item(lua_State *L, const ms_store_t *s, int items, lua_Integer i, batch_item_t *it, ms_err_t *e) {
  int base, rc;
  static const char *const fields[] = {"id", "definition_id", "version", "data", "opts"};
  size_t f;
  lua_rawgeti(L, items, i);
  if (!lua_istable(L, -1)) luaL_error(L, "commit_many: items[%d] must be a table", (int)i);
  base = lua_gettop(L) + 1;
  for (f = 0; f < 5; f++) lua_getfield(L, base - 1, fields[f]);
  /* the strings stay referenced by items[i] once these copies are popped */
  rc = ms_commit_read_args(L, base, &it->c, e);
  if (rc == 0 && it->c.old == 0) {
    ms_err_set(e, "invalid", "%s: a new execution (version 0) is committed alone", it->c.doing);
    rc = -1;
  }
  if (rc == 0 && it->c.processed && ms_commit_mark_digests(s, &it->c)) rc = 1;  /* marked already among the loaded digests */
  if (rc == 0 && ms_commit_read_ops(L, s, &it->c, base + 4, e)) rc = -2;  /* c destroyed */
  lua_settop(L, base - 2);
  return rc;
}

/* The outbox and spawn seqs of every commit of the batch: one take per
 * counter for the whole batch (ms_take_seqs: no round trip while the store's
 * block lasts), then a run of it for each commit in turn; trace indexes
 * (when the steps give none) per execution. */
static int reserve_batch_seqs(ms_store_t *s, batch_item_t *items, size_t n, bson_error_t *be) {
  int64_t emits = 0, spawns = 0, next_outbox = 0, next_spawn = 0;
  int aged = 0;
  size_t i;
  for (i = 0; i < n; i++) {
    if (items[i].state != ITEM_PENDING) continue;
    emits += items[i].c.n_emits;
    spawns += items[i].c.n_spawns;
  }
  if ((emits && !ms_take_seqs(s, MS_SEQ_OUTBOX, emits, &next_outbox, &aged, be)) ||
      (spawns && !ms_take_seqs(s, MS_SEQ_SPAWN, spawns, &next_spawn, &aged, be)))
    return 0;
  for (i = 0; i < n; i++) {
    commit_in_t *c = &items[i].c;
    if (items[i].state != ITEM_PENDING) continue;
    items[i].q.aged = aged;
    items[i].q.outbox = next_outbox;
    items[i].q.spawn = next_spawn;
    next_outbox += c->n_emits;
    next_spawn += c->n_spawns;
    if (c->has_trace) {
      int64_t given = c->has_trace == 1 ? ms_commit_first_step_index(c) : -1;
      if (given >= 0) items[i].q.trace = given;
      else if (!ms_next_trace_index(s, c->id, c->id_len, c->has_trace, &items[i].q.trace, be)) return 0;
    }
  }
  return 1;
}

/* Marks the bulk's operations that failed on their own (writeErrors by
 * index); returns how many. */
static int64_t mark_write_errors(lua_State *L, ms_store_t *s, batch_item_t *items, size_t n, const bson_t *reply,
                                 int results) {
  bson_iter_t it, arr, op;
  int64_t count = 0;
  if (!(bson_iter_init_find(&it, reply, "writeErrors") && BSON_ITER_HOLDS_ARRAY(&it) &&
        bson_iter_recurse(&it, &arr)))
    return 0;
  while (bson_iter_next(&arr)) {
    int64_t index = -1;
    uint32_t code = 0;
    const char *msg = "write error";
    size_t i;
    if (!BSON_ITER_HOLDS_DOCUMENT(&arr) || !bson_iter_recurse(&arr, &op)) continue;
    while (bson_iter_next(&op)) {
      if (strcmp(bson_iter_key(&op), "index") == 0 && BSON_ITER_HOLDS_NUMBER(&op)) index = bson_iter_as_int64(&op);
      else if (strcmp(bson_iter_key(&op), "code") == 0 && BSON_ITER_HOLDS_NUMBER(&op))
        code = (uint32_t)bson_iter_as_int64(&op);
      else if (strcmp(bson_iter_key(&op), "errmsg") == 0 && BSON_ITER_HOLDS_UTF8(&op))
        msg = bson_iter_utf8(&op, NULL);
    }
    for (i = 0; i < n; i++) {
      if (items[i].state == ITEM_SENT && items[i].bulk_index == index) {
        bson_error_t be;
        bson_set_error(&be, MONGOC_ERROR_SERVER, code, "%s", msg);
        result_bson_error(L, s, results, (int)i + 1, &be, items[i].c.doing);
        items[i].state = ITEM_DONE;
        ms_commit_in_destroy(&items[i].c);
        count++;
        break;
      }
    }
  }
  return count;
}

/* Whether a fetched document holds event ev's mark (digests or harel's
 * `processed` array). */
static int doc_marked_one(const bson_t *doc, const char *ev, size_t evlen) {
  bson_iter_t it, arr;
  if (ms_doc_marks(doc, ev, evlen)) return 1;
  if (bson_iter_init_find(&it, doc, "processed") && BSON_ITER_HOLDS_ARRAY(&it) && bson_iter_recurse(&it, &arr)) {
    while (bson_iter_next(&arr)) {
      uint32_t l;
      const char *v;
      if (!BSON_ITER_HOLDS_UTF8(&arr)) continue;
      v = bson_iter_utf8(&arr, &l);
      if (l == evlen && memcmp(v, ev, evlen) == 0) return 1;
    }
  }
  return 0;
}

/* Whether it holds every mark of the commit: a group's update marks all of
 * its events at once, so a document that holds them all took it (or a
 * writer that applied the same events). */
static int doc_marked(const bson_t *doc, const commit_in_t *c) {
  int k;
  for (k = 0; k < c->n_processed; k++)
    if (!doc_marked_one(doc, c->pids[k], c->plens[k])) return 0;
  return c->n_processed > 0;
}

/* What settle_unmatched's find told of a sent commit's document: whether
 * it came back, holds the commit's marks, and its version and inbox fence. */
typedef struct {
  char have, marked;
  int64_t found, fence;
} sent_doc_t;

/* The find of the sent commits' documents, with the fields that tell them
 * apart; *sent counts the commits. */
static mongoc_cursor_t *find_sent(ms_store_t *s, const batch_item_t *items, size_t n, int64_t *sent) {
  bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, in, ids, proj;
  mongoc_cursor_t *cur;
  size_t i, k = 0;
  bson_append_document_begin(&filter, "_id", 3, &in);
  bson_append_array_begin(&in, "$in", 3, &ids);
  for (i = 0; i < n; i++) {
    char ik[24];
    const char *ikey;
    size_t iklen;
    if (items[i].state != ITEM_SENT) continue;
    iklen = bson_uint32_to_string((uint32_t)k++, &ikey, ik, sizeof ik);
    bson_append_utf8(&ids, ikey, (int)iklen, items[i].c.id, (int)items[i].c.id_len);
    (*sent)++;
  }
  bson_append_array_end(&in, &ids);
  bson_append_document_end(&filter, &in);
  bson_append_document_begin(&opts, "projection", 10, &proj);
  bson_append_int32(&proj, "version", 7, 1);
  bson_append_int32(&proj, "dedupe", 6, 1);
  bson_append_int32(&proj, "processed", 9, 1);
  bson_append_int32(&proj, "inbox_fence", 11, 1);
  bson_append_document_end(&opts, &proj);
  cur = mongoc_collection_find_with_opts(s->exes, &filter, &opts, NULL);
  bson_destroy(&filter);
  bson_destroy(&opts);
  return cur;
}

/* Notes what a fetched document tells of the sent commits it belongs to. */
static void note_sent_doc(const bson_t *doc, batch_item_t *items, size_t n, sent_doc_t *docs) {
  bson_iter_t it;
  uint32_t idl;
  const char *idv = ms_utf8_field(doc, "_id", &idl);
  size_t i;
  if (!idv) return;
  for (i = 0; i < n; i++) {
    commit_in_t *c = &items[i].c;
    if (items[i].state != ITEM_SENT || c->id_len != idl || memcmp(c->id, idv, idl) != 0) continue;
    docs[i].have = 1;
    docs[i].found = (bson_iter_init_find(&it, doc, "version") && BSON_ITER_HOLDS_NUMBER(&it)) ? bson_iter_as_int64(&it)
                                                                                              : 0;
    docs[i].marked = (char)doc_marked(doc, c);
    docs[i].fence = (bson_iter_init_find(&it, doc, "inbox_fence") && BSON_ITER_HOLDS_NUMBER(&it))
                      ? bson_iter_as_int64(&it) : 0;
  }
}

/* The result of sent commit c (result index ri) from its document d; ours:
 * the count of matches says its marks are its own commit's. */
static void settle_sent(lua_State *L, commit_in_t *c, int results, int ri, const sent_doc_t *d, int ours) {
  if (d->have && c->fence && d->fence > c->fence && !ours) {
    result_from_stack(L, results, ri, ms_commit_push_stale(L, c, d->found, d->fence));
  } else if (ours) {
    result_committed(L, results, ri, c);
  } else if (d->marked) {
    result_from_stack(L, results, ri, ms_commit_push_duplicate(L, c));
  } else if (d->have && d->found == c->old) {
    /* at its version and not marked: the seq guard refused it (its
     * execution holds an entry from a newer block); the one-event path
     * commits it with fresh seqs */
    lua_pushnil(L);
    lua_pushfstring(L, "commit %s: a pending entry is newer than the batch's seqs", c->id);
    lua_pushliteral(L, "conflict");
    lua_pushinteger(L, (lua_Integer)d->found);
    result_from_stack(L, results, ri, 4);
  } else {
    result_from_stack(L, results, ri, ms_commit_push_conflict(L, c, d->have, d->found));
  }
}

/* The bulk matched fewer documents than it held commits: one find of the
 * sent commits' documents tells them apart. A document that does not hold
 * the commit's event mark lost (a conflict: the one-event path reloads). One
 * that holds it applied the event, ours or a concurrent writer's of the same
 * event at the same version; when the count of matches says every marked one
 * is ours they are committed, otherwise they are reported as duplicates (the
 * event is applied once either way; the caller reloads before going on). */
static void settle_unmatched(lua_State *L, ms_store_t *s, batch_item_t *items, size_t n, int64_t matched,
                             int results) {
  mongoc_cursor_t *cur;
  const bson_t *doc;
  bson_error_t be;
  size_t i;
  int64_t sent = 0, lost = 0;
  sent_doc_t *docs = bson_malloc0(sizeof *docs * (n ? n : 1));
  cur = find_sent(s, items, n, &sent);
  while (mongoc_cursor_next(cur, &doc)) note_sent_doc(doc, items, n, docs);
  if (mongoc_cursor_error(cur, &be)) {
    for (i = 0; i < n; i++) {
      if (items[i].state != ITEM_SENT) continue;
      result_bson_error(L, s, results, (int)i + 1, &be, items[i].c.doing);
      items[i].state = ITEM_DONE;
      ms_commit_in_destroy(&items[i].c);
    }
  } else {
    for (i = 0; i < n; i++)
      if (items[i].state == ITEM_SENT && !docs[i].marked) lost++;
    for (i = 0; i < n; i++) {
      if (items[i].state != ITEM_SENT) continue;
      settle_sent(L, &items[i].c, results, (int)i + 1, &docs[i], docs[i].marked && matched == sent - lost);
      items[i].state = ITEM_DONE;
      ms_commit_in_destroy(&items[i].c);
    }
  }
  mongoc_cursor_destroy(cur);
  bson_free(docs);
}

/* The batch's pending commits as one unordered bulk write of CAS updates;
 * each is the one-commit update and filter, atomic on its own. */
static void write_batch(lua_State *L, ms_store_t *s, batch_item_t *items, size_t n, int results) {
  bson_t opts = BSON_INITIALIZER, reply;
  bson_error_t be;
  mongoc_bulk_operation_t *bulk;
  size_t i;
  int sent = 0, ok;
  int64_t matched, failed;
  bson_append_bool(&opts, "ordered", 7, false);
  bulk = mongoc_collection_create_bulk_operation_with_opts(s->exes, &opts);
  bson_destroy(&opts);
  for (i = 0; i < n; i++) {
    bson_t filter = BSON_INITIALIZER, update = BSON_INITIALIZER;
    if (items[i].state != ITEM_PENDING) continue;
    ms_commit_build_cas_filter(&items[i].c, &items[i].q, &filter);
    ms_commit_build_update(s, &items[i].c, &items[i].q, &update);
    ok = mongoc_bulk_operation_update_one_with_opts(bulk, &filter, &update, NULL, &be);
    bson_destroy(&filter);
    bson_destroy(&update);
    if (!ok) {
      result_bson_error(L, s, results, (int)i + 1, &be, items[i].c.doing);
      items[i].state = ITEM_DONE;
      ms_commit_in_destroy(&items[i].c);
      continue;
    }
    items[i].state = ITEM_SENT;
    items[i].bulk_index = sent++;
  }
  if (sent == 0) {
    mongoc_bulk_operation_destroy(bulk);
    return;
  }
  ok = (int)mongoc_bulk_operation_execute(bulk, &reply, &be);
  mongoc_bulk_operation_destroy(bulk);
  failed = ok ? 0 : mark_write_errors(L, s, items, n, &reply, results);
  if (!ok && failed == 0) {
    /* the whole write failed (network, timeout, write concern): any of it
     * may or may not have been applied */
    for (i = 0; i < n; i++) {
      if (items[i].state != ITEM_SENT) continue;
      result_bson_error(L, s, results, (int)i + 1, &be, items[i].c.doing);
      items[i].state = ITEM_DONE;
      ms_commit_in_destroy(&items[i].c);
    }
    bson_destroy(&reply);
    return;
  }
  matched = ms_commit_reply_count(&reply, "nMatched");
  bson_destroy(&reply);
  if (matched == sent - failed) {
    for (i = 0; i < n; i++) {
      if (items[i].state != ITEM_SENT) continue;
      result_committed(L, results, (int)i + 1, &items[i].c);
      items[i].state = ITEM_DONE;
      ms_commit_in_destroy(&items[i].c);
    }
    return;
  }
  settle_unmatched(L, s, items, n, matched, results);
}

/* store:_commit_many({ { id, definition_id, version, data, opts }, ... })
 * -> { [i] = { ok = true[, digests] } | { err, code[, found] } }
 * Every commit is read and checked first (a bad one is refused on its own),
 * the seqs of all of them are reserved together, and they travel in one
 * unordered bulk write. */
static int l_commit_many(lua_State *L) {
  STORE_OR_CLOSED(L, s, "commit_many");
  batch_item_t *items;
  size_t n, i;
  int results;
  bson_error_t be;
  ms_arg_table(L, 2, "commit_many: items");
  n = (size_t)luaL_len(L, 2);
  lua_createtable(L, (int)n, 0);
  results = lua_gettop(L);
  if (n == 0) return 1;
  items = bson_malloc0(sizeof *items * n);
  for (i = 0; i < n; i++) {
    ms_err_t e;
    int rc = read_item(L, s, 2, (lua_Integer)i + 1, &items[i], &e);
    if (rc == 0) continue;
    items[i].state = ITEM_DONE;
    if (rc == 1) result_from_stack(L, results, (int)i + 1, ms_commit_push_marked(L, s, &items[i].c));
    else result_error(L, results, (int)i + 1, &e);
    /* nothing of c is allocated before read_commit_ops, which destroys it
     * when it fails */
  }
  if (!reserve_batch_seqs(s, items, n, &be)) {
    for (i = 0; i < n; i++) {
      if (items[i].state != ITEM_PENDING) continue;
      result_bson_error(L, s, results, (int)i + 1, &be, items[i].c.doing);
      items[i].state = ITEM_DONE;
      ms_commit_in_destroy(&items[i].c);
    }
  } else {
    write_batch(L, s, items, n, results);
  }
  bson_free(items);
  lua_settop(L, results);
  return 1;
}

static const luaL_Reg commit_batch_methods[] = {
  {"_commit_many", l_commit_many},
  {NULL, NULL}
};

void ms_open_commit_batch(lua_State *L) { luaL_setfuncs(L, commit_batch_methods, 0); }
