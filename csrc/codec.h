/*
 * codec.h - the document API's codec: encode.c's forms of the encoder (boxes
 * taken, what the encoding saw reported, so that the checks a storable
 * document needs run only when they can fail) and decode.c's field reader.
 */
#ifndef MS_CODEC_H
#define MS_CODEC_H

#include "ms.h"

/* hidden, as in ms.h */
#pragma GCC visibility push(hidden)

/* value.c's rules, for the encoders (encode.c): whether s is valid UTF-8
 * (and, a key, non-empty and free of NUL); ms_table_kind that also counts
 * the table's keys. */
int ms_string_ok(const char *s, size_t len, int is_key);
int ms_table_kind_keys(lua_State *L, int idx, size_t *n, size_t *nkeys, ms_err_t *e);

/* What an encoding saw (an int of these bits): an empty key at any depth;
 * a box whose BSON holds strings or a document of its own (code, code with
 * scope, symbol, regex, DBPointer), which libmongoc's validation reads
 * further than the encoder does; a top-level key starting with '$', and
 * one that does not. */
#define MS_FOUND_EMPTY_KEY 1
#define MS_FOUND_LEGACY 2
#define MS_FOUND_TOP_DOLLAR 4
#define MS_FOUND_TOP_PLAIN 8

/* As ms_table_to_bson, for the document API: boxes are values, and *found
 * gets the MS_FOUND_* bits of the table (its top-level keys included). */
int ms_document_to_bson(lua_State *L, int idx, bson_t *doc, const char *what, int *found, ms_err_t *e);
/* As ms_append_value, for the document API; *found gains the bits seen. */
int ms_document_append_value(lua_State *L, int idx, bson_t *doc, const char *key, size_t keylen, ms_path_t *p,
                             int *found, ms_err_t *e);
/* The key that marks a shape metatable (value.c's; decode.c sets it on the
 * shapes it makes, the encoder looks for it). */
extern const char ms_shape_key;

/* decode.c: pushes the value under it as ms_push_document reads a field (a box, a
 * number that remembers nothing, a table with its shape). */
int ms_push_document_value(lua_State *L, const bson_iter_t *it, ms_err_t *e);

#pragma GCC visibility pop

#endif
