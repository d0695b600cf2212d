// nodecomm-bench's data-parallel training-step simulation (--workload), the priority probe
// (--priority-probe), and the flags they share with the size sweep (--batch, --compress and
// the daemon's runtime parameters).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend.hpp"
#include "bench.hpp"
#include "nodecomm.h"
#include "soak.hpp"

namespace CLI {
class App;
}

namespace nodecomm::bench {

using Clock = std::chrono::steady_clock;

// Microseconds from `start` to `end`: the one timing unit of the workload and the probe.
inline double us_since(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double, std::micro>(end - start).count();
}

// One gradient tensor of a model, in backprop order (the first is ready first).
struct Tensor {
  std::string name;
  uint64_t elements = 0;
  double weight = 0;       // FLOP-ish share of the step's compute
  double compute_us = -1;  // from a FILE: this layer's compute time; -1: from the weight
};

struct Profile {
  std::string name;         // "resnet50", "bert-large" or the FILE
  std::string weight_rule;  // how the compute was split, for the report
  std::vector<Tensor> tensors;
  bool explicit_times = false;  // a FILE that gives every line's compute_us
};

// torchvision's resnet50: 161 tensors, 25,557,032 parameters. Weight: parameters x output
// pixels at 224x224 (MACs per image); batch norms: channels x pixels.
Profile resnet50_profile();
// BERT-large with its pre-training heads: 153 tensors, 336,226,108 parameters (module weight
// and bias in one tensor, Q/K/V fused, decoder tied to the word embeddings). Weight: MACs per
// 128-token sequence.
Profile bert_large_profile();
// "resnet50", "bert-large", else a FILE: one tensor per line, `name elements [compute_us]`,
// '#' to the end of a line is a comment, lines in backprop order. Throws std::runtime_error
// naming the line.
Profile load_profile(const std::string& spec);

// A tensor as the simulation runs it.
struct Layer {
  std::string name;
  size_t count = 0;       // f32 elements after --scale
  double compute_us = 0;  // its compute phase
  int32_t priority = 0;   // its position in backprop order: the network's first layer highest
};

// The default --compute-ms: the time a bandwidth-optimal allreduce of the scaled gradients
// takes between 2 nodes on a 1 Gbit/s link (bytes / 125 MB/s), so compute and communication
// are comparable there at any --scale.
double default_compute_ms(const Profile& profile, double scale);
// Scales element counts (at least 1 each) and splits `compute_ms` by weight (or, for a FILE
// with times and no --compute-ms, uses them as given: compute_ms < 0).
std::vector<Layer> plan_layers(const Profile& profile, double scale, double compute_ms);
uint64_t total_elements(const std::vector<Layer>& layers);
// The nodecomm arena the workload needs: a send and a receive buffer per layer; 0 if the
// default does.
uint64_t workload_arena_bytes(const std::vector<Layer>& layers);

// What every workload/probe record says about the run's settings.
struct RunSettings {
  std::string priority_policy = "default";  // "default": the daemon's own
  std::string fusion = "default";
  nc_compress_t compress = NC_COMPRESS_NONE;
};

struct WorkloadConfig {
  Profile profile;
  std::vector<Layer> layers;
  double scale = 1;
  double compute_ms = 0;  // the step's total
  bool spin = false;      // --compute spin; else sleep
  int steps = 10;
  int warmup = 2;
  std::string json_path;
  RunSettings settings;
};
int run_workload(Backend& backend, const WorkloadConfig& config);

struct ProbeConfig {
  size_t big_bytes = 64u << 20;
  size_t small_bytes = 64u << 10;
  int iters = 10;
  int warmup = 2;
  double delay_ms = 5;  // between posting the big and the small allreduce
  std::string json_path;
  RunSettings settings;
};
int run_probe(Backend& backend, const ProbeConfig& config);
uint64_t probe_arena_bytes(const ProbeConfig& config);

// The flags of this header, as given.
struct ExtraFlags {
  std::string workload;
  double scale = 1;
  double compute_ms = -1;  // -1: default_compute_ms
  std::string compute = "sleep";
  int steps = 10;
  bool priority_probe = false;
  std::string probe_big = "64M";
  std::string probe_small = "64K";
  std::string priority_policy;  // empty: leave the environment alone
  std::string fusion;
  std::string fusion_threshold;
  int64_t fusion_cycle_us = -1;
  std::string compress = "none";
  int batch = 1;
  double soak_sec = 0;  // --soak SECONDS (soak.hpp); 0: no soak
  uint64_t soak_seed = 1;
  std::string soak_max_bytes = "2M";
  bool soak_no_memory_check = false;
  std::string soak_stop_file;
  bool print_layers = false;
};
void add_extra_flags(CLI::App& app, ExtraFlags& flags);
// Sets NODECOMM_PRIORITY_POLICY, NODECOMM_FUSION, NODECOMM_FUSION_THRESHOLD and
// NODECOMM_FUSION_CYCLE_US for the flags given (before nc_init, which sends them to the
// daemon) and returns what the records report.
// `baseline`: a backend without the daemon (mpi, gloo), which has none of these settings.
RunSettings apply_runtime_settings(const ExtraFlags& flags, nc_compress_t compress, bool baseline);

// What a run does, from all flags; fills config.batch and config.compress for the sweep.
// Throws CLI::ValidationError for a bad combination or --workload FILE, then sets the runtime
// environment (apply_runtime_settings).
struct RunMode {
  enum Kind { kSweep, kWorkload, kProbe, kSoak } kind = kSweep;
  WorkloadConfig workload;
  ProbeConfig probe;
  SoakConfig soak;
  std::string note;      // for world rank 0's stderr, e.g. what a baseline backend ignores
  uint64_t arena_bytes;  // the nodecomm arena: 0 for the default
};
// `backend`: nodecomm, mpi or gloo.
RunMode resolve_run_mode(const ExtraFlags& flags, const CLI::App& app, std::string_view backend,
                         Config& config);

// Per-step statistics, shared by the workload and the probe.
double median(std::vector<double> values);

}  // namespace nodecomm::bench
