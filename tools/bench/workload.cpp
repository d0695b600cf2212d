// --workload: data-parallel training steps. Each rank runs a compute phase per layer in
// backprop order and posts that layer's gradient allreduce right after it; after the last
// layer it waits for all of them. Four passes, each `warmup` untimed steps then `steps` timed
// ones: compute only, communication only, the overlapped step on the world, and the
// overlapped step on a communicator of this node's ranks (for the scaling efficiency).
#include "workload.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

#include "batch.hpp"

namespace nodecomm::bench {
namespace {

// The sink of the spin loop, so that the compiler cannot drop it.
volatile double g_spin_sink = 0;

// A dependent chain of multiply-adds: about one FMA latency per iteration, whatever the
// vector units, and no memory traffic.
double spin_chain(uint64_t iterations) {
  double x = g_spin_sink + 1.0;
  for (uint64_t i = 0; i < iterations; ++i) x = x * 0.9999999 + 1e-7;
  return x;
}

// A layer's compute phase. `sleep` models an accelerator computing while the host thread
// waits: it sleeps until the phase's end, and what a sleep overshoots is taken off the next
// phases of the step (so the step's compute adds up to its total even with phases of a few
// microseconds, which no sleep can hit). `spin` burns this rank's core with spin_chain for
// the calibrated number of iterations, so it slows down when something else takes the core.
class Compute {
 public:
  explicit Compute(bool spin) : spin_(spin) {}

  // Iterations of spin_chain per microsecond on this core: the best of three runs of at
  // least 20 ms each. Every rank calibrates at the same time, as they later compute.
  void calibrate() {
    if (!spin_) return;
    uint64_t n = 1 << 16;
    for (;;) {
      const auto t0 = Clock::now();
      g_spin_sink = spin_chain(n) * 0;
      if (us_since(t0, Clock::now()) >= 20e3) break;
      n *= 2;
    }
    double best = 0;
    for (int i = 0; i < 3; ++i) {
      const auto t0 = Clock::now();
      g_spin_sink = spin_chain(n) * 0;
      best = std::max(best, static_cast<double>(n) / us_since(t0, Clock::now()));
    }
    per_us_ = best;
  }
  double iterations_per_us() const { return per_us_; }

  void begin_step() { debt_us_ = 0; }

  void run(double us) {
    if (us <= 0) return;
    if (spin_) {
      g_spin_sink = spin_chain(static_cast<uint64_t>(us * per_us_)) * 0;
      return;
    }
    if (debt_us_ >= us) {
      debt_us_ -= us;
      return;
    }
    const auto target =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double, std::micro>(us - debt_us_));
    std::this_thread::sleep_until(target);
    debt_us_ = std::max(0.0, us_since(target, Clock::now()));
  }

 private:
  bool spin_;
  double per_us_ = 0;
  double debt_us_ = 0;
};

void fill_gradient(float* data, size_t count, int rank, size_t layer) {
  // Small values of both signs, different per rank and layer: what gradients look like to
  // the compressors, and no sums that overflow.
  uint32_t x = static_cast<uint32_t>(rank * 7919 + layer * 104729 + 1);
  for (size_t i = 0; i < count; ++i) {
    x = x * 1664525u + 1013904223u;
    data[i] = static_cast<float>(static_cast<int32_t>(x >> 8) - (1 << 23)) * 0x1p-33f;
  }
}

class Workload {
 public:
  Workload(Backend& backend, const WorkloadConfig& config)
      : backend_(backend),
        config_(config),
        rank_(backend.world_rank()),
        compute_(config.spin),
        buffers_(backend) {}

  int run() {
    const std::vector<Layer>& layers = config_.layers;
    const size_t n = layers.size();
    scratch_ = static_cast<double*>(alloc(8 * sizeof(double)));
    if (!setup()) return 1;
    nodes_ = backend_.node_count();
    // One-node communicator for the scaling efficiency. Collective over the world.
    if (nodes_ > 1) backend_.split(backend_.node_index(), rank_);

    backend_.sync();
    compute_.calibrate();

    enum Mode { kComputeOnly, kCommOnly, kOverlapped };
    struct Pass {
      Mode mode;
      bool one_node;
      std::vector<double> step_us, first_us;
    };
    Pass passes[] = {{kComputeOnly, false, {}, {}},
                     {kCommOnly, false, {}, {}},
                     {kOverlapped, false, {}, {}},
                     {kOverlapped, true, {}, {}}};
    pending_.assign(n, 0);
    const char* what = "?";
    bool in_steps = false;
    int step_index = 0;
    try {
      for (Pass& pass : passes) {
        if (pass.one_node && nodes_ == 1) continue;
        what = pass.mode == kComputeOnly ? "compute-only step"
               : pass.mode == kCommOnly  ? "communication-only step"
               : pass.one_node           ? "one-node step"
                                         : "step";
        backend_.sync();
        in_steps = true;
        for (step_index = -config_.warmup; step_index < config_.steps; ++step_index) {
          const bool compute = pass.mode != kCommOnly;
          const bool comm = pass.mode != kComputeOnly;
          double first_us = 0;
          const double t = step(compute, comm, pass.one_node, &first_us);
          if (step_index < 0) continue;
          pass.step_us.push_back(t);
          pass.first_us.push_back(first_us);
        }
        in_steps = false;
      }
      what = "taking the maximum over ranks";
      scratch_[0] = median(passes[0].step_us);
      scratch_[1] = median(passes[1].step_us);
      scratch_[2] = median(passes[2].step_us);
      scratch_[3] = median(passes[2].first_us);
      scratch_[4] = nodes_ > 1 ? median(passes[3].step_us) : scratch_[2];
      backend_.allreduce(scratch_, scratch_, 5, NC_F64, NC_MAX);
    } catch (const std::exception& e) {
      std::string at = what;
      if (in_steps) {
        at += step_index < 0 ? fmt::format(" (warmup {})", step_index + config_.warmup + 1)
                             : fmt::format(" {}", step_index + 1);
      }
      throw std::runtime_error(
          fmt::format("--workload {}: {}: {}", config_.profile.name, at, e.what()));
    }
    if (rank_ == 0) report();
    return rank_ == 0 && !json_ok_ ? 1 : 0;
  }

 private:
  void* alloc(size_t bytes) { return buffers_.alloc(bytes); }

  // Buffers and the JSON file can fail on one rank alone; the ranks agree on the outcome.
  bool setup() {
    return setup_on_all_ranks(backend_, scratch_, rank_, config_.json_path, json_, [&] {
      const std::vector<Layer>& layers = config_.layers;
      calls_.resize(layers.size());
      attrs_.resize(layers.size());
      for (size_t i = 0; i < layers.size(); ++i) {
        const Layer& l = layers[i];
        auto* send = static_cast<float*>(alloc(l.count * sizeof(float)));
        auto* recv = static_cast<float*>(alloc(l.count * sizeof(float)));
        fill_gradient(send, l.count, rank_, i);
        std::memset(recv, 0, l.count * sizeof(float));
        attrs_[i].priority = l.priority;
        attrs_[i].name = l.name.c_str();
        attrs_[i].compress = config_.settings.compress;
        Call& c = calls_[i];
        c.collective = Collective::kAllreduce;
        c.send = send;
        c.recv = recv;
        c.count = l.count;
        c.dtype = NC_F32;
        c.op = NC_SUM;
        c.attr = &attrs_[i];
      }
    });
  }

  // One step; returns its time (us). With communication, *first_us is the time from posting
  // the network's first layer (the last compute phase's end) to its completion: that request
  // is waited for alone before all the others.
  double step(bool compute, bool comm, bool one_node, double* first_us) {
    const size_t n = calls_.size();
    std::fill(pending_.begin(), pending_.end(), 0);
    size_t oldest = 0;
    const auto complete_oldest = [&] {
      while (oldest < n && pending_[oldest] == 0) ++oldest;
      if (oldest == n) return false;
      backend_.wait(pending_[oldest]);
      pending_[oldest] = 0;
      return true;
    };
    compute_.begin_step();
    const auto start = Clock::now();
    Clock::time_point first_posted;
    for (size_t i = 0; i < n; ++i) {
      if (compute) compute_.run(config_.layers[i].compute_us);
      if (!comm) continue;
      if (i + 1 == n) first_posted = Clock::now();
      calls_[i].in_group = one_node;
      pending_[i] = post_draining(backend_, calls_[i], complete_oldest);
    }
    if (comm) {
      backend_.wait(pending_[n - 1]);
      pending_[n - 1] = 0;
      *first_us = us_since(first_posted, Clock::now());
      backend_.wait_all(pending_);
    }
    return us_since(start, Clock::now());
  }

  void report() {
    const double t_compute = scratch_[0] / 1e3;
    const double t_comm = scratch_[1] / 1e3;
    const double t_step = scratch_[2] / 1e3;
    const double first_us = scratch_[3];
    const double t_one = scratch_[4] / 1e3;
    const double least = std::min(t_compute, t_comm);
    const std::optional<double> overlap =
        least > 0 ? std::optional<double>((t_compute + t_comm - t_step) / least) : std::nullopt;
    const std::optional<double> scaling =
        t_step > 0 ? std::optional<double>(t_one / t_step) : std::nullopt;
    const std::vector<Layer>& layers = config_.layers;
    const uint64_t elements = total_elements(layers);
    uint64_t params = 0;
    for (const Tensor& t : config_.profile.tensors) params += t.elements;
    const RunSettings& s = config_.settings;
    const char* compress = nc_compress_name(s.compress) ? nc_compress_name(s.compress) : "?";
    const int world = backend_.world_size();
    const int rpn = backend_.local_size();

    fmt::print(
        "# nodecomm-bench: workload {} ({} tensors, {} parameters; scale {}: {} elements, {:.2f} "
        "MB f32), backend {}, {} rank{} ({} node{} x {})\n",
        config_.profile.name, layers.size(), params, config_.scale, elements, elements * 4 / 1e6,
        backend_.name(), world, world == 1 ? "" : "s", nodes_, nodes_ == 1 ? "" : "s", rpn);
    fmt::print("# compute {}: {:.1f} ms per step over {} layers (split by {}){}\n",
               config_.spin ? "spin" : "sleep", config_.compute_ms, layers.size(),
               config_.profile.weight_rule,
               config_.spin ? fmt::format(", {:.0f} iterations/us", compute_.iterations_per_us())
                            : std::string());
    fmt::print(
        "# priority_policy {}, fusion {}, compress {}; priority = position in backprop order "
        "(the first layer highest)\n",
        s.priority_policy, s.fusion, compress);
    fmt::print(
        "# {} steps after {} warmup; per-step medians, max over ranks; first_layer_ready: "
        "first layer posted -> its allreduce complete, waited for first\n",
        config_.steps, config_.warmup);
    fmt::print("#\n");
    const auto line = [](const char* name, std::optional<double> v, int digits) {
      fmt::print("{:<24}{:>14}\n", name, v ? fmt::format("{:.{}f}", *v, digits) : "n/a");
    };
    line("t_compute(ms)", t_compute, 2);
    line("t_comm(ms)", t_comm, 2);
    line("t_step(ms)", t_step, 2);
    line("overlap_efficiency", overlap, 3);
    line("first_layer_ready(us)", first_us, 1);
    line("t_step_one_node(ms)", t_one, 2);
    line("scaling_efficiency", scaling, 3);
    if (nodes_ == 1) fmt::print("# one node: the world is the node, so scaling_efficiency is 1\n");
    if (t_compute > 1.2 * config_.compute_ms + 1) {
      fmt::print("# note: compute took {:.1f} ms, not {:.1f}: {}\n", t_compute, config_.compute_ms,
                 config_.spin ? "the ranks did not have a core each (spin needs one per rank)"
                              : "sleeps overshot (a busy machine)");
    }
    std::fflush(stdout);
    if (!json_.is_open()) return;
    const auto opt = [](std::optional<double> v) {
      return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
    };
    nlohmann::ordered_json j = {
        {"mode", "workload"},
        {"workload", config_.profile.name},
        {"scale", config_.scale},
        {"backend", backend_.name()},
        {"nodes", nodes_},
        {"ranks_per_node", rpn},
        {"world_size", world},
        {"priority_policy", s.priority_policy},
        {"fusion", s.fusion},
        {"compress", compress},
        {"steps", config_.steps},
        {"warmup", config_.warmup},
        {"tensors", layers.size()},
        {"elements", elements},
        {"compute", config_.spin ? "spin" : "sleep"},
        {"compute_ms", config_.compute_ms},
        {"t_compute", t_compute},
        {"t_comm", t_comm},
        {"t_step", t_step},
        {"overlap_efficiency", opt(overlap)},
        {"first_layer_ready_us", first_us},
        {"t_step_one_node", t_one},
        {"scaling_efficiency", opt(scaling)},
    };
    json_ok_ = write_json_line(json_, j.dump(), config_.json_path);
  }

  Backend& backend_;
  const WorkloadConfig& config_;
  const int rank_;
  int nodes_ = 1;
  Compute compute_;
  Buffers buffers_;  // freed before the backend is finalized
  double* scratch_ = nullptr;
  std::vector<Call> calls_;
  std::vector<OpAttr> attrs_;
  std::vector<Pending> pending_;
  std::ofstream json_;
  bool json_ok_ = true;
};

}  // namespace

int run_workload(Backend& backend, const WorkloadConfig& config) {
  if (config.layers.empty()) throw std::invalid_argument("no layers to run");
  Workload w(backend, config);
  return w.run();
}

}  // namespace nodecomm::bench
