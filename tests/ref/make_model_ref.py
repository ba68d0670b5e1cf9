#!/usr/bin/env python3
"""Writes a small synthetic model of a Guild architecture with the reference's own GGUF writer, for the
reference's self-tests (independent of tools/guild-mkmodel). Weights are random; quantized tensors are random
well-formed blocks (not quantized from floats), so only their layout matters, not their quality.

make_model_ref.py --arch qwen3moe --type F32 -o M.gguf [--layers 2 --embd 64 --heads 4 --kv-heads 2
    --head-dim 16 --experts 8 --experts-used 2 --expert-ff 32 --shared-ff 64 --vocab 300 --seed 1 --tied]
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gguf_ref import ARRAY, BOOL, FLOAT32, INT32, STRING, TYPE_BY_NAME, TYPES, UINT32  # noqa: E402
from gguf_write_ref import random_blocks, write_gguf  # noqa: E402


def build(a):
    rng = np.random.default_rng(a.seed)
    arch = "llama" if a.arch == "mixtral" else a.arch
    tensors = []

    def add(name, ne, ttype, scale):
        n = int(np.prod(ne))
        be = TYPES[TYPE_BY_NAME[ttype]][1]
        if ne[0] % be:
            ttype = "F32"
        tensors.append((name, TYPE_BY_NAME[ttype], tuple(ne), random_blocks(ttype, n, rng, scale)))

    def norm(name, n):
        tensors.append((name, TYPE_BY_NAME["F32"], (n,), (1.0 + 0.1 * rng.standard_normal(n)).astype("<f4").tobytes()))

    def f32(name, ne, std):
        n = int(np.prod(ne))
        tensors.append((name, TYPE_BY_NAME["F32"], tuple(ne), (std * rng.standard_normal(n)).astype("<f4").tobytes()))

    E, H, KV, D = a.embd, a.heads, a.kv_heads, a.head_dim
    ws = 1.0 / np.sqrt(E)
    xt = a.expert_type or a.type
    add("token_embd.weight", (E, a.vocab), a.output_type or a.type, 1.0)
    norm("output_norm.weight", E)
    if not a.tied:
        add("output.weight", (E, a.vocab), a.output_type or a.type, ws)
    ds = arch == "deepseek2"
    glm = arch == "glm4moe" or ds
    sigmoid = glm and not (ds and a.gating == "softmax")
    # glm4moe and deepseek2 as llama.cpp's converters write them: the dense first layers, an MTP block after the
    # others (deepseek2's converter leaves it out; files with one load)
    n_dense = a.dense_layers if glm else 0
    n_blocks = a.layers + (a.nextn if glm else 0)
    hybrid = arch in ("qwen3next", "qwen35moe")
    # the gated delta net: 4 taps, 2 key heads and 4 value heads of 16 (a third of the layers: interval 3)
    DK, NK, NV, CONV = 16, 2, 4, 4
    IN, CH = NV * DK, 2 * NK * DK + NV * DK
    # deepseek2's latent attention: a key of D = nope + rope, values of VD, the latent R, the q LoRA RQ
    R, RQ = a.kv_lora, a.q_lora
    ROT = a.rope_dim or D // 2
    NOPE, VD = D - ROT, a.v_head_dim or D - ROT
    for i in range(n_blocks):
        p = "blk.%d." % i
        norm(p + "attn_norm.weight", E)
        if ds:
            if RQ:
                add(p + "attn_q_a.weight", (E, RQ), a.type, ws)
                norm(p + "attn_q_a_norm.weight", RQ)
                add(p + "attn_q_b.weight", (RQ, H * D), a.type, 1.0 / np.sqrt(RQ))
            else:
                add(p + "attn_q.weight", (E, H * D), a.type, ws)
            add(p + "attn_kv_a_mqa.weight", (E, R + ROT), a.type, ws)
            norm(p + "attn_kv_a_norm.weight", R)
            if a.kv_b:  # files converted before the k/v split
                add(p + "attn_kv_b.weight", (R, H * (NOPE + VD)), a.type, 1.0 / np.sqrt(R))
            else:
                add(p + "attn_k_b.weight", (NOPE, R, H), a.type, 1.0 / np.sqrt(R))
                add(p + "attn_v_b.weight", (R, VD, H), a.type, 1.0 / np.sqrt(R))
            add(p + "attn_output.weight", (H * VD, E), a.type, 1.0 / np.sqrt(H * VD))
        elif hybrid and (i + 1) % 3 != 0:
            add(p + "attn_qkv.weight", (E, CH), a.type, ws)
            add(p + "attn_gate.weight", (E, IN), a.type, ws)
            f32(p + "ssm_conv1d.weight", (CONV, CH), 0.3)
            f32(p + "ssm_dt.bias", (NV,), 1.0)
            tensors.append((p + "ssm_a", TYPE_BY_NAME["F32"], (NV,),
                            (-np.exp(0.5 * rng.standard_normal(NV))).astype("<f4").tobytes()))
            if arch == "qwen35moe":
                add(p + "ssm_beta.weight", (E, NV), a.type, ws)
                add(p + "ssm_alpha.weight", (E, NV), a.type, ws)
            else:
                add(p + "ssm_ba.weight", (E, 2 * NV), a.type, ws)
            norm(p + "ssm_norm.weight", DK)
            add(p + "ssm_out.weight", (IN, E), a.type, 1.0 / np.sqrt(IN))
        else:
            add(p + "attn_q.weight", (E, H * D * (2 if hybrid else 1)), a.type, ws)
            add(p + "attn_k.weight", (E, KV * D), a.type, ws)
            add(p + "attn_v.weight", (E, KV * D), a.type, ws)
            add(p + "attn_output.weight", (H * D, E), a.type, 1.0 / np.sqrt(H * D))
        if arch in ("qwen2moe", "gpt-oss", "glm4moe"):
            for nm, n in (("attn_q.bias", H * D), ("attn_k.bias", KV * D), ("attn_v.bias", KV * D)):
                tensors.append((p + nm, TYPE_BY_NAME["F32"], (n,), (0.1 * rng.standard_normal(n)).astype("<f4").tobytes()))
        if arch == "gpt-oss":  # llama.cpp's openai-moe tensors
            f32(p + "attn_output.bias", (E,), 0.1)
            f32(p + "attn_sinks.weight", (H,), 1.0)
        if arch == "qwen3moe" or (glm and a.qk_norm) or (hybrid and (i + 1) % 3 == 0):
            norm(p + "attn_q_norm.weight", D)
            norm(p + "attn_k_norm.weight", D)
        if arch == "olmoe":
            norm(p + "attn_q_norm.weight", H * D)
            norm(p + "attn_k_norm.weight", KV * D)
        norm(p + ("post_attention_norm.weight" if arch in ("gpt-oss", "glm4moe") or hybrid else "ffn_norm.weight"), E)
        if i < n_dense:
            add(p + "ffn_gate.weight", (E, a.ff), a.type, ws)
            add(p + "ffn_up.weight", (E, a.ff), a.type, ws)
            add(p + "ffn_down.weight", (a.ff, E), a.type, 1.0 / np.sqrt(a.ff))
            continue
        add(p + "ffn_gate_inp.weight", (E, a.experts), "F32", ws * 4)
        if sigmoid:
            tensors.append((p + "exp_probs_b.bias", TYPE_BY_NAME["F32"], (a.experts,),
                            (0.05 * rng.standard_normal(a.experts)).astype("<f4").tobytes()))
        add(p + "ffn_gate_exps.weight", (E, a.expert_ff, a.experts), xt, ws)
        add(p + "ffn_up_exps.weight", (E, a.expert_ff, a.experts), xt, ws)
        add(p + "ffn_down_exps.weight", (a.expert_ff, E, a.experts), xt, 1.0 / np.sqrt(a.expert_ff))
        if arch == "gpt-oss":
            f32(p + "ffn_gate_inp.bias", (a.experts,), 0.5)
            f32(p + "ffn_gate_exps.bias", (a.expert_ff, a.experts), 0.1)
            f32(p + "ffn_up_exps.bias", (a.expert_ff, a.experts), 0.1)
            f32(p + "ffn_down_exps.bias", (E, a.experts), 0.1)
        if arch == "qwen2moe" or hybrid:
            add(p + "ffn_gate_inp_shexp.weight", (E,), "F32", ws)
            add(p + "ffn_gate_shexp.weight", (E, a.shared_ff), a.type, ws)
            add(p + "ffn_up_shexp.weight", (E, a.shared_ff), a.type, ws)
            add(p + "ffn_down_shexp.weight", (a.shared_ff, E), a.type, 1.0 / np.sqrt(a.shared_ff))
        if glm:  # ungated, expert_shared_count routed experts wide
            S = a.expert_ff * a.shared_count
            add(p + "ffn_gate_shexp.weight", (E, S), a.type, ws)
            add(p + "ffn_up_shexp.weight", (E, S), a.type, ws)
            add(p + "ffn_down_shexp.weight", (S, E), a.type, 1.0 / np.sqrt(S))
        if i >= a.layers:  # an MTP block's own
            add(p + "nextn.eh_proj.weight", (2 * E, E), a.type, ws)
            norm(p + "nextn.enorm.weight", E)
            norm(p + "nextn.hnorm.weight", E)
            norm(p + "nextn.shared_head_norm.weight", E)

    if ds:  # the converter's MQA view of the latent (head_count_kv 1, key_length R + rope, value_length R)
        KV, key_len, value_len = (H, D, VD) if a.kv_b else (1, R + ROT, R)
    else:
        key_len = value_len = D
    kv = [
        ("general.architecture", STRING, arch),
        ("general.name", STRING, "reference test model"),
        (arch + ".block_count", UINT32, n_blocks),
        (arch + ".context_length", UINT32, 256),
        (arch + ".embedding_length", UINT32, E),
        (arch + ".feed_forward_length", UINT32, a.ff if glm else a.expert_ff),
        (arch + ".attention.head_count", UINT32, H),
        (arch + ".attention.head_count_kv", UINT32, KV),
        (arch + ".attention.key_length", UINT32, key_len),
        (arch + ".attention.value_length", UINT32, value_len),
        (arch + ".rope.freq_base", FLOAT32, 10000.0),
        (arch + ".attention.layer_norm_rms_epsilon", FLOAT32, 1e-6),
        (arch + ".expert_count", UINT32, a.experts),
        (arch + ".expert_used_count", UINT32, a.experts_used),
        (arch + ".expert_feed_forward_length", UINT32, a.expert_ff),
        ("tokenizer.ggml.model", STRING, "gpt2"),
        ("tokenizer.ggml.tokens", ARRAY, (STRING, ["t%d" % i for i in range(a.vocab)])),
        ("tokenizer.ggml.token_type", ARRAY, (INT32, [1] * a.vocab)),
    ]
    if arch == "qwen2moe" or hybrid:
        kv.append((arch + ".expert_shared_feed_forward_length", UINT32, a.shared_ff))
    if hybrid:  # a quarter of each head rotated, as the published models (64 of 256)
        kv += [(arch + ".full_attention_interval", UINT32, 3), (arch + ".rope.dimension_count", UINT32, D // 4),
               (arch + ".ssm.conv_kernel", UINT32, CONV), (arch + ".ssm.state_size", UINT32, DK),
               (arch + ".ssm.group_count", UINT32, NK), (arch + ".ssm.time_step_rank", UINT32, NV),
               (arch + ".ssm.inner_size", UINT32, IN)]
    if arch == "gpt-oss":  # a window the prompt and the steps cross; yarn as gpt-oss's converter writes it
        kv += [(arch + ".attention.sliding_window", UINT32, 6), (arch + ".rope.scaling.type", STRING, "yarn"),
               (arch + ".rope.scaling.factor", FLOAT32, 32.0),
               (arch + ".rope.scaling.original_context_length", UINT32, 4096)]
    if glm:
        kv += [(arch + ".rope.dimension_count", UINT32, a.rope_dim or D // 2),
               (arch + ".leading_dense_block_count", UINT32, n_dense),
               (arch + ".nextn_predict_layers", UINT32, a.nextn),
               (arch + ".expert_shared_count", UINT32, a.shared_count),
               (arch + ".expert_gating_func", UINT32, 2 if sigmoid else 1),
               (arch + ".expert_weights_scale", FLOAT32, a.weights_scale)]
        if sigmoid:
            kv.append((arch + ".expert_weights_norm", BOOL, True))
    if ds:
        kv += [(arch + ".attention.kv_lora_rank", UINT32, R), (arch + ".attention.q_lora_rank", UINT32, RQ)]
        if not a.kv_b:
            kv += [(arch + ".attention.key_length_mla", UINT32, D),
                   (arch + ".attention.value_length_mla", UINT32, VD)]
        if a.yarn:  # as DeepseekV2Model writes it: yarn_log_multiplier = 0.1 mscale_all_dim
            kv += [(arch + ".rope.scaling.type", STRING, "yarn"), (arch + ".rope.scaling.factor", FLOAT32, a.yarn),
                   (arch + ".rope.scaling.original_context_length", UINT32, 64),
                   (arch + ".rope.scaling.yarn_log_multiplier", FLOAT32, 0.1 * a.mscale_all_dim)]
        if a.groups > 1:
            kv += [(arch + ".expert_group_count", UINT32, a.groups),
                   (arch + ".expert_group_used_count", UINT32, a.groups_used)]
    write_gguf(a.o, kv, tensors)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", required=True, choices=["qwen3moe", "qwen2moe", "mixtral", "llama", "olmoe",
                                                           "gpt-oss", "glm4moe", "deepseek2", "qwen3next", "qwen35moe"])
    ap.add_argument("--type", default="F32", help="type of every matrix (see --expert-type, --output-type)")
    ap.add_argument("--expert-type", help="type of the routed experts (default: --type)")
    ap.add_argument("--output-type", help="type of token_embd and output (default: --type)")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--embd", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=16)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--experts-used", type=int, default=2)
    ap.add_argument("--expert-ff", type=int, default=32)
    ap.add_argument("--shared-ff", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tied", action="store_true")
    # glm4moe
    ap.add_argument("--ff", type=int, default=96, help="glm4moe: the dense layers' width")
    ap.add_argument("--dense-layers", type=int, default=1)
    ap.add_argument("--nextn", type=int, default=1)
    ap.add_argument("--qk-norm", action="store_true")
    ap.add_argument("--rope-dim", type=int, default=0, help="default: half the head")
    ap.add_argument("--shared-count", type=int, default=1)
    ap.add_argument("--groups", type=int, default=0)
    ap.add_argument("--groups-used", type=int, default=0)
    ap.add_argument("--weights-scale", type=float, default=2.5)
    # deepseek2 (also --ff, --dense-layers, --nextn, --rope-dim (default half of --head-dim, the key), --shared-count,
    # --groups, --groups-used, --weights-scale)
    ap.add_argument("--kv-lora", type=int, default=64)
    ap.add_argument("--q-lora", type=int, default=32, help="0: attn_q")
    ap.add_argument("--v-head-dim", type=int, default=0, help="default: the key's unrotated part")
    ap.add_argument("--kv-b", action="store_true", help="one attn_kv_b, as files converted before the k/v split")
    ap.add_argument("--gating", default="sigmoid", choices=["sigmoid", "softmax"])
    ap.add_argument("--yarn", type=float, default=0.0, help="rope.scaling.factor of yarn (0: none)")
    ap.add_argument("--mscale-all-dim", type=float, default=1.0)
    ap.add_argument("-o", required=True)
    build(ap.parse_args(argv))


if __name__ == "__main__":
    main()
