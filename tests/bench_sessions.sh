#!/bin/sh
# guild bench sessions end to end on a tiny model, cpu backend in one process and on the multi-process pipeline:
# a line per session count with a positive rate, distinct experts that grow with the sessions and never pass the
# model's experts, the limit and the JSON; on the pipeline, a step of more sessions than the default 8 logits rows
# a request is still one step request (requests_per_step 1: rows cut into several requests would each read the
# step's experts again); the DRAM probes around each size's runs and the repeated runs (medians, the strict limit
# at the highest probe); each run between two flanks of probes and its paired fractions (bench/paired.h's
# arithmetic is tests/check_paired's: here, that the bench feeds it the probes and runs it measured), and guild bench
# pool of the call's file giving the same summary; usage errors.
set -u
B=${GUILD_BUILDDIR:-.}
if [ ! -x "$B/guild" ] || [ ! -x "$B/tools/guild-mkmodel" ]; then
    echo "SKIP: guild or guild-mkmodel is not built"
    exit 77
fi
T=$(mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT INT TERM
fail() {
    echo "FAIL: $*"
    exit 1
}
"$B/tools/guild-mkmodel" --arch qwen3moe --layers 2 --embd 128 --heads 2 --kv-heads 1 --head-dim 64 --experts 16 \
    --experts-used 4 --expert-ff 128 --ctx 512 --vocab 796 --type Q8_0 --seed 5 -q -o "$T/m.gguf" || fail "guild-mkmodel"
for mode in --single-process "--cpu-workers 1"; do
    # shellcheck disable=SC2086
    timeout 120 "$B/guild" bench sessions -m "$T/m.gguf" --backend cpu $mode --threads 2 --sessions 1,4,12 \
        --prompt 12 --gen 4 --dram-gbs 10 --json "$T/s.json" > "$T/out.txt" 2> "$T/err.txt" ||
        { cat "$T/err.txt"; fail "guild bench sessions $mode"; }
    cat "$T/out.txt"
    # sessions, tok/s, distinct "cpu+gpu" (the table above the strict one): 1 session touches at most top-k per
    # layer, 12 at least that
    awk '/^# (paired|strict)/ { done = 1 }
         !done && /^ *[0-9]+ / { n[$1] = 1; if ($2 <= 0) bad = "rate " $2; split($7, d, "+");
                        if (d[1] + d[2] > 16) bad = "distinct " $7;
                        if ($1 == 1 && d[1] + d[2] > 4.001) bad = "one session touches " $7;
                        if ($1 == 12 && d[1] + d[2] < 4) bad = "twelve sessions touch " $7 }
         END { if (!(1 in n) || !(4 in n) || !(12 in n)) bad = bad " missing sizes"; if (bad != "") { print bad; exit 1 } }' \
        "$T/out.txt" || fail "guild bench sessions $mode: the table"
    grep -q '"fraction_of_limit"' "$T/s.json" && grep -q '"distinct_cpu_experts_per_layer"' "$T/s.json" ||
        fail "guild bench sessions $mode: the JSON"
    if [ "$mode" != --single-process ]; then
        r=$(grep -c '"requests_per_step": 1\.0,' "$T/s.json")
        [ "$r" = 3 ] || fail "guild bench sessions $mode: requests a step: $(grep requests_per_step "$T/s.json")"
        # the prefetch hint (default --prefetch-experts 4) of a few sessions' steps and of 12 sessions' batched
        # step (ipc/exchange_layout.h's two rules): the bytes its hits read before the wait, left out of the
        # wait's rate, never more than the step's expert bytes. A worker whose exchange is published before it
        # gets to the hint prefetches nothing (cpu_worker.c: too late), which a loaded 2-core machine can make
        # true of a whole run (CI saw it once of 12 sessions' 3 runs): some run of each rule must have read early
        python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); z = {s["sessions"]: s for s in d["sizes"]}
for n in 4, 12:
    r = z[n]["paired_runs"]
    assert any(p["prefetched_bytes_before_wait"] > 0 for p in r), r
    assert all(0 <= p["prefetched_bytes_before_wait"] <= z[n]["cpu_expert_bytes_per_step"] for p in r), r' \
            "$T/s.json" || fail "guild bench sessions $mode: the bytes prefetched before the waits"
        # ... and none with the prefetch off
        timeout 120 "$B/guild" bench sessions -m "$T/m.gguf" --backend cpu $mode --threads 2 --sessions 1,4 \
            --prompt 12 --gen 2 --repeat 1 --dram-gbs 10 --prefetch-experts 0 --json "$T/n.json" > "$T/out.txt" \
            2> "$T/err.txt" || { cat "$T/err.txt"; fail "guild bench sessions $mode --prefetch-experts 0"; }
        python3 -c 'import json, sys; d = json.load(open(sys.argv[1]))
assert all(p["prefetched_bytes_before_wait"] == 0 for s in d["sizes"] for p in s["paired_runs"]), d["sizes"]' \
            "$T/n.json" || fail "guild bench sessions $mode --prefetch-experts 0: bytes prefetched"
    fi
done
# the DRAM probes around each size's runs (small passes: this is about the bookkeeping, not the rate) and the
# repeated runs: every size has its probes and runs in the JSON, the strict limit (the run's highest probe) is
# never looser than a size's own (its probes' median), the median run lies within the runs' spread; paired: 2
# probes at each of the 4 flanks (probe, run, probe, run, probe, run, probe), each run's flanks the medians of the
# probes before and after it, its fractions the limit at their mean, higher and lower over its step, the phase
# changes those beyond --flank-tol, the runs whose wait read faster than both flanks apart, the size's medians over
# the other runs; the tables and the per-run lines
timeout 120 "$B/guild" bench sessions -m "$T/m.gguf" --backend cpu --single-process --threads 2 --sessions 1,3 \
    --prompt 8 --gen 3 --repeat 3 --probes 2 --probe-gb 0.02 --flank-tol 4 --target 80 --json "$T/p.json" \
    > "$T/out.txt" 2> "$T/err.txt" ||
    { cat "$T/err.txt"; fail "guild bench sessions --probes"; }
cat "$T/out.txt"
grep -q "^# strict: the limit at the run's highest DRAM probe" "$T/out.txt" || fail "--probes: no strict table"
grep -q "^# paired: each run against the limit at the DRAM probes right before and right after it" "$T/out.txt" ||
    fail "--probes: no paired table"
[ "$(grep -c '^#  run [1-3]: probe [0-9.]* | [0-9.]* ms, wait ' "$T/out.txt")" = 6 ] || fail "--probes: the run lines"
grep -Eq "^# paired: [0-9]+ of 6 runs had flanking probes more than 4% apart .*; [0-9]+ more read faster" \
    "$T/out.txt" ||
    fail "--probes: no phase-change count"
awk '/^# paired: each/ { on = 1; next } /^# paired:/ { on = 0 } on && /^ *[0-9]+ / { n++;
         if ($NF != "met" && $NF != "missed" && $NF != "undecided" && $0 !~ /no stable run$/) bad = $0 }
     END { if (n != 2 || bad != "") { print "paired rows " n ": " bad; exit 1 } }' "$T/out.txt" ||
    fail "--probes: the paired table's rows"
python3 - "$T/p.json" << 'EOF' || fail "--probes: the JSON"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["repeat"] == 3 and d["probes_each_side"] == 2 and d["probe_bytes"] > 0, d
strict = d["dram_strict_gbps"]
assert strict >= d["dram_read_gbps"] > 0, (strict, d["dram_read_gbps"])
assert d["flank_tolerance"] == 0.04 and d["target_fraction"] == 0.8, d
assert d["probe_layout"].startswith("paired"), d["probe_layout"]
def median(v):
    v = sorted(v)
    return v[len(v) // 2] if len(v) % 2 else 0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2])
phase_all = outran_all = 0
for s in d["sizes"]:
    p, runs = s["dram_probes_gbps"], s["step_runs_s"]
    assert len(p) == 8 and min(p) > 0 and max(p) <= strict, (p, strict)
    assert abs(s["dram_gbps"] - median(p)) < 1e-9, (p, s["dram_gbps"])
    fl, pr = s["dram_flanks_gbps"], s["paired_runs"]
    assert fl == [median(p[2 * k:2 * k + 2]) for k in range(4)], (fl, p)
    assert len(pr) == 3, pr
    # the limit's step at a rate: its part no rate changes, as the own limit (at the size's median) splits it
    fixed = s["dense_step_s"] + s["gpu_extra_expert_s"]
    at = lambda r, step: (fixed + s["cpu_expert_bytes_per_step"] / (r * 1e9)) / step
    assert abs(at(s["dram_gbps"], s["step_s"]) - s["fraction_of_limit"]) < 1e-9, s
    stable = []
    for k, q in enumerate(pr):
        a, b = fl[k], fl[k + 1]
        assert q["probe_before_gbps"] == a and q["probe_after_gbps"] == b, (q, fl)
        assert q["step_s"] == runs[k], (q, runs)
        assert abs(q["fraction_of_limit"] - at((a + b) / 2, runs[k])) < 1e-9, q
        assert abs(q["fraction_at_higher_probe"] - at(max(a, b), runs[k])) < 1e-9, q
        assert abs(q["fraction_at_lower_probe"] - at(min(a, b), runs[k])) < 1e-9, q
        assert q["fraction_at_higher_probe"] <= q["fraction_of_limit"] <= q["fraction_at_lower_probe"], q
        assert q["phase_change"] == (max(a, b) > min(a, b) * (1 + d["flank_tolerance"])), (q, a, b)
        assert q["expert_wait_s"] > 0 and abs(q["wait_read_gbps"] * q["expert_wait_s"] * 1e9 -
                                             s["cpu_expert_bytes_per_step"]) < 1e-3, q
        assert q["reads_outran_probes"] == (q["wait_read_gbps"] > max(a, b)), q
        if not q["phase_change"] and not q["reads_outran_probes"]:
            stable.append(q)
    phase = sum(q["phase_change"] for q in pr)
    outran = sum(q["reads_outran_probes"] and not q["phase_change"] for q in pr)
    phase_all += phase
    outran_all += outran
    assert s["paired_stable_runs"] == len(stable) == 3 - phase - outran, s
    assert s["paired_phase_change_runs"] == phase and s["paired_outran_runs"] == outran, s
    if stable:
        f = [q["fraction_of_limit"] for q in stable]
        hi = median([q["fraction_at_higher_probe"] for q in stable])
        lo = median([q["fraction_at_lower_probe"] for q in stable])
        assert abs(s["paired_fraction_median"] - median(f)) < 1e-12, s
        assert s["paired_fraction_min"] == min(f) and s["paired_fraction_max"] == max(f), s
        assert abs(s["paired_fraction_at_higher_median"] - hi) < 1e-12, s
        assert abs(s["paired_fraction_at_lower_median"] - lo) < 1e-12, s
        assert s["paired_target"] == ("met" if hi >= 0.8 else "missed" if lo < 0.8 else "undecided"), s
        w = median([q["wait_read_gbps"] / ((q["probe_before_gbps"] + q["probe_after_gbps"]) / 2) for q in stable])
        assert abs(s["paired_wait_over_probe"] - w) < 1e-9, s
    else:
        assert s["paired_target"] == "no stable run", s
    assert len(runs) == 3 and s["step_min_s"] == min(runs) and s["step_max_s"] == max(runs), runs
    assert s["step_min_s"] <= s["step_s"] <= s["step_max_s"], s
    assert abs(s["step_outside_wait_s"] - (s["step_s"] - s["expert_wait_s"])) < 1e-9, s
    assert 0 < s["strict_fraction_of_limit"] <= s["fraction_of_limit"] + 1e-12, s
    assert s["strict_limit_tok_s"] >= s["limit_tok_s"] - 1e-9, s
assert d["paired_runs_total"] == 6 and d["paired_runs_phase_change_total"] == phase_all, d
assert d["paired_runs_outran_total"] == outran_all, d
EOF
# on the pipeline the probe reads as the CPU worker does: its thread count and CPUs, shared memory, pieces; the
# header names them, the JSON has them and the rate the waits reached
timeout 120 "$B/guild" bench sessions -m "$T/m.gguf" --backend cpu --cpu-workers 1 --threads 2 --sessions 1,3 \
    --prompt 8 --gen 3 --repeat 1 --probes 1 --probe-gb 0.02 --json "$T/w.json" > "$T/out.txt" 2> "$T/err.txt" ||
    { cat "$T/err.txt"; fail "guild bench sessions --probes on the pipeline"; }
cat "$T/out.txt"
grep -q "^# DRAM probe: as the CPU workers read: 2 threads on CPUs [0-9]" "$T/out.txt" ||
    fail "pipeline probe: no '# DRAM probe' line naming the worker's 2 threads"
python3 - "$T/w.json" << 'EOF2' || fail "pipeline probe: the JSON"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["probe_threads"] == 2 and d["probe_pages"] in ("thp", "4k"), d
assert d["dram_probe"].startswith("as the CPU workers read: 2 threads"), d["dram_probe"]
# pieces lose at most 256 bytes a thread and piece to rounding, and a piece more at a slice's end
assert 0.9 * 0.02e9 <= d["probe_bytes"] <= 0.02e9, d["probe_bytes"]
assert d["dram_every_cpu_streaming_gbps"] > 0, d
for s in d["sizes"]:
    assert len(s["dram_probes_gbps"]) == 2 and min(s["dram_probes_gbps"]) > 0, s
    assert s["wait_read_gbps"] > 0 and s["gpu_extra_expert_s"] == 0, s
    assert abs(s["wait_read_gbps"] - s["cpu_expert_bytes_per_step"] / s["expert_wait_s"] / 1e9) < 1e-6, s
    assert abs(s["wait_fraction_of_strict"] - s["wait_read_gbps"] / d["dram_strict_gbps"]) < 1e-9, s
    assert abs(s["outside_beyond_limit_s"] - (s["step_outside_wait_s"] - s["dense_step_s"])) < 1e-9, s
EOF2
# experts larger than a thread's slice of a small probe: the pieces are cut to the slice, not refused
"$B/tools/guild-mkmodel" --arch qwen3moe --layers 2 --embd 256 --heads 2 --kv-heads 1 --head-dim 64 --experts 8 \
    --experts-used 2 --expert-ff 4096 --ctx 512 --vocab 796 --type Q8_0 --seed 5 -q -o "$T/big.gguf" ||
    fail "guild-mkmodel (big experts)"
timeout 120 "$B/guild" bench sessions -m "$T/big.gguf" --backend cpu --cpu-workers 1 --threads 2 --sessions 1 \
    --prompt 8 --gen 2 --repeat 1 --probes 1 --probe-gb 0.001 > "$T/out.txt" 2> "$T/err.txt" ||
    { cat "$T/err.txt"; fail "guild bench sessions: experts larger than a probe's slice"; }
grep -q "^# DRAM probe: .*(a thread's slice: --probe-gb is small)" "$T/out.txt" ||
    fail "a small probe: $(grep '^# DRAM probe' "$T/out.txt")"
# a fixed rate: no probes, the strict limit is the own one
grep -q '"dram_probes_gbps": \[\]' "$T/s.json" || fail "--dram-gbs: probes in the JSON"
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["dram_strict_gbps"] == 10 and all(
    s["strict_fraction_of_limit"] == s["fraction_of_limit"] for s in d["sizes"]), d' "$T/s.json" ||
    fail "--dram-gbs: the strict limit"
# and every flank is that rate: no phase change (a run whose wait beat 10 GB/s is left out), each run's three
# fractions one
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["paired_runs_phase_change_total"] == 0 and all(
    s["dram_flanks_gbps"] == [10] * 4 and s["paired_stable_runs"] + s["paired_outran_runs"] == 3 and all(
    q["reads_outran_probes"] == (q["wait_read_gbps"] > 10) and q["fraction_at_higher_probe"] ==
    q["fraction_of_limit"] == q["fraction_at_lower_probe"] for q in s["paired_runs"]) for s in d["sizes"]), d' \
    "$T/s.json" || fail "--dram-gbs: the paired runs"
# guild bench pool on the call's own file: a pool of one file says what the file says (every size's paired_*
# fields, by the same rule); the --dram-gbs call's file has no probed flanks and is refused
"$B/guild" bench pool --target 80 "$T/p.json" --json "$T/pool.json" > /dev/null 2> "$T/err.txt" ||
    fail "guild bench pool: $(cat "$T/err.txt")"
python3 -c 'import json, sys; d, p = (json.load(open(f)) for f in sys.argv[1:])
z = {s["sessions"]: s for s in p["sizes"]}
assert sorted(z) == sorted(s["sessions"] for s in d["sizes"]), z
for s in d["sizes"]:
    q = z[s["sessions"]]
    assert q["paired_runs"] == len(s["paired_runs"]), (s, q)
    assert all(q[k] == s[k] for k in s if k.startswith("paired_") and k != "paired_runs"), (s, q)' \
    "$T/p.json" "$T/pool.json" || fail "guild bench pool of the --probes call's file"
"$B/guild" bench pool "$T/s.json" > /dev/null 2> "$T/err.txt" && fail "guild bench pool took a --dram-gbs call"
grep -q "no paired runs" "$T/err.txt" || fail "guild bench pool of a --dram-gbs call: $(cat "$T/err.txt")"
for bad in "--repeat 0" "--repeat 16" "--probes 0" "--probes 9" "--probe-gb 0" "--dram-gbs -1" "--flank-tol 0" \
    "--target 0" "--target 101"; do
    # shellcheck disable=SC2086
    "$B/guild" bench sessions -m "$T/m.gguf" $bad > /dev/null 2> "$T/err.txt" && fail "$bad accepted"
    grep -q -- "${bad% *}" "$T/err.txt" || fail "$bad: $(cat "$T/err.txt")"
done
"$B/guild" bench sessions -m "$T/m.gguf" --sessions 0 > /dev/null 2> "$T/err.txt" && fail "--sessions 0 accepted"
grep -q "sessions" "$T/err.txt" || fail "--sessions 0: $(cat "$T/err.txt")"
echo "PASS"
