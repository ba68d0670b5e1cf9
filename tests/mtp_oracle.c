/* tests/mtp_oracle.c — see mtp_oracle.h. */
#include "tests/mtp_oracle.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "core/gguf/gguf.h"
#include "core/quant/types.h"

/* Overwrites F32 tensor t of the file at path with its elements from src (NULL: zeros). */
static int poke(const char *path, const gguf_tensor_t *t, const float *src, guild_err_t *err)
{
    float *buf = calloc((size_t)t->size, 1);
    if (!buf)
        return guild_err_set(err, "%s: out of memory", path);
    if (src)
        memcpy(buf, src, (size_t)t->size);
    FILE *f = fopen(path, "r+b");
    int rc = f && fseeko(f, (off_t)t->offset, SEEK_SET) == 0 && fwrite(buf, 1, (size_t)t->size, f) == t->size ? 0 : -1;
    if (f && fclose(f) != 0)
        rc = -1;
    free(buf);
    return rc < 0 ? guild_err_set(err, "%s: cannot write tensor %s", path, t->name) : 0;
}

/* F32 tensor `name` of g, or NULL with err (required) or without (optional). */
static const gguf_tensor_t *find(const gguf_t *g, const char *name, bool required, guild_err_t *err)
{
    const gguf_tensor_t *t = gguf_find_tensor(g, name);
    if (t && t->type != GUILD_TYPE_F32) {
        guild_err_set(err, "%s: tensor %s is not F32", gguf_path(g), name);
        return NULL;
    }
    if (!t && required)
        guild_err_set(err, "%s: no tensor %s", gguf_path(g), name);
    return t;
}

int mtp_oracle_make(const char *path, int wrong, guild_err_t *err)
{
    gguf_t *g = NULL;
    if (gguf_new(&g, path, err) < 0)
        return -1;
    char name[96];
    int rc = -1, mtp = -1;
    float *eye = NULL, *head = NULL, *ones = NULL;
    for (int il = 0; il < 4096 && mtp < 0; il++) {
        snprintf(name, sizeof name, "blk.%d.nextn.eh_proj.weight", il);
        mtp = gguf_find_tensor(g, name) ? il : -1;
        snprintf(name, sizeof name, "blk.%d.attn_norm.weight", il);
        if (mtp < 0 && !gguf_find_tensor(g, name))
            break;
    }
    const gguf_tensor_t *embd = find(g, "token_embd.weight", true, err);
    const gguf_tensor_t *out = find(g, "output.weight", true, err);
    const gguf_tensor_t *norm = find(g, "output_norm.weight", true, err);
    if (mtp < 0) {
        guild_err_set(err, "%s: no multi-token-prediction layer (blk.N.nextn.eh_proj.weight)", path);
        goto done;
    }
    if (!embd || !out || !norm)
        goto done;
    const size_t E = (size_t)embd->ne[0];
    if (wrong < 0 || (uint64_t)wrong >= out->ne[1]) {
        guild_err_set(err, "%s: token %d is not in the vocabulary of %llu", path, wrong,
                      (unsigned long long)out->ne[1]);
        goto done;
    }
    const char *zero[] = {"attn_output.weight", "ffn_down_exps.weight", "ffn_down_shexp.weight", "ffn_down.weight"};
    for (int il = 0; il <= mtp; il++)
        for (size_t z = 0; z < sizeof zero / sizeof zero[0]; z++) {
            snprintf(name, sizeof name, "blk.%d.%s", il, zero[z]);
            const gguf_tensor_t *t = gguf_find_tensor(g, name);
            if (t && (t->type != GUILD_TYPE_F32 || poke(path, t, NULL, err) < 0))
                goto done;
        }
    if (!(eye = calloc(2 * E * E, sizeof *eye)) || !(ones = malloc(E * sizeof *ones)) ||
        !(head = malloc((size_t)out->size))) {
        guild_err_set(err, "%s: out of memory", path);
        goto done;
    }
    for (size_t r = 0; r < E; r++) {
        eye[r * 2 * E + r] = 1; /* row r of [2E, E]: x[r] = the normed embedding's element r */
        ones[r] = 1;
    }
    memcpy(head, out->data, (size_t)out->size);
    memset(head + (size_t)wrong * E, 0, E * sizeof *head);
    const struct {
        const char *suffix;
        const float *src;
        bool required;
    } own[] = {{"eh_proj", eye, true}, {"enorm", ones, true}, {"embed_tokens", embd->data, false},
               {"shared_head_head", head, true}, {"shared_head_norm", norm->data, true}};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) {
        snprintf(name, sizeof name, "blk.%d.nextn.%s.weight", mtp, own[i].suffix);
        const gguf_tensor_t *t = find(g, name, own[i].required, err);
        if (!t && own[i].required)
            goto done;
        if (t && poke(path, t, own[i].src, err) < 0)
            goto done;
    }
    rc = 0;
done:
    free(eye);
    free(ones);
    free(head);
    gguf_destroy(&g);
    return rc;
}
