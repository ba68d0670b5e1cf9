#include "config.h"

#include "core/util/fileperm.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

static int stat_regular(int fd, const char *path, const char *what, struct stat *st, guild_err_t *err)
{
    if (fstat(fd, st) < 0)
        return guild_err_errno(err, errno, "%s: %s: fstat", path, what);
    if (!S_ISREG(st->st_mode))
        return guild_err_set(err, "%s: %s is not a regular file", path, what);
    return 0;
}

int guild_file_check_private(int fd, const char *path, const char *what, guild_err_t *err)
{
    struct stat st;
    if (stat_regular(fd, path, what, &st, err) < 0)
        return -1;
    if (st.st_mode & 0077)
        return guild_err_set(err, "%s: %s with mode %04o: group or others may %s it; it must be 0600 (run `chmod "
                             "600 %s`)", path, what, (unsigned)(st.st_mode & 07777),
                             st.st_mode & 0022 ? "change" : "read", path);
    return 0;
}

int guild_file_check_trusted(int fd, const char *path, const char *what, guild_err_t *err)
{
    struct stat st;
    if (stat_regular(fd, path, what, &st, err) < 0)
        return -1;
    if (st.st_mode & 0022)
        return guild_err_set(err, "%s: %s with mode %04o: group or others may change it; it must not be writable "
                             "by them (run `chmod 600 %s`)", path, what, (unsigned)(st.st_mode & 07777), path);
    if (st.st_uid != geteuid() && st.st_uid != 0)
        return guild_err_set(err, "%s: %s belongs to user %u, not to this user (%u) or root (run `chown %u %s`)", path,
                             what, (unsigned)st.st_uid, (unsigned)geteuid(), (unsigned)geteuid(), path);
    return 0;
}
