/*
 * bench/batch_limit.c - what libmongoc alone achieves doing batched
 * delivery's round trips, the limit bench/batch.lua compares mongostore's
 * batched path against: for K execution-shaped documents, one find with
 * $in of the K _ids (the loads), then one unordered bulk write of K
 * compare-and-set updates, each filtered on {_id, version} and setting a new
 * data string with $inc of version (the commits). No codec, no interpreter,
 * no Lua.
 *
 * usage: batch_limit <uri> <db> <label> <K,K,...> [events] [indexed|bare]
 *        batch_limit ping <label>=<uri> ...
 *
 * For each K: a fresh collection of K documents (with the secondary
 * indexes a store keeps on its executions, which the server maintains on
 * every update; "bare": without them), a throwaway round, then
 * max(3, events / K) rounds of the batched pair (the "batch" figure), as
 * many of the batched pair whose updates also carry what a mongostore commit
 * adds for exactly-once delivery (the "marked" figure: the dedupe guard
 * processed $ne the event id in the filter, the id pushed onto processed
 * with $slice, a digests field, the promoted status), then max(1, events /
 * K) rounds (each is K events) of the one-event pair, a projected find by
 * _id then a CAS update_one per document (the "one" figure, raw_limit's
 * loop over the same K documents). Events/s = K * rounds / wall. Before
 * that, 2,000 pings give the round trip to the server (through
 * tools/delay-proxy, the proxy's delay and its own cost are in it).
 *
 * The ping form measures round trips to several URIs (the server direct,
 * through tools/delay-proxy with delay 0, with 0.5 ms) in 20 blocks of
 * pings that take turns, so the machine's drift falls on all of them alike;
 * the median block counts: "RESULT ping.<label>_us <v>". The proxy's own
 * cost is its delay-0 figure less the direct one.
 *
 * Prints a table on stderr and "RESULT <label>.ping_us <v>",
 * "RESULT <label>.<batch|marked|one>.k<K>.eps <v>" and
 * "RESULT <label>.batch.k<K>.rt_per_event <v>" on stdout.
 *
 * Built by bench/run.sh with: cc -O2 batch_limit.c $(pkg-config --cflags --libs libmongoc-1.0)
 */
#include <mongoc/mongoc.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DATA_LEN 300
#define ID_LEN 32
#define PINGS 2000
#define MAX_KS 16

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void die(const char *what, const bson_error_t *err) {
  fprintf(stderr, "batch_limit: %s: %s\n", what, err ? err->message : "failed");
  exit(1);
}

static void doc_id(char *buf, long i) {
  snprintf(buf, ID_LEN, "batch-limit-%ld", i);
}

/* A ~300-byte data string that changes with every version, so each CAS
 * really rewrites the field. */
static void make_data(char *buf, long i, int64_t version) {
  int n = snprintf(buf, DATA_LEN + 1,
                   "{\"id\":\"batch-limit-%ld\",\"definition_id\":\"pp\",\"status\":\"RUNNING\","
                   "\"active_path\":\"A\",\"version\":%lld,\"context\":{\"pad\":\"",
                   i, (long long)version);
  for (; n < DATA_LEN - 3; n++) buf[n] = (char)('a' + (version + n) % 26);
  buf[n++] = '"';
  buf[n++] = '}';
  buf[n++] = '}';
  buf[n] = '\0';
}

typedef struct {
  mongoc_collection_t *coll;
  long k;
  int64_t *version; /* each document's version as last seen */
} set_t;

/* The secondary indexes a store creates on its executions (csrc/store.c,
 * ensure_indexes): a server maintains them on every update, so the limit
 * carries them too, unless asked for a bare collection. */
static void store_indexes(mongoc_collection_t *coll) {
  static const char *const keys[][4] = {
      {"outbox_seq", "outbox.seq", NULL, NULL},           {"spawns_seq", "spawns.seq", NULL, NULL},
      {"definition_id", "definition_id", NULL, NULL},     {"definition_status_id", "definition_id", "status", "_id"},
      {"next_fire_at", "next_fire_at", NULL, NULL},        {"definition_id_id", "definition_id", "_id", NULL},
  };
  bson_t cmd = BSON_INITIALIZER, idxs, reply;
  bson_error_t err;
  size_t i;
  int j;
  BSON_APPEND_UTF8(&cmd, "createIndexes", mongoc_collection_get_name(coll));
  BSON_APPEND_ARRAY_BEGIN(&cmd, "indexes", &idxs);
  for (i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    bson_t idx, key;
    char n[8];
    snprintf(n, sizeof n, "%d", (int)i);
    BSON_APPEND_DOCUMENT_BEGIN(&idxs, n, &idx);
    BSON_APPEND_DOCUMENT_BEGIN(&idx, "key", &key);
    for (j = 1; j < 4 && keys[i][j]; j++) BSON_APPEND_INT32(&key, keys[i][j], 1);
    bson_append_document_end(&idx, &key);
    BSON_APPEND_UTF8(&idx, "name", keys[i][0]);
    bson_append_document_end(&idxs, &idx);
  }
  bson_append_array_end(&cmd, &idxs);
  if (!mongoc_collection_write_command_with_opts(coll, &cmd, NULL, &reply, &err)) die("createIndexes", &err);
  bson_destroy(&reply);
  bson_destroy(&cmd);
}

static int with_indexes = 1;

/* A fresh collection of k documents shaped like a store's executions. */
static void fill(set_t *s) {
  mongoc_bulk_operation_t *bulk;
  bson_error_t err;
  bson_t reply;
  long i;
  mongoc_collection_drop(s->coll, NULL); /* fails harmlessly when absent */
  if (with_indexes) store_indexes(s->coll);
  bulk = mongoc_collection_create_bulk_operation_with_opts(s->coll, NULL);
  for (i = 0; i < s->k; i++) {
    bson_t doc = BSON_INITIALIZER, arr, sub;
    char id[ID_LEN], data[DATA_LEN + 1];
    doc_id(id, i);
    make_data(data, i, 1);
    BSON_APPEND_UTF8(&doc, "_id", id);
    BSON_APPEND_UTF8(&doc, "definition_id", "pp");
    BSON_APPEND_INT64(&doc, "version", 1);
    BSON_APPEND_UTF8(&doc, "data", data);
    BSON_APPEND_ARRAY_BEGIN(&doc, "outbox", &arr);
    bson_append_array_end(&doc, &arr);
    BSON_APPEND_ARRAY_BEGIN(&doc, "processed", &arr);
    bson_append_array_end(&doc, &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&doc, "timers", &sub);
    bson_append_document_end(&doc, &sub);
    if (!mongoc_bulk_operation_insert_with_opts(bulk, &doc, NULL, &err)) die("insert", &err);
    bson_destroy(&doc);
    s->version[i] = 1;
  }
  if (!mongoc_bulk_operation_execute(bulk, &reply, &err)) die("bulk insert", &err);
  bson_destroy(&reply);
  mongoc_bulk_operation_destroy(bulk);
}

/* The index of a document from its _id ("batch-limit-<i>"), -1 if not ours. */
static long index_of(const bson_t *doc, long k) {
  bson_iter_t it;
  const char *s;
  long i;
  if (!bson_iter_init_find(&it, doc, "_id") || !BSON_ITER_HOLDS_UTF8(&it)) return -1;
  s = bson_iter_utf8(&it, NULL);
  if (strncmp(s, "batch-limit-", 12) != 0) return -1;
  i = atol(s + 12);
  return i >= 0 && i < k ? i : -1;
}

/* One batched round: a find with $in of every _id, then one unordered bulk
 * write of a CAS update per document at the version the find returned. */
static void round_of(set_t *s, int marked);

static void batch_round(set_t *s) { round_of(s, 0); }

/* The same with what a mongostore commit adds for exactly-once delivery:
 * the dedupe guard in the filter (processed: {$ne: event id}), the event id
 * pushed onto processed (kept to its last 16), a digests field and the
 * promoted status. */
static void marked_round(set_t *s) { round_of(s, 1); }

static void round_of(set_t *s, int marked) {
  bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, in, ids, proj, reply;
  const bson_t *doc;
  bson_error_t err;
  mongoc_cursor_t *cur;
  mongoc_bulk_operation_t *bulk;
  bson_t bulk_opts = BSON_INITIALIZER;
  bson_iter_t it;
  long i, got = 0;

  BSON_APPEND_DOCUMENT_BEGIN(&filter, "_id", &in);
  BSON_APPEND_ARRAY_BEGIN(&in, "$in", &ids);
  for (i = 0; i < s->k; i++) {
    char key[24], id[ID_LEN];
    snprintf(key, sizeof key, "%ld", i);
    doc_id(id, i);
    BSON_APPEND_UTF8(&ids, key, id);
  }
  bson_append_array_end(&in, &ids);
  bson_append_document_end(&filter, &in);
  BSON_APPEND_DOCUMENT_BEGIN(&opts, "projection", &proj);
  BSON_APPEND_INT32(&proj, "data", 1);
  BSON_APPEND_INT32(&proj, "version", 1);
  bson_append_document_end(&opts, &proj);
  /* every document in the first reply, and the cursor closed with it (a
   * batchSize alone leaves it open on a real server, which costs a getMore) */
  BSON_APPEND_INT64(&opts, "batchSize", s->k);
  BSON_APPEND_INT64(&opts, "limit", s->k);
  cur = mongoc_collection_find_with_opts(s->coll, &filter, &opts, NULL);
  while (mongoc_cursor_next(cur, &doc)) {
    long j = index_of(doc, s->k);
    if (j >= 0 && bson_iter_init_find(&it, doc, "version") && BSON_ITER_HOLDS_NUMBER(&it)) {
      s->version[j] = bson_iter_as_int64(&it);
      got++;
    }
  }
  if (mongoc_cursor_error(cur, &err)) die("find $in", &err);
  mongoc_cursor_destroy(cur);
  bson_destroy(&filter);
  bson_destroy(&opts);
  if (got != s->k) {
    fprintf(stderr, "batch_limit: find $in returned %ld of %ld documents\n", got, s->k);
    exit(1);
  }

  BSON_APPEND_BOOL(&bulk_opts, "ordered", false);
  bulk = mongoc_collection_create_bulk_operation_with_opts(s->coll, &bulk_opts);
  for (i = 0; i < s->k; i++) {
    bson_t f = BSON_INITIALIZER, u = BSON_INITIALIZER, set, inc;
    char id[ID_LEN], data[DATA_LEN + 1], ev[ID_LEN + 32];
    uint8_t digests[128]; /* 16 digests of 8 bytes, as the store keeps beside processed */
    memset(digests, (int)(s->version[i] & 0xff), sizeof digests);
    doc_id(id, i);
    make_data(data, i, s->version[i] + 1);
    BSON_APPEND_UTF8(&f, "_id", id);
    BSON_APPEND_INT64(&f, "version", s->version[i]);
    if (marked) {
      bson_t ne;
      snprintf(ev, sizeof ev, "%s-ev-%lld", id, (long long)s->version[i]);
      BSON_APPEND_DOCUMENT_BEGIN(&f, "processed", &ne);
      BSON_APPEND_UTF8(&ne, "$ne", ev);
      bson_append_document_end(&f, &ne);
    }
    BSON_APPEND_DOCUMENT_BEGIN(&u, "$set", &set);
    BSON_APPEND_UTF8(&set, "data", data);
    if (marked) {
      BSON_APPEND_UTF8(&set, "status", "RUNNING");
      BSON_APPEND_NULL(&set, "parent_id");
      BSON_APPEND_BINARY(&set, "dedupe", BSON_SUBTYPE_BINARY, digests, sizeof digests);
    }
    bson_append_document_end(&u, &set);
    BSON_APPEND_DOCUMENT_BEGIN(&u, "$inc", &inc);
    BSON_APPEND_INT64(&inc, "version", 1);
    bson_append_document_end(&u, &inc);
    if (marked) {
      bson_t push, spec, each;
      BSON_APPEND_DOCUMENT_BEGIN(&u, "$push", &push);
      BSON_APPEND_DOCUMENT_BEGIN(&push, "processed", &spec);
      BSON_APPEND_ARRAY_BEGIN(&spec, "$each", &each);
      BSON_APPEND_UTF8(&each, "0", ev);
      bson_append_array_end(&spec, &each);
      BSON_APPEND_INT64(&spec, "$slice", -16);
      bson_append_document_end(&push, &spec);
      bson_append_document_end(&u, &push);
    }
    if (!mongoc_bulk_operation_update_one_with_opts(bulk, &f, &u, NULL, &err)) die("bulk update_one", &err);
    bson_destroy(&f);
    bson_destroy(&u);
  }
  if (!mongoc_bulk_operation_execute(bulk, &reply, &err)) die("bulk write", &err);
  if (!bson_iter_init_find(&it, &reply, "nMatched") || bson_iter_as_int64(&it) != s->k) {
    fprintf(stderr, "batch_limit: bulk write matched %lld of %ld CAS updates\n",
            bson_iter_init_find(&it, &reply, "nMatched") ? (long long)bson_iter_as_int64(&it) : -1LL, s->k);
    exit(1);
  }
  bson_destroy(&reply);
  bson_destroy(&bulk_opts);
  mongoc_bulk_operation_destroy(bulk);
}

/* One round of the one-event path: per document a projected find by _id,
 * then a CAS update_one at the version it returned. */
static void one_round(set_t *s) {
  long i;
  for (i = 0; i < s->k; i++) {
    bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, proj, u = BSON_INITIALIZER, set, inc, reply;
    const bson_t *doc;
    bson_error_t err;
    bson_iter_t it;
    mongoc_cursor_t *cur;
    char id[ID_LEN], data[DATA_LEN + 1];
    int64_t version = -1;
    doc_id(id, i);
    BSON_APPEND_UTF8(&filter, "_id", id);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "projection", &proj);
    BSON_APPEND_INT32(&proj, "data", 1);
    BSON_APPEND_INT32(&proj, "version", 1);
    bson_append_document_end(&opts, &proj);
    BSON_APPEND_INT64(&opts, "limit", 1);
    cur = mongoc_collection_find_with_opts(s->coll, &filter, &opts, NULL);
    if (mongoc_cursor_next(cur, &doc)) {
      if (bson_iter_init_find(&it, doc, "version") && BSON_ITER_HOLDS_NUMBER(&it)) version = bson_iter_as_int64(&it);
    } else if (mongoc_cursor_error(cur, &err)) {
      die("find", &err);
    }
    mongoc_cursor_destroy(cur);
    bson_destroy(&opts);
    if (version < 0) {
      fprintf(stderr, "batch_limit: document %s is missing\n", id);
      exit(1);
    }
    BSON_APPEND_INT64(&filter, "version", version);
    make_data(data, i, version + 1);
    BSON_APPEND_DOCUMENT_BEGIN(&u, "$set", &set);
    BSON_APPEND_UTF8(&set, "data", data);
    bson_append_document_end(&u, &set);
    BSON_APPEND_DOCUMENT_BEGIN(&u, "$inc", &inc);
    BSON_APPEND_INT64(&inc, "version", 1);
    bson_append_document_end(&u, &inc);
    if (!mongoc_collection_update_one(s->coll, &filter, &u, NULL, &reply, &err)) die("update_one", &err);
    if (!bson_iter_init_find(&it, &reply, "matchedCount") || bson_iter_as_int64(&it) != 1) {
      fprintf(stderr, "batch_limit: CAS of %s at version %lld did not match\n", id, (long long)version);
      exit(1);
    }
    s->version[i] = version + 1;
    bson_destroy(&reply);
    bson_destroy(&filter);
    bson_destroy(&u);
  }
}

static double cpu_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* Wall microseconds of `rounds` rounds; *cpu gets this process's CPU time. */
static double timed(void (*round)(set_t *), set_t *s, long rounds, double *cpu) {
  double t0 = now_us(), c0 = cpu_us();
  long r;
  for (r = 0; r < rounds; r++) round(s);
  *cpu = cpu_us() - c0;
  return now_us() - t0;
}

static double ping_us(mongoc_client_t *client) {
  bson_t cmd = BSON_INITIALIZER;
  bson_error_t err;
  double t0;
  int i;
  BSON_APPEND_INT32(&cmd, "ping", 1);
  for (i = 0; i < PINGS / 10; i++) /* warm */
    if (!mongoc_client_command_simple(client, "admin", &cmd, NULL, NULL, &err)) die("ping", &err);
  t0 = now_us();
  for (i = 0; i < PINGS; i++)
    if (!mongoc_client_command_simple(client, "admin", &cmd, NULL, NULL, &err)) die("ping", &err);
  t0 = (now_us() - t0) / PINGS;
  bson_destroy(&cmd);
  return t0;
}

#define PING_BLOCKS 20
#define MAX_URIS 8

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int ping_main(int argc, char **argv) {
  mongoc_client_t *clients[MAX_URIS];
  char *labels[MAX_URIS];
  double blocks[MAX_URIS][PING_BLOCKS];
  bson_t cmd = BSON_INITIALIZER;
  bson_error_t err;
  int n = argc - 2, i, b, j;
  if (n < 1 || n > MAX_URIS) {
    fprintf(stderr, "usage: batch_limit ping <label>=<uri> ...\n");
    return 2;
  }
  BSON_APPEND_INT32(&cmd, "ping", 1);
  for (i = 0; i < n; i++) {
    char *eq = strchr(argv[i + 2], '=');
    mongoc_uri_t *uri;
    if (!eq) {
      fprintf(stderr, "batch_limit ping: '%s' is not <label>=<uri>\n", argv[i + 2]);
      return 2;
    }
    labels[i] = bson_strndup(argv[i + 2], (size_t)(eq - argv[i + 2]));
    if (!(uri = mongoc_uri_new_with_error(eq + 1, &err))) die("uri", &err);
    if (!(clients[i] = mongoc_client_new_from_uri_with_error(uri, &err))) die("client", &err);
    mongoc_uri_destroy(uri);
    for (j = 0; j < PINGS / 10; j++) /* warm */
      if (!mongoc_client_command_simple(clients[i], "admin", &cmd, NULL, NULL, &err)) die("ping", &err);
  }
  for (b = 0; b < PING_BLOCKS; b++) {
    for (i = 0; i < n; i++) {
      double t0 = now_us();
      for (j = 0; j < PINGS / PING_BLOCKS; j++)
        if (!mongoc_client_command_simple(clients[i], "admin", &cmd, NULL, NULL, &err)) die("ping", &err);
      blocks[i][b] = (now_us() - t0) / (PINGS / PING_BLOCKS);
    }
  }
  for (i = 0; i < n; i++) {
    qsort(blocks[i], PING_BLOCKS, sizeof blocks[i][0], cmp_double);
    fprintf(stderr, "batch_limit ping %-10s median %8.1f us (blocks %.1f to %.1f)\n", labels[i],
            (blocks[i][PING_BLOCKS / 2 - 1] + blocks[i][PING_BLOCKS / 2]) / 2, blocks[i][0], blocks[i][PING_BLOCKS - 1]);
    printf("RESULT ping.%s_us %.1f\n", labels[i], (blocks[i][PING_BLOCKS / 2 - 1] + blocks[i][PING_BLOCKS / 2]) / 2);
    mongoc_client_destroy(clients[i]);
    bson_free(labels[i]);
  }
  bson_destroy(&cmd);
  return 0;
}

int main(int argc, char **argv) {
  const char *uri_s, *dbname, *label;
  long ks[MAX_KS], events = argc > 5 ? atol(argv[5]) : 10000;
  int nks = 0, j;
  char *list, *tok, *save;
  mongoc_uri_t *uri;
  mongoc_client_t *client;
  bson_error_t err;
  double ping;

  if (argc > 1 && strcmp(argv[1], "ping") == 0) {
    int rc;
    mongoc_init();
    mongoc_log_set_handler(NULL, NULL);
    rc = ping_main(argc, argv);
    mongoc_cleanup();
    return rc;
  }
  if (argc < 5 || argc > 7 || events <= 0 ||
      (argc > 6 && strcmp(argv[6], "bare") != 0 && strcmp(argv[6], "indexed") != 0)) {
    fprintf(stderr, "usage: batch_limit <uri> <db> <label> <K,K,...> [events] [indexed|bare]\n");
    return 2;
  }
  with_indexes = !(argc > 6 && strcmp(argv[6], "bare") == 0);
  uri_s = argv[1];
  dbname = argv[2];
  label = argv[3];
  list = bson_strdup(argv[4]);
  for (tok = strtok_r(list, ",", &save); tok && nks < MAX_KS; tok = strtok_r(NULL, ",", &save)) {
    long k = atol(tok);
    if (k <= 0) {
      fprintf(stderr, "batch_limit: bad K '%s'\n", tok);
      return 2;
    }
    ks[nks++] = k;
  }
  bson_free(list);
  mongoc_init();
  mongoc_log_set_handler(NULL, NULL);
  if (!(uri = mongoc_uri_new_with_error(uri_s, &err))) die("uri", &err);
  if (!(client = mongoc_client_new_from_uri_with_error(uri, &err))) die("client", &err);
  mongoc_client_set_error_api(client, MONGOC_ERROR_API_VERSION_2);
  mongoc_client_set_appname(client, "mongostore-bench-batch-limit");

  ping = ping_us(client);
  fprintf(stderr, "batch_limit %s: ping %.1f us\n%6s %12s %12s %12s %8s %8s\n", label, ping, "K", "one ev/s",
          "batch ev/s", "marked ev/s", "gain", "events");
  printf("RESULT %s.ping_us %.1f\n", label, ping);
  for (j = 0; j < nks; j++) {
    /* at least 3 batched rounds (one or two round trips each), at least
     * one of the one-event loop (K round trips each) */
    long k = ks[j], rounds = events / k > 3 ? events / k : 3, rounds_one = events / k > 1 ? events / k : 1;
    set_t s;
    double t_batch, t_marked, t_one, eps_b, eps_m, eps_1, c_batch, c_marked, c_one;
    s.coll = mongoc_client_get_collection(client, dbname, "executions_batch");
    s.k = k;
    s.version = bson_malloc0((size_t)k * sizeof *s.version);
    fill(&s);
    batch_round(&s); /* throwaway rounds: the server's code paths warm */
    marked_round(&s);
    one_round(&s);
    t_batch = timed(batch_round, &s, rounds, &c_batch);
    t_marked = timed(marked_round, &s, rounds, &c_marked);
    t_one = timed(one_round, &s, rounds_one, &c_one);
    eps_b = (double)(k * rounds) / (t_batch / 1e6);
    eps_m = (double)(k * rounds) / (t_marked / 1e6);
    eps_1 = (double)(k * rounds_one) / (t_one / 1e6);
    fprintf(stderr, "%6ld %12.0f %12.0f %12.0f %7.2fx %8ld\n", k, eps_1, eps_b, eps_m, eps_b / eps_1, k * rounds);
    printf("RESULT %s.batch.k%ld.eps %.0f\n", label, k, eps_b);
    printf("RESULT %s.marked.k%ld.eps %.0f\n", label, k, eps_m);
    printf("RESULT %s.one.k%ld.eps %.0f\n", label, k, eps_1);
    printf("RESULT %s.batch.k%ld.rt_per_event %.3f\n", label, k, 2.0 / (double)k);
    /* the client's own CPU per event, beside bench/batch.lua's */
    printf("RESULT %s.batch.k%ld.cpu_us %.1f\n", label, k, c_batch / (double)(k * rounds));
    printf("RESULT %s.marked.k%ld.cpu_us %.1f\n", label, k, c_marked / (double)(k * rounds));
    printf("RESULT %s.one.k%ld.cpu_us %.1f\n", label, k, c_one / (double)(k * rounds_one));
    mongoc_collection_drop(s.coll, NULL);
    mongoc_collection_destroy(s.coll);
    bson_free(s.version);
  }
  mongoc_client_destroy(client);
  mongoc_uri_destroy(uri);
  mongoc_cleanup();
  return 0;
}
