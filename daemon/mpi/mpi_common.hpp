// What every part of the MPI transport shares: the MPI header (C API only), type and operation
// mappings, and turning MPI error codes into TransportErrors. Only the MPI transport's files
// (daemon/mpi/) include this or mpi.h.
#pragma once

// The C API only: the deprecated C++ bindings would need libmpi_cxx.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <cstdint>
#include <string>

#include "nodecomm/proto/types.hpp"

namespace nodecomm::daemon {

// Throws TransportError for f16/bf16 (the engine widens them to f32 first) and avg (a sum on
// the wire; the engine divides afterwards).
MPI_Datatype to_mpi(proto::DType t);
MPI_Op to_mpi(proto::RedOp op);

std::string mpi_error_text(int code);
// Throws TransportError "<what> on node <node>: <MPI's text>" unless `code` is MPI_SUCCESS.
void check_mpi(int code, const char* what, uint32_t node);

}  // namespace nodecomm::daemon
