/* td_err: the one error value of the parsers (no exit, no printing). */
#include <stdarg.h>
#include <stdio.h>

#include "trident/formats.h"

int td_err_set(td_err *e, const char *fmt, ...) {
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}
