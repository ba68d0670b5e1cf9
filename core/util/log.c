#include "core/util/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static char log_tag[64] = "guild";
static guild_log_level_t log_threshold = GUILD_LOG_WARN;

void guild_log_init(const char *tag, guild_log_level_t level)
{
    snprintf(log_tag, sizeof log_tag, "%s", tag ? tag : "guild");
    log_threshold = level;
}

guild_log_level_t guild_log_level(void)
{
    return log_threshold;
}

void guild_log(guild_log_level_t level, const char *fmt, ...)
{
    static const char *names[] = {"error", "warning", "info", "debug"};
    if (level > log_threshold)
        return;
    char line[2048];
    int n = snprintf(line, sizeof line, "%s: %s: ", log_tag, names[level]);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < sizeof line)
        vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    /* one write per line so lines of concurrent processes do not interleave */
    size_t len = strlen(line);
    if (len + 1 < sizeof line) {
        line[len] = '\n';
        line[len + 1] = '\0';
    }
    fputs(line, stderr);
}
