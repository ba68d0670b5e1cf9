/* Writes the seed corpus of the GGUF fuzz target (tests/fuzz/corpus-gguf/): small valid files covering every
 * value type, nested arrays, string arrays, every tensor type, alignments, version 2; and a few invalid ones
 * (bad magic, a truncation).
 * The seeds are committed; run this again after changing it:  gen_gguf_corpus tests/fuzz/corpus-gguf */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gguf/gguf_writer.h"
#include "core/quant/types.h"

static const char *dir;

static void die(const char *what, const guild_err_t *err)
{
    fprintf(stderr, "gen_gguf_corpus: %s: %s\n", what, err ? err->msg : "failed");
    exit(1);
}

static void save(const char *name, const void *data, size_t size)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0)
        die(path, NULL);
}

/* Finishes w into memory with patterned tensor data; returns the image. */
static unsigned char *finish(gguf_writer_t *w, size_t *size)
{
    guild_err_t err;
    if (gguf_writer_begin_memory(w, &err) < 0)
        die("begin", &err);
    for (int64_t i = 0; i < gguf_writer_n_tensors(w); i++) {
        uint64_t n = gguf_writer_tensor_size(w, i);
        unsigned char *d = malloc(n);
        for (uint64_t k = 0; k < n; k++)
            d[k] = (unsigned char)(k * 13 + (uint64_t)i);
        if (gguf_writer_write_tensor(w, i, d, n, &err) < 0)
            die("write", &err);
        free(d);
    }
    if (gguf_writer_finish(w, &err) < 0)
        die("finish", &err);
    void *buf;
    gguf_writer_take_memory(w, &buf, size);
    gguf_writer_destroy(&w);
    return buf;
}

static gguf_writer_t *writer(void)
{
    gguf_writer_t *w;
    guild_err_t err;
    if (gguf_writer_new(&w, &err) < 0)
        die("new", &err);
    return w;
}

static void tensor(gguf_writer_t *w, const char *name, uint32_t type, uint32_t n_dims, uint64_t ne0, uint64_t ne1)
{
    guild_err_t err;
    uint64_t ne[4] = {ne0, ne1, 1, 1};
    if (gguf_writer_add_tensor(w, name, type, n_dims, ne, &err) < 0)
        die(name, &err);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gen_gguf_corpus DIR\n");
        return 2;
    }
    dir = argv[1];
    size_t size;
    unsigned char *buf;

    /* header only */
    buf = finish(writer(), &size);
    save("empty-v3", buf, size);
    free(buf);

    /* every scalar type, strings, arrays of every type, nested arrays, two tensors */
    gguf_writer_t *w = writer();
    gguf_writer_set_str(w, "general.architecture", "llama");
    gguf_writer_set_u8(w, "u8", 200);
    gguf_writer_set_i8(w, "i8", -3);
    gguf_writer_set_u16(w, "u16", 60000);
    gguf_writer_set_i16(w, "i16", -300);
    gguf_writer_set_u32(w, "u32", 70000);
    gguf_writer_set_i32(w, "i32", -70000);
    gguf_writer_set_f32(w, "f32", 1e-5f);
    gguf_writer_set_bool(w, "bool", true);
    gguf_writer_set_u64(w, "u64", 1ull << 40);
    gguf_writer_set_i64(w, "i64", -(1ll << 40));
    gguf_writer_set_f64(w, "f64", 0.25);
    int32_t i32s[4] = {1, -2, 3, -4};
    gguf_writer_set_arr(w, "a.i32", GGUF_VALUE_INT32, i32s, 4);
    float f32s[3] = {0.5f, -1.0f, 2.0f};
    gguf_writer_set_arr(w, "a.f32", GGUF_VALUE_FLOAT32, f32s, 3);
    bool bools[2] = {false, true};
    gguf_writer_set_arr(w, "a.bool", GGUF_VALUE_BOOL, bools, 2);
    const char *strs[3] = {"<s>", "", "\xc4\xa0the"};
    gguf_writer_set_arr_str(w, "a.str", strs, NULL, 3);
    gguf_wvalue_t *outer = gguf_wvalue_arr_new(GGUF_VALUE_ARRAY);
    gguf_wvalue_t *inner = gguf_wvalue_arr_new(GGUF_VALUE_STRING);
    gguf_wvalue_push_str(inner, "x", 1);
    gguf_wvalue_push_arr(outer, &inner);
    inner = gguf_wvalue_arr_new(GGUF_VALUE_UINT64);
    uint64_t u64s[2] = {1, 2};
    gguf_wvalue_push(inner, u64s, 2);
    gguf_wvalue_push_arr(outer, &inner);
    gguf_writer_set_value(w, "a.nested", &outer);
    tensor(w, "token_embd.weight", GUILD_TYPE_Q8_0, 2, 32, 2);
    tensor(w, "output_norm.weight", GUILD_TYPE_F32, 1, 4, 1);
    buf = finish(w, &size);
    save("all-values", buf, size);
    /* the same file as version 2 */
    buf[4] = 2;
    save("all-values-v2", buf, size);
    /* and broken: bad magic, a truncation, a misaligned tensor offset */
    buf[4] = 3;
    unsigned char *bad = malloc(size);
    memcpy(bad, buf, size);
    bad[3] = 'X';
    save("bad-magic", bad, size);
    save("truncated", buf, size / 2);
    free(bad);
    free(buf);

    /* one tensor of every type ggml defines, 64-byte alignment */
    w = writer();
    gguf_writer_set_u32(w, "general.alignment", 64);
    for (uint32_t t = 0; t < GUILD_TYPE_COUNT; t++) {
        const quant_type_info_t *info = quant_type_info(t);
        if (!info)
            continue;
        char name[64];
        snprintf(name, sizeof name, "t.%s", info->name);
        tensor(w, name, t, 2, info->block_elems, 1);
    }
    buf = finish(w, &size);
    save("all-tensor-types", buf, size);
    free(buf);

    /* a small vocabulary as tokenizers read it */
    w = writer();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_str(w, "tokenizer.ggml.pre", "qwen2");
    char *toks[40];
    int32_t types[40];
    float scores[40];
    for (int i = 0; i < 40; i++) {
        toks[i] = malloc(8);
        snprintf(toks[i], 8, "t%d", i);
        types[i] = i < 3 ? 3 : 1;
        scores[i] = (float)-i;
    }
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)toks, NULL, 40);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_VALUE_INT32, types, 40);
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_VALUE_FLOAT32, scores, 40);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)toks, NULL, 20);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    for (int i = 0; i < 40; i++)
        free(toks[i]);
    buf = finish(w, &size);
    save("vocab", buf, size);
    free(buf);
    return 0;
}
