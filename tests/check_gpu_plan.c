/* gpu-worker/gpu_plan: the GPU memory plan (--gpu-mem) on tiny models: no budget puts every layer's experts on
 * the GPU; a budget takes the staging buffers, then layers in order while they fit; the dense part not fitting
 * is refused with the sizes;
 * --gpu-experts limits; layers whose expert types the device kernels do not take stay off the GPU; sizes parse
 * with K/M/G/T suffixes. No GPU needed: the plan is arithmetic. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu-worker/dense/gpu_plan.h"
#include "gpu-worker/dense/kv_format.h"
#include "tests/check_run.h"
#include "tests/tiny_model.h"

/* What a budgeted plan counts beyond the allocations: the CUDA context and the driver's share (options o). */
#define OVERHEAD(m, o) (GPU_PLAN_CONTEXT + gpu_plan_driver_bytes((m), (o).n_ctx, (o).n_seq, (o).kv_type, (o).copy_path))

typedef struct fx {
    void *image;
    model_t *m;
} fx_t;

static void fx_open_spec(fx_t *f, const tiny_spec_t *s)
{
    guild_err_t err = {{0}};
    size_t size;
    tiny_model_image(s, &f->image, &size);
    ck_assert_msg(tiny_model_open(f->image, size, &f->m, &err) == 0, "%s", err.msg);
}

static void fx_open_experts(fx_t *f, int n_layer, int n_expert)
{
    tiny_spec_t s = tiny_spec("qwen3moe");
    s.n_layer = n_layer;
    if (n_expert)
        s.n_expert = n_expert;
    fx_open_spec(f, &s);
}

static void fx_open(fx_t *f, int n_layer)
{
    fx_open_experts(f, n_layer, 0);
}

static void fx_close(fx_t *f)
{
    model_destroy(&f->m);
    free(f->image);
}

START_TEST(test_no_budget_all_resident)
{
    fx_t f;
    fx_open(&f, 3);
    gpu_plan_t p;
    guild_err_t err = {{0}};
    gpu_plan_options_t o = {.n_ctx = 64, .n_batch = 8, .kv_type = KV_TYPE_F16};
    ck_assert_msg(gpu_plan_compute(&p, f.m, &o, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(p.n_resident, 3);
    ck_assert(p.resident[0] && p.resident[1] && p.resident[2]);
    ck_assert(p.experts == p.experts_all && p.experts > 0 && p.expert_buffers > 0);
    ck_assert_uint_eq(p.reserve, 0);
    /* KV: K and V, 3 layers, 64 positions, 2 KV heads of 16, F16 */
    ck_assert_uint_eq(p.kv, 2u * 3u * 64u * 32u * 2u);
    ck_assert_uint_eq(gpu_plan_total(&p), p.dense + p.kv + p.buffers + p.expert_buffers + p.experts);
    ck_assert_int_eq(p.stage_slots, 0);
    gpu_plan_fini(&p);
    /* the cache's format sets the bytes of a position (--kv-type): rows of 32 elements are one block each;
     * KV_TYPE_DEFAULT counts f16 */
    static const struct {
        int32_t type;
        uint64_t k, v; /* bytes of a 32-element key row, value row */
    } fmts[] = {{KV_TYPE_DEFAULT, 64, 64}, {KV_TYPE_F32, 128, 128}, {KV_TYPE_Q8_0, 34, 34}, {KV_TYPE_Q4_0, 18, 18},
                {KV_TYPE_K8V4, 34, 18}};
    for (size_t i = 0; i < sizeof fmts / sizeof fmts[0]; i++) {
        o.kv_type = fmts[i].type;
        ck_assert(gpu_plan_compute(&p, f.m, &o, &err) == 0);
        ck_assert_uint_eq(p.kv, (fmts[i].k + fmts[i].v) * 3u * 64u);
        gpu_plan_fini(&p);
    }
    o.kv_type = KV_TYPE_F16;
    /* --gpu-experts none: every expert on the CPU side, nothing resident or streamed */
    o.max_expert_layers = GPU_EXPERTS_NONE;
    ck_assert(gpu_plan_compute(&p, f.m, &o, &err) == 0);
    ck_assert_int_eq(p.n_resident, 0);
    ck_assert_int_eq(p.n_resident_experts, 0);
    ck_assert_int_eq(p.stage_slots, 0);
    ck_assert_uint_eq(p.expert_buffers, 0);
    for (int il = 0; il < 3; il++)
        ck_assert_int_eq(p.layer[il].mode, GPU_PLAN_CPU);
    gpu_plan_fini(&p);
    o.max_expert_layers = 2;
    ck_assert(gpu_plan_compute(&p, f.m, &o, &err) == 0);
    ck_assert_int_eq(p.n_resident, 2);
    ck_assert(p.resident[0] && p.resident[1] && !p.resident[2]);
    gpu_plan_fini(&p);
    fx_close(&f);
}
END_TEST

/* A qwen3next shape (tests/tiny_model.c: 4 layers, a gated delta net on the even ones, gated full attention on
 * the odd ones; 2 KV heads of 16; the delta net 4 taps, 2 key heads and 4 value heads of 16): the cache holds K and
 * V rows for the 2 attention layers only and each gdn layer's F32 state, whatever the context
 * (gpu_plan_cache_bytes, which the CUDA backend's allocation follows). */
START_TEST(test_hybrid_cache)
{
    guild_err_t err = {{0}};
    fx_t f, g;
    tiny_spec_t s = tiny_spec("qwen3next");
    s.n_layer = 4;
    fx_open_spec(&f, &s);
    s.arch = "qwen2moe"; /* the same shape, every layer with K and V */
    fx_open_spec(&g, &s);
    gpu_plan_options_t o = {.n_ctx = 64, .n_batch = 8, .kv_type = KV_TYPE_F16};
    gpu_plan_t p, q;
    ck_assert_msg(gpu_plan_compute(&p, f.m, &o, &err) == 0, "%s", err.msg);
    ck_assert_msg(gpu_plan_compute(&q, g.m, &o, &err) == 0, "%s", err.msg);
    const uint64_t KV = 2 * 16, DK = 16, NK = 2, NV = 4, CONV = 4, CH = 2 * NK * DK + NV * DK;
    const uint64_t state = ((CONV - 1) * CH + NV * DK * DK) * 4; /* one gdn layer's, bytes */
    ck_assert_uint_eq(p.kv, 2 * 64 * (KV + KV) * 2 + 2 * state);
    ck_assert_uint_eq(q.kv, 4 * 64 * (KV + KV) * 2);
    ck_assert_uint_eq(p.kv, gpu_plan_cache_bytes(model_config(f.m), 64, KV_TYPE_F16));
    /* a longer context grows only the attention layers' rows */
    ck_assert_uint_eq(gpu_plan_cache_bytes(model_config(f.m), 4096, KV_TYPE_F32), 2 * 4096 * (KV + KV) * 4 + 2 * state);
    ck_assert_uint_eq(gpu_plan_total(&p), p.dense + p.kv + p.buffers + p.expert_buffers + p.experts);
    /* several sequences (guild serve --parallel): a cache and the states each */
    gpu_plan_t r;
    o.n_seq = 5;
    ck_assert_msg(gpu_plan_compute(&r, f.m, &o, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(r.kv, 5 * p.kv);
    ck_assert_int_eq(r.n_seq, 5);
    gpu_plan_fini(&r);
    ck_assert_msg(gpu_plan_import(&r, f.m, 0, 64, 3, KV_TYPE_F16, 8, 0, 0, NULL, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(r.kv, 3 * p.kv);
    gpu_plan_fini(&r);
    gpu_plan_fini(&p);
    gpu_plan_fini(&q);
    fx_close(&f);
    fx_close(&g);
}
END_TEST

/* A deepseek2 shape (tests/tiny_model.c: 4 heads, latent 64, rotated 8, q LoRA 32): the plan's buffers hold
 * the CUDA backend's MLA activations beyond the shared ones, the queries in the latent space (H * (R + r) a row)
 * and the heads' latent outputs (H * R) the largest, and the decode splits' scratch, which grows with the context up
 * to 16 splits. The difference to the same shape counted without them is exactly these bytes. */
START_TEST(test_mla_buffers)
{
    guild_err_t err = {{0}};
    fx_t f;
    tiny_spec_t s = tiny_spec("deepseek2");
    fx_open_spec(&f, &s);
    const uint64_t H = 4, R = 64, RR = 72, RQ = 32, NB = 8, fl = 4;
    const uint64_t acts = NB * RQ * fl + NB * RR * fl + NB * H * RR * fl + NB * H * R * fl;
    uint64_t prev = 0;
    for (int32_t n_ctx = 64; n_ctx <= 8192; n_ctx *= 4) {
        gpu_plan_options_t o = {.n_ctx = n_ctx, .n_batch = 8, .kv_type = KV_TYPE_F16};
        gpu_plan_t p;
        ck_assert_msg(gpu_plan_compute(&p, f.m, &o, &err) == 0, "%s", err.msg);
        const uint64_t splits = (uint64_t)(n_ctx + 255) / 256 < 16 ? (uint64_t)(n_ctx + 255) / 256 : 16;
        const uint64_t mla = acts + splits * 32 * H * (R + 2) * fl;
        ck_assert_uint_ge(p.buffers, mla);
        if (prev) /* what grows with the context: the RoPE table (rotated 8 a position) and the splits */
            ck_assert_uint_eq(p.buffers - prev, (uint64_t)(n_ctx - n_ctx / 4) * 8 * fl +
                                                    (splits - ((uint64_t)(n_ctx / 4 + 255) / 256)) * 32 * H *
                                                        (R + 2) * fl);
        prev = p.buffers;
        gpu_plan_fini(&p);
    }
    fx_close(&f);
}
END_TEST

/* Biased experts (gpt-oss): the device keeps every expert's gate, up and down biases (F32) and, for the clamped
 * SwiGLU, u apart from g and the pairs' global ids; the expert buffers are those bytes more than the same shape's
 * without biases (a GPT-OSS-120B cut used 0.24 GiB more than its plan before they were counted). */
START_TEST(test_bias_buffers)
{
    guild_err_t err = {{0}};
    fx_t f, g;
    tiny_spec_t s = tiny_spec("gpt-oss");
    fx_open_spec(&f, &s);
    s.arch = "qwen3moe";
    fx_open_spec(&g, &s);
    gpu_plan_options_t o = {.n_ctx = 64, .n_batch = 8, .kv_type = KV_TYPE_F16};
    gpu_plan_t p, q;
    ck_assert_msg(gpu_plan_compute(&p, f.m, &o, &err) == 0, "%s", err.msg);
    ck_assert_msg(gpu_plan_compute(&q, g.m, &o, &err) == 0, "%s", err.msg);
    const uint64_t L = (uint64_t)s.n_layer, X = (uint64_t)s.n_expert, F = (uint64_t)s.n_ff_exp;
    const uint64_t E = (uint64_t)s.n_embd, pairs = 8 * (uint64_t)s.n_used, A = GPU_PLAN_ALIGN;
    const uint64_t bias = L * ((X * (2 * F + E) * 4 + A - 1) / A * A);
    ck_assert(p.expert_buffers > 0 && q.expert_buffers > 0);
    ck_assert_uint_eq(p.expert_buffers - q.expert_buffers, bias + pairs * F * 4 + pairs * 4);
    gpu_plan_fini(&p);
    gpu_plan_fini(&q);
    fx_close(&f);
    fx_close(&g);
}
END_TEST

/* The multi-token-prediction layer (options' mtp, the CUDA backend's cuda_mtp.c): a glm4moe shape with one (4
 * layers, 3 of them MoE) counts its weights, every expert of it and every position's hidden state apart (p.mtp, in
 * the total); under a budget that held every expert of the model without it, the plan makes room for it by keeping
 * fewer experts resident; a budget that holds the dense part but not the layer is refused, naming it. */
START_TEST(test_mtp)
{
    guild_err_t err = {{0}};
    fx_t f;
    tiny_spec_t s = tiny_spec("glm4moe");
    s.n_layer = 4;
    s.n_mtp = 1;
    fx_open_spec(&f, &s);
    gpu_plan_options_t o = {.n_ctx = 64, .n_batch = 8, .kv_type = KV_TYPE_F16};
    gpu_plan_t p, q;
    ck_assert_msg(gpu_plan_compute(&p, f.m, &o, &err) == 0, "%s", err.msg);
    o.mtp = true;
    ck_assert_msg(gpu_plan_compute(&q, f.m, &o, &err) == 0, "%s", err.msg);
    const uint64_t E = (uint64_t)s.n_embd, X = (uint64_t)s.n_expert, F = (uint64_t)s.n_ff_exp;
    ck_assert_uint_eq(p.mtp, 0);
    ck_assert_uint_ge(q.mtp, 3 * X * E * F * 4 + 64 * E * 4); /* F32 experts, 64 hidden states */
    ck_assert_uint_eq(gpu_plan_total(&q) - gpu_plan_total(&p), q.mtp);
    ck_assert_int_eq(q.n_resident_experts, p.n_resident_experts);
    const uint64_t budget = OVERHEAD(f.m, o) + gpu_plan_total(&p);
    gpu_plan_fini(&p);
    gpu_plan_fini(&q);
    o.budget = budget;
    o.mtp = false;
    ck_assert_msg(gpu_plan_compute(&p, f.m, &o, &err) == 0, "%s", err.msg);
    o.mtp = true;
    ck_assert_msg(gpu_plan_compute(&q, f.m, &o, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(p.n_resident_experts, (int64_t)X * (s.n_layer - s.n_dense_lead));
    ck_assert_uint_le(gpu_plan_total(&q), budget);
    ck_assert_int_lt(q.n_resident_experts, p.n_resident_experts);
    o.budget = OVERHEAD(f.m, o) + p.dense + p.kv + p.buffers + q.mtp / 2;
    gpu_plan_fini(&p);
    gpu_plan_fini(&q);
    ck_assert_int_eq(gpu_plan_compute(&q, f.m, &o, &err), -1);
    ck_assert_msg(strstr(err.msg, "does not fit") && strstr(err.msg, "the multi-token-prediction layer"), "%s",
                  err.msg);
    fx_close(&f);
}
END_TEST

/* The recurrent states a rollback keeps (options' rollback: the stack's --spec, --spec-max + 1 rows; the CUDA
 * backend's rb_conv and rb_ssm): a qwen3next shape (4 layers, 2 of them gated delta nets) counts every sequence's
 * states after each row apart (p.rollback, in the total); a model without recurrent layers counts none; under a
 * budget that held every expert without them, the plan makes room by keeping fewer experts resident; a budget
 * that holds the dense part but not the states is refused, naming them and --spec-max. */
START_TEST(test_rollback)
{
    guild_err_t err = {{0}};
    fx_t f, g;
    tiny_spec_t s = tiny_spec("qwen3next");
    s.n_layer = 4;
    fx_open_spec(&f, &s);
    fx_open(&g, 4);
    gpu_plan_options_t o = {.n_ctx = 64, .n_batch = 8, .kv_type = KV_TYPE_F16};
    gpu_plan_t p, q;
    ck_assert_msg(gpu_plan_compute(&p, f.m, &o, &err) == 0, "%s", err.msg);
    o.rollback = 5;
    ck_assert_msg(gpu_plan_compute(&q, f.m, &o, &err) == 0, "%s", err.msg);
    const uint64_t DK = 16, NK = 2, NV = 4, CONV = 4, CH = 2 * NK * DK + NV * DK;
    const uint64_t state = ((CONV - 1) * CH + NV * DK * DK) * 4; /* one gdn layer's, bytes */
    ck_assert_uint_eq(p.rollback, 0);
    ck_assert_uint_eq(q.rollback, 5 * 2 * state);
    ck_assert_uint_eq(gpu_plan_rollback_bytes(model_config(f.m), 5), q.rollback);
    ck_assert_uint_eq(gpu_plan_rollback_bytes(model_config(f.m), 0), 0);
    ck_assert_uint_eq(gpu_plan_total(&q) - gpu_plan_total(&p), q.rollback);
    ck_assert_int_eq(q.n_resident_experts, p.n_resident_experts);
    gpu_plan_fini(&q);
    o.n_seq = 3; /* a verify step per sequence: each keeps its own */
    ck_assert_msg(gpu_plan_compute(&q, f.m, &o, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(q.rollback, 3 * 5 * 2 * state);
    gpu_plan_fini(&q);
    o.n_seq = 0;
    ck_assert_msg(gpu_plan_compute(&q, g.m, &o, &err) == 0, "%s", err.msg); /* qwen3moe: no recurrent state */
    ck_assert_uint_eq(q.rollback, 0);
    ck_assert_uint_eq(gpu_plan_rollback_bytes(model_config(g.m), 5), 0);
    gpu_plan_fini(&q);
    /* a budget: every expert resident without the states; with them, fewer, within the budget */
    const uint64_t budget = OVERHEAD(f.m, o) + gpu_plan_total(&p);
    const int64_t all = p.n_resident_experts;
    ck_assert_int_gt(all, 0);
    gpu_plan_fini(&p);
    o.budget = budget;
    o.rollback = 0;
    ck_assert_msg(gpu_plan_compute(&p, f.m, &o, &err) == 0, "%s", err.msg);
    o.rollback = 5;
    ck_assert_msg(gpu_plan_compute(&q, f.m, &o, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(p.n_resident_experts, all);
    ck_assert_uint_eq(q.rollback, 5 * 2 * state);
    ck_assert_uint_le(gpu_plan_total(&q), budget);
    ck_assert_int_lt(q.n_resident_experts, p.n_resident_experts);
    /* the dense part fits, the states do not: refused, naming them and what to lower */
    o.budget = OVERHEAD(f.m, o) + p.dense + p.kv + p.buffers + q.rollback / 2;
    gpu_plan_fini(&q);
    ck_assert_int_eq(gpu_plan_compute(&q, f.m, &o, &err), -1);
    ck_assert_msg(strstr(err.msg, "does not fit") && strstr(err.msg, "the recurrent states a --spec rollback keeps") &&
                      strstr(err.msg, "--spec-max"), "%s", err.msg);
    /* without them the same budget is a plan */
    o.rollback = 0;
    ck_assert_msg(gpu_plan_compute(&q, f.m, &o, &err) == 0, "%s", err.msg);
    gpu_plan_fini(&q);
    gpu_plan_fini(&p);
    fx_close(&f);
    fx_close(&g);
}
END_TEST

/* What the driver takes beyond the allocations is part of every budgeted plan: the CUDA context (the constant, or
 * the backend's measure: the options' context) and the driver's share (gpu_plan_driver_bytes: the allocations'
 * rounding, the kernels, page tables of mapped host memory, the step graphs); the total is every part, within the
 * budget; a larger measured context leaves fewer experts resident; the page tables grow with the caches mapped. */
START_TEST(test_overhead)
{
    fx_t f;
    fx_open(&f, 6);
    gpu_plan_t p, q;
    guild_err_t err = {{0}};
    gpu_plan_options_t o = {.n_ctx = 64, .n_batch = 8, .kv_type = KV_TYPE_F16};
    ck_assert(gpu_plan_compute(&p, f.m, &o, &err) == 0);
    ck_assert_uint_eq(p.reserve, 0); /* no budget: nothing to hold to */
    ck_assert_uint_eq(p.driver, 0);
    const uint64_t layer = p.experts / 6, all = gpu_plan_total(&p);
    gpu_plan_fini(&p);
    const uint64_t drv = gpu_plan_driver_bytes(f.m, 64, 1, KV_TYPE_F16, GPU_COPY_PINNED);
    const uint64_t drv_ring = gpu_plan_driver_bytes(f.m, 64, 1, KV_TYPE_F16, GPU_COPY_RING);
    ck_assert_uint_eq(drv - drv_ring, 6 * layer / GPU_PLAN_MAP_DIV); /* the experts' page tables, mapped or not */
    ck_assert_uint_ge(drv, (uint64_t)GPU_PLAN_ALLOCS * GPU_PLAN_ALLOC_SLACK + GPU_PLAN_KERNELS +
                               (uint64_t)GPU_PLAN_GRAPHS * 7 * GPU_PLAN_GRAPH_LAYER);
    ck_assert_uint_ge(drv, (uint64_t)GPU_PLAN_ALLOCS * GPU_PLAN_ALLOC_SLACK + GPU_PLAN_KERNELS +
                               (uint64_t)GPU_PLAN_GRAPHS * 7 * GPU_PLAN_GRAPH_LAYER + 6 * layer / GPU_PLAN_MAP_DIV);
    /* every expert resident but a layer's worth: the budget binds (two staging slots, three layers resident) */
    o.budget = GPU_PLAN_CONTEXT + drv + all - layer;
    ck_assert_msg(gpu_plan_compute(&p, f.m, &o, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(p.reserve, GPU_PLAN_CONTEXT);
    ck_assert_uint_eq(p.driver, drv);
    ck_assert_uint_eq(gpu_plan_total(&p), p.reserve + p.driver + p.dense + p.kv + p.kv_stage + p.buffers +
                                              p.expert_buffers + p.staging + p.experts + p.mtp + p.rollback);
    ck_assert_uint_le(gpu_plan_total(&p), o.budget);
    ck_assert_uint_ge(gpu_plan_total(&p) + 2 * layer, o.budget); /* filled, not left idle */
    /* a context measured larger by two layers' experts: two layers fewer resident, still within the budget */
    o.context = GPU_PLAN_CONTEXT + 2 * layer;
    ck_assert_msg(gpu_plan_compute(&q, f.m, &o, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(q.reserve, o.context);
    ck_assert_uint_le(gpu_plan_total(&q), o.budget);
    ck_assert_int_eq(p.n_resident, 3);
    ck_assert_int_le(q.n_resident_experts, p.n_resident_experts - 2 * 8);
    gpu_plan_fini(&q);
    /* a carried plan counts the coordinator's constant for the context and the driver's share less the experts'
     * page tables (counted by the coordinator, which knows the stager): never more than the coordinator's plan */
    ck_assert_msg(gpu_plan_import(&q, f.m, o.budget, 64, 1, KV_TYPE_F16, p.n_batch, p.stage_slots, p.stage_slot_experts,
                                  p.expert_resident, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(q.reserve, GPU_PLAN_CONTEXT);
    ck_assert_uint_eq(q.driver, drv_ring);
    ck_assert_uint_eq(gpu_plan_total(&q) + drv - drv_ring, gpu_plan_total(&p));
    gpu_plan_fini(&q);
    /* the plan as printed names both */
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    gpu_plan_print(&p, out);
    fclose(out);
    ck_assert_msg(strstr(text, "CUDA context ~") && strstr(text, "the driver's share ~"), "%s", text);
    free(text);
    gpu_plan_fini(&p);
    /* page tables: sixteen caches of 4096 positions mapped take more than one of 64 */
    ck_assert_uint_gt(gpu_plan_driver_bytes(f.m, 4096, 16, KV_TYPE_F16, GPU_COPY_PINNED), drv);
    fx_close(&f);
}
END_TEST

START_TEST(test_budget)
{
    fx_t f;
    fx_open(&f, 6);
    gpu_plan_t p;
    guild_err_t err = {{0}};
    gpu_plan_options_t o = {.n_ctx = 64, .n_batch = 8, .kv_type = KV_TYPE_F16};
    ck_assert(gpu_plan_compute(&p, f.m, &o, &err) == 0);
    const uint64_t layer = p.experts / 6, fixed = OVERHEAD(f.m, o) + p.dense + p.kv + p.buffers, eb = p.expert_buffers;
    gpu_plan_fini(&p);
    /* not every layer fits: two staging buffers first, then two layers' experts and a half */
    o.budget = fixed + eb + 4 * layer + layer / 2;
    ck_assert_msg(gpu_plan_compute(&p, f.m, &o, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(p.staging, 2 * layer);
    ck_assert_int_eq(p.n_resident, 2);
    ck_assert(p.resident[0] && p.resident[1] && !p.resident[2] && !p.resident[5]);
    ck_assert(gpu_plan_total(&p) <= o.budget);
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    gpu_plan_print(&p, out);
    fclose(out);
    ck_assert_msg(strstr(buf, "2 of 6 layers") && strstr(buf, "layers 0-1") && strstr(buf, "on the CPU") &&
                  strstr(buf, "streamed"), "%s", buf);
    free(buf);
    gpu_plan_fini(&p);
    /* room for the staging buffers only: every layer streams or stays on the CPU */
    o.budget = fixed + eb + 2 * layer + layer / 2;
    ck_assert(gpu_plan_compute(&p, f.m, &o, &err) == 0);
    ck_assert_int_eq(p.n_resident, 0);
    ck_assert_uint_eq(p.staging, 2 * layer);
    ck_assert_uint_eq(p.expert_buffers, eb);
    gpu_plan_fini(&p);
    /* an explicit limit of layers caps the resident ones; streaming is planned all the same */
    o.max_expert_layers = 1;
    o.budget = fixed + eb + 4 * layer + layer / 2;
    ck_assert(gpu_plan_compute(&p, f.m, &o, &err) == 0);
    ck_assert_int_eq(p.n_resident, 1);
    ck_assert_uint_eq(p.staging, 2 * layer);
    gpu_plan_fini(&p);
    o.max_expert_layers = 0;
    /* the dense part fits, no expert and no staging does */
    o.budget = fixed + eb + layer / 2;
    ck_assert(gpu_plan_compute(&p, f.m, &o, &err) == 0);
    ck_assert_int_eq(p.n_resident, 0);
    ck_assert_uint_eq(p.staging, 0);
    ck_assert_uint_eq(p.expert_buffers, 0);
    gpu_plan_fini(&p);
    /* the dense part does not fit: refused, with its sizes */
    o.budget = fixed - 1;
    ck_assert_int_eq(gpu_plan_compute(&p, f.m, &o, &err), -1);
    ck_assert_msg(strstr(err.msg, "does not fit") && strstr(err.msg, "KV cache") && strstr(err.msg, "64 positions"),
                  "%s", err.msg);
    ck_assert_ptr_null(p.resident);
    fx_close(&f);
}
END_TEST

START_TEST(test_types_the_device_takes)
{
    /* layer 1's up matrix in another type than its gate: the grouped expert kernels cannot take it */
    guild_err_t err = {{0}};
    tiny_spec_t s = tiny_spec("qwen3moe");
    s.n_layer = 3;
    s.f16_tensor = "blk.1.ffn_up_exps.weight";
    void *image;
    size_t size;
    model_t *m = NULL;
    tiny_model_image(&s, &image, &size);
    ck_assert_msg(tiny_model_open(image, size, &m, &err) == 0, "%s", err.msg);
    ck_assert(gpu_plan_layer_computable(m, 0) && !gpu_plan_layer_computable(m, 1) && gpu_plan_layer_computable(m, 2));
    gpu_plan_t p;
    gpu_plan_options_t o = {.n_ctx = 64, .n_batch = 8, .kv_type = KV_TYPE_F16};
    ck_assert_msg(gpu_plan_compute(&p, m, &o, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(p.n_resident, 2);
    ck_assert(p.resident[0] && !p.resident[1] && p.resident[2]);
    ck_assert(p.experts < p.experts_all);
    gpu_plan_fini(&p);
    /* one layer at most: the first computable one */
    o.max_expert_layers = 1;
    ck_assert(gpu_plan_compute(&p, m, &o, &err) == 0);
    ck_assert(p.resident[0] && !p.resident[1] && !p.resident[2]);
    gpu_plan_fini(&p);
    model_destroy(&m);
    free(image);

    ck_assert(gpu_plan_type_supported(GUILD_TYPE_Q4_K) && gpu_plan_type_supported(GUILD_TYPE_F16));
    ck_assert(gpu_plan_type_supported(GUILD_TYPE_MXFP4) && gpu_plan_type_supported(GUILD_TYPE_Q2_K) &&
              gpu_plan_type_supported(GUILD_TYPE_Q3_K));
    ck_assert(gpu_plan_type_supported(GUILD_TYPE_IQ2_XXS) && gpu_plan_type_supported(GUILD_TYPE_IQ1_M));
    ck_assert(!gpu_plan_type_supported(GUILD_TYPE_Q8_K) && !gpu_plan_type_supported(GUILD_TYPE_Q8_1));
    ck_assert(strstr(gpu_plan_supported_types(), "q4_K"));
}
END_TEST


/* A synthetic routing profile: in every layer experts 3 and 7 (of 16) are hot (1000 + layer pairs), the others
 * cold but distinct (e + 1). */
static void hot_profile(uint64_t *counts, int n_layer, int n_expert)
{
    for (int il = 0; il < n_layer; il++)
        for (int e = 0; e < n_expert; e++)
            counts[il * n_expert + e] = (e == 3 || e == 7) ? 1000u + (uint64_t)il : (uint64_t)e + 1u;
}

/* Every budget from below the minimum to everything: the plan is refused only when the dense part does not fit
 * at the smallest chunk; from the dense part plus two of the smallest slots on, every layer not wholly resident
 * streams; the resident experts are the hottest of the profile, and the memory left cannot hold one more. */
START_TEST(test_budget_sweep)
{
    enum { L = 6, N = 16 };
    fx_t f;
    fx_open_experts(&f, L, N);
    uint64_t counts[L * N];
    hot_profile(counts, L, N);
    guild_err_t err = {{0}};
    gpu_plan_t p;
    gpu_plan_options_t o = {.n_ctx = 64, .n_batch = GPU_PLAN_BATCH_AUTO, .n_batch_min = 1, .kv_type = KV_TYPE_F16,
                            .caps = GPU_PLAN_CAP_EXPERTS | GPU_PLAN_CAP_SLICES, .routing = counts,
                            .routing_name = "synthetic"};
    /* the sizes: everything, and the dense part with one-token buffers */
    ck_assert_msg(gpu_plan_compute(&p, f.m, &o, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(p.n_batch, 64); /* auto: up to the context */
    ck_assert_int_eq(p.n_resident, L);
    ck_assert_int_eq(p.stage_slots, 0);
    const uint64_t all = gpu_plan_total(&p) + OVERHEAD(f.m, o), one = p.layer[0].expert_bytes;
    gpu_plan_fini(&p);
    o.n_batch = 1;
    o.n_batch_min = 0;
    ck_assert(gpu_plan_compute(&p, f.m, &o, &err) == 0);
    const uint64_t dense1 = OVERHEAD(f.m, o) + p.dense + p.kv + p.buffers, eb1 = p.expert_buffers;
    gpu_plan_fini(&p);
    const uint64_t min_stream = dense1 + eb1 + 2 * gpu_plan_slot_bytes(f.m, N / GPU_PLAN_MIN_SLICE_DIV);
    ck_assert(gpu_plan_slot_bytes(f.m, N) == 3 * N * one / 3);
    o.n_batch = GPU_PLAN_BATCH_AUTO;
    o.n_batch_min = 1;
    int refused = 0, planned = 0, streamed_all = 0;
    for (uint64_t budget = dense1 - 3 * one; budget <= all + 2 * one; budget += one / 3) {
        o.budget = budget;
        const int rc = gpu_plan_compute(&p, f.m, &o, &err);
        if (budget < dense1) {
            ck_assert_msg(rc == -1, "budget %llu under the dense part planned", (unsigned long long)budget);
            ck_assert_msg(strstr(err.msg, "does not fit"), "%s", err.msg);
            refused++;
            continue;
        }
        ck_assert_msg(rc == 0, "budget %llu (dense part %llu): %s", (unsigned long long)budget,
                      (unsigned long long)dense1, err.msg);
        planned++;
        ck_assert_msg(gpu_plan_total(&p) <= budget, "%llu planned over %llu",
                      (unsigned long long)gpu_plan_total(&p), (unsigned long long)budget);
        ck_assert(p.n_batch >= 1 && p.n_batch <= 64);
        uint64_t min_hot = UINT64_MAX, max_cold = 0;
        int64_t n_res = 0;
        for (int il = 0; il < L; il++) {
            int r = 0;
            for (int e = 0; e < N; e++) {
                const bool res = gpu_plan_expert_resident(&p, il, e);
                r += res;
                if (res && counts[il * N + e] < min_hot)
                    min_hot = counts[il * N + e];
                if (!res && counts[il * N + e] > max_cold)
                    max_cold = counts[il * N + e];
            }
            n_res += r;
            ck_assert_int_eq(p.layer[il].n_resident, r);
            ck_assert_int_eq(p.resident[il], r == N);
            if (r == N)
                ck_assert_int_eq(p.layer[il].mode, GPU_PLAN_RESIDENT);
            else if (budget >= min_stream)
                ck_assert_msg(p.layer[il].mode == GPU_PLAN_STREAMED, "budget %llu >= %llu: layer %d not streamed",
                              (unsigned long long)budget, (unsigned long long)min_stream, il);
        }
        ck_assert_int_eq(p.n_resident_experts, n_res);
        /* the hottest first: no resident expert is colder than one left out */
        if (n_res && n_res < L * N)
            ck_assert_msg(min_hot >= max_cold, "budget %llu: resident %llu colder than %llu left out",
                          (unsigned long long)budget, (unsigned long long)min_hot, (unsigned long long)max_cold);
        /* the known hot set (12 experts) resident as soon as it is not the only thing that fits */
        if (n_res >= 2 * L)
            for (int il = 0; il < L; il++)
                ck_assert(gpu_plan_expert_resident(&p, il, 3) && gpu_plan_expert_resident(&p, il, 7));
        /* the memory left holds no further expert */
        if (n_res < L * N && (p.stage_slots || n_res))
            ck_assert_msg(budget - gpu_plan_total(&p) < one, "budget %llu: %llu left, an expert is %llu",
                          (unsigned long long)budget, (unsigned long long)(budget - gpu_plan_total(&p)),
                          (unsigned long long)one);
        if (budget >= min_stream && n_res < L * N) {
            /* a ring of 2..16 slots holding at most two layers; slices in three or more where three of the
             * smallest fit beside the plan's buffers */
            const int32_t kmin = N / GPU_PLAN_MIN_SLICE_DIV > 1 ? N / GPU_PLAN_MIN_SLICE_DIV : 1;
            ck_assert(p.stage_slots >= 2 && p.stage_slots <= 16);
            ck_assert(p.stage_slot_experts >= kmin && p.stage_slot_experts <= N);
            ck_assert(p.stage_slots * p.stage_slot_experts <= 2 * N);
            if (budget >= OVERHEAD(f.m, o) + p.dense + p.kv + p.buffers + p.expert_buffers +
                              3 * gpu_plan_slot_bytes(f.m, kmin))
                ck_assert_msg(p.stage_slots >= 3 || p.stage_slot_experts == N, "budget %llu: %d slots of %d",
                              (unsigned long long)budget, p.stage_slots, p.stage_slot_experts);
            ck_assert_uint_eq(p.stage_slot_bytes, gpu_plan_slot_bytes(f.m, p.stage_slot_experts));
            ck_assert(p.expert_buffers > 0);
            streamed_all++;
        }
        ck_assert(p.hit_rate >= 0 && p.hit_rate <= 1);
        ck_assert(p.why_batch[0] && p.why_stage[0] && p.why_resident[0]);
        gpu_plan_fini(&p);
    }
    ck_assert(refused > 0 && planned > 20 && streamed_all > 10);
    fx_close(&f);
}
END_TEST

/* A batch too large for the budget shrinks instead of being refused (n_batch_min); asked exactly, it is
 * refused as before. */
START_TEST(test_chunk_shrinks)
{
    fx_t f;
    fx_open(&f, 4);
    guild_err_t err = {{0}};
    gpu_plan_t p;
    gpu_plan_options_t o = {.n_ctx = 4096, .n_batch = 4096, .kv_type = KV_TYPE_F16};
    ck_assert(gpu_plan_compute(&p, f.m, &o, &err) == 0);
    const uint64_t fixed4096 = OVERHEAD(f.m, o) + p.dense + p.kv + p.buffers;
    gpu_plan_fini(&p);
    o.budget = fixed4096 - 1;
    ck_assert_int_eq(gpu_plan_compute(&p, f.m, &o, &err), -1);
    ck_assert_msg(strstr(err.msg, "does not fit") && strstr(err.msg, "batches of 4096"), "%s", err.msg);
    o.n_batch_min = 1;
    ck_assert_msg(gpu_plan_compute(&p, f.m, &o, &err) == 0, "%s", err.msg);
    ck_assert_int_lt(p.n_batch, 4096);
    ck_assert_int_ge(p.n_batch, 1);
    ck_assert(gpu_plan_total(&p) <= o.budget);
    ck_assert_msg(strstr(p.why_batch, "over the budget"), "%s", p.why_batch);
    gpu_plan_fini(&p);
    /* auto with room: up to the context */
    o.budget = 0;
    o.n_batch = GPU_PLAN_BATCH_AUTO;
    ck_assert(gpu_plan_compute(&p, f.m, &o, &err) == 0);
    ck_assert_int_eq(p.n_batch, 4096);
    ck_assert_int_eq(p.n_batch_asked, GPU_PLAN_BATCH_AUTO);
    gpu_plan_fini(&p);
    fx_close(&f);
}
END_TEST

/* A budget that holds the large chunk's buffers but not beside staging takes a smaller chunk, and its why names
 * the --gpu-mem at which the large chunk streams; that budget, asked for the large chunk exactly, is planned with
 * it (not refused), and a hundredth of a GiB less is not planned with it and staging. */
START_TEST(test_chunk_names_its_budget)
{
    /* experts of 6.3 MB (F32, 64 x 8192): the smallest ring (two slots of one) is more than the hundredth of a
     * GiB the why rounds to, so a need that left the slots out would fail the checks below */
    tiny_spec_t sp = tiny_spec("qwen3moe");
    sp.n_layer = 2;
    sp.n_expert = 4;
    sp.n_used = 2;
    sp.n_ff_exp = 8192;
    fx_t f;
    fx_open_spec(&f, &sp);
    guild_err_t err = {{0}};
    gpu_plan_t p;
    gpu_plan_options_t o = {.n_ctx = 4096, .n_batch = 4096, .n_batch_min = 1, .kv_type = KV_TYPE_F16,
                            .caps = GPU_PLAN_CAP_EXPERTS | GPU_PLAN_CAP_SLICES};
    ck_assert(gpu_plan_compute(&p, f.m, &o, &err) == 0);
    const uint64_t fixed4096 = OVERHEAD(f.m, o) + p.dense + p.kv + p.buffers;
    gpu_plan_fini(&p);
    int found = 0;
    for (uint64_t b = fixed4096; b < fixed4096 + (1024u << 20) && !found; b += 1u << 20) {
        o.budget = b;
        o.n_batch_min = 1;
        if (gpu_plan_compute(&p, f.m, &o, &err) < 0)
            continue;
        const char *at = strstr(p.why_batch, "4096-token chunks with a ring of 2 slots need --gpu-mem ");
        if (!at) {
            gpu_plan_fini(&p);
            continue;
        }
        found = 1;
        ck_assert_int_lt(p.n_batch, 4096);
        char size[32];
        ck_assert(sscanf(at + strlen("4096-token chunks with a ring of 2 slots need --gpu-mem "), "%31[0-9.G]",
                         size) == 1);
        gpu_plan_fini(&p);
        uint64_t named;
        ck_assert_msg(gpu_plan_parse_size(size, "--gpu-mem", &named, &err) == 0, "%s", err.msg);
        ck_assert(named > b);
        o.budget = named; /* the large chunk asked for exactly: planned, within the budget */
        o.n_batch_min = 0;
        ck_assert_msg(gpu_plan_compute(&p, f.m, &o, &err) == 0, "%s: %s", size, err.msg);
        ck_assert_int_eq(p.n_batch, 4096);
        ck_assert(gpu_plan_total(&p) <= named);
        ck_assert_msg(p.stage_slots >= 2 || p.experts == p.experts_all, "%s: %d slots", size, p.stage_slots);
        gpu_plan_fini(&p);
        o.budget = named - (uint64_t)(0.01 * 1073741824.0); /* less: not with staging at 4096 */
        if (gpu_plan_compute(&p, f.m, &o, &err) == 0) {
            ck_assert_msg(p.n_batch < 4096 || p.stage_slots == 0, "%llu: %d tokens, %d slots",
                          (unsigned long long)o.budget, p.n_batch, p.stage_slots);
            gpu_plan_fini(&p);
        }
    }
    ck_assert_msg(found, "no budget between the chunk's dense part and 1 GiB more took a smaller chunk for staging");
    fx_close(&f);
}
END_TEST

/* Where the KV cache lives (--ctx long against --gpu-mem): in GPU memory when it fits, in every format; its rows in
 * host RAM (GPU_PLAN_CAP_KV_HOST) when they do not, the GPU keeping one layer's rows for prefill and the why
 * naming the compact formats that would fit; refused with the reason without the capability or when even the
 * staging does not fit; a carried plan (gpu_plan_import) puts the rows where gpu_plan_compute did. */
START_TEST(test_kv_placement)
{
    fx_t f;
    fx_open(&f, 4);
    guild_err_t err = {{0}};
    gpu_plan_t p;
    const int32_t N = 65536;
    gpu_plan_options_t o = {.n_ctx = N, .n_batch = 64, .kv_type = KV_TYPE_F16, .max_expert_layers = GPU_EXPERTS_NONE,
                            .caps = GPU_PLAN_CAP_EXPERTS | GPU_PLAN_CAP_SLICES | GPU_PLAN_CAP_KV_HOST};
    ck_assert(gpu_plan_compute(&p, f.m, &o, &err) == 0);
    const uint64_t kv16 = p.kv, base = OVERHEAD(f.m, o) + p.dense + p.buffers;
    ck_assert_uint_eq(kv16, 2u * 4u * 32u * 2u * (uint64_t)N); /* K and V, 4 layers, 2 heads of 16, f16 */
    ck_assert(!p.kv_host && p.kv_host_bytes == 0 && p.kv_stage == 0); /* no budget: in GPU memory */
    gpu_plan_fini(&p);
    /* room for the f16 cache: in GPU memory in every format, the host placement compared and slower */
    o.budget = base + kv16 + kv16 / 8;
    for (int32_t t = KV_TYPE_F16; t <= KV_TYPE_LAST; t++) {
        o.kv_type = t;
        ck_assert_msg(gpu_plan_compute(&p, f.m, &o, &err) == 0, "%s", err.msg);
        ck_assert_msg(!p.kv_host && p.kv_stage == 0 && gpu_plan_total(&p) <= o.budget, "%s", kv_type_name(t));
        ck_assert_msg(strstr(p.why_kv, "in GPU memory") && strstr(p.why_kv, "from host RAM over PCIe") &&
                      strstr(p.why_kv, kv_type_name(t)), "%s", p.why_kv);
        ck_assert(p.pred_kv_ms > 0);
        gpu_plan_fini(&p);
    }
    /* half the f16 cache's room: f16's and q8_0's rows go to host RAM, k8v4 and q4_0 fit */
    o.budget = base + kv16 / 2;
    o.kv_type = KV_TYPE_F16;
    ck_assert_msg(gpu_plan_compute(&p, f.m, &o, &err) == 0, "%s", err.msg);
    ck_assert(p.kv_host);
    ck_assert_uint_eq(p.kv_host_bytes, kv16);
    ck_assert_uint_eq(p.kv_stage, kv16 / 4);
    ck_assert_uint_eq(p.kv, 0);
    ck_assert(gpu_plan_total(&p) <= o.budget);
    ck_assert_msg(strstr(p.why_kv, "in host RAM") && strstr(p.why_kv, "over the budget") &&
                  strstr(p.why_kv, "--kv-type k8v4") && strstr(p.why_kv, "q4_0") && !strstr(p.why_kv, "q8_0 ("),
                  "%s", p.why_kv);
    /* the carried plan puts the rows in host RAM too */
    gpu_plan_t q;
    ck_assert_msg(gpu_plan_import(&q, f.m, o.budget, N, 1, KV_TYPE_F16, p.n_batch, p.stage_slots, p.stage_slot_experts,
                                  p.expert_resident, &err) == 0, "%s", err.msg);
    /* the same sizes, the driver's share less the experts' page tables (test_overhead) */
    ck_assert(q.kv_host && q.kv_stage == p.kv_stage && q.driver <= p.driver &&
              gpu_plan_total(&q) + p.driver - q.driver == gpu_plan_total(&p));
    gpu_plan_fini(&q);
    gpu_plan_fini(&p);
    o.kv_type = KV_TYPE_Q4_0;
    ck_assert_msg(gpu_plan_compute(&p, f.m, &o, &err) == 0, "%s", err.msg);
    ck_assert(!p.kv_host);
    gpu_plan_fini(&p);
    /* a backend that keeps its cache in GPU memory only: unsupported, with the reason and the formats that fit */
    o.kv_type = KV_TYPE_F16;
    o.caps = GPU_PLAN_CAP_EXPERTS | GPU_PLAN_CAP_SLICES;
    ck_assert_int_eq(gpu_plan_compute(&p, f.m, &o, &err), -1);
    ck_assert_msg(strstr(err.msg, "does not fit") && strstr(err.msg, "GPU memory only") &&
                  strstr(err.msg, "--kv-type k8v4") && strstr(err.msg, "65536 positions"), "%s", err.msg);
    /* not even a layer's staging fits: unsupported, saying what the GPU still needs */
    o.caps |= GPU_PLAN_CAP_KV_HOST;
    o.budget = base + kv16 / 4 - 1;
    ck_assert_int_eq(gpu_plan_compute(&p, f.m, &o, &err), -1);
    ck_assert_msg(strstr(err.msg, "does not fit") && strstr(err.msg, "with its rows in host RAM the GPU still needs"),
                  "%s", err.msg);
    fx_close(&f);
}
END_TEST

/* Without the per-expert capability (or without a profile) the resident set is whole layers in index order;
 * without the slices capability a slot holds a whole layer. */
START_TEST(test_caps)
{
    enum { L = 6, N = 16 };
    fx_t f;
    fx_open_experts(&f, L, N);
    uint64_t counts[L * N];
    hot_profile(counts, L, N);
    guild_err_t err = {{0}};
    gpu_plan_t p;
    gpu_plan_options_t o = {.n_ctx = 64, .n_batch = 8, .kv_type = KV_TYPE_F16, .routing = counts};
    ck_assert(gpu_plan_compute(&p, f.m, &o, &err) == 0);
    const uint64_t fixed = OVERHEAD(f.m, o) + p.dense + p.kv + p.buffers, eb = p.expert_buffers;
    const uint64_t layer = p.layer[0].resident_bytes;
    gpu_plan_fini(&p);
    o.budget = fixed + eb + 3 * layer + layer / 2;
    ck_assert(gpu_plan_compute(&p, f.m, &o, &err) == 0);
    ck_assert_int_eq(p.stage_slot_experts, N);
    ck_assert_int_eq(p.n_resident, 1);
    ck_assert(p.resident[0] && p.n_resident_experts == N);
    ck_assert_msg(strstr(p.why_resident, "whole layers"), "%s", p.why_resident);
    gpu_plan_fini(&p);
    /* the same budget with both capabilities: 24 hottest experts (slots of a layer each), then slices */
    o.caps = GPU_PLAN_CAP_EXPERTS | GPU_PLAN_CAP_SLICES;
    ck_assert(gpu_plan_compute(&p, f.m, &o, &err) == 0);
    ck_assert(p.n_resident_experts >= N);
    for (int il = 0; il < L; il++)
        ck_assert(gpu_plan_expert_resident(&p, il, 3) && gpu_plan_expert_resident(&p, il, 7));
    ck_assert_msg(strstr(p.why_resident, "hottest"), "%s", p.why_resident);
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    gpu_plan_print(&p, out);
    fclose(out);
    ck_assert_msg(strstr(buf, "hit rate") && strstr(buf, "streamed:") && strstr(buf, "staging:"), "%s", buf);
    free(buf);
    gpu_plan_fini(&p);
    /* --gpu-experts 1 with experts one by one: one layer's worth of the hottest */
    o.max_expert_layers = 1;
    ck_assert(gpu_plan_compute(&p, f.m, &o, &err) == 0);
    ck_assert_int_le(p.n_resident_experts, N);
    gpu_plan_fini(&p);
    fx_close(&f);
}
END_TEST

/* A plan carried to another process (its decisions) gives the same sizes and modes; decisions that do not fit
 * the model are refused. */
START_TEST(test_import)
{
    enum { L = 6, N = 16 };
    fx_t f;
    fx_open_experts(&f, L, N);
    uint64_t counts[L * N];
    hot_profile(counts, L, N);
    guild_err_t err = {{0}};
    gpu_plan_t p, q;
    gpu_plan_options_t o = {.n_ctx = 64, .n_batch = GPU_PLAN_BATCH_AUTO, .n_batch_min = 1, .kv_type = KV_TYPE_F16,
                            .caps = GPU_PLAN_CAP_EXPERTS | GPU_PLAN_CAP_SLICES, .routing = counts};
    ck_assert(gpu_plan_compute(&p, f.m, &o, &err) == 0);
    o.budget = OVERHEAD(f.m, o) + p.dense + p.kv + p.buffers + p.expert_buffers + p.experts / 3;
    gpu_plan_fini(&p);
    ck_assert_msg(gpu_plan_compute(&p, f.m, &o, &err) == 0, "%s", err.msg);
    ck_assert(p.stage_slots >= 2 && p.n_resident_experts > 0 && p.n_resident_experts < L * N);
    ck_assert_msg(gpu_plan_import(&q, f.m, o.budget, 64, 1, 2, p.n_batch, p.stage_slots, p.stage_slot_experts,
                                  p.expert_resident, &err) == 0, "%s", err.msg);
    /* the driver's share less the experts' page tables (test_overhead) */
    ck_assert_uint_le(q.driver, p.driver);
    ck_assert_uint_eq(gpu_plan_total(&q) + p.driver - q.driver, gpu_plan_total(&p));
    ck_assert_int_eq(q.n_resident_experts, p.n_resident_experts);
    for (int il = 0; il < L; il++)
        ck_assert_int_eq(q.layer[il].mode, p.layer[il].mode);
    gpu_plan_fini(&q);
    ck_assert(gpu_plan_copy(&q, &p, &err) == 0);
    ck_assert(!memcmp(q.expert_resident, p.expert_resident, L * N) && q.expert_resident != p.expert_resident);
    gpu_plan_fini(&q);
    ck_assert_int_eq(gpu_plan_import(&q, f.m, o.budget / 2, 64, 1, 2, p.n_batch, p.stage_slots,
                                     p.stage_slot_experts,
                                     p.expert_resident, &err), -1);
    ck_assert_msg(strstr(err.msg, "over the budget"), "%s", err.msg);
    ck_assert_int_eq(gpu_plan_import(&q, f.m, 0, 64, 1, 2, p.n_batch, 1, 4, p.expert_resident, &err), -1);
    ck_assert_int_eq(gpu_plan_import(&q, f.m, 0, 64, 1, 2, p.n_batch, 2, N + 1, p.expert_resident, &err), -1);
    ck_assert_int_eq(gpu_plan_import(&q, f.m, 0, 64, 1, 2, 0, 2, 4, p.expert_resident, &err), -1);
    gpu_plan_fini(&p);
    fx_close(&f);
}
END_TEST

/* The ring model of the staging slots: copies run ahead only into released slots; the dense part between two
 * layers releases none. */
START_TEST(test_ring)
{
    /* dense 10, 4 chunks of copy 2 and products 1: two slots fill during the dense part, then the copies wait for
     * releases and the products for the copies (period 16: 6 beyond the dense part); with four slots or more
     * the copies run ahead through the dense part and only the products remain */
    ck_assert_double_eq_tol(gpu_plan_ring_ns(10, 4, 2, 1, 0, 2), 6, 1e-9);
    ck_assert_double_eq_tol(gpu_plan_ring_ns(10, 4, 2, 1, 0, 4), 4, 1e-9);
    ck_assert_double_eq_tol(gpu_plan_ring_ns(10, 4, 2, 1, 0, 16), 4, 1e-9);
    /* copy-bound: the copy engine busy all the time, the dense part hidden under it */
    ck_assert_double_eq_tol(gpu_plan_ring_ns(1, 4, 5, 1, 0, 8), 19, 1e-9);
    /* more slots never cost, the products and the copies less the dense part bound it below */
    for (int m = 1; m <= 16; m++)
        for (int sl = 2; sl < 16; sl++) {
            const double a = gpu_plan_ring_ns(7, m, 1.5, 0.75, 0.5, sl);
            const double b = gpu_plan_ring_ns(7, m, 1.5, 0.75, 0.5, sl + 1);
            ck_assert_msg(b <= a + 1e-9, "m %d: %d slots %g, %d slots %g", m, sl, a, sl + 1, b);
            ck_assert(a >= m * 0.75 - 1e-9 && a >= m * 1.5 - 7 - 1e-9);
        }
    /* a refill (2) longer than the products of the one chunk in between (1.5): two slots expose it, three
     * cover it with two chunks' products and only the products remain */
    ck_assert_double_eq_tol(gpu_plan_ring_ns(0.5, 8, 1, 1.5, 2, 2), 17.5, 1e-9);
    ck_assert_double_eq_tol(gpu_plan_ring_ns(0.5, 8, 1, 1.5, 2, 3), 8 * 1.5, 1e-9);
    ck_assert_double_eq(gpu_plan_ring_ns(3, 0, 1, 1, 0, 2), 0);
}
END_TEST

START_TEST(test_parse_size)
{
    guild_err_t err = {{0}};
    uint64_t v;
    ck_assert(gpu_plan_parse_size("8G", "--gpu-mem", &v, &err) == 0 && v == (uint64_t)8 << 30);
    ck_assert(gpu_plan_parse_size("512M", "--gpu-mem", &v, &err) == 0 && v == (uint64_t)512 << 20);
    ck_assert(gpu_plan_parse_size("1.5GiB", "--gpu-mem", &v, &err) == 0 && v == (uint64_t)3 << 29);
    ck_assert(gpu_plan_parse_size("24GB", "--gpu-mem", &v, &err) == 0 && v == (uint64_t)24 << 30);
    ck_assert(gpu_plan_parse_size("1T", "--gpu-mem", &v, &err) == 0 && v == (uint64_t)1 << 40);
    ck_assert(gpu_plan_parse_size("4096", "--gpu-mem", &v, &err) == 0 && v == 4096);
    const char *bad[] = {"", "G", "8X", "-1", "0", "8GG", "nan", "1e30T"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(gpu_plan_parse_size(bad[i], "--gpu-mem", &v, &err) == -1, "accepted '%s'", bad[i]);
        ck_assert_msg(strstr(err.msg, "--gpu-mem"), "%s", err.msg);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gpu_plan");
    TCase *tc = tcase_create("plan");
    tcase_add_test(tc, test_no_budget_all_resident);
    tcase_add_test(tc, test_budget);
    tcase_add_test(tc, test_overhead);
    tcase_add_test(tc, test_hybrid_cache);
    tcase_add_test(tc, test_mla_buffers);
    tcase_add_test(tc, test_bias_buffers);
    tcase_add_test(tc, test_mtp);
    tcase_add_test(tc, test_rollback);
    tcase_add_test(tc, test_types_the_device_takes);
    tcase_add_test(tc, test_budget_sweep);
    tcase_add_test(tc, test_chunk_shrinks);
    tcase_add_test(tc, test_chunk_names_its_budget);
    tcase_add_test(tc, test_kv_placement);
    tcase_add_test(tc, test_caps);
    tcase_add_test(tc, test_import);
    tcase_add_test(tc, test_ring);
    tcase_add_test(tc, test_parse_size);
    suite_add_tcase(s, tc);
    return check_run(s);
}
