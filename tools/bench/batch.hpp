// Non-blocking helpers of nodecomm-bench: posting with the in-flight limit in mind, --batch K
// (K operations of one size in flight before waiting), and the check of results whose data
// crossed the network compressed (--compress), which can only be approximate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend.hpp"
#include "check.hpp"
#include "nodecomm.h"

namespace nodecomm::bench {

// Posts `call`. While the backend refuses for too many operations in flight (nodecomm's
// NC_ERR_QUEUE_FULL; the daemon's --ring-capacity, 256 by default), calls `complete_one`,
// which must complete one of the caller's own operations and return true, and tries again.
// Throws BackendError when `complete_one` has nothing left to complete.
Pending post_draining(Backend& backend, const Call& call,
                      const std::function<bool()>& complete_one);

// How many buffer pairs --batch K uses for buffers of up to `max_bytes`: K, or as many as fit
// kBatchBudget (at least one); operations beyond that reuse them round robin.
int batch_slots(int batch, size_t max_bytes);
inline constexpr uint64_t kBatchBudget = 512ull << 20;
// The nodecomm arena for --batch K and sizes up to `max_bytes`; 0: the default is enough.
uint64_t batch_arena_bytes(int batch, size_t max_bytes);

// --batch K for one size: posts K operations shaped like a base call, each on its own buffer
// pair (slot j % slots()), then waits for all of them. Slot 0 is the caller's own buffers; the
// others are allocated here, with the sizes of the caller's.
class Batch {
 public:
  Batch(Backend& backend, int batch) : backend_(backend), batch_(batch) {}
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;
  ~Batch();

  // The caller's buffers (slot 0; recv == send in place) and how many slots to use. Throws
  // BackendError when an allocation fails.
  void allocate(void* send, size_t send_bytes, void* recv, size_t recv_bytes, int slots);
  int slots() const { return static_cast<int>(send_.size()); }
  // Copies slot 0's send buffer (its first `bytes`) into the other slots, so that every
  // operation moves defined data.
  void replicate(size_t bytes);
  // One batch of `call`, whose pointers lie in slot 0's buffers. With attributes, each slot's
  // operations get their own tensor name ("<name>.<slot>"), as int8 compression's error
  // feedback needs.
  void run(const Call& call);

 private:
  Backend& backend_;
  int batch_;
  std::vector<void*> send_, recv_;  // per slot; [0] is the caller's
  std::vector<void*> owned_;
  size_t send_bytes_ = 0;
  std::vector<Pending> pending_;
  std::vector<OpAttr> attrs_;
  std::vector<std::string> names_;
};

// Checks `count` f32 results of an allreduce whose node partials crossed the network with
// `compress` (nodecomm.h): each element must lie within a tolerance of the exact reduction,
// scaled by S = the sum over ranks of |input| at that index (the sum before any cancellation):
// bf16 2^-7 x nodes x S, f16 2^-10 x nodes x S, int8 2/127 x nodes x max S over the buffer
// (block scales make int8's error depend on the block, not the element). avg divides S by the
// ranks. Returns the number outside; the first `max_recorded` go to `recorded`.
uint64_t verify_compressed(const Pattern& pattern, const float* result, size_t count,
                           nc_compress_t compress, int nodes, std::vector<Mismatch>* recorded,
                           size_t max_recorded);

}  // namespace nodecomm::bench
