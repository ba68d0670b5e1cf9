#!/usr/bin/env python3
"""Checks core/quant/iq_tables.c, the IQ lookup tables Guild's kernels read:

1. it is exactly what core/quant/gen_iq_tables.py generates (nobody edited the generated file by hand);
2. every grid equals, entry for entry, the independent transcription in tests/ref/iq_grids.py (taken from
   ggml-quants.c's kgrid arrays and ggml-common.h, where gen_iq_tables.py took gguf-py's packed hex strings).

usage: quant_tables_check.py SRCDIR      exit 0 ok, 1 mismatch
"""
import os
import re
import subprocess
import sys


def main():
    src = sys.argv[1]
    tables_c = open(os.path.join(src, "core/quant/iq_tables.c")).read()
    fails = 0

    gen = subprocess.run([sys.executable, os.path.join(src, "core/quant/gen_iq_tables.py")],
                         capture_output=True, text=True, check=True)
    if gen.stdout != tables_c:
        print("FAIL: core/quant/iq_tables.c differs from the output of gen_iq_tables.py")
        fails += 1
    else:
        print("ok   iq_tables.c is gen_iq_tables.py's output")

    sys.path.insert(0, os.path.join(src, "tests/ref"))
    import iq_grids  # noqa: E402  (needs NumPy)
    ref = iq_grids.load_grids()
    for name in ("iq2xxs", "iq2xs", "iq2s", "iq3xxs", "iq3s", "iq1s"):
        m = re.search(r"quant_%s_grid\[(\d+)\] = \{(.*?)\};" % name, tables_c, re.S)
        ours = [int(v, 16) for v in re.findall(r"0x([0-9a-f]+)", m.group(2))]
        theirs = [int.from_bytes(bytes(row), "little") for row in ref[name]]
        bad = [i for i in range(max(len(ours), len(theirs)))
               if i >= len(ours) or i >= len(theirs) or ours[i] != theirs[i]]
        if bad or len(ours) != int(m.group(1)):
            print("FAIL: %s_grid differs from tests/ref/iq_grids.py at entries %s" % (name, bad[:8]))
            fails += 1
        else:
            print("ok   %s_grid: %d entries identical to the independent transcription" % (name, len(ours)))
    print("%d passed, %d failed" % (7 - fails, fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
