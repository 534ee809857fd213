#!/bin/bash
# mpi_transport_bench between two simulated hosts (TCP over a veth pair between two network
# namespaces; tests/multihost/hosts.sh), one rank on each; needs root. Extra arguments go to the
# benchmark:
#   bench/multihost_transport.sh build/release/bench/mpi_transport_bench --json tcp.json
set -u
source "$(dirname "$0")/../tests/multihost/hosts.sh"
multihost_require_root
BENCH=$1
shift
hosts_up || { echo "could not create the two hosts"; exit 1; }
MULTIHOST_TIMEOUT=600 multihost_mpirun -np 2 --map-by node "$BENCH" "$@" 2>&1 | grep -v setpgid
status=${PIPESTATUS[0]}
hosts_down
trap - EXIT
exit "$status"
