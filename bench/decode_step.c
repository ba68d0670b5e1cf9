/* One greedy decode step of concurrent sessions (contract in bench/bench.h). */
#include "bench/bench.h"

#include "gpu-worker/dense/backend.h"

int bench_decode_step(struct backend *be, int32_t n, int32_t *tok, int32_t *seq, int32_t *pos, int32_t *rows,
                      float *logits, int32_t V, guild_err_t *err)
{
    for (int32_t s = 0; s < n; s++) {
        seq[s] = s;
        pos[s] = backend_seq_kv_len(be, s);
        rows[s] = s;
    }
    if (backend_forward_seq(be, n, tok, seq, pos, n, rows, logits, err) < 0)
        return -1;
    for (int32_t s = 0; s < n; s++)
        tok[s] = bench_argmax(logits + (size_t)s * (size_t)V, V);
    return 0;
}
