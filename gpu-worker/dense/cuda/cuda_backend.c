/* The CUDA backend ("cuda"): device buffers, the forward driver (embedding -> layers -> output norm -> LM head)
 * and the KV cache bookkeeping; the layer program is in cuda_layer.c, its parts in the files cuda_parts.h names,
 * the kernels behind cuda_kernels.h.
 *
 * One stream carries the whole forward pass. The routed experts go through device executors (cuda_moe.h):
 * resident on the device under the memory plan (gpu-worker/dense/gpu_plan.h), else to the executor the caller gave
 * (a GPU worker's: the CPU workers through the arena, driven from the device itself; in one process: the host
 * executor, through the "host" adapter). When the executor only enqueues device work, a step of up to
 * CUDA_GRAPH_ROWS tokens is captured once as a CUDA graph per (tokens, logits rows, logits destination) and
 * replayed: one launch a step. Tokens and the cache length reach the device through one
 * copy from pinned memory at the start of the step, so the same graph serves every position. The direct path
 * (cuda_config_t.no_graph) enqueues the same kernels, so both give the same bits.
 * The CPU backend is the numerical reference: matrix products, quantization, RoPE and the elementwise steps give
 * its bits; norms, softmaxes and attention differ in reduction order, and the KV cache is F16 here (F32 there).
 * Batches up to CUDA_DECODE_ROWS rows are batch-invariant (backend.h): a speculative verify step of K rows gives
 * the bits of K decode steps.
 * Sequences (backend_forward_seq): each has its own region of the caches and its own recurrent states; a batch's
 * rows are reordered by sequence, and the attention parts run each sequence's rows as a group over its own cache
 * (cuda_state.h), so a row's bits are those of its sequence's rows alone; a graph is kept per groups' layout.
 */
#include "gpu-worker/dense/cuda/cuda_backend.h"
#include "gpu-worker/dense/cuda/cuda_snapshot.h"
#define GUILD_CUDA_STEP_CLOCK_INTERNAL
#include "gpu-worker/dense/cuda/cuda_step_clock.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/model/activation.h"
#include "core/quant/quant.h"
#include "core/util/log.h"
#include "gpu-worker/dense/cpu/cpu_kernels.h"
#include "gpu-worker/dense/finite_check.h"
#include "gpu-worker/dense/gpu_plan.h"
#include "gpu-worker/dense/kv_format.h"
#include "gpu-worker/dense/cuda/cuda_config.h"
#include "gpu-worker/dense/cuda/cuda_free_mem.h"
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "gpu-worker/dense/cuda/cuda_parts.h"
#include "gpu-worker/dense/cuda/cuda_stage.h"
#include "gpu-worker/dense/cuda/cuda_state.h"
#include "gpu-worker/dense/cuda/cuda_util.h"
#include "gpu-worker/dense/cuda/l2_stream.h"
#include "ipc/stage_ring.h"
#include "ipc/stage_server.h"

/* Rows of logits computed per LM-head pass: bounds the logits buffer (n_vocab floats a row). */
#define LOGIT_ROWS 32

static void graphs_clear(cuda_backend_t *b)
{
    for (int i = 0; i < CUDA_GRAPHS; i++)
        if (b->graph[i].exec) {
            cudaGraphExecDestroy(b->graph[i].exec);
            memset(&b->graph[i], 0, sizeof b->graph[i]);
        }
}

static void cuda_destroy(backend_t *base)
{
    cuda_backend_t *b = (cuda_backend_t *)base;
    if (b->stream)
        cudaStreamSynchronize(b->stream);
    graphs_clear(b);
    cuda_step_clock_destroy(&b->clock);
    cuda_mtp_free(b);
    moe_exec_destroy(&b->moe_gpu);
    moe_exec_destroy(&b->moe_host);
    cuda_free((void **)&b->route_counts);
    free(b->count_resident);
    /* the stage borrows the ring, the server serves it: stage, server, ring */
    cuda_stage_destroy(&b->stage);
    stage_server_stop(&b->stage_server);
    stage_ring_destroy(&b->stage_ring);
    if (b->done)
        cudaEventDestroy(b->done);
    if (b->h_logits)
        cudaFreeHost(b->h_logits);
    if (b->h_picks)
        cudaFreeHost(b->h_picks);
    if (b->h_finite)
        cudaFreeHost(b->h_finite);
    if (b->kv_host_k) { /* mapped host memory: k_cache and v_cache are its device addresses */
        cudaFreeHost(b->kv_host_k);
        b->k_cache = NULL;
    }
    if (b->kv_host_v) {
        cudaFreeHost(b->kv_host_v);
        b->v_cache = NULL;
    }
    void **bufs[] = {&b->weight_mem, (void **)&b->rope_cs, (void **)&b->k_cache, (void **)&b->v_cache,
                     &b->kv_stage_k, &b->kv_stage_v,
                     (void **)&b->x, (void **)&b->xn, (void **)&b->q, (void **)&b->k, (void **)&b->v,
                     (void **)&b->att, (void **)&b->proj, (void **)&b->router_logits, (void **)&b->ids,
                     (void **)&b->route_w, (void **)&b->sh_gate, (void **)&b->sh_up, (void **)&b->sh_logit,
                     (void **)&b->logits, (void **)&b->d_picks, (void **)&b->tokens, &b->act, &b->attn_scratch,
                     (void **)&b->d_finite, (void **)&b->conv_state, (void **)&b->ssm_state, (void **)&b->rb_conv,
                     (void **)&b->rb_ssm, (void **)&b->qg,
                     (void **)&b->gate, (void **)&b->gdn_qkv, (void **)&b->gdn_z, (void **)&b->gdn_ba,
                     (void **)&b->gdn_beta, (void **)&b->gdn_g, (void **)&b->gdn_o, (void **)&b->gdn_chunk,
                     (void **)&b->mla_qa, (void **)&b->mla_kv, (void **)&b->mla_qk,
                     (void **)&b->mla_lat, &b->mla_split, (void **)&b->d_router_done,
                     (void **)&b->pre_xn, (void **)&b->pre_logits, (void **)&b->pre_w, (void **)&b->pre_ids,
                     (void **)&b->d_pre_done,
                     (void **)&b->d_attn_done};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        cuda_free(bufs[i]);
    if (b->h_tokens)
        cudaFreeHost(b->h_tokens);
    if (b->stream)
        cudaStreamDestroy(b->stream);
    free(b->layers);
    free(b->rec_slot);
    free(b->kv_slot);
    free(b->seq_len);
    free(b->grp_seq);
    free(b->rb_from);
    free(b->rb_n);
    free(b->grp_row0);
    free(b->grp_rows);
    free(b->grp_len);
    free(b->row_from);
    free(b->row_to);
    free(b->row_pos);
    free(b);
}

/* bytes of mapped host memory in *host, its device address in *dev (the plan's kv_host: the attention reads the
 * cache over PCIe). */
static int kv_host_alloc(void **host, void **dev, size_t bytes, const char *what, guild_err_t *err)
{
    if (cudaHostAlloc(host, bytes ? bytes : 1, cudaHostAllocMapped) != cudaSuccess) {
        *host = NULL;
        (void)cudaGetLastError();
        return guild_err_set(err, "cuda backend: cannot allocate %.2f GiB of mapped host memory for %s",
                             (double)bytes / 1073741824.0, what);
    }
    memset(*host, 0, bytes);
    return cuda_check(cudaHostGetDevicePointer(dev, *host, 0), "the mapped KV cache's device address", err);
}

/* The widest quantized activation row any dense matrix needs (as the CPU backend's max_act_row). */
static size_t act_row_bytes(const cuda_tensor_t *t)
{
    uint64_t bytes = 0;
    if (!t || !t->d || quant_row_bytes(quant_type_info(t->type)->dot_type, (uint64_t)t->n_in, &bytes, NULL) < 0)
        return 0;
    return (size_t)bytes;
}

static size_t max_act_row(const cuda_backend_t *b)
{
    size_t m = act_row_bytes(&b->output);
    if (b->mtp) {
        const size_t r[] = {act_row_bytes(&b->mtp_w.eh_proj), act_row_bytes(&b->mtp_w.head)};
        for (size_t i = 0; i < 2; i++)
            m = r[i] > m ? r[i] : m;
    }
    for (int32_t il = 0; il < cuda_n_block(b); il++) {
        const cuda_layer_t *L = &b->layers[il];
#define MATRIX(name, kind) (kind) == MODEL_TENSOR_MATRIX ? &L->name : NULL,
        const cuda_tensor_t *all[] = {MODEL_LAYER_DENSE_TENSORS(MATRIX)};
#undef MATRIX
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
            size_t r = act_row_bytes(all[i]);
            if (r > m)
                m = r;
        }
    }
    return (m + 15) / 16 * 16;
}

/* The RoPE table of every position, computed on the host by the CPU backend's own function. */
static int upload_rope_table(cuda_backend_t *b, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    if (c->n_rot == 0)
        return 0;
    cpu_rope_t rope;
    if (cpu_rope_init(&rope, c, b->w->rope_freqs.data) < 0)
        return guild_err_set(err, "cuda backend: out of memory");
    const size_t bytes = (size_t)b->n_ctx * (size_t)c->n_rot * sizeof(float);
    float *h = malloc(bytes);
    int rc = -1;
    if (!h) {
        guild_err_set(err, "cuda backend: out of memory for the RoPE table");
        goto out;
    }
    for (int32_t pos = 0; pos < b->n_ctx; pos++)
        cpu_rope_table(&rope, pos, h + (size_t)pos * (size_t)c->n_rot);
    if (cuda_alloc((void **)&b->rope_cs, bytes, &b->bytes_scratch, "the RoPE table", err) < 0 ||
        cuda_check(cudaMemcpy(b->rope_cs, h, bytes, cudaMemcpyHostToDevice), "upload the RoPE table", err) < 0)
        goto out;
    rc = 0;
out:
    free(h);
    cpu_rope_fini(&rope);
    return rc;
}

static int check_shapes(const model_config_t *c, guild_err_t *err)
{
    if (c->attn.kind == MODEL_ATTN_GQA && c->head_dim != 32 && c->head_dim != 64 && c->head_dim != 128 &&
        c->head_dim != 256)
        return guild_err_set(err, "cuda backend: head dimension %d is not supported (32, 64, 128 or 256)",
                             c->head_dim);
    if (c->attn.kind == MODEL_ATTN_MLA && !c->mla_kv_split)
        return guild_err_set(err, "cuda backend: %s: one attn_kv_b (a file converted before the k/v split) is not "
                             "supported: attn_k_b and attn_v_b are (convert it again)", model_arch_info(c->arch)->name);
    if (c->attn.kind == MODEL_ATTN_MLA && c->n_lora_kv > 1024)
        return guild_err_set(err, "cuda backend: a latent of %d is not supported (at most 1024)", c->n_lora_kv);
    if (c->n_expert > 1024 || c->n_expert_used > 32)
        return guild_err_set(err, "cuda backend: top-%d of %d experts is not supported (at most 32 of 1024)",
                             c->n_expert_used, c->n_expert);
    return 0;
}

/* The device executor for the routed experts that are not on the device: the caller's when it is a device one
 * (a GPU worker's exchange driven from the device), else the "host" adapter to it. */
static int setup_cpu_experts(cuda_backend_t *b, const backend_options_t *opt, moe_exec_t **out, guild_err_t *err)
{
    if (opt->moe->ops->mem == MOE_EXEC_DEVICE) {
        *out = opt->moe;
        return 0;
    }
    const model_config_t *c = b->cfg;
    if (cuda_moe_host_new(&b->moe_host, opt->moe, b->n_batch, c->n_embd, c->n_expert_used, err) < 0)
        return -1;
    *out = b->moe_host;
    return 0;
}

static int range_by_address(const void *a, const void *b)
{
    const uintptr_t x = (uintptr_t)((const cuda_stage_range_t *)a)->host, y = (uintptr_t)((const cuda_stage_range_t *)b)->host;
    return x < y ? -1 : x > y;
}

/* The memory the streamed experts are copied from: each non-resident expert's three matrices (its source), sorted
 * and merged where they touch or nearly (gaps of a page at most); *out (free it). -1 on out of memory. */
static int source_ranges(const cuda_backend_t *b, const cuda_moe_gpu_layer_t *gl, cuda_stage_range_t **out,
                         int32_t *n_out, guild_err_t *err)
{
    const int32_t E = b->cfg->n_expert;
    size_t cap = 3 * (size_t)b->cfg->n_layer * (size_t)E + 1, n = 0;
    cuda_stage_range_t *r = calloc(cap, sizeof *r);
    if (!r)
        return guild_err_set(err, "cuda backend: out of memory");
    for (int32_t il = 0; il < b->cfg->n_layer; il++) {
        const cuda_moe_gpu_layer_t *L = &gl[il];
        if (!L->gate || !L->stream)
            continue;
        for (int32_t e = 0; e < E; e++) {
            if (L->resident_experts ? L->resident_experts[e] : L->resident)
                continue;
            if (L->src) {
                const expert_host_mats_t *x = &L->src[e];
                r[n++] = (cuda_stage_range_t){x->gate, L->gate_mat * (x->gate_row / L->gate_row), NULL};
                r[n++] = (cuda_stage_range_t){x->up, L->gate_mat, NULL};
                r[n++] = (cuda_stage_range_t){x->down, L->down_mat, NULL};
            } else {
                r[n++] = (cuda_stage_range_t){(const char *)L->gate + (size_t)e * L->gate_mat, L->gate_mat, NULL};
                r[n++] = (cuda_stage_range_t){(const char *)L->up + (size_t)e * L->gate_mat, L->gate_mat, NULL};
                r[n++] = (cuda_stage_range_t){(const char *)L->down + (size_t)e * L->down_mat, L->down_mat, NULL};
            }
        }
    }
    qsort(r, n, sizeof *r, range_by_address);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const char *h = r[i].host, *end = h + r[i].bytes;
        if (k && h <= (const char *)r[k - 1].host + r[k - 1].bytes + 4096) {
            if (end > (const char *)r[k - 1].host + r[k - 1].bytes)
                r[k - 1].bytes = (size_t)(end - (const char *)r[k - 1].host);
        } else {
            r[k++] = r[i];
        }
    }
    *out = r;
    *n_out = (int32_t)k;
    return 0;
}

/* The copies' path for streamed experts when the plan streams: the stager's ring (THREAD, PROCESS: the bridge's
 * host pointers must lie in the model mapping the stager serves), page-locked copies of the streamed experts'
 * sources (PIN), or those sources registered in place (SHARED); b->stage stays NULL for NONE (the bridge's own
 * pageable copies). */
static int setup_stage(cuda_backend_t *b, const model_t *m, const cuda_config_t *cc, const gpu_plan_t *plan,
                       const cuda_moe_gpu_layer_t *gl, guild_err_t *err)
{
    const uint64_t slot = gpu_plan_stage_slot_bytes(plan);
    if (!slot || cc->stager == CUDA_STAGER_NONE)
        return 0;
    const gguf_t *g = model_gguf(m);
    const gguf_tensor_t *t = gguf_n_tensors(g) > 0 ? gguf_tensor(g, 0) : NULL;
    if (!t)
        return guild_err_set(err, "cuda backend: the model has no tensors to stage");
    b->map_base = (const char *)t->data - t->offset;
    b->map_bytes = (size_t)gguf_file_size(g);
    if (cc->stager == CUDA_STAGER_PIN || cc->stager == CUDA_STAGER_SHARED) {
        cuda_stage_range_t *r = NULL;
        int32_t n = 0;
        if (source_ranges(b, gl, &r, &n, err) < 0)
            return -1;
        const int rc = cc->stager == CUDA_STAGER_PIN ? cuda_stage_new_pinned(&b->stage, r, n, err)
                                                      : cuda_stage_new_registered(&b->stage, r, n, err);
        free(r);
        return rc;
    }
    if (cc->stager == CUDA_STAGER_PROCESS) {
        if (!cc->stage_ring || !cc->stage_ring[0])
            return guild_err_set(err, "cuda backend: --stager process without a staging ring name");
        if (stage_ring_attach(&b->stage_ring, cc->stage_ring, err) < 0)
            return -1;
    } else {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        int threads = cc->stage_threads > 0 ? cc->stage_threads : cpus > 1 ? (int)(cpus / 2) : 1;
        if (threads > 256)
            threads = 256;
        if (stage_ring_create(&b->stage_ring, 3, (size_t)slot, NULL, err) < 0 ||
            stage_server_start(&b->stage_server, b->stage_ring, b->map_base, b->map_bytes, threads, err) < 0)
            return -1;
    }
    if (cuda_stage_new_ring(&b->stage, b->stage_ring, b->map_base, b->map_bytes, NULL, err) < 0)
        return -1;
    guild_log(GUILD_LOG_INFO, "cuda backend: streamed experts through staging ring %s (%u slots of %zu MiB, %s)",
              stage_ring_name(b->stage_ring), stage_ring_n_slots(b->stage_ring),
              stage_ring_slot_bytes(b->stage_ring) >> 20,
              b->stage_server ? "served by this process" : "served by guild-stager");
    return 0;
}

/* A stage that failed (its stager died or hung) is replaced by a new one on the same ring, which drains what
 * the old one left in flight: with a restarted guild-stager, the next forward pass streams again. -1 with err
 * (the forward pass fails with it, and the next one tries again) while the stager is not back. */
static int stage_renew(cuda_backend_t *b, guild_err_t *err)
{
    /* no stage with a ring: an earlier renewal failed, and the bridge must not copy through the old one */
    if (!b->stage_ring || (b->stage && !cuda_stage_failed(b->stage)))
        return 0;
    if (b->stage) {
        uint64_t bytes = 0, wait = 0;
        cuda_stage_stats(b->stage, &bytes, &wait);
        b->staged_bytes0 += bytes;
        b->stage_wait_ns0 += wait;
        cuda_stage_destroy(&b->stage);
    }
    guild_err_t e = {{0}};
    if (cuda_stage_new_ring(&b->stage, b->stage_ring, b->map_base, b->map_bytes, NULL, &e) < 0) {
        b->stage = NULL;
        return guild_err_set(err, "staging ring %s: %s", stage_ring_name(b->stage_ring), e.msg);
    }
    cuda_moe_gpu_set_stage(b->moe_gpu, b->stage);
    guild_log(GUILD_LOG_INFO, "cuda backend: staging ring %s in use again", stage_ring_name(b->stage_ring));
    return 0;
}

/* The experts the plan puts on the device (when the kernels take their types), the rest through
 * setup_cpu_experts, and streamed to the device for large batches when the plan has staging buffers. */
static int setup_experts(cuda_backend_t *b, const model_t *m, const backend_options_t *opt, const cuda_config_t *cc,
                         const gpu_plan_t *plan, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const model_weights_t *w = model_weights(m);
    cuda_moe_gpu_layer_t *gl = calloc((size_t)c->n_layer, sizeof *gl);
    if (!gl)
        return guild_err_set(err, "cuda backend: out of memory");
    const model_expert_act_t act = model_expert_act_of(c); /* gpt-oss's: with the experts' biases */
    int32_t resident = 0, n_res_experts = 0;
    for (int32_t il = 0; il < c->n_layer; il++) {
        const model_layer_t *L = &w->layers[il];
        if (!L->gate_exps.data)
            continue;
        if (!gpu_plan_layer_computable(m, il)) { /* the plan left it out of the resident layers too */
            guild_log(GUILD_LOG_INFO, "cuda backend: layer %d: experts of types %s/%s/%s stay on the CPU", il,
                      quant_type_info(L->gate_exps.type)->name, quant_type_info(L->up_exps.type)->name,
                      quant_type_info(L->down_exps.type)->name);
            continue;
        }
        gl[il] = cuda_moe_gpu_layer_of(L, &act);
        gl[il].resident = plan->resident[il];
        /* the plan's resident experts one by one (its hottest, with a routing profile) */
        gl[il].resident_experts = plan->expert_resident && plan->layer[il].n_resident > 0 && !plan->resident[il]
                                      ? plan->expert_resident + (size_t)il * (size_t)c->n_expert
                                      : NULL;
        gl[il].stream = plan->layer[il].mode == GPU_PLAN_STREAMED;
        resident += plan->resident[il];
        n_res_experts += plan->layer[il].n_resident;
        /* the CPU side's own copies as the sources when it holds every expert that is not resident; a stager's
         * ring serves the model file, so its copies come from the mapping */
        const bool ring = cc->stager == CUDA_STAGER_THREAD || cc->stager == CUDA_STAGER_PROCESS;
        if (cc->expert_host && !ring && cc->expert_host->n_layer == c->n_layer &&
            cc->expert_host->n_expert == c->n_expert) {
            const expert_host_mats_t *src = cc->expert_host->mats + (size_t)il * (size_t)c->n_expert;
            bool all = true;
            for (int32_t e = 0; e < c->n_expert && !plan->resident[il]; e++)
                all = all && (src[e].gate || gpu_plan_expert_resident(plan, il, e));
            gl[il].src = all ? src : NULL;
        }
    }
    /* the coordinator gave these layers' experts to no CPU worker: its plan and this one must agree */
    for (size_t i = 0; i < cc->n_resident_layers; i++) {
        const uint32_t il = cc->resident_layers[i];
        if (il >= (uint32_t)c->n_layer || !gl[il].resident) {
            free(gl);
            return il >= (uint32_t)c->n_layer
                       ? guild_err_set(err, "cuda backend: GPU-resident layer %u, the model has %d layers", il,
                                       c->n_layer)
                       : guild_err_set(err, "cuda backend: layer %u: the coordinator planned its experts on the GPU "
                                       "only, this worker's plan does not keep them resident", il);
        }
    }
    moe_exec_t *cpu = NULL;
    int rc = 0;
    if (resident < c->n_layer)
        rc = setup_cpu_experts(b, opt, &cpu, err);
    if (rc == 0 && plan->stage_slots) {
        rc = setup_stage(b, m, cc, plan, gl, err);
        cuda_mem_trace_mark(&b->mem, "the streamed experts' sources (registered, pinned or a ring)");
    }
    if (rc == 0 && (n_res_experts > 0 || plan->stage_slots)) {
        rc = cuda_moe_gpu_new(&b->moe_gpu, gl, c->n_layer, c->n_expert, b->n_batch, c->n_embd, c->n_ff_exp,
                              c->n_expert_used, plan->stage_slots, (size_t)plan->stage_slot_bytes, b->stage, cpu,
                              &b->bytes_experts, err);
        cuda_mem_trace_mark(&b->mem, "device experts, their buffers and the staging slots");
    }
    b->moe = b->moe_gpu ? b->moe_gpu : cpu;
    b->gpu_expert_layers = rc == 0 ? resident : 0;
    free(gl);
    return rc;
}

/* The output gate's buffers and the gdn layers' states and activations (attn_gqa.c, attn_gdn.c), when the
 * model has them. */
static int alloc_hybrid(cuda_backend_t *b, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const size_t NB = (size_t)b->n_batch, f = sizeof(float), Q = (size_t)c->n_head * (size_t)c->head_dim;
    size_t *sc = &b->bytes_scratch;
    bool gate = false;
    if (!(b->rec_slot = malloc((size_t)c->n_layer * sizeof *b->rec_slot)))
        return guild_err_set(err, "cuda backend: out of memory");
    for (int32_t il = 0; il < c->n_layer; il++) {
        const model_part_t *a = model_layer_parts(c, il).attn;
        b->rec_slot[il] = model_layer_recurrent(c, il) ? b->n_recurrent++ : -1;
        gate |= a->kind == MODEL_ATTN_GQA && (a->opts & MODEL_GQA_OUT_GATE);
    }
    if (gate && (cuda_alloc((void **)&b->qg, NB * 2 * Q * f, sc, "the output gate", err) < 0 ||
                 cuda_alloc((void **)&b->gate, NB * Q * f, sc, "the output gate", err) < 0))
        return -1;
    if (!b->n_recurrent)
        return 0;
    const size_t R = (size_t)b->n_seq * (size_t)b->n_recurrent, CH = (size_t)model_gdn_conv_channels(c);
    const size_t IN = (size_t)c->ssm_d_inner, NV = (size_t)c->ssm_dt_rank;
    if (cuda_alloc((void **)&b->conv_state, R * (size_t)model_gdn_conv_state(c) * f, &b->bytes_kv,
                   "the convolution state", err) < 0 ||
        cuda_alloc((void **)&b->ssm_state, R * (size_t)model_gdn_ssm_state(c) * f, &b->bytes_kv,
                   "the delta-rule state", err) < 0 ||
        (b->rb_rows && (cuda_alloc((void **)&b->rb_conv, R * (size_t)b->rb_rows * (size_t)model_gdn_conv_state(c) * f,
                                   &b->bytes_kv, "the convolution states kept for a rollback", err) < 0 ||
                        cuda_alloc((void **)&b->rb_ssm, R * (size_t)b->rb_rows * (size_t)model_gdn_ssm_state(c) * f,
                                   &b->bytes_kv, "the delta-rule states kept for a rollback", err) < 0)) ||
        cuda_alloc((void **)&b->gdn_qkv, NB * CH * f, sc, "gated delta net", err) < 0 ||
        cuda_alloc((void **)&b->gdn_z, NB * IN * f, sc, "gated delta net", err) < 0 ||
        cuda_alloc((void **)&b->gdn_ba, NB * 2 * NV * f, sc, "gated delta net", err) < 0 ||
        cuda_alloc((void **)&b->gdn_beta, NB * NV * f, sc, "gated delta net", err) < 0 ||
        cuda_alloc((void **)&b->gdn_g, NB * NV * f, sc, "gated delta net", err) < 0 ||
        cuda_alloc((void **)&b->gdn_o, NB * IN * f, sc, "gated delta net", err) < 0)
        return -1;
    /* the chunked form's scratch, where prefill batches can take it */
    if (b->n_batch >= CUDA_GDN_CHUNK_MIN_ROWS && cuda_gdn_chunk_fits(c->ssm_d_state) &&
        cuda_alloc((void **)&b->gdn_chunk, cuda_gdn_chunk_scratch(b->n_batch, c->ssm_d_state, c->ssm_dt_rank), sc,
                   "gated delta net", err) < 0)
        return -1;
    return 0;
}

/* A new sequence: its recurrent states from zero, on the stream before the step (a captured graph holds only
 * the layers, so this stays outside it). */
static int reset_recurrent(cuda_backend_t *b, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const size_t R = (size_t)b->n_recurrent, f = sizeof(float);
    const size_t conv = R * (size_t)model_gdn_conv_state(c), ssm = R * (size_t)model_gdn_ssm_state(c);
    for (int32_t g = 0; R && g < b->n_grp; g++) {
        if (b->grp_len[g] != 0)
            continue;
        const size_t q = (size_t)b->grp_seq[g];
        if (cuda_check(cudaMemsetAsync(b->conv_state + q * conv, 0, conv * f, b->stream), "reset the convolution "
                       "state", err) < 0 ||
            cuda_check(cudaMemsetAsync(b->ssm_state + q * ssm, 0, ssm * f, b->stream), "reset the delta-rule state",
                       err) < 0)
            return -1;
    }
    return 0;
}

static int cuda_create(backend_t **out, const model_t *m, const backend_options_t *opt, const void *config,
                       guild_err_t *err)
{
    static const cuda_config_t defaults; /* zero: the defaults */
    const cuda_config_t *cc = config ? config : &defaults;
    *out = NULL;
    const model_config_t *c = model_config(m);
    if (opt->n_ctx < 1 || opt->n_batch < 1)
        return guild_err_set(err, "cuda backend: n_ctx (%d) and n_batch (%d) must be >= 1", opt->n_ctx,
                             opt->n_batch);
    if (!opt->moe)
        return guild_err_set(err, "cuda backend: a routed-expert executor is required");
    model_part_support_t parts;
    cuda_parts_support(&parts);
    if (model_parts_check(c, &parts, "cuda backend", err) < 0 || check_shapes(c, err) < 0)
        return -1;
    if (opt->check_finite && finite_check_fits(c, opt->n_batch, err) < 0)
        return guild_err_prefix(err, "cuda backend: ");
    char why[256];
    if (cuda_device_count(why, sizeof why) < 1)
        return guild_err_set(err, "cuda backend: no CUDA device (%s)", why);
    if (cuda_check(cudaSetDevice(0), "select device 0", err) < 0)
        return -1;
    /* the context's device memory, measured before anything of the backend's is allocated */
    cuda_mem_trace_t mem;
    const uint64_t context = cuda_mem_trace_start(&mem, cc->gpu_mem);

    const int32_t kv_format = kv_type_resolve(opt->kv_type, KV_TYPE_F16);
    if (kv_type_check(kv_format, c, 1u << KV_TYPE_F32 | 1u << KV_TYPE_F16, "cuda backend", err) < 0)
        return -1;
    gpu_plan_t plan;
    const gpu_plan_options_t po = {
        .budget = cc->gpu_mem,
        .n_ctx = opt->n_ctx,
        .n_seq = opt->n_seq,
        .n_batch = opt->n_batch,
        .kv_type = kv_format,
        .max_expert_layers = cc->gpu_expert_layers,
        .caps = cuda_backend_ops.plan_caps,
        .mtp = opt->mtp,
        .rollback = opt->rollback,
        .context = cc->test.context ? cc->test.context : context,
    };
    if ((opt->plan ? gpu_plan_copy(&plan, opt->plan, err) : gpu_plan_compute(&plan, m, &po, err)) < 0)
        return -1;
    /* a plan carried from the coordinator counted a context it could not measure: say what was found. In use at
     * start beyond GPU_PLAN_CONTEXT counts as other processes' (as the coordinator's --gpu-mem auto counted it, and
     * the memory trace's budget checks), so a context larger than planned shows there, not here. */
    if (opt->plan && cc->gpu_mem)
        guild_log(GUILD_LOG_INFO, "cuda backend: in use at start %.0f MiB: the CUDA context's and %.0f MiB of other "
                  "processes' (left out of the budget); the plan counted %.0f MiB for the context and %.0f MiB for "
                  "the driver's share", (double)context / 1048576.0, (double)mem.others / 1048576.0,
                  (double)plan.reserve / 1048576.0, (double)plan.driver / 1048576.0);
    cuda_backend_t *b = calloc(1, sizeof *b);
    if (!b) {
        gpu_plan_fini(&plan);
        return guild_err_set(err, "cuda backend: out of memory");
    }
    b->base.ops = &cuda_backend_ops;
    b->mem = mem;
    b->cfg = c;
    b->w = model_weights(m);
    b->n_ctx = opt->n_ctx;
    b->n_batch = opt->n_batch;
    b->n_seq = opt->n_seq > 1 ? opt->n_seq : 1;
    b->mtp = opt->mtp;
    {
        const size_t NB = (size_t)opt->n_batch;
        b->seq_len = calloc((size_t)b->n_seq, sizeof *b->seq_len);
        b->grp_seq = malloc(NB * sizeof(int32_t));
        b->grp_row0 = malloc(NB * sizeof(int32_t));
        b->grp_rows = malloc(NB * sizeof(int32_t));
        b->grp_len = malloc(NB * sizeof(int32_t));
        b->row_from = malloc(NB * sizeof(int32_t));
        b->row_to = malloc(NB * sizeof(int32_t));
        b->row_pos = malloc(NB * sizeof(int32_t));
        if (!b->seq_len || !b->grp_seq || !b->grp_row0 || !b->grp_rows || !b->grp_len || !b->row_from ||
            !b->row_to || !b->row_pos) {
            guild_err_set(err, "cuda backend: out of memory");
            goto fail;
        }
    }
    b->logit_rows = opt->n_batch < LOGIT_ROWS ? opt->n_batch : LOGIT_ROWS;
    b->kv_format = kv_format;
    b->kv_type = kv_type_k(kv_format);
    b->v_type = kv_type_v(kv_format);
    if (cuda_check(cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking), "create stream", err) < 0 ||
        cuda_weights_upload(b, err) < 0 || upload_rope_table(b, err) < 0)
        goto fail;
    cuda_mem_trace_mark(&b->mem, "weights");

    const size_t NB = (size_t)opt->n_batch, E = (size_t)c->n_embd, HD = (size_t)c->head_dim;
    const size_t Q = (size_t)c->n_head * HD, KV = (size_t)c->n_head_kv * HD, K = (size_t)c->n_expert_used;
    /* sh_gate/sh_up hold the widest hidden FFN row: the shared expert's or a dense FFN layer's */
    const size_t F = (size_t)model_config_ff_hidden(c), f = sizeof(float);
    /* each layer's cache rows as its attention part says (GQA: KV each; MLA: the latent and rotated part; a gated
     * delta net none: only the layers with rows get a slot in the caches) */
    bool mla = false;
    if (!(b->kv_slot = malloc((size_t)cuda_n_block(b) * sizeof *b->kv_slot))) {
        guild_err_set(err, "cuda backend: out of memory");
        goto fail;
    }
    for (int32_t il = 0; il < cuda_n_block(b); il++) { /* the MTP layer's block too: a slot of its own */
        const model_cache_row_t r = model_layer_cache_row(c, il);
        b->kv_row = r.k > b->kv_row ? r.k : b->kv_row;
        b->v_row = r.v > b->v_row ? r.v : b->v_row;
        b->kv_slot[il] = r.k || r.v ? b->n_kv_layers++ : -1;
        mla |= model_layer_parts(c, il).attn->kind == MODEL_ATTN_MLA;
    }
    b->k_layer_bytes = (size_t)opt->n_ctx * (size_t)kv_elem_bytes(b->kv_type, b->kv_row);
    b->v_layer_bytes = (size_t)opt->n_ctx * (size_t)kv_elem_bytes(b->v_type, b->v_row);
    /* the attention output: a value per head, wider than a key with MLA where so */
    const size_t ATT = (size_t)c->n_head * (size_t)(c->head_dim_v > c->head_dim ? c->head_dim_v : c->head_dim);
    const size_t R = (size_t)c->n_lora_kv, RR = R + (size_t)c->n_rot, H = (size_t)c->n_head;
    b->act_row = max_act_row(b);
    b->attn_scratch_bytes = cuda_attention_decode_scratch(opt->n_batch, c->n_head, c->head_dim, opt->n_ctx);
    b->mla_split_bytes = mla ? cuda_mla_attention_scratch((int32_t)H, (int32_t)R, opt->n_ctx) : 0;
    size_t *sc = &b->bytes_scratch;
    const size_t SL = (size_t)b->n_seq * (size_t)b->n_kv_layers; /* layer slots of every sequence */
    if (plan.kv_host &&
        (mla || kv_host_alloc(&b->kv_host_k, &b->k_cache, SL * b->k_layer_bytes, "the K cache", err) < 0 ||
         (b->v_row && kv_host_alloc(&b->kv_host_v, &b->v_cache, SL * b->v_layer_bytes, "the V cache", err) < 0) ||
         cuda_alloc(&b->kv_stage_k, b->k_layer_bytes, &b->bytes_kv, "the K cache's staging", err) < 0 ||
         (b->v_row && cuda_alloc(&b->kv_stage_v, b->v_layer_bytes, &b->bytes_kv, "the V cache's staging", err) < 0))) {
        if (mla)
            guild_err_set(err, "cuda backend: the plan keeps the KV cache in host RAM, which only GQA layers read");
        goto fail;
    }
    if ((!plan.kv_host &&
         cuda_alloc((void **)&b->k_cache, SL * b->k_layer_bytes, &b->bytes_kv, "the K cache", err) < 0) ||
        (!plan.kv_host && b->v_row &&
         cuda_alloc((void **)&b->v_cache, SL * b->v_layer_bytes, &b->bytes_kv, "the V cache", err) < 0))
        goto fail;
    cuda_mem_trace_mark(&b->mem, plan.kv_host ? "KV cache (mapped host rows, a layer's staging)" : "KV cache");
    if ((mla && (cuda_alloc((void **)&b->mla_qa, NB * (size_t)(c->n_lora_q ? c->n_lora_q : 1) * f, sc,
                            "activations", err) < 0 ||
                 cuda_alloc((void **)&b->mla_kv, NB * RR * f, sc, "activations", err) < 0 ||
                 cuda_alloc((void **)&b->mla_qk, NB * H * RR * f, sc, "activations", err) < 0 ||
                 cuda_alloc((void **)&b->mla_lat, NB * H * R * f, sc, "activations", err) < 0 ||
                 cuda_alloc(&b->mla_split, b->mla_split_bytes, sc, "attention scratch", err) < 0)) ||
        cuda_alloc((void **)&b->x, NB * E * f, sc, "activations", err) < 0 ||
        cuda_alloc((void **)&b->xn, NB * E * f, sc, "activations", err) < 0 ||
        cuda_alloc((void **)&b->q, NB * Q * f, sc, "activations", err) < 0 ||
        cuda_alloc((void **)&b->k, NB * KV * f, sc, "activations", err) < 0 ||
        cuda_alloc((void **)&b->v, NB * KV * f, sc, "activations", err) < 0 ||
        cuda_alloc((void **)&b->att, NB * ATT * f, sc, "activations", err) < 0 ||
        cuda_alloc((void **)&b->proj, NB * E * f, sc, "activations", err) < 0 ||
        cuda_alloc((void **)&b->router_logits, NB * (size_t)c->n_expert * f, sc, "router logits", err) < 0 ||
        cuda_alloc((void **)&b->ids, NB * K * sizeof(int32_t), sc, "expert ids", err) < 0 ||
        cuda_alloc((void **)&b->route_w, NB * K * f, sc, "expert weights", err) < 0 ||
        cuda_alloc((void **)&b->sh_gate, NB * F * f, sc, "shared expert", err) < 0 ||
        cuda_alloc((void **)&b->sh_up, NB * F * f, sc, "shared expert", err) < 0 ||
        cuda_alloc((void **)&b->sh_logit, NB * f, sc, "shared expert", err) < 0 ||
        cuda_alloc((void **)&b->logits, (size_t)b->logit_rows * (size_t)c->n_vocab * f, sc, "logits", err) < 0 ||
        cuda_alloc((void **)&b->d_picks, (size_t)b->logit_rows * sizeof *b->d_picks, sc, "logits picks", err) < 0 ||
        cuda_alloc((void **)&b->tokens, (3 * NB + 2) * sizeof(int32_t), sc, "token ids", err) < 0 ||
        cuda_alloc(&b->act, NB * b->act_row, sc, "quantized activations", err) < 0 ||
        cuda_alloc(&b->attn_scratch, b->attn_scratch_bytes, sc, "attention scratch", err) < 0)
        goto fail;
    if (opt->rollback >= CUDA_GDN_CHUNK_MIN_ROWS) {
        guild_err_set(err, "cuda backend: a rollback over %d rows: at most %d (shorter steps take the one-row form)",
                      opt->rollback, CUDA_GDN_CHUNK_MIN_ROWS - 1);
        goto fail;
    }
    b->rb_rows = opt->rollback > 0 ? opt->rollback : 0;
    if (alloc_hybrid(b, err) < 0)
        goto fail;
    if (!b->n_recurrent)
        b->rb_rows = 0;
    if (b->rb_rows && (!(b->rb_from = calloc((size_t)b->n_seq, sizeof *b->rb_from)) ||
                       !(b->rb_n = calloc((size_t)b->n_seq, sizeof *b->rb_n)))) {
        guild_err_set(err, "cuda backend: out of memory");
        goto fail;
    }
    b->d_pos = b->tokens + 2 * NB;
    if (cudaMallocHost((void **)&b->h_tokens, (3 * NB + 2) * sizeof(int32_t)) != cudaSuccess ||
        cudaMallocHost((void **)&b->h_logits, (size_t)b->logit_rows * (size_t)c->n_vocab * f) != cudaSuccess ||
        cudaMallocHost((void **)&b->h_picks, (size_t)b->logit_rows * sizeof *b->h_picks) != cudaSuccess) {
        (void)cudaGetLastError();
        guild_err_set(err, "cuda backend: cannot allocate pinned host memory");
        goto fail;
    }
    memset(b->h_tokens, 0, (3 * NB + 2) * sizeof(int32_t));
    b->progress = opt->progress;
    if (opt->check_finite &&
        (cuda_alloc((void **)&b->d_finite, sizeof *b->d_finite, sc, "the non-finite check", err) < 0 ||
         cuda_check(cudaMallocHost((void **)&b->h_finite, sizeof *b->h_finite), "pinned memory of the non-finite "
                    "check", err) < 0))
        goto fail;
    const size_t rdone = CUDA_ROUTER_FUSED_MAX * sizeof *b->d_router_done; /* cuda_router_fused's counters */
    if (cuda_alloc((void **)&b->d_router_done, rdone, sc, "the router's counters", err) < 0 ||
        cuda_check(cudaMemset(b->d_router_done, 0, rdone), "the router's counters", err) < 0)
        goto fail;
    const size_t ad_bytes = (size_t)(c->n_head_kv > 0 ? c->n_head_kv : 1) * CUDA_DECODE_ROWS * sizeof *b->d_attn_done;
    if (cuda_alloc((void **)&b->d_attn_done, ad_bytes, sc, "the decode attention's counters", err) < 0 ||
        cuda_check(cudaMemset(b->d_attn_done, 0, ad_bytes), "the decode attention's counters", err) < 0)
        goto fail;
    if (cuda_check(cudaEventCreateWithFlags(&b->done, cudaEventDisableTiming), "create event", err) < 0 ||
        (cc->step_clock && cuda_step_clock_new(&b->clock, err) < 0))
        goto fail;
    cuda_mem_trace_mark(&b->mem, "buffers");
    if (setup_experts(b, m, opt, cc, &plan, err) < 0)
        goto fail;
    if (b->mtp && (cuda_mtp_setup(b, err) < 0))
        goto fail;
    if (b->mtp)
        cuda_mem_trace_mark(&b->mem, "the MTP layer");
    /* the routing counters (route_count.cu) and the plan's resident experts, whose share of them is the hit rate */
    if (opt->count_routing) {
        const size_t LN = (size_t)c->n_layer * (size_t)c->n_expert;
        if (cuda_alloc((void **)&b->route_counts, LN * sizeof *b->route_counts, &b->bytes_scratch, "routing counters",
                       err) < 0 ||
            cuda_check(cudaMemset(b->route_counts, 0, LN * sizeof *b->route_counts), "routing counters", err) < 0)
            goto fail;
        if (!(b->count_resident = malloc(LN ? LN : 1))) {
            guild_err_set(err, "cuda backend: out of memory");
            goto fail;
        }
        memcpy(b->count_resident, plan.expert_resident, LN);
    }
    /* the prefetch hint's buffers, when the experts' executor passes hints on (ffn_moe.c) */
    if (moe_exec_hint_experts(b->moe) > 0) {
        const size_t HR = CUDA_ROUTER_FUSED_MAX;
        if (cuda_alloc((void **)&b->pre_xn, HR * E * f, sc, "prefetch hint", err) < 0 ||
            cuda_alloc((void **)&b->pre_logits, HR * (size_t)c->n_expert * f, sc, "prefetch hint", err) < 0 ||
            cuda_alloc((void **)&b->pre_w, HR * K * f, sc, "prefetch hint", err) < 0 ||
            cuda_alloc((void **)&b->pre_ids, HR * K * sizeof(int32_t), sc, "prefetch hint", err) < 0 ||
            cuda_alloc((void **)&b->d_pre_done, rdone, sc, "prefetch hint", err) < 0 ||
            cuda_check(cudaMemset(b->d_pre_done, 0, rdone), "prefetch hint", err) < 0)
            goto fail;
    }
    if (cc->test.split_gpu_fraction > 0 && b->moe_gpu)
        cuda_moe_gpu_force_split(b->moe_gpu, cc->test.split_gpu_fraction);
    b->graphs = !cc->no_graph && cuda_moe_capturable(b->moe);
    b->fuse = !cc->no_fuse;
    b->xchg_fuse = b->fuse && !cc->no_xchg_fuse;
    if (b->moe_gpu)
        cuda_moe_gpu_set_fuse(b->moe_gpu, b->fuse);
    cuda_set_pdl(!cc->no_pdl);
    cuda_attn_form_t form = cuda_attn_form_default();
    if (cc->no_attn_grid)
        form.waves = 0;
    if (cc->no_attn_early)
        form.early = false;
    if (cc->no_attn_prefetch)
        form.prefetch_rows = 0;
    cuda_set_attn_form(&form);
    cuda_set_attn_mma(!cc->no_attn_mma);
    cuda_set_norm_cluster(!cc->no_norm_cluster);
    cuda_set_matmul_split(!cc->no_mm_split);
    cuda_set_l2_stream(!cc->no_l2_stream);

    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess)
        snprintf(prop.name, sizeof prop.name, "device 0");
    size_t dev_free = 0, dev_total = 0;
    if (cudaMemGetInfo(&dev_free, &dev_total) != cudaSuccess)
        (void)cudaGetLastError();
    guild_log(GUILD_LOG_INFO, "cuda backend: %s; device memory: weights %.1f MiB, KV cache %.1f MiB (%s, %d "
              "positions, %d sequences), buffers %.1f MiB, experts of %d of %d layers %.1f MiB; in use on the device "
              "%.1f MiB; experts %s, graphs %s; decode attention: waves %d, lengths %s the wait, prefetch up to %d "
              "rows", prop.name, (double)b->bytes_weights / (1 << 20),
              (double)b->bytes_kv / (1 << 20), kv_type_name(b->kv_format), opt->n_ctx, b->n_seq,
              (double)b->bytes_scratch / (1 << 20), b->gpu_expert_layers, c->n_layer,
              (double)b->bytes_experts / (1 << 20), (double)(dev_total - dev_free) / (1 << 20), b->moe->ops->name,
              b->graphs ? "on" : "off", form.waves, form.early ? "before" : "after",
              form.early ? form.prefetch_rows : 0);
    if (guild_log_level() >= GUILD_LOG_INFO)
        gpu_plan_print(&plan, stderr);
    cuda_mem_trace_mark(&b->mem, "the rest");
    cuda_mem_trace_log(&b->mem, gpu_plan_total(&plan), plan.reserve + plan.driver);
    /* The uploads above are cudaMemcpy from pageable memory and cudaMemset on the legacy default stream: such a copy
     * may return before its DMA has landed, and b->stream (non-blocking) does not wait for that stream. Without
     * this, a first step enqueued at once (no graph to capture first) could read the last experts' rows or
     * counters half written: a rare cold-start difference, seen once as check_cuda_backend's deepseek2 snapshot
     * case failing beside other GPU work (bench/results/attn43b-h200-2026-12-04-s43-tests.md). */
    if (cuda_check(cudaDeviceSynchronize(), "wait for the uploads", err) < 0)
        goto fail;
    gpu_plan_fini(&plan);
    *out = &b->base;
    return 0;
fail:
    gpu_plan_fini(&plan);
    cuda_destroy(&b->base);
    return -1;
}


/* A host function the stream runs when the layers before it are done: one more layer finished. */
static void CUDART_CB progress_bump(void *p)
{
    __atomic_add_fetch((uint64_t *)p, 1, __ATOMIC_RELAXED);
}

/* Embedding and every layer of the n tokens staged in h_tokens; with progress (never while capturing a graph),
 * a host function after each layer bumps b->progress. */
static int enqueue_layers(cuda_backend_t *b, int32_t n, bool progress, guild_err_t *err)
{
    const int64_t E = b->cfg->n_embd;
    cudaStream_t s = b->stream;
    b->act_src = NULL;
    if (cuda_step_clock_mark(b->clock, CUDA_MARK_START, s, err) < 0 ||
        cuda_check(cudaMemcpyAsync(b->tokens, b->h_tokens, (3 * (size_t)b->n_batch + 1) * sizeof(int32_t),
                                   cudaMemcpyHostToDevice, s), "copy token ids", err) < 0 ||
        cuda_get_rows(b->token_embd.type, b->token_embd.d, b->token_embd.row_bytes, E, b->tokens, n, b->x, E, s,
                      err) < 0)
        return -1;
    /* a kernel, not a memset: the chain of the step's kernels stays one of kernels */
    if (b->d_finite && cuda_finite_reset(b->d_finite, s, err) < 0)
        return -1;
    if (cuda_step_clock_mark(b->clock, CUDA_MARK_EMBED, s, err) < 0)
        return -1;
    for (int32_t il = 0; il < b->cfg->n_layer; il++) {
        if (cuda_layer_forward(b, il, n, err) < 0)
            return -1;
        if ((il == 0 || il + 1 == b->cfg->n_layer) &&
            cuda_step_clock_mark(b->clock, il == 0 ? CUDA_MARK_LAYER0 : CUDA_MARK_LAYERS, s, err) < 0)
            return -1;
        if (progress && b->progress &&
            cuda_check(cudaLaunchHostFunc(s, progress_bump, b->progress), "enqueue the progress mark", err) < 0)
            return -1;
    }
    return 0;
}

/* Output norm and LM head of the n_out rows staged after the tokens, logits copied to dst (host memory); dst NULL
 * (a pick step, n_out <= logit_rows): the rows' picks to h_picks instead, the logits left in b->logits. Then the
 * non-finite check's word to the host. */
static int enqueue_head(cuda_backend_t *b, int32_t n_out, float *dst, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const int64_t E = c->n_embd, V = c->n_vocab;
    cudaStream_t s = b->stream;
    for (int32_t j0 = 0; j0 < n_out; j0 += b->logit_rows) {
        const int32_t nr = n_out - j0 < b->logit_rows ? n_out - j0 : b->logit_rows;
        if (cuda_rmsnorm_checked(b->xn, E, b->x, E, b->tokens + b->n_batch + j0, b->output_norm.d, E, nr,
                                 c->norm_eps, b->d_finite, 2 * (uint32_t)c->n_layer, s, err) < 0 ||
            cuda_linear(b, &b->output, b->xn, E, nr, b->logits, V, false, err) < 0 ||
            cuda_step_clock_mark(b->clock, CUDA_MARK_HEAD, s, err) < 0)
            return -1;
        if (!dst) {
            if (cuda_logits_pick(b->logits, nr, (int32_t)V, (size_t)V, b->d_picks, s, err) < 0 ||
                cuda_check(cudaMemcpyAsync(b->h_picks, b->d_picks, (size_t)nr * sizeof *b->h_picks,
                                           cudaMemcpyDeviceToHost, s), "copy the logits picks", err) < 0)
                return -1;
            continue;
        }
        if (cuda_check(cudaMemcpyAsync(dst + (size_t)j0 * (size_t)V, b->logits, (size_t)nr * (size_t)V * sizeof(float),
                                       cudaMemcpyDeviceToHost, s), "copy logits", err) < 0)
            return -1;
    }
    if (b->d_finite && cuda_check(cudaMemcpyAsync(b->h_finite, b->d_finite, sizeof *b->h_finite,
                                                  cudaMemcpyDeviceToHost, s), "copy the non-finite check", err) < 0)
        return -1;
    return 0;
}

/* True for pinned or registered host memory: a graph's copy node may write there asynchronously. */
static bool host_visible(const void *p)
{
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return a.type == cudaMemoryTypeHost;
}

/* Whether graph g was captured for the current batch's sequence groups (their caches' addresses are in it). */
static bool graph_groups_match(const cuda_backend_t *b, const cuda_graph_t *g)
{
    if (g->n_grp != b->n_grp)
        return false;
    for (int32_t i = 0; i < b->n_grp; i++)
        if (g->grp_seq[i] != b->grp_seq[i] || g->grp_rows[i] != b->grp_rows[i])
            return false;
    return true;
}

/* The graph of a step of n tokens in the current sequence groups and n_out logits rows copied to dst, captured now
 * if it is not kept. -1 with err when capture or instantiation fails (the stream is usable again then). */
static int graph_get(cuda_backend_t *b, int32_t n, int32_t n_out, float *dst, cudaGraphExec_t *exec,
                     guild_err_t *err)
{
    cuda_graph_t *slot = &b->graph[0];
    b->graph_clock++;
    for (int i = 0; i < CUDA_GRAPHS; i++) {
        cuda_graph_t *g = &b->graph[i];
        if (g->exec && g->n == n && g->n_out == n_out && g->dst == dst && graph_groups_match(b, g)) {
            g->used = b->graph_clock;
            *exec = g->exec;
            return 0;
        }
        if (!g->exec || (slot->exec && g->used < slot->used))
            slot = g;
    }
    cudaStream_t s = b->stream;
    cudaGraph_t graph = NULL;
    if (cuda_check(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), "begin graph capture", err) < 0)
        return -1;
    int rc = enqueue_layers(b, n, false, err) < 0 || enqueue_head(b, n_out, dst, err) < 0 ||
                     cuda_moe_step_end(b->moe, s, err) < 0
                 ? -1
                 : 0;
    const cudaError_t e = cudaStreamEndCapture(s, &graph);
    if (rc == 0)
        rc = cuda_check(e, "end graph capture", err);
    cudaGraphExec_t ge = NULL;
    if (rc == 0)
        rc = cuda_check(cudaGraphInstantiate(&ge, graph, 0), "instantiate the step's graph", err);
    /* its work onto the device now, once, not as part of its first launch */
    if (rc == 0 && cuda_check(cudaGraphUpload(ge, s), "upload the step's graph", err) < 0) {
        cudaGraphExecDestroy(ge);
        rc = -1;
    }
    if (graph)
        cudaGraphDestroy(graph);
    if (rc < 0) {
        (void)cudaGetLastError();
        return -1;
    }
    if (slot->exec)
        cudaGraphExecDestroy(slot->exec);
    *slot = (cuda_graph_t){.n = n, .n_out = n_out, .dst = dst, .exec = ge, .used = b->graph_clock, .n_grp = b->n_grp};
    memcpy(slot->grp_seq, b->grp_seq, (size_t)b->n_grp * sizeof *b->grp_seq);
    memcpy(slot->grp_rows, b->grp_rows, (size_t)b->n_grp * sizeof *b->grp_rows);
    b->graphs_captured++;
    *exec = ge;
    return 0;
}

/* A failed step: the stream left idle; the caches' lengths were not advanced, but a recurrent state of the batch's
 * sequences may have moved on, so those sequences empty (a sticky device error stays reported). */
static int forward_failed(cuda_backend_t *b)
{
    cudaStreamSynchronize(b->stream);
    for (int32_t g = 0; b->n_recurrent && g < b->n_grp; g++) {
        b->seq_len[b->grp_seq[g]] = 0;
        if (b->rb_n)
            b->rb_n[b->grp_seq[g]] = 0;
    }
    if (b->mtp)
        cuda_mtp_truncated(b);
    return -1;
}

/* The batch's rows grouped by sequence (cuda_state.h): b->grp_*, b->row_from and b->row_pos; -1 with err on a
 * sequence out of range, a position that does not append to its sequence's cache, or a full cache. */
static int group_rows(cuda_backend_t *b, int32_t n, const int32_t *seq, const int32_t *positions, guild_err_t *err)
{
    b->n_grp = 0;
    for (int32_t t = 0; t < n; t++) {
        const int32_t q = seq ? seq[t] : 0;
        if (q < 0 || q >= b->n_seq)
            return guild_err_set(err, "forward: token %d is of sequence %d (the backend holds %d)", t, q, b->n_seq);
        int32_t g = 0;
        while (g < b->n_grp && b->grp_seq[g] != q)
            g++;
        if (g == b->n_grp) {
            b->grp_seq[g] = q;
            b->grp_rows[g] = 0;
            b->grp_len[g] = b->seq_len[q];
            b->n_grp++;
        }
        const int32_t want = b->seq_len[q] + b->grp_rows[g];
        if (want >= b->n_ctx) {
            int32_t rows = 0;
            for (int32_t u = 0; u < n; u++)
                rows += (seq ? seq[u] : 0) == q;
            if (b->n_seq == 1)
                return guild_err_set(err, "forward: the context is full (%d positions held + %d new > %d)",
                                     b->seq_len[q], rows, b->n_ctx);
            return guild_err_set(err, "forward: the context is full (sequence %d: %d positions held + %d new > %d)",
                                 q, b->seq_len[q], rows, b->n_ctx);
        }
        if (positions[t] != want)
            return guild_err_set(err, "forward: token %d has position %d, expected %d (batches append to the "
                                 "cache)", t, positions[t], want);
        b->grp_rows[g]++;
    }
    /* groups in the order of their sequences, so that a batch of the same sequences and sizes is the same graph */
    for (int32_t i = 1; i < b->n_grp; i++)
        for (int32_t j = i; j > 0 && b->grp_seq[j - 1] > b->grp_seq[j]; j--) {
            int32_t *arr[] = {b->grp_seq, b->grp_rows, b->grp_len};
            for (int k = 0; k < 3; k++) {
                const int32_t x = arr[k][j];
                arr[k][j] = arr[k][j - 1];
                arr[k][j - 1] = x;
            }
        }
    int32_t r = 0;
    for (int32_t g = 0; g < b->n_grp; g++) {
        b->grp_row0[g] = r;
        int32_t k = 0;
        for (int32_t t = 0; t < n; t++)
            if ((seq ? seq[t] : 0) == b->grp_seq[g]) {
                b->row_from[r + k] = t;
                b->row_to[t] = r + k;
                b->row_pos[r + k] = positions[t];
                k++;
            }
        r += k;
    }
    return 0;
}

/* The device's in-use after the first prefill batch (its kernels loaded on first use), the first graph step and
 * as graphs accumulate (1, 4, 16, then every 16 more captured): what the driver takes beyond start-up. */
static void mem_check(cuda_backend_t *b, int32_t n, bool graph)
{
    char when[96];
    if (n > CUDA_GRAPH_ROWS && !b->mem_prefill) {
        b->mem_prefill = true;
        snprintf(when, sizeof when, "the first prefill batch (%d tokens)", n);
        cuda_mem_trace_check(&b->mem, when);
    }
    if (graph && !b->mem_step) {
        b->mem_step = true;
        b->mem_graphs = b->graphs_captured;
        cuda_mem_trace_check(&b->mem, "the first graph step");
    }
    const uint32_t g = b->graphs_captured;
    if (graph && g != b->mem_graphs && (g == 4 || g % 16 == 0)) {
        b->mem_graphs = g;
        snprintf(when, sizeof when, "%u step graphs captured (%d kept at most)", g, CUDA_GRAPHS);
        cuda_mem_trace_check(&b->mem, when);
    }
}

/* A forward pass; picks non-NULL (n_out <= logit_rows): a pick step (backend_forward_pick), whose logits stay on
 * the device but for the rows full[j] asks for. */
static int forward_rows(cuda_backend_t *b, int32_t n, const int32_t *tokens, const int32_t *seq,
                        const int32_t *positions, int32_t n_out, const int32_t *out_rows, const uint8_t *full,
                        float *logits, logits_pick_t *picks, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    cudaStream_t s = b->stream;
    cuda_step_clock_host(b->clock, CUDA_HOST_ENTER);
    b->n_grp = 0;
    if (n < 1 || n > b->n_batch)
        return guild_err_set(err, "forward: %d tokens in a batch (1..%d)", n, b->n_batch);
    if (n_out < 0 || n_out > n)
        return guild_err_set(err, "forward: %d output rows for %d tokens", n_out, n);
    for (int32_t t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= c->n_vocab)
            return guild_err_set(err, "forward: token id %d is out of range (vocabulary of %d)", tokens[t],
                                 c->n_vocab);
    for (int32_t j = 0; j < n_out; j++)
        if (out_rows[j] < 0 || out_rows[j] >= n)
            return guild_err_set(err, "forward: output row %d is not in the batch of %d", out_rows[j], n);
    if (group_rows(b, n, seq, positions, err) < 0) {
        b->n_grp = 0;
        return -1;
    }

    /* h_tokens is free: the previous forward ended with the stream idle. The rows go in group order; an output
     * row is found by its place there. */
    int32_t *h_rows = b->h_tokens + b->n_batch;
    for (int32_t r = 0; r < n; r++)
        b->h_tokens[r] = tokens[b->row_from[r]];
    for (int32_t j = 0; j < n_out; j++)
        h_rows[j] = b->row_to[out_rows[j]];
    for (int32_t g = 0; g < b->n_grp; g++)
        b->h_tokens[2 * b->n_batch + g] = b->grp_len[g];
    if (reset_recurrent(b, err) < 0 || stage_renew(b, err) < 0 || cuda_moe_step_begin(b->moe, s, err) < 0)
        return forward_failed(b);
    bool staged = false;
    cudaGraphExec_t exec = NULL;
    if (b->graphs && n <= CUDA_GRAPH_ROWS) {
        staged = !picks && !host_visible(logits);
        if (graph_get(b, n, n_out, picks ? NULL : staged ? b->h_logits : logits, &exec, err) < 0) {
            guild_log(GUILD_LOG_WARN, "cuda backend: CUDA graphs off: %s", err->msg);
            b->graphs = false;
            staged = false;
        }
    }
    b->mtp_next = 0;
    cuda_step_clock_host(b->clock, CUDA_HOST_LAUNCH);
    if (cuda_step_clock_event(b->clock, 0, s, err) < 0)
        return forward_failed(b);
    if (exec) {
        b->graph_steps++;
        if (cuda_check(cudaGraphLaunch(exec, s), "launch the step's graph", err) < 0)
            return forward_failed(b);
    } else {
        /* The logits go straight to the caller's memory, which may be pageable: a copy there may block the host
         * thread, so the layers (and whatever the bridge needs the host for meanwhile) are waited for first. */
        if (enqueue_layers(b, n, n > CUDA_GRAPH_ROWS, err) < 0 ||
            cuda_check(cudaEventRecord(b->done, s), "record event", err) < 0 ||
            cuda_moe_sync(b->moe, b->done, err) < 0 || enqueue_head(b, n_out, picks ? NULL : logits, err) < 0 ||
            cuda_moe_step_end(b->moe, s, err) < 0)
            return forward_failed(b);
    }
    cuda_step_clock_host(b->clock, CUDA_HOST_LAUNCHED);
    if (cuda_step_clock_event(b->clock, 1, s, err) < 0)
        return forward_failed(b);
    /* x still holds the last layer's rows (the head writes xn only): the MTP layer's inputs */
    if (b->mtp && cuda_mtp_keep(b, n, b->h_tokens, err) < 0)
        return forward_failed(b);
    if (cuda_check(cudaEventRecord(b->done, s), "record event", err) < 0 || cuda_moe_sync(b->moe, b->done, err) < 0 ||
        cuda_moe_result(b->moe, err) < 0)
        return forward_failed(b);
    cuda_step_clock_host(b->clock, CUDA_HOST_SYNCED);
    /* the check's finds, read where the step synchronises anyway (the row of a find is a reordered row) */
    if (b->h_finite && *b->h_finite != FINITE_NONE) {
        const int32_t row = (int32_t)((*b->h_finite >> 25) & (FINITE_MAX_ROWS - 1));
        finite_report(*b->h_finite, c, row < n ? b->row_pos[row] - row : b->grp_len[0], err);
        return forward_failed(b);
    }
    if (staged)
        memcpy(logits, b->h_logits, (size_t)n_out * (size_t)c->n_vocab * sizeof *logits);
    if (picks) { /* the stream is idle: the rows asked for in full come straight from the device's buffer, a run of
                  * adjacent ones in one copy */
        const size_t V = (size_t)c->n_vocab;
        memcpy(picks, b->h_picks, (size_t)n_out * sizeof *picks);
        for (int32_t j = 0; full && j < n_out; j++) {
            if (!full[j])
                continue;
            int32_t k = j + 1;
            while (k < n_out && full[k])
                k++;
            if (cuda_check(cudaMemcpy(logits + (size_t)j * V, b->logits + (size_t)j * V,
                                      (size_t)(k - j) * V * sizeof *logits, cudaMemcpyDeviceToHost),
                           "copy rows of logits", err) < 0)
                return forward_failed(b);
            j = k; /* row k is not asked for (or past the end) */
        }
    }
    for (int32_t g = 0; g < b->n_grp; g++) {
        const int32_t q = b->grp_seq[g];
        if (b->rb_n) { /* attn_gdn.c kept the states of a short group's rows */
            b->rb_from[q] = b->seq_len[q];
            b->rb_n[q] = b->grp_rows[g] <= b->rb_rows ? b->grp_rows[g] : 0;
        }
        b->seq_len[q] += b->grp_rows[g];
    }
    cuda_step_clock_host(b->clock, CUDA_HOST_EXIT);
    cuda_step_clock_done(b->clock, n, exec != NULL);
    mem_check(b, n, exec != NULL);
    return 0;
}

static int cuda_forward_seq(backend_t *base, int32_t n, const int32_t *tokens, const int32_t *seq,
                            const int32_t *positions, int32_t n_out, const int32_t *out_rows, float *logits,
                            guild_err_t *err)
{
    return forward_rows((cuda_backend_t *)base, n, tokens, seq, positions, n_out, out_rows, NULL, logits, NULL, err);
}

/* backend_forward_pick: reduced on the device when the rows fit the head's buffer (one pass of it), else the
 * logits come to the host and are reduced there (the same ids). */
static int cuda_forward_pick(backend_t *base, int32_t n, const int32_t *tokens, const int32_t *seq,
                             const int32_t *positions, int32_t n_out, const int32_t *out_rows, const uint8_t *full,
                             float *logits, logits_pick_t *picks, guild_err_t *err)
{
    cuda_backend_t *b = (cuda_backend_t *)base;
    if (n_out >= 1 && n_out <= b->logit_rows)
        return forward_rows(b, n, tokens, seq, positions, n_out, out_rows, full, logits, picks, err);
    if (forward_rows(b, n, tokens, seq, positions, n_out, out_rows, NULL, logits, NULL, err) < 0)
        return -1;
    for (int32_t j = 0; j < n_out; j++)
        picks[j] = logits_pick(logits + (size_t)j * (size_t)b->cfg->n_vocab, b->cfg->n_vocab);
    return 0;
}

static int cuda_forward(backend_t *base, int32_t n, const int32_t *tokens, const int32_t *positions, int32_t n_out,
                        const int32_t *out_rows, float *logits, guild_err_t *err)
{
    return cuda_forward_seq(base, n, tokens, NULL, positions, n_out, out_rows, logits, err);
}

static int32_t cuda_seq_kv_len(const backend_t *base, int32_t seq)
{
    return ((const cuda_backend_t *)base)->seq_len[seq];
}

/* Sequence seq of a recurrent model cut back to n_pos < its length: the state there restored when the last step
 * kept it (backend_options_t.rollback), else the cache empties (a recurrent state holds no earlier position). */
static void recurrent_truncate(cuda_backend_t *b, int32_t seq, int32_t n_pos)
{
    const int32_t j = b->rb_n ? n_pos - b->rb_from[seq] - 1 : -1;
    b->seq_len[seq] = 0;
    if (j < 0 || j >= b->rb_n[seq]) {
        if (b->rb_n)
            b->rb_n[seq] = 0;
        return;
    }
    const size_t R = (size_t)b->n_recurrent, conv = R * (size_t)model_gdn_conv_state(b->cfg);
    const size_t ssm = R * (size_t)model_gdn_ssm_state(b->cfg), at = (size_t)seq * (size_t)b->rb_rows + (size_t)j;
    b->rb_n[seq] = 0;
    if (cudaMemcpyAsync(b->conv_state + (size_t)seq * conv, b->rb_conv + at * conv, conv * sizeof(float),
                        cudaMemcpyDeviceToDevice, b->stream) != cudaSuccess ||
        cudaMemcpyAsync(b->ssm_state + (size_t)seq * ssm, b->rb_ssm + at * ssm, ssm * sizeof(float),
                        cudaMemcpyDeviceToDevice, b->stream) != cudaSuccess) {
        (void)cudaGetLastError(); /* the cache stays empty: the caller sees it (backend.h) */
        return;
    }
    b->rb_n[seq] = j + 1;
    b->seq_len[seq] = n_pos;
}

static void cuda_seq_kv_truncate(backend_t *base, int32_t seq, int32_t n_pos)
{
    cuda_backend_t *b = (cuda_backend_t *)base;
    if (n_pos < 0)
        n_pos = 0;
    if (n_pos < b->seq_len[seq]) {
        if (b->n_recurrent)
            recurrent_truncate(b, seq, n_pos);
        else
            b->seq_len[seq] = n_pos;
    }
    if (b->mtp && seq == 0)
        cuda_mtp_truncated(b);
}

static int32_t cuda_kv_len(const backend_t *base)
{
    return cuda_seq_kv_len(base, 0);
}

static void cuda_kv_truncate(backend_t *base, int32_t n_pos)
{
    cuda_seq_kv_truncate(base, 0, n_pos);
}

/* The routing counters, between forward passes (their stream is idle then). */
static int cuda_routing(const backend_t *base, uint64_t *counts)
{
    const cuda_backend_t *b = (const cuda_backend_t *)base;
    _Static_assert(sizeof(unsigned long long) == sizeof(uint64_t), "the counters are read as uint64_t");
    if (!b->route_counts || cudaMemcpy(counts, b->route_counts,
                                       (size_t)b->cfg->n_layer * (size_t)b->cfg->n_expert * sizeof *counts,
                                       cudaMemcpyDeviceToHost) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    return 0;
}

static void cuda_stats(const backend_t *base, backend_stats_t *out)
{
    const cuda_backend_t *b = (const cuda_backend_t *)base;
    moe_exec_stats_t ms = {0};
    if (b->moe_gpu)
        moe_exec_stats(b->moe_gpu, &ms);
    out->streamed_layers = ms.streamed;
    out->streamed_bytes = ms.streamed_bytes;
    out->split_gpu_experts = ms.split_gpu_experts;
    out->split_cpu_experts = ms.split_cpu_experts;
    out->split_gpu_pairs = ms.split_gpu_pairs;
    out->split_cpu_pairs = ms.split_cpu_pairs;
    out->gpu_expert_layers = b->gpu_expert_layers;
    out->graphs = b->graphs_captured;
    out->graph_steps = b->graph_steps;
    uint64_t bytes = 0, wait = 0;
    if (b->stage)
        cuda_stage_stats(b->stage, &bytes, &wait);
    out->staged_bytes = b->staged_bytes0 + bytes;
    out->stage_wait_ns = b->stage_wait_ns0 + wait;
    out->stream_passes = ms.stream_passes;
    out->stream_span_ns = ms.stream_span_ns;
    out->copy_busy_ns = ms.copy_busy_ns;
    out->copy_wait_ns = ms.copy_wait_ns;
    out->cpu_wait_ns = ms.cpu_wait_ns;
    const size_t LN = (size_t)b->cfg->n_layer * (size_t)b->cfg->n_expert;
    uint64_t *counts = b->route_counts ? malloc((LN ? LN : 1) * sizeof *counts) : NULL;
    if (counts && cuda_routing(base, counts) == 0)
        for (size_t i = 0; i < LN; i++) {
            out->routed_pairs += counts[i];
            out->resident_pairs += b->count_resident[i] ? counts[i] : 0;
        }
    free(counts);
}

/* The GPU worker's executor: the exchange driven from the device; from the host when the arena cannot be
 * registered for the device (the exchanges then go through the host, without CUDA graphs). */
static int cuda_exchange_exec(moe_exec_t **out, struct guild_exchange *x, const moe_xchg_options_t *o,
                              guild_err_t *err)
{
    guild_err_t why = {{0}};
    if (cuda_moe_xchg_new(out, x, o, &why) == 0)
        return 0;
    (void)cudaGetLastError();
    guild_log(GUILD_LOG_WARN, "cuda backend: the exchange cannot be driven from the device (%s): the exchanges go "
              "through the host, without CUDA graphs", why.msg);
    return moe_xchg_new(out, x, o, err);
}

/* backend_logits_alloc: page-locked, so that the step's graph copies the logits there itself (host_visible). */
static void *cuda_logits_alloc(backend_t *base, size_t bytes)
{
    (void)base;
    void *p = NULL;
    if (cudaMallocHost(&p, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

static void cuda_logits_free(backend_t *base, void *p)
{
    (void)base;
    if (cudaFreeHost(p) != cudaSuccess)
        (void)cudaGetLastError();
}

static void cuda_device_mem(backend_device_mem_t *out)
{
    out->total = cuda_device_memory();
    if (out->total && cuda_free_mem(&out->free, out->why, sizeof out->why) == 0)
        out->why[0] = '\0';
}

const backend_ops_t cuda_backend_ops = {
    .name = "cuda",
    .devices = cuda_device_count,
    .device_memory = cuda_device_mem,
    .plan_caps = GPU_PLAN_CAP_EXPERTS | GPU_PLAN_CAP_SLICES | /* ranked device parts, staged slices, */
                 GPU_PLAN_CAP_KV_HOST,                         /* the cache in host RAM */
    .create = cuda_create,
    .forward = cuda_forward,
    .kv_len = cuda_kv_len,
    .kv_truncate = cuda_kv_truncate,
    .forward_seq = cuda_forward_seq,
    .seq_kv_len = cuda_seq_kv_len,
    .seq_kv_truncate = cuda_seq_kv_truncate,
    .seq_save = cuda_seq_save,
    .seq_load = cuda_seq_load,
    .destroy = cuda_destroy,
    .stats = cuda_stats,
    .exchange_exec = cuda_exchange_exec,
    .routing = cuda_routing,
    .mtp_step = cuda_mtp_step,
    .forward_pick = cuda_forward_pick,
    .logits_alloc = cuda_logits_alloc,
    .logits_free = cuda_logits_free,
};
