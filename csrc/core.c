/*
 * core.c - luaopen_mongostore_core: the process-wide set-up (base.c) and the
 * one place the module table is assembled, each file adding its part. No
 * other file calls into this one.
 */
#include "ms.h"
#include "store.h"
#include "document.h"

/* The one version string lives in the rockspec; the Makefile and the
 * rockspec's build pass it here, so core.version cannot drift from it. */
#if !defined(MS_VERSION)
#error "MS_VERSION is not defined: build with -DMS_VERSION=\"x.y.z\" (the Makefile and the rockspec pass it)"
#endif

/* The Store's methods, each file's beside its code. */
static ms_add_methods_t const store_parts[] = {
  ms_open_commit, ms_open_commit_batch, ms_open_load, ms_open_list, ms_open_relay, ms_open_timers, ms_open_trace,
  ms_open_inbox, ms_open_promoted, ms_open_failed, NULL
};

/* The one symbol the module exports (the Makefile builds with
 * -fvisibility=hidden; every ms_ function stays inside it). */
__attribute__((visibility("default"))) int luaopen_mongostore_core(lua_State *L) {
  ms_process_init();
  lua_newtable(L);
  ms_open_base(L);
  /* the one place the module is assembled: each file adds its part */
  ms_open_value(L);
  ms_open_bson(L);
  ms_open_bsontypes(L);
  ms_open_decode(L);
  ms_open_json(L);
  ms_open_ejson(L);
  ms_open_isotime(L);
  ms_open_store(L, store_parts);
  ms_open_collection(L);
  ms_open_cursor(L);
  ms_open_session(L);
  ms_open_database(L);
  lua_pushliteral(L, MS_VERSION);
  lua_setfield(L, -2, "version");
  return 1;
}
