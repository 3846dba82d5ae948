/*
 * bench/raw_limit.c - the two-round-trip limit of one worker on a server:
 * what a bare libmongoc loop achieves when every "event" is one projected
 * find (the load) and one compare-and-set update_one (the commit) on one
 * execution-shaped document, with nothing else in between (no codec, no
 * interpreter, no Lua).
 *
 * usage: raw_limit <uri> [iterations] [warmup] [db]
 *
 * Each of the four loops (ping, find, CAS, find + CAS) runs `iterations`
 * times, in 10 alternating blocks.
 *
 * Prints a human-readable summary on stderr and, on stdout, lines of the
 * form "RESULT raw.<key> <value>" for bench/run.sh.
 *
 * Built by bench/run.sh with: cc -O2 raw_limit.c $(pkg-config --cflags --libs libmongoc-1.0)
 */
#include <mongoc/mongoc.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DOC_ID "raw-limit-1"
#define DATA_LEN 300
#define BLOCKS 10

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void die(const char *what, const bson_error_t *err) {
  fprintf(stderr, "raw_limit: %s: %s\n", what, err ? err->message : "failed");
  exit(1);
}

/* A ~300-byte JSON-ish data string that changes with every version, so each
 * CAS really rewrites the field. */
static void make_data(char *buf, int64_t version) {
  int n = snprintf(buf, DATA_LEN + 1,
                   "{\"id\":\"" DOC_ID "\",\"definition_id\":\"flat\",\"status\":\"RUNNING\","
                   "\"active_path\":\"Waiting\",\"version\":%lld,\"context\":{\"pad\":\"",
                   (long long)version);
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
static int64_t load(mongoc_collection_t *coll) {
  bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, proj;
  const bson_t *doc;
  bson_error_t err;
  bson_iter_t it;
  int64_t version = -1;
  mongoc_cursor_t *cur;
  BSON_APPEND_UTF8(&filter, "_id", DOC_ID);
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
  if (version < 0) die("find: the document is missing", NULL);
  return version;
}

/* The commit: update_one filtered on _id and the loaded version, $set of
 * the data string and version + 1. Returns the new version. */
static int64_t cas(mongoc_collection_t *coll, int64_t version) {
  bson_t filter = BSON_INITIALIZER, update = BSON_INITIALIZER, set, reply;
  bson_error_t err;
  bson_iter_t it;
  char data[DATA_LEN + 1];
  make_data(data, version + 1);
  BSON_APPEND_UTF8(&filter, "_id", DOC_ID);
  BSON_APPEND_INT64(&filter, "version", version);
  BSON_APPEND_DOCUMENT_BEGIN(&update, "$set", &set);
  BSON_APPEND_UTF8(&set, "data", data);
  BSON_APPEND_INT64(&set, "version", version + 1);
  bson_append_document_end(&update, &set);
  if (!mongoc_collection_update_one(coll, &filter, &update, NULL, &reply, &err)) die("update_one", &err);
  if (!bson_iter_init_find(&it, &reply, "matchedCount") || bson_iter_as_int64(&it) != 1) {
    fprintf(stderr, "raw_limit: CAS at version %lld did not match\n", (long long)version);
    exit(1);
  }
  bson_destroy(&reply);
  bson_destroy(&filter);
  bson_destroy(&update);
  return version + 1;
}

int main(int argc, char **argv) {
  const char *uri_s = argc > 1 ? argv[1] : getenv("MONGOSTORE_URI");
  long iters = argc > 2 ? atol(argv[2]) : 10000;
  long warm = argc > 3 ? atol(argv[3]) : 1000;
  const char *dbname = argc > 4 ? argv[4] : "mongostore_bench_raw";
  mongoc_uri_t *uri;
  mongoc_client_t *client;
  mongoc_collection_t *coll;
  bson_error_t err;
  bson_t doc = BSON_INITIALIZER, arr, sub;
  char data[DATA_LEN + 1];
  double t0, t_ping, t_find, t_cas, t_pair;
  int64_t v;
  long i, b;

  if (!uri_s || iters <= 0 || warm < 0) {
    fprintf(stderr, "usage: raw_limit <uri> [iterations] [warmup] [db]\n");
    return 2;
  }
  mongoc_init();
  mongoc_log_set_handler(NULL, NULL);
  if (!(uri = mongoc_uri_new_with_error(uri_s, &err))) die("uri", &err);
  if (!(client = mongoc_client_new_from_uri_with_error(uri, &err))) die("client", &err);
  mongoc_client_set_error_api(client, MONGOC_ERROR_API_VERSION_2);
  mongoc_client_set_appname(client, "mongostore-bench-raw");
  coll = mongoc_client_get_collection(client, dbname, "executions");
  mongoc_collection_drop(coll, NULL); /* fails harmlessly when absent */

  /* One execution-shaped document: the fields a store keeps next to data. */
  make_data(data, 1);
  BSON_APPEND_UTF8(&doc, "_id", DOC_ID);
  BSON_APPEND_UTF8(&doc, "definition_id", "flat");
  BSON_APPEND_INT64(&doc, "version", 1);
  BSON_APPEND_UTF8(&doc, "data", data);
  BSON_APPEND_ARRAY_BEGIN(&doc, "outbox", &arr);
  bson_append_array_end(&doc, &arr);
  BSON_APPEND_ARRAY_BEGIN(&doc, "spawns", &arr);
  bson_append_array_end(&doc, &arr);
  BSON_APPEND_ARRAY_BEGIN(&doc, "processed", &arr);
  bson_append_array_end(&doc, &arr);
  BSON_APPEND_DOCUMENT_BEGIN(&doc, "timers", &sub);
  bson_append_document_end(&doc, &sub);
  BSON_APPEND_ARRAY_BEGIN(&doc, "trace", &arr);
  bson_append_array_end(&doc, &arr);
  if (!mongoc_collection_insert_one(coll, &doc, NULL, NULL, &err)) die("insert_one", &err);
  bson_destroy(&doc);

  /* Warm-up: every operation, so the connection, the server's code paths
   * and the JIT are as hot as they will get. */
  v = load(coll);
  for (i = 0; i < warm; i++) {
    ping(client);
    v = cas(coll, load(coll));
  }

  /* The four loops take turns in BLOCKS rounds, so a change in the load of
   * the machine during the run falls on all of them alike. The last loop is
   * what an event costs at best: load, then CAS at the loaded version. */
  t_ping = t_find = t_cas = t_pair = 0;
  for (b = 0; b < BLOCKS; b++) {
    long n = iters / BLOCKS + (b < iters % BLOCKS ? 1 : 0);
    t0 = now_us();
    for (i = 0; i < n; i++) ping(client);
    t_ping += now_us() - t0;
    t0 = now_us();
    for (i = 0; i < n; i++) v = load(coll);
    t_find += now_us() - t0;
    t0 = now_us();
    for (i = 0; i < n; i++) v = cas(coll, v);
    t_cas += now_us() - t0;
    t0 = now_us();
    for (i = 0; i < n; i++) v = cas(coll, load(coll));
    t_pair += now_us() - t0;
  }

  {
    double ping_us = t_ping / iters, find_us = t_find / iters, cas_us = t_cas / iters;
    double pair_us = t_pair / iters;
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
  }

  mongoc_collection_drop(coll, NULL);
  mongoc_collection_destroy(coll);
  mongoc_client_destroy(client);
  mongoc_uri_destroy(uri);
  mongoc_cleanup();
  return 0;
}
