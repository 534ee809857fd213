#!/usr/bin/python3
"""compare_weights.py A B REL [--of-movement-from START]: exit 0 when every float32 weight of two
safetensors files agrees within REL relative to its magnitude (floor 1e-2, so weights near zero
compare absolutely), as tests/mpi/multi_worker_train.cpp's compare does; with START, within REL
times the training's own movement instead: the largest change of any weight from START to A.
Reads the files itself (no numpy): an 8-byte little-endian header length, a JSON header, then the
raw tensors."""
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


def same_names(a, b, what):
    if sorted(a) != sorted(b):
        sys.exit("FAIL: different tensors in %s: %s vs %s" % (what, sorted(a), sorted(b)))
    for name in a:
        if len(a[name]) != len(b[name]):
            sys.exit("FAIL: %s has %d vs %d elements" % (name, len(a[name]), len(b[name])))


def main():
    args = sys.argv[1:]
    start = None
    if "--of-movement-from" in args:
        i = args.index("--of-movement-from")
        start = tensors(args[i + 1])
        del args[i:i + 2]
    if len(args) != 3:
        sys.exit("usage: compare_weights.py A B REL [--of-movement-from START]")
    a, b, rel = tensors(args[0]), tensors(args[1]), float(args[2])
    same_names(a, b, "A and B")
    if start is not None:
        same_names(a, start, "A and START")
        movement = max(abs(x - s) for name in a for x, s in zip(a[name], start[name]))
        worst, where = 0.0, None
        for name in a:
            for i, (x, y) in enumerate(zip(a[name], b[name])):
                if abs(x - y) > worst:
                    worst, where = abs(x - y), (name, i, x, y)
        print("largest difference %.3g%s; the largest movement from START %.3g; tolerance %g of it"
              % (worst, " at %s[%d] (%.9g vs %.9g)" % where if where else "", movement, rel))
        sys.exit(0 if movement > 0 and worst <= rel * movement else 1)
    worst, where = 0.0, None
    for name in a:
        for i, (x, y) in enumerate(zip(a[name], b[name])):
            err = abs(x - y) / max(1e-2, abs(x), abs(y))
            if err > worst:
                worst, where = err, (name, i, x, y)
    print("worst relative difference %.3g%s, tolerance %g" %
          (worst, " at %s[%d] (%.9g vs %.9g)" % where if where else "", rel))
    sys.exit(0 if worst <= rel else 1)


main()
