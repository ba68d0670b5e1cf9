/* tests/ref/backend_logits.c — runs Guild's CPU backend (gpu-worker/dense/backend.h, in-process experts) on a token
 * sequence and writes the logits the reference comparison needs (tests/ref/check_backend.py, check_mtp.py).
 *
 *   backend_logits [--mtp T,D1,D2...] MODEL.gguf OUT.f32 N_PROMPT[:CHUNK] ID0 ID1 ...
 *
 * The first N_PROMPT ids are the prompt, run as one prefill batch (or in batches of CHUNK, the last one
 * shorter: a chunk boundary inside the prompt); the rest are fed one at a time (teacher
 * forcing). OUT gets one row of n_vocab float32 logits for the prompt's last position, then one per fed id.
 * With --mtp (a model with a multi-token-prediction layer; at least one id after the prompt): the layer's steps
 * (backend_mtp_step) twice, after the prompt (step 0 with the id that follows it, then D1, D2, ...) and after the
 * last id (step 0 with T, then D1, D2, ...); their rows follow the others in OUT.
 * Exit status 0 on success, 1 with a message on stderr otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/model.h"
#include "core/util/pool.h"
#include "cpu-expert-worker/experts/moe_local.h"
#include "gpu-worker/dense/backend.h"

/* The MTP steps of one draft point: tokens[0..n), one row each into rows. */
static int mtp_rows(backend_t *b, const int32_t *tokens, int n, float *rows, int64_t n_vocab, guild_err_t *err)
{
    for (int j = 0; j < n; j++)
        if (backend_mtp_step(b, j, tokens[j], rows + (int64_t)j * n_vocab, err) < 0)
            return -1;
    return 0;
}

int main(int argc, char **argv)
{
    int32_t mtp[64];
    int n_mtp = 0;
    if (argc > 2 && !strcmp(argv[1], "--mtp")) {
        for (char *s = argv[2], *end; *s && n_mtp < 64; s = *end ? end + 1 : end) {
            mtp[n_mtp++] = (int32_t)strtol(s, &end, 10);
            if (end == s)
                break;
        }
        argc -= 2;
        argv += 2;
    }
    if (argc < 5) {
        fprintf(stderr, "usage: backend_logits MODEL.gguf OUT.f32 N_PROMPT ID0 ID1 ...\n");
        return 1;
    }
    const int n_ids = argc - 4, n_prompt = atoi(argv[3]);
    const char *colon = strchr(argv[3], ':');
    const int chunk = colon ? atoi(colon + 1) : n_prompt;
    if (chunk < 1) {
        fprintf(stderr, "backend_logits: bad chunk in %s\n", argv[3]);
        return 1;
    }
    if (n_prompt < 1 || n_prompt > n_ids || (n_mtp && n_prompt == n_ids)) {
        fprintf(stderr, "backend_logits: N_PROMPT %d is not in 1..%d\n", n_prompt, n_ids);
        return 1;
    }
    guild_err_t err = {{0}};
    model_t *m = NULL;
    guild_pool_t *pool = NULL;
    moe_exec_t *moe = NULL;
    backend_t *b = NULL;
    int32_t *ids = calloc((size_t)n_ids, sizeof *ids), *pos = calloc((size_t)n_ids, sizeof *pos);
    float *logits = NULL, *mrows = NULL;
    FILE *out = NULL;
    int rc = 1;
    if (!ids || !pos)
        goto fail;
    for (int i = 0; i < n_ids; i++) {
        ids[i] = atoi(argv[4 + i]);
        pos[i] = i;
    }
    if (model_new(&m, argv[1], &err) || guild_pool_new(&pool, 1, NULL, &err) || moe_local_new(&moe, m, pool, &err))
        goto fail;
    backend_options_t opt = {.n_ctx = n_ids + 1 + n_mtp, .n_batch = chunk < n_prompt ? chunk : n_prompt,
                             .pool = pool, .moe = moe, .mtp = n_mtp > 0};
    if (backend_new(&b, "cpu", m, &opt, NULL, &err))
        goto fail;
    const int64_t n_vocab = model_config(m)->n_vocab;
    logits = malloc((size_t)n_vocab * sizeof *logits);
    mrows = malloc((size_t)(2 * n_mtp + 1) * (size_t)n_vocab * sizeof *mrows);
    out = fopen(argv[2], "wb");
    if (!logits || !mrows || !out) {
        guild_err_set(&err, "%s: cannot open for writing", argv[2]);
        goto fail;
    }
    int32_t zero = 0;
    for (int s = 0; s < n_prompt; s += opt.n_batch) {
        const int m = n_prompt - s < opt.n_batch ? n_prompt - s : opt.n_batch;
        int32_t last = m - 1;
        if (backend_forward(b, m, ids + s, pos + s, s + m == n_prompt, &last, logits, &err))
            goto fail;
    }
    if (n_mtp) { /* after the prompt: the id that follows it, then the drafts */
        int32_t t[64];
        memcpy(t, mtp, (size_t)n_mtp * sizeof *t);
        t[0] = ids[n_prompt];
        if (mtp_rows(b, t, n_mtp, mrows, n_vocab, &err) < 0)
            goto fail;
    }
    for (int i = n_prompt;; i++) {
        if (fwrite(logits, sizeof *logits, (size_t)n_vocab, out) != (size_t)n_vocab) {
            guild_err_set(&err, "%s: write failed", argv[2]);
            goto fail;
        }
        if (i == n_ids)
            break;
        if (backend_forward(b, 1, &ids[i], &pos[i], 1, &zero, logits, &err))
            goto fail;
    }
    if (n_mtp) {
        if (mtp_rows(b, mtp, n_mtp, mrows + (int64_t)n_mtp * n_vocab, n_vocab, &err) < 0)
            goto fail;
        const size_t all = (size_t)(2 * n_mtp) * (size_t)n_vocab;
        if (fwrite(mrows, sizeof *mrows, all, out) != all) {
            guild_err_set(&err, "%s: write failed", argv[2]);
            goto fail;
        }
    }
    rc = 0;
fail:
    if (rc)
        fprintf(stderr, "backend_logits: %s\n", err.msg);
    if (out && fclose(out) && !rc) {
        fprintf(stderr, "backend_logits: %s: close failed\n", argv[2]);
        rc = 1;
    }
    free(logits);
    free(mrows);
    backend_destroy(&b);
    moe_exec_destroy(&moe);
    guild_pool_destroy(&pool);
    model_destroy(&m);
    free(ids);
    free(pos);
    return rc;
}
