/* tests/gguf_edit.c — copies a GGUF file with one deliberate defect, for the bad-input tests of `guild run`.
 *
 *   gguf_edit IN.gguf OUT.gguf --drop-tensor NAME     leave tensor NAME out
 *   gguf_edit IN.gguf OUT.gguf --set-arch NAME        general.architecture = NAME (the ARCH.* keys are kept)
 *   gguf_edit IN.gguf OUT.gguf --drop-key KEY         leave metadata key KEY out
 * Exit status 0, or 1 with a message. */
#include <stdio.h>
#include <string.h>

#include "core/gguf/gguf.h"
#include "core/gguf/gguf_writer.h"

int main(int argc, char **argv)
{
    if (argc != 5 || (strcmp(argv[3], "--drop-tensor") && strcmp(argv[3], "--set-arch") &&
                      strcmp(argv[3], "--drop-key"))) {
        fprintf(stderr, "usage: gguf_edit IN OUT --drop-tensor NAME | --set-arch NAME | --drop-key KEY\n");
        return 1;
    }
    const char *what = argv[3], *arg = argv[4];
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
        if (gguf_writer_write_tensor(w, k++, t->data, t->size, &err) < 0)
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
