#!/usr/bin/env python3
"""The tables of sesslimit2-h200-2026-12-02-s28.md from the call's JSON files: per build and size, tok/s, step,
wait, outside the wait, the CPU side's bytes, the probes, the rate the waits reached, the limit's parts and the
fractions (own: the size's probes' median; strict: the run's highest probe; call: the highest probe read the CPU
workers' way in any of the files, the one rate every run is held to). A baseline file (an older build, no
gpu_expert_bytes_per_step, its probes every CPU streaming) gets the same limit recomputed from its distinct counts.
Usage: analyze.py sessions-new.json [sessions-base.json ...]"""
import json
import statistics
import sys

files = {p: json.load(open(p)) for p in sys.argv[1:]}
call = max((d["dram_strict_gbps"] for d in files.values()
            if d.get("dram_probe", "").startswith("as the CPU workers read")), default=0)
print(f"call rate (the highest worker-shaped probe of these files): {call:.1f} GB/s\n")
for path, d in files.items():
    print(f"### {path}: {d['provenance']['commit']}, probe: {d.get('dram_probe', 'every CPU streaming')}")
    print(f"start probe {d['dram_read_gbps']:.1f} GB/s, strict {d['dram_strict_gbps']:.1f} GB/s, "
          f"every CPU streaming {d.get('dram_every_cpu_streaming_gbps', d['dram_read_gbps']):.1f} GB/s, "
          f"device copy {d['device_copy_gbps']:.0f} GB/s\n")
    print("| sessions | tok/s | step ms [runs] | wait ms | out ms | CPU GB | probes GB/s | wait GB/s | "
          "dense + gpu extra ms | limit tok/s (own) | own % | strict % | call limit tok/s | call % | "
          "waits % of call | out beyond limit ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    s0 = d["sizes"][0]
    hbm = d["device_copy_gbps"]
    strict = d["dram_strict_gbps"]
    for s in d["sizes"]:
        n = s["sessions"]
        gx = s.get("gpu_extra_expert_s")
        if gx is None:  # the baseline's JSON: the GPU-resident distinct bytes from the counts
            eb = s["cpu_expert_bytes_per_step"] / max(s["distinct_cpu_experts_per_layer"], 1e-9)
            eb0 = s0["cpu_expert_bytes_per_step"] / max(s0["distinct_cpu_experts_per_layer"], 1e-9)
            g = s["distinct_gpu_experts_per_layer"] * eb
            g0 = s0["distinct_gpu_experts_per_layer"] * eb0
            gx = max(g - g0, 0) / (hbm * 1e9) if hbm > 0 else 0
        own = s["dense_step_s"] + gx + s["cpu_expert_bytes_per_step"] / (s["dram_gbps"] * 1e9)
        st = s["dense_step_s"] + gx + s["cpu_expert_bytes_per_step"] / (strict * 1e9)
        cl = s["dense_step_s"] + gx + s["cpu_expert_bytes_per_step"] / (call * 1e9) if call else 0
        p = s["dram_probes_gbps"]
        runs = "/".join(f"{x * 1e3:.1f}" for x in s["step_runs_s"])
        wg = s["cpu_expert_bytes_per_step"] / s["expert_wait_s"] / 1e9 if s["expert_wait_s"] > 0 else 0
        print(f"| {n} | {n / s['step_s']:.1f} | {s['step_s'] * 1e3:.2f} [{runs}] | {s['expert_wait_s'] * 1e3:.2f} | "
              f"{s['step_outside_wait_s'] * 1e3:.2f} | {s['cpu_expert_bytes_per_step'] / 1e9:.2f} | "
              f"{min(p) if p else 0:.0f}-{max(p) if p else 0:.0f} (med {s['dram_gbps']:.0f}) | {wg:.0f} | "
              f"{s['dense_step_s'] * 1e3:.2f} + {gx * 1e3:.2f} | {n / own:.1f} | {100 * own / s['step_s']:.1f} | "
              f"{100 * st / s['step_s']:.1f} | {n / cl if cl else 0:.1f} | {100 * cl / s['step_s']:.1f} | "
              f"{100 * wg / call if call else 0:.1f} | "
              f"{(s['step_outside_wait_s'] - s['dense_step_s'] - gx) * 1e3:.2f} |")
    print()
