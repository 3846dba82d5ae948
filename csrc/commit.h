/*
 * commit.h - what commit.c (one commit) and commit_batch.c (commit_many)
 * share: the commit read from its arguments, and the steps both paths
 * take with it. Private to those two files.
 */
#ifndef MS_COMMIT_H
#define MS_COMMIT_H

#include "store.h"

/* hidden, as in ms.h */
#pragma GCC visibility push(hidden)

#define MS_GROUP_MAX 256

typedef struct commit_in {
  const char *id, *definition_id, *data, *processed, *status, *parent_id;
  size_t id_len, def_len, data_len, processed_len, status_len, parent_len;
  double min_fire;         /* earliest fire_at scheduled by this commit, or MS_NO_TIMER */
  double next_fire;        /* with has_next_fire: the earliest timer armed after the commit */
  int has_next_fire;       /* the caller knows every armed timer: next_fire_at is set, not lowered */
  int64_t old;
  int64_t advance;         /* how far the version moves on: 1, or a group's event count */
  int64_t fence;           /* the inbox claim's fence the commit is made under (0: none) */
  int n_emits, n_spawns;
  bson_t emits;            /* array of { target_id, event } without seq */
  bson_t spawns;           /* array of { child_id, root_path, context } without seq */
  bson_t set_timers;       /* "timers.<enc>" -> fire_at */
  bson_t unset_timers;     /* "timers.<enc>" -> "" */
  bson_t trace;            /* the steps as an array, without index unless the caller gave one */
  int has_trace;           /* how many steps */
  int n_processed;         /* event ids the commit marks (processed is the first) */
  const char *pids[MS_GROUP_MAX];
  size_t plens[MS_GROUP_MAX];
  const char *dd_in;       /* the dedupe digests the caller loaded (dedupe.c) */
  size_t dd_in_len;
  uint8_t *dd_out;         /* the digests this commit stores, when it marks an event */
  size_t dd_out_len;
  char doing[160];         /* "commit <id>", the prefix of its messages */
} commit_in_t;

typedef struct seqs {
  int64_t outbox, spawn, trace;
  int aged;  /* some come from a block reserved before (ms_take_seqs) */
} seqs_t;

/* commit_read.c: frees what reading a commit built */
void ms_commit_in_destroy(commit_in_t *c);

/* commit.c's steps, in the order a commit takes them */
int64_t ms_commit_first_step_index(const commit_in_t *c);
void ms_commit_build_update(const ms_store_t *s, const commit_in_t *c, const seqs_t *q, bson_t *u);
int64_t ms_commit_reply_count(const bson_t *reply, const char *field);
void ms_commit_build_cas_filter(const commit_in_t *c, const seqs_t *q, bson_t *filter);
int ms_commit_push_duplicate(lua_State *L, const commit_in_t *c);
int ms_commit_push_stale(lua_State *L, const commit_in_t *c, int64_t found, int64_t fence);
int ms_commit_push_conflict(lua_State *L, const commit_in_t *c, int have, int64_t found);
int ms_commit_push_marked(lua_State *L, ms_store_t *s, const commit_in_t *c);
int ms_commit_mark_digests(const ms_store_t *s, commit_in_t *c);
int ms_commit_read_args(lua_State *L, int base, commit_in_t *c, ms_err_t *e);
int ms_commit_read_ops(lua_State *L, const ms_store_t *s, commit_in_t *c, int ops, ms_err_t *e);

#pragma GCC visibility pop

#endif
