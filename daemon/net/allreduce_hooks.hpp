// What an inter-node allreduce asks of the engine while it runs: the node's contribution range
// by range, the result range by range, and scratch memory. The transport interface and the
// algorithms (algorithms/) both take it, so it lives below both.
#pragma once

#include <cstddef>
#include <functional>

namespace nodecomm::daemon {

struct AllreduceHooks {
  // Elements [first, first + count) of the buffer must now hold this node's contribution.
  std::function<void(size_t first, size_t count)> prepare;
  // Elements [first, first + count) hold the final result (they may still be read, not
  // written, by the algorithm afterwards).
  std::function<void(size_t first, size_t count)> done;
  // Scratch memory of at least `bytes`, valid until the algorithm is destroyed.
  std::function<void*(size_t bytes)> scratch;
};

}  // namespace nodecomm::daemon
