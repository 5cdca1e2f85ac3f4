#!/usr/bin/python3
"""The largest |a - b| over the tensors of two safetensors files of the same
names and shapes (F32), printed as 'maxdiff X TENSOR'. Usage: A B"""
import json
import struct
import sys

import numpy as np


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    head = json.loads(data[8:8 + n])
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        lo, hi = t["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + lo:8 + n + hi], dtype="<f4")
    return out


a, b = load(sys.argv[1]), load(sys.argv[2])
if sorted(a) != sorted(b):
    sys.exit("st_maxdiff: the files hold different tensors")
worst, at = 0.0, ""
for k in a:
    d = float(np.max(np.abs(a[k].astype(np.float64) - b[k]))) if a[k].size else 0.0
    if d > worst:
        worst, at = d, k
print("maxdiff %.3e %s" % (worst, at))
