/* stager/stager_options.h — guild-stager's options: one record, parsed once from its command line (the rings
 * come there: it serves before it registers), its one wire form (StagerOptions in proto/guild.proto, which the
 * coordinator's Assign repeats) and its one check, which also compares an Assign's options with the record. */
#ifndef GUILD_STAGER_STAGER_OPTIONS_H
#define GUILD_STAGER_STAGER_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/util/err.h"
#include "ipc/curve.h"
#include "proto/guild.pb-c.h"

#define STAGER_MAX_RINGS 8
#define STAGER_RING_NAME_MAX 320

typedef struct stager_options {
    char rings[STAGER_MAX_RINGS][STAGER_RING_NAME_MAX]; /* the rings' arena names (--ring; fd:N as
                                                           /proc/self/fd/N) */
    int n_rings;
    int32_t threads;      /* copy threads per ring (--threads; default: the CPUs this process may run on, <= 64) */
    const char *model;    /* -m: the model file to serve */
    const char *endpoint; /* --connect: the coordinator's control socket; NULL: none */
    guild_curve_options_t curve; /* --key, --server-key, --insecure (ipc/curve.h): a tcp --connect needs them */
    bool bench;           /* --bench: measure the fill rate instead of serving */
    int32_t runs;         /* --runs: bench runs per measurement */
    int32_t slot_mib;     /* --slot-mib: bench slot size */
    int verbose;          /* -v count */
} stager_options_t;

/* The --help text. */
void stager_options_usage(FILE *out);

/* Parses argv (getopt_long from optind 1) into *o: 0, 1 when --help was asked (printed on stdout), -1 with err
 * on a bad value, -2 with err on an unknown flag or a stray argument (the caller adds the usage). */
int stager_options_parse(stager_options_t *o, int argc, char **argv, guild_err_t *err);

/* Fills *m from o (the rings and threads; the rest is local); m->rings points into names[STAGER_MAX_RINGS],
 * which points into o. */
void stager_options_to_proto(const stager_options_t *o, Guild__StagerOptions *m, char **names);

/* The record of a received message: its rings and threads (names too long for the record, or too many rings,
 * are an error). */
int stager_options_from_proto(stager_options_t *o, const Guild__StagerOptions *m, guild_err_t *err);

/* The one check: a model, at least one ring unless benchmarking, threads 1..256, the keys a tcp --connect needs
 * (guild_curve_check). -1 with err (the caller adds the usage). */
int stager_options_check(const stager_options_t *o, guild_err_t *err);

/* 0 when an Assign's options `a` ask for what `o` serves (the same rings and threads); -1 with err otherwise. */
int stager_options_match(const stager_options_t *o, const stager_options_t *a, guild_err_t *err);

#endif
