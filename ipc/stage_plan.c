/* ipc/stage_plan.c — packing copies into slot-sized ring requests (contract in stage_plan.h). */
#include "config.h"

#include "ipc/stage_plan.h"

void stage_cursor_init(stage_cursor_t *c, const stage_copy_t *copies, int32_t n)
{
    c->copies = copies;
    c->n = n;
    c->i = 0;
    c->done = 0;
}

uint32_t stage_cursor_next(stage_cursor_t *c, size_t slot_bytes, uint32_t max_pieces, stage_piece_t *pieces,
                           uint64_t *dst_off)
{
    GUILD_ASSERT(slot_bytes >= STAGE_RING_PIECE_ALIGN && max_pieces >= 1 && max_pieces <= STAGE_RING_MAX_PIECES);
    uint32_t np = 0;
    uint64_t used = 0; /* bytes of the slot taken so far */
    while (c->i < c->n) {
        const stage_copy_t *cp = &c->copies[c->i];
        uint64_t left = cp->bytes - c->done;
        if (left == 0) {
            c->i++;
            c->done = 0;
            continue;
        }
        uint64_t file_off = cp->file_off + c->done, dst = cp->dst_off + c->done;
        /* continues the previous piece in the file and at the destination: grow it in place */
        if (np > 0) {
            stage_piece_t *last = &pieces[np - 1];
            if (last->file_off + last->bytes == file_off && dst_off[np - 1] + last->bytes == dst) {
                uint64_t room = slot_bytes - used, take = left < room ? left : room;
                if (take == 0)
                    break;
                last->bytes += take;
                used += take;
                c->done += take;
                continue;
            }
        }
        uint64_t at = (used + STAGE_RING_PIECE_ALIGN - 1) / STAGE_RING_PIECE_ALIGN * STAGE_RING_PIECE_ALIGN;
        if (np == max_pieces || at >= slot_bytes)
            break;
        uint64_t room = slot_bytes - at, take = left < room ? left : room;
        pieces[np] = (stage_piece_t){file_off, take, at};
        dst_off[np] = dst;
        np++;
        used = at + take;
        c->done += take;
    }
    return np;
}
