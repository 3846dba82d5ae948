/*
 * dedupe.c - the digests of the event ids an execution handled, which let a
 * commit refuse an event it already took, over a window far longer than the
 * readable `processed` tail.
 *
 * An execution remembers the events it handled in two places: `processed`,
 * the ids of the last few (at most MS_DEDUPE_TAIL; harel's own store reads
 * and writes this array, and the commit's filter refuses an id found in it),
 * and `dedupe`, a binary string of MS_DIGEST-byte digests of the last
 * dedupe_window ids, oldest first. The digest list is one BSON element
 * however long the window, so a long-lived execution's document stays small
 * and cheap to rewrite. It is loaded with the execution, checked by the
 * commit, and replaced by it, all under the version check, so a check made
 * at the loaded version holds at the commit. The digest is the first bytes
 * of SHA-256: a caller cannot choose an id that passes for another one.
 */
#include "store.h"

#include <string.h>

#include <openssl/sha.h>

void ms_ev_digest(const char *ev, size_t len, uint8_t out[MS_DIGEST]) {
  unsigned char full[SHA256_DIGEST_LENGTH];
  SHA256((const unsigned char *)ev, len, full);
  memcpy(out, full, MS_DIGEST);
}

int ms_digests_hold(const uint8_t *list, size_t len, const uint8_t d[MS_DIGEST]) {
  size_t i;
  for (i = 0; i + MS_DIGEST <= len; i += MS_DIGEST)
    if (memcmp(list + i, d, MS_DIGEST) == 0) return 1;
  return 0;
}

/* The `dedupe` digests of a fetched document (none: *len = 0). */
static const uint8_t *doc_digests(const bson_t *doc, uint32_t *len) {
  bson_iter_t it;
  const uint8_t *p = NULL;
  bson_subtype_t sub;
  *len = 0;
  if (doc && bson_iter_init_find(&it, doc, "dedupe") && BSON_ITER_HOLDS_BINARY(&it))
    bson_iter_binary(&it, &sub, len, &p);
  return p;
}

/* Whether a fetched document's digests hold event id ev. */
int ms_doc_marks(const bson_t *doc, const char *ev, size_t evlen) {
  uint8_t d[MS_DIGEST];
  uint32_t len;
  const uint8_t *list = doc_digests(doc, &len);
  if (!list) return 0;
  ms_ev_digest(ev, evlen, d);
  return ms_digests_hold(list, len, d);
}

int64_t ms_dedupe_tail(const ms_store_t *s) {
  return s->dedupe_window < MS_DEDUPE_TAIL ? s->dedupe_window : MS_DEDUPE_TAIL;
}

/* The dedupe digests of a fetched document as a string ("" when none), for
 * the execution to carry to its next commit. */
void ms_push_digests(lua_State *L, const bson_t *doc) {
  uint32_t len;
  const uint8_t *p = doc_digests(doc, &len);
  lua_pushlstring(L, p ? (const char *)p : "", p ? len : 0);
}

/* The digests a commit marking the n digests ds (n * MS_DIGEST bytes, in
 * order) stores: the newest dedupe_window - n of the loaded list (oldest
 * first, whole digests only), then ds; the newest dedupe_window of ds when
 * n is larger. */
uint8_t *ms_digests_add(const ms_store_t *s, const char *list, size_t len, const uint8_t *ds, size_t n,
                        size_t *outlen) {
  size_t have = len / MS_DIGEST, window = (size_t)s->dedupe_window, keep, take = n;
  uint8_t *out;
  if (take > window) take = window;
  keep = window - take;
  if (keep > have) keep = have;
  *outlen = (keep + take) * MS_DIGEST;
  out = bson_malloc(*outlen ? *outlen : 1);
  if (keep) memcpy(out, list + (have - keep) * MS_DIGEST, keep * MS_DIGEST);
  memcpy(out + keep * MS_DIGEST, ds + (n - take) * MS_DIGEST, take * MS_DIGEST);
  return out;
}
