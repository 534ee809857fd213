#!/bin/bash
# `mpirun -np 2 lockstep train --data '<4 TFRecord shards>' --auto-shard-policy file`: worker w
# reads exactly the shards j with j mod 2 == w (each says which), both train the same number of
# steps, and the chief reports the --validation-data test line. The shards (tf.train.Example
# {image: a PNG fixture written by pngjs, label}) are framed and encoded by a Python
# transcription of the formats, not by Lockstep. Shard j holds 2 + j records, so the workers'
# counts differ (2 + 4 and 3 + 5): they agree on the smaller one.
#   run_cli_data_file_shard.sh <mpirun> <lockstep> <fixtures dir>
set -u
MPIRUN=$1 LOCKSTEP=$2 FIXTURES=$3
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
python3 - "$DIR" "$FIXTURES/grey_5x3.png" <<'PY'
import struct, sys
d, png = sys.argv[1], open(sys.argv[2], "rb").read()
def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c ^= x
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    return c ^ 0xFFFFFFFF
def mask(c):
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
def varint(v):
    out = b""
    while v >= 0x80:
        out += bytes([(v & 0x7F) | 0x80]); v >>= 7
    return out + bytes([v])
def field(n, payload):
    return varint(n << 3 | 2) + varint(len(payload)) + payload
def example(label):
    feats = {b"image": field(1, field(1, png)), b"label": field(3, field(1, varint(label)))}
    return field(1, b"".join(field(1, field(1, k) + field(2, v)) for k, v in feats.items()))
def frame(r):
    n = struct.pack("<Q", len(r))
    return n + struct.pack("<I", mask(crc32c(n))) + r + struct.pack("<I", mask(crc32c(r)))
for s in range(4):
    with open(f"{d}/train-{s}-of-4.tfrecord", "wb") as f:
        for i in range(2 + s):
            f.write(frame(example(i % 2)))
PY
timeout -k 5 150 "$MPIRUN" --oversubscribe --bind-to none -np 2 \
  "$LOCKSTEP" train --data "$DIR/train-*-of-4.tfrecord" --validation-data "$DIR/train-*-of-4.tfrecord" \
  --auto-shard-policy file --replicas 1 --epochs 2 --global-batch-size 2 --verbose 2 --timeout 60 \
  --history "$DIR/h.json" >"$DIR/out" 2>"$DIR/err" ||
  fail "mpirun -np 2 train --data exited $?: $(tail -5 "$DIR/err")"
cat "$DIR/out"
grep -qxF "data: worker 0 of 2 reads 2 of 4 files: train-0-of-4.tfrecord, train-2-of-4.tfrecord" \
  "$DIR/out" || fail "worker 0 does not read shards 0 and 2"
grep -qxF "data: worker 1 of 2 reads 2 of 4 files: train-1-of-4.tfrecord, train-3-of-4.tfrecord" \
  "$DIR/out" || fail "worker 1 does not read shards 1 and 3"
grep -qF "sharded by file" "$DIR/out" || fail "the chief does not report sharding by file"
grep -qF "test accuracy" "$DIR/out" || fail "no test line"
python3 - "$DIR/h.json" <<'PY' || fail "history"
import json, sys
h = json.load(open(sys.argv[1]))
# Workers hold 6 and 8 examples; they agree on 6 each: 12 examples, global batches of 2.
assert h["workers"] == 2 and h["steps_per_epoch"] == 6, (h["workers"], h["steps_per_epoch"])
PY
[ $failures -eq 0 ] && echo PASS
[ $failures -eq 0 ]
