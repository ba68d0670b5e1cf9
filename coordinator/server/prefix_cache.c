#include "config.h"

#include "coordinator/server/prefix_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util/hash64.h"
#include "core/util/log.h"

#define PFX_MAGIC "GUILDPFX"
#define PFX_VERSION 1u
#define PFX_SUFFIX ".snap"
#define HASH_SEED 0x70726566697863ull
#define EDGE_BYTES (1u << 20) /* of the model file, hashed at each end */

/* A snapshot file's header (little-endian, as written by this machine's C; a file of another layout version
 * is refused). */
typedef struct pfx_header {
    char magic[8];         /* PFX_MAGIC */
    uint32_t version;      /* PFX_VERSION */
    int32_t n_tokens;      /* token ids after the header */
    uint64_t model_size;   /* pcache_identity_t */
    uint64_t model_hash;
    char backend[16];
    int32_t kv_type;
    uint32_t reserved0;
    uint64_t blob_bytes;   /* the blob after the token ids */
    uint64_t tokens_hash;  /* XXH64 of the token ids */
    uint64_t blob_hash;    /* XXH64 of the blob */
} pfx_header_t;
_Static_assert(sizeof(pfx_header_t) == 80, "pfx_header_t is a file layout");

typedef struct entry {
    uint64_t key;
    int32_t *tokens;     /* [n] */
    int32_t n;
    void *blob;          /* NULL: on disk only */
    size_t size;         /* the blob's bytes */
    char *path;          /* its file, or NULL */
    size_t file_bytes;
    uint64_t last_used;
} entry_t;

struct pcache {
    pcache_options_t o;
    char *dir;
    entry_t *e;          /* [n_e] */
    int n_e, cap_e;
    uint64_t clock;      /* bumped at each use */
    uint64_t next_key;
    pthread_mutex_t mu;  /* the counters (pcache_stats from other threads) */
    pcache_stats_t st;
};

int pcache_model_identity(const char *path, uint64_t *size, uint64_t *hash, guild_err_t *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return guild_err_errno(err, errno, "%s", path);
    struct stat sb;
    char *buf = malloc(EDGE_BYTES);
    int rc = -1;
    if (!buf) {
        guild_err_set(err, "out of memory");
        goto out;
    }
    if (fstat(fd, &sb) < 0) {
        guild_err_errno(err, errno, "%s", path);
        goto out;
    }
    hash64_t h;
    hash64_init(&h, HASH_SEED);
    const uint64_t n = (uint64_t)sb.st_size;
    const off_t at[2] = {0, n > EDGE_BYTES ? (off_t)(n - EDGE_BYTES) : 0};
    for (int i = 0; i < 2; i++) {
        const size_t want = n < EDGE_BYTES ? (size_t)n : EDGE_BYTES;
        ssize_t got = pread(fd, buf, want, at[i]);
        if (got != (ssize_t)want) {
            guild_err_set(err, "%s: cannot read %zu bytes at %lld", path, want, (long long)at[i]);
            goto out;
        }
        hash64_update(&h, buf, want);
    }
    hash64_update(&h, &n, sizeof n);
    *size = n;
    *hash = hash64_final(&h);
    rc = 0;
out:
    free(buf);
    close(fd);
    return rc;
}

static void count(pcache_t *c, int64_t entries, int64_t ram, int64_t disk, uint64_t evictions, uint64_t refused)
{
    pthread_mutex_lock(&c->mu);
    c->st.entries += entries;
    c->st.ram_bytes += ram;
    c->st.disk_bytes += disk;
    c->st.evictions += evictions;
    c->st.refused += refused;
    pthread_mutex_unlock(&c->mu);
}

/* Removes entry i (its blob freed; its file deleted when del_file). */
static void drop(pcache_t *c, int i, bool del_file)
{
    entry_t *x = &c->e[i];
    int64_t disk = 0;
    if (x->path && del_file) {
        unlink(x->path);
        disk = (int64_t)x->file_bytes;
    } else if (x->path) {
        disk = (int64_t)x->file_bytes; /* no longer ours to count */
    }
    count(c, -1, x->blob ? -(int64_t)x->size : 0, -disk, 0, 0);
    free(x->tokens);
    free(x->blob);
    free(x->path);
    c->e[i] = c->e[--c->n_e];
}

/* The least recently used entry with a blob in RAM (ram) or a file (!ram), other than snapshot `keep`, or -1. */
static int lru(const pcache_t *c, bool ram, uint64_t keep)
{
    int best = -1;
    for (int i = 0; i < c->n_e; i++) {
        const entry_t *x = &c->e[i];
        if (x->key != keep && (ram ? x->blob != NULL : x->path != NULL) &&
            (best < 0 || x->last_used < c->e[best].last_used))
            best = i;
    }
    return best;
}

/* Evicts least recently used snapshots until RAM and disk are within their bounds; snapshot `keep` (0: none)
 * keeps its blob in RAM (the one being used). */
static void evict(pcache_t *c, uint64_t keep)
{
    for (;;) {
        pcache_stats_t s;
        pcache_stats(c, &s);
        int i;
        if ((size_t)s.ram_bytes <= c->o.ram_max || (i = lru(c, true, keep)) < 0)
            break;
        entry_t *x = &c->e[i];
        count(c, 0, 0, 0, 1, 0);
        if (x->path) {
            count(c, 0, -(int64_t)x->size, 0, 0, 0);
            free(x->blob);
            x->blob = NULL;
        } else {
            drop(c, i, false);
        }
    }
    for (;;) {
        pcache_stats_t s;
        pcache_stats(c, &s);
        int i;
        if ((size_t)s.disk_bytes <= c->o.disk_max || (i = lru(c, false, 0)) < 0)
            break;
        entry_t *x = &c->e[i];
        count(c, 0, 0, 0, 1, 0);
        if (x->blob) {
            unlink(x->path);
            count(c, 0, 0, -(int64_t)x->file_bytes, 0, 0);
            free(x->path);
            x->path = NULL;
        } else {
            drop(c, i, true);
        }
    }
}

static entry_t *add_entry(pcache_t *c)
{
    if (c->n_e == c->cap_e) {
        int cap = c->cap_e ? 2 * c->cap_e : 16;
        entry_t *e = realloc(c->e, (size_t)cap * sizeof *e);
        if (!e)
            return NULL;
        c->e = e;
        c->cap_e = cap;
    }
    entry_t *x = &c->e[c->n_e++];
    memset(x, 0, sizeof *x);
    x->key = ++c->next_key;
    x->last_used = ++c->clock;
    return x;
}

/* Why header h (of a file of file_bytes) cannot be used here, or NULL. */
static const char *header_refusal(const pcache_t *c, const pfx_header_t *h, uint64_t file_bytes, char *why,
                                  size_t n)
{
    const pcache_identity_t *id = &c->o.id;
    if (memcmp(h->magic, PFX_MAGIC, 8))
        return "not a Guild snapshot";
    if (h->version != PFX_VERSION) {
        snprintf(why, n, "layout version %u, this build reads %u", h->version, PFX_VERSION);
        return why;
    }
    if (h->model_size != id->model_size || h->model_hash != id->model_hash)
        return "made for another model file (its size or contents differ)";
    if (strncmp(h->backend, id->backend, sizeof h->backend)) {
        snprintf(why, n, "made by backend %.16s, this server runs %s", h->backend, id->backend);
        return why;
    }
    if (h->kv_type != id->kv_type) {
        snprintf(why, n, "made with KV format %d, this server uses %d", h->kv_type, id->kv_type);
        return why;
    }
    if (h->n_tokens < 1 || h->n_tokens > (1 << 26) ||
        file_bytes != sizeof *h + (uint64_t)h->n_tokens * sizeof(int32_t) + h->blob_bytes) {
        snprintf(why, n, "%llu bytes, its header says %zu + %d token ids + %llu", (unsigned long long)file_bytes,
                 sizeof *h, h->n_tokens, (unsigned long long)h->blob_bytes);
        return why;
    }
    return NULL;
}

/* Indexes the snapshot file at path (refused with a warning when it cannot be used). */
static void scan_file(pcache_t *c, const char *path)
{
    char why[160];
    const char *no = NULL;
    pfx_header_t h;
    int32_t *tokens = NULL;
    FILE *f = fopen(path, "rb");
    struct stat sb;
    if (!f || fstat(fileno(f), &sb) < 0) {
        snprintf(why, sizeof why, "cannot be read: %s", strerror(errno));
        no = why;
    } else if (fread(&h, sizeof h, 1, f) != 1) {
        no = "shorter than a snapshot's header";
    } else if (!(no = header_refusal(c, &h, (uint64_t)sb.st_size, why, sizeof why))) {
        tokens = malloc((size_t)h.n_tokens * sizeof *tokens);
        if (!tokens || fread(tokens, sizeof *tokens, (size_t)h.n_tokens, f) != (size_t)h.n_tokens)
            no = "its token ids cannot be read";
        else if (hash64(tokens, (size_t)h.n_tokens * sizeof *tokens, HASH_SEED) != h.tokens_hash)
            no = "corrupt: its token ids do not match their checksum";
    }
    if (f)
        fclose(f);
    if (no) {
        guild_log(GUILD_LOG_WARN, "prefix cache: %s refused: %s; not used", path, no);
        free(tokens);
        count(c, 0, 0, 0, 0, 1);
        return;
    }
    entry_t *x = add_entry(c);
    char *p = strdup(path);
    if (!x || !p) {
        if (x)
            c->n_e--;
        free(tokens);
        free(p);
        return;
    }
    x->tokens = tokens;
    x->n = h.n_tokens;
    x->size = (size_t)h.blob_bytes;
    x->path = p;
    x->file_bytes = (size_t)sb.st_size;
    x->last_used = (uint64_t)sb.st_mtime; /* older files go first; every use in this run is later */
    if (x->last_used > c->clock)
        c->clock = x->last_used;
    count(c, 1, 0, (int64_t)x->file_bytes, 0, 0);
}

static int scan_dir(pcache_t *c, guild_err_t *err)
{
    DIR *d = opendir(c->dir);
    if (!d)
        return guild_err_errno(err, errno, "--cache-dir %s", c->dir);
    struct dirent *de;
    const size_t ls = strlen(PFX_SUFFIX);
    while ((de = readdir(d))) {
        const size_t l = strlen(de->d_name);
        if (strncmp(de->d_name, "pfx-", 4) || l <= ls || strcmp(de->d_name + l - ls, PFX_SUFFIX))
            continue;
        char path[4096];
        if (snprintf(path, sizeof path, "%s/%s", c->dir, de->d_name) >= (int)sizeof path)
            continue;
        scan_file(c, path);
    }
    closedir(d);
    return 0;
}

int pcache_new(pcache_t **out, const pcache_options_t *o, guild_err_t *err)
{
    *out = NULL;
    pcache_t *c = calloc(1, sizeof *c);
    if (!c)
        return guild_err_set(err, "prefix cache: out of memory");
    c->o = *o;
    pthread_mutex_init(&c->mu, NULL);
    if (o->dir) {
        c->dir = strdup(o->dir);
        c->o.dir = c->dir;
        if (!c->dir || scan_dir(c, err) < 0) {
            if (!c->dir)
                guild_err_set(err, "prefix cache: out of memory");
            pcache_destroy(&c);
            return -1;
        }
        pcache_stats_t s;
        pcache_stats(c, &s);
        guild_log(GUILD_LOG_INFO, "prefix cache: %lld snapshots (%lld bytes) in %s, %llu refused",
                  (long long)s.entries, (long long)s.disk_bytes, c->dir, (unsigned long long)s.refused);
        evict(c, 0);
    }
    *out = c;
    return 0;
}

void pcache_destroy(pcache_t **cp)
{
    pcache_t *c = *cp;
    if (!c)
        return;
    for (int i = 0; i < c->n_e; i++) {
        free(c->e[i].tokens);
        free(c->e[i].blob);
        free(c->e[i].path);
    }
    free(c->e);
    free(c->dir);
    pthread_mutex_destroy(&c->mu);
    free(c);
    *cp = NULL;
}

static int32_t common(const int32_t *a, int32_t na, const int32_t *b, int32_t nb)
{
    int32_t n = 0;
    while (n < na && n < nb && a[n] == b[n])
        n++;
    return n;
}

int32_t pcache_match(pcache_t *c, const int32_t *tokens, int32_t n_max, uint64_t *key)
{
    int32_t best = 0;
    uint64_t best_used = 0;
    *key = 0;
    for (int i = 0; i < c->n_e; i++) {
        const entry_t *x = &c->e[i];
        int32_t m = common(x->tokens, x->n, tokens, n_max);
        if (c->o.recurrent && m != x->n)
            continue;
        if (m > best || (m == best && m > 0 && x->last_used > best_used)) {
            best = m;
            best_used = x->last_used;
            *key = x->key;
        }
    }
    return best;
}

bool pcache_covers(pcache_t *c, const int32_t *tokens, int32_t n)
{
    for (int i = 0; i < c->n_e; i++) {
        const entry_t *x = &c->e[i];
        if (c->o.recurrent ? x->n == n && common(x->tokens, x->n, tokens, n) == n
                           : x->n >= n && common(x->tokens, x->n, tokens, n) == n)
            return true;
    }
    return false;
}

static int find(const pcache_t *c, uint64_t key)
{
    for (int i = 0; i < c->n_e; i++)
        if (c->e[i].key == key)
            return i;
    return -1;
}

/* Reads entry i's blob from its file, checking it. */
static int read_blob(pcache_t *c, int i, guild_err_t *err)
{
    entry_t *x = &c->e[i];
    FILE *f = fopen(x->path, "rb");
    pfx_header_t h;
    char why[160];
    const char *no = NULL;
    void *blob = NULL;
    struct stat sb;
    if (!f || fstat(fileno(f), &sb) < 0 || fread(&h, sizeof h, 1, f) != 1) {
        no = "cannot be read";
    } else if (!(no = header_refusal(c, &h, (uint64_t)sb.st_size, why, sizeof why))) {
        if (h.n_tokens != x->n || h.blob_bytes != x->size)
            no = "changed since the server started";
        else if (!(blob = malloc(x->size ? x->size : 1)))
            no = "out of memory for its blob";
        else if (fseek(f, (long)(sizeof h + (size_t)x->n * sizeof(int32_t)), SEEK_SET) != 0 ||
                 fread(blob, 1, x->size, f) != x->size)
            no = "its blob cannot be read";
        else if (hash64(blob, x->size, HASH_SEED) != h.blob_hash)
            no = "corrupt: its contents do not match their checksum";
    }
    if (f)
        fclose(f);
    if (no) {
        guild_err_set(err, "%s refused: %s; not used", x->path, no);
        free(blob);
        count(c, 0, 0, 0, 0, 1);
        drop(c, i, false);
        return -1;
    }
    x->blob = blob;
    count(c, 0, (int64_t)x->size, 0, 0, 0);
    return 0;
}

int pcache_get(pcache_t *c, uint64_t key, const void **blob, size_t *size, guild_err_t *err)
{
    int i = find(c, key);
    if (i < 0)
        return guild_err_set(err, "snapshot %llu is gone", (unsigned long long)key);
    if (!c->e[i].blob && read_blob(c, i, err) < 0)
        return -1;
    c->e[i].last_used = ++c->clock;
    evict(c, key);
    i = find(c, key);
    if (i < 0 || !c->e[i].blob) /* larger than the RAM bound on its own: evict kept it for this call */
        return guild_err_set(err, "snapshot %llu does not fit --cache-ram", (unsigned long long)key);
    *blob = c->e[i].blob;
    *size = c->e[i].size;
    return 0;
}

/* Writes entry x's file (to a temporary name, then renamed). */
static int write_file(pcache_t *c, entry_t *x, guild_err_t *err)
{
    pfx_header_t h = {.version = PFX_VERSION, .n_tokens = x->n, .model_size = c->o.id.model_size,
                      .model_hash = c->o.id.model_hash, .kv_type = c->o.id.kv_type, .blob_bytes = x->size};
    memcpy(h.magic, PFX_MAGIC, 8);
    snprintf(h.backend, sizeof h.backend, "%s", c->o.id.backend);
    h.tokens_hash = hash64(x->tokens, (size_t)x->n * sizeof(int32_t), HASH_SEED);
    h.blob_hash = hash64(x->blob, x->size, HASH_SEED);
    char path[4096], tmp[4200];
    /* named by the identity too: servers of several models may share a directory without overwriting each other */
    hash64_t hw;
    hash64_init(&hw, HASH_SEED);
    hash64_update(&hw, &h.model_size, sizeof h.model_size);
    hash64_update(&hw, &h.model_hash, sizeof h.model_hash);
    hash64_update(&hw, h.backend, sizeof h.backend);
    hash64_update(&hw, &h.kv_type, sizeof h.kv_type);
    const uint64_t who = hash64_final(&hw);
    if (snprintf(path, sizeof path, "%s/pfx-%016llx-%016llx-%d%s", c->dir, (unsigned long long)who,
                 (unsigned long long)h.tokens_hash, x->n, PFX_SUFFIX) >= (int)sizeof path)
        return guild_err_set(err, "--cache-dir %s: path too long", c->dir);
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return guild_err_errno(err, errno, "prefix cache: %s", tmp);
    bool ok = fwrite(&h, sizeof h, 1, f) == 1 &&
              fwrite(x->tokens, sizeof(int32_t), (size_t)x->n, f) == (size_t)x->n &&
              fwrite(x->blob, 1, x->size, f) == x->size;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) < 0) {
        int e = errno;
        unlink(tmp);
        return guild_err_errno(err, e, "prefix cache: cannot write %s", path);
    }
    for (int i = 0; i < c->n_e; i++) /* a file of the same name (the same tokens) is replaced */
        if (&c->e[i] != x && c->e[i].path && !strcmp(c->e[i].path, path)) {
            count(c, 0, 0, -(int64_t)c->e[i].file_bytes, 0, 0);
            free(c->e[i].path);
            c->e[i].path = NULL;
        }
    if (!(x->path = strdup(path)))
        return guild_err_set(err, "prefix cache: out of memory");
    x->file_bytes = sizeof h + (size_t)x->n * sizeof(int32_t) + x->size;
    count(c, 0, 0, (int64_t)x->file_bytes, 0, 0);
    return 0;
}

int pcache_put(pcache_t *c, const int32_t *tokens, int32_t n, void *blob, size_t size, guild_err_t *err)
{
    if (n < 1) {
        free(blob);
        return 0;
    }
    /* the snapshots this one extends give nothing it does not (a recurrent state is at its end only: kept) */
    for (int i = c->n_e - 1; i >= 0; i--) {
        const entry_t *x = &c->e[i];
        if (x->n <= n && common(x->tokens, x->n, tokens, n) == x->n && (!c->o.recurrent || x->n == n))
            drop(c, i, true);
    }
    entry_t *x = add_entry(c);
    int32_t *t = malloc((size_t)n * sizeof *t);
    if (!x || !t) {
        if (x)
            c->n_e--;
        free(t);
        free(blob);
        return guild_err_set(err, "prefix cache: out of memory");
    }
    memcpy(t, tokens, (size_t)n * sizeof *t);
    x->tokens = t;
    x->n = n;
    x->blob = blob;
    x->size = size;
    count(c, 1, (int64_t)size, 0, 0, 0);
    int rc = c->dir ? write_file(c, x, err) : 0;
    evict(c, 0);
    return rc;
}

void pcache_stats(pcache_t *c, pcache_stats_t *out)
{
    pthread_mutex_lock(&c->mu);
    *out = c->st;
    pthread_mutex_unlock(&c->mu);
}
