/*
 * compat.h - the few Lua 5.2+ calls the core uses, for Lua 5.1 and LuaJIT.
 * With Lua 5.4 this header adds nothing.
 */
#ifndef MS_COMPAT_H
#define MS_COMPAT_H

#if LUA_VERSION_NUM < 502
#include "compat-5.3.h"
#endif

#if LUA_VERSION_NUM < 504
/* one user value is all the core asks for, and it never reads it */
#define lua_newuserdatauv(L, size, nuv) lua_newuserdata((L), (size))
#endif

#endif
