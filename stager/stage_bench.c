/* stager/stage_bench.c — fill-rate benchmark of the staging ring (contract in stage_bench.h). */
#include "config.h"

#include "stager/stage_bench.h"

#include "core/gguf/gguf.h"
#include "ipc/stage_plan.h"
#include "ipc/stage_ring.h"
#include "ipc/stage_server.h"

#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One pass over the copies with every slot in flight; returns seconds, or -1 with err. */
static double one_pass(stage_ring_t *ring, const stage_copy_t *copies, int32_t n, stage_piece_t *pieces,
                       uint64_t *dst, guild_err_t *err)
{
    stage_cursor_t cur;
    stage_cursor_init(&cur, copies, n);
    uint64_t t0 = guild_now_ns();
    for (;;) {
        uint32_t np = 0;
        if (stage_ring_posted(ring) - stage_ring_released(ring) < stage_ring_n_slots(ring)) {
            np = stage_cursor_next(&cur, stage_ring_slot_bytes(ring), STAGE_RING_MAX_PIECES, pieces, dst);
            uint64_t seq;
            if (np > 0 && stage_ring_post(ring, pieces, np, &seq, err) < 0)
                return -1;
        }
        if (np == 0) {
            /* the ring is full or the copies are all posted: retire the oldest request */
            if (stage_ring_posted(ring) == stage_ring_released(ring))
                break;
            uint64_t seq = stage_ring_released(ring);
            if (stage_ring_wait(ring, seq, NULL, NULL, err) < 0)
                return -1;
            stage_ring_release(ring, seq);
        }
    }
    return (double)(guild_now_ns() - t0) * 1e-9;
}

/* The same bytes with one plain memcpy per copy into one buffer of slot_bytes, one thread: the ceiling of a
 * single copy thread on this machine, for comparison. Returns seconds. */
static double memcpy_pass(const char *base, const stage_copy_t *copies, int32_t n, char *buf, size_t slot_bytes)
{
    uint64_t t0 = guild_now_ns();
    for (int32_t i = 0; i < n; i++)
        for (uint64_t done = 0; done < copies[i].bytes;) {
            size_t k = copies[i].bytes - done < slot_bytes ? (size_t)(copies[i].bytes - done) : slot_bytes;
            memcpy(buf, base + copies[i].file_off + done, k);
            __asm__ volatile("" : : "r"(buf) : "memory"); /* the copy is the point: keep it */
            done += k;
        }
    return (double)(guild_now_ns() - t0) * 1e-9;
}

int stage_bench_run(const char *model, int threads, int runs, size_t slot_bytes, FILE *out, guild_err_t *err)
{
    int rc = -1;
    gguf_t *g = NULL;
    stage_ring_t *ring = NULL;
    stage_server_t *server = NULL;
    stage_copy_t *copies = NULL;
    stage_piece_t *pieces = NULL;
    uint64_t *dst = NULL;
    double *secs = NULL, *msecs = NULL;
    char *buf = NULL;
    if (gguf_new(&g, model, err) < 0)
        return -1;
    int64_t nt = gguf_n_tensors(g);
    copies = calloc((size_t)nt + 1, sizeof *copies);
    pieces = calloc(STAGE_RING_MAX_PIECES, sizeof *pieces);
    dst = calloc(STAGE_RING_MAX_PIECES, sizeof *dst);
    secs = calloc((size_t)runs, sizeof *secs);
    msecs = calloc((size_t)runs, sizeof *msecs);
    buf = malloc(slot_bytes);
    if (!copies || !pieces || !dst || !secs || !msecs || !buf) {
        guild_err_set(err, "bench: out of memory");
        goto out;
    }
    int32_t n = 0;
    uint64_t total = 0;
    const void *base = NULL;
    for (int64_t i = 0; i < nt; i++) {
        const gguf_tensor_t *t = gguf_tensor(g, i);
        if (!strstr(t->name, "_exps"))
            continue;
        base = (const char *)t->data - t->offset;
        copies[n++] = (stage_copy_t){t->offset, t->size, total};
        total += t->size;
    }
    if (n == 0) {
        guild_err_set(err, "%s: no routed-expert tensors (*_exps) to stage", model);
        goto out;
    }
    if (stage_ring_create(&ring, 3, slot_bytes, NULL, err) < 0 ||
        stage_server_start(&server, ring, base, (size_t)gguf_file_size(g), threads, err) < 0)
        goto out;
    if (one_pass(ring, copies, n, pieces, dst, err) < 0) /* warm-up: page cache, ring pages */
        goto out;
    for (int r = 0; r < runs; r++)
        if ((secs[r] = one_pass(ring, copies, n, pieces, dst, err)) < 0)
            goto out;
    memset(buf, 1, slot_bytes);
    for (int r = 0; r < runs; r++)
        msecs[r] = memcpy_pass(base, copies, n, buf, slot_bytes);
    qsort(secs, (size_t)runs, sizeof *secs, cmp_double);
    qsort(msecs, (size_t)runs, sizeof *msecs, cmp_double);
    double med = runs % 2 ? secs[runs / 2] : 0.5 * (secs[runs / 2 - 1] + secs[runs / 2]);
    double mmed = runs % 2 ? msecs[runs / 2] : 0.5 * (msecs[runs / 2 - 1] + msecs[runs / 2]);
    fprintf(out,
            "stager fill: model=%s expert_tensors=%d bytes=%llu threads=%d slots=3x%zuMiB runs=%d "
            "median_GBps=%.2f min_GBps=%.2f max_GBps=%.2f memcpy_1thread_GBps=%.2f\n",
            model, (int)n, (unsigned long long)total, threads, slot_bytes >> 20, runs, (double)total / med / 1e9,
            (double)total / secs[runs - 1] / 1e9, (double)total / secs[0] / 1e9, (double)total / mmed / 1e9);
    rc = 0;
out:
    stage_server_stop(&server);
    stage_ring_destroy(&ring);
    gguf_destroy(&g);
    free(copies);
    free(pieces);
    free(dst);
    free(secs);
    free(msecs);
    free(buf);
    return rc;
}
