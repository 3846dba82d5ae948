/*
 * errors.c - an error on its way to Lua as (nil, message, code): setting it,
 * prefixing what was being done, pushing it. Needs neither libmongoc nor the
 * server, so the codecs and their fuzz harnesses link it alone.
 */
#include "ms.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void ms_err_set(ms_err_t *e, const char *code, const char *fmt, ...) {
  va_list ap;
  e->code = code;
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
}

void ms_err_prefix(ms_err_t *e, const char *prefix) {
  char tmp[sizeof e->msg];
  size_t pl = strlen(prefix), ml = strlen(e->msg);
  if (pl > sizeof tmp - 3) pl = sizeof tmp - 3;
  memcpy(tmp, prefix, pl);
  tmp[pl] = ':';
  tmp[pl + 1] = ' ';
  if (ml > sizeof tmp - pl - 3) ml = sizeof tmp - pl - 3;
  memcpy(tmp + pl + 2, e->msg, ml);
  tmp[pl + 2 + ml] = '\0';
  memcpy(e->msg, tmp, sizeof tmp);
}

int ms_push_error(lua_State *L, const ms_err_t *e) {
  lua_pushnil(L);
  lua_pushstring(L, e->msg);
  lua_pushstring(L, e->code ? e->code : "invalid");
  return 3;
}
