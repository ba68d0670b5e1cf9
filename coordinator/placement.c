#include "coordinator/placement.h"

#include <stdlib.h>
#include <string.h>

#include "core/topo/topo.h"
#include "ipc/exchange.h"

typedef struct placement_worker {
    int node;
    int mem_node; /* the NUMA node its memory is bound to: node itself, unless the nodes were given (--cpu-nodes) */
    int n_cpus;
    int *cpus; /* [n_cpus] */
    uint32_t first, count; /* experts of every layer not on the GPU */
} placement_worker_t;

struct plan {
    int n_workers;
    int n_layer;
    int n_expert;
    placement_worker_t *w; /* [n_workers] */
    bool *gpu;        /* [n_layer]: every expert of the layer stays on the GPU, no CPU worker owns one */
    bool *dense;      /* [n_layer]: the layer has no routed experts (a dense FFN): no one owns any */
    uint8_t *gpu_e;   /* [n_layer * n_expert]: the expert stays on the GPU */
    int64_t n_gpu_e;  /* experts on the GPU in layers not wholly there */
    int n_kept;       /* CPUs of node 0 no worker is pinned to (placement_new_local's keep_free) */
    int kept[PLACEMENT_MAX_KEEP];
};

void placement_destroy(placement_t **pp)
{
    placement_t *p = *pp;
    if (!p)
        return;
    for (int k = 0; k < p->n_workers && p->w; k++)
        free(p->w[k].cpus);
    free(p->w);
    free(p->gpu);
    free(p->dense);
    free(p->gpu_e);
    free(p);
    *pp = NULL;
}

int placement_new(placement_t **out, const model_config_t *cfg, int n_workers, const uint8_t *gpu_experts,
                  const placement_topo_t *topo, guild_err_t *err)
{
    *out = NULL;
    GUILD_ASSERT(topo->n_nodes >= 1);
    if (n_workers == 0)
        n_workers = topo->n_nodes;
    if (n_workers < 0 || n_workers > cfg->n_expert || n_workers > GUILD_EXCHANGE_MAX_WORKERS)
        return guild_err_set(err, "%d CPU workers: expected 1 to %d (experts per layer, at most %d)", n_workers,
                             cfg->n_expert, GUILD_EXCHANGE_MAX_WORKERS);
    const size_t LN = (size_t)(cfg->n_layer > 0 ? cfg->n_layer : 1) * (size_t)(cfg->n_expert > 0 ? cfg->n_expert : 1);
    placement_t *p = calloc(1, sizeof *p);
    if (!p || !(p->w = calloc((size_t)n_workers, sizeof *p->w)) ||
        !(p->gpu = calloc((size_t)(cfg->n_layer > 0 ? cfg->n_layer : 1), sizeof *p->gpu)) ||
        !(p->dense = calloc((size_t)(cfg->n_layer > 0 ? cfg->n_layer : 1), sizeof *p->dense)) ||
        !(p->gpu_e = calloc(LN, 1))) {
        if (p) {
            free(p->w);
            free(p->gpu);
            free(p->dense);
        }
        free(p);
        return guild_err_set(err, "plan: out of memory");
    }
    p->n_workers = n_workers;
    p->n_layer = cfg->n_layer;
    p->n_expert = cfg->n_expert;
    for (int il = 0; il < cfg->n_layer; il++)
        p->dense[il] = model_layer_parts(cfg, il).ffn->kind != MODEL_FFN_MOE;
    for (int il = 0; gpu_experts && il < cfg->n_layer; il++) {
        if (p->dense[il])
            continue;
        int on = 0;
        for (int e = 0; e < cfg->n_expert; e++) {
            const size_t i = (size_t)il * (size_t)cfg->n_expert + (size_t)e;
            p->gpu_e[i] = gpu_experts[i] != 0;
            on += p->gpu_e[i];
        }
        p->gpu[il] = cfg->n_expert > 0 && on == cfg->n_expert;
        p->n_gpu_e += p->gpu[il] ? 0 : on;
    }
    uint32_t E = (uint32_t)cfg->n_expert, K = (uint32_t)n_workers, next = 0;
    /* the last CPUs of node 0 left free: at most a quarter of the node, and a CPU per worker there stays */
    const int on_node0 = (int)((K + (uint32_t)topo->n_nodes - 1) / (uint32_t)topo->n_nodes);
    int keep = topo->keep_free > 0 ? topo->keep_free : 0;
    if (keep > topo->n_cpus[0] / 4)
        keep = topo->n_cpus[0] / 4;
    if (keep > topo->n_cpus[0] - on_node0)
        keep = topo->n_cpus[0] - on_node0 > 0 ? topo->n_cpus[0] - on_node0 : 0;
    if (keep > PLACEMENT_MAX_KEEP)
        keep = PLACEMENT_MAX_KEEP;
    p->n_kept = keep;
    if (keep)
        memcpy(p->kept, topo->cpus[0] + topo->n_cpus[0] - keep, (size_t)keep * sizeof *p->kept);
    for (uint32_t k = 0; k < K; k++) {
        placement_worker_t *w = &p->w[k];
        w->first = next;
        w->count = E / K + (k < E % K ? 1 : 0);
        next += w->count;
        w->node = (int)(k % (uint32_t)topo->n_nodes);
        w->mem_node = topo->mem_node ? topo->mem_node[w->node] : w->node;
        /* this worker's rank among those on its node, and how many share the node */
        int rank = (int)(k / (uint32_t)topo->n_nodes);
        int sharing = (int)((K - (uint32_t)w->node + (uint32_t)topo->n_nodes - 1) / (uint32_t)topo->n_nodes);
        int nc = topo->n_cpus[w->node] - (w->node == 0 ? keep : 0);
        int lo = 0, hi = nc;
        if (nc >= sharing && sharing > 1) {
            lo = nc * rank / sharing;
            hi = nc * (rank + 1) / sharing;
        } else if (sharing > nc && nc > 0) {
            /* more workers than CPUs: one CPU each, round robin, so every CPU is used and as few as possible
             * double up (placement_shared names those) */
            lo = rank % nc;
            hi = lo + 1;
        }
        if (hi > lo) {
            w->cpus = malloc((size_t)(hi - lo) * sizeof *w->cpus);
            if (!w->cpus) {
                placement_destroy(&p);
                return guild_err_set(err, "plan: out of memory");
            }
            memcpy(w->cpus, topo->cpus[w->node] + lo, (size_t)(hi - lo) * sizeof *w->cpus);
            w->n_cpus = hi - lo;
        }
    }
    GUILD_ASSERT(next == E);
    *out = p;
    return 0;
}

/* The CPUs of `spec` ("0-3,8" and the like) appended to cpus[*n < max]; -1 with err on bad syntax. */
static int parse_cpu_list(const char *spec, const char *whole, int *cpus, int *n, int max, guild_err_t *err)
{
    const char *s = spec;
    while (*s && *s != '/') {
        char *end;
        long lo = strtol(s, &end, 10), hi = lo;
        if (end == s || lo < 0)
            goto bad;
        if (*end == '-') {
            s = end + 1;
            hi = strtol(s, &end, 10);
            if (end == s || hi < lo)
                goto bad;
        }
        if (hi >= 4096)
            return guild_err_set(err, "--cpu-nodes %s: CPU %ld is beyond what Guild supports (4095)", whole, hi);
        for (long c = lo; c <= hi; c++) {
            if (*n >= max)
                return guild_err_set(err, "--cpu-nodes %s: too many CPUs", whole);
            cpus[(*n)++] = (int)c;
        }
        s = end;
        if (*s == ',')
            s++;
        else if (*s && *s != '/')
            goto bad;
    }
    return 0;
bad:
    return guild_err_set(err, "--cpu-nodes %s: expected CPU lists such as 0-7,16-23 separated by / between nodes "
                         "(0-7/8-15: two nodes)", whole);
}

/* The nodes of `spec` into cpus[node][]/n_cpus[] (the arrays have room for max_nodes nodes of max_cpus each),
 * each checked against the CPUs this process may use, none in two nodes; the NUMA node holding each node's
 * first CPU into mem_node[]. Returns the node count, -1 with err. */
static int parse_nodes(const char *spec, int **cpus, int *n_cpus, int *mem_node, int max_nodes, int max_cpus,
                       guild_err_t *err)
{
    int n_nodes = 0;
    int *allowed = malloc((size_t)max_cpus * sizeof *allowed);
    if (!allowed)
        return guild_err_set(err, "plan: out of memory");
    const int n_allowed = topo_all_cpus(allowed, max_cpus);
    int rc = -1;
    for (const char *s = spec;; s++) {
        if (n_nodes == max_nodes) {
            guild_err_set(err, "--cpu-nodes %s: more than %d nodes", spec, max_nodes);
            goto done;
        }
        n_cpus[n_nodes] = 0;
        if (parse_cpu_list(s, spec, cpus[n_nodes], &n_cpus[n_nodes], max_cpus, err) < 0)
            goto done;
        if (n_cpus[n_nodes] == 0) {
            guild_err_set(err, "--cpu-nodes %s: node %d has no CPUs", spec, n_nodes);
            goto done;
        }
        for (int i = 0; i < n_cpus[n_nodes]; i++) {
            const int c = cpus[n_nodes][i];
            bool ok = false;
            for (int j = 0; j < n_allowed && !ok; j++)
                ok = allowed[j] == c;
            if (!ok) {
                guild_err_set(err, "--cpu-nodes %s: CPU %d is not one this process may run on (%d CPUs: see "
                              "`taskset -p $$`)", spec, c, n_allowed);
                goto done;
            }
            for (int nd = 0; nd <= n_nodes; nd++)
                for (int j = 0; j < (nd == n_nodes ? i : n_cpus[nd]); j++)
                    if (cpus[nd][j] == c) {
                        guild_err_set(err, "--cpu-nodes %s: CPU %d is given twice", spec, c);
                        goto done;
                    }
        }
        n_nodes++;
        s = strchr(s, '/');
        if (!s)
            break;
    }
    /* memory goes to the real node of each given node's first CPU */
    const int real = topo_node_count();
    for (int nd = 0; nd < n_nodes; nd++) {
        mem_node[nd] = 0;
        for (int r = 0; r < real && real > 1; r++) {
            int n = topo_node_cpus(r, allowed, max_cpus);
            bool here = false;
            for (int j = 0; j < n && !here; j++)
                here = allowed[j] == cpus[nd][0];
            if (here) {
                mem_node[nd] = r;
                break;
            }
        }
    }
    rc = n_nodes;
done:
    free(allowed);
    return rc;
}

/* With the cuda backend the GPU worker's host thread waits for each layer's experts and launches the next, so it
 * must find a CPU at once. One is enough: the coordinator sleeps in its receive while a step runs, and the CPU
 * workers' reads are bound per core, so each CPU more for them is a thread more reading experts (15 threads against
 * 14 on the device's 16 CPUs: bench/results/sess37-h200-2026-12-04-s37.md). With the cpu backend the GPU worker runs
 * the dense part on every CPU between the workers' turns. */
int placement_keep_free_for(const char *backend, bool by_hand)
{
    return !by_hand && backend && !strcmp(backend, "cuda") ? 1 : 0;
}

int placement_new_local(placement_t **out, const model_config_t *cfg, int n_workers, const uint8_t *gpu_experts,
                        const char *cpu_nodes, int keep_free, guild_err_t *err)
{
    enum { MAX_CPUS = 4096, MAX_GIVEN_NODES = 64 };
    *out = NULL;
    int n_nodes = cpu_nodes ? MAX_GIVEN_NODES : topo_node_count();
    int **cpus = calloc((size_t)n_nodes, sizeof *cpus);
    int *n_cpus = calloc((size_t)n_nodes, sizeof *n_cpus);
    int *mem_node = calloc((size_t)n_nodes, sizeof *mem_node);
    int rc = -1, alloc_nodes = n_nodes;
    if (!cpus || !n_cpus || !mem_node) {
        guild_err_set(err, "plan: out of memory");
        goto done;
    }
    for (int n = 0; n < n_nodes; n++)
        if (!(cpus[n] = malloc(MAX_CPUS * sizeof **cpus))) {
            guild_err_set(err, "plan: out of memory");
            goto done;
        }
    if (cpu_nodes) {
        if ((n_nodes = parse_nodes(cpu_nodes, cpus, n_cpus, mem_node, MAX_GIVEN_NODES, MAX_CPUS, err)) < 0)
            goto done;
    } else {
        for (int n = 0; n < n_nodes; n++)
            n_cpus[n] = topo_node_cpus(n, cpus[n], MAX_CPUS);
    }
    placement_topo_t topo = {.n_nodes = n_nodes, .cpus = (const int *const *)cpus, .n_cpus = n_cpus,
                             .mem_node = cpu_nodes ? mem_node : NULL, .keep_free = cpu_nodes ? 0 : keep_free};
    rc = placement_new(out, cfg, n_workers, gpu_experts, &topo, err);
done:
    for (int n = 0; cpus && n < alloc_nodes; n++)
        free(cpus[n]);
    free(cpus);
    free(n_cpus);
    free(mem_node);
    return rc;
}

int placement_workers(const placement_t *p)
{
    return p->n_workers;
}

int placement_layers(const placement_t *p)
{
    return p->n_layer;
}

int placement_node(const placement_t *p, int worker)
{
    GUILD_ASSERT(worker >= 0 && worker < p->n_workers);
    return p->w[worker].node;
}

int placement_kept(const placement_t *p, const int **cpus)
{
    *cpus = p->kept;
    return p->n_kept;
}

int placement_mem_node(const placement_t *p, int worker)
{
    GUILD_ASSERT(worker >= 0 && worker < p->n_workers);
    return p->w[worker].mem_node;
}

int placement_cpus(const placement_t *p, int worker, const int **cpus)
{
    GUILD_ASSERT(worker >= 0 && worker < p->n_workers);
    *cpus = p->w[worker].cpus;
    return p->w[worker].n_cpus;
}

bool placement_on_gpu(const placement_t *p, int layer)
{
    GUILD_ASSERT(layer >= 0 && layer < p->n_layer);
    return p->gpu[layer];
}

void placement_range(const placement_t *p, int worker, int layer, uint32_t *first, uint32_t *count)
{
    GUILD_ASSERT(worker >= 0 && worker < p->n_workers && layer >= 0 && layer < p->n_layer);
    *first = p->w[worker].first;
    *count = p->gpu[layer] || p->dense[layer] ? 0 : p->w[worker].count;
}

bool placement_expert_on_gpu(const placement_t *p, int layer, int expert)
{
    GUILD_ASSERT(layer >= 0 && layer < p->n_layer && expert >= 0 && expert < p->n_expert);
    return p->gpu_e[(size_t)layer * (size_t)p->n_expert + (size_t)expert];
}

int placement_shard(const placement_t *p, int worker, int layer, uint32_t *first, uint32_t *count, int max)
{
    uint32_t f, c;
    placement_range(p, worker, layer, &f, &c);
    const uint8_t *g = p->gpu_e + (size_t)layer * (size_t)p->n_expert;
    int n = 0;
    for (uint32_t e = f; e < f + c;) {
        if (g[e]) {
            e++;
            continue;
        }
        uint32_t e1 = e + 1;
        while (e1 < f + c && !g[e1])
            e1++;
        GUILD_ASSERT(n < max);
        first[n] = e;
        count[n] = e1 - e;
        n++;
        e = e1;
    }
    return n;
}

int placement_owner(const placement_t *p, int layer, int expert)
{
    GUILD_ASSERT(layer >= 0 && layer < p->n_layer && expert >= 0 && expert < p->n_expert);
    if (p->dense[layer] || p->gpu_e[(size_t)layer * (size_t)p->n_expert + (size_t)expert])
        return -1;
    for (int k = 0; k < p->n_workers; k++)
        if ((uint32_t)expert >= p->w[k].first && (uint32_t)expert < p->w[k].first + p->w[k].count)
            return k;
    GUILD_ASSERT(!"every expert has an owner");
    return -1;
}

/* Ascending CPU or layer numbers as "0-3,8,10-11"; none: "any" */
static void print_runs(FILE *out, const int *v, int n)
{
    if (n == 0) {
        fputs("any", out);
        return;
    }
    for (int i = 0; i < n;) {
        int j = i;
        while (j + 1 < n && v[j + 1] == v[j] + 1)
            j++;
        fprintf(out, "%s%d", i ? "," : "", v[i]);
        if (j > i)
            fprintf(out, "-%d", v[j]);
        i = j + 1;
    }
}

/* The layers with routed experts whose gpu flag is `on_gpu`, ascending, into v[n_layer]; their count. */
static int layers_where(const placement_t *p, bool on_gpu, int *v)
{
    int n = 0;
    for (int il = 0; il < p->n_layer; il++)
        if (!p->dense[il] && p->gpu[il] == on_gpu)
            v[n++] = il;
    return n;
}

static void print_bytes(FILE *out, double b)
{
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024 && u < 4) {
        b /= 1024;
        u++;
    }
    fprintf(out, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
}

int placement_threads(const placement_t *p, int worker, int requested, bool given)
{
    const placement_worker_t *w = &p->w[worker];
    if (w->n_cpus <= 0)
        return requested;
    int share = 0;
    for (int k = 0; k < p->n_workers; k++)
        share += p->w[k].node == w->node && p->w[k].n_cpus == w->n_cpus && p->w[k].cpus[0] == w->cpus[0];
    int fit = w->n_cpus / (share > 0 ? share : 1);
    if (fit < 1)
        fit = 1;
    return given && requested < fit ? requested : fit;
}

bool placement_shared(const placement_t *p, int worker)
{
    GUILD_ASSERT(worker >= 0 && worker < p->n_workers);
    const placement_worker_t *w = &p->w[worker];
    for (int k = 0; k < p->n_workers; k++) {
        if (k == worker)
            continue;
        for (int i = 0; i < w->n_cpus; i++)
            for (int j = 0; j < p->w[k].n_cpus; j++)
                if (w->cpus[i] == p->w[k].cpus[j])
                    return true;
    }
    return false;
}

int placement_node_cpus(const placement_t *p, int node)
{
    int n = 0;
    for (int k = 0; k < p->n_workers; k++)
        if (p->w[k].node == node) {
            for (int i = 0; i < p->w[k].n_cpus; i++) {
                bool seen = false;
                for (int j = 0; j < k && !seen; j++)
                    for (int c = 0; p->w[j].node == node && c < p->w[j].n_cpus && !seen; c++)
                        seen = p->w[j].cpus[c] == p->w[k].cpus[i];
                for (int c = 0; c < i && !seen; c++)
                    seen = p->w[k].cpus[c] == p->w[k].cpus[i];
                n += !seen;
            }
        }
    return n;
}

void placement_print(const placement_t *p, const model_t *m, int threads, bool given, FILE *out)
{
    const model_config_t *c = model_config(m);
    const model_weights_t *wts = model_weights(m);
    int *gpu = malloc((size_t)(p->n_layer > 0 ? p->n_layer : 1) * sizeof *gpu);
    int *cpu = malloc((size_t)(p->n_layer > 0 ? p->n_layer : 1) * sizeof *cpu);
    if (!gpu || !cpu) {
        fputs("plan: out of memory to print it\n", out);
        goto done;
    }
    const int n_gpu = layers_where(p, true, gpu), n_cpu = layers_where(p, false, cpu);
    const int n_moe = n_gpu + n_cpu;
    fprintf(out, "plan: %d CPU worker%s for %d layers x %d experts (top-%d)", p->n_workers,
            p->n_workers == 1 ? "" : "s", n_moe, c->n_expert, c->n_expert_used);
    if (n_moe < p->n_layer)
        fprintf(out, " (%d dense layer%s without experts)", p->n_layer - n_moe, p->n_layer - n_moe == 1 ? "" : "s");
    if (n_gpu && n_gpu == n_moe) {
        fputs("; the experts of every layer stay on the GPU", out);
    } else if (n_gpu) {
        fprintf(out, "; the experts of layer%s ", n_gpu == 1 ? "" : "s");
        print_runs(out, gpu, n_gpu);
        fputs(" stay on the GPU", out);
    }
    if (p->n_gpu_e)
        fprintf(out, "; %lld experts of the other layers stay on the GPU too (the workers skip them)",
                (long long)p->n_gpu_e);
    if (p->n_kept) {
        fprintf(out, "; cpu%s ", p->n_kept == 1 ? "" : "s");
        print_runs(out, p->kept, p->n_kept);
        fputs(" of node 0 left to the GPU worker and the coordinator", out);
    }
    fputc('\n', out);
    for (int k = 0; k < p->n_workers; k++) {
        const placement_worker_t *w = &p->w[k];
        double bytes = 0;
        uint32_t owned = 0;
        for (int i = 0; i < n_cpu; i++) {
            const model_layer_t *L = &wts->layers[cpu[i]];
            const uint8_t *g = p->gpu_e + (size_t)cpu[i] * (size_t)p->n_expert;
            uint32_t mine = 0;
            for (uint32_t e = w->first; e < w->first + w->count; e++)
                mine += !g[e];
            owned += mine;
            bytes += (double)mine * (double)(L->gate_exps.mat_bytes + L->up_exps.mat_bytes + L->down_exps.mat_bytes);
        }
        fprintf(out, "  cpu-worker %d: node %d, cpus ", k, w->node);
        print_runs(out, w->cpus, w->n_cpus);
        if (w->mem_node != w->node)
            fprintf(out, " (memory on NUMA node %d)", w->mem_node);
        const int nt = placement_threads(p, k, threads, given);
        fprintf(out, ", %d thread%s", nt, nt == 1 ? "" : "s");
        if (given && nt < threads)
            fprintf(out, " (--threads %d cut to its CPUs)", threads);
        if (placement_shared(p, k))
            fputs(" (shares its CPU with another worker)", out);
        if (n_cpu == 0) {
            fputs(", no experts\n", out);
            continue;
        }
        if (w->count == 1)
            fprintf(out, ", expert %u", w->first);
        else
            fprintf(out, ", experts %u-%u", w->first, w->first + w->count - 1);
        if (n_cpu == p->n_layer) {
            fputs(" of every layer", out);
        } else {
            fprintf(out, " of layer%s ", n_cpu == 1 ? "" : "s");
            print_runs(out, cpu, n_cpu);
        }
        if (owned < w->count * (uint32_t)n_cpu)
            fputs(" but those on the GPU", out);
        fprintf(out, " (%u experts, ", owned);
        print_bytes(out, bytes);
        fputs(")\n", out);
    }
done:
    free(gpu);
    free(cpu);
}
