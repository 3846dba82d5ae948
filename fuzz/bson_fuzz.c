/*
 * fuzz/bson_fuzz.c - libFuzzer harness over the BSON codec (csrc/value.c):
 * the reader never crashes on any bytes, core.bson_decode refuses what is not
 * one well-formed document under the value rules, every value it returns
 * encodes (BSON and JSON) back to the same value, and whatever the reader
 * makes of unvalidated bytes, the two encoders agree on.
 */
#include "harness.h"

/* Calls core.<fn>(value at idx): leaves its results on the stack (1 or 3). */
static int call_core(lua_State *L, const char *fn, int idx) {
  int top;
  idx = lua_absindex(L, idx);
  top = lua_gettop(L);
  lua_getfield(L, LUA_REGISTRYINDEX, "fuzz.core");
  lua_getfield(L, -1, fn);
  lua_remove(L, -2);
  lua_pushvalue(L, idx);
  if (lua_pcall(L, 1, LUA_MULTRET, 0) != LUA_OK) {
    fprintf(stderr, "core.%s raised: %s\n", fn, lua_tostring(L, -1));
    fuzz_fail("a codec entry raised instead of returning nil, msg");
  }
  return lua_gettop(L) - top;
}

/* v at idx (a table): BSON and JSON both accept it or both refuse it, and
 * give back the same value. Returns 1 when accepted. */
static int check_reencode(lua_State *L, int idx, const uint8_t *data, size_t size) {
  bson_t doc = BSON_INITIALIZER;
  bson_string_t *text;
  ms_err_t e, je;
  int top = lua_gettop(L), ok;
  idx = lua_absindex(L, idx);
  ok = ms_table_to_bson(L, idx, &doc, "value", &e) == 0;
  if (lua_gettop(L) != top) fuzz_fail("ms_table_to_bson left the Lua stack unbalanced");
  text = fuzz_json_encode(L, idx, &je);
  if (ok != (text != NULL)) {
    fuzz_dump("input", data, size);
    fprintf(stderr, "bson: %s / json: %s\n", ok ? "ok" : e.msg, text ? "ok" : je.msg);
    fuzz_fail("the BSON and JSON encoders disagree on a value");
  }
  if (ok) {
    if (ms_push_bson_doc(L, &doc, &e)) fuzz_fail("a document the BSON encoder wrote does not decode");
    if (!fuzz_equal(L, idx, -1, 0)) {
      fuzz_dump("input", data, size);
      fuzz_fail("BSON decode(encode(v)) differs from v");
    }
    if (ms_json_decode(L, text->str, text->len, &e)) {
      fuzz_dump("encoded", (const uint8_t *)text->str, text->len);
      fuzz_fail("the JSON encoder wrote text the decoder refuses");
    }
    if (!fuzz_equal(L, idx, -1, 0)) {
      fuzz_dump("input", data, size);
      fuzz_dump("json", (const uint8_t *)text->str, text->len);
      fuzz_fail("JSON decode(encode(v)) differs from v read from BSON");
    }
    bson_string_free(text, true);
  }
  bson_destroy(&doc);
  lua_settop(L, top);
  return ok;
}

/* 0 when the document holds only types the reader decodes element by
 * element, and UTF-8 keys; 1 otherwise (bson_validate also looks inside
 * code-with-scope and refuses keys that are not UTF-8, the reader does
 * neither); -1 when bson_iter itself finds it cut. */
static int plain_shape(bson_iter_t *it, int depth) {
  while (bson_iter_next(it)) {
    bson_iter_t child;
    int r;
    if (!bson_utf8_validate(bson_iter_key(it), bson_iter_key_len(it), false)) return 1;
    switch (bson_iter_type(it)) {
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY:
      if (depth > 2 * MS_MAX_DEPTH || !bson_iter_recurse(it, &child)) return 1;
      if ((r = plain_shape(&child, depth + 1)) != 0) return r;
      break;
    case BSON_TYPE_DOUBLE: case BSON_TYPE_UTF8: case BSON_TYPE_BINARY: case BSON_TYPE_UNDEFINED:
    case BSON_TYPE_OID: case BSON_TYPE_BOOL: case BSON_TYPE_DATE_TIME: case BSON_TYPE_NULL:
    case BSON_TYPE_INT32: case BSON_TYPE_TIMESTAMP: case BSON_TYPE_INT64: case BSON_TYPE_DECIMAL128:
    case BSON_TYPE_MAXKEY: case BSON_TYPE_MINKEY:
      break;
    default:
      return 1;
    }
  }
  return it->err_off ? -1 : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  lua_State *L = fuzz_state();
  uint8_t *buf;
  bson_t b;
  ms_err_t e;
  int n, raw_ok;

  if (size < 5 || size > (1u << 24)) return 0;
  /* The length prefix is libbson's first check and libbson is not
   * instrumented: set it, so the fuzzer spends its time past it. An exact
   * copy lets ASan see any read past the end. */
  buf = malloc(size);
  memcpy(buf, data, size);
  buf[0] = (uint8_t)size;
  buf[1] = (uint8_t)(size >> 8);
  buf[2] = (uint8_t)(size >> 16);
  buf[3] = (uint8_t)(size >> 24);

  /* the store's reader, on bytes nobody validated */
  raw_ok = 0;
  if (bson_init_static(&b, buf, size)) {
    if (ms_push_bson_doc(L, &b, &e)) {
      if (lua_gettop(L) != 0) fuzz_fail("ms_push_bson_doc failed and left values on the stack");
    } else {
      bson_iter_t it;
      size_t off;
      if (lua_gettop(L) != 1) fuzz_fail("ms_push_bson_doc pushed other than one value");
      /* what the reader took, libbson's own validation takes too (where it
       * judges the same things: see plain_shape) */
      int shape = bson_iter_init(&it, &b) ? plain_shape(&it, 0) : -1;
      if (shape < 0) {
        fuzz_dump("input", buf, size);
        fuzz_fail("ms_push_bson_doc read a document that bson_iter finds cut, without an error");
      }
      if (shape == 0 && !bson_validate(&b, BSON_VALIDATE_NONE, &off)) {
        fuzz_dump("input", buf, size);
        fprintf(stderr, "bson_validate: malformed at byte %zu\n", off);
        fuzz_fail("ms_push_bson_doc read a malformed document without an error");
      }
      raw_ok = 1;
      check_reencode(L, 1, buf, size);
    }
  }

  /* the Lua entry: validated, under the value rules */
  lua_pushlstring(L, (const char *)buf, size);
  n = call_core(L, "bson_decode", -1);
  if (lua_type(L, -n) == LUA_TTABLE) {
    int v = lua_gettop(L) - n + 1;
    if (!raw_ok || !fuzz_equal(L, 1, v, 0)) {
      fuzz_dump("input", buf, size);
      fuzz_fail("core.bson_decode and ms_push_bson_doc read the same bytes differently");
    }
    n = call_core(L, "bson_encode", v);
    if (lua_type(L, -n) != LUA_TSTRING) {
      /* bson_decode holds what it returns to the value rules */
      const char *msg = lua_tostring(L, -n + 1);
      fuzz_dump("input", buf, size);
      fprintf(stderr, "bson_encode refused: %s\n", msg ? msg : "(no message)");
      fuzz_fail("a document core.bson_decode returned does not encode back");
    } else {
      int enc = lua_gettop(L) - n + 1;
      n = call_core(L, "bson_decode", enc);
      if (lua_type(L, -n) != LUA_TTABLE) {
        fuzz_dump("input", buf, size);
        fprintf(stderr, "bson_decode refused: %s\n", lua_tostring(L, -n + 1));
        fuzz_fail("core.bson_decode refuses what core.bson_encode wrote");
      }
      if (!fuzz_equal(L, v, -n, 0)) {
        fuzz_dump("input", buf, size);
        fuzz_fail("bson_decode(bson_encode(v)) differs from v");
      }
    }
  } else {
    const char *msg = lua_tostring(L, -n + 1), *code = lua_tostring(L, -n + 2);
    if (n != 3 || !lua_isnil(L, -n) || !msg || !code || strcmp(code, "invalid") != 0)
      fuzz_fail("core.bson_decode refused without nil, msg, 'invalid'");
  }
  fuzz_done(L);
  free(buf);
  return 0;
}
