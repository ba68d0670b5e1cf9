/* core/gguf/split.c — models split into several files, as llama.cpp's gguf-split and converters write them:
 * NAME-00001-of-0000N.gguf ... NAME-0000N-of-0000N.gguf, every part a GGUF file of its own carrying split.no
 * (uint16, from 0), split.count (uint16) and split.tensors.count (int32, the tensors of all parts); the first
 * part holds the model's metadata, each tensor lives whole in one part.
 *
 * gguf_new opens such a model from its first part as one gguf_t: the parts are mapped one after the other into
 * one reserved range (each at a page boundary), so that every tensor's offset is its place in that range and
 * gguf_file_size its size, as for a single file; each part is validated as a file of its own, then their
 * tensors join one table (a name in two parts is an error) and the total is checked against
 * split.tensors.count. A missing part, a part of another split (its split.no or split.count) or a name that
 * does not follow the pattern is refused naming the file.
 */
#include "core/gguf/gguf_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int gguf_split_path(char *buf, size_t size, const char *prefix, int no, int count)
{
    const int n = snprintf(buf, size, "%s-%05d-of-%05d.gguf", prefix, no + 1, count);
    return n < 0 || (size_t)n >= size ? -1 : 0;
}

int gguf_split_prefix(char *buf, size_t size, const char *path, int no, int count)
{
    char tail[64];
    snprintf(tail, sizeof tail, "-%05d-of-%05d.gguf", no + 1, count);
    const size_t n = strlen(path), t = strlen(tail);
    if (n <= t || strcmp(path + n - t, tail) || n - t >= size)
        return -1;
    memcpy(buf, path, n - t);
    buf[n - t] = '\0';
    return 0;
}

/* The split key `key` of g as an integer in [lo, hi]: 1 with *v set, 0 when absent, -1 with a message. */
static int split_key(const gguf_t *g, const char *key, int64_t lo, int64_t hi, int64_t *v, guild_err_t *err)
{
    if (gguf_find_key(g, key) < 0)
        return 0;
    if (gguf_get_int(g, key, v, err) < 0)
        return guild_err_prefix(err, "%s: ", g->name);
    if (*v < lo || *v > hi)
        return guild_err_set(err, "%s: %s = %lld is out of range [%lld, %lld]", g->name, key, (long long)*v,
                             (long long)lo, (long long)hi);
    return 1;
}

int gguf_split_count(const gguf_t *g, int *count, int *no, guild_err_t *err)
{
    int64_t c = 1, n = 0;
    const int hc = split_key(g, "split.count", 1, 65535, &c, err);
    if (hc < 0 || split_key(g, "split.no", 0, 65534, &n, err) < 0)
        return -1;
    *count = (int)c;
    *no = (int)n;
    if (n >= c)
        return guild_err_set(err, "%s: split.no = %lld is not below split.count = %lld", g->name, (long long)n,
                             (long long)c);
    return 0;
}

typedef struct part_file {
    char *path;
    int fd;
    uint64_t size, at; /* bytes; where it goes in the range (page aligned) */
} part_file_t;

/* Moves the tensors of parts[1..] into g (parts[0]), which becomes the whole model: the range, the table and
 * the index. */
static int join(gguf_t *g, gguf_t **parts, int n, const part_file_t *pf, guild_err_t *err)
{
    int64_t total = 0;
    for (int i = 0; i < n; i++)
        total += parts[i]->n_tensors;
    gguf_tensor_t *t = realloc(g->tensors, (size_t)(total ? total : 1) * sizeof *t);
    if (!t)
        return guild_err_set(err, "%s: out of memory for %lld tensors", g->name, (long long)total);
    g->tensors = t;
    int64_t k = g->n_tensors;
    for (int i = 1; i < n; i++)
        for (int64_t j = 0; j < parts[i]->n_tensors; j++, k++) {
            t[k] = parts[i]->tensors[j];
            t[k].offset += pf[i].at;
            /* the index keys the part's copy of the name, which lives as long as the part (kept by g) */
            const size_t len = strlen(t[k].name);
            const int64_t dup = gguf_name_index_insert(&g->names, t[k].name, len, k);
            if (dup == -2)
                return guild_err_set(err, "%s: out of memory for %lld tensors", g->name, (long long)total);
            if (dup >= 0) {
                int first = 0;
                for (int64_t a = parts[0]->n_tensors; first < n - 1 && dup >= a; first++)
                    a += parts[first + 1]->n_tensors;
                return guild_err_set(err, "%s: tensor %s is in part %d (%s) and in part %d (%s)", g->name,
                                     t[k].name, first + 1, pf[first].path, i + 1, pf[i].path);
            }
        }
    g->n_tensors = total;
    return 0;
}

int gguf_split_open(gguf_t **out, const char *path, int count, guild_err_t *err)
{
    *out = NULL;
    const long page = sysconf(_SC_PAGESIZE);
    char prefix[4096];
    if (gguf_split_prefix(prefix, sizeof prefix, path, 0, count) < 0)
        return guild_err_set(err, "%s: the first of %d parts of a split model, but its name does not end in "
                             "-00001-of-%05d.gguf (the others are found by that pattern)", path, count, count);
    part_file_t *pf = calloc((size_t)count, sizeof *pf);
    gguf_t **parts = calloc((size_t)count, sizeof *parts);
    void *range = MAP_FAILED;
    uint64_t range_bytes = 0;
    int rc = -1, i;
    if (!pf || !parts) {
        guild_err_set(err, "%s: out of memory", path);
        goto out;
    }
    for (i = 0; i < count; i++)
        pf[i].fd = -1;
    for (i = 0; i < count; i++) {
        char p[4096 + 32];
        if (gguf_split_path(p, sizeof p, prefix, i, count) < 0 || !(pf[i].path = strdup(p))) {
            guild_err_set(err, "%s: part %d's name is too long", path, i + 1);
            goto out;
        }
        struct stat st;
        if ((pf[i].fd = open(p, O_RDONLY | O_CLOEXEC)) < 0) {
            guild_err_errno(err, errno, "%s: part %d of %d of the split model %s is missing", p, i + 1, count, path);
            goto out;
        }
        if (fstat(pf[i].fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size == 0) {
            guild_err_set(err, "%s: part %d of %d of %s: not a regular non-empty file", p, i + 1, count, path);
            goto out;
        }
        pf[i].size = (uint64_t)st.st_size;
        pf[i].at = range_bytes;
        range_bytes += (pf[i].size + (uint64_t)page - 1) / (uint64_t)page * (uint64_t)page;
    }
    /* one reserved range, each part mapped at its place */
    range = mmap(NULL, (size_t)range_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (range == MAP_FAILED) {
        guild_err_errno(err, errno, "%s: cannot reserve %llu bytes for %d parts", path,
                        (unsigned long long)range_bytes, count);
        goto out;
    }
    for (i = 0; i < count; i++) {
        void *at = (char *)range + pf[i].at;
        if (mmap(at, (size_t)pf[i].size, PROT_READ, MAP_PRIVATE | MAP_FIXED, pf[i].fd, 0) == MAP_FAILED) {
            guild_err_errno(err, errno, "%s: cannot map %llu bytes", pf[i].path, (unsigned long long)pf[i].size);
            goto out;
        }
        close(pf[i].fd);
        pf[i].fd = -1;
    }
    /* each part validated as a file of its own, and of this split */
    for (i = 0; i < count; i++) {
        int c, no;
        if (gguf_open_image(&parts[i], (char *)range + pf[i].at, pf[i].size, false, pf[i].path, err) < 0 ||
            gguf_split_count(parts[i], &c, &no, err) < 0)
            goto out;
        if (c != count || no != i) {
            guild_err_set(err, "%s: split.no %d of split.count %d: expected part %d of %d (of %s)", pf[i].path,
                          no, c, i + 1, count, path);
            goto out;
        }
    }
    gguf_t *g = parts[0];
    if (join(g, parts, count, pf, err) < 0)
        goto out;
    int64_t want = 0;
    const int has = split_key(g, "split.tensors.count", 0, INT32_MAX, &want, err);
    if (has < 0)
        goto out;
    if (has && want != g->n_tensors) {
        guild_err_set(err, "%s: split.tensors.count = %lld, but its %d parts hold %lld tensors", path,
                      (long long)want, count, (long long)g->n_tensors);
        goto out;
    }
    /* g owns the range and the other parts (their tables hold the names its table points to) */
    g->base = range;
    g->size = range_bytes;
    g->mapped = true;
    range = MAP_FAILED;
    g->parts = parts;
    g->n_parts = count;
    g->part_paths = malloc((size_t)count * sizeof *g->part_paths);
    if (!g->part_paths) {
        g->parts = NULL;
        g->n_parts = 0;
        parts[0] = NULL;
        gguf_destroy(&g);
        guild_err_set(err, "%s: out of memory", path);
        goto out;
    }
    for (i = 0; i < count; i++) {
        g->part_paths[i] = pf[i].path;
        pf[i].path = NULL;
    }
    parts[0] = NULL; /* g itself */
    parts = NULL;
    *out = g;
    rc = 0;
out:
    for (i = 0; parts && i < count; i++)
        gguf_destroy(&parts[i]);
    free(parts);
    if (range != MAP_FAILED)
        munmap(range, (size_t)range_bytes);
    for (i = 0; pf && i < count; i++) {
        if (pf[i].fd >= 0)
            close(pf[i].fd);
        free(pf[i].path);
    }
    free(pf);
    return rc;
}
