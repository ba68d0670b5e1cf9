/* Tests for core/model/expert_digest: the same shard of the same file gives the same digests (with a pool or
 * without); a changed byte of an owned expert is named by its tensor, a changed byte elsewhere does not count; a
 * tensor of another type, other expert settings, a missing or extra tensor are each named. */
#include "config.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/expert_digest.h"
#include "core/util/pool.h"
#include "tests/check_run.h"
#include "tests/tiny_model.h"

typedef struct img {
    void *data;
    size_t size;
    model_t *m;
} img_t;

static img_t open_spec(const tiny_spec_t *spec)
{
    img_t i = {0};
    tiny_model_image(spec, &i.data, &i.size);
    guild_err_t err = {{0}};
    ck_assert_msg(tiny_model_open(i.data, i.size, &i.m, &err) == 0, "%s", err.msg);
    return i;
}

static void img_close(img_t *i)
{
    model_destroy(&i->m);
    free(i->data);
}

/* A copy of a with one byte of tensor `which` (0 gate, 1 up, 2 down) of (layer, expert) changed. */
static img_t changed(const img_t *a, int layer, int which, int expert)
{
    img_t b = {malloc(a->size), a->size, NULL};
    memcpy(b.data, a->data, a->size);
    const model_layer_t *L = &model_weights(a->m)->layers[layer];
    const model_tensor_t *t = which == 0 ? &L->gate_exps : which == 1 ? &L->up_exps : &L->down_exps;
    size_t off = (size_t)((const char *)model_tensor_row(t, expert, 1) - (const char *)a->data) + 3;
    ck_assert_uint_lt(off, a->size);
    ((unsigned char *)b.data)[off] ^= 0x40;
    guild_err_t err = {{0}};
    ck_assert_msg(tiny_model_open(b.data, b.size, &b.m, &err) == 0, "%s", err.msg);
    return b;
}

static void digest(const img_t *i, const uint8_t *owned, guild_pool_t *pool, expert_digest_t **d, size_t *n)
{
    guild_err_t err = {{0}};
    ck_assert_msg(expert_digest_compute(i->m, owned, pool, d, n, &err) == 0, "%s", err.msg);
}

START_TEST(test_same_file_same_digests)
{
    tiny_spec_t spec = tiny_spec("qwen3moe");
    img_t a = open_spec(&spec), b = open_spec(&spec);
    expert_digest_t *da, *db;
    size_t na, nb;
    digest(&a, NULL, NULL, &da, &na);
    ck_assert_uint_eq(na, 1 + 3 * (size_t)spec.n_layer);
    ck_assert_str_eq(da[0].tensor, EXPERT_DIGEST_CONFIG);
    ck_assert_str_eq(da[1].tensor, "blk.0.ffn_gate_exps.weight");
    ck_assert_uint_eq(da[1].first, 0);
    ck_assert_uint_eq(da[1].last, (uint32_t)spec.n_expert - 1);
    guild_pool_t *pool = NULL;
    guild_err_t err = {{0}};
    ck_assert_int_eq(guild_pool_new(&pool, 3, NULL, &err), 0);
    digest(&b, NULL, pool, &db, &nb);
    ck_assert_int_eq(expert_digest_compare(da, na, db, nb, &err), 0);
    ck_assert_int_eq(memcmp(da, db, na * sizeof *da), 0);
    guild_pool_destroy(&pool);
    free(da);
    free(db);
    img_close(&a);
    img_close(&b);
}
END_TEST

START_TEST(test_owned_bytes_count_others_do_not)
{
    tiny_spec_t spec = tiny_spec("qwen2moe");
    img_t a = open_spec(&spec);
    const int ne = spec.n_expert;
    uint8_t *owned = calloc((size_t)spec.n_layer * (size_t)ne, 1);
    for (int e = 2; e < 5; e++) /* layer 1's experts 2-4 only */
        owned[(size_t)ne + (size_t)e] = 1;
    expert_digest_t *da, *db;
    size_t na, nb;
    digest(&a, owned, NULL, &da, &na);
    ck_assert_uint_eq(na, 4);
    ck_assert_str_eq(da[2].tensor, "blk.1.ffn_up_exps.weight");
    ck_assert_uint_eq(da[2].first, 2);
    ck_assert_uint_eq(da[2].last, 4);
    guild_err_t err = {{0}};
    /* another expert's byte, another layer's: the same shard */
    img_t b = changed(&a, 1, 1, 6);
    img_t c = changed(&a, 0, 1, 3);
    digest(&b, owned, NULL, &db, &nb);
    ck_assert_int_eq(expert_digest_compare(da, na, db, nb, &err), 0);
    free(db);
    digest(&c, owned, NULL, &db, &nb);
    ck_assert_int_eq(expert_digest_compare(da, na, db, nb, &err), 0);
    free(db);
    /* an owned expert's byte: named */
    for (int which = 0; which < 3; which++) {
        img_t d = changed(&a, 1, which, 3);
        digest(&d, owned, NULL, &db, &nb);
        ck_assert_int_eq(expert_digest_compare(da, na, db, nb, &err), -1);
        const char *name = which == 0 ? "blk.1.ffn_gate_exps" : which == 1 ? "blk.1.ffn_up_exps" : "blk.1.ffn_down_exps";
        ck_assert_msg(strstr(err.msg, name) && strstr(err.msg, "(experts 2-4): its bytes differ"), "%s", err.msg);
        free(db);
        img_close(&d);
    }
    /* the whole model against the shard: an extra tensor */
    digest(&a, NULL, NULL, &db, &nb);
    ck_assert_int_eq(expert_digest_compare(da, na, db, nb, &err), -1);
    ck_assert_int_eq(expert_digest_compare(db, nb, da, na, &err), -1);
    ck_assert_msg(strstr(err.msg, "missing"), "%s", err.msg);
    free(db);
    free(da);
    free(owned);
    img_close(&a);
    img_close(&b);
    img_close(&c);
}
END_TEST

START_TEST(test_type_and_settings_named)
{
    tiny_spec_t spec = tiny_spec("qwen3moe");
    img_t a = open_spec(&spec);
    spec.f16_tensor = "blk.0.ffn_down_exps.weight";
    img_t b = open_spec(&spec);
    tiny_spec_t wide = tiny_spec("qwen3moe");
    wide.n_ff_exp *= 2;
    img_t c = open_spec(&wide);
    expert_digest_t *da, *db;
    size_t na, nb;
    guild_err_t err = {{0}};
    digest(&a, NULL, NULL, &da, &na);
    digest(&b, NULL, NULL, &db, &nb);
    ck_assert_int_eq(expert_digest_compare(da, na, db, nb, &err), -1);
    ck_assert_msg(strstr(err.msg, "tensor blk.0.ffn_down_exps.weight: type f32 here, f16 there"), "%s", err.msg);
    free(db);
    digest(&c, NULL, NULL, &db, &nb);
    ck_assert_int_eq(expert_digest_compare(da, na, db, nb, &err), -1);
    ck_assert_msg(strstr(err.msg, "the expert settings differ"), "%s", err.msg);
    free(db);
    free(da);
    img_close(&a);
    img_close(&b);
    img_close(&c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("expert_digest");
    TCase *tc = tcase_create("digest");
    tcase_add_test(tc, test_same_file_same_digests);
    tcase_add_test(tc, test_owned_bytes_count_others_do_not);
    tcase_add_test(tc, test_type_and_settings_named);
    suite_add_tcase(s, tc);
    return check_run(s);
}
