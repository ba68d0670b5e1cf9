/* core/util/cli.h — parsing command-line flag values, for the programs' option parsers.
 *
 * Each function fails with a message naming the flag and the value the way every Guild command prints them
 * ("--ctx 0: expected an integer in [1, 16777216]"); the caller prefixes its command name. */
#ifndef GUILD_UTIL_CLI_H
#define GUILD_UTIL_CLI_H

#include <stdint.h>

#include "core/util/err.h"

/* A decimal integer in [lo, hi]. */
int cli_parse_long(const char *flag, const char *s, long lo, long hi, long *out, guild_err_t *err);

/* A finite number (stored as float). */
int cli_parse_float(const char *flag, const char *s, float *out, guild_err_t *err);

/* A non-negative decimal integer of up to 64 bits. */
int cli_parse_u64(const char *flag, const char *s, uint64_t *out, guild_err_t *err);

#endif
