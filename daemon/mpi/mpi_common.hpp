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
#include <functional>
#include <string>

#include "nodecomm/proto/types.hpp"

namespace nodecomm::daemon {

// Throws TransportError for f16/bf16 (the engine widens them to f32 first) and avg (a sum on
// the wire; the engine divides afterwards).
MPI_Datatype to_mpi(proto::DType t);
MPI_Op to_mpi(proto::RedOp op);
// The op for `op` on `t`: 8-bit sums and products get nodecomm's own op that wraps modulo 256,
// as the daemon's kernels do. Open MPI 4.1's op/avx component saturates them instead
// (open-mpi/ompi#8045, "wontfix"), so an inter-node u8 sum of 200 and 100 came back 255.
MPI_Op to_mpi(proto::RedOp op, proto::DType t);

// The top of MPI's tag space is kept for the messages that may arrive after their receiver
// freed the communicator (heartbeats, notices, a formation's messages to a daemon that already
// left). Open MPI hands such a message to the next communicator given the freed context id,
// which in the service (groups come and go with jobs) may be a new job's: there it must not
// match an operation's receive. Retirement (comm_retirement.hpp) keeps a left group's
// communicators until their peers are quiet; these tags are for what comes later still. The
// algorithms' point-to-point tags stay below.
enum class ReservedTag { kLiveness = 0, kNotices = 1, kFormation = 2 };
inline constexpr int kReservedTags = 3;
// MPI_TAG_UB, a property of the library: the same in every process and on every communicator.
int mpi_tag_ub();
inline int reserved_tag(ReservedTag which) {
  return mpi_tag_ub() - static_cast<int>(which);
}

// How a part of the transport lets go of a communicator it made and used: the transport retires
// it (comm_retirement.hpp), since peers may still be sending in it.
using CommRelease = std::function<void(MPI_Comm&)>;

std::string mpi_error_text(int code);
// Throws TransportError "<what> on node <node>: <MPI's text>" unless `code` is MPI_SUCCESS.
void check_mpi(int code, const char* what, uint32_t node);

}  // namespace nodecomm::daemon
