/* Tests for the hugetlb backing of ipc/arena: a memfd with MFD_HUGETLB, and a file on a hugetlbfs mount.
 *
 * Needs free 2 MiB pages. When the pool is empty and we are root, the test lets the kernel allocate surplus
 * pages on demand (/proc/sys/vm/nr_overcommit_hugepages, which pins no memory until used and is restored
 * afterwards); otherwise it exits 77 (SKIP) saying why. The hugetlbfs part mounts a private hugetlbfs in a
 * private mount namespace when root, else uses an existing mount, else is skipped with a note. */
#include "config.h"

#include "core/util/err.h"
#include "core/util/log.h"
#include "ipc/arena.h"
#include "tests/check_run.h"
#include "tests/ipc_testutil.h"

#include <check.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>

static const char overcommit_path[] = "/proc/sys/vm/nr_overcommit_hugepages";
enum { NEED_PAGES = 4 }; /* two arenas of 2 pages at once */

static long hugepages_free(void)
{
    long v = -1;
    FILE *f = fopen("/proc/meminfo", "re");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        sscanf(line, "HugePages_Free: %ld", &v);
    if (f)
        fclose(f);
    return v;
}

static int write_long(const char *path, long v)
{
    FILE *f = fopen(path, "we");
    if (!f)
        return -1;
    int ok = fprintf(f, "%ld\n", v) > 0;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

/* Creates a strict hugetlb arena (no fallback), checks the pages, shares it with a child. */
static void check_hugetlb_arena(const char *dir)
{
    guild_arena_request_t req = {GUILD_ARENA_KIND_TEST, 0, 3 << 20};
    guild_arena_opts_t o = {GUILD_ARENA_PAGES_HUGETLB, 1, dir, 0, 0};
    guild_err_t err = {{0}};
    guild_arena_t *a = guild_arena_create(&req, 1, &o, &err);
    ck_assert_msg(a, "%s", err.msg);
    ck_assert_int_eq(guild_arena_pages(a), GUILD_ARENA_PAGES_HUGETLB);
    ck_assert_uint_eq(guild_arena_size(a) % (2u << 20), 0);
    ck_assert_int_eq(ipc_test_page_kb(guild_arena_base(a)), 2048);
    uint32_t *r = guild_arena_region(a, GUILD_ARENA_KIND_TEST, 0, NULL);
    r[0] = 0x48554745; /* "HUGE" */
    guild_arena_publish(a);
    guild_arena_expect_t expect = {guild_arena_tag(a), guild_arena_size(a)};
    pid_t pid = fork();
    if (pid == 0) {
        guild_arena_t *b = guild_arena_attach(guild_arena_name(a), &expect, NULL);
        if (!b)
            _exit(10);
        uint32_t *q = guild_arena_region(b, GUILD_ARENA_KIND_TEST, 0, NULL);
        if (ipc_test_page_kb(q) != 2048)
            _exit(11);
        if (q[0] != 0x48554745)
            _exit(12);
        q[1] = 7;
        guild_arena_destroy(&b);
        _exit(0);
    }
    ck_assert_int_eq(ipc_test_wait(pid), 0);
    ck_assert_uint_eq(r[1], 7);
    guild_arena_destroy(&a);
}

START_TEST(test_hugetlb_memfd)
{
    check_hugetlb_arena(NULL);
}
END_TEST

START_TEST(test_hugetlb_file_and_stale_cleanup)
{
    char dir[64] = "/tmp/guild-hugetlbfs-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    /* a private mount: nothing outside this test process sees it, and it goes with the process */
    if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
        mount("none", dir, "hugetlbfs", 0, "pagesize=2M,mode=0700") < 0) {
        fprintf(stderr, "check_ipc_hugetlb: note: cannot mount a private hugetlbfs (%s); hugetlbfs file part "
                "not run\n", strerror(errno));
        rmdir(dir);
        return;
    }
    check_hugetlb_arena(dir);

    /* a crashed owner's file on hugetlbfs is swept by the next creator */
    pid_t pid = fork();
    if (pid == 0) {
        guild_arena_request_t req = {GUILD_ARENA_KIND_TEST, 0, 4096};
        guild_arena_opts_t o = {GUILD_ARENA_PAGES_HUGETLB, 1, dir, 0, 0};
        guild_arena_t *a = guild_arena_create(&req, 1, &o, NULL);
        if (!a)
            _exit(1);
        guild_arena_publish(a);
        raise(SIGKILL);
    }
    ck_assert_int_eq(ipc_test_wait(pid), 128 + SIGKILL);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "test -n \"$(ls '%s')\"", dir);
    ck_assert_int_eq(system(cmd), 0);
    int n = 0;
    guild_err_t err = {{0}};
    ck_assert_int_eq(guild_arena_remove_stale(dir, &n, &err), 0);
    ck_assert_int_eq(n, 1);
    snprintf(cmd, sizeof cmd, "test -z \"$(ls '%s')\"", dir);
    ck_assert_int_eq(system(cmd), 0);
    umount(dir);
    rmdir(dir);
}
END_TEST

int main(void)
{
    guild_log_init("check_ipc_hugetlb", GUILD_LOG_WARN);
    int lock = ipc_test_hugetlb_lock();
    long old_overcommit = ipc_test_read_long(overcommit_path);
    int raised = 0;
    long free_pages = hugepages_free();
    if (free_pages < NEED_PAGES) {
        if (geteuid() != 0 || old_overcommit < 0) {
            printf("SKIP: %ld free 2 MiB hugetlb pages (need %d) and not root; reserve them in "
                   "/proc/sys/vm/nr_hugepages to run this test\n", free_pages, NEED_PAGES);
            return 77;
        }
        if (write_long(overcommit_path, old_overcommit + NEED_PAGES) < 0) {
            printf("SKIP: cannot write %s: %s\n", overcommit_path, strerror(errno));
            return 77;
        }
        raised = 1;
        printf("check_ipc_hugetlb: %s raised from %ld to %ld for the test\n", overcommit_path, old_overcommit,
               old_overcommit + NEED_PAGES);
        /* the kernel may still fail to find contiguous memory: that is a skip, not a failure */
        guild_arena_request_t req = {GUILD_ARENA_KIND_TEST, 0, 3 << 20};
        guild_arena_opts_t o = {GUILD_ARENA_PAGES_HUGETLB, 1, NULL, 0, 0};
        guild_err_t err = {{0}};
        guild_arena_t *probe = guild_arena_create(&req, 1, &o, &err);
        if (!probe) {
            write_long(overcommit_path, old_overcommit);
            printf("SKIP: no surplus hugetlb pages either: %s\n", err.msg);
            return 77;
        }
        guild_arena_destroy(&probe);
    }

    Suite *s = suite_create("ipc_hugetlb");
    TCase *tc = tcase_create("hugetlb");
    tcase_add_test(tc, test_hugetlb_memfd);
    if (geteuid() == 0)
        tcase_add_test(tc, test_hugetlb_file_and_stale_cleanup);
    else
        printf("check_ipc_hugetlb: note: not root, hugetlbfs file part not run\n");
    suite_add_tcase(s, tc);
    const int rc = check_run(s);

    if (raised) {
        /* others may have changed it meanwhile: take back only what we added */
        long now = ipc_test_read_long(overcommit_path);
        if (now >= NEED_PAGES)
            write_long(overcommit_path, now - NEED_PAGES);
    }
    ipc_test_hugetlb_unlock(lock);
    return rc;
}
