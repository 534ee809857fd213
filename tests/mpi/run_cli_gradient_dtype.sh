#!/bin/bash
# `mpirun -np 2 lockstep train --gradient-dtype D`: with bfloat16 the bytes each worker hands to
# MPI's all-reduce — counted by a PMPI interposer, not by Lockstep — are about half of float32's
# (the gradients are; the few per-epoch metric all-reduces are not), the history reports the
# parameter count x 2 instead of x 4, and both runs train. The ranks share a host, where gradients
# would go through the shared segment instead of MPI: LOCKSTEP_MPI_HOST_SHARED=0 makes them take
# the path that crosses hosts.
#   run_cli_gradient_dtype.sh <mpirun> <lockstep> <libmpi_bytes_interposer.so>
set -u
MPIRUN=$1 LOCKSTEP=$2 INTERPOSER=$3
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
for d in float32 bfloat16; do
  timeout -k 5 150 "$MPIRUN" --oversubscribe --bind-to none -np 2 -x LD_PRELOAD="$INTERPOSER" \
    -x LOCKSTEP_MPI_HOST_SHARED=0 \
    "$LOCKSTEP" train --replicas 1 --epochs 1 --steps-per-epoch 20 --verbose 0 --timeout 60 \
    --gradient-dtype "$d" --history "$DIR/$d.json" 2>"$DIR/$d.err" ||
    { echo "FAIL: --gradient-dtype $d exited $?"; cat "$DIR/$d.err"; exit 1; }
done
python3 - "$DIR" <<'PY'
import json, re, sys
d = sys.argv[1]
f, b = (json.load(open("%s/%s.json" % (d, k))) for k in ("float32", "bfloat16"))
params = 784 * 128 + 128 + 128 * 10 + 10  # the seed model
assert f["workers"] == 2 and b["workers"] == 2, (f["workers"], b["workers"])
assert f["allreduce_bytes_per_step"] == params * 4, f["allreduce_bytes_per_step"]
assert b["allreduce_bytes_per_step"] == params * 2, b["allreduce_bytes_per_step"]
assert b["test_accuracy"] > 0.5, b["test_accuracy"]
def wire(k):  # bytes rank 0 handed to MPI all-reduces, as the interposer counted them
    text = open("%s/%s.err" % (d, k)).read()
    m = re.search(r"\[pmpi rank 0\] allreduce (\d+) B in (\d+) calls", text)
    assert m, "no interposer report in %s.err: %s" % (k, text[-500:])
    return int(m.group(1))
wf, wb = wire("float32"), wire("bfloat16")
steps = f["allreduce_steps"]
assert wf >= steps * params * 4, (wf, steps)
assert wb <= 0.55 * wf, "bfloat16 run moved %d B, float32 %d B" % (wb, wf)
print("PASS: bytes handed to MPI all-reduce: float32 %d, bfloat16 %d (%.3fx); history %d / %d"
      % (wf, wb, wb / wf, f["allreduce_bytes_per_step"], b["allreduce_bytes_per_step"]))
PY
