/* ipc/step.h — the step region: how the coordinator hands forward passes to the GPU worker.
 *
 * One request at a time. The coordinator writes a request (the tokens to append, the cache length to keep
 * first, which batch rows want logits) and rings `request` with its sequence number; the GPU worker runs it
 * on its backend, writes the response (status, cache length, logits or an error message) and rings
 * `response` with the same number. Requests are numbered 1, 2, 3, ... by the coordinator; a GPU worker
 * serves every request numbered after the `request` value it found when it attached (a request rung before
 * it came up belongs to a dead predecessor and is never answered: the coordinator replays instead).
 *
 * Why "keep" travels with every request rather than a truncate request of its own: the coordinator's view
 * of the cache (remote_backend.c) is the truth, and a GPU worker that has just replaced a dead one needs
 * the same instruction anyway — one request kind covers both.
 *
 * A request of several sequences (GUILD_STEP_SEQS, a GPU worker whose backend holds more than one) gives each row
 * its sequence and position instead of one `keep`: each sequence of the batch is truncated to its first row's
 * position first, then its rows append to its cache (backend_forward_seq).
 *
 * Snapshots (GUILD_STEP_SAVE, GUILD_STEP_LOAD: backend_seq_save and backend_seq_load of one sequence, for the
 * server's prefix cache) travel in chunks through the logits area, used as a byte window of max_out * n_vocab *
 * 4 bytes: a SAVE request at offset 0 makes the GPU worker take the snapshot, and each answer carries the next
 * chunk with the snapshot's size, until the coordinator has it all; LOAD requests bring the chunks in order, and
 * the one that completes the snapshot restores it. Such requests carry no tokens.
 *
 * A step of the multi-token-prediction layer (GUILD_STEP_MTP: backend_mtp_step of a backend created with it) takes
 * the draft's token in tokens[0] (n_tokens 1) and the step's number in state_n; `keep` is the coordinator's length
 * of the cache, to which the GPU worker cuts a longer one first (the rejected drafts of a verify step); the
 * logits come back in row 0.
 *
 * `abort` is rung by the coordinator to make the GPU worker give up the request of that number (or lower)
 * while it waits on the expert workers (a CPU worker that cannot be brought back); the response then says
 * why.
 *
 * A pick request (GUILD_STEP_PICK, a greedy step: backend_forward_pick) has the GPU worker answer each row wanted
 * with its pick (core/sample/logits_pick.h: 12 bytes) and write the logits only of the rows whose full[j] is set
 * (sampled ones): the GPU worker's backend reduces the rows where it computed them.
 *
 * Writers: the coordinator lays out the region (guild_step_init) before publishing the arena, then writes
 * the request fields and rings request and abort; the GPU worker writes the response fields and rings
 * response. Layout version: GUILD_STEP_MAGIC (change it with the layout).
 */
#ifndef GUILD_IPC_STEP_H
#define GUILD_IPC_STEP_H

#include <stddef.h>
#include <stdint.h>

#include "core/sample/logits_pick.h"
#include "core/util/err.h"
#include "ipc/doorbell.h"

#define GUILD_STEP_MAGIC UINT64_C(0x35504554534C4447) /* "GDLSTEP5" in memory order */
#define GUILD_STEP_MESSAGE_MAX 1024                   /* bytes of a response's error message, NUL included */

/* Geometry, fixed for the life of the arena. */
typedef struct guild_step_shape {
    uint32_t max_tokens; /* tokens per request (the GPU worker's batch) */
    uint32_t max_out;    /* logits rows per request */
    uint32_t n_vocab;    /* floats per logits row */
} guild_step_shape_t;

typedef enum guild_step_status {
    GUILD_STEP_OK = 0,
    GUILD_STEP_FAILED = 1,  /* the forward pass failed; message says why; the cache is back to `keep` */
    GUILD_STEP_ABORTED = 2, /* given up on the coordinator's abort; the cache is back to `keep` */
} guild_step_status_t;

/* guild_step_request_t.flags */
#define GUILD_STEP_SEQS 1 /* rows of several sequences */
#define GUILD_STEP_SAVE 2 /* a chunk of a snapshot of sequence state_seq's first state_n positions, from offset */
#define GUILD_STEP_LOAD 4 /* a chunk of a snapshot to restore into sequence state_seq (state_n positions) */
#define GUILD_STEP_MTP 8  /* a step (state_n) of the multi-token-prediction layer with token tokens[0], the cache
                             cut to keep positions first */
#define GUILD_STEP_PICK 16 /* with a forward request: picks[j] for every row wanted (backend_forward_pick); logits
                              row j only where full[j] */

/* Request fields; the coordinator writes them before ringing request. */
typedef struct guild_step_request {
    uint64_t seq;     /* the request number rung with it */
    int32_t keep;     /* truncate the cache to this many positions first */
    int32_t n_tokens; /* 1..max_tokens tokens at positions keep, keep+1, ... */
    int32_t n_out;    /* 0..max_out rows of logits wanted */
    int32_t flags;    /* GUILD_STEP_SEQS: the rows' sequences and positions are in seq_ids[] and positions[]; keep
                         is unused; GUILD_STEP_SAVE, GUILD_STEP_LOAD: a snapshot chunk (n_tokens 0) */
    int32_t state_seq;     /* SAVE, LOAD: the sequence */
    int32_t state_n;       /* SAVE, LOAD: its positions in the snapshot; MTP: the step */
    uint64_t state_offset; /* SAVE, LOAD: the chunk's first byte in the snapshot */
    uint64_t state_total;  /* LOAD: the snapshot's bytes */
    uint64_t chunk_bytes;  /* LOAD: the chunk's bytes, at the start of the logits area */
    uint64_t reserved[1];  /* 0 */
} guild_step_request_t;
_Static_assert(sizeof(guild_step_request_t) == 64, "guild_step_request_t is a shared layout");

/* Response fields; the GPU worker writes them before ringing response. */
typedef struct guild_step_response {
    uint64_t seq;        /* the request answered */
    int32_t status;      /* guild_step_status_t */
    int32_t kv_len;      /* positions in the GPU worker's cache afterwards */
    uint64_t exchanges;  /* MoE exchanges made for this request */
    uint64_t forward_ns; /* time in the backend's forward pass */
    uint64_t moe_ns;     /* of which waiting for the expert workers (publish -> every done) */
    uint64_t state_total; /* SAVE: the snapshot's bytes */
    uint64_t chunk_bytes; /* SAVE: the chunk's bytes, at the start of the logits area */
    uint64_t reserved[1];
    char message[GUILD_STEP_MESSAGE_MAX]; /* NUL-terminated; "" on success */
} guild_step_response_t;
_Static_assert(sizeof(guild_step_response_t) == 64 + GUILD_STEP_MESSAGE_MAX, "guild_step_response_t is shared");

/* Shared layout at the start of the region. */
typedef struct guild_step_shared {
    uint64_t magic;      /* GUILD_STEP_MAGIC */
    uint32_t max_tokens; /* guild_step_shape_t, as given to guild_step_init */
    uint32_t max_out;
    uint32_t n_vocab;
    uint32_t reserved0;
    uint64_t tokens_offset;   /* bytes from the region start: int32 tokens[max_tokens] */
    uint64_t out_rows_offset; /* int32 out_rows[max_out]: batch rows (0..n_tokens-1) wanting logits */
    uint64_t logits_offset;   /* float logits[max_out][n_vocab]: GPU worker, row j for out_rows[j] */
    uint64_t progress;        /* GPU worker: bumped as layers of a forward pass complete (backend_options_t.progress):
                                 the coordinator's stall watchdog sees a long pass move */
    uint64_t seq_ids_offset;   /* int32 seq_ids[max_tokens]: each row's sequence (GUILD_STEP_SEQS) */
    uint64_t positions_offset; /* int32 positions[max_tokens]: each row's position in its sequence (GUILD_STEP_SEQS) */
    uint64_t full_offset;      /* uint8 full[max_out]: coordinator, a pick request's rows wanting their logits */
    uint64_t picks_offset;     /* logits_pick_t picks[max_out]: GPU worker, a pick request's row j's pick */
    guild_doorbell_t request;  /* rung by the coordinator */
    guild_doorbell_t response; /* rung by the GPU worker */
    guild_doorbell_t abort;    /* rung by the coordinator */
    guild_step_request_t req;
    guild_step_response_t resp;
} guild_step_shared_t;
_Static_assert(sizeof(guild_step_shared_t) % 64 == 0, "guild_step_shared_t is a shared layout");

/* A process's handle: the shared layout and its arrays. */
typedef struct guild_step {
    guild_step_shared_t *sh;
    int32_t *tokens;   /* [max_tokens] */
    int32_t *out_rows; /* [max_out] */
    int32_t *seq_ids;  /* [max_tokens] */
    int32_t *positions; /* [max_tokens] */
    uint8_t *full;      /* [max_out] */
    logits_pick_t *picks; /* [max_out] */
    float *logits;     /* [max_out][n_vocab] */
    guild_step_shape_t shape;
} guild_step_t;

/* Bytes of region the shape needs, or 0 if it is invalid (a zero dimension, or max_out > max_tokens). */
size_t guild_step_memsize(const guild_step_shape_t *shape);

/* Coordinator: lays the region out at addr (64-byte aligned, size >= memsize). -1 with err on a bad shape. */
int guild_step_init(void *addr, size_t size, const guild_step_shape_t *shape, guild_err_t *err);

/* Every process: validates the layout at addr against size and fills *st. -1 with err naming what is wrong. */
int guild_step_attach(guild_step_t *st, void *addr, size_t size, guild_err_t *err);

#endif
