#include "ipc/step.h"

#include <stdint.h>
#include <string.h>

#define ALIGN64(x) (((x) + 63u) & ~(uint64_t)63u)

/* Offsets of the arrays for a valid shape. */
typedef struct offsets {
    uint64_t tokens, out_rows, logits, seq_ids, positions, full, picks, end;
} offsets_t;

static offsets_t layout(const guild_step_shape_t *s)
{
    offsets_t o;
    o.tokens = ALIGN64(sizeof(guild_step_shared_t));
    o.out_rows = ALIGN64(o.tokens + (uint64_t)s->max_tokens * sizeof(int32_t));
    o.logits = ALIGN64(o.out_rows + (uint64_t)s->max_out * sizeof(int32_t));
    o.seq_ids = ALIGN64(o.logits + (uint64_t)s->max_out * s->n_vocab * sizeof(float));
    o.positions = ALIGN64(o.seq_ids + (uint64_t)s->max_tokens * sizeof(int32_t));
    o.full = ALIGN64(o.positions + (uint64_t)s->max_tokens * sizeof(int32_t));
    o.picks = ALIGN64(o.full + (uint64_t)s->max_out);
    o.end = ALIGN64(o.picks + (uint64_t)s->max_out * sizeof(logits_pick_t));
    return o;
}

static int shape_ok(const guild_step_shape_t *s)
{
    return s->max_tokens > 0 && s->max_tokens <= (1u << 20) && s->max_out > 0 && s->max_out <= s->max_tokens &&
           s->n_vocab > 0 && s->n_vocab <= (1u << 24);
}

size_t guild_step_memsize(const guild_step_shape_t *shape)
{
    if (!shape_ok(shape))
        return 0;
    return (size_t)layout(shape).end;
}

int guild_step_init(void *addr, size_t size, const guild_step_shape_t *shape, guild_err_t *err)
{
    size_t need = guild_step_memsize(shape);
    if (!need)
        return guild_err_set(err, "step region: invalid shape (max_tokens %u, max_out %u, n_vocab %u)",
                             shape->max_tokens, shape->max_out, shape->n_vocab);
    if (size < need)
        return guild_err_set(err, "step region: %zu bytes, the shape needs %zu", size, need);
    if ((uintptr_t)addr % 64)
        return guild_err_set(err, "step region: address not 64-byte aligned");
    memset(addr, 0, sizeof(guild_step_shared_t));
    guild_step_shared_t *sh = addr;
    sh->max_tokens = shape->max_tokens;
    sh->max_out = shape->max_out;
    sh->n_vocab = shape->n_vocab;
    const offsets_t o = layout(shape);
    sh->tokens_offset = o.tokens;
    sh->out_rows_offset = o.out_rows;
    sh->logits_offset = o.logits;
    sh->seq_ids_offset = o.seq_ids;
    sh->positions_offset = o.positions;
    sh->full_offset = o.full;
    sh->picks_offset = o.picks;
    guild_doorbell_init(&sh->request);
    guild_doorbell_init(&sh->response);
    guild_doorbell_init(&sh->abort);
    sh->magic = GUILD_STEP_MAGIC;
    return 0;
}

int guild_step_attach(guild_step_t *st, void *addr, size_t size, guild_err_t *err)
{
    memset(st, 0, sizeof *st);
    if (size < sizeof(guild_step_shared_t) || (uintptr_t)addr % 64)
        return guild_err_set(err, "step region: %zu bytes, too small or misaligned", size);
    guild_step_shared_t *sh = addr;
    if (sh->magic != GUILD_STEP_MAGIC)
        return guild_err_set(err, "step region: bad magic %#llx (another layout version?)",
                             (unsigned long long)sh->magic);
    guild_step_shape_t shape = {sh->max_tokens, sh->max_out, sh->n_vocab};
    size_t need = guild_step_memsize(&shape);
    if (!need || need > size)
        return guild_err_set(err, "step region: shape (max_tokens %u, max_out %u, n_vocab %u) does not fit %zu bytes",
                             shape.max_tokens, shape.max_out, shape.n_vocab, size);
    const offsets_t o = layout(&shape);
    if (sh->tokens_offset != o.tokens || sh->out_rows_offset != o.out_rows || sh->logits_offset != o.logits ||
        sh->seq_ids_offset != o.seq_ids || sh->positions_offset != o.positions || sh->full_offset != o.full ||
        sh->picks_offset != o.picks)
        return guild_err_set(err, "step region: array offsets differ from this build's layout");
    st->sh = sh;
    st->shape = shape;
    st->tokens = (int32_t *)((char *)addr + o.tokens);
    st->out_rows = (int32_t *)((char *)addr + o.out_rows);
    st->logits = (float *)((char *)addr + o.logits);
    st->seq_ids = (int32_t *)((char *)addr + o.seq_ids);
    st->positions = (int32_t *)((char *)addr + o.positions);
    st->full = (uint8_t *)addr + o.full;
    st->picks = (logits_pick_t *)((char *)addr + o.picks);
    return 0;
}
