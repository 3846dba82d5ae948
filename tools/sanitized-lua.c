/*
 * sanitized-lua.c - a minimal Lua 5.4 interpreter built with AddressSanitizer
 * and UBSan, so the sanitized mongostore.core loads into a sanitized process
 * without LD_PRELOAD (which would leak into every program a spec starts).
 * Usage: sanitized-lua script.lua [args...]  |  sanitized-lua -e 'code'
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lua.h>
#include <lauxlib.h>
#include <lualib.h>

static int traceback(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  luaL_traceback(L, L, msg ? msg : "(error object is not a string)", 1);
  return 1;
}

int main(int argc, char **argv) {
  lua_State *L;
  int i, status, first = 1;
  if (argc < 2) {
    fprintf(stderr, "usage: %s script.lua [args...] | -e code\n", argv[0]);
    return 2;
  }
  L = luaL_newstate();
  luaL_openlibs(L);
  /* arg[0] is the script (or -e), arg[1..] what follows, as lua5.4 does. */
  lua_createtable(L, argc, 1);
  for (i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i - 1);
  }
  lua_setglobal(L, "arg");
  lua_pushcfunction(L, traceback);
  if (strcmp(argv[1], "-e") == 0) {
    if (argc < 3) {
      fprintf(stderr, "%s: -e needs code\n", argv[0]);
      lua_close(L);
      return 2;
    }
    status = luaL_loadbuffer(L, argv[2], strlen(argv[2]), "=(command line)");
    first = 3;
  } else {
    status = luaL_loadfile(L, argv[1]);
    first = 2;
  }
  if (status == LUA_OK) {
    int n = 0;
    for (i = first; i < argc; i++, n++) lua_pushstring(L, argv[i]);
    status = lua_pcall(L, n, 0, 1);
  }
  if (status != LUA_OK) fprintf(stderr, "%s: %s\n", argv[0], lua_tostring(L, -1));
  lua_close(L);
  return status == LUA_OK ? 0 : 1;
}
