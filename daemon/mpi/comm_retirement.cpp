#include "mpi/comm_retirement.hpp"

#include <algorithm>

#include "config/log.hpp"

namespace nodecomm::daemon {
namespace {

// Messages received from one communicator per tend: a flood of late messages must not hold
// the daemon's loop; the rest wait for the next tend.
constexpr int kDrainPerTend = 256;

}  // namespace

CommRetirement::~CommRetirement() {
  free_all();
}

void CommRetirement::retire(MPI_Comm& comm, uint64_t now_ns, uint64_t quiet_ns) {
  if (comm == MPI_COMM_NULL) return;
  // A peer lost mid-probe must come back as an error code, not abort the daemon.
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  const std::lock_guard<std::mutex> lock(mutex_);
  retired_.push_back({comm, now_ns, quiet_ns, 0});
  comm = MPI_COMM_NULL;
}

bool CommRetirement::drain(Retired& r, uint64_t now_ns) {
  for (int i = 0; i < kDrainPerTend; ++i) {
    int flag = 0;
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status status{};
    if (MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, r.comm, &flag, &message, &status) != MPI_SUCCESS) {
      return false;
    }
    if (flag == 0) return true;
    int bytes = 0;
    MPI_Get_count(&status, MPI_BYTE, &bytes);
    scratch_.resize(static_cast<size_t>(std::max(bytes, 1)));
    if (MPI_Mrecv(scratch_.data(), bytes, MPI_BYTE, &message, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      return false;
    }
    r.last_heard_ns = now_ns;
    ++r.dropped;
    ++dropped_;
  }
  return true;
}

RetiredComms CommRetirement::tend(uint64_t now_ns) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (retired_.empty()) return {0, dropped_};
  std::erase_if(retired_, [&](Retired& r) {
    const bool ok = drain(r, now_ns);
    // A communicator retired after `now_ns` was read is not yet quiet either.
    if (ok && (now_ns < r.last_heard_ns || now_ns - r.last_heard_ns < r.quiet_ns)) return false;
    if (r.dropped > 0) {
      NC_LOG(kInfo, "freed a communicator of a group this daemon left, after {} late message(s)",
             r.dropped);
    }
    MPI_Comm_free(&r.comm);
    return true;
  });
  return {retired_.size(), dropped_};
}

void CommRetirement::free_all() {
  const std::lock_guard<std::mutex> lock(mutex_);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized == 0) {
    for (Retired& r : retired_) MPI_Comm_free(&r.comm);
  }
  retired_.clear();
}

size_t CommRetirement::retired() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return retired_.size();
}

uint64_t CommRetirement::dropped() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return dropped_;
}

}  // namespace nodecomm::daemon
