// Splits a node's link between the jobs that move data between nodes at the same time, by
// weight (--job-weights, NODECOMM_JOB_WEIGHT). Each job's engine keeps its bytes on the network
// within a window (engine/schedule.hpp); the sharer sets each job's window to its weighted part
// of their windows together. The transport does not split the link in proportion to the
// windows (Open MPI interleaves concurrent messages, not bytes, and a job's pipeline does not
// always fill its window), so the split is corrected by feedback: every sample period each
// job's measured rate is compared with its weighted part of the jobs' total, and its window
// scaled towards it. What a job leaves unused another may borrow, so a job that cannot use its
// share never holds the link back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace nodecomm::daemon {

struct LinkUser {
  std::string name;  // the job's
  uint32_t weight = 1;
  size_t nominal_window = 0;     // its own window alone (CommSchedule::window)
  size_t on_network = 0;         // its bytes on the network now
  uint64_t completed_bytes = 0;  // every unit it has completed, cumulative
};

struct LinkGrant {
  size_t window = 0;  // zeros: the job's own window and chunk
  size_t chunk = 0;
};

class LinkSharer {
 public:
  // How long a job that stopped moving data still counts as sharing the link: the gap between
  // one operation's last chunk and the next one's first is far shorter.
  static constexpr uint64_t kLingerNs = 50'000'000;
  // How often rates are measured and windows corrected.
  static constexpr uint64_t kSampleNs = 50'000'000;
  // How far feedback may scale a job's weighted window either way.
  static constexpr double kMaxScale = 8;

  // One grant per user, in order; called every heartbeat with every multi-node job.
  std::vector<LinkGrant> share(uint64_t now, const std::vector<LinkUser>& users);

  // The feedback's current factor on a job's weight (1 when it shares with no one); tests.
  double scale(const std::string& name) const;

 private:
  struct State {
    uint64_t active_ns = 0;  // when it last had bytes on the network
    uint64_t sample_bytes = 0;
    bool sampled = false;  // sample_bytes is from the last sample
    double rate = -1;      // bytes per second over the last sample period; < 0: not yet
    double scale = 1;
  };
  void sample(uint64_t now, const std::vector<LinkUser>& users);
  void correct(const std::vector<const LinkUser*>& active);

  std::map<std::string, State> states_;
  uint64_t sample_ns_ = 0;
};

}  // namespace nodecomm::daemon
