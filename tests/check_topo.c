/* Tests for core/topo's page placement query, and that an expert shard copied to a node really sits there
 * (issue 5: "no page read across sockets in the steady state"). On a one-node machine the negative cases
 * (asking about a node the pages are not on) show that the query can fail. */
#include "config.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/topo/topo.h"
#include "cpu-expert-worker/experts/expert_shard.h"
#include "tests/check_run.h"
#include "tests/tiny_model.h"

START_TEST(test_alloc_pages_on_node)
{
    const size_t size = 16u << 20;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    for (int node = 0; node < topo_node_count(); node++) {
        guild_err_t err = {{0}};
        unsigned char *p = topo_alloc(size, node, &err);
        ck_assert_msg(p != NULL, "%s", err.msg);
        memset(p, 0x5a, size); /* first touch: the pages come from the bound node */
        size_t present, off;
        ck_assert_msg(topo_pages_on_node(p, size, node, &present, &off, &err) == 0, "%s", err.msg);
        ck_assert_uint_eq(present, size / page);
        ck_assert_uint_eq(off, 0);
        /* the same pages asked about another node are all off it */
        ck_assert_int_eq(topo_pages_on_node(p, size, node + 1, &present, &off, &err), 0);
        ck_assert_uint_eq(off, size / page);
        topo_free(p, size);
    }
}
END_TEST

START_TEST(test_untouched_pages_not_counted)
{
    const size_t size = 4u << 20;
    guild_err_t err = {{0}};
    unsigned char *p = topo_alloc(size, 0, &err);
    ck_assert_msg(p != NULL, "%s", err.msg);
    size_t present, off;
    /* the kernel maps topo_alloc's pages lazily: nothing is present until touched; then the touched page (a
     * whole 2 MiB transparent hugepage at most) and not the rest */
    ck_assert_int_eq(topo_pages_on_node(p, size, 0, &present, &off, &err), 0);
    ck_assert_uint_eq(present, 0);
    p[0] = 1;
    ck_assert_int_eq(topo_pages_on_node(p, size, 0, &present, &off, &err), 0);
    ck_assert_uint_ge(present, 1);
    ck_assert_uint_le(present, (2u << 20) / (size_t)sysconf(_SC_PAGESIZE));
    ck_assert_uint_eq(off, 0);
    topo_free(p, size);
}
END_TEST

/* Every byte an expert shard copied to node 0 computes from lives on node 0. */
START_TEST(test_shard_copy_on_node)
{
    tiny_spec_t spec = tiny_spec("qwen3moe");
    spec.wtype = GUILD_TYPE_Q8_0;
    void *img;
    size_t img_size;
    tiny_model_image(&spec, &img, &img_size);
    model_t *m = NULL;
    guild_err_t err = {{0}};
    ck_assert_msg(tiny_model_open(img, img_size, &m, &err) == 0, "%s", err.msg);
    expert_shard_t *s = NULL;
    ck_assert_msg(expert_shard_new_copy(&s, m, NULL, 0, false, false, EXPERT_LAYOUT_PLAIN, &err) == 0, "%s", err.msg);
    ck_assert_uint_gt(expert_shard_resident_bytes(s), 0);
    size_t total_present = 0, total_off = 0, wrong_node_off = 0;
    for (int l = 0; l < spec.n_layer; l++)
        for (int e = 0; e < spec.n_expert; e++) {
            const expert_mats_t *x = expert_shard_get(s, l, e);
            ck_assert_ptr_nonnull(x);
            const struct {
                const void *p;
                size_t len;
            } r[3] = {{x->gate, (size_t)spec.n_ff_exp * x->gate_row},
                      {x->up, (size_t)spec.n_ff_exp * x->up_row},
                      {x->down, (size_t)spec.n_embd * x->down_row}};
            for (int i = 0; i < 3; i++) {
                size_t present, off;
                ck_assert_msg(topo_pages_on_node(r[i].p, r[i].len, 0, &present, &off, &err) == 0, "%s", err.msg);
                ck_assert_uint_gt(present, 0);
                total_present += present;
                total_off += off;
                ck_assert_int_eq(topo_pages_on_node(r[i].p, r[i].len, 1, &present, &off, &err), 0);
                wrong_node_off += off;
            }
        }
    ck_assert_uint_gt(total_present, 0);
    ck_assert_uint_eq(total_off, 0);
    ck_assert_uint_eq(wrong_node_off, total_present);
    expert_shard_destroy(&s);
    model_destroy(&m);
    free(img);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("topo");
    TCase *tc = tcase_create("placement");
    tcase_add_test(tc, test_alloc_pages_on_node);
    tcase_add_test(tc, test_untouched_pages_not_counted);
    tcase_add_test(tc, test_shard_copy_on_node);
    suite_add_tcase(su, tc);
    return check_run(su);
}
