/* Tests for cpu-expert-worker/experts/expert_share: the split of an exchange's experts between the workers of one
 * node gives every expert with pairs to exactly one member, the same on every call, evenly for a decode token's
 * experts (8 experts of 1 pair: 4 + 4 for 2 members, 2 each for 4) and within one expert's cost of even for any
 * counts; K members each running the expert pipeline over the share (each only its part) write every pair the
 * group holds exactly once, and together y is, bit for bit, one pipeline's over the whole shard (plain,
 * interleaved and packed copies, 1 to 40 tokens, skipped slots, experts the group does not hold left alone). */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/util/pool.h"
#include "cpu-expert-worker/experts/expert_pipe.h"
#include "cpu-expert-worker/experts/expert_share.h"
#include "cpu-expert-worker/experts/expert_shard.h"
#include "tests/check_run.h"
#include "tests/tiny_model.h"

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

START_TEST(test_split_decode)
{
    /* one token's 8 experts of 128: every member the same number (to within one when K does not divide 8) */
    int32_t count[128] = {0}, member[128];
    int64_t load[8];
    const int32_t routed[8] = {3, 17, 18, 40, 77, 90, 101, 127};
    for (int i = 0; i < 8; i++)
        count[routed[i]] = 1;
    for (int K = 1; K <= 8; K++) {
        expert_share_split(count, 128, K, member, load);
        int got[8] = {0};
        for (int e = 0; e < 128; e++) {
            if (!count[e]) {
                ck_assert_int_eq(member[e], -1);
                continue;
            }
            ck_assert(member[e] >= 0 && member[e] < K);
            got[member[e]]++;
        }
        for (int m = 0; m < K; m++) {
            ck_assert_msg(got[m] == 8 / K || got[m] == 8 / K + 1, "K=%d: member %d computes %d of 8", K, m, got[m]);
            ck_assert_int_eq(load[m], (int64_t)got[m] * (1 + EXPERT_SHARE_READ_PAIRS));
        }
    }
    /* a member's experts are the same whichever member asks: the split depends on the counts only */
    int32_t again[128];
    expert_share_split(count, 128, 4, member, NULL);
    expert_share_split(count, 128, 4, again, NULL);
    ck_assert(!memcmp(member, again, sizeof member));
}
END_TEST

START_TEST(test_split_any_counts)
{
    /* random counts (prefill-like batches, a few experts, none): each expert with pairs goes to one member, and
     * the busiest member carries at most one expert's cost more than the idlest (longest first, least loaded) */
    rng_state = 9;
    for (int trial = 0; trial < 200; trial++) {
        const int32_t E = 1 + (int32_t)(rng_next() % 160);
        const int K = 1 + (int)(rng_next() % 8);
        int32_t *count = calloc((size_t)E, sizeof *count), *member = calloc((size_t)E, sizeof *member);
        int64_t load[8], sum[8] = {0}, total = 0, most = 0;
        ck_assert(count && member);
        const int dense = (int)(rng_next() % 3);
        for (int32_t e = 0; e < E; e++) {
            count[e] = dense == 0 ? (rng_next() % 10 == 0) : dense == 1 ? (int32_t)(rng_next() % 50)
                                                                          : (int32_t)(rng_next() % 3000);
            if (count[e] > 0) {
                const int64_t cost = count[e] + EXPERT_SHARE_READ_PAIRS;
                total += cost;
                most = cost > most ? cost : most;
            }
        }
        expert_share_split(count, E, K, member, load);
        for (int32_t e = 0; e < E; e++) {
            if (count[e] <= 0) {
                ck_assert_int_eq(member[e], -1);
                continue;
            }
            ck_assert(member[e] >= 0 && member[e] < K);
            sum[member[e]] += count[e] + EXPERT_SHARE_READ_PAIRS;
        }
        int64_t lo = INT64_MAX, hi = 0, all = 0;
        for (int m = 0; m < K; m++) {
            ck_assert_int_eq(sum[m], load[m]);
            lo = load[m] < lo ? load[m] : lo;
            hi = load[m] > hi ? load[m] : hi;
            all += load[m];
        }
        ck_assert_int_eq(all, total);
        ck_assert_msg(hi - lo <= most, "trial %d: loads %lld..%lld, the largest expert costs %lld", trial,
                      (long long)lo, (long long)hi, (long long)most);
        free(count);
        free(member);
    }
}
END_TEST

/* tiny_spec_blocks' model with 16 experts, top-4 */
static model_t *tiny_open(guild_type_t wt, void **img)
{
    tiny_spec_t spec = tiny_spec_blocks(wt);
    spec.n_expert = 16;
    spec.n_used = 4;
    spec.seed = 5;
    return tiny_model_load(&spec, img);
}

static float *fresh_y(size_t ny)
{
    float *y = malloc(ny * sizeof *y);
    ck_assert_ptr_nonnull(y);
    for (size_t i = 0; i < ny; i++)
        y[i] = -777.0f;
    return y;
}

/* y of layer `layer` by one pipeline over src (2 threads); the pairs it wrote */
static int64_t pipe_y(const expert_pipe_src_t *src, int32_t layer, int32_t T, const float *x, const int32_t *ids,
                      float *y)
{
    guild_pool_t *pool = NULL;
    expert_pipe_t *p = NULL;
    guild_err_t err = {{0}};
    ck_assert_int_eq(guild_pool_new(&pool, 2, NULL, &err), 0);
    ck_assert_msg(expert_pipe_new(&p, src, pool, NULL, &err) == 0, "%s", err.msg);
    const int64_t n = expert_pipe_run(p, layer, T, x, ids, y, &err);
    ck_assert_msg(n >= 0, "%s", err.msg);
    expert_pipe_destroy(&p);
    guild_pool_destroy(&pool);
    return n;
}

/* The shard's experts that `held` flags ([n_layer][n_expert], NULL: all) split between K members; each member's
 * pipeline into a y of its own. Every pair of a held expert is written by exactly one member, the rows are the
 * whole shard's, and the others stay untouched. */
static void check_members(const expert_shard_t *shard, const model_config_t *c, const uint8_t *held, int K,
                          int32_t layer, int32_t T, const float *x, const int32_t *ids)
{
    const size_t E = (size_t)c->n_embd, np = (size_t)T * (size_t)c->n_expert_used, ny = np * E;
    float *want = fresh_y(ny);
    expert_pipe_src_t src;
    expert_pipe_src_from_shard(&src, shard);
    pipe_y(&src, layer, T, x, ids, want);
    float *ys[8];
    int64_t pairs = 0, planned = 0;
    for (int r = 0; r < K; r++) {
        expert_share_t *s = NULL;
        guild_err_t err = {{0}};
        ck_assert_msg(expert_share_new(&s, c, K, r, &err) == 0, "%s", err.msg);
        /* members add the experts in different orders: what the group holds is what counts */
        for (int32_t il = 0; il < c->n_layer; il++)
            for (int32_t i = 0; i < c->n_expert; i++) {
                const int32_t e = (i + r * 5) % c->n_expert;
                const expert_mats_t *m = expert_shard_get(shard, il, e);
                if (m && (!held || held[(size_t)il * (size_t)c->n_expert + (size_t)e]))
                    ck_assert_msg(expert_share_add(s, il, e, m, &err) == 0, "%s", err.msg);
            }
        planned += expert_share_plan(s, layer, T, ids);
        expert_share_src(&src, s);
        ys[r] = fresh_y(ny);
        pairs += pipe_y(&src, layer, T, x, ids, ys[r]);
        expert_share_destroy(&s);
    }
    int64_t want_pairs = 0;
    for (size_t p = 0; p < np; p++) {
        const bool is_held = ids[p] >= 0 && (!held || held[(size_t)layer * (size_t)c->n_expert + (size_t)ids[p]]);
        want_pairs += is_held;
        int writers = 0;
        for (int r = 0; r < K; r++)
            if (ys[r][p * E] != -777.0f) {
                writers++;
                ck_assert_msg(!memcmp(ys[r] + p * E, want + p * E, E * sizeof(float)),
                              "K=%d T=%d pair %zu (expert %d): member %d's row is not the whole shard's", K, T, p,
                              ids[p], r);
            }
        ck_assert_msg(writers == (is_held ? 1 : 0), "K=%d T=%d pair %zu (expert %d, %s): %d members wrote it", K, T,
                      p, ids[p], is_held ? "held" : "not held", writers);
    }
    ck_assert_int_eq(pairs, want_pairs);
    ck_assert_int_eq(planned, want_pairs);
    for (int r = 0; r < K; r++)
        free(ys[r]);
    free(want);
}

START_TEST(test_members_same_bits)
{
    static const struct {
        expert_layout_t layout;
        bool interleave;
    } copies[] = {{EXPERT_LAYOUT_PLAIN, false}, {EXPERT_LAYOUT_PLAIN, true}, {EXPERT_LAYOUT_PACKED, false}};
    rng_state = 21;
    void *img;
    model_t *m = tiny_open(GUILD_TYPE_Q4_K, &img);
    const model_config_t *c = model_config(m);
    uint8_t *held = calloc((size_t)c->n_layer * (size_t)c->n_expert, 1);
    ck_assert_ptr_nonnull(held);
    for (size_t i = 0; i < (size_t)c->n_layer * (size_t)c->n_expert; i++)
        held[i] = i % 3 != 1; /* the experts of other nodes' workers, or of the GPU, are not the group's */
    for (size_t ci = 0; ci < sizeof copies / sizeof copies[0]; ci++) {
        expert_shard_t *shard = NULL;
        guild_err_t err = {{0}};
        ck_assert_msg(expert_shard_new_copy(&shard, m, NULL, -1, false, copies[ci].interleave, copies[ci].layout,
                                            &err) == 0, "%s", err.msg);
        const int32_t tokens[] = {1, 3, 40}, K = c->n_expert_used;
        for (int k = 0; k < 3; k++) {
            const int32_t T = tokens[k];
            float *x = malloc((size_t)T * (size_t)c->n_embd * sizeof *x);
            int32_t *ids = malloc((size_t)T * (size_t)K * sizeof *ids);
            ck_assert(x && ids);
            for (size_t i = 0; i < (size_t)T * (size_t)c->n_embd; i++)
                x[i] = (float)((double)(rng_next() >> 11) * (2.0 / 9007199254740992.0) - 1.0);
            for (int32_t t = 0; t < T; t++) {
                ids[t * K] = (int32_t)(rng_next() % (uint64_t)c->n_expert);
                for (int32_t q = 1; q < K; q++)
                    ids[t * K + q] = (ids[t * K] + 1 + 3 * q) % c->n_expert;
            }
            if (T > 1)
                ids[K + 1] = -1; /* a skipped slot (an expert the GPU computes) */
            for (int members = 1; members <= 4; members++) {
                check_members(shard, c, NULL, members, 1, T, x, ids);
                check_members(shard, c, held, members, 1, T, x, ids);
            }
            free(x);
            free(ids);
        }
        expert_shard_destroy(&shard);
    }
    free(held);
    model_destroy(&m);
    free(img);
}
END_TEST

/* A prefetch hint's shares (expert_share_hinted): for 1-4 members over the held experts (every third not held), a
 * hint of another layer than the last plan's, with duplicates, ids out of range and skipped slots: each member's
 * share keeps the hint's order, names each expert once, only held ones; the shares are disjoint and cover the
 * held hinted experts; each is the split expert_share_split gives those experts; the last plan is unchanged
 * (expert_share_src still gives its layer's experts only), and expert_share_src_held gives every held expert. */
START_TEST(test_hint_shares)
{
    void *img;
    model_t *m = tiny_open(GUILD_TYPE_Q4_K, &img);
    const model_config_t *c = model_config(m);
    const int32_t NE = c->n_expert, K = c->n_expert_used;
    ck_assert_int_ge(c->n_layer, 2);
    ck_assert_int_le(NE, 64);
    expert_shard_t *shard = NULL;
    guild_err_t err = {{0}};
    ck_assert_int_eq(expert_shard_new(&shard, m, NULL, &err), 0);
    const int32_t hint[] = {5, 9, -1, 5, 2, 99, 14, 7, 1, 12, 0, 3};
    const int32_t nh = (int32_t)(sizeof hint / sizeof hint[0]);
    int32_t plan_ids[4] = {0, 4, 8, 12};
    ck_assert_int_eq(K, 4);
    for (int members = 1; members <= 4; members++) {
        int covered[64] = {0}, planned = 0;
        for (int r = 0; r < members; r++) {
            expert_share_t *s = NULL;
            ck_assert_int_eq(expert_share_new(&s, c, members, r, &err), 0);
            for (int32_t il = 0; il < c->n_layer; il++)
                for (int32_t e = 0; e < NE; e++)
                    if (e % 3 != 1)
                        ck_assert_int_eq(expert_share_add(s, il, e, expert_shard_get(shard, il, e), &err), 0);
            expert_share_plan(s, 0, 1, plan_ids); /* the exchange just computed: layer 0 */
            int32_t mine[16];
            const int32_t n = expert_share_hinted(s, 1, nh, hint, mine);
            ck_assert_int_le(n, nh);
            /* the split of the held hinted experts, one pair each occurrence */
            int32_t count[64] = {0}, member[64];
            for (int32_t i = 0; i < nh; i++)
                if (hint[i] >= 0 && hint[i] < NE && hint[i] % 3 != 1)
                    count[hint[i]]++;
            expert_share_split(count, NE, members, member, NULL);
            int32_t want[16], nw = 0;
            for (int32_t i = 0; i < nh; i++) {
                const int32_t e = hint[i];
                bool seen = false;
                for (int32_t j = 0; j < nw && !seen; j++)
                    seen = want[j] == e;
                if (e >= 0 && e < NE && count[e] && member[e] == r && !seen)
                    want[nw++] = e;
            }
            ck_assert_int_eq(n, nw);
            for (int32_t i = 0; i < n; i++) {
                ck_assert_int_eq(mine[i], want[i]);
                covered[mine[i]]++;
            }
            ck_assert_int_eq(expert_share_hinted(s, 7, nh, hint, mine), 0); /* no such layer */
            /* the plan of layer 0 stands; every held expert of layer 1 through the held source */
            expert_pipe_src_t src, all;
            expert_share_src(&src, s);
            expert_share_src_held(&all, s);
            for (int32_t e = 0; e < NE; e++) {
                ck_assert_ptr_null(src.get(src.ctx, 1, e));
                ck_assert(!all.get(all.ctx, 1, e) == (e % 3 == 1));
            }
            for (int32_t e = 0; e < NE; e++)
                planned += src.get(src.ctx, 0, e) != NULL;
            expert_share_destroy(&s);
        }
        ck_assert_int_eq(planned, 3); /* the plan's held experts 0, 8 and 12 (4 % 3 == 1: not held), once */
        for (int32_t e = 0; e < NE; e++) {
            bool hinted = false;
            for (int32_t i = 0; i < nh; i++)
                hinted |= hint[i] == e;
            ck_assert_msg(covered[e] == (hinted && e % 3 != 1), "%d members: expert %d in %d shares", members, e,
                          covered[e]);
        }
    }
    expert_shard_destroy(&shard);
    model_destroy(&m);
    free(img);
}
END_TEST

START_TEST(test_share_errors)
{
    void *img;
    model_t *m = tiny_open(GUILD_TYPE_Q4_K, &img);
    const model_config_t *c = model_config(m);
    expert_share_t *s = NULL;
    guild_err_t err = {{0}};
    ck_assert_int_eq(expert_share_new(&s, c, 2, 2, &err), -1);
    ck_assert_msg(strstr(err.msg, "member 2 of 2"), "%s", err.msg);
    ck_assert_ptr_null(s);
    ck_assert_int_eq(expert_share_new(&s, c, 0, 0, &err), -1);
    expert_shard_t *shard = NULL;
    ck_assert_int_eq(expert_shard_new(&shard, m, NULL, &err), 0);
    ck_assert_int_eq(expert_share_new(&s, c, 2, 1, &err), 0);
    ck_assert_int_eq(expert_share_add(s, 1, 3, expert_shard_get(shard, 1, 3), &err), 0);
    ck_assert_int_eq(expert_share_add(s, 1, 3, expert_shard_get(shard, 1, 3), &err), -1);
    ck_assert_msg(strstr(err.msg, "layer 1 expert 3 is held twice"), "%s", err.msg);
    ck_assert_int_eq(expert_share_count(s), 1);
    expert_share_destroy(&s);
    ck_assert_ptr_null(s);
    expert_share_destroy(&s);
    expert_shard_destroy(&shard);
    model_destroy(&m);
    free(img);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("expert_share");
    TCase *tc = tcase_create("split");
    tcase_add_test(tc, test_split_decode);
    tcase_add_test(tc, test_split_any_counts);
    suite_add_tcase(s, tc);
    tc = tcase_create("members");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_members_same_bits);
    tcase_add_test(tc, test_share_errors);
    tcase_add_test(tc, test_hint_shares);
    suite_add_tcase(s, tc);
    return check_run(s);
}
