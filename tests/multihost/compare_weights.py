#!/usr/bin/python3
"""compare_weights.py A B REL: exit 0 when every float32 weight of two safetensors files agrees
within REL relative to its magnitude (floor 1e-2, so weights near zero compare absolutely), as
tests/mpi/multi_worker_train.cpp's compare does. Reads the files itself (no numpy): an 8-byte
little-endian header length, a JSON header, then the raw tensors."""
import json
import struct
import sys


def tensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "F32":
            sys.exit("%s: %s is %s; expected F32" % (path, name, t["dtype"]))
        begin, end = t["data_offsets"]
        out[name] = struct.unpack("<%df" % ((end - begin) // 4), body[begin:end])
    return out


def main():
    a, b, rel = tensors(sys.argv[1]), tensors(sys.argv[2]), float(sys.argv[3])
    if sorted(a) != sorted(b):
        sys.exit("FAIL: different tensors: %s vs %s" % (sorted(a), sorted(b)))
    worst, where = 0.0, None
    for name in a:
        if len(a[name]) != len(b[name]):
            sys.exit("FAIL: %s has %d vs %d elements" % (name, len(a[name]), len(b[name])))
        for i, (x, y) in enumerate(zip(a[name], b[name])):
            err = abs(x - y) / max(1e-2, abs(x), abs(y))
            if err > worst:
                worst, where = err, (name, i, x, y)
    print("worst relative difference %.3g%s, tolerance %g" %
          (worst, " at %s[%d] (%.9g vs %.9g)" % where if where else "", rel))
    sys.exit(0 if worst <= rel else 1)


main()
