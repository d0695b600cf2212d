#include "mpi/mpi_p2p.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>

#include "net/transport.hpp"

namespace nodecomm::daemon {

RequestTable::~RequestTable() {
  for (MPI_Request& r : active_) {
    if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
  }
}

P2pRequest RequestTable::add(MPI_Request request) {
  active_.push_back(request);
  ids_.push_back(next_);
  return next_++;
}

void RequestTable::poll() {
  if (active_.empty()) return;
  int completed = 0;
  indices_.resize(active_.size());
  check_mpi(MPI_Testsome(static_cast<int>(active_.size()), active_.data(), &completed,
                         indices_.data(), MPI_STATUSES_IGNORE),
            "MPI_Testsome", node_);
  if (completed == MPI_UNDEFINED || completed == 0) return;
  for (int i = 0; i < completed; ++i) finished_.push_back(ids_[static_cast<size_t>(indices_[i])]);
  completions_ += static_cast<uint64_t>(completed);
  // MPI set the finished entries to MPI_REQUEST_NULL: drop them, keeping the order.
  size_t kept = 0;
  for (size_t i = 0; i < active_.size(); ++i) {
    if (active_[i] == MPI_REQUEST_NULL) continue;
    active_[kept] = active_[i];
    ids_[kept++] = ids_[i];
  }
  active_.resize(kept);
  ids_.resize(kept);
}

bool RequestTable::done(P2pRequest id) {
  auto it = std::find(finished_.begin(), finished_.end(), id);
  if (it == finished_.end()) return false;
  *it = finished_.back();
  finished_.pop_back();
  return true;
}

namespace {

int message_size(size_t bytes) {
  // MPI counts are int: the ring cuts messages into slices far below this.
  if (bytes > static_cast<size_t>(INT32_MAX)) {
    throw TransportError(fmt::format("message of {} bytes exceeds MPI's int range", bytes));
  }
  return static_cast<int>(bytes);
}

}  // namespace

MpiPointToPoint::MpiPointToPoint(RequestTable& table, std::vector<MPI_Comm> lanes, int max_tag,
                                 uint32_t node)
    : table_(table), lanes_(std::move(lanes)), max_tag_(max_tag), node_(node) {
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(lanes_.front(), &rank);
  MPI_Comm_size(lanes_.front(), &size);
  rank_ = static_cast<uint32_t>(rank);
  size_ = static_cast<uint32_t>(size);
}

P2pRequest MpiPointToPoint::isend(uint32_t lane, uint32_t peer, int tag, const void* data,
                                  size_t bytes) {
  MPI_Request r = MPI_REQUEST_NULL;
  check_mpi(MPI_Isend(data, message_size(bytes), MPI_BYTE, static_cast<int>(peer), tag,
                      lanes_.at(lane), &r),
            "MPI_Isend", node_);
  // NOLINTNEXTLINE(clang-analyzer-optin.mpi.MPI-Checker): RequestTable::poll completes it.
  return table_.add(r);
}

P2pRequest MpiPointToPoint::irecv(uint32_t lane, uint32_t peer, int tag, void* data, size_t bytes) {
  MPI_Request r = MPI_REQUEST_NULL;
  check_mpi(MPI_Irecv(data, message_size(bytes), MPI_BYTE, static_cast<int>(peer), tag,
                      lanes_.at(lane), &r),
            "MPI_Irecv", node_);
  // NOLINTNEXTLINE(clang-analyzer-optin.mpi.MPI-Checker): RequestTable::poll completes it.
  return table_.add(r);
}

}  // namespace nodecomm::daemon
