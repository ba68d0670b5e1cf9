/* Tests for the multi-process pipeline's pieces: the placement plan (every expert one owner, balanced, nodes
 * and CPUs, no CPU worker for the layers on the GPU), the step region layout, and the worker processes' robustness, talking to a real
 * guild-cpu-worker / guild-gpu-worker as a fake coordinator: garbage, a wrong protocol version, assignments
 * that cannot load (each answered with an Error naming the cause, the worker staying alive), a good
 * assignment followed by one exchange whose expert outputs must be the in-process executor's bits, Shutdown,
 * and a worker leaving on its own when the coordinator goes silent. */
#include "config.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "core/model/expert_digest.h"
#include "core/model/model.h"
#include "core/util/pool.h"
#include "cpu-expert-worker/experts/moe_local.h"
#include "gpu-worker/dense/moe_xchg.h"
#include "ipc/arena.h"
#include "ipc/exchange.h"
#include "ipc/msg.h"
#include "ipc/data.h"
#include "coordinator/placement.h"
#include "core/topo/topo.h"
#include "ipc/step.h"
#include "tests/check_run.h"
#include "tests/tiny_model.h"

/* ---- plan ---- */

static model_config_t cfg_experts(int n_layer, int n_expert)
{
    model_config_t c;
    memset(&c, 0, sizeof c);
    c.n_layer = n_layer;
    c.n_expert = n_expert;
    c.n_expert_used = 2;
    c.ffn.kind = MODEL_FFN_MOE; /* every layer has routed experts */
    return c;
}

/* A dense-first model's leading layers have no experts: no worker owns any, no shard lists them. */
START_TEST(test_plan_dense_layers)
{
    static const int cpus0[] = {0, 1};
    const int *const cpus[] = {cpus0};
    const int n_cpus[] = {2};
    placement_topo_t topo = {.n_nodes = 1, .cpus = cpus, .n_cpus = n_cpus};
    model_config_t c = cfg_experts(4, 8);
    c.layout = MODEL_LAYOUT_DENSE_FIRST;
    c.n_layer_dense_lead = 2;
    c.ffn_lead.kind = MODEL_FFN_DENSE;
    placement_t *p = NULL;
    guild_err_t err = {{0}};
    ck_assert_msg(placement_new(&p, &c, 2, NULL, &topo, &err) == 0, "%s", err.msg);
    for (int il = 0; il < 4; il++)
        for (int k = 0; k < 2; k++) {
            uint32_t first[8], count[8], f, n;
            placement_range(p, k, il, &f, &n);
            ck_assert_uint_eq(n, il < 2 ? 0 : 4);
            ck_assert_int_eq(placement_shard(p, k, il, first, count, 8), il < 2 ? 0 : 1);
            for (int e = 0; e < 8; e++)
                ck_assert_int_eq(placement_owner(p, il, e), il < 2 ? -1 : e / 4);
        }
    placement_destroy(&p);
}
END_TEST

START_TEST(test_plan_every_expert_once)
{
    static const int cpus0[] = {0, 1, 2, 3}, cpus1[] = {4, 5, 6, 7};
    const int *const cpus[] = {cpus0, cpus1};
    const int n_cpus[] = {4, 4};
    placement_topo_t topo = {.n_nodes = 2, .cpus = cpus, .n_cpus = n_cpus};
    static const int experts[] = {1, 2, 7, 8, 60, 128};
    for (size_t ie = 0; ie < sizeof experts / sizeof experts[0]; ie++) {
        int E = experts[ie];
        for (int K = 1; K <= E && K <= 9; K++) {
            model_config_t c = cfg_experts(3, E);
            placement_t *p = NULL;
            guild_err_t err = {{0}};
            ck_assert_msg(placement_new(&p, &c, K, NULL, &topo, &err) == 0, "%s", err.msg);
            ck_assert_int_eq(placement_workers(p), K);
            for (int il = 0; il < 3; il++) {
                int owners[128] = {0};
                uint32_t lo = UINT32_MAX, hi = 0, next = 0;
                for (int k = 0; k < K; k++) {
                    uint32_t first, count;
                    placement_range(p, k, il, &first, &count);
                    ck_assert_uint_eq(first, next); /* contiguous, in worker order */
                    next += count;
                    lo = count < lo ? count : lo;
                    hi = count > hi ? count : hi;
                    for (uint32_t e = first; e < first + count; e++) {
                        owners[e]++;
                        ck_assert_int_eq(placement_owner(p, il, (int)e), k);
                    }
                }
                ck_assert_uint_eq(next, (uint32_t)E);
                ck_assert_uint_le(hi - lo, 1);
                for (int e = 0; e < E; e++)
                    ck_assert_int_eq(owners[e], 1);
            }
            placement_destroy(&p);
            ck_assert_ptr_null(p);
        }
    }
}
END_TEST

START_TEST(test_plan_nodes_and_cpus)
{
    static const int cpus0[] = {0, 1, 2, 3}, cpus1[] = {4, 5, 6, 7};
    const int *const cpus[] = {cpus0, cpus1};
    const int n_cpus[] = {4, 4};
    placement_topo_t topo = {.n_nodes = 2, .cpus = cpus, .n_cpus = n_cpus};
    model_config_t c = cfg_experts(2, 16);
    placement_t *p = NULL;
    guild_err_t err = {{0}};
    const int *pc;

    /* default: one worker per node, the whole node each */
    ck_assert_int_eq(placement_new(&p, &c, 0, NULL, &topo, &err), 0);
    ck_assert_int_eq(placement_workers(p), 2);
    ck_assert_int_eq(placement_node(p, 0), 0);
    ck_assert_int_eq(placement_node(p, 1), 1);
    ck_assert_int_eq(placement_cpus(p, 1, &pc), 4);
    ck_assert_int_eq(pc[0], 4);
    placement_destroy(&p);

    /* four workers: two per node, round robin, each half of its node */
    ck_assert_int_eq(placement_new(&p, &c, 4, NULL, &topo, &err), 0);
    static const int node[] = {0, 1, 0, 1}, first_cpu[] = {0, 4, 2, 6};
    for (int k = 0; k < 4; k++) {
        ck_assert_int_eq(placement_node(p, k), node[k]);
        ck_assert_int_eq(placement_cpus(p, k, &pc), 2);
        ck_assert_int_eq(pc[0], first_cpu[k]);
        ck_assert_int_eq(pc[1], first_cpu[k] + 1);
    }
    placement_destroy(&p);

    /* split nodes share no CPU; the memory of each worker on its own node */
    ck_assert_int_eq(placement_new(&p, &c, 4, NULL, &topo, &err), 0);
    for (int k = 0; k < 4; k++) {
        ck_assert(!placement_shared(p, k));
        ck_assert_int_eq(placement_mem_node(p, k), placement_node(p, k));
    }
    ck_assert_int_eq(placement_node_cpus(p, 0), 4);
    ck_assert_int_eq(placement_node_cpus(p, 1), 4);
    placement_destroy(&p);

    /* more workers on a node than CPUs: one CPU each, round robin, every CPU used; those doubled up say so */
    static const int two[] = {0, 1};
    const int *const one_node[] = {two};
    const int n_two[] = {2};
    placement_topo_t small = {.n_nodes = 1, .cpus = one_node, .n_cpus = n_two};
    ck_assert_int_eq(placement_new(&p, &c, 3, NULL, &small, &err), 0);
    static const int cpu_of[] = {0, 1, 0};
    static const bool doubled[] = {true, false, true};
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(placement_node(p, k), 0);
        ck_assert_int_eq(placement_cpus(p, k, &pc), 1);
        ck_assert_int_eq(pc[0], cpu_of[k]);
        ck_assert_int_eq(placement_shared(p, k), doubled[k]);
    }
    ck_assert_int_eq(placement_node_cpus(p, 0), 2);
    placement_destroy(&p);
    /* exactly as many workers as CPUs: one each, none shared */
    ck_assert_int_eq(placement_new(&p, &c, 2, NULL, &small, &err), 0);
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(placement_cpus(p, k, &pc), 1);
        ck_assert_int_eq(pc[0], k);
        ck_assert(!placement_shared(p, k));
    }
    placement_destroy(&p);

    /* given nodes (--cpu-nodes) whose memory is on another NUMA node: the plan's node for the CPUs, the given
     * memory node for the binding */
    const int mem[] = {0, 0};
    placement_topo_t fake = {.n_nodes = 2, .cpus = cpus, .n_cpus = n_cpus, .mem_node = mem};
    ck_assert_int_eq(placement_new(&p, &c, 2, NULL, &fake, &err), 0);
    ck_assert_int_eq(placement_node(p, 1), 1);
    ck_assert_int_eq(placement_mem_node(p, 1), 0);
    ck_assert_int_eq(placement_cpus(p, 1, &pc), 4);
    ck_assert_int_eq(pc[0], 4);
    placement_destroy(&p);

    /* threads: a worker's CPUs, divided among the workers pinned to the same ones, at least 1; fewer when asked */
    ck_assert_int_eq(placement_new(&p, &c, 3, NULL, &small, &err), 0);
    ck_assert_int_eq(placement_threads(p, 0, 16, false), 1);
    ck_assert_int_eq(placement_threads(p, 2, 16, true), 1);
    placement_destroy(&p);
    ck_assert_int_eq(placement_new(&p, &c, 4, NULL, &topo, &err), 0);
    for (int k = 0; k < 4; k++) {
        ck_assert_int_eq(placement_threads(p, k, 8, false), 2); /* not given: its 2 CPUs */
        ck_assert_int_eq(placement_threads(p, k, 14, true), 2); /* too many: cut */
        ck_assert_int_eq(placement_threads(p, k, 1, true), 1);  /* fewer: as asked */
    }
    placement_destroy(&p);
    ck_assert_int_eq(placement_new(&p, &c, 0, NULL, &topo, &err), 0);
    ck_assert_int_eq(placement_threads(p, 1, 3, true), 3);
    ck_assert_int_eq(placement_threads(p, 1, 64, false), 4);
    placement_destroy(&p);

    /* more workers than experts */
    ck_assert_int_eq(placement_new(&p, &c, 17, NULL, &topo, &err), -1);
    ck_assert_ptr_null(p);
    ck_assert_msg(strstr(err.msg, "17 CPU workers: expected 1 to 16"), "%s", err.msg);
}
END_TEST

/* The CPUs left free for the GPU worker and the coordinator (keep_free): the last of node 0, at most a quarter of
 * it, never below a CPU per worker there; the workers split the rest. A machine of 16 CPUs as the device's, one
 * of 2 nodes of 8, and small ones. */
START_TEST(test_plan_keep_free)
{
    int c16[16];
    for (int i = 0; i < 16; i++)
        c16[i] = i;
    const int *const one[] = {c16}, *const two[] = {c16, c16 + 8};
    const int n16[] = {16}, n8x2[] = {8, 8};
    model_config_t c = cfg_experts(2, 128);
    placement_t *p = NULL;
    guild_err_t err = {{0}};
    const int *pc;
    /* K workers on the 16 CPUs: their first CPU and count, then the kept CPUs */
    static const struct {
        int K, keep, first[4], n[4], kept;
    } cases[] = {
        {1, 1, {0}, {15}, 1},     /* the cuda backend's pipeline (placement_keep_free_for) */
        {1, 2, {0}, {14}, 2},
        {2, 2, {0, 7}, {7, 7}, 2},
        {4, 2, {0, 3, 7, 10}, {3, 4, 3, 4}, 2},
        {1, 0, {0}, {16}, 0},
        {2, 8, {0, 6}, {6, 6}, 4},  /* a quarter at most */
        {15, 2, {0}, {1}, 1},       /* a CPU per worker stays */
        {16, 2, {0}, {1}, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        placement_topo_t topo = {.n_nodes = 1, .cpus = one, .n_cpus = n16, .keep_free = cases[i].keep};
        ck_assert_msg(placement_new(&p, &c, cases[i].K, NULL, &topo, &err) == 0, "%s", err.msg);
        for (int k = 0; k < cases[i].K && k < 4 && (k == 0 || cases[i].n[k]); k++) {
            ck_assert_int_eq(placement_cpus(p, k, &pc), cases[i].n[k]);
            ck_assert_int_eq(pc[0], cases[i].first[k]);
            ck_assert_int_eq(placement_threads(p, k, 16, false), cases[i].n[k]);
            ck_assert(!placement_shared(p, k));
        }
        ck_assert_int_eq(placement_kept(p, &pc), cases[i].kept);
        for (int j = 0; j < cases[i].kept; j++)
            ck_assert_int_eq(pc[j], 16 - cases[i].kept + j);
        placement_destroy(&p);
    }
    /* two nodes: only node 0 keeps CPUs */
    placement_topo_t topo = {.n_nodes = 2, .cpus = two, .n_cpus = n8x2, .keep_free = 2};
    ck_assert_int_eq(placement_new(&p, &c, 2, NULL, &topo, &err), 0);
    ck_assert_int_eq(placement_cpus(p, 0, &pc), 6);
    ck_assert_int_eq(placement_cpus(p, 1, &pc), 8);
    ck_assert_int_eq(pc[0], 8);
    ck_assert_int_eq(placement_kept(p, &pc), 2);
    ck_assert_int_eq(pc[0], 6);
    placement_destroy(&p);
    /* a node of 2 CPUs (this development machine) keeps none */
    placement_topo_t small = {.n_nodes = 1, .cpus = one, .n_cpus = (const int[]){2}, .keep_free = 2};
    ck_assert_int_eq(placement_new(&p, &c, 1, NULL, &small, &err), 0);
    ck_assert_int_eq(placement_cpus(p, 0, &pc), 2);
    ck_assert_int_eq(placement_kept(p, &pc), 0);
    placement_destroy(&p);
    /* the pipeline's choice: one CPU with the cuda backend (the GPU worker's host thread), none with the cpu backend
     * or with workers started by hand */
    ck_assert_int_eq(placement_keep_free_for("cuda", false), 1);
    ck_assert_int_eq(placement_keep_free_for("cuda", true), 0);
    ck_assert_int_eq(placement_keep_free_for("cpu", false), 0);
    ck_assert_int_eq(placement_keep_free_for(NULL, false), 0);
}
END_TEST

/* --cpu-nodes: nodes made of this process's own CPUs (one CPU a node: the topology of a machine of several nodes,
 * faked on this one), and the lists refused with the reason. */
START_TEST(test_plan_cpu_nodes)
{
    int all[64];
    const int n = topo_all_cpus(all, 64);
    ck_assert_int_ge(n, 1);
    model_config_t c = cfg_experts(2, 16);
    placement_t *p = NULL;
    guild_err_t err = {{0}};
    const int *pc;
    char spec[64];
    if (n >= 2) {
        snprintf(spec, sizeof spec, "%d/%d", all[0], all[1]);
        ck_assert_msg(placement_new_local(&p, &c, 0, NULL, spec, 2, &err) == 0, "%s", err.msg);
        ck_assert_int_eq(placement_workers(p), 2); /* default: one worker per node */
        for (int k = 0; k < 2; k++) {
            ck_assert_int_eq(placement_node(p, k), k);
            ck_assert_int_eq(placement_cpus(p, k, &pc), 1);
            ck_assert_int_eq(pc[0], all[k]);
            ck_assert_int_eq(placement_threads(p, k, 8, false), 1);
            ck_assert(!placement_shared(p, k));
            ck_assert_int_eq(placement_mem_node(p, k), placement_mem_node(p, 0)); /* CPUs of one real node here */
        }
        placement_destroy(&p);
        /* four workers on two one-CPU nodes: two on each CPU, said */
        ck_assert_msg(placement_new_local(&p, &c, 4, NULL, spec, 2, &err) == 0, "%s", err.msg);
        for (int k = 0; k < 4; k++) {
            ck_assert_int_eq(placement_cpus(p, k, &pc), 1);
            ck_assert_int_eq(pc[0], all[k % 2]);
            ck_assert(placement_shared(p, k));
        }
        placement_destroy(&p);
    }
    /* a range and a list in one node */
    snprintf(spec, sizeof spec, "%d-%d", all[0], all[0]);
    ck_assert_msg(placement_new_local(&p, &c, 1, NULL, spec, 0, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(placement_cpus(p, 0, &pc), 1);
    placement_destroy(&p);

    static const struct {
        const char *spec, *msg;
    } bad[] = {
        {"x", "expected CPU lists such as 0-7,16-23"},
        {"3-1", "expected CPU lists"},
        {"0;1", "expected CPU lists"},
        {"4000", "CPU 4000 is not one this process may run on"},
        {"5000", "beyond what Guild supports"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(placement_new_local(&p, &c, 1, NULL, bad[i].spec, 0, &err), -1);
        ck_assert_ptr_null(p);
        ck_assert_msg(strstr(err.msg, bad[i].msg), "%s: %s", bad[i].spec, err.msg);
    }
    snprintf(spec, sizeof spec, "%d/%d", all[0], all[0]);
    ck_assert_int_eq(placement_new_local(&p, &c, 1, NULL, spec, 0, &err), -1);
    ck_assert_msg(strstr(err.msg, "is given twice"), "%s", err.msg);
    snprintf(spec, sizeof spec, "%d/", all[0]);
    ck_assert_int_eq(placement_new_local(&p, &c, 1, NULL, spec, 0, &err), -1);
    ck_assert_msg(strstr(err.msg, "node 1 has no CPUs"), "%s", err.msg);
}
END_TEST

/* Layers on the GPU (bit il of the mask): no CPU worker owns their experts; every other expert of every layer
 * has exactly one owner, the same split as without the GPU. */
START_TEST(test_plan_gpu_layers)
{
    static const int cpus0[] = {0, 1};
    const int *const cpus[] = {cpus0};
    const int n_cpus[] = {2};
    placement_topo_t topo = {.n_nodes = 1, .cpus = cpus, .n_cpus = n_cpus};
    enum { L = 5, E = 7 };
    static const unsigned masks[] = {0x00, 0x01, 0x0a, 0x10, 0x1e, 0x1f};
    for (size_t im = 0; im < sizeof masks / sizeof masks[0]; im++)
        for (int K = 1; K <= 4; K++) {
            model_config_t c = cfg_experts(L, E);
            bool gpu[L];
            uint8_t ge[L * E];
            for (int il = 0; il < L; il++) {
                gpu[il] = masks[im] >> il & 1;
                memset(ge + il * E, gpu[il], E);
            }
            placement_t *p = NULL, *ref = NULL;
            guild_err_t err = {{0}};
            ck_assert_msg(placement_new(&p, &c, K, ge, &topo, &err) == 0, "%s", err.msg);
            ck_assert_msg(placement_new(&ref, &c, K, NULL, &topo, &err) == 0, "%s", err.msg);
            for (int il = 0; il < L; il++) {
                ck_assert(placement_on_gpu(p, il) == gpu[il] && !placement_on_gpu(ref, il));
                int owners[E] = {0};
                for (int k = 0; k < K; k++) {
                    uint32_t first, count, rfirst, rcount;
                    placement_range(p, k, il, &first, &count);
                    placement_range(ref, k, il, &rfirst, &rcount);
                    if (gpu[il]) {
                        ck_assert_uint_eq(count, 0);
                        continue;
                    }
                    ck_assert(first == rfirst && count == rcount);
                    for (uint32_t e = first; e < first + count; e++)
                        owners[e]++;
                }
                for (int e = 0; e < E; e++) {
                    ck_assert_int_eq(owners[e], gpu[il] ? 0 : 1);
                    const int k = placement_owner(p, il, e);
                    if (gpu[il]) {
                        ck_assert_int_eq(k, -1);
                        continue;
                    }
                    uint32_t first, count;
                    ck_assert(k >= 0 && k < K);
                    placement_range(p, k, il, &first, &count);
                    ck_assert((uint32_t)e >= first && (uint32_t)e < first + count);
                }
            }
            placement_destroy(&p);
            placement_destroy(&ref);
        }
}
END_TEST

/* Individual experts on the GPU (a plan's hot experts): every expert has exactly one owner, the GPU or a CPU
 * worker; a worker's shard is its range less the GPU's experts, as ascending runs. */
START_TEST(test_plan_gpu_experts)
{
    static const int cpus0[] = {0, 1};
    const int *const cpus[] = {cpus0};
    const int n_cpus[] = {2};
    placement_topo_t topo = {.n_nodes = 1, .cpus = cpus, .n_cpus = n_cpus};
    enum { L = 4, E = 13 };
    uint64_t rng = 7;
    for (int round = 0; round < 20; round++)
        for (int K = 1; K <= 5; K++) {
            model_config_t c = cfg_experts(L, E);
            uint8_t ge[L * E];
            for (int i = 0; i < L * E; i++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                ge[i] = (rng >> 33) % 3 == 0; /* about a third */
            }
            memset(ge + 2 * E, 1, E); /* layer 2 wholly on the GPU */
            placement_t *p = NULL;
            guild_err_t err = {{0}};
            ck_assert_msg(placement_new(&p, &c, K, ge, &topo, &err) == 0, "%s", err.msg);
            for (int il = 0; il < L; il++) {
                ck_assert(placement_on_gpu(p, il) == (il == 2));
                int owners[E] = {0};
                for (int k = 0; k < K; k++) {
                    uint32_t first[E], count[E], rf, rc;
                    const int n = placement_shard(p, k, il, first, count, E);
                    placement_range(p, k, il, &rf, &rc);
                    uint32_t last_end = 0;
                    for (int r = 0; r < n; r++) {
                        ck_assert(count[r] > 0 && first[r] >= rf && first[r] + count[r] <= rf + rc);
                        ck_assert(r == 0 || first[r] > last_end); /* ascending, runs apart */
                        last_end = first[r] + count[r];
                        for (uint32_t e = first[r]; e < first[r] + count[r]; e++) {
                            ck_assert(!ge[il * E + (int)e]);
                            owners[e]++;
                            ck_assert_int_eq(placement_owner(p, il, (int)e), k);
                        }
                    }
                }
                for (int e = 0; e < E; e++) {
                    ck_assert_int_eq(owners[e] + ge[il * E + e], 1);
                    ck_assert_int_eq(placement_expert_on_gpu(p, il, e), ge[il * E + e]);
                    if (ge[il * E + e])
                        ck_assert_int_eq(placement_owner(p, il, e), -1);
                }
            }
            placement_destroy(&p);
        }
}
END_TEST

/* What guild plan prints for layers on the GPU: their list, and each worker's experts of the other layers. */
START_TEST(test_plan_print_gpu_layers)
{
    static const int cpus0[] = {0, 1};
    const int *const cpus[] = {cpus0};
    const int n_cpus[] = {2};
    placement_topo_t topo = {.n_nodes = 1, .cpus = cpus, .n_cpus = n_cpus};
    tiny_spec_t s = tiny_spec("qwen3moe");
    s.n_layer = 4;
    void *image;
    size_t size;
    model_t *m = NULL;
    guild_err_t err = {{0}};
    tiny_model_image(&s, &image, &size);
    ck_assert_msg(tiny_model_open(image, size, &m, &err) == 0, "%s", err.msg);
    static const struct {
        bool gpu[4];
        const char *want[3];
    } cases[] = {
        {{false, false, false, false}, {"plan: 2 CPU workers for 4 layers x 8 experts (top-2)\n",
                                        "experts 0-3 of every layer (16 experts, ", "experts 4-7 of every layer"}},
        {{true, false, true, true}, {"; the experts of layers 0,2-3 stay on the GPU\n",
                                     "experts 0-3 of layer 1 (4 experts, ", "experts 4-7 of layer 1 ("}},
        {{true, true, false, false}, {"; the experts of layers 0-1 stay on the GPU\n", "of layers 2-3 (8 experts, ",
                                      "experts 4-7 of layers 2-3"}},
        {{true, true, true, true}, {"; the experts of every layer stay on the GPU\n", "cpus 0, 1 thread, no experts\n",
                                    "cpus 1, 1 thread, no experts\n"}},
        /* two single experts of layer 1 (the first worker's 0 and the second's 5) on the GPU too */
        {{true, false, false, false}, {"; 2 experts of the other layers stay on the GPU too",
                                       "experts 0-3 of layers 1-3 but those on the GPU (11 experts, ",
                                       "experts 4-7 of layers 1-3 but those on the GPU (11 experts, "}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        placement_t *p = NULL;
        uint8_t ge[4 * 8];
        for (int il = 0; il < 4; il++)
            memset(ge + il * 8, cases[i].gpu[il], 8);
        if (i == 4)
            ge[1 * 8 + 0] = ge[1 * 8 + 5] = 1;
        ck_assert(placement_new(&p, model_config(m), 2, ge, &topo, &err) == 0);
        char *buf = NULL;
        size_t len = 0;
        FILE *out = open_memstream(&buf, &len);
        placement_print(p, m, 1, false, out);
        fclose(out);
        for (int j = 0; j < 3; j++)
            ck_assert_msg(strstr(buf, cases[i].want[j]), "case %zu: no '%s' in:\n%s", i, cases[i].want[j], buf);
        free(buf);
        placement_destroy(&p);
    }
    model_destroy(&m);
    free(image);
}
END_TEST

/* ---- step region ---- */

START_TEST(test_step_layout)
{
    guild_step_shape_t bad[] = {{0, 1, 10}, {4, 0, 10}, {4, 5, 10}, {4, 1, 0}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_uint_eq(guild_step_memsize(&bad[i]), 0);
    guild_step_shape_t s = {.max_tokens = 7, .max_out = 3, .n_vocab = 101};
    size_t n = guild_step_memsize(&s);
    ck_assert_uint_ge(n, sizeof(guild_step_shared_t) + 7 * 4 + 3 * 4 + 3 * 101 * 4);
    void *mem = aligned_alloc(64, (n + 63) & ~(size_t)63);
    guild_err_t err = {{0}};
    memset(mem, 0xab, n);
    ck_assert_int_eq(guild_step_attach(&(guild_step_t){0}, mem, n, &err), -1);
    ck_assert_msg(strstr(err.msg, "bad magic"), "%s", err.msg);
    ck_assert_int_eq(guild_step_init(mem, n - 64, &s, &err), -1);
    ck_assert_int_eq(guild_step_init(mem, n, &s, &err), 0);
    guild_step_t st;
    ck_assert_msg(guild_step_attach(&st, mem, n, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(st.shape.n_vocab, 101);
    ck_assert_uint_eq(guild_doorbell_load(&st.sh->request), 0);
    /* arrays inside the region, disjoint, 64-byte aligned */
    char *base = mem;
    ck_assert((char *)st.tokens >= base + sizeof(guild_step_shared_t));
    ck_assert((char *)st.out_rows >= (char *)(st.tokens + 7));
    ck_assert((char *)st.logits >= (char *)(st.out_rows + 3));
    ck_assert((char *)(st.logits + 3 * 101) <= base + n);
    ck_assert_uint_eq((uintptr_t)st.logits % 64, 0);
    /* a pick request's arrays (GUILD_STEP_PICK): after the others, inside the region */
    ck_assert((char *)st.seq_ids >= (char *)(st.logits + 3 * 101));
    ck_assert((char *)st.positions >= (char *)(st.seq_ids + 7));
    ck_assert((char *)st.full >= (char *)(st.positions + 7));
    ck_assert((char *)st.picks >= (char *)(st.full + 3));
    ck_assert((char *)(st.picks + 3) <= base + n);
    ck_assert_uint_eq((uintptr_t)st.full % 64, 0);
    ck_assert_uint_eq((uintptr_t)st.picks % 64, 0);
    ck_assert_uint_eq(st.sh->full_offset, (uint64_t)((char *)st.full - base));
    ck_assert_uint_eq(st.sh->picks_offset, (uint64_t)((char *)st.picks - base));
    ck_assert_int_eq(guild_step_attach(&st, mem, n - 64, &err), -1);
    free(mem);
}
END_TEST

/* ---- worker processes against a fake coordinator ---- */

static char dir[256], endpoint[300], model_path[300];
static void *zctx, *router;
static pid_t child;
static bool child_gpu; /* the Assigns carry GpuWorkerOptions (the worker started is guild-gpu-worker) */
static uint32_t gpu_resident_layer = UINT32_MAX; /* < UINT32_MAX: the GpuWorkerOptions name it GPU-resident */
static guild_msg_peer_t peer;

static void write_model(void)
{
    tiny_spec_t spec = tiny_spec("qwen3moe");
    spec.wtype = GUILD_TYPE_Q8_0;
    void *data;
    size_t size;
    tiny_model_image(&spec, &data, &size);
    FILE *f = fopen(model_path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, size, f), size);
    ck_assert_int_eq(fclose(f), 0);
    free(data);
}

static void fake_setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/guild-check-pipeline-%d-XXXXXX", (int)getpid());
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(endpoint, sizeof endpoint, "ipc://%s/control", dir);
    snprintf(model_path, sizeof model_path, "%s/model.gguf", dir);
    write_model();
    guild_err_t err = {{0}};
    zctx = zmq_ctx_new();
    router = guild_msg_router_new(zctx, endpoint, &err);
    ck_assert_msg(router, "%s", err.msg);
    child = 0;
}

static void fake_teardown(void)
{
    if (child > 0) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
    }
    guild_msg_close(&router);
    zmq_ctx_term(zctx);
    /* everything the tests and the processes they ran left in the directory */
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char p[600];
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    }
    if (d)
        closedir(d);
    ck_assert_msg(rmdir(dir) == 0, "cannot remove %s", dir);
}

static void start(const char *bin, int with_node)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", GUILD_BUILDDIR, bin);
    child_gpu = !strcmp(bin, "guild-gpu-worker");
    child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        if (with_node)
            execl(path, bin, "--node", "0", "--connect", endpoint, (char *)NULL);
        else
            execl(path, bin, "--connect", endpoint, (char *)NULL);
        _exit(127);
    }
}

/* Next message of body `body` (others skipped), within 10 s. */
static Guild__Envelope *expect(Guild__Envelope__BodyCase body)
{
    for (int i = 0; i < 1000; i++) {
        Guild__Envelope *env = NULL;
        guild_err_t err = {{0}};
        guild_msg_peer_t from;
        guild_msg_result_t r = guild_msg_recv(router, 10, &from, &env, &err);
        ck_assert_msg(r != GUILD_MSG_ERROR && r != GUILD_MSG_BAD, "%s", err.msg);
        if (r != GUILD_MSG_OK)
            continue;
        peer = from;
        if (env->body_case == body)
            return env;
        guild_msg_free(&env);
    }
    ck_abort_msg("no %d message from the worker within 10 s", (int)body);
    return NULL;
}

/* Expects an Error whose message contains needle. */
static void expect_error(Guild__ErrorCode code, const char *needle)
{
    Guild__Envelope *env = expect(GUILD__ENVELOPE__BODY_ERROR);
    ck_assert_msg(strstr(env->error->message, needle), "error '%s' lacks '%s'", env->error->message, needle);
    ck_assert_int_eq(env->error->code, code);
    ck_assert(!env->error->fatal);
    guild_msg_free(&env);
}

static void send_env(Guild__Envelope *env)
{
    guild_err_t err = {{0}};
    ck_assert_msg(guild_msg_send(router, &peer, env, &err) == 0, "%s", err.msg);
}

/* The worker still answers heartbeats. */
static void expect_alive(void)
{
    Guild__Envelope env = GUILD__ENVELOPE__INIT;
    Guild__Heartbeat hb = GUILD__HEARTBEAT__INIT;
    hb.seq = 77;
    env.body_case = GUILD__ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &hb;
    send_env(&env);
    Guild__Envelope *rep = expect(GUILD__ENVELOPE__BODY_HEARTBEAT);
    ck_assert_uint_eq(rep->heartbeat->seq, 77);
    ck_assert_ptr_nonnull(rep->heartbeat->stats);
    guild_msg_free(&rep);
    ck_assert_int_eq(waitpid(child, NULL, WNOHANG), 0);
}

static void send_raw(const void *data, size_t len)
{
    ck_assert_int_ge(zmq_send(router, peer.id, peer.len, ZMQ_SNDMORE), 0);
    ck_assert_int_ge(zmq_send(router, data, len, 0), 0);
}

/* An Assign over `arena` (may be NULL) with one layer-shard range. */
static void send_assign_data(uint64_t generation, const char *path, uint32_t layer, uint32_t first, uint32_t count,
                             guild_arena_t *arena, const char *backend, uint32_t silence_ms, const char *data)
{
    Guild__Envelope env = GUILD__ENVELOPE__INIT;
    Guild__Assign a = GUILD__ASSIGN__INIT;
    Guild__ArenaRef ar = GUILD__ARENA_REF__INIT;
    Guild__CpuWorkerOptions co = GUILD__CPU_WORKER_OPTIONS__INIT;
    Guild__GpuWorkerOptions go = GUILD__GPU_WORKER_OPTIONS__INIT;
    Guild__CudaOptions cuda = GUILD__CUDA_OPTIONS__INIT;
    Guild__LayerShard ls[2] = {GUILD__LAYER_SHARD__INIT, GUILD__LAYER_SHARD__INIT};
    Guild__LayerShard *lsp[2] = {&ls[0], &ls[1]};
    Guild__ExpertRange r[2] = {GUILD__EXPERT_RANGE__INIT, GUILD__EXPERT_RANGE__INIT};
    Guild__ExpertRange *rp[2][1] = {{&r[0]}, {&r[1]}};
    a.model_path = (char *)path;
    a.generation = generation;
    for (int i = 0; i < 2; i++) {
        ls[i].layer = i ? layer : 0;
        ls[i].n_experts = 1;
        ls[i].experts = rp[i];
        r[i].first = i ? first : 0;
        r[i].count = i ? count : 8;
    }
    a.n_shard = layer == UINT32_MAX ? 0 : layer == 0 ? 1 : 2; /* UINT32_MAX: no experts (all on the GPU) */
    a.shard = lsp;
    ar.name = arena ? (char *)guild_arena_name(arena) : "/nonexistent/arena";
    ar.layout_version = GUILD_ARENA_LAYOUT_VERSION;
    ar.size = arena ? guild_arena_size(arena) : 4096;
    ar.tag = arena ? guild_arena_tag(arena) : 1;
    a.arena = data ? NULL : &ar;
    if (child_gpu) {
        go.n_threads = 1;
        go.n_batch = 4;
        go.max_out = 1;
        go.n_ctx = 32;
        go.silence_ms = silence_ms;
        go.backend = (char *)(backend ? backend : "");
        if (gpu_resident_layer != UINT32_MAX) {
            cuda.n_resident_layers = 1;
            cuda.resident_layers = &gpu_resident_layer;
            go.cuda = &cuda;
        }
        a.options_case = GUILD__ASSIGN__OPTIONS_GPU;
        a.gpu = &go;
    } else {
        co.data_endpoint = (char *)(data ? data : "");
        co.n_threads = 1;
        co.node = 0;
        co.silence_ms = silence_ms;
        a.options_case = GUILD__ASSIGN__OPTIONS_CPU;
        a.cpu = &co;
    }
    env.body_case = GUILD__ENVELOPE__BODY_ASSIGN;
    env.assign = &a;
    send_env(&env);
}

static void send_assign(uint64_t generation, const char *path, uint32_t layer, uint32_t first, uint32_t count,
                        guild_arena_t *arena, const char *backend, uint32_t silence_ms)
{
    send_assign_data(generation, path, layer, first, count, arena, backend, silence_ms, NULL);
}

static void send_shutdown_and_reap(void)
{
    Guild__Envelope env = GUILD__ENVELOPE__INIT;
    Guild__Shutdown sd = GUILD__SHUTDOWN__INIT;
    sd.reason = "test done";
    env.body_case = GUILD__ENVELOPE__BODY_SHUTDOWN;
    env.shutdown = &sd;
    send_env(&env);
    int st = 0;
    for (int i = 0; i < 300 && waitpid(child, &st, WNOHANG) == 0; i++)
        usleep(10000);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "worker did not exit cleanly on Shutdown (status %#x)", st);
    child = 0;
}

START_TEST(test_cpu_worker_reports_and_survives)
{
    start("guild-cpu-worker", 1);
    Guild__Envelope *reg = expect(GUILD__ENVELOPE__BODY_REGISTER_WORKER);
    ck_assert_int_eq(reg->register_worker->role, GUILD__ROLE__ROLE_CPU_WORKER);
    ck_assert_int_eq(reg->register_worker->pid, child);
    ck_assert_int_eq(reg->register_worker->node, 0);
    guild_msg_free(&reg);

    /* garbage, then a future protocol version: errors back, still alive */
    static const uint8_t junk[] = {0xff, 0x13, 0x00, 0x42, 0x99};
    send_raw(junk, sizeof junk);
    expect_error(GUILD__ERROR_CODE__ERROR_PROTOCOL, "bad message: malformed envelope");
    uint8_t buf[64];
    Guild__Envelope env = GUILD__ENVELOPE__INIT;
    Guild__Shutdown sd = GUILD__SHUTDOWN__INIT;
    env.protocol_version = 99;
    env.body_case = GUILD__ENVELOPE__BODY_SHUTDOWN;
    env.shutdown = &sd;
    send_raw(buf, guild__envelope__pack(&env, buf));
    expect_error(GUILD__ERROR_CODE__ERROR_PROTOCOL, "protocol version 99");
    expect_alive();

    /* assignments that cannot load, each with its cause */
    send_assign(1, "/nonexistent/model.gguf", 0, 0, 0, NULL, NULL, 0);
    expect_error(GUILD__ERROR_CODE__ERROR_MODEL, "/nonexistent/model.gguf");
    send_assign(2, model_path, 5, 0, 2, NULL, NULL, 0);
    expect_error(GUILD__ERROR_CODE__ERROR_MODEL, "layer 5, the model has 2 layers");
    send_assign(3, model_path, 1, 6, 4, NULL, NULL, 0);
    expect_error(GUILD__ERROR_CODE__ERROR_MODEL, "layer 1: experts 6..9, the model has 8 per layer");
    send_assign(4, model_path, 1, 0, 8, NULL, NULL, 0);
    expect_error(GUILD__ERROR_CODE__ERROR_ARENA, "/nonexistent/arena");
    child_gpu = true; /* another role's options */
    send_assign(4, model_path, 1, 0, 8, NULL, "cpu", 0);
    child_gpu = false;
    expect_error(GUILD__ERROR_CODE__ERROR_PROTOCOL, "no CPU worker options");
    expect_alive();

    /* a good assignment: layer 0 whole, layer 1 experts 2..5; one exchange against the in-process executor */
    guild_exchange_shape_t xs = {.max_tokens = 4, .n_embd = 64, .n_used = 2, .n_slots = 2, .n_workers = 1};
    guild_arena_request_t req = {GUILD_ARENA_KIND_EXCHANGE, 0, guild_exchange_memsize(&xs)};
    guild_arena_opts_t ao = {.pages = GUILD_ARENA_PAGES_SMALL};
    guild_err_t err = {{0}};
    guild_arena_t *arena = guild_arena_create(&req, 1, &ao, &err);
    ck_assert_msg(arena, "%s", err.msg);
    size_t rs;
    void *xr = guild_arena_region(arena, GUILD_ARENA_KIND_EXCHANGE, 0, &rs);
    ck_assert_int_eq(guild_exchange_init(xr, rs, &xs, &err), 0);
    guild_exchange_t *x = guild_exchange_attach(xr, rs, &err);
    ck_assert_ptr_nonnull(x);
    guild_arena_publish(arena);
    send_assign(5, model_path, 1, 2, 4, arena, NULL, 0);
    Guild__Envelope *rd = expect(GUILD__ENVELOPE__BODY_READY);
    ck_assert_uint_eq(rd->ready->generation, 5);
    ck_assert_uint_eq(rd->ready->first_seq, 1);
    ck_assert_uint_gt(rd->ready->resident_bytes, 0);
    guild_msg_free(&rd);

    model_t *m = NULL;
    guild_pool_t *pool = NULL;
    moe_exec_t *local = NULL;
    ck_assert_int_eq(model_new(&m, model_path, &err), 0);
    ck_assert_int_eq(guild_pool_new(&pool, 1, NULL, &err), 0);
    ck_assert_int_eq(moe_local_new(&local, m, pool, &err), 0);
    float xin[4 * 64], want[4 * 2 * 64];
    int32_t ids[4 * 2] = {2, 5, 3, 4, 5, 2, 4, 3}; /* all owned in layer 1 */
    for (int i = 0; i < 4 * 64; i++)
        xin[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    const float *ye = NULL;
    ck_assert_int_eq(moe_exec_run(local, 1, 4, xin, ids, &ye, &err), 0);
    memcpy(want, ye, sizeof want);
    guild_exchange_slot_t slot;
    guild_wait_policy_t pol = {.spin_ns = 0, .timeout_ns = 10000000000ull};
    ck_assert_int_eq(guild_exchange_begin(x, 1, &pol, &slot, NULL, &err), GUILD_WAIT_OK);
    memcpy(slot.x, xin, sizeof xin);
    memcpy(slot.ids, ids, sizeof ids);
    ck_assert_int_eq(guild_exchange_publish(x, 1, 4, 1, &err), 0);
    ck_assert_msg(guild_exchange_wait_done(x, 1, &pol, NULL, &err) == GUILD_WAIT_OK, "%s", err.msg);
    guild_exchange_view(x, 1, &slot);
    ck_assert_msg(memcmp(slot.y, want, sizeof want) == 0, "worker's expert outputs differ from moe_local's");

    /* the same batch with skipped pairs (id < 0, moe_exec.h): the others' rows the same bits, the skipped rows
     * untouched (poisoned before publishing) */
    static const int32_t skip[4 * 2] = {2, -1, -1, 4, 5, -7, -1, -1};
    ck_assert_int_eq(guild_exchange_begin(x, 2, &pol, &slot, NULL, &err), GUILD_WAIT_OK);
    memcpy(slot.x, xin, sizeof xin);
    memcpy(slot.ids, skip, sizeof skip);
    memset(slot.y, 0x5a, sizeof want);
    ck_assert_int_eq(guild_exchange_publish(x, 2, 4, 1, &err), 0);
    ck_assert_msg(guild_exchange_wait_done(x, 2, &pol, NULL, &err) == GUILD_WAIT_OK, "%s", err.msg);
    guild_exchange_view(x, 2, &slot);
    uint8_t poison[64 * sizeof(float)];
    memset(poison, 0x5a, sizeof poison);
    for (int p = 0; p < 8; p++)
        ck_assert_msg(!memcmp(slot.y + p * 64, skip[p] < 0 ? (const void *)poison : (const void *)(want + p * 64),
                              sizeof poison), "pair %d (id %d): %s", p, skip[p],
                      skip[p] < 0 ? "a skipped row was written" : "differs from the full batch");
    /* and through the dense side's executor (moe_xchg, from the host): the computed pairs the same bits, handed on
     * and counted as one exchange */
    moe_exec_t *ax = NULL;
    moe_xchg_options_t mo = {.spin_ns = 0, .slice_ns = 10000000000ull};
    ck_assert_msg(moe_xchg_new(&ax, x, &mo, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(moe_exec_collect(ax, &ye, NULL, &err), -1); /* nothing submitted */
    ck_assert_msg(moe_exec_run(ax, 1, 4, xin, skip, &ye, &err) == 0, "%s", err.msg);
    for (int p = 0; p < 8; p++)
        ck_assert_msg(skip[p] < 0 || !memcmp(ye + p * 64, want + p * 64, sizeof poison), "moe_xchg: pair %d (id %d) "
                      "wrong", p, skip[p]);
    moe_exec_stats_t xs_stats;
    moe_exec_stats(ax, &xs_stats);
    ck_assert_uint_eq(xs_stats.exchanges, 1);
    ck_assert_uint_eq(xs_stats.pairs, 3);
    ck_assert_uint_eq(guild_exchange_step(x), 3);
    moe_exec_destroy(&ax);
    moe_exec_destroy(&local);
    guild_pool_destroy(&pool);
    model_destroy(&m);

    send_shutdown_and_reap();
    guild_exchange_destroy(&x);
    guild_arena_destroy(&arena);
}
END_TEST

/* Every layer's experts on the GPU: a CPU worker given no experts loads, holds nothing, and completes the
 * exchanges it sees with no pairs of its own. */
START_TEST(test_cpu_worker_without_experts)
{
    start("guild-cpu-worker", 1);
    guild_msg_free(&(Guild__Envelope *){expect(GUILD__ENVELOPE__BODY_REGISTER_WORKER)});
    guild_exchange_shape_t xs = {.max_tokens = 4, .n_embd = 64, .n_used = 2, .n_slots = 2, .n_workers = 1};
    guild_arena_request_t req = {GUILD_ARENA_KIND_EXCHANGE, 0, guild_exchange_memsize(&xs)};
    guild_arena_opts_t ao = {.pages = GUILD_ARENA_PAGES_SMALL};
    guild_err_t err = {{0}};
    guild_arena_t *arena = guild_arena_create(&req, 1, &ao, &err);
    ck_assert_msg(arena, "%s", err.msg);
    size_t rs;
    void *xr = guild_arena_region(arena, GUILD_ARENA_KIND_EXCHANGE, 0, &rs);
    ck_assert_int_eq(guild_exchange_init(xr, rs, &xs, &err), 0);
    guild_exchange_t *x = guild_exchange_attach(xr, rs, &err);
    ck_assert_ptr_nonnull(x);
    guild_arena_publish(arena);
    send_assign(7, model_path, UINT32_MAX, 0, 0, arena, NULL, 0);
    Guild__Envelope *rd = expect(GUILD__ENVELOPE__BODY_READY);
    ck_assert_uint_eq(rd->ready->generation, 7);
    ck_assert_uint_eq(rd->ready->resident_bytes, 0);
    guild_msg_free(&rd);
    guild_exchange_slot_t slot;
    guild_wait_policy_t pol = {.spin_ns = 0, .timeout_ns = 10000000000ull};
    ck_assert_int_eq(guild_exchange_begin(x, 1, &pol, &slot, NULL, &err), GUILD_WAIT_OK);
    for (int i = 0; i < 2 * 64; i++)
        slot.x[i] = 1.0f;
    for (int i = 0; i < 4; i++)
        slot.ids[i] = i;
    ck_assert_int_eq(guild_exchange_publish(x, 1, 2, 1, &err), 0);
    ck_assert_msg(guild_exchange_wait_done(x, 1, &pol, NULL, &err) == GUILD_WAIT_OK, "%s", err.msg);
    send_shutdown_and_reap();
    guild_exchange_destroy(&x);
    guild_arena_destroy(&arena);
}
END_TEST

/* Plays the coordinator's bridge for a worker without the arena that receives its shard: answers its reads of
 * the model file at `path` on the data socket until its Ready comes on the control socket (returned); its
 * hello, when it comes first, into *hello (hello->hdr NULL otherwise). */
static Guild__Envelope *serve_shard_until_ready(void *data, const char *path, data_msg_t *hello)
{
    memset(hello, 0, sizeof *hello);
    int fd = open(path, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    off_t size = lseek(fd, 0, SEEK_END);
    gguf_t *g = NULL;
    guild_err_t err = {{0}};
    ck_assert_msg(gguf_new(&g, path, &err) == 0, "%s", err.msg);
    const uint64_t data_offset = gguf_data_offset(g);
    gguf_destroy(&g);
    static uint8_t buf[DATA_MAX_SHARD_BYTES / 16];
    for (int i = 0; i < 2000; i++) {
        data_msg_t m;
        if (data_recv(data, 5, &m, &err) == GUILD_MSG_OK) {
            if (m.hdr->body_case == GUILD__DATA__BODY_HELLO && !hello->hdr) {
                *hello = m;
                continue;
            }
            ck_assert_int_eq(m.hdr->body_case, GUILD__DATA__BODY_SHARD_READ);
            const Guild__ShardRead *r = m.hdr->shard_read;
            ck_assert_uint_le(r->length, sizeof buf);
            ck_assert_uint_le(r->offset + r->length, (uint64_t)size);
            ck_assert_int_eq(pread(fd, buf, (size_t)r->length, (off_t)r->offset), (ssize_t)r->length);
            ck_assert_int_eq(data_send_shard_data(data, &m.from, r->offset, r->length, (uint64_t)size, data_offset,
                                                  buf, NULL, &err), 0);
            data_msg_close(&m);
        }
        Guild__Envelope *env = NULL;
        guild_msg_peer_t from;
        if (guild_msg_recv(router, 0, &from, &env, &err) == GUILD_MSG_OK) {
            peer = from;
            if (env->body_case == GUILD__ENVELOPE__BODY_READY) {
                close(fd);
                return env;
            }
            guild_msg_free(&env);
        }
    }
    ck_abort_msg("no Ready from the worker within 10 s");
    return NULL;
}

/* Without the arena: the worker receives its shard over the data socket and proves it (digests), says hello on
 * the data socket and answers an exchange request with exactly its pairs, bit for bit the in-process
 * executor's; garbage there is reported, the worker staying up. */
START_TEST(test_cpu_worker_messages)
{
    char data_ep[320];
    snprintf(data_ep, sizeof data_ep, "ipc://%s/data", dir);
    guild_err_t err = {{0}};
    void *data = data_router_new(zctx, data_ep, NULL, &err);
    ck_assert_msg(data, "%s", err.msg);
    start("guild-cpu-worker", 1);
    guild_msg_free(&(Guild__Envelope *){expect(GUILD__ENVELOPE__BODY_REGISTER_WORKER)});
    send_assign_data(9, model_path, 1, 2, 4, NULL, NULL, 0, data_ep);
    data_msg_t m;
    Guild__Envelope *rd = serve_shard_until_ready(data, model_path, &m);
    ck_assert_uint_eq(rd->ready->generation, 9);
    /* what it received is what we hold: the digests of layer 0's experts and layer 1's 2-5 */
    ck_assert_str_eq(rd->ready->model_source, "received");
    {
        model_t *own = NULL;
        ck_assert_int_eq(model_new(&own, model_path, &err), 0);
        const model_config_t *c = model_config(own);
        uint8_t *flags = calloc((size_t)c->n_layer * (size_t)c->n_expert, 1);
        for (int e = 0; e < c->n_expert; e++)
            flags[e] = 1;
        for (int e = 2; e < 6; e++)
            flags[(size_t)c->n_expert + (size_t)e] = 1;
        expert_digest_t *d = NULL;
        size_t nd = 0;
        ck_assert_int_eq(expert_digest_compute(own, flags, NULL, &d, &nd, &err), 0);
        ck_assert_uint_eq(rd->ready->n_digests, nd);
        ck_assert_uint_eq(nd, 7);
        for (size_t i = 0; i < nd; i++) {
            ck_assert_str_eq(rd->ready->digests[i]->tensor, d[i].tensor);
            ck_assert_uint_eq(rd->ready->digests[i]->hash, d[i].hash);
        }
        free(d);
        free(flags);
        model_destroy(&own);
    }
    guild_msg_free(&rd);
    if (!m.hdr)
        ck_assert_int_eq(data_recv(data, 10000, &m, &err), GUILD_MSG_OK);
    ck_assert_int_eq(m.hdr->body_case, GUILD__DATA__BODY_HELLO);
    ck_assert_uint_eq(m.hdr->hello->generation, 9);
    guild_msg_peer_t wpeer = m.from;
    data_msg_close(&m);

    model_t *mdl = NULL;
    guild_pool_t *pool = NULL;
    moe_exec_t *local = NULL;
    ck_assert_int_eq(model_new(&mdl, model_path, &err), 0);
    ck_assert_int_eq(guild_pool_new(&pool, 1, NULL, &err), 0);
    ck_assert_int_eq(moe_local_new(&local, mdl, pool, &err), 0);
    float xin[4 * 64], want[4 * 2 * 64];
    int32_t ids[8] = {2, 7, 3, 0, 5, 2, 6, 3}; /* layer 1, experts 2..5 owned: pairs 0, 2, 4, 5, 7 */
    static const int32_t owned[] = {0, 2, 4, 5, 7};
    for (int i = 0; i < 4 * 64; i++)
        xin[i] = (float)((i * 53) % 97) / 40.0f - 1.2f;
    const float *ye = NULL;
    ck_assert_int_eq(moe_exec_run(local, 1, 4, xin, ids, &ye, &err), 0);
    memcpy(want, ye, sizeof want);
    ck_assert_int_eq(data_send_request(data, &wpeer, 7, 1, 4, 2, 64, xin, ids, &err), 0);
    ck_assert_int_eq(data_recv(data, 10000, &m, &err), GUILD_MSG_OK);
    ck_assert_int_eq(m.hdr->body_case, GUILD__DATA__BODY_RESULT);
    ck_assert_uint_eq(m.hdr->result->seq, 7);
    ck_assert_uint_eq(m.hdr->result->n_pairs, 5);
    ck_assert(memcmp(m.array[0], owned, sizeof owned) == 0);
    const float *y = m.array[1];
    for (int i = 0; i < 5; i++)
        ck_assert_msg(memcmp(y + i * 64, want + owned[i] * 64, 64 * sizeof(float)) == 0, "pair %d differs", owned[i]);
    data_msg_close(&m);
    /* skipped pairs (id < 0) are nobody's: the owned ones left, the same bits */
    int32_t skip[8] = {2, 7, -1, 0, 5, -3, 6, 3};
    static const int32_t owned2[] = {0, 4, 7};
    ck_assert_int_eq(data_send_request(data, &wpeer, 8, 1, 4, 2, 64, xin, skip, &err), 0);
    ck_assert_int_eq(data_recv(data, 10000, &m, &err), GUILD_MSG_OK);
    ck_assert_int_eq(m.hdr->body_case, GUILD__DATA__BODY_RESULT);
    ck_assert_uint_eq(m.hdr->result->seq, 8);
    ck_assert_uint_eq(m.hdr->result->n_pairs, 3);
    ck_assert(memcmp(m.array[0], owned2, sizeof owned2) == 0);
    y = m.array[1];
    for (int i = 0; i < 3; i++)
        ck_assert_msg(memcmp(y + i * 64, want + owned2[i] * 64, 64 * sizeof(float)) == 0, "pair %d differs",
                      owned2[i]);
    data_msg_close(&m);
    moe_exec_destroy(&local);
    guild_pool_destroy(&pool);
    model_destroy(&mdl);

    static const uint8_t junk[] = {1, 2, 3};
    ck_assert_int_ge(zmq_send(data, wpeer.id, wpeer.len, ZMQ_SNDMORE), 0);
    ck_assert_int_ge(zmq_send(data, junk, sizeof junk, 0), 0);
    expect_error(GUILD__ERROR_CODE__ERROR_PROTOCOL, "data socket: malformed data message");
    expect_alive();
    send_shutdown_and_reap();
    zmq_close(data);
    char p[400];
    snprintf(p, sizeof p, "%s/data", dir);
    unlink(p);
}
END_TEST

START_TEST(test_gpu_worker_reports_and_survives)
{
    start("guild-gpu-worker", 0);
    Guild__Envelope *reg = expect(GUILD__ENVELOPE__BODY_REGISTER_WORKER);
    ck_assert_int_eq(reg->register_worker->role, GUILD__ROLE__ROLE_GPU_WORKER);
    guild_msg_free(&reg);
    send_assign(1, model_path, 0, 0, 0, NULL, NULL, 0);
    expect_error(GUILD__ERROR_CODE__ERROR_PROTOCOL, "needs options backend");
    /* another role's options; layers left to the GPU alone with a backend that keeps no experts there */
    child_gpu = false;
    send_assign(4, model_path, 0, 0, 0, NULL, "cpu", 0);
    child_gpu = true;
    expect_error(GUILD__ERROR_CODE__ERROR_PROTOCOL, "no GPU worker options");
    gpu_resident_layer = 1;
    send_assign(5, model_path, 0, 0, 0, NULL, "cpu", 0);
    gpu_resident_layer = UINT32_MAX;
    expect_error(GUILD__ERROR_CODE__ERROR_PROTOCOL, "the plan leaves the experts of 1 layer to the GPU alone, "
                 "backend cpu keeps none on the device");
    send_assign(2, "/nonexistent/model.gguf", 0, 0, 0, NULL, "cpu", 0);
    expect_error(GUILD__ERROR_CODE__ERROR_MODEL, "/nonexistent/model.gguf");
    send_assign(3, model_path, 0, 0, 0, NULL, "cpu", 0);
    expect_error(GUILD__ERROR_CODE__ERROR_ARENA, "/nonexistent/arena");
    expect_alive();
    send_shutdown_and_reap();
}
END_TEST

START_TEST(test_worker_leaves_a_silent_coordinator)
{
    start("guild-cpu-worker", 1);
    guild_msg_free(&(Guild__Envelope *){expect(GUILD__ENVELOPE__BODY_REGISTER_WORKER)});
    /* an Assign that fails still sets the silence limit: 300 ms */
    send_assign(1, "/nonexistent/model.gguf", 0, 0, 0, NULL, NULL, 300);
    expect_error(GUILD__ERROR_CODE__ERROR_MODEL, "/nonexistent");
    int st = 0;
    int i = 0;
    for (; i < 300 && waitpid(child, &st, WNOHANG) == 0; i++)
        usleep(10000);
    ck_assert_msg(i < 300, "the worker still runs 3 s after the coordinator fell silent");
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    child = 0;
}
END_TEST

/* The coordinator's side: a fake worker on `guild run --listen`. Garbage and a GPU worker that cannot share
 * memory are refused with an Error; a CPU worker on another host is assigned its part without the arena, with
 * the data endpoint for its exchanges; a worker whose part fails to load makes the run fail with its cause. */
START_TEST(test_coordinator_refuses_and_reports)
{
    char mk[512], gguf[400], errfile[400], ep[400];
    snprintf(mk, sizeof mk, "%s/tools/guild-mkmodel", GUILD_BUILDDIR);
    snprintf(gguf, sizeof gguf, "%s/mk.gguf", dir);
    snprintf(errfile, sizeof errfile, "%s/run.err", dir);
    snprintf(ep, sizeof ep, "ipc://%s/listen", dir);
    pid_t p = fork();
    if (p == 0) {
        execl(mk, "guild-mkmodel", "--layers", "1", "--embd", "64", "--heads", "2", "--kv-heads", "1", "--head-dim",
              "32", "--experts", "4", "--experts-used", "2", "--expert-ff", "32", "--ctx", "64", "-q", "-o", gguf,
              (char *)NULL);
        _exit(127);
    }
    int st;
    ck_assert_int_eq(waitpid(p, &st, 0), p);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "guild-mkmodel failed");

    char guild[512];
    snprintf(guild, sizeof guild, "%s/guild", GUILD_BUILDDIR);
    child = fork();
    if (child == 0) {
        FILE *f = freopen(errfile, "w", stderr);
        (void)f;
        execl(guild, "guild", "run", "-m", gguf, "-p", "hi", "-n", "2", "--cpu-workers", "1", "--listen", ep,
              (char *)NULL);
        _exit(127);
    }
    guild_err_t err = {{0}};
    void *dealer = guild_msg_dealer_new(zctx, ep, "fake-worker", &err);
    ck_assert_msg(dealer, "%s", err.msg);
    Guild__Envelope *env = NULL;

    static const uint8_t junk[] = {0x0a, 0xff, 0xff, 0xff};
    ck_assert_int_ge(zmq_send(dealer, junk, sizeof junk, 0), 0);
    ck_assert_int_eq(guild_msg_recv(dealer, 10000, NULL, &env, &err), GUILD_MSG_OK);
    ck_assert_int_eq(env->body_case, GUILD__ENVELOPE__BODY_ERROR);
    ck_assert_msg(strstr(env->error->message, "bad message"), "%s", env->error->message);
    guild_msg_free(&env);

    Guild__Envelope e = GUILD__ENVELOPE__INIT;
    Guild__Register r = GUILD__REGISTER__INIT;
    Guild__Capabilities caps = GUILD__CAPABILITIES__INIT;
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    r.role = GUILD__ROLE__ROLE_GPU_WORKER;
    r.pid = (int32_t)getpid();
    r.hostname = host;
    r.capabilities = &caps; /* shared_memory false */
    r.protocol_version = GUILD_PROTOCOL_VERSION;
    e.body_case = GUILD__ENVELOPE__BODY_REGISTER_WORKER;
    e.register_worker = &r;
    ck_assert_int_eq(guild_msg_send(dealer, NULL, &e, &err), 0);
    ck_assert_int_eq(guild_msg_recv(dealer, 10000, NULL, &env, &err), GUILD_MSG_OK);
    ck_assert_int_eq(env->body_case, GUILD__ENVELOPE__BODY_ERROR);
    ck_assert_msg(strstr(env->error->message, "a GPU worker must share memory"), "%s", env->error->message);
    guild_msg_free(&env);

    r.role = GUILD__ROLE__ROLE_CPU_WORKER;
    r.hostname = "another-host";
    caps.shared_memory = true;
    ck_assert_int_eq(guild_msg_send(dealer, NULL, &e, &err), 0);
    for (;;) { /* heartbeats may come first */
        ck_assert_int_eq(guild_msg_recv(dealer, 10000, NULL, &env, &err), GUILD_MSG_OK);
        if (env->body_case == GUILD__ENVELOPE__BODY_ASSIGN)
            break;
        guild_msg_free(&env);
    }
    const Guild__Assign *a = env->assign;
    ck_assert_uint_eq(a->n_shard, 1);
    ck_assert_uint_eq(a->shard[0]->n_experts, 1);
    ck_assert_uint_eq(a->shard[0]->experts[0]->first, 0);
    ck_assert_uint_eq(a->shard[0]->experts[0]->count, 4);
    ck_assert_ptr_null(a->arena); /* another host: no arena, messages */
    char data_ep[420];
    snprintf(data_ep, sizeof data_ep, "%s.data", ep);
    ck_assert_int_eq(a->options_case, GUILD__ASSIGN__OPTIONS_CPU);
    ck_assert_str_eq(a->cpu->data_endpoint, data_ep);
    Guild__Envelope ee = GUILD__ENVELOPE__INIT;
    Guild__Error er = GUILD__ERROR__INIT;
    er.code = GUILD__ERROR_CODE__ERROR_MODEL;
    er.message = "disk on fire";
    er.generation = a->generation;
    ee.body_case = GUILD__ENVELOPE__BODY_ERROR;
    ee.error = &er;
    ck_assert_int_eq(guild_msg_send(dealer, NULL, &ee, &err), 0);
    guild_msg_free(&env);

    ck_assert_int_eq(waitpid(child, &st, 0), child);
    child = 0;
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1, "guild run status %#x, expected exit 1", st);
    FILE *f = fopen(errfile, "r");
    ck_assert_ptr_nonnull(f);
    char text[8192];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    ck_assert_msg(strstr(text, "guild run: cpu-worker[0]: disk on fire"), "%s", text);
    char sock[420];
    snprintf(sock, sizeof sock, "%s/listen", dir);
    ck_assert_msg(access(sock, F_OK) != 0, "the coordinator left its --listen socket file");
    snprintf(sock, sizeof sock, "%s/listen.data", dir);
    ck_assert_msg(access(sock, F_OK) != 0, "the coordinator left its data socket file");
    guild_msg_close(&dealer);
    unlink(gguf);
    unlink(errfile);
}
END_TEST

static Suite *pipeline_suite(void)
{
    Suite *s = suite_create("pipeline");
    TCase *tc = tcase_create("plan");
    tcase_add_test(tc, test_plan_every_expert_once);
    tcase_add_test(tc, test_plan_dense_layers);
    tcase_add_test(tc, test_plan_nodes_and_cpus);
    tcase_add_test(tc, test_plan_cpu_nodes);
    tcase_add_test(tc, test_plan_keep_free);
    tcase_add_test(tc, test_plan_gpu_layers);
    tcase_add_test(tc, test_plan_gpu_experts);
    tcase_add_test(tc, test_plan_print_gpu_layers);
    suite_add_tcase(s, tc);
    tc = tcase_create("step");
    tcase_add_test(tc, test_step_layout);
    suite_add_tcase(s, tc);
    tc = tcase_create("workers");
    tcase_add_checked_fixture(tc, fake_setup, fake_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_cpu_worker_reports_and_survives);
    tcase_add_test(tc, test_cpu_worker_messages);
    tcase_add_test(tc, test_cpu_worker_without_experts);
    tcase_add_test(tc, test_gpu_worker_reports_and_survives);
    tcase_add_test(tc, test_worker_leaves_a_silent_coordinator);
    tcase_add_test(tc, test_coordinator_refuses_and_reports);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(pipeline_suite());
}
