#!/bin/sh
# guild bench pool on sessions files written by hand: per size the runs of every file pooled (counts of runs, kept,
# phase changes and outran; a run with both a phase change and outrun reads counted as a phase change, as
# bench/paired.h's rule counts it), the medians of the kept runs at the flanks' mean, higher and lower probe, the
# spread, wait/probe and the verdict at several targets; a record without prefetched_bytes_before_wait (before
# session 33) read as none; more runs at a size than a call's summary took (no truncation) and a pool above
# PAIRED_MAX_RUNS refused; mixed commits refused unless --any-commit, other settings, files without paired runs
# (--dram-gbs), documents of another kind, bad JSON and missing paths refused.
set -u
. "$(dirname "$0")/test_lib.sh"
need_built "$G"
need_python
make_tmp
# run(MEAN, HI, LO, PHASE, OUTRAN, WAIT_GBPS[, PREFETCHED]): one paired_runs record, probes 100 and 100 GB/s
"$PY" - "$T" <<'PY' || fail "writing the files"
import json, sys
t = sys.argv[1]
def run(f, hi, lo, phase, outran, wait, early=None):
    r = {"step_s": 0.04, "expert_wait_s": 0.03, "wait_read_gbps": wait, "probe_before_gbps": 100.0,
         "probe_after_gbps": 100.0, "fraction_of_limit": f, "fraction_at_higher_probe": hi,
         "fraction_at_lower_probe": lo, "phase_change": phase, "reads_outran_probes": outran}
    if early is not None:
        r["prefetched_bytes_before_wait"] = early
    return r
def doc(commit, sizes, **kw):
    d = {"provenance": {"commit": commit, "date": "2026-12-03T13:00:00Z", "gpu": "none", "command": "by hand"},
         "model": "/tmp/m.gguf", "mode": "multi-process", "gpu_mem_budget_bytes": 8589934592,
         "gpu_resident_experts_planned": 2048, "prompt": 128, "gen": 16, "repeat": 3, "probes_each_side": 1,
         "flank_tolerance": 0.1, "target_fraction": 0.9,
         "sizes": [{"sessions": n, "paired_runs": runs} for n, runs in sizes]}
    d.update(kw)
    return d
def put(name, d):
    json.dump(d, open(f"{t}/{name}", "w"), indent=1)
a = doc("abc123", [(1, [run(0.95, 0.93, 0.97, False, False, 90, 0.0), run(0.80, 0.78, 0.82, True, False, 90, 0.0)]),
                   (8, [run(0.88, 0.86, 0.90, False, False, 90, 1e9), run(0.99, 0.97, 1.01, False, True, 130, 0.0)])])
# before session 33: no prefetched_bytes_before_wait
b = doc("abc123", [(8, [run(0.92, 0.90, 0.94, False, False, 100), run(0.89, 0.87, 0.91, False, False, 110),
                        run(0.70, 0.60, 0.80, True, True, 140)]),
                   (16, [run(0.9, 0.8, 1.0, True, False, 90)])])
put("a.json", a)
put("b.json", b)
put("c.json", doc("def456", [(8, [run(0.5, 0.5, 0.5, False, False, 90)])]))
put("gen.json", doc("abc123", [(8, [run(0.5, 0.5, 0.5, False, False, 90)])], gen=32))
put("fixed.json", doc("abc123", [(8, [run(0.5, 0.5, 0.5, False, False, 90)])], probes_each_side=0))
put("run.json", {"provenance": {"commit": "abc123"}, "results": [{"context": 512}]})
put("norun.json", doc("abc123", [(8, [])]))
put("badrun.json", doc("abc123", [(8, [{"step_s": 0.04}])]))
# 500 runs at 4 sessions in each of two files: 1,000 pooled; the kept ones' fractions k/1000, k = 0..499 in
# one file, 500..999 in the other, every third one with a phase change
def many(lo_k):
    rs = []
    for k in range(lo_k, lo_k + 500):
        f = k / 1000
        rs.append(run(f, f - 0.01, f + 0.01, k % 3 == 0, False, 90))
    return doc("abc123", [(4, rs)])
put("m1.json", many(0))
put("m2.json", many(500))
put("m3.json", doc("abc123", [(4, [run(0.5, 0.5, 0.5, False, False, 90)] * 100)]))
PY
printf '{"sizes": [' > "$T/bad.json"

"$G" bench pool "$T/a.json" "$T/b.json" --json "$T/p.json" > "$T/out.txt" 2> "$T/err.txt" ||
    { cat "$T/err.txt"; fail "pooling a and b"; }
cat "$T/out.txt"
"$PY" - "$T/p.json" <<'PY' || fail "the pooled JSON"
import json, sys
d = json.load(open(sys.argv[1]))
z = {s["sessions"]: s for s in d["sizes"]}
assert sorted(z) == [1, 8, 16], z.keys()
def near(x, y): return abs(x - y) < 1e-12
def counts(s): return tuple(s["paired_" + k] for k in ("runs", "stable_runs", "phase_change_runs", "outran_runs"))
s = z[1]
assert counts(s) == (2, 1, 1, 0), s
assert near(s["paired_fraction_median"], 0.95) and near(s["paired_fraction_at_higher_median"], 0.93), s
assert s["paired_target"] == "met" and s["runs_from_each_file"] == [2, 0], s
s = z[8]
# kept: 0.88, 0.92, 0.89 (a's second outran; b's third changed phase and outran: a phase change)
assert counts(s) == (5, 3, 1, 1), s
assert near(s["paired_fraction_median"], 0.89) and near(s["paired_fraction_min"], 0.88), s
assert near(s["paired_fraction_max"], 0.92), s
assert near(s["paired_fraction_at_higher_median"], 0.87) and near(s["paired_fraction_at_lower_median"], 0.91), s
assert near(s["paired_wait_over_probe"], 1.0), s  # waits 90, 100, 110 over probes of 100
assert s["paired_target"] == "undecided" and s["runs_from_each_file"] == [2, 3], s
s = z[16]
assert (s["paired_stable_runs"], s["paired_target"]) == (0, "no stable run"), s
assert near(d["target_fraction"], 0.9) and not d["mixed_commits"] and len(d["files"]) == 2, d
PY
awk '$1 == 8 && $2 == 5 && $3 == 3 && $4 == 1 && $5 == 1 && $6 == "89.0%" && $7 == "88.0-92.0%" &&
     $8 == "87.0%" && $9 == "91.0%" && $NF == "undecided" { ok = 1 } END { exit !ok }' "$T/out.txt" ||
    fail "the table's row of 8 sessions"
# the target moves the verdict: at 86.5% the higher flank's median (87%) meets it, at 92% the lower one misses it
for tv in "86.5 met" "92 missed" "95 missed"; do
    set -- $tv
    "$G" bench pool --target "$1" "$T/a.json" "$T/b.json" > "$T/out.txt" 2>&1 || fail "--target $1"
    awk -v v="$2" '$1 == 8 && $NF == v { ok = 1 } END { exit !ok }' "$T/out.txt" ||
        { cat "$T/out.txt"; fail "--target $1: 8 sessions not $2"; }
done
"$G" bench pool --target 95 "$T/a.json" > "$T/out.txt" 2>&1 || fail "--target 95 on a"
awk '$1 == 1 && $NF == "undecided" { ok = 1 } END { exit !ok }' "$T/out.txt" || fail "--target 95: 1 session"

# 1,000 runs at one size (above the 64 a summary once took): 666 kept, fractions k/1000 for k not a multiple of 3;
# the median of the 666 is the mean of the 333rd and 334th
"$G" bench pool "$T/m1.json" "$T/m2.json" --json "$T/m.json" > "$T/out.txt" 2>&1 ||
    { cat "$T/out.txt"; fail "1,000 runs"; }
"$PY" - "$T/m.json" <<'PY' || fail "the pool of 1,000 runs"
import json, sys
s = json.load(open(sys.argv[1]))["sizes"][0]
kept = sorted(k / 1000 for k in range(1000) if k % 3)
med = (kept[332] + kept[333]) / 2
assert (s["paired_runs"], s["paired_stable_runs"], s["paired_phase_change_runs"]) == (1000, 666, 334), s
assert abs(s["paired_fraction_median"] - med) < 1e-12, (s, med)
assert abs(s["paired_fraction_min"] - kept[0]) < 1e-12 and abs(s["paired_fraction_max"] - kept[-1]) < 1e-12, s
PY
# ... and beyond what a summary takes: refused, not cut
"$G" bench pool "$T/m1.json" "$T/m2.json" "$T/m3.json" > "$T/out.txt" 2>&1 && fail "1,100 runs accepted"
grep -q "m3.json: 4 sessions: 1100 runs pooled, a summary takes at most 1024" "$T/out.txt" ||
    { cat "$T/out.txt"; fail "1,100 runs: the message"; }

# mixed commits: refused, naming both; accepted with --any-commit, said so
"$G" bench pool "$T/a.json" "$T/c.json" > "$T/out.txt" 2>&1 && fail "mixed commits accepted"
grep -q "different commits: abc123 (.*a.json), def456 (.*c.json)" "$T/out.txt" ||
    { cat "$T/out.txt"; fail "mixed commits: the message"; }
"$G" bench pool --any-commit "$T/a.json" "$T/c.json" > "$T/out.txt" 2>&1 || fail "--any-commit"
grep -q "DIFFERENT commits" "$T/out.txt" || fail "--any-commit: not said"
awk '$1 == 8 && $2 == 3 && $3 == 2 { ok = 1 } END { exit !ok }' "$T/out.txt" || fail "--any-commit: the pool"

# refusals: other settings, no paired runs, another document, bad JSON, a missing file, usage
refuse() {
    want=$1
    shift
    "$G" bench pool "$@" > "$T/out.txt" 2>&1
    rc=$?
    [ "$rc" != 0 ] || fail "accepted: $*"
    grep -q -- "$want" "$T/out.txt" || { cat "$T/out.txt"; fail "$*: no '$want'"; }
}
refuse 'differ in "gen"' "$T/a.json" "$T/gen.json"
refuse "fixed.json: no paired runs: its flanks were not probed" "$T/fixed.json"
refuse "norun.json: 8 sessions: no paired runs" "$T/norun.json"
refuse 'badrun.json: 8 sessions: paired_runs\[0\]: no number "probe_before_gbps"' "$T/badrun.json"
refuse "run.json: not a guild bench sessions --json document" "$T/run.json"
refuse "bad.json: " "$T/bad.json"
refuse "$T/nothere.json" "$T/nothere.json"
refuse "no files" --target 90
refuse "--target 0" --target 0 "$T/a.json"
"$G" bench pool --help | grep -q -- "--any-commit" || fail "--help"
echo "PASS"
