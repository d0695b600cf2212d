#include "mpi/job_formation.hpp"

#include <fmt/format.h>

#include <utility>

#include "config/log.hpp"
#include "mpi/rendezvous.hpp"
#include "mpi/transport_mpi.hpp"
#include "nodecomm/ipc/clock.hpp"
#include "nodecomm/ipc/printable.hpp"

namespace nodecomm::daemon {

JobFormation::JobFormation(std::shared_ptr<MpiRuntime> runtime, FormationRequest request)
    : runtime_(std::move(runtime)),
      request_(std::move(request)),
      what_("job group " + ipc::printable(request_.key)),
      started_ns_(ipc::monotonic_ns()) {}

JobFormation::~JobFormation() = default;

void JobFormation::run() {
  try {
    transport_ = request_.node == 0 ? run_node0() : run_joiner();
    NC_LOG(kInfo, "{}: formed, node {} of {}, in {:.2f} s", what_, request_.node, request_.nodes,
           elapsed_s());
  } catch (const std::exception& e) {
    error_ = e.what();
  }
  done_.store(true, std::memory_order_release);
}

std::unique_ptr<Transport> JobFormation::take() {
  if (!error_.empty()) throw TransportError(error_);
  if (!transport_) fail("formation taken twice");
  return std::move(transport_);
}

void JobFormation::check(int code, const char* what) const {
  if (code != MPI_SUCCESS) {
    throw TransportError(
        fmt::format("{} on node {} of {}: {}", what, request_.node, what_, mpi_error_text(code)));
  }
}

void JobFormation::fail(const std::string& why) const {
  throw TransportError(
      fmt::format("{} (node {} of {}): {}", what_, request_.node, request_.nodes, why));
}

uint64_t JobFormation::timeout_ns() const {
  return static_cast<uint64_t>(exchange_timeout_s()) * 1000000000ULL;
}

double JobFormation::elapsed_s() const {
  return static_cast<double>(ipc::monotonic_ns() - started_ns_) / 1e9;
}

std::unique_ptr<Transport> JobFormation::finish(MPI_Comm grown) {
  // Ranks follow the order of joining, which node 0 made node order; the split makes that a
  // property of the group rather than of the way it grew.
  MPI_Comm ordered = MPI_COMM_NULL;
  const int rc = MPI_Comm_split(grown, 0, static_cast<int>(request_.node), &ordered);
  if (grown != MPI_COMM_SELF) MPI_Comm_free(&grown);
  check(rc, "MPI_Comm_split");
  MPI_Comm_set_errhandler(ordered, MPI_ERRORS_RETURN);
  // Every member's view of the job, checked by every member: a daemon told another node count
  // or index than its peers must not run the job's operations with them.
  int size = 0;
  MPI_Comm_size(ordered, &size);
  const int mine[2] = {static_cast<int>(request_.node), static_cast<int>(request_.nodes)};
  std::vector<int> all(2 * static_cast<size_t>(size));
  const int gathered = MPI_Allgather(mine, 2, MPI_INT, all.data(), 2, MPI_INT, ordered);
  std::string disagreement;
  if (gathered == MPI_SUCCESS) {
    for (int r = 0; r < size && disagreement.empty(); ++r) {
      const int node = all[2 * static_cast<size_t>(r)];
      const int nodes = all[2 * static_cast<size_t>(r) + 1];
      if (nodes != mine[1]) {
        disagreement = fmt::format("node {} says the job has {} nodes, node {} says {}", node,
                                   nodes, request_.node, request_.nodes);
      } else if (node != r) {
        disagreement = fmt::format("rank {} of the group says it is node {}", r, node);
      }
    }
    if (disagreement.empty() && size != mine[1]) {
      disagreement = fmt::format("{} daemons formed it, the job has {} nodes", size, mine[1]);
    }
  }
  if (gathered != MPI_SUCCESS || !disagreement.empty()) MPI_Comm_free(&ordered);
  check(gathered, "MPI_Allgather (node counts)");
  if (!disagreement.empty()) fail(disagreement);
  return make_mpi_transport_over(runtime_, ordered, BaseComm::kOwned, request_.lanes);
}

}  // namespace nodecomm::daemon
