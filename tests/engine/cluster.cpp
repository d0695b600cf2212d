#include "cluster.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <latch>
#include <numeric>
#include <stdexcept>

#include "conductor/daemon.hpp"
#include "config/log.hpp"
#include "inmemory/transport_inmemory.hpp"

namespace nodecomm::engine_test {

std::string Layout::name() const {
  std::string text = fmt::format("{}x", ranks.size());
  bool even = true;
  for (uint32_t r : ranks) even = even && r == ranks[0];
  if (even) return text + std::to_string(ranks[0]) + (loopback ? "_loopback" : "");
  for (uint32_t r : ranks) text += std::to_string(r);
  return text;
}

uint32_t Layout::world_size() const {
  return std::accumulate(ranks.begin(), ranks.end(), 0U);
}

std::string ordering_name(Ordering o) {
  switch (o) {
    case Ordering::kNegotiated:
      return "negotiated";
    case Ordering::kChunked:
      return "chunked";
    case Ordering::kSmallCalls:
      return "smallcalls";
    case Ordering::kCombined:
      return "combined";
    default:
      return "sequence";
  }
}

void apply(Ordering o, daemon::DaemonConfig& c) {
  if (o == Ordering::kChunked) {
    c.sched.chunk_bytes = 16 * 1024;
    c.sched.fusion_threshold_bytes = 8 * 1024;
    c.sched.eager_bytes = 0;  // small allreduces fused or alone, not in the rounds
  } else if (o == Ordering::kCombined) {
    c.sched.gather_nodes = 1;
  } else if (o == Ordering::kSequence) {
    c.sched.policy = proto::PriorityPolicy::kNone;
    c.sched.fusion = false;
  }
}

size_t max_count(Ordering o) {
  return o == Ordering::kSmallCalls ? 1000 : static_cast<size_t>(INT32_MAX);
}

namespace {
std::atomic<uint32_t> g_clusters{0};  // unique instance names within this process
}

Cluster::Cluster(Layout layout, const std::function<void(daemon::DaemonConfig&)>& tweak,
                 size_t max_count)
    : layout_(std::move(layout)) {
  const uint32_t nodes = static_cast<uint32_t>(layout_.ranks.size());
  // relaxed: a counter for names only.
  const uint32_t id = g_clusters.fetch_add(1, std::memory_order_relaxed);
  const char* tmp = std::getenv("TMPDIR");
  base_dir_ = fmt::format("{}/nodecomm-engine-{}-{}", tmp != nullptr && *tmp != '\0' ? tmp : "/tmp",
                          ::getpid(), id);
  std::filesystem::create_directories(base_dir_);
  // NODECOMM_ENGINE_TEST_DEBUG=1: every daemon's debug log, for a failing test.
  const char* debug = std::getenv("NODECOMM_ENGINE_TEST_DEBUG");
  daemon::Log::get().set_level(debug != nullptr && *debug == '1' ? daemon::LogLevel::kDebug
                                                                 : daemon::LogLevel::kWarn);
  daemon::InMemoryOptions options;
  options.nodes = nodes;
  options.max_count = max_count;
  daemon::DaemonConfig base;
  base.cores = "none";
  base.transport = "inmemory";
  // Every thread of the test shares two cores with other tests: loops back off rather than spin.
  base.idle = "backoff";
  // Generous: a loaded machine must not make a daemon drop a rank that is only slow.
  base.client_timeout_sec = 30;
  base.attach_timeout_sec = 30;
  base.default_arena_bytes = 16ULL << 20;
  if (tweak) tweak(base);
  options.lanes = base.lanes;
  world_ = daemon::make_inmemory_world(options);
  for (uint32_t n = 0; n < nodes; ++n) {
    transports_.push_back(layout_.loopback && nodes == 1
                              ? daemon::make_loopback_transport()
                              : daemon::make_inmemory_transport(world_, n));
  }
  for (uint32_t n = 0; n < nodes; ++n) {
    daemon::DaemonConfig config = base;
    config.instance = fmt::format("engine-test-{}-{}-n{}", ::getpid(), id, n);
    config.runtime_dir = fmt::format("{}/n{}", base_dir_, n);
    daemons_.push_back(std::make_unique<daemon::Daemon>(config, *transports_[n]));
    daemons_.back()->start();
    runtime_dirs_.push_back(daemons_.back()->runtime_dir());
  }
  exit_codes_.assign(nodes, -1);
  for (uint32_t n = 0; n < nodes; ++n) {
    loops_.emplace_back([this, n] { exit_codes_[n] = daemons_[n]->run(stop_); });
  }
}

Cluster::~Cluster() {
  // release: pairs with the loops' load of the flag (relaxed there would also do: a flag only).
  stop_.store(true, std::memory_order_release);
  for (std::thread& t : loops_) t.join();
  daemons_.clear();
  transports_.clear();
  std::error_code ignored;
  std::filesystem::remove_all(base_dir_, ignored);
}

std::vector<std::string> Cluster::run(const std::function<void(Rank&)>& body, bool together) {
  std::mutex mutex;
  std::vector<std::string> failures;
  const std::string job = fmt::format("job{}", jobs_++);
  std::vector<std::thread> threads;
  // Every rank finalizes only once every rank is done, unless `together` is false (see
  // NoticeOutlivesJob in engine_errors_test.cpp, the race that finalizing apart once exposed).
  std::latch finished(static_cast<std::ptrdiff_t>(layout_.world_size()));
  uint32_t world_rank = 0;
  for (uint32_t n = 0; n < layout_.ranks.size(); ++n) {
    for (uint32_t l = 0; l < layout_.ranks[n]; ++l, ++world_rank) {
      threads.emplace_back([&, n, l, expected = world_rank] {
        Rank r;
        r.node = n;
        r.local_rank = l;
        r.rank = static_cast<int>(expected);
        r.fail = [&, expected](const std::string& text) {
          std::lock_guard lock(mutex);
          failures.push_back(fmt::format("rank {}: {}", expected, text));
        };
        nc_init_options_t o;
        nc_init_options_default(&o);
        o.runtime_dir = runtime_dirs_[n].c_str();
        o.job = job.c_str();
        o.local_rank = static_cast<int32_t>(l);
        o.local_size = static_cast<int32_t>(layout_.ranks[n]);
        o.timeout_sec = 30;
        if (nc_init(&o, &r.ctx) != NC_OK) {
          r.fail(fmt::format("nc_init on node {}: {}", n, nc_last_error()));
          finished.count_down();
          return;
        }
        r.size = nc_world_size(r.ctx);
        if (nc_world_rank(r.ctx) != r.rank || r.size != static_cast<int>(layout_.world_size()) ||
            nc_node_index(r.ctx) != static_cast<int>(n)) {
          r.fail(fmt::format("placed as rank {} of {} on node {}, expected rank {} of {} on {}",
                             nc_world_rank(r.ctx), r.size, nc_node_index(r.ctx), r.rank,
                             layout_.world_size(), n));
        } else {
          try {
            body(r);
          } catch (const std::exception& e) {
            r.fail(fmt::format("exception: {}", e.what()));
          }
        }
        if (together) finished.arrive_and_wait();
        nc_finalize(r.ctx);
      });
    }
  }
  for (std::thread& t : threads) t.join();
  return failures;
}

bool wait_ok(Rank& r, nc_status_t posted, nc_request_t req, const std::string& what) {
  if (posted != NC_OK) {
    r.fail(fmt::format("{}: posting failed: {}", what, nc_last_error()));
    return false;
  }
  const nc_status_t s = nc_wait(r.ctx, req);
  if (s != NC_OK) {
    r.fail(fmt::format("{}: {} ({})", what, nc_status_string(s), nc_last_error()));
    return false;
  }
  return true;
}

}  // namespace nodecomm::engine_test
