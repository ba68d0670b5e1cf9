/* core/util/clock.h — monotonic time and the median of repeated timings, for the commands and benchmarks that
 * measure (guild optimize, guild bench, the stager's --bench). */
#ifndef GUILD_UTIL_CLOCK_H
#define GUILD_UTIL_CLOCK_H

/* CLOCK_MONOTONIC in seconds. */
double guild_clock_s(void);

/* Median of v[0 .. n) (sorts v); 0 when n <= 0. */
double guild_median(double *v, int n);

#endif
