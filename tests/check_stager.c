/* Tests for stager/: the staging ring's layout and attach checks, the request planner (splitting, merging,
 * alignment), the in-process server filling slots from a file of random bytes (compared byte for byte),
 * refusals, timeouts and dead servers, and a real guild-stager process killed mid-stream. */
#include "config.h"

#include "core/util/err.h"
#include "core/util/log.h"
#include "gpu-worker/dense/cuda/cuda_stage.h" /* against tests/stager-mock/cuda_runtime_api.h */
#include "ipc/arena.h"
#include "ipc/msg.h"
#include "ipc/stage_copy.h"
#include "ipc/stage_plan.h"
#include "ipc/stage_ring.h"
#include "ipc/stage_server.h"
#include "tests/check_run.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#define MS 1000000ull

static const guild_arena_opts_t small_opts = {GUILD_ARENA_PAGES_SMALL, 0, NULL, 0, 0};

/* ---------------------------------------------------------------- fixtures */

/* A temp file of n random bytes (deterministic), mapped read-only. */
typedef struct test_file {
    char path[64];
    int fd;
    uint8_t *map;
    size_t n;
} test_file_t;

static void test_file_make(test_file_t *f, size_t n, uint32_t seed)
{
    snprintf(f->path, sizeof f->path, "/tmp/check_stager_XXXXXX");
    f->fd = mkstemp(f->path);
    ck_assert_int_ge(f->fd, 0);
    uint8_t *buf = malloc(n);
    ck_assert_ptr_nonnull(buf);
    uint32_t x = seed | 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        buf[i] = (uint8_t)(x >> 7);
    }
    ck_assert_int_eq(write(f->fd, buf, n), (ssize_t)n);
    free(buf);
    f->n = n;
    f->map = mmap(NULL, n, PROT_READ, MAP_SHARED, f->fd, 0);
    ck_assert(f->map != MAP_FAILED);
}

static void test_file_free(test_file_t *f)
{
    munmap(f->map, f->n);
    close(f->fd);
    unlink(f->path);
}

static stage_ring_t *make_ring(uint32_t n_slots, size_t slot_bytes)
{
    guild_err_t err = {{0}};
    stage_ring_t *r = NULL;
    ck_assert_msg(stage_ring_create(&r, n_slots, slot_bytes, &small_opts, &err) == 0, "create: %s", err.msg);
    return r;
}

static stage_wait_t quick_wait(void)
{
    return (stage_wait_t){20000, 5000 * MS, 300 * MS};
}

/* Streams copies through the ring keeping every slot busy; each filled slot is copied out to dst as the
 * GPU's DMA would. Returns 0, or -1 with err. */
static int stream(stage_ring_t *r, const stage_copy_t *copies, int32_t n, uint8_t *dst, uint64_t *max_in_flight,
                  guild_err_t *err)
{
    static stage_piece_t pieces[STAGE_RING_MAX_SLOTS][STAGE_RING_MAX_PIECES];
    static uint64_t dsts[STAGE_RING_MAX_SLOTS][STAGE_RING_MAX_PIECES];
    static uint32_t counts[STAGE_RING_MAX_SLOTS];
    uint32_t ns = stage_ring_n_slots(r);
    stage_cursor_t cur;
    stage_cursor_init(&cur, copies, n);
    stage_wait_t w = quick_wait();
    int more = 1;
    for (;;) {
        uint64_t posted = stage_ring_posted(r), released = stage_ring_released(r);
        if (more && posted - released < ns) {
            uint32_t s = (uint32_t)(posted % ns);
            counts[s] = stage_cursor_next(&cur, stage_ring_slot_bytes(r), STAGE_RING_MAX_PIECES, pieces[s], dsts[s]);
            if (counts[s] == 0) {
                more = 0;
                continue;
            }
            uint64_t seq;
            if (stage_ring_post(r, pieces[s], counts[s], &seq, err) < 0)
                return -1;
            if (max_in_flight && seq + 1 - released > *max_in_flight)
                *max_in_flight = seq + 1 - released;
            continue;
        }
        if (posted == released)
            return 0;
        void *data;
        if (stage_ring_wait(r, released, &w, &data, err) < 0)
            return -1;
        uint32_t s = (uint32_t)(released % ns);
        for (uint32_t i = 0; i < counts[s]; i++)
            memcpy(dst + dsts[s][i], (uint8_t *)data + pieces[s][i].slot_off, pieces[s][i].bytes);
        stage_ring_release(r, released);
    }
}

/* ---------------------------------------------------------------- ring layout */

START_TEST(test_ring_create_attach)
{
    stage_ring_t *r = make_ring(3, 100000);
    ck_assert_uint_eq(stage_ring_n_slots(r), 3);
    ck_assert_uint_eq(stage_ring_slot_bytes(r), 100000);
    ck_assert_uint_eq((uintptr_t)stage_ring_slot(r, 0) % 4096, 0);
    ck_assert_uint_eq((uintptr_t)stage_ring_map_base(r) % 4096, 0);
    ck_assert_uint_ge(stage_ring_map_size(r), stage_ring_memsize(3, 100000));
    ck_assert_uint_eq((uintptr_t)&stage_ring_ctl(r, 1)->done_seq % 64, 0);
    /* slots do not overlap and lie inside the mapping */
    char *end = (char *)stage_ring_map_base(r) + stage_ring_map_size(r);
    ck_assert((char *)stage_ring_slot(r, 2) + 100000 <= end);
    ck_assert((char *)stage_ring_slot(r, 1) >= (char *)stage_ring_slot(r, 0) + 100000);
    memset(stage_ring_slot(r, 2), 0xab, 100000);

    guild_err_t err = {{0}};
    stage_ring_t *b = NULL;
    ck_assert_msg(stage_ring_attach(&b, stage_ring_name(r), &err) == 0, "attach: %s", err.msg);
    ck_assert_uint_eq(stage_ring_n_slots(b), 3);
    ck_assert_uint_eq(stage_ring_slot_bytes(b), 100000);
    ck_assert_uint_eq(((uint8_t *)stage_ring_slot(b, 2))[99999], 0xab);
    stage_ring_destroy(&b);
    ck_assert_ptr_null(b);
    stage_ring_destroy(&r);
    stage_ring_destroy(&r); /* NULL-safe */
}
END_TEST

START_TEST(test_ring_create_bad_args)
{
    guild_err_t err = {{0}};
    stage_ring_t *r = NULL;
    ck_assert_int_eq(stage_ring_create(&r, 1, 4096, &small_opts, &err), -1);
    ck_assert_msg(strstr(err.msg, "1 slots, need 2..64"), "%s", err.msg);
    ck_assert_int_eq(stage_ring_create(&r, 65, 4096, &small_opts, &err), -1);
    ck_assert_int_eq(stage_ring_create(&r, 2, 0, &small_opts, &err), -1);
    ck_assert_msg(strstr(err.msg, "slot size 0"), "%s", err.msg);
    ck_assert_ptr_null(r);
}
END_TEST

/* Validation of a header copied out of a real ring, one field broken at a time. */
START_TEST(test_ring_validate_rejects)
{
    stage_ring_t *r = make_ring(2, 8192);
    stage_ring_header_t *h = stage_ring_header(r);
    size_t region = h->region_size;
    guild_err_t err = {{0}};
    ck_assert_int_eq(stage_ring_validate(h, region, &err), 0);
    static _Alignas(64) uint8_t buf[STAGE_RING_HEADER_BYTES];
    stage_ring_header_t *c = (stage_ring_header_t *)buf;
#define CASE(stmt, want)                                                                          \
    do {                                                                                          \
        memcpy(buf, h, sizeof buf);                                                               \
        stmt;                                                                                     \
        ck_assert_int_eq(stage_ring_validate(c, region, &err), -1);                               \
        ck_assert_msg(strstr(err.msg, want), "expected '%s' in: %s", want, err.msg);              \
    } while (0)
    CASE(atomic_store(&c->magic, 0x1234), "bad magic 0x0000000000001234: not a staging ring");
    CASE(c->version = 7, "ring version 7, this build reads version 1");
    CASE(c->header_size = 12, "ring header size 12");
    CASE(c->n_slots = 1, "1 slots, expected 2..64");
    CASE(c->n_slots = 100, "100 slots");
    CASE(c->max_pieces = 10, "10 pieces per request");
    CASE(c->region_size += 4096, "its region has");
    CASE(c->slot_stride = 4096, "is inconsistent");
    CASE(c->slot_stride += 1, "is inconsistent");
    CASE(c->data_offset += 4096, "out of place");
    CASE(c->slot_bytes = c->slot_stride = (uint64_t)1 << 30, "reach past the region");
#undef CASE
    ck_assert_int_eq(stage_ring_validate(h, 100, &err), -1);
    ck_assert_msg(strstr(err.msg, "too small"), "%s", err.msg);
    stage_ring_destroy(&r);
}
END_TEST

START_TEST(test_ring_attach_rejects)
{
    guild_err_t err = {{0}};
    stage_ring_t *b = NULL;
    /* an arena without a ring */
    guild_arena_request_t req = {GUILD_ARENA_KIND_TEST, 0, 8192};
    guild_arena_t *a = guild_arena_create(&req, 1, &small_opts, &err);
    ck_assert_ptr_nonnull(a);
    guild_arena_publish(a);
    ck_assert_int_eq(stage_ring_attach(&b, guild_arena_name(a), &err), -1);
    ck_assert_msg(strstr(err.msg, "holds no staging ring") && strstr(err.msg, guild_arena_name(a)), "%s", err.msg);
    guild_arena_destroy(&a);
    /* not a file */
    ck_assert_int_eq(stage_ring_attach(&b, "/nonexistent/ring", &err), -1);
    ck_assert_msg(strstr(err.msg, "/nonexistent/ring"), "%s", err.msg);
    /* a ring whose header is broken in place */
    stage_ring_t *r = make_ring(2, 4096);
    stage_ring_header(r)->version = 99;
    ck_assert_int_eq(stage_ring_attach(&b, stage_ring_name(r), &err), -1);
    ck_assert_msg(strstr(err.msg, "stage ring /proc/") && strstr(err.msg, "ring version 99"), "%s", err.msg);
    ck_assert_ptr_null(b);
    stage_ring_destroy(&r);
}
END_TEST

/* ---------------------------------------------------------------- planner */

START_TEST(test_plan_split_merge_align)
{
    stage_copy_t copies[] = {
        {1000, 10, 0},     /* a small piece */
        {1010, 20, 10},    /* continues it in the file and at the destination: merged */
        {5000, 0, 30},     /* zero length: skipped */
        {7000, 300, 100},  /* a new piece, aligned in the slot */
        {9000, 1000, 500}, /* larger than what is left: split, and larger than a slot */
    };
    stage_piece_t p[8];
    uint64_t d[8];
    stage_cursor_t c;
    stage_cursor_init(&c, copies, 5);
    uint32_t n = stage_cursor_next(&c, 512, 8, p, d);
    ck_assert_uint_eq(n, 3);
    ck_assert(p[0].file_off == 1000 && p[0].bytes == 30 && p[0].slot_off == 0 && d[0] == 0);
    ck_assert(p[1].file_off == 7000 && p[1].bytes == 300 && p[1].slot_off == 64 && d[1] == 100);
    ck_assert(p[2].file_off == 9000 && p[2].slot_off == 384 && p[2].bytes == 128 && d[2] == 500);
    n = stage_cursor_next(&c, 512, 8, p, d);
    ck_assert_uint_eq(n, 1);
    ck_assert(p[0].file_off == 9128 && p[0].bytes == 512 && p[0].slot_off == 0 && d[0] == 628);
    n = stage_cursor_next(&c, 512, 8, p, d);
    ck_assert_uint_eq(n, 1);
    ck_assert(p[0].file_off == 9640 && p[0].bytes == 360 && d[0] == 1140);
    ck_assert_uint_eq(stage_cursor_next(&c, 512, 8, p, d), 0);
    ck_assert_uint_eq(stage_cursor_next(&c, 512, 8, p, d), 0);

    /* the piece count limit cuts a request */
    stage_copy_t many[10];
    for (int i = 0; i < 10; i++)
        many[i] = (stage_copy_t){(uint64_t)i * 100, 10, (uint64_t)i * 1000};
    stage_cursor_init(&c, many, 10);
    ck_assert_uint_eq(stage_cursor_next(&c, 1 << 20, 4, p, d), 4);
    ck_assert_uint_eq(stage_cursor_next(&c, 1 << 20, 4, p, d), 4);
    ck_assert_uint_eq(stage_cursor_next(&c, 1 << 20, 4, p, d), 2);
    ck_assert(p[1].file_off == 900 && d[1] == 9000);
    ck_assert_uint_eq(stage_cursor_next(&c, 1 << 20, 4, p, d), 0);
}
END_TEST

/* ---------------------------------------------------------------- copy kernel */

START_TEST(test_copy_stream_matches_memcpy)
{
    /* every destination and source alignment, sizes around the streaming threshold and the 64-byte loop,
     * guard bytes on both sides */
    enum { MAX = 3 * 4096 + 300, GUARD = 64 };
    uint8_t *src = malloc(MAX + 64), *got = malloc(MAX + 64 + 2 * GUARD), *want = malloc(MAX + 64 + 2 * GUARD);
    for (size_t i = 0; i < MAX + 64; i++)
        src[i] = (uint8_t)(i * 131 + 7);
    const size_t sizes[] = {0, 1, 15, 63, 64, 4095, 4096, 4097, 4096 + 63, 4096 + 64, 8191, 3 * 4096 + 300};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
        for (size_t da = 0; da < 16; da += 3)
            for (size_t sa = 0; sa < 16; sa += 5) {
                size_t n = sizes[k];
                memset(got, 0xee, MAX + 64 + 2 * GUARD);
                memset(want, 0xee, MAX + 64 + 2 * GUARD);
                stage_copy_stream(got + GUARD + da, src + sa, n);
                memcpy(want + GUARD + da, src + sa, n);
                ck_assert_msg(!memcmp(got, want, MAX + 64 + 2 * GUARD), "size %zu, dst +%zu, src +%zu", n, da, sa);
            }
    free(src);
    free(got);
    free(want);
}
END_TEST

/* ---------------------------------------------------------------- in-process server */

/* Random copies over the file: pieces straddling the copy threads' share boundaries, many tiny pieces (more
 * than a request holds), zero-length ones, and pieces larger than a slot. */
static void fill_case(int threads, uint32_t n_slots, size_t slot_bytes, int32_t n_copies, size_t max_piece)
{
    test_file_t f;
    test_file_make(&f, (size_t)3 << 20, 12345u + (uint32_t)threads);
    stage_ring_t *r = make_ring(n_slots, slot_bytes);
    guild_err_t err = {{0}};
    stage_server_t *s = NULL;
    ck_assert_msg(stage_server_start(&s, r, f.map, f.n, threads, &err) == 0, "%s", err.msg);

    stage_copy_t *copies = calloc((size_t)n_copies, sizeof *copies);
    uint64_t dst_bytes = 0;
    uint32_t x = 777;
    for (int32_t i = 0; i < n_copies; i++) {
        x = x * 1103515245u + 12345u;
        uint64_t bytes = (i % 17 == 5) ? 0 : (x >> 8) % (max_piece + 1);
        x = x * 1103515245u + 12345u;
        uint64_t off = (uint64_t)(x >> 4) % (f.n - bytes + 1);
        copies[i] = (stage_copy_t){off, bytes, dst_bytes};
        dst_bytes += bytes + (i % 3); /* gaps at the destination, some copies adjacent */
    }
    uint8_t *dst = calloc(1, dst_bytes + 1), *want = calloc(1, dst_bytes + 1);
    for (int32_t i = 0; i < n_copies; i++)
        memcpy(want + copies[i].dst_off, f.map + copies[i].file_off, copies[i].bytes);
    uint64_t in_flight = 0;
    for (int round = 0; round < 2; round++) { /* twice: every slot reused */
        memset(dst, 0, dst_bytes + 1);
        ck_assert_msg(stream(r, copies, n_copies, dst, &in_flight, &err) == 0, "%s", err.msg);
        ck_assert_msg(!memcmp(dst, want, dst_bytes + 1), "filled bytes differ (threads %d)", threads);
    }
    ck_assert_uint_eq(in_flight, n_slots);
    stage_server_stats_t st;
    stage_server_stats(s, &st);
    ck_assert_uint_eq(st.requests, stage_ring_posted(r));
    ck_assert_uint_eq(st.refused, 0);
    ck_assert_uint_gt(st.requests, n_slots);
    stage_server_stop(&s);
    ck_assert_ptr_null(s);
    ck_assert_int_eq(atomic_load(&stage_ring_header(r)->server_pid), 0);
    free(copies);
    free(dst);
    free(want);
    stage_ring_destroy(&r);
    test_file_free(&f);
}

START_TEST(test_fill_one_thread)
{
    fill_case(1, 2, 256 << 10, 300, 40000);
}
END_TEST

START_TEST(test_fill_threads_big_pieces)
{
    /* pieces up to 1 MiB through 192 KiB slots: split over several slots */
    fill_case(3, 3, 192 << 10, 40, 1 << 20);
}
END_TEST

START_TEST(test_fill_many_pieces)
{
    /* 10000 tiny pieces: more than one request holds */
    fill_case(2, 3, 1 << 20, 10000, 100);
}
END_TEST

START_TEST(test_zero_length_and_full)
{
    test_file_t f;
    test_file_make(&f, 65536, 9);
    stage_ring_t *r = make_ring(2, 4096);
    guild_err_t err = {{0}};
    stage_server_t *s = NULL;
    ck_assert_int_eq(stage_server_start(&s, r, f.map, f.n, 2, &err), 0);
    stage_wait_t w = quick_wait();
    uint64_t a, b, c;
    ck_assert_int_eq(stage_ring_post(r, NULL, 0, &a, &err), 0);
    stage_piece_t p = {100, 4000, 96};
    ck_assert_int_eq(stage_ring_post(r, &p, 1, &b, &err), 0);
    ck_assert_uint_eq(b, a + 1);
    /* both slots are in use: a third request is refused by the client side */
    ck_assert_int_eq(stage_ring_post(r, &p, 1, &c, &err), -1);
    ck_assert_msg(strstr(err.msg, "all 2 slots are in use"), "%s", err.msg);
    ck_assert_int_eq(stage_ring_wait(r, a, &w, NULL, &err), 0);
    stage_ring_release(r, a);
    void *data = NULL;
    ck_assert_int_eq(stage_ring_wait(r, b, &w, &data, &err), 0);
    ck_assert(!memcmp((char *)data + 96, f.map + 100, 4000));
    stage_ring_release(r, b);
    /* a piece that does not fit the slot is refused before posting */
    stage_piece_t big = {0, 4000, 100};
    ck_assert_int_eq(stage_ring_post(r, &big, 1, &c, &err), -1);
    ck_assert_msg(strstr(err.msg, "does not fit a slot of 4096 bytes"), "%s", err.msg);
    ck_assert_uint_eq(stage_ring_posted(r), 2);
    stage_server_stop(&s);
    stage_ring_destroy(&r);
    test_file_free(&f);
}
END_TEST

START_TEST(test_refused_request)
{
    test_file_t f;
    test_file_make(&f, 65536, 10);
    stage_ring_t *r = make_ring(2, 8192);
    guild_err_t err = {{0}};
    stage_server_t *s = NULL;
    ck_assert_int_eq(stage_server_start(&s, r, f.map, f.n, 2, &err), 0);
    stage_wait_t w = quick_wait();
    stage_piece_t p[2] = {{0, 64, 0}, {65500, 100, 64}}; /* the second reaches past the file */
    uint64_t seq;
    ck_assert_int_eq(stage_ring_post(r, p, 2, &seq, &err), 0);
    ck_assert_int_eq(stage_ring_wait(r, seq, &w, NULL, &err), -1);
    ck_assert_msg(strstr(err.msg, "refused request 0: piece 1 (100 bytes at file offset 65500): past the end of "
                                  "the served file"), "%s", err.msg);
    stage_ring_release(r, seq);
    p[1] = (stage_piece_t){0, 100, 64};
    ck_assert_int_eq(stage_ring_post(r, p, 2, &seq, &err), 0);
    /* the ring keeps working after a refusal */
    void *data;
    ck_assert_int_eq(stage_ring_wait(r, seq, &w, &data, &err), 0);
    ck_assert(!memcmp((char *)data + 64, f.map, 100));
    stage_ring_release(r, seq);
    stage_server_stats_t st;
    stage_server_stats(s, &st);
    ck_assert_uint_eq(st.refused, 1);
    ck_assert_uint_eq(st.requests, 2);
    stage_server_stop(&s);
    stage_ring_destroy(&r);
    test_file_free(&f);
}
END_TEST

START_TEST(test_server_refuses_bad_slot_range)
{
    /* write a request straight into the slot, as a broken client would */
    test_file_t f;
    test_file_make(&f, 65536, 11);
    stage_ring_t *r = make_ring(2, 4096);
    guild_err_t err = {{0}};
    stage_server_t *s = NULL;
    ck_assert_int_eq(stage_server_start(&s, r, f.map, f.n, 1, &err), 0);
    stage_wait_t w = quick_wait();
    stage_piece_t ok = {0, 10, 0};
    uint64_t seq;
    ck_assert_int_eq(stage_ring_post(r, &ok, 1, &seq, &err), 0);
    ck_assert_int_eq(stage_ring_wait(r, seq, &w, NULL, &err), 0);
    stage_ring_release(r, seq);
    /* seq 1 goes to slot 1: break its piece list in place after posting is impossible to do race-free, so
     * post a valid one into slot 1 first, then corrupt slot 0's list before posting seq 2 through the same
     * path the server reads */
    ck_assert_int_eq(stage_ring_post(r, &ok, 1, &seq, &err), 0);
    ck_assert_int_eq(stage_ring_wait(r, seq, &w, NULL, &err), 0);
    stage_ring_release(r, seq);
    stage_slot_ctl_t *c = stage_ring_ctl(r, 0);
    c->seq = 2;
    c->n_pieces = 1;
    c->pieces[0] = (stage_piece_t){0, 100, 4090};
    /* ring by hand, as stage_ring_post would (the client handle's own count is bypassed: not used after) */
    stage_ring_header_t *h = stage_ring_header(r);
    guild_doorbell_ring(&h->posted, 3);
    ck_assert_int_eq(guild_doorbell_wait(&h->filled, 3, &(guild_wait_policy_t){0, 2000 * MS}, NULL, NULL, "filled",
                                         &err), GUILD_WAIT_OK);
    ck_assert_int_eq(c->status, STAGE_BAD_SLOT_RANGE);
    /* too many pieces */
    c = stage_ring_ctl(r, 1);
    c->seq = 3;
    c->n_pieces = STAGE_RING_MAX_PIECES + 1;
    guild_doorbell_ring(&h->posted, 4);
    ck_assert_int_eq(guild_doorbell_wait(&h->filled, 4, &(guild_wait_policy_t){0, 2000 * MS}, NULL, NULL, "filled",
                                         &err), GUILD_WAIT_OK);
    ck_assert_int_eq(c->status, STAGE_BAD_COUNT);
    stage_server_stats_t st;
    stage_server_stats(s, &st);
    ck_assert_uint_eq(st.refused, 2);
    stage_server_stop(&s);
    stage_ring_destroy(&r);
    test_file_free(&f);
}
END_TEST

START_TEST(test_attach_inherits_in_flight)
{
    /* a client dies with requests in flight; its successor attaches, cannot reuse those slots until it drains
     * them, then works */
    test_file_t f;
    test_file_make(&f, 65536, 17);
    stage_ring_t *a = make_ring(2, 4096);
    guild_err_t err = {{0}};
    stage_piece_t p = {500, 1000, 0};
    uint64_t seq;
    ck_assert_int_eq(stage_ring_post(a, &p, 1, &seq, &err), 0);
    ck_assert_int_eq(stage_ring_post(a, &p, 1, &seq, &err), 0);
    stage_ring_t *b = NULL;
    ck_assert_msg(stage_ring_attach(&b, stage_ring_name(a), &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(stage_ring_posted(b), 2);
    ck_assert_uint_eq(stage_ring_released(b), 0);
    ck_assert_int_eq(stage_ring_post(b, &p, 1, &seq, &err), -1);
    ck_assert_msg(strstr(err.msg, "all 2 slots are in use"), "%s", err.msg);
    stage_wait_t w = quick_wait();
    stage_server_t *s = NULL;
    ck_assert_int_eq(stage_server_start(&s, b, f.map, f.n, 2, &err), 0);
    ck_assert_msg(stage_ring_drain(b, &w, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(stage_ring_released(b), 2);
    ck_assert_int_eq(stage_ring_drain(b, &w, &err), 0); /* nothing left: no-op */
    p.file_off = 2000;
    void *data;
    ck_assert_int_eq(stage_ring_post(b, &p, 1, &seq, &err), 0);
    ck_assert_uint_eq(seq, 2);
    ck_assert_int_eq(stage_ring_wait(b, seq, &w, &data, &err), 0);
    ck_assert(!memcmp(data, f.map + 2000, 1000));
    stage_ring_release(b, seq);
    stage_server_stop(&s);
    /* counters that make no sense are refused on attach */
    guild_doorbell_ring(&stage_ring_header(b)->filled, 9);
    stage_ring_t *c = NULL;
    ck_assert_int_eq(stage_ring_attach(&c, stage_ring_name(a), &err), -1);
    ck_assert_msg(strstr(err.msg, "3 requests posted and 9 filled: inconsistent"), "%s", err.msg);
    stage_ring_destroy(&b);
    stage_ring_destroy(&a);
    test_file_free(&f);
}
END_TEST

START_TEST(test_stop_word)
{
    test_file_t f;
    test_file_make(&f, 4096, 12);
    stage_ring_t *r = make_ring(2, 4096);
    guild_err_t err = {{0}};
    stage_server_t *s = NULL;
    ck_assert_int_eq(stage_server_start(&s, r, f.map, f.n, 2, &err), 0);
    ck_assert_int_eq(atomic_load(&stage_ring_header(r)->server_pid), getpid());
    ck_assert_uint_eq(atomic_load(&stage_ring_header(r)->server_threads), 2);
    ck_assert_int_eq(stage_server_running(s), 1);
    stage_ring_request_stop(r);
    uint64_t t0 = guild_now_ns();
    while (stage_server_running(s) && guild_now_ns() - t0 < 2000 * MS)
        usleep(1000);
    ck_assert_int_eq(stage_server_running(s), 0);
    ck_assert_uint_lt(guild_now_ns() - t0, 500 * MS);
    stage_server_stop(&s);
    stage_ring_destroy(&r);
    test_file_free(&f);
}
END_TEST

/* ---------------------------------------------------------------- timeouts and dead servers */

START_TEST(test_no_server)
{
    stage_ring_t *r = make_ring(2, 4096);
    guild_err_t err = {{0}};
    uint64_t seq;
    ck_assert_int_eq(stage_ring_post(r, NULL, 0, &seq, &err), 0);
    stage_wait_t w = {0, 5000 * MS, 100 * MS};
    uint64_t t0 = guild_now_ns();
    ck_assert_int_eq(stage_ring_wait(r, seq, &w, NULL, &err), -1);
    uint64_t dt = guild_now_ns() - t0;
    ck_assert_msg(strstr(err.msg, "no stager serves ring /proc/"), "%s", err.msg);
    ck_assert_uint_ge(dt, 100 * MS);
    ck_assert_uint_lt(dt, 1000 * MS);
    stage_ring_destroy(&r);
}
END_TEST

START_TEST(test_timeout_while_alive)
{
    /* a live server (heartbeat fresh) that does not fill in time: the deadline decides */
    stage_ring_t *r = make_ring(2, 4096);
    stage_ring_header_t *h = stage_ring_header(r);
    guild_err_t err = {{0}};
    atomic_store(&h->server_pid, getpid());
    uint64_t seq;
    ck_assert_int_eq(stage_ring_post(r, NULL, 0, &seq, &err), 0);
    /* keep beating from a child thread's stand-in: the liveness window exceeds the timeout */
    atomic_store(&h->beat_ns, guild_now_ns());
    stage_wait_t w = {0, 150 * MS, 10000 * MS};
    uint64_t t0 = guild_now_ns();
    ck_assert_int_eq(stage_ring_wait(r, seq, &w, NULL, &err), -1);
    uint64_t dt = guild_now_ns() - t0;
    ck_assert_msg(strstr(err.msg, "request 0 not filled within 150 ms"), "%s", err.msg);
    ck_assert_uint_ge(dt, 150 * MS);
    ck_assert_uint_lt(dt, 1000 * MS);
    stage_ring_destroy(&r);
}
END_TEST

START_TEST(test_hung_server)
{
    /* a server that registered and then stopped beating (stopped, not dead) */
    stage_ring_t *r = make_ring(2, 4096);
    stage_ring_header_t *h = stage_ring_header(r);
    guild_err_t err = {{0}};
    atomic_store(&h->server_pid, getpid());
    atomic_store(&h->beat_ns, guild_now_ns());
    uint64_t seq;
    ck_assert_int_eq(stage_ring_post(r, NULL, 0, &seq, &err), 0);
    stage_wait_t w = {0, 10000 * MS, 150 * MS};
    uint64_t t0 = guild_now_ns();
    ck_assert_int_eq(stage_ring_wait(r, seq, &w, NULL, &err), -1);
    ck_assert_msg(strstr(err.msg, "is dead or hung: no heartbeat for"), "%s", err.msg);
    char want[64];
    snprintf(want, sizeof want, "stager pid %d serving ring", (int)getpid());
    ck_assert_msg(strstr(err.msg, want), "%s", err.msg);
    ck_assert_uint_lt(guild_now_ns() - t0, 1000 * MS);
    stage_ring_destroy(&r);
}
END_TEST

/* A forked server process killed with SIGKILL mid-stream: the client's next wait fails naming it. Reaped
 * (gone) or not yet reaped (a zombie: no heartbeat), both within the liveness window. */
static void kill_case(int reap, const char *stager_bin)
{
    test_file_t f;
    test_file_make(&f, (size_t)2 << 20, 13);
    stage_ring_t *r = make_ring(3, 256 << 10);
    guild_err_t err = {{0}};
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (stager_bin) {
            char ring[300];
            snprintf(ring, sizeof ring, "%s", stage_ring_name(r));
            execl(stager_bin, stager_bin, "-m", f.path, "--ring", ring, "--threads", "2", (char *)NULL);
            _exit(127);
        }
        stage_ring_t *b = NULL;
        stage_server_t *s = NULL;
        if (stage_ring_attach(&b, stage_ring_name(r), &err) < 0 ||
            stage_server_start(&s, b, f.map, f.n, 2, &err) < 0)
            _exit(10);
        for (;;)
            pause();
    }
    /* wait until the server runs */
    uint64_t t0 = guild_now_ns();
    while (atomic_load(&stage_ring_header(r)->server_pid) != pid && guild_now_ns() - t0 < 5000 * MS)
        usleep(1000);
    ck_assert_int_eq(atomic_load(&stage_ring_header(r)->server_pid), pid);

    /* stream whole-file copies in 64 KiB pieces, checking each slot; kill the server after a few requests */
    /* Before the kill the server is alive: a generous liveness, so that a loaded machine (CI runs the tests in
     * parallel, with ASan) that leaves its dispatcher unscheduled for a few hundred ms does not read as death.
     * After the kill, the short liveness under test. */
    stage_wait_t alive = {20000, 5000 * MS, 3000 * MS}, w = {20000, 5000 * MS, 300 * MS};
    uint64_t done = 0, killed_at = 0;
    int failed = 0;
    for (uint64_t k = 0; k < 100000 && !failed; k++) {
        if (stage_ring_posted(r) - stage_ring_released(r) < 3) {
            uint64_t off = (stage_ring_posted(r) * 65536) % f.n, seq;
            stage_piece_t p = {off, 65536, 0};
            ck_assert_int_eq(stage_ring_post(r, &p, 1, &seq, &err), 0);
            continue;
        }
        uint64_t seq = stage_ring_released(r);
        void *data;
        if (stage_ring_wait(r, seq, killed_at ? &w : &alive, &data, &err) < 0) {
            failed = 1;
            break;
        }
        ck_assert(!memcmp(data, f.map + (seq * 65536) % f.n, 65536));
        stage_ring_release(r, seq);
        if (++done == 20) {
            ck_assert_int_eq(kill(pid, SIGKILL), 0);
            killed_at = guild_now_ns();
            if (reap) {
                int status;
                ck_assert_int_eq(waitpid(pid, &status, 0), pid);
                ck_assert(WIFSIGNALED(status));
            }
        }
    }
    ck_assert_msg(failed, "the client never noticed the dead stager");
    ck_assert_msg(killed_at > 0, "a wait failed before the stager was killed: %s", err.msg);
    ck_assert_uint_lt(guild_now_ns() - killed_at, 2000 * MS);
    char want[64];
    snprintf(want, sizeof want, "stager pid %d serving ring", (int)pid);
    ck_assert_msg(strstr(err.msg, want), "%s", err.msg);
    ck_assert_msg(strstr(err.msg, reap ? "is gone" : "no heartbeat"), "%s", err.msg);
    if (!reap)
        waitpid(pid, NULL, 0);
    stage_ring_destroy(&r);
    test_file_free(&f);
}

START_TEST(test_killed_server_reaped)
{
    kill_case(1, NULL);
}
END_TEST

START_TEST(test_killed_server_zombie)
{
    kill_case(0, NULL);
}
END_TEST

START_TEST(test_guild_stager_process_killed)
{
    char bin[1024];
    snprintf(bin, sizeof bin, "%s/guild-stager", GUILD_BUILDDIR);
    ck_assert_msg(access(bin, X_OK) == 0, "%s is not built", bin);
    kill_case(1, bin);
}
END_TEST

START_TEST(test_guild_stager_process_stops)
{
    /* the real process serves a ring, then stops on the ring's stop word and exits 0 */
    char bin[1024];
    snprintf(bin, sizeof bin, "%s/guild-stager", GUILD_BUILDDIR);
    test_file_t f;
    test_file_make(&f, 1 << 20, 14);
    stage_ring_t *r = make_ring(2, 1 << 20);
    guild_err_t err = {{0}};
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        /* the ring as an inherited descriptor (--ring fd:N) */
        char ring[32];
        int fd = open(stage_ring_name(r), O_RDWR);
        if (fd < 0)
            _exit(126);
        snprintf(ring, sizeof ring, "fd:%d", fd);
        execl(bin, bin, "-m", f.path, "--ring", ring, "--threads", "2", (char *)NULL);
        _exit(127);
    }
    stage_piece_t p = {0, f.n, 0};
    uint64_t seq;
    ck_assert_int_eq(stage_ring_post(r, &p, 1, &seq, &err), 0);
    stage_wait_t w = {20000, 5000 * MS, 3000 * MS}; /* the process may take a moment to start */
    void *data;
    ck_assert_msg(stage_ring_wait(r, seq, &w, &data, &err) == 0, "%s", err.msg);
    ck_assert(!memcmp(data, f.map, f.n));
    stage_ring_release(r, seq);
    stage_ring_request_stop(r);
    int status = 0;
    uint64_t t0 = guild_now_ns();
    pid_t got = 0;
    while ((got = waitpid(pid, &status, WNOHANG)) == 0 && guild_now_ns() - t0 < 3000 * MS)
        usleep(5000);
    ck_assert_int_eq(got, pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ck_assert_int_eq(atomic_load(&stage_ring_header(r)->server_pid), 0);
    stage_ring_destroy(&r);
    test_file_free(&f);
}
END_TEST

/* Receives the next envelope of the given body from the stager (skipping repeated Registers), within 3 s. */
static Guild__Envelope *recv_body(void *router, Guild__Envelope__BodyCase body, guild_msg_peer_t *from)
{
    uint64_t t0 = guild_now_ns();
    while (guild_now_ns() - t0 < 3000 * MS) {
        Guild__Envelope *env = NULL;
        guild_err_t err = {{0}};
        guild_msg_result_t r = guild_msg_recv(router, 100, from, &env, &err);
        ck_assert_msg(r == GUILD_MSG_OK || r == GUILD_MSG_TIMEOUT, "recv: %s", err.msg);
        if (r == GUILD_MSG_OK && env->body_case == body)
            return env;
        guild_msg_free(&env);
    }
    ck_abort_msg("no %d message from the stager", (int)body);
    return NULL;
}

START_TEST(test_guild_stager_control)
{
    /* the control socket: Register as the stager, Ready to an Assign, heartbeats with the requests served,
     * exit on Shutdown */
    char bin[1024], endpoint[128], sock[96];
    snprintf(bin, sizeof bin, "%s/guild-stager", GUILD_BUILDDIR);
    snprintf(sock, sizeof sock, "/tmp/check_stager_%d.sock", (int)getpid());
    snprintf(endpoint, sizeof endpoint, "ipc://%s", sock);
    guild_err_t err = {{0}};
    void *zctx = zmq_ctx_new();
    void *router = guild_msg_router_new(zctx, endpoint, &err);
    ck_assert_msg(router, "%s", err.msg);
    test_file_t f;
    test_file_make(&f, 1 << 16, 15);
    stage_ring_t *r = make_ring(2, 1 << 16);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char ring[300];
        snprintf(ring, sizeof ring, "%s", stage_ring_name(r));
        execl(bin, bin, "-m", f.path, "--ring", ring, "--threads", "1", "--connect", endpoint, (char *)NULL);
        _exit(127);
    }
    guild_msg_peer_t peer;
    Guild__Envelope *env = recv_body(router, GUILD__ENVELOPE__BODY_REGISTER_WORKER, &peer);
    ck_assert_int_eq(env->register_worker->role, GUILD__ROLE__ROLE_STAGER);
    ck_assert_int_eq(env->register_worker->pid, pid);
    guild_msg_free(&env);

    /* one request served, so that the heartbeat has something to count */
    stage_piece_t p = {0, f.n, 0};
    uint64_t seq;
    stage_wait_t w = {20000, 5000 * MS, 3000 * MS};
    ck_assert_int_eq(stage_ring_post(r, &p, 1, &seq, &err), 0);
    ck_assert_msg(stage_ring_wait(r, seq, &w, NULL, &err) == 0, "%s", err.msg);
    stage_ring_release(r, seq);

    /* an Assign repeats the stager's options: one that asks for other rings is refused, naming them; one that
     * asks for what it serves is answered Ready */
    Guild__Envelope out = GUILD__ENVELOPE__INIT;
    Guild__Assign as = GUILD__ASSIGN__INIT;
    Guild__StagerOptions so = GUILD__STAGER_OPTIONS__INIT;
    char ring_name[300], *rings[1] = {ring_name};
    snprintf(ring_name, sizeof ring_name, "%s.other", stage_ring_name(r));
    so.n_rings = 1;
    so.rings = rings;
    so.threads = 1;
    as.generation = 6;
    as.model_path = f.path;
    as.options_case = GUILD__ASSIGN__OPTIONS_STAGER;
    as.stager = &so;
    out.body_case = GUILD__ENVELOPE__BODY_ASSIGN;
    out.assign = &as;
    ck_assert_msg(guild_msg_send(router, &peer, &out, &err) == 0, "%s", err.msg);
    env = recv_body(router, GUILD__ENVELOPE__BODY_ERROR, &peer);
    ck_assert_msg(strstr(env->error->message, ".other asked, this stager serves"), "%s", env->error->message);
    ck_assert_uint_eq(env->error->generation, 6);
    guild_msg_free(&env);
    snprintf(ring_name, sizeof ring_name, "%s", stage_ring_name(r));
    as.generation = 7;
    ck_assert_msg(guild_msg_send(router, &peer, &out, &err) == 0, "%s", err.msg);
    env = recv_body(router, GUILD__ENVELOPE__BODY_READY, &peer);
    ck_assert_uint_eq(env->ready->generation, 7);
    ck_assert_uint_ge(env->ready->resident_bytes, stage_ring_map_size(r));
    guild_msg_free(&env);

    Guild__Envelope hbe = GUILD__ENVELOPE__INIT;
    Guild__Heartbeat hb = GUILD__HEARTBEAT__INIT;
    hb.seq = 42;
    hbe.body_case = GUILD__ENVELOPE__BODY_HEARTBEAT;
    hbe.heartbeat = &hb;
    uint64_t t0 = guild_now_ns();
    for (;;) { /* the counters reach the control thread within a poll tick */
        ck_assert_msg(guild_msg_send(router, &peer, &hbe, &err) == 0, "%s", err.msg);
        env = recv_body(router, GUILD__ENVELOPE__BODY_HEARTBEAT, &peer);
        ck_assert_uint_eq(env->heartbeat->seq, 42);
        ck_assert_ptr_nonnull(env->heartbeat->stats);
        uint64_t served = env->heartbeat->stats->exchanges;
        guild_msg_free(&env);
        if (served == 1)
            break;
        ck_assert_msg(guild_now_ns() - t0 < 2000 * MS, "heartbeat reports %llu requests", (unsigned long long)served);
        usleep(20000);
    }

    Guild__Envelope sde = GUILD__ENVELOPE__INIT;
    Guild__Shutdown sd = GUILD__SHUTDOWN__INIT;
    sd.reason = (char *)"test";
    sde.body_case = GUILD__ENVELOPE__BODY_SHUTDOWN;
    sde.shutdown = &sd;
    ck_assert_msg(guild_msg_send(router, &peer, &sde, &err) == 0, "%s", err.msg);
    int status = 0;
    pid_t got = 0;
    t0 = guild_now_ns();
    while ((got = waitpid(pid, &status, WNOHANG)) == 0 && guild_now_ns() - t0 < 3000 * MS)
        usleep(5000);
    ck_assert_int_eq(got, pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
    guild_msg_close(&router);
    zmq_ctx_term(zctx);
    unlink(sock);
    stage_ring_destroy(&r);
    test_file_free(&f);
}
END_TEST

START_TEST(test_guild_stager_parent_gone)
{
    /* the stager's parent exits: the stager stops by itself (its server pid cleared on the way out) */
    char bin[1024];
    snprintf(bin, sizeof bin, "%s/guild-stager", GUILD_BUILDDIR);
    test_file_t f;
    test_file_make(&f, 4096, 16);
    stage_ring_t *r = make_ring(2, 4096);
    pid_t mid = fork();
    ck_assert_int_ge(mid, 0);
    if (mid == 0) {
        pid_t pid = fork();
        if (pid == 0) {
            char ring[300];
            snprintf(ring, sizeof ring, "%s", stage_ring_name(r));
            execl(bin, bin, "-m", f.path, "--ring", ring, "--threads", "1", (char *)NULL);
            _exit(127);
        }
        /* stay until the stager serves, then leave it behind */
        uint64_t t0 = guild_now_ns();
        while (atomic_load(&stage_ring_header(r)->server_pid) != pid && guild_now_ns() - t0 < 5000 * MS)
            usleep(1000);
        _exit(atomic_load(&stage_ring_header(r)->server_pid) == pid ? 0 : 1);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(mid, &status, 0), mid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the stager did not start");
    uint64_t t0 = guild_now_ns();
    while (atomic_load(&stage_ring_header(r)->server_pid) != 0 && guild_now_ns() - t0 < 3000 * MS)
        usleep(5000);
    ck_assert_int_eq(atomic_load(&stage_ring_header(r)->server_pid), 0);
    stage_ring_destroy(&r);
    test_file_free(&f);
}
END_TEST

START_TEST(test_guild_stager_bad_ring)
{
    /* a bad ring is an error naming it, exit status 1 */
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/guild-stager -m %s/guild-stager --ring /nonexistent/ring 2>&1", GUILD_BUILDDIR,
             GUILD_BUILDDIR);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    char out[2048] = {0};
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int status = pclose(p);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 1, "status %d: %s", status, out);
    ck_assert_msg(strstr(out, "guild-stager: ") && strstr(out, "/nonexistent/ring"), "%s", out);
}
END_TEST

/* ---------------------------------------------------------------- cuda_stage on the mock runtime */

/* Random pieces of the file as cuda_stage pieces, at increasing destination offsets; returns the bytes of the
 * destination. */
static size_t random_pieces(const test_file_t *f, cuda_stage_piece_t *p, int32_t n, size_t max_piece, uint32_t seed)
{
    size_t dst = 0;
    uint32_t x = seed;
    for (int32_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        size_t bytes = (i % 13 == 4) ? 0 : (x >> 8) % (max_piece + 1);
        x = x * 1103515245u + 12345u;
        size_t off = (size_t)(x >> 4) % (f->n - bytes + 1);
        p[i] = (cuda_stage_piece_t){f->map + off, bytes, dst};
        dst += bytes + (i % 2) * 8;
    }
    return dst;
}

static void expect_copied(const test_file_t *f, const cuda_stage_piece_t *p, int32_t n, const uint8_t *dst)
{
    for (int32_t i = 0; i < n; i++)
        ck_assert_msg(!memcmp(dst + p[i].dst_off, p[i].host, p[i].bytes), "piece %d differs", (int)i);
    (void)f;
}

START_TEST(test_cuda_stage_ring)
{
    mock_cuda_reset();
    test_file_t f;
    test_file_make(&f, (size_t)3 << 20, 21);
    stage_ring_t *r = make_ring(3, 128 << 10);
    guild_err_t err = {{0}};
    stage_server_t *s = NULL;
    ck_assert_int_eq(stage_server_start(&s, r, f.map, f.n, 2, &err), 0);
    stage_wait_t w = quick_wait();
    cuda_stage_t *st = NULL;
    ck_assert_msg(cuda_stage_new_ring(&st, r, f.map, f.n, &w, &err) == 0, "%s", err.msg);
    mock_cuda_stats_t ms;
    mock_cuda_stats(&ms);
    ck_assert_uint_eq(ms.registered, 1);
    ck_assert_uint_eq(ms.events, 3);

    /* calls of 3 shapes, two calls between stream syncs: the second reuses slots whose copies are pending */
    enum { N = 5000 };
    static cuda_stage_piece_t p1[N], p2[N];
    uint64_t total = 0;
    for (int round = 0; round < 3; round++) {
        int32_t n1 = round == 0 ? 40 : round == 1 ? N : 7, n2 = round == 2 ? N : 25;
        size_t m1 = round == 0 ? 400000 : round == 1 ? 64 : 1 << 20, m2 = round == 2 ? 200 : 90000;
        size_t b1 = random_pieces(&f, p1, n1, m1, 100u + (uint32_t)round);
        size_t b2 = random_pieces(&f, p2, n2, m2, 200u + (uint32_t)round);
        uint8_t *d1 = calloc(1, b1 + 1), *d2 = calloc(1, b2 + 1);
        ck_assert_msg(cuda_stage_copy(st, (char *)d1, p1, n1, NULL, &err) == 0, "%s", err.msg);
        ck_assert_msg(cuda_stage_copy(st, (char *)d2, p2, n2, NULL, &err) == 0, "%s", err.msg);
        cudaStreamSynchronize(NULL);
        expect_copied(&f, p1, n1, d1);
        expect_copied(&f, p2, n2, d2);
        for (int32_t i = 0; i < n1; i++)
            total += p1[i].bytes;
        for (int32_t i = 0; i < n2; i++)
            total += p2[i].bytes;
        free(d1);
        free(d2);
    }
    uint64_t bytes = 0, wait_ns = 0;
    cuda_stage_stats(st, &bytes, &wait_ns);
    ck_assert_uint_eq(bytes, total);
    mock_cuda_stats(&ms);
    ck_assert_uint_gt(ms.copies, 0);
    ck_assert_uint_eq(ms.pinned_copies, ms.copies); /* every device copy came from the registered ring */
    ck_assert_uint_eq(ms.pending, 0);
    cuda_stage_destroy(&st);
    ck_assert_ptr_null(st);
    mock_cuda_stats(&ms);
    ck_assert_uint_eq(ms.registered, 0);
    ck_assert_uint_eq(ms.events, 0);
    ck_assert_uint_eq(stage_ring_released(r), stage_ring_posted(r));
    stage_server_stop(&s);
    stage_ring_destroy(&r);
    test_file_free(&f);
}
END_TEST

START_TEST(test_cuda_stage_errors)
{
    mock_cuda_reset();
    test_file_t f;
    test_file_make(&f, 65536, 22);
    stage_ring_t *r = make_ring(2, 4096);
    guild_err_t err = {{0}};
    stage_wait_t w = {0, 5000 * MS, 100 * MS};
    cuda_stage_t *st = NULL;
    ck_assert_int_eq(cuda_stage_new_ring(&st, r, f.map, f.n, &w, &err), 0);
    static uint8_t dst[8192], outside[16];
    /* a host pointer outside the mapping */
    cuda_stage_piece_t bad = {outside, 16, 0};
    ck_assert_int_eq(cuda_stage_copy(st, (char *)dst, &bad, 1, NULL, &err), -1);
    ck_assert_msg(strstr(err.msg, "piece 0 (16 bytes at") && strstr(err.msg, "not inside the model mapping"),
                  "%s", err.msg);
    ck_assert_int_eq(cuda_stage_copy(st, (char *)dst, &bad, 0, NULL, &err), -1);
    ck_assert_msg(strstr(err.msg, "unusable after an earlier error"), "%s", err.msg);
    cuda_stage_destroy(&st);
    /* no stager: an error naming the ring within the liveness window */
    ck_assert_int_eq(cuda_stage_new_ring(&st, r, f.map, f.n, &w, &err), 0);
    cuda_stage_piece_t ok = {f.map + 10, 100, 0};
    uint64_t t0 = guild_now_ns();
    ck_assert_int_eq(cuda_stage_copy(st, (char *)dst, &ok, 1, NULL, &err), -1);
    ck_assert_msg(strstr(err.msg, "no stager serves ring"), "%s", err.msg);
    ck_assert_uint_lt(guild_now_ns() - t0, 1000 * MS);
    cuda_stage_destroy(&st);
    mock_cuda_stats_t ms;
    mock_cuda_stats(&ms);
    ck_assert_uint_eq(ms.registered, 0);
    ck_assert_uint_eq(ms.events, 0);
    stage_ring_destroy(&r);

    /* the pageable kind: straight copies */
    ck_assert_int_eq(cuda_stage_new_pageable(&st, &err), 0);
    cuda_stage_piece_t two[2] = {{f.map + 5, 300, 0}, {f.map + 4000, 50, 1000}};
    ck_assert_int_eq(cuda_stage_copy(st, (char *)dst, two, 2, NULL, &err), 0);
    cudaStreamSynchronize(NULL);
    expect_copied(&f, two, 2, dst);
    uint64_t bytes = 0, wait_ns = 1;
    cuda_stage_stats(st, &bytes, &wait_ns);
    ck_assert_uint_eq(bytes, 350);
    ck_assert_uint_eq(wait_ns, 0);
    cuda_stage_destroy(&st);
    test_file_free(&f);
}
END_TEST

/* The pinned kind: page-locked copies of the given ranges (overlaps merged), each piece copied by DMA from its
 * range's copy, asynchronously; a piece outside them, or page-locked memory refused, is an error saying so. */
START_TEST(test_cuda_stage_pinned)
{
    mock_cuda_reset();
    test_file_t f;
    test_file_make(&f, (size_t)1 << 20, 23);
    guild_err_t err = {{0}};
    cuda_stage_t *st = NULL;
    /* three tensors' ranges and a duplicate overlapping one (a fused gate/up tensor named twice) */
    const cuda_stage_range_t r[] = {{f.map + 700000, 300000, NULL},
                                    {f.map + 1000, 200000, NULL},
                                    {f.map + 300000, 100000, NULL},
                                    {f.map + 350000, 100000, NULL}};
    ck_assert_msg(cuda_stage_new_pinned(&st, r, 4, &err) == 0, "%s", err.msg);
    mock_cuda_stats_t ms;
    mock_cuda_stats(&ms);
    ck_assert_uint_eq(ms.registered, 1); /* one page-locked block */
    enum { N = 300 };
    static cuda_stage_piece_t p[N];
    size_t dst = 0;
    uint32_t x = 99;
    uint64_t want = 0;
    for (int32_t i = 0; i < N; i++) { /* inside a range (the merged one included), some empty, some whole */
        x = x * 1103515245u + 12345u;
        const int k = (int)((x >> 8) % 3);
        const size_t base = k == 0 ? 700000 : k == 1 ? 1000 : 300000, len = k == 0 ? 300000 : k == 1 ? 200000 : 150000;
        x = x * 1103515245u + 12345u;
        size_t bytes = i % 17 == 3 ? 0 : i % 29 == 5 ? len : (x >> 8) % 5000;
        x = x * 1103515245u + 12345u;
        const size_t off = base + (size_t)(x >> 4) % (len - bytes + 1);
        p[i] = (cuda_stage_piece_t){f.map + off, bytes, dst};
        dst += bytes + 8;
        want += bytes;
    }
    uint8_t *d = calloc(1, dst + 1);
    ck_assert_msg(cuda_stage_copy(st, (char *)d, p, N, NULL, &err) == 0, "%s", err.msg);
    mock_cuda_stats(&ms);
    ck_assert_uint_eq(ms.copies, N);
    ck_assert_uint_eq(ms.pinned_copies, N); /* every copy from page-locked memory: DMA, no CPU copy */
    ck_assert_uint_gt(ms.pending, 0);       /* asynchronous: the host did not wait for them */
    uint64_t bytes = 0, wait_ns = 1;
    cuda_stage_stats(st, &bytes, &wait_ns);
    ck_assert_uint_eq(bytes, want);
    ck_assert_uint_eq(wait_ns, 0);
    cudaStreamSynchronize(NULL);
    expect_copied(&f, p, N, d);
    /* outside every range (between two of them; straddling the end of one) */
    cuda_stage_piece_t out1 = {f.map + 500000, 10, 0}, out2 = {f.map + 999990, 20, 0};
    ck_assert_int_eq(cuda_stage_copy(st, (char *)d, &out1, 1, NULL, &err), -1);
    ck_assert_msg(strstr(err.msg, "not inside the pinned ranges"), "%s", err.msg);
    cuda_stage_destroy(&st);
    ck_assert_int_eq(cuda_stage_new_pinned(&st, r, 4, &err), 0);
    ck_assert_int_eq(cuda_stage_copy(st, (char *)d, &out2, 1, NULL, &err), -1);
    ck_assert_msg(strstr(err.msg, "not inside the pinned ranges"), "%s", err.msg);
    cuda_stage_destroy(&st); /* waits for the copies before freeing the page-locked block */
    mock_cuda_stats(&ms);
    ck_assert_uint_eq(ms.pending, 0);
    ck_assert_uint_eq(ms.registered, 0);
    free(d);

    mock_cuda_fail_register(1);
    ck_assert_int_eq(cuda_stage_new_pinned(&st, r, 4, &err), -1);
    ck_assert_ptr_null(st);
    ck_assert_msg(strstr(err.msg, "page-locked memory for the streamed experts") && strstr(err.msg, "out of memory") &&
                      strstr(err.msg, "--stager process or thread"),
                  "%s", err.msg);
    mock_cuda_fail_register(0);
    test_file_free(&f);
}
END_TEST

/* The registered kind (streaming from the CPU side's own copies): the ranges registered in place, page-aligned
 * and merged, read-only; pieces inside them copied by DMA asynchronously, pieces outside as pageable copies;
 * a refused registration leaves pageable copies, never an error. */
START_TEST(test_cuda_stage_registered)
{
    mock_cuda_reset();
    test_file_t f;
    test_file_make(&f, (size_t)1 << 20, 29);
    guild_err_t err = {{0}};
    cuda_stage_t *st = NULL;
    /* two allocations' worth: one range, and two that share a page (merged) */
    const cuda_stage_range_t r[] = {{f.map + 600000, 300000, NULL}, {f.map + 5000, 100000, NULL},
                                    {f.map + 105000, 50000, NULL}};
    ck_assert_msg(cuda_stage_new_registered(&st, r, 3, &err) == 0, "%s", err.msg);
    mock_cuda_stats_t ms;
    mock_cuda_stats(&ms);
    ck_assert_uint_eq(ms.registered, 2);
    ck_assert_uint_eq(mock_cuda_last_register_flags(), cudaHostRegisterPortable | cudaHostRegisterReadOnly);
    ck_assert_uint_ge(cuda_stage_registered_bytes(st), 450000);
    ck_assert_uint_eq(cuda_stage_registered_bytes(st) % 4096, 0);
    cuda_stage_piece_t p[4] = {{f.map + 600000, 300000, 0},
                               {f.map + 5000, 150000, 300000},
                               {f.map + 700000, 1000, 450000},
                               {f.map + 400000, 2000, 451000}}; /* the last outside every range */
    uint8_t *d = calloc(1, 453000);
    ck_assert_msg(cuda_stage_copy(st, (char *)d, p, 4, NULL, &err) == 0, "%s", err.msg);
    mock_cuda_stats(&ms);
    ck_assert_uint_eq(ms.copies, 4);
    ck_assert_uint_eq(ms.pinned_copies, 3);
    ck_assert_uint_gt(ms.pending, 0); /* asynchronous */
    cudaStreamSynchronize(NULL);
    expect_copied(&f, p, 4, d);
    cuda_stage_destroy(&st);
    mock_cuda_stats(&ms);
    ck_assert_uint_eq(ms.registered, 0);
    ck_assert_uint_eq(ms.pending, 0);

    mock_cuda_reset();
    mock_cuda_fail_register(1);
    ck_assert_int_eq(cuda_stage_new_registered(&st, r, 3, &err), 0);
    mock_cuda_fail_register(0);
    ck_assert_uint_eq(cuda_stage_registered_bytes(st), 0);
    memset(d, 0, 453000);
    ck_assert_msg(cuda_stage_copy(st, (char *)d, p, 4, NULL, &err) == 0, "%s", err.msg);
    cudaStreamSynchronize(NULL);
    expect_copied(&f, p, 4, d);
    mock_cuda_stats(&ms);
    ck_assert_uint_eq(ms.pinned_copies, 0);
    cuda_stage_destroy(&st);
    free(d);
    test_file_free(&f);
}
END_TEST

static Suite *stager_suite(void)
{
    Suite *s = suite_create("stager");
    TCase *tc = tcase_create("ring");
    tcase_add_test(tc, test_ring_create_attach);
    tcase_add_test(tc, test_ring_create_bad_args);
    tcase_add_test(tc, test_ring_validate_rejects);
    tcase_add_test(tc, test_ring_attach_rejects);
    suite_add_tcase(s, tc);
    tc = tcase_create("plan");
    tcase_add_test(tc, test_plan_split_merge_align);
    suite_add_tcase(s, tc);
    tc = tcase_create("copy");
    tcase_add_test(tc, test_copy_stream_matches_memcpy);
    suite_add_tcase(s, tc);
    tc = tcase_create("fill");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_fill_one_thread);
    tcase_add_test(tc, test_fill_threads_big_pieces);
    tcase_add_test(tc, test_fill_many_pieces);
    tcase_add_test(tc, test_zero_length_and_full);
    tcase_add_test(tc, test_refused_request);
    tcase_add_test(tc, test_server_refuses_bad_slot_range);
    tcase_add_test(tc, test_attach_inherits_in_flight);
    tcase_add_test(tc, test_stop_word);
    suite_add_tcase(s, tc);
    tc = tcase_create("liveness");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_no_server);
    tcase_add_test(tc, test_timeout_while_alive);
    tcase_add_test(tc, test_hung_server);
    tcase_add_test(tc, test_killed_server_reaped);
    tcase_add_test(tc, test_killed_server_zombie);
    suite_add_tcase(s, tc);
    tc = tcase_create("process");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_guild_stager_process_killed);
    tcase_add_test(tc, test_guild_stager_process_stops);
    tcase_add_test(tc, test_guild_stager_parent_gone);
    tcase_add_test(tc, test_guild_stager_bad_ring);
    tcase_add_test(tc, test_guild_stager_control);
    suite_add_tcase(s, tc);
    tc = tcase_create("cuda_stage");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_cuda_stage_ring);
    tcase_add_test(tc, test_cuda_stage_errors);
    tcase_add_test(tc, test_cuda_stage_pinned);
    tcase_add_test(tc, test_cuda_stage_registered);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    guild_log_init("check_stager", GUILD_LOG_ERROR);
    return check_run(stager_suite());
}
