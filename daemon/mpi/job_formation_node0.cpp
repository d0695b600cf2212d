// Node 0's side of a job group's formation (job_formation.hpp).
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <limits>
#include <mutex>
#include <random>
#include <thread>
#include <utility>

#include "config/log.hpp"
#include "mpi/job_formation.hpp"
#include "mpi/rendezvous.hpp"
#include "nodecomm/ipc/clock.hpp"

namespace nodecomm::daemon {
namespace {

// A node 0 that died keeps its generation; a key restarted this often needs the rendezvous
// server restarted (which forgets every name).
// Between rounds of watching the joiners already in and looking for one to call.
constexpr auto kGatherInterval = std::chrono::milliseconds(20);

const char* kind_name(LinkKind kind) {
  switch (kind) {
    case LinkKind::kHello:
      return "hello";
    case LinkKind::kReply:
      return "reply";
    case LinkKind::kPrepare:
      return "prepare";
    case LinkKind::kReady:
      return "ready";
    case LinkKind::kBusy:
      return "busy";
    case LinkKind::kLeave:
      return "leave";
    case LinkKind::kStop:
      return "stop";
    case LinkKind::kCommit:
      return "commit";
    case LinkKind::kAbort:
      return "abort";
    case LinkKind::kPort:
      return "port";
  }
  return "unknown";
}

std::string gave_up(uint32_t node) {
  return fmt::format("node {} gave up (its job's ranks left or its attach deadline passed)", node);
}

constexpr const char* kNode0GaveUp =
    "node 0 gave up (its job's ranks left or its attach deadline passed)";
// How long node 0 waits for its creation lock before calling a joiner, and the pause before
// calling again one that was busy: up to ten times it, at random, so that two formations of
// the same daemons do not keep colliding.
constexpr auto kNode0LockWait = std::chrono::milliseconds(50);
constexpr uint64_t kBackoffNs = 50000000ULL;
constexpr auto kAckInterval = std::chrono::milliseconds(10);
constexpr auto kAnswerInterval = std::chrono::milliseconds(50);

// Answers the joiners' pings on a thread of its own, so that node 0 stays visibly alive while
// its formation thread waits in an accept or for an ack. A ping carries the joiner's node
// count; one that disagrees is answered all the same, and recorded.
class PingAnswerer {
 public:
  struct Seen {
    bool any = false;
    uint32_t latest = 0;  // the joiner's latest ping
    uint64_t at_ns = 0;   // when it was answered
  };

  PingAnswerer(std::string base, uint32_t generation, uint32_t nodes)
      : base_(std::move(base)), generation_(generation), nodes_(nodes), seen_(nodes) {
    thread_ = std::thread([this] { run(); });
  }
  // Stops answering and takes the answers back.
  ~PingAnswerer() {
    stop_.store(true, std::memory_order_relaxed);
    thread_.join();
    for (const auto& [name, value] : answers_) unpublish_name(name, value);
  }
  PingAnswerer(const PingAnswerer&) = delete;
  PingAnswerer& operator=(const PingAnswerer&) = delete;

  Seen seen(uint32_t joiner) {
    const std::lock_guard<std::mutex> lock(mutex_);
    return seen_[joiner];
  }
  std::string failure() {
    const std::lock_guard<std::mutex> lock(mutex_);
    return failure_;
  }

 private:
  void run() {
    const std::string mine = fmt::format("nodes={}", nodes_);
    std::vector<uint32_t> next(nodes_, 0);
    std::string ping;
    while (!stop_.load(std::memory_order_relaxed)) {
      try {
        for (uint32_t n = 1; n < nodes_; ++n) {
          while (lookup_name(ping_name(base_, generation_, n, next[n]), ping, 0)) {
            answers_.emplace_back(answer_name(base_, generation_, n, next[n]), ping);
            publish_name(answers_.back().first, answers_.back().second, 0);
            const std::lock_guard<std::mutex> lock(mutex_);
            seen_[n] = {true, next[n]++, ipc::monotonic_ns()};
            if (ping != mine && failure_.empty()) {
              failure_ = fmt::format("node {} says the job has {} nodes, node 0 says {}", n,
                                     ping.substr(ping.find('=') + 1), nodes_);
            }
          }
        }
      } catch (const std::exception& e) {
        const std::lock_guard<std::mutex> lock(mutex_);
        if (failure_.empty()) failure_ = e.what();
      }
      std::this_thread::sleep_for(kAnswerInterval);
    }
  }

  std::string base_;
  uint32_t generation_;
  uint32_t nodes_;
  std::vector<std::pair<std::string, std::string>> answers_;  // the thread's own
  std::mutex mutex_;
  std::vector<Seen> seen_;  // guarded by mutex_
  std::string failure_;     // guarded by mutex_
  // relaxed: only tells the thread to end; the join orders everything it did before.
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

std::unique_ptr<Transport> JobFormation::run_node0() {
  const uint32_t nodes = request_.nodes;
  const std::string base = rendezvous_base(request_.key);
  uint32_t generation = 0;
  std::string taken;
  while (lookup_name(generation_name(base, generation), taken, 0)) {
    if (++generation == kMaxGenerations) {
      fail(
          fmt::format("its {} generations in the rendezvous server are all taken (by node 0s "
                      "that died): restart the rendezvous unit",
                      kMaxGenerations));
    }
  }
  std::vector<std::string> ports(nodes);
  Names published;  // joiners' ports, answers to pings, "go"s
  std::pair<std::string, std::string> marker;
  // Whatever ends the rendezvous: nobody may find it any more (the generation's marker last,
  // so that the generation stays taken until its other names are gone), and the ports close.
  auto end_rendezvous = [&] {
    for (const auto& [name, value] : published) unpublish_name(name, value);
    published.clear();
    if (!marker.first.empty()) unpublish_name(marker.first, marker.second);
    marker = {};
    for (std::string& port : ports) {
      if (!port.empty()) MPI_Close_port(port.c_str());
      port.clear();
    }
  };
  Links links(nodes);
  std::string why;
  try {
    for (uint32_t n = 1; n < nodes; ++n) {
      char port[MPI_MAX_PORT_NAME] = {};
      check(MPI_Open_port(MPI_INFO_NULL, port), "MPI_Open_port");
      ports[n] = port;
    }
    for (uint32_t n = 1; n < nodes; ++n) {
      published.emplace_back(joiner_name(base, generation, n), ports[n]);
      publish_name(published.back().first, published.back().second, 0);
    }
    marker = {generation_name(base, generation), fmt::format("nodes={}", nodes)};
    publish_name(marker.first, marker.second, 0);
    why = gather_joiners(base, generation, ports, published, links);
  } catch (const std::exception& e) {
    end_rendezvous();
    abort_joiners(links, e.what());
    throw;
  }
  end_rendezvous();
  if (!why.empty()) {
    abort_joiners(links, why);
    fail(why);
  }
  std::unique_lock<std::timed_mutex> lock = commit(links);
  return finish(grow(links));
}

std::string JobFormation::gather_joiners(const std::string& base, uint32_t generation,
                                         const std::vector<std::string>& ports, Names& published,
                                         Links& links) {
  const uint32_t nodes = request_.nodes;
  const uint64_t timeout = timeout_ns();
  PingAnswerer answerer(base, generation, nodes);
  std::vector<uint32_t> called(nodes, std::numeric_limits<uint32_t>::max());
  std::vector<uint64_t> not_before(nodes, 0);
  std::minstd_rand random(static_cast<uint32_t>(::getpid() ^ ipc::monotonic_ns()));
  uint32_t turn = 1;
  for (;;) {
    if (cancelled()) return kNode0GaveUp;
    if (std::string why = answerer.failure(); !why.empty()) {
      // The ping was answered all the same: a moment for the joiner to read that a live
      // node 0 disagrees, so that it fails naming both counts too.
      std::this_thread::sleep_for(std::chrono::nanoseconds(timeout / 2));
      return why;
    }
    uint32_t in = 0;
    for (uint32_t n = 1; n < nodes; ++n) {
      if (!links[n]) continue;
      ++in;
      LinkMessage m;
      if (links[n]->poll(m)) {
        if (m.kind == LinkKind::kLeave) return gave_up(n);
        return fmt::format("node {} sent {} while others joined", n, kind_name(m.kind));
      }
    }
    if (in == nodes - 1) return {};
    // A joiner whose latest ping is fresh (a live one pings every half exchange timeout) and
    // not yet called, in turns.
    const uint64_t now = ipc::monotonic_ns();
    uint32_t next = 0;
    PingAnswerer::Seen seen;
    for (uint32_t i = 0; i + 1 < nodes && next == 0; ++i) {
      const uint32_t n = 1 + (turn - 1 + i) % (nodes - 1);
      seen = answerer.seen(n);
      if (!links[n] && seen.any && now - seen.at_ns < 2 * timeout && seen.latest != called[n] &&
          now >= not_before[n]) {
        next = n;
      }
    }
    if (next == 0) {
      std::this_thread::sleep_for(kGatherInterval);
      continue;
    }
    turn = next % (nodes - 1) + 1;
    // Both ends of the connect take their creation locks first, or neither connects: "go"
    // (node 0 holds its own), then "ack" (the joiner holds its own and connects) or "busy".
    std::unique_lock<std::timed_mutex> lock(runtime_->creation_lock(), std::defer_lock);
    bool ready = false;
    if (lock.try_lock_for(kNode0LockWait)) {
      // One call per ping: the joiner answers each "go" once, and pings again after it.
      called[next] = seen.latest;
      published.emplace_back(go_name(base, generation, next, seen.latest), "go");
      publish_name(published.back().first, published.back().second, 0);
      ready = joiner_acks(base, generation, next, seen.latest);
    }
    NC_LOG(kDebug, "{} at {:.3f} s: called node {} after its ping {}: {}", what_, elapsed_s(), next,
           seen.latest, lock.owns_lock() ? (ready ? "ack" : "busy") : "own lock taken");
    if (!ready) {
      if (lock.owns_lock()) lock.unlock();
      not_before[next] = ipc::monotonic_ns() + kBackoffNs + random() % (9 * kBackoffNs);
      continue;
    }
    links[next] =
        accept_joiner(next, ports[next], link_id(base, generation, next, seen.latest), lock);
  }
}

bool JobFormation::joiner_acks(const std::string& base, uint32_t generation, uint32_t joiner,
                               uint32_t ping) {
  const uint64_t deadline = ipc::monotonic_ns() + timeout_ns();
  std::string value;
  while (!cancelled() && ipc::monotonic_ns() < deadline) {
    if (lookup_name(ack_name(base, generation, joiner, ping, true), value, 0)) return true;
    if (lookup_name(ack_name(base, generation, joiner, ping, false), value, 0)) return false;
    std::this_thread::sleep_for(kAckInterval);
  }
  return false;
}

std::unique_ptr<FormationLink> JobFormation::accept_joiner(
    uint32_t joiner, const std::string& port, uint64_t id,
    std::unique_lock<std::timed_mutex>& lock) {
  MPI_Comm inter = MPI_COMM_NULL;
  // The joiner connects now; the exchange timeout bounds the wait if it died meanwhile.
  const int rc = MPI_Comm_accept(port.c_str(), MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter);
  lock.unlock();
  if (rc != MPI_SUCCESS) return nullptr;
  auto link = std::make_unique<FormationLink>(inter, id, 0, what_);
  link->send(LinkKind::kHello, 0, request_.nodes);
  LinkMessage reply;
  // A joiner that died after connecting never answers: it is called again if it pings again.
  if (!link->wait(reply, ipc::monotonic_ns() + timeout_ns(), [this] { return cancelled(); })) {
    return nullptr;
  }
  if (reply.kind != LinkKind::kReply || reply.node != joiner || reply.nodes != request_.nodes) {
    return nullptr;
  }
  NC_LOG(kDebug, "{} at {:.3f} s: node {} is in", what_, elapsed_s(), joiner);
  return link;
}

void JobFormation::abort_joiners(Links& links, const std::string& why) {
  for (auto& link : links) {
    if (link) link->send(LinkKind::kAbort, 0, request_.nodes, why);
  }
  // A joiner that is gone never receives it: the wait is bounded, and the link then dropped.
  const uint64_t deadline = ipc::monotonic_ns() + kFlushNs;
  for (auto& link : links) {
    if (link) link->flush(deadline);
  }
  links.clear();
}

std::unique_lock<std::timed_mutex> JobFormation::commit(Links& links) {
  const uint32_t nodes = request_.nodes;
  const uint64_t timeout = timeout_ns();
  std::minstd_rand random(static_cast<uint32_t>(::getpid() ^ ipc::monotonic_ns()));
  // Every daemon takes its creation lock, or none keeps it: a daemon whose lock another
  // formation holds says busy, everyone lets go, and node 0 asks again after a random pause,
  // so that two formations of the same daemons never each hold one half.
  for (uint32_t attempt = 0;; ++attempt) {
    std::string why;
    std::unique_lock<std::timed_mutex> lock(runtime_->creation_lock(), std::defer_lock);
    if (cancelled()) why = kNode0GaveUp;
    if (why.empty() && !lock.try_lock_for(std::chrono::nanoseconds(timeout))) continue;
    std::vector<bool> ready(nodes, false);
    bool busy = false;
    if (why.empty()) {
      for (uint32_t n = 1; n < nodes; ++n) links[n]->send(LinkKind::kPrepare, 0, nodes);
      const uint64_t deadline = ipc::monotonic_ns() + timeout;
      for (uint32_t n = 1; n < nodes && why.empty(); ++n) {
        LinkMessage m;
        if (!links[n]->wait(m, deadline, nullptr)) {
          why = fmt::format("node {} did not answer within {} s", n, exchange_timeout_s());
        } else if (m.kind == LinkKind::kReady) {
          ready[n] = true;
        } else if (m.kind == LinkKind::kBusy) {
          busy = true;
        } else if (m.kind == LinkKind::kLeave) {
          why = gave_up(n);
        } else {
          why = fmt::format("node {} answered {} to prepare", n, kind_name(m.kind));
        }
      }
    }
    if (!why.empty()) {
      abort_joiners(links, why);
      fail(why);
    }
    if (!busy) {
      for (uint32_t n = 1; n < nodes; ++n) links[n]->send(LinkKind::kCommit, 0, nodes);
      NC_LOG(kDebug, "{} at {:.3f} s: committed, {} joiners, {} tries", what_, elapsed_s(),
             nodes - 1, attempt + 1);
      return lock;
    }
    for (uint32_t n = 1; n < nodes; ++n) {
      if (ready[n]) links[n]->send(LinkKind::kStop, 0, nodes);
    }
    NC_LOG(kDebug, "{} at {:.3f} s: a joiner was busy, try {}", what_, elapsed_s(), attempt + 1);
    lock.unlock();
    const uint32_t spread = 50U * std::min(attempt + 1, 10U);
    std::this_thread::sleep_for(std::chrono::milliseconds(50 + random() % spread));
  }
}

MPI_Comm JobFormation::grow(Links& links) {
  const uint32_t nodes = request_.nodes;
  // One joiner at a time, in node order, each through a port of its own: Open MPI 4.1 pairs
  // up concurrent connects to one port wrongly, and only the daemons connected through one
  // accept know each other's addresses.
  MPI_Comm group = MPI_COMM_SELF;
  try {
    for (uint32_t n = 1; n < nodes; ++n) {
      char port[MPI_MAX_PORT_NAME] = {};
      check(MPI_Open_port(MPI_INFO_NULL, port), "MPI_Open_port (group)");
      links[n]->send(LinkKind::kPort, 0, nodes, port);
      MPI_Comm inter = MPI_COMM_NULL;
      const int accepted = MPI_Comm_accept(port, MPI_INFO_NULL, 0, group, &inter);
      MPI_Close_port(port);
      check(accepted, "MPI_Comm_accept (group)");
      MPI_Comm merged = MPI_COMM_NULL;
      const int rc = MPI_Intercomm_merge(inter, /*high=*/0, &merged);
      MPI_Comm_free(&inter);
      check(rc, "MPI_Intercomm_merge");
      if (group != MPI_COMM_SELF) MPI_Comm_free(&group);
      group = merged;
      NC_LOG(kDebug, "{} at {:.3f} s: node {} is in the group", what_, elapsed_s(), n);
    }
  } catch (...) {
    if (group != MPI_COMM_SELF) MPI_Comm_free(&group);
    throw;
  }
  // Every joiner connected, so it has read its port, the last message: the links are done.
  const uint64_t flushed = ipc::monotonic_ns() + kFlushNs;
  for (auto& link : links) {
    if (!link) continue;
    link->flush(flushed);
    link->finished();
  }
  links.clear();
  return group;
}

}  // namespace nodecomm::daemon
