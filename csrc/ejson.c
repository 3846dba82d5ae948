/*
 * ejson.c - MongoDB Extended JSON (v2) for documents, through libbson's own
 * writer and reader: bson_to_ejson(bytes[, canonical]) and ejson_to_bson(text).
 * mongostore.ejson (lua/mongostore/ejson.lua) puts the document codec on
 * either side, so the value rules and every box are the same as everywhere.
 */
#include "ms.h"

#include <string.h>

/* bson_to_ejson(bytes[, canonical]) -> text, or nil, msg, "invalid" for
 * bytes that are not exactly one well-formed document. */
static int l_bson_to_ejson(lua_State *L) {
  size_t len, outlen = 0;
  const char *s;
  bson_t doc;
  size_t off = 0;
  char *text;
  ms_err_t e;
  if (lua_type(L, 1) != LUA_TSTRING)
    return luaL_error(L, "bson_to_ejson: bytes must be a string, got %s", luaL_typename(L, 1));
  s = lua_tolstring(L, 1, &len);
  if (len > INT32_MAX || !bson_init_static(&doc, (const uint8_t *)s, len)) {
    ms_err_set(&e, "invalid", "bson_to_ejson: not a BSON document (%zu bytes)", len);
    return ms_push_error(L, &e);
  }
  if (!bson_validate(&doc, BSON_VALIDATE_UTF8 | BSON_VALIDATE_UTF8_ALLOW_NULL, &off)) {
    ms_err_set(&e, "invalid", "bson_to_ejson: malformed document at byte %zu", off + 1);
    return ms_push_error(L, &e);
  }
  text = lua_toboolean(L, 2) ? bson_as_canonical_extended_json(&doc, &outlen)
                             : bson_as_relaxed_extended_json(&doc, &outlen);
  if (!text) {
    ms_err_set(&e, "invalid", "bson_to_ejson: the document has no Extended JSON form");
    return ms_push_error(L, &e);
  }
  lua_pushlstring(L, text, outlen);
  bson_free(text);
  return 1;
}

/* The JSON string literal at s[0] == '"': its end (the index after the
 * closing quote, or 0 when it has none) and whether it spells want. */
static size_t string_literal(const char *s, size_t len, const char *want, int *is_want) {
  size_t i = 1, w = 0, wlen = strlen(want);
  int same = 1;
  while (i < len && s[i] != '"') {
    unsigned cp = (unsigned char)s[i];
    if (cp == '\\') {
      if (i + 1 >= len) return 0;
      cp = (unsigned char)s[i + 1];
      if (cp == 'u') {
        unsigned v = 0, k;
        if (i + 6 > len) return 0;
        for (k = 2; k < 6; k++) {
          char h = s[i + k];
          v = v * 16 + (unsigned)(h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                                  : h >= 'A' && h <= 'F' ? h - 'A' + 10 : 255);
        }
        cp = v;
        i += 6;
      } else {
        cp = cp == 'n' ? '\n' : cp == 't' ? '\t' : cp == 'r' ? '\r' : cp == 'b' ? '\b' : cp == 'f' ? '\f' : cp;
        i += 2;
      }
    } else {
      i++;
    }
    if (w >= wlen || cp != (unsigned char)want[w]) same = 0;
    w++;
  }
  if (i >= len) return 0;
  *is_want = same && w == wlen;
  return i + 1;
}

/* Whether the text names a "$code" key, escapes decoded. libbson 1.23's
 * reader reads uninitialised memory on JavaScript code in an array or with a
 * scope that holds one (valgrind shows it), so such text is refused before
 * libbson sees it. */
static int has_code_key(const char *s, size_t len) {
  size_t i = 0;
  while (i < len) {
    if (s[i] == '"') {
      int is_code = 0;
      size_t end = string_literal(s + i, len - i, "$code", &is_code);
      if (end == 0) return 0;                 /* unterminated: libbson refuses it */
      i += end;
      if (is_code) {
        size_t j = i;
        while (j < len && (s[j] == ' ' || s[j] == '\t' || s[j] == '\n' || s[j] == '\r')) j++;
        if (j < len && s[j] == ':') return 1;
      }
    } else {
      i++;
    }
  }
  return 0;
}

/* One JSON object of text into doc, nothing but white space after it: 0, or
 * -1 with e set. bson_init_from_json would stop after the first object. */
static int read_one(const char *s, size_t len, bson_t *doc, ms_err_t *e) {
  bson_json_reader_t *reader = bson_json_data_reader_new(false, 0);
  bson_error_t err;
  bson_t extra = BSON_INITIALIZER;
  int rc, more;
  bson_json_data_reader_ingest(reader, (const uint8_t *)s, len);
  rc = bson_json_reader_read(reader, doc, &err);
  if (rc == 1) {
    more = bson_json_reader_read(reader, &extra, &err);
    if (more != 0) {
      ms_err_set(e, "invalid", "ejson_to_bson: text after the JSON object");
      rc = -1;
    }
  } else {
    if (rc == 0) ms_err_set(e, "invalid", "ejson_to_bson: no JSON object in the text");
    else ms_err_set(e, "invalid", "ejson_to_bson: %s", err.message);
    rc = -1;
  }
  bson_destroy(&extra);
  bson_json_reader_destroy(reader);
  return rc == 1 ? 0 : -1;
}

/* 1 when every array under it is keyed "0", "1", ... in order. libbson
 * 1.23's reader garbles the index keys after JavaScript code ($code) in an
 * array; that is refused rather than passed on. */
static int arrays_in_order(bson_iter_t *it, int is_array, int depth) {
  uint32_t i = 0;
  char want[16];
  const char *key;
  bson_iter_t child;
  if (depth > MS_MAX_DEPTH) return 0;
  while (bson_iter_next(it)) {
    if (is_array) {
      bson_uint32_to_string(i++, &key, want, sizeof want);
      if (strcmp(key, bson_iter_key(it)) != 0) return 0;
    }
    if ((BSON_ITER_HOLDS_DOCUMENT(it) || BSON_ITER_HOLDS_ARRAY(it)) &&
        (!bson_iter_recurse(it, &child) || !arrays_in_order(&child, BSON_ITER_HOLDS_ARRAY(it), depth + 1)))
      return 0;
  }
  return 1;
}

/* ejson_to_bson(text) -> the BSON bytes of the one JSON object in text, its
 * $oid, $date, $numberLong, ... wrappers read as the types they name; or
 * nil, msg, "invalid" with libbson's reason. */
static int l_ejson_to_bson(lua_State *L) {
  size_t len;
  const char *s;
  bson_t doc = BSON_INITIALIZER;
  bson_iter_t it;
  ms_err_t e;
  if (lua_type(L, 1) != LUA_TSTRING)
    return luaL_error(L, "ejson_to_bson: text must be a string, got %s", luaL_typename(L, 1));
  s = lua_tolstring(L, 1, &len);
  if (len > (size_t)MS_JSON_MAX_TEXT) {
    ms_err_set(&e, "too_large", "ejson_to_bson: text larger than %zu bytes", (size_t)MS_JSON_MAX_TEXT);
    return ms_push_error(L, &e);
  }
  /* libbson reads a top-level array as a document keyed "0", "1", ... */
  while (len > 0 && (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')) s++, len--;
  if (len == 0 || *s != '{') {
    ms_err_set(&e, "invalid", "ejson_to_bson: the text is not a JSON object");
    return ms_push_error(L, &e);
  }
  if (has_code_key(s, len)) {
    ms_err_set(&e, "invalid", "ejson_to_bson: JavaScript code (\"$code\") is not read: libbson 1.23's "
               "reader mishandles it");
    return ms_push_error(L, &e);
  }
  if (read_one(s, len, &doc, &e)) {
    bson_destroy(&doc);
    return ms_push_error(L, &e);
  }
  if (!bson_iter_init(&it, &doc) || !arrays_in_order(&it, 0, 1)) {
    bson_destroy(&doc);
    ms_err_set(&e, "invalid", "ejson_to_bson: an array libbson could not read (JavaScript code in an array, "
               "or nested deeper than %d levels)", MS_MAX_DEPTH);
    return ms_push_error(L, &e);
  }
  lua_pushlstring(L, (const char *)bson_get_data(&doc), doc.len);
  bson_destroy(&doc);
  return 1;
}

void ms_open_ejson(lua_State *L) {
  lua_pushcfunction(L, l_bson_to_ejson);
  lua_setfield(L, -2, "bson_to_ejson");
  lua_pushcfunction(L, l_ejson_to_bson);
  lua_setfield(L, -2, "ejson_to_bson");
}
