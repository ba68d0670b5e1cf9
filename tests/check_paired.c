/* bench/paired: runs held against the limit at their flanking probes, on hand-made numbers (no GPU, no probe): the
 * fractions at the flanks' mean, the higher and the lower flank, the phase changes and the runs whose reads outran
 * their probes left out (less the bytes prefetched before the wait), the medians, the waits' rate over the probes',
 * the verdict on a target. */
#include <check.h>
#include <stdlib.h>

#include "bench/paired.h"
#include "bench/paired_json.h"
#include "tests/check_run.h"

#define TOL 1e-12

/* A step's limit: 5 ms that no DRAM rate changes plus 1 GB from DRAM (10 ms at 100 GB/s, 8 at 125, 12.5 at 80). */
static const paired_limit_t lim = {.fixed_s = 0.005, .dram_bytes = 1e9};

/* Four runs between five flanks: steady at 100 GB/s; 100 -> 125 and 125 -> 80 (phase changes); 80 -> 84 (5%: the
 * same phase at a 10% tolerance). The waits read 100 GB/s (as fast as the first run's probes: not beyond them),
 * then 80 GB/s. */
static const double flanks[] = {100, 100, 125, 80, 84};
static const double steps[] = {0.0150, 0.0200, 0.0200, 0.0175};
static const double waits[] = {0.0100, 0.0125, 0.0125, 0.0125};

START_TEST(test_runs)
{
    paired_run_t r[4];
    paired_runs(&lim, flanks, steps, waits, NULL, 4, 0.10, r);
    /* steady: 15 ms of limit over a 15 ms step, whichever flank */
    ck_assert_double_eq_tol(r[0].fraction, 1.0, TOL);
    ck_assert_double_eq_tol(r[0].fraction_hi, 1.0, TOL);
    ck_assert_double_eq_tol(r[0].fraction_lo, 1.0, TOL);
    ck_assert(!r[0].phase);
    ck_assert_double_eq_tol(r[0].wait_gbps, 100, 1e-9);
    ck_assert(!r[0].outran);
    /* 100 -> 125: at 112.5 GB/s (5 + 8.888... ms) over 20 ms; at 125 13 ms, at 100 15 ms; a phase change */
    ck_assert_double_eq_tol(r[1].fraction, (0.005 + 1.0 / 112.5) / 0.02, TOL);
    ck_assert_double_eq_tol(r[1].fraction_hi, 0.65, TOL);
    ck_assert_double_eq_tol(r[1].fraction_lo, 0.75, TOL);
    ck_assert(r[1].phase);
    ck_assert_double_eq_tol(r[1].before_gbps, 100, TOL);
    ck_assert_double_eq_tol(r[1].after_gbps, 125, TOL);
    /* 125 -> 80 falls: the higher flank is the one before */
    ck_assert(r[2].phase);
    ck_assert_double_eq_tol(r[2].fraction_hi, 0.65, TOL);
    ck_assert_double_eq_tol(r[2].fraction_lo, 0.875, TOL);
    /* 80 -> 84: at 82 GB/s; 84 the conservative one (16.90 ms), 80 the lenient one (17.5 ms over 17.5) */
    ck_assert(!r[3].phase);
    ck_assert_double_eq_tol(r[3].fraction, (0.005 + 1.0 / 82) / 0.0175, TOL);
    ck_assert_double_eq_tol(r[3].fraction_hi, (0.005 + 1.0 / 84) / 0.0175, TOL);
    ck_assert_double_eq_tol(r[3].fraction_lo, 1.0, TOL);
    ck_assert_double_eq_tol(r[3].wait_s, 0.0125, TOL);
    ck_assert(!r[3].outran);
    for (int k = 0; k < 4; k++)
        ck_assert(r[k].fraction_hi <= r[k].fraction && r[k].fraction <= r[k].fraction_lo);
}
END_TEST

START_TEST(test_summary)
{
    paired_run_t r[4];
    paired_summary_t s;
    paired_runs(&lim, flanks, steps, waits, NULL, 4, 0.10, r);
    paired_summarize(r, 4, 0.90, &s);
    ck_assert_int_eq(s.runs, 4);
    ck_assert_int_eq(s.stable, 2);
    ck_assert_int_eq(s.phase, 2);
    ck_assert_int_eq(s.outran, 0);
    /* the stable runs 0 and 3 alone: the phase changes' 0.65-0.875 are in no figure */
    const double f3 = (0.005 + 1.0 / 82) / 0.0175, h3 = (0.005 + 1.0 / 84) / 0.0175;
    ck_assert_double_eq_tol(s.median, 0.5 * (1.0 + f3), TOL);
    ck_assert_double_eq_tol(s.min, f3, TOL);
    ck_assert_double_eq_tol(s.max, 1.0, TOL);
    ck_assert_double_eq_tol(s.median_hi, 0.5 * (1.0 + h3), TOL);
    ck_assert_double_eq_tol(s.median_lo, 1.0, TOL);
    /* waits: 100 GB/s over 100 and 80 over 82 */
    ck_assert_double_eq_tol(s.wait_over_flank, 0.5 * (1.0 + 80.0 / 82), 1e-9);
    ck_assert_int_eq(s.verdict, PAIRED_MET);
    ck_assert_str_eq(paired_verdict_name(s.verdict), "met");
    /* 99%: the conservative median (98.3%) below, the lenient one (100%) above */
    paired_summarize(r, 4, 0.99, &s);
    ck_assert_int_eq(s.verdict, PAIRED_UNDECIDED);
    ck_assert_str_eq(paired_verdict_name(s.verdict), "undecided");
    /* 101%: both below */
    paired_summarize(r, 4, 1.01, &s);
    ck_assert_int_eq(s.verdict, PAIRED_MISSED);
    ck_assert_str_eq(paired_verdict_name(s.verdict), "missed");
    /* a looser tolerance (60%) keeps every run: four fractions, the median of the middle two */
    paired_runs(&lim, flanks, steps, waits, NULL, 4, 0.60, r);
    paired_summarize(r, 4, 0.90, &s);
    ck_assert_int_eq(s.stable, 4);
    ck_assert_int_eq(s.phase, 0);
    const double f1 = (0.005 + 1.0 / 112.5) / 0.02, f2 = (0.005 + 1.0 / 102.5) / 0.02;
    ck_assert(f1 < f2 && f2 < f3); /* 0.694, 0.738, 0.983, 1 */
    ck_assert_double_eq_tol(s.median, 0.5 * (f2 + f3), TOL);
    ck_assert_double_eq_tol(s.min, f1, TOL);
    ck_assert_double_eq_tol(s.max, 1.0, TOL);
    /* at the higher flank 0.65, 0.65, 0.966, 1 -> 0.808; at the lower 0.75, 0.875, 1, 1 -> 0.9375: the phase changes
     * taken as evidence leave 90% undecided where the stable runs alone met it */
    ck_assert_double_eq_tol(s.median_hi, 0.5 * (0.65 + h3), TOL);
    ck_assert_double_eq_tol(s.median_lo, 0.9375, TOL);
    ck_assert_int_eq(s.verdict, PAIRED_UNDECIDED);
}
END_TEST

START_TEST(test_tolerance_edge_and_no_evidence)
{
    /* 9.5% apart: the same phase; 10.5%: a change (either direction) */
    const double f[] = {100, 109.5, 99.1, 109.5};
    const double st[] = {0.02, 0.02, 0.02};
    paired_run_t r[3];
    paired_runs(&lim, f, st, NULL, NULL, 3, 0.10, r);
    ck_assert(!r[0].phase);
    ck_assert(r[1].phase);
    ck_assert(r[2].phase);
    ck_assert_double_eq_tol(r[0].wait_gbps, 0, TOL); /* no waits given */
    paired_summary_t s;
    paired_summarize(r + 1, 2, 0.90, &s);
    ck_assert_int_eq(s.stable, 0);
    ck_assert_int_eq(s.phase, 2);
    ck_assert_int_eq(s.verdict, PAIRED_NO_EVIDENCE);
    ck_assert_str_eq(paired_verdict_name(s.verdict), "no stable run");
    ck_assert_double_eq_tol(s.median, 0, TOL);
    ck_assert_double_eq_tol(s.wait_over_flank, 0, TOL);
    paired_summarize(r, 1, 0.90, &s);
    ck_assert_int_eq(s.stable, 1);
    ck_assert_double_eq_tol(s.wait_over_flank, 0, TOL); /* no run had a wait */
    paired_summarize(r, 0, 0.90, &s);
    ck_assert_int_eq(s.runs, 0);
    ck_assert_int_eq(s.verdict, PAIRED_NO_EVIDENCE);
}
END_TEST

START_TEST(test_reads_outran_the_probes)
{
    /* 90 -> 92: a run whose wait read 125 GB/s (faster than both probes: they bound nothing, its fractions are not
     * counted), one whose wait read 80; then 92 -> 120 with a wait of 200 GB/s: a phase change, counted as such */
    const double f[] = {90, 92, 92, 120};
    const double st[] = {0.02, 0.02, 0.02};
    const double w[] = {0.008, 0.0125, 0.005};
    paired_run_t r[3];
    paired_runs(&lim, f, st, w, NULL, 3, 0.10, r);
    ck_assert(r[0].outran && !r[0].phase);
    ck_assert_double_eq_tol(r[0].wait_gbps, 125, 1e-9);
    ck_assert(!r[1].outran && !r[1].phase);
    ck_assert(r[2].outran && r[2].phase);
    paired_summary_t s;
    paired_summarize(r, 3, 0.90, &s);
    ck_assert_int_eq(s.runs, 3);
    ck_assert_int_eq(s.stable, 1);
    ck_assert_int_eq(s.phase, 1);
    ck_assert_int_eq(s.outran, 1);
    ck_assert_double_eq_tol(s.median, (0.005 + 1.0 / 92) / 0.02, TOL);
    ck_assert_double_eq_tol(s.median_hi, (0.005 + 1.0 / 92) / 0.02, TOL);
    ck_assert_double_eq_tol(s.median_lo, (0.005 + 1.0 / 92) / 0.02, TOL);
    ck_assert_double_eq_tol(s.wait_over_flank, 80.0 / 92, 1e-9);
    ck_assert_int_eq(s.verdict, PAIRED_MISSED); /* 79.3% */
    /* only the run that outran: no evidence */
    paired_summarize(r, 1, 0.90, &s);
    ck_assert_int_eq(s.stable, 0);
    ck_assert_int_eq(s.verdict, PAIRED_NO_EVIDENCE);
}
END_TEST

START_TEST(test_prefetched_bytes_are_not_the_waits)
{
    /* 100 -> 100: a wait of 8 ms for the step's 1 GB reads 125 GB/s (outran); with 0.25 GB of it prefetched before
     * the wait, the wait read 0.75 GB: 93.75 GB/s, under the probes, and the run counts; the fraction is the step's
     * against the limit, whatever was prefetched (the limit reads every byte) */
    const double f[] = {100, 100, 100, 100};
    const double st[] = {0.0125, 0.0125, 0.0125};
    const double w[] = {0.008, 0.008, 0.008};
    const double early[] = {0, 0.25e9, 2e9}; /* the last more than the step's bytes: the wait read none of them */
    paired_run_t r[3];
    paired_runs(&lim, f, st, w, early, 3, 0.10, r);
    ck_assert(r[0].outran);
    ck_assert_double_eq_tol(r[0].wait_gbps, 125, 1e-9);
    ck_assert(!r[1].outran && !r[1].phase);
    ck_assert_double_eq_tol(r[1].early_bytes, 0.25e9, TOL);
    ck_assert_double_eq_tol(r[1].wait_gbps, 93.75, 1e-9);
    ck_assert_double_eq_tol(r[1].fraction, 0.015 / 0.0125, TOL);
    ck_assert_double_eq_tol(r[1].fraction, r[0].fraction, TOL);
    ck_assert(!r[2].outran);
    ck_assert_double_eq_tol(r[2].wait_gbps, 0, TOL);
    paired_summary_t s;
    paired_summarize(r, 2, 0.90, &s);
    ck_assert_int_eq(s.stable, 1);
    ck_assert_int_eq(s.outran, 1);
    ck_assert_double_eq_tol(s.wait_over_flank, 0.9375, 1e-9);
    ck_assert_int_eq(s.verdict, PAIRED_MET); /* 120% */
}
END_TEST

START_TEST(test_constant_rate_is_the_own_limit)
{
    /* every flank the same rate (guild bench sessions --dram-gbs): each run's three fractions are the limit at that
     * rate over its step */
    const double f[] = {50, 50, 50, 50};
    const double st[] = {0.030, 0.025, 0.040};
    ck_assert_double_eq_tol(paired_limit_step_s(&lim, 50), 0.025, TOL); /* the step guild bench sessions prints */
    ck_assert_double_eq_tol(paired_limit_step_s(&lim, 0), 0.005, TOL);  /* no rate: the fixed part alone */
    paired_run_t r[3];
    paired_runs(&lim, f, st, NULL, NULL, 3, 0.10, r);
    for (int k = 0; k < 3; k++) {
        ck_assert_double_eq_tol(r[k].fraction, 0.025 / st[k], TOL);
        ck_assert_double_eq_tol(r[k].fraction_hi, r[k].fraction, TOL);
        ck_assert_double_eq_tol(r[k].fraction_lo, r[k].fraction, TOL);
        ck_assert(!r[k].phase);
    }
    paired_summary_t s;
    paired_summarize(r, 3, 0.90, &s);
    ck_assert_double_eq_tol(s.median, 0.025 / 0.030, TOL);
    ck_assert_double_eq_tol(s.min, 0.025 / 0.040, TOL);
    ck_assert_double_eq_tol(s.max, 1.0, TOL);
    ck_assert_int_eq(s.verdict, PAIRED_MISSED); /* 83.3% at either flank */
}
END_TEST

START_TEST(test_cells_and_json)
{
    /* the table's cells: "-" without a stable run, else the percentages */
    paired_run_t r[4];
    paired_summary_t s;
    paired_cells_t c;
    paired_runs(&lim, flanks, steps, waits, NULL, 4, 0.10, r);
    paired_summarize(r, 4, 0.90, &s);
    paired_summary_cells(&s, &c);
    /* the stable runs 0 and 3: 100% and (5 + 1000 / 82) / 17.5 = 98.26%; their median 99.13% */
    ck_assert_str_eq(c.median, "99.1%");
    ck_assert_str_eq(c.spread, "98.3-100.0%");
    paired_summary_t none;
    paired_summarize(r + 1, 2, 0.90, &none); /* two phase changes */
    paired_summary_cells(&none, &c);
    ck_assert_str_eq(c.median, "-");
    ck_assert_str_eq(c.spread, "-");
    ck_assert_str_eq(c.hi, "-");
    ck_assert_str_eq(c.lo, "-");
    /* a run written as guild bench sessions writes it reads back the same (guild bench pool's reading) */
    const double early[] = {0, 0, 0, 0.25e9};
    paired_runs(&lim, flanks, steps, waits, early, 4, 0.10, r);
    for (int k = 0; k < 4; k++) {
        json_t *q = paired_run_json(&r[k]);
        paired_run_t back;
        guild_err_t err = {{0}};
        ck_assert_int_eq(paired_run_from_json(q, &back, "run", &err), 0);
        const double got[] = {back.before_gbps, back.after_gbps, back.step_s, back.wait_s, back.early_bytes,
                              back.wait_gbps, back.fraction, back.fraction_hi, back.fraction_lo};
        const double want[] = {r[k].before_gbps, r[k].after_gbps, r[k].step_s, r[k].wait_s, r[k].early_bytes,
                               r[k].wait_gbps, r[k].fraction, r[k].fraction_hi, r[k].fraction_lo};
        for (size_t i = 0; i < sizeof got / sizeof got[0]; i++)
            ck_assert_double_eq(got[i], want[i]);
        ck_assert(back.phase == r[k].phase && back.outran == r[k].outran);
        /* a record from before session 33 (no prefetched bytes) reads none; a missing field is an error */
        json_object_del(q, "prefetched_bytes_before_wait");
        ck_assert_int_eq(paired_run_from_json(q, &back, "run", &err), 0);
        ck_assert_double_eq(back.early_bytes, 0);
        json_object_del(q, "phase_change");
        ck_assert_int_eq(paired_run_from_json(q, &back, "run 9", &err), -1);
        ck_assert_str_eq(err.msg, "run 9: no true/false \"phase_change\"");
        json_decref(q);
    }
    /* the summary's keys */
    json_t *o = json_object();
    paired_summarize(r, 4, 0.90, &s);
    paired_summary_json(o, &s);
    ck_assert_int_eq(json_integer_value(json_object_get(o, "paired_stable_runs")), s.stable);
    ck_assert_double_eq(json_real_value(json_object_get(o, "paired_fraction_median")), s.median);
    ck_assert_str_eq(json_string_value(json_object_get(o, "paired_target")), paired_verdict_name(s.verdict));
    json_decref(o);
}
END_TEST

static Suite *paired_suite(void)
{
    Suite *s = suite_create("paired");
    TCase *tc = tcase_create("runs");
    tcase_add_test(tc, test_runs);
    tcase_add_test(tc, test_constant_rate_is_the_own_limit);
    suite_add_tcase(s, tc);
    tc = tcase_create("summary");
    tcase_add_test(tc, test_summary);
    tcase_add_test(tc, test_tolerance_edge_and_no_evidence);
    tcase_add_test(tc, test_reads_outran_the_probes);
    tcase_add_test(tc, test_prefetched_bytes_are_not_the_waits);
    tcase_add_test(tc, test_cells_and_json);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(paired_suite());
}
