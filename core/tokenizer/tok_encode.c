/* core/tokenizer/tok_encode.c — text -> ids: added tokens first, then the model on each raw fragment. */
#include "core/tokenizer/tok_internal.h"

#include <stdlib.h>

static void scratch_fini(tok_scratch_t *s)
{
    free(s->buf);
    free(s->word);
    free(s->sym);
    tok_merge_queue_fini(&s->queue);
    tok_spans_fini(&s->spans);
    tok_spans_fini(&s->spans_tmp);
}

int tok_encode(const tok_t *t, const char *text, size_t len, unsigned flags, tok_ids_t *out, guild_err_t *err)
{
    size_t n0 = out->n;
    bool add_special = flags & TOK_ADD_SPECIAL;
    /* Symbols keep 32-bit offsets, and SPM's escaping triples spaces. */
    if (len > (size_t)UINT32_MAX / 4)
        return guild_err_set(err, "%s: encode: %zu bytes of text, more than the 1 GiB encoded at once", t->name, len);
    tok_frags_t frags = {0};
    tok_scratch_t s = {0};
    int rc = 0;
    if (tok_special_partition(t, text, len, flags & TOK_PARSE_SPECIAL, &frags, err) < 0)
        goto fail;
    if (add_special && t->add_bos && tok_ids_push(out, t->bos) < 0)
        goto oom;
    for (size_t i = 0; i < frags.n; i++) {
        const tok_frag_t *f = &frags.v[i];
        if (f->id >= 0) {
            if (tok_ids_push(out, f->id) < 0)
                goto oom;
            continue;
        }
        /* SPM prefixes a space to every raw fragment: each one is first or follows an added token. */
        rc = t->model == TOK_MODEL_BPE ? tok_bpe_encode(t, text + f->off, f->len, &s, out, err)
                                       : tok_spm_encode(t, text + f->off, f->len, &s, out, err);
        if (rc < 0)
            goto fail;
    }
    if (add_special && t->add_eos && tok_ids_push(out, t->eos) < 0)
        goto oom;
    tok_frags_fini(&frags);
    scratch_fini(&s);
    return 0;
oom:
    guild_err_set(err, "%s: encode: out of memory", t->name);
fail:
    out->n = n0;
    tok_frags_fini(&frags);
    scratch_fini(&s);
    return -1;
}
