/* bench/paired_json.h — the paired runs and their summary (bench/paired.h) as guild bench sessions' JSON has them,
 * written there and read back by guild bench pool: one place for the keys, so that the two cannot drift apart. */
#ifndef GUILD_BENCH_PAIRED_JSON_H
#define GUILD_BENCH_PAIRED_JSON_H

#include <jansson.h>

#include "bench/paired.h"
#include "core/util/err.h"

/* A run as an object: step_s, expert_wait_s, wait_read_gbps, prefetched_bytes_before_wait, probe_before_gbps,
 * probe_after_gbps, fraction_of_limit, fraction_at_higher_probe, fraction_at_lower_probe, phase_change,
 * reads_outran_probes. */
json_t *paired_run_json(const paired_run_t *r);

/* r from such an object (a record without prefetched_bytes_before_wait, from before session 33, read no bytes
 * before its wait); -1 with err naming `where` and the key when a field is missing or of another type, or a probe
 * is not a positive rate. */
int paired_run_from_json(const json_t *q, paired_run_t *r, const char *where, guild_err_t *err);

/* The summary's keys into o: paired_stable_runs, paired_phase_change_runs, paired_outran_runs,
 * paired_fraction_median, _min, _max, paired_fraction_at_higher_median, paired_fraction_at_lower_median,
 * paired_wait_over_probe, paired_target (the verdict's name). */
void paired_summary_json(json_t *o, const paired_summary_t *s);

#endif
