/*
 * ms.h - private header of mongostore.core: the types and functions the C
 * files share, listed under the file that defines them, and the tunables.
 * Anything not listed here (or in store.h) is static to its file.
 */
#ifndef MS_H
#define MS_H

#include <stddef.h>
#include <stdint.h>

#include <lua.h>
#include <lauxlib.h>
#include <bson/bson.h>

#include "compat.h"

/* Every ms_ declaration from here to the end is hidden, so the module
 * exports only luaopen_mongostore_core however it is built: with the
 * Makefile's -fvisibility=hidden or by luarocks, which passes no such flag.
 * System and driver headers are included above, outside it. */
#pragma GCC visibility push(hidden)

/* ---- tunables: each may be set with -D at build time ---- */

/* Deep enough for any real context, shallow enough that a cycle or a hostile
 * document cannot exhaust the C stack. */
#if !defined(MS_MAX_DEPTH)
#define MS_MAX_DEPTH 100
#endif

/* The longest id, kind, path or filter string taken: ids nest (a region's
 * child id holds its parent's, a forwarded event's id its target's), so
 * the bound is generous, yet a call never ships megabytes for one key. */
#if !defined(MS_MAX_TEXT)
#define MS_MAX_TEXT 16384
#endif

/* bson_string_t counts its length in 32 bits and doubles its buffer as it
 * grows, so a JSON text must stay well below 2 GiB. */
#if !defined(MS_JSON_MAX_TEXT)
#define MS_JSON_MAX_TEXT ((size_t)1 << 30)
#endif

/* The server's own document limit is read at connect; this is the fallback
 * when its hello reply does not say. */
#if !defined(MS_DEFAULT_MAX_BSON)
#define MS_DEFAULT_MAX_BSON (16 * 1024 * 1024)
#endif

/* connect's opts.wait default: a worker started beside its server waits
 * this many seconds for it to answer before failing. */
#if !defined(MS_CONNECT_WAIT)
#define MS_CONNECT_WAIT 30
#endif

/* Each connection attempt may take this long (ms) before connect retries. */
#if !defined(MS_CONNECT_ATTEMPT_MS)
#define MS_CONNECT_ATTEMPT_MS 2000
#endif

/* How long a call waits for a reply when the URI does not say
 * (socketTimeoutMS): libmongoc's own default of 5 minutes would hold a
 * worker that long on a server that went silent. */
#if !defined(MS_SOCKET_TIMEOUT_MS)
#define MS_SOCKET_TIMEOUT_MS 30000
#endif

/* connect's opts.trace_max default: the trace steps a document keeps (0
 * keeps all); bounded so a long-lived execution's document stays small. */
#if !defined(MS_TRACE_MAX)
#define MS_TRACE_MAX 200
#endif

/* How many handled event ids a document keeps for dedupe by default
 * (opts.dedupe_window); the window a replayed delivery is caught in. */
#if !defined(MS_DEDUPE_WINDOW)
#define MS_DEDUPE_WINDOW 1000
#endif

/* The largest opts.dedupe_window: at most 8 MB of digests, so a document
 * always has room for them under the server's 16 MB limit. */
#if !defined(MS_DEDUPE_WINDOW_MAX)
#define MS_DEDUPE_WINDOW_MAX 1000000
#endif

/* Bytes of SHA-256 kept per handled event id in `dedupe`: 8 make a chance
 * collision negligible for any window. Stored documents carry digests of
 * this size, so changing it forgets every mark already written. */
#if !defined(MS_DIGEST)
#define MS_DIGEST 8
#endif

/* How many handled event ids stay readable in the `processed` array (the
 * part harel's own store reads and writes); the digests hold the rest. */
#if !defined(MS_DEDUPE_TAIL)
#define MS_DEDUPE_TAIL 16
#endif

/* Bytes of the secret that signs listing cursors (an HMAC-SHA-256 key). */
#if !defined(MS_CURSOR_KEY_BYTES)
#define MS_CURSOR_KEY_BYTES 32
#endif

/* ---- the rest ---- */

/* MS_STR(MS_MAX_TEXT): a tunable's value spelled inside a message. */
#define MS_STR_(x) #x
#define MS_STR(x) MS_STR_(x)

/* Metatable that marks a Lua table as an array (mongostore.array). */
#define MS_ARRAY_MT "mongostore.array"
/* Metatable of a boxed 64-bit integer (LuaJIT / Lua 5.1: beyond 2^53). */
#define MS_INT64_MT "mongostore.int64"
/* Metatable of the store userdata. */
#define MS_STORE_MT "mongostore.Store"

/* An error on its way to Lua as (nil, msg, code). code is one of the fixed
 * names of mongostore.codes, documented in README.md (the list is checked
 * against both by spec/01-unit/doc_drift_spec.lua): conflict, duplicate,
 * network, timeout, server, invalid, too_large, unavailable, closed,
 * not_found, transient, stale, validation, transaction, clock_regression,
 * finished. */
typedef struct ms_err {
  const char *code;
  char msg[512];
} ms_err_t;

/* class.c: a userdata class's metatable, made once (luaL_newmetatable):
 * __index is a table of methods plus what each adder (a NULL-terminated
 * list, or NULL) sets into it; gc, close and tostring may be NULL. Leaves
 * the stack as it was. */
typedef void (*ms_add_methods_t)(lua_State *L);
void ms_new_class(lua_State *L, const char *name, const luaL_Reg *methods, ms_add_methods_t const *adders,
                  lua_CFunction gc, lua_CFunction close, lua_CFunction tostring);

/* errors.c: building an error and handing it to Lua (no libmongoc) */
void ms_err_set(ms_err_t *e, const char *code, const char *fmt, ...);  /* printf-style */
void ms_err_prefix(ms_err_t *e, const char *prefix);      /* "prefix: " + msg */
int  ms_push_error(lua_State *L, const ms_err_t *e);      /* pushes nil, msg, code; returns 3 */

/* value.c: shared value rules and the Lua <-> BSON codec */
void ms_push_null(lua_State *L);                          /* pushes mongostore.null */
int  ms_is_null(lua_State *L, int idx);                   /* 1 if the value is mongostore.null */
void ms_mark_array(lua_State *L, int idx);                /* sets the array metatable on the table */
int  ms_is_marked_array(lua_State *L, int idx);           /* 1 if the value carries the array metatable */
void ms_push_int64(lua_State *L, int64_t v);              /* an integer, boxed where numbers are doubles */
int  ms_to_int64(lua_State *L, int idx, int64_t *v);      /* 1 for an integer or a box, *v set */
/* Classifies the table at idx: MS_KIND_DOC, MS_KIND_ARRAY (n set to its length),
 * or -1 with e set (keys that are neither strings nor a 1..n sequence). */
#define MS_KIND_DOC 0
#define MS_KIND_ARRAY 1
int  ms_table_kind(lua_State *L, int idx, size_t *n, ms_err_t *e);
/* Where a conversion is: the tables on the current path (the cycle guard) and
 * a printable path such as context.items[3] for error messages. */
typedef struct ms_path {
  const void *seen[MS_MAX_DEPTH + 1];
  size_t mark[MS_MAX_DEPTH + 1];
  int depth;
  size_t len;
  char buf[256];
} ms_path_t;
void ms_path_init(ms_path_t *p, const char *root);
/* Pushes a table onto the path; fails on a cycle or past MS_MAX_DEPTH. */
int  ms_path_enter(ms_path_t *p, lua_State *L, int idx, ms_err_t *e);
void ms_path_leave(ms_path_t *p);
/* Extends the printable path by .key or [i]; ms_path_pop_key undoes it. */
void ms_path_push_key(ms_path_t *p, const char *key, size_t keylen);
void ms_path_push_index(ms_path_t *p, size_t i);
void ms_path_pop_key(ms_path_t *p, size_t oldlen);
/* Enters a table on the path and classifies it (ms_table_kind); on error the
 * path is left as it was and e names where. Leave with ms_path_leave. */
int  ms_table_enter(lua_State *L, int idx, ms_path_t *p, size_t *n, ms_err_t *e);
/* Checks a string (value or key) is valid UTF-8; keys may not hold NUL. */
int  ms_check_string(const char *s, size_t len, int is_key, ms_path_t *p, ms_err_t *e);
/* Checks a float is finite. */
int  ms_check_number(lua_Number n, ms_path_t *p, ms_err_t *e);
/* Appends the Lua value at idx under key to doc; what names the value in
 * errors. This and ms_table_to_bson are the execution store's form, which
 * refuses boxes; the document API's form is in codec.h. */
int  ms_append_value(lua_State *L, int idx, bson_t *doc, const char *key, size_t keylen,
                     ms_path_t *p, ms_err_t *e);
/* Converts the Lua table at idx into doc (initialised by the caller). */
int  ms_table_to_bson(lua_State *L, int idx, bson_t *doc, const char *what, ms_err_t *e);
/* Pushes the value under iter (documents -> tables, arrays -> marked tables). */
int  ms_push_bson_value(lua_State *L, const bson_iter_t *iter, int depth, ms_err_t *e);
/* Pushes a whole document as a table. */
int  ms_push_bson_doc(lua_State *L, const bson_t *doc, ms_err_t *e);
void ms_open_bson(lua_State *L);                          /* bson.c: bson_encode, bson_decode, bson_roundtrip */
void ms_open_value(lua_State *L);                         /* adds null, array, is_array to module */
/* An ordered document (index keys, sort, projection): a list of {key, value}
 * pairs in order, or a table; with MS_ORDER_STRICT a table of more than one
 * key is refused (its order would be pairs()'s). -1 with e set ("invalid"). */
#define MS_ORDER_ANY 0
#define MS_ORDER_STRICT 1
int  ms_ordered_to_bson(lua_State *L, int idx, bson_t *doc, const char *what, int mode, ms_err_t *e);
/* Each table ms_push_document (decode.c) makes carries a shape as its
 * metatable, one per distinct shape, cached per state: a document's shape
 * holds its keys in order ([1], a list), a type letter per key ([2], a
 * string: 'i' int32, 'd' double, '-' anything else) and the keys as a set
 * ([3]); an array's holds [2] and, at [0], the array mark, which is what
 * makes it an array. */
#define MS_SHAPE_INT32 'i'
#define MS_SHAPE_DOUBLE 'd'
#define MS_SHAPE_OTHER '-'

/* decode.c: the document API's decoding: every BSON type kept (boxes where
 * Lua has no type), and each table remembering its fields' order and numeric
 * types, so ms_document_to_bson writes it back unchanged. */
int  ms_push_document(lua_State *L, const bson_t *doc, ms_err_t *e);
void ms_open_decode(lua_State *L);                        /* test_decode_raw, for specs only */

/* bsontypes.c: the boxes, typed values for the BSON types Lua has none for */
#define MS_BOX_OBJECTID 1
#define MS_BOX_DATE 2
#define MS_BOX_BINARY 3
#define MS_BOX_DECIMAL 4
#define MS_BOX_INT32 5
#define MS_BOX_TIMESTAMP 6
#define MS_BOX_REGEX 7
#define MS_BOX_MINKEY 8
#define MS_BOX_MAXKEY 9
#define MS_BOX_CODE 10
#define MS_BOX_CODEWSCOPE 11
#define MS_BOX_SYMBOL 12
#define MS_BOX_UNDEFINED 13
#define MS_BOX_DBPOINTER 14
#define MS_BOX_LAST 14
int  ms_box_kind(lua_State *L, int idx);                  /* MS_BOX_*, or 0 when not a box */
/* Pushes the box for the value under it (1), or pushes nothing (0) for a
 * type that is not a box's. */
int  ms_push_box(lua_State *L, const bson_iter_t *it);
/* Appends the box at idx under key and returns its kind (MS_BOX_*, nonzero),
 * or does nothing and returns 0 when the value is not a box. */
int  ms_append_box(lua_State *L, int idx, bson_t *doc, const char *key, size_t keylen);
void ms_open_bsontypes(lua_State *L);                     /* constructors, minkey, maxkey, undefined */

/* json.c: Lua <-> JSON text, harel's serialisation of Execution and Event */
int  ms_json_encode(lua_State *L, int idx, bson_string_t *out, ms_path_t *p, ms_err_t *e);
int  ms_json_decode(lua_State *L, const char *s, size_t len, ms_err_t *e);  /* pushes the value */
void ms_open_json(lua_State *L);                          /* json_encode, json_decode */

/* ejson.c: MongoDB Extended JSON through libbson (mongostore.ejson) */
void ms_open_ejson(lua_State *L);                         /* bson_to_ejson, ejson_to_bson */

/* isotime.c: the ISO-8601 date-times harel (pydantic) writes */
size_t ms_iso8601_format(double t, char *out, size_t outlen);  /* UTC, microseconds, 'Z' */
int  ms_iso8601_parse(const char *s, size_t len, double *t);   /* 0 on success */
void ms_open_isotime(lua_State *L);                       /* time_to_iso, iso_to_time */

/* errors_mongoc.c: libmongoc failures -> codes */
void ms_err_from_bson(ms_err_t *e, const bson_error_t *be, const char *doing);
/* The same, knowing how long the failed call took and the socket timeout
 * it ran under, which tells a reset connection from an unanswered one. */
void ms_err_from_bson_timed(ms_err_t *e, const bson_error_t *be, const char *doing, double elapsed_ms,
                            int32_t timeout_ms);

/* store.c: the Store userdata (its own files share store.h) */
void ms_open_store(lua_State *L, ms_add_methods_t const *parts); /* connect, the Store metatable */

/* database.c: the document API (its own files share document.h) */
void ms_open_database(lua_State *L);                      /* database(), the Database metatable, and the
                                                             document classes' method tables (after theirs) */

/* core.c: process-wide helpers */
/* base.c: libmongoc's init and a quiet log handler, once per process; the
 * module's own small functions (now, sleep, uuid, hashes, text_error) */
void ms_process_init(void);
void ms_open_base(lua_State *L);
double ms_now(void);
int ms_random(void *buf, size_t len);                     /* 0, or -1 with errno set */
/* What is wrong with a string given as an id or a filter value (empty, not
 * UTF-8, NUL inside), or NULL when nothing is: the one rule for them all. */
const char *ms_text_error(const char *s, size_t len);
/* Set while the core makes a call whose failure it reports itself (URI
 * parsing), so libmongoc's own log line about it is not printed too. */
extern volatile int ms_log_quiet;

#pragma GCC visibility pop

#endif
