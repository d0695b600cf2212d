// What each collective moves: its buffer sizes as nccl-tests defines them, its bus-bandwidth
// factor, its in-place layout (NCCL's, as nodecomm.h documents it), and an independent
// reference for every element a rank holds afterwards, built on the patterns of check.hpp.
//
// Shared by nodecomm-bench and tests/integration/collectives_check so that both check results
// with the same reference. Free of any backend and of any nodecomm call.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "check.hpp"
#include "nodecomm.h"

namespace nodecomm::bench {

enum class Collective {
  kAllreduce,
  kReduce,
  kBroadcast,
  kReduceScatter,
  kAllgather,
  kGather,
  kScatter,
  kAlltoall,
  kBarrier,
  // Per-rank counts (vector_count()); nodecomm-bench only so far, hence not in
  // kAllCollectives, which tests/integration/collectives_check runs as "all".
  kAllgatherv,
  kAlltoallv,
};

// The collectives with one count for all ranks.
inline constexpr std::array<Collective, 9> kAllCollectives = {
    Collective::kAllreduce,     Collective::kReduce,    Collective::kBroadcast,
    Collective::kReduceScatter, Collective::kAllgather, Collective::kGather,
    Collective::kScatter,       Collective::kAlltoall,  Collective::kBarrier};
// kAllCollectives and the vector ("v") collectives: everything --op accepts.
inline constexpr std::array<Collective, 11> kBenchCollectives = {
    Collective::kAllreduce,     Collective::kReduce,    Collective::kBroadcast,
    Collective::kReduceScatter, Collective::kAllgather, Collective::kAllgatherv,
    Collective::kGather,        Collective::kScatter,   Collective::kAlltoall,
    Collective::kAlltoallv,     Collective::kBarrier};

// "allreduce", "reduce_scatter", ... as the --op flags spell them.
std::string_view collective_name(Collective collective);
std::optional<Collective> parse_collective(std::string_view name);  // any of kBenchCollectives
// All names, space separated, for help texts and error messages.
std::string collective_names();

bool is_reducing(Collective collective);  // takes a redop
bool has_root(Collective collective);
bool has_buffers(Collective collective);  // false for barrier
// Whether an in-place form exists (nodecomm.h): not for alltoall, allgatherv and alltoallv,
// and barrier has no buffers.
bool supports_inplace(Collective collective);
// allgatherv and alltoallv: counts and displacements per rank (CollectiveCase::vector_args).
bool is_vector(Collective collective);

// How many elements rank `src` sends rank `dst` in a vector collective whose count argument
// (nominal per-rank count) is `count`: count - 1, count or count + 1 by a fixed pattern, so
// that runs really differ in length and some are empty at count 1 (allgatherv: by src alone,
// count + src % 3 - 1; alltoallv: count + (src + dst) % 3 - 1; never below 0).
size_t vector_count(Collective collective, size_t count, int src, int dst);

// Element counts of one call, as nccl-tests' getCollByteCount defines them.
struct Shape {
  size_t count = 0;          // the call's count argument (nccl-tests' "count" column)
  size_t send_elems = 0;     // each rank's send buffer, out of place
  size_t recv_elems = 0;     // each rank's receive buffer, out of place
  size_t inplace_elems = 0;  // the one buffer of a rank, in place
  // The larger of the elements a rank sends and receives, at most over ranks: send_elems and
  // recv_elems but for the vector collectives, whose buffers also hold gaps (CollectiveCase).
  size_t moved_elems = 0;
  // In place, rank r passes send = buffer + r * send_step and recv = buffer + r * recv_step
  // (nccl-tests' sendInplaceOffset/recvInplaceOffset, which match nodecomm.h's conventions at
  // the root and are harmless elsewhere).
  size_t send_step = 0;
  size_t recv_step = 0;
};

// The shape of a call with count argument `count` on `world_size` ranks.
Shape shape_of(Collective collective, size_t count, int world_size);
// nccl-tests' setupArgs for a requested size: count = bytes / element, and for the collectives
// whose count argument is per rank, count / world_size of it (at least one element).
Shape shape_for_bytes(Collective collective, size_t bytes, size_t element, int world_size);
// nccl-tests' "size" column: the larger of the send and receive buffer, in bytes (for the
// vector collectives, of the data in them: moved_elems).
size_t reported_bytes(const Shape& shape, size_t element);

// nccl-tests' bus-bandwidth factor: 2(n-1)/n for allreduce, (n-1)/n for reduce_scatter,
// allgather, alltoall, gather and scatter (and allgatherv, alltoallv), 1 for broadcast and
// reduce, 0 for barrier.
double busbw_factor(Collective collective, int world_size);

// Pointers into a rank's buffers for one call.
struct CallBuffers {
  const void* send;
  void* recv;
};

// One call (collective, dtype, op, root, count over world_size ranks) and, for every rank,
// what its buffers hold before it and must hold after it. Out of place, a rank's send buffer
// holds its input and must be unchanged; its receive buffer starts as poison (check.hpp)
// and must hold what the rank receives, or stay poison where the rank receives nothing
// (non-roots of reduce and gather). In place, elements the rank neither sends nor receives
// must be unchanged too.
class CollectiveCase {
 public:
  // Throws std::invalid_argument for a root outside [0, world_size) on a rooted collective.
  CollectiveCase(Collective collective, nc_dtype_t dtype, nc_redop_t op, int world_size, int root,
                 size_t count);

  Collective collective() const { return collective_; }
  nc_dtype_t dtype() const { return dtype_; }
  nc_redop_t op() const { return op_; }
  int root() const { return root_; }
  const Shape& shape() const { return shape_; }
  size_t element_bytes() const { return element_; }
  // False where the result is undefined by design (avg on integer types, reductions only).
  bool defined() const;

  // The count and displacement arguments of rank `rank` in a vector collective (nodecomm.h's
  // nc_allgatherv: send_count, recv_counts, recv_displs; nc_alltoallv: the four arrays).
  struct VectorArgs {
    size_t send_count = 0;
    std::vector<size_t> send_counts, send_displs, recv_counts, recv_displs;
  };
  VectorArgs vector_args(int rank) const;

  // In place: where rank `rank` points send and recv inside its one buffer.
  CallBuffers inplace_buffers(void* buffer, int rank) const;

  // Out of place: fills `send` (shape().send_elems) and `recv` (shape().recv_elems) of rank
  // `rank` for a run; either may be null (a buffer the rank does not pass).
  void prepare(int rank, void* send, void* recv) const;
  // Counts the wrong elements of `send` and `recv` after a run; null buffers are skipped. The
  // first `max_recorded` are appended to `recorded` (which may be null).
  uint64_t verify(int rank, const void* send, const void* recv, std::vector<Mismatch>* recorded,
                  size_t max_recorded) const;

  // In place: the same for the rank's one buffer of shape().inplace_elems elements.
  void prepare_inplace(int rank, void* buffer) const;
  uint64_t verify_inplace(int rank, const void* buffer, std::vector<Mismatch>* recorded,
                          size_t max_recorded) const;

  // What one element must hold: rank `rank`'s input at `index`, the reduction over all ranks
  // at `index`, or poison. Public for diagnostics and tests.
  struct Want {
    enum Kind { kInput, kReduced, kPoison } kind;
    int rank = 0;
    size_t index = 0;
  };
  Want want_recv(int rank, size_t j) const;            // out of place, after the run
  Want want_inplace_before(int rank, size_t k) const;  // in place, before the run
  Want want_inplace_after(int rank, size_t k) const;   // in place, after the run

 private:
  void write(const Want& want, void* out) const;
  uint64_t compare(const char* buffer_name, const void* data, size_t elems,
                   Want (CollectiveCase::*want)(int, size_t) const, int rank,
                   std::vector<Mismatch>* recorded, size_t record_limit) const;
  Want want_send(int rank, size_t j) const;
  Want want_recv_vector(int rank, size_t j) const;

  Collective collective_;
  nc_dtype_t dtype_;
  nc_redop_t op_;
  int world_size_;
  int root_;
  size_t element_;
  Shape shape_;
  Pattern pattern_;
  // Vector collectives only, world_size_ x world_size_: send_displs_[s * n + d] (where rank s
  // sends from to rank d) and recv_displs_[d * n + s] (where rank d receives rank s's run).
  std::vector<size_t> send_displs_;
  std::vector<size_t> recv_displs_;
};

}  // namespace nodecomm::bench
