#include "bench/prof_timeline.h"

#include <stdbool.h>

#include "gpu-worker/dense/cuda/cuda_timeline.h"

static const char *const router_names[PROF_TL_R_N] = {"entry->wait", "wait->row", "row->logits", "logits->probs",
                                                      "probs->ranks", "ranks->end", "waits' spread", "span",
                                                      "blocks"};
static const char *const attn_names[PROF_TL_A_N] = {"entry->wait", "wait->tile", "tile->keys", "keys->partial",
                                                    "partial->ticket", "ticket->merged", "->end", "waits' spread",
                                                    "span", "blocks"};

const char *const *prof_timeline_router_names(int *n)
{
    if (n)
        *n = PROF_TL_R_N;
    return router_names;
}

const char *const *prof_timeline_attn_names(int *n)
{
    if (n)
        *n = PROF_TL_A_N;
    return attn_names;
}

/* b - a in us (0 where b is before a: a stamp not reached). */
static double us(uint64_t a, uint64_t b)
{
    return b > a ? (double)(b - a) * 1e-3 : 0.0;
}

int prof_timeline_router(const uint64_t *st, size_t n_slots, double *v)
{
    if (!n_slots)
        return -1;
    const uint64_t *b0 = st;
    for (int i = 0; i < CUDA_ROUTER_TL_STAMPS; i++)
        if (!b0[i])
            return -1;
    uint64_t wait0 = UINT64_MAX, waitn = 0, end = 0;
    int blocks = 0;
    for (size_t k = 0; k < n_slots; k++) {
        const uint64_t *s = st + k * CUDA_ROUTER_TL_STAMPS;
        if (!s[CUDA_ROUTER_TL_ENTRY])
            continue;
        blocks++;
        if (s[CUDA_ROUTER_TL_WAIT]) {
            wait0 = s[CUDA_ROUTER_TL_WAIT] < wait0 ? s[CUDA_ROUTER_TL_WAIT] : wait0;
            waitn = s[CUDA_ROUTER_TL_WAIT] > waitn ? s[CUDA_ROUTER_TL_WAIT] : waitn;
        }
        end = s[CUDA_ROUTER_TL_END] > end ? s[CUDA_ROUTER_TL_END] : end;
    }
    v[PROF_TL_R_ENTRY_WAIT] = us(b0[CUDA_ROUTER_TL_ENTRY], b0[CUDA_ROUTER_TL_WAIT]);
    v[PROF_TL_R_ROW] = us(b0[CUDA_ROUTER_TL_WAIT], b0[CUDA_ROUTER_TL_ROW]);
    v[PROF_TL_R_LOGITS] = us(b0[CUDA_ROUTER_TL_ROW], b0[CUDA_ROUTER_TL_LOGITS]);
    v[PROF_TL_R_PROBS] = us(b0[CUDA_ROUTER_TL_LOGITS], b0[CUDA_ROUTER_TL_PROBS]);
    v[PROF_TL_R_RANKS] = us(b0[CUDA_ROUTER_TL_PROBS], b0[CUDA_ROUTER_TL_RANKS]);
    v[PROF_TL_R_END] = us(b0[CUDA_ROUTER_TL_RANKS], b0[CUDA_ROUTER_TL_END]);
    v[PROF_TL_R_WAITS] = us(wait0, waitn);
    v[PROF_TL_R_SPAN] = us(wait0, end);
    v[PROF_TL_R_BLOCKS] = blocks;
    return 0;
}

int prof_timeline_attn(const uint64_t *st, size_t n_slots, double *v)
{
    uint64_t wait0 = UINT64_MAX, waitn = 0, end = 0;
    const uint64_t *last = NULL; /* the working block that ends last */
    int blocks = 0;
    for (size_t k = 0; k < n_slots; k++) {
        const uint64_t *b = st + k * CUDA_ATTN_TL_STAMPS;
        if (!b[CUDA_ATTN_TL_ENTRY])
            continue;
        end = b[CUDA_ATTN_TL_END] > end ? b[CUDA_ATTN_TL_END] : end;
        if (!b[CUDA_ATTN_TL_WAIT])
            continue; /* no split: only its entry and end */
        blocks++;
        wait0 = b[CUDA_ATTN_TL_WAIT] < wait0 ? b[CUDA_ATTN_TL_WAIT] : wait0;
        waitn = b[CUDA_ATTN_TL_WAIT] > waitn ? b[CUDA_ATTN_TL_WAIT] : waitn;
        if (!last || b[CUDA_ATTN_TL_END] > last[CUDA_ATTN_TL_END])
            last = b;
    }
    if (!last)
        return -1;
    const bool merged = last[CUDA_ATTN_TL_MERGE] != 0;
    v[PROF_TL_A_ENTRY_WAIT] = us(last[CUDA_ATTN_TL_ENTRY], last[CUDA_ATTN_TL_WAIT]);
    v[PROF_TL_A_TILE] = us(last[CUDA_ATTN_TL_WAIT], last[CUDA_ATTN_TL_TILE]);
    v[PROF_TL_A_KEYS] = us(last[CUDA_ATTN_TL_TILE], last[CUDA_ATTN_TL_KEYS]);
    v[PROF_TL_A_PARTIAL] = us(last[CUDA_ATTN_TL_KEYS], last[CUDA_ATTN_TL_PARTIAL]);
    v[PROF_TL_A_TICKET] = merged ? us(last[CUDA_ATTN_TL_PARTIAL], last[CUDA_ATTN_TL_TICKET]) : 0;
    v[PROF_TL_A_MERGE] = merged ? us(last[CUDA_ATTN_TL_TICKET], last[CUDA_ATTN_TL_MERGE]) : 0;
    v[PROF_TL_A_END] = us(last[merged ? CUDA_ATTN_TL_MERGE : CUDA_ATTN_TL_PARTIAL], last[CUDA_ATTN_TL_END]);
    v[PROF_TL_A_WAITS] = us(wait0, waitn);
    v[PROF_TL_A_SPAN] = us(wait0, end);
    v[PROF_TL_A_BLOCKS] = blocks;
    return 0;
}
