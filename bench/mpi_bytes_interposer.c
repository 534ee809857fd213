// Measures the bytes each MPI rank hands to the data-moving MPI calls MpiCommunicator uses
// (MPI_Iallreduce/Allreduce, MPI_Ireduce_scatter, MPI_Iallgather, MPI_Isend, MPI_Ibcast), through
// the MPI profiling interface, and prints the totals at MPI_Finalize. For checking what crosses
// between workers, e.g. `--gradient-dtype bfloat16` against float32:
//   mpicc -shared -fPIC -O2 bench/mpi_bytes_interposer.c -o /tmp/libmpibytes.so
//   mpirun -np 2 -x LD_PRELOAD=/tmp/libmpibytes.so build/release/apps/lockstep train
//       --gradient-dtype bfloat16 --epochs 1 --verbose 0 --history h.json   (one line)
// Divide by the history's allreduce_steps for bytes per step (a few calls are not per-step).
#include <mpi.h>
#include <stdio.h>
static unsigned long long b_allreduce, b_rs, b_ag, b_send, b_bcast, n_allreduce, n_rs;
static long long bytes(int count, MPI_Datatype t) {
  int s;
  PMPI_Type_size(t, &s);
  return (long long)count * s;
}
int MPI_Iallreduce(const void* sb, void* rb, int c, MPI_Datatype t, MPI_Op op, MPI_Comm comm,
                   MPI_Request* r) {
  b_allreduce += bytes(c, t);
  n_allreduce++;
  return PMPI_Iallreduce(sb, rb, c, t, op, comm, r);
}
int MPI_Allreduce(const void* sb, void* rb, int c, MPI_Datatype t, MPI_Op op, MPI_Comm comm) {
  b_allreduce += bytes(c, t);
  n_allreduce++;
  return PMPI_Allreduce(sb, rb, c, t, op, comm);
}
int MPI_Ireduce_scatter(const void* sb, void* rb, const int rc[], MPI_Datatype t, MPI_Op op,
                        MPI_Comm comm, MPI_Request* r) {
  int n;
  PMPI_Comm_size(comm, &n);
  long long tot = 0;
  for (int i = 0; i < n; ++i) tot += bytes(rc[i], t);
  b_rs += tot;
  n_rs++;
  return PMPI_Ireduce_scatter(sb, rb, rc, t, op, comm, r);
}
int MPI_Iallgather(const void* sb, int sc, MPI_Datatype st, void* rb, int rc, MPI_Datatype rt,
                   MPI_Comm comm, MPI_Request* r) {
  b_ag += bytes(sc, st);
  return PMPI_Iallgather(sb, sc, st, rb, rc, rt, comm, r);
}
int MPI_Isend(const void* b, int c, MPI_Datatype t, int d, int tag, MPI_Comm comm, MPI_Request* r) {
  b_send += bytes(c, t);
  return PMPI_Isend(b, c, t, d, tag, comm, r);
}
int MPI_Ibcast(void* b, int c, MPI_Datatype t, int root, MPI_Comm comm, MPI_Request* r) {
  b_bcast += bytes(c, t);
  return PMPI_Ibcast(b, c, t, root, comm, r);
}
int MPI_Finalize(void) {
  int rank;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  fprintf(stderr,
          "[pmpi rank %d] allreduce %llu B in %llu calls, reduce_scatter %llu B in %llu calls, "
          "allgather %llu B, isend %llu B, bcast %llu B\n",
          rank, b_allreduce, n_allreduce, b_rs, n_rs, b_ag, b_send, b_bcast);
  return PMPI_Finalize();
}
