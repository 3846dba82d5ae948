/*
 * document.h - what the document API's C files share: the Database,
 * Collection, Cursor and Session userdata, and the helpers more than one of
 * them calls, each listed under the file that defines it.
 */
#ifndef MS_DOCUMENT_H
#define MS_DOCUMENT_H

#include "store.h"

/* hidden, as in ms.h (after the driver's headers) */
#pragma GCC visibility push(hidden)

#define MS_DATABASE_MT "mongostore.Database"
#define MS_COLLECTION_MT "mongostore.Collection"
#define MS_CURSOR_MT "mongostore.Cursor"
#define MS_SESSION_MT "mongostore.Session"

struct ms_cursor;

/* A database handle: one client from the process's pool (the one connect()
 * uses for the same URI), held for the handle's life, since a session's
 * operations must all go through the client that started it. */
typedef struct ms_database {
  ms_pool_t *pool;
  mongoc_client_t *client;  /* NULL once closed */
  mongoc_database_t *db;
  char *name;
  char *password;           /* scrubbed from every message */
  int32_t max_bson;
  int32_t socket_timeout_ms;
  double op_started;        /* when the current call began: network vs timeout */
  struct ms_cursor *cursors; /* open cursors: closing the database closes them first,
                              * since a cursor's kill goes through the client */
} ms_database_t;

/* A collection of a database; keeps its database alive (db_ref, a
 * registry reference to the Database userdata). */
typedef struct ms_collection {
  ms_database_t *db;
  int db_ref;
  mongoc_collection_t *coll;
  char *name;
} ms_collection_t;

/* A cursor of a find, an aggregate or a listing; keeps its database alive
 * and sits on the database's list of open cursors until closed. */
typedef struct ms_cursor {
  ms_database_t *db;         /* NULL once closed */
  int db_ref;
  mongoc_cursor_t *cur;      /* NULL once closed or exhausted */
  bson_t *first;             /* the first document, read when the cursor was made */
  int closed;                /* by cursor:close() or with its database */
  char doing[160];           /* "find articles": the prefix of its errors */
  struct ms_cursor *next, *prev;
} ms_cursor_t;

/* A session of a database (db:session()); keeps its database alive. */
typedef struct ms_session {
  ms_database_t *db;
  int db_ref;
  mongoc_client_session_t *cs;  /* NULL once closed */
} ms_session_t;

/* ---- from database.c ---- */

/* The database at idx, or raises when it is not one; NULL once closed
 * (then push ms_document_closed). Starts the call's clock. */
ms_database_t *ms_database_check(lua_State *L, int idx);
int ms_document_closed(lua_State *L, const char *doing);   /* nil, "<doing>: ... closed", "closed" */
/* A failed operation as nil, msg, code, detail: code from the error and the
 * server's reply (11000 -> duplicate with the key in msg, the label
 * TransientTransactionError -> transient, otherwise as ms_err_from_bson_timed),
 * detail = { server_code = n, labels = array{...} } when the server gave
 * them (else the fourth value is absent). reply may be NULL. */
int ms_document_push_error(lua_State *L, ms_database_t *db, const bson_error_t *be, const bson_t *reply,
                           const char *doing);

/* Drains cur (destroying it) into a list of documents: returns 1, or
 * pushes nil, msg, code. */
int ms_document_push_list(lua_State *L, ms_database_t *db, mongoc_cursor_t *cur, const char *doing);
/* Pushes the Database userdata of a registry reference. */
void ms_database_push_ref(lua_State *L, int db_ref);

/* ---- from cursor.c ---- */

/* Pushes a Cursor owning cur, of db (the Database userdata at db_idx, which
 * the cursor keeps alive), having read its first document: returns 1, or
 * pushes nil, msg, code (the query failed; cur destroyed) and returns 3+.
 * doing prefixes its errors ("find articles"). */
int ms_cursor_new(lua_State *L, int db_idx, ms_database_t *db, mongoc_cursor_t *cur, const char *doing);
void ms_cursor_close(lua_State *L, ms_cursor_t *c);   /* idempotent: kills the server cursor */

/* ---- from session.c ---- */

/* Reads opts.session from the options table at opts_idx (0: none) and, when
 * it is set, appends it to cmd_opts (mongoc_client_session_append). A
 * session of another database handle, a closed one, or a value that is not
 * a Session: -1 with e set ("invalid"); 0 otherwise. */
int ms_session_append(lua_State *L, int opts_idx, ms_database_t *db, bson_t *cmd_opts, ms_err_t *e);
/* db:session(): pushes a new Session of db (the Database userdata at db_idx,
 * which the session keeps alive) and returns 1, or pushes nil, msg, code
 * ("unavailable" when the server has no sessions, "closed") and returns 3+. */
int ms_session_new(lua_State *L, int db_idx, ms_database_t *db);
/* Ends every open session of db (their transactions aborted): db:close()
 * and the Database's __gc call it before the client goes back to the pool. */
void ms_session_close_all(lua_State *L, ms_database_t *db);

/* ---- each file's methods and metatables (database.c assembles them;
 * ms_open_database, in ms.h, is what core.c calls) ---- */

void ms_open_collection(lua_State *L);  /* collection.c: the Collection metatable */
void ms_open_cursor(lua_State *L);      /* cursor.c: the Cursor metatable */
void ms_open_session(lua_State *L);     /* session.c: the Session metatable */

#pragma GCC visibility pop

#endif
