/* core/util/log.h — messages for the operator on stderr, tagged with the process role.
 *
 * The level threshold is set once by the program from its flags (--verbose/--quiet), never from the
 * environment. guild_log_once() prints a message the first time a given call site runs (fallbacks such as
 * "no hugepages, using THP" are logged once, not per call).
 */
#ifndef GUILD_UTIL_LOG_H
#define GUILD_UTIL_LOG_H

typedef enum guild_log_level {
    GUILD_LOG_ERROR = 0,
    GUILD_LOG_WARN = 1,
    GUILD_LOG_INFO = 2,
    GUILD_LOG_DEBUG = 3,
} guild_log_level_t;

/* Sets the process tag ("guild", "cpu-worker[0]", ...) and the most verbose level printed. */
void guild_log_init(const char *tag, guild_log_level_t level);

guild_log_level_t guild_log_level(void);

void guild_log(guild_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Logs once per call site (thread-safe). */
#define guild_log_once(level, ...)                                                                   \
    do {                                                                                             \
        static int guild_log_once_done_;                                                             \
        if (!__atomic_exchange_n(&guild_log_once_done_, 1, __ATOMIC_RELAXED))                        \
            guild_log((level), __VA_ARGS__);                                                         \
    } while (0)

#endif
