#pragma once
// bfloat16 on MPI's wire (internal): a 2-byte datatype and a commutative user sum that adds in
// float32 and rounds each partial sum to bfloat16 (round to nearest even); MPI has neither.
#include <mpi.h>

namespace lockstep::distribute::detail {

struct Bfloat16Wire {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Op sum = MPI_OP_NULL;
};

// Created on first use (MPI is initialised by then) and kept until MPI_Finalize frees it.
const Bfloat16Wire& bfloat16_wire();

}  // namespace lockstep::distribute::detail
