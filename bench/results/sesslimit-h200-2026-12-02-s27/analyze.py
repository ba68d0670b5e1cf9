#!/usr/bin/env python3
"""Fractions of the limit for every `guild bench sessions` JSON of one device call, at each run's own probes and at
the call's highest DRAM probe (the strict limit). Usage: analyze.py RUN.LOG JSON... (the log's `bw TAG: read ...`
lines are the probes taken around the runs of a build whose tool does not probe per size).
limit step = the run's dense step (its smallest size's step less its wait) + the CPU side's distinct expert bytes at
the rate; fraction = limit step / measured step."""
import json, re, sys, statistics

log = open(sys.argv[1]).read()
bw = {}
for tag, v in re.findall(r"^bw (\S+): read node=\S+ threads=\d+ median_GBps=([0-9.]+)", log, re.M):
    bw[tag] = float(v)
runs = []
for p in sys.argv[2:]:
    d = json.load(open(p))
    runs.append((p, d))
probes = list(bw.values())
for p, d in runs:
    probes.append(d["dram_read_gbps"])
    for s in d["sizes"]:
        probes += s.get("dram_probes_gbps", [])
strict = max(probes)
print(f"probes of the call: {len(probes)}, {min(probes):.1f} - {max(probes):.1f} GB/s, median "
      f"{statistics.median(probes):.1f}; strict rate {strict:.1f} GB/s")
base_bw = [v for k, v in bw.items() if k.startswith("base")]
for p, d in runs:
    per_size = "dram_probes_gbps" in d["sizes"][0]
    print(f"\n{p}: commit {d['provenance']['commit']}, gen {d['gen']} x {d.get('repeat', 1)} runs, start probe "
          f"{d['dram_read_gbps']:.1f}" + ("" if per_size else f", bw probes around it {base_bw}"))
    print("| sessions | tok/s | step ms [runs] | wait ms | outside ms | CPU GB | probes GB/s | own limit tok/s | own % | "
          "strict limit tok/s | strict % |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    dense = None
    for s in d["sizes"]:
        n, step, wait = s["sessions"], s["step_s"], s["expert_wait_s"]
        if dense is None:
            dense = max(step - wait, 0)
        own = s.get("dram_gbps") or (statistics.median(base_bw) if base_bw else d["dram_read_gbps"])
        pr = s.get("dram_probes_gbps") or base_bw or [d["dram_read_gbps"]]
        lim_own = dense + s["cpu_expert_bytes_per_step"] / (own * 1e9)
        lim_strict = dense + s["cpu_expert_bytes_per_step"] / (strict * 1e9)
        runs_ms = "/".join(f"{x * 1e3:.1f}" for x in s.get("step_runs_s", [step]))
        print(f"| {n} | {n / step:.1f} | {step * 1e3:.2f} [{runs_ms}] | {wait * 1e3:.2f} | {(step - wait) * 1e3:.2f} | "
              f"{s['cpu_expert_bytes_per_step'] / 1e9:.2f} | {min(pr):.1f}-{max(pr):.1f} | {n / lim_own:.1f} | "
              f"{100 * lim_own / step:.1f} | {n / lim_strict:.1f} | {100 * lim_strict / step:.1f} |")
