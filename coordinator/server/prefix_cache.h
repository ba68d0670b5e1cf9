/* coordinator/server/prefix_cache.h — the server's store of cache snapshots (backend_seq_save blobs), each named
 * by the token ids whose positions it holds, kept in RAM under a byte bound (least recently used first out) and,
 * with a directory, as files that outlive the server.
 *
 * A request's prompt is matched against every snapshot: the longest common token prefix is what it can reuse
 * (a recurrent model's snapshot, whose state exists at its end only, is usable whole or not at all). The engine
 * restores the match into the sequence the request runs on (backend_seq_load): sessions share a prefix by copy.
 *
 * Files (DIR/pfx-IDENTITY-TOKENS-N.snap: hashes of the identity and of the N token ids): a header naming the model file (its size and a hash of its first and last MiB),
 * the backend and the KV format, then the token ids and the blob, each with its XXH64. At start the directory is
 * read: a file of another model, backend or format, of another layout version, truncated, or whose token ids do
 * not match their hash is refused with a warning naming the file and the reason, and never used; a blob is read
 * when first used, and one that does not match its hash is refused then (and dropped). Files are written to a
 * temporary name and renamed, so a crash leaves no half file under a snapshot's name.
 *
 * One thread uses a store (the engine's); pcache_stats may be called from any thread. */
#ifndef GUILD_SERVER_PREFIX_CACHE_H
#define GUILD_SERVER_PREFIX_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/util/err.h"

/* What a snapshot must have been made with to be used. */
typedef struct pcache_identity {
    uint64_t model_size;  /* the model file's bytes */
    uint64_t model_hash;  /* pcache_model_hash of it */
    char backend[16];     /* the dense backend's name ("cpu", "cuda") */
    int32_t kv_type;      /* the KV format asked for (KV_TYPE_*; the blob names the resolved one) */
} pcache_identity_t;

typedef struct pcache_options {
    size_t ram_max;       /* bytes of snapshots kept in RAM (--cache-ram); 0: none in RAM (files only) */
    const char *dir;      /* --cache-dir (must exist), or NULL: RAM only */
    size_t disk_max;      /* bytes of snapshot files of this identity kept in dir (--cache-disk) */
    bool recurrent;       /* the model has recurrent layers: a snapshot is restored whole */
    pcache_identity_t id;
} pcache_options_t;

typedef struct pcache_stats {
    int64_t entries;        /* snapshots known (in RAM, on disk or both) */
    int64_t ram_bytes;      /* blobs held in RAM */
    int64_t disk_bytes;     /* files written or found in the directory */
    uint64_t evictions;     /* snapshots dropped from RAM or disk for the bounds */
    uint64_t refused;       /* files refused (foreign, corrupt, unreadable) */
} pcache_stats_t;

typedef struct pcache pcache_t;

/* Opens a store; with o->dir, reads the directory's snapshots (refusing bad ones with a warning each). -1 with
 * err: the directory cannot be read, out of memory. */
int pcache_new(pcache_t **out, const pcache_options_t *o, guild_err_t *err);

/* Frees the store (files stay); nulls *c. NULL-safe. */
void pcache_destroy(pcache_t **c);

/* The model file's identity: its size and an XXH64 of its first and last MiB. -1 with err when unreadable. */
int pcache_model_identity(const char *path, uint64_t *size, uint64_t *hash, guild_err_t *err);

/* The longest prefix of tokens[0 .. n_max) a snapshot holds: the tokens it covers (0: none), with the snapshot's
 * key in *key for pcache_get. */
int32_t pcache_match(pcache_t *c, const int32_t *tokens, int32_t n_max, uint64_t *key);

/* Whether a snapshot already gives every position of tokens[0 .. n) (so saving it would add nothing). */
bool pcache_covers(pcache_t *c, const int32_t *tokens, int32_t n);

/* Snapshot key's blob (read from its file if it is not in RAM; borrowed until the next call on the store), marked
 * used. -1 with err when it is gone or its file is unreadable or corrupt (then it is dropped). */
int pcache_get(pcache_t *c, uint64_t key, const void **blob, size_t *size, guild_err_t *err);

/* Adds the snapshot of tokens[0 .. n) (blob: backend_seq_save's, owned by the store from now on, even on failure),
 * replacing those it extends (not for a recurrent model), writing its file, and evicting the least recently used
 * beyond the bounds. -1 with err on out of memory or when the file cannot be written (the snapshot stays in RAM). */
int pcache_put(pcache_t *c, const int32_t *tokens, int32_t n, void *blob, size_t size, guild_err_t *err);

void pcache_stats(pcache_t *c, pcache_stats_t *out);

#endif
