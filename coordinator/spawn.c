#include "config.h"

#include "coordinator/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* In the child, between fork and exec: async-signal-safe calls only. Reports errno on the pipe and exits. */
static _Noreturn void child(int fd, pid_t parent, const char *path, char *const argv[])
{
    int e = 0;
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0)
        e = errno;
    else if (getppid() != parent)
        _exit(127); /* the coordinator is already gone: nothing to serve */
    if (!e) {
        (void)setpgid(0, 0);
        sigset_t none;
        sigemptyset(&none);
        (void)sigprocmask(SIG_SETMASK, &none, NULL);
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = SIG_DFL;
        for (int s = 1; s < NSIG; s++)
            if (s != SIGKILL && s != SIGSTOP)
                (void)sigaction(s, &sa, NULL);
        execv(path, argv);
        e = errno;
    }
    ssize_t w = write(fd, &e, sizeof e);
    (void)w;
    _exit(127);
}

int spawn_process(pid_t *pid, const char *path, char *const argv[], guild_err_t *err)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) < 0)
        return guild_err_errno(err, errno, "cannot run %s: pipe", path);
    pid_t parent = getpid();
    pid_t p = fork();
    if (p < 0) {
        int e = errno;
        close(fds[0]);
        close(fds[1]);
        return guild_err_errno(err, e, "cannot run %s: fork", path);
    }
    if (p == 0)
        child(fds[1], parent, path, argv);
    close(fds[1]);
    int e = 0;
    ssize_t n;
    do
        n = read(fds[0], &e, sizeof e);
    while (n < 0 && errno == EINTR);
    close(fds[0]);
    if (n == (ssize_t)sizeof e) {
        int st;
        while (waitpid(p, &st, 0) < 0 && errno == EINTR)
            ;
        return guild_err_errno(err, e, "cannot run %s", path);
    }
    *pid = p;
    return 0;
}

void spawn_describe_status(int status, char *buf, size_t size)
{
    if (WIFEXITED(status))
        snprintf(buf, size, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, size, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(buf, size, "ended with wait status %#x", status);
}

int spawn_self_dir(char *buf, size_t size, guild_err_t *err)
{
    ssize_t n = readlink("/proc/self/exe", buf, size - 1);
    if (n <= 0)
        return guild_err_errno(err, errno, "cannot read /proc/self/exe");
    buf[n] = '\0';
    char *slash = strrchr(buf, '/');
    if (!slash)
        return guild_err_set(err, "/proc/self/exe: %s is not a path", buf);
    *slash = '\0';
    return 0;
}
