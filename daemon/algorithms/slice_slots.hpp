// The pipelined algorithms (ring allreduce, ring reduce-scatter and allgather, chains) cut the
// buffer into slices and keep up to --pipeline-depth of them in flight, one per slot. This is
// their one progress loop, with the pieces both algorithm files share.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <vector>

#include "algorithms/allreduce_algorithms.hpp"
#include "net/p2p.hpp"
#include "net/transport.hpp"

namespace nodecomm::daemon {

// Elements [first, first + count) of a buffer.
struct Range {
  size_t first = 0;
  size_t count = 0;
};

// An operation owns tags [tag_base, tag_base + kTagsPerOperation); all of them must exist.
inline void check_tags(const PointToPoint& net, int tag_base) {
  if (tag_base < 0 || tag_base > net.max_tag() - kTagsPerOperation + 1) {
    throw TransportError(fmt::format("tag base {} outside [0, {}]", tag_base,
                                     net.max_tag() - kTagsPerOperation + 1));
  }
}

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
