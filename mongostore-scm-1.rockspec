-- luarocks: builtin build of the C core and the Lua modules. On Debian the
-- driver headers live in versioned folders, so pass them in:
--   luarocks make MONGOC_INCDIR=/usr/include/libmongoc-1.0 BSON_INCDIR=/usr/include/libbson-1.0
-- and for LuaJIT (OpenResty) add --lua-version 5.1 LUA_INCDIR=/usr/include/luajit-2.1
-- The builtin build leaves csrc/*.o and a mongostore/core.so for that Lua in
-- the checkout; the Makefile's own build lives under build/ and puts its copy
-- back (make), and make clean removes both.
rockspec_format = "3.0"
package = "mongostore"
-- The one version string: core.version is this less its rockspec revision
-- ("scm", the development head; a release says "X.Y.Z"), passed by the
-- defines below; the Makefile reads it from here too.
version = "scm-1"
source = {
   url = "git+file:///dev/null",
}
description = {
   summary = "Durable statechart executions in MongoDB, from Lua and OpenResty",
   detailed = [[
mongostore keeps statechart executions in MongoDB: every event is one load and
one atomic single-document commit (CAS) that advances the execution, queues
its emitted events, records forked children, arms or cancels durable timers
and marks the event handled. A C core on mongo-c-driver, a Lua API on top.
]],
   license = "MIT",
}
dependencies = {
   "lua >= 5.1",
}
external_dependencies = {
   MONGOC = { library = "mongoc-1.0" },
   BSON = { library = "bson-1.0" },
   CRYPTO = { library = "crypto" },
}
build = {
   type = "builtin",
   modules = {
      ["mongostore.core"] = {
         sources = {
            "csrc/base.c", "csrc/bson.c", "csrc/bsontypes.c", "csrc/bulk.c", "csrc/class.c", "csrc/collection.c",
            "csrc/commit.c", "csrc/commit_batch.c", "csrc/commit_read.c", "csrc/connect.c", "csrc/core.c", "csrc/cursor.c",
            "csrc/database.c", "csrc/decode.c", "csrc/dedupe.c", "csrc/ejson.c", "csrc/encode.c", "csrc/errors.c",
            "csrc/errors_mongoc.c", "csrc/failed.c", "csrc/handles.c", "csrc/inbox.c", "csrc/indexes.c", "csrc/isotime.c",
            "csrc/json.c", "csrc/list.c", "csrc/load.c", "csrc/pool.c", "csrc/promoted.c", "csrc/read.c", "csrc/relay.c",
            "csrc/session.c", "csrc/store.c", "csrc/timers.c", "csrc/trace.c", "csrc/value.c",
          },
         defines = {
            "_POSIX_C_SOURCE=200809L", "_DEFAULT_SOURCE",
            'MS_VERSION="' .. version:match("^(.-)%-%d+$") .. '"',
         },
         -- crypto: SHA-256 for the dedupe digests (OpenSSL, which libmongoc links too)
         libraries = { "mongoc-1.0", "bson-1.0", "crypto" },
         -- last: lua-compat53-dev's compat-5.3.h, which the Lua 5.1 / LuaJIT
         -- build needs after LuaJIT's own headers (LUA_INCDIR comes first)
         incdirs = { "$(MONGOC_INCDIR)", "$(BSON_INCDIR)", "/usr/include/lua5.1" },
         libdirs = { "$(MONGOC_LIBDIR)", "$(BSON_LIBDIR)", "$(CRYPTO_LIBDIR)" },
      },
      ["mongostore"] = "lua/mongostore/init.lua",
      ["mongostore.execution"] = "lua/mongostore/execution.lua",
      ["mongostore.store"] = "lua/mongostore/store.lua",
      ["mongostore.cursor"] = "lua/mongostore/cursor.lua",
      ["mongostore.database"] = "lua/mongostore/database.lua",
      ["mongostore.transaction"] = "lua/mongostore/transaction.lua",
      ["mongostore.chart"] = "lua/mongostore/chart.lua",
      ["mongostore.runtime"] = "lua/mongostore/runtime.lua",
      ["mongostore.runtime.children"] = "lua/mongostore/runtime/children.lua",
      ["mongostore.inbox"] = "lua/mongostore/inbox.lua",
      ["mongostore.engine"] = "lua/mongostore/engine.lua",
      ["mongostore.engine.relays"] = "lua/mongostore/engine/relays.lua",
      ["mongostore.engine.external"] = "lua/mongostore/engine/external.lua",
      ["mongostore.engine.deliver"] = "lua/mongostore/engine/deliver.lua",
      ["mongostore.ngx"] = "lua/mongostore/ngx.lua",
      ["mongostore.ngx_thread"] = "lua/mongostore/ngx_thread.lua",
      ["mongostore.ngx_http"] = "lua/mongostore/ngx_http.lua",
      ["mongostore.ngx_access"] = "lua/mongostore/ngx_access.lua",
      ["mongostore.webhook"] = "lua/mongostore/webhook.lua",
      ["mongostore.values"] = "lua/mongostore/values.lua",
      ["mongostore.ejson"] = "lua/mongostore/ejson.lua",
      ["mongostore.lru"] = "lua/mongostore/lru.lua",
      ["mongostore.contract"] = "lua/mongostore/contract.lua",
      ["mongostore.util"] = "lua/mongostore/util.lua",
      ["mongostore.model"] = "lua/mongostore/model.lua",
      ["mongostore.model.bulk"] = "lua/mongostore/model/bulk.lua",
      ["mongostore.model.class"] = "lua/mongostore/model/class.lua",
      ["mongostore.model.instance"] = "lua/mongostore/model/instance.lua",
      ["mongostore.model.query"] = "lua/mongostore/model/query.lua",
      ["mongostore.model.registry"] = "lua/mongostore/model/registry.lua",
      ["mongostore.model.shared"] = "lua/mongostore/model/shared.lua",
      ["mongostore.schema"] = "lua/mongostore/schema.lua",
      ["mongostore.query"] = "lua/mongostore/query.lua",
      ["mongostore.query.cast"] = "lua/mongostore/query/cast.lua",
      ["mongostore.track"] = "lua/mongostore/track.lua",
      ["mongostore.diagram"] = "lua/mongostore/diagram.lua",
      ["mongostore.cli"] = "lua/mongostore/cli.lua",
      ["mongostore.cli.args"] = "lua/mongostore/cli/args.lua",
      ["mongostore.cli.common"] = "lua/mongostore/cli/common.lua",
      ["mongostore.cli.executions"] = "lua/mongostore/cli/executions.lua",
      ["mongostore.cli.maintenance"] = "lua/mongostore/cli/maintenance.lua",
      ["mongostore.cli.render"] = "lua/mongostore/cli/render.lua",
      ["mongostore.cli.term"] = "lua/mongostore/cli/term.lua",
      ["mongostore.stm"] = "lua/mongostore/stm.lua",
      ["mongostore.stm.lex"] = "lua/mongostore/stm/lex.lua",
      ["mongostore.stm.parse"] = "lua/mongostore/stm/parse.lua",
      ["mongostore.stm.parse_transitions"] = "lua/mongostore/stm/parse_transitions.lua",
      ["mongostore.stm.expand"] = "lua/mongostore/stm/expand.lua",
      ["mongostore.records"] = "lua/mongostore/records.lua",
      ["mongostore.records.canon"] = "lua/mongostore/records/canon.lua",
      ["mongostore.records.fingerprint"] = "lua/mongostore/records/fingerprint.lua",
      ["mongostore.records.fsck"] = "lua/mongostore/records/fsck.lua",
      ["mongostore.records.lease"] = "lua/mongostore/records/lease.lua",
      ["mongostore.records.optimade"] = "lua/mongostore/records/optimade.lua",
      ["mongostore.records.query"] = "lua/mongostore/records/query.lua",
      ["mongostore.records.save"] = "lua/mongostore/records/save.lua",
      ["mongostore.records.search"] = "lua/mongostore/records/search.lua",
      ["mongostore.records.search_plan"] = "lua/mongostore/records/search_plan.lua",
      ["mongostore.records.wire"] = "lua/mongostore/records/wire.lua",
   },
   install = { bin = { mongostore = "bin/mongostore" } },
}
test = {
   type = "command",
   command = "make test",
}
