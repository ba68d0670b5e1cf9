#include "core/model/keys.h"

#include <math.h>
#include <stdio.h>

static void key_name(char *buf, size_t size, const model_keys_t *k, const char *suffix)
{
    snprintf(buf, size, "%s.%s", k->arch, suffix);
}

/* Writes ARCH.suffix into key; 1 when the file has it, 0 when not and optional, -1 with an error naming the file
 * and the key when not and required. */
static int find(const model_keys_t *k, const char *suffix, char *key, size_t size, bool required)
{
    key_name(key, size, k, suffix);
    if (gguf_find_key(k->g, key) >= 0)
        return 1;
    if (required)
        return guild_err_set(k->err, "%s: metadata key %s is missing", gguf_path(k->g), key);
    return 0;
}

bool model_key_present(const model_keys_t *k, const char *suffix)
{
    char key[160];
    key_name(key, sizeof key, k, suffix);
    return gguf_find_key(k->g, key) >= 0;
}

int model_key_i32(const model_keys_t *k, const char *suffix, int32_t *out, bool required, int32_t def, int64_t lo,
                  int64_t hi)
{
    char key[160];
    const int present = find(k, suffix, key, sizeof key, required);
    if (present <= 0) {
        *out = def;
        return present;
    }
    int64_t v;
    if (gguf_get_int(k->g, key, &v, k->err) < 0)
        return guild_err_prefix(k->err, "%s: ", gguf_path(k->g));
    if (v < lo || v > hi)
        return guild_err_set(k->err, "%s: metadata key %s = %lld is out of range [%lld, %lld]", gguf_path(k->g),
                             key, (long long)v, (long long)lo, (long long)hi);
    *out = (int32_t)v;
    return 0;
}

int model_key_f32(const model_keys_t *k, const char *suffix, float *out, bool required, float def)
{
    char key[160];
    const int present = find(k, suffix, key, sizeof key, required);
    if (present <= 0) {
        *out = def;
        return present;
    }
    double v;
    if (gguf_get_float(k->g, key, &v, k->err) < 0)
        return guild_err_prefix(k->err, "%s: ", gguf_path(k->g));
    if (!isfinite(v) || fabs(v) > 1e30)
        return guild_err_set(k->err, "%s: metadata key %s = %g is not a usable number", gguf_path(k->g), key, v);
    *out = (float)v;
    return 0;
}
