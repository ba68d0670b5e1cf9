"""Independent GGUF (v2, v3) reader for the float64 reference.

Written from the GGUF specification (ggml's docs/gguf.md); shares no code with Guild's C reader.
The whole file is memory-mapped with numpy; tensor data are returned as uint8 views into the mapping.
"""

import struct

import numpy as np

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# GGUF metadata value types
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)

_SCALAR = {
    UINT8: "<u1", INT8: "<i1", UINT16: "<u2", INT16: "<i2", UINT32: "<u4", INT32: "<i4",
    FLOAT32: "<f4", BOOL: "<u1", UINT64: "<u8", INT64: "<i8", FLOAT64: "<f8",
}

# ggml tensor types: id -> (name, elements per block, bytes per block). From ggml-common.h's block structs.
TYPES = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292), 16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2),
    26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66), 39: ("MXFP4", 32, 17),
}
TYPE_BY_NAME = {v[0]: k for k, v in TYPES.items()}


class GGUFError(Exception):
    pass


class Tensor:
    """One tensor: name, ggml type id, shape ne (ne[0] innermost), raw bytes (uint8 view into the file)."""

    def __init__(self, name, ttype, ne, offset, nbytes, data):
        self.name = name
        self.type = ttype
        self.ne = ne
        self.offset = offset
        self.nbytes = nbytes
        self.data = data

    @property
    def type_name(self):
        return TYPES[self.type][0]

    @property
    def n_elements(self):
        n = 1
        for d in self.ne:
            n *= d
        return n

    def __repr__(self):
        return "Tensor(%s, %s, ne=%s)" % (self.name, self.type_name, list(self.ne))


class _Cursor:
    def __init__(self, buf, path):
        self.buf = buf
        self.pos = 0
        self.path = path

    def need(self, n):
        if n < 0 or self.pos + n > len(self.buf):
            raise GGUFError("%s: truncated at byte %d (need %d more bytes)" % (self.path, self.pos, n))

    def scalar(self, vtype):
        dt = np.dtype(_SCALAR[vtype])
        self.need(dt.itemsize)
        v = np.frombuffer(self.buf, dtype=dt, count=1, offset=self.pos)[0]
        self.pos += dt.itemsize
        if vtype == BOOL:
            return bool(v)
        if vtype in (FLOAT32, FLOAT64):
            return float(v)
        return int(v)

    def u32(self):
        return self.scalar(UINT32)

    def u64(self):
        return self.scalar(UINT64)

    def string(self):
        n = self.u64()
        self.need(n)
        s = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return s.decode("utf-8", errors="surrogateescape")

    def value(self, vtype, depth=0):
        if vtype == STRING:
            return self.string()
        if vtype == ARRAY:
            if depth > 8:
                raise GGUFError("%s: arrays nested too deep at byte %d" % (self.path, self.pos))
            etype = self.u32()
            n = self.u64()
            if etype in _SCALAR:
                dt = np.dtype(_SCALAR[etype])
                self.need(n * dt.itemsize)
                arr = np.frombuffer(self.buf, dtype=dt, count=n, offset=self.pos).copy()
                self.pos += n * dt.itemsize
                return arr.astype(bool) if etype == BOOL else arr
            if etype in (STRING, ARRAY):
                if n > len(self.buf):
                    raise GGUFError("%s: array of %d elements at byte %d exceeds the file" % (self.path, n, self.pos))
                return [self.value(etype, depth + 1) for _ in range(n)]
            raise GGUFError("%s: unknown array element type %d at byte %d" % (self.path, etype, self.pos))
        if vtype in _SCALAR:
            return self.scalar(vtype)
        raise GGUFError("%s: unknown value type %d at byte %d" % (self.path, vtype, self.pos))


class GGUFFile:
    """A parsed GGUF file. Attributes: version, kv (dict key -> value), kv_types (key -> type id),
    tensors (dict name -> Tensor, in file order), alignment, data_offset."""

    def __init__(self, path):
        self.path = path
        self._map = np.memmap(path, dtype=np.uint8, mode="r")
        buf = self._map
        c = _Cursor(buf, path)
        c.need(4)
        if bytes(buf[0:4]) != GGUF_MAGIC:
            raise GGUFError("%s: not a GGUF file (bad magic)" % path)
        c.pos = 4
        self.version = c.u32()
        if self.version not in (2, 3):
            raise GGUFError("%s: unsupported GGUF version %d" % (path, self.version))
        n_tensors = c.u64()
        n_kv = c.u64()
        self.kv = {}
        self.kv_types = {}
        for _ in range(n_kv):
            key = c.string()
            vtype = c.u32()
            self.kv[key] = c.value(vtype)
            self.kv_types[key] = vtype
        self.alignment = int(self.kv.get("general.alignment", DEFAULT_ALIGNMENT))
        if self.alignment <= 0 or self.alignment & (self.alignment - 1):
            raise GGUFError("%s: general.alignment %d is not a power of two" % (path, self.alignment))
        infos = []
        for _ in range(n_tensors):
            name = c.string()
            n_dims = c.u32()
            if not 1 <= n_dims <= 4:
                raise GGUFError("%s: tensor %s has %d dimensions" % (path, name, n_dims))
            ne = tuple(c.u64() for _ in range(n_dims))
            ttype = c.u32()
            off = c.u64()
            infos.append((name, ne, ttype, off))
        self.data_offset = (c.pos + self.alignment - 1) // self.alignment * self.alignment
        self.tensors = {}
        for name, ne, ttype, off in infos:
            if ttype not in TYPES:
                raise GGUFError("%s: tensor %s has unknown type %d" % (path, name, ttype))
            _, be, bb = TYPES[ttype]
            n = 1
            for d in ne:
                n *= d
            if ne[0] % be:
                raise GGUFError("%s: tensor %s: ne[0]=%d is not a multiple of the block size %d"
                                % (path, name, ne[0], be))
            nbytes = n // be * bb
            start = self.data_offset + off
            if off % self.alignment or start + nbytes > len(buf):
                raise GGUFError("%s: tensor %s data [%d, %d) lies outside the file or is misaligned"
                                % (path, name, start, start + nbytes))
            if name in self.tensors:
                raise GGUFError("%s: duplicate tensor %s" % (path, name))
            self.tensors[name] = Tensor(name, ttype, ne, start, nbytes, buf[start:start + nbytes])

    def get(self, key, default=None):
        return self.kv.get(key, default)

    def require(self, key):
        if key not in self.kv:
            raise GGUFError("%s: missing metadata key %s" % (self.path, key))
        return self.kv[key]

    def tensor(self, name):
        return self.tensors.get(name)


def _dump(path):
    g = GGUFFile(path)
    print("version %d, alignment %d, data at %d" % (g.version, g.alignment, g.data_offset))
    for k, v in g.kv.items():
        if isinstance(v, (list, np.ndarray)) and len(v) > 8:
            v = "[%d elements: %s ...]" % (len(v), list(v[:4]))
        print("kv %s = %r" % (k, v))
    for t in g.tensors.values():
        print("tensor %-32s %-7s %s" % (t.name, t.type_name, list(t.ne)))


if __name__ == "__main__":
    import sys
    _dump(sys.argv[1])
