#!/usr/bin/env python3
"""Session 32, pairprobe (issue 18): bench/paired.c's arithmetic applied to earlier calls of `guild bench sessions`
(before the paired layout), where each size's repeated runs came back to back between `probes` probes before and
`probes` after them: the block of runs is flanked by the last probe before it and the first after it. Each run is
held against the limit at those two flanks (their mean, the higher, the lower); a block whose flanks differ by more
than TOL (10%) saw a phase change, and one whose median wait read faster than both flanks (the CPU side's bytes over
the wait, a lower bound of the workers' rate) shows the probe bounding nothing (the old files keep the size's median
wait, not each run's). Weaker than the paired layout: the flanks are a block of 3 runs apart (0.5-3.5
s), not one run. Only the calls whose probe reads as the CPU workers read (session 28 onward).
Usage: retro.py JSON... (run from bench/results/)."""
import json
import sys

TOL, TARGET = 0.10, 0.90


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def pct(x):
    return "%.1f%%" % (100 * x)


rows = {}
print("| call | sessions | flanks GB/s (before, after) | runs ms | wait GB/s | paired median | at higher | at lower | "
      "left out | strict | own |")
print("|---|---:|---|---|---:|---:|---:|---:|---|---:|---:|")
for f in sys.argv[1:]:
    d = json.load(open(f))
    if not d.get("dram_probe", "").startswith("as the CPU workers read"):
        continue
    p = d["probes_each_side"]
    for s in d["sizes"]:
        pr = s["dram_probes_gbps"]
        if len(pr) != 2 * p:
            continue
        a, b = pr[p - 1], pr[p]
        fixed = s["dense_step_s"] + s["gpu_extra_expert_s"]
        at = lambda r, step: (fixed + s["cpu_expert_bytes_per_step"] / (r * 1e9)) / step
        runs = s["step_runs_s"]
        fm = median([at((a + b) / 2, x) for x in runs])
        fh = median([at(max(a, b), x) for x in runs])
        fl = median([at(min(a, b), x) for x in runs])
        phase = max(a, b) > min(a, b) * (1 + TOL)
        outran = not phase and s["wait_read_gbps"] > max(a, b)
        rows.setdefault(s["sessions"], []).append((fm, fh, fl, phase or outran, a, b, f))
        print("| %s | %d | %.1f, %.1f | %s | %.1f | %s | %s | %s | %s | %s | %s |" % (
            f, s["sessions"], a, b, " ".join("%.2f" % (1e3 * x) for x in runs), s["wait_read_gbps"], pct(fm),
            pct(fh), pct(fl), "phase change" if phase else "reads outran" if outran else "",
            pct(s["strict_fraction_of_limit"]), pct(s["fraction_of_limit"])))
print()
print("| sessions | blocks (kept / all) | paired medians of the stable blocks: median (min-max) | at higher | "
      "at lower | verdict at %.0f%% |" % (100 * TARGET))
print("|---:|---:|---|---:|---:|---|")
for n in sorted(rows):
    ok = [r for r in rows[n] if not r[3]]
    if not ok:
        print("| %d | 0 / %d | - | - | - | no block kept |" % (n, len(rows[n])))
        continue
    m = [r[0] for r in ok]
    hi, lo = median([r[1] for r in ok]), median([r[2] for r in ok])
    v = "met" if hi >= TARGET else "missed" if lo < TARGET else "undecided"
    print("| %d | %d / %d | %s (%s-%s) | %s | %s | %s |" % (n, len(ok), len(rows[n]), pct(median(m)), pct(min(m)),
                                                         pct(max(m)), pct(hi), pct(lo), v))
