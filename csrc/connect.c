/*
 * connect.c - the connect steps the Store and the Database share: names,
 * the URI with the core's timeouts, waiting for the server to answer, and
 * the server's document limit; and scrubbing the URI's password from a
 * message.
 */
#include "store.h"

#include <math.h>
#include <string.h>
#include <time.h>

int ms_valid_name(const char *s, size_t n, int allow_dash) {
  size_t i;
  if (n == 0 || n > 60) return 0;
  for (i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          (allow_dash && c == '-')))
      return 0;
  }
  return 1;
}

/* Each connection attempt takes at most this long: short enough that
 * `wait` is honoured, never under 100 ms. */
int32_t ms_attempt_ms(double wait) {
  return (int32_t)fmin(fmax(wait * 1000.0, 100.0), MS_CONNECT_ATTEMPT_MS);
}

mongoc_uri_t *ms_parse_uri(const char *uristr, size_t urilen, int32_t attempt_ms, const char *doing, ms_err_t *e) {
  bson_error_t be;
  mongoc_uri_t *uri;
  if (strlen(uristr) != urilen) {
    ms_err_set(e, "invalid", "%s: the URI contains a NUL byte", doing);
    return NULL;
  }
  ms_log_quiet = 1;
  uri = mongoc_uri_new_with_error(uristr, &be);
  ms_log_quiet = 0;
  if (!uri) {
    /* The message may quote the URI: report only that it is malformed. */
    ms_err_set(e, "invalid", "%s: malformed MongoDB URI (%s)", doing,
               strstr(be.message, "://") ? "see the URI format" : be.message);
    return NULL;
  }
  if (!mongoc_uri_has_option(uri, MONGOC_URI_CONNECTTIMEOUTMS))
    mongoc_uri_set_option_as_int32(uri, MONGOC_URI_CONNECTTIMEOUTMS, attempt_ms);
  if (!mongoc_uri_has_option(uri, MONGOC_URI_SERVERSELECTIONTIMEOUTMS))
    mongoc_uri_set_option_as_int32(uri, MONGOC_URI_SERVERSELECTIONTIMEOUTMS, attempt_ms);
  if (!mongoc_uri_has_option(uri, MONGOC_URI_SOCKETTIMEOUTMS))
    mongoc_uri_set_option_as_int32(uri, MONGOC_URI_SOCKETTIMEOUTMS, MS_SOCKET_TIMEOUT_MS);
  return uri;
}

static int ping(mongoc_client_t *client, bson_error_t *be) {
  bson_t cmd = BSON_INITIALIZER;
  int ok;
  bson_append_int32(&cmd, "ping", 4, 1);
  ok = mongoc_client_command_simple(client, "admin", &cmd, NULL, NULL, be);
  bson_destroy(&cmd);
  return ok;
}

/* The pool's monitor reconnects in the background; each ping waits at most
 * one attempt for a server, and the loop keeps trying until `wait` is up. */
int ms_wait_for_server(mongoc_client_t *client, double wait, int32_t attempt_ms, bson_error_t *be) {
  double deadline = ms_now() + wait;
  while (!ping(client, be)) {
    double left, pause;
    struct timespec ts;
    /* another attempt may take attempt_ms: do not start one that ends past `wait` */
    if (be->domain == MONGOC_ERROR_SERVER || ms_now() + attempt_ms / 1000.0 > deadline + 0.05) return 0;
    left = deadline - ms_now();
    pause = left < 0.25 ? (left > 0 ? left : 0) : 0.25;
    ts.tv_sec = 0;
    ts.tv_nsec = (long)(pause * 1e9);
    nanosleep(&ts, NULL);
  }
  return 1;
}

int32_t ms_read_max_bson(mongoc_client_t *client) {
  bson_error_t be;
  int32_t max = MS_DEFAULT_MAX_BSON;
  mongoc_server_description_t *sd = mongoc_client_select_server(client, true, NULL, &be);
  if (sd) {
    const bson_t *hello = mongoc_server_description_hello_response(sd);
    bson_iter_t it;
    if (hello && bson_iter_init_find(&it, hello, "maxBsonObjectSize") && BSON_ITER_HOLDS_NUMBER(&it)) {
      int64_t v = bson_iter_as_int64(&it);
      if (v > 1024 && v < INT32_MAX) max = (int32_t)v;
    }
    mongoc_server_description_destroy(sd);
  }
  return max;
}

void ms_scrub(const char *pw, ms_err_t *e) {
  size_t pl;
  char *hit;
  if (!pw || !(pl = strlen(pw))) return;
  while ((hit = strstr(e->msg, pw)) != NULL) {
    memmove(hit + 3, hit + pl, strlen(hit + pl) + 1);
    memcpy(hit, "***", 3);
  }
}
