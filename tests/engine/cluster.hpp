// Several nodes in one test process: one real Daemon per node, each in its own thread over
// an in-memory transport (transport_inmemory.hpp), and one client thread per rank that
// attaches through the real client library (nc_init with explicit options: the runtime
// directory of its node's daemon, the job, its local rank and size), as Gloo's tests run
// every rank of a context in one process.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "config/config.hpp"
#include "net/transport.hpp"
#include "nodecomm.h"

namespace nodecomm::daemon {
class Daemon;
class InMemoryWorld;
}  // namespace nodecomm::daemon

namespace nodecomm::engine_test {

// Ranks per node, e.g. {3, 1, 2}; world rank = node offset + local rank.
struct Layout {
  std::vector<uint32_t> ranks;
  // One node on the loopback transport (the daemon's own single-node transport) instead of
  // the in-memory one.
  bool loopback = false;
  std::string name() const;
  uint32_t world_size() const;
};
// For GoogleTest's messages: "3x312" rather than the object's bytes.
inline void PrintTo(const Layout& layout, std::ostream* os) {
  *os << layout.name();
}

// How the daemons order multi-node work: the negotiated scheduler (priorities and fusion, the
// default; allreduces of up to 1 KiB ride in the rounds), the same with small scheduling
// chunks, a small fusion threshold and nothing in the rounds (large allreduces cut into
// ranges, small ones fused), and sequence order (policy none, fusion off);
// and the negotiated scheduler with the transport's per-call limit lowered to 1000 (bytes or
// elements: NODECOMM_TEST_MPI_MAX_COUNT=1000's twin), so that every block beyond it goes as
// chunked point-to-point messages, the way blocks beyond 2 GiB go for real; and the negotiated
// scheduler with its round records combined by recursive doubling on any node count
// (--sched-gather-nodes 1; the first round of a communicator still goes all-to-all).
enum class Ordering { kNegotiated, kChunked, kSequence, kSmallCalls, kCombined };
std::string ordering_name(Ordering ordering);
void apply(Ordering ordering, daemon::DaemonConfig& config);
// The in-memory transport's largest single call under `ordering` (InMemoryOptions::max_count).
size_t max_count(Ordering ordering);

// What one rank's thread sees.
struct Rank {
  nc_context_t* ctx = nullptr;
  int rank = 0;  // world rank
  int size = 0;
  uint32_t node = 0;
  uint32_t local_rank = 0;
  // Records a failure (thread-safe); the test fails with the first few of them.
  std::function<void(const std::string&)> fail;
};

class Cluster {
 public:
  // `tweak` may change each daemon's configuration before it starts.
  explicit Cluster(Layout layout, const std::function<void(daemon::DaemonConfig&)>& tweak = nullptr,
                   size_t max_count = static_cast<size_t>(INT32_MAX));
  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  // Runs `body` on every rank of one job, each in its own thread with its own context, and
  // returns the failures (empty when every rank succeeded). Contexts finalize afterwards, all
  // together once every body has returned unless `together` is false (each right after its own).
  std::vector<std::string> run(const std::function<void(Rank&)>& body, bool together = true);
  const Layout& layout() const { return layout_; }

 private:
  Layout layout_;
  std::string base_dir_;
  std::shared_ptr<daemon::InMemoryWorld> world_;
  std::vector<std::unique_ptr<daemon::Transport>> transports_;
  std::vector<std::unique_ptr<daemon::Daemon>> daemons_;
  std::vector<std::string> runtime_dirs_;
  std::vector<std::thread> loops_;
  std::atomic<bool> stop_{false};
  std::vector<int> exit_codes_;
  uint32_t jobs_ = 0;
};

// Waits for `req`, recording a failure that names `what` unless it completes with NC_OK.
bool wait_ok(Rank& r, nc_status_t posted, nc_request_t req, const std::string& what);

}  // namespace nodecomm::engine_test
