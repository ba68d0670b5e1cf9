/* bench/paired_json.c — paired runs and summaries to and from JSON (bench/paired_json.h). */
#include "config.h"

#include "bench/paired_json.h"

json_t *paired_run_json(const paired_run_t *r)
{
    json_t *q = json_object();
    json_object_set_new(q, "step_s", json_real(r->step_s));
    json_object_set_new(q, "expert_wait_s", json_real(r->wait_s));
    json_object_set_new(q, "wait_read_gbps", json_real(r->wait_gbps));
    json_object_set_new(q, "prefetched_bytes_before_wait", json_real(r->early_bytes));
    json_object_set_new(q, "probe_before_gbps", json_real(r->before_gbps));
    json_object_set_new(q, "probe_after_gbps", json_real(r->after_gbps));
    json_object_set_new(q, "fraction_of_limit", json_real(r->fraction));
    json_object_set_new(q, "fraction_at_higher_probe", json_real(r->fraction_hi));
    json_object_set_new(q, "fraction_at_lower_probe", json_real(r->fraction_lo));
    json_object_set_new(q, "phase_change", json_boolean(r->phase));
    json_object_set_new(q, "reads_outran_probes", json_boolean(r->outran));
    return q;
}

/* A number field of o, or -1 with err naming where when it is absent or not a number. */
static int field_num(const json_t *o, const char *key, double *v, const char *where, guild_err_t *err)
{
    const json_t *x = json_object_get(o, key);
    if (!json_is_number(x))
        return guild_err_set(err, "%s: no number \"%s\"", where, key);
    *v = json_number_value(x);
    return 0;
}

static int field_bool(const json_t *o, const char *key, bool *v, const char *where, guild_err_t *err)
{
    const json_t *x = json_object_get(o, key);
    if (!json_is_boolean(x))
        return guild_err_set(err, "%s: no true/false \"%s\"", where, key);
    *v = json_is_true(x);
    return 0;
}

int paired_run_from_json(const json_t *q, paired_run_t *r, const char *where, guild_err_t *err)
{
    *r = (paired_run_t){0};
    if (!json_is_object(q))
        return guild_err_set(err, "%s: not an object", where);
    if (field_num(q, "probe_before_gbps", &r->before_gbps, where, err) < 0 ||
        field_num(q, "probe_after_gbps", &r->after_gbps, where, err) < 0 ||
        field_num(q, "step_s", &r->step_s, where, err) < 0 ||
        field_num(q, "expert_wait_s", &r->wait_s, where, err) < 0 ||
        field_num(q, "wait_read_gbps", &r->wait_gbps, where, err) < 0 ||
        field_num(q, "fraction_of_limit", &r->fraction, where, err) < 0 ||
        field_num(q, "fraction_at_higher_probe", &r->fraction_hi, where, err) < 0 ||
        field_num(q, "fraction_at_lower_probe", &r->fraction_lo, where, err) < 0 ||
        field_bool(q, "phase_change", &r->phase, where, err) < 0 ||
        field_bool(q, "reads_outran_probes", &r->outran, where, err) < 0)
        return -1;
    const json_t *early = json_object_get(q, "prefetched_bytes_before_wait");
    if (early && !json_is_number(early))
        return guild_err_set(err, "%s: \"prefetched_bytes_before_wait\" is not a number", where);
    r->early_bytes = early ? json_number_value(early) : 0;
    if (!(r->before_gbps > 0 && r->after_gbps > 0))
        return guild_err_set(err, "%s: a probe of no positive rate (%g, %g GB/s)", where, r->before_gbps,
                             r->after_gbps);
    return 0;
}

void paired_summary_json(json_t *o, const paired_summary_t *s)
{
    json_object_set_new(o, "paired_stable_runs", json_integer(s->stable));
    json_object_set_new(o, "paired_phase_change_runs", json_integer(s->phase));
    json_object_set_new(o, "paired_outran_runs", json_integer(s->outran));
    json_object_set_new(o, "paired_fraction_median", json_real(s->median));
    json_object_set_new(o, "paired_fraction_min", json_real(s->min));
    json_object_set_new(o, "paired_fraction_max", json_real(s->max));
    json_object_set_new(o, "paired_fraction_at_higher_median", json_real(s->median_hi));
    json_object_set_new(o, "paired_fraction_at_lower_median", json_real(s->median_lo));
    json_object_set_new(o, "paired_wait_over_probe", json_real(s->wait_over_flank));
    json_object_set_new(o, "paired_target", json_string(paired_verdict_name(s->verdict)));
}
