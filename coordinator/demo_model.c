#include "config.h"

#include "coordinator/demo_model.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/util/log.h"

extern char **environ;

/* Bump the version when the shape below changes, so that old caches are not reused. */
#define DEMO_FILE "demo-qwen3moe-v2.gguf"

/* 4 layers of width 256, 32 experts top-4: small enough to write and run in seconds on two cores. The
 * vocabulary is exactly the built-in one (256 bytes, 537 merges, 3 control tokens) with no unused padding
 * tokens, which would print nothing when sampled. */
static const char *const demo_args[] = {
    "--arch", "qwen3moe", "--layers", "4", "--embd", "256", "--heads", "4", "--kv-heads", "2",
    "--head-dim", "64", "--experts", "32", "--experts-used", "4", "--expert-ff", "256", "--ctx", "2048",
    "--type", "Q4_K", "--vocab", "796", "--seed", "1", "--quiet",
};

static int make_dir(const char *path, guild_err_t *err)
{
    if (mkdir(path, 0755) < 0 && errno != EEXIST)
        return guild_err_errno(err, errno, "cannot create %s", path);
    return 0;
}

/* $XDG_CACHE_HOME/guild or $HOME/.cache/guild, created. */
static int cache_dir(char *buf, size_t size, guild_err_t *err)
{
    const char *xdg = getenv("XDG_CACHE_HOME");
    if (xdg && xdg[0] == '/') {
        if (make_dir(xdg, err) < 0)
            return -1;
        snprintf(buf, size, "%s/guild", xdg);
    } else {
        const char *home = getenv("HOME");
        if (!home || home[0] != '/')
            return guild_err_set(err, "no cache directory for the demo model: neither XDG_CACHE_HOME nor HOME is "
                                 "set (pass a model with -m)");
        char dot[PATH_MAX];
        snprintf(dot, sizeof dot, "%s/.cache", home);
        if (make_dir(dot, err) < 0)
            return -1;
        snprintf(buf, size, "%s/.cache/guild", home);
    }
    return make_dir(buf, err);
}

static bool is_executable(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* guild-mkmodel next to this executable, in the build tree, or on PATH. */
static int find_mkmodel(char *buf, size_t size, guild_err_t *err)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = '\0';
        char *slash = strrchr(self, '/');
        if (slash) {
            *slash = '\0';
            int w = snprintf(buf, size, "%s/guild-mkmodel", self);
            if (w > 0 && (size_t)w < size && is_executable(buf))
                return 0;
        }
    }
    snprintf(buf, size, "%s/tools/guild-mkmodel", GUILD_BUILDDIR);
    if (is_executable(buf))
        return 0;
    const char *path = getenv("PATH");
    while (path && *path) {
        const char *end = strchr(path, ':');
        size_t len = end ? (size_t)(end - path) : strlen(path);
        if (len > 0 && len < size - 16) {
            snprintf(buf, size, "%.*s/guild-mkmodel", (int)len, path);
            if (is_executable(buf))
                return 0;
        }
        path = end ? end + 1 : NULL;
    }
    return guild_err_set(err, "guild-mkmodel (which writes the demo model) was found neither next to guild, nor in "
                         "%s/tools, nor on PATH; pass a model with -m", GUILD_BUILDDIR);
}

int demo_model_path(char **out, guild_err_t *err)
{
    *out = NULL;
    char dir[PATH_MAX], path[PATH_MAX + 64], tmp[PATH_MAX + 64], tool[PATH_MAX];
    if (cache_dir(dir, sizeof dir, err) < 0)
        return -1;
    snprintf(path, sizeof path, "%s/%s", dir, DEMO_FILE);
    if (access(path, R_OK) != 0) {
        if (find_mkmodel(tool, sizeof tool, err) < 0)
            return -1;
        snprintf(tmp, sizeof tmp, "%s/.%s.%ld.tmp", dir, DEMO_FILE, (long)getpid());
        enum { N_DEMO = sizeof demo_args / sizeof demo_args[0] };
        char *argv[N_DEMO + 4];
        argv[0] = tool;
        for (size_t i = 0; i < N_DEMO; i++)
            argv[1 + i] = (char *)demo_args[i];
        argv[N_DEMO + 1] = "-o";
        argv[N_DEMO + 2] = tmp;
        argv[N_DEMO + 3] = NULL;
        guild_log(GUILD_LOG_WARN, "generating the demo model (random weights) into %s", path);
        /* the generator's stdout would mix with the generated text */
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
        pid_t pid;
        int rc = posix_spawn(&pid, tool, &fa, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        if (rc != 0)
            return guild_err_errno(err, rc, "cannot run %s", tool);
        int status;
        while (waitpid(pid, &status, 0) < 0)
            if (errno != EINTR)
                return guild_err_errno(err, errno, "waiting for %s", tool);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            unlink(tmp);
            return guild_err_set(err, "%s failed to write the demo model (status %d)", tool, status);
        }
        if (rename(tmp, path) < 0) {
            int e = errno;
            unlink(tmp);
            return guild_err_errno(err, e, "cannot move the demo model into %s", path);
        }
    }
    *out = strdup(path);
    if (!*out)
        return guild_err_set(err, "out of memory");
    return 0;
}
