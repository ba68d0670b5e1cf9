#include "config.h"

#include "cpu-expert-worker/shard_fetch.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/gguf/gguf.h"
#include "ipc/data.h"
#include "ipc/doorbell.h"

#define CHUNK_BYTES ((uint64_t)1 << 20) /* bytes per ShardRead */
/* reads in flight: keeps the link busy while one is written, yet queues little on it, so that the heartbeats
 * sharing the link are not held up for long behind the shard (4 MiB: 0.3 s on a 100 Mb/s link) */
#define WINDOW 4
#define POLL_MS 50                      /* how late a stop is noticed */

typedef struct range {
    uint64_t offset, length;
} range_t;

static int write_at(int fd, const void *p, uint64_t n, uint64_t off, guild_err_t *err)
{
    uint64_t done = 0;
    while (done < n) {
        ssize_t w = pwrite(fd, (const char *)p + done, (size_t)(n - done), (off_t)(off + done));
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return guild_err_errno(err, errno, "shard: write of %llu bytes at %llu into memory",
                                   (unsigned long long)(n - done), (unsigned long long)(off + done));
        done += (uint64_t)w;
    }
    return 0;
}

/* The next ShardData: 0 with *m (close it), -1 with err on silence, a stop, a bad message or a refusal. */
static int next_data(shard_fetch_t *f, data_msg_t *m, guild_err_t *err)
{
    uint64_t t0 = guild_now_ns();
    for (;;) {
        if (f->stop && f->stop(f->stop_ctx))
            return guild_err_set(err, "shard: stopped while receiving it");
        guild_msg_result_t r = data_recv(f->data, POLL_MS, m, err);
        if (r == GUILD_MSG_TIMEOUT) {
            if (guild_now_ns() - t0 > (uint64_t)f->timeout_ms * 1000000u)
                return guild_err_set(err, "shard: no answer from the coordinator's data socket for %u ms",
                                     f->timeout_ms);
            continue;
        }
        if (r != GUILD_MSG_OK)
            return guild_err_prefix(err, "shard: ");
        if (m->hdr->body_case != GUILD__DATA__BODY_SHARD_DATA) {
            data_msg_close(m);
            continue; /* nothing else is addressed to a worker that has not said hello */
        }
        const Guild__ShardData *d = m->hdr->shard_data;
        if (d->error && d->error[0]) {
            guild_err_set(err, "shard: the coordinator refused to send it: %s", d->error);
            data_msg_close(m);
            return -1;
        }
        return 0;
    }
}

int shard_fetch_header(shard_fetch_t *f, guild_err_t *err)
{
    f->fd = -1;
    f->bytes = 0;
    data_msg_t m;
    if (data_send_shard_read(f->data, f->generation, f->worker, 0, 0, err) < 0 || next_data(f, &m, err) < 0)
        return -1;
    f->file_size = m.hdr->shard_data->file_size;
    f->data_offset = m.hdr->shard_data->data_offset;
    data_msg_close(&m);
    if (f->data_offset == 0 || f->data_offset > f->file_size)
        return guild_err_set(err, "shard: a model file of %llu bytes with its data at %llu",
                             (unsigned long long)f->file_size, (unsigned long long)f->data_offset);
    if ((f->fd = memfd_create("guild-shard", MFD_CLOEXEC)) < 0)
        return guild_err_errno(err, errno, "shard: memfd_create");
    snprintf(f->path, sizeof f->path, "/proc/self/fd/%d", f->fd);
    if (ftruncate(f->fd, (off_t)f->file_size) < 0) {
        guild_err_errno(err, errno, "shard: a memory file of %llu bytes", (unsigned long long)f->file_size);
        goto fail;
    }
    range_t header = {0, f->data_offset};
    for (uint64_t off = 0; off < header.length; off += CHUNK_BYTES) {
        uint64_t n = header.length - off < CHUNK_BYTES ? header.length - off : CHUNK_BYTES;
        if (data_send_shard_read(f->data, f->generation, f->worker, off, n, err) < 0 || next_data(f, &m, err) < 0)
            goto fail;
        const Guild__ShardData *d = m.hdr->shard_data;
        int rc = d->offset == off && d->length == n
                     ? write_at(f->fd, m.array[0], n, off, err)
                     : guild_err_set(err, "shard: bytes %llu+%llu received for %llu+%llu", (unsigned long long)d->offset,
                                     (unsigned long long)d->length, (unsigned long long)off, (unsigned long long)n);
        data_msg_close(&m);
        if (rc < 0)
            goto fail;
        f->bytes += n;
    }
    return 0;
fail:
    close(f->fd);
    f->fd = -1;
    return -1;
}

int shard_fetch_experts(shard_fetch_t *f, const model_t *m, const uint8_t *owned, guild_err_t *err)
{
    const model_config_t *c = model_config(m);
    const model_weights_t *w = model_weights(m);
    const gguf_t *g = model_gguf(m);
    /* the runs of owned experts of each expert tensor, as file ranges cut into chunks */
    size_t cap = 64, n = 0;
    range_t *r = malloc(cap * sizeof *r);
    if (!r)
        return guild_err_set(err, "shard: out of memory");
    int rc = -1;
    for (int32_t il = 0; il < c->n_layer; il++)
        for (int k = 0; k < MODEL_EXPERT_TENSORS; k++) {
            const model_tensor_t *t = model_expert_tensor(&w->layers[il], k);
            if (k >= 3 && !t->data) /* the biases, where the model has them */
                continue;
            const gguf_tensor_t *gt = t->name ? gguf_find_tensor(g, t->name) : NULL;
            for (int32_t e = 0; e < c->n_expert;) {
                if (!owned[(size_t)il * (size_t)c->n_expert + (size_t)e]) {
                    e++;
                    continue;
                }
                int32_t e1 = e;
                while (e1 < c->n_expert && owned[(size_t)il * (size_t)c->n_expert + (size_t)e1])
                    e1++;
                if (!gt) {
                    guild_err_set(err, "shard: layer %d has no routed experts to receive", il);
                    goto out;
                }
                const uint64_t start = gt->offset + (uint64_t)e * t->mat_bytes;
                const uint64_t end = gt->offset + (uint64_t)e1 * t->mat_bytes;
                for (uint64_t off = start; off < end; off += CHUNK_BYTES) {
                    if (n == cap) {
                        range_t *nr = realloc(r, 2 * cap * sizeof *r);
                        if (!nr) {
                            guild_err_set(err, "shard: out of memory");
                            goto out;
                        }
                        r = nr;
                        cap *= 2;
                    }
                    r[n++] = (range_t){off, end - off < CHUNK_BYTES ? end - off : CHUNK_BYTES};
                }
                e = e1;
            }
        }
    /* WINDOW reads in flight; the answers come in order (one DEALER, one ROUTER thread) */
    size_t sent = 0, got = 0;
    while (got < n) {
        while (sent < n && sent - got < WINDOW) {
            if (data_send_shard_read(f->data, f->generation, f->worker, r[sent].offset, r[sent].length, err) < 0)
                goto out;
            sent++;
        }
        data_msg_t msg;
        if (next_data(f, &msg, err) < 0)
            goto out;
        const Guild__ShardData *d = msg.hdr->shard_data;
        int wrc = d->offset == r[got].offset && d->length == r[got].length
                      ? write_at(f->fd, msg.array[0], d->length, d->offset, err)
                      : guild_err_set(err, "shard: bytes %llu+%llu received for %llu+%llu",
                                      (unsigned long long)d->offset, (unsigned long long)d->length,
                                      (unsigned long long)r[got].offset, (unsigned long long)r[got].length);
        data_msg_close(&msg);
        if (wrc < 0)
            goto out;
        f->bytes += r[got].length;
        got++;
    }
    rc = 0;
out:
    free(r);
    return rc;
}

int shard_fetch_release(shard_fetch_t *f, guild_err_t *err)
{
    if (f->fd < 0 || f->file_size <= f->data_offset)
        return 0;
    if (fallocate(f->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)f->data_offset,
                  (off_t)(f->file_size - f->data_offset)) < 0)
        return guild_err_errno(err, errno, "shard: releasing the received bytes");
    return 0;
}
