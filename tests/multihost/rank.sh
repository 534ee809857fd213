#!/bin/sh
# One MPI rank of a multi-host test: `rank.sh DIR PROGRAM ARGS...` runs PROGRAM and records, under
# the rank's world rank R, its pid (DIR/pid.R, to signal it), its stderr (DIR/err.R: a rank on a
# host cut off from mpirun cannot send its output there) and "exit code, end time" (DIR/rc.R).
dir=$1
shift
r=$OMPI_COMM_WORLD_RANK
"$@" 2>"$dir/err.$r" &
echo $! >"$dir/pid.$r"
wait $!
echo "$? $(date +%s.%N)" >"$dir/rc.$r"
