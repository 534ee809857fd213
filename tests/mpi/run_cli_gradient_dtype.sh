#!/bin/bash
# `mpirun -np 2 lockstep train --gradient-dtype D`: with bfloat16 the bytes each worker all-reduces
# per step are half of float32's (the parameter count x 2 instead of x 4), and both runs train.
#   run_cli_gradient_dtype.sh <mpirun> <lockstep>
set -u
MPIRUN=$1 LOCKSTEP=$2
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
for d in float32 bfloat16; do
  timeout -k 5 150 "$MPIRUN" --oversubscribe --bind-to none -np 2 "$LOCKSTEP" train --replicas 1 \
    --epochs 1 --steps-per-epoch 20 --verbose 0 --timeout 60 --gradient-dtype "$d" \
    --history "$DIR/$d.json" || { echo "FAIL: --gradient-dtype $d exited $?"; exit 1; }
done
python3 - "$DIR" <<'PY'
import json, sys
d = sys.argv[1]
f, b = (json.load(open("%s/%s.json" % (d, k))) for k in ("float32", "bfloat16"))
params = 784 * 128 + 128 + 128 * 10 + 10  # the seed model
assert f["workers"] == 2 and b["workers"] == 2, (f["workers"], b["workers"])
assert f["allreduce_bytes_per_step"] == params * 4, f["allreduce_bytes_per_step"]
assert b["allreduce_bytes_per_step"] == params * 2, b["allreduce_bytes_per_step"]
assert b["test_accuracy"] > 0.5, b["test_accuracy"]
print("PASS: bytes per step float32 %d, bfloat16 %d" % (f["allreduce_bytes_per_step"],
                                                          b["allreduce_bytes_per_step"]))
PY
