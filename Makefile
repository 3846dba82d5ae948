# mongostore - build, test, sanitizers, valgrind, LuaJIT, bench, demo.
# `make test` sets up a fresh machine itself (tools/deps.sh), starts the
# bundled test server unless MONGOSTORE_TEST_URI is given, and runs every spec.

LUA        ?= lua5.4
LUA_PC     ?= lua5.4
CC         ?= cc
PKGS        = libmongoc-1.0 libbson-1.0 libcrypto
CFLAGS_BASE = -std=c99 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -fPIC \
              -Wall -Wextra -Werror -Wno-unused-parameter -fvisibility=hidden
OPT        ?= -O2 -g
# The one version string is the rockspec's ("scm-1" -> core.version "scm"; "X.Y.Z-1" -> "X.Y.Z").
ROCKSPEC    = $(wildcard mongostore-*.rockspec)
VERSION     = $(shell sed -n 's/^version = "\(.*\)-[0-9]*"$$/\1/p' $(ROCKSPEC))
CFLAGS_BASE += -DMS_VERSION='"$(VERSION)"'
SRCS        = $(wildcard csrc/*.c)
HDRS        = $(wildcard csrc/*.h)

MONGO_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
MONGO_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null)
LUA_CFLAGS   = $(shell pkg-config --cflags $(LUA_PC) 2>/dev/null)

.DEFAULT_GOAL := all

# Lua itself is never linked into the module: the host process provides it.
# The module for $(LUA_PC) is built under build/$(LUA_PC)/, a folder only make
# writes, and copied to mongostore/core.so, where the specs, tools and
# bin/mongostore load it from the checkout. `luarocks make` (the builtin
# build) writes its own mongostore/core.so and csrc/*.o in the checkout, for
# whichever Lua it was given: so the copy is compared with the build on every
# make (not by its date, a rock build is newer) and put back when they differ.
LUA_SO = build/$(LUA_PC)/mongostore/core.so
$(LUA_SO): $(SRCS) $(HDRS) $(ROCKSPEC)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(OPT) $(LUA_CFLAGS) $(MONGO_CFLAGS) -shared -o $@ $(SRCS) $(MONGO_LIBS)

# Replaced by a rename, never rewritten in place: a process that has the old
# one loaded keeps its mapping.
mongostore/core.so: $(LUA_SO) FORCE
	@mkdir -p $(dir $@)
	@cmp -s $(LUA_SO) $@ || { cp $(LUA_SO) $@.tmp && mv -f $@.tmp $@ && echo "cp $(LUA_SO) $@"; }

.PHONY: FORCE
FORCE:

# The same sources for LuaJIT (OpenResty): LuaJIT's headers first, then
# lua-compat53's compat-5.3.h from /usr/include/lua5.1 for the 5.3 C API.
JIT_CFLAGS = $(shell pkg-config --cflags luajit 2>/dev/null || echo -I/usr/include/luajit-2.1) -idirafter /usr/include/lua5.1
build/jit/mongostore/core.so: $(SRCS) $(HDRS) $(ROCKSPEC)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(OPT) $(JIT_CFLAGS) $(MONGO_CFLAGS) -shared -o $@ $(SRCS) $(MONGO_LIBS)

# Both builds: nginx loads the LuaJIT one, while bin/mongostore (the admin
# CLI, run by lua5.4 beside an nginx deployment) and the specs' own Lua load
# mongostore/core.so.
jit: mongostore/core.so build/jit/mongostore/core.so

ASAN_FLAGS = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
build/asan/mongostore/core.so: $(SRCS) $(HDRS) $(ROCKSPEC)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -O1 -g $(ASAN_FLAGS) $(LUA_CFLAGS) $(MONGO_CFLAGS) -shared -o $@ $(SRCS) $(MONGO_LIBS)

# A Lua interpreter built with the same sanitizers, for the sanitized module
# to load into (tools/sanitized-lua.c); it links Lua itself, the module never does.
LUA_LIBS = $(shell pkg-config --libs $(LUA_PC) 2>/dev/null)
build/asan/lua: tools/sanitized-lua.c
	@mkdir -p $(dir $@)
	$(CC) -std=c99 -Wall -Wextra -Werror -O1 -g $(ASAN_FLAGS) $(LUA_CFLAGS) -o $@ $< $(LUA_LIBS) -lm -ldl

.PHONY: all jit bench deps test test-only unit lint docs docs-check asan-test valgrind-test clean demo
all: mongostore/core.so

deps:
	@tools/deps.sh

# The README's test command: the whole suite, then the whole suite again under
# AddressSanitizer + UBSan on mongo-java-server, then the store and engine specs
# and spec/05-secantus on SecantusDB (tools/run-suites, flavour secantus).
test: deps lint
	@$(MAKE) --no-print-directory mongostore/core.so build/jit/mongostore/core.so build/asan/mongostore/core.so build/asan/lua
	@tools/with-server tools/run-suites plain asan secantus

# luacheck (Debian lua-check) over every Lua file, with .luacheckrc.
LUA_DIRS = lua spec tools bench examples fuzz docs
lint:
	@luacheck -q --no-color $(wildcard $(LUA_DIRS)) bin/mongostore

# The reference pages (docs/*.md) and LuaLS definitions (types/) from
# docs/api.lua; spec/01-unit/docs_spec.lua fails when they are stale.
docs:
	@$(LUA) tools/docgen.lua
	@LUA=$(LUA) tools/render-order-chart

docs-check:
	@$(LUA) tools/docgen.lua --check

# The unit specs (spec/01-unit): no server, no installs, a few seconds.
unit: mongostore/core.so
	@MONGOSTORE_PYTHON= SPECS="$(sort $(wildcard spec/01-unit/*_spec.lua))" tools/run-suites plain

test-only: mongostore/core.so build/jit/mongostore/core.so
	@tools/with-server tools/run-suites plain secantus

asan-test: deps
	@$(MAKE) --no-print-directory build/jit/mongostore/core.so build/asan/mongostore/core.so build/asan/lua
	@tools/with-server tools/run-suites asan

valgrind-test: deps lint
	@$(MAKE) --no-print-directory mongostore/core.so build/jit/mongostore/core.so
	@tools/with-server tools/run-suites valgrind

# The benchmarks (bench/run.sh, written to bench/RESULTS.md): executions,
# batching, documents, models, records; BENCH_ARGS=--quick for a ~10-minute
# run, `bench/run.sh --quick --batching` (or --documents, --models,
# --records) for one section. Never part of `make test`.
bench:
	@tools/deps.sh bench
	@bench/run.sh $(BENCH_ARGS)

# libFuzzer over the JSON and BSON codecs (fuzz/README.md): FUZZ_SECONDS per
# harness (default 60); fails on any crash or round-trip mismatch. Not part of
# `make test`. Phony on its own line: the folder fuzz/ would otherwise count
# as the target, always up to date.
.PHONY: fuzz
fuzz:
	@tools/fuzz

demo: deps mongostore/core.so
	@tools/with-server $(LUA) examples/order.lua

# Every build output, a rock build's objects beside the sources among them.
clean:
	rm -rf mongostore build .run csrc/*.o
