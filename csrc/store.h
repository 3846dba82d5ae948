/*
 * store.h - what the Store's C files share: the store userdata, and the
 * helpers more than one of them calls, each listed under the file that
 * defines it. Everything else stays static to its file; ms.h holds what the
 * whole core shares.
 */
#ifndef MS_STORE_H
#define MS_STORE_H

#include "ms.h"

#include <mongoc/mongoc.h>

/* hidden, as in ms.h (after the driver's headers) */
#pragma GCC visibility push(hidden)

typedef struct ms_pool ms_pool_t;

typedef struct ms_store {
  ms_pool_t *pool;
  mongoc_client_t *client;
  mongoc_collection_t *exes;
  mongoc_collection_t *counters;
  mongoc_collection_t *inbox, *inbox_claims; /* <prefix>_inbox, <prefix>_inbox_claims (inbox.c) */
  int inbox_indexed;       /* this store created the inbox's indexes */
  int harel_named;         /* a prefix: the collections are named as harel's store names them
                            * (<prefix>_executions), so its commits can reach them (promoted.c) */
  char *password;          /* scrubbed from every message */
  char *db;
  int64_t trace_max;       /* 0 keeps every step */
  int64_t dedupe_window;   /* handled event ids the digests remember */
  int32_t max_bson;
  int32_t socket_timeout_ms; /* the URI's socketTimeoutMS (0: none) */
  double op_started;         /* when the current call began: network vs timeout */
  uint8_t cursor_key[MS_CURSOR_KEY_BYTES];  /* the listing's cursor secret, once read */
  int has_cursor_key;
  /* The block of outbox [0] and spawn [1] seqs this store reserved and has
   * not used yet: [seq_next, seq_end). */
  int64_t seq_next[2], seq_end[2];
  int64_t seq_block;       /* how many a reservation takes (connect's opts.seq_block) */
} ms_store_t;

/* The seqs a store reserves from a counter at once by default (see
 * ms_take_seqs), and the most it may be set to. */
#define MS_SEQ_BLOCK 1000
#define MS_SEQ_BLOCK_MAX 1000000
enum { MS_SEQ_OUTBOX = 0, MS_SEQ_SPAWN = 1 };

/* next_fire_at of a document with no timer: later than any real time, so
 * $min with a real fire_at always lowers it, and no range scan reaches it. */
#define MS_NO_TIMER 1e300

/* ---- from store.c: the store's lifecycle, arguments and errors ---- */

/* The store argument, or NULL once it is closed; starts the call's clock. */
ms_store_t *ms_store_check(lua_State *L);
int ms_push_closed(lua_State *L, const char *doing);   /* nil, "<doing>: the store is closed", "closed" */
/* The first line of every method: a closed store is an ordinary failure
 * (nil, msg, "closed"), since a worker may close its store while another
 * coroutine still holds it. */
#define STORE_OR_CLOSED(L, s, doing) \
  ms_store_t *s = ms_store_check(L);  \
  if (!s) return ms_push_closed(L, doing)
/* Push nil, msg, code with the URI's password scrubbed from msg. */
int ms_store_push_err(lua_State *L, const ms_store_t *s, ms_err_t *e);
int ms_store_push_bson_err(lua_State *L, const ms_store_t *s, const bson_error_t *be, const char *doing);
/* An id at idx (a non-empty UTF-8 string within MS_MAX_TEXT), or NULL with e
 * set; not a string raises naming the argument. */
const char *ms_check_id(lua_State *L, int idx, const char *name, size_t *len, ms_err_t *e);
/* Arguments of the wrong Lua type raise, naming the argument; nothing is coerced. */
const char *ms_arg_string(lua_State *L, int idx, const char *name, size_t *len);
double ms_arg_number(lua_State *L, int idx, const char *name);
int64_t ms_arg_integer(lua_State *L, int idx, const char *name);
void ms_arg_table(lua_State *L, int idx, const char *name);
/* Refuses what the server would refuse only after the counters moved (an
 * empty key at any depth): 0, or -1 with e set. */
int ms_check_storable(const bson_t *doc, const char *what, ms_err_t *e);
/* Reserves count seqs from counter `name`; *first is the first of the block. */
/* count consecutive seqs of counter `which` (MS_SEQ_OUTBOX, MS_SEQ_SPAWN)
 * from the store's block, reserving a new block of seq_block when it runs
 * short; *aged is set when they come from a block reserved before this call
 * (other processes may have used higher seqs since). */
int ms_take_seqs(ms_store_t *s, int which, int64_t count, int64_t *first, int *aged, bson_error_t *be);
/* Forgets the store's unused blocks: the next take reserves fresh ones. */
void ms_drop_seq_blocks(ms_store_t *s);
int ms_next_seq(ms_store_t *s, const char *name, size_t namelen, int64_t count, int64_t *first,
                bson_error_t *be);

/* ---- from connect.c: the connect steps the Store and the Database share ---- */

int ms_valid_name(const char *s, size_t n, int allow_dash);   /* a database name MongoDB accepts */
int32_t ms_attempt_ms(double wait);                            /* one connection attempt's bound (ms) */
/* The URI with the core's timeouts where it names none, or NULL with e set
 * ("<doing>: malformed MongoDB URI", never quoting it). */
mongoc_uri_t *ms_parse_uri(const char *uristr, size_t urilen, int32_t attempt_ms, const char *doing, ms_err_t *e);
/* Pings until the server answers or `wait` seconds have passed. */
int ms_wait_for_server(mongoc_client_t *client, double wait, int32_t attempt_ms, bson_error_t *be);
int32_t ms_read_max_bson(mongoc_client_t *client);             /* the server's maxBsonObjectSize */
void ms_scrub(const char *password, ms_err_t *e);              /* the password out of e->msg */

/* ---- from pool.c: the client pool of a process and URI ---- */

ms_pool_t *ms_pool_for(const mongoc_uri_t *uri, bson_error_t *be);  /* this process's pool for uri */
mongoc_client_t *ms_pool_pop(ms_pool_t *p);                          /* a client for one store */
void ms_pool_push(ms_pool_t *p, mongoc_client_t *client);            /* gives it back */
void ms_pool_push_stats(lua_State *L, ms_pool_t *p);                 /* pushes store:stats()'s table */
void ms_failed_reset(void);                 /* a call begins on this thread: no failed attempt yet */
int64_t ms_failed_attempt_us(void);         /* its longest failed attempt so far, in us (-1: none) */

/* ---- from dedupe.c: the digests of handled event ids ---- */

void ms_ev_digest(const char *ev, size_t len, uint8_t out[MS_DIGEST]);
int ms_digests_hold(const uint8_t *list, size_t len, const uint8_t d[MS_DIGEST]);
/* The digests a commit stores: the loaded list's newest window - n, then
 * the n digests ds (bson_malloc'ed, for bson_free). */
uint8_t *ms_digests_add(const ms_store_t *s, const char *list, size_t len, const uint8_t *ds, size_t n,
                        size_t *outlen);
int ms_doc_marks(const bson_t *doc, const char *ev, size_t evlen);  /* doc's digests hold ev */
void ms_push_digests(lua_State *L, const bson_t *doc);              /* doc's digests as a string */
int64_t ms_dedupe_tail(const ms_store_t *s);                        /* ids kept in `processed` */

/* ---- from load.c: reads of one execution ---- */

/* A find of {_id} alone (every server answers it from the _id index),
 * projecting f1 and the optional f2, f3. */
mongoc_cursor_t *ms_find_one(ms_store_t *s, const char *id, size_t idlen, const char *f1, const char *f2,
                             const char *f3);
void ms_push_data(lua_State *L, const bson_t *doc);  /* doc.data, or nil (absent, a trace stub) */

/* ---- from timers.c ---- */

/* A timer path as its stored key "timers.<path>" ('.' encoded), or -1 with
 * e set for what cannot be a key. */
int ms_encode_path(const char *path, size_t len, bson_string_t **out, ms_err_t *e);
/* Pushes a stored timer key (without its "timers." prefix) as its path. */
void ms_push_decoded_path(lua_State *L, const char *key, size_t len);
/* Pushes a document's armed timers as { [path] = fire_at } (empty without any). */
void ms_push_timers(lua_State *L, const bson_t *doc);

/* ---- from trace.c ---- */

int ms_check_step(const bson_t *step, const char *what, ms_err_t *e);  /* a storable step, its index sane */
int64_t ms_step_index(const bson_t *step, int64_t fallback);            /* the step's own index */
void ms_append_trace_step(bson_t *dst, const char *key, const bson_t *step, int64_t index);
/* The steps of an array as entries of dst, indexed from first on */
void ms_append_trace_steps(bson_t *dst, const bson_t *steps, int64_t first);
/* push's "trace" entry: the steps (an array), trimmed to the last trace_max (0: all) */
void ms_append_trace_push(bson_t *push, const bson_t *steps, int64_t first, int64_t trace_max);
int ms_next_trace_index(ms_store_t *s, const char *id, size_t idlen, int count, int64_t *index, bson_error_t *be);

/* store.c: the filter that picks the documents harel's store committed last (its
 * partial index, and promoted.c's finds) */
void ms_foreign_index_filter(bson_t *filter);
/* The string under key in doc (its length in *len), or NULL when there is
 * none or it is not a string (load.c). */
const char *ms_utf8_field(const bson_t *doc, const char *key, uint32_t *len);
/* The earliest fire_at in doc.timers, or MS_NO_TIMER (timers.c). */
double ms_earliest_timer(const bson_t *doc);

/* ---- each file's methods, set into the method table on top of the stack
 * (core.c lists them for ms_open_store) ---- */

void ms_open_commit(lua_State *L);   /* commit.c: _commit */
void ms_open_commit_batch(lua_State *L); /* commit_batch.c: _commit_many */
void ms_open_load(lua_State *L);     /* load.c: _load, _load_many, _load_for_event, is_processed */
void ms_open_list(lua_State *L);     /* list.c: _scan, _cursor_key */
void ms_open_relay(lua_State *L);    /* relay.c: claims, releases, pending and acks of outbox and spawns */
void ms_open_timers(lua_State *L);   /* timers.c: _due_timers, delete_timer, delete_timers */
void ms_open_trace(lua_State *L);    /* trace.c: append_trace, read_trace */
void ms_open_promoted(lua_State *L); /* promoted.c: _foreign, _promote */
void ms_open_inbox(lua_State *L);    /* inbox.c: _inbox_put, _inbox_claim, _inbox_ack, _inbox_release */
void ms_open_failed(lua_State *L);   /* failed.c: _fail_outbox, _failed_outbox, _redeliver_failed */

#pragma GCC visibility pop

#endif
