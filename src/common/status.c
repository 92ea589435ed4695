/* status.c — status names and the per-thread error message. */
#include <stdarg.h>
#include <stdio.h>

#include "common/common.h"

static _Thread_local char last_error[512];

const char *kvq_status_name(kvq_status s) {
    switch (s) {
    case KVQ_OK: return "ok";
    case KVQ_ERR_INVALID_ARG: return "invalid argument";
    case KVQ_ERR_NOMEM: return "out of memory";
    case KVQ_ERR_IO: return "i/o error";
    case KVQ_ERR_FORMAT: return "malformed data";
    case KVQ_ERR_UNSUPPORTED: return "unsupported";
    case KVQ_ERR_NONFINITE: return "non-finite value";
    case KVQ_ERR_RANGE: return "value out of range";
    }
    return "unknown status";
}

const char *kvq_last_error(void) { return last_error; }

kvq_status kvq_fail(kvq_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return s;
}
