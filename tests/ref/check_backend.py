#!/usr/bin/env python3
"""Guild's CPU backend against the float64 reference on models written by the reference's own GGUF writer
(make_model_ref.py): every architecture with F32 weights, and every computable weight type (K, IQ grid, 32-block
types, MXFP4, F16/BF16) through the whole forward pass. Independent of guild-mkmodel and of the tokenizer; the
end-to-end comparison through `guild run` is tests/ref_compare.sh.

The reference decodes greedily; tests/ref/backend_logits runs Guild's backend teacher-forced on the same ids
(prompt as one prefill batch, then one token per step). Checked: every logit within tol * max(1, |ref|) and
Guild's argmax equal to the reference's or a near-tie.

usage: check_backend.py BACKEND_LOGITS_BINARY
"""

import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import forward_ref  # noqa: E402
import make_model_ref  # noqa: E402
from ref_compare import compare_case  # noqa: E402

PROMPT = [5, 17, 42, 99, 3, 250, 7, 8, 1, 64]
STEPS = 16
K_SHAPE = ["--embd", "256", "--expert-ff", "256", "--heads", "4", "--head-dim", "64", "--experts", "16",
           "--experts-used", "4", "--shared-ff", "256"]

CASES = [(a + "-f32", a, [], "f32") for a in ("qwen3moe", "qwen2moe", "mixtral", "olmoe", "gpt-oss", "glm4moe")]
CASES.append(("gpt-oss-mxfp4", "gpt-oss", ["--type", "Q8_0", "--expert-type", "MXFP4", "--output-type", "F32"],
              "quant"))
CASES.append(("glm4moe-groups-f32", "glm4moe", ["--layers", "3", "--qk-norm", "--groups", "4", "--groups-used", "2"],
              "f32"))
CASES.append(("glm4moe-q4_k", "glm4moe", ["--type", "Q4_K", "--output-type", "F32", "--ff", "256", "--groups", "4",
                                          "--groups-used", "2"] + K_SHAPE, "quant"))
# deepseek2: latent attention with a q LoRA (absorbed: attn_k_b/attn_v_b), groups, YaRN; V2-Lite's form (attn_q,
# softmax gating, one attn_kv_b as older files have it); K-quant and Q8_0 weights
CASES.append(("deepseek2-f32", "deepseek2", ["--layers", "3", "--yarn", "4", "--groups", "4", "--groups-used", "2"],
              "f32"))
CASES.append(("deepseek2-lite-kvb-f32", "deepseek2", ["--q-lora", "0", "--gating", "softmax", "--kv-b"], "f32"))
CASES.append(("deepseek2-v2-groups-f32", "deepseek2", ["--q-lora", "0", "--gating", "softmax", "--groups", "4",
                                                       "--groups-used", "2"], "f32"))
CASES.append(("deepseek2-q4_k", "deepseek2", ["--type", "Q4_K", "--output-type", "F32", "--ff", "256", "--kv-lora",
                                              "256", "--q-lora", "256", "--groups", "4", "--groups-used", "2"] +
              K_SHAPE, "quant"))
CASES.append(("deepseek2-q8_0", "deepseek2", ["--type", "Q8_0", "--output-type", "F32", "--ff", "256", "--kv-lora",
                                              "64", "--q-lora", "64"] + K_SHAPE, "quant"))
CASES.append(("qwen3moe-tied-f32", "qwen3moe", ["--tied"], "f32"))
CASES += [(a + "-" + t.lower(), a, ["--type", t, "--output-type", "F32"] + K_SHAPE, "quant") for a, t in [
    ("qwen3moe", "Q4_K"), ("qwen2moe", "Q6_K"), ("mixtral", "Q5_K"), ("olmoe", "Q3_K"), ("qwen3moe", "Q2_K"),
    ("qwen2moe", "IQ4_XS"), ("mixtral", "IQ2_XXS"), ("olmoe", "IQ2_XS"), ("qwen3moe", "IQ2_S"),
    ("qwen2moe", "IQ3_XXS"), ("mixtral", "IQ3_S"), ("olmoe", "IQ1_S"), ("qwen3moe", "IQ1_M")]]
# The hybrids (gated delta net + gated attention, 4 layers: gdn, gdn, attention, gdn) over 64 positions: a prompt of
# 40 prefilled in chunks of 16 (the recurrent state crosses two chunk boundaries), then 24 decoded one by one.
LONG = {}
for _a in ("qwen3next", "qwen35moe"):
    CASES.append((_a + "-f32", _a, ["--layers", "4"], "f32"))
    CASES.append((_a + "-q8_0", _a, ["--layers", "4", "--type", "Q8_0", "--output-type", "F32"], "quant"))
    LONG[_a + "-f32"] = LONG[_a + "-q8_0"] = ([(7 * i * i + 3 * i + 1) % 300 for i in range(40)], 16, 25)
CASES += [(a + "-" + t.lower(), a, ["--type", t, "--output-type", "F32"], "f32" if t in ("F16", "BF16") else "quant") for a, t in [
    ("qwen3moe", "Q8_0"), ("qwen2moe", "Q4_0"), ("mixtral", "Q4_1"), ("olmoe", "Q5_0"), ("qwen3moe", "Q5_1"),
    ("qwen2moe", "IQ4_NL"), ("mixtral", "MXFP4"), ("olmoe", "F16"), ("qwen2moe", "BF16")]]


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    binary = argv[1]
    fails = 0
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for name, arch, args, tclass in CASES:
            path = os.path.join(tmp, name + ".gguf")
            out = os.path.join(tmp, name + ".f32")
            make_model_ref.main(["--arch", arch, "--vocab", "300", "--seed", "11", "-o", path] + args)
            m = forward_ref.Model(path)
            prompt, chunk, steps = LONG.get(name, (PROMPT, len(PROMPT), STEPS))
            ref, greedy, _ = forward_ref.generate(m, prompt, steps)
            seq = prompt + greedy[:-1]
            r = subprocess.run([binary, path, out, "%d:%d" % (len(prompt), chunk)] + [str(t) for t in seq],
                               capture_output=True, text=True)
            if r.returncode:
                print("FAIL %-20s backend_logits exited %d: %s" % (name, r.returncode, r.stderr.strip()))
                fails += 1
                continue
            g = np.fromfile(out, dtype="<f4").reshape(-1, m.n_vocab)
            g_tokens = [int(np.argmax(row)) for row in g]
            # Every row is teacher-forced alike here: check the logits of all of them.
            ok, s = compare_case(tclass, ref, g, g_tokens, steps)
            ok = ok and len(g) == steps
            tol, note = s["tol"], s["note"]
            print("%s %-20s max|d| %.3g  max rel %.3g over %d steps (tol %.0e%s; |logit| <= %.3g), %d near-ties, "
                  "router margin >= %.2g" % ("ok  " if ok else "FAIL", name, s["max_abs"], s["max_rel"], len(g), tol,
                                              note, s["max_logit"], len(s["near_ties"]),
                                              m.min_router_margin))
            for i, t, best, gap in s["near_ties"] + s["token_fail"]:
                print("     step %d: guild %d, reference %d, reference gap %.3g" % (i, t, best, gap))
            fails += not ok
    print("%d passed, %d failed (%.1fs)" % (len(CASES) - fails, fails, time.time() - t0))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
