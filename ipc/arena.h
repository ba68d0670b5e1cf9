/* ipc/arena.h — the shared-memory arena: one segment per coordinator instance, mapped by every local worker.
 *
 * Backing, tried in order from opts.pages (each fallback logged once, with its reason):
 *   GUILD_ARENA_PAGES_HUGETLB  2 MiB hugetlb pages: a memfd with MFD_HUGETLB, or a file on a hugetlbfs mount.
 *                              mmap reserves every page up front, so a short pool fails here, not as SIGBUS later.
 *   GUILD_ARENA_PAGES_THP      shmem with madvise(MADV_HUGEPAGE); needs shmem THP enabled
 *                              (/sys/kernel/mm/transparent_hugepage/shmem_enabled, or the tmpfs huge= option).
 *   GUILD_ARENA_PAGES_SMALL    4 KiB shmem pages, allocated up front with fallocate.
 * The file is created mode 0600: only the coordinator's user can attach.
 *
 * Naming: how other processes find it (the string that travels in Assign.arena.name, proto/guild.proto).
 *   Default (opts.dir == NULL): an anonymous memfd. It has no name in any filesystem, so there is nothing to
 *     clean up after a crash of any process: the kernel frees the memory when the last fd and mapping go.
 *     Attachers open "/proc/<coordinator pid>/fd/<fd>", which reopens the memfd itself. This needs the same
 *     user, the same PID namespace and a dumpable coordinator (no setuid, no PR_SET_DUMPABLE 0, no
 *     hidepid=2 /proc). Children spawned by the coordinator and workers started by hand on the same host both
 *     use it. The memfd is also visible in /proc/<pid>/maps as "memfd:guild-arena-<pid>-<tag>".
 *   opts.dir set (a tmpfs such as /dev/shm, or a hugetlbfs mount for hugetlb pages): a named file
 *     "<dir>/guild-arena-<pid>-<tag>" (pid: the coordinator's, decimal; tag: 16 hex digits, random), for
 *     deployments where /proc/<pid>/fd is out of reach (other PID namespace, systemd ProtectProc=). The creator
 *     removes it in guild_arena_destroy, or earlier with guild_arena_unlink once no more attaches by name are
 *     expected (after which guild_arena_name() is the /proc form again). A crashed coordinator leaves it
 *     behind: guild_arena_create (and guild_arena_remove_stale) removes files of that form whose owner is
 *     dead, comparing the owner's start time recorded in the header to /proc/<pid>/stat so a reused pid does
 *     not keep a stale arena alive.
 * Attachers check the header's tag against the one sent in Assign, which guards the /proc form against a pid
 * or fd reused by an unrelated process.
 *
 * Layout: the header below at offset 0, then the regions, each GUILD_ARENA_ALIGN-aligned, in request order.
 * Objects laid into a region follow the `foo_memsize()` + `foo_init(addr, size)` pattern (ipc/exchange.h),
 * with a per-process handle apart from the shared layout.
 */
#ifndef GUILD_IPC_ARENA_H
#define GUILD_IPC_ARENA_H

#include "core/util/err.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define GUILD_ARENA_MAGIC UINT64_C(0x4E5241444C495547) /* "GUILDARN" in memory order (little-endian) */
#define GUILD_ARENA_LAYOUT_VERSION 2u /* 2: the exchange without weights, the staging ring's kind registered */
#define GUILD_ARENA_MAX_REGIONS 30
#define GUILD_ARENA_ALIGN 4096u /* region offsets and sizes are multiples of this */
#define GUILD_ARENA_NAME_MAX 256

typedef enum guild_arena_pages {
    GUILD_ARENA_PAGES_HUGETLB = 0,
    GUILD_ARENA_PAGES_THP = 1,
    GUILD_ARENA_PAGES_SMALL = 2,
} guild_arena_pages_t;

/* What a region holds (guild_arena_region_t.kind). One registry so two modules never pick the same value. */
typedef enum guild_arena_kind {
    GUILD_ARENA_KIND_NONE = 0,     /* not a valid region */
    GUILD_ARENA_KIND_EXCHANGE = 1, /* ipc/exchange.h: MoE layer exchange (step/done doorbells, slots) */
    GUILD_ARENA_KIND_STEP = 2,     /* ipc/step.h: forward-pass requests, coordinator -> GPU worker */
    GUILD_ARENA_KIND_STAGE_RING = 3, /* ipc/stage_ring.h: a staging ring (in an arena of its own) */
    GUILD_ARENA_KIND_TEST = 0x7f00, /* tests and benchmarks */
} guild_arena_kind_t;

/* Shared layout. Every field is written by the coordinator (the creator) before guild_arena_publish and never
 * again; attachers only read. */
typedef struct guild_arena_region {
    uint32_t kind;     /* guild_arena_kind_t */
    uint32_t index;    /* instance of that kind, 0 for a single one */
    uint64_t offset;   /* bytes from the start of the arena; multiple of GUILD_ARENA_ALIGN */
    uint64_t size;     /* bytes; multiple of GUILD_ARENA_ALIGN */
    uint64_t reserved; /* 0 */
} guild_arena_region_t;
_Static_assert(sizeof(guild_arena_region_t) == 32, "guild_arena_region_t is a shared layout");

typedef struct guild_arena_header {
    _Atomic uint64_t magic;   /* GUILD_ARENA_MAGIC; stored last, with release, by guild_arena_publish: an
                                 attacher that sees it (acquire) sees everything laid out before */
    uint32_t layout_version;  /* GUILD_ARENA_LAYOUT_VERSION: bump on any change to this file's structs or to
                                 a region's layout */
    uint32_t header_size;     /* bytes, sizeof(guild_arena_header_t) */
    uint64_t total_size;      /* bytes of the file (= of every mapping); a multiple of the page size */
    uint64_t tag;             /* random, nonzero; also in the file name and in Assign.arena.tag */
    int32_t owner_pid;        /* the creator's pid */
    uint32_t pages;           /* guild_arena_pages_t the creator obtained */
    uint64_t owner_start;     /* the creator's start time, clock ticks since boot (/proc/<pid>/stat field 22) */
    uint32_t n_regions;       /* entries used in regions[] */
    uint32_t reserved0;       /* 0 */
    uint64_t reserved1;       /* 0 */
    guild_arena_region_t regions[GUILD_ARENA_MAX_REGIONS];
} guild_arena_header_t;
_Static_assert(sizeof(guild_arena_header_t) == 1024, "guild_arena_header_t is a shared layout");
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "shared-memory atomics must be lock-free");

/* A region to lay out at creation. */
typedef struct guild_arena_request {
    uint32_t kind;  /* guild_arena_kind_t, not NONE */
    uint32_t index;
    uint64_t size;  /* bytes (rounded up to GUILD_ARENA_ALIGN) */
} guild_arena_request_t;

typedef struct guild_arena_opts {
    guild_arena_pages_t pages; /* first backing tried (0 = HUGETLB); tests force a fallback level with it */
    int no_fallback;           /* nonzero: fail with the reason instead of trying the next backing */
    const char *dir;           /* NULL: anonymous memfd; else the directory of a named file (see above) */
    int lazy;                  /* nonzero: no page allocated up front (transparent hugepages and 4 KiB pages):
                                  each is allocated when first touched, under the toucher's memory policy (a
                                  region a worker binds to its NUMA node before filling it) */
    int huge_only;             /* nonzero: fall back from hugetlb to transparent hugepages but never to 4 KiB
                                  pages: fail with the reasons instead (--huge-pages require) */
} guild_arena_opts_t;

/* What the attacher was told in Assign.arena; zero fields are not checked. */
typedef struct guild_arena_expect {
    uint64_t tag;
    uint64_t size;
} guild_arena_expect_t;

typedef struct guild_arena guild_arena_t; /* per-process handle */

/* Creates an arena holding the requested regions (zero-filled; n_regions <= GUILD_ARENA_MAX_REGIONS), memory
 * allocated up front. The header is not yet visible to attachers: lay objects into the regions, then call
 * guild_arena_publish. opts may be NULL (memfd, hugetlb first, with fallback). In dir mode, stale arenas of
 * dead owners in dir are removed first. Returns NULL with err filled on failure. */
guild_arena_t *guild_arena_create(const guild_arena_request_t *regions, size_t n_regions,
                                  const guild_arena_opts_t *opts, guild_err_t *err);

/* Creator: makes the header valid (release store of the magic). */
void guild_arena_publish(guild_arena_t *arena);

/* Maps the arena named `name` (guild_arena_name() of the creator) and validates its header: magic, layout
 * version, sizes, the region table, and `expect` (may be NULL). Returns NULL with a message naming what is
 * wrong ("arena /proc/12/fd/5: layout version 2, this build reads 1"). */
guild_arena_t *guild_arena_attach(const char *name, const guild_arena_expect_t *expect, guild_err_t *err);

/* An attacher's mapping of an arena whose creator obtained transparent hugepages is advised for them too
 * (MADV_HUGEPAGE): under shmem_enabled=advise a page is huge only when the mapping that first touches it asks,
 * and a lazy arena's pages are first touched by its attacher. */

/* guild_arena_attach, mapped read-only (the file opened read-only): writes through it fault. */
guild_arena_t *guild_arena_attach_readonly(const char *name, const guild_arena_expect_t *expect, guild_err_t *err);

/* Unmaps and frees the handle, nulls *parena. In the creating process it also closes the fd and removes a
 * named file. NULL-safe. */
void guild_arena_destroy(guild_arena_t **parena);

/* Creator, dir mode: removes the file name now; attaching stays possible through the /proc form, which
 * guild_arena_name() returns from then on. No-op for a memfd. Returns -1 with err on failure. */
int guild_arena_unlink(guild_arena_t *arena, guild_err_t *err);

/* Removes "guild-arena-<pid>-<tag>" files in dir whose owner process is dead (or whose pid now belongs to a
 * process started at another time). Stores the count removed in *n_removed (may be NULL). Returns -1 with err
 * if dir cannot be read; files that cannot be removed are logged and skipped. */
int guild_arena_remove_stale(const char *dir, int *n_removed, guild_err_t *err);

/* Maps the pages of [p, p + size) (inside the arena) into this process's page tables now, allocating those not yet
 * allocated (MADV_POPULATE_WRITE on a writable mapping, Linux 5.14; before that, or read only, a read of each
 * page): later accesses do not fault them in one by one (a 4 KiB-page arena of 1 GiB is 262,144 faults, paid
 * by whichever batch touches it first). Speed only: the contents do not change. */
void guild_arena_populate(const guild_arena_t *arena, void *p, size_t size);

/* The region of this kind and index: its address, and its size in *size (may be NULL). NULL if absent. */
void *guild_arena_region(const guild_arena_t *arena, uint32_t kind, uint32_t index, size_t *size);

const char *guild_arena_name(const guild_arena_t *arena); /* what attachers open; owned by the handle */
const char *guild_arena_path(const guild_arena_t *arena); /* named file in dir mode, else "" */
void *guild_arena_base(const guild_arena_t *arena);
size_t guild_arena_size(const guild_arena_t *arena);
uint64_t guild_arena_tag(const guild_arena_t *arena);
guild_arena_pages_t guild_arena_pages(const guild_arena_t *arena);
const char *guild_arena_pages_name(guild_arena_pages_t pages); /* "hugetlb", "thp", "4k" */

/* Bytes an arena of these regions lays out (its header and each region rounded to GUILD_ARENA_ALIGN), before its
 * size is rounded to its pages. */
uint64_t guild_arena_layout_bytes(const guild_arena_request_t *regions, size_t n_regions);

/* Bytes of free 2 MiB hugetlb pages (sysfs) on NUMA node `node`, or on the machine for node < 0, less those
 * reserved by mappings (an arena created before); 0 when there are none or the kernel does not say. */
uint64_t guild_arena_hugetlb_free(int node);

#endif
