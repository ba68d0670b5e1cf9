/* ipc/stage_plan.h — cutting a list of copies (file range -> destination offset) into slot-sized requests.
 *
 * The client of a staging ring wants arbitrary pieces of the file at arbitrary destination offsets; a ring
 * request is a list of at most STAGE_RING_MAX_PIECES pieces that fit one slot. A cursor walks the copies in
 * order and packs them into requests: pieces sit at slot offsets rounded up to STAGE_RING_PIECE_ALIGN, a copy
 * larger than the room left is split (over several requests when larger than a slot), zero-length copies are
 * skipped, and a copy that continues the previous one both in the file and at the destination is merged with
 * it. Pure bookkeeping: no shared memory, no threads.
 */
#ifndef GUILD_IPC_STAGE_PLAN_H
#define GUILD_IPC_STAGE_PLAN_H

#include "ipc/stage_ring.h"

#include <stddef.h>
#include <stdint.h>

/* One wanted copy: bytes [file_off, file_off + bytes) of the file to dst_off at the destination. */
typedef struct stage_copy {
    uint64_t file_off;
    uint64_t bytes;
    uint64_t dst_off;
} stage_copy_t;

typedef struct stage_cursor {
    const stage_copy_t *copies; /* [n] */
    int32_t n;
    int32_t i;     /* next copy */
    uint64_t done; /* bytes of copies[i] already placed in earlier requests */
} stage_cursor_t;

void stage_cursor_init(stage_cursor_t *c, const stage_copy_t *copies, int32_t n);

/* Fills the next request: up to max_pieces (<= STAGE_RING_MAX_PIECES) pieces within slot_bytes, in
 * pieces[], with each piece's destination offset in dst_off[] (same index). Returns the number of pieces;
 * 0 once every copy has been placed. slot_bytes must be at least STAGE_RING_PIECE_ALIGN. */
uint32_t stage_cursor_next(stage_cursor_t *c, size_t slot_bytes, uint32_t max_pieces, stage_piece_t *pieces,
                           uint64_t *dst_off);

#endif
