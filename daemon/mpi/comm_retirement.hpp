// Communicators this daemon is done with, kept until their peers have stopped sending in them
// (part of the MPI transport).
//
// Open MPI hands a message whose communicator the receiver has freed to the next communicator
// given the same context id (ob1's non_existing_communicator_pending), with the old
// communicator's sequence number. In the service, groups come and go with jobs, so that next
// communicator may be another job's: the late message is matched there, and the new
// communicator's own messages with the same sequence numbers are then taken as out of order
// and wait for good. A peer's heartbeats sent in a group this daemon had just left stalled the
// heartbeats, or the data, of the next job on the same daemons (service_jobs, 2026-12-07;
// tests/integration/comm_retirement_check.cpp --free shows the misdelivery with two plain MPI
// processes).
//
// So a group's communicators are not freed when it ends but retired: they stay allocated,
// which keeps their context ids from being reused, and every message that still arrives is
// received and dropped here; once a communicator has been quiet for its quiet time (longer
// than any live peer's silence between two heartbeats, and than a peer takes to declare this
// daemon lost and stop), it is freed. MPI's own collectives use negative tags, which a probe
// for MPI_ANY_TAG does not see: those are dropped with the communicator when it is freed.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "mpi/mpi_common.hpp"
#include "net/transport.hpp"

namespace nodecomm::daemon {

class CommRetirement {
 public:
  CommRetirement() = default;
  // Frees every communicator still retired: the owner calls it before MPI_Finalize.
  ~CommRetirement();
  CommRetirement(const CommRetirement&) = delete;
  CommRetirement& operator=(const CommRetirement&) = delete;

  // Takes `comm` (sets it to MPI_COMM_NULL); it is freed once nothing arrived in it for
  // `quiet_ns`. The caller has cancelled or freed its own requests on it.
  void retire(MPI_Comm& comm, uint64_t now_ns, uint64_t quiet_ns);
  // Receives and drops what arrived in the retired communicators, frees the quiet ones.
  // Returns how many stay retired and the late messages dropped so far. Cheap when none are.
  RetiredComms tend(uint64_t now_ns);
  // Frees every retired communicator now.
  void free_all();

  size_t retired() const;
  // Late messages dropped, over the process's life.
  uint64_t dropped() const;

 private:
  struct Retired {
    MPI_Comm comm = MPI_COMM_NULL;
    uint64_t last_heard_ns = 0;
    uint64_t quiet_ns = 0;
    uint64_t dropped = 0;
  };
  // Receives what is waiting in `r`; false on an MPI error (the communicator is then freed).
  bool drain(Retired& r, uint64_t now_ns);

  mutable std::mutex mutex_;
  std::vector<Retired> retired_;  // guarded by mutex_
  std::vector<char> scratch_;     // guarded by mutex_
  uint64_t dropped_ = 0;          // guarded by mutex_
};

}  // namespace nodecomm::daemon
