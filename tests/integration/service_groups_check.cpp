// One service daemon's network side, for tests/integration/service_groups.sh: an MPI singleton
// joined to the rendezvous server that forms the job groups named on its command line (each
// after its own delay, all at once), and in each runs checked allreduces (start_allreduce/test)
// and a ring of point-to-point messages (p2p) through the Transport interface, one thread
// driving every job as the daemon's loop does, with the daemons' liveness checks.
//
//   service_groups_check --uri FILE --name LABEL [--peer-timeout S] [--lanes L]
//                        [--start-file PATH]
//                        --job KEY:NODE:NODES:ROUNDS[:DELAY_S[:CANCEL_S[:LEAVE_S]]] ...
//
// DELAY_S: when to start forming, CANCEL_S: when to give the formation up if it has not
// formed by then (negative: never), both in seconds from the start: from READY, or with
// --start-file from when PATH appears (waited for up to 60 s), so that several processes count
// from one moment however long each took to join the rendezvous. LEAVE_S: this node drops the
// job's transport that long after it formed (between two rounds), as a daemon whose part of a
// job ended while its peers' part goes on. Prints one line per event, each with the wall-clock time
// (for the script's deadlines):
//   <t> <label> FORMED <key> node <n>/<N> in <s> s
//   <t> <label> DONE <key> exact rounds <R>
//   <t> <label> ERROR <key>: <text>
//   <t> <label> CANCELLED <key>
//   <t> <label> LEFT <key> after round <r>
// A lost peer (check_peers) ends its job with an ERROR line, as the engine fails the job's
// operations. Exit status 0 once every job has a DONE, ERROR or CANCELLED line, 2 on a usage
// error or if the rendezvous cannot be joined.
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "config/log.hpp"
#include "net/job_groups.hpp"
#include "net/transport.hpp"
#include "nodecomm/ipc/clock.hpp"

namespace {

using nodecomm::daemon::JobGroupFormer;
using nodecomm::daemon::kAllNodes;
using nodecomm::daemon::P2pRequest;
using nodecomm::daemon::Transport;
using nodecomm::daemon::TransportError;
using nodecomm::daemon::TransportHandle;

constexpr size_t kCount = 1031;  // int64 elements per allreduce
constexpr size_t kBytes = 4099;  // bytes per point-to-point message
constexpr auto kRoundPause = std::chrono::milliseconds(30);

double wall_seconds() {
  return static_cast<double>(nodecomm::ipc::clock_ns(CLOCK_REALTIME)) / 1e9;
}

using nodecomm::ipc::monotonic_ns;

std::string g_label;

template <class... Args>
void say(fmt::format_string<Args...> format, Args&&... args) {
  const std::string line = fmt::format("{:.3f} {} {}\n", wall_seconds(), g_label,
                                       fmt::format(format, std::forward<Args>(args)...));
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

enum class Phase { kWaiting, kForming, kAllreduce, kP2p, kPause, kOver };

struct Job {
  std::string key;
  uint32_t node = 0;
  uint32_t nodes = 2;
  uint32_t rounds = 1;
  double delay_s = 0;
  double cancel_s = -1;
  double leave_s = -1;

  Phase phase = Phase::kWaiting;
  uint64_t id = 0;
  uint64_t started_ns = 0;
  uint64_t formed_ns = 0;
  std::unique_ptr<Transport> transport;
  uint32_t round = 0;
  uint64_t pause_until_ns = 0;
  TransportHandle handle = 0;
  std::vector<int64_t> values;
  std::vector<uint8_t> out, in;
  P2pRequest send = 0, receive = 0;
  bool sent = false, received = false;
};

uint8_t pattern(uint32_t from, uint32_t round, size_t i) {
  return static_cast<uint8_t>(from * 131 + round * 7 + i);
}

bool parse_job(const std::string& spec, Job& job) {
  char key[256] = {};
  unsigned node = 0, nodes = 0, rounds = 0;
  double delay = 0;
  double cancel = -1;
  double leave = -1;
  const int n = std::sscanf(spec.c_str(), "%255[^:]:%u:%u:%u:%lf:%lf:%lf", key, &node, &nodes,
                            &rounds, &delay, &cancel, &leave);
  if (n < 4) return false;
  job.key = key;
  job.node = node;
  job.nodes = nodes;
  job.rounds = rounds;
  job.delay_s = n >= 5 ? delay : 0;
  job.cancel_s = n >= 6 ? cancel : -1;
  job.leave_s = n == 7 ? leave : -1;
  return true;
}

void start_round(Job& job) {
  const uint32_t r = job.round;
  job.values.resize(kCount);
  for (size_t i = 0; i < kCount; ++i) {
    job.values[i] = static_cast<int64_t>(job.node + 1) * (r + 1) + static_cast<int64_t>(i);
  }
  job.handle =
      job.transport->start_allreduce(kAllNodes, job.values.data(), kCount,
                                     nodecomm::proto::DType::kI64, nodecomm::proto::RedOp::kSum);
  job.phase = Phase::kAllreduce;
}

void start_ring(Job& job) {
  auto& p2p = job.transport->p2p(kAllNodes);
  const uint32_t me = p2p.rank();
  const uint32_t n = p2p.size();
  const uint32_t lane = job.round % p2p.lanes();
  const int tag = static_cast<int>(job.round % static_cast<uint32_t>(p2p.max_tag()));
  job.out.resize(kBytes);
  job.in.assign(kBytes, 0);
  for (size_t i = 0; i < kBytes; ++i) job.out[i] = pattern(me, job.round, i);
  job.receive = p2p.irecv(lane, (me + n - 1) % n, tag, job.in.data(), kBytes);
  job.send = p2p.isend(lane, (me + 1) % n, tag, job.out.data(), kBytes);
  job.sent = job.received = false;
  job.phase = Phase::kP2p;
}

void end_job(Job& job, const std::string& error) {
  if (error.empty()) {
    say("DONE {} exact rounds {}", job.key, job.rounds);
  } else {
    say("ERROR {}: {}", job.key, error);
  }
  // As the daemon does when its job ends: the group's communicators go with the transport.
  job.transport.reset();
  job.phase = Phase::kOver;
}

// One step of a job; true if something happened.
bool step(JobGroupFormer& former, Job& job, uint64_t start_ns, uint64_t peer_timeout_ns) {
  const uint64_t now = monotonic_ns();
  switch (job.phase) {
    case Phase::kWaiting:
      if (now - start_ns < static_cast<uint64_t>(job.delay_s * 1e9)) return false;
      job.started_ns = now;
      job.id = former.start(job.key, job.node, job.nodes);
      job.phase = Phase::kForming;
      return true;
    case Phase::kForming: {
      if (job.cancel_s >= 0 && now - start_ns >= static_cast<uint64_t>(job.cancel_s * 1e9)) {
        former.cancel(job.id);
        say("CANCELLED {}", job.key);
        job.phase = Phase::kOver;
        return true;
      }
      job.transport = former.poll(job.id);
      if (!job.transport) return false;
      const double took = static_cast<double>(monotonic_ns() - job.started_ns) / 1e9;
      if (job.transport->node_index() != job.node || job.transport->node_count() != job.nodes) {
        end_job(job, fmt::format("formed as node {} of {}, asked for node {} of {}",
                                 job.transport->node_index(), job.transport->node_count(), job.node,
                                 job.nodes));
        return true;
      }
      say("FORMED {} node {}/{} in {:.3f} s", job.key, job.node, job.nodes, took);
      job.formed_ns = monotonic_ns();
      start_round(job);
      return true;
    }
    default:
      break;
  }
  if (job.phase == Phase::kOver) return false;
  // Between rounds, so that nothing of this node's is left in flight in the group.
  if (job.leave_s >= 0 && job.phase == Phase::kPause &&
      now - job.formed_ns >= static_cast<uint64_t>(job.leave_s * 1e9)) {
    say("LEFT {} after round {}", job.key, job.round);
    job.transport.reset();
    job.phase = Phase::kOver;
    return true;
  }
  // Liveness, as the daemon's loop runs it: 100 ms heartbeats.
  for (const auto& lost : job.transport->check_peers(now, 100000000ULL, peer_timeout_ns)) {
    end_job(job, lost.text);
    return true;
  }
  switch (job.phase) {
    case Phase::kAllreduce: {
      if (!job.transport->test(job.handle)) return false;
      const uint32_t r = job.round;
      const int64_t n = job.nodes;
      for (size_t i = 0; i < kCount; ++i) {
        const int64_t want = (n * (n + 1) / 2) * (r + 1) + n * static_cast<int64_t>(i);
        if (job.values[i] != want) {
          end_job(job, fmt::format("allreduce round {} element {}: {} instead of {}", r, i,
                                   job.values[i], want));
          return true;
        }
      }
      start_ring(job);
      return true;
    }
    case Phase::kP2p: {
      auto& p2p = job.transport->p2p(kAllNodes);
      p2p.poll();
      job.sent = job.sent || p2p.done(job.send);
      job.received = job.received || p2p.done(job.receive);
      if (!job.sent || !job.received) return false;
      const uint32_t from = (p2p.rank() + p2p.size() - 1) % p2p.size();
      for (size_t i = 0; i < kBytes; ++i) {
        if (job.in[i] != pattern(from, job.round, i)) {
          end_job(job, fmt::format("p2p round {} byte {} from node {} wrong", job.round, i, from));
          return true;
        }
      }
      if (++job.round == job.rounds) {
        end_job(job, {});
        return true;
      }
      job.pause_until_ns = now + std::chrono::nanoseconds(kRoundPause).count();
      job.phase = Phase::kPause;
      return true;
    }
    case Phase::kPause:
      if (now < job.pause_until_ns) return false;
      start_round(job);
      return true;
    default:
      return false;
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string uri;
  std::string start_file;
  double peer_timeout_s = 2;
  uint32_t lanes = 2;
  std::vector<Job> jobs;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--uri" && has_value) {
      uri = argv[++i];
    } else if (arg == "--name" && has_value) {
      g_label = argv[++i];
    } else if (arg == "--peer-timeout" && has_value) {
      peer_timeout_s = std::atof(argv[++i]);
    } else if (arg == "--start-file" && has_value) {
      start_file = argv[++i];
    } else if (arg == "--lanes" && has_value) {
      lanes = static_cast<uint32_t>(std::atoi(argv[++i]));
    } else if (arg == "--job" && has_value) {
      Job job;
      if (!parse_job(argv[++i], job)) {
        std::fprintf(stderr,
                     "bad --job %s (KEY:NODE:NODES:ROUNDS[:DELAY_S[:CANCEL_S[:LEAVE_S]]])\n",
                     argv[i]);
        return 2;
      }
      jobs.push_back(std::move(job));
    } else {
      std::fprintf(stderr,
                   "usage: %s --uri FILE --name LABEL [--start-file PATH] "
                   "--job KEY:NODE:NODES:ROUNDS[:DELAY_S[:CANCEL_S[:LEAVE_S]]]\n",
                   argv[0]);
      return 2;
    }
  }
  if (uri.empty() || jobs.empty()) {
    std::fprintf(stderr, "--uri and at least one --job are needed\n");
    return 2;
  }
  if (std::getenv("SERVICE_GROUPS_DEBUG") != nullptr) {
    nodecomm::daemon::Log::get().set_level(nodecomm::daemon::LogLevel::kDebug);
  }
  nodecomm::daemon::Log::get().set_context(g_label);
  // As nodecommd: a peer that has already finalized must not kill us while MPI closes its socket.
  std::signal(SIGPIPE, SIG_IGN);
  // As nodecommd: MPI polls its sockets on every call (it never blocks here).
  setenv("OMPI_MCA_mpi_event_tick_rate", "1", /*overwrite=*/0);
  std::unique_ptr<JobGroupFormer> former;
  try {
    former = nodecomm::daemon::make_mpi_job_groups(&argc, &argv, lanes, uri);
  } catch (const TransportError& e) {
    say("ERROR rendezvous: {}", e.what());
    return 2;
  }
  say("READY pid {}", static_cast<long>(getpid()));
  if (!start_file.empty()) {
    struct stat seen {};
    const uint64_t give_up_ns = monotonic_ns() + 60000000000ULL;
    while (::stat(start_file.c_str(), &seen) != 0) {
      if (monotonic_ns() > give_up_ns) {
        say("ERROR start: {} did not appear within 60 s", start_file);
        return 2;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    say("START");
  }
  const uint64_t start_ns = monotonic_ns();
  const auto peer_timeout_ns = static_cast<uint64_t>(peer_timeout_s * 1e9);
  for (;;) {
    bool busy = false;
    bool open = false;
    bool running = false;
    // As the daemon's loop: the groups left behind are looked after between the jobs' steps.
    former->tend(monotonic_ns());
    for (Job& job : jobs) {
      try {
        busy = step(*former, job, start_ns, peer_timeout_ns) || busy;
      } catch (const TransportError& e) {
        end_job(job, e.what());
        busy = true;
      }
      open = open || job.phase != Phase::kOver;
      running = running || (job.phase != Phase::kOver && job.phase != Phase::kWaiting &&
                            job.phase != Phase::kForming);
    }
    if (!open) break;
    // As the daemon's idle strategy: short sleeps while operations are in flight (MPI only
    // progresses inside its calls), longer ones while jobs only wait or form (formations run
    // on their own threads and need nothing from this one).
    if (!busy)
      std::this_thread::sleep_for(running ? std::chrono::microseconds(200)
                                          : std::chrono::microseconds(5000));
  }
  former.reset();
  say("EXIT");
  return 0;
}
