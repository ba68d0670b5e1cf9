/* ipc/arena.c — creating, attaching and cleaning up the shared-memory arena (contract in arena.h). */
#include "config.h"

#include "ipc/arena.h"
#include "ipc/proc_stat.h"

#include "core/util/fileperm.h"
#include "core/util/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/vfs.h>
#include <unistd.h>

#ifndef MFD_HUGE_2MB
#define MFD_HUGE_2MB (21u << 26) /* log2(2 MiB) << MFD_HUGE_SHIFT, from linux/memfd.h */
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif
#define HUGETLBFS_MAGIC_ 0x958458f6
#define HUGE_2M ((size_t)2 << 20)
#define STALE_PREFIX "guild-arena-"

struct guild_arena {
    guild_arena_header_t *hdr; /* = base of the mapping */
    size_t size;               /* bytes mapped */
    int fd;                    /* creator: kept open so attachers can use /proc/<pid>/fd/<fd>; attacher: -1 */
    pid_t creator_pid;         /* creator: getpid() at creation (a forked child must not unlink); else 0 */
    guild_arena_pages_t pages;
    bool writable;             /* mapped for writing (creator, guild_arena_attach) */
    char name[GUILD_ARENA_NAME_MAX]; /* what attachers open */
    char path[GUILD_ARENA_NAME_MAX]; /* creator, dir mode: the named file until unlinked; else "" */
};

static size_t round_up(size_t n, size_t to)
{
    return (n + to - 1) / to * to;
}

/* Start time of pid in clock ticks since boot, 0 if unknown. */
static uint64_t proc_start_time(pid_t pid)
{
    proc_stat_t st;
    return proc_stat_read(pid, &st) == 0 ? st.start_time : 0;
}

static long meminfo_value(const char *key)
{
    FILE *f = fopen("/proc/meminfo", "re");
    if (!f)
        return -1;
    char line[256];
    long v = -1;
    size_t klen = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, klen)) {
            v = strtol(line + klen, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

/* The bracketed choice of a sysfs multiple-choice file ("always within_size advise [never] deny force"). */
static int sysfs_choice(const char *path, char *out, size_t n)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    char line[256];
    int rc = -1;
    if (fgets(line, sizeof line, f)) {
        char *a = strchr(line, '['), *b = a ? strchr(a, ']') : NULL;
        if (a && b) {
            snprintf(out, n, "%.*s", (int)(b - a - 1), a + 1);
            rc = 0;
        }
    }
    fclose(f);
    return rc;
}

/* The value of "huge=" in the super options of the mount holding dir, or "never" when absent. */
static void tmpfs_huge_option(const char *dir, char *out, size_t n)
{
    snprintf(out, n, "never");
    char real[PATH_MAX];
    if (!realpath(dir, real))
        return;
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return;
    char line[4096];
    size_t best = 0;
    while (fgets(line, sizeof line, f)) {
        /* id parent maj:min root mountpoint opts [optional...] - fstype source superopts */
        char mnt[PATH_MAX];
        if (sscanf(line, "%*s %*s %*s %*s %4095s", mnt) != 1)
            continue;
        size_t len = strlen(mnt);
        int under = !strncmp(real, mnt, len) && (real[len] == '/' || real[len] == '\0' || len == 1);
        if (!under || len < best)
            continue;
        best = len;
        snprintf(out, n, "never");
        char *sep = strstr(line, " - ");
        char *huge = sep ? strstr(sep, "huge=") : NULL;
        if (huge) {
            huge += 5;
            size_t k = strcspn(huge, ", \n");
            snprintf(out, n, "%.*s", (int)k, huge);
        }
    }
    fclose(f);
}

/* NULL if shmem in dir (NULL: memfd) may get transparent hugepages after madvise, else why not (in buf). */
static const char *thp_unavailable(const char *dir, char *buf, size_t n)
{
    static const char sysfs[] = "/sys/kernel/mm/transparent_hugepage/shmem_enabled";
    char mode[32];
    if (sysfs_choice(sysfs, mode, sizeof mode) < 0) {
        snprintf(buf, n, "%s unreadable: kernel without transparent hugepages", sysfs);
        return buf;
    }
    if (!strcmp(mode, "force"))
        return NULL;
    if (!strcmp(mode, "deny")) {
        snprintf(buf, n, "%s is [deny]", sysfs);
        return buf;
    }
    if (!dir) {
        if (!strcmp(mode, "never")) {
            snprintf(buf, n, "%s is [never]; set it to advise", sysfs);
            return buf;
        }
        return NULL;
    }
    char huge[32];
    tmpfs_huge_option(dir, huge, sizeof huge);
    if (!strcmp(huge, "never") || !strcmp(huge, "deny")) {
        snprintf(buf, n, "%s is mounted with huge=%s; remount with huge=advise", dir, huge);
        return buf;
    }
    return NULL;
}

/* One attempt at a backing. On success fills *fd, *base, *size; on failure closes what it opened (and unlinks
 * path in dir mode) and explains in reason. */
static int try_backing(guild_arena_pages_t pages, const char *dir, const char *path, const char *memname,
                       size_t layout_size, int lazy, int *pfd, void **pbase, size_t *psize, char *reason, size_t rn)
{
    int fd = -1;
    void *base = MAP_FAILED;
    size_t size = 0;
    char why[512];
    const char *what;
    int hugetlbfs = 0;
    size_t huge_page = HUGE_2M;

    if (dir) {
        struct statfs sfs;
        if (statfs(dir, &sfs) < 0) {
            snprintf(reason, rn, "statfs %s: %s", dir, strerror(errno));
            return -1;
        }
        hugetlbfs = (unsigned long)sfs.f_type == (unsigned long)HUGETLBFS_MAGIC_;
        if (hugetlbfs)
            huge_page = (size_t)sfs.f_bsize;
        if (pages == GUILD_ARENA_PAGES_HUGETLB && !hugetlbfs) {
            snprintf(reason, rn, "%s is not a hugetlbfs mount", dir);
            return -1;
        }
        if (pages != GUILD_ARENA_PAGES_HUGETLB && hugetlbfs) {
            snprintf(reason, rn, "%s is a hugetlbfs mount, which only holds hugetlb pages", dir);
            return -1;
        }
    }
    if (pages == GUILD_ARENA_PAGES_THP) {
        const char *no = thp_unavailable(dir, why, sizeof why);
        if (no) {
            snprintf(reason, rn, "%s", no);
            return -1;
        }
    }

    size = round_up(layout_size, pages == GUILD_ARENA_PAGES_SMALL ? (size_t)4096 : huge_page);
    if (dir) {
        what = "open";
        fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    } else {
        what = "memfd_create";
        unsigned flags = MFD_CLOEXEC | (pages == GUILD_ARENA_PAGES_HUGETLB ? MFD_HUGETLB | MFD_HUGE_2MB : 0);
        fd = memfd_create(memname, flags);
    }
    if (fd < 0)
        goto fail_errno;
    what = "fchmod 0600";
    if (fchmod(fd, 0600) < 0) /* memfds start at 0777 */
        goto fail_errno;
    what = "ftruncate";
    if (ftruncate(fd, (off_t)size) < 0)
        goto fail_errno;
    if (pages == GUILD_ARENA_PAGES_SMALL && !lazy) {
        /* allocate now: running out of tmpfs space is an error here rather than a SIGBUS in some worker */
        what = "fallocate";
        if (fallocate(fd, 0, 0, (off_t)size) < 0 && errno != EOPNOTSUPP)
            goto fail_errno;
    }
    what = "mmap";
    base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        if (pages == GUILD_ARENA_PAGES_HUGETLB && errno == ENOMEM) {
            snprintf(reason, rn, "no %zu MiB of free hugetlb pages (HugePages_Free: %ld; reserve them in "
                     "/proc/sys/vm/nr_hugepages)", size >> 20, meminfo_value("HugePages_Free:"));
            goto fail;
        }
        goto fail_errno;
    }
    if (pages == GUILD_ARENA_PAGES_THP) {
        what = "madvise(MADV_HUGEPAGE)";
        if (madvise(base, size, MADV_HUGEPAGE) < 0)
            goto fail_errno;
        /* populate after the advice so the pages are allocated huge; older kernels lack the call (EINVAL)
         * and fault lazily */
        what = "madvise(MADV_POPULATE_WRITE)";
        if (!lazy && madvise(base, size, MADV_POPULATE_WRITE) < 0 && errno != EINVAL)
            goto fail_errno;
    }
    *pfd = fd;
    *pbase = base;
    *psize = size;
    return 0;

fail_errno:
    snprintf(reason, rn, "%s of %zu bytes: %s", what, size, strerror(errno));
fail:
    if (base != MAP_FAILED)
        munmap(base, size);
    if (fd >= 0)
        close(fd);
    if (dir && fd >= 0)
        unlink(path);
    return -1;
}

/* The pages an arena got when they are not the ones asked for, once per process at info level: the fallbacks
 * are normal on a stock machine (no hugetlb pages reserved, THP for shared memory off), work as well for the
 * doorbells, and each reason names its fix. */
static void log_fallback(guild_arena_pages_t got, const char *reasons)
{
    guild_log_once(GUILD_LOG_INFO, "arena: %s pages (%s)", guild_arena_pages_name(got), reasons);
}

uint64_t guild_arena_layout_bytes(const guild_arena_request_t *regions, size_t n_regions)
{
    uint64_t layout = round_up(sizeof(guild_arena_header_t), GUILD_ARENA_ALIGN);
    for (size_t i = 0; i < n_regions; i++)
        layout += round_up((size_t)regions[i].size, GUILD_ARENA_ALIGN);
    return layout;
}

guild_arena_t *guild_arena_create(const guild_arena_request_t *regions, size_t n_regions,
                                  const guild_arena_opts_t *opts, guild_err_t *err)
{
    static const guild_arena_opts_t defaults = {GUILD_ARENA_PAGES_HUGETLB, 0, NULL, 0, 0};
    if (!opts)
        opts = &defaults;
    if (n_regions > GUILD_ARENA_MAX_REGIONS) {
        guild_err_set(err, "arena: %zu regions requested, at most %d", n_regions, GUILD_ARENA_MAX_REGIONS);
        return NULL;
    }
    if ((unsigned)opts->pages > GUILD_ARENA_PAGES_SMALL) {
        guild_err_set(err, "arena: unknown page kind %d", (int)opts->pages);
        return NULL;
    }
    for (size_t i = 0; i < n_regions; i++) {
        if (regions[i].kind == GUILD_ARENA_KIND_NONE) {
            guild_err_set(err, "arena: region %zu has no kind", i);
            return NULL;
        }
        if (regions[i].size > ((uint64_t)1 << 48)) {
            guild_err_set(err, "arena: region %zu: %" PRIu64 " bytes is too large", i, regions[i].size);
            return NULL;
        }
    }
    size_t layout = (size_t)guild_arena_layout_bytes(regions, n_regions);

    guild_arena_t *a = calloc(1, sizeof *a);
    if (!a) {
        guild_err_set(err, "arena: out of memory");
        return NULL;
    }
    a->fd = -1;
    uint64_t tag = 0;
    while (!tag)
        if (getrandom(&tag, sizeof tag, 0) != (ssize_t)sizeof tag) {
            guild_err_errno(err, errno, "arena: getrandom");
            goto fail;
        }
    pid_t pid = getpid();
    char memname[64];
    snprintf(memname, sizeof memname, STALE_PREFIX "%d-%016" PRIx64, (int)pid, tag);
    if (opts->dir) {
        if (guild_arena_remove_stale(opts->dir, NULL, err) < 0)
            goto fail;
        if ((size_t)snprintf(a->path, sizeof a->path, "%s/%s", opts->dir, memname) >= sizeof a->path) {
            guild_err_set(err, "arena: directory name too long: %s", opts->dir);
            goto fail;
        }
    }

    void *base = NULL;
    size_t size = 0;
    guild_arena_pages_t pages = opts->pages;
    char reasons[1600] = ""; /* of the fallbacks taken */
    for (;;) {
        char reason[768];
        if (try_backing(pages, opts->dir, a->path, memname, layout, opts->lazy, &a->fd, &base, &size, reason,
                        sizeof reason) == 0)
            break;
        if (opts->no_fallback || pages == GUILD_ARENA_PAGES_SMALL) {
            guild_err_set(err, "arena: %s pages: %s", guild_arena_pages_name(pages), reason);
            goto fail;
        }
        if (opts->huge_only && pages + 1 == GUILD_ARENA_PAGES_SMALL) {
            guild_err_set(err, "arena: huge pages required, none to be had: %s%sno %s pages: %s", reasons,
                          reasons[0] ? "; " : "", guild_arena_pages_name(pages), reason);
            goto fail;
        }
        const size_t n = strlen(reasons);
        snprintf(reasons + n, sizeof reasons - n, "%sno %s pages: %s", n ? "; " : "", guild_arena_pages_name(pages),
                 reason);
        pages = (guild_arena_pages_t)(pages + 1);
    }
    if (reasons[0])
        log_fallback(pages, reasons);
    a->hdr = base;
    a->size = size;
    a->pages = pages;
    a->writable = true;
    a->creator_pid = pid;
    if (opts->dir)
        snprintf(a->name, sizeof a->name, "%s", a->path);
    else
        snprintf(a->name, sizeof a->name, "/proc/%d/fd/%d", (int)pid, a->fd);

    guild_arena_header_t *h = a->hdr;
    h->layout_version = GUILD_ARENA_LAYOUT_VERSION;
    h->header_size = sizeof *h;
    h->total_size = size;
    h->tag = tag;
    h->owner_pid = pid;
    h->pages = pages;
    h->owner_start = proc_start_time(pid);
    h->n_regions = (uint32_t)n_regions;
    uint64_t off = round_up(sizeof *h, GUILD_ARENA_ALIGN);
    for (size_t i = 0; i < n_regions; i++) {
        h->regions[i].kind = regions[i].kind;
        h->regions[i].index = regions[i].index;
        h->regions[i].offset = off;
        h->regions[i].size = round_up((size_t)regions[i].size, GUILD_ARENA_ALIGN);
        off += h->regions[i].size;
    }
    guild_log(GUILD_LOG_DEBUG, "arena: %s, %zu MiB, %s pages", a->name, size >> 20,
              guild_arena_pages_name(pages));
    return a;

fail:
    free(a);
    return NULL;
}

void guild_arena_publish(guild_arena_t *arena)
{
    GUILD_ASSERT(arena && arena->creator_pid);
    atomic_store_explicit(&arena->hdr->magic, GUILD_ARENA_MAGIC, memory_order_release);
}

static int validate(const guild_arena_header_t *h, size_t file_size, const guild_arena_expect_t *expect,
                    guild_err_t *err)
{
    uint64_t magic = atomic_load_explicit(&((guild_arena_header_t *)h)->magic, memory_order_acquire);
    if (magic == 0)
        return guild_err_set(err, "no arena header (not a Guild arena, or not yet published)");
    if (magic != GUILD_ARENA_MAGIC)
        return guild_err_set(err, "bad magic 0x%016" PRIx64 ": not a Guild arena", magic);
    if (h->layout_version != GUILD_ARENA_LAYOUT_VERSION)
        return guild_err_set(err, "layout version %" PRIu32 ", this build reads version %u",
                             h->layout_version, GUILD_ARENA_LAYOUT_VERSION);
    if (h->header_size != sizeof *h)
        return guild_err_set(err, "header size %" PRIu32 ", expected %zu", h->header_size, sizeof *h);
    if (h->total_size != file_size)
        return guild_err_set(err, "header says %" PRIu64 " bytes, the file has %zu", h->total_size, file_size);
    if (expect && expect->size && expect->size != h->total_size)
        return guild_err_set(err, "size %" PRIu64 " bytes, the coordinator announced %" PRIu64,
                             h->total_size, expect->size);
    if (expect && expect->tag && expect->tag != h->tag)
        return guild_err_set(err, "tag %016" PRIx64 ", expected %016" PRIx64
                             " (the arena of another coordinator, or a reused pid or fd)", h->tag, expect->tag);
    if (h->n_regions > GUILD_ARENA_MAX_REGIONS)
        return guild_err_set(err, "%" PRIu32 " regions, at most %d", h->n_regions, GUILD_ARENA_MAX_REGIONS);
    uint64_t end = round_up(sizeof *h, GUILD_ARENA_ALIGN);
    for (uint32_t i = 0; i < h->n_regions; i++) {
        const guild_arena_region_t *r = &h->regions[i];
        if (r->kind == GUILD_ARENA_KIND_NONE || r->offset % GUILD_ARENA_ALIGN || r->size % GUILD_ARENA_ALIGN ||
            r->offset < end || r->size > h->total_size || r->offset > h->total_size - r->size)
            return guild_err_set(err, "region %" PRIu32 " (kind %" PRIu32 ", offset %" PRIu64 ", %" PRIu64
                                 " bytes) is out of place", i, r->kind, r->offset, r->size);
        end = r->offset + r->size;
    }
    return 0;
}

static guild_arena_t *attach(const char *name, const guild_arena_expect_t *expect, bool writable, guild_err_t *err)
{
    guild_arena_t *a = calloc(1, sizeof *a);
    if (!a) {
        guild_err_set(err, "arena %s: out of memory", name);
        return NULL;
    }
    a->fd = -1;
    void *base = MAP_FAILED;
    size_t size = 0;
    int fd = open(name, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    if (fd < 0) {
        guild_err_errno(err, errno, "arena %s: open", name);
        goto fail;
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        guild_err_errno(err, errno, "arena %s: fstat", name);
        goto fail;
    }
    /* activations and weights pass through it: its creator made it 0600; anything wider is not its doing */
    if (guild_file_check_private(fd, name, "arena", err) < 0)
        goto fail;
    if (st.st_size < (off_t)sizeof(guild_arena_header_t)) {
        guild_err_set(err, "arena %s: %lld bytes, too small for a header", name, (long long)st.st_size);
        goto fail;
    }
    size = (size_t)st.st_size;
    base = mmap(NULL, size, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        guild_err_errno(err, errno, "arena %s: mmap of %zu bytes", name, size);
        goto fail;
    }
    if (validate(base, size, expect, err) < 0) {
        guild_err_prefix(err, "arena %s: ", name);
        goto fail;
    }
    /* shmem_enabled=advise gives a huge page to a fault in an advised mapping only, and the pages of a lazy
     * arena are faulted in here (a worker filling its store): advised as the creator's */
    if (((const guild_arena_header_t *)base)->pages == GUILD_ARENA_PAGES_THP && madvise(base, size, MADV_HUGEPAGE) < 0)
        guild_log(GUILD_LOG_DEBUG, "arena %s: madvise(MADV_HUGEPAGE): %s", name, strerror(errno));
    close(fd);
    a->hdr = base;
    a->size = size;
    a->writable = writable;
    a->pages = (guild_arena_pages_t)a->hdr->pages;
    snprintf(a->name, sizeof a->name, "%s", name);
    return a;

fail:
    if (base != MAP_FAILED)
        munmap(base, size);
    if (fd >= 0)
        close(fd);
    free(a);
    return NULL;
}

guild_arena_t *guild_arena_attach(const char *name, const guild_arena_expect_t *expect, guild_err_t *err)
{
    return attach(name, expect, true, err);
}

guild_arena_t *guild_arena_attach_readonly(const char *name, const guild_arena_expect_t *expect, guild_err_t *err)
{
    return attach(name, expect, false, err);
}

int guild_arena_unlink(guild_arena_t *arena, guild_err_t *err)
{
    GUILD_ASSERT(arena);
    if (!arena->path[0] || arena->creator_pid != getpid())
        return 0;
    if (unlink(arena->path) < 0 && errno != ENOENT)
        return guild_err_errno(err, errno, "arena %s: unlink", arena->path);
    arena->path[0] = '\0';
    snprintf(arena->name, sizeof arena->name, "/proc/%d/fd/%d", (int)arena->creator_pid, arena->fd);
    return 0;
}

void guild_arena_destroy(guild_arena_t **parena)
{
    if (!parena || !*parena)
        return;
    guild_arena_t *a = *parena;
    if (a->path[0] && a->creator_pid == getpid())
        unlink(a->path);
    if (a->hdr)
        munmap(a->hdr, a->size);
    if (a->fd >= 0)
        close(a->fd);
    free(a);
    *parena = NULL;
}

/* Parses "guild-arena-<pid>-<16 hex>" exactly. */
static int parse_arena_name(const char *name, pid_t *pid, uint64_t *tag)
{
    size_t plen = strlen(STALE_PREFIX);
    if (strncmp(name, STALE_PREFIX, plen))
        return -1;
    const char *p = name + plen;
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (end == p || *end != '-' || errno || v <= 0 || v > INT_MAX)
        return -1;
    const char *hex = end + 1;
    if (strlen(hex) != 16 || strspn(hex, "0123456789abcdef") != 16)
        return -1;
    *pid = (pid_t)v;
    *tag = strtoull(hex, NULL, 16);
    return 0;
}

/* 1 if the arena file (open as fd) belongs to a process that is gone. */
static int arena_owner_dead(int fd, pid_t pid, uint64_t tag)
{
    if (kill(pid, 0) < 0 && errno == ESRCH)
        return 1;
    /* pid is in use: by the creator, or by a later process that reused the number */
    guild_arena_header_t h;
    if (pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h)
        return 0;
    uint64_t start = h.owner_start;
    if (h.tag != tag || h.owner_pid != pid || start == 0)
        return 0; /* not (yet) readable as ours: leave it to its owner */
    uint64_t now = proc_start_time(pid);
    return now != 0 && now != start;
}

int guild_arena_remove_stale(const char *dir, int *n_removed, guild_err_t *err)
{
    if (n_removed)
        *n_removed = 0;
    DIR *d = opendir(dir);
    if (!d)
        return guild_err_errno(err, errno, "arena: opendir %s", dir);
    int dfd = dirfd(d);
    pid_t self = getpid();
    struct dirent *e;
    while ((e = readdir(d))) {
        pid_t pid;
        uint64_t tag;
        if (parse_arena_name(e->d_name, &pid, &tag) < 0 || pid == self)
            continue;
        int fd = openat(dfd, e->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
            continue;
        struct stat st;
        int dead = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
                   arena_owner_dead(fd, pid, tag);
        close(fd);
        if (!dead)
            continue;
        if (unlinkat(dfd, e->d_name, 0) < 0) {
            guild_log(GUILD_LOG_WARN, "arena: cannot remove stale %s/%s: %s", dir, e->d_name, strerror(errno));
            continue;
        }
        guild_log(GUILD_LOG_INFO, "arena: removed stale %s/%s (owner pid %d is gone)", dir, e->d_name, (int)pid);
        if (n_removed)
            (*n_removed)++;
    }
    closedir(d);
    return 0;
}

void guild_arena_populate(const guild_arena_t *arena, void *p, size_t size)
{
    const long pg = sysconf(_SC_PAGESIZE);
    char *base = (char *)arena->hdr, *lo = p, *hi = lo + size;
    GUILD_ASSERT(lo >= base && size <= arena->size && (size_t)(lo - base) <= arena->size - size);
    if (!size)
        return;
    lo = base + (size_t)(lo - base) / (size_t)pg * (size_t)pg;
    if (arena->writable && madvise(lo, (size_t)(hi - lo), MADV_POPULATE_WRITE) == 0)
        return;
    /* an older kernel (EINVAL), or read only: a read faults the page in (and, around it, those the kernel maps
     * with it); a shared mapping's page is then writable without another fault */
    unsigned char sum = 0;
    for (volatile const char *q = lo; q < hi; q += pg)
        sum ^= (unsigned char)*q;
    (void)sum;
}

void *guild_arena_region(const guild_arena_t *arena, uint32_t kind, uint32_t index, size_t *size)
{
    const guild_arena_header_t *h = arena->hdr;
    for (uint32_t i = 0; i < h->n_regions; i++)
        if (h->regions[i].kind == kind && h->regions[i].index == index) {
            if (size)
                *size = (size_t)h->regions[i].size;
            return (char *)arena->hdr + h->regions[i].offset;
        }
    return NULL;
}

const char *guild_arena_name(const guild_arena_t *arena)
{
    return arena->name;
}

const char *guild_arena_path(const guild_arena_t *arena)
{
    return arena->path;
}

void *guild_arena_base(const guild_arena_t *arena)
{
    return arena->hdr;
}

size_t guild_arena_size(const guild_arena_t *arena)
{
    return arena->size;
}

uint64_t guild_arena_tag(const guild_arena_t *arena)
{
    return arena->hdr->tag;
}

guild_arena_pages_t guild_arena_pages(const guild_arena_t *arena)
{
    return arena->pages;
}

const char *guild_arena_pages_name(guild_arena_pages_t pages)
{
    switch (pages) {
    case GUILD_ARENA_PAGES_HUGETLB: return "hugetlb";
    case GUILD_ARENA_PAGES_THP: return "thp";
    case GUILD_ARENA_PAGES_SMALL: return "4k";
    }
    return "?";
}

static uint64_t sysfs_count(const char *path)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    unsigned long long n = 0;
    if (fscanf(f, "%llu", &n) != 1)
        n = 0;
    fclose(f);
    return (uint64_t)n;
}

uint64_t guild_arena_hugetlb_free(int node)
{
#define POOL_2M "/sys/kernel/mm/hugepages/hugepages-2048kB"
    char path[128];
    if (node < 0)
        snprintf(path, sizeof path, POOL_2M "/free_hugepages");
    else
        snprintf(path, sizeof path, "/sys/devices/system/node/node%d/hugepages/hugepages-2048kB/free_hugepages", node);
    /* free counts the pages reserved by mappings not yet faulted in (a lazy arena's), which are not to be had:
     * the machine's reservations, the node's share of them unknown */
    const uint64_t free = sysfs_count(path), resv = sysfs_count(POOL_2M "/resv_hugepages");
#undef POOL_2M
    return free > resv ? (free - resv) * HUGE_2M : 0;
}
