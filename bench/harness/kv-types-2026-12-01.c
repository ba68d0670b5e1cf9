/* The KV cache formats' accuracy against the f16 cache on one model, on the CPU backend (the reference; the CUDA
 * backend is compared with it per format by tests/cuda/check_cuda_backend.c): bench/results/kv-types-2026-12-01.md.
 *
 * The f16 run: a fixed prompt of P token ids in one batch, then G greedy tokens one at a time (its logits at every
 * step and its tokens kept). Each other format:
 *   teacher-forced: the same prompt and f16's tokens; max and mean |dlogit| against f16 over every logit of the
 *     G + 1 rows that predict a token, and the rows whose argmax is f16's;
 *   free-running: its own greedy G tokens from the prompt; how many equal f16's at the same position, and the
 *     first position where they part (G: never).
 * and the bytes a cached position takes (kv_type_position_bytes).
 * Build (against the tree it ships with; after make in build/):
 *   gcc -O2 -std=gnu11 -I. -Ibuild bench/harness/kv-types-2026-12-01.c build/gpu-worker/dense/libguild-dense.a \
 *     build/gpu-worker/dense/cuda/libguild-cuda.a build/ipc/libguild-ipc.a \
 *     build/cpu-expert-worker/experts/libguild-experts.a build/core/libguild-core.a \
 *     -L/usr/local/cuda/lib64 -lcudart -lzmq -lprotobuf-c -lnuma -lm -lpthread -o /tmp/kvtypes
 *   (the libraries as `make V=1 tests/check_kv_format` links them)
 * usage: kvtypes MODEL.gguf PROMPT GEN THREADS */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu-expert-worker/experts/moe_local.h"
#include "gpu-worker/dense/backend.h"
#include "gpu-worker/dense/kv_format.h"

static int32_t argmax(const float *l, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (l[i] > l[best])
            best = i;
    return best;
}

static void die(const char *what, const guild_err_t *err)
{
    fprintf(stderr, "%s: %s\n", what, err->msg);
    exit(1);
}

/* The prompt in one batch, then the tokens `forced` (NULL: its own greedy ones) one at a time: the logits of
 * the G + 1 rows that predict a token into out[(G + 1)][V], the tokens taken into toks[G]. */
static void run(const model_t *m, guild_pool_t *pool, moe_exec_t *moe, int32_t fmt, const int32_t *prompt,
                int32_t P, int32_t G, const int32_t *forced, float *out, int32_t *toks)
{
    guild_err_t err = {{0}};
    const int32_t V = model_config(m)->n_vocab;
    const backend_options_t o = {.n_ctx = P + G + 1, .n_batch = P, .pool = pool, .moe = moe, .kv_type = fmt};
    backend_t *be = NULL;
    if (backend_new(&be, "cpu", m, &o, NULL, &err) < 0)
        die(kv_type_name(fmt), &err);
    int32_t *pos = malloc((size_t)P * sizeof *pos);
    for (int32_t i = 0; i < P; i++)
        pos[i] = i;
    const int32_t last = P - 1;
    if (backend_forward(be, P, prompt, pos, 1, &last, out, &err) < 0)
        die("prompt", &err);
    for (int32_t g = 0; g < G; g++) {
        const int32_t t = forced ? forced[g] : argmax(out + (size_t)g * (size_t)V, V), p = P + g, row = 0;
        toks[g] = t;
        if (backend_forward(be, 1, &t, &p, 1, &row, out + (size_t)(g + 1) * (size_t)V, &err) < 0)
            die("step", &err);
    }
    free(pos);
    backend_destroy(&be);
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: %s MODEL.gguf PROMPT GEN THREADS\n", argv[0]);
        return 2;
    }
    const int32_t P = atoi(argv[2]), G = atoi(argv[3]);
    guild_err_t err = {{0}};
    model_t *m = NULL;
    guild_pool_t *pool = NULL;
    moe_exec_t *moe = NULL;
    if (model_new(&m, argv[1], &err) < 0 || guild_pool_new(&pool, atoi(argv[4]), NULL, &err) < 0 ||
        moe_local_new(&moe, m, pool, &err) < 0)
        die(argv[1], &err);
    const model_config_t *c = model_config(m);
    const int32_t V = c->n_vocab;
    int32_t *prompt = malloc((size_t)P * sizeof *prompt);
    for (int32_t i = 0; i < P; i++)
        prompt[i] = (int32_t)(((uint64_t)i * 2654435761u + 17) % (uint64_t)V);
    const size_t rows = (size_t)G + 1;
    float *ref = malloc(rows * (size_t)V * sizeof *ref), *got = malloc(rows * (size_t)V * sizeof *got);
    int32_t *ref_toks = malloc((size_t)G * sizeof *ref_toks), *toks = malloc((size_t)G * sizeof *toks);
    run(m, pool, moe, KV_TYPE_F16, prompt, P, G, NULL, ref, ref_toks);
    double ref_abs = 0;
    for (size_t i = 0; i < rows * (size_t)V; i++)
        ref_abs += fabs(ref[i]);
    printf("model %s: %s, %d layers, %d/%d heads of %d, vocab %d; prompt %d, %d generated; mean |logit| of f16 %.4g\n",
           argv[1], model_arch_info(c->arch)->name, c->n_layer, c->n_head, c->n_head_kv, c->head_dim, V, P, G,
           ref_abs / (double)(rows * (size_t)V));
    printf("| format | bytes/position | vs f16 | max abs dlogit | mean abs dlogit | teacher-forced argmax = f16 | "
           "free-running greedy = f16 | first differing token |\n|---|---|---|---|---|---|---|---|\n");
    printf("| f16 | %llu | 1.00x | 0 | 0 | %d/%d | %d/%d | none |\n",
           (unsigned long long)kv_type_position_bytes(KV_TYPE_F16, c), G + 1, G + 1, G, G);
    static const int32_t fmts[] = {KV_TYPE_F32, KV_TYPE_Q8_0, KV_TYPE_Q4_0, KV_TYPE_K8V4};
    for (size_t f = 0; f < sizeof fmts / sizeof fmts[0]; f++) {
        const int32_t fmt = fmts[f];
        run(m, pool, moe, fmt, prompt, P, G, ref_toks, got, toks);
        double max = 0, sum = 0;
        int agree = 0;
        for (size_t r = 0; r < rows; r++) {
            for (int32_t i = 0; i < V; i++) {
                const double d = fabs((double)got[r * (size_t)V + (size_t)i] - ref[r * (size_t)V + (size_t)i]);
                max = d > max ? d : max;
                sum += d;
            }
            agree += argmax(got + r * (size_t)V, V) == argmax(ref + r * (size_t)V, V);
        }
        run(m, pool, moe, fmt, prompt, P, G, NULL, got, toks);
        int same = 0, first = G;
        for (int32_t g = 0; g < G; g++) {
            same += toks[g] == ref_toks[g];
            if (toks[g] != ref_toks[g] && first == G)
                first = g;
        }
        const uint64_t bytes = kv_type_position_bytes(fmt, c), b16 = kv_type_position_bytes(KV_TYPE_F16, c);
        char at[32];
        if (first == G)
            snprintf(at, sizeof at, "none");
        else
            snprintf(at, sizeof at, "%d", first);
        printf("| %s | %llu | %.2fx | %.4g | %.4g | %d/%d | %d/%d | %s |\n", kv_type_name(fmt),
               (unsigned long long)bytes, (double)bytes / (double)b16, max, sum / (double)(rows * (size_t)V), agree,
               (int)rows, same, G, at);
        fflush(stdout);
    }
    free(prompt);
    free(ref);
    free(got);
    free(ref_toks);
    free(toks);
    moe_exec_destroy(&moe);
    guild_pool_destroy(&pool);
    model_destroy(&m);
    return 0;
}
