// The service's job groups over MPI (net/job_groups.hpp): an MPI singleton per daemon, joined
// to Open MPI's rendezvous server, forming one communicator per multi-node job, each on a
// thread of its own (job_formation.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <unordered_map>
#include <vector>

#include "config/log.hpp"
#include "mpi/job_formation.hpp"
#include "mpi/mpi_runtime.hpp"
#include "mpi/rendezvous.hpp"
#include "net/job_groups.hpp"
#include "nodecomm/ipc/clock.hpp"
#include "nodecomm/ipc/printable.hpp"

namespace nodecomm::daemon {
namespace {

class MpiJobGroups final : public JobGroupFormer {
 public:
  MpiJobGroups(std::shared_ptr<MpiRuntime> runtime, uint32_t lanes)
      : runtime_(std::move(runtime)), lanes_(lanes) {}

  // Formations still running are cancelled and given a bounded time to end (each wait of
  // theirs is bounded by the exchange timeout); one still inside a blocking MPI call after that
  // (a daemon died while its group was being made) is left behind, and MPI stays unfinalized.
  ~MpiJobGroups() override {
    for (auto& [id, running] : running_) {
      running.formation->cancel();
      cancelled_.push_back(std::move(running));
    }
    running_.clear();
    const uint64_t deadline =
        ipc::monotonic_ns() + 3ULL * static_cast<uint64_t>(exchange_timeout_s()) * 1000000000ULL;
    while (reap() > 0 && ipc::monotonic_ns() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    for (Running& left : cancelled_) {
      NC_LOG(kWarn, "job group formation left inside MPI at exit: MPI stays unfinalized");
      left.thread.detach();
      runtime_->skip_finalize();
    }
  }
  MpiJobGroups(const MpiJobGroups&) = delete;
  MpiJobGroups& operator=(const MpiJobGroups&) = delete;

  uint64_t start(const std::string& key, uint32_t node, uint32_t nodes) override {
    reap();
    if (key.empty() || nodes < 2 || node >= nodes) {
      throw TransportError(fmt::format("job group {}: node {} of {} is not a multi-node job",
                                       ipc::printable(key), node, nodes));
    }
    if (!runtime_->thread_multiple()) {
      throw TransportError(fmt::format(
          "job group {}: forming groups needs MPI_THREAD_MULTIPLE, which this MPI library does "
          "not provide",
          ipc::printable(key)));
    }
    FormationRequest request{key, node, nodes, lanes_};
    Running running;
    running.formation = std::make_shared<JobFormation>(runtime_, std::move(request));
    running.thread = std::thread([formation = running.formation] { formation->run(); });
    const uint64_t id = next_++;
    running_.emplace(id, std::move(running));
    return id;
  }

  std::unique_ptr<Transport> poll(uint64_t id) override {
    reap();
    auto it = running_.find(id);
    if (it == running_.end()) {
      throw TransportError(fmt::format("job group formation {} is unknown", id));
    }
    if (!it->second.formation->done()) return nullptr;
    // run() has returned: the join is immediate.
    it->second.thread.join();
    const std::shared_ptr<JobFormation> formation = std::move(it->second.formation);
    running_.erase(it);
    return formation->take();
  }

  RetiredComms tend(uint64_t now_ns) override { return runtime_->retirement().tend(now_ns); }

  void cancel(uint64_t id) override {
    auto it = running_.find(id);
    if (it == running_.end()) return;
    it->second.formation->cancel();
    cancelled_.push_back(std::move(it->second));
    running_.erase(it);
    reap();
  }

 private:
  struct Running {
    std::shared_ptr<JobFormation> formation;
    std::thread thread;
  };

  // Joins the cancelled formations that have ended (a group made after all is freed here, on
  // the caller's thread); returns how many are still running.
  size_t reap() {
    std::erase_if(cancelled_, [](Running& r) {
      if (!r.formation->done()) return false;
      r.thread.join();
      return true;
    });
    return cancelled_.size();
  }

  std::shared_ptr<MpiRuntime> runtime_;
  uint32_t lanes_;
  uint64_t next_ = 1;
  std::unordered_map<uint64_t, Running> running_;
  std::vector<Running> cancelled_;
};

}  // namespace

std::unique_ptr<JobGroupFormer> make_mpi_job_groups(int* argc, char*** argv, uint32_t lanes,
                                                    const std::string& uri_file) {
  join_rendezvous(uri_file);
  return std::make_unique<MpiJobGroups>(MpiRuntime::acquire(argc, argv), std::max(lanes, 1U));
}

}  // namespace nodecomm::daemon
