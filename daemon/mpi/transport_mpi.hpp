// The MPI transport over one communicator (part of the MPI transport): world mode's over
// MPI_COMM_WORLD (make_mpi_transport, net/transport.hpp), and the service's over each job's
// group (job_groups_mpi.cpp).
#pragma once

#include <cstdint>
#include <memory>

#include "mpi/mpi_common.hpp"
#include "mpi/mpi_runtime.hpp"
#include "net/transport.hpp"

namespace nodecomm::daemon {

// Whether the transport frees its base communicator when it is destroyed.
enum class BaseComm { kBorrowed, kOwned };

// A transport whose kAllNodes is the daemons of `base`, ranked as there. Collective over
// `base` (it duplicates it for kAllNodes, the lanes, notices and liveness): every member calls
// it, with the same `lanes`. Holds `runtime` until destroyed, and tells it to skip MPI_Finalize
// if a peer was lost. An owned `base` is freed even when this throws.
std::unique_ptr<Transport> make_mpi_transport_over(std::shared_ptr<MpiRuntime> runtime,
                                                   MPI_Comm base, BaseComm ownership,
                                                   uint32_t lanes);

}  // namespace nodecomm::daemon
