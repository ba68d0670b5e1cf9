/* The coordinator's side of guild-stager (coordinator/supervisor.h with a stage slot size), without a GPU:
 * the supervisor creates a staging ring, spawns `guild-stager --ring` on it beside a GPU worker (cpu backend,
 * which never streams and ignores the ring) and a CPU worker; this test plays the GPU worker's part on the ring
 * (fills of pieces of the model file, checked against the file), kills the stager and sees it restarted and
 * serving the same ring, and sees sup_destroy end it. The multi-process CUDA path is covered on a device by
 * tests/cuda/mkmodel_greedy.sh. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "coordinator/supervisor.h"
#include "core/util/log.h"
#include "gpu-worker/dense/cuda/cuda_config.h"
#include "coordinator/placement.h"
#include "ipc/stage_ring.h"
#include "tests/check_run.h"
#include "tests/tiny_model.h"

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Asks the stager for bytes [off, off + n) of the file into slot offset 64 and checks them against image. */
static void fill_and_check(stage_ring_t *r, const unsigned char *image, uint64_t off, uint64_t n)
{
    guild_err_t err = {{0}};
    stage_piece_t p = {.file_off = off, .bytes = n, .slot_off = 64};
    uint64_t seq;
    ck_assert_msg(stage_ring_post(r, &p, 1, &seq, &err) == 0, "%s", err.msg);
    stage_wait_t w = stage_wait_default();
    w.timeout_ns = 10000000000ull;
    void *data = NULL;
    ck_assert_msg(stage_ring_wait(r, seq, &w, &data, &err) == 0, "%s", err.msg);
    ck_assert_msg(memcmp((const char *)data + 64, image + off, n) == 0, "slot bytes differ from the file");
    stage_ring_release(r, seq);
}

/* A tiny qwen3moe model written to a temporary file, its plan for one CPU worker, and a supervisor
 * configuration running it with a process stager (the fields both tests share). */
typedef struct fixture {
    char dir[64], path[128];
    void *image;
    size_t size;
    model_t *m;
    placement_t *plan;
    stack_options_t o;
    sup_setup_t setup;
} fixture_t;

static void fixture_open(fixture_t *f)
{
    snprintf(f->dir, sizeof f->dir, "/tmp/guild-check-stager-sup-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(f->dir));
    snprintf(f->path, sizeof f->path, "%s/model.gguf", f->dir);
    tiny_spec_t spec = tiny_spec("qwen3moe");
    tiny_model_image(&spec, &f->image, &f->size);
    FILE *fp = fopen(f->path, "wb");
    ck_assert_ptr_nonnull(fp);
    ck_assert_uint_eq(fwrite(f->image, 1, f->size, fp), f->size);
    ck_assert_int_eq(fclose(fp), 0);
    guild_err_t err = {{0}};
    f->m = NULL;
    ck_assert_msg(tiny_model_open(f->image, f->size, &f->m, &err) == 0, "%s", err.msg);
    f->plan = NULL;
    ck_assert_msg(placement_new_local(&f->plan, model_config(f->m), 1, NULL, NULL, 0, &err) == 0, "%s", err.msg);
    stack_options_init(&f->o);
    f->o.n_threads = 1;
    f->o.n_ctx = 64;
    f->o.n_batch = 8;
    f->o.gpu.max_out = 1;
    f->o.gpu.cuda.stager = CUDA_STAGER_PROCESS;
    f->setup = (sup_setup_t){.model_path = f->path, .worker_dir = GUILD_BUILDDIR, .plan = f->plan};
}

static void fixture_close(fixture_t *f)
{
    placement_destroy(&f->plan);
    model_destroy(&f->m);
    free(f->image);
    unlink(f->path);
    ck_assert_int_eq(rmdir(f->dir), 0);
}

START_TEST(test_supervised_stager)
{
    fixture_t f;
    fixture_open(&f);
    stack_options_t o = f.o;
    sup_setup_t setup = f.setup;
    const unsigned char *image = f.image;
    const size_t size = f.size;
    guild_err_t err = {{0}};
    o.gpu.backend = "cpu";
    o.start_ms = 20000;
    o.gpu.cuda.stage_threads = 1;
    setup.stage_slot_bytes = 1u << 20;
    sup_t *s = NULL;
    ck_assert_msg(sup_new(&s, &o, &setup, model_config(f.m), &err) == 0, "%s", err.msg);
    uint64_t epoch;
    ck_assert_msg(sup_wait_ready(s, 20000, &epoch, &err) == 0, "%s", err.msg);
    ck_assert_ptr_nonnull(sup_stage_ring(s));

    stage_ring_t *r = NULL;
    ck_assert_msg(stage_ring_attach(&r, sup_stage_ring(s), &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(stage_ring_slot_bytes(r), 1u << 20);
    stage_ring_header_t *h = stage_ring_header(r);
    const pid_t pid1 = atomic_load(&h->server_pid); /* the stager serves before it reports Ready */
    ck_assert_int_gt(pid1, 0);
    fill_and_check(r, image, 0, 4096);
    fill_and_check(r, image, size - 1000, 1000);

    /* a dead stager is restarted on the same ring, which the next requests find served again */
    ck_assert_int_eq(kill(pid1, SIGKILL), 0);
    pid_t pid2 = 0;
    for (int i = 0; i < 1000; i++) {
        pid2 = atomic_load(&h->server_pid);
        if (pid2 > 0 && pid2 != pid1 && kill(pid2, 0) == 0)
            break;
        sleep_ms(10);
    }
    ck_assert_msg(pid2 > 0 && pid2 != pid1, "no new stager on the ring after pid %d was killed", (int)pid1);
    fill_and_check(r, image, 12345, size - 12345 < 20000 ? size - 12345 : 20000);
    ck_assert_msg(sup_check(s, epoch, &err) == 0, "%s", err.msg); /* the GPU worker was not disturbed */
    uint64_t epoch2;
    ck_assert_msg(sup_wait_ready(s, 20000, &epoch2, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(epoch2, epoch);

    /* shutdown ends (and reaps) the stager, well within the 2 s before a SIGKILL */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    sup_destroy(&s);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ck_assert_int_lt((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000, 1500);
    ck_assert_int_eq(kill(pid2, 0), -1);
    ck_assert_int_eq(errno, ESRCH);
    stage_ring_destroy(&r);
    fixture_close(&f);
}
END_TEST

/* Without stage_slot_bytes there is no ring and no stager (the cpu backend's pipeline, and --stager none). */
START_TEST(test_no_stager_without_a_slot_size)
{
    fixture_t f;
    fixture_open(&f);
    guild_err_t err = {{0}};
    sup_t *s = NULL;
    ck_assert_msg(sup_new(&s, &f.o, &f.setup, model_config(f.m), &err) == 0, "%s", err.msg);
    uint64_t epoch;
    ck_assert_msg(sup_wait_ready(s, 20000, &epoch, &err) == 0, "%s", err.msg);
    ck_assert_ptr_null(sup_stage_ring(s));
    sup_destroy(&s);
    fixture_close(&f);
}
END_TEST

int main(void)
{
    guild_log_init("check_stager_supervisor", GUILD_LOG_ERROR);
    Suite *s = suite_create("stager_supervisor");
    TCase *tc = tcase_create("supervised");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_supervised_stager);
    tcase_add_test(tc, test_no_stager_without_a_slot_size);
    suite_add_tcase(s, tc);
    return check_run(s);
}
