#include "config.h"

#include "coordinator/stack_options.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

const char *stack_options_backend_text(const stack_options_t *o, char *buf, size_t n)
{
    if (o->backend_why[0])
        snprintf(buf, n, "%s (auto: %s)", o->gpu.backend, o->backend_why);
    else
        snprintf(buf, n, "%s", o->gpu.backend);
    return buf;
}

void stack_options_init(stack_options_t *o)
{
    memset(o, 0, sizeof *o);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    o->n_threads = cpus > 0 ? (int)(cpus < 1024 ? cpus : 1024) : 1;
    o->log_level = GUILD_LOG_WARN;
    o->spin_ns = 50000;
    o->prefetch_experts = 4; /* bench/results/prefetch-h200-2026-12-02-s27.md */
    o->wait_slice_ns = 100000000u;
    o->heartbeat_ms = 100;
    o->hang_ms = 600;
    o->stall_ms = 30000;
    o->silence_ms = 3000;
    o->start_ms = 120000;
    o->rejoin_ms = 10000;
    o->max_restarts = 3;
    o->backoff_ms = 2000;
    o->gpu.backend = "cpu";
    o->gpu.max_out = 8;
    o->gpu.check_finite = true;
    o->cpu.node = -1;
}
