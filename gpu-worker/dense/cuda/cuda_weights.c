/* Upload of the dense weights: every tensor the layer program reads (not the routed experts) into one device
 * allocation, each at a 256-byte offset. A tensor shared by two roles (the LM head tied to the embeddings) is
 * uploaded once. */
#include <stdlib.h>
#include <string.h>

#include "core/quant/quant.h"
#include "core/util/log.h"
#include "core/util/progress.h"
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "gpu-worker/dense/cuda/cuda_state.h"
#include "gpu-worker/dense/cuda/cuda_util.h"

#define WEIGHT_ALIGN 256

/* A host tensor and where its device copy goes. */
typedef struct upload {
    const model_tensor_t *src;
    cuda_tensor_t *dst;
    size_t offset;
    size_t bytes;
} upload_t;

typedef struct plan {
    upload_t *u;
    int n, cap;
    size_t total;
} plan_t;

static size_t tensor_bytes(const model_tensor_t *t)
{
    return t->mat_bytes * (size_t)(t->ne[2] ? t->ne[2] : 1);
}

/* Adds t (when present) to the plan; `matrix` tensors must be of a type the kernels handle. */
static int plan_add(plan_t *p, const model_tensor_t *t, cuda_tensor_t *dst, bool matrix, guild_err_t *err)
{
    memset(dst, 0, sizeof *dst);
    if (!t->data)
        return 0;
    if (matrix && !cuda_type_supported(t->type))
        return guild_err_set(err, "cuda backend: tensor %s: type %s is not supported by the CUDA kernels "
                             "(supported: %s)", t->name, quant_type_info(t->type)->name, cuda_supported_types());
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 64;
        upload_t *u = realloc(p->u, (size_t)cap * sizeof *u);
        if (!u)
            return guild_err_set(err, "cuda backend: out of memory");
        p->u = u;
        p->cap = cap;
    }
    dst->type = t->type;
    dst->n_in = t->ne[0];
    dst->n_rows = t->ne[1];
    dst->row_bytes = t->row_bytes;
    /* the same host bytes already planned (tied output): share the copy */
    for (int i = 0; i < p->n; i++)
        if (p->u[i].src->data == t->data) {
            p->u[p->n++] = (upload_t){t, dst, p->u[i].offset, 0};
            return 0;
        }
    const size_t bytes = tensor_bytes(t);
    p->u[p->n++] = (upload_t){t, dst, p->total, bytes};
    p->total += (bytes + WEIGHT_ALIGN - 1) / WEIGHT_ALIGN * WEIGHT_ALIGN;
    return 0;
}

int cuda_weights_upload(cuda_backend_t *b, guild_err_t *err)
{
    const model_weights_t *w = b->w;
    plan_t p = {0};
    guild_progress_t *pg = NULL; /* a line on the terminal (core/util/progress.h) */
    int rc = -1;
    const int32_t n_block = cuda_n_block(b);
    b->layers = calloc((size_t)n_block, sizeof *b->layers);
    if (!b->layers)
        return guild_err_set(err, "cuda backend: out of memory");
    if (plan_add(&p, &w->token_embd, &b->token_embd, true, err) < 0 ||
        plan_add(&p, &w->output_norm, &b->output_norm, false, err) < 0 ||
        plan_add(&p, &w->output, &b->output, true, err) < 0)
        goto out;
    if (b->mtp) {
        const model_mtp_layer_t *M = &w->mtp[0];
        cuda_mtp_tensors_t *D = &b->mtp_w;
        if (plan_add(&p, &M->eh_proj, &D->eh_proj, true, err) < 0 ||
            plan_add(&p, &M->enorm, &D->enorm, false, err) < 0 || plan_add(&p, &M->hnorm, &D->hnorm, false, err) < 0 ||
            plan_add(&p, &M->embed_tokens, &D->embed, true, err) < 0 ||
            plan_add(&p, &M->head, &D->head, true, err) < 0 ||
            plan_add(&p, &M->head_norm, &D->head_norm, false, err) < 0)
            goto out;
    }
    for (int32_t il = 0; il < n_block; il++) {
        const model_layer_t *L = model_block(w, il);
        cuda_layer_t *D = &b->layers[il];
#define UPLOAD(name, kind)                                                                                       \
    if (plan_add(&p, &L->name, &D->name, (kind) == MODEL_TENSOR_MATRIX, err) < 0)                                \
        goto out;
        MODEL_LAYER_DENSE_TENSORS(UPLOAD)
#undef UPLOAD
    }
    if (cuda_alloc(&b->weight_mem, p.total, &b->bytes_weights, "the dense weights", err) < 0)
        goto out;
    pg = guild_progress_begin("uploading the dense weights to the GPU", p.total, GUILD_PROGRESS_BYTES);
    for (int i = 0; i < p.n; i++) {
        char *d = (char *)b->weight_mem + p.u[i].offset;
        p.u[i].dst->d = d;
        if (p.u[i].bytes &&
            cuda_check(cudaMemcpy(d, p.u[i].src->data, p.u[i].bytes, cudaMemcpyHostToDevice), p.u[i].src->name,
                       err) < 0)
            goto out;
        guild_progress_add(pg, p.u[i].bytes);
    }
    if (b->mtp) { /* the MTP layer's embedding, head and head norm default to the model's */
        cuda_mtp_tensors_t *D = &b->mtp_w;
        if (!D->embed.d)
            D->embed = b->token_embd;
        if (!D->head.d)
            D->head = b->output;
        if (!D->head_norm.d)
            D->head_norm = b->output_norm;
    }
    rc = 0;
out:
    guild_progress_end(&pg);
    free(p.u);
    return rc;
}
