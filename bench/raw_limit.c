/*
 * bench/raw_limit.c - the two-round-trip limit of one worker on a server:
 * what a bare libmongoc loop achieves when every "event" is one projected
 * find (the load) and one compare-and-set update_one (the commit) of an
 * execution-shaped document, with nothing else in between (no codec, no
 * interpreter, no Lua).
 *
 * usage: raw_limit <uri> [iterations] [warmup] [db] [executions]
 *
 * The one-document loops (ping, find, CAS, find + CAS) work on the only
 * document of collection `executions`; every loop runs `iterations` times,
 * in 10 blocks in which the loops take turns, after `warmup` rounds of every
 * operation. They give the per-operation costs and the issue's
 * two-round-trip limit, 1e6 / (find + CAS). The CAS loop also runs on a
 * document whose processed array holds 1,000 event ids (a full default
 * dedupe window), which shows what the server charges for carrying it.
 *
 * With executions > 0 it also runs the events benchmark's workload with
 * nothing but libmongoc: on an empty collection `executions_flow`, for each
 * of `executions` executions in turn, an insert (its start: one round trip)
 * and then a find by _id plus a CAS update_one (its one event: two round
 * trips), two events per execution, as bench/events.lua drives them through
 * mongostore. The collection grows as it goes, as it does there, which
 * matters on a server that answers the CAS filter {_id, version} by scanning
 * the collection (mongo-java-server does). Three rounds; the median counts.
 *
 * Prints a human-readable summary on stderr and, on stdout, lines of the
 * form "RESULT raw.<key> <value>" for bench/run.sh: ping_us, find_us, cas_us,
 * pair_us, pair_ops, limit_eps for one document, window_ids and
 * cas_window_us for the one with a full window, and with executions > 0
 * flow.executions, flow.events, flow.wall_s, flow.eps (events/s).
 *
 * Built by bench/run.sh with: cc -O2 raw_limit.c $(pkg-config --cflags --libs libmongoc-1.0)
 */
#include <mongoc/mongoc.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DATA_LEN 300
#define ID_LEN 32
#define BLOCKS 10
#define WINDOW 1000 /* mongostore's default dedupe_window */

/* A set of documents the loops go round: document k mod n at step k, with
 * the version each one was last seen at. */
typedef struct {
  mongoc_collection_t *coll;
  long n;
  long next;
  int64_t *version;
  long processed; /* event ids in each document's processed array */
  double t_find, t_cas, t_pair; /* microseconds spent in each loop */
} docs_t;

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void die(const char *what, const bson_error_t *err) {
  fprintf(stderr, "raw_limit: %s: %s\n", what, err ? err->message : "failed");
  exit(1);
}

static void doc_id(char *buf, long i) {
  snprintf(buf, ID_LEN, "raw-limit-%ld", i + 1);
}

/* A ~300-byte JSON-ish data string that changes with every version, so each
 * CAS really rewrites the field. */
static void make_data(char *buf, const char *id, int64_t version) {
  int n = snprintf(buf, DATA_LEN + 1,
                   "{\"id\":\"%s\",\"definition_id\":\"flat\",\"status\":\"RUNNING\","
                   "\"active_path\":\"Waiting\",\"version\":%lld,\"context\":{\"pad\":\"",
                   id, (long long)version);
  for (; n < DATA_LEN - 3; n++) buf[n] = (char)('a' + (version + n) % 26);
  buf[n++] = '"';
  buf[n++] = '}';
  buf[n++] = '}';
  buf[n] = '\0';
}

static void ping(mongoc_client_t *client) {
  bson_t cmd = BSON_INITIALIZER;
  bson_error_t err;
  BSON_APPEND_INT32(&cmd, "ping", 1);
  if (!mongoc_client_command_simple(client, "admin", &cmd, NULL, NULL, &err)) die("ping", &err);
  bson_destroy(&cmd);
}

/* The load: a projected find by _id, limit 1. Returns the stored version. */
static int64_t load(mongoc_collection_t *coll, const char *id) {
  bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, proj;
  const bson_t *doc;
  bson_error_t err;
  bson_iter_t it;
  int64_t version = -1;
  mongoc_cursor_t *cur;
  BSON_APPEND_UTF8(&filter, "_id", id);
  BSON_APPEND_DOCUMENT_BEGIN(&opts, "projection", &proj);
  BSON_APPEND_INT32(&proj, "data", 1);
  BSON_APPEND_INT32(&proj, "version", 1);
  bson_append_document_end(&opts, &proj);
  BSON_APPEND_INT64(&opts, "limit", 1);
  cur = mongoc_collection_find_with_opts(coll, &filter, &opts, NULL);
  if (mongoc_cursor_next(cur, &doc)) {
    if (bson_iter_init_find(&it, doc, "version") && BSON_ITER_HOLDS_NUMBER(&it)) version = bson_iter_as_int64(&it);
  } else if (mongoc_cursor_error(cur, &err)) {
    die("find", &err);
  }
  mongoc_cursor_destroy(cur);
  bson_destroy(&filter);
  bson_destroy(&opts);
  if (version < 0) {
    fprintf(stderr, "raw_limit: find: document %s is missing\n", id);
    exit(1);
  }
  return version;
}

/* The commit: update_one filtered on _id and the loaded version, $set of
 * the data string and version + 1. Returns the new version. */
static int64_t cas(mongoc_collection_t *coll, const char *id, int64_t version) {
  bson_t filter = BSON_INITIALIZER, update = BSON_INITIALIZER, set, reply;
  bson_error_t err;
  bson_iter_t it;
  char data[DATA_LEN + 1];
  make_data(data, id, version + 1);
  BSON_APPEND_UTF8(&filter, "_id", id);
  BSON_APPEND_INT64(&filter, "version", version);
  BSON_APPEND_DOCUMENT_BEGIN(&update, "$set", &set);
  BSON_APPEND_UTF8(&set, "data", data);
  BSON_APPEND_INT64(&set, "version", version + 1);
  bson_append_document_end(&update, &set);
  if (!mongoc_collection_update_one(coll, &filter, &update, NULL, &reply, &err)) die("update_one", &err);
  if (!bson_iter_init_find(&it, &reply, "matchedCount") || bson_iter_as_int64(&it) != 1) {
    fprintf(stderr, "raw_limit: CAS of %s at version %lld did not match\n", id, (long long)version);
    exit(1);
  }
  bson_destroy(&reply);
  bson_destroy(&filter);
  bson_destroy(&update);
  return version + 1;
}

/* An execution-shaped document at version 1: the fields a store keeps next
 * to data, with `processed` event ids in its dedupe array. */
static void shape(bson_t *doc, const char *id, const char *data, long processed) {
  bson_t arr, sub;
  long k;
  BSON_APPEND_UTF8(doc, "_id", id);
  BSON_APPEND_UTF8(doc, "definition_id", "flat");
  BSON_APPEND_INT64(doc, "version", 1);
  BSON_APPEND_UTF8(doc, "data", data);
  BSON_APPEND_ARRAY_BEGIN(doc, "outbox", &arr);
  bson_append_array_end(doc, &arr);
  BSON_APPEND_ARRAY_BEGIN(doc, "spawns", &arr);
  bson_append_array_end(doc, &arr);
  BSON_APPEND_ARRAY_BEGIN(doc, "processed", &arr);
  for (k = 0; k < processed; k++) {
    /* event ids the size of a uuid4().hex, as a full dedupe window holds */
    char key[24], ev[40];
    snprintf(key, sizeof key, "%ld", k);
    snprintf(ev, sizeof ev, "%032lx", 0x9e3779b97f4a7c15UL * (unsigned long)(k + 1));
    BSON_APPEND_UTF8(&arr, key, ev);
  }
  bson_append_array_end(doc, &arr);
  BSON_APPEND_DOCUMENT_BEGIN(doc, "timers", &sub);
  bson_append_document_end(doc, &sub);
  BSON_APPEND_ARRAY_BEGIN(doc, "trace", &arr);
  bson_append_array_end(doc, &arr);
}

/* Drops the collection and fills it with n execution-shaped documents (the
 * fields a store keeps next to data), in one bulk insert. */
static void fill(docs_t *d) {
  mongoc_bulk_operation_t *bulk;
  bson_error_t err;
  bson_t reply;
  char id[ID_LEN], data[DATA_LEN + 1];
  long i;
  mongoc_collection_drop(d->coll, NULL); /* fails harmlessly when absent */
  bulk = mongoc_collection_create_bulk_operation_with_opts(d->coll, NULL);
  for (i = 0; i < d->n; i++) {
    bson_t doc = BSON_INITIALIZER;
    doc_id(id, i);
    make_data(data, id, 1);
    shape(&doc, id, data, d->processed);
    if (!mongoc_bulk_operation_insert_with_opts(bulk, &doc, NULL, &err)) die("insert", &err);
    bson_destroy(&doc);
    d->version[i] = 1;
  }
  if (!mongoc_bulk_operation_execute(bulk, &reply, &err)) die("bulk insert", &err);
  bson_destroy(&reply);
  mongoc_bulk_operation_destroy(bulk);
  d->next = 0;
}

/* One step of each loop on the next document of the set. */
static void find_step(docs_t *d) {
  char id[ID_LEN];
  long j = d->next;
  d->next = (j + 1) % d->n;
  doc_id(id, j);
  d->version[j] = load(d->coll, id);
}

static void cas_step(docs_t *d) {
  char id[ID_LEN];
  long j = d->next;
  d->next = (j + 1) % d->n;
  doc_id(id, j);
  d->version[j] = cas(d->coll, id, d->version[j]);
}

/* What an event costs at best: load, then CAS at the loaded version. */
static void pair_step(docs_t *d) {
  char id[ID_LEN];
  long j = d->next;
  d->next = (j + 1) % d->n;
  doc_id(id, j);
  d->version[j] = cas(d->coll, id, load(d->coll, id));
}

static void timed(void (*step)(docs_t *), docs_t *d, long n, double *total) {
  double t0 = now_us();
  long i;
  for (i = 0; i < n; i++) step(d);
  *total += now_us() - t0;
}

static void docs_init(docs_t *d, mongoc_client_t *client, const char *db, const char *coll, long n,
                      long processed) {
  memset(d, 0, sizeof *d);
  d->coll = mongoc_client_get_collection(client, db, coll);
  d->n = n;
  d->processed = processed;
  d->version = bson_malloc0((size_t)n * sizeof *d->version);
  fill(d);
}

static void docs_free(docs_t *d) {
  mongoc_collection_drop(d->coll, NULL);
  mongoc_collection_destroy(d->coll);
  bson_free(d->version);
}

/* The events benchmark's workload on an empty collection: per execution an
 * insert (the start), then find + CAS (the event). Returns the wall time in
 * microseconds. */
static double flow_round(mongoc_client_t *client, const char *db, long n) {
  mongoc_collection_t *coll = mongoc_client_get_collection(client, db, "executions_flow");
  bson_error_t err;
  char id[ID_LEN], data[DATA_LEN + 1];
  double t0;
  long i;
  mongoc_collection_drop(coll, NULL); /* fails harmlessly when absent */
  t0 = now_us();
  for (i = 0; i < n; i++) {
    bson_t doc = BSON_INITIALIZER;
    doc_id(id, i);
    make_data(data, id, 1);
    shape(&doc, id, data, 0);
    if (!mongoc_collection_insert_one(coll, &doc, NULL, NULL, &err)) die("insert_one", &err);
    bson_destroy(&doc);
    cas(coll, id, load(coll, id));
  }
  t0 = now_us() - t0;
  mongoc_collection_drop(coll, NULL);
  mongoc_collection_destroy(coll);
  return t0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  const char *uri_s = argc > 1 ? argv[1] : getenv("MONGOSTORE_URI");
  long iters = argc > 2 ? atol(argv[2]) : 10000;
  long warm = argc > 3 ? atol(argv[3]) : 1000;
  const char *dbname = argc > 4 ? argv[4] : "mongostore_bench_raw";
  long nexe = argc > 5 ? atol(argv[5]) : 0;
  mongoc_uri_t *uri;
  mongoc_client_t *client;
  bson_error_t err;
  docs_t one, heavy;
  double t0, t_ping;
  long i, b;

  if (!uri_s || iters <= 0 || warm < 0 || nexe < 0 || argc > 6) {
    fprintf(stderr, "usage: raw_limit <uri> [iterations] [warmup] [db] [executions]\n");
    return 2;
  }
  mongoc_init();
  mongoc_log_set_handler(NULL, NULL);
  if (!(uri = mongoc_uri_new_with_error(uri_s, &err))) die("uri", &err);
  if (!(client = mongoc_client_new_from_uri_with_error(uri, &err))) die("client", &err);
  mongoc_client_set_error_api(client, MONGOC_ERROR_API_VERSION_2);
  mongoc_client_set_appname(client, "mongostore-bench-raw");

  docs_init(&one, client, dbname, "executions", 1, 0);
  /* the same CAS on a document that carries a full default dedupe window */
  docs_init(&heavy, client, dbname, "executions_window", 1, WINDOW);

  /* Warm-up: every operation, so the connection, the server's code paths
   * and the JIT are as hot as they will get. */
  for (i = 0; i < warm; i++) {
    ping(client);
    pair_step(&one);
    cas_step(&heavy);
  }

  /* The loops take turns in BLOCKS rounds, so a change in the load of the
   * machine during the run falls on all of them alike. */
  t_ping = 0;
  for (b = 0; b < BLOCKS; b++) {
    long n = iters / BLOCKS + (b < iters % BLOCKS ? 1 : 0);
    t0 = now_us();
    for (i = 0; i < n; i++) ping(client);
    t_ping += now_us() - t0;
    timed(find_step, &one, n, &one.t_find);
    timed(cas_step, &one, n, &one.t_cas);
    timed(cas_step, &heavy, n, &heavy.t_cas);
    timed(pair_step, &one, n, &one.t_pair);
  }

  {
    double ping_us = t_ping / iters, find_us = one.t_find / iters, cas_us = one.t_cas / iters;
    double pair_us = one.t_pair / iters;
    double limit = 1e6 / (find_us + cas_us);
    double measured = 1e6 / pair_us;
    fprintf(stderr,
            "raw_limit: %ld iterations after %ld warm-up\n"
            "  ping            %8.1f us\n"
            "  projected find  %8.1f us\n"
            "  CAS update_one  %8.1f us\n"
            "  find + CAS      %8.1f us  (%.0f ops/s)\n"
            "  two-round-trip limit (1e6 / (find + CAS)): %.0f events/s\n",
            iters, warm, ping_us, find_us, cas_us, pair_us, measured, limit);
    printf("RESULT raw.iterations %ld\n", iters);
    printf("RESULT raw.ping_us %.1f\n", ping_us);
    printf("RESULT raw.find_us %.1f\n", find_us);
    printf("RESULT raw.cas_us %.1f\n", cas_us);
    printf("RESULT raw.pair_us %.1f\n", pair_us);
    printf("RESULT raw.pair_ops %.0f\n", measured);
    printf("RESULT raw.limit_eps %.0f\n", limit);
    fprintf(stderr, "  CAS update_one on a document carrying %d processed ids: %.1f us\n", WINDOW,
            heavy.t_cas / iters);
    printf("RESULT raw.window_ids %d\n", WINDOW);
    printf("RESULT raw.cas_window_us %.1f\n", heavy.t_cas / iters);
  }
  if (nexe > 0) {
    double wall[3];
    int r;
    for (r = 0; r < 3; r++) wall[r] = flow_round(client, dbname, nexe);
    qsort(wall, 3, sizeof wall[0], cmp_double);
    fprintf(stderr,
            "  the events workload, %ld executions x (insert, then find + CAS): median of 3 rounds %.2f s,"
            " %.0f events/s\n",
            nexe, wall[1] / 1e6, 2.0 * nexe / (wall[1] / 1e6));
    printf("RESULT raw.flow.executions %ld\n", nexe);
    printf("RESULT raw.flow.events %ld\n", 2 * nexe);
    printf("RESULT raw.flow.wall_s %.3f\n", wall[1] / 1e6);
    printf("RESULT raw.flow.eps %.0f\n", 2.0 * nexe / (wall[1] / 1e6));
  }

  docs_free(&one);
  docs_free(&heavy);
  mongoc_client_destroy(client);
  mongoc_uri_destroy(uri);
  mongoc_cleanup();
  return 0;
}
