#!/usr/bin/env python3
"""Cross-checks Guild's C quant references against the independent Python ones, on random blocks:

- dequantization of every computable type: the C float32 output must equal the float64 reference rounded to
  float32, bit for bit (ggml's dequantizers compute each value with at most one rounding, so they are exact);
- activation quantization to Q8_0 / Q8_1 / Q8_K: identical bytes (this is what the forward reference emulates);
- dot products of each type with its quantized activation: within 1e-5 of sum |w_i a_i| (float32 accumulation).

usage: check_quant.py QUANT_DUMP_BINARY [TYPE ...]
Prints one line per check; exits 1 when any check fails.
"""

import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from dequant_ref import (DOT_TYPE, block_mins, dequantize, quantize_bytes, quantize_q8_1,  # noqa: E402
                         type_id)
from gguf_ref import TYPES  # noqa: E402
from gguf_write_ref import random_blocks  # noqa: E402

GRID_TYPES = ["IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M"]
WEIGHT_TYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
                "Q6_K", "IQ4_NL", "IQ4_XS", "MXFP4"] + GRID_TYPES


def run(binary, *args):
    r = subprocess.run([binary] + [str(a) for a in args], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError("%s %s: exit %d: %s" % (binary, " ".join(map(str, args)), r.returncode, r.stderr.strip()))


def check_dequant(binary, tmp, name, rng):
    # Grid types get enough blocks that every grid entry is looked up (2048 entries, ~32k lookups).
    n = 256 * (1024 if name in GRID_TYPES else 16)
    # Half the blocks with sane scales, half with random finite fp16 scales of any exponent.
    raw = random_blocks(name, n // 2, rng, 10.0 if name == "F32" else 0.02)
    raw += random_blocks(name, n // 2, rng, 1e4 if name == "F32" else 0.02, wild=True)
    src = os.path.join(tmp, "blk.bin")
    out = os.path.join(tmp, "deq.f32")
    with open(src, "wb") as f:
        f.write(raw)
    run(binary, "dequant", name.lower(), src, n, out)
    c = np.fromfile(out, dtype="<f4")
    with np.errstate(over="ignore"):
        p = dequantize(type_id(name), np.frombuffer(raw, dtype=np.uint8), n).astype(np.float32)
    # +0 and -0 are the same value (a zero quant times a negative scale); anything else must match in every bit.
    bad = np.flatnonzero((c.view(np.uint32) != p.view(np.uint32)) & ~((c == 0) & (p == 0)))
    if bad.size:
        i = bad[0]
        return False, "%d of %d values differ; first at %d: C %r, reference %r" % (bad.size, n, i, c[i], p[i])
    return True, "%d values bit-identical (|v| up to %.3g)" % (n, np.abs(p[np.isfinite(p)]).max())


def activation_cases(rng, block):
    """Rows that exercise the rounding rules: random, a zero block, exact .5 ties, max-|x| of both signs."""
    rows = [rng.standard_normal(block * 8).astype(np.float32),
            (rng.standard_normal(block * 8) * 1e-3).astype(np.float32)]
    ties = np.zeros(block, dtype=np.float32)
    ties[0] = 127.0
    ties[1:8] = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5]
    sym = rng.standard_normal(block).astype(np.float32)
    sym[3], sym[7] = -9.0, 9.0
    rows.append(np.concatenate([ties, np.zeros(block, np.float32), sym, -ties]))
    return rows


def check_quantize(binary, tmp, name, rng):
    block = TYPES[type_id(name)][1]
    src = os.path.join(tmp, "act.f32")
    out = os.path.join(tmp, "act.bin")
    for x in activation_cases(rng, block):
        x.astype("<f4").tofile(src)
        run(binary, "quantize", name.lower(), src, x.size, out)
        c = np.fromfile(out, dtype=np.uint8)
        p = np.frombuffer(quantize_bytes(name, x), dtype=np.uint8)
        if c.size != p.size or np.any(c != p):
            bad = np.flatnonzero(c != p)
            bb = TYPES[type_id(name)][2]
            return False, "bytes differ (%d bytes; first at block %d byte %d)" % (bad.size, bad[0] // bb, bad[0] % bb)
    return True, "identical bytes on %d rows incl. ties, zero blocks, +-max" % len(activation_cases(rng, block))


def check_dot(binary, tmp, name, rng):
    dot = DOT_TYPE[name] or "F32"
    n, rows = 512, 8
    raw = random_blocks(name, n * rows, rng)
    x = rng.standard_normal(n).astype(np.float32)
    wf = os.path.join(tmp, "w.bin")
    af = os.path.join(tmp, "a.bin")
    out = os.path.join(tmp, "dot.f32")
    with open(wf, "wb") as f:
        f.write(raw)
    if dot == "F32":
        x.astype("<f4").tofile(af)
        a = x.astype(np.float64)
        s = None
    else:
        x.astype("<f4").tofile(os.path.join(tmp, "x.f32"))
        run(binary, "quantize", dot.lower(), os.path.join(tmp, "x.f32"), n, af)
        a = dequantize(type_id(dot), np.fromfile(af, dtype=np.uint8), n)
        s = quantize_q8_1(x)[2].reshape(-1) if dot == "Q8_1" else None
    run(binary, "dot", name.lower(), wf, af, n, rows, out)
    c = np.fromfile(out, dtype="<f4").astype(np.float64)
    W = dequantize(type_id(name), np.frombuffer(raw, dtype=np.uint8), n * rows).reshape(rows, n)
    if s is not None:
        # ggml: d_w*d_a*sum(q_w*q_a) + m_w * s_a, with s_a the activation block's fp16 d_a * sum(q_a)
        M = block_mins(type_id(name), np.frombuffer(raw, dtype=np.uint8), n * rows).reshape(rows, n // 32)
        p = (W - np.repeat(M, 32, axis=1)) @ a + M @ s
    else:
        p = W @ a
    scale = np.abs(W) @ np.abs(a)
    err = np.abs(c - p) / np.maximum(scale, 1e-30)
    if err.max() > 1e-5:
        return False, "relative error %.3g > 1e-5 (C %r, reference %r)" % (err.max(), c[err.argmax()], p[err.argmax()])
    return True, "%d rows x %d, max error %.2g of sum|w*a|" % (rows, n, err.max())


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    binary = argv[1]
    only = [t.upper() for t in argv[2:]]
    rng = np.random.default_rng(20240601)
    have_grids = os.path.exists(os.path.join(os.path.dirname(os.path.abspath(__file__)), "iq_grids.py"))
    failures = passes = skips = 0
    with tempfile.TemporaryDirectory() as tmp:
        checks = [("dequant", t, check_dequant) for t in WEIGHT_TYPES]
        checks += [("quantize", t, check_quantize) for t in ("Q8_0", "Q8_1", "Q8_K")]
        checks += [("dot", t, check_dot) for t in WEIGHT_TYPES]
        for what, t, fn in checks:
            if only and t not in only:
                continue
            if t in GRID_TYPES and not have_grids:
                print("SKIP %-8s %-7s no IQ grid tables in the reference yet" % (what, t))
                skips += 1
                continue
            try:
                ok, msg = fn(binary, tmp, t, rng)
            except RuntimeError as e:
                ok, msg = False, str(e)
            print("%s %-8s %-7s %s" % ("ok  " if ok else "FAIL", what, t, msg))
            passes += ok
            failures += not ok
    print("%d passed, %d failed, %d skipped" % (passes, failures, skips))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
