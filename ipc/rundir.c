#include "config.h"

#include "ipc/rundir.h"
#include "ipc/proc_stat.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util/log.h"

static const char *base_dir(void)
{
    const char *x = getenv("XDG_RUNTIME_DIR");
    return x && x[0] == '/' ? x : "/tmp";
}

void rundir_remove(const char *path)
{
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char f[4096];
            if (snprintf(f, sizeof f, "%s/%s", path, e->d_name) < (int)sizeof f)
                (void)unlink(f);
        }
        closedir(d);
    }
    (void)rmdir(path);
}

/* The process is gone, or a zombie nobody has reaped yet (its parent may be slow, and it serves no one). */
static int pid_gone(int pid)
{
    if (kill(pid, 0) != 0)
        return errno == ESRCH;
    proc_stat_t st;
    return proc_stat_read(pid, &st) == 0 && (st.state == 'Z' || st.state == 'X');
}

/* Removes guild-<pid>-XXXXXX directories of this user whose pid is not running. */
static void sweep(const char *base)
{
    DIR *d = opendir(base);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        int pid, len = 0;
        if (sscanf(e->d_name, "guild-%d-%*6[A-Za-z0-9]%n", &pid, &len) != 1 || len == 0 || e->d_name[len] ||
            pid <= 0)
            continue;
        char p[4096];
        struct stat st;
        if (snprintf(p, sizeof p, "%s/%s", base, e->d_name) >= (int)sizeof p || lstat(p, &st) < 0 ||
            !S_ISDIR(st.st_mode) || st.st_uid != getuid())
            continue;
        if (!pid_gone(pid))
            continue;
        rundir_remove(p);
        guild_log(GUILD_LOG_INFO, "removed %s (its coordinator, pid %d, is gone)", p, pid);
    }
    closedir(d);
}

int rundir_new(char *path, size_t size, guild_err_t *err)
{
    const char *base = base_dir();
    sweep(base);
    if (snprintf(path, size, "%s/guild-%d-XXXXXX", base, (int)getpid()) >= (int)size)
        return guild_err_set(err, "run directory: %s is too long a path", base);
    if (!mkdtemp(path)) /* mode 0700 */
        return guild_err_errno(err, errno, "cannot create a run directory in %s", base);
    return 0;
}

void rundir_remove_orphaned(const char *endpoint, int parent)
{
    if (parent <= 1 || strncmp(endpoint, "ipc://", 6) != 0)
        return;
    char dir[4096];
    if (snprintf(dir, sizeof dir, "%s", endpoint + 6) >= (int)sizeof dir)
        return;
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir)
        return;
    *slash = '\0';
    const char *base = strrchr(dir, '/');
    base = base ? base + 1 : dir;
    char prefix[32];
    snprintf(prefix, sizeof prefix, "guild-%d-", parent);
    if (strncmp(base, prefix, strlen(prefix)) != 0 || strlen(base) != strlen(prefix) + 6)
        return;
    if (!pid_gone(parent))
        return;
    rundir_remove(dir);
}
