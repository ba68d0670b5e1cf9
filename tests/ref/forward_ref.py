#!/usr/bin/env python3
"""Float64 reference forward pass for the MoE architectures Guild runs: qwen3moe, qwen2moe, llama (Mixtral: llama
with experts; dense llama too), olmoe, gpt-oss, glm4moe, deepseek2, qwen3next and qwen35moe, each a row of parts
(PARTS below), as llama.cpp defines them (src/models/<arch>.cpp, build_moe_ffn, build_ffn and build_attn in
src/llama-graph.cpp, llama_model_rope_type, ggml's rope_yarn, soft_max with sinks and swiglu_oai). Independent of
Guild's C code: own GGUF reader and dequantizers.

Everything is computed in float64, except that, by default, the input vector of every matrix product with a
quantized weight is first quantized to the weight type's dot format (Q8_0 / Q8_1 / Q8_K) exactly as ggml's
reference quantizers do in float32 -- Guild's matrix products do that, so emulating it makes a comparison
measure only arithmetic precision (--no-emulate-act turns it off).

CLI: forward_ref.py --model M.gguf --ids "1 2 3" --steps N [--force-ids "..."] --logits-out F.f32
     [--tokens-out F.txt]
Writes N rows of n_vocab float32 logits: row 0 is the prompt's last position; row i (i >= 1) comes after feeding
token i-1, which is --force-ids' i-th id when given (teacher forcing), else the argmax of row i-1 (greedy).
--tokens-out gets the argmax of each row, space-separated on one line.
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from dequant_ref import DOT_TYPE, block_mins, dequantize, quantize_activation  # noqa: E402
from gguf_ref import GGUFError, GGUFFile  # noqa: E402

# Each architecture's parts as llama.cpp's graphs have them -- (kind, options) of its attention, router and FFN,
# written down independently of core/model/arch.c, which names the same parts. A new architecture is a row here;
# a new kind or option is code in Model below (attention, moe, ...).
PARTS = {
    "qwen3moe": {"attn": ("gqa", {"rope_neox", "qk_norm_head"}), "router": ("softmax_topk", {"renorm"}),
                 "ffn": ("moe", set())},
    "qwen2moe": {"attn": ("gqa", {"rope_neox", "qkv_bias"}), "router": ("softmax_topk", set()),
                 "ffn": ("moe", {"shexp_gated"})},
    "llama": {"attn": ("gqa", set()), "router": ("softmax_topk", {"renorm"}), "ffn": ("moe", set())},
    "olmoe": {"attn": ("gqa", {"rope_neox", "qk_norm_full"}), "router": ("softmax_topk", set()),
              "ffn": ("moe", set())},
    # llama.cpp's openai-moe (llm_build_openai_moe_iswa): q/k/v and output biases, a sink logit per head in every
    # softmax, sliding-window attention on the layers set_swa_pattern(sliding_window_pattern, default 2) marks;
    # the router's logits plus ffn_gate_inp.bias, top k of them weighted by their softmax (gating SOFTMAX_WEIGHT);
    # experts with biases and swiglu_oai (alpha 1.702, limit 7); the FFN's norm is attn_post_norm.
    "gpt-oss": {"attn": ("gqa", {"rope_neox", "qkv_bias", "out_bias", "sinks", "sliding"}),
                "router": ("topk_softmax", {"logit_bias"}), "ffn": ("moe", {"swiglu_oai"}),
                "ffn_norm": "post_attention_norm"},
    # src/models/glm4-moe.cpp: the FFN norm is attn_post_norm (blk.N.post_attention_norm); q/k norms per head
    # only where the file has them; leading_dense_block_count dense layers (build_ffn, silu, parallel gate);
    # build_moe_ffn with sigmoid gating (expert_gating_func), exp_probs_b added for the choice only,
    # expert_weights_norm and expert_weights_scale from the file; the shared expert added unscaled; the last
    # nextn_predict_layers blocks are skipped.
    "glm4moe": {"attn": ("gqa", {"rope_neox", "qkv_bias", "qk_norm_head_if_present"}),
                "router": ("sigmoid", {"probs_bias", "norm_from_key"}), "ffn": ("moe", {"shexp"}),
                "dense_lead": True, "ffn_norm": "post_attention_norm", "nextn": True},
    # src/models/deepseek2.cpp: multi-head latent attention (q through attn_q_a, its RMS norm and attn_q_b where the
    # file has a q LoRA, else attn_q; attn_kv_a_mqa gives the latent, RMS-normed by attn_kv_a_norm, and a rotated
    # key part shared by the heads; rope on adjacent pairs (LLAMA_ROPE_TYPE_NORM); with attn_k_b/attn_v_b the
    # absorbed form, else attn_kv_b's up-projection per position; kq_scale from YaRN's mscale); dense first
    # layers; build_moe_ffn gated by expert_gating_func (absent or 1 softmax, 2 sigmoid with exp_probs_b where
    # present and the file's groups), expert_weights_norm and _scale from the file; the shared expert unscaled.
    "deepseek2": {"attn": ("mla", set()), "router": ("by_gating", {"probs_bias", "norm_from_key"}),
                  "ffn": ("moe", {"shexp"}), "dense_lead": True, "nextn": True},
    # llama.cpp's qwen3next.cpp: layer il is a gated delta net unless (il + 1) % full_attention_interval == 0;
    # the full-attention layers' attn_q yields per head its query then a gate, the output is multiplied by
    # sigmoid(gate) before attn_output; partial NEOX rope; the delta net's linear layers (see Model.gdn).
    # qwen35moe.cpp: separate ssm_beta / ssm_alpha, key heads repeated by tiling (ggml_repeat_4d) instead of
    # interleaving; its IMRoPE is NEOX for text positions.
    "qwen3next": {"attn": ("gqa", {"rope_neox", "qk_norm_head", "out_gate"}), "linear": ("gdn", set()),
                  "router": ("softmax_topk", {"renorm"}), "ffn": ("moe", {"shexp_gated"}),
                  "ffn_norm": "post_attention_norm"},
    "qwen35moe": {"attn": ("gqa", {"rope_neox", "qk_norm_head", "out_gate"}), "linear": ("gdn", {"ba_split", "tiled"}),
                  "router": ("softmax_topk", {"renorm"}), "ffn": ("moe", {"shexp_gated"}),
                  "ffn_norm": "post_attention_norm", "nextn": True},
}
ARCHS = tuple(PARTS)


class Weight:
    """A weight tensor dequantized to float64, shape reversed from GGUF's ne (so W @ x works on rows)."""

    def __init__(self, t, emulate):
        self.name = t.name
        self.type = t.type_name
        shape = tuple(reversed(t.ne))
        self.W = dequantize(t.type, t.data, t.n_elements).reshape(shape)
        self.dot = DOT_TYPE.get(self.type) if emulate else None
        if self.type not in DOT_TYPE:
            raise GGUFError("tensor %s: type %s is not supported" % (t.name, self.type))
        self.mins = None
        if self.dot == "Q8_1":
            # ggml's Q4_1/Q5_1 x Q8_1 dot: d_w*d_a*sum(q_w*q_a) + m_w * s_a, s_a the fp16 d_a*sum(q_a).
            self.mins = block_mins(t.type, t.data, t.n_elements).reshape(shape[:-1] + (shape[-1] // 32,))
            self.Wnomin = self.W - np.repeat(self.mins, 32, axis=-1)

    @property
    def shape(self):
        return self.W.shape

    def mv(self, x, expert=None):
        """W @ x (W[expert] @ x for a 3-D expert tensor); x a float64 vector of the inner dimension."""
        W = self.W if expert is None else self.W[expert]
        if W.ndim == 1:
            W = W.reshape(1, -1)
        if self.dot is None:
            return W @ x
        xq, s = quantize_activation(self.dot, x)
        if self.mins is None:
            return W @ xq
        Wn = self.Wnomin if expert is None else self.Wnomin[expert]
        M = self.mins if expert is None else self.mins[expert]
        if Wn.ndim == 1:
            Wn, M = Wn.reshape(1, -1), M.reshape(1, -1)
        return Wn @ xq + M @ s


def rms_norm(x, w, eps):
    """x: (..., n); normalised over the last axis, times w."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def softmax(x):
    e = np.exp(x - np.max(x))
    return e / e.sum()


def softplus(x):
    return np.log1p(np.exp(x)) if x <= 20.0 else x


def l2_norm(x, eps):
    """ggml_l2_norm over the last axis: x / max(||x||, eps)."""
    return x / np.maximum(np.sqrt(np.sum(x * x, axis=-1, keepdims=True)), eps)


def swiglu_oai(g, u, alpha=1.702, limit=7.0):
    """ggml_swiglu_oai: min(g, limit) * sigmoid(alpha * min(g, limit)) * (clamp(u, -limit, limit) + 1)."""
    x = np.minimum(g, limit)
    y = np.clip(u, -limit, limit)
    return x / (1.0 + np.exp(-alpha * x)) * (y + 1.0)


class Model:
    def __init__(self, path, emulate=True):
        g = GGUFFile(path)
        self.path = path
        self.gguf = g
        arch = g.require("general.architecture")
        if arch not in ARCHS:
            raise GGUFError("%s: architecture %s is not supported by the reference" % (path, arch))
        self.arch = arch

        def key(k, default=None, required=False):
            full = arch + "." + k
            if required:
                return g.require(full)
            return g.get(full, default)

        self.n_layer = int(key("block_count", required=True))
        self.n_mtp = 0
        if PARTS[arch].get("nextn"):
            self.n_mtp = int(key("nextn_predict_layers", 0))
            self.n_layer -= self.n_mtp
        self.n_dense_lead = int(key("leading_dense_block_count", 0)) if PARTS[arch].get("dense_lead") else 0
        self.n_embd = int(key("embedding_length", required=True))
        self.n_head = int(key("attention.head_count", required=True))
        self.n_head_kv = int(key("attention.head_count_kv", self.n_head))
        self.hd_k = int(key("attention.key_length", self.n_embd // self.n_head))
        self.hd_v = int(key("attention.value_length", self.hd_k))
        self.n_rot = int(key("rope.dimension_count", self.hd_k))
        self.mla = PARTS[arch]["attn"][0] == "mla"
        if self.mla:
            # the heads' key and value sizes: key_length_mla/value_length_mla where the converter wrote them
            # (key_length and value_length then describe the latent's MQA view), else key_length/value_length
            self.n_lora_kv = int(key("attention.kv_lora_rank", required=True))
            self.n_lora_q = int(key("attention.q_lora_rank", 0))
            self.mla_split = key("attention.key_length_mla") is not None
            if self.mla_split:
                self.hd_k = int(key("attention.key_length_mla"))
                self.hd_v = int(key("attention.value_length_mla"))
            self.n_head_kv = self.n_head
        self.freq_base = float(key("rope.freq_base", 10000.0))
        self.eps = float(key("attention.layer_norm_rms_epsilon", required=True))
        self.n_expert = int(key("expert_count", 0))
        self.n_expert_used = int(key("expert_used_count", 0))
        # build_moe_ffn scales the (renormalised) weights by this when it is neither 0 nor 1.
        self.expert_weights_scale = float(key("expert_weights_scale", 0.0) or 0.0)
        self.freq_scale = 1.0
        self.yarn = None
        stype = key("rope.scaling.type", "none")
        factor = float(key("rope.scaling.factor", 0.0) or 0.0)
        if stype == "linear" and factor > 0:
            self.freq_scale = 1.0 / factor
        elif stype == "yarn" and factor > 0:
            # ggml's rope_yarn with llama.cpp's defaults: ext_factor 1, attn_factor 1, beta_fast 32, beta_slow 1
            self.freq_scale = 1.0 / factor
            n_orig = int(key("rope.scaling.original_context_length", key("context_length", required=True)))

            def corr_dim(n_turns):
                return self.n_rot * np.log(n_orig / (n_turns * 2 * np.pi)) / (2 * np.log(self.freq_base))
            lo = max(0.0, np.floor(corr_dim(float(key("rope.scaling.yarn_beta_fast", 32.0)))))
            hi = min(self.n_rot - 1.0, np.ceil(corr_dim(float(key("rope.scaling.yarn_beta_slow", 1.0)))))
            ext = float(key("rope.scaling.yarn_ext_factor", 1.0))
            attn = float(key("rope.scaling.yarn_attn_factor", 1.0))
            log_mul = key("rope.scaling.yarn_log_multiplier")
            if self.mla and log_mul is not None:
                # llama_context for deepseek2 (the converter wrote 0.1 * mscale_all_dim; llama.cpp divides it back):
                # attn_factor = get_mscale(s, m) / get_mscale(s, m) (m = mscale_all_dim), then over 1 + 0.1 ln s,
                # which ggml's rope_yarn multiplies back: the rotated part keeps its magnitude
                attn = 1.0 / (1.0 + 0.1 * np.log(factor))
            self.yarn = (lo, hi, ext, attn)
        elif stype not in ("none", "linear") and factor not in (0.0, 1.0):
            raise GGUFError("%s: rope scaling %s is not supported by the reference" % (path, stype))
        if key("rope.scale_linear") is not None:
            self.freq_scale = 1.0 / float(key("rope.scale_linear"))
        # deepseek2's logit scale (its graph): mscale^2 / sqrt(key), mscale = attn_factor * (1 + 0.1 ln s) *
        # (1 + 0.1 mscale_all_dim ln s)
        self.kq_scale = 1.0 / np.sqrt(self.hd_k)
        if self.mla:
            ln_s = np.log(1.0 / self.freq_scale)
            m_all = float(key("rope.scaling.yarn_log_multiplier", 0.0) or 0.0) / 0.1
            attn = self.yarn[3] if self.yarn is not None else 1.0
            mscale = attn * (1.0 + 0.1 * ln_s) * (1.0 + 0.1 * m_all * ln_s)
            self.kq_scale = mscale * mscale / np.sqrt(self.hd_k)
        parts = PARTS[arch]
        if parts["attn"][0] not in ("gqa", "mla") or parts["ffn"][0] != "moe" or \
                parts["router"][0] not in ("softmax_topk", "topk_softmax", "sigmoid", "by_gating"):
            raise GGUFError("%s: %s's parts %s are not implemented by the reference" % (path, arch, parts))
        attn_opts, router_opts, ffn_opts = parts["attn"][1], parts["router"][1], parts["ffn"][1]
        router_kind = parts["router"][0]
        if router_kind == "by_gating":  # LLAMA_EXPERT_GATING_FUNC_TYPE: absent as softmax (older deepseek2 files)
            gating = int(key("expert_gating_func", 0))
            if gating not in (0, 1, 2):
                raise GGUFError("%s: expert_gating_func %d is not softmax or sigmoid" % (path, gating))
            router_kind = "sigmoid" if gating == 2 else "softmax_topk"
        # llama_model_rope_type: NORM (adjacent pairs) or NEOX (halves).
        self.rope_neox = "rope_neox" in attn_opts
        # build_moe_ffn's norm_w argument in the architecture's graph (or the file's expert_weights_norm).
        self.norm_topk = "renorm" in router_opts
        if "norm_from_key" in router_opts:
            self.norm_topk = bool(key("expert_weights_norm", False))
        if router_kind == "sigmoid":
            gating = int(key("expert_gating_func", 0))
            if gating not in (0, 2):
                raise GGUFError("%s: expert_gating_func %d is not sigmoid" % (path, gating))
        # build_moe_ffn limits the choice to the best expert groups whatever the gating (softmax: DeepSeek-V2)
        self.n_groups = int(key("expert_group_count", 0)) if router_kind in ("sigmoid", "softmax_topk") else 0
        self.n_group_used = int(key("expert_group_used_count", 0))
        # Q/K RMS norms: per head after the reshape, or over the whole projection before it.
        self.qk_norm = "head" if "qk_norm_head" in attn_opts else "full" if "qk_norm_full" in attn_opts else None
        if "qk_norm_head_if_present" in attn_opts and g.tensor("blk.0.attn_q_norm.weight") is not None:
            self.qk_norm = "head"
        self.router_kind = router_kind
        self.swiglu_oai = "swiglu_oai" in ffn_opts
        self.sinks = "sinks" in attn_opts
        self.out_gate = "out_gate" in attn_opts
        # hybrid: which layers are gated delta nets (llama.cpp: is_recr), and their shape (the ssm.* keys)
        self.recurrent = set()
        self.gdn_opts = set()
        if "linear" in parts:
            interval = int(key("full_attention_interval", 4))
            self.recurrent = {il for il in range(self.n_layer) if (il + 1) % interval != 0}
            self.gdn_opts = parts["linear"][1]
            self.d_conv = int(key("ssm.conv_kernel", required=True))
            self.dk = int(key("ssm.state_size", required=True))
            self.nk = int(key("ssm.group_count", required=True))
            self.nv = int(key("ssm.time_step_rank", required=True))
            self.d_inner = int(key("ssm.inner_size", required=True))
            if self.d_inner != self.nv * self.dk or self.nv % self.nk:
                raise GGUFError("%s: ssm shape not supported by the reference" % path)
        # llama_hparams::set_swa_pattern(n): layer il slides when n == 0 or il % n < n - 1; a sliding layer's
        # query at position p sees keys p0 with p - p0 < n_swa (is_masked_swa, LLAMA_SWA_TYPE_STANDARD).
        self.n_swa = 0
        self.swa_layers = set()
        if "sliding" in attn_opts:
            self.n_swa = int(key("attention.sliding_window", required=True))
            period = int(key("attention.sliding_window_pattern", 2))
            self.swa_layers = {il for il in range(self.n_layer) if period == 0 or il % period < period - 1}

        def T(name, required=True):
            t = g.tensor(name)
            if t is None:
                if required:
                    raise GGUFError("%s: missing tensor %s" % (path, name))
                return None
            return Weight(t, emulate)

        def V(name, required=True):
            t = T(name, required)
            return None if t is None else t.W.reshape(-1)

        self.tok_embd = T("token_embd.weight")
        self.n_vocab = self.tok_embd.shape[0]
        self.output_norm = V("output_norm.weight")
        self.output = T("output.weight", False) or self.tok_embd
        rf = V("rope_freqs.weight", False)
        self.rope_freqs = rf
        self.layers = []
        # the blocks of the model, then its first MTP layer's (full attention in a hybrid, as llama.cpp's is_recr)
        for i in range(self.n_layer + min(self.n_mtp, 1)):
            p = "blk.%d." % i
            if self.mla:
                L = {"attn_norm": V(p + "attn_norm.weight"), "wo": T(p + "attn_output.weight"),
                     "wkv_a": T(p + "attn_kv_a_mqa.weight"), "kv_a_norm": V(p + "attn_kv_a_norm.weight"),
                     "ffn_norm": V(p + "ffn_norm.weight")}
                if self.n_lora_q > 0:
                    L["wq_a"] = T(p + "attn_q_a.weight")
                    L["q_a_norm"] = V(p + "attn_q_a_norm.weight")
                    L["wq_b"] = T(p + "attn_q_b.weight")
                else:
                    L["wq"] = T(p + "attn_q.weight")
                if self.mla_split:
                    L["wk_b"] = T(p + "attn_k_b.weight")
                    L["wv_b"] = T(p + "attn_v_b.weight")
                else:
                    L["wkv_b"] = T(p + "attn_kv_b.weight")
            else:
                L = {"attn_norm": V(p + "attn_norm.weight"),
                     "ffn_norm": V(p + parts.get("ffn_norm", "ffn_norm") + ".weight")}
                if i in self.recurrent:
                    L["qkv"] = T(p + "attn_qkv.weight")
                    L["z"] = T(p + "attn_gate.weight")
                    L["conv"] = T(p + "ssm_conv1d.weight").W  # (channels, taps), oldest tap first
                    L["dt"] = V(p + "ssm_dt.bias")
                    L["A"] = V(p + "ssm_a")
                    if "ba_split" in self.gdn_opts:
                        L["beta"] = T(p + "ssm_beta.weight")
                        L["alpha"] = T(p + "ssm_alpha.weight")
                    else:
                        L["ba"] = T(p + "ssm_ba.weight")
                    L["ssm_norm"] = V(p + "ssm_norm.weight")
                    L["ssm_out"] = T(p + "ssm_out.weight")
                    self._ffn_tensors(L, i, p, router_opts, ffn_opts, arch, path, T, V)
                    self.layers.append(L)
                    continue
                L.update({
                    "wq": T(p + "attn_q.weight"), "wk": T(p + "attn_k.weight"), "wv": T(p + "attn_v.weight"),
                    "wo": T(p + "attn_output.weight"),
                    "bq": V(p + "attn_q.bias", False), "bk": V(p + "attn_k.bias", False),
                    "bv": V(p + "attn_v.bias", False), "bo": V(p + "attn_output.bias", False),
                })
            if self.sinks:
                L["sinks"] = V(p + "attn_sinks.weight")
            if self.qk_norm:
                L["q_norm"] = V(p + "attn_q_norm.weight")
                L["k_norm"] = V(p + "attn_k_norm.weight")
            self._ffn_tensors(L, i, p, router_opts, ffn_opts, arch, path, T, V)
            self.layers.append(L)
        self.mtp = None
        if self.n_mtp:
            p = "blk.%d.nextn." % self.n_layer
            self.mtp = {"block": self.layers.pop(), "eh_proj": T(p + "eh_proj.weight"), "enorm": V(p + "enorm.weight"),
                        "hnorm": V(p + "hnorm.weight"), "embed": T(p + "embed_tokens.weight", False),
                        "head": T(p + "shared_head_head.weight", False),
                        "head_norm": V(p + "shared_head_norm.weight", False)}
        if self.n_expert > 0 and not 0 < self.n_expert_used <= self.n_expert:
            raise GGUFError("%s: expert_used_count %d is not in 1..%d" % (path, self.n_expert_used, self.n_expert))
        self.reset()


    def _ffn_tensors(self, L, i, p, router_opts, ffn_opts, arch, path, T, V):
        """The FFN's tensors of layer i into L."""
        if self.n_expert > 0 and i >= self.n_dense_lead:
            L["gate_inp"] = T(p + "ffn_gate_inp.weight")
            if "probs_bias" in router_opts:
                L["probs_b"] = V(p + "exp_probs_b.bias", False)
            L["gate_exps"] = T(p + "ffn_gate_exps.weight")
            L["up_exps"] = T(p + "ffn_up_exps.weight")
            L["down_exps"] = T(p + "ffn_down_exps.weight")
            if "logit_bias" in router_opts:
                L["gate_inp_b"] = V(p + "ffn_gate_inp.bias")
            if self.swiglu_oai:
                L["gate_exps_b"] = T(p + "ffn_gate_exps.bias").W
                L["up_exps_b"] = T(p + "ffn_up_exps.bias").W
                L["down_exps_b"] = T(p + "ffn_down_exps.bias").W
            if "shexp_gated" in ffn_opts:
                L["gate_inp_shexp"] = T(p + "ffn_gate_inp_shexp.weight")
                L["gate_shexp"] = T(p + "ffn_gate_shexp.weight")
                L["up_shexp"] = T(p + "ffn_up_shexp.weight")
                L["down_shexp"] = T(p + "ffn_down_shexp.weight")
            if "shexp" in ffn_opts:
                L["gate_shexp"] = T(p + "ffn_gate_shexp.weight")
                L["up_shexp"] = T(p + "ffn_up_shexp.weight")
                L["down_shexp"] = T(p + "ffn_down_shexp.weight")
        else:
            if arch != "llama" and i >= self.n_dense_lead:
                raise GGUFError("%s: %s needs %s.expert_count > 0" % (path, arch, arch))
            L["ffn_gate"] = T(p + "ffn_gate.weight")
            L["ffn_up"] = T(p + "ffn_up.weight")
            L["ffn_down"] = T(p + "ffn_down.weight")

    def reset(self):
        self.pos = 0
        self.kcache = [[] for _ in range(self.n_layer + 1)]  # the last: the MTP layer's
        self.vcache = [[] for _ in range(self.n_layer + 1)]
        self.hidden = []  # each position's hidden state: the last layer's output before output_norm
        self.conv_state = {il: np.zeros((self.d_conv - 1, 2 * self.nk * self.dk + self.d_inner))
                           for il in self.recurrent}
        self.ssm_state = {il: np.zeros((self.nv, self.dk, self.dk)) for il in self.recurrent}
        self.routing = []   # per token: per layer the selected experts (for diagnostics)
        # Smallest gap between the k-th and (k+1)-th router probability met so far: a tiny gap means float32
        # rounding can pick a different expert set than float64 (a legitimate divergence, not a bug).
        self.min_router_margin = float("inf")

    def rope(self, x, pos):
        """x: (heads, head_dim), rotated in place of its first n_rot dims."""
        half = self.n_rot // 2
        i = np.arange(half)
        theta_extrap = pos * self.freq_base ** (-2.0 * i / self.n_rot)
        if self.rope_freqs is not None:
            theta_extrap = theta_extrap / self.rope_freqs[:half]
        theta = self.freq_scale * theta_extrap
        mscale = 1.0
        if self.yarn is not None:
            lo, hi, ext, attn = self.yarn
            ramp = (1.0 - np.minimum(1.0, np.maximum(0.0, (i - lo) / max(0.001, hi - lo)))) * ext
            theta = theta * (1.0 - ramp) + theta_extrap * ramp
            mscale = attn * (1.0 + 0.1 * np.log(1.0 / self.freq_scale)) if ext != 0.0 else attn
        c, s = np.cos(theta) * mscale, np.sin(theta) * mscale
        y = x.copy()
        if self.rope_neox:
            x0, x1 = x[:, i], x[:, i + half]
            y[:, i], y[:, i + half] = x0 * c - x1 * s, x0 * s + x1 * c
        else:
            x0, x1 = x[:, 2 * i], x[:, 2 * i + 1]
            y[:, 2 * i], y[:, 2 * i + 1] = x0 * c - x1 * s, x0 * s + x1 * c
        return y

    def gdn(self, il, L, h):
        """The gated delta net, one step of its recurrence (llama.cpp's build_layer_attn_linear with the
        autoregressive delta rule of delta-net-base.cpp), state S (value row, key column) per value head."""
        nk, nv, dk = self.nk, self.nv, self.dk
        qkv = L["qkv"].mv(h)
        z = L["z"].mv(h).reshape(nv, dk)
        if "ba_split" in self.gdn_opts:
            b, a = L["beta"].mv(h), L["alpha"].mv(h)
        else:  # per key head: the betas of its nv/nk value heads, then their alphas
            ba = L["ba"].mv(h).reshape(nk, 2, nv // nk)
            b, a = ba[:, 0, :].reshape(-1), ba[:, 1, :].reshape(-1)
        window = np.vstack([self.conv_state[il], qkv])
        self.conv_state[il] = window[1:]
        c = silu(np.sum(window.T * L["conv"], axis=1))
        q = l2_norm(c[:nk * dk].reshape(nk, dk), self.eps) / np.sqrt(dk)
        k = l2_norm(c[nk * dk:2 * nk * dk].reshape(nk, dk), self.eps)
        v = c[2 * nk * dk:].reshape(nv, dk)
        beta = 1.0 / (1.0 + np.exp(-b))
        g = np.array([softplus(a[hh] + L["dt"][hh]) for hh in range(nv)]) * L["A"]
        o = np.empty((nv, dk))
        for hh in range(nv):
            kh = hh % nk if "tiled" in self.gdn_opts else hh // (nv // nk)
            S = self.ssm_state[il][hh] * np.exp(g[hh])
            S = S + beta[hh] * np.outer(v[hh] - S @ k[kh], k[kh])
            self.ssm_state[il][hh] = S
            o[hh] = S @ q[kh]
        o = rms_norm(o, L["ssm_norm"], self.eps) * silu(z)
        return L["ssm_out"].mv(o.reshape(-1))

    def attention(self, il, L, h):
        if il in self.recurrent:
            return self.gdn(il, L, h)
        q = L["wq"].mv(h)
        k = L["wk"].mv(h)
        v = L["wv"].mv(h)
        if L["bq"] is not None:
            q = q + L["bq"]
        if L["bk"] is not None:
            k = k + L["bk"]
        if L["bv"] is not None:
            v = v + L["bv"]
        if self.qk_norm == "full":
            q = rms_norm(q, L["q_norm"], self.eps)
            k = rms_norm(k, L["k_norm"], self.eps)
        gate = None
        if self.out_gate:  # per head: its query, then its gate
            qg = q.reshape(self.n_head, 2 * self.hd_k)
            q, gate = qg[:, :self.hd_k].reshape(-1), qg[:, self.hd_k:]
        q = q.reshape(self.n_head, self.hd_k)
        k = k.reshape(self.n_head_kv, self.hd_k)
        v = v.reshape(self.n_head_kv, self.hd_v)
        if self.qk_norm == "head":
            q = rms_norm(q, L["q_norm"], self.eps)
            k = rms_norm(k, L["k_norm"], self.eps)
        q = self.rope(q, self.pos)
        k = self.rope(k, self.pos)
        self.kcache[il].append(k)
        self.vcache[il].append(v)
        K = np.stack(self.kcache[il])   # (n_pos, n_head_kv, hd_k)
        Vc = np.stack(self.vcache[il])  # (n_pos, n_head_kv, hd_v)
        group = self.n_head // self.n_head_kv
        scale = 1.0 / np.sqrt(self.hd_k)
        first = 0
        if il in self.swa_layers:  # keys at positions pos - n_swa + 1 .. pos
            first = max(0, self.pos - self.n_swa + 1)
        out = np.empty((self.n_head, self.hd_v))
        for hh in range(self.n_head):
            kv = hh // group
            s = K[first:, kv, :] @ q[hh] * scale
            if self.sinks:
                # soft_max with sinks: the sink's logit joins the normalisation and weighs no value
                m = max(np.max(s), L["sinks"][hh])
                e = np.exp(s - m)
                p = e / (e.sum() + np.exp(L["sinks"][hh] - m))
            else:
                p = softmax(s)
            out[hh] = p @ Vc[first:, kv, :]
        if gate is not None:
            out = out / (1.0 + np.exp(-gate))
        o = L["wo"].mv(out.reshape(-1))
        if L["bo"] is not None:
            o = o + L["bo"]
        return o

    def attention_mla(self, il, L, h):
        """deepseek2's graph for one position: the cache keeps [latent | rotated key part] per position."""
        H, K, Vd, R, r = self.n_head, self.hd_k, self.hd_v, self.n_lora_kv, self.n_rot
        nope = K - r
        if "wq_a" in L:
            q = L["wq_b"].mv(rms_norm(L["wq_a"].mv(h), L["q_a_norm"], self.eps))
        else:
            q = L["wq"].mv(h)
        q = q.reshape(H, K)
        q_nope, q_pe = q[:, :nope], self.rope(q[:, nope:], self.pos)
        kv = L["wkv_a"].mv(h)
        c = rms_norm(kv[:R], L["kv_a_norm"], self.eps)
        k_pe = self.rope(kv[R:].reshape(1, r), self.pos)[0]
        self.kcache[il].append(np.concatenate([c, k_pe]))
        C = np.stack(self.kcache[il])  # (n_pos, R + r)
        out = np.empty((H, Vd))
        if "wk_b" in L:
            # absorbed (MQA over the latents): q_nope through attn_k_b into the latent space, the weighted latents
            # through attn_v_b, both per head (ggml_mul_mat over the heads' matrices of the 3-D tensors)
            for hh in range(H):
                qc = L["wk_b"].mv(q_nope[hh], hh)  # (R,)
                s = (C[:, :R] @ qc + C[:, R:] @ q_pe[hh]) * self.kq_scale
                out[hh] = L["wv_b"].mv(softmax(s) @ C[:, :R], hh)
        else:
            # files with attn_kv_b: each position's keys and values up-projected from its latent (MHA)
            KVb = np.stack([L["wkv_b"].mv(C[j, :R]).reshape(H, nope + Vd) for j in range(C.shape[0])])
            for hh in range(H):
                s = (KVb[:, hh, :nope] @ q_nope[hh] + C[:, R:] @ q_pe[hh]) * self.kq_scale
                out[hh] = softmax(s) @ KVb[:, hh, nope:]
        return L["wo"].mv(out.reshape(-1))

    def route_sigmoid(self, L, logits):
        """build_moe_ffn with sigmoid gating: (selection scores, gates); groups mask the selection scores."""
        probs = 1.0 / (1.0 + np.exp(-logits))
        choice = probs + L["probs_b"] if L.get("probs_b") is not None else probs.copy()
        return self.mask_groups(choice), probs

    def mask_groups(self, choice):
        """The experts of all but the n_group_used best groups (a group's score: its two best summed) unchosen."""
        if self.n_groups > 1:
            per = self.n_expert // self.n_groups
            groups = choice.reshape(self.n_groups, per)
            top2 = -np.sort(-groups, axis=1)[:, :2].sum(axis=1)
            keep = np.argsort(-top2, kind="stable")[:self.n_group_used]
            mask = np.full(self.n_groups, True)
            mask[keep] = False
            choice = groups.copy()
            choice[mask] = -np.inf
            choice = choice.reshape(-1)
        return choice

    def moe(self, L, h, routing):
        logits = L["gate_inp"].mv(h)
        if "gate_inp_b" in L:
            logits = logits + L["gate_inp_b"]
        # softmax_topk: p = softmax(logits), top k of p weighted by p; topk_softmax (SOFTMAX_WEIGHT): top k of the
        # logits, weighted by the softmax of those k; sigmoid: top k of sigmoid(logits) + exp_probs_b in the best
        # groups, weighted by the sigmoids
        if self.router_kind == "sigmoid":
            choice, probs = self.route_sigmoid(L, logits)
        else:
            probs = softmax(logits) if self.router_kind == "softmax_topk" else logits
            choice = self.mask_groups(probs.copy()) if self.router_kind == "softmax_topk" else probs
        order = np.argsort(-choice, kind="stable")
        sel = order[:self.n_expert_used]
        if self.n_expert_used < self.n_expert:
            gap = choice[order[self.n_expert_used - 1]] - choice[order[self.n_expert_used]]
            if self.router_kind == "topk_softmax":  # a logit gap, as a probability-like margin
                gap = gap / max(1.0, float(np.max(np.abs(probs))))
            self.min_router_margin = min(self.min_router_margin, float(gap))
        w = probs[sel]
        if self.router_kind == "topk_softmax":
            w = softmax(w)
        if self.norm_topk:
            w = w / max(w.sum(), 6.103515625e-5)
        if self.expert_weights_scale not in (0.0, 1.0):
            w = w * self.expert_weights_scale
        routing.append([int(e) for e in sel])
        out = np.zeros(self.n_embd)
        for wk, e in zip(w, sel):
            if self.swiglu_oai:
                a = swiglu_oai(L["gate_exps"].mv(h, e) + L["gate_exps_b"][e], L["up_exps"].mv(h, e) + L["up_exps_b"][e])
                out += wk * (L["down_exps"].mv(a, e) + L["down_exps_b"][e])
                continue
            a = silu(L["gate_exps"].mv(h, e)) * L["up_exps"].mv(h, e)
            out += wk * L["down_exps"].mv(a, e)
        if "gate_inp_shexp" in L:
            g = 1.0 / (1.0 + np.exp(-L["gate_inp_shexp"].mv(h)[0]))
            a = silu(L["gate_shexp"].mv(h)) * L["up_shexp"].mv(h)
            out += L["down_shexp"].mv(a) * g
        elif "gate_shexp" in L:
            out += L["down_shexp"].mv(silu(L["gate_shexp"].mv(h)) * L["up_shexp"].mv(h))
        return out

    def dense_ffn(self, L, h):
        a = silu(L["ffn_gate"].mv(h)) * L["ffn_up"].mv(h)
        return L["ffn_down"].mv(a)

    def step(self, token):
        """Feeds one token at the next position; returns the float64 logits (n_vocab,)."""
        if not 0 <= token < self.n_vocab:
            raise ValueError("token id %d is outside the vocabulary (%d)" % (token, self.n_vocab))
        x = self.tok_embd.W[token].astype(np.float64)
        routing = []
        for il, L in enumerate(self.layers):
            attn = self.attention_mla if self.mla else self.attention
            x = x + attn(il, L, rms_norm(x, L["attn_norm"], self.eps))
            h = rms_norm(x, L["ffn_norm"], self.eps)
            x = x + (self.moe(L, h, routing) if "gate_inp" in L else self.dense_ffn(L, h))
        self.pos += 1
        self.routing.append(routing)
        self.hidden.append(x)
        return self.output.mv(rms_norm(x, self.output_norm, self.eps))

    def mtp_step(self, pos, h, token):
        """The first MTP layer at position pos (DeepSeek-V3's MTP module, llama.cpp's MTP graphs): h the hidden
        state of position pos (or the previous step's output), token the one at pos + 1; its cache is cut to the
        positions before pos first. Returns (float64 logits of the token at pos + 2, the output hidden state)."""
        M, il = self.mtp, self.n_layer
        L = M["block"]
        emb = (M["embed"] or self.tok_embd).W[token].astype(np.float64)
        x = M["eh_proj"].mv(np.concatenate([rms_norm(emb, M["enorm"], self.eps), rms_norm(h, M["hnorm"], self.eps)]))
        del self.kcache[il][pos:]
        del self.vcache[il][pos:]
        saved, self.pos = self.pos, pos
        attn = self.attention_mla if self.mla else self.attention
        x = x + attn(il, L, rms_norm(x, L["attn_norm"], self.eps))
        hn = rms_norm(x, L["ffn_norm"], self.eps)
        x = x + (self.moe(L, hn, []) if "gate_inp" in L else self.dense_ffn(L, hn))
        self.pos = saved
        norm = M["head_norm"] if M["head_norm"] is not None else self.output_norm
        return (M["head"] or self.output).mv(rms_norm(x, norm, self.eps)), x

    def mtp_draft(self, seq, tokens):
        """After seq (all fed: self.hidden holds its positions), the MTP steps of a draft: step 0 at the last
        position with tokens[0] (the token after seq), step j at the next position with tokens[j] and step j-1's
        output. The layer's cache is filled from scratch over seq's positions first. Returns the rows (float64)."""
        n = len(seq)
        for p in range(n - 1):
            self.mtp_step(p, self.hidden[p], seq[p + 1])
        rows, h = [], self.hidden[n - 1]
        for j, t in enumerate(tokens):
            row, h = self.mtp_step(n - 1 + j, h, t)
            rows.append(row)
        return np.array(rows)


def generate(model, prompt_ids, steps, force_ids=None):
    """Returns (logits float64 (steps, n_vocab), argmax ids list, fed ids list)."""
    if not prompt_ids:
        raise ValueError("empty prompt")
    model.reset()
    logits = None
    for t in prompt_ids:
        logits = model.step(t)
    rows, argmaxes, fed = [logits], [int(np.argmax(logits))], []
    for i in range(1, steps):
        if force_ids is not None:
            if i - 1 >= len(force_ids):
                raise ValueError("--force-ids has %d ids, %d steps need %d" % (len(force_ids), steps, steps - 1))
            nxt = force_ids[i - 1]
        else:
            nxt = argmaxes[-1]
        fed.append(nxt)
        logits = model.step(nxt)
        rows.append(logits)
        argmaxes.append(int(np.argmax(logits)))
    return np.array(rows), argmaxes, fed


def parse_ids(s):
    return [int(t) for t in s.replace(",", " ").split()]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", required=True, help="prompt token ids, space-separated")
    ap.add_argument("--steps", type=int, required=True, help="rows of logits to produce")
    ap.add_argument("--force-ids", help="continuation ids to feed instead of the greedy choice")
    ap.add_argument("--logits-out", required=True)
    ap.add_argument("--tokens-out")
    ap.add_argument("--no-emulate-act", action="store_true",
                    help="do not quantize matrix-product inputs to the weight's dot format")
    a = ap.parse_args(argv)
    try:
        m = Model(a.model, emulate=not a.no_emulate_act)
        force = parse_ids(a.force_ids) if a.force_ids is not None else None
        rows, argmaxes, _ = generate(m, parse_ids(a.ids), a.steps, force)
    except (GGUFError, ValueError, OSError) as e:
        print("forward_ref: %s" % e, file=sys.stderr)
        return 1
    rows.astype("<f4").tofile(a.logits_out)
    if a.tokens_out:
        with open(a.tokens_out, "w") as f:
            f.write(" ".join(str(t) for t in argmaxes) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
