/* core/util/fileperm.h — the permission checks of files that hold secrets or decide whom to trust (key files,
 * allow lists, shared-memory arena files): each refuses with the file, what is wrong and the command that fixes
 * it. */
#ifndef GUILD_UTIL_FILEPERM_H
#define GUILD_UTIL_FILEPERM_H

#include "core/util/err.h"

/* A file holding a secret (a key pair, activations): fd is open on `path`, `what` names it in messages ("key
 * pair", "arena"). -1 with err when it is not a regular file, or when group or others have any access to it
 * ("keys/w1.key: key pair with mode 0644: group and others may read it; run `chmod 600 keys/w1.key`"). */
int guild_file_check_private(int fd, const char *path, const char *what, guild_err_t *err);

/* A file that decides whom to trust (an allow list, a pinned public key): -1 with err and the fix when it is
 * not a regular file, is writable by group or others, or belongs to another user than this one or root. */
int guild_file_check_trusted(int fd, const char *path, const char *what, guild_err_t *err);

#endif
