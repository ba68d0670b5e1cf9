/* guild tokenize — text on stdin -> token ids of a GGUF vocabulary (like llama.cpp's llama-tokenize). */
#include "coordinator/commands.h"
#include "core/gguf/gguf.h"
#include "core/tokenizer/tok.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out)
{
    fprintf(out,
            "usage: guild tokenize -m FILE.gguf [--ids] [--no-bos] [--parse-special]\n"
            "\n"
            "Reads text on standard input, exactly as given (a final newline is part of it), and prints its\n"
            "tokens: one line per token with its id and piece, or with --ids the ids on one line.\n"
            "\n"
            "  -m, --model FILE    GGUF file whose tokenizer.ggml.* keys give the vocabulary\n"
            "      --ids           print only the ids, separated by spaces\n"
            "      --no-bos        add no BOS/EOS (by default they are added where the vocabulary asks)\n"
            "      --parse-special recognise control-token texts (<|im_start|>, <s>, ...) in the input\n"
            "  -h, --help          this help\n");
}

/* Reads all of stdin; NULL on error. */
static char *read_all(FILE *in, size_t *len)
{
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, in);
        if (n < cap)
            break;
        char *bigger = realloc(buf, cap * 2);
        if (!bigger) {
            free(buf);
            return NULL;
        }
        buf = bigger;
        cap *= 2;
    }
    if (buf && ferror(in)) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

/* Prints a piece between quotes: complete UTF-8 characters as they are, other bytes and controls escaped. */
static void print_piece(const char *s, size_t n)
{
    putchar('\'');
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t len = c >= 0x80 ? tok_utf8_char_len(s + i, n - i) : 0;
        if (len) {
            fwrite(s + i, 1, len, stdout);
            i += len;
            continue;
        }
        switch (c) {
        case '\n': fputs("\\n", stdout); break;
        case '\t': fputs("\\t", stdout); break;
        case '\r': fputs("\\r", stdout); break;
        case '\\': fputs("\\\\", stdout); break;
        case '\'': fputs("\\'", stdout); break;
        default:
            if (c < 0x20 || c >= 0x7F)
                printf("\\x%02x", c);
            else
                putchar(c);
        }
        i++;
    }
    putchar('\'');
}

int cmd_tokenize(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'},     {"ids", no_argument, NULL, 'i'},
        {"no-bos", no_argument, NULL, 'b'},          {"parse-special", no_argument, NULL, 'p'},
        {"help", no_argument, NULL, 'h'},            {NULL, 0, NULL, 0},
    };
    const char *model = NULL;
    bool ids_only = false;
    unsigned flags = TOK_ADD_SPECIAL;
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "m:h", opts, NULL)) != -1;) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'i': ids_only = true; break;
        case 'b': flags &= ~(unsigned)TOK_ADD_SPECIAL; break;
        case 'p': flags |= TOK_PARSE_SPECIAL; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!model || optind != argc) {
        fprintf(stderr, "guild tokenize: %s\n", model ? "unexpected argument" : "-m FILE.gguf is required");
        usage(stderr);
        return 2;
    }

    guild_err_t err = {{0}};
    gguf_t *g = NULL;
    tok_t *t = NULL;
    tok_ids_t ids = {0};
    char *text = NULL;
    size_t len = 0;
    int rc = 1;
    if (gguf_new(&g, model, &err) < 0 || tok_new_from_gguf(&t, g, &err) < 0)
        goto fail;
    gguf_destroy(&g);
    if (!(text = read_all(stdin, &len))) {
        guild_err_set(&err, "cannot read standard input");
        goto fail;
    }
    if (tok_encode(t, text, len, flags, &ids, &err) < 0)
        goto fail;

    if (ids_only) {
        for (size_t i = 0; i < ids.n; i++)
            printf(i ? " %d" : "%d", ids.v[i]);
        putchar('\n');
    } else {
        size_t cap = tok_max_piece_len(t);
        char *piece = malloc(cap ? cap : 1);
        if (!piece) {
            guild_err_set(&err, "out of memory");
            goto fail;
        }
        for (size_t i = 0; i < ids.n; i++) {
            size_t n = tok_piece(t, ids.v[i], TOK_DECODE_SPECIAL, piece, cap);
            printf("%6d -> ", ids.v[i]);
            print_piece(piece, n);
            putchar('\n');
        }
        free(piece);
    }
    rc = fflush(stdout) == 0 ? 0 : 1;
    goto done;
fail:
    fprintf(stderr, "guild tokenize: %s\n", err.msg);
done:
    free(text);
    tok_ids_fini(&ids);
    tok_destroy(&t);
    gguf_destroy(&g);
    return rc;
}
