/*
 * document.h - what the document API's C files share: the Database,
 * Collection, Cursor and Session userdata, and the helpers more than one of
 * them calls, each listed under the file that defines it.
 */
#ifndef MS_DOCUMENT_H
#define MS_DOCUMENT_H

#include "store.h"
#include "codec.h"

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
  int txn_failed;               /* an operation of the current transaction failed with the
                                 * TransientTransactionError label: it cannot commit */
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
/* An operation of db failed with the TransientTransactionError label, which
 * only an operation inside a transaction gets: marks db's sessions that are
 * in one (s:transaction_failed(), what db:transaction reads after fn raised). */
void ms_session_note_transient(lua_State *L, ms_database_t *db);

/* ---- from collection.c: what the Collection's methods share (bulk.c's
 * among them). The Lua half has checked argument types and option keys;
 * each method encodes every input before any libmongoc call. ---- */

/* One method call: its collection, its options table and the prefix of its
 * errors. */
typedef struct ms_call {
  ms_collection_t *c;
  ms_database_t *db;
  int opts;              /* stack index of the options table, 0 for none */
  int found;             /* what an encoding saw, where nothing else depends on it */
  const char *op;        /* "insert_one" */
  char doing[160];       /* "insert_one articles", made by ms_call_doing */
} ms_call_t;

/* The collection at 1, the options at opts_idx, the clock started; 0 when
 * its database is closed. MS_CALL_BEGIN declares k and returns the closed
 * error. */
int ms_call_begin(lua_State *L, ms_call_t *k, const char *op, int opts_idx);
#define MS_CALL_BEGIN(L, k, op, opts_idx) \
  ms_call_t k;                            \
  if (!ms_call_begin(L, &k, op, opts_idx)) return ms_document_closed(L, ms_call_doing(&k))
/* "update_one articles": the prefix of the call's errors, made on first use
 * (most calls report none). */
const char *ms_call_doing(const ms_call_t *k);
int ms_call_fail(lua_State *L, const ms_call_t *k, ms_err_t *e);   /* nil, "<doing>: msg", code */
int ms_call_fail_bson(lua_State *L, const ms_call_t *k, const bson_error_t *be, const bson_t *reply);
/* Pushes option name (its Lua type returned; nil pushed without options). */
int ms_call_opt(lua_State *L, const ms_call_t *k, const char *name);
int ms_call_session(lua_State *L, const ms_call_t *k, bson_t *o, ms_err_t *e);   /* opts.session into o */
/* collection.c: a non-negative integer option into o under key (absent is fine); a boolean option into *out
 * (absent: 0). Both -1 on a wrong value. */
int ms_call_int_opt(lua_State *L, const ms_call_t *k, const char *name, bson_t *o, const char *key, ms_err_t *e);
int ms_call_bool_opt(lua_State *L, const ms_call_t *k, const char *name, int *out);

/* An update given as a pipeline (beside codec.h's MS_FOUND_* bits). */
#define MS_FOUND_PIPELINE 0x100
/* What makes a document need the full checks: ms_check_storable's (an
 * empty key, anywhere, or a box that holds a document of its own), and
 * libmongoc's validation (UTF-8 and empty keys, which the encoder has
 * covered unless one of these was seen). */
#define MS_NEEDS_CHECKS (MS_FOUND_EMPTY_KEY | MS_FOUND_LEGACY | MS_FOUND_PIPELINE)

/* ms_check_storable, when what the encoding found says it can fail. */
static inline int ms_storable(const bson_t *doc, int found, const char *what, ms_err_t *e) {
  return (found & (MS_FOUND_EMPTY_KEY | MS_FOUND_LEGACY)) ? ms_check_storable(doc, what, e) : 0;
}
/* An update libmongoc would pass (every top-level key an operator, nothing
 * its validation reads that the encoder did not check) is sent without
 * that second pass. */
static inline int ms_update_is_clean(int found) { return !(found & (MS_NEEDS_CHECKS | MS_FOUND_TOP_PLAIN)); }
/* Asks libmongoc not to validate a document again (its opts). */
static inline void ms_no_validation(bson_t *opts) { bson_append_bool(opts, "validate", 8, false); }
/* The options of a write that has no others, as static BSON in b (never
 * destroyed, never appended to): validate: false when no_validate (the
 * encoder checked what libmongoc would), upsert: true when upsert. */
void ms_write_opts(bson_t *b, int no_validate, int upsert);

/* A document argument (nil is {} when may_be_nil), an update (a document of
 * operators or a pipeline), a document to insert (an _id made first when it
 * has none, checked as stored documents are); *found as codec.h's. */
int ms_doc_arg(lua_State *L, int idx, bson_t *out, const char *what, int may_be_nil, int *found, ms_err_t *e);
int ms_update_arg(lua_State *L, int idx, bson_t *out, const char *what, int *found, ms_err_t *e);
int ms_encode_insert(lua_State *L, const ms_call_t *k, int idx, bson_t *out, const char *what, int *found,
                     ms_err_t *e);
/* A replacement document: as a document to insert, without the _id made;
 * *clean when libmongoc need not validate it again. */
int ms_replacement_arg(lua_State *L, const ms_call_t *k, int idx, bson_t *out, const char *what, int *clean,
                       ms_err_t *e);
int ms_check_top_keys(const bson_t *doc, const char *what, ms_err_t *e);   /* no top-level '$' key */
int ms_size_ok(const ms_call_t *k, const bson_t *doc, const char *what, ms_err_t *e);   /* within max_bson */

int64_t ms_reply_int(const bson_t *reply, const char *key);   /* a number of a reply, 0 when absent */
int ms_push_field(lua_State *L, const bson_t *doc, const char *key, ms_err_t *e);   /* decoded, or nil */

/* pre, the decimal i, then post into buf ("docs[12]"); a then b into buf;
 * both cut as snprintf would, and cheaper per document. */
void ms_index_name(char *buf, size_t size, const char *pre, size_t i, const char *post);
void ms_name_join(char *buf, size_t size, const char *a, const char *b);

/* ---- from bulk.c: the many-document writes ---- */

/* Adds insert_many and bulk_write to the Collection's methods (the table on
 * top of the stack). */
void ms_collection_add_bulk(lua_State *L);
/* indexes.c: create_index, list_indexes, drop_index, drop into the table on top */
void ms_collection_add_indexes(lua_State *L);

/* ---- each file's metatable, made by core.c before ms_open_database (in
 * ms.h) exports their method tables ---- */

void ms_open_collection(lua_State *L);  /* collection.c: the Collection metatable */
void ms_open_cursor(lua_State *L);      /* cursor.c: the Cursor metatable */
void ms_open_session(lua_State *L);     /* session.c: the Session metatable */

#pragma GCC visibility pop

#endif
