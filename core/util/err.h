/* core/util/err.h — how Guild reports failures.
 *
 * Two kinds of failure (STYLE.md): a broken invariant is a bug and stops the process with file and line
 * (GUILD_ASSERT); anything the world can cause is returned as -1 (or an enum) with a message in a
 * caller-provided guild_err_t that names the thing ("model.gguf: tensor blk.3.ffn_up_exps: type 39 is not
 * supported"). Library code never calls exit().
 */
#ifndef GUILD_UTIL_ERR_H
#define GUILD_UTIL_ERR_H

#include <stddef.h>

#define GUILD_ERR_MAX 1024

typedef struct guild_err {
    char msg[GUILD_ERR_MAX]; /* NUL-terminated; empty when no error was recorded */
} guild_err_t;

/* Records a printf-style message in err (err may be NULL). Returns -1 so that callers can write
 * `return guild_err_set(err, "...")`. */
int guild_err_set(guild_err_t *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Like guild_err_set, with ": strerror(errno_value)" appended. Returns -1. */
int guild_err_errno(guild_err_t *err, int errno_value, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Prepends context to the message already in err ("model.gguf: " + "tensor x: ..."). Returns -1. */
int guild_err_prefix(guild_err_t *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Empties err. */
void guild_err_clear(guild_err_t *err);

/* Always-on assertion for invariants (never for input the world controls). */
#define GUILD_ASSERT(cond) \
    ((cond) ? (void)0 : guild_assert_fail(#cond, __FILE__, __LINE__, __func__))

_Noreturn void guild_assert_fail(const char *expr, const char *file, int line, const char *func);

#endif
