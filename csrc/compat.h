/*
 * compat.h - the few Lua 5.2+ calls the core uses, for Lua 5.1 and LuaJIT.
 * With Lua 5.4 this header adds nothing.
 */
#ifndef MS_COMPAT_H
#define MS_COMPAT_H

#if LUA_VERSION_NUM < 502
#include "compat-5.3.h"
#endif

#endif
