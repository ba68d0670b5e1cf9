/* tests/gguf_edit.c — copies a GGUF file with one deliberate defect, for the bad-input tests of `guild run`.
 *
 *   gguf_edit IN.gguf OUT.gguf --drop-tensor NAME     leave tensor NAME out
 *   gguf_edit IN.gguf OUT.gguf --set-arch NAME        general.architecture = NAME (the ARCH.* keys are kept)
 *   gguf_edit IN.gguf OUT.gguf --drop-key KEY         leave metadata key KEY out
 *   gguf_edit IN.gguf OUT.gguf --set-nan NAME[:I]     element I (default 0) of F32 tensor NAME = NaN
 *   gguf_edit IN.gguf OUT.gguf --set-inf NAME[:I]     the same with +infinity
 * Exit status 0, or 1 with a message. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gguf/gguf.h"
#include "core/gguf/gguf_writer.h"
#include "core/quant/types.h"

int main(int argc, char **argv)
{
    if (argc != 5 || (strcmp(argv[3], "--drop-tensor") && strcmp(argv[3], "--set-arch") &&
                      strcmp(argv[3], "--drop-key") && strcmp(argv[3], "--set-nan") && strcmp(argv[3], "--set-inf"))) {
        fprintf(stderr, "usage: gguf_edit IN OUT --drop-tensor NAME | --set-arch NAME | --drop-key KEY | "
                        "--set-nan NAME[:I] | --set-inf NAME[:I]\n");
        return 1;
    }
    const char *what = argv[3], *arg = argv[4];
    /* --set-nan / --set-inf: the tensor's name and the element */
    const bool poke = !strcmp(what, "--set-nan") || !strcmp(what, "--set-inf");
    char poke_name[256] = "";
    uint64_t poke_at = 0;
    if (poke) {
        snprintf(poke_name, sizeof poke_name, "%s", arg);
        char *colon = strrchr(poke_name, ':');
        if (colon) {
            *colon = '\0';
            poke_at = strtoull(colon + 1, NULL, 10);
        }
    }
    bool poked = false;
    guild_err_t err = {{0}};
    gguf_t *g = NULL;
    gguf_writer_t *w = NULL;
    int rc = 1;
    if (gguf_new(&g, argv[1], &err) < 0 || gguf_writer_new(&w, &err) < 0)
        goto done;
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        const char *key = gguf_kv_key(g, i);
        if (!strcmp(what, "--drop-key") && !strcmp(key, arg))
            continue;
        if (!strcmp(what, "--set-arch") && !strcmp(key, "general.architecture"))
            gguf_writer_set_str(w, key, arg);
        else
            gguf_writer_set_copy(w, key, gguf_kv_value(g, i));
    }
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor_t *t = gguf_tensor(g, i);
        if (!strcmp(what, "--drop-tensor") && !strcmp(t->name, arg))
            continue;
        if (gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, &err) < 0)
            goto done;
    }
    if (gguf_writer_begin(w, argv[2], &err) < 0)
        goto done;
    for (int64_t i = 0, k = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor_t *t = gguf_tensor(g, i);
        if (!strcmp(what, "--drop-tensor") && !strcmp(t->name, arg))
            continue;
        if (poke && !strcmp(t->name, poke_name)) {
            if (t->type != (uint32_t)GUILD_TYPE_F32 || poke_at >= t->size / sizeof(float)) {
                guild_err_set(&err, "%s: not an F32 tensor with an element %llu", poke_name,
                              (unsigned long long)poke_at);
                goto done;
            }
            float *copy = malloc(t->size);
            if (!copy) {
                guild_err_set(&err, "out of memory");
                goto done;
            }
            memcpy(copy, t->data, t->size);
            copy[poke_at] = !strcmp(what, "--set-nan") ? NAN : INFINITY;
            const int wr = gguf_writer_write_tensor(w, k++, copy, t->size, &err);
            free(copy);
            if (wr < 0)
                goto done;
            poked = true;
            continue;
        }
        if (gguf_writer_write_tensor(w, k++, t->data, t->size, &err) < 0)
            goto done;
    }
    if (poke && !poked) {
        guild_err_set(&err, "no tensor %s", poke_name);
        goto done;
    }
    if (gguf_writer_finish(w, &err) < 0)
        goto done;
    rc = 0;
done:
    if (rc)
        fprintf(stderr, "gguf_edit: %s\n", err.msg);
    gguf_writer_destroy(&w);
    gguf_destroy(&g);
    return rc;
}
