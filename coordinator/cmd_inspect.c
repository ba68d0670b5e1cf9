/* guild inspect FILE.gguf — prints a GGUF file's header, every metadata key with its type and value, and the
 * tensor table, like gguf-dump. Long arrays and strings are abbreviated unless --full. */
#include "coordinator/commands.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gguf/gguf.h"
#include "core/quant/types.h"

#define ARRAY_PREVIEW 8  /* elements shown per array without --full */
#define STRING_PREVIEW 60 /* bytes shown per string without --full (gguf-dump's choice) */

typedef struct inspect_opts {
    bool full;
} inspect_opts_t;

static void usage(FILE *out)
{
    fprintf(out, "usage: guild inspect [--full] FILE.gguf\n"
                 "Prints the GGUF header, every metadata key with its type and value, and the tensor table\n"
                 "(index, name, type, shape, bytes, file offset).\n"
                 "  --full   print whole strings and arrays (default: the first %d elements, %d bytes)\n"
                 "  --help   this message\n",
                 ARRAY_PREVIEW, STRING_PREVIEW);
}

/* Bytes from the file, escaped so that nothing in them can drive the terminal: control characters as \n, \t,
 * \xNN; quotes and backslashes escaped when `quoted`. */
static void print_escaped(FILE *out, const char *s, size_t n, bool quoted)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n')
            fputs("\\n", out);
        else if (c == '\t')
            fputs("\\t", out);
        else if (c == '\r')
            fputs("\\r", out);
        else if (quoted && (c == '\'' || c == '\\'))
            fprintf(out, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            fprintf(out, "\\x%02x", c);
        else
            fputc(c, out);
    }
}

/* A key or tensor name, escaped, left-aligned in `width` columns (more if it is longer). */
static void print_name(const char *name, int width)
{
    char buf[512];
    FILE *m = fmemopen(buf, sizeof buf, "w");
    if (!m) {
        printf("%-*s", width, "?");
        return;
    }
    print_escaped(m, name, strlen(name), false);
    fclose(m);
    buf[sizeof buf - 1] = '\0';
    printf("%-*s", width, buf);
}

/* A string quoted and escaped; truncated at a UTF-8 character boundary unless full. */
static void print_string(const char *s, size_t len, const inspect_opts_t *o)
{
    size_t n = len;
    if (!o->full && n > STRING_PREVIEW) {
        n = STRING_PREVIEW;
        while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
            n--;
    }
    putchar('\'');
    print_escaped(stdout, s, n, true);
    putchar('\'');
    if (n < len)
        printf("...(%zu bytes)", len);
}

/* The shortest %g that reads back as the same value (1e-05, not 9.99999975e-06). */
static void print_float(double f, bool single)
{
    char buf[64];
    for (int prec = single ? 6 : 15;; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, f);
        if (prec >= (single ? 9 : 17) || (single ? strtof(buf, NULL) == (float)f : strtod(buf, NULL) == f))
            break;
    }
    fputs(buf, stdout);
}

static void print_value(const gguf_value_t *v, const inspect_opts_t *o)
{
    int64_t i;
    uint64_t u;
    double f;
    bool b;
    const char *s;
    size_t len;
    switch (v->type) {
    case GGUF_VALUE_STRING:
        gguf_value_str(v, &s, &len);
        print_string(s, len, o);
        return;
    case GGUF_VALUE_ARRAY: {
        uint64_t shown = o->full || v->n <= ARRAY_PREVIEW ? v->n : ARRAY_PREVIEW;
        putchar('[');
        for (uint64_t k = 0; k < shown; k++) {
            gguf_value_t e = gguf_value_at(v, k);
            if (k)
                fputs(", ", stdout);
            print_value(&e, o);
        }
        if (shown < v->n)
            printf(", ... (%" PRIu64 " total)", v->n);
        putchar(']');
        return;
    }
    case GGUF_VALUE_BOOL:
        gguf_value_to_bool(v, &b);
        fputs(b ? "true" : "false", stdout);
        return;
    case GGUF_VALUE_FLOAT32:
    case GGUF_VALUE_FLOAT64:
        gguf_value_to_float(v, &f);
        print_float(f, v->type == GGUF_VALUE_FLOAT32);
        return;
    default:
        if (gguf_value_to_uint(v, &u) == 0)
            printf("%" PRIu64, u);
        else if (gguf_value_to_int(v, &i) == 0)
            printf("%" PRId64, i);
        else
            fputs("?", stdout);
    }
}

static void print_metadata(const gguf_t *g, const inspect_opts_t *o)
{
    printf("\nmetadata:\n  %5s  %-40s %-18s %s\n", "#", "key", "type", "value");
    for (int64_t k = 0; k < gguf_n_kv(g); k++) {
        const gguf_value_t *v = gguf_kv_value(g, k);
        char type[64];
        if (v->type == GGUF_VALUE_ARRAY)
            snprintf(type, sizeof type, "[%s x %" PRIu64 "]", gguf_value_type_name(v->elem_type), v->n);
        else
            snprintf(type, sizeof type, "%s", gguf_value_type_name(v->type));
        printf("  %5" PRId64 "  ", k);
        print_name(gguf_kv_key(g, k), 40);
        printf(" %-18s = ", type);
        print_value(v, o);
        putchar('\n');
    }
}

static void print_tensors(const gguf_t *g)
{
    printf("\ntensors:\n  %5s  %-40s %-8s %-28s %14s %14s\n", "#", "name", "type", "shape", "bytes", "offset");
    for (int64_t k = 0; k < gguf_n_tensors(g); k++) {
        const gguf_tensor_t *t = gguf_tensor(g, k);
        char shape[128];
        int n = snprintf(shape, sizeof shape, "[");
        for (uint32_t d = 0; d < t->n_dims; d++)
            n += snprintf(shape + n, sizeof shape - (size_t)n, "%s%" PRIu64, d ? ", " : "", t->ne[d]);
        snprintf(shape + n, sizeof shape - (size_t)n, "]");
        printf("  %5" PRId64 "  ", k);
        print_name(t->name, 40);
        printf(" %-8s %-28s %14" PRIu64 " %14" PRIu64 "\n", quant_type_info(t->type)->name, shape, t->size,
               t->offset);
    }
}

static const char *human_size(char *buf, size_t cap, uint64_t bytes)
{
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double x = (double)bytes;
    int u = 0;
    while (x >= 1024 && u < 4) {
        x /= 1024;
        u++;
    }
    snprintf(buf, cap, u ? "%.2f %s" : "%.0f %s", x, unit[u]);
    return buf;
}

int cmd_inspect(int argc, char **argv)
{
    inspect_opts_t o = {0};
    const char *path = NULL;
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--help") || !strcmp(argv[a], "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(argv[a], "--full")) {
            o.full = true;
        } else if (argv[a][0] == '-' && argv[a][1]) {
            fprintf(stderr, "guild inspect: unknown option '%s'\n", argv[a]);
            usage(stderr);
            return 2;
        } else if (!path) {
            path = argv[a];
        } else {
            fprintf(stderr, "guild inspect: one file at a time\n");
            usage(stderr);
            return 2;
        }
    }
    if (!path) {
        usage(stderr);
        return 2;
    }
    gguf_t *g;
    guild_err_t err;
    if (gguf_new(&g, path, &err) < 0) {
        fprintf(stderr, "guild inspect: %s\n", err.msg);
        return 1;
    }
    uint64_t data_bytes = 0;
    for (int64_t k = 0; k < gguf_n_tensors(g); k++)
        data_bytes += gguf_tensor(g, k)->size;
    printf("%s: GGUF version %u, alignment %u, %" PRId64 " metadata keys, %" PRId64 " tensors\n", gguf_path(g),
           gguf_version(g), gguf_alignment(g), gguf_n_kv(g), gguf_n_tensors(g));
    char human[32];
    if (gguf_n_parts(g) > 1) { /* offsets are of the parts laid one after the other (core/gguf/gguf.h) */
        printf("split into %d files (offsets in the parts laid one after the other, each at a page boundary):\n",
               gguf_n_parts(g));
        for (int i = 0; i < gguf_n_parts(g); i++)
            printf("  %s\n", gguf_part_path(g, i));
    }
    printf("file %" PRIu64 " bytes; tensor data from offset %" PRIu64 ": %" PRIu64 " bytes (%s)\n",
           gguf_file_size(g), gguf_data_offset(g), data_bytes, human_size(human, sizeof human, data_bytes));
    print_metadata(g, &o);
    if (gguf_n_tensors(g))
        print_tensors(g);
    gguf_destroy(&g);
    if (fflush(stdout) != 0) {
        perror("guild inspect: stdout");
        return 1;
    }
    return 0;
}
