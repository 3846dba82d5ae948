/*
 * pool.c - one libmongoc client pool per process and URI, the command
 * counts that store:stats() reports, and how long the failed attempt of the
 * current call took (which tells a reset connection from a timeout).
 */
#include "store.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

/* One libmongoc client pool per process and URI, made on first use in the
 * process that uses it (never inherited across fork: an nginx master's pool
 * would be useless to its workers) and kept for the life of the process.
 * Pools are safe to share between threads; a store holds one client popped
 * from its pool, since a store belongs to one Lua state. */
/* Commands counted by libmongoc's command monitoring, per pool. */
enum { ST_FIND, ST_UPDATE, ST_INSERT, ST_FAM, ST_AGGREGATE, ST_GETMORE, ST_DELETE, ST_PING, ST_OTHER, ST_N };
static const char *const stat_names[ST_N] = {
  "find", "update", "insert", "findAndModify", "aggregate", "getMore", "delete", "ping", "other"
};

typedef struct ms_pool {
  char *uri;                 /* the URI string as parsed, with our options */
  mongoc_client_pool_t *pool;
  pid_t pid;
  int64_t count[ST_N];       /* commands completed, by name (atomic) */
  int64_t reply_bytes;       /* bytes of the replies (atomic) */
  struct ms_pool *next;
} ms_pool_t;

static int stat_index(const char *name) {
  int i;
  for (i = 0; i < ST_OTHER; i++)
    if (strcmp(name, stat_names[i]) == 0) return i;
  if (strcmp(name, "findandmodify") == 0) return ST_FAM;
  return ST_OTHER;
}

/* Commands are counted as they complete (succeeded or failed), not as they
 * start: with a started callback set, libmongoc copies every command before
 * sending it, the whole payload of an insert_many included. */
static void count_command(ms_pool_t *p, const char *name) {
  __atomic_fetch_add(&p->count[stat_index(name)], 1, __ATOMIC_RELAXED);
}

static void on_succeeded(const mongoc_apm_command_succeeded_t *ev) {
  ms_pool_t *p = (ms_pool_t *)mongoc_apm_command_succeeded_get_context(ev);
  const bson_t *reply = mongoc_apm_command_succeeded_get_reply(ev);
  count_command(p, mongoc_apm_command_succeeded_get_command_name(ev));
  if (reply) __atomic_fetch_add(&p->reply_bytes, (int64_t)reply->len, __ATOMIC_RELAXED);
}

/* The longest failed attempt of the current call on this thread, in
 * microseconds (-1: none). libmongoc words a reset connection and an
 * expired socket timeout alike, and a call's own duration includes the
 * driver's retry and its wait for the monitor; the attempt's duration, from
 * command monitoring, tells a reset (milliseconds) from a timeout. */
/* Kept as a thread-specific value (the duration + 1, 0 for none) rather
 * than in __thread storage, whose dynamic TLS in a dlopen'ed module the
 * sanitizers' thread scanner does not always survive. */
static pthread_key_t failed_key;
static pthread_once_t failed_once = PTHREAD_ONCE_INIT;

static void failed_key_make(void) { (void)pthread_key_create(&failed_key, NULL); }

void ms_failed_reset(void) {
  pthread_once(&failed_once, failed_key_make);
  pthread_setspecific(failed_key, NULL);
}

int64_t ms_failed_attempt_us(void) {
  pthread_once(&failed_once, failed_key_make);
  return (int64_t)(intptr_t)pthread_getspecific(failed_key) - 1;
}

static void on_failed(const mongoc_apm_command_failed_t *ev) {
  int64_t d = mongoc_apm_command_failed_get_duration(ev);
  count_command((ms_pool_t *)mongoc_apm_command_failed_get_context(ev),
                mongoc_apm_command_failed_get_command_name(ev));
  if (d > ms_failed_attempt_us()) pthread_setspecific(failed_key, (void *)(intptr_t)(d + 1));
}

static pthread_mutex_t pools_lock = PTHREAD_MUTEX_INITIALIZER;
static ms_pool_t *pools = NULL;

/* When the module is unloaded (lua_close of the last state that loaded it,
 * after every store has been collected and has pushed its client back) the
 * pools this process made go too, so nothing is left behind. */
__attribute__((destructor)) static void pools_release(void) {
  ms_pool_t *p, *next;
  pid_t pid = getpid();
  pthread_mutex_lock(&pools_lock);
  for (p = pools; p; p = next) {
    next = p->next;
    if (p->pid == pid) mongoc_client_pool_destroy(p->pool);
    bson_free(p->uri);
    bson_free(p);
  }
  pools = NULL;
  pthread_mutex_unlock(&pools_lock);
}

ms_pool_t *ms_pool_for(const mongoc_uri_t *uri, bson_error_t *be) {
  const char *key = mongoc_uri_get_string(uri);
  pid_t pid = getpid();
  ms_pool_t *p, *hit = NULL;
  mongoc_client_pool_t *found = NULL;
  pthread_mutex_lock(&pools_lock);
  for (p = pools; p; p = p->next) {
    if (p->pid == pid && strcmp(p->uri, key) == 0) {
      hit = p;
      break;
    }
  }
  if (!hit) {
    found = mongoc_client_pool_new_with_error(uri, be);
    if (found) {
      mongoc_apm_callbacks_t *cbs = mongoc_apm_callbacks_new();
      mongoc_client_pool_set_error_api(found, MONGOC_ERROR_API_VERSION_2);
      mongoc_client_pool_set_appname(found, "mongostore");
      p = (ms_pool_t *)bson_malloc0(sizeof *p);
      p->uri = bson_strdup(key);
      p->pool = found;
      p->pid = pid;
      p->next = pools;
      pools = p;
      mongoc_apm_set_command_succeeded_cb(cbs, on_succeeded);
      mongoc_apm_set_command_failed_cb(cbs, on_failed);
      mongoc_client_pool_set_apm_callbacks(found, cbs, p);
      mongoc_apm_callbacks_destroy(cbs);
      hit = p;
    }
  }
  pthread_mutex_unlock(&pools_lock);
  return hit;
}

mongoc_client_t *ms_pool_pop(ms_pool_t *p) { return mongoc_client_pool_pop(p->pool); }

void ms_pool_push(ms_pool_t *p, mongoc_client_t *client) { mongoc_client_pool_push(p->pool, client); }

/* { find = n, update = n, ..., total = n, reply_bytes = n } of this pool */
void ms_pool_push_stats(lua_State *L, ms_pool_t *p) {
  int i;
  int64_t total = 0;
  lua_createtable(L, 0, ST_N + 2);
  for (i = 0; i < ST_N; i++) {
    int64_t v = __atomic_load_n(&p->count[i], __ATOMIC_RELAXED);
    total += v;
    lua_pushinteger(L, (lua_Integer)v);
    lua_setfield(L, -2, stat_names[i]);
  }
  lua_pushinteger(L, (lua_Integer)total);
  lua_setfield(L, -2, "total");
  lua_pushinteger(L, (lua_Integer)__atomic_load_n(&p->reply_bytes, __ATOMIC_RELAXED));
  lua_setfield(L, -2, "reply_bytes");
}
