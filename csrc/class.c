/*
 * class.c - the metatable of a userdata class, made once: its method table
 * as __index (the methods given, then what each adder sets into it), and
 * its __gc, __close and __tostring, and __name (which LuaJIT's
 * luaL_newmetatable does not set).
 */
#include "ms.h"

void ms_new_class(lua_State *L, const char *name, const luaL_Reg *methods, ms_add_methods_t const *adders,
                  lua_CFunction gc, lua_CFunction close, lua_CFunction tostring) {
  if (luaL_newmetatable(L, name)) {
    lua_newtable(L);
    if (methods) luaL_setfuncs(L, methods, 0);
    for (; adders && *adders; adders++) (*adders)(L);
    lua_setfield(L, -2, "__index");
    if (gc) {
      lua_pushcfunction(L, gc);
      lua_setfield(L, -2, "__gc");
    }
    if (close) {
      lua_pushcfunction(L, close);
      lua_setfield(L, -2, "__close");
    }
    if (tostring) {
      lua_pushcfunction(L, tostring);
      lua_setfield(L, -2, "__tostring");
    }
    lua_pushstring(L, name);
    lua_setfield(L, -2, "__name");
  }
  lua_pop(L, 1);
}
