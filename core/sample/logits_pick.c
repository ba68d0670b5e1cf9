/* The scalar reference of a row's greedy pick (logits_pick.h). */
#include "core/sample/logits_pick.h"

#include <math.h>

#define PICK_CHUNK 32

/* A chunk is looked at element by element only when one of its elements beats the running maximum or is not
 * finite: the test of a whole chunk has no branch and no dependence between its compares (it vectorises), and a
 * row of logits raises its maximum in few of its chunks. `x > m` is false for NaN, so NaN never wins; the running
 * maximum starts at -infinity when logits[0] is NaN, as the sampler counts it. */
logits_pick_t logits_pick(const float *x, int32_t n)
{
    logits_pick_t p = {0, -1, 0.0f};
    float m = x[0];
    if (isnan(m))
        m = -INFINITY;
    if (!isfinite(x[0]))
        p.nonfinite = 0;
    int32_t i = 1;
    for (; i + PICK_CHUNK <= n; i += PICK_CHUNK) {
        const int look = p.nonfinite < 0; /* x - x is 0 for a finite x, NaN for an infinite or NaN one */
        int any = 0;
        for (int32_t j = 0; j < PICK_CHUNK; j++)
            any |= (x[i + j] > m) | (look & !(x[i + j] - x[i + j] == 0.0f));
        if (!any)
            continue;
        for (int32_t j = 0; j < PICK_CHUNK; j++) {
            if (p.nonfinite < 0 && !isfinite(x[i + j]))
                p.nonfinite = i + j;
            if (x[i + j] > m) {
                m = x[i + j];
                p.id = i + j;
            }
        }
    }
    for (; i < n; i++) {
        if (p.nonfinite < 0 && !isfinite(x[i]))
            p.nonfinite = i;
        if (x[i] > m) {
            m = x[i];
            p.id = i;
        }
    }
    if (p.nonfinite >= 0)
        p.bad = x[p.nonfinite];
    return p;
}
