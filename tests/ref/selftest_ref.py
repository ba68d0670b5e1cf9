#!/usr/bin/env python3
"""Self-tests of the float64 reference that need no Guild binary: GGUF round trip of every metadata type
(nested arrays included), IQ grid entries against values printed in ggml-common.h, the activation quantizers'
rounding rules, and forward-pass invariants on models written by make_model_ref.py.
Prints 'N passed, N failed' and exits 1 on any failure."""

import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import forward_ref  # noqa: E402
import make_model_ref  # noqa: E402
from dequant_ref import dequantize, quantize_q8_0, quantize_q8_1, quantize_q8_k, type_id  # noqa: E402
from gguf_ref import (ARRAY, BOOL, FLOAT32, FLOAT64, INT8, INT16, INT32, INT64, STRING, UINT8, UINT16,  # noqa: E402
                      UINT32, UINT64, GGUFError, GGUFFile)
from gguf_write_ref import random_blocks, write_gguf  # noqa: E402
from iq_grids import grid_word  # noqa: E402

RESULTS = []


def check(name, cond, detail=""):
    RESULTS.append(bool(cond))
    print("%s %s%s" % ("ok  " if cond else "FAIL", name, (": " + detail) if detail else ""))


def test_gguf_roundtrip(tmp):
    kvs = [
        ("u8", UINT8, 200), ("i8", INT8, -5), ("u16", UINT16, 65000), ("i16", INT16, -30000),
        ("u32", UINT32, 4000000000), ("i32", INT32, -2000000000), ("f32", FLOAT32, 1.5),
        ("b", BOOL, True), ("s", STRING, "héllo"), ("u64", UINT64, 2 ** 63 + 5), ("i64", INT64, -2 ** 62),
        ("f64", FLOAT64, 0.1), ("arr_i32", ARRAY, (INT32, [1, -2, 3])),
        ("arr_str", ARRAY, (STRING, ["a", "", "ccc"])),
        ("nested", ARRAY, (ARRAY, [(INT16, [1, 2]), (STRING, ["x"]), (ARRAY, [(FLOAT64, [2.5])])])),
        ("general.alignment", UINT32, 64),
    ]
    rng = np.random.default_rng(3)
    raw_q = random_blocks("Q4_K", 512, rng)
    raw_f = np.arange(6, dtype="<f4").tobytes()
    path = os.path.join(tmp, "rt.gguf")
    write_gguf(path, kvs, [("a", type_id("Q4_K"), (256, 2), raw_q), ("b", 0, (3, 2), raw_f)], alignment=64)
    g = GGUFFile(path)
    ok = (g.kv["u8"] == 200 and g.kv["i8"] == -5 and g.kv["u16"] == 65000 and g.kv["i16"] == -30000 and
          g.kv["u32"] == 4000000000 and g.kv["i32"] == -2000000000 and g.kv["f32"] == 1.5 and g.kv["b"] is True
          and g.kv["s"] == "héllo" and g.kv["u64"] == 2 ** 63 + 5 and g.kv["i64"] == -2 ** 62
          and g.kv["f64"] == 0.1 and list(g.kv["arr_i32"]) == [1, -2, 3] and g.kv["arr_str"] == ["a", "", "ccc"])
    n = g.kv["nested"]
    ok = ok and list(n[0]) == [1, 2] and n[1] == ["x"] and list(n[2][0]) == [2.5]
    check("gguf: every metadata type round-trips (nested arrays too)", ok)
    a, b = g.tensor("a"), g.tensor("b")
    check("gguf: tensor infos, alignment and data", g.alignment == 64 and a.ne == (256, 2) and b.ne == (3, 2)
          and a.offset % 64 == 0 and bytes(a.data) == raw_q and
          list(dequantize(0, b.data, 6)) == [0, 1, 2, 3, 4, 5])
    with open(path, "rb") as f:
        data = f.read()
    bad = os.path.join(tmp, "bad.gguf")
    errors = 0
    for cut in (3, 20, len(data) // 3, len(data) - 50):   # the last cut lands in tensor b
        with open(bad, "wb") as f:
            f.write(data[:cut])
        try:
            GGUFFile(bad)
        except GGUFError:
            errors += 1
    check("gguf: truncated files are rejected with GGUFError", errors == 4, "%d of 4" % errors)


def test_grids():
    # Entries as printed in ggml-common.h (iq2xxs_grid, iq2xs_grid, iq2s_grid, iq1s_grid, iq3xxs_grid, iq3s_grid).
    expect = [
        ("iq2xxs", 0, 0x0808080808080808), ("iq2xxs", 1, 0x080808080808082b), ("iq2xxs", 2, 0x0808080808081919),
        ("iq2xxs", 7, 0x08080808082b0808), ("iq2xxs", 132, 0x1908080808080819), ("iq2xxs", 255, 0x2b2b2b1908081908),
        ("iq2xs", 7, 0x080808080819192b), ("iq2xs", 8, 0x0808080808192b19),
        ("iq2s", 1020, 0x2b2b2b2b082b082b), ("iq2s", 1021, 0x2b2b2b2b082b2b08), ("iq2s", 1022, 0x2b2b2b2b2b082b08),
        ("iq2s", 1023, 0x2b2b2b2b2b2b2b2b),
        ("iq1s", 0, 0xffffffffffffffff), ("iq1s", 1, 0xffffffffffffff01), ("iq1s", 2, 0xffffffffffff0000),
        ("iq1s", 5, 0xffffffffff00ff00), ("iq1s", 7, 0xffffffffff01ffff),
        ("iq3xxs", 5, 0x04040c3e), ("iq3xxs", 255, 0x3e341c04), ("iq3s", 0, 0x01010101), ("iq3s", 511, 0x0f0f0101),
    ]
    bad = [(n, i) for n, i, v in expect if grid_word(n, i) != v]
    check("IQ grids: entries equal ggml-common.h's", not bad, "mismatch at %s" % bad if bad else "")


def test_quantizer_rules():
    x = np.zeros(256, np.float32)
    x[0], x[1], x[2], x[3] = 127.0, 0.5, 1.5, -2.5
    q0, d0 = quantize_q8_0(x[:32])
    check("Q8_0: roundf rounds .5 away from zero", list(q0[0, :4]) == [127, 1, 2, -3] and d0[0, 0] == 1.0)
    qk, dk = quantize_q8_k(x)
    # iscale = -127/127 = -1: nearest_int(-0.5) = 0, (-1.5) = -2, (2.5) = 2 (half to even), max -> -127
    check("Q8_K: sign of the max element, half-to-even rounding", list(qk[0, :4]) == [-127, 0, -2, 2]
          and dk[0, 0] == -1.0)
    y = np.zeros(256, np.float32)
    y[5], y[9] = -3.0, 3.0
    qk2, dk2 = quantize_q8_k(y)
    check("Q8_K: the first of equal |max| elements sets the sign", qk2[0, 5] == -127 and qk2[0, 9] == 127
          and dk2[0, 0] == np.float32(1) / np.float32(127 / 3.0))
    qz, dz = quantize_q8_k(np.zeros(256, np.float32))
    check("Q8_K: a zero block gives d = 0 and zero quants", dz[0, 0] == 0 and not qz.any())
    q1, d1, s1 = quantize_q8_1(x[:32])
    check("Q8_1: s = fp16(d * sum(q))", s1[0, 0] == np.float16(np.float32(127 + 1 + 2 - 3) * np.float32(1.0)))


def test_forward(tmp):
    for arch in ("qwen3moe", "qwen2moe", "mixtral", "olmoe"):
        path = os.path.join(tmp, arch + ".gguf")
        make_model_ref.main(["--arch", arch, "-o", path, "--seed", "5"])
        m = forward_ref.Model(path)
        rows, am, _ = forward_ref.generate(m, [3, 1, 4, 1, 5], 6)
        rows2, _, _ = forward_ref.generate(m, [3, 1, 4, 1, 5], 6, force_ids=am[:5])
        ok = np.isfinite(rows).all() and rows.shape == (6, m.n_vocab) and np.array_equal(rows, rows2)
        # Causality: the logits of a prefix do not depend on what follows it.
        m.reset()
        first = [m.step(t) for t in [3, 1, 4]]
        ok = ok and np.allclose(first[2], forward_ref.generate(m, [3, 1, 4], 1)[0][0], rtol=0, atol=0)
        used = {e for tok in m.routing for layer in tok for e in layer}
        check("forward %s: finite, greedy == teacher-forced on its own tokens, causal; %d experts used"
              % (arch, len(used)), ok and len(used) > 1)
    path = os.path.join(tmp, "tied.gguf")
    make_model_ref.main(["--arch", "qwen3moe", "-o", path, "--tied"])
    m = forward_ref.Model(path)
    check("forward: tied output uses token_embd", m.output is m.tok_embd)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        test_gguf_roundtrip(tmp)
        test_grids()
        test_quantizer_rules()
        test_forward(tmp)
    n_fail = RESULTS.count(False)
    print("%d passed, %d failed" % (RESULTS.count(True), n_fail))
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
