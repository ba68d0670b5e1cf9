/* tests/ref/quant_dump.c — exposes Guild's scalar quant references (core/quant/quant.h) to the Python
 * reference's cross-check (tests/ref/check_quant.py): raw files in, raw files out.
 *
 *   quant_dump dequant  TYPE IN.bin  N OUT.f32         dequantize N elements
 *   quant_dump quantize TYPE IN.f32  N OUT.bin         quantize N floats (Q8_0, Q8_1, Q8_K, ...)
 *   quant_dump dot      TYPE W.bin ACT.bin N ROWS OUT.f32
 *                                                      ROWS dot products of weight rows (N elements of TYPE
 *                                                      each) with one activation row in TYPE's dot type
 * Exit status 0 on success, 2 on bad usage or a failed read/write. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/quant/quant.h"
#include "core/quant/types.h"

static void *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf && n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return buf;
}

static int write_file(const char *path, const void *buf, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(buf, 1, size, f);
    return fclose(f) == 0 && w == size ? 0 : -1;
}

static int fail(const char *msg, const char *what)
{
    fprintf(stderr, "quant_dump: %s %s\n", msg, what ? what : "");
    return 2;
}

/* Reads `path` and checks it holds at least `need` bytes. */
static void *read_at_least(const char *path, size_t need)
{
    size_t size = 0;
    void *buf = read_file(path, &size);
    if (buf && size < need) {
        free(buf);
        return NULL;
    }
    return buf;
}

int main(int argc, char **argv)
{
    if (argc < 6)
        return fail("usage: quant_dump dequant|quantize|dot TYPE ...", NULL);
    int type = quant_type_from_name(argv[2]);
    if (type < 0)
        return fail("unknown type", argv[2]);
    const quant_type_info_t *info = quant_type_info((uint32_t)type);
    guild_err_t err = {{0}};

    if (!strcmp(argv[1], "dequant")) {
        int64_t n = atoll(argv[4]);
        uint64_t bytes;
        if (n <= 0 || quant_row_bytes((uint32_t)type, (uint64_t)n, &bytes, &err))
            return fail("bad element count", err.msg);
        void *src = read_at_least(argv[3], bytes);
        float *dst = malloc((size_t)n * sizeof *dst);
        if (!src || !dst)
            return fail("cannot read", argv[3]);
        quant_dequantize_row_ref((guild_type_t)type, src, dst, n);
        int rc = write_file(argv[5], dst, (size_t)n * sizeof *dst);
        free(src);
        free(dst);
        return rc ? fail("cannot write", argv[5]) : 0;
    }
    if (!strcmp(argv[1], "quantize")) {
        int64_t n = atoll(argv[4]);
        uint64_t bytes;
        if (n <= 0 || quant_row_bytes((uint32_t)type, (uint64_t)n, &bytes, &err))
            return fail("bad element count", err.msg);
        float *src = read_at_least(argv[3], (size_t)n * sizeof *src);
        void *dst = malloc(bytes);
        if (!src || !dst)
            return fail("cannot read", argv[3]);
        if (quant_quantize_row_ref((guild_type_t)type, src, dst, n, &err))
            return fail("quantize failed:", err.msg);
        int rc = write_file(argv[5], dst, bytes);
        free(src);
        free(dst);
        return rc ? fail("cannot write", argv[5]) : 0;
    }
    if (!strcmp(argv[1], "dot") && argc >= 8) {
        int64_t n = atoll(argv[5]), rows = atoll(argv[6]);
        uint64_t wbytes, abytes;
        if (n <= 0 || rows <= 0 || !info || !info->computable ||
            quant_row_bytes((uint32_t)type, (uint64_t)n, &wbytes, &err) ||
            quant_row_bytes(info->dot_type, (uint64_t)n, &abytes, &err))
            return fail("bad type or sizes", err.msg);
        unsigned char *w = read_at_least(argv[3], wbytes * (uint64_t)rows);
        void *act = read_at_least(argv[4], abytes);
        float *out = malloc((size_t)rows * sizeof *out);
        if (!w || !act || !out)
            return fail("cannot read inputs", NULL);
        for (int64_t r = 0; r < rows; r++)
            out[r] = quant_vec_dot_ref((guild_type_t)type, n, w + (size_t)r * wbytes, act);
        int rc = write_file(argv[7], out, (size_t)rows * sizeof *out);
        free(w);
        free(act);
        free(out);
        return rc ? fail("cannot write", argv[7]) : 0;
    }
    return fail("unknown mode", argv[1]);
}
