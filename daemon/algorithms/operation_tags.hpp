// The tags of one inter-node operation: each algorithm owns a block of them, so that the
// messages of operations in flight at once never match each other's receives.
#pragma once

#include <fmt/format.h>

#include "net/p2p.hpp"
#include "net/transport.hpp"

namespace nodecomm::daemon {

// Tags an operation may use, whatever its size: the ring caps its slice count to fit.
inline constexpr int kTagsPerOperation = 1024;

// An operation owns tags [tag_base, tag_base + kTagsPerOperation); all of them must exist.
inline void check_tags(const PointToPoint& net, int tag_base) {
  if (tag_base < 0 || tag_base > net.max_tag() - kTagsPerOperation + 1) {
    throw TransportError(fmt::format("tag base {} outside [0, {}]", tag_base,
                                     net.max_tag() - kTagsPerOperation + 1));
  }
}

}  // namespace nodecomm::daemon
