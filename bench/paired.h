/* bench/paired.h — timed runs held against the limit at the DRAM read rate probed right before and right after each
 * of them (guild bench sessions: probe, run, probe, run, ..., probe within a size).
 *
 * A shared machine's read rate changes phase between seconds, so a rate probed away from a run says little about
 * the rate the run had. Two probes flanking a run bracket it, unless the phase changed during the run: then the
 * flanks disagree and the run is evidence neither way. Nor is a run whose own reads went faster than both its flanks
 * (the CPU side's bytes over its wait, a lower bound of its read rate, above the higher probe): the probe bounds
 * nothing then, and a limit at its rate would be too slow (the bytes a prefetch read before the wait, the CPU
 * workers' --prefetch-experts hits, are not the wait's: they count out of its rate). A run's fraction of its limit is taken at its flanks' mean
 * (the rate at the run's middle when the rate drifts evenly; two samples of one rate when it holds), and
 * bracketed by the fraction at the higher flank (the limit's faster reads: the conservative fraction) and at the
 * lower. Pure arithmetic, so CI tests it without a GPU or a probe. */
#ifndef GUILD_BENCH_PAIRED_H
#define GUILD_BENCH_PAIRED_H

#include <stdbool.h>

/* The most runs a summary takes (guild bench sessions: --repeat <= 15; guild bench pool: a size's runs of many
 * calls, refused above this). */
#define PAIRED_MAX_RUNS 1024

/* A step's limit at a DRAM read rate of r GB/s: fixed_s + dram_bytes / (r * 1e9). */
typedef struct paired_limit {
    double fixed_s;    /* s: the part no DRAM rate changes (the dense step, the GPU-resident experts' extra) */
    double dram_bytes; /* bytes a step reads from DRAM (the CPU side's distinct experts) */
} paired_limit_t;

/* lim's step at gbps GB/s: fixed_s + dram_bytes / (gbps * 1e9); fixed_s alone when gbps <= 0 (no rate). */
double paired_limit_step_s(const paired_limit_t *lim, double gbps);

/* One timed run between its flanking probes. */
typedef struct paired_run {
    double before_gbps, after_gbps; /* the probes right before and right after the run */
    double step_s, wait_s;          /* the run's mean step, and its mean wait for the DRAM-side experts (0: none) */
    double early_bytes;             /* of a step's dram_bytes, those read before its wait (prefetched; 0: none) */
    double wait_gbps;               /* dram_bytes less early_bytes over wait_s: the rate the wait's reads reached
                                       (0: no wait) */
    double fraction;                /* the limit's step at the flanks' mean rate over step_s */
    double fraction_hi, fraction_lo; /* at the higher flank (conservative: the smaller fraction), at the lower */
    bool phase;                     /* the flanks differ by more than the tolerance: a phase change in the run */
    bool outran;                    /* wait_gbps above the higher flank: the reads outran the probes */
} paired_run_t;

typedef enum paired_verdict {
    PAIRED_NO_EVIDENCE, /* every run saw a phase change or outran its probes (or there were none) */
    PAIRED_MET,         /* the stable runs' median at the higher flank reaches the target */
    PAIRED_MISSED,      /* the stable runs' median at the lower flank stays below it */
    PAIRED_UNDECIDED,   /* between: the probes' own spread straddles the target */
} paired_verdict_t;

/* A size's runs together; the fractions are over the stable runs (flanks that agree, reads no faster than them). */
typedef struct paired_summary {
    int runs, stable, phase;       /* runs; of them, stable; with a phase change */
    int outran;                    /* of the runs without a phase change, those that outran their probes */
    double median, min, max;       /* fractions at the flanks' mean: median and spread */
    double median_hi, median_lo;   /* medians of the fractions at the higher and at the lower flank */
    double wait_over_flank;        /* median of wait_gbps over the flanks' mean; 0 where no run has a wait */
    paired_verdict_t verdict;      /* against the target given to paired_summarize */
} paired_summary_t;

/* runs[k], k < n: run k of mean step steps_s[k] and mean wait waits_s[k] (NULL: none), of whose step's bytes
 * early_bytes[k] were read before the wait (NULL: none), between the probes flanks_gbps[k] and flanks_gbps[k + 1]
 * (n + 1 rates, each > 0), held against lim; a phase change where the higher flank exceeds the lower by more than
 * tol (0.10: 10%); outran where the wait's rate exceeds the higher flank. */
void paired_runs(const paired_limit_t *lim, const double *flanks_gbps, const double *steps_s, const double *waits_s,
                 const double *early_bytes, int n, double tol, paired_run_t *runs);

/* s: the summary of runs[0 .. n) (n <= PAIRED_MAX_RUNS) against target (a fraction of the limit: 0.90). */
void paired_summarize(const paired_run_t *runs, int n, double target, paired_summary_t *s);

/* A summary's fractions as a table prints them: "12.3%" for the medians, "12.3-45.6%" for the spread; "-" each
 * where no run is stable. */
typedef struct paired_cells {
    char median[24], spread[48], hi[24], lo[24];
} paired_cells_t;
void paired_summary_cells(const paired_summary_t *s, paired_cells_t *c);

/* "met", "missed", "undecided", "no stable run". */
const char *paired_verdict_name(paired_verdict_t v);

#endif
