#!/usr/bin/env python3
"""guild bench plot and guild bench run --svg (tests/bench_plot.sh runs it): the SVG is well-formed XML
(xml.etree), a self-contained SVG document (no scripts, nothing fetched), and holds every series: a prefill and a
decode line per run at the right contexts (in order, left to right, higher rates higher), the decode limit dashed,
a legend row per run; a context without a rate is named in a note, not drawn as zero; bad input fails with a
message.

usage: bench_plot.py BUILDDIR WORKDIR
"""
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

B, T = sys.argv[1], sys.argv[2]
GUILD = os.path.join(B, "guild")
SVG = "{http://www.w3.org/2000/svg}"
checks = 0


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def check(cond, msg):
    global checks
    checks += 1
    if not cond:
        fail(msg)


def run_doc(contexts, prefill, decode, limit, arch="qwen3moe", gpu="NVIDIA H200"):
    return {"provenance": {"gpu": gpu, "commit": "abc"}, "model": {"arch": arch},
            "results": [{"context": c, "prefill_tok_s": p, "decode_tok_s": d, "decode_limit_tok_s": lim}
                        for c, p, d, lim in zip(contexts, prefill, decode, limit)]}


def write(name, doc):
    path = os.path.join(T, name)
    with open(path, "w") as f:
        json.dump(doc, f)
    return path


def plot(*args):
    return subprocess.run([GUILD, "bench", "plot", *args], capture_output=True, text=True, timeout=60)


def parse_svg(path):
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        fail("%s is not well-formed XML: %s" % (path, e))
    check(root.tag == SVG + "svg", "%s: the root is %s, not an SVG element" % (path, root.tag))
    for el in root.iter():
        check(el.tag.startswith(SVG), "%s: an element from another namespace: %s" % (path, el.tag))
        check(el.tag not in (SVG + "script", SVG + "image", SVG + "foreignObject", SVG + "style"),
              "%s: %s is not self-contained" % (path, el.tag))
        for k, v in el.attrib.items():
            check("href" not in k and "url(" not in v, "%s: a reference outside the document: %s=%s" % (path, k, v))
    return root


def polylines(root):
    """[(stroke colour, dashed, [(x, y)...])] in document order."""
    out = []
    for el in root.iter(SVG + "polyline"):
        pts = [tuple(map(float, p.split(","))) for p in el.get("points").split()]
        out.append((el.get("stroke"), el.get("stroke-dasharray") is not None, pts))
    return out


# ---- two runs, one with a context it could not run -------------------------------------------------------
ctx = [512, 4096, 16384, 65536]
a = write("allgpu.json", run_doc(ctx, [6533, 8614, 6774, 5000], [223.4, 209.3, 172.7, 120.0],
                                 [2134.2, 1810.8, 1191.8, 500.0]))
b = write("gpumem8g.json", run_doc(ctx, [885, 3037, 2958, 0], [67.0, 60.6, 60.5, 0], [114.5, 113.4, 109.8, 0]))
out = os.path.join(T, "two.svg")
r = plot(a, b, "-o", out, "--label", "all on the GPU <&>")
check(r.returncode == 0, "guild bench plot: %d: %s" % (r.returncode, r.stderr))
root = parse_svg(out)
check(root.get("viewBox") is not None and root.get("width") and root.get("height"), "no size or viewBox")
lines = polylines(root)
# per run: prefill (panel 1), then the decode limit (dashed) and decode (panel 2)
solid = [l for l in lines if not l[1]]
dashed = [l for l in lines if l[1]]
check(len(solid) == 4, "%d solid series, expected 4 (prefill and decode of two runs)" % len(solid))
check(len(dashed) == 2, "%d dashed limit lines, expected 2" % len(dashed))
colours = {l[0] for l in solid}
check(len(colours) == 2, "the two runs do not have two colours: %r" % colours)
for l in lines:
    xs = [p[0] for p in l[2]]
    check(xs == sorted(xs) and len(set(xs)) == len(xs), "a series is not drawn left to right: %r" % xs)
n_points = sorted(len(l[2]) for l in solid)
check(n_points == [3, 3, 4, 4], "points per series %r, expected the unsupported context left out" % n_points)
# equal spacing in log2(context): 512 -> 4096 is 3 doublings, 4096 -> 16384 is 2
xs = [p[0] for p in solid[0][2]]
check(abs((xs[1] - xs[0]) / (xs[2] - xs[1]) - 1.5) < 0.02, "the context axis is not log-2: %r" % xs)
# decode of run 1 is below its limit everywhere: a larger y in SVG coordinates
dec = [l for l in solid if l[0] == dashed[0][0]][1]
check(all(d[1] > lim[1] for d, lim in zip(dec[2], dashed[0][2])), "a decode point is above its limit line")
texts = ["".join(t.itertext()) for t in root.iter(SVG + "text")]
check("all on the GPU <&>" in texts, "the legend lacks the label given (escaped): %r" % texts[-4:])
check("gpumem8g" in texts, "the legend lacks the default label (the file name without .json)")
check(any("not drawn" in t and "gpumem8g at 65536" in t for t in texts), "no note for the unsupported context")
check(any(t == "4K" for t in texts) and any(t == "64K" for t in texts), "the context ticks 4K and 64K are missing")
check(any("qwen3moe on NVIDIA H200" in t for t in texts), "the default title names the model and the GPU")
titles = ["".join(t.itertext()) for t in root.iter(SVG + "title")]
check(any("context 16384, decode 172.7 tok/s" in t for t in titles), "the points' titles lack their values")

# ---- a point whose KV cache was in host RAM: a hollow marker, explained under the legend ---------------------
hdoc = run_doc([4096, 65536, 131072], [7000, 2000, 1100], [60.0, 32.0, 5.0], [110.0, 100.0, 20.0])
for x, kv in zip(hdoc["results"], ["gpu", "gpu", "host"]):
    x["kv_cache"] = kv
out_h = os.path.join(T, "host.svg")
r = plot(write("host.json", hdoc), "-o", out_h)
check(r.returncode == 0, "guild bench plot of a run with a host-RAM point: %s" % r.stderr)
root = parse_svg(out_h)
marks = [(c.get("fill"), "".join(c.itertext())) for c in root.iter(SVG + "circle")
         if "context" in "".join(c.itertext())]
hollow = [t for f, t in marks if f == "#ffffff"]
check(len(hollow) == 2 and all("context 131072" in t and "host RAM" in t for t in hollow),
      "the host-RAM point is not hollow in both panels: %r" % marks)
check(len(marks) == 6, "%d markers, expected 3 contexts x 2 panels" % len(marks))
texts = ["".join(t.itertext()) for t in root.iter(SVG + "text")]
check(any(t.startswith("hollow markers") for t in texts), "no note for the hollow markers")
root = parse_svg(out)
check(not any("hollow" in "".join(t.itertext()) for t in root.iter(SVG + "text")), "a hollow note without a host point")

# ---- two files given one label are one series: a format's GPU-memory stack and its host-RAM stack ---------
gdoc = run_doc([4096, 16384, 32768, 65536], [9000, 5000, 3500, 2000], [60.0, 50.0, 45.0, 30.0],
               [100.0, 98.0, 97.0, 95.0])
hdoc1 = run_doc([131072], [1100], [5.0], [7.0])
hdoc1["results"][0]["kv_cache"] = "host"
os.makedirs(os.path.join(T, "other"), exist_ok=True)
g_path, h_path = write("fmt-gpu.json", gdoc), write("fmt-host.json", hdoc1)
out_m = os.path.join(T, "merged.svg")
r = plot(g_path, h_path, a, "-l", "q8_0", "-l", "q8_0", "-o", out_m)
check(r.returncode == 0, "guild bench plot of two files of one label: %s" % r.stderr)
root = parse_svg(out_m)
lines = polylines(root)
solid = [l for l in lines if not l[1]]
check(len(solid) == 4, "%d solid series, expected 4 (one label's two files are one series, and allgpu)" % len(solid))
merged = [l for l in solid if len(l[2]) == 5]
check(len(merged) == 2 and merged[0][0] == merged[1][0], "the label's two files are not one series of 5 points: %r"
      % [(l[0], len(l[2])) for l in solid])
check(len({l[0] for l in solid}) == 2, "two series do not have two colours")
texts = ["".join(t.itertext()) for t in root.iter(SVG + "text")]
check(texts.count("q8_0") == 1 and "allgpu" in texts, "the legend has not one row per series: %r" % texts[-5:])
marks = [(c.get("fill"), "".join(c.itertext())) for c in root.iter(SVG + "circle")
         if "context 131072" in "".join(c.itertext())]
check(len(marks) == 2 and all(f == "#ffffff" for f, _ in marks), "the host file's point is not hollow: %r" % marks)
# the same context in two files of one label: which to draw is not known
r = plot(g_path, g_path, "-l", "q8_0", "-l", "q8_0", "-o", os.path.join(T, "dup.svg"))
check(r.returncode == 1 and "context 4096 is in two files" in r.stderr, "a context twice in a series: %d %s"
      % (r.returncode, r.stderr))
# default labels (the files' names) never merge: two files of one name in two folders are two series
same = write(os.path.join("other", "fmt-gpu.json"), gdoc)
r = plot(g_path, same, "-o", os.path.join(T, "samename.svg"))
check(r.returncode == 0, "two files of one name: %s" % r.stderr)
solid = [l for l in polylines(parse_svg(os.path.join(T, "samename.svg"))) if not l[1]]
check(len(solid) == 4, "two files of one name without -l are not two series: %d" % len(solid))

# ---- errors ----------------------------------------------------------------------------------------------
r = plot(a)
check(r.returncode == 2 and "no output" in r.stderr, "no -o: %d %s" % (r.returncode, r.stderr))
r = plot("-o", out)
check(r.returncode == 2 and "no results" in r.stderr, "no file: %d %s" % (r.returncode, r.stderr))
bad = write("bad.json", {"results": [{"prefill_tok_s": 1}]})
r = plot(bad, "-o", out)
check(r.returncode == 1 and "results[0]" in r.stderr and "context" in r.stderr, "no context: %s" % r.stderr)
notrun = write("other.json", {"hello": 1})
r = plot(notrun, "-o", out)
check(r.returncode == 1 and "no \"results\" array" in r.stderr, "not a bench run document: %s" % r.stderr)
with open(os.path.join(T, "broken.json"), "w") as f:
    f.write("{")
r = plot(os.path.join(T, "broken.json"), "-o", out)
check(r.returncode == 1 and "not JSON" in r.stderr, "broken JSON: %s" % r.stderr)
r = plot(a, "-o", os.path.join(T, "no", "such", "dir.svg"))
check(r.returncode == 1 and "cannot create" in r.stderr, "unwritable output: %s" % r.stderr)
r = plot(a, "-o", "-")
check(r.returncode == 0 and r.stdout.startswith("<?xml"), "-o - writes to stdout")

# ---- guild bench run --svg on a tiny model ------------------------------------------------------------
model = os.path.join(T, "m.gguf")
mk = subprocess.run([os.path.join(B, "tools", "guild-mkmodel"), "--arch", "qwen3moe", "--layers", "2", "--embd",
                     "64", "--heads", "2", "--kv-heads", "1", "--head-dim", "32", "--experts", "4",
                     "--experts-used", "2", "--expert-ff", "64", "--ctx", "256", "--vocab", "300", "--type",
                     "F32", "--seed", "3", "-q", "-o", model], capture_output=True)
check(mk.returncode == 0, "guild-mkmodel: " + mk.stderr.decode(errors="replace"))
js, svg = os.path.join(T, "run.json"), os.path.join(T, "run.svg")
r = subprocess.run([GUILD, "bench", "run", "-m", model, "--single-process", "--backend", "cpu", "--threads", "1",
                    "--populate", "16,64", "--gen", "4", "--runs", "1", "--dram-gbs", "10", "--json", js, "--svg",
                    svg], capture_output=True, text=True, timeout=120)
check(r.returncode == 0, "guild bench run --svg: %d: %s" % (r.returncode, r.stderr[-2000:]))
root = parse_svg(svg)
lines = polylines(root)
check(len([l for l in lines if not l[1]]) == 2 and len([l for l in lines if l[1]]) == 1,
      "bench run --svg: %d series, expected prefill, decode and the limit" % len(lines))
check(all(len(l[2]) == 2 for l in lines), "bench run --svg: not two contexts per series")
texts = ["".join(t.itertext()) for t in root.iter(SVG + "text")]
check("m.gguf" in texts, "bench run --svg: the legend names the model file")
# the same document through guild bench plot: the same drawing
out2 = os.path.join(T, "run2.svg")
r = plot(js, "-o", out2, "-l", "m.gguf")
check(r.returncode == 0, "guild bench plot of bench run's JSON: %s" % r.stderr)
check(open(out2).read() == open(svg).read(), "bench run --svg and bench plot of its JSON differ")

# a context the GPU plan cannot hold is reported with the plan's reason, never as a zero, and the others run (the
# cpu backend standing in for a device keeps its cache in GPU memory only)
js3, svg3 = os.path.join(T, "unsup.json"), os.path.join(T, "unsup.svg")
r = subprocess.run([GUILD, "bench", "run", "-m", model, "--single-process", "--backend", "cpu", "--threads", "1",
                    "--populate", "16,2000000,64", "--gen", "4", "--runs", "1", "--dram-gbs", "10", "--gpu-mem",
                    "700M", "--json", js3, "--svg", svg3], capture_output=True, text=True, timeout=120)
check(r.returncode == 0, "guild bench run with an unsupported context: %d: %s" % (r.returncode, r.stderr[-2000:]))
check(any(l.split()[:2] == ["2000000", "unsupported:"] and "does not fit" in l and "GPU memory only" in l
          for l in r.stdout.splitlines()), "no unsupported row with the reason: %s" % r.stdout)
doc = json.load(open(js3))
res = {x["context"]: x for x in doc["results"]}
check("does not fit" in res[2000000].get("unsupported", "") and "decode_tok_s" not in res[2000000],
      "the unsupported context's result: %r" % res[2000000])
check(all(res[c]["decode_tok_s"] > 0 and res[c]["kv_cache"] == "gpu" for c in (16, 64)),
      "the supported contexts did not run: %r" % doc["results"])
texts = ["".join(t.itertext()) for t in parse_svg(svg3).iter(SVG + "text")]
check(any("not drawn" in t and "2000000" in t for t in texts), "no note for the unsupported context: %r" % texts)

# --sweep: the contexts measured along one prompt in increasing order (listed out of order here), each
# context's prefill time the sum of its segments', so it grows with the context; the results keep the listed order
js4 = os.path.join(T, "sweep.json")
r = subprocess.run([GUILD, "bench", "run", "-m", model, "--single-process", "--backend", "cpu", "--threads", "1",
                    "--populate", "64,16,32", "--batch", "16", "--gen", "4", "--runs", "2", "--dram-gbs", "10",
                    "--sweep", "--json", js4], capture_output=True, text=True, timeout=120)
check(r.returncode == 0, "guild bench run --sweep: %d: %s" % (r.returncode, r.stderr[-2000:]))
doc = json.load(open(js4))
check(doc["config"].get("sweep") is True, "config.sweep: %r" % doc["config"].get("sweep"))
check([x["context"] for x in doc["results"]] == [64, 16, 32], "sweep results order: %r" % doc["results"])
res = {x["context"]: x for x in doc["results"]}
check(all(res[c]["decode_tok_s"] > 0 and len(res[c]["runs"]) == 2 for c in (16, 32, 64)),
      "sweep contexts did not all run: %r" % doc["results"])
for k in range(2):
    t = [res[c]["runs"][k]["prefill_s"] for c in (16, 32, 64)]
    check(t[0] < t[1] < t[2], "sweep run %d: prefill times not cumulative: %r" % (k, t))
order = [l.split()[1] for l in r.stderr.splitlines() if l.strip().startswith("context")]
check(order == ["16", "32", "64", "16", "32", "64"], "sweep: contexts not in increasing order per run: %r" % order)
# the warm-up fills at most 4,096 positions: a stack whose smallest context is long (a KV cache in host RAM from
# 131,072) does not fill it twice
r = subprocess.run([GUILD, "bench", "run", "-m", model, "--single-process", "--backend", "cpu", "--threads", "1",
                    "--populate", "4200", "--batch", "2048", "--gen", "2", "--runs", "1", "--dram-gbs", "10"],
                   capture_output=True, text=True, timeout=120)
check(r.returncode == 0, "guild bench run at 4,200: %d: %s" % (r.returncode, r.stderr[-2000:]))
check("warm-up (context 4096)" in r.stderr and "context   4200 run 0" in r.stderr,
      "the warm-up of a 4,200-token context is not 4,096 tokens: %s" % r.stderr[-2000:])
r = subprocess.run([GUILD, "bench", "run", "-m", model, "--sweep", "--spec", "ngram"], capture_output=True,
                   text=True, timeout=60)
check(r.returncode != 0 and "--sweep" in r.stderr, "--sweep with --spec: %d: %s" % (r.returncode, r.stderr))

print("bench_plot: %d checks passed" % checks)
