/* The routing profile file (format and contract in routing_profile.h). */
#include "config.h"

#include "core/model/routing_profile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int routing_profile_new(routing_profile_t **out, int32_t n_layer, int32_t n_expert, int32_t n_used,
                        guild_err_t *err)
{
    *out = NULL;
    if (n_layer < 1 || n_layer > ROUTING_PROFILE_MAX_LAYERS || n_expert < 1 || n_expert > ROUTING_PROFILE_MAX_EXPERTS ||
        n_used < 1 || n_used > n_expert)
        return guild_err_set(err, "routing profile: %d layers x %d experts (top-%d) is not a shape it holds",
                             n_layer, n_expert, n_used);
    routing_profile_t *p = calloc(1, sizeof *p);
    if (!p || !(p->count = calloc((size_t)n_layer * (size_t)n_expert, sizeof *p->count))) {
        free(p);
        return guild_err_set(err, "routing profile: out of memory");
    }
    p->n_layer = n_layer;
    p->n_expert = n_expert;
    p->n_used = n_used;
    *out = p;
    return 0;
}

void routing_profile_destroy(routing_profile_t **pp)
{
    if (!*pp)
        return;
    free((*pp)->count);
    free(*pp);
    *pp = NULL;
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    char *e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
        *--e = '\0';
    return s;
}

/* A decimal integer in [0, 2^63) at *s (leading blanks skipped); *s moves past it. */
static int parse_count(char **s, uint64_t *out)
{
    char *p = *s;
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p < '0' || *p > '9')
        return -1;
    uint64_t v = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (UINT64_C(1) << 63) / 10)
            return -1;
        v = v * 10 + (uint64_t)(*p - '0');
        if (v >= UINT64_C(1) << 63)
            return -1;
    }
    if (*p && *p != ' ' && *p != '\t')
        return -1;
    *s = p;
    *out = v;
    return 0;
}

/* One header value: a count within [lo, hi]. */
static int header_value(const char *path, int line, const char *key, char *val, uint64_t lo, uint64_t hi,
                        uint64_t *out, guild_err_t *err)
{
    char *s = val;
    uint64_t v;
    if (parse_count(&s, &v) < 0 || *trim(s) || v < lo || v > hi)
        return guild_err_set(err, "%s:%d: %s = %s: expected an integer in %llu..%llu", path, line, key, val,
                             (unsigned long long)lo, (unsigned long long)hi);
    *out = v;
    return 0;
}

int routing_profile_load(routing_profile_t **out, const char *path, guild_err_t *err)
{
    *out = NULL;
    FILE *f = fopen(path, "r");
    if (!f)
        return guild_err_errno(err, errno, "%s", path);
    size_t cap = 0;
    char *buf = NULL;
    int lineno = 0, rc = -1;
    uint64_t version = 0, layers = 0, experts = 0, used = 0, tokens = 0;
    bool have_v = false, have_l = false, have_e = false, have_u = false, have_t = false;
    routing_profile_t *p = NULL;
    uint8_t *seen = NULL;
    ssize_t len;
    while ((len = getline(&buf, &cap, f)) >= 0) {
        lineno++;
        if ((size_t)len != strlen(buf)) {
            guild_err_set(err, "%s:%d: a NUL byte: not a routing profile", path, lineno);
            goto done;
        }
        /* routing_profile_save ends every line: a last line without its newline is a file cut short (its last
         * count may have lost digits), never a profile to use or add to */
        if (len > 0 && buf[len - 1] != '\n') {
            guild_err_set(err, "%s:%d: the last line has no newline: the file is truncated", path, lineno);
            goto done;
        }
        char *s = trim(buf);
        if (!*s || *s == '#')
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            guild_err_set(err, "%s:%d: expected `key = value`", path, lineno);
            goto done;
        }
        *eq = '\0';
        char *key = trim(s), *val = trim(eq + 1);
        int32_t il;
        char extra;
        if (!strcmp(key, "version")) {
            if (have_v) {
                guild_err_set(err, "%s:%d: version given twice", path, lineno);
                goto done;
            }
            if (header_value(path, lineno, key, val, 0, 1u << 30, &version, err) < 0)
                goto done;
            if (version != ROUTING_PROFILE_VERSION) {
                guild_err_set(err, "%s:%d: version %llu is not one this build reads (%d)", path, lineno,
                              (unsigned long long)version, ROUTING_PROFILE_VERSION);
                goto done;
            }
            have_v = true;
            continue;
        }
        if (!have_v) {
            guild_err_set(err, "%s:%d: expected `version = %d` first", path, lineno, ROUTING_PROFILE_VERSION);
            goto done;
        }
        if (!strcmp(key, "layers") || !strcmp(key, "experts") || !strcmp(key, "experts_used") ||
            !strcmp(key, "tokens")) {
            bool *have = !strcmp(key, "layers") ? &have_l : !strcmp(key, "experts") ? &have_e
                         : !strcmp(key, "experts_used") ? &have_u : &have_t;
            uint64_t *v = have == &have_l ? &layers : have == &have_e ? &experts : have == &have_u ? &used : &tokens;
            const uint64_t hi = have == &have_l ? ROUTING_PROFILE_MAX_LAYERS
                                : have == &have_t ? (UINT64_C(1) << 62) : ROUTING_PROFILE_MAX_EXPERTS;
            if (*have || p) {
                guild_err_set(err, "%s:%d: %s %s", path, lineno, key, *have ? "given twice" : "after the layers");
                goto done;
            }
            if (header_value(path, lineno, key, val, have == &have_t ? 0 : 1, hi, v, err) < 0)
                goto done;
            *have = true;
            continue;
        }
        if (sscanf(key, "layer %d%c", &il, &extra) != 1) {
            guild_err_set(err, "%s:%d: unknown key \"%s\"", path, lineno, key);
            goto done;
        }
        if (!p) {
            if (!have_l || !have_e || !have_u || !have_t) {
                guild_err_set(err, "%s:%d: a layer before layers, experts, experts_used and tokens", path, lineno);
                goto done;
            }
            if (routing_profile_new(&p, (int32_t)layers, (int32_t)experts, (int32_t)used, err) < 0) {
                guild_err_prefix(err, "%s: ", path);
                goto done;
            }
            p->tokens = tokens;
            if (!(seen = calloc((size_t)layers, 1))) {
                guild_err_set(err, "%s: out of memory", path);
                goto done;
            }
        }
        if (il < 0 || il >= p->n_layer || seen[il]) {
            guild_err_set(err, "%s:%d: layer %d %s", path, lineno, il,
                          il < 0 || il >= p->n_layer ? "is out of range" : "given twice");
            goto done;
        }
        seen[il] = 1;
        uint64_t *c = p->count + (size_t)il * (size_t)p->n_expert;
        unsigned __int128 sum = 0;
        char *q = val;
        for (int32_t e = 0; e < p->n_expert; e++) {
            if (parse_count(&q, &c[e]) < 0) {
                guild_err_set(err, "%s:%d: layer %d: expected %d counts (integers below 2^63), expert %d is not one",
                              path, lineno, il, p->n_expert, e);
                goto done;
            }
            sum += c[e];
        }
        if (*trim(q)) {
            guild_err_set(err, "%s:%d: layer %d: more than %d counts", path, lineno, il, p->n_expert);
            goto done;
        }
        if (p->tokens < ROUTING_PROFILE_MAX_TOKENS && /* saturated: "at least", no bound */
            sum > (unsigned __int128)p->tokens * (unsigned __int128)p->n_used) {
            guild_err_set(err, "%s:%d: layer %d: more pairs than %llu tokens x %d", path, lineno, il,
                          (unsigned long long)p->tokens, p->n_used);
            goto done;
        }
    }
    if (ferror(f)) {
        guild_err_errno(err, errno, "%s", path);
        goto done;
    }
    if (!p) {
        guild_err_set(err, "%s: %s", path, have_v ? "no layer lines" : "empty: not a routing profile");
        goto done;
    }
    for (int32_t il = 0; il < p->n_layer; il++)
        if (!seen[il]) {
            guild_err_set(err, "%s: layer %d is missing", path, il);
            goto done;
        }
    rc = 0;
done:
    fclose(f);
    free(buf);
    free(seen);
    if (rc < 0)
        routing_profile_destroy(&p);
    *out = p;
    return rc;
}

int routing_profile_save(const routing_profile_t *p, const char *path, guild_err_t *err)
{
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= sizeof tmp)
        return guild_err_set(err, "%s: path too long", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return guild_err_errno(err, errno, "%s", tmp);
    fprintf(f, "# guild routing profile: routed (token, slot) pairs per expert of every MoE layer\n"
               "# (core/model/routing_profile.h; written by guild optimize or --record-routing)\n"
               "version = %d\nlayers = %d\nexperts = %d\nexperts_used = %d\ntokens = %llu\n",
            ROUTING_PROFILE_VERSION, p->n_layer, p->n_expert, p->n_used, (unsigned long long)p->tokens);
    for (int32_t il = 0; il < p->n_layer; il++) {
        fprintf(f, "layer %d =", il);
        for (int32_t e = 0; e < p->n_expert; e++)
            fprintf(f, " %llu", (unsigned long long)p->count[(size_t)il * (size_t)p->n_expert + (size_t)e]);
        fputc('\n', f);
    }
    const int werr = ferror(f) ? errno : 0;
    if (fclose(f) != 0 || werr) {
        const int e = werr ? werr : errno;
        unlink(tmp);
        return guild_err_errno(err, e, "cannot write %s", tmp);
    }
    if (rename(tmp, path) != 0) {
        const int e = errno;
        unlink(tmp);
        return guild_err_errno(err, e, "cannot replace %s", path);
    }
    return 0;
}

static int check_shape(const routing_profile_t *p, const model_config_t *c, const char *path, const char *model_path,
                       guild_err_t *err)
{
    if (p->n_layer != c->n_layer || p->n_expert != c->n_expert || p->n_used != c->n_expert_used)
        return guild_err_set(err, "%s: a routing profile of %d layers x %d experts (top-%d), the model%s%s has %d x %d "
                             "(top-%d): it is another model's", path, p->n_layer, p->n_expert, p->n_used,
                             model_path ? " " : "", model_path ? model_path : "", c->n_layer, c->n_expert,
                             c->n_expert_used);
    return 0;
}

int routing_profile_check(const routing_profile_t *p, const model_config_t *c, const char *path, guild_err_t *err)
{
    return check_shape(p, c, path, NULL, err);
}

static uint64_t add_sat(uint64_t a, uint64_t b, uint64_t lim, bool *sat)
{
    if (a >= lim || b > lim - a) {
        *sat = true;
        return lim > a ? lim : a;
    }
    return a + b;
}

int routing_profile_add(routing_profile_t *p, const uint64_t *counts, uint64_t tokens, guild_err_t *err)
{
    const size_t n = (size_t)p->n_layer * (size_t)p->n_expert;
    bool sat_t = false, sat_c = false;
    p->tokens = add_sat(p->tokens, tokens, ROUTING_PROFILE_MAX_TOKENS, &sat_t);
    size_t n_sat = 0;
    for (size_t i = 0; i < n; i++) {
        bool s = false;
        p->count[i] = add_sat(p->count[i], counts[i], ROUTING_PROFILE_MAX_COUNT, &s);
        n_sat += s;
        sat_c |= s;
    }
    if (!sat_t && !sat_c)
        return 0;
    guild_err_set(err, "routing profile: saturated: %s%zu pair counts stopped at their limit (2^63 - 1)%s",
                  sat_t ? "tokens stopped at 2^62, " : "", n_sat,
                  sat_t ? "; tokens now means \"at least\"" : "; the others are exact");
    return 1;
}

int routing_profile_check_file(const char *path, const model_config_t *c, const char *model_path, guild_err_t *err)
{
    if (access(path, F_OK) != 0)
        return errno == ENOENT ? 0 : guild_err_errno(err, errno, "%s", path);
    routing_profile_t *p = NULL;
    const int rc = routing_profile_load(&p, path, err) < 0 || check_shape(p, c, path, model_path, err) < 0 ? -1 : 0;
    routing_profile_destroy(&p);
    return rc;
}

int routing_profile_merge_file(const char *path, const model_config_t *c, const char *model_path,
                               const uint64_t *counts, uint64_t tokens, bool replace, routing_profile_merge_t *info,
                               guild_err_t *err)
{
    routing_profile_merge_t in = {0};
    routing_profile_t *p = NULL;
    int rc = -1;
    const bool exists = !replace && access(path, F_OK) == 0;
    if (!replace && !exists && errno != ENOENT) {
        guild_err_errno(err, errno, "%s", path);
        goto done;
    }
    if (exists) {
        if (routing_profile_load(&p, path, err) < 0 || check_shape(p, c, path, model_path, err) < 0)
            goto done;
        in.tokens_before = p->tokens;
    } else if (routing_profile_new(&p, c->n_layer, c->n_expert, c->n_expert_used, err) < 0) {
        guild_err_prefix(err, "%s: ", path);
        goto done;
    }
    in.created = !exists;
    guild_err_t sat = {{0}};
    in.saturated = routing_profile_add(p, counts, tokens, &sat) == 1;
    if (routing_profile_save(p, path, err) < 0)
        goto done;
    in.tokens_after = p->tokens;
    rc = 0;
done:
    if (info)
        *info = in;
    routing_profile_destroy(&p);
    return rc;
}

int routing_profile_path(const char *model_path, char *path, size_t n, guild_err_t *err)
{
    if ((size_t)snprintf(path, n, "%s.routing", model_path) >= n)
        return guild_err_set(err, "%s: path too long for its routing profile", model_path);
    return 0;
}

int routing_profile_load_for_model(const char *model_path, const model_config_t *c, routing_profile_t **out,
                                   guild_err_t *err)
{
    *out = NULL;
    char path[4096];
    if (routing_profile_path(model_path, path, sizeof path, err) < 0)
        return -1;
    if (access(path, F_OK) != 0)
        return 0;
    if (routing_profile_load(out, path, err) < 0)
        return -1;
    if (check_shape(*out, c, path, model_path, err) < 0) {
        routing_profile_destroy(out);
        return -1;
    }
    return 0;
}

double routing_profile_share(const routing_profile_t *p, const uint8_t *resident)
{
    uint64_t all = 0, hit = 0;
    const size_t n = (size_t)p->n_layer * (size_t)p->n_expert;
    for (size_t i = 0; i < n; i++) {
        all += p->count[i];
        hit += resident && resident[i] ? p->count[i] : 0;
    }
    return all ? (double)hit / (double)all : 0.0;
}
