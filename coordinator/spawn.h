/* coordinator/spawn.h — starting worker processes that cannot outlive the coordinator.
 *
 * The child asks the kernel for SIGTERM when its parent thread ends (PR_SET_PDEATHSIG), checks that the
 * parent did not end before that request (getppid), moves to its own process group (a Ctrl-C at the terminal
 * reaches the coordinator only, which then shuts its workers down), restores default signal dispositions and
 * mask, and execs. Because the parent-death signal follows the *thread* that forked, call spawn_process from
 * a thread that lives as long as the child should (the supervisor's).
 */
#ifndef GUILD_COORDINATOR_SPAWN_H
#define GUILD_COORDINATOR_SPAWN_H

#include <sys/types.h>

#include "core/util/err.h"

/* Starts path with argv (NULL-terminated, argv[0] included). Returns once the exec has succeeded (its pid in
 * *pid) or failed (-1 with "cannot run PATH: strerror", the child reaped). */
int spawn_process(pid_t *pid, const char *path, char *const argv[], guild_err_t *err);

/* "exited with status 3", "killed by signal 9 (Killed)" for a waitpid status. */
void spawn_describe_status(int status, char *buf, size_t size);

/* The directory of the running executable (/proc/self/exe), for finding the worker binaries beside it.
 * -1 with err if it cannot be read. */
int spawn_self_dir(char *buf, size_t size, guild_err_t *err);

#endif
