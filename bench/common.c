/* Helpers shared by the benchmarks: provenance lines. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>

#include "bench/bench.h"
#include "core/kern/cpu.h"
#include "core/kern/kern.h"
#include "core/sample/logits_pick.h"
#include "core/topo/topo.h"

/* The source tree's commit, when the binary runs next to its git checkout (a copy without .git says so). */
static void source_commit(char *buf, size_t size)
{
    snprintf(buf, size, "unknown (no git checkout at %s)", GUILD_SRCDIR);
    FILE *p = popen("git -C '" GUILD_SRCDIR "' describe --always --dirty --abbrev=12 2>/dev/null", "r");
    if (!p)
        return;
    char line[128];
    if (fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = '\0';
        if (line[0])
            snprintf(buf, size, "%s", line);
    }
    pclose(p);
}

void bench_print_provenance(FILE *out, int argc, char **argv)
{
    char commit[256], feats[256], date[64];
    const kern_cpu_t *cpu = kern_cpu();
    struct utsname u;
    time_t t = time(NULL);
    struct tm tm;
    source_commit(commit, sizeof commit);
    kern_cpu_describe(cpu, feats, sizeof feats);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
    int cpus[1024];
    fprintf(out, "# guild %s, commit %s\n", PACKAGE_VERSION, commit);
    fprintf(out, "# date: %s\n", date);
    if (uname(&u) == 0)
        fprintf(out, "# host: %s, %s %s %s\n", u.nodename, u.sysname, u.release, u.machine);
    fprintf(out, "# cpu: %s; %d usable CPUs on %d NUMA node(s)\n", cpu->model, topo_all_cpus(cpus, 1024),
            topo_node_count());
    fprintf(out, "# features: %s\n", feats);
    fprintf(out, "# kernels: %s (best here: %s)\n", kern_level_name(kern_level()),
            kern_level_name(kern_level_best()));
    fprintf(out, "# command:");
    fprintf(out, " guild bench");
    for (int i = 0; i < argc; i++)
        fprintf(out, " %s", argv[i]);
    fprintf(out, "\n");
}

/* The sampler's greedy rule, computed as the device's pick is (core/sample/logits_pick.h). */
int32_t bench_argmax(const float *x, int32_t n)
{
    return logits_pick(x, n).id;
}
