#include "coordinator/server/batch_plan.h"

int32_t batch_plan_chunk(int32_t n_done, int32_t n_prompt, int32_t snap_at, int32_t n_batch)
{
    int32_t m = n_prompt - n_done;
    if (snap_at > n_done && m > snap_at - n_done) /* stops at the snapshot point */
        m = snap_at - n_done;
    if (m > n_batch)
        m = n_batch;
    return m > 0 ? m : 0;
}

int32_t batch_plan_place(const batch_want_t *want, int n, int32_t n_batch, bool *owed, int32_t *take)
{
    int oldest = -1; /* the oldest request with a prompt chunk waiting */
    for (int i = 0; i < n; i++) {
        take[i] = 0;
        if (oldest < 0 && want[i].prompt && want[i].rows > 0)
            oldest = i;
    }
    int32_t rows = 0;
    if (*owed && oldest >= 0) { /* its turn: first */
        take[oldest] = want[oldest].rows;
        rows += take[oldest];
    }
    for (int pass = 0; pass < 2; pass++) /* the decode rows, then the prompts' whole chunks, as they fit */
        for (int i = 0; i < n; i++)
            if (!take[i] && want[i].rows > 0 && want[i].prompt == (pass == 1) && want[i].rows <= n_batch - rows) {
                take[i] = want[i].rows;
                rows += take[i];
            }
    *owed = oldest >= 0 && !take[oldest];
    return rows;
}
