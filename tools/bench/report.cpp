#include "report.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace nodecomm::bench {

Bandwidth bandwidth(Collective collective, size_t bytes, double time_us, int world_size) {
  if (time_us <= 0) return {0, 0};
  const double algbw = static_cast<double>(bytes) / time_us / 1e3;  // bytes/us -> GB/s (1e9)
  return {algbw, algbw * busbw_factor(collective, world_size)};
}

std::optional<LinkFactor> link_factor(Collective collective) {
  // Bytes each node's link must carry per byte of `size`, with N nodes for nccl-tests' ranks.
  switch (collective) {
    case Collective::kAllreduce:
      return LinkFactor{2, "2(N-1)/N"};
    case Collective::kReduceScatter:
    case Collective::kAllgather:
    case Collective::kAllgatherv:
      return LinkFactor{1, "(N-1)/N"};
    case Collective::kBroadcast:
    case Collective::kReduce:
      return LinkFactor{0, "1"};
    default:
      return std::nullopt;
  }
}

double LinkFactor::value(double nodes) const {
  return per_node_share == 0 ? 1.0 : per_node_share * (nodes - 1) / nodes;
}

std::string link_efficiency_undefined(const RunInfo& info) {
  if (info.link_rate <= 0) return "no link rate";
  if (!link_factor(info.collective)) return fmt::format("op {}", info.op);
  if (info.comm != "world") return fmt::format("--comm {}", info.comm);
  if (info.nodes < 2) return fmt::format("{} node", info.nodes);
  return {};
}

std::optional<double> link_efficiency(const RunInfo& info, double algbw_gbs) {
  if (!link_efficiency_undefined(info).empty()) return std::nullopt;
  return algbw_gbs * 1e9 * link_factor(info.collective)->value(info.nodes) / info.link_rate;
}

Report::Report(RunInfo info, std::FILE* table, std::ostream* json)
    : info_(std::move(info)), table_(table), json_(json) {}

void Report::header() {
  fmt::print(table_,
             "# nodecomm-bench: op {}, backend {}, {} rank{} ({} node{} x {}), root {}, iters {}, "
             "warmup {}, {}, comm {}\n",
             info_.op, info_.backend, info_.world_size, info_.world_size == 1 ? "" : "s",
             info_.nodes, info_.nodes == 1 ? "" : "s", info_.ranks_per_node, info_.root,
             info_.iters, info_.warmup, info_.inplace ? "in-place" : "out-of-place",
             info_.comm == "world" ? info_.comm
                                   : fmt::format("{} (rank 0's group: {} rank{})", info_.comm,
                                                 info_.comm_size, info_.comm_size == 1 ? "" : "s"));
  fmt::print(table_, "# buffers: {}, check: {}\n", info_.buffers, info_.check ? "on" : "off");
  if (!info_.reduced_note.empty()) fmt::print(table_, "# {}\n", info_.reduced_note);
  if (!info_.batch_note.empty()) fmt::print(table_, "# {}\n", info_.batch_note);
  fmt::print(table_, "#\n");
  fmt::print(table_, "#{:>11}{:>13}{:>7}{:>7}{:>12}{:>13}{:>13}{:>8}\n", "size", "count", "type",
             "redop", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  std::fflush(table_);
}

void Report::row(const Row& row) {
  // busbw is the group's: the data each rank moves depends on how many ranks it runs with.
  const Bandwidth bw = bandwidth(info_.collective, row.bytes, row.time_us, info_.comm_size);
  fmt::print(table_, "{:>12}{:>13}{:>7}{:>7}{:>12.2f}{:>13.2f}{:>13.2f}{:>8}\n", row.bytes,
             row.count, row.type, row.redop, row.time_us, bw.algbw_gbs, bw.busbw_gbs,
             row.wrong ? fmt::to_string(*row.wrong) : std::string("N/A"));
  // Row by row, so that a run that dies later still leaves what it measured.
  std::fflush(table_);
  busbw_sum_ += bw.busbw_gbs;
  ++rows_;
  const std::optional<double> linkeff = link_efficiency(info_, bw.algbw_gbs);
  if (linkeff) linkeff_ += fmt::format(" {}:{:.3f}", row.bytes, *linkeff);

  if (json_ == nullptr || !json_ok_) return;
  // ordered_json: keys in the documented order, for people reading the file.
  nlohmann::ordered_json j = {
      {"op", info_.op},
      {"backend", info_.backend},
      {"size", row.bytes},
      {"count", row.count},
      {"type", row.type},
      {"redop", row.redop},
      {"root", info_.root},
      {"time_us", row.time_us},
      {"median_us", row.median_us},
      {"algbw_gbs", bw.algbw_gbs},
      {"busbw_gbs", bw.busbw_gbs},
      {"wrong", row.wrong ? nlohmann::ordered_json(*row.wrong) : nlohmann::ordered_json(nullptr)},
      {"world_size", info_.world_size},
      {"nodes", info_.nodes},
      {"ranks_per_node", info_.ranks_per_node},
      {"inplace", info_.inplace},
      {"iters", row.iters},
      {"comm", info_.comm},
      {"comm_size", info_.comm_size},
      {"link_bytes_per_s", info_.link_rate > 0 ? nlohmann::ordered_json(info_.link_rate)
                                               : nlohmann::ordered_json(nullptr)},
      {"linkeff", linkeff ? nlohmann::ordered_json(*linkeff) : nlohmann::ordered_json(nullptr)},
      {"batch", info_.batch},
      {"compress", info_.compress},
  };
  *json_ << j.dump() << '\n';
  json_->flush();
  json_ok_ = json_->good();
}

void Report::footer() {
  fmt::print(table_, "# Avg bus bandwidth    : {:.4f}\n", rows_ > 0 ? busbw_sum_ / rows_ : 0.0);
  if (info_.link_rate > 0) {
    // Two lines: what it means, then `# linkeff` and one SIZE:EFF per row, for scripts.
    const std::string why = link_efficiency_undefined(info_);
    fmt::print(table_, "# link rate {} ({:.0f} bytes/s), {} node{}: {}\n", info_.link_rate_text,
               info_.link_rate, info_.nodes, info_.nodes == 1 ? "" : "s",
               why.empty() ? fmt::format("linkeff = algbw x {} / link rate",
                                         link_factor(info_.collective)->text)
                           : fmt::format("linkeff undefined ({})", why));
    if (why.empty()) fmt::print(table_, "# linkeff {}\n", linkeff_);
  }
  std::fflush(table_);
}

}  // namespace nodecomm::bench
