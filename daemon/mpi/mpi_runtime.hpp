// MPI's lifetime in the process (part of the MPI transport). MPI can be initialised and
// finalized once per process, and several owners share it: world mode's one transport, or in
// the service one transport per job plus the job-group former. Each holds the runtime; MPI is
// finalized when the last lets go.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>

#include "mpi/comm_retirement.hpp"

namespace nodecomm::daemon {

class MpiRuntime {
 public:
  // The process's runtime, initialising MPI (MPI_THREAD_MULTIPLE) on first use. Throws
  // TransportError once MPI was finalized: it cannot start again in the same process.
  static std::shared_ptr<MpiRuntime> acquire(int* argc, char*** argv);
  // MPI_Finalize, unless finalize was skipped, MPI was initialised by someone else, or this is
  // not the thread that initialised MPI (MPI requires that one).
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  // Communicators are created on helper threads (NodeGroups::start_split_groups and the job
  // formations), which needs MPI_THREAD_MULTIPLE.
  bool thread_multiple() const { return thread_multiple_; }
  // MPI_Finalize waits for every process this one is connected to, a lost one included, and
  // would hang on a thread left inside an MPI call: after either, MPI stays unfinalized and
  // the process just exits (the launcher then reports what happened to the job).
  void skip_finalize() { skip_finalize_.store(true, std::memory_order_relaxed); }
  // Held around every communicator creation of the job formations (job_formation.hpp). Open
  // MPI 4.1 lets one creation at a time per process allocate its context id, picking the one
  // whose parent has the lowest id; creations over MPI_COMM_SELF (every connect and accept of
  // a singleton) all tie, are picked in a different order in each process, and two processes
  // connecting to each other for two formations at once then wait for each other for good.
  std::timed_mutex& creation_lock() { return creation_lock_; }
  // Where the communicators of groups this process left wait until their peers are quiet
  // (comm_retirement.hpp); freed before MPI_Finalize.
  CommRetirement& retirement() { return retirement_; }

 private:
  MpiRuntime(bool owns, bool thread_multiple)
      : owns_(owns), thread_multiple_(thread_multiple), init_thread_(std::this_thread::get_id()) {}

  bool owns_;
  bool thread_multiple_;
  std::thread::id init_thread_;
  // relaxed: read only by the destructor, after the last owner let go, which the shared_ptr's
  // count already orders after every store.
  std::atomic<bool> skip_finalize_{false};
  std::timed_mutex creation_lock_;
  CommRetirement retirement_;
};

}  // namespace nodecomm::daemon
