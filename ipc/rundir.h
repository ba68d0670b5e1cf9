/* ipc/rundir.h — the coordinator's private run directory: where its ipc:// control socket lives.
 *
 * "<base>/guild-<pid>-XXXXXX", mode 0700 (only this user can reach the socket), base = $XDG_RUNTIME_DIR when
 * set (a per-user tmpfs), else /tmp. A coordinator killed with SIGKILL cannot remove its directory, so
 * creating one first removes those of coordinators that are gone (same user, pid no longer running), and
 * the workers it spawned remove it when they find it dead (rundir_remove_orphaned).
 */
#ifndef GUILD_IPC_RUNDIR_H
#define GUILD_IPC_RUNDIR_H

#include <stddef.h>

#include "core/util/err.h"

/* Creates the directory; its path in path[0..size). -1 with err on failure. */
int rundir_new(char *path, size_t size, guild_err_t *err);

/* Removes the files directly inside path, then path. Errors are ignored (nothing to do about them). */
void rundir_remove(const char *path);

/* Worker side, on exit: when endpoint is "ipc://<dir>/<file>", dir's name is a run directory of coordinator
 * pid `parent` ("guild-<parent>-XXXXXX") and that process no longer exists, removes dir. Anything else: no-op. */
void rundir_remove_orphaned(const char *endpoint, int parent);

#endif
