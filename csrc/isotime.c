/*
 * isotime.c - epoch seconds <-> the ISO-8601 date-times harel (pydantic)
 * writes into Executions and Events: UTC, microseconds, years 1 to 9999,
 * by calendar arithmetic alone (no time zone, no time_t width involved).
 */
#include "ms.h"

#include <math.h>
#include <stdio.h>

/* The years Python's datetime can hold: 0001-01-01 .. 9999-12-31. */
#define ISO_MIN_SECS INT64_C(-62135596800)
#define ISO_MAX_SECS INT64_C(253402300799)

/* Days since 1970-01-01 of a proleptic Gregorian date, and back; pure
 * arithmetic, so no time zone or time_t width gets involved. */
static int64_t days_from_civil(int64_t y, int m, int d) {
  int64_t era, yoe, doy, doe;
  y -= m <= 2;
  era = (y >= 0 ? y : y - 399) / 400;
  yoe = y - era * 400;
  doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, int *m, int *d) {
  int64_t era, doe, yoe, doy, mp;
  z += 719468;
  era = (z >= 0 ? z : z - 146096) / 146097;
  doe = z - era * 146097;
  yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  mp = (5 * doy + 2) / 153;
  *d = (int)(doy - (153 * mp + 2) / 5 + 1);
  *m = (int)(mp < 10 ? mp + 3 : mp - 9);
  *y = yoe + era * 400 + (*m <= 2);
}

static int days_in_month(int64_t y, int m) {
  static const int dim[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (m == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0)) return 29;
  return dim[m - 1];
}

/* Python rounds a timestamp's microseconds half to even. */
static double round_half_even(double x) {
  double r = round(x);
  if (fabs(x - r) == 0.5) r = 2.0 * round(x / 2.0);
  return r;
}

size_t ms_iso8601_format(double t, char *out, size_t outlen) {
  double ip, us;
  int64_t secs, days, sod, y;
  int mo, d, n;
  if (!isfinite(t) || t < (double)ISO_MIN_SECS - 1.0 || t > (double)ISO_MAX_SECS + 1.0) return 0;
  us = round_half_even(modf(t, &ip) * 1e6);
  if (us >= 1e6) { us -= 1e6; ip += 1.0; }
  else if (us < 0) { us += 1e6; ip -= 1.0; }
  secs = (int64_t)ip;
  if (secs < ISO_MIN_SECS || secs > ISO_MAX_SECS) return 0;
  days = secs / 86400;
  sod = secs % 86400;
  if (sod < 0) { sod += 86400; days--; }
  civil_from_days(days, &y, &mo, &d);
  if (us > 0)
    n = snprintf(out, outlen, "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", (int)y, mo, d, (int)(sod / 3600),
                 (int)(sod / 60 % 60), (int)(sod % 60), (int)us);
  else
    n = snprintf(out, outlen, "%04d-%02d-%02dT%02d:%02d:%02dZ", (int)y, mo, d, (int)(sod / 3600),
                 (int)(sod / 60 % 60), (int)(sod % 60));
  if (n < 0 || (size_t)n >= outlen) return 0;
  return (size_t)n;
}

/* Reads exactly n digits at s[*pos]. */
static int read_digits(const char *s, size_t len, size_t *pos, int n, int *out) {
  int v = 0, i;
  if (len - *pos < (size_t)n) return -1;
  for (i = 0; i < n; i++) {
    char c = s[*pos + (size_t)i];
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  *pos += (size_t)n;
  *out = v;
  return 0;
}

static int read_char(const char *s, size_t len, size_t *pos, char c) {
  if (*pos < len && s[*pos] == c) {
    (*pos)++;
    return 1;
  }
  return 0;
}

int ms_iso8601_parse(const char *s, size_t len, double *t) {
  static const double pow10[10] = {1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9};
  size_t pos = 0;
  int y, mo, d, h = 0, mi = 0, sec = 0, nfrac = 0, oh = 0, om = 0, sign = 0;
  long frac = 0;
  int64_t secs;
  if (read_digits(s, len, &pos, 4, &y) || !read_char(s, len, &pos, '-') ||
      read_digits(s, len, &pos, 2, &mo) || !read_char(s, len, &pos, '-') ||
      read_digits(s, len, &pos, 2, &d))
    return -1;
  if (pos < len) {
    if (s[pos] != 'T' && s[pos] != 't' && s[pos] != ' ') return -1;
    pos++;
    if (read_digits(s, len, &pos, 2, &h) || !read_char(s, len, &pos, ':') ||
        read_digits(s, len, &pos, 2, &mi))
      return -1;
    if (read_char(s, len, &pos, ':')) {
      if (read_digits(s, len, &pos, 2, &sec)) return -1;
      if (read_char(s, len, &pos, '.')) {
        while (pos < len && s[pos] >= '0' && s[pos] <= '9') {
          if (++nfrac > 9) return -1;
          frac = frac * 10 + (s[pos++] - '0');
        }
        if (nfrac == 0) return -1;
      }
    }
    if (pos < len) {
      if (s[pos] == 'Z' || s[pos] == 'z') {
        pos++;
      } else if (s[pos] == '+' || s[pos] == '-') {
        sign = s[pos++] == '-' ? -1 : 1;
        if (read_digits(s, len, &pos, 2, &oh)) return -1;
        read_char(s, len, &pos, ':');
        if (read_digits(s, len, &pos, 2, &om)) return -1;
      } else {
        return -1;
      }
    }
    if (pos != len) return -1;
  }
  if (y < 1 || mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 ||
      sec > 60 || oh > 23 || om > 59)
    return -1;
  secs = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - sign * (oh * 3600 + om * 60);
  *t = (double)secs + (nfrac ? (double)frac / pow10[nfrac] : 0.0);
  return 0;
}

static int l_time_to_iso(lua_State *L) {
  lua_Number t = luaL_checknumber(L, 1);
  char buf[40];
  size_t n;
  ms_err_t e;
  if (!isfinite((double)t)) {
    ms_err_set(&e, "invalid", "time_to_iso: the time must be a finite number");
    return ms_push_error(L, &e);
  }
  n = ms_iso8601_format((double)t, buf, sizeof buf);
  if (n == 0) {
    ms_err_set(&e, "invalid", "time_to_iso: %.17g is outside the years 1 to 9999", (double)t);
    return ms_push_error(L, &e);
  }
  lua_pushlstring(L, buf, n);
  return 1;
}

static int l_iso_to_time(lua_State *L) {
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  double t;
  ms_err_t e;
  if (ms_iso8601_parse(s, len, &t)) {
    ms_err_set(&e, "invalid", "iso_to_time: not an ISO-8601 date-time: \"%.*s%s\"",
               (int)(len > 64 ? 64 : len), s, len > 64 ? "..." : "");
    return ms_push_error(L, &e);
  }
  lua_pushnumber(L, (lua_Number)t);
  return 1;
}

static const luaL_Reg isotime_funcs[] = {
  {"time_to_iso", l_time_to_iso},
  {"iso_to_time", l_iso_to_time},
  {NULL, NULL}
};

void ms_open_isotime(lua_State *L) { luaL_setfuncs(L, isotime_funcs, 0); }
