// The flags of the workload, the priority probe, --batch, --compress and the daemon's runtime
// parameters (workload.hpp).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <string>

#include "batch.hpp"
#include "bench.hpp"
#include "workload.hpp"

namespace nodecomm::bench {
namespace {

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : std::string(fallback);
}

const CLI::Validator kBytes([](std::string& text) { return bad_byte_count(text); }, "BYTES");

}  // namespace

void add_extra_flags(CLI::App& app, ExtraFlags& f) {
  app.add_option("--workload", f.workload,
                 "Simulate data-parallel training steps instead of the size sweep: resnet50, "
                 "bert-large, or a FILE of `name elements [compute_us]` lines in backprop order")
      ->type_name("MODEL|FILE");
  app.add_option("--scale", f.scale, "--workload: multiply every gradient's element count by X")
      ->check(CLI::Range(1e-9, 1e3))
      ->capture_default_str();
  app.add_option("--compute-ms", f.compute_ms,
                 "--workload: compute per step, split over the layers by FLOP-ish weight "
                 "(default: the scaled gradients' bytes / 125 MB/s, i.e. a 2-node allreduce on "
                 "a 1 Gbit/s link; a FILE with compute_us: their sum)")
      ->check(CLI::Range(0.0, 1e7));
  app.add_option("--compute", f.compute,
                 "--workload: sleep (an accelerator computes, the host thread waits) or spin (a "
                 "calibrated loop burns the rank's core)")
      ->check(CLI::IsMember({"sleep", "spin"}))
      ->capture_default_str();
  app.add_flag("--print-layers", f.print_layers,
               "--workload: print the step's layers in backprop order as a FILE would give them "
               "(`name elements compute_us`, after --scale and --compute-ms) and exit, without "
               "a daemon (tools/scale-model reads them)");
  app.add_option("--steps", f.steps, "--workload: timed steps per pass")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--soak", f.soak_sec,
                 "Instead of the size sweep: mixed collectives, dtypes, ops, sizes, communicators "
                 "and buffers for SECONDS, every result checked; reports the daemon's memory at "
                 "the start, after a warm-up and at the end (exit 1 on a wrong element or growth)")
      ->check(CLI::Range(0.001, 1e6))
      ->type_name("SECONDS");
  app.add_option("--soak-seed", f.soak_seed, "--soak: seed of the draws (the same on all ranks)")
      ->capture_default_str();
  app.add_option("--soak-max-bytes", f.soak_max_bytes, "--soak: largest buffer of one call")
      ->check(kBytes)
      ->capture_default_str();
  app.add_flag("--soak-no-memory-check", f.soak_no_memory_check,
               "--soak: report the daemons' memory but do not fail on growth (for sanitizer "
               "builds, whose allocators hold freed memory in quarantine)");
  app.add_option("--soak-stop-file", f.soak_stop_file,
                 "--soak: end the soak early, every result still checked, once FILE exists (a "
                 "test that has seen what it needs touches it)")
      ->type_name("FILE");
  app.add_flag("--priority-probe", f.priority_probe,
               "Instead of the size sweep: time a small priority-1 allreduce posted 5 ms after a "
               "big priority-0 one, and alone (--iters runs, default 10)");
  app.add_option("--probe-big", f.probe_big, "--priority-probe: the big allreduce")
      ->check(kBytes)
      ->capture_default_str();
  app.add_option("--probe-small", f.probe_small, "--priority-probe: the small allreduce")
      ->check(kBytes)
      ->capture_default_str();
  app.add_option("--priority-policy", f.priority_policy,
                 "Daemon scheduling for this job: none, direct (higher priority first) or lifo "
                 "(sets NODECOMM_PRIORITY_POLICY; default: leave it)")
      ->check(CLI::IsMember({"none", "direct", "lifo"}));
  app.add_option("--fusion", f.fusion,
                 "Daemon fusion of small allreduces for this job: on or off (NODECOMM_FUSION)")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--fusion-threshold", f.fusion_threshold,
                 "Largest allreduce the daemon fuses (NODECOMM_FUSION_THRESHOLD)")
      ->check(kBytes);
  app.add_option("--fusion-cycle-us", f.fusion_cycle_us,
                 "How long the daemon gathers operations to fuse (NODECOMM_FUSION_CYCLE_US)")
      ->check(CLI::Range(int64_t{0}, int64_t{10'000'000}));
  app.add_option("--compress", f.compress,
                 "Wire compression of every allreduce the bench posts: none, bf16, f16 or int8 "
                 "(f32 only; nodecomm only). The sweep's --check then allows the compression's "
                 "error")
      ->check(CLI::IsMember({"none", "bf16", "f16", "int8"}))
      ->capture_default_str();
  app.add_option("--batch", f.batch,
                 "Size sweep: post K operations of each size before waiting for all of them; "
                 "time(us) = total / K")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
}

RunSettings apply_runtime_settings(const ExtraFlags& f, nc_compress_t compress, bool baseline) {
  if (!f.priority_policy.empty()) setenv("NODECOMM_PRIORITY_POLICY", f.priority_policy.c_str(), 1);
  if (!f.fusion.empty()) setenv("NODECOMM_FUSION", f.fusion.c_str(), 1);
  if (!f.fusion_threshold.empty()) {
    if (const auto bytes = parse_bytes(f.fusion_threshold)) {
      setenv("NODECOMM_FUSION_THRESHOLD", std::to_string(*bytes).c_str(), 1);
    }
  }
  if (f.fusion_cycle_us >= 0) {
    setenv("NODECOMM_FUSION_CYCLE_US", std::to_string(f.fusion_cycle_us).c_str(), 1);
  }
  RunSettings s;
  if (baseline) {
    // Open MPI and Gloo have no such settings and no compression.
    s.priority_policy = "n/a";
    s.fusion = "n/a";
    s.compress = NC_COMPRESS_NONE;
    return s;
  }
  s.priority_policy = env_or("NODECOMM_PRIORITY_POLICY", "default");
  s.fusion = env_or("NODECOMM_FUSION", "default");
  if (s.fusion == "1") s.fusion = "on";
  if (s.fusion == "0") s.fusion = "off";
  s.compress = compress;
  return s;
}

RunMode resolve_run_mode(const ExtraFlags& f, const CLI::App& app, std::string_view backend,
                         Config& config) {
  const bool baseline = backend != "nodecomm";
  RunMode m;
  m.arena_bytes = 0;
  if (f.soak_sec > 0) {
    for (const char* flag :
         {"--workload", "--priority-probe", "--op", "--batch", "--sizes", "--min-bytes",
          "--max-bytes", "--check", "--inplace", "--dtype", "--redop", "--compress"}) {
      if (app.count(flag) > 0) {
        throw CLI::ValidationError(flag, "is not for --soak, which draws its own mix");
      }
    }
    m.kind = RunMode::kSoak;
    m.soak.seconds = f.soak_sec;
    m.soak.seed = f.soak_seed;
    m.soak.max_bytes = *parse_bytes(f.soak_max_bytes);
    m.soak.memory_check = !f.soak_no_memory_check;
    m.soak.stop_file = f.soak_stop_file;
    m.arena_bytes = soak_arena_bytes(m.soak);
    apply_runtime_settings(f, NC_COMPRESS_NONE, baseline);
    return m;
  }
  for (const char* flag :
       {"--soak-seed", "--soak-max-bytes", "--soak-no-memory-check", "--soak-stop-file"}) {
    if (app.count(flag) > 0) throw CLI::ValidationError(flag, "needs --soak");
  }
  const bool workload = !f.workload.empty();
  if (workload && f.priority_probe) {
    throw CLI::ValidationError("--priority-probe", "runs on its own, not with --workload");
  }
  const bool sweep = !workload && !f.priority_probe;
  const char* mode_flag = workload ? "--workload" : "--priority-probe";
  if (!sweep) {
    for (const char* flag : {"--op", "--comm", "--batch", "--sizes", "--min-bytes", "--max-bytes",
                             "--check", "--inplace", "--no-arena", "--dtype", "--redop"}) {
      if (app.count(flag) > 0) {
        throw CLI::ValidationError(flag, fmt::format("is for the size sweep, not {}", mode_flag));
      }
    }
  }
  if (workload && app.count("--iters") > 0) {
    throw CLI::ValidationError("--iters", "--workload counts --steps (and --warmup) instead");
  }
  if (!workload) {
    for (const char* flag : {"--scale", "--compute-ms", "--compute", "--steps"}) {
      if (app.count(flag) > 0) throw CLI::ValidationError(flag, "needs --workload");
    }
  }
  if (!f.priority_probe) {
    for (const char* flag : {"--probe-big", "--probe-small"}) {
      if (app.count(flag) > 0) throw CLI::ValidationError(flag, "needs --priority-probe");
    }
  }
  nc_compress_t compress = NC_COMPRESS_NONE;
  if (nc_compress_parse(f.compress.c_str(), &compress) != NC_OK) {
    throw CLI::ValidationError("--compress", fmt::format("unknown compression '{}'", f.compress));
  }
  if (sweep && compress != NC_COMPRESS_NONE && config.collective != Collective::kAllreduce) {
    throw CLI::ValidationError("--compress", "applies to --op allreduce only");
  }
  // Gloo's calls are posted to its worker thread, whatever the collective; MPI's are not.
  if (sweep && f.batch > 1 && backend == "mpi" && config.collective != Collective::kAllreduce) {
    throw CLI::ValidationError("--batch", "with --backend mpi supports --op allreduce only");
  }
  if (baseline && compress != NC_COMPRESS_NONE) {
    m.note = fmt::format("--compress {} ignored: the {} backend sends f32 as it is", f.compress,
                         backend);
  }
  m.workload.settings = m.probe.settings = apply_runtime_settings(f, compress, baseline);
  const RunSettings& settings = m.workload.settings;
  if (sweep) {
    config.batch = f.batch;
    config.compress = settings.compress;
    const size_t max_bytes = *std::max_element(config.sizes.begin(), config.sizes.end());
    m.arena_bytes = std::max(arena_bytes_for(max_bytes), batch_arena_bytes(f.batch, max_bytes));
    return m;
  }
  if (workload) {
    m.kind = RunMode::kWorkload;
    WorkloadConfig& w = m.workload;
    try {
      w.profile = load_profile(f.workload);
    } catch (const std::exception& e) {
      throw CLI::ValidationError("--workload", e.what());
    }
    w.scale = f.scale;
    w.spin = f.compute == "spin";
    w.steps = f.steps;
    w.warmup = config.warmup_explicit ? config.warmup : 2;
    w.json_path = config.json_path;
    double compute_ms = f.compute_ms;
    if (compute_ms < 0 && !w.profile.explicit_times) {
      compute_ms = default_compute_ms(w.profile, f.scale);
    }
    w.layers = plan_layers(w.profile, f.scale, compute_ms);
    w.compute_ms = 0;
    for (const Layer& l : w.layers) w.compute_ms += l.compute_us / 1e3;
    m.arena_bytes = workload_arena_bytes(w.layers);
    return m;
  }
  m.kind = RunMode::kProbe;
  ProbeConfig& p = m.probe;
  p.big_bytes = static_cast<size_t>(*parse_bytes(f.probe_big));
  p.small_bytes = static_cast<size_t>(*parse_bytes(f.probe_small));
  p.iters = config.iters_explicit ? config.iters : 10;
  p.warmup = config.warmup_explicit ? config.warmup : 2;
  p.json_path = config.json_path;
  m.arena_bytes = probe_arena_bytes(p);
  return m;
}

}  // namespace nodecomm::bench
