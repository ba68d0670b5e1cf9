/* tests/cuda/cuda_test_kv.c — see cuda_test_kv.h. */
#include "tests/cuda/cuda_test_kv.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "gpu-worker/dense/cpu/cpu_kernels.h"
#include "gpu-worker/dense/kv_format.h"

double cuda_test_kv_attn_check_row(const cuda_test_kv_attn_t *a, const float *out, int32_t t, const char *what)
{
    const int32_t HD = a->head_dim, Q = a->n_head * HD, group = a->n_head / a->n_head_kv, n = a->kv0 + t + 1;
    const int32_t first = a->window > 0 && n > a->window ? n - a->window : 0;
    float *ref = malloc((size_t)HD * sizeof *ref), *scores = malloc((size_t)n * sizeof *scores);
    float *rows = malloc(2 * (size_t)HD * sizeof *rows);
    ck_assert(ref && scores && rows);
    double worst = 0;
    for (int32_t h = 0; h < a->n_head; h++) {
        const cpu_kv_head_t kv = {a->kt, a->vt, a->k + (size_t)first * a->krow + kv_elem_bytes(a->kt, (h / group) * HD),
                                  a->v + (size_t)first * a->vrow + kv_elem_bytes(a->vt, (h / group) * HD), a->krow,
                                  a->vrow, a->rot};
        cpu_attention_head_cache(ref, a->q + (int64_t)t * Q + h * HD, &kv, n - first, HD, a->scale,
                                 a->sinks ? &a->sinks[h] : NULL, scores, rows);
        for (int32_t d = 0; d < HD; d++) {
            const float g = out[(int64_t)t * Q + h * HD + d];
            const double e = fabs((double)g - ref[d]);
            ck_assert_msg(e <= 2e-5 + 1e-4 * fabs(ref[d]), "%s tok %d head %d dim %d: %.9g vs %.9g", what, t, h, d,
                          (double)g, (double)ref[d]);
            worst = e > worst ? e : worst;
        }
    }
    free(ref);
    free(scores);
    free(rows);
    return worst;
}
