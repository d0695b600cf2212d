// The pipelined algorithms (ring allreduce, ring reduce-scatter and allgather, chains) cut the
// buffer into slices and keep up to --pipeline-depth of them in flight, one per slot. This is
// their one progress loop.
#pragma once

#include <cstddef>
#include <vector>

namespace nodecomm::daemon {

// Elements [first, first + count) of a buffer.
struct Range {
  size_t first = 0;
  size_t count = 0;
};

// Moves every slot as far as its requests allow; a free slot takes the next slice not yet
// begun. `begin(slot, slice)` starts a slice in a free slot (setting slot.active);
// `advance(slot)` returns false once the slot has to wait.
template <class Slot, class Begin, class Advance>
void drive_slices(std::vector<Slot>& slots, size_t& next_slice, size_t slices, Begin&& begin,
                  Advance&& advance) {
  for (Slot& slot : slots) {
    while (true) {
      if (!slot.active) {
        if (next_slice == slices) break;
        begin(slot, next_slice++);
        continue;
      }
      if (!advance(slot)) break;
    }
  }
}

}  // namespace nodecomm::daemon
