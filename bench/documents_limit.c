/*
 * bench/documents_limit.c - the document rows' limit: the four document
 * operations of bench/documents.lua done by libmongoc alone, with the same
 * document shape, so the Lua side is measured against no codec and no
 * interpreter at all.
 *
 * usage: documents_limit <uri> <db> <label> <round> [n] [updates] [bulk]
 *
 * One round, on collection `docs` of <db> (dropped first and at the end),
 * after an untimed warm-up of every operation at a tenth of the sizes on
 * collection `warm`:
 *   insert_many   n documents built (that is, encoded) and sent in one bulk
 *                 insert (unordered), the documents' shape as in
 *                 bench/documents.lua: twelve fields, strings, an int32, an
 *                 int64, a double, a bool, a date, an array, a nested doc
 *   find          find({}) of every document, each one decoded the way a
 *                 binding must: every field visited with bson_iter, nested
 *                 documents and arrays too, each value read (strings by
 *                 pointer and length, numbers as numbers)
 *   update_one    `updates` single-document update_one by _id
 *   bulk_write    one unordered bulk of `bulk` update_one by _id
 * Prints "RESULT docs.<label>.r<round>.<op>_ms <ms>" per operation (wall
 * time) and <op>_cpu_ms (this process's CPU time over the same span), and
 * docs.<label>.fields (fields visited by find, a check that every contender
 * decoded the same thing).
 *
 * Built by bench/run.sh with: cc -O2 documents_limit.c $(pkg-config --cflags --libs libmongoc-1.0)
 */
#include <mongoc/mongoc.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The process's CPU time: what the client itself spent, whatever the
 * server and the rest of a shared machine were doing meanwhile. */
static double cpu_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void die(const char *what, const bson_error_t *err) {
  fprintf(stderr, "documents_limit: %s: %s\n", what, err ? err->message : "failed");
  exit(1);
}

/* The body text every contender uses (bench/documents.lua has the same). */
static const char BODY[] =
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et "
    "dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut aliquip.";
static const char *TAGS[] = {"news", "tech", "lua", "mongodb", "bench"};
static const char *STATUS[] = {"draft", "published", "archived"};

#define BASE_DATE 1700000000000LL
#define BIG 5000000000LL

/* Document i (1-based), field for field as bench/documents.lua makes it. */
static void make_doc(bson_t *doc, long i) {
  char buf[64];
  bson_t tags, meta;
  int len;
  bson_append_int64(doc, "_id", 3, i);
  len = snprintf(buf, sizeof buf, "Article number %ld about documents", i);
  bson_append_utf8(doc, "title", 5, buf, len);
  len = snprintf(buf, sizeof buf, "author-%ld", i % 97);
  bson_append_utf8(doc, "author", 6, buf, len);
  bson_append_utf8(doc, "body", 4, BODY, (int)sizeof BODY - 1);
  bson_append_utf8(doc, "status", 6, STATUS[i % 3], -1);
  bson_append_int32(doc, "views", 5, (int32_t)(i % 1000));
  bson_append_int64(doc, "bytes", 5, BIG + i);
  bson_append_double(doc, "score", 5, (double)i + 0.5);
  bson_append_bool(doc, "published", 9, i % 2 == 0);
  bson_append_date_time(doc, "created", 7, BASE_DATE + i * 1000);
  bson_append_array_begin(doc, "tags", 4, &tags);
  bson_append_utf8(&tags, "0", 1, TAGS[i % 5], -1);
  bson_append_utf8(&tags, "1", 1, TAGS[(i + 1) % 5], -1);
  bson_append_utf8(&tags, "2", 1, TAGS[(i + 2) % 5], -1);
  bson_append_array_end(doc, &tags);
  bson_append_document_begin(doc, "meta", 4, &meta);
  bson_append_utf8(&meta, "lang", 4, "en", 2);
  bson_append_int32(&meta, "words", 5, (int32_t)(100 + i % 50));
  len = snprintf(buf, sizeof buf, "feed-%ld", i % 7);
  bson_append_utf8(&meta, "source", 6, buf, len);
  bson_append_document_end(doc, &meta);
}

/* The id the k-th update (1-based) of a loop touches: spread over the set. */
static long update_id(long k, long n, long offset) {
  return 1 + ((k - 1) * 7 + offset) % n;
}

/* Reads every field of the document under iter, recursively; returns the
 * fields visited. sink keeps the compiler from dropping the reads. */
static volatile double sink;
static long visit(bson_iter_t *iter) {
  long fields = 0;
  while (bson_iter_next(iter)) {
    bson_iter_t child;
    uint32_t len;
    fields++;
    (void)bson_iter_key(iter);
    switch (bson_iter_type(iter)) {
    case BSON_TYPE_UTF8: sink += (double)(bson_iter_utf8(iter, &len)[0] + (int)len); break;
    case BSON_TYPE_INT32: sink += bson_iter_int32(iter); break;
    case BSON_TYPE_INT64: sink += (double)bson_iter_int64(iter); break;
    case BSON_TYPE_DOUBLE: sink += bson_iter_double(iter); break;
    case BSON_TYPE_BOOL: sink += bson_iter_bool(iter); break;
    case BSON_TYPE_DATE_TIME: sink += (double)bson_iter_date_time(iter); break;
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY:
      if (bson_iter_recurse(iter, &child)) fields += visit(&child);
      break;
    default: break;
    }
  }
  return fields;
}

static double op_insert_many(mongoc_collection_t *coll, long n) {
  bson_error_t err;
  bson_t opts = BSON_INITIALIZER, reply;
  mongoc_bulk_operation_t *bulk;
  double t0 = now_ms();
  long i;
  BSON_APPEND_BOOL(&opts, "ordered", false);
  bulk = mongoc_collection_create_bulk_operation_with_opts(coll, &opts);
  for (i = 1; i <= n; i++) {
    bson_t doc = BSON_INITIALIZER;
    make_doc(&doc, i);
    if (!mongoc_bulk_operation_insert_with_opts(bulk, &doc, NULL, &err)) die("insert", &err);
    bson_destroy(&doc);
  }
  if (!mongoc_bulk_operation_execute(bulk, &reply, &err)) die("insert_many", &err);
  t0 = now_ms() - t0;
  bson_destroy(&reply);
  bson_destroy(&opts);
  mongoc_bulk_operation_destroy(bulk);
  return t0;
}

static double op_find(mongoc_collection_t *coll, long n, long *fields) {
  bson_error_t err;
  bson_t filter = BSON_INITIALIZER;
  const bson_t *doc;
  mongoc_cursor_t *cur;
  long docs = 0;
  double t0 = now_ms();
  *fields = 0;
  cur = mongoc_collection_find_with_opts(coll, &filter, NULL, NULL);
  while (mongoc_cursor_next(cur, &doc)) {
    bson_iter_t iter;
    if (bson_iter_init(&iter, doc)) *fields += visit(&iter);
    docs++;
  }
  if (mongoc_cursor_error(cur, &err)) die("find", &err);
  t0 = now_ms() - t0;
  mongoc_cursor_destroy(cur);
  bson_destroy(&filter);
  if (docs != n) {
    fprintf(stderr, "documents_limit: find returned %ld documents, expected %ld\n", docs, n);
    exit(1);
  }
  return t0;
}

/* {$set: {score, status}, $inc: {views: 1}}: the update every contender sends. */
static void make_update(bson_t *u, long k) {
  bson_t set, inc;
  bson_append_document_begin(u, "$set", 4, &set);
  bson_append_double(&set, "score", 5, (double)k + 0.25);
  bson_append_utf8(&set, "status", 6, "edited", 6);
  bson_append_document_end(u, &set);
  bson_append_document_begin(u, "$inc", 4, &inc);
  bson_append_int32(&inc, "views", 5, 1);
  bson_append_document_end(u, &inc);
}

static double op_update_one(mongoc_collection_t *coll, long n, long updates) {
  bson_error_t err;
  double t0 = now_ms();
  long k;
  for (k = 1; k <= updates; k++) {
    bson_t filter = BSON_INITIALIZER, u = BSON_INITIALIZER, reply;
    bson_append_int64(&filter, "_id", 3, update_id(k, n, 0));
    make_update(&u, k);
    if (!mongoc_collection_update_one(coll, &filter, &u, NULL, &reply, &err)) die("update_one", &err);
    bson_destroy(&reply);
    bson_destroy(&filter);
    bson_destroy(&u);
  }
  return now_ms() - t0;
}

static double op_bulk_write(mongoc_collection_t *coll, long n, long updates) {
  bson_error_t err;
  bson_t opts = BSON_INITIALIZER, reply;
  mongoc_bulk_operation_t *bulk;
  double t0 = now_ms();
  long k;
  BSON_APPEND_BOOL(&opts, "ordered", false);
  bulk = mongoc_collection_create_bulk_operation_with_opts(coll, &opts);
  for (k = 1; k <= updates; k++) {
    bson_t filter = BSON_INITIALIZER, u = BSON_INITIALIZER;
    bson_append_int64(&filter, "_id", 3, update_id(k, n, 3));
    make_update(&u, k);
    if (!mongoc_bulk_operation_update_one_with_opts(bulk, &filter, &u, NULL, &err)) die("bulk update", &err);
    bson_destroy(&filter);
    bson_destroy(&u);
  }
  if (!mongoc_bulk_operation_execute(bulk, &reply, &err)) die("bulk_write", &err);
  t0 = now_ms() - t0;
  bson_destroy(&reply);
  bson_destroy(&opts);
  mongoc_bulk_operation_destroy(bulk);
  return t0;
}

/* The four operations on a fresh collection; ms[] gets their times. */
static void round_of(mongoc_client_t *client, const char *db, const char *name, long n, long updates, long bulk,
                     double ms[4], double cpu[4], long *fields) {
  mongoc_collection_t *coll = mongoc_client_get_collection(client, db, name);
  double c0;
  mongoc_collection_drop(coll, NULL); /* fails harmlessly when absent */
  c0 = cpu_ms();
  ms[0] = op_insert_many(coll, n);
  cpu[0] = cpu_ms() - c0, c0 = cpu_ms();
  ms[1] = op_find(coll, n, fields);
  cpu[1] = cpu_ms() - c0, c0 = cpu_ms();
  ms[2] = op_update_one(coll, n, updates);
  cpu[2] = cpu_ms() - c0, c0 = cpu_ms();
  ms[3] = op_bulk_write(coll, n, bulk);
  cpu[3] = cpu_ms() - c0;
  mongoc_collection_drop(coll, NULL);
  mongoc_collection_destroy(coll);
}

int main(int argc, char **argv) {
  static const char *OPS[] = {"insert_many", "find", "update_one", "bulk_write"};
  const char *uri_s, *db, *label;
  long round, n, updates, bulk, fields, warm_fields;
  mongoc_uri_t *uri;
  mongoc_client_t *client;
  bson_error_t err;
  double ms[4], cpu[4], warm[4], warm_cpu[4];
  int i;

  if (argc < 5 || argc > 8) {
    fprintf(stderr, "usage: documents_limit <uri> <db> <label> <round> [n] [updates] [bulk]\n");
    return 2;
  }
  uri_s = argv[1], db = argv[2], label = argv[3], round = atol(argv[4]);
  n = argc > 5 ? atol(argv[5]) : 10000;
  updates = argc > 6 ? atol(argv[6]) : 1000;
  bulk = argc > 7 ? atol(argv[7]) : 1000;
  if (n <= 0 || updates <= 0 || bulk <= 0) {
    fprintf(stderr, "documents_limit: n, updates and bulk must be positive\n");
    return 2;
  }
  mongoc_init();
  mongoc_log_set_handler(NULL, NULL);
  if (!(uri = mongoc_uri_new_with_error(uri_s, &err))) die("uri", &err);
  if (!(client = mongoc_client_new_from_uri_with_error(uri, &err))) die("client", &err);
  mongoc_client_set_error_api(client, MONGOC_ERROR_API_VERSION_2);
  mongoc_client_set_appname(client, "mongostore-bench-documents");

  round_of(client, db, "warm", n / 10 + 1, updates / 10 + 1, bulk / 10 + 1, warm, warm_cpu, &warm_fields);
  round_of(client, db, "docs", n, updates, bulk, ms, cpu, &fields);

  fprintf(stderr, "documents_limit %s round %ld:", label, round);
  for (i = 0; i < 4; i++) {
    fprintf(stderr, " %s %.1f ms (cpu %.1f)", OPS[i], ms[i], cpu[i]);
    printf("RESULT docs.%s.r%ld.%s_ms %.2f\n", label, round, OPS[i], ms[i]);
    printf("RESULT docs.%s.r%ld.%s_cpu_ms %.2f\n", label, round, OPS[i], cpu[i]);
  }
  fprintf(stderr, " (%ld fields decoded)\n", fields);
  printf("RESULT docs.%s.fields %ld\n", label, fields);
  printf("RESULT docs.%s.version libmongoc %s\n", label, mongoc_get_version());

  mongoc_client_destroy(client);
  mongoc_uri_destroy(uri);
  mongoc_cleanup();
  return 0;
}
