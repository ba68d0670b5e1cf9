#include <math.h>
#include <stdlib.h>

#include "gpu-worker/dense/cpu/cpu_kernels.h"

/* ggml_rope_yarn_corr_dim: the dimension at which a rotation completes n_rot turns over n_ctx_orig positions */
static double yarn_corr_dim(int32_t n_dims, int32_t n_ctx_orig, double n_turns, double base)
{
    return n_dims * log(n_ctx_orig / (n_turns * 2 * M_PI)) / (2 * log(base));
}

int cpu_rope_init(cpu_rope_t *r, const model_config_t *c, const float *freq_factors)
{
    r->n_rot = c->n_rot;
    r->neox = c->rope_neox;
    r->inv_freq = malloc((size_t)(c->n_rot / 2) * sizeof *r->inv_freq);
    if (!r->inv_freq)
        return -1;
    for (int32_t i = 0; i < c->n_rot / 2; i++)
        r->inv_freq[i] = pow((double)c->rope_freq_base, -2.0 * i / c->n_rot) / (freq_factors ? freq_factors[i] : 1.0);
    r->freq_scale = c->rope_freq_scale;
    r->ext_factor = c->rope_scaling == MODEL_ROPE_SCALING_YARN ? c->yarn_ext_factor : 0.0;
    r->attn_factor = c->rope_scaling == MODEL_ROPE_SCALING_YARN ? c->yarn_attn_factor : 1.0;
    r->corr_lo = r->corr_hi = 0;
    if (r->ext_factor != 0) {
        double lo = floor(yarn_corr_dim(c->n_rot, c->rope_n_ctx_orig, c->yarn_beta_fast, c->rope_freq_base));
        double hi = ceil(yarn_corr_dim(c->n_rot, c->rope_n_ctx_orig, c->yarn_beta_slow, c->rope_freq_base));
        r->corr_lo = lo > 0 ? lo : 0;
        r->corr_hi = hi < c->n_rot - 1 ? hi : c->n_rot - 1;
    }
    return 0;
}

void cpu_rope_fini(cpu_rope_t *r)
{
    free(r->inv_freq);
    r->inv_freq = NULL;
}

void cpu_rope_table(const cpu_rope_t *r, int32_t pos, float *cs)
{
    for (int32_t i = 0; i < r->n_rot / 2; i++) {
        double theta_extrap = (double)pos * r->inv_freq[i];
        double theta = r->freq_scale * theta_extrap;
        double mscale = r->attn_factor;
        if (r->ext_factor != 0) {
            double y = (i - r->corr_lo) / fmax(0.001, r->corr_hi - r->corr_lo);
            double ramp_mix = (1 - fmin(1, fmax(0, y))) * r->ext_factor;
            theta = theta * (1 - ramp_mix) + theta_extrap * ramp_mix;
            mscale *= 1 + 0.1 * log(1 / r->freq_scale);
        }
        cs[2 * i] = (float)(cos(theta) * mscale);
        cs[2 * i + 1] = (float)(sin(theta) * mscale);
    }
}

void cpu_rope_apply(const cpu_rope_t *r, float *x, int32_t n_heads, int32_t head_dim, const float *cs)
{
    const int32_t half = r->n_rot / 2;
    for (int32_t h = 0; h < n_heads; h++) {
        float *v = x + (int64_t)h * head_dim;
        for (int32_t i = 0; i < half; i++) {
            const float c = cs[2 * i], s = cs[2 * i + 1];
            float *a = r->neox ? &v[i] : &v[2 * i];
            float *b = r->neox ? &v[i + half] : &v[2 * i + 1];
            const float x0 = *a, x1 = *b;
            *a = x0 * c - x1 * s;
            *b = x0 * s + x1 * c;
        }
    }
}
