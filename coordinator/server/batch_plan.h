/* coordinator/server/batch_plan.h — the rows of one batched step of `guild serve --parallel` (engine.c's batched
 * loop): which running requests take part, and with how many rows.
 *
 * A decoding request takes one row, its next token. A request still prefilling takes its prompt's next chunk, whole
 * or not at all: chunks of the batch size from where its prefill began (after a reused prefix), cut at its snapshot
 * point, which are the chunks the same request alone is prefilled in (engine.c's serial loop, generate.c). The
 * backend gives a row the same bits whatever else is in its step only for the same chunk of its sequence (the cuda
 * backend's chunks of more than 32 rows take the flash-attention kernel, whose result follows the chunk), so with
 * the chunks fixed by the request alone, its reply does not depend on the requests that ran beside it.
 *
 * Placement, oldest request first: the decode rows, then the whole chunks that fit in what the batch has left. A
 * step that leaves the oldest waiting chunk out owes it the next step, which places that chunk first and then the
 * decode rows and other chunks that still fit: a prompt waits at most one step for room, and the decoding requests
 * skip at most every other step while a long prompt is prefilled beside them. */
#ifndef GUILD_COORDINATOR_SERVER_BATCH_PLAN_H
#define GUILD_COORDINATOR_SERVER_BATCH_PLAN_H

#include <stdbool.h>
#include <stdint.h>

/* What one running request wants of a step. */
typedef struct batch_want {
    int32_t rows; /* rows it takes when placed: 1 decoding, its next chunk prefilling; 0: nothing (it is ending) */
    bool prompt;  /* rows of its prompt (else a decode row) */
} batch_want_t;

/* The next chunk of a prompt of n_prompt tokens with n_done in the cache: up to n_batch tokens, cut at snap_at
 * (when n_done < snap_at; else snap_at is ignored), never past the prompt's end. 0 when the prompt is done. */
int32_t batch_plan_chunk(int32_t n_done, int32_t n_prompt, int32_t snap_at, int32_t n_batch);

/* Places want[0 .. n) (the running requests in admission order, oldest first) in a step of at most n_batch rows
 * (n_batch >= every want's rows): take[i] = want[i].rows if request i is in the step, else 0. *owed carries the
 * turn the oldest waiting prompt is owed from one step to the next (false before the first step). Returns the
 * step's rows (0 only when nothing wants a row). */
int32_t batch_plan_place(const batch_want_t *want, int n, int32_t n_batch, bool *owed, int32_t *take);

#endif
