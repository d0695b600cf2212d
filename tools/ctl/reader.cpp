#include "reader.hpp"

#include <dirent.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>

#include "nodecomm/ipc/clock.hpp"
#include "nodecomm/ipc/daemon_identity.hpp"
#include "nodecomm/ipc/fixed_text.hpp"
#include "nodecomm/ipc/named_shm.hpp"
#include "nodecomm/ipc/printable.hpp"
#include "nodecomm/ipc/runtime_paths.hpp"
#include "nodecomm/ipc/socket.hpp"
#include "nodecomm/proto/types.hpp"

namespace nodecomm::ctl {

namespace {

// Maps a shared-memory object read-only, all of it.
ipc::NamedShm map_readonly(const std::string& name) {
  ipc::NamedShm shm;
  int open_errno = 0;
  const std::string error = shm.open_readonly(name, &open_errno);
  if (open_errno == EACCES) {
    // Counters and traces name other users' jobs: 0600, or 0640 for the daemon's admin-group.
    throw RuntimeError(fmt::format(
        "permission denied reading /dev/shm{}: it is readable by root, the daemon's uid and "
        "the members of its admin-group only (docs/OPERATIONS.md, nodecommctl)",
        name));
  }
  if (!error.empty()) throw RuntimeError(error);
  return shm;
}

template <class T>
void copy_words(T& out, const T& shared) {
  static_assert(sizeof(T) % 8 == 0);
  proto::detail::load_words(&out, &shared, sizeof(T));
}

}  // namespace

uint64_t monotonic_now_ns() {
  return ipc::monotonic_ns();
}
uint64_t realtime_now_ns() {
  return ipc::clock_ns(CLOCK_REALTIME);
}

// How long a reader waits for a section the daemon is rewriting, and how many spins it makes
// between sleeps.
constexpr uint64_t kSectionWaitNs = 3'000'000'000ull;
constexpr int kSpinTries = 200;

bool pid_alive(pid_t pid) {
  return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM);
}

std::string Snapshot::instance() const {
  return ipc::bounded_text(daemon.instance);
}

std::string Snapshot::param(const std::string& key) const {
  for (uint32_t i = 0; i < std::min(params.count, proto::kCounterParams); ++i) {
    if (ipc::bounded_text(params.entries[i].key) == key) {
      return ipc::bounded_text(params.entries[i].value);
    }
  }
  return {};
}

const proto::JobSlot* Snapshot::job(uint32_t slot_plus_one) const {
  return slot_plus_one == 0 || slot_plus_one > jobs.count ? nullptr
                                                          : &jobs.slots[slot_plus_one - 1];
}

std::string Snapshot::job_name(uint32_t slot_plus_one) const {
  const proto::JobSlot* j = job(slot_plus_one);
  return j == nullptr ? std::string() : ipc::printable_text(j->name);
}

bool name_matches(const char (&field)[proto::kCounterNameBytes], const std::string& name) {
  return ipc::bounded_text(field) == name || ipc::printable_text(field) == name;
}

std::string job_names(const Snapshot& s) {
  std::string names;
  for (uint32_t i = 0; i < s.jobs.count; ++i) {
    names +=
        fmt::format("{}'{}'", names.empty() ? "" : ", ", ipc::printable_text(s.jobs.slots[i].name));
  }
  return names.empty() ? "none" : names;
}

Snapshot only_job(const Snapshot& s, const std::string& name) {
  uint32_t found = 0;
  for (uint32_t i = 0; i < s.jobs.count && found == 0; ++i) {
    if (name_matches(s.jobs.slots[i].name, name)) found = i + 1;
  }
  if (found == 0) {
    throw RuntimeError(fmt::format("instance '{}' serves no job '{}'; its jobs: {}", s.instance(),
                                   ipc::printable(name), job_names(s)));
  }
  Snapshot out = s;
  out.jobs.count = 1;
  out.jobs.total = 1;
  out.jobs.slots[0] = s.jobs.slots[found - 1];
  out.clients.count = 0;
  for (uint32_t i = 0; i < s.clients.count; ++i) {
    if (s.clients.slots[i].job != found) continue;
    out.clients.slots[out.clients.count] = s.clients.slots[i];
    out.clients.slots[out.clients.count++].job = 1;
  }
  out.clients.total = out.clients.count;
  out.ops.count = 0;
  for (uint32_t i = 0; i < s.ops.count; ++i) {
    if (s.ops.slots[i].job != found) continue;
    out.ops.slots[out.ops.count] = s.ops.slots[i];
    out.ops.slots[out.ops.count++].job = 1;
  }
  out.ops.total = std::max(out.ops.count, out.jobs.slots[0].ops_in_flight);
  return out;
}

double Snapshot::heartbeat_age_s() const {
  const uint64_t at = liveness.heartbeat_monotonic_ns;
  return at == 0 || now_monotonic_ns < at ? 0.0 : static_cast<double>(now_monotonic_ns - at) / 1e9;
}

CountersView::CountersView(const std::string& shm_name)
    : name_(shm_name), shm_(map_readonly(shm_name)) {
  const size_t size = shm_.size();
  const auto* seg = static_cast<const proto::CountersSegment*>(shm_.data());
  std::string problem;
  if (size < sizeof(proto::CountersHeader)) {
    problem = fmt::format("is {} bytes, smaller than a header", size);
  } else {
    // acquire: pairs with the daemon's release store; the rest is initialised if this matches.
    const uint32_t version =
        std::atomic_ref<uint32_t>(const_cast<uint32_t&>(seg->header.layout_version))
            .load(std::memory_order_acquire);
    if (seg->header.magic != proto::kCountersMagic) {
      problem = "is not a nodecomm counters segment (bad magic)";
    } else if (version == 0) {
      problem = "is still being initialised (the daemon is starting)";
    } else if (version != proto::kCountersLayoutVersion) {
      problem = fmt::format(
          "has counters layout version {}, this nodecommctl reads version {} (use the "
          "nodecommctl of the same release as the daemon)",
          version, proto::kCountersLayoutVersion);
    } else if (size < sizeof(proto::CountersSegment) ||
               seg->header.segment_bytes != sizeof(proto::CountersSegment)) {
      problem = fmt::format("has {} bytes, expected {}", seg->header.segment_bytes,
                            sizeof(proto::CountersSegment));
    }
  }
  if (!problem.empty()) throw RuntimeError(fmt::format("/dev/shm{} {}", shm_name, problem));
  seg_ = seg;
}

CountersView::~CountersView() = default;

Snapshot CountersView::read() const {
  Snapshot s;
  s.shm_name = name_;
  s.now_monotonic_ns = monotonic_now_ns();
  s.now_realtime_ns = realtime_now_ns();
  s.daemon = seg_->daemon;  // written once before the version was published
  copy_words(s.liveness, seg_->liveness);
  copy_words(s.totals, seg_->totals);
  for (uint32_t c = 0; c < proto::kCounterCollectives; ++c) {
    copy_words(s.collectives[c], seg_->collectives[c]);
  }
  // The daemon rewrites a section in microseconds, but on a loaded machine it can be
  // descheduled in the middle for many milliseconds; spinning alone gives up long before it
  // runs again. So retry by time, sleeping between bursts, and give up early only when the
  // writer is gone.
  const uint64_t deadline_ns = s.now_monotonic_ns + kSectionWaitNs;
  for (;;) {
    const bool ok = proto::seqlock_read(seg_->params, s.params, kSpinTries) &&
                    proto::seqlock_read(seg_->jobs, s.jobs, kSpinTries) &&
                    proto::seqlock_read(seg_->clients, s.clients, kSpinTries) &&
                    proto::seqlock_read(seg_->ops, s.ops, kSpinTries);
    // Clients and operations name their job by its slot: all three of one snapshot. The
    // daemon writes the three back to back, so a mismatch clears at once.
    if (ok && s.jobs.snapshot == s.clients.snapshot && s.jobs.snapshot == s.ops.snapshot) break;
    const bool writer_alive = pid_alive(static_cast<pid_t>(s.daemon.pid));
    if (!writer_alive || monotonic_now_ns() >= deadline_ns) {
      throw RuntimeError(
          writer_alive
              ? fmt::format("/dev/shm{}: a section stayed busy for {} s (the daemon is stuck "
                            "while rewriting it)",
                            name_, kSectionWaitNs / 1'000'000'000)
              : fmt::format("/dev/shm{}: a section was left half-written (the daemon, pid {}, "
                            "died while rewriting it)",
                            name_, s.daemon.pid));
    }
    const timespec pause{0, 1'000'000};
    ::nanosleep(&pause, nullptr);
  }
  s.params.count = std::min(s.params.count, proto::kCounterParams);
  s.jobs.count = std::min(s.jobs.count, proto::kCounterJobs);
  s.clients.count = std::min(s.clients.count, proto::kCounterClients);
  s.ops.count = std::min(s.ops.count, proto::kCounterOps);
  s.alive = pid_alive(static_cast<pid_t>(s.daemon.pid));
  return s;
}

std::vector<std::string> list_counters_names() {
  std::vector<std::string> names;
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return names;
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (name.starts_with("nodecomm.") && name.ends_with(".counters")) names.push_back("/" + name);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

std::string instance_of(const std::string& shm_name) {
  std::string name = shm_name.substr(std::string("/nodecomm.").size());
  return name.substr(0, name.size() - std::string(".counters").size());
}

std::string resolve_counters_name(const std::string& instance, const std::string& runtime_dir) {
  if (!runtime_dir.empty()) {
    const std::string path = ipc::ready_path(runtime_dir);
    std::ifstream in(path);
    if (!in) {
      throw RuntimeError(fmt::format("no daemon in {}: cannot read {}: {}", runtime_dir, path,
                                     std::strerror(errno)));
    }
    try {
      const auto ready = nlohmann::json::parse(in);
      return ipc::counters_shm_name(ready.at("instance").get<std::string>());
    } catch (const std::exception& e) {
      throw RuntimeError(fmt::format("{}: {}", path, e.what()));
    }
  }
  if (!instance.empty()) return ipc::counters_shm_name(instance);
  const char* env = std::getenv("NODECOMM_INSTANCE");
  if (env != nullptr && *env != '\0') return ipc::counters_shm_name(env);
  // Nothing named: the service ("default") if it runs, else the one instance that runs.
  std::string service = ipc::counters_shm_name("default");
  std::vector<std::string> running;
  for (const std::string& name : list_counters_names()) {
    try {
      if (CountersView(name).read().alive) running.push_back(name);
    } catch (const std::exception&) {
      continue;  // unreadable (another uid's, or being created): not a candidate
    }
  }
  if (running.empty() || std::ranges::find(running, service) != running.end()) return service;
  if (running.size() == 1) return running.front();
  std::string names;
  for (const std::string& name : running) names += (names.empty() ? "" : ", ") + instance_of(name);
  throw UsageError(fmt::format(
      "{} instances are running on this node ({}) and none is 'default'; choose one with "
      "--instance NAME or $NODECOMM_INSTANCE",
      running.size(), names));
}

proto::AdminReply admin_request(const std::string& socket_path, proto::AdminVerb verb,
                                const std::string& key, const std::string& value) {
  proto::AdminRequest request{};
  request.type = static_cast<uint32_t>(proto::ControlType::kAdminRequest);
  request.magic = proto::kControlMagic;
  request.version = proto::kAdminProtocolVersion;
  request.verb = static_cast<uint32_t>(verb);
  if (key.size() >= sizeof(request.key) || value.size() >= sizeof(request.value)) {
    throw RuntimeError(fmt::format("key or value too long (at most {} and {} characters)",
                                   sizeof(request.key) - 1, sizeof(request.value) - 1));
  }
  ipc::copy_text(request.key, key);
  ipc::copy_text(request.value, value);
  std::string error;
  ipc::Fd fd = ipc::connect_unix(socket_path, error);
  if (!fd.valid()) throw RuntimeError(fmt::format("cannot connect to {}: {}", socket_path, error));
  if (std::string refusal = ipc::check_daemon_peer(fd.get(), socket_path); !refusal.empty()) {
    throw RuntimeError(refusal);
  }
  if (ipc::send_message(fd.get(), &request, sizeof(request)) != ipc::IoResult::kOk) {
    throw RuntimeError(fmt::format("cannot send to {}", socket_path));
  }
  alignas(8) uint8_t buffer[1024];
  size_t size = 0;
  const ipc::IoResult r = ipc::recv_message_timed(fd.get(), buffer, sizeof(buffer), size, 10'000);
  if (r == ipc::IoResult::kTimeout) {
    throw RuntimeError(fmt::format("no reply from the daemon at {} within 10 s", socket_path));
  }
  proto::AdminReply reply{};
  uint32_t type = 0;
  if (size >= sizeof(type)) std::memcpy(&type, buffer, sizeof(type));
  if (r != ipc::IoResult::kOk) {
    throw RuntimeError(
        fmt::format("the daemon at {} closed the connection without a reply", socket_path));
  }
  if (type == static_cast<uint32_t>(proto::ControlType::kHelloReply) &&
      size == sizeof(proto::HelloReply)) {
    // Refused at accept (too many clients): it answers as to a client.
    proto::HelloReply refused;
    std::memcpy(&refused, buffer, sizeof(refused));
    reply.status = refused.status;
    ipc::copy_text(reply.message, ipc::bounded_text(refused.message));
    return reply;
  }
  if (type != static_cast<uint32_t>(proto::ControlType::kAdminReply) || size != sizeof(reply)) {
    throw RuntimeError(fmt::format(
        "unexpected reply (type {}, {} bytes) from {}: is the daemon older than nodecommctl?", type,
        size, socket_path));
  }
  std::memcpy(&reply, buffer, sizeof(reply));
  reply.message[sizeof(reply.message) - 1] = '\0';
  return reply;
}

std::string TraceData::job_name(uint32_t job) const {
  for (const proto::TraceJob& j : jobs) {
    if (static_cast<uint32_t>(j.serial) == job) return ipc::printable_text(j.name);
  }
  return {};
}

TraceData read_trace(const std::string& shm_name) {
  const ipc::NamedShm shm = map_readonly(shm_name);
  const size_t size = shm.size();
  TraceData out;
  const auto* header = static_cast<const proto::TraceHeader*>(shm.data());
  std::string problem;
  if (size < sizeof(proto::TraceHeader) || header->magic != proto::kTraceMagic) {
    problem = "is not a nodecomm trace buffer";
  } else if (std::atomic_ref<uint32_t>(const_cast<uint32_t&>(header->layout_version))
                 .load(std::memory_order_acquire) != proto::kTraceLayoutVersion) {
    problem = fmt::format("has trace layout version {}, expected {}", header->layout_version,
                          proto::kTraceLayoutVersion);
  } else {
    out.header = *header;
    // acquire: the entries and events counted here are fully written (release after each,
    // trace.cpp).
    const uint32_t jobs = std::atomic_ref<uint32_t>(const_cast<uint32_t&>(header->jobs))
                              .load(std::memory_order_acquire);
    const uint64_t count = std::atomic_ref<uint64_t>(const_cast<uint64_t&>(header->count))
                               .load(std::memory_order_acquire);
    constexpr size_t kEventsAt =
        sizeof(proto::TraceHeader) + proto::kTraceJobs * sizeof(proto::TraceJob);
    const auto* table = reinterpret_cast<const proto::TraceJob*>(header + 1);
    const auto* events = reinterpret_cast<const proto::TraceEvent*>(table + proto::kTraceJobs);
    if (size >= kEventsAt) {
      out.jobs.assign(table, table + std::min(jobs, proto::kTraceJobs));
      const uint64_t fits = (size - kEventsAt) / sizeof(proto::TraceEvent);
      out.events.assign(events, events + std::min({count, fits, header->capacity}));
    }
  }
  if (!problem.empty()) throw RuntimeError(fmt::format("/dev/shm{} {}", shm_name, problem));
  return out;
}

}  // namespace nodecomm::ctl
