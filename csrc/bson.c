/*
 * bson.c - the module's bson_encode, bson_decode and bson_roundtrip: a Lua
 * value to BSON bytes and back through the same codecs the store and the
 * document API use (encode.c, read.c, decode.c), under the value rules of
 * value.c.
 */
#include "ms.h"
#include "codec.h"

#include <string.h>

/* Round trip through BSON, for specs and for callers that want to check a
 * value before handing it to a store call. */
static int l_bson_roundtrip(lua_State *L) {
  bson_t doc = BSON_INITIALIZER;
  ms_err_t e;
  if (ms_table_to_bson(L, 1, &doc, "value", &e)) {
    bson_destroy(&doc);
    return ms_push_error(L, &e);
  }
  if (ms_push_bson_doc(L, &doc, &e)) {
    bson_destroy(&doc);
    return ms_push_error(L, &e);
  }
  bson_destroy(&doc);
  return 1;
}

/* bson_encode(doc) -> the BSON bytes of a table with string keys, or nil,
 * msg, code: the encoder every write uses (in the document API's form,
 * boxes taken, as bson_decode's opts.document reads them), for specs,
 * fuzzing and callers that keep documents of their own. */
static int l_bson_encode(lua_State *L) {
  bson_t doc = BSON_INITIALIZER;
  ms_err_t e;
  int found;
  if (lua_type(L, 1) != LUA_TTABLE)
    return luaL_error(L, "bson_encode: doc must be a table, got %s", luaL_typename(L, 1));
  luaL_checkstack(L, 4 * MS_MAX_DEPTH + 8, "mongostore: bson_encode");
  if (ms_document_to_bson(L, 1, &doc, "bson_encode", &found, &e)) {
    bson_destroy(&doc);
    return ms_push_error(L, &e);
  }
  lua_pushlstring(L, (const char *)bson_get_data(&doc), doc.len);
  bson_destroy(&doc);
  return 1;
}

/* The value rules over a whole document, so that whatever bson_decode returns
 * bson_encode takes back: UTF-8 keys and strings (libbson 1.23's
 * bson_validate lets a string value that is not UTF-8 through whatever the
 * flags, and binary reads as a Lua string), finite doubles, the depth limit. */
static int check_rules(bson_iter_t *it, int depth, int document, ms_path_t *p, ms_err_t *e) {
  while (bson_iter_next(it)) {
    size_t oldlen = p->len;
    const char *k = bson_iter_key(it);
    uint32_t klen = bson_iter_key_len(it), len = 0;
    const char *s = NULL;
    bson_iter_t child;
    int rc = 0;
    ms_path_push_key(p, k, klen);
    if (ms_check_string(k, klen, 1, p, e)) return -1;
    switch (bson_iter_type(it)) {
    case BSON_TYPE_UTF8: s = bson_iter_utf8(it, &len); break;
    /* the document form reads binary as a box and keeps a double's type,
     * so any bytes and any double write back */
    case BSON_TYPE_BINARY:
      if (!document) bson_iter_binary(it, NULL, &len, (const uint8_t **)&s);
      break;
    case BSON_TYPE_DOUBLE:
      if (!document) rc = ms_check_number(bson_iter_double(it), p, e);
      break;
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY:
      if (depth >= MS_MAX_DEPTH) {
        ms_err_set(e, "invalid", "%s: nested deeper than %d levels", p->buf, MS_MAX_DEPTH);
        return -1;
      }
      if (!bson_iter_recurse(it, &child)) {
        ms_err_set(e, "invalid", "%s: malformed document", p->buf);
        return -1;
      }
      rc = check_rules(&child, depth + 1, document, p, e);
      break;
    default: break;
    }
    if (rc == 0 && s && ms_check_string(s, len, 0, p, e)) rc = -1;
    if (rc) return -1;
    ms_path_pop_key(p, oldlen);
  }
  /* libbson 1.23's bson_validate misses a cut sub-document deep down */
  if (it->err_off != 0) {
    ms_err_set(e, "invalid", "%s: malformed document at byte %u", p->buf, (unsigned)it->err_off + 1);
    return -1;
  }
  return 0;
}

/* bson_decode(bytes [, opts]) -> table, or nil, msg, "invalid" when the bytes
 * are not exactly one well-formed document under the value rules. With
 * opts.document, the document API's form (ms_push_document): boxes, and
 * tables that remember their order and numeric types. */
static int l_bson_decode(lua_State *L) {
  size_t len;
  const char *s;
  bson_t doc;
  size_t off = 0;
  bson_iter_t it;
  ms_path_t p;
  ms_err_t e;
  int document = 0;
  if (lua_type(L, 1) != LUA_TSTRING)
    return luaL_error(L, "bson_decode: bytes must be a string, got %s", luaL_typename(L, 1));
  if (!lua_isnoneornil(L, 2)) {
    if (lua_type(L, 2) != LUA_TTABLE)
      return luaL_error(L, "bson_decode: opts must be a table or nil, got %s", luaL_typename(L, 2));
    lua_getfield(L, 2, "document");
    document = lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
  s = lua_tolstring(L, 1, &len);
  if (len > INT32_MAX || !bson_init_static(&doc, (const uint8_t *)s, len)) {
    ms_err_set(&e, "invalid", "bson_decode: not a BSON document (%zu bytes)", len);
    return ms_push_error(L, &e);
  }
  if (!bson_validate(&doc, BSON_VALIDATE_UTF8 | BSON_VALIDATE_UTF8_ALLOW_NULL, &off)) {
    ms_err_set(&e, "invalid", "bson_decode: malformed document at byte %zu", off + 1);
    return ms_push_error(L, &e);
  }
  ms_path_init(&p, "bson_decode");
  if (!bson_iter_init(&it, &doc) || check_rules(&it, 1, document, &p, &e)) return ms_push_error(L, &e);
  if ((document ? ms_push_document : ms_push_bson_doc)(L, &doc, &e)) {
    ms_err_prefix(&e, "bson_decode");
    return ms_push_error(L, &e);
  }
  return 1;
}

static const luaL_Reg bson_funcs[] = {
  {"bson_roundtrip", l_bson_roundtrip},
  {"bson_encode", l_bson_encode},
  {"bson_decode", l_bson_decode},
  {NULL, NULL}
};

void ms_open_bson(lua_State *L) { luaL_setfuncs(L, bson_funcs, 0); }
