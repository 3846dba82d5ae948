/*
 * fuzz/json_fuzz.c - libFuzzer harness over the JSON codec (csrc/json.c):
 * any bytes either decode or are refused with a message; what decodes encodes
 * back to text that decodes to the same value, and a decoded document takes
 * the same way through BSON (csrc/value.c) to the same value.
 */
#include "harness.h"

/* The one refusal a decoded value may meet: JSON lets "\u0000" into a key,
 * the value rules (and BSON) do not. */
static int refusal_expected(const ms_err_t *e) { return strstr(e->msg, "NUL byte") != NULL; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  lua_State *L = fuzz_state();
  ms_err_t e;
  bson_string_t *text;
  int json_ok;

  if (ms_json_decode(L, (const char *)data, size, &e)) {
    if (lua_gettop(L) != 0) fuzz_fail("ms_json_decode failed and left values on the stack");
    if (e.code == NULL || strcmp(e.code, "invalid") != 0 || e.msg[0] == '\0')
      fuzz_fail("ms_json_decode failed without an 'invalid' message");
    fuzz_done(L);
    return 0;
  }
  if (lua_gettop(L) != 1) fuzz_fail("ms_json_decode pushed other than one value");

  text = fuzz_json_encode(L, 1, &e);
  json_ok = text != NULL;
  if (!json_ok && !refusal_expected(&e)) {
    fuzz_dump("input", data, size);
    fprintf(stderr, "encode refused: %s\n", e.msg);
    fuzz_fail("a decoded value did not encode back");
  }
  if (text) {
    if (ms_json_decode(L, text->str, text->len, &e)) {
      fuzz_dump("input", data, size);
      fuzz_dump("encoded", (const uint8_t *)text->str, text->len);
      fprintf(stderr, "decode refused: %s\n", e.msg);
      fuzz_fail("the encoder wrote text the decoder refuses");
    }
    if (!fuzz_equal(L, 1, 2, 0)) {
      fuzz_dump("input", data, size);
      fuzz_dump("encoded", (const uint8_t *)text->str, text->len);
      fuzz_fail("decode(encode(v)) differs from v");
    }
    bson_string_free(text, true);
    lua_settop(L, 1);
  }

  /* the same document through BSON: same verdict, same value */
  if (lua_type(L, 1) == LUA_TTABLE) {
    size_t n;
    ms_err_t ke;
    int kind = ms_table_kind(L, 1, &n, &ke);
    if (kind == MS_KIND_DOC) {
      bson_t doc = BSON_INITIALIZER;
      int bson_ok = ms_table_to_bson(L, 1, &doc, "value", &e) == 0;
      if (lua_gettop(L) != 1) fuzz_fail("ms_table_to_bson left the Lua stack unbalanced");
      if (bson_ok != json_ok) {
        fuzz_dump("input", data, size);
        fprintf(stderr, "bson: %s\n", bson_ok ? "accepted" : e.msg);
        fuzz_fail("the BSON and JSON encoders disagree on a value");
      }
      if (bson_ok) {
        if (ms_push_bson_doc(L, &doc, &e)) {
          fuzz_dump("input", data, size);
          fprintf(stderr, "bson decode: %s\n", e.msg);
          fuzz_fail("a document the BSON encoder wrote does not decode");
        }
        if (!fuzz_equal(L, 1, 2, 0)) {
          fuzz_dump("input", data, size);
          fuzz_fail("BSON decode(encode(v)) differs from v");
        }
      }
      bson_destroy(&doc);
    }
  }
  fuzz_done(L);
  return 0;
}
