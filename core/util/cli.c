#include "core/util/cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

int cli_parse_long(const char *flag, const char *s, long lo, long hi, long *out, guild_err_t *err)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return guild_err_set(err, "%s %s: expected an integer in [%ld, %ld]", flag, s, lo, hi);
    *out = v;
    return 0;
}

int cli_parse_float(const char *flag, const char *s, float *out, guild_err_t *err)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v))
        return guild_err_set(err, "%s %s: expected a number", flag, s);
    *out = (float)v;
    return 0;
}

int cli_parse_u64(const char *flag, const char *s, uint64_t *out, guild_err_t *err)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-')
        return guild_err_set(err, "%s %s: expected a non-negative integer", flag, s);
    *out = v;
    return 0;
}
