/*
 * read.c - BSON -> Lua for the execution store; the document API's reader,
 * with its shapes and boxes, is decode.c's.
 */
#include "ms.h"
#include "codec.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>


static int push_bson_iter_table(lua_State *L, bson_iter_t *it, int is_array, int depth, ms_err_t *e) {
  lua_Integer i = 1;
  lua_newtable(L);
  while (bson_iter_next(it)) {
    if (is_array) {
      if (ms_push_bson_value(L, it, depth + 1, e)) { lua_pop(L, 1); return -1; }
      lua_rawseti(L, -2, i++);
    } else {
      lua_pushlstring(L, bson_iter_key(it), bson_iter_key_len(it));
      if (ms_push_bson_value(L, it, depth + 1, e)) { lua_pop(L, 2); return -1; }
      lua_rawset(L, -3);
    }
  }
  /* bson_iter_next ends on a corrupt element as it does at the end: without
   * this a cut document would read as a shorter one. */
  if (it->err_off != 0) {
    lua_pop(L, 1);
    ms_err_set(e, "server", "corrupt document from the server (at byte %u)", (unsigned)it->err_off);
    return -1;
  }
  if (is_array) ms_mark_array(L, -1);
  return 0;
}

int ms_push_bson_value(lua_State *L, const bson_iter_t *iter, int depth, ms_err_t *e) {
  bson_iter_t child;
  if (depth > MS_MAX_DEPTH) {
    ms_err_set(e, "invalid", "document nested deeper than %d levels", MS_MAX_DEPTH);
    return -1;
  }
  luaL_checkstack(L, 4, "mongostore: document too deep");
  switch (bson_iter_type(iter)) {
  case BSON_TYPE_DOUBLE: lua_pushnumber(L, bson_iter_double(iter)); break;
  case BSON_TYPE_UTF8: {
    uint32_t len;
    const char *s = bson_iter_utf8(iter, &len);
    lua_pushlstring(L, s, len);
    break;
  }
  case BSON_TYPE_DOCUMENT:
  case BSON_TYPE_ARRAY:
    /* The value at depth d is the (d+1)th table of the path: past
     * MS_MAX_DEPTH tables the encoder would refuse what was read. */
    if (depth >= MS_MAX_DEPTH) {
      ms_err_set(e, "invalid", "document nested deeper than %d levels", MS_MAX_DEPTH);
      return -1;
    }
    if (!bson_iter_recurse(iter, &child)) {
      ms_err_set(e, "server", "corrupt document from the server");
      return -1;
    }
    return push_bson_iter_table(L, &child, bson_iter_type(iter) == BSON_TYPE_ARRAY, depth, e);
  case BSON_TYPE_BINARY: {
    uint32_t len;
    const uint8_t *b;
    bson_iter_binary(iter, NULL, &len, &b);
    lua_pushlstring(L, (const char *)b, len);
    break;
  }
  case BSON_TYPE_OID: {
    char hex[25];
    bson_oid_to_string(bson_iter_oid(iter), hex);
    lua_pushstring(L, hex);
    break;
  }
  case BSON_TYPE_BOOL: lua_pushboolean(L, bson_iter_bool(iter)); break;
  case BSON_TYPE_DATE_TIME: lua_pushnumber(L, (double)bson_iter_date_time(iter) / 1000.0); break;
  case BSON_TYPE_INT32: ms_push_int64(L, (int64_t)bson_iter_int32(iter)); break;
  case BSON_TYPE_INT64: ms_push_int64(L, bson_iter_int64(iter)); break;
  case BSON_TYPE_TIMESTAMP: {
    uint32_t ts, inc;
    bson_iter_timestamp(iter, &ts, &inc);
    ms_push_int64(L, (int64_t)(((uint64_t)ts << 32) | inc));
    break;
  }
  case BSON_TYPE_DECIMAL128: {
    bson_decimal128_t d;
    char s[BSON_DECIMAL128_STRING];
    bson_iter_decimal128(iter, &d);
    bson_decimal128_to_string(&d, s);
    lua_pushstring(L, s);
    break;
  }
  case BSON_TYPE_NULL:
  case BSON_TYPE_UNDEFINED:
  default:
    /* Types with no Lua counterpart read as null rather than failing a load
     * of a document another program wrote. */
    ms_push_null(L);
    break;
  }
  return 0;
}

int ms_push_bson_doc(lua_State *L, const bson_t *doc, ms_err_t *e) {
  bson_iter_t it;
  if (!bson_iter_init(&it, doc)) {
    ms_err_set(e, "server", "corrupt document from the server");
    return -1;
  }
  return push_bson_iter_table(L, &it, 0, 0, e);
}
