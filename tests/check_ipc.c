/* Tests for ipc/: the arena (create, attach, validation, backings, stale cleanup), doorbells across processes
 * (spin, futex sleep and wake, timeouts, dead peers) and the MoE exchange (round trips with 1, 2 and 3
 * worker processes, bit-identical combine). Real processes via fork wherever a second process matters. */
#include "config.h"

#include "core/util/err.h"
#include "core/util/log.h"
#include "ipc/arena.h"
#include "ipc/doorbell.h"
#include "ipc/exchange.h"
#include "ipc/expert_store.h"
#include "ipc/proc_stat.h"
#include "tests/check_run.h"
#include "tests/ipc_testutil.h"

#include <check.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <time.h>
#include <math.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>

#define MS 1000000ull

static const guild_arena_opts_t small_opts = {GUILD_ARENA_PAGES_SMALL, 0, NULL, 0, 0};

static guild_arena_t *make_arena(size_t bytes, const guild_arena_opts_t *opts)
{
    guild_err_t err = {{0}};
    guild_arena_request_t req = {GUILD_ARENA_KIND_TEST, 0, bytes};
    guild_arena_t *a = guild_arena_create(&req, 1, opts ? opts : &small_opts, &err);
    ck_assert_msg(a, "create: %s", err.msg);
    return a;
}

/* ---------------------------------------------------------------- arena */

START_TEST(test_arena_create_attach_across_processes)
{
    guild_arena_t *a = make_arena(10000, NULL);
    ck_assert(!strncmp(guild_arena_name(a), "/proc/", 6));
    ck_assert_str_eq(guild_arena_path(a), "");
    size_t rsize = 0;
    uint8_t *r = guild_arena_region(a, GUILD_ARENA_KIND_TEST, 0, &rsize);
    ck_assert_ptr_nonnull(r);
    ck_assert_uint_eq(rsize, 12288); /* rounded to GUILD_ARENA_ALIGN */
    ck_assert_uint_eq((uintptr_t)r % GUILD_ARENA_ALIGN, 0);
    ck_assert_ptr_null(guild_arena_region(a, GUILD_ARENA_KIND_EXCHANGE, 0, NULL));
    for (size_t i = 0; i < 10000; i++)
        r[i] = (uint8_t)(i * 7);
    guild_arena_publish(a);

    /* the child opens the arena by name, as a separately started worker would */
    guild_arena_expect_t expect = {guild_arena_tag(a), guild_arena_size(a)};
    char name[GUILD_ARENA_NAME_MAX];
    snprintf(name, sizeof name, "%s", guild_arena_name(a));
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        guild_err_t err = {{0}};
        guild_arena_t *b = guild_arena_attach(name, &expect, &err);
        if (!b)
            _exit(10);
        uint8_t *q = guild_arena_region(b, GUILD_ARENA_KIND_TEST, 0, NULL);
        if (!q || q == r)
            _exit(11); /* a fresh mapping, not the inherited one */
        for (size_t i = 0; i < 10000; i++)
            if (q[i] != (uint8_t)(i * 7))
                _exit(12);
        q[0] = 0xAB; /* visible to the creator: the memory is shared */
        guild_arena_destroy(&b);
        _exit(b ? 13 : 0);
    }
    ck_assert_int_eq(ipc_test_wait(pid), 0);
    ck_assert_uint_eq(r[0], 0xAB);
    guild_arena_destroy(&a);
    ck_assert_ptr_null(a);
    guild_arena_destroy(&a); /* NULL-safe */
}
END_TEST

START_TEST(test_arena_mode_0600)
{
    guild_arena_t *a = make_arena(4096, NULL);
    struct stat st;
    ck_assert_int_eq(stat(guild_arena_name(a), &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0600);
    guild_arena_destroy(&a);
}
END_TEST

static void expect_attach_error(const char *name, const guild_arena_expect_t *expect, const char *needle)
{
    guild_err_t err = {{0}};
    guild_arena_t *b = guild_arena_attach(name, expect, &err);
    ck_assert_msg(!b, "attach succeeded, expected an error containing \"%s\"", needle);
    ck_assert_msg(strstr(err.msg, needle), "error \"%s\" lacks \"%s\"", err.msg, needle);
    ck_assert_msg(strstr(err.msg, name), "error \"%s\" does not name the arena", err.msg);
}

START_TEST(test_arena_validation_errors)
{
    guild_arena_t *a = make_arena(4096, NULL);
    const char *name = guild_arena_name(a);
    guild_arena_header_t *h = guild_arena_base(a);

    expect_attach_error(name, NULL, "not yet published");
    guild_arena_publish(a);

    guild_arena_expect_t wrong_tag = {guild_arena_tag(a) ^ 1, 0};
    expect_attach_error(name, &wrong_tag, "tag");
    guild_arena_expect_t wrong_size = {0, guild_arena_size(a) + 4096};
    expect_attach_error(name, &wrong_size, "announced");

    atomic_store(&h->magic, UINT64_C(0x1122334455667788));
    expect_attach_error(name, NULL, "bad magic");
    atomic_store(&h->magic, GUILD_ARENA_MAGIC);

    h->layout_version = 99;
    expect_attach_error(name, NULL, "layout version 99");
    h->layout_version = GUILD_ARENA_LAYOUT_VERSION;

    h->total_size += 4096;
    expect_attach_error(name, NULL, "header says");
    h->total_size -= 4096;

    h->regions[0].offset = guild_arena_size(a); /* past the end */
    expect_attach_error(name, NULL, "out of place");
    h->regions[0].offset = GUILD_ARENA_ALIGN;
    h->regions[0].size = 100; /* unaligned */
    expect_attach_error(name, NULL, "out of place");
    h->regions[0].size = GUILD_ARENA_ALIGN;

    h->n_regions = GUILD_ARENA_MAX_REGIONS + 1;
    expect_attach_error(name, NULL, "regions");
    h->n_regions = 1;

    guild_err_t err = {{0}};
    guild_arena_t *b = guild_arena_attach(name, NULL, &err);
    ck_assert_msg(b, "repaired header: %s", err.msg);
    guild_arena_destroy(&b);
    guild_arena_destroy(&a);

    expect_attach_error("/nonexistent/guild-arena-1-0000000000000000", NULL, "No such file");

    /* a file that is not an arena at all, and one too small for a header */
    char path[] = "/tmp/guild-check-ipc-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "hello", 5), 5);
    expect_attach_error(path, NULL, "too small");
    ck_assert_int_eq(ftruncate(fd, 8192), 0);
    expect_attach_error(path, NULL, "not a Guild arena");
    close(fd);
    unlink(path);
}
END_TEST

START_TEST(test_arena_bad_requests)
{
    guild_err_t err = {{0}};
    guild_arena_request_t none = {GUILD_ARENA_KIND_NONE, 0, 4096};
    ck_assert_ptr_null(guild_arena_create(&none, 1, &small_opts, &err));
    ck_assert(strstr(err.msg, "no kind"));
    guild_arena_request_t many[GUILD_ARENA_MAX_REGIONS + 1];
    for (int i = 0; i <= GUILD_ARENA_MAX_REGIONS; i++)
        many[i] = (guild_arena_request_t){GUILD_ARENA_KIND_TEST, (uint32_t)i, 64};
    ck_assert_ptr_null(guild_arena_create(many, GUILD_ARENA_MAX_REGIONS + 1, &small_opts, &err));
    ck_assert(strstr(err.msg, "regions requested"));
    /* the full table works, regions in order and apart */
    guild_arena_t *a = guild_arena_create(many, GUILD_ARENA_MAX_REGIONS, &small_opts, &err);
    ck_assert_msg(a, "%s", err.msg);
    char *prev = NULL;
    for (int i = 0; i < GUILD_ARENA_MAX_REGIONS; i++) {
        char *r = guild_arena_region(a, GUILD_ARENA_KIND_TEST, (uint32_t)i, NULL);
        ck_assert_ptr_nonnull(r);
        if (prev)
            ck_assert_int_eq(r - prev, GUILD_ARENA_ALIGN);
        prev = r;
    }
    guild_arena_destroy(&a);
}
END_TEST

/* Each backing level forced in turn; what the machine offers decides between success and a fallback, and
 * the test checks the outcome against /proc and /sys rather than assuming either. */
START_TEST(test_arena_level_small)
{
    guild_arena_opts_t o = {GUILD_ARENA_PAGES_SMALL, 1, NULL, 0, 0};
    guild_arena_t *a = make_arena(3 << 20, &o);
    ck_assert_int_eq(guild_arena_pages(a), GUILD_ARENA_PAGES_SMALL);
    ck_assert_uint_eq(guild_arena_size(a) % 4096, 0);
    ck_assert_int_eq(ipc_test_page_kb(guild_arena_base(a)), 4);
    guild_arena_destroy(&a);
}
END_TEST

START_TEST(test_arena_level_thp)
{
    char mode[32];
    ipc_test_sysfs_choice("/sys/kernel/mm/transparent_hugepage/shmem_enabled", mode, sizeof mode);
    int thp_ok = !strcmp(mode, "always") || !strcmp(mode, "within_size") || !strcmp(mode, "advise") ||
                 !strcmp(mode, "force");
    guild_arena_request_t req = {GUILD_ARENA_KIND_TEST, 0, 3 << 20};
    guild_err_t err = {{0}};
    guild_arena_opts_t strict = {GUILD_ARENA_PAGES_THP, 1, NULL, 0, 0};
    guild_arena_t *a = guild_arena_create(&req, 1, &strict, &err);
    if (thp_ok) {
        ck_assert_msg(a, "shmem_enabled=%s but THP failed: %s", mode, err.msg);
        ck_assert_int_eq(guild_arena_pages(a), GUILD_ARENA_PAGES_THP);
        ck_assert_uint_eq(guild_arena_size(a) % (2u << 20), 0);
    } else {
        ck_assert_msg(!a, "shmem_enabled=%s but THP was reported", mode);
        ck_assert_msg(strstr(err.msg, "shmem_enabled"), "reason does not name the setting: %s", err.msg);
    }
    guild_arena_destroy(&a);
    /* with fallback: THP where possible, else 4 KiB; never an error */
    guild_arena_opts_t lenient = {GUILD_ARENA_PAGES_THP, 0, NULL, 0, 0};
    a = guild_arena_create(&req, 1, &lenient, &err);
    ck_assert_msg(a, "%s", err.msg);
    ck_assert_int_eq(guild_arena_pages(a), thp_ok ? GUILD_ARENA_PAGES_THP : GUILD_ARENA_PAGES_SMALL);
    guild_arena_destroy(&a);
}
END_TEST

START_TEST(test_arena_level_hugetlb_or_fallback)
{
    int lock = ipc_test_hugetlb_lock(); /* check_ipc_hugetlb changes the pool meanwhile */
    long free_pages = -1, overcommit = ipc_test_read_long("/proc/sys/vm/nr_overcommit_hugepages");
    FILE *f = fopen("/proc/meminfo", "re");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        sscanf(line, "HugePages_Free: %ld", &free_pages);
    if (f)
        fclose(f);
    guild_arena_request_t req = {GUILD_ARENA_KIND_TEST, 0, 3 << 20};
    guild_err_t err = {{0}};
    guild_arena_opts_t lenient = {GUILD_ARENA_PAGES_HUGETLB, 0, NULL, 0, 0};
    guild_arena_t *a = guild_arena_create(&req, 1, &lenient, &err);
    ck_assert_msg(a, "the default options must always succeed: %s", err.msg);
    if (guild_arena_pages(a) == GUILD_ARENA_PAGES_HUGETLB) {
        ck_assert_int_eq(ipc_test_page_kb(guild_arena_base(a)), 2048);
    } else if (free_pages == 0 && overcommit == 0) {
        /* no pool at all: the strict request must fail and say why */
        guild_arena_opts_t strict = {GUILD_ARENA_PAGES_HUGETLB, 1, NULL, 0, 0};
        guild_arena_t *b = guild_arena_create(&req, 1, &strict, &err);
        ck_assert_ptr_null(b);
        ck_assert_msg(strstr(err.msg, "hugetlb") && strstr(err.msg, "nr_hugepages"), "reason: %s", err.msg);
    }
    guild_arena_destroy(&a);
    ipc_test_hugetlb_unlock(lock);
}
END_TEST

/* --huge-pages require: hugetlb or transparent hugepages, never 4 KiB pages; without either the creation fails
 * naming each backing's reason. */
START_TEST(test_arena_huge_only)
{
    int lock = ipc_test_hugetlb_lock();
    char mode[32];
    ipc_test_sysfs_choice("/sys/kernel/mm/transparent_hugepage/shmem_enabled", mode, sizeof mode);
    const int thp_ok = !strcmp(mode, "always") || !strcmp(mode, "within_size") || !strcmp(mode, "advise") ||
                       !strcmp(mode, "force");
    guild_arena_request_t req = {GUILD_ARENA_KIND_TEST, 0, 3 << 20};
    guild_err_t err = {{0}};
    guild_arena_opts_t o = {.pages = GUILD_ARENA_PAGES_HUGETLB, .huge_only = 1};
    guild_arena_t *a = guild_arena_create(&req, 1, &o, &err);
    if (a) {
        ck_assert_int_ne(guild_arena_pages(a), GUILD_ARENA_PAGES_SMALL);
    } else {
        ck_assert_msg(!thp_ok, "shmem_enabled=%s, yet no huge pages: %s", mode, err.msg);
        ck_assert_msg(strstr(err.msg, "huge pages required") && strstr(err.msg, "no hugetlb pages") &&
                      strstr(err.msg, "no thp pages") && strstr(err.msg, "shmem_enabled"), "reason: %s", err.msg);
    }
    guild_arena_destroy(&a);
    /* from transparent hugepages on: the same, without the hugetlb attempt */
    o.pages = GUILD_ARENA_PAGES_THP;
    a = guild_arena_create(&req, 1, &o, &err);
    ck_assert_msg(!a == !thp_ok, "shmem_enabled=%s: %s", mode, a ? "created" : err.msg);
    if (a)
        ck_assert_int_eq(guild_arena_pages(a), GUILD_ARENA_PAGES_THP);
    else
        ck_assert_msg(strstr(err.msg, "huge pages required") && !strstr(err.msg, "no hugetlb"), "%s", err.msg);
    guild_arena_destroy(&a);
    ipc_test_hugetlb_unlock(lock);
}
END_TEST

/* Whether the mapping holding addr has `flag` in its smaps VmFlags ("hg": MADV_HUGEPAGE); -1 when not found. */
static int vm_flag(const void *addr, const char *flag)
{
    FILE *f = fopen("/proc/self/smaps", "re");
    ck_assert_ptr_nonnull(f);
    char line[512];
    int inside = 0, found = -1;
    const uintptr_t a = (uintptr_t)addr;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            inside = a >= lo && a < hi;
            continue;
        }
        if (inside && !strncmp(line, "VmFlags:", 8)) {
            char want[8];
            snprintf(want, sizeof want, " %s", flag);
            found = 0;
            for (char *p = strstr(line, want); p; p = strstr(p + 1, want))
                if (p[strlen(want)] == ' ' || p[strlen(want)] == '\n')
                    found = 1;
            break;
        }
    }
    fclose(f);
    return found;
}

/* An attacher maps an arena of transparent hugepages advised (a lazy arena's pages are faulted in by the
 * attacher, and shmem_enabled=advise looks at the faulting mapping), an arena of 4 KiB pages not. The header's
 * page kind is what the attacher goes by: written here on a 4 KiB arena, as a creator that got THP writes it. */
START_TEST(test_arena_attach_advises_thp)
{
    for (int thp = 0; thp < 2; thp++) {
        guild_arena_opts_t o = {GUILD_ARENA_PAGES_SMALL, 1, NULL, 1, 0};
        guild_arena_t *a = make_arena(4 << 20, &o);
        ((guild_arena_header_t *)guild_arena_base(a))->pages = thp ? GUILD_ARENA_PAGES_THP : GUILD_ARENA_PAGES_SMALL;
        guild_arena_publish(a);
        guild_err_t err = {{0}};
        guild_arena_t *b = guild_arena_attach(guild_arena_name(a), NULL, &err);
        ck_assert_msg(b, "%s", err.msg);
        const int hg = vm_flag(guild_arena_base(b), "hg");
        ck_assert_int_ne(hg, -1);
        ck_assert_msg(hg == thp, "header pages %s: the attacher's mapping is%s advised", thp ? "thp" : "4k",
                      hg ? "" : " not");
        guild_arena_destroy(&b);
        guild_arena_destroy(&a);
    }
}
END_TEST

static uint64_t faults_now(void)
{
    struct rusage ru;
    ck_assert_int_eq(getrusage(RUSAGE_SELF, &ru), 0);
    return (uint64_t)ru.ru_minflt + (uint64_t)ru.ru_majflt;
}

/* guild_arena_populate maps a region's pages into the process: reading and writing them afterwards faults
 * (almost) never, where the same accesses on a fresh mapping fault once a page; the contents stay. Through a
 * writable and a read-only attachment, in a child (a fresh address space, as a worker's). */
START_TEST(test_arena_populate)
{
    const size_t bytes = 8 << 20, pages = bytes / 4096;
    guild_arena_t *a = make_arena(bytes, NULL);
    size_t rs = 0;
    uint8_t *r = guild_arena_region(a, GUILD_ARENA_KIND_TEST, 0, &rs);
    for (size_t i = 0; i < rs; i += 4096)
        r[i] = (uint8_t)(i / 4096 * 13 + 1);
    guild_arena_publish(a);
    for (int ro = 0; ro < 2; ro++) {
        fflush(NULL);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            guild_err_t err = {{0}};
            for (int populate = 0; populate < 2; populate++) {
                guild_arena_t *b = ro ? guild_arena_attach_readonly(guild_arena_name(a), NULL, &err)
                                      : guild_arena_attach(guild_arena_name(a), NULL, &err);
                if (!b)
                    _exit(10);
                size_t n = 0;
                uint8_t *q = guild_arena_region(b, GUILD_ARENA_KIND_TEST, 0, &n);
                if (populate)
                    guild_arena_populate(b, q, n);
                const uint64_t f0 = faults_now();
                unsigned bad = 0;
                for (size_t i = 0; i < n; i += 4096) {
                    bad += q[i] != (uint8_t)(i / 4096 * 13 + 1);
                    if (!ro)
                        q[i] = (uint8_t)(i / 4096 * 13 + 1); /* the same byte: a write access */
                }
                const uint64_t faults = faults_now() - f0;
                if (bad)
                    _exit(11);
                /* fresh: a fault at least every 16 pages (fault-around maps up to 16 on a read); populated: none
                 * but a stray one */
                if (!populate && faults < pages / 16 / 2)
                    _exit(12);
                if (populate && faults > 8)
                    _exit(13);
                guild_arena_destroy(&b);
            }
            _exit(0);
        }
        int st = 0;
        ck_assert_int_eq(waitpid(pid, &st, 0), pid);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s attachment: child status %d (11: contents changed, "
                      "12: a fresh mapping did not fault, 13: a populated one did)", ro ? "read-only" : "writable",
                      WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    }
    guild_arena_destroy(&a);
}
END_TEST

/* A scratch directory on tmpfs for named arenas. */
static char shm_dir[64];

static void shm_dir_setup(void)
{
    snprintf(shm_dir, sizeof shm_dir, "/dev/shm/guild-check-ipc-XXXXXX");
    if (!mkdtemp(shm_dir)) {
        snprintf(shm_dir, sizeof shm_dir, "/tmp/guild-check-ipc-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(shm_dir));
    }
}

static void shm_dir_teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", shm_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", shm_dir);
}

static int count_entries(const char *dir)
{
    char cmd[160];
    snprintf(cmd, sizeof cmd, "ls -1 '%s' | wc -l", dir);
    FILE *p = popen(cmd, "r");
    int n = -1;
    if (p) {
        if (fscanf(p, "%d", &n) != 1)
            n = -1;
        pclose(p);
    }
    return n;
}

START_TEST(test_arena_named_file_lifecycle)
{
    guild_arena_opts_t o = {GUILD_ARENA_PAGES_HUGETLB, 0, shm_dir, 0, 0}; /* tmpfs: falls back past hugetlb */
    guild_arena_t *a = make_arena(5000, &o);
    ck_assert_int_ne(guild_arena_pages(a), GUILD_ARENA_PAGES_HUGETLB);
    char expect_prefix[128];
    snprintf(expect_prefix, sizeof expect_prefix, "%s/guild-arena-%d-", shm_dir, (int)getpid());
    ck_assert(!strncmp(guild_arena_name(a), expect_prefix, strlen(expect_prefix)));
    ck_assert_str_eq(guild_arena_name(a), guild_arena_path(a));
    guild_arena_publish(a);
    char path[GUILD_ARENA_NAME_MAX];
    snprintf(path, sizeof path, "%s", guild_arena_path(a));
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0600);

    /* a forked child's handle must not remove the creator's file */
    pid_t pid = fork();
    if (pid == 0) {
        guild_arena_destroy(&a);
        _exit(0);
    }
    ck_assert_int_eq(ipc_test_wait(pid), 0);
    ck_assert_int_eq(stat(path, &st), 0);

    /* attach by the file name, then unlink early: attaching continues through /proc */
    guild_err_t err = {{0}};
    guild_arena_t *b = guild_arena_attach(path, NULL, &err);
    ck_assert_msg(b, "%s", err.msg);
    guild_arena_destroy(&b);
    ck_assert_int_eq(guild_arena_unlink(a, &err), 0);
    ck_assert_int_ne(stat(path, &st), 0);
    ck_assert(!strncmp(guild_arena_name(a), "/proc/", 6));
    b = guild_arena_attach(guild_arena_name(a), NULL, &err);
    ck_assert_msg(b, "%s", err.msg);
    guild_arena_destroy(&b);
    guild_arena_destroy(&a);
    ck_assert_int_eq(count_entries(shm_dir), 0);

    /* destroy without an early unlink removes the file too */
    a = make_arena(5000, &o);
    snprintf(path, sizeof path, "%s", guild_arena_path(a));
    guild_arena_destroy(&a);
    ck_assert_int_ne(stat(path, &st), 0);
}
END_TEST

/* Writes a file that looks like an arena of `pid` with the given recorded start time. */
static void fake_arena(const char *dir, pid_t pid, uint64_t tag, uint64_t start, char *path, size_t n)
{
    snprintf(path, n, "%s/guild-arena-%d-%016llx", dir, (int)pid, (unsigned long long)tag);
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    ck_assert_int_ge(fd, 0);
    guild_arena_header_t h;
    memset(&h, 0, sizeof h);
    h.magic = GUILD_ARENA_MAGIC;
    h.layout_version = GUILD_ARENA_LAYOUT_VERSION;
    h.header_size = sizeof h;
    h.total_size = 4096;
    h.tag = tag;
    h.owner_pid = pid;
    h.owner_start = start;
    ck_assert_int_eq(pwrite(fd, &h, sizeof h, 0), (ssize_t)sizeof h);
    close(fd);
}

static uint64_t start_time_of(pid_t pid)
{
    proc_stat_t st;
    ck_assert_int_eq(proc_stat_read(pid, &st), 0);
    return st.start_time;
}

START_TEST(test_proc_stat_parse)
{
    /* the command name may hold spaces and parentheses: fields count from its last ')' */
    const char *line = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 17 5 0 0 20 0 1 0 98765 1000 10 "
                       "18446744073709551615\n";
    proc_stat_t st;
    ck_assert_int_eq(proc_stat_parse(line, &st), 0);
    ck_assert_int_eq(st.state, 'S');
    ck_assert_uint_eq(st.cpu_ticks, 22);
    ck_assert_uint_eq(st.start_time, 98765);
    ck_assert_int_eq(proc_stat_parse("4242 (a) S 1 2 3", &st), -1); /* cut short */
    ck_assert_int_eq(proc_stat_parse("no parenthesis here", &st), -1);
    ck_assert_int_eq(proc_stat_parse("1 (x)", &st), -1);
    /* busy: CPU time advanced, or in the kernel uninterruptibly; not a sleeper without CPU time, not a zombie */
    proc_stat_t a = {'S', 10, 5}, b = {'S', 10, 5}, c = {'R', 11, 5}, d = {'D', 10, 5}, zz = {'Z', 12, 5};
    ck_assert(!proc_stat_busy(&a, &b));
    ck_assert(proc_stat_busy(&a, &c));
    ck_assert(proc_stat_busy(&a, &d));
    ck_assert(!proc_stat_busy(&a, &zz));
}
END_TEST

START_TEST(test_proc_stat_read)
{
    proc_stat_t self, later, z;
    ck_assert_int_eq(proc_stat_read(getpid(), &self), 0);
    ck_assert_int_eq(self.state, 'R'); /* the reading thread runs */
    ck_assert_uint_gt(self.start_time, 0);
    /* spin for ~50 ms of CPU time: the ticks (100 a second) advance */
    struct timespec t0, t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
    volatile uint64_t x = 0;
    do {
        for (int i = 0; i < 100000; i++)
            x += (uint64_t)i;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 50000000L);
    ck_assert_int_eq(proc_stat_read(getpid(), &later), 0);
    ck_assert_uint_gt(later.cpu_ticks, self.cpu_ticks);
    ck_assert_uint_eq(later.start_time, self.start_time);
    /* a child that exited and is not reaped yet: a zombie */
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        _exit(0);
    int ok = 0;
    for (int i = 0; i < 500 && !ok; i++) {
        ok = proc_stat_read(pid, &z) == 0 && z.state == 'Z';
        if (!ok)
            usleep(2000);
    }
    ck_assert_msg(ok, "the exited child never read as a zombie");
    /* watched: busy at the first look and in between looks; a zombie then is not */
    proc_watch_t w = {0};
    ck_assert(proc_watch_busy(&w, pid, 1000, 100));
    ck_assert(proc_watch_busy(&w, pid, 1050, 100));
    ck_assert(!proc_watch_busy(&w, pid, 1100, 100));
    proc_watch_t me = {0};
    ck_assert(proc_watch_busy(&me, getpid(), 1, 1));
    me.last.cpu_ticks = 0; /* pretend the last look saw none: this process has spent CPU time since */
    ck_assert(proc_watch_busy(&me, getpid(), 10, 1));
    ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
    ck_assert_int_eq(proc_stat_read(pid, &z), -1); /* reaped: gone */
}
END_TEST

START_TEST(test_arena_stale_cleanup)
{
    /* a "coordinator" that creates a named arena and dies by SIGKILL: no destructor runs */
    int pfd[2];
    ck_assert_int_eq(pipe(pfd), 0);
    pid_t dead = fork();
    if (dead == 0) {
        guild_arena_opts_t o = {GUILD_ARENA_PAGES_SMALL, 0, shm_dir, 0, 0};
        guild_err_t err;
        guild_arena_request_t req = {GUILD_ARENA_KIND_TEST, 0, 4096};
        guild_arena_t *a = guild_arena_create(&req, 1, &o, &err);
        if (!a)
            _exit(1);
        guild_arena_publish(a);
        char name[GUILD_ARENA_NAME_MAX] = {0};
        snprintf(name, sizeof name, "%s", guild_arena_path(a));
        if (write(pfd[1], name, sizeof name) != (ssize_t)sizeof name)
            _exit(2);
        raise(SIGKILL);
        _exit(3);
    }
    close(pfd[1]);
    char dead_path[GUILD_ARENA_NAME_MAX];
    ck_assert_int_eq(read(pfd[0], dead_path, sizeof dead_path), (ssize_t)sizeof dead_path);
    close(pfd[0]);
    ck_assert_int_eq(ipc_test_wait(dead), 128 + SIGKILL);
    struct stat st;
    ck_assert_int_eq(stat(dead_path, &st), 0); /* left behind by the crash */

    /* a live process, with an arena of its own and a file whose recorded start time is not its own (a pid
     * reused since the real owner died) */
    pid_t live = fork();
    if (live == 0) {
        pause();
        _exit(0);
    }
    char live_path[256], reused_path[256], other_path[256], own_path[256];
    fake_arena(shm_dir, live, 0x1111, start_time_of(live), live_path, sizeof live_path);
    fake_arena(shm_dir, live, 0x2222, start_time_of(live) + 12345, reused_path, sizeof reused_path);
    fake_arena(shm_dir, getpid(), 0x3333, start_time_of(getpid()), own_path, sizeof own_path);
    snprintf(other_path, sizeof other_path, "%s/guild-arena-notapid-0123", shm_dir);
    fclose(fopen(other_path, "w"));

    /* a restarted coordinator: creating its arena in the same directory sweeps the stale ones */
    guild_arena_opts_t o = {GUILD_ARENA_PAGES_SMALL, 0, shm_dir, 0, 0};
    guild_arena_t *a = make_arena(4096, &o);
    ck_assert_msg(stat(dead_path, &st) != 0, "stale arena of a dead owner survived");
    ck_assert_msg(stat(reused_path, &st) != 0, "stale arena of a reused pid survived");
    ck_assert_int_eq(stat(live_path, &st), 0);
    ck_assert_int_eq(stat(own_path, &st), 0);
    ck_assert_int_eq(stat(other_path, &st), 0);

    /* once the live owner dies, its arena is stale too */
    kill(live, SIGKILL);
    ipc_test_wait(live);
    int n = -1;
    guild_err_t err = {{0}};
    ck_assert_int_eq(guild_arena_remove_stale(shm_dir, &n, &err), 0);
    ck_assert_int_eq(n, 1);
    ck_assert_int_ne(stat(live_path, &st), 0);
    ck_assert_int_eq(stat(guild_arena_path(a), &st), 0);
    guild_arena_destroy(&a);

    ck_assert_int_eq(guild_arena_remove_stale("/nonexistent-dir", &n, &err), -1);
    ck_assert(strstr(err.msg, "/nonexistent-dir"));
}
END_TEST

START_TEST(test_arena_memfd_leaves_nothing_after_crash)
{
    /* a memfd arena has no name: a SIGKILLed creator leaves no file behind, and an attacher still holding
     * a mapping keeps the memory valid until it unmaps */
    int pfd[2], go[2];
    ck_assert_int_eq(pipe(pfd), 0);
    ck_assert_int_eq(pipe(go), 0);
    pid_t owner = fork();
    if (owner == 0) {
        guild_err_t err;
        guild_arena_request_t req = {GUILD_ARENA_KIND_TEST, 0, 4096};
        guild_arena_t *a = guild_arena_create(&req, 1, &small_opts, &err);
        if (!a)
            _exit(1);
        *(uint32_t *)guild_arena_region(a, GUILD_ARENA_KIND_TEST, 0, NULL) = 0xC0FFEE;
        guild_arena_publish(a);
        char name[GUILD_ARENA_NAME_MAX] = {0};
        snprintf(name, sizeof name, "%s", guild_arena_name(a));
        if (write(pfd[1], name, sizeof name) != (ssize_t)sizeof name)
            _exit(2);
        char c;
        if (read(go[0], &c, 1) != 1)
            _exit(3);
        raise(SIGKILL);
        _exit(4);
    }
    char name[GUILD_ARENA_NAME_MAX];
    ck_assert_int_eq(read(pfd[0], name, sizeof name), (ssize_t)sizeof name);
    guild_err_t err = {{0}};
    guild_arena_t *b = guild_arena_attach(name, NULL, &err);
    ck_assert_msg(b, "%s", err.msg);
    ck_assert_int_eq(write(go[1], "x", 1), 1);
    ck_assert_int_eq(ipc_test_wait(owner), 128 + SIGKILL);
    uint32_t *v = guild_arena_region(b, GUILD_ARENA_KIND_TEST, 0, NULL);
    ck_assert_uint_eq(*v, 0xC0FFEE);
    guild_arena_destroy(&b);
    /* the name is gone with its owner */
    ck_assert_ptr_null(guild_arena_attach(name, NULL, &err));
}
END_TEST

/* ---------------------------------------------------------------- doorbells */

/* Arena with n doorbells; returned through *dbs. */
static guild_arena_t *doorbell_arena(int n, guild_doorbell_t **dbs)
{
    guild_arena_t *a = make_arena((size_t)n * sizeof(guild_doorbell_t), NULL);
    *dbs = guild_arena_region(a, GUILD_ARENA_KIND_TEST, 0, NULL);
    for (int i = 0; i < n; i++)
        guild_doorbell_init(&(*dbs)[i]);
    guild_arena_publish(a);
    return a;
}

START_TEST(test_doorbell_ring_and_wait_in_process)
{
    guild_doorbell_t *db;
    guild_arena_t *a = doorbell_arena(1, &db);
    ck_assert_uint_eq((uintptr_t)db % 64, 0);
    ck_assert_uint_eq(guild_doorbell_load(db), 0);
    guild_doorbell_ring(db, 7);
    ck_assert_uint_eq(guild_doorbell_load(db), 7);
    guild_wait_policy_t p = {1000, 10 * MS};
    guild_wait_stats_t s = {0};
    uint64_t seen = 0;
    guild_err_t err = {{0}};
    ck_assert_int_eq(guild_doorbell_wait(db, 5, &p, &seen, &s, "db", &err), GUILD_WAIT_OK);
    ck_assert_uint_eq(seen, 7);
    ck_assert_int_eq(guild_doorbell_wait(db, 7, &p, &seen, &s, "db", &err), GUILD_WAIT_OK);
    ck_assert_uint_eq(s.waits, 2);
    ck_assert_uint_eq(s.sleeps, 0);
    guild_arena_destroy(&a);
}
END_TEST

START_TEST(test_doorbell_timeout)
{
    guild_doorbell_t *db;
    guild_arena_t *a = doorbell_arena(1, &db);
    guild_doorbell_ring(db, 3);
    guild_wait_stats_t s = {0};
    guild_err_t err = {{0}};
    uint64_t seen = 0;
    /* spin-then-futex, futex only, spin only: each gives up at its deadline */
    guild_wait_policy_t policies[] = {{2 * MS, 60 * MS}, {0, 60 * MS}, {60 * MS, 60 * MS}};
    for (int i = 0; i < 3; i++) {
        uint64_t t0 = guild_now_ns();
        ck_assert_int_eq(guild_doorbell_wait(db, 4, &policies[i], &seen, &s, "test bell", &err),
                         GUILD_WAIT_TIMEOUT);
        uint64_t dt = guild_now_ns() - t0;
        ck_assert_msg(dt >= 60 * MS && dt < 1000 * MS, "policy %d: waited %llu ns", i, (unsigned long long)dt);
        ck_assert_uint_eq(seen, 3);
        ck_assert_msg(strstr(err.msg, "test bell: timed out") && strstr(err.msg, "seq >= 4") &&
                      strstr(err.msg, "last seen 3"), "message: %s", err.msg);
    }
    ck_assert_uint_eq(s.timeouts, 3);
    ck_assert_uint_ge(s.sleeps, 2);
    ck_assert_uint_eq(db->waiters, 0);
    guild_arena_destroy(&a);
}
END_TEST

START_TEST(test_doorbell_futex_sleep_and_wake_across_processes)
{
    guild_doorbell_t *db;
    guild_arena_t *a = doorbell_arena(1, &db);
    pid_t pid = fork();
    if (pid == 0) {
        guild_wait_policy_t p = {0, 5000 * MS}; /* sleep at once */
        guild_wait_stats_t s = {0};
        uint64_t seen = 0;
        guild_wait_result_t r = guild_doorbell_wait(db, 1, &p, &seen, &s, "db", NULL);
        if (r != GUILD_WAIT_OK)
            _exit(10);
        if (seen != 1)
            _exit(11);
        _exit(s.sleeps >= 1 ? 0 : 12);
    }
    /* the waiter announces itself before sleeping; ring only once it has */
    uint64_t t0 = guild_now_ns();
    while (atomic_load(&db->waiters) == 0 && guild_now_ns() - t0 < 3000 * MS)
        usleep(1000);
    ck_assert_uint_eq(atomic_load(&db->waiters), 1);
    usleep(20000); /* let it reach the futex */
    uint64_t t1 = guild_now_ns();
    guild_doorbell_ring(db, 1);
    ck_assert_int_eq(ipc_test_wait(pid), 0);
    ck_assert_msg(guild_now_ns() - t1 < 1000 * MS, "the wake took too long");
    ck_assert_uint_eq(atomic_load(&db->waiters), 0);
    guild_arena_destroy(&a);
}
END_TEST

START_TEST(test_doorbell_dead_peer_is_a_timeout)
{
    guild_doorbell_t *db;
    guild_arena_t *a = doorbell_arena(2, &db);
    /* ping-pong with a peer that dies after 10 rounds: the next wait returns a timeout, never hangs */
    pid_t pid = fork();
    if (pid == 0) {
        guild_wait_policy_t p = {10000, 5000 * MS};
        for (uint64_t s = 1; s <= 10; s++) {
            if (guild_doorbell_wait(&db[0], s, &p, NULL, NULL, "ping", NULL) != GUILD_WAIT_OK)
                _exit(10);
            guild_doorbell_ring(&db[1], s);
        }
        raise(SIGKILL);
    }
    guild_wait_policy_t p = {10000, 200 * MS};
    guild_err_t err = {{0}};
    uint64_t s;
    guild_wait_result_t r = GUILD_WAIT_OK;
    for (s = 1; s <= 11 && r == GUILD_WAIT_OK; s++) {
        guild_doorbell_ring(&db[0], s);
        r = guild_doorbell_wait(&db[1], s, &p, NULL, NULL, "pong", &err);
    }
    ck_assert_int_eq(r, GUILD_WAIT_TIMEOUT);
    ck_assert_uint_eq(s - 1, 11);
    ck_assert(strstr(err.msg, "pong: timed out"));
    ck_assert_int_eq(ipc_test_wait(pid), 128 + SIGKILL);
    guild_arena_destroy(&a);
}
END_TEST

START_TEST(test_doorbell_ping_pong_no_lost_steps)
{
    /* lockstep round trips, spin then futex; both sides check they see exactly the expected value (the
     * millions-of-rounds version is tests/ipc_stress) */
    enum { ROUNDS = 20000 };
    guild_doorbell_t *db;
    guild_arena_t *a = doorbell_arena(2, &db);
    pid_t pid = fork();
    if (pid == 0) {
        guild_wait_policy_t p = {20000, 5000 * MS};
        for (uint64_t s = 1; s <= ROUNDS; s++) {
            uint64_t seen;
            if (guild_doorbell_wait(&db[0], s, &p, &seen, NULL, "ping", NULL) != GUILD_WAIT_OK)
                _exit(10);
            if (seen != s)
                _exit(11);
            guild_doorbell_ring(&db[1], s);
        }
        _exit(0);
    }
    guild_wait_policy_t p = {20000, 5000 * MS};
    guild_err_t err = {{0}};
    for (uint64_t s = 1; s <= ROUNDS; s++) {
        guild_doorbell_ring(&db[0], s);
        uint64_t seen;
        ck_assert_int_eq(guild_doorbell_wait(&db[1], s, &p, &seen, NULL, "pong", &err), GUILD_WAIT_OK);
        if (seen != s)
            ck_abort_msg("round %llu: saw %llu", (unsigned long long)s, (unsigned long long)seen);
    }
    ck_assert_int_eq(ipc_test_wait(pid), 0);
    guild_arena_destroy(&a);
}
END_TEST

START_TEST(test_doorbell_wait_all)
{
    enum { N = 3 };
    guild_doorbell_t *db;
    guild_arena_t *a = doorbell_arena(N, &db);
    pid_t pids[N];
    for (int k = 0; k < N; k++) {
        pids[k] = fork();
        if (pids[k] == 0) {
            usleep((useconds_t)(30000 * (N - k))); /* the last one first */
            guild_doorbell_ring(&db[k], 5);
            _exit(0);
        }
    }
    guild_wait_policy_t p = {1000, 5000 * MS};
    guild_wait_stats_t s = {0};
    guild_err_t err = {{0}};
    ck_assert_int_eq(guild_doorbell_wait_all(db, N, 5, &p, &s, "done", &err), GUILD_WAIT_OK);
    for (int k = 0; k < N; k++) {
        ck_assert_uint_eq(guild_doorbell_load(&db[k]), 5);
        ck_assert_int_eq(ipc_test_wait(pids[k]), 0);
    }
    /* one counter short: a single deadline for the set, and the message names it */
    guild_doorbell_ring(&db[0], 6);
    guild_doorbell_ring(&db[2], 6);
    guild_wait_policy_t q = {1000, 50 * MS};
    uint64_t t0 = guild_now_ns();
    ck_assert_int_eq(guild_doorbell_wait_all(db, N, 6, &q, &s, "done", &err), GUILD_WAIT_TIMEOUT);
    ck_assert(guild_now_ns() - t0 < 500 * MS);
    ck_assert_msg(strstr(err.msg, "done[1]"), "%s", err.msg);
    guild_arena_destroy(&a);
}
END_TEST

/* ---------------------------------------------------------------- exchange */

/* An expert store (ipc/expert_store.h) in a lazily allocated arena: the creator lays it out, a child process
 * (the CPU worker) fills entries and publishes, a read-only attacher (the GPU worker) waits for the publication
 * and reads the entries; shapes and entries outside the copies are refused; an unpublished store times out. */
START_TEST(test_expert_store)
{
    enum { NL = 3, NE = 4 };
    const uint64_t data = 1 << 20;
    guild_err_t err = {{0}};
    const guild_arena_request_t req = {EXPERT_STORE_ARENA_KIND, 0, expert_store_memsize(NL, NE, data)};
    guild_arena_opts_t o = {GUILD_ARENA_PAGES_THP, 0, NULL, 1, 0};
    guild_arena_t *a = guild_arena_create(&req, 1, &o, &err);
    ck_assert_msg(a != NULL, "%s", err.msg);
    size_t rs = 0;
    void *r = guild_arena_region(a, EXPERT_STORE_ARENA_KIND, 0, &rs);
    ck_assert_int_eq(expert_store_init(r, rs, NL, NE, data, &err), 0);
    ck_assert_int_eq(expert_store_init(r, 100, NL, NE, data, &err), -1);
    guild_arena_publish(a);
    guild_arena_expect_t ex = {guild_arena_tag(a), guild_arena_size(a)};
    char name[GUILD_ARENA_NAME_MAX];
    snprintf(name, sizeof name, "%s", guild_arena_name(a));

    guild_arena_t *ro = guild_arena_attach_readonly(name, &ex, &err);
    ck_assert_msg(ro != NULL, "%s", err.msg);
    expert_store_t v;
    ck_assert_int_eq(expert_store_attach(&v, guild_arena_region(ro, EXPERT_STORE_ARENA_KIND, 0, NULL), rs, NL, NE,
                                         &err), 0);
    ck_assert(!expert_store_published(&v));
    ck_assert_int_eq(expert_store_wait(&v, 5000000, NULL, NULL, &err), -1);
    ck_assert_msg(strstr(err.msg, "not filled"), "%s", err.msg);
    ck_assert_int_eq(expert_store_attach(&v, guild_arena_region(ro, EXPERT_STORE_ARENA_KIND, 0, NULL), rs, NL + 1,
                                         NE, &err), -1);
    ck_assert_msg(strstr(err.msg, "the model has 4 x 4"), "%s", err.msg);

    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        guild_err_t e2 = {{0}};
        guild_arena_t *b = guild_arena_attach(name, &ex, &e2);
        expert_store_t w;
        if (!b || expert_store_attach(&w, guild_arena_region(b, EXPERT_STORE_ARENA_KIND, 0, NULL), rs, NL, NE,
                                      &e2) < 0)
            _exit(10);
        char *d = expert_store_data(&w);
        const uint64_t d0 = (uint64_t)(d - w.base);
        for (int l = 0; l < NL; l++)
            for (int x = 0; x < NE; x++) {
                expert_store_entry_t *en = expert_store_entry(&w, l, x);
                const uint64_t at = d0 + (uint64_t)(l * NE + x) * 3000;
                *en = (expert_store_entry_t){at, at + 1000, at + 2000, 10, 10, 10, (uint32_t)(x & 7)};
                memset(d + (at - d0), l * NE + x + 1, 3000);
            }
        expert_store_publish(&w);
        guild_arena_destroy(&b);
        _exit(0);
    }
    ck_assert_int_eq(ipc_test_wait(pid), 0);
    ck_assert_int_eq(expert_store_attach(&v, guild_arena_region(ro, EXPERT_STORE_ARENA_KIND, 0, NULL), rs, NL, NE,
                                         &err), 0);
    ck_assert_int_eq(expert_store_wait(&v, 1000000000, NULL, NULL, &err), 0);
    const uint64_t len[3] = {1000, 1000, 1000}, big[3] = {1000, 1000, data};
    for (int l = 0; l < NL; l++)
        for (int x = 0; x < NE; x++) {
            const expert_store_entry_t *en = expert_store_entry(&v, l, x);
            ck_assert_int_eq(expert_store_check_entry(&v, en, len, &err), 0);
            ck_assert_uint_eq(en->flags, (uint32_t)(x & 7));
            ck_assert_uint_eq((uint8_t)v.base[en->down + 999], (uint8_t)(l * NE + x + 1));
        }
    ck_assert_int_eq(expert_store_check_entry(&v, expert_store_entry(&v, 2, 3), big, &err), -1);
    ck_assert_msg(strstr(err.msg, "outside the copies"), "%s", err.msg);
    guild_arena_destroy(&ro);
    guild_arena_destroy(&a);
}
END_TEST

START_TEST(test_exchange_shape_and_validation)
{
    guild_exchange_shape_t ok = {4, 64, 2, 2, 3, 2};
    size_t need = guild_exchange_memsize(&ok);
    ck_assert_uint_gt(need, 0);
    guild_exchange_shape_t bad[] = {
        {0, 64, 2, 2, 3, 0}, {4, 0, 2, 2, 3, 0}, {4, 64, 0, 2, 3, 0}, {4, 64, 2, 0, 3, 0}, {4, 64, 2, 2, 0, 0},
        {4, 64, 2, 2, GUILD_EXCHANGE_MAX_WORKERS + 1, 0}, {4, 64, 2, GUILD_EXCHANGE_MAX_SLOTS + 1, 3, 0},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_uint_eq(guild_exchange_memsize(&bad[i]), 0);

    guild_arena_t *a = make_arena(need, NULL);
    size_t rsize;
    void *r = guild_arena_region(a, GUILD_ARENA_KIND_TEST, 0, &rsize);
    guild_err_t err = {{0}};
    ck_assert_int_eq(guild_exchange_init(r, need - 1, &ok, &err), -1);
    ck_assert(strstr(err.msg, "needs"));
    ck_assert_int_eq(guild_exchange_init(r, rsize, &bad[0], &err), -1);
    ck_assert(strstr(err.msg, "invalid shape"));
    ck_assert_ptr_null(guild_exchange_attach(r, rsize, &err)); /* nothing laid there yet */
    ck_assert(strstr(err.msg, "bad magic"));
    ck_assert_int_eq(guild_exchange_init(r, rsize, &ok, &err), 0);
    guild_exchange_t *x = guild_exchange_attach(r, rsize, &err);
    ck_assert_msg(x, "%s", err.msg);
    const guild_exchange_shape_t *s = guild_exchange_shape(x);
    ck_assert(s->max_tokens == 4 && s->n_embd == 64 && s->n_used == 2 && s->n_slots == 2 && s->n_workers == 3 &&
              s->n_prefetch == 2);
    ck_assert_uint_eq(guild_exchange_step(x), 0);
    ck_assert_uint_eq(guild_exchange_done(x, 2), 0);
    /* every doorbell on its own lines */
    ck_assert_uint_eq((uintptr_t)guild_exchange_step_doorbell(x) % 64, 0);
    ck_assert_int_eq((char *)guild_exchange_done_doorbell(x, 1) - (char *)guild_exchange_done_doorbell(x, 0),
                     (int)sizeof(guild_doorbell_t));
    ck_assert_ptr_null(guild_exchange_attach(r, need - 4096 * 2, &err)); /* region shorter than the shape */
    guild_exchange_slot_t slot;
    guild_wait_policy_t p = {0, 10 * MS};
    ck_assert_int_eq(guild_exchange_begin(x, 1, &p, &slot, NULL, &err), GUILD_WAIT_OK);
    ck_assert_int_eq(slot.n_tokens, 4);
    /* the layout accessor (exchange_layout.h, what the device computes its addresses with) finds the doorbells
     * and every slot's arrays where the host handle has them */
    const guild_exchange_layout_t *l = guild_exchange_layout(x);
    char *base = guild_exchange_base(x);
    ck_assert_ptr_eq(base, r);
    ck_assert_ptr_eq(base + l->step_off, (char *)&guild_exchange_step_doorbell(x)->seq);
    for (uint32_t k = 0; k < 3; k++)
        ck_assert_ptr_eq(base + guild_exchange_done_at(l, k), (char *)&guild_exchange_done_doorbell(x, (int)k)->seq);
    char *s1 = base + guild_exchange_slot_at(l, 1);
    ck_assert_ptr_eq((char *)slot.x, s1 + l->x_off);
    ck_assert_ptr_eq((char *)slot.ids, s1 + l->ids_off);
    ck_assert_ptr_eq((char *)slot.y, s1 + l->y_off);
    ck_assert_ptr_eq(base + guild_exchange_slot_at(l, 2), s1 + l->slot_stride);
    ck_assert_ptr_eq(base + guild_exchange_slot_at(l, 3), s1); /* two slots: a ring */
    ck_assert_uint_eq(l->total, need);
    ck_assert_uint_ge(l->y_off, l->ids_off + 4 * 2 * sizeof(int32_t));
    ck_assert_uint_ge(l->slot_stride, l->y_off + 4 * 2 * 64 * sizeof(float));
    ck_assert_int_eq(guild_exchange_publish(x, 1, 5, 0, &err), -1);
    ck_assert(strstr(err.msg, "5 tokens"));
    ck_assert_int_eq(guild_exchange_publish(x, 1, -1, 0, &err), -1);
    /* a slot whose header does not hold the awaited exchange is an error for the worker, not garbage */
    ck_assert_int_eq(guild_exchange_publish(x, 1, 2, 7, &err), 0);
    ck_assert_int_eq(guild_exchange_wait_step(x, 1, &p, &slot, NULL, &err), GUILD_WAIT_OK);
    ck_assert(slot.seq == 1 && slot.n_tokens == 2 && slot.layer == 7);
    ((guild_exchange_slot_header_t *)(void *)((char *)slot.x - sizeof(guild_exchange_slot_header_t)))->seq = 99;
    ck_assert_int_eq(guild_exchange_wait_step(x, 1, &p, &slot, NULL, &err), GUILD_WAIT_ERROR);
    ck_assert_msg(strstr(err.msg, "holds exchange 99"), "%s", err.msg);
    /* prefetch hints: none until the dense side hangs one on the exchange; then the ids (cut to the header's room,
     * bad ones as -1) and the layer; a hint of another exchange (the slot's previous use) is none */
    int32_t hl = -5, hid[GUILD_EXCHANGE_HINT_MAX + 4];
    ck_assert_int_eq(guild_exchange_take_hint(x, 1, &hl, hid), 0);
    ck_assert_int_eq(hl, -5);
    int32_t many[GUILD_EXCHANGE_HINT_MAX + 4];
    for (int i = 0; i < (int)GUILD_EXCHANGE_HINT_MAX + 4; i++)
        many[i] = i == 3 ? -7 : i == 4 ? 70000 : 100 + i;
    guild_exchange_hint(x, 1, 8, (int32_t)GUILD_EXCHANGE_HINT_MAX + 4, many);
    ck_assert_int_eq(guild_exchange_take_hint(x, 1, &hl, hid), (int)GUILD_EXCHANGE_HINT_MAX);
    ck_assert_int_eq(hl, 8);
    for (int i = 0; i < (int)GUILD_EXCHANGE_HINT_MAX; i++)
        ck_assert_int_eq(hid[i], i == 3 || i == 4 ? -1 : 100 + i);
    ck_assert_int_eq(guild_exchange_take_hint(x, 3, &hl, hid), 0); /* the same slot, a later exchange */
    /* slot 3 reuses slot 1's memory: begin must wait for every worker to finish exchange 1 */
    ck_assert_int_eq(guild_exchange_begin(x, 3, &p, &slot, NULL, &err), GUILD_WAIT_TIMEOUT);
    for (int k = 0; k < 3; k++)
        guild_exchange_complete(x, k, 1);
    ck_assert_int_eq(guild_exchange_begin(x, 3, &p, &slot, NULL, &err), GUILD_WAIT_OK);
    guild_exchange_destroy(&x);
    ck_assert_ptr_null(x);
    guild_arena_destroy(&a);
}
END_TEST

/* The hint's pick (guild_exchange_hint_pick, the host's and the device's): up to 4 tokens, each token's first
 * `per` ids >= 0, rank-major, an expert taken once, cut at the header's room; more tokens (a batched step), the
 * `per` experts the most rows hold, ties rank-major. */
START_TEST(test_exchange_hint_pick)
{
    int32_t out[GUILD_EXCHANGE_HINT_MAX];
    /* one token: its first 3 in router order; the GPU's (-1) skipped, the next ones take their place */
    const int32_t one[8] = {5, -1, 9, -1, 2, 7, 1, 3};
    ck_assert_int_eq(guild_exchange_hint_pick(1, 8, 3, one, out), 3);
    ck_assert(out[0] == 5 && out[1] == 9 && out[2] == 2);
    ck_assert_int_eq(guild_exchange_hint_pick(1, 8, 20, one, out), 6); /* more than it has: every id >= 0 */
    ck_assert(out[3] == 7 && out[4] == 1 && out[5] == 3);
    /* three tokens, rank-major: 4, 6, 1 (rank 0); 8, 2 (rank 1: token 2's 4 is taken); 0 (rank 2: token 1 has
     * no third, token 2's third, 1, is taken); nothing more at rank 3 */
    const int32_t three[12] = {4, 8, 0, -1, 6, -1, 2, -1, 1, 4, -1, 1};
    ck_assert_int_eq(guild_exchange_hint_pick(3, 4, 2, three, out), 5);
    const int32_t want[6] = {4, 6, 1, 8, 2, 0};
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(out[i], want[i]);
    for (int per = 3; per <= 4; per++) {
        ck_assert_int_eq(guild_exchange_hint_pick(3, 4, per, three, out), 6);
        for (int i = 0; i < 6; i++)
            ck_assert_int_eq(out[i], want[i]);
    }
    /* every predicted expert the GPU's: nothing; no tokens: nothing */
    const int32_t gone[4] = {-1, -1, -1, -1};
    ck_assert_int_eq(guild_exchange_hint_pick(2, 2, 2, gone, out), 0);
    ck_assert_int_eq(guild_exchange_hint_pick(0, 2, 2, gone, out), 0);
    /* more than the room: cut at GUILD_EXCHANGE_HINT_MAX, the best ranks first */
    int32_t big[6 * 8];
    for (int t = 0; t < 4; t++)
        for (int k = 0; k < 8; k++)
            big[t * 8 + k] = 10 * t + k;
    ck_assert_int_eq(guild_exchange_hint_pick(4, 8, 5, big, out), (int)GUILD_EXCHANGE_HINT_MAX);
    for (int i = 0; i < (int)GUILD_EXCHANGE_HINT_MAX; i++)
        ck_assert_int_eq(out[i], 10 * (i % 4) + i / 4);
    /* a batched step (5 tokens and more), every expert in one row: `per` of them, rank-major */
    for (int t = 0; t < 6; t++)
        for (int k = 0; k < 8; k++)
            big[t * 8 + k] = 10 * t + k;
    ck_assert_int_eq(guild_exchange_hint_pick(6, 8, 4, big, out), 4);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(out[i], 10 * i);
    ck_assert_int_eq(guild_exchange_hint_pick(6, 8, 8, big, out), 8);
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(out[i], 10 * (i % 6) + i / 6);
    /* ... shared experts first by their rows: 7 in 4 rows, 3 in 3, then 9 and 5 in 2 each (9 first rank-major:
     * token 2's best, where 5 is token 0's second), the GPU's (-1) never */
    const int32_t five[5 * 4] = {
        1, 5, 7, -1, /* token 0 */
        7, 3, 2, 8,  /* token 1 */
        9, 7, 3, 5,  /* token 2 */
        7, 9, 3, -1, /* token 3 */
        4, 6, 0, 11, /* token 4 */
    };
    ck_assert_int_eq(guild_exchange_hint_pick(5, 4, 4, five, out), 4);
    const int32_t want5[4] = {7, 3, 9, 5};
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(out[i], want5[i]);
    /* at most the room, however many asked; no more than the experts there are */
    ck_assert_int_eq(guild_exchange_hint_pick(5, 4, 2, five, out), 2);
    ck_assert(out[0] == 7 && out[1] == 3);
    const int32_t few[5 * 2] = {1, -1, 1, -1, 2, 1, -1, -1, 2, -1};
    ck_assert_int_eq(guild_exchange_hint_pick(5, 2, 2, few, out), 2);
    ck_assert(out[0] == 1 && out[1] == 2);
    int32_t all[16 * 8];
    for (int q = 0; q < 16 * 8; q++)
        all[q] = q;
    ck_assert_int_eq(guild_exchange_hint_pick(16, 8, 8, all, out), 8);
    ck_assert_int_eq(guild_exchange_hint_pick(16, 8, 40, all, out), (int)GUILD_EXCHANGE_HINT_MAX);
    ck_assert_int_eq(guild_exchange_hint_pick(16, 2, 8, all, out), 8); /* a batched count is not per token */
    /* the count the engine asks for: --prefetch-experts a token in a few tokens' step, the batch rule's beyond */
    ck_assert_int_eq(guild_exchange_hint_per(1, 4), 4);
    ck_assert_int_eq(guild_exchange_hint_per((int32_t)GUILD_EXCHANGE_HINT_RANK_TOKENS, 3), 3);
    ck_assert_int_eq(guild_exchange_hint_per((int32_t)GUILD_EXCHANGE_HINT_RANK_TOKENS + 1, 3),
                     (int)GUILD_EXCHANGE_HINT_BATCH);
    ck_assert_int_eq(guild_exchange_hint_per(16, 0), 0);
    ck_assert_int_eq(guild_exchange_hint_per(1, 0), 0);
    /* the device's way (every entry's rows counted first, then kept in order) is the host's */
    int32_t rows[5 * 4], dev[GUILD_EXCHANGE_HINT_MAX];
    for (int i = 0; i < 5 * 4; i++)
        rows[i] = guild_exchange_hint_rows(5, 4, five, i);
    ck_assert_int_eq(rows[1], 4); /* token 1's best, 7: its first entry rank-major, in 4 rows */
    ck_assert_int_eq(rows[3], 0); /* token 3's best, 7 again */
    ck_assert_int_eq(guild_exchange_hint_pick_batch(5, 4, 4, five, rows, dev), 4);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(dev[i], want5[i]);
}
END_TEST

/* The round trip: a dense side (this process) and K worker processes. Deterministic inputs; worker k owns
 * experts e with e * K / N_EXPERT == k; an "expert" is a cheap deterministic float function. The combined
 * output must be bit-identical for K = 1, 2, 3 and equal to the same computation done in-process. */
enum { RT_EXCHANGES = 40, RT_LAYERS = 4, RT_EXPERTS = 16, RT_TOKENS = 5, RT_EMBD = 48, RT_USED = 3 };

static float rt_expert(int layer, int e, float v, int i)
{
    return v * (1.0f + 0.03125f * (float)e) - 0.25f * (float)layer + 0.001f * (float)i;
}

static uint32_t rt_rand(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static void rt_fill(uint64_t seq, int *n_tokens, int *layer, float *x, int32_t *ids, float *w)
{
    uint32_t s = (uint32_t)seq * 2654435761u;
    *n_tokens = 1 + (int)(rt_rand(&s) % RT_TOKENS);
    *layer = (int)((seq - 1) % RT_LAYERS);
    for (int t = 0; t < *n_tokens; t++) {
        for (int i = 0; i < RT_EMBD; i++)
            x[t * RT_EMBD + i] = (float)(int)(rt_rand(&s) % 2001 - 1000) / 373.0f;
        float sum = 0;
        for (int j = 0; j < RT_USED; j++) {
            int e;
            int dup;
            do { /* distinct experts per token, like a top-k */
                e = (int)(rt_rand(&s) % RT_EXPERTS);
                dup = 0;
                for (int q = 0; q < j; q++)
                    dup |= ids[t * RT_USED + q] == e;
            } while (dup);
            ids[t * RT_USED + j] = e;
            w[t * RT_USED + j] = (float)(1 + rt_rand(&s) % 100);
            sum += w[t * RT_USED + j];
        }
        for (int j = 0; j < RT_USED; j++)
            w[t * RT_USED + j] /= sum;
    }
}

/* out[t] = sum_j w[t][j] * y[t][j], in j order */
static void rt_combine(int n_tokens, const float *w, const float *y, float *out)
{
    for (int t = 0; t < n_tokens; t++)
        for (int i = 0; i < RT_EMBD; i++) {
            float acc = 0.0f;
            for (int j = 0; j < RT_USED; j++)
                acc += w[t * RT_USED + j] * y[((size_t)t * RT_USED + j) * RT_EMBD + i];
            out[t * RT_EMBD + i] = acc;
        }
}

static void rt_worker(guild_exchange_t *x, int k, int n_workers)
{
    guild_wait_policy_t p = {20000, 5000 * MS};
    for (uint64_t seq = 1; seq <= RT_EXCHANGES; seq++) {
        guild_exchange_slot_t s;
        if (guild_exchange_wait_step(x, seq, &p, &s, NULL, NULL) != GUILD_WAIT_OK)
            _exit(10);
        for (int t = 0; t < s.n_tokens; t++)
            for (int j = 0; j < RT_USED; j++) {
                int e = s.ids[t * RT_USED + j];
                if (e < 0 || e >= RT_EXPERTS)
                    _exit(11);
                if (e * n_workers / RT_EXPERTS != k)
                    continue;
                float *y = s.y + ((size_t)t * RT_USED + j) * RT_EMBD;
                for (int i = 0; i < RT_EMBD; i++)
                    y[i] = rt_expert(s.layer, e, s.x[t * RT_EMBD + i], i);
            }
        guild_exchange_complete(x, k, seq);
    }
    _exit(0);
}

/* Runs the round trip with n_workers processes and n_slots; writes every combined output to out
 * [RT_EXCHANGES][RT_TOKENS][RT_EMBD] (rows past n_tokens zero). */
static void rt_run(int n_workers, int n_slots, float *out)
{
    guild_exchange_shape_t shape = {RT_TOKENS, RT_EMBD, RT_USED, (uint32_t)n_slots, (uint32_t)n_workers, 0};
    guild_arena_request_t req = {GUILD_ARENA_KIND_EXCHANGE, 0, guild_exchange_memsize(&shape)};
    guild_err_t err = {{0}};
    guild_arena_t *a = guild_arena_create(&req, 1, &small_opts, &err);
    ck_assert_msg(a, "%s", err.msg);
    size_t rsize;
    void *r = guild_arena_region(a, GUILD_ARENA_KIND_EXCHANGE, 0, &rsize);
    ck_assert_int_eq(guild_exchange_init(r, rsize, &shape, &err), 0);
    guild_arena_publish(a);
    char name[GUILD_ARENA_NAME_MAX];
    snprintf(name, sizeof name, "%s", guild_arena_name(a));

    pid_t pids[8];
    for (int k = 0; k < n_workers; k++) {
        pids[k] = fork();
        ck_assert_int_ge(pids[k], 0);
        if (pids[k] == 0) {
            /* attach like a separately started worker: by name, validating the header */
            guild_arena_t *b = guild_arena_attach(name, NULL, NULL);
            if (!b)
                _exit(20);
            size_t bsize;
            void *br = guild_arena_region(b, GUILD_ARENA_KIND_EXCHANGE, 0, &bsize);
            guild_exchange_t *bx = br ? guild_exchange_attach(br, bsize, NULL) : NULL;
            if (!bx)
                _exit(21);
            rt_worker(bx, k, n_workers);
        }
    }
    guild_exchange_t *x = guild_exchange_attach(r, rsize, &err);
    ck_assert_msg(x, "%s", err.msg);
    guild_wait_policy_t p = {20000, 5000 * MS};
    memset(out, 0, sizeof(float) * RT_EXCHANGES * RT_TOKENS * RT_EMBD);
    int n_tok[RT_EXCHANGES + 1];
    static float w[RT_EXCHANGES + 1][RT_TOKENS * RT_USED]; /* the routing weights stay on the dense side */
    /* with more than one slot the dense side publishes exchange s+1 before collecting s: the ring's flow
     * control keeps it from overwriting a slot still in use */
    int ahead = n_slots > 1 ? 1 : 0;
    for (uint64_t seq = 1; seq <= RT_EXCHANGES + (uint64_t)ahead; seq++) {
        if (seq <= RT_EXCHANGES) {
            guild_exchange_slot_t s;
            ck_assert_int_eq(guild_exchange_begin(x, seq, &p, &s, NULL, &err), GUILD_WAIT_OK);
            int layer;
            rt_fill(seq, &n_tok[seq], &layer, s.x, s.ids, w[seq]);
            ck_assert_int_eq(guild_exchange_publish(x, seq, n_tok[seq], layer, &err), 0);
        }
        uint64_t collect = seq - (uint64_t)ahead;
        if (collect >= 1) {
            ck_assert_msg(guild_exchange_wait_done(x, collect, &p, NULL, &err) == GUILD_WAIT_OK, "%s", err.msg);
            guild_exchange_slot_t s;
            guild_exchange_view(x, collect, &s);
            ck_assert_int_eq(s.n_tokens, n_tok[collect]);
            rt_combine(s.n_tokens, w[collect], s.y, out + (collect - 1) * RT_TOKENS * RT_EMBD);
        }
    }
    for (int k = 0; k < n_workers; k++)
        ck_assert_int_eq(ipc_test_wait(pids[k]), 0);
    for (int k = 0; k < n_workers; k++)
        ck_assert_uint_eq(guild_exchange_done(x, k), RT_EXCHANGES);
    guild_exchange_destroy(&x);
    guild_arena_destroy(&a);
}

/* The same computation in one process, no exchange. */
static void rt_reference(float *out)
{
    static float x[RT_TOKENS * RT_EMBD], w[RT_TOKENS * RT_USED], y[RT_TOKENS * RT_USED * RT_EMBD];
    static int32_t ids[RT_TOKENS * RT_USED];
    memset(out, 0, sizeof(float) * RT_EXCHANGES * RT_TOKENS * RT_EMBD);
    for (uint64_t seq = 1; seq <= RT_EXCHANGES; seq++) {
        int n, layer;
        rt_fill(seq, &n, &layer, x, ids, w);
        for (int t = 0; t < n; t++)
            for (int j = 0; j < RT_USED; j++)
                for (int i = 0; i < RT_EMBD; i++)
                    y[((size_t)t * RT_USED + j) * RT_EMBD + i] =
                        rt_expert(layer, ids[t * RT_USED + j], x[t * RT_EMBD + i], i);
        rt_combine(n, w, y, out + (seq - 1) * RT_TOKENS * RT_EMBD);
    }
}

START_TEST(test_exchange_round_trip_bit_identical)
{
    static float ref[RT_EXCHANGES * RT_TOKENS * RT_EMBD], got[RT_EXCHANGES * RT_TOKENS * RT_EMBD];
    rt_reference(ref);
    double norm = 0;
    for (size_t i = 0; i < sizeof ref / sizeof ref[0]; i++)
        norm += fabs(ref[i]);
    ck_assert(norm > 1.0); /* the reference is not trivially zero */
    for (int workers = 1; workers <= 3; workers++)
        for (int slots = 1; slots <= 2; slots++) {
            rt_run(workers, slots, got);
            ck_assert_msg(!memcmp(ref, got, sizeof ref), "%d workers, %d slots: output differs", workers,
                          slots);
        }
}
END_TEST

int main(void)
{
    guild_log_init("check_ipc", GUILD_LOG_WARN);
    Suite *s = suite_create("ipc");

    TCase *tc = tcase_create("arena");
    tcase_add_test(tc, test_arena_create_attach_across_processes);
    tcase_add_test(tc, test_arena_mode_0600);
    tcase_add_test(tc, test_arena_validation_errors);
    tcase_add_test(tc, test_arena_bad_requests);
    tcase_add_test(tc, test_arena_memfd_leaves_nothing_after_crash);
    suite_add_tcase(s, tc);

    tc = tcase_create("arena_backing");
    tcase_add_test(tc, test_arena_level_small);
    tcase_add_test(tc, test_arena_level_thp);
    tcase_add_test(tc, test_arena_level_hugetlb_or_fallback);
    tcase_add_test(tc, test_arena_huge_only);
    tcase_add_test(tc, test_arena_attach_advises_thp);
    tcase_add_test(tc, test_arena_populate);
    suite_add_tcase(s, tc);

    tc = tcase_create("arena_named");
    tcase_add_checked_fixture(tc, shm_dir_setup, shm_dir_teardown);
    tcase_add_test(tc, test_arena_named_file_lifecycle);
    tcase_add_test(tc, test_arena_stale_cleanup);
    tcase_add_test(tc, test_proc_stat_parse);
    tcase_add_test(tc, test_proc_stat_read);
    suite_add_tcase(s, tc);

    tc = tcase_create("doorbell");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_doorbell_ring_and_wait_in_process);
    tcase_add_test(tc, test_doorbell_timeout);
    tcase_add_test(tc, test_doorbell_futex_sleep_and_wake_across_processes);
    tcase_add_test(tc, test_doorbell_dead_peer_is_a_timeout);
    tcase_add_test(tc, test_doorbell_ping_pong_no_lost_steps);
    tcase_add_test(tc, test_doorbell_wait_all);
    suite_add_tcase(s, tc);

    tc = tcase_create("expert_store");
    tcase_add_test(tc, test_expert_store);
    suite_add_tcase(s, tc);

    tc = tcase_create("exchange");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_exchange_shape_and_validation);
    tcase_add_test(tc, test_exchange_round_trip_bit_identical);
    tcase_add_test(tc, test_exchange_hint_pick);
    suite_add_tcase(s, tc);

    return check_run(s);
}
