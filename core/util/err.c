#include "core/util/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int guild_err_set(guild_err_t *err, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int guild_err_errno(guild_err_t *err, int errno_value, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < sizeof err->msg)
            snprintf(err->msg + n, sizeof err->msg - (size_t)n, ": %s", strerror(errno_value));
    }
    return -1;
}

int guild_err_prefix(guild_err_t *err, const char *fmt, ...)
{
    if (err) {
        char old[GUILD_ERR_MAX];
        memcpy(old, err->msg, sizeof old);
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < sizeof err->msg) {
            size_t room = sizeof err->msg - (size_t)n - 1;
            size_t len = strnlen(old, sizeof old - 1);
            if (len > room)
                len = room;
            memcpy(err->msg + n, old, len);
            err->msg[(size_t)n + len] = '\0';
        }
    }
    return -1;
}

void guild_err_clear(guild_err_t *err)
{
    if (err)
        err->msg[0] = '\0';
}

void guild_assert_fail(const char *expr, const char *file, int line, const char *func)
{
    fprintf(stderr, "guild: internal error: %s:%d: %s: assertion `%s' failed\n", file, line, func, expr);
    fflush(stderr);
    abort();
}
