/*
 * fuzz/harness.h - what both libFuzzer harnesses share: one Lua state with
 * the value codecs opened, a deep equality of Lua values that tells integers
 * from floats and marked arrays from documents, and a loud failure.
 */
#ifndef FUZZ_HARNESS_H
#define FUZZ_HARNESS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lualib.h>

#include "../csrc/ms.h"

/* One state for the whole run: a fresh one per input would spend most of the
 * time in luaL_newstate. Each input starts from an empty stack; the module
 * table (core.bson_encode, ...) sits in the registry. */
static int fuzz_panic(lua_State *L) {
  fprintf(stderr, "FUZZ FAILURE: the codec raised a Lua error: %s\n", lua_tostring(L, -1));
  abort();
  return 0;
}

static lua_State *fuzz_state(void) {
  static lua_State *L;
  if (!L) {
    L = luaL_newstate();
    lua_atpanic(L, fuzz_panic);
    luaL_openlibs(L);
    lua_newtable(L);
    ms_open_value(L);
    ms_open_json(L);
    lua_setfield(L, LUA_REGISTRYINDEX, "fuzz.core");
  }
  lua_settop(L, 0);
  return L;
}

/* Ends an input: a full collection frees all it made, so libFuzzer's leak
 * check (mallocs against frees per input) points at a C leak only. */
static void fuzz_done(lua_State *L) {
  lua_settop(L, 0);
  lua_gc(L, LUA_GCCOLLECT, 0);
}

static void fuzz_dump(const char *label, const uint8_t *s, size_t n) {
  size_t i;
  fprintf(stderr, "%s (%zu bytes): ", label, n);
  for (i = 0; i < n && i < 400; i++) {
    unsigned char c = s[i];
    if (c >= 0x20 && c < 0x7f && c != '\\') fputc(c, stderr);
    else fprintf(stderr, "\\x%02x", c);
  }
  fputs(i < n ? "...\n" : "\n", stderr);
}

/* A finding: say what broke, then abort so libFuzzer keeps the input. */
static void fuzz_fail(const char *what) {
  fprintf(stderr, "FUZZ FAILURE: %s\n", what);
  abort();
}


/* 1 when the values at a and b are the same value for the codecs: same type,
 * integer vs float subtype, the same bits of a float (-0.0 is not 0.0), the
 * same array mark, the same keys with equal values. */
static int fuzz_equal(lua_State *L, int a, int b, int depth) {
  a = lua_absindex(L, a);
  b = lua_absindex(L, b);
  if (lua_type(L, a) != lua_type(L, b)) return 0;
  switch (lua_type(L, a)) {
  case LUA_TNUMBER:
    if (lua_isinteger(L, a) != lua_isinteger(L, b)) return 0;
    if (lua_isinteger(L, a)) return lua_tointeger(L, a) == lua_tointeger(L, b);
    {
      double x = (double)lua_tonumber(L, a), y = (double)lua_tonumber(L, b);
      return memcmp(&x, &y, sizeof x) == 0;
    }
  case LUA_TSTRING: {
    size_t la, lb;
    const char *sa = lua_tolstring(L, a, &la), *sb = lua_tolstring(L, b, &lb);
    return la == lb && memcmp(sa, sb, la) == 0;
  }
  case LUA_TBOOLEAN: return lua_toboolean(L, a) == lua_toboolean(L, b);
  case LUA_TLIGHTUSERDATA: return lua_touserdata(L, a) == lua_touserdata(L, b);
  case LUA_TTABLE: {
    size_t na = 0, nb = 0;
    if (depth > 2 * MS_MAX_DEPTH) fuzz_fail("fuzz_equal: deeper than any value the codecs make");
    if (ms_is_marked_array(L, a) != ms_is_marked_array(L, b)) return 0;
    luaL_checkstack(L, 6, "fuzz_equal");
    lua_pushnil(L);
    while (lua_next(L, a)) {
      na++;
      lua_pushvalue(L, -2);
      lua_rawget(L, b);
      if (lua_isnil(L, -1) || !fuzz_equal(L, -2, -1, depth + 1)) {
        lua_pop(L, 3);
        return 0;
      }
      lua_pop(L, 2);
    }
    lua_pushnil(L);
    while (lua_next(L, b)) { nb++; lua_pop(L, 1); }
    return na == nb;
  }
  default:
    return lua_rawequal(L, a, b);
  }
}

/* The JSON text of the value at idx, or NULL with e set. Caller frees. */
static bson_string_t *fuzz_json_encode(lua_State *L, int idx, ms_err_t *e) {
  ms_path_t p;
  bson_string_t *out = bson_string_new(NULL);
  int top = lua_gettop(L);
  ms_path_init(&p, "value");
  if (ms_json_encode(L, idx, out, &p, e)) {
    bson_string_free(out, true);
    out = NULL;
  }
  if (lua_gettop(L) != top) fuzz_fail("ms_json_encode left the Lua stack unbalanced");
  return out;
}

#endif
