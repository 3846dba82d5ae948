/*
 * json.c - Lua values <-> JSON text (RFC 8259) under the same value rules as
 * the BSON codec. This is how Executions and Events cross over to and from
 * the Python side (their date-times are isotime.c's).
 */
#include "ms.h"

#include <errno.h>
#include <inttypes.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================
 * Lua -> JSON
 * ====================================================================== */

/* Output goes through a small stack buffer: bson_string_t only appends
 * NUL-terminated text, and the encoder never writes a raw NUL byte. */
typedef struct jw {
  bson_string_t *out;
  size_t n;
  int too_large;
  char buf[1024];
} jw_t;

static void jw_flush(jw_t *w) {
  if (w->n == 0) return;
  if ((size_t)w->out->len + w->n > MS_JSON_MAX_TEXT) {
    w->too_large = 1;
  } else {
    w->buf[w->n] = '\0';
    bson_string_append(w->out, w->buf);
  }
  w->n = 0;
}

static void jw_put(jw_t *w, const char *s, size_t n) {
  while (n > 0 && !w->too_large) {
    size_t room = sizeof w->buf - 1 - w->n, k = n < room ? n : room;
    memcpy(w->buf + w->n, s, k);
    w->n += k;
    s += k;
    n -= k;
    if (w->n == sizeof w->buf - 1) jw_flush(w);
  }
}

static void jw_putc(jw_t *w, char c) {
  if (w->n == sizeof w->buf - 1) jw_flush(w);
  w->buf[w->n++] = c;
}

static const char hexdigits[] = "0123456789abcdef";

static void put_string(jw_t *w, const char *s, size_t len) {
  size_t i, run = 0;
  jw_putc(w, '"');
  for (i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    char esc[6];
    size_t en = 2;
    if (c >= 0x20 && c != '"' && c != '\\' && c != 0x7f) continue;
    jw_put(w, s + run, i - run);
    run = i + 1;
    esc[0] = '\\';
    switch (c) {
    case '"': esc[1] = '"'; break;
    case '\\': esc[1] = '\\'; break;
    case '\b': esc[1] = 'b'; break;
    case '\f': esc[1] = 'f'; break;
    case '\n': esc[1] = 'n'; break;
    case '\r': esc[1] = 'r'; break;
    case '\t': esc[1] = 't'; break;
    default:
      esc[1] = 'u';
      esc[2] = '0';
      esc[3] = '0';
      esc[4] = hexdigits[c >> 4];
      esc[5] = hexdigits[c & 0x0f];
      en = 6;
      break;
    }
    jw_put(w, esc, en);
  }
  jw_put(w, s + run, len - run);
  jw_putc(w, '"');
}

/* The text Python's repr() gives: the fewest significant digits that read
 * back to the same double, positional notation for decimal exponents -4..15,
 * otherwise d.ddde+XX; always recognisable as a float. The digits are taken
 * from printf's %e and laid out here, so a locale's decimal comma never
 * reaches the output. */
static void put_double(jw_t *w, double v) {
  char tmp[40], digits[24], out[48];
  int prec, exp10 = 0, nd = 0, decpt, o = 0, i;
  const char *q;
  /* For a normal double, 15 digits always read back exactly, so when they
   * round-trip, dropping their trailing zeros gives the shortest form; a
   * subnormal has fewer significant bits and needs the search from 1. */
  for (prec = fpclassify(v) == FP_SUBNORMAL ? 1 : 15; prec <= 17; prec++) {
    snprintf(tmp, sizeof tmp, "%.*e", prec - 1, v);
    if (prec == 17 || strtod(tmp, NULL) == v) break;
  }
  for (q = tmp; *q && *q != 'e'; q++)
    if (*q >= '0' && *q <= '9' && nd < (int)sizeof digits - 1) digits[nd++] = *q;
  if (*q == 'e') exp10 = atoi(q + 1);
  while (nd > 1 && digits[nd - 1] == '0') nd--;
  digits[nd] = '\0';
  decpt = exp10 + 1;                          /* value = 0.DIGITS x 10^decpt */
  if (signbit(v)) out[o++] = '-';
  if (exp10 < -4 || exp10 >= 16) {
    out[o++] = digits[0];
    if (nd > 1) {
      out[o++] = '.';
      memcpy(out + o, digits + 1, (size_t)nd - 1);
      o += nd - 1;
    }
    o += snprintf(out + o, sizeof out - (size_t)o, "e%c%02d", exp10 < 0 ? '-' : '+',
                  exp10 < 0 ? -exp10 : exp10);
  } else if (decpt <= 0) {
    out[o++] = '0';
    out[o++] = '.';
    for (i = 0; i < -decpt; i++) out[o++] = '0';
    memcpy(out + o, digits, (size_t)nd);
    o += nd;
  } else if (decpt < nd) {
    memcpy(out + o, digits, (size_t)decpt);
    o += decpt;
    out[o++] = '.';
    memcpy(out + o, digits + decpt, (size_t)(nd - decpt));
    o += nd - decpt;
  } else {
    memcpy(out + o, digits, (size_t)nd);
    o += nd;
    for (i = nd; i < decpt; i++) out[o++] = '0';
    out[o++] = '.';
    out[o++] = '0';
  }
  jw_put(w, out, (size_t)o);
}

static void put_int64(jw_t *w, int64_t v) {
  char tmp[32];
  int n = snprintf(tmp, sizeof tmp, "%" PRId64, v);
  jw_put(w, tmp, (size_t)n);
}

static int encode_value(lua_State *L, int idx, jw_t *w, ms_path_t *p, ms_err_t *e);

static int encode_table(lua_State *L, int idx, jw_t *w, ms_path_t *p, ms_err_t *e) {
  size_t n = 0;
  int kind, rc = 0;
  if ((kind = ms_table_enter(L, idx, p, &n, e)) < 0) return -1;
  if (kind == MS_KIND_ARRAY) {
    size_t i;
    jw_putc(w, '[');
    for (i = 1; i <= n && rc == 0; i++) {
      size_t oldlen = p->len;
      if (i > 1) jw_putc(w, ',');
      lua_rawgeti(L, idx, (lua_Integer)i);
      ms_path_push_index(p, i);
      rc = encode_value(L, lua_gettop(L), w, p, e);
      ms_path_pop_key(p, oldlen);
      lua_pop(L, 1);
    }
    jw_putc(w, ']');
  } else {
    int first = 1;
    jw_putc(w, '{');
    lua_pushnil(L);
    while (rc == 0 && lua_next(L, idx)) {
      size_t kl, oldlen = p->len;
      const char *k = lua_tolstring(L, -2, &kl);   /* a string: ms_table_kind checked */
      ms_path_push_key(p, k, kl);
      rc = ms_check_string(k, kl, 1, p, e);
      if (rc == 0) {
        if (!first) jw_putc(w, ',');
        first = 0;
        put_string(w, k, kl);
        jw_putc(w, ':');
        rc = encode_value(L, lua_gettop(L), w, p, e);
      }
      ms_path_pop_key(p, oldlen);
      lua_pop(L, 1);
    }
    if (rc != 0) lua_pop(L, 1);                      /* the key lua_next left */
    jw_putc(w, '}');
  }
  ms_path_leave(p);
  return rc;
}

static int encode_value(lua_State *L, int idx, jw_t *w, ms_path_t *p, ms_err_t *e) {
  if (w->too_large) {
    ms_err_set(e, "too_large", "%s: JSON text larger than %zu bytes", p->buf, (size_t)MS_JSON_MAX_TEXT);
    return -1;
  }
  switch (lua_type(L, idx)) {
  case LUA_TBOOLEAN:
    if (lua_toboolean(L, idx)) jw_put(w, "true", 4);
    else jw_put(w, "false", 5);
    return 0;
  case LUA_TNUMBER: {
    int64_t iv;
    if (ms_to_int64(L, idx, &iv)) {
      put_int64(w, iv);
    } else {
      lua_Number v = lua_tonumber(L, idx);
      if (ms_check_number(v, p, e)) return -1;
      put_double(w, (double)v);
    }
    return 0;
  }
  case LUA_TSTRING: {
    size_t len;
    const char *s = lua_tolstring(L, idx, &len);
    if (ms_check_string(s, len, 0, p, e)) return -1;
    put_string(w, s, len);
    return 0;
  }
  case LUA_TTABLE:
    return encode_table(L, idx, w, p, e);
  case LUA_TLIGHTUSERDATA:
    if (ms_is_null(L, idx)) {
      jw_put(w, "null", 4);
      return 0;
    }
    break;
  case LUA_TUSERDATA: {
    int64_t iv;
    if (ms_to_int64(L, idx, &iv)) {
      put_int64(w, iv);
      return 0;
    }
    break;
  }
  default:
    break;
  }
  ms_err_set(e, "invalid", "%s: a %s cannot be stored", p->buf, luaL_typename(L, idx));
  return -1;
}

int ms_json_encode(lua_State *L, int idx, bson_string_t *out, ms_path_t *p, ms_err_t *e) {
  jw_t w;
  int rc;
  w.out = out;
  w.n = 0;
  w.too_large = 0;
  rc = encode_value(L, lua_absindex(L, idx), &w, p, e);
  jw_flush(&w);
  if (rc == 0 && w.too_large) {
    ms_err_set(e, "too_large", "%s: JSON text larger than %zu bytes", p->buf, (size_t)MS_JSON_MAX_TEXT);
    rc = -1;
  }
  return rc;
}

/* ======================================================================
 * JSON -> Lua
 * ====================================================================== */

typedef struct jp {
  lua_State *L;
  const unsigned char *s;
  size_t len, pos;
  int depth;
  int exact; /* refuse what would not come back as written (json_decode's opts.exact) */
  int dups;  /* a repeated key in one object: the last wins (opts.allow_duplicates) instead of an error */
  ms_err_t *e;
} jp_t;

/* Positions in messages count bytes from 1, as Lua's string functions do. */
static int jp_error(jp_t *p, size_t at, const char *what) {
  ms_err_set(p->e, "invalid", "json: %s at byte %zu", what, at + 1);
  return -1;
}

static int jp_unexpected(jp_t *p) {
  char what[48];
  unsigned char c;
  if (p->pos >= p->len) return jp_error(p, p->len, "unexpected end of input");
  c = p->s[p->pos];
  if (c > 0x20 && c < 0x7f) snprintf(what, sizeof what, "unexpected character '%c'", c);
  else snprintf(what, sizeof what, "unexpected byte 0x%02x", c);
  return jp_error(p, p->pos, what);
}

static int jp_expected(jp_t *p, const char *what) {
  char msg[48];
  if (p->pos >= p->len) return jp_error(p, p->len, "unexpected end of input");
  snprintf(msg, sizeof msg, "expected %s", what);
  return jp_error(p, p->pos, msg);
}

static void skip_ws(jp_t *p) {
  while (p->pos < p->len) {
    unsigned char c = p->s[p->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    p->pos++;
  }
}

/* Length of the well-formed UTF-8 sequence at s (RFC 3629: no overlong
 * forms, no surrogates, nothing past U+10FFFF), or 0. */
static size_t utf8_len(const unsigned char *s, size_t avail) {
  unsigned char c = s[0], lo = 0x80, hi = 0xBF;
  size_t n, i;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    else if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    else if (c == 0xF4) hi = 0x8F;
  } else return 0;
  if (avail < n) return 0;
  if (s[1] < lo || s[1] > hi) return 0;
  for (i = 2; i < n; i++)
    if (s[i] < 0x80 || s[i] > 0xBF) return 0;
  return n;
}

static int hex4(const unsigned char *s, size_t avail, unsigned *out) {
  unsigned v = 0;
  size_t i;
  if (avail < 4) return -1;
  for (i = 0; i < 4; i++) {
    unsigned char c = s[i];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
    else return -1;
  }
  *out = v;
  return 0;
}

static void add_utf8(luaL_Buffer *b, unsigned cp) {
  char u[4];
  size_t n;
  if (cp < 0x80) { u[0] = (char)cp; n = 1; }
  else if (cp < 0x800) {
    u[0] = (char)(0xC0 | (cp >> 6));
    u[1] = (char)(0x80 | (cp & 0x3F));
    n = 2;
  } else if (cp < 0x10000) {
    u[0] = (char)(0xE0 | (cp >> 12));
    u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    u[2] = (char)(0x80 | (cp & 0x3F));
    n = 3;
  } else {
    u[0] = (char)(0xF0 | (cp >> 18));
    u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    u[3] = (char)(0x80 | (cp & 0x3F));
    n = 4;
  }
  luaL_addlstring(b, u, n);
}

/* The escape whose backslash is at p->pos; leaves p->pos after it. */
static int parse_escape(jp_t *p, luaL_Buffer *b) {
  size_t at = p->pos;
  unsigned cp, lo;
  char c;
  if (at + 1 >= p->len) return jp_error(p, p->len, "unexpected end of input");
  switch (p->s[at + 1]) {
  case '"': c = '"'; break;
  case '\\': c = '\\'; break;
  case '/': c = '/'; break;
  case 'b': c = '\b'; break;
  case 'f': c = '\f'; break;
  case 'n': c = '\n'; break;
  case 'r': c = '\r'; break;
  case 't': c = '\t'; break;
  case 'u':
    if (hex4(p->s + at + 2, p->len - at - 2, &cp)) {
      if (p->len - at - 2 < 4) return jp_error(p, p->len, "unexpected end of input");
      return jp_error(p, at, "invalid \\u escape");
    }
    p->pos = at + 6;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      /* A high surrogate counts only with the low one right after it; alone
       * (as JavaScript strings allow) it reads as U+FFFD. */
      if (p->len - p->pos >= 6 && p->s[p->pos] == '\\' && p->s[p->pos + 1] == 'u' &&
          hex4(p->s + p->pos + 2, 4, &lo) == 0 && lo >= 0xDC00 && lo <= 0xDFFF) {
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        p->pos += 6;
      } else {
        cp = 0xFFFD;
      }
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
      cp = 0xFFFD;
    }
    add_utf8(b, cp);
    return 0;
  default:
    return jp_error(p, at, "invalid escape");
  }
  luaL_addchar(b, c);
  p->pos = at + 2;
  return 0;
}

/* The string whose opening quote is at p->pos; pushes it. */
static int parse_string(jp_t *p) {
  lua_State *L = p->L;
  const unsigned char *s = p->s;
  size_t start = ++p->pos, run;
  luaL_Buffer b;
  int buffered = 0;
  luaL_checkstack(L, 2, "mongostore: json too deep");
  run = start;
  for (;;) {
    unsigned char c;
    if (p->pos >= p->len) return jp_error(p, p->len, "unexpected end of input");
    c = s[p->pos];
    if (c == '"') {
      if (buffered) {
        luaL_addlstring(&b, (const char *)s + run, p->pos - run);
        luaL_pushresult(&b);
      } else {
        lua_pushlstring(L, (const char *)s + start, p->pos - start);
      }
      p->pos++;
      return 0;
    } else if (c == '\\') {
      if (!buffered) {
        luaL_buffinit(L, &b);
        buffered = 1;
      }
      luaL_addlstring(&b, (const char *)s + run, p->pos - run);
      if (parse_escape(p, &b)) return -1;
      run = p->pos;
    } else if (c < 0x20) {
      return jp_error(p, p->pos, "control character in string");
    } else if (c < 0x80) {
      p->pos++;
    } else {
      size_t n = utf8_len(s + p->pos, p->len - p->pos);
      if (n == 0) return jp_error(p, p->pos, "invalid UTF-8 in string");
      p->pos += n;
    }
  }
}

static int is_digit(jp_t *p, size_t at) {
  return at < p->len && p->s[at] >= '0' && p->s[at] <= '9';
}

static int parse_number(jp_t *p) {
  lua_State *L = p->L;
  size_t start = p->pos, i, dstart;
  int neg = 0, is_int = 1;
  if (p->s[p->pos] == '-') { neg = 1; p->pos++; }
  dstart = p->pos;
  if (!is_digit(p, p->pos)) return jp_expected(p, "a digit");
  if (p->s[p->pos] == '0') {
    p->pos++;
    if (is_digit(p, p->pos)) return jp_error(p, start, "leading zero in number");
  } else {
    while (is_digit(p, p->pos)) p->pos++;
  }
  if (p->pos < p->len && p->s[p->pos] == '.') {
    p->pos++;
    is_int = 0;
    if (!is_digit(p, p->pos)) return jp_expected(p, "a digit");
    while (is_digit(p, p->pos)) p->pos++;
  }
  if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
    p->pos++;
    is_int = 0;
    if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) p->pos++;
    if (!is_digit(p, p->pos)) return jp_expected(p, "a digit");
    while (is_digit(p, p->pos)) p->pos++;
  }
  if (is_int) {
    uint64_t u = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    int fits = 1;
    for (i = dstart; i < p->pos; i++) {
      unsigned d = (unsigned)(p->s[i] - '0');
      if (u > (limit - d) / 10) { fits = 0; break; }
      u = u * 10 + d;
    }
    if (fits) {
      int64_t v;
      if (!neg) v = (int64_t)u;
      else if (u == (uint64_t)INT64_MAX + 1) v = INT64_MIN;
      else v = -(int64_t)u;
      ms_push_int64(L, v);
      return 0;
    }
    /* read as a double it would silently become a neighbour of itself */
    if (p->exact) return jp_error(p, start, "integer outside the 64-bit range");
  }
  {
    /* strtod reads the locale's decimal point: hand it that instead of '.' */
    const char *dp = localeconv()->decimal_point;
    size_t dpl = (dp && *dp) ? strlen(dp) : 1, n = p->pos - start, need = n + dpl + 1, o = 0;
    char small[80], *buf = need <= sizeof small ? small : malloc(need);
    double d;
    if (!buf) {
      ms_err_set(p->e, "invalid", "json: out of memory reading a number at byte %zu", start + 1);
      return -1;
    }
    for (i = start; i < p->pos; i++) {
      if (p->s[i] == '.' && dp && *dp) {
        memcpy(buf + o, dp, dpl);
        o += dpl;
      } else {
        buf[o++] = (char)p->s[i];
      }
    }
    buf[o] = '\0';
    d = strtod(buf, NULL);
    if (buf != small) free(buf);
    if (isinf(d) || isnan(d)) return jp_error(p, start, "number out of range");
    if (p->exact && d == 0.0) {
      /* a nonzero literal that underflowed to zero */
      for (i = dstart; i < p->pos && p->s[i] != 'e' && p->s[i] != 'E'; i++)
        if (p->s[i] >= '1' && p->s[i] <= '9') return jp_error(p, start, "number too small (it would read as 0)");
    }
    lua_pushnumber(L, (lua_Number)d);
    return 0;
  }
}

static int parse_literal(jp_t *p, const char *lit) {
  size_t i, n = strlen(lit);
  for (i = 0; i < n; i++) {
    if (p->pos + i >= p->len) return jp_error(p, p->len, "unexpected end of input");
    if (p->s[p->pos + i] != (unsigned char)lit[i]) {
      p->pos += i;
      return jp_unexpected(p);
    }
  }
  p->pos += n;
  return 0;
}

static int parse_value(jp_t *p);

static int enter(jp_t *p) {
  if (p->depth >= MS_MAX_DEPTH) {
    char what[48];
    snprintf(what, sizeof what, "nested deeper than %d levels", MS_MAX_DEPTH);
    return jp_error(p, p->pos, what);
  }
  p->depth++;
  luaL_checkstack(p->L, 4, "mongostore: json too deep");
  return 0;
}

static int parse_array(jp_t *p) {
  lua_Integer i = 1;
  if (enter(p)) return -1;
  lua_newtable(p->L);
  ms_mark_array(p->L, -1);
  p->pos++;
  skip_ws(p);
  if (p->pos < p->len && p->s[p->pos] == ']') {
    p->pos++;
    p->depth--;
    return 0;
  }
  for (;;) {
    if (parse_value(p)) return -1;
    lua_rawseti(p->L, -2, i++);
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == ',') {
      p->pos++;
      skip_ws(p);
    } else if (p->pos < p->len && p->s[p->pos] == ']') {
      p->pos++;
      break;
    } else {
      return jp_expected(p, "',' or ']'");
    }
  }
  p->depth--;
  return 0;
}

static int parse_object(jp_t *p) {
  if (enter(p)) return -1;
  lua_newtable(p->L);
  p->pos++;
  skip_ws(p);
  if (p->pos < p->len && p->s[p->pos] == '}') {
    p->pos++;
    p->depth--;
    return 0;
  }
  for (;;) {
    if (p->pos >= p->len || p->s[p->pos] != '"') return jp_expected(p, "a string key");
    {
      size_t at = p->pos, klen;
      const char *k;
      if (parse_string(p)) return -1;
      /* a key with \u0000 in it could be neither encoded again nor stored */
      k = lua_tolstring(p->L, -1, &klen);
      if (memchr(k, '\0', klen)) return jp_error(p, at, "key contains a NUL byte");
      if (!p->dups) {
        /* the last would win and the first vanish without a word: which
         * one did the sender mean, and which one did a check upstream see? */
        lua_pushvalue(p->L, -1);
        lua_rawget(p->L, -3);
        if (!lua_isnil(p->L, -1)) return jp_error(p, at, "repeated key in object");
        lua_pop(p->L, 1);
      }
    }
    skip_ws(p);
    if (p->pos >= p->len || p->s[p->pos] != ':') return jp_expected(p, "':'");
    p->pos++;
    skip_ws(p);
    if (parse_value(p)) return -1;
    lua_rawset(p->L, -3);                      /* a repeated key: the last wins */
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == ',') {
      p->pos++;
      skip_ws(p);
    } else if (p->pos < p->len && p->s[p->pos] == '}') {
      p->pos++;
      break;
    } else {
      return jp_expected(p, "',' or '}'");
    }
  }
  p->depth--;
  return 0;
}

/* The value starting at p->pos (whitespace already skipped); pushes it. */
static int parse_value(jp_t *p) {
  if (p->pos >= p->len) return jp_error(p, p->len, "unexpected end of input");
  switch (p->s[p->pos]) {
  case '{': return parse_object(p);
  case '[': return parse_array(p);
  case '"': return parse_string(p);
  case 't':
    if (parse_literal(p, "true")) return -1;
    lua_pushboolean(p->L, 1);
    return 0;
  case 'f':
    if (parse_literal(p, "false")) return -1;
    lua_pushboolean(p->L, 0);
    return 0;
  case 'n':
    if (parse_literal(p, "null")) return -1;
    ms_push_null(p->L);
    return 0;
  case '-': case '0': case '1': case '2': case '3': case '4':
  case '5': case '6': case '7': case '8': case '9':
    return parse_number(p);
  default:
    return jp_unexpected(p);
  }
}

static int json_decode(lua_State *L, const char *s, size_t len, int exact, int dups, ms_err_t *e) {
  jp_t p;
  int top = lua_gettop(L);
  p.L = L;
  p.s = (const unsigned char *)s;
  p.len = len;
  p.pos = 0;
  p.depth = 0;
  p.exact = exact;
  p.dups = dups;
  p.e = e;
  luaL_checkstack(L, 4, "mongostore: json");
  skip_ws(&p);
  if (p.pos >= len) {
    ms_err_set(e, "invalid", "json: empty input");
    return -1;
  }
  if (parse_value(&p) == 0) {
    skip_ws(&p);
    if (p.pos >= len) return 0;
    jp_error(&p, p.pos, "unexpected text after the value");
  }
  lua_settop(L, top);
  return -1;
}

int ms_json_decode(lua_State *L, const char *s, size_t len, ms_err_t *e) {
  return json_decode(L, s, len, 0, 0, e);
}

/* ======================================================================
 * module functions
 * ====================================================================== */

static int l_json_encode(lua_State *L) {
  bson_string_t *out;
  ms_path_t p;
  ms_err_t e;
  const char *what = luaL_optstring(L, 2, "value");
  luaL_checkany(L, 1);
  /* Reserve the whole depth's worth of stack now: a raise from deep inside
   * would leak out. */
  luaL_checkstack(L, 4 * MS_MAX_DEPTH + 8, "mongostore: json_encode");
  ms_path_init(&p, what);
  out = bson_string_new(NULL);
  if (ms_json_encode(L, 1, out, &p, &e)) {
    bson_string_free(out, true);
    return ms_push_error(L, &e);
  }
  lua_pushlstring(L, out->str, out->len);
  bson_string_free(out, true);
  return 1;
}

/* json_decode(text[, { exact = true, allow_duplicates = true }]): a key
 * repeated in one object is refused with nil, msg unless allow_duplicates
 * (then the last wins). exact refuses too what the default reading would
 * change without a word: an integer literal outside int64 (it would become
 * the nearest double) and a nonzero number that underflows to 0. A number
 * written with a fraction or an exponent is a double either way. */
static int opt_boolean(lua_State *L, const char *name) {
  int v;
  lua_getfield(L, 2, name);
  if (!lua_isnil(L, -1) && !lua_isboolean(L, -1))
    return luaL_error(L, "json_decode: opts.%s must be a boolean, got %s", name, luaL_typename(L, -1));
  v = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return v;
}

static int l_json_decode(lua_State *L) {
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  int exact = 0, dups = 0;
  ms_err_t e;
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    exact = opt_boolean(L, "exact");
    dups = opt_boolean(L, "allow_duplicates");
    if (exact && dups) return luaL_error(L, "json_decode: opts.exact refuses repeated keys: drop opts.allow_duplicates");
    lua_settop(L, 1);
  }
  if (json_decode(L, s, len, exact, dups, &e)) return ms_push_error(L, &e);
  return 1;
}

static const luaL_Reg json_funcs[] = {
  {"json_encode", l_json_encode},
  {"json_decode", l_json_decode},
  {NULL, NULL}
};

void ms_open_json(lua_State *L) { luaL_setfuncs(L, json_funcs, 0); }
