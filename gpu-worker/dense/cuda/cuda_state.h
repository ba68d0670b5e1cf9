/* gpu-worker/dense/cuda/cuda_state.h — internal: the CUDA backend's state, shared by its forward driver
 * (cuda_backend.c), its weight upload (cuda_weights.c), its layer program (cuda_layer.c) and the parts that
 * program is made of (cuda_parts.h). Device buffers
 * hold up to n_batch tokens' rows, like the CPU backend's (gpu-worker/dense/cpu/cpu_state.h). */
#ifndef GUILD_GPU_WORKER_CUDA_STATE_H
#define GUILD_GPU_WORKER_CUDA_STATE_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "core/model/model.h"
#include "core/quant/blocks.h"
#include "gpu-worker/dense/backend.h"
#include "gpu-worker/dense/cuda/cuda_kernels.h" /* cuda_norm_pre_t */
#include "gpu-worker/dense/cuda/cuda_mem_trace.h"
#include "gpu-worker/dense/cuda/cuda_moe.h"

struct cuda_stage;   /* gpu-worker/dense/cuda/cuda_stage.h */
struct stage_server; /* ipc/stage_server.h */
struct stage_ring;   /* ipc/stage_ring.h */

/* A dense matrix (or vector) on the device: n_rows rows of n_in elements of `type`, row_bytes apart. */
typedef struct cuda_tensor {
    const void *d;       /* device copy; NULL when the model has no such tensor */
    guild_type_t type;
    int64_t n_in;        /* ne[0] */
    int64_t n_rows;      /* ne[1] */
    size_t row_bytes;
} cuda_tensor_t;

/* The device copy of a layer's dense tensors: one cuda_tensor_t per entry of MODEL_LAYER_DENSE_TENSORS
 * (core/model/weights.h), named as the model_layer_t field (attn_norm, wq, ..., shexp_down). */
typedef struct cuda_layer {
#define CUDA_LAYER_FIELD(name, kind) cuda_tensor_t name;
    MODEL_LAYER_DENSE_TENSORS(CUDA_LAYER_FIELD)
#undef CUDA_LAYER_FIELD
} cuda_layer_t;

/* The device copy of the multi-token-prediction layer's own tensors (model_mtp_layer_t, core/model/weights.h): embed,
 * head and head_norm are the model's token_embd, output and output_norm where the file has none. */
typedef struct cuda_mtp_tensors {
    cuda_tensor_t eh_proj, enorm, hnorm, embed, head, head_norm;
} cuda_mtp_tensors_t;

#define CUDA_GRAPHS 40    /* graphs kept: decode and the verify steps' sizes, each with its logits rows */
#define CUDA_GRAPH_ROWS 16 /* steps of up to this many tokens are captured (decode, and speculative verify steps
                              of up to 15 drafts; the decode attention kernel's, so the same bits at any size) */

typedef struct cuda_graph {
    int32_t n, n_out;           /* 0 tokens: an empty entry */
    int32_t n_grp;              /* the batch's sequence groups (cuda_backend_t.grp_*), each's sequence and rows: a
                                   group's cache addresses are in the graph */
    int32_t grp_seq[CUDA_GRAPH_ROWS], grp_rows[CUDA_GRAPH_ROWS];
    const float *dst;           /* where the graph copies the logits */
    cudaGraphExec_t exec;
    uint64_t used;              /* graph_clock at the last launch */
} cuda_graph_t;

typedef struct cuda_backend {
    backend_t base;
    const model_config_t *cfg;
    const model_weights_t *w;
    cudaStream_t stream;
    moe_exec_t *moe;            /* the routed experts' device executor the layers call: moe_gpu, moe_host or the
                                   options' executor */
    moe_exec_t *moe_gpu;        /* owned: the "gpu" executor (device experts) over the others; NULL: none */
    moe_exec_t *moe_host;       /* owned: the "host" adapter to the options' executor when it is a host one */
    /* streaming through a staging ring (cuda_config_t.stager; all NULL: pageable copies or no streaming) */
    struct cuda_stage *stage;         /* owned; borrowed by moe; replaced after a failure (cuda_backend.c) */
    struct stage_server *stage_server; /* owned: CUDA_STAGER_THREAD's in-process server */
    struct stage_ring *stage_ring;     /* owned: created (THREAD) or attached (PROCESS) */
    const void *map_base;              /* the model file's whole mapping, which the stager serves */
    size_t map_bytes;
    uint64_t staged_bytes0, stage_wait_ns0; /* counters of the stages replaced so far */
    int32_t n_ctx;              /* KV capacity (positions) */
    int32_t n_batch;            /* rows of every activation buffer */
    int32_t n_seq;              /* sequences (backend_options_t.n_seq, >= 1): each its own caches and states */
    int32_t *seq_len;           /* host [n_seq]: positions [0, seq_len[s]) of sequence s hold valid K/V */
    /* The batch of the current step by sequence: its rows are reordered (stably) so that each sequence's rows
     * are adjacent, group g the rows [grp_row0[g], grp_row0[g] + grp_rows[g]) of sequence grp_seq[g], whose cache
     * held grp_len[g] positions at the step's start (on the device at d_pos + g). The position-dependent steps
     * (the attention parts' RoPE, cache writes, attention, recurrent states) run group by group as that
     * sequence's rows alone would; every other step is per row over the whole batch. */
    int32_t n_grp;
    int32_t *grp_seq, *grp_row0, *grp_rows, *grp_len; /* host [n_batch] each */
    int32_t *row_from;          /* host [n_batch]: the caller's row of each reordered row */
    int32_t *row_to;            /* host [n_batch]: the reordered row of each of the caller's */
    int32_t *row_pos;           /* host [n_batch]: the position of each reordered row */
    int32_t logit_rows;         /* rows of `logits`: the LM head runs in chunks of this many */

    /* weights: one device allocation, tensors at 256-byte offsets */
    void *weight_mem;
    cuda_tensor_t token_embd, output_norm, output;
    cuda_layer_t *layers;       /* [n_layer] */

    float *rope_cs;             /* [n_ctx][n_rot] cos/sin pairs of every position (cpu_rope_table) */
    int32_t kv_format;          /* backend_options_t.kv_type resolved (KV_TYPE_DEFAULT is f16 here) */
    guild_type_t kv_type;       /* element type of the key rows (kv_type_k: F16, F32, Q8_0 or Q4_0) */
    guild_type_t v_type;        /* of the value rows (kv_type_v; k8v4: Q4_0, rotated head by head) */
    size_t k_layer_bytes, v_layer_bytes; /* one layer slot's n_ctx key rows, value rows */
    void *k_cache;              /* [n_seq][n_kv_layers][n_ctx][kv_row] of kv_type (cuda_kv_k) */
    void *v_cache;              /* [n_seq][n_kv_layers][n_ctx][v_row] of v_type; NULL when v_row is 0 */
    void *kv_host_k, *kv_host_v; /* the plan's kv_host: the caches in mapped host RAM (k_cache and v_cache are
                                    their device addresses), else NULL */
    void *kv_stage_k, *kv_stage_v; /* with kv_host: a layer's rows of one sequence copied to the device for a
                                      prefill batch */
    int32_t *kv_slot;           /* host [n_layer]: layer il's rows in the caches, -1: none (a gdn layer keeps
                                   its recurrent state instead) */
    int32_t n_kv_layers;        /* layers with a key or value row (model_layer_cache_row) */
    int64_t kv_row, v_row;      /* the widest key and value rows a layer's attention part keeps per position
                                   (model_layer_cache_row; GQA: n_head_kv * head_dim each; MLA: the latent and the
                                   rotated key part, no value row) */

    /* the gdn layers' recurrent state (attn_gdn.c), a sequence's zeroed before a step that starts it at position 0 */
    int32_t *rec_slot;          /* host [n_layer]: layer il's state, -1: none */
    int32_t n_recurrent;
    float *conv_state;          /* [n_seq][n_recurrent][conv channels][ssm_d_conv - 1] */
    float *ssm_state;           /* [n_seq][n_recurrent][value heads][ssm_d_state][ssm_d_state] */
    /* backend_options_t.rollback: the states after each row of a sequence's last step of at most rb_rows rows
     * (attn_gdn.c writes them), NULL and 0 without */
    int32_t rb_rows;
    float *rb_conv;             /* [n_seq][rb_rows][n_recurrent][conv state] */
    float *rb_ssm;              /* [n_seq][rb_rows][n_recurrent][ssm state] */
    int32_t *rb_from;           /* host [n_seq]: the sequence's length before that step */
    int32_t *rb_n;              /* host [n_seq]: its rows whose states are kept (0: none) */

    /* activations of the current batch (t = row in the batch), device */
    float *x;                   /* [n_batch][n_embd] residual stream */
    float *xn;                  /* [n_batch][n_embd] normed input of the current block / of the LM head */
    float *q;                   /* [n_batch][n_head * head_dim] */
    float *k;                   /* [n_batch][n_head_kv * head_dim] */
    float *v;                   /* [n_batch][n_head_kv * head_dim] */
    float *qg;                  /* [n_batch][2 * n_head * head_dim] query and gate (option output gate), else NULL */
    float *gate;                /* [n_batch][n_head * head_dim] the output gate's logits (option output gate) */
    float *gdn_qkv;             /* [n_batch][conv channels] (NULL without gdn layers, like the 5 below) */
    float *gdn_z;               /* [n_batch][ssm_d_inner] */
    float *gdn_ba;              /* [n_batch][2 * value heads] */
    float *gdn_beta;            /* [n_batch][value heads] */
    float *gdn_g;               /* [n_batch][value heads] */
    float *gdn_o;               /* [n_batch][ssm_d_inner] */
    float *gdn_chunk;           /* cuda_gdn_chunk's scratch for n_batch rows (NULL: batches stay sequential) */
    float *att;                 /* [n_batch][n_head * max(head_dim, head_dim_v)] */
    /* attention mla (attn_mla.c; NULL without an MLA layer); R = n_lora_kv, RR = R + n_rot */
    float *mla_qa;              /* [n_batch][n_lora_q] the q LoRA's compressed queries */
    float *mla_kv;              /* [n_batch][RR] the rows' latents and rotated key parts, as cached */
    float *mla_qk;              /* [n_batch][n_head][RR] the queries in the latent space and their rotated parts */
    float *mla_lat;             /* [n_batch][n_head][R] the attention outputs in the latent space */
    void *mla_split;            /* cuda_mla_attention's split scratch (decode batches) */
    size_t mla_split_bytes;
    float *proj;                /* [n_batch][n_embd] attn_output / shared expert output */
    float *router_logits;       /* [n_batch][n_expert] */
    int32_t *ids;               /* [n_batch][n_expert_used] */
    unsigned long long *route_counts; /* [n_layer][n_expert] routed pairs (backend_options_t.count_routing); NULL:
                                   not counted */
    unsigned int *d_router_done; /* [CUDA_ROUTER_FUSED_MAX] cuda_router_fused's counters of finished blocks (0 between
                                  * launches) */
    /* the prefetch hint (ffn_moe.c) when the experts' executor takes one: the next layer's router on its norm of x,
     * for up to CUDA_ROUTER_FUSED_MAX rows; NULL: no hints */
    float *pre_xn, *pre_logits, *pre_w; /* [rows][n_embd], [rows][n_expert], [rows][n_expert_used] */
    int32_t *pre_ids;                   /* [rows][n_expert_used] */
    unsigned int *d_pre_done;           /* [CUDA_ROUTER_FUSED_MAX] cuda_router_fused's counters for them */
    unsigned int *d_attn_done;  /* [n_head_kv * CUDA_DECODE_ROWS]: the decode attention's counters of finished
                                   splits (cuda_attn_ext_t.done; 0 between launches) */
    uint8_t *count_resident;    /* host [n_layer * n_expert]: the plan's resident experts, for the hit rate */
    float *route_w;             /* [n_batch][n_expert_used] */
    float *sh_gate;             /* [n_batch][max(n_ff_shexp, dense layers' n_ff)] */
    float *sh_up;               /* [n_batch][max(n_ff_shexp, dense layers' n_ff)] */
    float *sh_logit;            /* [n_batch] */
    float *logits;              /* [logit_rows][n_vocab] */
    int32_t *tokens;            /* [n_batch] token ids, then [n_batch] output rows */
    void *act;                  /* quantized activations: n_batch rows of act_row bytes */
    size_t act_row;             /* bytes of the widest activation row */
    guild_type_t act_type;      /* what `act` holds now ... */
    const float *act_src;       /* ... quantized from this buffer (NULL: nothing valid) */
    const float *act_fresh;     /* set by the block norm that quantized its output into `act` (cuda_layer.c):
                                   the next cuda_linear of that buffer uses it; any cuda_linear clears it */
    const void *l2_next;        /* set by a part for the next cuda_linear: bytes the next kernel reads that its
                                   launch cannot ask for early (cuda_matmul_l2); any cuda_linear clears it */
    size_t l2_next_bytes;
    bool fuse;                  /* the block norms fuse (cuda_config_t.no_fuse unset) */
    bool xchg_fuse;             /* and the MoE exchange's publish and take of rows join the router's and the next
                                   norm's launches (cuda_config_t.no_xchg_fuse unset) */
    cuda_norm_pre_t pend;       /* the residual update a part left for the next block norm to apply in its launch
                                   (cuda_residual_add/_combine; kind CUDA_PRE_NONE: none) */
    /* the FFN's block norm left to the router's launch (cuda_layer.c, router_softmax.c): its weights (NULL:
     * none left), the non-finite check's site, the pending residual addition it applies (NULL: none) */
    struct {
        const cuda_tensor_t *w;
        uint32_t site;
        const float *p;
    } norm_defer;
    /* the MoE exchange the router's launch may publish a lone token to (ffn_moe.c sets it around the route; NULL:
     * none), and whether it did (router_softmax.c) */
    const struct cuda_xchg_pub *xpub;
    bool xpub_done;
    void *attn_scratch;         /* split-key partials of the decode attention */
    size_t attn_scratch_bytes;
    int32_t *h_tokens;          /* pinned [3 * n_batch + 1]: staging of tokens, output rows, then the groups' cache
                                   lengths */
    int32_t *d_pos;             /* device [n_batch]: the cache length each group's sequence starts the step at
                                   (tokens + 2 * n_batch); the position-dependent kernels read it, so captured
                                   graphs replay anywhere */

    /* Decode steps as CUDA graphs: one per (tokens, logits rows, logits destination), captured on first use. */
    bool graphs;                /* allowed (options and the bridge permit) */
    cuda_graph_t graph[CUDA_GRAPHS];
    uint64_t graph_clock;       /* for the least recently used eviction */
    uint32_t graphs_captured;
    uint64_t graph_steps;
    float *h_logits;            /* pinned [logit_rows][n_vocab]: a graph's logits when the caller's buffer is not
                                   host-registered */
    logits_pick_t *d_picks;     /* [logit_rows] a pick step's rows reduced on the device (backend_forward_pick) */
    logits_pick_t *h_picks;     /* pinned [logit_rows]: their copy on the host */
    cudaEvent_t done;           /* recorded after each step */
    struct cuda_step_clock *clock; /* cuda_config_t.step_clock (cuda_step_clock.h); NULL: off */
    /* The non-finite check (backend_options_t.check_finite; gpu-worker/dense/finite_check.h): the norms min their
     * finds into d_finite, set to FINITE_NONE at the start of a step and copied to h_finite at its end, which the
     * host reads after the step's one synchronisation. NULL: no check. */
    uint64_t *d_finite;         /* device word */
    uint64_t *h_finite;         /* pinned */
    int32_t gpu_expert_layers;  /* layers whose experts run on the device */
    uint64_t *progress;         /* backend_options_t.progress: bumped by a host function after each layer of a
                                   direct (not captured) step */

    /* the multi-token-prediction layer (backend_options_t.mtp, cuda_mtp.c): block n_layer of the layer program
     * (layers[n_layer], kv_slot[n_layer]), its routed experts resident on the device in an executor of its own;
     * the bookkeeping is the CPU backend's (gpu-worker/dense/cpu/cpu_state.h) */
    bool mtp;
    cuda_mtp_tensors_t mtp_w;
    moe_exec_t *moe_mtp;        /* owned: the "gpu" executor of the MTP block's experts (its layer 0) */
    float *mtp_h;               /* device [n_ctx][n_embd] each position's hidden state (the last layer's output) */
    int32_t *mtp_tok;           /* host [n_ctx] each position's token */
    int32_t mtp_len;            /* the MTP layer's cache holds positions [0, mtp_len) */
    int32_t mtp_next;           /* the step backend_mtp_step takes next (0 after a forward call or a truncation) */
    float *mtp_hc;              /* device [n_embd] the last step's output: the next step's hidden state */
    float *mtp_cat;             /* device [n_batch][2 * n_embd] the rows' normed embeddings and hidden states */

    size_t bytes_weights, bytes_kv, bytes_scratch, bytes_experts; /* device memory, for the report */
    cuda_mem_trace_t mem;       /* the device's in-use by phase (cuda_mem_trace.h): start-up, then checked at the
                                   first prefill batch, the first graph step and as graphs accumulate */
    bool mem_prefill, mem_step; /* those first ones seen */
    uint32_t mem_graphs;        /* graphs_captured at the last check */
} cuda_backend_t;

/* Layer il's key rows and value rows (kv_slot[il] >= 0) of sequence seq. */
static inline void *cuda_kv_k(const cuda_backend_t *b, int32_t il, int32_t seq)
{
    return (char *)b->k_cache + ((size_t)seq * (size_t)b->n_kv_layers + (size_t)b->kv_slot[il]) * b->k_layer_bytes;
}

static inline void *cuda_kv_v(const cuda_backend_t *b, int32_t il, int32_t seq)
{
    return (char *)b->v_cache + ((size_t)seq * (size_t)b->n_kv_layers + (size_t)b->kv_slot[il]) * b->v_layer_bytes;
}

/* The blocks of the layer program: n_layer, and the MTP layer's after them with b->mtp. */
static inline int32_t cuda_n_block(const cuda_backend_t *b)
{
    return b->cfg->n_layer + (b->mtp ? 1 : 0);
}

/* With b->mtp (cuda_mtp.c): the MTP layer's buffers and its experts' executor (after the weights' upload and the
 * caches' slots). -1 with a message naming what is short or a type the device kernels do not take. */
int cuda_mtp_setup(cuda_backend_t *b, guild_err_t *err);

/* Frees what cuda_mtp_setup took; NULL-safe fields. */
void cuda_mtp_free(cuda_backend_t *b);

/* After a forward pass's layers are enqueued (x holds the last layer's output of the batch's n rows, one
 * sequence at grp_len[0]): copies those rows into mtp_h at their positions, keeps the tokens, and resets the
 * steps. Only enqueues on b->stream. */
int cuda_mtp_keep(cuda_backend_t *b, int32_t n, const int32_t *tokens, guild_err_t *err);

/* The MTP layer's cache after sequence 0 was cut to seq_len[0] positions. */
void cuda_mtp_truncated(cuda_backend_t *b);

/* backend_mtp_step of the CUDA backend (cuda_mtp.c). */
int cuda_mtp_step(backend_t *base, int32_t step, int32_t token, float *logits, guild_err_t *err);

/* Uploads every dense tensor of the model (cuda_weights.c), with b->mtp the MTP layer's too. -1 with a message
 * naming the tensor for a type the kernels do not handle, or when the device is out of memory. */
int cuda_weights_upload(cuda_backend_t *b, guild_err_t *err);

/* Runs layer il (< cuda_n_block) on the n tokens of the batch in b->x (the groups' positions), writing their K/V into their
 * sequences' caches. Only enqueues on b->stream, except the routed experts' exchange. -1 with a message on failure. */
int cuda_layer_forward(cuda_backend_t *b, int32_t il, int32_t n, guild_err_t *err);

/* The step clock's mark `which` (CUDA_MARK_L0_*, cuda_step_clock.h) after the kernels a part has enqueued so far,
 * in layer 0 with the clock on; nothing otherwise (0). */
int cuda_layer_mark(cuda_backend_t *b, int32_t il, int which, guild_err_t *err);

/* x += p (n rows of n_embd), or, when the block norms fuse, that addition left pending for the next block norm
 * of the layer program to apply in its launch (the same bits). The parts end with it. */
int cuda_residual_add(cuda_backend_t *b, const float *p, int32_t n, guild_err_t *err);

/* cuda_moe_combine(b->x, y, w, sh, sh_logit, n, n_used, n_embd) (with y_at, not NULL: cuda_moe_combine_at's, y
 * unused), or left pending as cuda_residual_add. */
int cuda_residual_combine(cuda_backend_t *b, const float *y, const float *const *y_at, const float *w,
                          const float *sh, const float *sh_logit, int32_t n, int32_t n_used, guild_err_t *err);

/* y[t][0..W->n_rows) = W x[t] for t < n (x rows ldx floats apart, y rows ldy): quantizes x to W's activation
 * type unless `reuse` and act already holds x in that type, then cuda_matmul. */
int cuda_linear(cuda_backend_t *b, const cuda_tensor_t *W, const float *x, int64_t ldx, int32_t n, float *y,
                int64_t ldy, bool reuse, guild_err_t *err);

/* cuda_linear of count (1..4) matrices with the same x: y[i] = W[i] x (rows ldy[i] apart), x quantized once;
 * the consecutive ones of one type and width in one launch (cuda_matmul_multi; the same bits) unless the layer
 * program does not fuse (b->fuse). */
int cuda_linear_multi(cuda_backend_t *b, int32_t count, const cuda_tensor_t *const *W, const float *x, int64_t ldx,
                      int32_t n, float *const *y, const int64_t *ldy, guild_err_t *err);

#endif
