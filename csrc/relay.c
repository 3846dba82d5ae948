/*
 * relay.c - what the relays read and write of the outbox and spawns arrays:
 * claims by lease and token, many documents per update, their releases, the
 * pending lists, and the ack that pulls one delivered entry.
 */
#include "store.h"

#include <stdio.h>
#include <string.h>

/* Documents whose array `field` is non-empty, projecting only that array;
 * pushes every entry (a table, with the source_id of its document) into the
 * list on top of the stack. */
static int collect_entries(lua_State *L, ms_store_t *s, const char *field, const char *doing) {
  bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, cond, proj, empty;
  mongoc_cursor_t *cur;
  const bson_t *doc;
  bson_error_t be;
  ms_err_t e;
  lua_Integer n = (lua_Integer)luaL_len(L, -1);
  bson_append_document_begin(&filter, field, -1, &cond);
  bson_append_bool(&cond, "$exists", 7, true);
  bson_append_array_begin(&cond, "$ne", 3, &empty);
  bson_append_array_end(&cond, &empty);
  bson_append_document_end(&filter, &cond);
  bson_append_document_begin(&opts, "projection", 10, &proj);
  bson_append_int32(&proj, field, -1, 1);
  bson_append_document_end(&opts, &proj);
  cur = mongoc_collection_find_with_opts(s->exes, &filter, &opts, NULL);
  bson_destroy(&filter);
  bson_destroy(&opts);
  while (mongoc_cursor_next(cur, &doc)) {
    bson_iter_t it, arr, id_it;
    int has_id = bson_iter_init_find(&id_it, doc, "_id") && BSON_ITER_HOLDS_UTF8(&id_it);
    if (!bson_iter_init_find(&it, doc, field) || !BSON_ITER_HOLDS_ARRAY(&it) || !bson_iter_recurse(&it, &arr))
      continue;
    while (bson_iter_next(&arr)) {
      if (!BSON_ITER_HOLDS_DOCUMENT(&arr)) continue;
      if (ms_push_bson_value(L, &arr, -1, &e)) {
        mongoc_cursor_destroy(cur);
        ms_err_prefix(&e, doing);
        return ms_store_push_err(L, s, &e);
      }
      if (has_id) {
        uint32_t idl;
        const char *idv = bson_iter_utf8(&id_it, &idl);
        lua_pushlstring(L, idv, idl);
        lua_setfield(L, -2, "source_id");
      }
      lua_rawseti(L, -2, ++n);
    }
  }
  if (mongoc_cursor_error(cur, &be)) {
    mongoc_cursor_destroy(cur);
    return ms_store_push_bson_err(L, s, &be, doing);
  }
  mongoc_cursor_destroy(cur);
  return 0;
}

/* Appends { $or: [ { <claim>: { $exists: false } }, { <claim>.until: { $lte: now } } ] }
 * under key "$or" of d: the document is claimed by nobody, or the lease ran out. */
static void append_unclaimed(bson_t *d, const char *claim, double now) {
  bson_t or, b0, b1, c0, c1;
  char until[48];
  snprintf(until, sizeof until, "%s.until", claim);
  bson_append_array_begin(d, "$or", 3, &or);
  bson_append_document_begin(&or, "0", 1, &b0);
  bson_append_document_begin(&b0, claim, -1, &c0);
  bson_append_bool(&c0, "$exists", 7, false);
  bson_append_document_end(&b0, &c0);
  bson_append_document_end(&or, &b0);
  bson_append_document_begin(&or, "1", 1, &b1);
  bson_append_document_begin(&b1, until, -1, &c1);
  bson_append_double(&c1, "$lte", 4, now);
  bson_append_document_end(&b1, &c1);
  bson_append_document_end(&or, &b1);
  bson_append_array_end(d, &or);
}

/* One claim pass over array `field`: what stamping and pushing each
 * document it claims needs. */
typedef struct claim {
  const char *field, *token;
  size_t toklen;
  double now, until;             /* until: now + lease */
  char claim[32], untilkey[48];  /* "<field>_claim", "<field>_claim.until" */
  int targeted;                  /* only entries with a target_id (a relay with no on_external) */
  int external;                  /* only entries without one, whose retry_at has come (claim_external) */
} claim_t;

/* Whether an entry (an array element) is one this pass takes: every entry,
 * or with k->targeted only those addressed to an execution (a string
 * target_id), so external entries stay pending for a relay that has a
 * handler for them; with k->external only those without one, and of them
 * only the ones whose retry_at (set by retry_outbox after a failed try) has
 * come, so an entry waiting out its backoff costs no claim. */
static int entry_taken(const claim_t *k, const bson_iter_t *entry) {
  bson_iter_t e;
  int targeted = 0;
  if (!k->targeted && !k->external) return 1;
  if (!BSON_ITER_HOLDS_DOCUMENT(entry) || !bson_iter_recurse(entry, &e)) return 0;
  while (bson_iter_next(&e)) {
    const char *key = bson_iter_key(&e);
    if (strcmp(key, "target_id") == 0) {
      targeted = BSON_ITER_HOLDS_UTF8(&e);
    } else if (k->external && strcmp(key, "retry_at") == 0) {
      if (BSON_ITER_HOLDS_NUMBER(&e) && bson_iter_as_double(&e) > k->now) return 0;
    }
  }
  return k->targeted ? targeted : !targeted;
}

/* The pass's find is the seq index alone (a server may plan any other
 * condition as a scan); it projects each claim's `until` and the entries'
 * seqs, so a document still claimed by someone else is skipped without a
 * round trip of its own and the entries a claim would bring are known. */
static mongoc_cursor_t *claim_find(ms_store_t *s, const claim_t *k, lua_Integer limit) {
  bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, cond, proj;
  mongoc_cursor_t *cur;
  char seqkey[32];
  snprintf(seqkey, sizeof seqkey, "%s.seq", k->field);
  bson_append_document_begin(&filter, seqkey, -1, &cond);   /* index-backed: field.seq */
  bson_append_int64(&cond, "$gte", 4, INT64_MIN);
  bson_append_document_end(&filter, &cond);
  bson_append_document_begin(&opts, "projection", 10, &proj);
  bson_append_int32(&proj, "_id", 3, 1);
  bson_append_int32(&proj, k->untilkey, -1, 1);
  bson_append_int32(&proj, seqkey, -1, 1);
  if (k->targeted || k->external) {
    /* which entries have a target (and which wait out a backoff) is told
     * here, not by the filter, so the find stays on the seq index */
    char tkey[32];
    snprintf(tkey, sizeof tkey, "%s.target_id", k->field);
    bson_append_int32(&proj, tkey, -1, 1);
    if (k->external) {
      snprintf(tkey, sizeof tkey, "%s.retry_at", k->field);
      bson_append_int32(&proj, tkey, -1, 1);
    }
  }
  bson_append_document_end(&opts, &proj);
  bson_append_int64(&opts, "batchSize", 9, (int64_t)limit);
  cur = mongoc_collection_find_with_opts(s->exes, &filter, &opts, NULL);
  bson_destroy(&filter);
  bson_destroy(&opts);
  return cur;
}

/* Whether a document the find returned holds a claim whose lease runs yet. */
static int claimed_elsewhere(const bson_t *doc, const claim_t *k) {
  bson_iter_t it;
  return bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, k->untilkey, &it) &&
         BSON_ITER_HOLDS_NUMBER(&it) && bson_iter_as_double(&it) > k->now;
}

/* How many entries the find saw in a document's array that this pass
 * takes; *left counts up the ones it leaves. */
static lua_Integer entries_seen(const bson_t *doc, const claim_t *k, lua_Integer *left) {
  bson_iter_t it, arr;
  lua_Integer n = 0;
  if (!bson_iter_init_find(&it, doc, k->field) || !BSON_ITER_HOLDS_ARRAY(&it) || !bson_iter_recurse(&it, &arr))
    return 0;
  while (bson_iter_next(&arr)) {
    if (entry_taken(k, &arr))
      n++;
    else
      ++*left;
  }
  return n;
}

/* The update both claim paths send: $set <field>_claim = { until, token }. */
static void append_claim_stamp(bson_t *u, const claim_t *k) {
  bson_t set, stamp;
  bson_append_document_begin(u, "$set", 4, &set);
  bson_append_document_begin(&set, k->claim, -1, &stamp);
  bson_append_double(&stamp, "until", 5, k->until);
  bson_append_utf8(&stamp, "token", 5, k->token, (int)k->toklen);
  bson_append_document_end(&set, &stamp);
  bson_append_document_end(u, &set);
}

/* Stamps every document of `ids` (an array under "$in") that is still
 * unclaimed with the claim, in one update. */
static int claim_all(ms_store_t *s, const claim_t *k, const bson_t *ids, bson_error_t *be) {
  bson_t q = BSON_INITIALIZER, u = BSON_INITIALIZER, in;
  int ok;
  bson_append_document_begin(&q, "_id", 3, &in);
  bson_append_array(&in, "$in", 3, ids);
  bson_append_document_end(&q, &in);
  append_unclaimed(&q, k->claim, k->now);
  append_claim_stamp(&u, k);
  ok = mongoc_collection_update_many(s->exes, &q, &u, NULL, NULL, be);
  bson_destroy(&q);
  bson_destroy(&u);
  return ok;
}

/* The same for a single candidate, in one round trip: an update that
 * matches only while it is unclaimed and returns the document with its
 * entries (*reply, always initialised: its "value" is null when another
 * relay claimed it first). */
static int claim_one(ms_store_t *s, const claim_t *k, const bson_value_t *id, bson_t *reply, bson_error_t *be) {
  bson_t q = BSON_INITIALIZER, u = BSON_INITIALIZER, fields = BSON_INITIALIZER;
  mongoc_find_and_modify_opts_t *fam;
  int ok;
  bson_append_value(&q, "_id", 3, id);
  append_unclaimed(&q, k->claim, k->now);
  append_claim_stamp(&u, k);
  bson_append_int32(&fields, k->field, -1, 1);
  fam = mongoc_find_and_modify_opts_new();
  mongoc_find_and_modify_opts_set_update(fam, &u);
  mongoc_find_and_modify_opts_set_fields(fam, &fields);
  mongoc_find_and_modify_opts_set_flags(fam, MONGOC_FIND_AND_MODIFY_RETURN_NEW);
  ok = mongoc_collection_find_and_modify_with_opts(s->exes, &q, fam, reply, be);
  mongoc_find_and_modify_opts_destroy(fam);
  bson_destroy(&q);
  bson_destroy(&u);
  bson_destroy(&fields);
  return ok;
}

/* Appends the entries of one claimed document to the list on top of the
 * stack, each with token, lease_until and source_id. */
static int push_claimed(lua_State *L, const claim_t *k, const bson_t *doc, lua_Integer *n, ms_err_t *e) {
  bson_iter_t id_it, arr, entries;
  if (!bson_iter_init_find(&id_it, doc, "_id")) return 0;
  if (!(bson_iter_init_find(&arr, doc, k->field) && BSON_ITER_HOLDS_ARRAY(&arr))) return 0;
  bson_iter_recurse(&arr, &entries);
  while (bson_iter_next(&entries)) {
    if (!BSON_ITER_HOLDS_DOCUMENT(&entries) || !entry_taken(k, &entries)) continue;
    if (ms_push_bson_value(L, &entries, -1, e)) return -1;
    lua_pushlstring(L, k->token, k->toklen);
    lua_setfield(L, -2, "token");
    lua_pushnumber(L, k->until);
    lua_setfield(L, -2, "lease_until");
    if (BSON_ITER_HOLDS_UTF8(&id_it)) {
      uint32_t idl;
      const char *idv = bson_iter_utf8(&id_it, &idl);
      lua_pushlstring(L, idv, idl);
      lua_setfield(L, -2, "source_id");
    }
    lua_rawseti(L, -2, ++*n);
  }
  return 0;
}

/* Reads back the documents of `ids` that carry this pass's token, with their
 * entries as they are now, and pushes the entries. */
static int read_claimed(lua_State *L, ms_store_t *s, const claim_t *k, const bson_t *ids, uint32_t nids,
                        lua_Integer *n, bson_error_t *be, ms_err_t *e, int *failed_here) {
  bson_t q = BSON_INITIALIZER, opts = BSON_INITIALIZER, in, proj;
  mongoc_cursor_t *cur;
  const bson_t *doc;
  char tokkey[48];
  int rc = 0;
  *failed_here = 0;
  snprintf(tokkey, sizeof tokkey, "%s.token", k->claim);
  /* the filter is the _id alone, which every server answers from the _id
   * index (SecantusDB plans _id with any other condition as a collection
   * scan): the token is checked here */
  bson_append_document_begin(&q, "_id", 3, &in);
  bson_append_array(&in, "$in", 3, ids);
  bson_append_document_end(&q, &in);
  bson_append_document_begin(&opts, "projection", 10, &proj);
  bson_append_int32(&proj, k->field, -1, 1);
  bson_append_int32(&proj, tokkey, -1, 1);
  bson_append_document_end(&opts, &proj);
  /* at most nids match: the limit lets the server close the cursor */
  bson_append_int64(&opts, "batchSize", 9, (int64_t)nids);
  bson_append_int64(&opts, "limit", 5, (int64_t)nids);
  cur = mongoc_collection_find_with_opts(s->exes, &q, &opts, NULL);
  bson_destroy(&q);
  bson_destroy(&opts);
  while (mongoc_cursor_next(cur, &doc)) {
    bson_iter_t it;
    uint32_t tl;
    const char *tv;
    if (!(bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, tokkey, &it) && BSON_ITER_HOLDS_UTF8(&it)))
      continue;
    tv = bson_iter_utf8(&it, &tl);
    if (tl != k->toklen || memcmp(tv, k->token, tl) != 0) continue;  /* another relay's */
    if (push_claimed(L, k, doc, n, e)) {
      rc = -1;
      break;
    }
  }
  if (rc == 0 && mongoc_cursor_error(cur, be)) {
    rc = -1;
    *failed_here = 1;
  }
  mongoc_cursor_destroy(cur);
  return rc;
}

/* Collects into ids (nids of them) the _ids of the next candidates of
 * cur until they hold at least `room` entries this pass takes; *left counts
 * the external entries a targeted pass leaves, *more drops to 0 once the
 * cursor is done. */
static void collect_candidates(mongoc_cursor_t *cur, const claim_t *k, lua_Integer room, bson_t *ids, uint32_t *nids,
                               lua_Integer *left, int *more) {
  const bson_t *doc;
  lua_Integer want = 0;
  char key[16];
  const char *kp;
  while (want < room) {
    bson_iter_t id_it;
    if (!mongoc_cursor_next(cur, &doc)) {
      *more = 0;
      break;
    }
    lua_Integer seen;
    if (!bson_iter_init_find(&id_it, doc, "_id") || claimed_elsewhere(doc, k)) continue;
    seen = entries_seen(doc, k, left);
    if (seen == 0) continue; /* nothing this pass takes (external entries, for a targeted pass, ...) */
    bson_uint32_to_string((*nids)++, &kp, key, sizeof key);
    bson_append_value(ids, kp, -1, bson_iter_value(&id_it));
    want += seen;
  }
}

/* Claims the candidates ids (nids of them) and pushes their entries into
 * the table on top (n counts them): one candidate by one findAndModify,
 * more by one update and one find. 0, or what it pushed for a failure. */
static int claim_candidates(lua_State *L, ms_store_t *s, const claim_t *k, const bson_t *ids, uint32_t nids,
                            lua_Integer *n, const char *doing) {
  bson_error_t be;
  ms_err_t e;
  int failed_here;
  if (nids == 1) {
    /* one candidate: claimed and read back by one findAndModify */
    bson_iter_t it, val;
    bson_t reply, value;
    int rc = 0;
    const uint8_t *data;
    uint32_t len;
    bson_iter_init_find(&it, ids, "0");
    if (!claim_one(s, k, bson_iter_value(&it), &reply, &be)) {
      bson_destroy(&reply);
      return ms_store_push_bson_err(L, s, &be, doing);
    }
    if (bson_iter_init_find(&val, &reply, "value") && BSON_ITER_HOLDS_DOCUMENT(&val)) {
      bson_iter_document(&val, &len, &data);
      if (bson_init_static(&value, data, len)) rc = push_claimed(L, k, &value, n, &e);
    }
    bson_destroy(&reply);
    if (rc) return ms_store_push_err(L, s, &e);
  } else if (nids > 1) {
    if (!claim_all(s, k, ids, &be)) return ms_store_push_bson_err(L, s, &be, doing);
    if (read_claimed(L, s, k, ids, nids, n, &be, &e, &failed_here))
      return failed_here ? ms_store_push_bson_err(L, s, &be, doing) : ms_store_push_err(L, s, &e);
  }
  return 0;
}

/* Claims the pending entries of array `field` (outbox or spawns) until at
 * least `limit` are held, in three round trips however many documents hold
 * them: the find of candidates (unclaimed, or their lease ran out), one
 * update that stamps them all with <field>_claim = { until, token } while
 * each is still unclaimed, and one find of the documents that now carry the
 * token, with their entries. Candidates another relay stamped first are left
 * to it; when that leaves the pass short, the next candidates are tried the
 * same way. A single candidate is claimed and read in one findAndModify.
 * One relay therefore holds all of one source's entries and delivers them
 * in seq order; an ack or a release carrying the token does
 * nothing once a later relay has claimed the document. Pushes the entries,
 * each with token, lease_until and source_id (unsorted). */
static int claim_entries(lua_State *L, ms_store_t *s, const char *field, lua_Integer limit, double lease,
                         const char *token, size_t toklen, int targeted, int external, const char *doing) {
  claim_t k;
  mongoc_cursor_t *cur;
  bson_error_t be;
  lua_Integer n = 0, left = 0;
  int more = 1;
  k.field = field;
  k.token = token;
  k.toklen = toklen;
  k.targeted = targeted;
  k.external = external;
  k.now = ms_now();
  k.until = k.now + lease;
  snprintf(k.claim, sizeof k.claim, "%s_claim", field);
  snprintf(k.untilkey, sizeof k.untilkey, "%s.until", k.claim);
  cur = claim_find(s, &k, limit);
  lua_newtable(L);
  while (more && n < limit) {
    bson_t ids = BSON_INITIALIZER;
    uint32_t nids = 0;
    int nret;
    collect_candidates(cur, &k, limit - n, &ids, &nids, &left, &more);
    nret = claim_candidates(L, s, &k, &ids, nids, &n, doing);
    bson_destroy(&ids);
    if (nret) {
      mongoc_cursor_destroy(cur);
      return nret;
    }
  }
  if (mongoc_cursor_error(cur, &be)) {
    mongoc_cursor_destroy(cur);
    return ms_store_push_bson_err(L, s, &be, doing);
  }
  mongoc_cursor_destroy(cur);
  if (k.targeted) {
    lua_pushinteger(L, left);
    lua_setfield(L, -2, "external_left");
  }
  return 1;
}

static int claim_args(lua_State *L, ms_store_t *s, const char *field, const char *doing) {
  lua_Integer limit = (lua_Integer)ms_arg_integer(L, 2, "claim: limit");
  double lease = ms_arg_number(L, 3, "claim: lease");
  size_t toklen;
  const char *token = ms_arg_string(L, 4, "claim: token", &toklen);
  int targeted = lua_toboolean(L, 5), external = lua_toboolean(L, 6);
  if (limit < 1 || !(lease > 0) || toklen == 0) return luaL_error(L, "%s: limit >= 1, lease > 0 and a token", doing);
  if (targeted && external) return luaL_error(L, "%s: targeted or external, not both", doing);
  return claim_entries(L, s, field, limit, lease, token, toklen, targeted, external, doing);
}

/* Gives a claimed document's entries back before the lease ends (a relay
 * that is done with them, or could not deliver them yet), only while the
 * claim is still the caller's. */
static int release_entry(lua_State *L, ms_store_t *s, const char *field, const char *doing) {
  size_t idlen, toklen;
  ms_err_t e;
  char what[48];
  const char *id, *token;
  bson_t q = BSON_INITIALIZER, u = BSON_INITIALIZER, set;
  bson_error_t be;
  char tokkey[48], untilkey[48];
  int ok;
  snprintf(what, sizeof what, "%s: source_id", doing);
  id = ms_check_id(L, 2, what, &idlen, &e);
  snprintf(what, sizeof what, "%s: token", doing);
  token = ms_arg_string(L, 3, what, &toklen);
  if (!id) return ms_push_error(L, &e);
  if (ms_text_error(token, toklen)) {
    ms_err_set(&e, "invalid", "%s: token %s", doing, ms_text_error(token, toklen));
    return ms_push_error(L, &e);
  }
  snprintf(tokkey, sizeof tokkey, "%s_claim.token", field);
  snprintf(untilkey, sizeof untilkey, "%s_claim.until", field);
  bson_append_utf8(&q, "_id", 3, id, (int)idlen);
  bson_append_utf8(&q, tokkey, -1, token, (int)toklen);
  bson_append_document_begin(&u, "$set", 4, &set);
  bson_append_double(&set, untilkey, -1, 0.0);
  bson_append_document_end(&u, &set);
  ok = mongoc_collection_update_one(s->exes, &q, &u, NULL, NULL, &be);
  bson_destroy(&q);
  bson_destroy(&u);
  if (!ok) return ms_store_push_bson_err(L, s, &be, doing);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_release_outbox(lua_State *L) {
  STORE_OR_CLOSED(L, s, "release_outbox");
  return release_entry(L, s, "outbox", "release_outbox");
}

static int l_release_spawn(lua_State *L) {
  STORE_OR_CLOSED(L, s, "release_spawn");
  return release_entry(L, s, "spawns", "release_spawn");
}

/* The source id and token every update of a held outbox claim starts from,
 * checked; NULL (and *e set) on a bad value. */
static const char *claim_args_of(lua_State *L, const char *doing, size_t *idlen, const char **token, size_t *toklen,
                                 ms_err_t *e) {
  char what[48];
  const char *id;
  snprintf(what, sizeof what, "%s: source_id", doing);
  id = ms_check_id(L, 2, what, idlen, e);
  snprintf(what, sizeof what, "%s: token", doing);
  *token = ms_arg_string(L, 3, what, toklen);
  if (!id) return NULL;
  if (*toklen == 0 || ms_text_error(*token, *toklen)) {
    ms_err_set(e, "invalid", "%s: token %s", doing, *toklen == 0 ? "is empty" : ms_text_error(*token, *toklen));
    return NULL;
  }
  return id;
}

/* Sends update u to the document `id` while its outbox claim carries
 * token (and, with seq >= 0, while it holds that entry); pushes whether it
 * matched, or the error. */
static int held_update(lua_State *L, ms_store_t *s, const char *id, size_t idlen, const char *token, size_t toklen,
                       int64_t seq, bson_t *u, const char *doing) {
  bson_t q = BSON_INITIALIZER, reply;
  bson_error_t be;
  bson_iter_t it;
  int ok, matched = 0;
  bson_append_utf8(&q, "_id", 3, id, (int)idlen);
  bson_append_utf8(&q, "outbox_claim.token", -1, token, (int)toklen);
  if (seq >= 0) bson_append_int64(&q, "outbox.seq", -1, seq);
  ok = mongoc_collection_update_one(s->exes, &q, u, NULL, &reply, &be);
  bson_destroy(&q);
  if (ok && bson_iter_init_find(&it, &reply, "matchedCount") && BSON_ITER_HOLDS_NUMBER(&it))
    matched = bson_iter_as_int64(&it) > 0;
  bson_destroy(&reply);
  if (!ok) return ms_store_push_bson_err(L, s, &be, doing);
  lua_pushboolean(L, matched);
  return 1;
}

/* store:renew_outbox(source_id, token, lease) -> true, until | false
 * Extends a held claim (a handler still running on its entries) to now +
 * lease, only while it is still the caller's: false when it passed on. */
static int l_renew_outbox(lua_State *L) {
  STORE_OR_CLOSED(L, s, "renew_outbox");
  size_t idlen, toklen;
  const char *id, *token;
  double lease, until;
  bson_t u = BSON_INITIALIZER, set;
  ms_err_t e;
  int rc;
  id = claim_args_of(L, "renew_outbox", &idlen, &token, &toklen, &e);
  lease = ms_arg_number(L, 4, "renew_outbox: lease");
  if (!id) return ms_push_error(L, &e);
  if (!(lease > 0 && lease <= 86400)) {
    ms_err_set(&e, "invalid", "renew_outbox: lease must be seconds, > 0 and at most a day");
    return ms_push_error(L, &e);
  }
  until = ms_now() + lease;
  bson_append_document_begin(&u, "$set", 4, &set);
  bson_append_double(&set, "outbox_claim.until", -1, until);
  bson_append_document_end(&u, &set);
  rc = held_update(L, s, id, idlen, token, toklen, -1, &u, "renew_outbox");
  bson_destroy(&u);
  if (rc != 1 || !lua_toboolean(L, -1)) return rc;
  lua_pushnumber(L, until);
  return 2;
}

/* store:retry_outbox(source_id, token, seq, retry_at, tries[, release]) -> true | false
 * A failed try of a held external entry: stamps it with when it may be
 * claimed again (retry_at, epoch seconds) and how many tries it had, and
 * with release also gives the claim back, in one update that matches only
 * while the claim is the caller's and the entry is there. */
static int l_retry_outbox(lua_State *L) {
  STORE_OR_CLOSED(L, s, "retry_outbox");
  size_t idlen, toklen;
  const char *id, *token;
  int64_t seq, tries;
  double retry_at;
  bson_t u = BSON_INITIALIZER, set;
  ms_err_t e;
  int rc;
  id = claim_args_of(L, "retry_outbox", &idlen, &token, &toklen, &e);
  seq = ms_arg_integer(L, 4, "retry_outbox: seq");
  retry_at = ms_arg_number(L, 5, "retry_outbox: retry_at");
  tries = ms_arg_integer(L, 6, "retry_outbox: tries");
  if (!id) return ms_push_error(L, &e);
  if (seq < 0 || tries < 0 || !(retry_at >= 0 && retry_at < 1e11)) {
    ms_err_set(&e, "invalid", "retry_outbox: seq and tries >= 0, retry_at epoch seconds");
    return ms_push_error(L, &e);
  }
  bson_append_document_begin(&u, "$set", 4, &set);
  bson_append_double(&set, "outbox.$.retry_at", -1, retry_at);
  bson_append_int64(&set, "outbox.$.tries", -1, tries);
  if (lua_toboolean(L, 7)) bson_append_double(&set, "outbox_claim.until", -1, 0.0);
  bson_append_document_end(&u, &set);
  rc = held_update(L, s, id, idlen, token, toklen, seq, &u, "retry_outbox");
  bson_destroy(&u);
  return rc;
}

/* store:_claim_outbox(limit, lease, token[, targeted[, external]]) / _claim_spawns(...) */
static int l_claim_outbox(lua_State *L) {
  STORE_OR_CLOSED(L, s, "pending_outbox");
  return claim_args(L, s, "outbox", "pending_outbox");
}

static int l_claim_spawns(lua_State *L) {
  STORE_OR_CLOSED(L, s, "pending_spawns");
  return claim_args(L, s, "spawns", "pending_spawns");
}

/* store:_pending_outbox() -> { {seq, target_id, event = "<json>"}, ... } unsorted */
static int l_pending_outbox(lua_State *L) {
  STORE_OR_CLOSED(L, s, "pending_outbox");
  lua_newtable(L);
  if (collect_entries(L, s, "outbox", "pending_outbox")) return 3;
  return 1;
}

/* store:_pending_spawns() -> { {seq, parent_id, child_id, root_path, context}, ... } unsorted */
static int l_pending_spawns(lua_State *L) {
  STORE_OR_CLOSED(L, s, "pending_spawns");
  lua_newtable(L);
  if (collect_entries(L, s, "spawns", "pending_spawns")) return 3;
  return 1;
}

/* $pull of the entry with this seq from array `field`: removes exactly it. */
static int ack(lua_State *L, const char *field, const char *doing) {
  STORE_OR_CLOSED(L, s, doing);
  char what[48];
  int64_t seq;
  size_t toklen = 0;
  const char *token = NULL;
  bson_t filter = BSON_INITIALIZER, update = BSON_INITIALIZER, pull, cond;
  bson_error_t be;
  char key[32];
  int ok;
  snprintf(what, sizeof what, "%s: seq", doing);
  seq = ms_arg_integer(L, 2, what);
  if (!lua_isnoneornil(L, 3)) {
    snprintf(what, sizeof what, "%s: token", doing);
    token = ms_arg_string(L, 3, what, &toklen);
    if (ms_text_error(token, toklen)) {
      ms_err_t e;
      ms_err_set(&e, "invalid", "%s %s", what, ms_text_error(token, toklen));
      return ms_push_error(L, &e);
    }
  }
  snprintf(key, sizeof key, "%s.seq", field);
  bson_append_int64(&filter, key, -1, (int64_t)seq);
  if (token) {
    /* only while the document is still claimed by the caller */
    char tokkey[48];
    snprintf(tokkey, sizeof tokkey, "%s_claim.token", field);
    bson_append_utf8(&filter, tokkey, -1, token, (int)toklen);
  }
  bson_append_document_begin(&update, "$pull", 5, &pull);
  bson_append_document_begin(&pull, field, -1, &cond);
  bson_append_int64(&cond, "seq", 3, (int64_t)seq);
  bson_append_document_end(&pull, &cond);
  bson_append_document_end(&update, &pull);
  ok = mongoc_collection_update_one(s->exes, &filter, &update, NULL, NULL, &be);
  bson_destroy(&filter);
  bson_destroy(&update);
  if (!ok) return ms_store_push_bson_err(L, s, &be, doing);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_ack_outbox(lua_State *L) { return ack(L, "outbox", "ack_outbox"); }

static int l_ack_spawn(lua_State *L) { return ack(L, "spawns", "ack_spawn"); }

/* Checks every ack of ack_outbox_many (the list at 2, n long) before
 * anything is sent: 0, or what it pushed (nil, msg, code) for a bad source
 * id or token; a wrong shape raises. */
static int check_outbox_acks(lua_State *L, lua_Integer n) {
  lua_Integer i;
  for (i = 1; i <= n; i++) {
    ms_err_t e;
    size_t toklen;
    const char *token;
    lua_rawgeti(L, 2, i);
    if (!lua_istable(L, -1)) return luaL_error(L, "ack_outbox_many: acks[%d] must be a table", (int)i);
    lua_getfield(L, -1, "source_id");
    if (!ms_check_id(L, -1, "ack_outbox_many: source_id", NULL, &e)) return ms_push_error(L, &e);
    lua_getfield(L, -2, "token");
    token = ms_arg_string(L, -1, "ack_outbox_many: token", &toklen);
    if (ms_text_error(token, toklen)) {
      ms_err_set(&e, "invalid", "ack_outbox_many: token %s", ms_text_error(token, toklen));
      return ms_push_error(L, &e);
    }
    lua_getfield(L, -3, "seqs");
    ms_arg_table(L, -1, "ack_outbox_many: seqs");
    lua_pop(L, 4);
  }
  return 0;
}

/* The update of acks[i] (checked): q its source document while still
 * claimed by its token, u the $pull of its seqs and, with release, the
 * claim given back. */
static void build_outbox_ack(lua_State *L, lua_Integer i, bson_t *q, bson_t *u) {
  bson_t pull, cond, in, arr;
  const char *id, *token;
  size_t idlen, toklen;
  lua_Integer j, m;
  int64_t seq;
  lua_rawgeti(L, 2, i);
  lua_getfield(L, -1, "source_id");
  id = lua_tolstring(L, -1, &idlen);
  lua_getfield(L, -2, "token");
  token = lua_tolstring(L, -1, &toklen);
  bson_append_utf8(q, "_id", 3, id, (int)idlen);
  bson_append_utf8(q, "outbox_claim.token", -1, token, (int)toklen);
  bson_append_document_begin(u, "$pull", 5, &pull);
  bson_append_document_begin(&pull, "outbox", 6, &cond);
  bson_append_document_begin(&cond, "seq", 3, &in);
  bson_append_array_begin(&in, "$in", 3, &arr);
  lua_getfield(L, -3, "seqs");
  m = (lua_Integer)luaL_len(L, -1);
  for (j = 1; j <= m; j++) {
    char ik[24];
    const char *ikey;
    size_t iklen = bson_uint32_to_string((uint32_t)(j - 1), &ikey, ik, sizeof ik);
    lua_rawgeti(L, -1, j);
    seq = ms_arg_integer(L, -1, "ack_outbox_many: seqs[i]");
    bson_append_int64(&arr, ikey, (int)iklen, seq);
    lua_pop(L, 1);
  }
  bson_append_array_end(&in, &arr);
  bson_append_document_end(&cond, &in);
  bson_append_document_end(&pull, &cond);
  bson_append_document_end(u, &pull);
  lua_getfield(L, -4, "release");
  if (lua_toboolean(L, -1)) {
    bson_t set;
    bson_append_document_begin(u, "$set", 4, &set);
    bson_append_double(&set, "outbox_claim.until", -1, 0.0);
    bson_append_document_end(u, &set);
  }
  lua_pop(L, 5);
}

/* store:ack_outbox_many({ { source_id, token, seqs = { seq, ... }, release = bool }, ... })
 * -> true | nil, msg, code
 * The acks of a relay pass: one update per source document, all in one
 * unordered bulk write. Each pulls the listed seqs only while the document
 * is still claimed by token, and with release also gives the claim back (the
 * pass is done with that source), so an ack and a release cost one write. */
static int l_ack_outbox_many(lua_State *L) {
  STORE_OR_CLOSED(L, s, "ack_outbox_many");
  bson_t opts = BSON_INITIALIZER, reply;
  bson_error_t be;
  mongoc_bulk_operation_t *bulk;
  lua_Integer i, n;
  int ok, nret;
  ms_arg_table(L, 2, "ack_outbox_many: acks");
  n = (lua_Integer)luaL_len(L, 2);
  /* every entry checked before anything is sent */
  nret = check_outbox_acks(L, n);
  if (nret) return nret;
  if (n == 0) {
    lua_pushboolean(L, 1);
    return 1;
  }
  bson_append_bool(&opts, "ordered", 7, false);
  bulk = mongoc_collection_create_bulk_operation_with_opts(s->exes, &opts);
  bson_destroy(&opts);
  for (i = 1; i <= n; i++) {
    bson_t q = BSON_INITIALIZER, u = BSON_INITIALIZER;
    build_outbox_ack(L, i, &q, &u);
    ok = mongoc_bulk_operation_update_one_with_opts(bulk, &q, &u, NULL, &be);
    bson_destroy(&q);
    bson_destroy(&u);
    if (!ok) {
      mongoc_bulk_operation_destroy(bulk);
      return ms_store_push_bson_err(L, s, &be, "ack_outbox_many");
    }
  }
  ok = (int)mongoc_bulk_operation_execute(bulk, &reply, &be);
  mongoc_bulk_operation_destroy(bulk);
  bson_destroy(&reply);
  if (!ok) return ms_store_push_bson_err(L, s, &be, "ack_outbox_many");
  lua_pushboolean(L, 1);
  return 1;
}

static const luaL_Reg relay_methods[] = {
  {"_pending_outbox", l_pending_outbox},
  {"_pending_spawns", l_pending_spawns},
  {"_claim_outbox", l_claim_outbox},
  {"_claim_spawns", l_claim_spawns},
  {"release_outbox", l_release_outbox},
  {"release_spawn", l_release_spawn},
  {"renew_outbox", l_renew_outbox},
  {"retry_outbox", l_retry_outbox},
  {"ack_outbox", l_ack_outbox},
  {"ack_outbox_many", l_ack_outbox_many},
  {"ack_spawn", l_ack_spawn},
  {NULL, NULL}
};

void ms_open_relay(lua_State *L) { luaL_setfuncs(L, relay_methods, 0); }
