// `nodecommctl trace start|stop`: while a trace is on, the daemon appends one TraceEvent
// (proto/counters.hpp) per completed operation and per finished scheduled transfer (chunk,
// fused pack, whole operation), tagged with its job, to /dev/shm/nodecomm.<instance>.trace, a
// bounded buffer that nodecommctl maps read-only and turns into Chrome trace-event JSON. The daemon
// never writes the user's FILE itself: it may run as another user and under ProtectSystem=strict,
// and the buffer lives where it may write anyway (/dev/shm, like the counters).
#pragma once

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <map>
#include <string>
#include <unordered_set>
#include <utility>

#include "nodecomm/ipc/clock.hpp"
#include "nodecomm/ipc/named_shm.hpp"
#include "nodecomm/proto/counters.hpp"

namespace nodecomm::daemon {

// CLOCK_REALTIME in nanoseconds since the epoch (ipc::monotonic_ns's wall-clock sibling).
inline uint64_t realtime_ns() {
  return ipc::clock_ns(CLOCK_REALTIME);
}

// The gid of `group` (a name or a number), -1 when it is empty or names no group: the group
// that may read the counters segment and traces besides root and the daemon's uid.
int reader_group_id(const std::string& group);

class TraceRecorder {
 public:
  static constexpr uint64_t kDefaultEvents = 65536;   // 6 MiB
  static constexpr uint64_t kMaxEvents = 1ull << 20;  // 96 MiB

  // Starts a new trace of at most `capacity` events in `shm_name` (a previous, stopped trace
  // there is replaced). Returns an error text, empty on success.
  std::string start(const std::string& shm_name, const std::string& instance, uint32_t node_index,
                    uint64_t capacity, int reader_gid);
  // Stops recording; the buffer stays readable until the next start or the daemon's exit.
  void stop();
  bool recording() const { return header_ != nullptr && recording_; }
  uint64_t count() const { return count_; }
  uint64_t dropped() const { return dropped_; }
  const std::string& shm_name() const { return shm_.name(); }

  // Appends `event` of the job with serial `job` (event.job is set from it), and the job's
  // name to the trace's jobs table the first time it is seen.
  void record(proto::TraceEvent event, uint64_t job, const std::string& job_name);
  // Scheduled transfers: start time by job and transport handle (each job has its own
  // transport, whose handles may repeat another's), while recording.
  void unit_started(uint64_t job, uint64_t handle, uint64_t now_ns) {
    if (recording()) unit_begin_[{job, handle}] = now_ns;
  }
  // The start time of a unit (0 if it began before the trace), forgotten afterwards.
  uint64_t take_unit_begin(uint64_t job, uint64_t handle);

 private:
  ipc::NamedShm shm_;
  proto::TraceHeader* header_ = nullptr;
  proto::TraceJob* jobs_ = nullptr;
  proto::TraceEvent* events_ = nullptr;
  uint64_t capacity_ = 0;
  uint64_t count_ = 0;
  uint64_t dropped_ = 0;
  bool recording_ = false;
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> unit_begin_;
  std::unordered_set<uint64_t> jobs_seen_;  // serials in the jobs table, or dropped from it
};

}  // namespace nodecomm::daemon
