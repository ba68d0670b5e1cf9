"""A tiny GGUF v3 writer used by the reference's own self-tests (round trips through gguf_ref.py, hand-made
models before guild-mkmodel existed, random blocks for the C-vs-Python dequantization check)."""

import struct

import numpy as np

from gguf_ref import (ARRAY, BOOL, FLOAT32, FLOAT64, INT8, INT16, INT32, INT64, STRING, TYPES, UINT8, UINT16,
                      UINT32, UINT64, _SCALAR)


def _pack_str(s):
    b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    return struct.pack("<Q", len(b)) + b


def _pack_value(vtype, v):
    if vtype == STRING:
        return _pack_str(v)
    if vtype == ARRAY:
        etype, items = v
        out = struct.pack("<IQ", etype, len(items))
        if etype in _SCALAR:
            return out + np.asarray(items, dtype=_SCALAR[etype]).tobytes()
        return out + b"".join(_pack_value(etype, it) for it in items)
    return np.asarray(v, dtype=_SCALAR[vtype]).tobytes()


def write_gguf(path, kvs, tensors, alignment=32, version=3):
    """kvs: list of (key, value_type, value); an ARRAY value is (element_type, list) and may nest.
    tensors: list of (name, ggml_type_id, ne tuple, raw bytes). Data are laid out in order, aligned."""
    head = bytearray()
    head += b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for key, vtype, v in kvs:
        head += _pack_str(key) + struct.pack("<I", vtype) + _pack_value(vtype, v)
    offsets = []
    off = 0
    for name, ttype, ne, raw in tensors:
        _, be, bb = TYPES[ttype]
        n = int(np.prod(ne))
        assert n % be == 0 and len(raw) == n // be * bb, "tensor %s: %d bytes for %s" % (name, len(raw), ne)
        offsets.append(off)
        off += (len(raw) + alignment - 1) // alignment * alignment
    for (name, ttype, ne, raw), o in zip(tensors, offsets):
        head += _pack_str(name) + struct.pack("<I", len(ne)) + struct.pack("<%dQ" % len(ne), *ne)
        head += struct.pack("<IQ", ttype, o)
    pad = (-len(head)) % alignment
    with open(path, "wb") as f:
        f.write(head)
        f.write(b"\0" * pad)
        for name, ttype, ne, raw in tensors:
            f.write(raw)
            f.write(b"\0" * ((-len(raw)) % alignment))


def random_blocks(type_name, n, rng, scale=0.02, wild=False):
    """Random but well-formed blocks of `type_name` for n elements: random quant bytes, scale fields set so the
    values have magnitude ~scale. wild=True instead gives every fp16 scale field a random finite value of any
    exponent (subnormals included), to reach rounding corner cases. Returns raw bytes."""
    from gguf_ref import TYPE_BY_NAME
    tid = TYPE_BY_NAME[type_name]
    _, be, bb = TYPES[tid]
    nb = n // be
    if type_name == "F32":
        return (rng.standard_normal(n) * scale).astype("<f4").tobytes()
    if type_name == "F16":
        return (rng.standard_normal(n) * scale).astype("<f2").tobytes()
    if type_name == "BF16":
        x = (rng.standard_normal(n) * scale).astype("<f4").view("<u4")
        return ((x + 0x8000) >> 16).astype("<u2").tobytes()
    b = rng.integers(0, 256, size=(nb, bb), dtype=np.uint8)

    def put_f16(off, val):
        if wild:
            u = rng.integers(0, 1 << 16, size=nb).astype(np.uint16)
            u = np.where((u & 0x7C00) == 0x7C00, u & 0xBFFF, u)   # no inf/nan: exponent 31 -> 15
            b[:, off:off + 2] = u.astype("<u2").view(np.uint8).reshape(nb, 2)
            return
        b[:, off:off + 2] = np.asarray(val, dtype="<f2").reshape(nb, 1).view(np.uint8).reshape(nb, 2)

    def rnd(s):
        return s * (0.5 + rng.random(nb))

    # The fp16 fields per layout (ggml-common.h). Levels per type fix the magnitude of d.
    f16_fields = {
        "Q4_0": [(0, scale / 8)], "Q4_1": [(0, scale / 8), (2, -scale)], "Q5_0": [(0, scale / 16)],
        "Q5_1": [(0, scale / 16), (2, -scale)], "Q8_0": [(0, scale / 127)], "Q8_1": [(0, scale / 127), (2, 0.0)],
        "Q2_K": [(80, scale / 20), (82, scale / 40)], "Q3_K": [(108, scale / 64)],
        "Q4_K": [(0, scale / 200), (2, scale / 100)], "Q5_K": [(0, scale / 400), (2, scale / 100)],
        "Q6_K": [(208, scale / 2000)], "IQ4_NL": [(0, scale / 100)], "IQ4_XS": [(0, scale / 1500)],
        "IQ2_XXS": [(0, scale / 60)], "IQ2_XS": [(0, scale / 60)], "IQ2_S": [(0, scale / 60)],
        "IQ3_XXS": [(0, scale / 60)], "IQ3_S": [(0, scale / 300)], "IQ1_S": [(0, scale / 8)],
    }
    if type_name == "MXFP4" and wild:
        b[:, 0] = rng.integers(0, 255, size=nb).astype(np.uint8)
    elif type_name == "MXFP4":
        e = np.round(np.log2(scale / 4.0)) + 128
        b[:, 0] = np.clip(e + rng.integers(-1, 2, size=nb), 1, 254).astype(np.uint8)
    elif type_name == "IQ1_M":
        # The block's fp16 scale is spread over the top nibbles of the four scale words.
        d = np.asarray(rnd(scale / 8), dtype="<f2").view("<u2").astype(np.int64)
        if wild:
            d = rng.integers(0, 1 << 16, size=nb)
            d = np.where((d & 0x7C00) == 0x7C00, d & 0xBFFF, d)
        sc = b[:, 48:56].copy().view("<u2").astype(np.int64)
        sc[:, 0] = (sc[:, 0] & 0x0FFF) | ((d & 0x000F) << 12)
        sc[:, 1] = (sc[:, 1] & 0x0FFF) | ((d & 0x00F0) << 8)
        sc[:, 2] = (sc[:, 2] & 0x0FFF) | ((d & 0x0F00) << 4)
        sc[:, 3] = (sc[:, 3] & 0x0FFF) | (d & 0xF000)
        b[:, 48:56] = sc.astype("<u2").view(np.uint8).reshape(nb, 8)
    elif type_name in f16_fields:
        for off, s in f16_fields[type_name]:
            put_f16(off, rnd(s) if s else 0.0)
    elif type_name == "Q8_K":
        b[:, 0:4] = np.asarray(rnd(scale / 127), dtype="<f4").reshape(nb, 1).view(np.uint8).reshape(nb, 4)
    else:
        raise ValueError("no random block generator for %s" % type_name)
    return b.tobytes()
