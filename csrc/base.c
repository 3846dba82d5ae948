/*
 * base.c - what every file may call and the module's own small functions:
 * the clock, random bytes, the text rule for ids and filter strings, a quiet
 * libmongoc log handler, and core's now, sleep, uuid, hmac_sha256,
 * same_bytes, sha256, random_bytes and text_error. It calls no other file of
 * the core.
 */
#include "ms.h"

#include <errno.h>
#include <stdio.h>
#include <sys/random.h>
#include <time.h>

#include <mongoc/mongoc.h>
#include <openssl/evp.h>
#include <openssl/crypto.h>
#include <openssl/hmac.h>

double ms_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

volatile int ms_log_quiet = 0;

/* libmongoc's default handler prints to stdout, also from background threads:
 * only warnings and worse are worth a line, and they go to stderr. */
static void log_handler(mongoc_log_level_t level, const char *domain,
                           const char *message, void *data) {
  (void)data;
  if (level <= MONGOC_LOG_LEVEL_WARNING && !ms_log_quiet)
    fprintf(stderr, "mongostore: %s: %s: %s\n", mongoc_log_level_str(level), domain, message);
}

static int l_now(lua_State *L) {
  lua_pushnumber(L, ms_now());
  return 1;
}

static int l_sleep(lua_State *L) {
  double s = luaL_checknumber(L, 1);
  struct timespec ts, rem;
  if (!(s > 0)) return 0;               /* also rejects NaN */
  if (s > 1e9) s = 1e9;
  ts.tv_sec = (time_t)s;
  ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
  while (nanosleep(&ts, &rem) != 0 && errno == EINTR) ts = rem;
  return 0;
}

/* getrandom(2): no file to open and no 4 KiB stdio read per call; a read
 * from the urandom source is never short once it is seeded, but a signal
 * can interrupt the wait for the seed. */
int ms_random(void *buf, size_t len) {
  size_t got = 0;
  while (got < len) {
    ssize_t n = getrandom((unsigned char *)buf + got, len - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    got += (size_t)n;
  }
  return 0;
}

/* 16 random bytes as 32 hex digits, the same shape as harel's uuid4().hex. */
static int l_uuid(lua_State *L) {
  static const char hex[] = "0123456789abcdef";
  unsigned char raw[16];
  char out[32];
  int i;
  if (ms_random(raw, sizeof raw)) return luaL_error(L, "uuid: getrandom failed (errno %d)", errno);
  raw[6] = (unsigned char)((raw[6] & 0x0f) | 0x40);   /* version 4 */
  raw[8] = (unsigned char)((raw[8] & 0x3f) | 0x80);   /* RFC 4122 variant */
  for (i = 0; i < 16; i++) {
    out[2 * i] = hex[raw[i] >> 4];
    out[2 * i + 1] = hex[raw[i] & 0x0f];
  }
  lua_pushlstring(L, out, sizeof out);
  return 1;
}

/* hmac_sha256(key, message) -> 32 raw bytes (the listing's cursors). */
static int l_hmac_sha256(lua_State *L) {
  size_t klen, mlen;
  const char *key = luaL_checklstring(L, 1, &klen), *msg = luaL_checklstring(L, 2, &mlen);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int outlen = 0;
  if (!HMAC(EVP_sha256(), key, (int)klen, (const unsigned char *)msg, mlen, out, &outlen))
    return luaL_error(L, "hmac_sha256: libcrypto failed");
  lua_pushlstring(L, (const char *)out, outlen);
  return 1;
}

/* same_bytes(a, b) -> whether two strings are equal, in a time that does
 * not depend on where they differ (digests, MACs; a length differs openly). */
static int l_same_bytes(lua_State *L) {
  size_t alen, blen;
  const char *a = luaL_checklstring(L, 1, &alen), *b = luaL_checklstring(L, 2, &blen);
  lua_pushboolean(L, alen == blen && CRYPTO_memcmp(a, b, alen) == 0);
  return 1;
}

/* sha256(bytes) -> 32 raw bytes (content ids of records). */
static int l_sha256(lua_State *L) {
  size_t len;
  const char *msg = luaL_checklstring(L, 1, &len);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int outlen = 0;
  if (!EVP_Digest(msg, len, out, &outlen, EVP_sha256(), NULL)) return luaL_error(L, "sha256: libcrypto failed");
  lua_pushlstring(L, (const char *)out, outlen);
  return 1;
}

/* random_bytes(n) -> n bytes from getrandom (1 <= n <= 256): secrets and tokens. */
static int l_random_bytes(lua_State *L) {
  unsigned char buf[256];
  lua_Integer n = luaL_checkinteger(L, 1);
  luaL_argcheck(L, n >= 1 && n <= 256, 1, "n must be 1 to 256");
  if (ms_random(buf, (size_t)n)) return luaL_error(L, "random_bytes: getrandom failed");
  lua_pushlstring(L, (const char *)buf, (size_t)n);
  return 1;
}

/* text_error(s) -> nil when s may be an id or a filter string (non-empty
 * UTF-8 without NUL), else what is wrong with it: the one test every entry
 * point applies to the strings it is given. */
const char *ms_text_error(const char *s, size_t len) {
  if (len == 0) return "is empty";
  if (len > MS_MAX_TEXT) return "is longer than " MS_STR(MS_MAX_TEXT) " bytes";
  if (!bson_utf8_validate(s, len, false)) return "is not valid UTF-8 or contains NUL";
  return NULL;
}

static int l_text_error(lua_State *L) {
  size_t len;
  const char *s;
  if (lua_type(L, 1) != LUA_TSTRING) {
    lua_pushfstring(L, "must be a string, got %s", luaL_typename(L, 1));
    return 1;
  }
  s = lua_tolstring(L, 1, &len);
  lua_pushstring(L, ms_text_error(s, len));   /* NULL pushes nil */
  return 1;
}

static const luaL_Reg core_funcs[] = {
  {"hmac_sha256", l_hmac_sha256},
  {"same_bytes", l_same_bytes},
  {"sha256", l_sha256},
  {"random_bytes", l_random_bytes},
  {"text_error", l_text_error},
  {"now", l_now},
  {"sleep", l_sleep},
  {"uuid", l_uuid},
  {NULL, NULL}
};

void ms_process_init(void) {
  static int initialised = 0;
  if (!initialised) {
    mongoc_log_set_handler(log_handler, NULL);
    mongoc_init();
    initialised = 1;
  }
}

void ms_open_base(lua_State *L) { luaL_setfuncs(L, core_funcs, 0); }
