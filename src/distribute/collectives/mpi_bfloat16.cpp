#include "mpi_bfloat16.h"

#include "lockstep/core/bfloat16.h"
#include "mpi_support.h"

namespace lockstep::distribute::detail {
namespace {

// inout[i] <- bfloat16(float(in[i]) + float(inout[i])): one partial sum, rounded once. Float
// addition is commutative bit for bit, so MPI may combine in any order it fixes.
void bfloat16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const bfloat16*>(in);
  auto* b = static_cast<bfloat16*>(inout);
  for (int i = 0; i < *len; ++i) {
    b[i] = bfloat16(static_cast<float>(a[i]) + static_cast<float>(b[i]));
  }
}

}  // namespace

// Created on first use (MPI is initialised by then) and kept until MPI_Finalize frees it.
const Bfloat16Wire& bfloat16_wire() {
  static const Bfloat16Wire wire = [] {
    Bfloat16Wire w;
    check_mpi(MPI_Type_contiguous(2, MPI_BYTE, &w.type), "MPI_Type_contiguous");
    check_mpi(MPI_Type_commit(&w.type), "MPI_Type_commit");
    check_mpi(MPI_Op_create(&bfloat16_sum, /*commute=*/1, &w.sum), "MPI_Op_create");
    return w;
  }();
  return wire;
}

}  // namespace lockstep::distribute::detail
