#!/usr/bin/env python3
"""Session 32, pairprobe (issue 18): the paired fractions of `guild bench sessions` JSON files (each timed run
against the limit at the DRAM probes right before and right after it), per file and pooled over the files, and
whether a run's step follows its probes' phase. Usage: analyze.py sessions-1.json [sessions-2.json ...] > analysis.md
"""
import json
import sys


def median(v):
    v = sorted(v)
    n = len(v)
    if not n:
        return float("nan")
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def pct(x):
    return "-" if x != x else "%.1f%%" % (100 * x)


def verdict(hi, lo, target):
    if hi != hi:
        return "no stable run"
    return "met" if hi >= target else "missed" if lo < target else "undecided"


files = [(f, json.load(open(f))) for f in sys.argv[1:]]
target = files[0][1]["target_fraction"]
tol = files[0][1]["flank_tolerance"]

print("## Per call of the bench\n")
for f, d in files:
    print("### %s (probes a flank: %d; strict rate %.1f GB/s; %d of %d runs saw a phase change)\n" % (
        f, d["probes_each_side"], d["dram_strict_gbps"], d["paired_runs_phase_change_total"], d["paired_runs_total"]))
    print("| sessions | tok/s | step ms | wait ms | out+ ms | paired (runs) | at higher | at lower | stable | "
          "wait/probe | verdict | strict | own |")
    print("|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---|---:|---:|")
    for s in d["sizes"]:
        st = s["paired_stable_runs"]
        spread = "%s (%s-%s)" % (pct(s["paired_fraction_median"]), pct(s["paired_fraction_min"]),
                                 pct(s["paired_fraction_max"])) if st else "-"
        print("| %d | %.2f | %.2f | %.2f | %.2f | %s | %s | %s | %d/%d | %.2f | %s | %s | %s |" % (
            s["sessions"], s["decode_tok_s"], 1e3 * s["step_s"], 1e3 * s["expert_wait_s"],
            1e3 * s["outside_beyond_limit_s"], spread,
            pct(s["paired_fraction_at_higher_median"]) if st else "-",
            pct(s["paired_fraction_at_lower_median"]) if st else "-", st, len(s["paired_runs"]),
            s["paired_wait_over_probe"], s["paired_target"], pct(s["strict_fraction_of_limit"]),
            pct(s["fraction_of_limit"])))
    print()

print("## Pooled: every stable run of every call\n")
print("Each run against the limit of its own call and size (dense step, GPU-resident extra, CPU side's bytes) at "
      "its flanks; phase changes (flanks more than %.0f%% apart) and runs whose wait read faster than both flanks "
      "left out. Target %.0f%%.\n" % (100 * tol,
                                                                                          100 * target))
print("| sessions | kept / runs | paired median (min-max) | at higher | at lower | verdict | wait GB/s (median) | "
      "flank GB/s (min-max) | wait/probe |")
print("|---:|---:|---|---:|---:|---|---:|---|---:|")
sizes = sorted({s["sessions"] for _, d in files for s in d["sizes"]})
for n in sizes:
    runs = [q for _, d in files for s in d["sizes"] if s["sessions"] == n for q in s["paired_runs"]]
    ok = [q for q in runs if not q["phase_change"] and not q.get("reads_outran_probes")]
    f = [q["fraction_of_limit"] for q in ok]
    hi = median([q["fraction_at_higher_probe"] for q in ok])
    lo = median([q["fraction_at_lower_probe"] for q in ok])
    fl = [x for q in ok for x in (q["probe_before_gbps"], q["probe_after_gbps"])]
    w = [q["wait_read_gbps"] for q in ok]
    wp = [q["wait_read_gbps"] / (0.5 * (q["probe_before_gbps"] + q["probe_after_gbps"])) for q in ok]
    print("| %d | %d / %d | %s (%s-%s) | %s | %s | %s | %.1f | %s | %.2f |" % (
        n, len(ok), len(runs), pct(median(f)), pct(min(f)) if f else "-", pct(max(f)) if f else "-", pct(hi),
        pct(lo), verdict(hi, lo, target), median(w), "%.1f-%.1f" % (min(fl), max(fl)) if fl else "-", median(wp)))
print()

# does a run's step follow its probes' phase? stable runs split at the middle of the probes' two clusters
cut = 110.0
print("## Runs without a phase change by their probes' phase (flanks' mean below / above %.0f GB/s), those that "
      "outran their probes included\n" % cut)
print("If the DRAM rate the probes see were the rate the CPU worker reads at, a run in the slow phase would take "
      "longer; the step and the wait's rate say whether it does.\n")
print("| sessions | slow: runs | step ms | wait GB/s | paired | fast: runs | step ms | wait GB/s | paired |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for n in sizes:
    ok = [q for _, d in files for s in d["sizes"] if s["sessions"] == n for q in s["paired_runs"]
          if not q["phase_change"]]
    row = ["%d" % n]
    for slow in (True, False):
        g = [q for q in ok if ((q["probe_before_gbps"] + q["probe_after_gbps"]) / 2 < cut) == slow]
        if g:
            row += ["%d" % len(g), "%.2f" % (1e3 * median([q["step_s"] for q in g])),
                    "%.1f" % median([q["wait_read_gbps"] for q in g]), pct(median([q["fraction_of_limit"] for q in g]))]
        else:
            row += ["0", "-", "-", "-"]
    print("| " + " | ".join(row) + " |")
print()

print("## Every probe in order (GB/s), by call and size\n")
for f, d in files:
    for s in d["sizes"]:
        print("- %s, %d sessions: %s" % (f, s["sessions"], " ".join("%.1f" % x for x in s["dram_probes_gbps"])))
