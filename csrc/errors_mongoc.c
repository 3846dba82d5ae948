/*
 * errors_mongoc.c - turns libmongoc's bson_error_t into the fixed list of
 * codes the library reports (see README.md, "Errors"), with a message that
 * says what was being done (errors.c, which links without libmongoc, holds
 * the rest). Clients use error API version 2, so server errors carry the
 * server's own code in domain MONGOC_ERROR_SERVER or _WRITE_CONCERN.
 */
#include "ms.h"

#include <string.h>

#include <mongoc/mongoc.h>

static int has(const char *msg, const char *needle) { return strstr(msg, needle) != NULL; }

/* Server codes that mean the document outgrew the server's BSON limit. */
static int is_too_large(uint32_t code) {
  return code == 10334 || code == 17419 || code == 17420 || code == 13548 || code == 10329;
}

void ms_err_from_bson(ms_err_t *e, const bson_error_t *be, const char *doing) {
  ms_err_from_bson_timed(e, be, doing, -1.0, 0);
}

/* A stream error is a timeout only when the call waited out the socket
 * timeout: libmongoc reports a reset, a closed socket and an expired wait
 * alike ("socket error or timeout"). Without a duration (elapsed_ms < 0)
 * only a message that says so explicitly counts as a timeout. */
static int is_timeout(const bson_error_t *be, double elapsed_ms, int32_t timeout_ms) {
  if (elapsed_ms >= 0) return timeout_ms > 0 && elapsed_ms >= 0.9 * (double)timeout_ms;
  return has(be->message, "timed out") || has(be->message, "Timed out");
}

void ms_err_from_bson_timed(ms_err_t *e, const bson_error_t *be, const char *doing, double elapsed_ms,
                            int32_t timeout_ms) {
  const char *code = "server";
  int show_code = 0;
  switch (be->domain) {
  case MONGOC_ERROR_STREAM:
    code = is_timeout(be, elapsed_ms, timeout_ms) ? "timeout" : "network";
    break;
  case MONGOC_ERROR_SERVER_SELECTION:
    code = "unavailable";
    break;
  case MONGOC_ERROR_SERVER:
  case MONGOC_ERROR_WRITE_CONCERN:
    show_code = 1;
    if (be->code == MONGOC_ERROR_DUPLICATE_KEY || be->code == 11001) code = "duplicate";
    else if (is_too_large(be->code)) code = "too_large";
    else if (be->code == 50) code = "timeout";      /* MaxTimeMSExpired */
    else code = "server";
    break;
  case MONGOC_ERROR_BSON:
  case MONGOC_ERROR_COMMAND:
  case MONGOC_ERROR_COLLECTION:
    code = (has(be->message, "too large") || has(be->message, "exceeds")) ? "too_large" : "invalid";
    break;
  case MONGOC_ERROR_CLIENT:
    code = has(be->message, "auth") || has(be->message, "Auth") ? "server" : "network";
    break;
  default:
    code = has(be->message, "too large") ? "too_large" : "server";
    break;
  }
  if (show_code)
    ms_err_set(e, code, "%s: %s (server code %u)", doing, be->message, (unsigned)be->code);
  else
    ms_err_set(e, code, "%s: %s", doing, be->message);
}
