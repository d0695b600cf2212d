// nodecommctl's access to a daemon: the counters segment, mapped read-only (every read-only
// command), and the control socket (set, trace start|stop).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "nodecomm/ipc/named_shm.hpp"
#include "nodecomm/proto/control.hpp"
#include "nodecomm/proto/counters.hpp"

namespace nodecomm::ctl {

// A failure at run time (exit status 1): daemon not running, refused, unreadable segment.
struct RuntimeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A command line that does not say what it means (exit status 2).
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One consistent copy of a daemon's counters.
struct Snapshot {
  std::string shm_name;  // "/nodecomm.<instance>.counters"
  proto::DaemonInfo daemon{};
  proto::Liveness liveness{};
  proto::Totals totals{};
  proto::CollectiveCounters collectives[proto::kCounterCollectives]{};
  proto::ParamsSection params{};
  proto::JobsSection jobs{};  // jobs, clients and ops are of one snapshot (equal `snapshot`)
  proto::ClientsSection clients{};
  proto::OpsSection ops{};
  uint64_t now_monotonic_ns = 0;  // when the copy was taken
  uint64_t now_realtime_ns = 0;
  bool alive = false;  // the daemon's pid exists

  std::string instance() const;
  // The value of a setting from the params table; empty if absent.
  std::string param(const std::string& key) const;
  double heartbeat_age_s() const;
  // The job a client or operation names (ClientSlot::job, OpSlot::job: slot + 1); null for 0
  // or a slot not filled.
  const proto::JobSlot* job(uint32_t slot_plus_one) const;
  // The oldest job, null when none.
  const proto::JobSlot* first_job() const { return job(1); }
  // The printable name of job slot + 1, "" for none.
  std::string job_name(uint32_t slot_plus_one) const;
};

// `s` with only the job called `name` (the name itself, or as nodecommctl prints it), its
// clients and its operations; the daemon-wide totals stay. Throws RuntimeError naming the
// jobs there are when none is called that.
Snapshot only_job(const Snapshot& s, const std::string& name);
// Whether a job name field (JobSlot::name, TraceJob::name) says `name`, itself or as printed.
bool name_matches(const char (&field)[proto::kCounterNameBytes], const std::string& name);
// "'a', 'b'" or "none": the jobs of `s`, for messages.
std::string job_names(const Snapshot& s);

// A read-only mapping of one instance's counters segment.
class CountersView {
 public:
  // Maps `shm_name` and checks magic, layout version and size. Throws RuntimeError naming the
  // object and the reason.
  explicit CountersView(const std::string& shm_name);
  ~CountersView();
  CountersView(const CountersView&) = delete;
  CountersView& operator=(const CountersView&) = delete;
  // Throws RuntimeError if a seqlocked section stays busy (a daemon killed mid-rewrite).
  Snapshot read() const;

 private:
  std::string name_;
  ipc::NamedShm shm_;
  const proto::CountersSegment* seg_ = nullptr;
};

// Counters segments in /dev/shm, by shm name (every instance on this node, dead ones too).
std::vector<std::string> list_counters_names();
// The instance a counters shm name belongs to: "/nodecomm.<instance>.counters".
std::string instance_of(const std::string& shm_name);

// Which instance a command talks to: --runtime-dir DIR (its ready file names the instance),
// else --instance NAME, else $NODECOMM_INSTANCE, else "default" if it runs or nothing runs,
// else the one instance that runs. Returns the shm name; throws UsageError when several
// instances run and none is "default".
std::string resolve_counters_name(const std::string& instance, const std::string& runtime_dir);

bool pid_alive(pid_t pid);
uint64_t monotonic_now_ns();
uint64_t realtime_now_ns();

// Sends one admin request to the socket and waits (up to 10 s) for the reply.
proto::AdminReply admin_request(const std::string& socket_path, proto::AdminVerb verb,
                                const std::string& key, const std::string& value);

// Reads a stopped (or running) trace buffer: header, the jobs it saw and events.
struct TraceData {
  proto::TraceHeader header{};
  std::vector<proto::TraceJob> jobs;
  std::vector<proto::TraceEvent> events;

  // The printable name of the job with this serial (TraceEvent::job), "" if unknown.
  std::string job_name(uint32_t job) const;
};
TraceData read_trace(const std::string& shm_name);

}  // namespace nodecomm::ctl
