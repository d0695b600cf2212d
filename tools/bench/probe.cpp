// --priority-probe: how long a small, urgent allreduce takes while a big one is on the wire.
// Every rank posts a big allreduce (priority 0), waits --probe delay (5 ms, so that it is
// moving), then posts a small one (priority 1) and times the small one from its post to its
// completion, waiting for it before the big one. Unloaded: the small one alone. Medians over
// --iters runs, each after a barrier, then the maximum over ranks.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

#include "batch.hpp"
#include "workload.hpp"

namespace nodecomm::bench {
namespace {

class Probe {
 public:
  Probe(Backend& backend, const ProbeConfig& config)
      : backend_(backend), config_(config), rank_(backend.world_rank()), buffers_(backend) {}

  int run() {
    scratch_ = static_cast<double*>(alloc(4 * sizeof(double)));
    if (!setup()) return 1;
    std::vector<double> unloaded, loaded, big;
    const char* what = "unloaded run";
    int index = 0;
    try {
      for (index = -config_.warmup; index < config_.iters; ++index) {
        backend_.sync();
        const auto t0 = Clock::now();
        const Pending p = post(small_);
        backend_.wait(p);
        if (index >= 0) unloaded.push_back(us_since(t0, Clock::now()));
      }
      what = "loaded run";
      const auto delay = std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double, std::milli>(config_.delay_ms));
      for (index = -config_.warmup; index < config_.iters; ++index) {
        backend_.sync();
        const auto tb = Clock::now();
        const Pending pb = post(big_);
        std::this_thread::sleep_until(tb + delay);
        const auto ts = Clock::now();
        const Pending ps = post(small_);
        backend_.wait(ps);
        const auto small_done = Clock::now();
        backend_.wait(pb);
        const auto big_done = Clock::now();
        if (index < 0) continue;
        loaded.push_back(us_since(ts, small_done));
        big.push_back(us_since(tb, big_done));
      }
      what = "taking the maximum over ranks";
      index = 0;
      scratch_[0] = median(unloaded);
      scratch_[1] = median(loaded);
      scratch_[2] = median(big);
      backend_.allreduce(scratch_, scratch_, 3, NC_F64, NC_MAX);
    } catch (const std::exception& e) {
      throw std::runtime_error(
          fmt::format("--priority-probe: {} {}: {}", what,
                      index < 0 ? fmt::format("(warmup {})", index + config_.warmup + 1)
                                : fmt::to_string(index + 1),
                      e.what()));
    }
    if (rank_ == 0) report();
    return rank_ == 0 && !json_ok_ ? 1 : 0;
  }

 private:
  void* alloc(size_t bytes) { return buffers_.alloc(bytes); }

  Pending post(const Call& call) {
    // Nothing else of this rank is in flight but the big one, so a refusal is final.
    return post_draining(backend_, call, [] { return false; });
  }

  void make(Call& call, OpAttr& attr, size_t bytes, int32_t priority, const char* name) {
    const size_t count = std::max<size_t>(1, bytes / sizeof(float));
    auto* send = static_cast<float*>(alloc(count * sizeof(float)));
    auto* recv = static_cast<float*>(alloc(count * sizeof(float)));
    std::fill(send, send + count, 0.5f * static_cast<float>(rank_ + 1));
    std::fill(recv, recv + count, 0.0f);
    attr.priority = priority;
    attr.name = name;
    attr.compress = config_.settings.compress;
    call.collective = Collective::kAllreduce;
    call.send = send;
    call.recv = recv;
    call.count = count;
    call.dtype = NC_F32;
    call.op = NC_SUM;
    call.attr = &attr;
  }

  bool setup() {
    return setup_on_all_ranks(backend_, scratch_, rank_, config_.json_path, json_, [&] {
      make(big_, big_attr_, config_.big_bytes, 0, "probe.big");
      make(small_, small_attr_, config_.small_bytes, 1, "probe.small");
    });
  }

  void report() {
    const RunSettings& s = config_.settings;
    const char* compress = nc_compress_name(s.compress) ? nc_compress_name(s.compress) : "?";
    const int world = backend_.world_size();
    const int nodes = backend_.node_count();
    const int rpn = backend_.local_size();
    const size_t big_bytes = big_.count * sizeof(float);
    const size_t small_bytes = small_.count * sizeof(float);
    fmt::print(
        "# nodecomm-bench: priority probe, backend {}, {} rank{} ({} node{} x {}), "
        "priority_policy {}, fusion {}, compress {}\n",
        backend_.name(), world, world == 1 ? "" : "s", nodes, nodes == 1 ? "" : "s", rpn,
        s.priority_policy, s.fusion, compress);
    fmt::print(
        "# big {} bytes (priority 0), small {} bytes (priority 1) posted {} ms after it; {} "
        "iterations after {} warmup; medians, max over ranks\n",
        big_bytes, small_bytes, config_.delay_ms, config_.iters, config_.warmup);
    fmt::print("#\n");
    fmt::print("{:<24}{:>14.1f}\n", "probe_unloaded(us)", scratch_[0]);
    fmt::print("{:<24}{:>14.1f}\n", "probe_loaded(us)", scratch_[1]);
    fmt::print("{:<24}{:>14.1f}\n", "probe_big(us)", scratch_[2]);
    std::fflush(stdout);
    if (!json_.is_open()) return;
    nlohmann::ordered_json j = {
        {"mode", "priority_probe"},
        {"backend", backend_.name()},
        {"nodes", nodes},
        {"ranks_per_node", rpn},
        {"world_size", world},
        {"priority_policy", s.priority_policy},
        {"fusion", s.fusion},
        {"compress", compress},
        {"probe_big_bytes", big_bytes},
        {"probe_small_bytes", small_bytes},
        {"probe_delay_ms", config_.delay_ms},
        {"iters", config_.iters},
        {"probe_unloaded_us", scratch_[0]},
        {"probe_loaded_us", scratch_[1]},
        {"probe_big_us", scratch_[2]},
    };
    json_ok_ = write_json_line(json_, j.dump(), config_.json_path);
  }

  Backend& backend_;
  const ProbeConfig& config_;
  const int rank_;
  Buffers buffers_;  // freed before the backend is finalized
  double* scratch_ = nullptr;
  Call big_, small_;
  OpAttr big_attr_, small_attr_;
  std::ofstream json_;
  bool json_ok_ = true;
};

}  // namespace

uint64_t probe_arena_bytes(const ProbeConfig& config) {
  constexpr uint64_t kDefaultArena = 64ull << 20;
  const auto page = [](uint64_t b) { return (b + 4095) / 4096 * 4096; };
  const uint64_t need = 2 * page(config.big_bytes) + 2 * page(config.small_bytes) + (2ull << 20);
  return need > kDefaultArena ? need : 0;
}

int run_probe(Backend& backend, const ProbeConfig& config) {
  Probe p(backend, config);
  return p.run();
}

}  // namespace nodecomm::bench
