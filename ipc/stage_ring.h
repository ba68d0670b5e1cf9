/* ipc/stage_ring.h — a ring of pinned-able staging slots in shared memory, filled by a stager.
 *
 * What it is for: the GPU worker wants some pieces of the model file (a layer's gate/up/down expert matrices,
 * possibly a subset of the experts) in page-locked host memory so that its DMA runs at PCIe speed. A stager
 * (the guild-stager process, or an in-process stage_server) copies the pieces from its own read-only mapping
 * of the model file into a slot; the client copies the slot to the device and then releases it.
 *
 * Memory: the ring lives in an arena of its own (ipc/arena.h: a memfd, MFD_HUGETLB first, then THP, then
 * 4 KiB pages, each fallback logged once), one region of kind GUILD_ARENA_KIND_STAGE_RING. Other processes
 * attach by the arena's name (/proc/<pid>/fd/<fd>, or a file path). The whole mapping may be registered with
 * cudaHostRegister (stage_ring_map_base/_size). Region layout:
 *   [stage_ring_header_t: 4096 bytes][stage_slot_ctl_t x n_slots][slot data x n_slots, slot_stride apart]
 *
 * Protocol (one client, one server per ring; requests are served in order):
 *   request k (k = 0, 1, 2, ...) uses slot k % n_slots.
 *   client: waits until request k - n_slots is released (its own bookkeeping: the server never reuses a slot
 *           by itself), writes the slot's piece list, rings `posted` = k + 1 (release).
 *   server: waits for posted >= k + 1 (acquire), copies the pieces with its threads, writes the slot's
 *           status, rings `filled` = k + 1 (release).
 *   client: waits for filled >= k + 1 with a deadline, checking the server's heartbeat: a stager that died
 *           or hangs becomes an error naming it, never a hang. Reads the slot, then releases it (in order).
 * The server beats (`beat_ns`, CLOCK_MONOTONIC) at least every STAGE_RING_BEAT_NS while it serves.
 */
#ifndef GUILD_IPC_STAGE_RING_H
#define GUILD_IPC_STAGE_RING_H

#include "core/util/err.h"
#include "ipc/arena.h"
#include "ipc/doorbell.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define STAGE_RING_MAGIC UINT64_C(0x474E525453444C47) /* "GLDSTRNG" in memory order (little-endian) */
#define STAGE_RING_VERSION 1u
#define STAGE_RING_MAX_SLOTS 64
#define STAGE_RING_MAX_PIECES 4096       /* pieces per request */
#define STAGE_RING_PIECE_ALIGN 64u       /* stage_plan places pieces at slot offsets that are multiples of this */
#define STAGE_RING_BEAT_NS 20000000ull   /* the server's heartbeat period, at most */
#define STAGE_RING_HEADER_BYTES 4096u

/* One piece of a request: bytes [file_off, file_off + bytes) of the served file go to slot_off in the slot. */
typedef struct stage_piece {
    uint64_t file_off; /* bytes from the start of the file */
    uint64_t bytes;
    uint64_t slot_off; /* bytes from the start of the slot's data */
} stage_piece_t;
_Static_assert(sizeof(stage_piece_t) == 24, "stage_piece_t is a shared layout");

/* Status of a filled request (stage_slot_ctl_t.status), written by the server. */
typedef enum stage_status {
    STAGE_OK = 0,
    STAGE_BAD_COUNT = 1,     /* n_pieces > STAGE_RING_MAX_PIECES */
    STAGE_BAD_FILE_RANGE = 2, /* a piece reaches past the end of the served file; bad_piece says which */
    STAGE_BAD_SLOT_RANGE = 3, /* a piece reaches past the end of the slot */
} stage_status_t;

/* Per-slot control; each group of words on its own cache line. */
typedef struct stage_slot_ctl {
    /* written by the client before it rings `posted` */
    _Alignas(GUILD_CACHE_LINE) uint64_t seq; /* request number k stored in this slot */
    uint32_t n_pieces;                       /* entries of pieces[] used */
    uint32_t reserved0;
    uint64_t bytes;                          /* sum of pieces[].bytes (informational; the server recomputes) */
    /* written by the server before it rings `filled` */
    _Alignas(GUILD_CACHE_LINE) uint64_t done_seq; /* = seq once served */
    uint32_t status;                              /* stage_status_t */
    uint32_t bad_piece;                           /* index of the offending piece when status != STAGE_OK */
    uint64_t fill_ns;                             /* time the server spent copying this request */
    /* written by the client */
    _Alignas(GUILD_CACHE_LINE) stage_piece_t pieces[STAGE_RING_MAX_PIECES];
} stage_slot_ctl_t;
_Static_assert(sizeof(stage_slot_ctl_t) % GUILD_CACHE_LINE == 0, "stage_slot_ctl_t is a shared layout");

/* Shared header at the start of the region. */
typedef struct stage_ring_header {
    _Atomic uint64_t magic;  /* STAGE_RING_MAGIC, stored last (release) by the creator */
    uint32_t version;        /* STAGE_RING_VERSION */
    uint32_t header_size;    /* sizeof(stage_ring_header_t) */
    uint32_t n_slots;        /* 2..STAGE_RING_MAX_SLOTS */
    uint32_t max_pieces;     /* STAGE_RING_MAX_PIECES */
    uint64_t slot_bytes;     /* usable bytes per slot */
    uint64_t slot_stride;    /* bytes between two slots' data; multiple of 4096, >= slot_bytes */
    uint64_t ctl_offset;     /* bytes from the region start to stage_slot_ctl_t[0] */
    uint64_t data_offset;    /* bytes from the region start to slot 0's data; multiple of 4096 */
    uint64_t region_size;    /* bytes of the region */
    /* written by the server */
    _Alignas(GUILD_CACHE_LINE) _Atomic int32_t server_pid; /* the serving process, 0 while none */
    _Atomic uint32_t server_threads;                        /* copy threads of the server */
    _Atomic uint64_t beat_ns;                               /* the server's last heartbeat, CLOCK_MONOTONIC */
    /* written by the client (or whoever owns the ring) */
    _Alignas(GUILD_CACHE_LINE) _Atomic uint32_t stop; /* nonzero: the server should stop serving */
    guild_doorbell_t posted; /* requests posted; rung by the client */
    guild_doorbell_t filled; /* requests filled; rung by the server */
} stage_ring_header_t;
_Static_assert(sizeof(stage_ring_header_t) <= STAGE_RING_HEADER_BYTES, "stage_ring_header_t is a shared layout");

typedef struct stage_ring stage_ring_t; /* per-process handle */

/* Bytes of the region for n_slots slots of slot_bytes each. */
size_t stage_ring_memsize(uint32_t n_slots, size_t slot_bytes);

/* Creates a ring in a new arena (opts as for guild_arena_create; NULL: memfd, hugetlb first, fallbacks
 * logged). n_slots in 2..STAGE_RING_MAX_SLOTS, slot_bytes > 0. NULL-initialised *out; -1 with err on
 * failure. The creator is the ring's client. */
int stage_ring_create(stage_ring_t **out, uint32_t n_slots, size_t slot_bytes, const guild_arena_opts_t *opts,
                      guild_err_t *err);

/* Attaches the ring of arena `name` (what stage_ring_name gives in the creator) and validates its header:
 * magic, version, sizes and offsets against the region. -1 with a message naming the ring on failure. A client
 * that attaches (a restarted GPU worker) inherits the requests its predecessor left in flight: those slots stay
 * busy until stage_ring_drain. */
int stage_ring_attach(stage_ring_t **out, const char *name, guild_err_t *err);

/* Validates a ring header laid in a region of region_size bytes (what attach checks). -1 with err. */
int stage_ring_validate(const stage_ring_header_t *h, size_t region_size, guild_err_t *err);

/* Unmaps, frees, nulls *pr. NULL-safe. The creator's ring memory goes away once every process detached. */
void stage_ring_destroy(stage_ring_t **pr);

const char *stage_ring_name(const stage_ring_t *r);   /* the arena name attachers open */
stage_ring_header_t *stage_ring_header(const stage_ring_t *r);
uint32_t stage_ring_n_slots(const stage_ring_t *r);
size_t stage_ring_slot_bytes(const stage_ring_t *r);
void *stage_ring_slot(const stage_ring_t *r, uint32_t slot); /* slot's data, slot_bytes long */
stage_slot_ctl_t *stage_ring_ctl(const stage_ring_t *r, uint32_t slot);
void *stage_ring_map_base(const stage_ring_t *r); /* the whole mapping (page-aligned), for cudaHostRegister */
size_t stage_ring_map_size(const stage_ring_t *r);

/* ---- client side (one thread) ---- */

/* How the client waits for a fill. */
typedef struct stage_wait {
    uint64_t spin_ns;     /* spin before futex sleeps */
    uint64_t timeout_ns;  /* the whole wait */
    uint64_t liveness_ns; /* a server whose heartbeat is older than this (or that never started within it)
                             is declared dead */
} stage_wait_t;

/* Defaults: spin 50 us, timeout 30 s, liveness 2 s. */
stage_wait_t stage_wait_default(void);

/* Requests posted so far / released so far; a slot is free for a new request while posted - released <
 * n_slots. */
uint64_t stage_ring_posted(const stage_ring_t *r);
uint64_t stage_ring_released(const stage_ring_t *r);

/* Posts the next request (pieces[0..n-1], n <= STAGE_RING_MAX_PIECES; 0 is allowed) into the next slot and
 * stores its number in *seq. -1 with err if no slot is free (release first) or a piece does not fit the slot. */
int stage_ring_post(stage_ring_t *r, const stage_piece_t *pieces, uint32_t n, uint64_t *seq, guild_err_t *err);

/* Waits until request seq is filled; stores the slot's data address in *data (may be NULL). -1 with err if
 * the deadline passes, the server is dead or silent ("stager pid 123 on ring X: ..."), or the server refused
 * the request (err names the piece). */
int stage_ring_wait(stage_ring_t *r, uint64_t seq, const stage_wait_t *w, void **data, guild_err_t *err);

/* Gives request seq's slot back; requests are released in order (seq == stage_ring_released()). */
void stage_ring_release(stage_ring_t *r, uint64_t seq);

/* Waits for every request posted and not yet released (a predecessor's, after attach) and releases them, so
 * that posted == released. -1 with err as stage_ring_wait, except that a refused request is not an error. */
int stage_ring_drain(stage_ring_t *r, const stage_wait_t *w, guild_err_t *err);

/* Asks the server to stop (sets the header's stop word and wakes it). */
void stage_ring_request_stop(stage_ring_t *r);

#endif
