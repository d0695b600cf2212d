// Rank 0's output: the nccl-tests-style table on stdout and, optionally, JSON Lines.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <ostream>
#include <string>

#include "collectives.hpp"

namespace nodecomm::bench {

struct RunInfo {
  std::string op;
  Collective collective = Collective::kAllreduce;
  int root = -1;  // -1 for collectives without a root, as nccl-tests prints it
  std::string backend;
  int world_size = 1;
  std::string comm = "world";  // --comm: "world" or "split:K"
  int comm_size = 1;           // ranks in rank 0's group (the world's size without a split)
  int nodes = 1;
  int ranks_per_node = 1;
  int iters = 0;  // as requested; a row may use fewer (see Row::iters)
  int warmup = 0;
  bool inplace = false;
  bool check = false;
  std::string buffers;         // where the buffers come from
  std::string reduced_note;    // non-empty: why some rows use fewer iterations
  double link_rate = 0;        // bytes per second; 0: not known (no --link-rate)
  std::string link_rate_text;  // as the user spelt it
  int batch = 1;               // --batch: operations in flight per size before waiting
  std::string compress = "none";
  std::string batch_note;  // non-empty: a header line on --batch/--compress
};

struct Row {
  size_t bytes = 0;               // nccl-tests' size: the larger of the send and receive buffer
  size_t count = 0;               // nccl-tests' count: the count argument of the call
  std::string type;               // "none" for barrier
  std::string redop;              // "none" for collectives that do not reduce
  double time_us = 0;             // mean over iterations, then over ranks
  double median_us = 0;           // median of the iterations, then mean over ranks
  std::optional<uint64_t> wrong;  // total over ranks; empty when not checked
  int iters = 0;
};

struct Bandwidth {
  double algbw_gbs;
  double busbw_gbs;
};

// nccl-tests' definitions: algbw = size / time; busbw scales it by the collective's
// busbw_factor (2(n-1)/n for allreduce: the fraction of the data each rank must send and
// receive in a bandwidth-optimal allreduce).
Bandwidth bandwidth(Collective collective, size_t bytes, double time_us, int world_size);

// The least a node's link must carry per byte of `size` in a bandwidth-optimal algorithm with
// one stream per node, as nccl-tests' busbw factors with N nodes for the ranks: 2(N-1)/N for
// allreduce, (N-1)/N for reduce_scatter and allgather(v), 1 for broadcast and reduce. Empty
// for the other collectives.
struct LinkFactor {
  int per_node_share;  // k of k(N-1)/N; 0: the factor is 1
  const char* text;
  double value(double nodes) const;
};
std::optional<LinkFactor> link_factor(Collective collective);
// How much of a node's link a collective uses: algbw x link_factor / link rate, N being the
// number of nodes (whatever the ranks per node). Empty when undefined: a collective without a
// link factor, not on the world, no link rate, or one node.
std::optional<double> link_efficiency(const RunInfo& info, double algbw_gbs);
// Why link_efficiency() is empty; "" when it is not.
std::string link_efficiency_undefined(const RunInfo& info);

class Report {
 public:
  // `json` may be null. Neither stream is owned.
  Report(RunInfo info, std::FILE* table, std::ostream* json);

  void header();
  void row(const Row& row);
  void footer();

  // False once a write to the JSON stream failed.
  bool json_ok() const { return json_ok_; }

 private:
  RunInfo info_;
  std::FILE* table_;
  std::ostream* json_;
  bool json_ok_ = true;
  double busbw_sum_ = 0;
  size_t rows_ = 0;
  std::string linkeff_;  // " SIZE:EFF" per row, for the footer's `# linkeff` line
};

}  // namespace nodecomm::bench
