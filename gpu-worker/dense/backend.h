/* gpu-worker/dense/backend.h — the layer program's backend interface (Redis ae.c style: a few functions, one
 * implementation per backend, chosen by name at run time among those built in).
 *
 * A backend holds the dense weights it needs, the KV cache and its scratch; it runs the whole forward pass of
 * a batch of tokens: embedding, every layer (attention, router, the routed experts through the executor it was
 * given, core/model/moe_exec.h, shared expert, combine) and the LM head for the rows asked for. Backends: "cpu"
 * (plain C, gpu-worker/dense/cpu/, the numerical reference) and later "cuda".
 *
 * Numerical contract of the "cpu" backend (what another backend must reproduce, within a stated tolerance for
 * CUDA): every value of a token is computed from that token's own inputs and the KV cache in a fixed order,
 * so the logits of a position are the same bits whatever the batch split (prefill in chunks of any size, or
 * one token at a time), the thread count, and the routed-expert executor. One exception, by choice: multi-head
 * latent attention (deepseek2) has two forms that agree within float rounding, not bit for bit (absorbed: the
 * queries taken into the latent space, the cheap one for few rows; expanded: keys and values up-projected from
 * the cached latent, the cheap one for large batches); with backend_options_t.mla_form auto a batch's size picks
 * one, so a position's logits are the same bits for batch splits whose batches pick the same form, and for
 * every split with a fixed form.
 *
 * Sequences: a backend created with backend_options_t.n_seq > 1 holds that many independent caches (each of n_ctx
 * positions, and each its own recurrent state) and runs rows of several sequences in one batch
 * (backend_forward_seq): a row's attention reads its own sequence's cache only, every other value is computed per
 * row as above, so a row's logits are the same bits whatever else shares its batch (with mla_form auto, the form
 * of a sequence's rows is picked by how many rows of that sequence the batch holds, as if they ran alone).
 *
 * The "cuda" backend's batch invariance (what speculative decoding's verify steps rely on): a batch of at most
 * CUDA_DECODE_ROWS (32) rows computes each row as that row alone would, after the same cache rows: its logits
 * and the cache rows it writes are the same bits for every batch split into such batches, graph or direct
 * launch (matrix products, quantization, norms and experts are per row; the decode attention plans each row's
 * key splits from that row's own position). Larger batches (prompt prefill) take the flash-attention kernel,
 * whose tiles follow the batch: their rows are within float rounding of those, not the same bits, so a prompt's
 * cache (and what follows from it) is the same bits for the same prefill split only.
 */
#ifndef GUILD_GPU_WORKER_BACKEND_H
#define GUILD_GPU_WORKER_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/model/model.h"
#include "core/model/moe_exec.h"
#include "core/sample/logits_pick.h"
#include "core/util/pool.h"
#include "core/util/err.h"
#include "gpu-worker/dense/moe_xchg.h"

typedef struct backend backend_t;
struct gpu_plan;

/* The dense contract: what every backend takes. A backend's own settings come in its own record (the
 * `config` of backend_new), declared beside it: gpu-worker/dense/cuda/cuda_config.h for "cuda". */
/* backend_options_t.mla_form */
enum {
    BACKEND_MLA_AUTO = 0, /* absorbed below the batch size where up-projecting the cached latent pays, expanded
                             from it (the "cpu" backend: by multiply-adds, gpu-worker/dense/cpu/attn_mla.c) when
                             the up-projections are plain floats; absorbed for block-quantized ones */
    BACKEND_MLA_ABSORBED, /* always absorbed (llama.cpp's form) */
    BACKEND_MLA_EXPANDED, /* always expanded */
};

typedef struct backend_options {
    int32_t n_ctx;    /* KV cache capacity in positions (1..n_ctx_train is typical; more is allowed) */
    int32_t n_batch;  /* most tokens one backend_forward call takes */
    guild_pool_t *pool; /* CPU threads (cpu backend; may be shared with the expert executor); borrowed */
    moe_exec_t *moe;  /* routed-expert executor (the process's one); borrowed, must outlive the backend */
    bool all_rows;    /* run every token through the last layer, even those whose logits nobody asked for
                         (routing statistics); otherwise a backend may skip them */
    bool count_routing; /* count the routed pairs per (layer, expert) (backend_routing) and in backend_stats */
    bool check_finite; /* check the residual stream and the norms' outputs for NaN and infinity
                          (gpu-worker/dense/finite_check.h): a find fails the forward call with a message naming
                          the layer, the tensor and the position; the values are the same bits either way */
    int32_t mla_form; /* multi-head latent attention's form (BACKEND_MLA_*; the contract above) */
    int32_t n_seq;    /* independent sequences (caches of n_ctx positions each, backend_forward_seq); 0 or 1: one.
                         A backend without forward_seq refuses more than one at create */
    int32_t kv_type;  /* the KV cache's format (KV_TYPE_*, gpu-worker/dense/kv_format.h; 0: the backend's own,
                         f32 on "cpu", f16 on "cuda"); creation fails for a format the model cannot take. A
                         position's cache bytes come from its own K/V only, so the contract above holds for
                         every format */
    const struct gpu_plan *plan; /* the GPU memory plan to follow (gpu-worker/dense/gpu_plan.h; read during creation
                                  only), computed once by the caller for every process; its n_batch must be
                                  n_batch. NULL: a backend that plans computes its own from its settings. A
                                  resident expert of the plan is computed by the backend itself (no other process
                                  holds it); creation fails when the plan asks for more than the backend's
                                  plan_caps. The cpu backend, a stand-in for a device, computes the plan's resident
                                  experts and never streams */
    bool mtp;         /* run the model's first multi-token-prediction layer (backend_mtp_step; model_mtp_layer_t in
                         core/model/weights.h): the backend keeps every position's hidden state and a K/V cache
                         for that layer; one sequence only. Creation fails for a model without one, or a backend
                         that cannot */
    int32_t rollback; /* a model with recurrent layers (model_recurrent): a forward call that gives a sequence at most
                         this many rows (a speculative verify step) keeps the recurrent state after each of them, so
                         that backend_kv_truncate back to a position that call added restores the state there
                         instead of emptying the cache; 0: none. Costs `rollback` copies of a sequence's state in
                         memory, and a copy of it per row of such a call */
    uint64_t *progress; /* optional: incremented (atomically, relaxed) as each layer of a forward pass completes,
                           so that a watcher in another process can tell a long pass from a hung one; the cuda
                           backend counts layers the device has finished, in passes of more than its graph's rows
                           (a captured step is short); NULL: none */
} backend_options_t;

/* Counters since creation of what a backend did itself (backend_stats; the executor it was given counts its
 * own, moe_exec_stats). */
typedef struct backend_stats {
    int32_t gpu_expert_layers; /* layers whose experts it computes on the device */
    uint32_t graphs;           /* CUDA graphs captured */
    uint64_t graph_steps;      /* forward passes replayed from a graph */
    uint64_t streamed_layers;  /* layer computations of CPU-held experts done on the device with streamed weights */
    uint64_t streamed_bytes;   /* expert bytes copied to the device for them */
    /* the batches of those layers split between the CPU side and the device (gpu-worker/dense/expert_split.h), summed */
    uint64_t split_gpu_experts, split_cpu_experts; /* experts with pairs computed on each side */
    uint64_t split_gpu_pairs, split_cpu_pairs;     /* (token, slot) pairs computed on each side */
    uint64_t staged_bytes;     /* streamed bytes that went through a staging ring (0 with pageable copies) */
    uint64_t stage_wait_ns;    /* host time spent waiting for the stager to fill ring slots */
    /* with backend_options_t.count_routing (or resident experts of a plan): the routed (token, slot) pairs, and
     * those served by resident experts (the GPU's hit rate is their ratio) */
    uint64_t routed_pairs, resident_pairs;
    /* forward passes that streamed experts: their device time, the copy engine busy, the device waiting for
     * copies and for the CPU side (the device is busy the rest of the span) */
    uint64_t stream_passes, stream_span_ns, copy_busy_ns, copy_wait_ns, cpu_wait_ns;
    /* the multi-process pipeline's CPU workers with prefetch hints (--prefetch-experts), summed: the experts hinted,
     * those the next exchange then routed to (the prediction's hit rate), the bytes prefetched and the exchanges
     * prefetched for */
    uint64_t hint_experts, hint_hits, prefetch_bytes, prefetch_layers;
    /* the multi-process pipeline's CPU workers, summed: the dense side's turnaround between a decode step's
     * exchanges of one token as they see it (from a worker's done ring to its seeing the next exchange of the same
     * step: the dense kernels between two MoE layers and the bus both ways), its total and count */
    uint64_t turnaround_ns, turnarounds;
} backend_stats_t;

/* What `--gpu-mem auto` knows of a device (backend_ops_t.device_memory). */
typedef struct backend_device_mem {
    uint64_t total; /* its memory in bytes; 0: unknown */
    uint64_t free;  /* what this process would find free of it now, as a context of its own sees it (less what the
                       driver reserves, what other processes hold and that context); 0: not asked */
    char why[160];  /* why free was not asked; "" when it was */
} backend_device_mem_t;

typedef struct backend_ops {
    const char *name;
    /* Optional: the devices it can run on here, 0 with the reason in why when none (what `--backend auto` asks,
       backend_auto); a backend without it runs anywhere (the cpu backend) */
    int (*devices)(char *why, size_t why_len);
    /* Optional: the device it runs on, its memory and what this process would have free of it now, leaving none
       of it taken (a context made to ask is destroyed after): what `--gpu-mem auto` plans against
       (coordinator/stack_plan.h) */
    void (*device_memory)(backend_device_mem_t *out);
    unsigned plan_caps; /* what of a GPU memory plan it follows (GPU_PLAN_CAP_*, gpu_plan.h): 0 whole resident
                           layers and whole-layer staging slots */
    /* config: the backend's own settings record, or NULL for its defaults (backend_new) */
    int (*create)(backend_t **out, const model_t *m, const backend_options_t *opt, const void *config,
                  guild_err_t *err);
    int (*forward)(backend_t *b, int32_t n_tokens, const int32_t *tokens, const int32_t *positions,
                   int32_t n_out, const int32_t *out_rows, float *logits, guild_err_t *err);
    int32_t (*kv_len)(const backend_t *b);
    void (*kv_truncate)(backend_t *b, int32_t n_pos);
    /* Optional, all three or none: several sequences (backend_forward_seq; seq NULL: every row sequence 0). A
     * backend without them runs sequence 0 only and refuses n_seq > 1 at create. */
    int (*forward_seq)(backend_t *b, int32_t n_tokens, const int32_t *tokens, const int32_t *seq,
                       const int32_t *positions, int32_t n_out, const int32_t *out_rows, float *logits,
                       guild_err_t *err);
    int32_t (*seq_kv_len)(const backend_t *b, int32_t seq);
    void (*seq_kv_truncate)(backend_t *b, int32_t seq, int32_t n_pos);
    void (*destroy)(backend_t *b);
    /* Optional, both or none: one sequence's cache state as bytes (backend_seq_save, backend_seq_load). save
     * returns a malloc'd blob (the caller frees it). */
    int (*seq_save)(backend_t *b, int32_t seq, int32_t n_pos, void **out, size_t *size, guild_err_t *err);
    int (*seq_load)(backend_t *b, int32_t seq, const int32_t *tokens, int32_t n_pos, const void *blob, size_t size,
                    guild_err_t *err);
    void (*stats)(const backend_t *b, backend_stats_t *out); /* optional */
    /* Optional: the executor over an exchange that this backend drives itself (backend_exchange_exec_new). */
    int (*exchange_exec)(moe_exec_t **out, struct guild_exchange *x, const moe_xchg_options_t *o, guild_err_t *err);
    /* Optional: routed pairs per (layer, expert) since creation into counts[n_layer * n_expert]; -1 when not
     * counted (backend_options_t.count_routing). */
    int (*routing)(const backend_t *b, uint64_t *counts);
    /* Optional: backend_mtp_step (a backend without it refuses backend_options_t.mtp at create). */
    int (*mtp_step)(backend_t *b, int32_t step, int32_t token, float *logits, guild_err_t *err);
    /* Optional: backend_forward_pick where the logits are (without it: backend_forward_seq, then logits_pick of
     * each row on the host). */
    int (*forward_pick)(backend_t *b, int32_t n_tokens, const int32_t *tokens, const int32_t *seq,
                        const int32_t *positions, int32_t n_out, const int32_t *out_rows, const uint8_t *full,
                        float *logits, logits_pick_t *picks, guild_err_t *err);
    /* Optional, both or none: backend_logits_alloc's memory (NULL: out of memory) and its release. */
    void *(*logits_alloc)(backend_t *b, size_t bytes);
    void (*logits_free)(backend_t *b, void *p);
} backend_ops_t;

/* Implementations embed this as their first member. */
struct backend {
    const backend_ops_t *ops;
    int32_t n_seq; /* sequences it holds (>= 1); set by backend_new (or the maker of a backend not made by name) */
};

/* `--backend auto`: the name of the first built-in backend, after "cpu", with a device here (backend_ops_t.devices),
 * else "cpu"; why says what was found ("cuda: 1 device" or each one's reason for none), never empty. */
const char *backend_auto(char *why, size_t why_len);

/* The device backend `name` runs on (backend_ops_t.device_memory): out->total 0 for a backend without a device, a
 * name not built in, or a device that cannot be asked; out->free 0 with out->why set when its free memory was not
 * asked. Only for a process that has not started using the device (the coordinator before any backend). */
void backend_device_memory(const char *name, backend_device_mem_t *out);

/* The GPU_PLAN_CAP_* bits of backend `name` (what a plan for it may ask), or -1 for a name not built in. */
int backend_plan_caps(const char *name);

/* Creates backend `name` ("cpu", ...) for model m (borrowed: must outlive the backend). config is the named
 * backend's own settings record (read during creation only), or NULL for its defaults: "cuda" takes a
 * cuda_config_t (gpu-worker/dense/cuda/cuda_config.h); "cpu" has none and takes NULL. Fails with a message for
 * an unknown or unbuilt backend name, a record given to a backend that takes none, bad options, or out of
 * memory. */
int backend_new(backend_t **out, const char *name, const model_t *m, const backend_options_t *opt,
                const void *config, guild_err_t *err);

/* The routed-expert executor of a GPU worker: the one over the MoE exchange x (borrowed: must outlive it) that
 * backend `name` drives best, for a model of configuration cfg (whose width and top-k must be the exchange's):
 * the "cuda" backend's drives it from the device (in-graph doorbells) when o->map can be registered for the
 * device (else, with a warning, from the host), the others' from the host (moe_xchg.h). Destroy it with
 * moe_exec_destroy, after the backend. -1 with err on an unknown backend, a shape mismatch or out of memory. */
int backend_exchange_exec_new(moe_exec_t **out, const char *name, const model_config_t *cfg, struct guild_exchange *x,
                              const moe_xchg_options_t *o, guild_err_t *err);

/* Runs tokens[0..n_tokens) (1 <= n_tokens <= n_batch) at positions[i], which must be kv_len + i: the batch
 * appends to the cache. Writes logits[j][0..n_vocab) for the batch rows out_rows[0..n_out) (indices into the
 * batch, any order). Fails (-1, message) on a token id out of range, a bad position, a full cache, or an
 * executor failure; then the cache length is back where it was, or 0 for a model with recurrent layers whose
 * state the failed call had moved on. */
int backend_forward(backend_t *b, int32_t n_tokens, const int32_t *tokens, const int32_t *positions,
                    int32_t n_out, const int32_t *out_rows, float *logits, guild_err_t *err);

/* Runs a batch of rows of several sequences: row i is token tokens[i] of sequence seq[i] (0 <= seq[i] < n_seq; seq
 * NULL: every row is sequence 0, backend_forward) at positions[i], which must be that sequence's kv_len plus the
 * number of rows of the same sequence before row i: each sequence's rows append to its own cache, in batch order
 * (they need not be adjacent). Outputs and failures as backend_forward; a failure leaves every sequence's cache
 * where it was (a recurrent model: the sequences of the batch emptied). Each row's logits are the same bits as
 * its sequence's rows alone would give (the contract above). */
int backend_forward_seq(backend_t *b, int32_t n_tokens, const int32_t *tokens, const int32_t *seq,
                        const int32_t *positions, int32_t n_out, const int32_t *out_rows, float *logits,
                        guild_err_t *err);

/* backend_forward_seq for greedy rows: also writes picks[j], the pick (core/sample/logits_pick.h: the sampler's
 * greedy id and the lowest non-finite id) of output row j's logits, n_vocab of them; logits row j is written only
 * where full[j] is non-zero (full NULL: no row), the others' contents are unspecified. logits has room for n_out
 * rows either way. A backend that can (the CUDA backend) reduces the rows where it computed them and moves only
 * the picks and the full rows; the ids are those of logits_pick on the rows backend_forward_seq gives. */
int backend_forward_pick(backend_t *b, int32_t n_tokens, const int32_t *tokens, const int32_t *seq,
                         const int32_t *positions, int32_t n_out, const int32_t *out_rows, int32_t n_vocab,
                         const uint8_t *full, float *logits, logits_pick_t *picks, guild_err_t *err);

/* One step of the model's multi-token-prediction layer (a backend created with backend_options_t.mtp): the
 * logits, n_vocab floats, of the token two positions after the one the step's hidden state is of.
 *   step 0:  token is the one that follows the cache's last position kv - 1 (sampled from its logits, not fed
 *            yet); the layer first takes in every position before kv - 1 it has not seen (their hidden states
 *            and the tokens after them, in batches), then runs at kv - 1 with that position's hidden state and
 *            token: the logits are a guess at the token at kv + 1.
 *   step j:  token is a guess at the token at kv - 1 + j (from step j - 1's logits); runs at kv - 1 + j with
 *            step j - 1's output as the hidden state (chained drafts).
 * Steps follow each other without a forward call or a truncation between them (else -1); their cache rows are
 * scratch that later steps rewrite. The layer's cache holds a position once the token after it is in the main
 * cache, so a truncation costs it nothing but those positions. Each position's values come from its own
 * inputs and the cache, as the forward pass's (the contract above). -1 with err on a bad step or token, a full
 * context, or a backend created without mtp. */
int backend_mtp_step(backend_t *b, int32_t step, int32_t token, float *logits, guild_err_t *err);

/* Host memory for n floats of logits that a caller hands to b's forward calls step after step: of the kind b
 * writes fastest, else plain malloc. The "cuda" backend gives page-locked memory, which its step's graph copies the
 * logits into straight from the device; into other host memory it copies them through a staging buffer of its own
 * and then with the host's memcpy after the step (~57 us a step for a 151,936-word vocabulary on the H200 box).
 * Any host memory is valid as forward's logits; the bits are the same. NULL when out of memory. Release it with
 * backend_logits_free(b, p) (NULL: nothing) before b is destroyed. */
float *backend_logits_alloc(backend_t *b, size_t n);
void backend_logits_free(backend_t *b, float *p);

/* The sequences the backend holds (backend_options_t.n_seq, at least 1). */
int32_t backend_n_seq(const backend_t *b);

/* Positions held in the KV cache (of sequence 0). */
int32_t backend_kv_len(const backend_t *b);

/* Positions held in sequence seq's cache (0 <= seq < n_seq). */
int32_t backend_seq_kv_len(const backend_t *b, int32_t seq);

/* backend_kv_truncate for sequence seq's cache only; the others are untouched. */
void backend_seq_kv_truncate(backend_t *b, int32_t seq, int32_t n_pos);

/* Keeps positions [0, n_pos) of the cache (of sequence 0; n_pos >= kv_len does nothing); 0 clears it. A model with recurrent
 * layers (model_recurrent) keeps no earlier position: any n_pos < kv_len empties the cache, so a caller checks
 * backend_kv_len afterwards (and recomputes the prefix); except, with backend_options_t.rollback, back to a
 * position added by the sequence's last forward call when that call gave it at most `rollback` rows: then the
 * state there is restored (the same bits as a cache that never held the later positions), and a later truncation
 * may go back again to any position of that call before n_pos. */
void backend_kv_truncate(backend_t *b, int32_t n_pos);

/* Empties the cache: backend_kv_truncate(b, 0). */
void backend_kv_clear(backend_t *b);

/* Snapshots (a prefix cache's, coordinator/server/prefix_cache.h). The state of sequence seq's cache for positions
 * [0, n_pos) as one blob (malloc'd into *out, *size bytes; the caller frees it): every layer's cache rows of those
 * positions in the cache's format, and a model with recurrent layers (model_recurrent) their state, which exists
 * at the cache's end only: there n_pos must be the sequence's length. The blob begins with a
 * backend_state_header_t naming its shape; it is the same bits on every backend that keeps the same format
 * (restoring it gives the logits the positions' tokens would, bit for bit). -1 with err: a backend without
 * snapshots, n_pos out of range, out of memory, a worker lost in the multi-process pipeline. */
int backend_seq_save(backend_t *b, int32_t seq, int32_t n_pos, void **out, size_t *size, guild_err_t *err);

/* Replaces sequence seq's cache by the first n_pos positions of a blob of backend_seq_save (its length, for a
 * recurrent model), whose positions hold tokens[0 .. n_pos) (kept by a backend that replays its cache into a
 * restarted worker, the multi-process pipeline's; the others ignore them). The blob is checked against the
 * backend's model and format before anything is changed: -1 with a message naming the mismatch (then the cache
 * is as it was), or on a transfer failure (then the sequence's cache is empty). */
int backend_seq_load(backend_t *b, int32_t seq, const int32_t *tokens, int32_t n_pos, const void *blob, size_t size,
                     guild_err_t *err);

/* Whether the backend takes snapshots (backend_seq_save). */
bool backend_has_snapshots(const backend_t *b);

/* The head of every snapshot blob: the shape a backend checks before restoring one. */
#define BACKEND_STATE_MAGIC UINT32_C(0x54534B47) /* "GKST" */
#define BACKEND_STATE_VERSION 1
typedef struct backend_state_header {
    uint32_t magic;       /* BACKEND_STATE_MAGIC */
    uint32_t version;     /* BACKEND_STATE_VERSION */
    int32_t n_pos;        /* positions held */
    int32_t kv_type;      /* the cache format (KV_TYPE_*, resolved) */
    int32_t n_layer;      /* layers; each: n_pos key rows then n_pos value rows (model_layer_cache_row's widths) */
    int32_t n_recurrent;  /* recurrent layers; their conv states, then their SSM states follow the rows (f32) */
    uint64_t rows_bytes;  /* bytes of the cache rows (after this header) */
    uint64_t state_bytes; /* bytes of the recurrent states (after the rows) */
    uint64_t model_hash;  /* a hash of what the layout depends on in the model's configuration (layers, widths,
                             heads, recurrent shape): a blob of another model is refused even when sizes agree */
} backend_state_header_t;
_Static_assert(sizeof(backend_state_header_t) == 48, "backend_state_header_t is a file layout");

/* For backends: the header of a snapshot of n_pos positions of model c in KV format kv_type (resolved), and the
 * byte counts of its parts: layer il's key rows and value rows (n_pos rows each, of model_layer_cache_row's widths
 * in the format's element types, backend_state_rows), then every recurrent layer's conv state and SSM state
 * (floats). */
backend_state_header_t backend_state_header(const model_config_t *c, int32_t kv_type, int32_t n_pos);
void backend_state_rows(const model_config_t *c, int32_t kv_type, int32_t il, int32_t n_pos, size_t *k, size_t *v);

/* For backends: 0 when blob (size bytes, whose header backend_seq_load has checked for magic, version and sizes)
 * can be restored by a backend of model c in format kv_type holding n_ctx positions; -1 with a message naming the
 * mismatch (the model's shape, the format, the length). */
int backend_state_check(const model_config_t *c, int32_t kv_type, int32_t n_ctx, const void *blob, size_t size,
                        guild_err_t *err);

/* The backend's own counters: 0 with *out filled, or -1 (*out zeroed) when it keeps none. */
int backend_stats(const backend_t *b, backend_stats_t *out);

/* The routed pairs per (layer, expert) since creation, into counts[n_layer * n_expert]: 0, or -1 when the
 * backend does not count them (created without count_routing, or it cannot). */
int backend_routing(const backend_t *b, uint64_t *counts);

/* Frees the backend; sets *b to NULL. NULL-safe. */
void backend_destroy(backend_t **b);

/* The names of the backends built in, separated by spaces ("cpu cuda"). */
const char *backend_names(void);

#endif
