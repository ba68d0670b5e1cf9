/* gpu-worker/dense/cuda/cuda_free_mem (what --gpu-mem auto plans against) on the device: another process's memory
 * is left out of what is free, the context made for the asking is destroyed after (asked twice, the same), the cuda
 * backend's device_memory hands on the same figure, and a process that holds the device's context already is not
 * asked (its own memory would count as taken, and the reset would destroy its context). The other process is this
 * program again (`check_cuda_free_mem --hold MIB`: holds MIB of device memory until its stdin closes), started
 * with exec: a CUDA context does not survive fork(). A process of its own, so that no earlier test holds a context. */
#include "config.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "gpu-worker/dense/backend.h"
#include "gpu-worker/dense/cuda/cuda_free_mem.h"
#include "tests/cuda/cuda_test_util.h"

#define HOLD_MIB 4096
#define MIB ((uint64_t)1 << 20)

static char g_self[4096];

/* --hold MIB: MIB of device memory written (so that it is backed), "held" on stdout, then held until stdin closes */
static int hold(long mib)
{
    void *p = NULL;
    if (cudaMalloc(&p, (size_t)mib * MIB) != cudaSuccess || cudaMemset(p, 1, (size_t)mib * MIB) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess) {
        fprintf(stderr, "hold: %s\n", cudaGetErrorString(cudaGetLastError()));
        return 1;
    }
    printf("held\n");
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0)
        ;
    cudaFree(p);
    return 0;
}

typedef struct holder {
    pid_t pid;
    int to; /* its stdin: closed to let it go */
} holder_t;

static void holder_start(holder_t *h, long mib)
{
    int in[2], out[2];
    ck_assert(pipe(in) == 0 && pipe(out) == 0);
    h->pid = fork();
    ck_assert_int_ge(h->pid, 0);
    if (h->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[1]);
        close(out[0]);
        char arg[32];
        snprintf(arg, sizeof arg, "%ld", mib);
        execl(g_self, g_self, "--hold", arg, (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    h->to = in[1];
    char buf[8] = {0};
    ssize_t n = read(out[0], buf, 5);
    close(out[0]);
    ck_assert_msg(n == 5 && !memcmp(buf, "held\n", 5), "the holding process did not hold %ld MiB", mib);
}

static void holder_stop(holder_t *h)
{
    close(h->to);
    int st = 0;
    ck_assert(waitpid(h->pid, &st, 0) == h->pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the holding process failed (status %d)", st);
}

static uint64_t free_now(void)
{
    uint64_t f = 1;
    char why[160] = "";
    ck_assert_msg(cuda_free_mem(&f, why, sizeof why) == 0, "not asked: %s", why);
    ck_assert_uint_gt(f, 0);
    return f;
}

static uint64_t dist(uint64_t a, uint64_t b)
{
    return a > b ? a - b : b - a;
}

START_TEST(test_free_mem)
{
    /* twice the same: the first context was destroyed (else the second would find it and not ask) */
    const uint64_t f0 = free_now();
    const uint64_t f0b = free_now();
    ck_assert_msg(dist(f0, f0b) <= 64 * MIB, "free %llu then %llu bytes", (unsigned long long)f0,
                  (unsigned long long)f0b);
    ck_assert_uint_gt(f0, (uint64_t)HOLD_MIB * MIB + 2048 * MIB);

    holder_t h;
    holder_start(&h, HOLD_MIB);
    const uint64_t f1 = free_now();
    /* the holder's memory and its context (a few hundred MiB) left out */
    ck_assert_msg(f0 - f1 >= (uint64_t)HOLD_MIB * MIB && f0 - f1 <= (uint64_t)(HOLD_MIB + 1024) * MIB,
                  "free %.0f MiB alone, %.0f MiB beside a process holding %d MiB", (double)f0 / MIB,
                  (double)f1 / MIB, HOLD_MIB);
    backend_device_mem_t dev;
    backend_device_memory("cuda", &dev);
    struct cudaDeviceProp prop;
    ck_assert(cudaGetDeviceProperties(&prop, 0) == cudaSuccess);
    ck_assert_uint_eq(dev.total, (uint64_t)prop.totalGlobalMem);
    ck_assert_msg(dev.why[0] == '\0', "%s", dev.why);
    ck_assert_msg(dist(dev.free, f1) <= 64 * MIB, "backend %llu, asked %llu", (unsigned long long)dev.free,
                  (unsigned long long)f1);
    holder_stop(&h);
    ck_assert_msg(dist(free_now(), f0) <= 64 * MIB, "the holder's memory not back");
    printf("free_mem: %.0f MiB free alone, %.0f MiB beside a process holding %d MiB, of %.0f MiB\n",
           (double)f0 / MIB, (double)f1 / MIB, HOLD_MIB, (double)prop.totalGlobalMem / MIB);

    /* this process's own context: not asked, nothing destroyed */
    void *p = NULL;
    ck_assert(cudaMalloc(&p, MIB) == cudaSuccess);
    uint64_t f = 1;
    char why[160] = "";
    ck_assert_int_eq(cuda_free_mem(&f, why, sizeof why), -1);
    ck_assert_uint_eq(f, 0);
    ck_assert_msg(strstr(why, "holds device 0's context already"), "%s", why);
    backend_device_memory("cuda", &dev);
    ck_assert_uint_eq(dev.free, 0);
    ck_assert_msg(strstr(dev.why, "holds device 0's context already"), "%s", dev.why);
    ck_assert_msg(cudaMemset(p, 0, MIB) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess,
                  "this process's allocation lost");
    cudaFree(p);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--hold"))
        return hold(atol(argv[2]));
    signal(SIGPIPE, SIG_IGN);
    const ssize_t n = readlink("/proc/self/exe", g_self, sizeof g_self - 1);
    if (n <= 0)
        return 99;
    g_self[n] = '\0';
    if (!cuda_test_device(0))
        return 77;
    Suite *s = suite_create("cuda_free_mem");
    TCase *tc = tcase_create("free_mem");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_free_mem);
    suite_add_tcase(s, tc);
    return cuda_test_run(s, NULL);
}
