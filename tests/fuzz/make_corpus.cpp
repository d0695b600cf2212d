// Writes the decoder fuzzer's seed corpus: valid descriptors of each collective with the
// limits the daemon would use, and rings as a well-behaved client leaves them. Every
// descriptor seed is checked to pass ipc::validate_descriptor, so the seeds start the fuzzer
// on the accepting paths. The output is checked in under tests/fuzz/corpus/, and the
// cross-rank fuzzer's (whole operations: every rank's descriptor, on one or more nodes) under
// tests/fuzz/corpus-crossrank/:
//   nodecomm_fuzz_corpus tests/fuzz/corpus [tests/fuzz/corpus-crossrank]
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "crossrank_input.hpp"
#include "fuzz_input.hpp"
#include "nodecomm/ipc/validate.hpp"

namespace nodecomm::fuzz {
namespace {

using proto::Collective;
using proto::DType;
using proto::OpDescriptor;
using proto::RedOp;

bool write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return std::fclose(f) == 0 && ok;
}

OpDescriptor desc(Collective c, DType t, RedOp op, uint64_t count, uint64_t send, uint64_t recv,
                  uint64_t seq = 1) {
  OpDescriptor d{};
  d.correlation_id = seq;
  d.seq = seq;
  d.collective = static_cast<uint16_t>(c);
  d.dtype = static_cast<uint8_t>(t);
  d.redop = static_cast<uint8_t>(op);
  d.count = count;
  d.send_offset = send;
  d.recv_offset = recv;
  std::snprintf(d.name, sizeof(d.name), "layer%llu.grad", static_cast<unsigned long long>(seq));
  return d;
}

struct DescriptorSeed {
  const char* name;
  OpDescriptor d;
  uint64_t arena;
  uint32_t size;
  uint32_t rank;
  std::vector<uint64_t> aux;  // placed at d.aux_offset in the (simulated) arena
};

int run(const std::string& dir) {
  constexpr uint64_t kArena = 64 * 1024;  // simulated by the fuzzer: buffers are touched
  std::vector<DescriptorSeed> seeds;
  seeds.push_back({"allreduce_f32",
                   desc(Collective::kAllreduce, DType::kF32, RedOp::kSum, 1000, 0, 4096),
                   kArena,
                   4,
                   1,
                   {}});
  {
    OpDescriptor d = desc(Collective::kAllreduce, DType::kF32, RedOp::kAvg, 16, 8192, 8192, 7);
    d.flags = proto::kOpFlagInPlace;
    d.compression = static_cast<uint8_t>(proto::Compression::kInt8);
    d.priority = 3;
    seeds.push_back({"allreduce_inplace_int8", d, kArena, 2, 0, {}});
  }
  seeds.push_back({"allreduce_bf16_large_arena",
                   desc(Collective::kAllreduce, DType::kBF16, RedOp::kMax, 1 << 20, 0, 1 << 21),
                   uint64_t{64} << 20,
                   8,
                   5,
                   {}});
  {
    OpDescriptor d = desc(Collective::kReduce, DType::kF64, RedOp::kProd, 100, 0, 1024);
    d.root = 2;
    seeds.push_back({"reduce_root", d, kArena, 3, 2, {}});
  }
  {
    OpDescriptor d = desc(Collective::kBroadcast, DType::kI64, RedOp::kSum, 10, 0, 0, 2);
    d.root = 1;
    d.flags = proto::kOpFlagInPlace;
    seeds.push_back({"broadcast_inplace", d, kArena, 3, 1, {}});
  }
  seeds.push_back({"reduce_scatter",
                   desc(Collective::kReduceScatter, DType::kF16, RedOp::kMin, 50, 0, 1024),
                   kArena,
                   4,
                   3,
                   {}});
  {
    OpDescriptor d = desc(Collective::kAllgather, DType::kI32, RedOp::kSum, 8, 32 * 2, 0);
    d.flags = proto::kOpFlagInPlace;  // send = recv + rank * count elements
    seeds.push_back({"allgather_inplace", d, kArena, 4, 2, {}});
  }
  seeds.push_back(
      {"gather", desc(Collective::kGather, DType::kU8, RedOp::kSum, 33, 0, 64), kArena, 4, 0, {}});
  seeds.push_back({"scatter",
                   desc(Collective::kScatter, DType::kI8, RedOp::kSum, 33, 0, 256),
                   kArena,
                   4,
                   0,
                   {}});
  seeds.push_back({"alltoall",
                   desc(Collective::kAlltoall, DType::kF32, RedOp::kSum, 16, 0, 512),
                   kArena,
                   4,
                   1,
                   {}});
  seeds.push_back({"barrier",
                   desc(Collective::kBarrier, DType::kU8, RedOp::kSum, 0, 0, 0, 9),
                   kArena,
                   6,
                   5,
                   {}});
  {
    OpDescriptor d = desc(Collective::kCommSplit, DType::kU8, RedOp::kSum, 3, 0, 0, 2);
    d.root = static_cast<uint32_t>(proto::kUndefinedColor);
    seeds.push_back({"comm_split_undefined", d, kArena, 4, 3, {}});
  }
  {
    OpDescriptor d = desc(Collective::kAllgatherv, DType::kF32, RedOp::kSum, 2, 0, 1024);
    d.aux_offset = 256;
    seeds.push_back({"allgatherv", d, kArena, 3, 1, {1, 2, 3, 0, 1, 3}});
  }
  {
    OpDescriptor d = desc(Collective::kAlltoallv, DType::kI64, RedOp::kSum, 0, 0, 1024);
    d.aux_offset = 512;
    seeds.push_back({"alltoallv", d, kArena, 2, 0, {1, 2, 0, 1, 3, 1, 0, 3}});
  }

  int written = 0;
  for (const DescriptorSeed& s : seeds) {
    std::vector<uint64_t> aux = s.aux;
    ipc::ValidationLimits lim{s.arena, uint64_t{1} << 34, s.size, s.rank};
    lim.aux = aux.empty() ? nullptr : aux.data();
    if (ipc::Verdict v = ipc::check_aux_range(s.d, lim); !aux.empty() && !v.ok()) {
      std::fprintf(stderr, "make_corpus: seed %s: %s\n", s.name, v.message.c_str());
      return 1;
    }
    if (ipc::Verdict v = ipc::validate_descriptor(s.d, lim); !v.ok()) {
      std::fprintf(stderr, "make_corpus: seed %s is not valid: %s\n", s.name, v.message.c_str());
      return 1;
    }
    Writer w;
    w.put(kTargetDescriptor).put(s.d).put(s.arena).put(uint64_t{1} << 34).put(s.size).put(s.rank);
    if (s.arena <= 64 * 1024) {
      // The arena image up to the end of the count arrays (the fuzzer zero-fills the rest).
      if (!aux.empty()) {
        std::vector<uint8_t> arena(s.d.aux_offset + aux.size() * sizeof(uint64_t));
        std::memcpy(arena.data() + s.d.aux_offset, aux.data(), aux.size() * sizeof(uint64_t));
        w.out.insert(w.out.end(), arena.begin(), arena.end());
      }
    } else {
      for (uint64_t v : aux) w.put(v);
    }
    if (!write_file(dir + "/desc_" + s.name, w.out)) {
      std::perror(s.name);
      return 1;
    }
    ++written;
  }

  // Rings. A client that published 4 good allreduces; one that wrapped around; one whose
  // position ran ahead; one that moved backwards; one that scribbles on the consumer's line and
  // its completion head.
  auto ring_seed = [&](const char* name, RingPrefix p, auto&& events) {
    Writer w;
    w.put(kTargetRing).ring_prefix(p);
    const uint32_t capacity = 1u << p.capacity_log2;
    for (uint32_t i = 0; i < capacity; ++i) {
      const uint64_t seq = (p.start & ~uint64_t{capacity - 1}) + i + 1;
      w.put(desc(Collective::kAllreduce, DType::kF32, RedOp::kSum, 16, 0, 64 * (i + 1), seq));
    }
    events(w);
    if (!write_file(dir + "/ring_" + name, w.out)) {
      std::perror(name);
      return false;
    }
    ++written;
    return true;
  };
  const RingPrefix base{3, 0, 4, 0, 0, 64 * 1024, 2, 0};
  bool ok = ring_seed("four_published", base, [](Writer& w) {
    w.event(EventOp::kDrain);
    w.event(EventOp::kPush).put(uint8_t{3});
    w.event(EventOp::kCompletionConsume).put(uint8_t{0});
    w.event(EventOp::kTailDelta).put(int8_t{2});
    w.event(EventOp::kDrain);
    w.event(EventOp::kMaybeNonempty);
  });
  RingPrefix wrapped = base;
  wrapped.start = 1000;
  wrapped.tail = 1006;
  wrapped.completion_head = 1000;
  ok = ok && ring_seed("wrapped", wrapped, [](Writer& w) {
         w.event(EventOp::kDrain);
         w.event(EventOp::kPush).put(uint8_t{7});
         w.event(EventOp::kPush).put(uint8_t{7});
         w.event(EventOp::kCompletionHead).put(uint64_t{1004});
         w.event(EventOp::kPush).put(uint8_t{2});
       });
  RingPrefix ahead = base;
  ahead.tail = 9;  // capacity 8 + 1
  ok = ok && ring_seed("ahead", ahead, [](Writer& w) { w.event(EventOp::kDrain); });
  ok = ok && ring_seed("backwards", base, [](Writer& w) {
         w.event(EventOp::kDrain);
         w.event(EventOp::kTailDelta).put(int8_t{-1});
         w.event(EventOp::kDrain);
       });
  ok = ok && ring_seed("scribbles", base, [](Writer& w) {
         w.event(EventOp::kHeadRaw).put(~uint64_t{0});
         w.event(EventOp::kWriteSlot).put(uint8_t{1});
         OpDescriptor garbage;
         std::memset(&garbage, 0xa5, sizeof(garbage));
         w.put(garbage);
         w.event(EventOp::kDrain);
         w.event(EventOp::kCompletionHead).put(uint64_t{1} << 63);
         w.event(EventOp::kPush).put(uint8_t{1});
         w.event(EventOp::kTailRaw).put(~uint64_t{0});
         w.event(EventOp::kMaybeNonempty);
       });
  if (!ok) return 1;
  std::printf("make_corpus: wrote %d seeds to %s\n", written, dir.c_str());
  return 0;
}

// One operation as every rank submits it (crossrank_input.hpp). Every rank's descriptor is
// valid on its own; whether the ranks agree is the fuzzer's question.
struct CrossRankSeed {
  const char* name;
  std::vector<uint8_t> node_of;  // by comm rank; its size is the communicator's
  std::vector<OpDescriptor> d;
  std::vector<std::vector<uint64_t>> aux;  // by rank; empty for fixed-count collectives
};

constexpr uint64_t kSeedArena = 4096;  // crossrank_engine.hpp's kEngineArena
constexpr uint64_t kSeedRecv = 1024;
constexpr uint64_t kSeedAux = 3072;

std::vector<OpDescriptor> same(uint32_t size, const OpDescriptor& d) {
  return std::vector<OpDescriptor>(size, d);
}

// allgatherv on `size` ranks with these receive counts: rank r sends counts[r].
CrossRankSeed allgatherv_seed(const char* name, std::vector<uint8_t> node_of,
                              std::vector<std::vector<uint64_t>> counts_by_rank) {
  CrossRankSeed seed{name, std::move(node_of), {}, {}};
  const size_t n = seed.node_of.size();
  for (size_t r = 0; r < n; ++r) {
    const std::vector<uint64_t>& counts = counts_by_rank[r];
    OpDescriptor d =
        desc(Collective::kAllgatherv, DType::kF32, RedOp::kSum, counts[r], 0, kSeedRecv);
    d.aux_offset = kSeedAux;
    std::vector<uint64_t> aux = counts;
    uint64_t displ = 0;
    for (size_t k = 0; k < n; ++k) {
      aux.push_back(displ);
      displ += counts[k];
    }
    seed.d.push_back(d);
    seed.aux.push_back(aux);
  }
  return seed;
}

// alltoallv where rank i sends send[i][j] elements to rank j and rank j expects recv[j][i].
CrossRankSeed alltoallv_seed(const char* name, std::vector<uint8_t> node_of,
                             const std::vector<std::vector<uint64_t>>& send,
                             const std::vector<std::vector<uint64_t>>& recv) {
  CrossRankSeed seed{name, std::move(node_of), {}, {}};
  const size_t n = seed.node_of.size();
  for (size_t r = 0; r < n; ++r) {
    OpDescriptor d = desc(Collective::kAlltoallv, DType::kI32, RedOp::kSum, 0, 0, kSeedRecv);
    d.aux_offset = kSeedAux;
    // send_counts, send_displs, recv_counts, recv_displs; each side packed in rank order.
    std::vector<uint64_t> aux;
    for (const std::vector<uint64_t>* counts : {&send[r], &recv[r]}) {
      aux.insert(aux.end(), counts->begin(), counts->end());
      uint64_t displ = 0;
      for (uint64_t c : *counts) {
        aux.push_back(displ);
        displ += c;
      }
    }
    seed.d.push_back(d);
    seed.aux.push_back(aux);
  }
  return seed;
}

bool write_crossrank(const std::string& dir, const CrossRankSeed& seed) {
  const auto size = static_cast<uint32_t>(seed.node_of.size());
  uint8_t nodes = 0;
  for (uint8_t n : seed.node_of) nodes = std::max<uint8_t>(nodes, n + 1);
  CrossRankPrefix p{};
  p.size = static_cast<uint8_t>(size - 1);
  p.nodes = static_cast<uint8_t>(nodes - 1);
  for (uint32_t r = 0; r < size; ++r) p.node_of[r] = seed.node_of[r];
  Writer w;
  w.put(p);
  for (uint32_t r = 0; r < size; ++r) {
    std::vector<uint64_t> aux = r < seed.aux.size() ? seed.aux[r] : std::vector<uint64_t>{};
    ipc::ValidationLimits lim{kSeedArena, uint64_t{1} << 34, size, r};
    lim.aux = aux.empty() ? nullptr : aux.data();
    if (ipc::Verdict v = ipc::validate_descriptor(seed.d[r], lim); !v.ok()) {
      std::fprintf(stderr, "make_corpus: cross-rank seed %s, rank %u is not valid: %s\n", seed.name,
                   r, v.message.c_str());
      return false;
    }
    w.put(seed.d[r]);
    for (uint64_t v : aux) w.put(v);
  }
  if (!write_file(dir + "/op_" + seed.name, w.out)) {
    std::perror(seed.name);
    return false;
  }
  return true;
}

int run_crossrank(const std::string& dir) {
  std::vector<CrossRankSeed> seeds;
  seeds.push_back(
      {"allreduce_2_nodes",
       {0, 1},
       same(2, desc(Collective::kAllreduce, DType::kF32, RedOp::kSum, 16, 0, kSeedRecv)),
       {}});
  {
    // Ranks 0 and 2 on node 0, rank 1 on node 1; in place.
    OpDescriptor d = desc(Collective::kBroadcast, DType::kI64, RedOp::kSum, 10, 0, 0);
    d.root = 2;
    d.flags = proto::kOpFlagInPlace;
    seeds.push_back({"broadcast_root2_interleaved", {0, 1, 0}, same(3, d), {}});
    std::vector<OpDescriptor> roots = same(3, d);
    roots[1].root = 0;  // refused: the roots differ between nodes
    seeds.push_back({"broadcast_roots_differ", {0, 1, 0}, roots, {}});
  }
  seeds.push_back(
      {"reduce_scatter_4_on_2",
       {0, 0, 1, 1},
       same(4, desc(Collective::kReduceScatter, DType::kI32, RedOp::kMax, 8, 0, kSeedRecv)),
       {}});
  {
    OpDescriptor d = desc(Collective::kGather, DType::kU8, RedOp::kSum, 33, 0, kSeedRecv);
    d.root = 1;
    seeds.push_back({"gather_root1", {0, 0, 0}, same(3, d), {}});
  }
  seeds.push_back(
      allgatherv_seed("allgatherv_1_node", {0, 0, 0}, {{1, 2, 3}, {1, 2, 3}, {1, 2, 3}}));
  seeds.push_back(allgatherv_seed("allgatherv_2_nodes", {0, 0, 1, 1},
                                  {{4, 0, 2, 1}, {4, 0, 2, 1}, {4, 0, 2, 1}, {4, 0, 2, 1}}));
  // Node 1 expects 5 elements from rank 1, which sends 0 (nodes never compare their arrays).
  seeds.push_back(
      allgatherv_seed("allgatherv_nodes_disagree", {0, 0, 1}, {{1, 0, 2}, {1, 0, 2}, {1, 5, 2}}));
  seeds.push_back(alltoallv_seed("alltoallv_1_node", {0, 0}, {{1, 2}, {3, 0}}, {{1, 3}, {2, 0}}));
  seeds.push_back(alltoallv_seed("alltoallv_4_on_2", {0, 1, 0, 1},
                                 {{1, 0, 2, 1}, {0, 3, 1, 1}, {2, 2, 0, 1}, {1, 1, 1, 1}},
                                 {{1, 0, 2, 1}, {0, 3, 2, 1}, {2, 1, 0, 1}, {1, 1, 1, 1}}));
  // Rank 1 expects 64 elements from rank 0, which sends 1: the staging leak.
  seeds.push_back(
      alltoallv_seed("alltoallv_recv_exceeds_send", {0, 0}, {{1, 2}, {3, 0}}, {{1, 3}, {64, 0}}));
  for (const CrossRankSeed& seed : seeds) {
    if (!write_crossrank(dir, seed)) return 1;
  }
  std::printf("make_corpus: wrote %zu cross-rank seeds to %s\n", seeds.size(), dir.c_str());
  return 0;
}

}  // namespace
}  // namespace nodecomm::fuzz

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: nodecomm_fuzz_corpus DIR [CROSSRANK_DIR]\n");
    return 2;
  }
  if (const int rc = nodecomm::fuzz::run(argv[1]); rc != 0) return rc;
  return argc == 3 ? nodecomm::fuzz::run_crossrank(argv[2]) : 0;
}
