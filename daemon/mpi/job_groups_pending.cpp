// Placeholder until the MPI job groups land (daemon/mpi/): a service daemon serves one-node
// jobs, and a multi-node job is refused with this reason.
#include "net/job_groups.hpp"

namespace nodecomm::daemon {

namespace {
class PendingJobGroups final : public JobGroupFormer {
 public:
  uint64_t start(const std::string& key, uint32_t, uint32_t) override {
    throw TransportError("forming the group of job " + key +
                         ": multi-node service jobs are not built yet");
  }
  std::unique_ptr<Transport> poll(uint64_t) override { return nullptr; }
  void cancel(uint64_t) override {}
};
}  // namespace

std::unique_ptr<JobGroupFormer> make_mpi_job_groups(int*, char***, uint32_t, const std::string&) {
  return std::make_unique<PendingJobGroups>();
}

}  // namespace nodecomm::daemon
