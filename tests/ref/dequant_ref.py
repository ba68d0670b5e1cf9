"""Float64 dequantization of ggml/GGUF tensor types, and ggml's activation quantizers (Q8_0, Q8_1, Q8_K).

Independent of Guild's C code: written from ggml's block layouts (ggml-common.h) and reference routines
(dequantize_row_*, quantize_row_q8_*_ref in ggml-quants.c). Every function is vectorised over blocks.

dequantize(type_id, raw_uint8, n) -> float64 array of n elements.
"""

import numpy as np

from gguf_ref import TYPES, TYPE_BY_NAME

QK_K = 256

# ggml-common.h: kvalues_iq4nl and kvalues_mxfp4 (the latter is E2M1 doubled; the E8M0 scale is halved).
KVALUES_IQ4NL = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.float64)
KVALUES_MXFP4 = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.float64)
IQ1S_DELTA = 0.125


def _blocks(raw, n, type_id):
    _, be, bb = TYPES[type_id]
    if n % be:
        raise ValueError("%d elements are not a whole number of %s blocks" % (n, TYPES[type_id][0]))
    nb = n // be
    raw = np.asarray(raw, dtype=np.uint8).reshape(-1)
    if raw.size < nb * bb:
        raise ValueError("%s: %d bytes for %d elements, need %d" % (TYPES[type_id][0], raw.size, n, nb * bb))
    return np.ascontiguousarray(raw[:nb * bb]).reshape(nb, bb)


def _f16(b, off):
    """fp16 field at byte `off` of each block -> float64 column (nb, 1)."""
    return np.ascontiguousarray(b[:, off:off + 2]).view("<f2").astype(np.float64)


def _u16(b, off, count=1):
    return np.ascontiguousarray(b[:, off:off + 2 * count]).view("<u2").astype(np.int64)


def _u32(b, off, count=1):
    return np.ascontiguousarray(b[:, off:off + 4 * count]).view("<u4").astype(np.int64)


def _nibbles(qs):
    """(nb, 16) bytes -> (nb, 32): low nibbles are elements 0..15, high nibbles 16..31 (ggml's 32-blocks)."""
    q = qs.astype(np.int64)
    return np.concatenate([q & 0xF, q >> 4], axis=1)


def _q4_0(b):
    return (_nibbles(b[:, 2:18]) - 8) * _f16(b, 0)


def _q4_1(b):
    return _nibbles(b[:, 4:20]) * _f16(b, 0) + _f16(b, 2)


def _q5_high(qh):
    """qh: (nb, 1) uint32 -> (nb, 32) fifth bits (as 0/16) of the elements."""
    j = np.arange(32)
    return ((qh >> j) & 1) << 4


def _q5_0(b):
    return ((_nibbles(b[:, 6:22]) | _q5_high(_u32(b, 2))) - 16) * _f16(b, 0)


def _q5_1(b):
    return (_nibbles(b[:, 8:24]) | _q5_high(_u32(b, 4))) * _f16(b, 0) + _f16(b, 2)


def _q8_0(b):
    return b[:, 2:34].view(np.int8).astype(np.float64) * _f16(b, 0)


def _q8_1(b):
    return b[:, 4:36].view(np.int8).astype(np.float64) * _f16(b, 0)


def _q8_k(b):
    d = np.ascontiguousarray(b[:, 0:4]).view("<f4").astype(np.float64)
    return b[:, 4:260].view(np.int8).astype(np.float64) * d


def _q2_k(b):
    nb = b.shape[0]
    sc = b[:, 0:16].astype(np.int64).reshape(nb, 2, 4, 2)          # [n, j, h]
    qs = b[:, 16:80].astype(np.int64).reshape(nb, 2, 1, 2, 16)     # [n, -, h, l]
    shift = (2 * np.arange(4)).reshape(1, 1, 4, 1, 1)
    q = (qs >> shift) & 3                                          # [n, j, h, l]
    d, dmin = _f16(b, 80).reshape(nb, 1, 1, 1), _f16(b, 82).reshape(nb, 1, 1, 1)
    y = (d * (sc & 0xF))[..., None] * q - (dmin * (sc >> 4))[..., None]
    return y.reshape(nb, 256)


def _q3_k_scales(s):
    """12 packed bytes -> 16 signed 6-bit scales (already minus 32)."""
    s = s.astype(np.int64)
    k = np.arange(16)
    low = np.where(k < 8, s[:, k % 8] & 0xF, s[:, k % 8] >> 4)
    high = (s[:, 8 + k % 4] >> (2 * (k // 4))) & 3
    return (low | (high << 4)) - 32


def _q3_k(b):
    nb = b.shape[0]
    hm = b[:, 0:32].astype(np.int64).reshape(nb, 1, 1, 2, 16)        # [-, -, h, l]
    qs = b[:, 32:96].astype(np.int64).reshape(nb, 2, 1, 2, 16)       # [n, -, h, l]
    sc = _q3_k_scales(b[:, 96:108]).reshape(nb, 2, 4, 2)             # [n, j, h]
    d = _f16(b, 108).reshape(nb, 1, 1, 1)
    j = np.arange(4).reshape(1, 1, 4, 1, 1)
    n = np.arange(2).reshape(1, 2, 1, 1, 1)
    q = (qs >> (2 * j)) & 3
    hbit = (hm >> (4 * n + j)) & 1
    q = q - np.where(hbit == 1, 0, 4)
    return ((d * sc)[..., None] * q).reshape(nb, 256)


def _k4_scales(s):
    """get_scale_min_k4 for j = 0..7 of 12 packed bytes -> (scales, mins), each (nb, 8)."""
    s = s.astype(np.int64)
    sc = np.concatenate([s[:, 0:4] & 63, (s[:, 8:12] & 0xF) | ((s[:, 0:4] >> 6) << 4)], axis=1)
    mn = np.concatenate([s[:, 4:8] & 63, (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)], axis=1)
    return sc, mn


def _q4_k(b):
    nb = b.shape[0]
    sc, mn = _k4_scales(b[:, 4:16])
    qs = b[:, 16:144].astype(np.int64).reshape(nb, 4, 1, 32)               # [c, -, l]
    q = (qs >> (4 * np.arange(2)).reshape(1, 1, 2, 1)) & 0xF               # [c, h, l]
    d, dmin = _f16(b, 0), _f16(b, 2)
    y = (d * sc).reshape(nb, 4, 2, 1) * q - (dmin * mn).reshape(nb, 4, 2, 1)
    return y.reshape(nb, 256)


def _q5_k(b):
    nb = b.shape[0]
    sc, mn = _k4_scales(b[:, 4:16])
    qh = b[:, 16:48].astype(np.int64).reshape(nb, 1, 1, 32)
    qs = b[:, 48:176].astype(np.int64).reshape(nb, 4, 1, 32)
    h = np.arange(2).reshape(1, 1, 2, 1)
    c = np.arange(4).reshape(1, 4, 1, 1)
    q = ((qs >> (4 * h)) & 0xF) + (((qh >> (2 * c + h)) & 1) << 4)
    d, dmin = _f16(b, 0), _f16(b, 2)
    y = (d * sc).reshape(nb, 4, 2, 1) * q - (dmin * mn).reshape(nb, 4, 2, 1)
    return y.reshape(nb, 256)


def _q6_k(b):
    nb = b.shape[0]
    ql = b[:, 0:128].astype(np.int64).reshape(nb, 2, 2, 32)     # [n, g&1, l]
    qh = b[:, 128:192].astype(np.int64).reshape(nb, 2, 1, 32)   # [n, -, l]
    sc = b[:, 192:208].view(np.int8).astype(np.int64).reshape(nb, 2, 4, 2)  # [n, g, l//16]
    d = _f16(b, 208).reshape(nb, 1, 1, 1)
    g = np.arange(4)
    low = (ql[:, :, g & 1, :] >> (4 * (g >> 1)).reshape(1, 1, 4, 1)) & 0xF     # [n, g, l]
    high = (qh >> (2 * g).reshape(1, 1, 4, 1)) & 3
    q = (low | (high << 4)) - 32
    scl = np.repeat(sc, 16, axis=3)                                             # [n, g, l]
    return (d * scl * q).reshape(nb, 256)


def _iq4_nl(b):
    return KVALUES_IQ4NL[_nibbles(b[:, 2:18])] * _f16(b, 0)


def _iq4_xs(b):
    nb = b.shape[0]
    d = _f16(b, 0)
    sh = _u16(b, 2)
    sl = b[:, 4:8].astype(np.int64)
    ib = np.arange(8)
    ls = ((sl[:, ib // 2] >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4)   # (nb, 8)
    qs = b[:, 8:136].reshape(nb * 8, 16)
    v = KVALUES_IQ4NL[_nibbles(qs)].reshape(nb, 8, 32)
    return ((d * (ls - 32)).reshape(nb, 8, 1) * v).reshape(nb, 256)


def _mxfp4(b):
    e = b[:, 0:1].astype(np.int64)
    d = np.ldexp(1.0, e - 128)   # GGML_E8M0_TO_FP32_HALF(e) = 2^(e-127) / 2
    return KVALUES_MXFP4[_nibbles(b[:, 1:17])] * d


# ---- IQ grid types ------------------------------------------------------------------------------------------

_GRIDS = None


def grids():
    """ggml's IQ lattice tables, rebuilt from tests/ref/iq_grids.txt (see that file). dict name -> uint8 array
    (n_entries, bytes_per_entry)."""
    global _GRIDS
    if _GRIDS is None:
        from iq_grids import load_grids
        _GRIDS = load_grids()
    return _GRIDS


def _ksigns():
    """ggml's ksigns_iq2xs: 7 sign bits plus an 8th bit making the count of set bits even."""
    i = np.arange(128)
    par = np.zeros(128, dtype=np.int64)
    for k in range(7):
        par ^= (i >> k) & 1
    return i | (par << 7)


KSIGNS = _ksigns()


def _sign_mult(signbytes):
    """(...,) sign bytes -> (..., 8) of +1/-1 (bit j set -> element j negative)."""
    bits = (signbytes[..., None] >> np.arange(8)) & 1
    return 1.0 - 2.0 * bits


def _iq2_xxs(b):
    nb = b.shape[0]
    d = _f16(b, 0).reshape(nb, 1)
    qs = b[:, 2:66].reshape(nb, 8, 8)                      # per 32-block: 4 grid indices, then a uint32
    aux1 = np.ascontiguousarray(qs[:, :, 4:8]).view("<u4").astype(np.int64).reshape(nb, 8)
    db = d * (0.5 + (aux1 >> 28)) * 0.25                   # (nb, 8)
    g = grids()["iq2xxs"][qs[:, :, 0:4].astype(np.int64)].astype(np.float64)     # (nb, 8, 4, 8)
    l = np.arange(4)
    signs = KSIGNS[(aux1[:, :, None] >> (7 * l)) & 127]   # (nb, 8, 4)
    return (db[:, :, None, None] * g * _sign_mult(signs)).reshape(nb, 256)


def _iq2_xs(b):
    nb = b.shape[0]
    d = _f16(b, 0).reshape(nb, 1)
    q = _u16(b, 2, 32).reshape(nb, 8, 4)
    sc = b[:, 66:74].astype(np.int64)                       # (nb, 8)
    db = d[:, :, None] * (0.5 + ((sc[:, :, None] >> (4 * (np.arange(4) // 2))) & 0xF)) * 0.25   # (nb, 8, 4)
    g = grids()["iq2xs"][q & 511].astype(np.float64)
    return (db[..., None] * g * _sign_mult(KSIGNS[q >> 9])).reshape(nb, 256)


def _iq2_s(b):
    nb = b.shape[0]
    d = _f16(b, 0).reshape(nb, 1)
    qs = b[:, 2:34].astype(np.int64).reshape(nb, 8, 4)
    signs = b[:, 34:66].astype(np.int64).reshape(nb, 8, 4)
    qh = b[:, 66:74].astype(np.int64).reshape(nb, 8, 1)
    sc = b[:, 74:82].astype(np.int64)
    l = np.arange(4)
    idx = qs | ((qh << (8 - 2 * l)) & 0x300)
    db = d[:, :, None] * (0.5 + ((sc[:, :, None] >> (4 * (l // 2))) & 0xF)) * 0.25
    g = grids()["iq2s"][idx].astype(np.float64)
    return (db[..., None] * g * _sign_mult(signs)).reshape(nb, 256)


def _iq3_xxs(b):
    nb = b.shape[0]
    d = _f16(b, 0).reshape(nb, 1)
    qs = b[:, 2:66].astype(np.int64).reshape(nb, 8, 4, 2)          # [ib32, l, half]
    aux = _u32(b, 66, 8).reshape(nb, 8)
    db = d * (0.5 + (aux >> 28)) * 0.5
    g = grids()["iq3xxs"][qs].astype(np.float64).reshape(nb, 8, 4, 8)
    signs = KSIGNS[(aux[:, :, None] >> (7 * np.arange(4))) & 127]
    return (db[:, :, None, None] * g * _sign_mult(signs)).reshape(nb, 256)


def _iq3_s(b):
    nb = b.shape[0]
    d = _f16(b, 0).reshape(nb, 1)
    qs = b[:, 2:66].astype(np.int64).reshape(nb, 8, 4, 2)
    qh = b[:, 66:74].astype(np.int64).reshape(nb, 8, 1)
    signs = b[:, 74:106].astype(np.int64).reshape(nb, 8, 4)
    sc = b[:, 106:110].astype(np.int64)
    ib = np.arange(8)
    db = d * (1 + 2 * ((sc[:, ib // 2] >> (4 * (ib % 2))) & 0xF))    # (nb, 8)
    l = np.arange(4)
    idx1 = qs[..., 0] | ((qh << (8 - 2 * l)) & 256)
    idx2 = qs[..., 1] | ((qh << (7 - 2 * l)) & 256)
    gr = grids()["iq3s"]
    g = np.concatenate([gr[idx1], gr[idx2]], axis=-1).astype(np.float64)   # (nb, 8, 4, 8)
    return (db[:, :, None, None] * g * _sign_mult(signs)).reshape(nb, 256)


def _iq1_s(b):
    nb = b.shape[0]
    d = _f16(b, 0).reshape(nb, 1)
    qs = b[:, 2:34].astype(np.int64).reshape(nb, 8, 4)
    qh = _u16(b, 34, 8).reshape(nb, 8)
    dl = d * (2 * ((qh >> 12) & 7) + 1)
    delta = np.where(qh & 0x8000, -IQ1S_DELTA, IQ1S_DELTA)
    idx = qs | (((qh[:, :, None] >> (3 * np.arange(4))) & 7) << 8)
    g = grids()["iq1s"][idx].view(np.int8).astype(np.float64)          # (nb, 8, 4, 8)
    return (dl[:, :, None, None] * (g + delta[:, :, None, None])).reshape(nb, 256)


def _iq1_m(b):
    nb = b.shape[0]
    qs = b[:, 0:32].astype(np.int64).reshape(nb, 8, 4)
    qh = b[:, 32:48].astype(np.int64).reshape(nb, 8, 2)
    sc = _u16(b, 48, 4)                                                 # (nb, 4)
    u = (sc[:, 0] >> 12) | ((sc[:, 1] >> 8) & 0x00F0) | ((sc[:, 2] >> 4) & 0x0F00) | (sc[:, 3] & 0xF000)
    d = u.astype("<u2").view("<f2").astype(np.float64).reshape(nb, 1)
    ib = np.arange(8)
    s = sc[:, ib // 2]
    dl1 = d * (2 * ((s >> (6 * (ib % 2))) & 7) + 1)
    dl2 = d * (2 * ((s >> (6 * (ib % 2) + 3)) & 7) + 1)
    dl = np.stack([dl1, dl1, dl2, dl2], axis=2)                         # (nb, 8, 4)
    h = qh[:, :, [0, 0, 1, 1]]                                          # qh byte of each l
    shift = np.array([8, 4, 8, 4])
    idx = qs | ((h << shift) & 0x700)
    dbit = np.array([0x08, 0x80, 0x08, 0x80])
    delta = np.where(h & dbit, -IQ1S_DELTA, IQ1S_DELTA)
    g = grids()["iq1s"][idx].view(np.int8).astype(np.float64)
    return (dl[..., None] * (g + delta[..., None])).reshape(nb, 256)


def _f32(raw, n):
    return np.frombuffer(np.asarray(raw, dtype=np.uint8).tobytes()[:4 * n], dtype="<f4").astype(np.float64)


def _f16raw(raw, n):
    return np.frombuffer(np.asarray(raw, dtype=np.uint8).tobytes()[:2 * n], dtype="<f2").astype(np.float64)


def _bf16(raw, n):
    u = np.frombuffer(np.asarray(raw, dtype=np.uint8).tobytes()[:2 * n], dtype="<u2").astype(np.uint32) << 16
    return u.view(np.float32).astype(np.float64)


_BLOCK_FUNCS = {
    "Q4_0": _q4_0, "Q4_1": _q4_1, "Q5_0": _q5_0, "Q5_1": _q5_1, "Q8_0": _q8_0, "Q8_1": _q8_1,
    "Q2_K": _q2_k, "Q3_K": _q3_k, "Q4_K": _q4_k, "Q5_K": _q5_k, "Q6_K": _q6_k, "Q8_K": _q8_k,
    "IQ4_NL": _iq4_nl, "IQ4_XS": _iq4_xs, "MXFP4": _mxfp4,
    "IQ2_XXS": _iq2_xxs, "IQ2_XS": _iq2_xs, "IQ2_S": _iq2_s, "IQ3_XXS": _iq3_xxs, "IQ3_S": _iq3_s,
    "IQ1_S": _iq1_s, "IQ1_M": _iq1_m,
}
_PLAIN_FUNCS = {"F32": _f32, "F16": _f16raw, "BF16": _bf16}

SUPPORTED = set(_BLOCK_FUNCS) | set(_PLAIN_FUNCS)


def dequantize(type_id, raw, n):
    """Dequantizes n elements of ggml type `type_id` (int) from raw bytes -> float64 array (n,)."""
    name = TYPES[type_id][0]
    if name in _PLAIN_FUNCS:
        return _PLAIN_FUNCS[name](raw, n)
    if name not in _BLOCK_FUNCS:
        raise ValueError("type %s cannot be dequantized by the reference" % name)
    return _BLOCK_FUNCS[name](_blocks(raw, n, type_id)).reshape(-1)


def block_mins(type_id, raw, n):
    """For Q4_1 / Q5_1: the per-block offset m (fp16) as float64 (n // 32,). ggml's dot products with Q8_1
    activations use m * s_act, where s_act is the activation block's fp16-rounded d * sum(qs)."""
    name = TYPES[type_id][0]
    if name not in ("Q4_1", "Q5_1"):
        raise ValueError("type %s has no per-block offset" % name)
    return _f16(_blocks(raw, n, type_id), 2).reshape(-1)


# ---- activation quantizers (ggml's quantize_row_q8_*_ref, in float32 as the C code computes) ---------------

def _roundf(x32):
    """C roundf (half away from zero) of float32 values -> int64."""
    x = x32.astype(np.float64)
    return (np.sign(x) * np.floor(np.abs(x) + 0.5)).astype(np.int64)


def quantize_q8_0(x):
    """-> (qs int (nb, 32), d float64 (nb, 1) [fp16-rounded]). x: any float array, n a multiple of 32."""
    x = np.asarray(x, dtype=np.float32).reshape(-1, 32)
    amax = np.max(np.abs(x), axis=1, keepdims=True)
    d = (amax / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        idv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    qs = _roundf((x * idv).astype(np.float32))
    return qs, d.astype(np.float16).astype(np.float64)


def quantize_q8_1(x):
    """-> (qs (nb, 32), d (nb, 1), s (nb, 1)); d and s fp16-rounded as ggml stores them (s = fp16(sum * d))."""
    qs, _ = quantize_q8_0(x)   # same d, id and rounding as q8_0
    x = np.asarray(x, dtype=np.float32).reshape(-1, 32)
    amax = np.max(np.abs(x), axis=1, keepdims=True)
    d32 = (amax / np.float32(127)).astype(np.float32)
    s = (qs.sum(axis=1, keepdims=True).astype(np.float32) * d32).astype(np.float32)
    return qs, d32.astype(np.float16).astype(np.float64), s.astype(np.float16).astype(np.float64)


def quantize_q8_k(x):
    """-> (qs (nb, 256), d (nb, 1) float32 value as float64). Max-|x| element with its sign, iscale = -127/max,
    nearest_int (round half to even, float32), clamped to 127."""
    x = np.asarray(x, dtype=np.float32).reshape(-1, QK_K)
    ax = np.abs(x)
    imax = np.argmax(ax, axis=1)                   # first index of the largest |x|, as ggml's strict '>' scan
    mx = x[np.arange(x.shape[0]), imax].reshape(-1, 1)
    zero = mx == 0
    with np.errstate(divide="ignore", invalid="ignore"):
        iscale = (np.float32(-127) / np.where(zero, np.float32(1), mx)).astype(np.float32)
        v = np.rint((iscale * x).astype(np.float32)).astype(np.int64)
        qs = np.minimum(127, v)
        d = (np.float32(1) / iscale).astype(np.float32)
    qs = np.where(zero, 0, qs)
    d = np.where(zero, np.float32(0), d)
    return qs, d.astype(np.float64)


def quantize_activation(dot_type, x):
    """Emulates Guild's quantization of an activation row (length a multiple of the block) to `dot_type`
    ('Q8_0', 'Q8_1', 'Q8_K'). Returns (xq float64 dequantized values, s_blocks or None)."""
    if dot_type == "Q8_0":
        qs, d = quantize_q8_0(x)
        return (qs * d).reshape(-1), None
    if dot_type == "Q8_1":
        qs, d, s = quantize_q8_1(x)
        return (qs * d).reshape(-1), s.reshape(-1)
    if dot_type == "Q8_K":
        qs, d = quantize_q8_k(x)
        return (qs * d).reshape(-1), None
    raise ValueError("no activation quantizer for %s" % dot_type)


# Activation format of each weight type's dot product (ggml's vec_dot_type; Guild's quant_type_info dot_type).
DOT_TYPE = {
    "F32": None, "F16": None, "BF16": None,
    "Q4_0": "Q8_0", "Q5_0": "Q8_0", "Q8_0": "Q8_0", "IQ4_NL": "Q8_0", "MXFP4": "Q8_0",
    "Q4_1": "Q8_1", "Q5_1": "Q8_1",
    "Q2_K": "Q8_K", "Q3_K": "Q8_K", "Q4_K": "Q8_K", "Q5_K": "Q8_K", "Q6_K": "Q8_K", "IQ4_XS": "Q8_K",
    "IQ2_XXS": "Q8_K", "IQ2_XS": "Q8_K", "IQ2_S": "Q8_K", "IQ3_XXS": "Q8_K", "IQ3_S": "Q8_K",
    "IQ1_S": "Q8_K", "IQ1_M": "Q8_K",
}


def type_id(name):
    """ggml type id of a type name in any case ("q4_K", "Q4_K")."""
    return TYPE_BY_NAME[name.upper()]


def quantize_bytes(dot_type, x):
    """ggml's block bytes of x quantized to `dot_type` ('Q8_0', 'Q8_1', 'Q8_K') by the quantizers above."""
    if dot_type == "Q8_0":
        qs, d = quantize_q8_0(x)
        nb = qs.shape[0]
        out = np.zeros((nb, 34), dtype=np.uint8)
        out[:, 0:2] = d.astype("<f2").view(np.uint8).reshape(nb, 2)
        out[:, 2:34] = qs.astype(np.int8).view(np.uint8)
        return out.tobytes()
    if dot_type == "Q8_1":
        qs, d, s = quantize_q8_1(x)
        nb = qs.shape[0]
        out = np.zeros((nb, 36), dtype=np.uint8)
        out[:, 0:2] = d.astype("<f2").view(np.uint8).reshape(nb, 2)
        out[:, 2:4] = s.astype("<f2").view(np.uint8).reshape(nb, 2)
        out[:, 4:36] = qs.astype(np.int8).view(np.uint8)
        return out.tobytes()
    if dot_type == "Q8_K":
        qs, d = quantize_q8_k(x)
        nb = qs.shape[0]
        out = np.zeros((nb, 292), dtype=np.uint8)
        out[:, 0:4] = d.astype("<f4").view(np.uint8).reshape(nb, 4)
        out[:, 4:260] = qs.astype(np.int8).view(np.uint8)
        bsums = qs.reshape(nb, 16, 16).sum(axis=2).astype("<i2")
        out[:, 260:292] = bsums.view(np.uint8).reshape(nb, 32)
        return out.tobytes()
    raise ValueError("no quantizer for %s" % dot_type)
