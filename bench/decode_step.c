/* One greedy decode step of concurrent sessions (contract in bench/bench.h). */
#include "bench/bench.h"

#include <stdlib.h>

#include "gpu-worker/dense/backend.h"

int bench_decode_step(struct backend *be, int32_t n, int32_t *tok, int32_t *seq, int32_t *pos, int32_t *rows,
                      float *logits, int32_t V, guild_err_t *err)
{
    logits_pick_t *picks = malloc((size_t)n * sizeof *picks);
    if (!picks)
        return guild_err_set(err, "out of memory");
    for (int32_t s = 0; s < n; s++) {
        seq[s] = s;
        pos[s] = backend_seq_kv_len(be, s);
        rows[s] = s;
    }
    const int rc = backend_forward_pick(be, n, tok, seq, pos, n, rows, V, NULL, logits, picks, err);
    for (int32_t s = 0; rc == 0 && s < n; s++)
        tok[s] = picks[s].id;
    free(picks);
    return rc < 0 ? -1 : 0;
}
