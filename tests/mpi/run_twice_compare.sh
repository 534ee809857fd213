#!/bin/bash
# Determinism across runs: two separate launches of the same MPI job must all-reduce to the same
# bits (collective_mpi_test prints a hash of its all-reduce result).
#   run_twice_compare.sh <mpirun> <np> <collective_mpi_test>
set -u
MPIRUN=$1 NP=$2 TEST=$3
hash_of_run() {
  timeout -k 5 120 "$MPIRUN" --oversubscribe -np "$NP" "$TEST" \
    --gtest_filter='MpiAllReduce.FloatSumIsBitIdenticalAcrossRepeatsAndRanks' | grep 'determinism-hash'
}
a=$(hash_of_run) || { echo "FAIL: first run"; exit 1; }
b=$(hash_of_run) || { echo "FAIL: second run"; exit 1; }
echo "run 1: $a"
echo "run 2: $b"
[ -n "$a" ] && [ "$a" = "$b" ] && echo PASS && exit 0
echo "FAIL: results differ between runs"
exit 1
