/*
 * store.h - what the store's C files share (pool.c, store.c): the client
 * pool of a process and URI, its command counts, and the duration of the
 * current call's failed attempt. Everything else stays static to its file.
 */
#ifndef MS_STORE_H
#define MS_STORE_H

#include "ms.h"

#include <mongoc/mongoc.h>

typedef struct ms_pool ms_pool_t;

/* pool.c */
ms_pool_t *ms_pool_for(const mongoc_uri_t *uri, bson_error_t *be);  /* this process's pool for uri */
mongoc_client_t *ms_pool_pop(ms_pool_t *p);                          /* a client for one store */
void ms_pool_push(ms_pool_t *p, mongoc_client_t *client);            /* gives it back */
void ms_pool_push_stats(lua_State *L, ms_pool_t *p);                 /* pushes store:stats()'s table */
void ms_failed_reset(void);                 /* a call begins on this thread: no failed attempt yet */
int64_t ms_failed_attempt_us(void);         /* its longest failed attempt so far, in us (-1: none) */

#endif
