// A joiner's side of a job group's formation (job_formation.hpp): every node but node 0.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <thread>
#include <utility>

#include "config/log.hpp"
#include "mpi/job_formation.hpp"
#include "mpi/rendezvous.hpp"
#include "nodecomm/ipc/clock.hpp"

namespace nodecomm::daemon {
namespace {

// Between lookups while node 0 has not come or has not called this joiner: the spike's 20 ms,
// a small load on the rendezvous server per waiting joiner.
constexpr auto kLookupInterval = std::chrono::milliseconds(20);
// How long a prepare or a "go" waits for this daemon's creation lock before answering busy: a
// moment, since node 0 holds its own meanwhile.
constexpr auto kJoinerLockWait = std::chrono::milliseconds(100);

}  // namespace

std::unique_ptr<Transport> JobFormation::run_joiner() {
  Names pings;
  std::unique_ptr<FormationLink> link;
  try {
    link = rendezvous_as_joiner(pings);
  } catch (...) {
    for (const auto& [name, value] : pings) unpublish_name(name, value);
    throw;
  }
  for (const auto& [name, value] : pings) unpublish_name(name, value);
  std::unique_lock<std::timed_mutex> lock = await_commit(*link);
  const MPI_Comm group = join_group(*link);
  // Node 0 sent its last message (the port) and read this joiner's last (ready).
  link->finished();
  link.reset();
  return finish(group);
}

std::unique_ptr<FormationLink> JobFormation::rendezvous_as_joiner(Names& pings) {
  const uint32_t node = request_.node;
  const uint32_t nodes = request_.nodes;
  const uint64_t timeout = timeout_ns();
  const std::string base = rendezvous_base(request_.key);
  uint64_t unnamed_since = 0;
  std::string marker;
  std::string port;
  std::string value;
  // Generations below the live one were left by node 0s that died: each costs one exchange
  // timeout, the wait for an answer to a ping that nobody reads.
  for (uint32_t generation = 0;; ++generation) {
    if (generation == kMaxGenerations) {
      fail(fmt::format("no live node 0 in {} generations of its name: restart the rendezvous unit",
                       kMaxGenerations));
    }
    for (;;) {
      if (cancelled()) fail("gave up before node 0 took it in");
      if (!lookup_name(generation_name(base, generation), marker, node)) {
        // Node 0 has not come; when it does, it takes this generation (the lowest free one).
        unnamed_since = 0;
      } else if (lookup_name(joiner_name(base, generation, node), port, node)) {
        break;
      } else {
        // Node 0 publishes every joiner's name before the generation, and takes them back
        // first: a generation that stays without this node's name is not its job's, or ends.
        const uint64_t now = ipc::monotonic_ns();
        if (unnamed_since == 0) unnamed_since = now;
        if (now - unnamed_since >= timeout) break;
      }
      std::this_thread::sleep_for(kLookupInterval);
    }
    if (unnamed_since != 0) {
      NC_LOG(kWarn,
             "{}: generation {} ({}) has no place for node {} of {}: a node 0 given another node "
             "count, or one that died; trying the next",
             what_, generation, marker, node, nodes);
      unnamed_since = 0;
      continue;
    }
    uint32_t last = 0;
    if (!ping_node0(base, generation, pings, last)) {
      if (cancelled()) continue;
      NC_LOG(kWarn, "{}: node 0 of generation {} does not answer (it died): trying the next", what_,
             generation);
      continue;
    }
    // Node 0 lives: what it says is the job's, and a disagreement is final.
    if (marker != fmt::format("nodes={}", nodes)) {
      fail(fmt::format("node 0 says the job has {} nodes, node {} says {}",
                       marker.substr(marker.find('=') + 1), node, nodes));
    }
    // Until node 0 calls ("go" after one of its last two pings) and the connect works,
    // pinging every half exchange timeout: node 0 only calls joiners that pinged lately, and
    // an unanswered ping means it died.
    uint32_t previous = last;
    std::vector<uint32_t> called;
    uint64_t pinged_ns = ipc::monotonic_ns();
    bool node0_died = false;
    while (!node0_died) {
      if (cancelled()) fail("gave up before node 0 took it in");
      for (const uint32_t ping : {last, previous}) {
        if (std::find(called.begin(), called.end(), ping) != called.end() ||
            !lookup_name(go_name(base, generation, node, ping), value, node)) {
          continue;
        }
        called.push_back(ping);
        std::unique_lock<std::timed_mutex> lock(runtime_->creation_lock(), std::defer_lock);
        const bool ready = lock.try_lock_for(kJoinerLockWait);
        pings.emplace_back(ack_name(base, generation, node, ping, ready), "ack");
        publish_name(pings.back().first, pings.back().second, node);
        // Node 0 calls again only after a newer ping: the next one is due at once.
        pinged_ns = 0;
        if (!ready) continue;
        MPI_Comm inter = MPI_COMM_NULL;
        const int rc = MPI_Comm_connect(port.c_str(), MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter);
        lock.unlock();
        if (rc != MPI_SUCCESS) continue;
        auto link = std::make_unique<FormationLink>(inter, link_id(base, generation, node, ping),
                                                    node, what_);
        LinkMessage hello;
        if (link->wait(hello, ipc::monotonic_ns() + timeout, [this] { return cancelled(); }) &&
            hello.kind == LinkKind::kHello) {
          link->send(LinkKind::kReply, node, nodes);
          return link;
        }
      }
      if (ipc::monotonic_ns() - pinged_ns >= timeout / 2) {
        previous = last;
        node0_died = !ping_node0(base, generation, pings, last);
        pinged_ns = ipc::monotonic_ns();
        continue;
      }
      std::this_thread::sleep_for(kLookupInterval);
    }
    if (cancelled()) fail("gave up before node 0 took it in");
    NC_LOG(kWarn, "{}: node 0 of generation {} stopped answering (it died): trying the next", what_,
           generation);
  }
}

bool JobFormation::ping_node0(const std::string& base, uint32_t generation, Names& pings,
                              uint32_t& ping) {
  const uint32_t node = request_.node;
  // The next free number: pings of this node's daemons that died keep theirs.
  uint32_t attempt = 0;
  std::string value;
  while (lookup_name(ping_name(base, generation, node, attempt), value, node)) ++attempt;
  pings.emplace_back(ping_name(base, generation, node, attempt),
                     fmt::format("nodes={}", request_.nodes));
  publish_name(pings.back().first, pings.back().second, node);
  const uint64_t deadline = ipc::monotonic_ns() + timeout_ns();
  ping = attempt;
  while (!cancelled() && ipc::monotonic_ns() < deadline) {
    if (lookup_name(answer_name(base, generation, node, attempt), value, node)) return true;
    std::this_thread::sleep_for(kLookupInterval);
  }
  return false;
}

std::unique_lock<std::timed_mutex> JobFormation::await_commit(FormationLink& link) {
  const uint32_t node = request_.node;
  const uint32_t nodes = request_.nodes;
  auto leave = [&] {
    link.send(LinkKind::kLeave, node, nodes);
    link.flush(ipc::monotonic_ns() + kFlushNs);
    fail("gave up before the group was made");
  };
  for (;;) {
    // Other joiners may take long to come; until this one says ready, its job may give up.
    LinkMessage m;
    if (!link.wait(m, std::numeric_limits<uint64_t>::max(), [this] { return cancelled(); })) {
      leave();
    }
    if (m.kind == LinkKind::kAbort) fail("node 0 called the formation off: " + m.get_text());
    if (m.kind != LinkKind::kPrepare) fail("node 0 sent another message than prepare");
    if (cancelled()) leave();
    std::unique_lock<std::timed_mutex> lock(runtime_->creation_lock(), std::defer_lock);
    if (!lock.try_lock_for(kJoinerLockWait)) {
      link.send(LinkKind::kBusy, node, nodes);
      continue;
    }
    link.send(LinkKind::kReady, node, nodes);
    // Node 0 decides within one exchange timeout of its prepare; a node 0 silent for three has
    // died, and nobody can be waiting for this joiner then.
    if (!link.wait(m, ipc::monotonic_ns() + 3 * timeout_ns(), nullptr)) {
      fail("node 0 sent no decision (it died?)");
    }
    if (m.kind == LinkKind::kCommit) return lock;
    if (m.kind == LinkKind::kAbort) fail("node 0 called the formation off: " + m.get_text());
    if (m.kind != LinkKind::kStop) fail("node 0 sent another message than commit or stop");
  }
}

MPI_Comm JobFormation::join_group(FormationLink& link) {
  const uint32_t node = request_.node;
  const uint32_t nodes = request_.nodes;
  // Committed: the job giving up no longer stops this joiner. Its port comes once the group
  // holds nodes 0 to node - 1, a fraction of a second each.
  LinkMessage m;
  if (!link.wait(m, ipc::monotonic_ns() + (node + 2ULL) * timeout_ns(), nullptr)) {
    fail("node 0 sent no port to join the group through (it died?)");
  }
  if (m.kind != LinkKind::kPort) fail("node 0 sent another message than a port");
  const std::string port = m.get_text();
  MPI_Comm inter = MPI_COMM_NULL;
  check(MPI_Comm_connect(port.c_str(), MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter),
        "MPI_Comm_connect (group)");
  MPI_Comm group = MPI_COMM_NULL;
  const int rc = MPI_Intercomm_merge(inter, /*high=*/1, &group);
  MPI_Comm_free(&inter);
  check(rc, "MPI_Intercomm_merge");
  // Then it takes part in accepting the nodes after it (the port matters at node 0 only).
  int size = 0;
  MPI_Comm_size(group, &size);
  while (static_cast<uint32_t>(size) < nodes) {
    MPI_Comm next = MPI_COMM_NULL;
    const int accepted = MPI_Comm_accept(nullptr, MPI_INFO_NULL, 0, group, &next);
    MPI_Comm merged = MPI_COMM_NULL;
    const int merged_rc =
        accepted == MPI_SUCCESS ? MPI_Intercomm_merge(next, /*high=*/0, &merged) : accepted;
    if (next != MPI_COMM_NULL) MPI_Comm_free(&next);
    MPI_Comm_free(&group);
    check(accepted, "MPI_Comm_accept (group)");
    check(merged_rc, "MPI_Intercomm_merge");
    group = merged;
    MPI_Comm_size(group, &size);
  }
  return group;
}

}  // namespace nodecomm::daemon
