/* core/sample/logits_pick.h — a row of logits reduced to what a greedy choice needs: the id the sampler's greedy
 * step picks (sampler.h: the largest logit, NaN counted as -infinity, the lowest id on ties) and the lowest id of
 * a logit that is NaN or infinite (what sampler_nonfinite reports), with its value. A backend can compute it where the logits are
 * (the CUDA backend on the device: backend_forward_pick), so a greedy step does not move its row of n_vocab
 * floats; this is the scalar reference, the one the host uses and the device's kernel must equal id for id. */
#ifndef GUILD_SAMPLE_LOGITS_PICK_H
#define GUILD_SAMPLE_LOGITS_PICK_H

#include <stdint.h>

/* The rule below is the device kernel's too (gpu-worker/dense/cuda/logits_pick.cu): one definition for both. */
#ifdef __CUDACC__
#define LOGITS_PICK_FN static inline __host__ __device__
#else
#define LOGITS_PICK_FN static inline
#endif

/* Also a shared layout: the step region's picks (ipc/step.h) are an array of it, written by the GPU worker. */
typedef struct logits_pick {
    int32_t id;        /* the first index of the largest logit (NaN as -infinity; all -infinity or NaN: 0) */
    int32_t nonfinite; /* the lowest index of a NaN or infinite logit; -1: every logit is finite */
    float bad;         /* the logit at nonfinite, as it was (bits kept: a message prints it); 0 when none */
} logits_pick_t;
#ifdef __cplusplus
static_assert(sizeof(logits_pick_t) == 12, "logits_pick_t is a shared layout (ipc/step.h)");
#else
_Static_assert(sizeof(logits_pick_t) == 12, "logits_pick_t is a shared layout (ipc/step.h)");
#endif

/* The pick of logits[0..n) (n >= 1). */
logits_pick_t logits_pick(const float *logits, int32_t n);

/* Whether a pick with this ordering key beats another: a larger value, or an equal one (== : -0 equals +0) at a
 * lower id; the reduction order of a parallel argmax that gives the scalar scan's answer. */
LOGITS_PICK_FN int logits_pick_better(float v, int32_t id, float best_v, int32_t best_id)
{
    return v > best_v || (v == best_v && id < best_id);
}

#endif
