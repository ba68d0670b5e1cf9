#include "ipc/expert_store_map.h"

int expert_store_map(const char *name, uint64_t tag, uint64_t size, const model_t *m,
                     int (*interrupted)(void *ctx, guild_err_t *err), void *ctx, guild_arena_t **a, expert_store_t *s,
                     guild_err_t *err)
{
    const model_config_t *c = model_config(m);
    const model_weights_t *mw = model_weights(m);
    guild_arena_expect_t ex = {.tag = tag, .size = size};
    size_t rs = 0;
    void *r;
    if (!(*a = guild_arena_attach_readonly(name, &ex, err)))
        return -1;
    if (!(r = guild_arena_region(*a, EXPERT_STORE_ARENA_KIND, 0, &rs)))
        return guild_err_set(err, "arena %s: no expert store region", name);
    if (expert_store_attach(s, r, rs, c->n_layer, c->n_expert, err) < 0 ||
        expert_store_wait(s, 600000000000ull, interrupted, ctx, err) < 0)
        return guild_err_prefix(err, "expert store %s: ", name);
    for (int32_t il = 0; il < c->n_layer; il++) {
        const model_layer_t *L = &mw->layers[il];
        for (int32_t e = 0; e < c->n_expert; e++) {
            const expert_store_entry_t *en = expert_store_entry(s, il, e);
            if (!en->gate)
                continue;
            const uint64_t rows_g = (uint64_t)L->gate_exps.ne[1], rows_d = (uint64_t)L->down_exps.ne[1];
            const uint64_t len[3] = {(rows_g - 1) * en->gate_row + L->gate_exps.row_bytes,
                                     (rows_g - 1) * en->up_row + L->up_exps.row_bytes,
                                     (rows_d - 1) * en->down_row + L->down_exps.row_bytes};
            if (expert_store_check_entry(s, en, len, err) < 0)
                return guild_err_prefix(err, "expert store %s: layer %d expert %d: ", name, il, e);
        }
    }
    return 0;
}
