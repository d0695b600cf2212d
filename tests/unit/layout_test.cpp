// The ABI's layout: the static_asserts in proto/ pin sizes and offsets at compile time; these
// tests pin the geometry both sides compute and the section alignment rules.
#include <gtest/gtest.h>

#include "nodecomm/proto/abi.hpp"
#include "nodecomm/proto/control.hpp"

namespace nodecomm::proto {
namespace {

TEST(Layout, RecordSizesAreStable) {
  EXPECT_EQ(sizeof(OpDescriptor), 112u);
  EXPECT_EQ(sizeof(Completion), 1024u);
  EXPECT_EQ(sizeof(SegmentHeader), 128u);
  EXPECT_EQ(sizeof(RingHeader), 256u);
  EXPECT_EQ(sizeof(Doorbells), 256u);
  EXPECT_EQ(sizeof(Hello), 136u);
  EXPECT_EQ(sizeof(JobTuning), 32u);
  EXPECT_EQ(offsetof(OpDescriptor, compression), 60u);
  EXPECT_EQ(kLayoutVersion, 7u);
}

TEST(Layout, PositionsSitOnTheirOwnLines) {
  EXPECT_EQ(offsetof(RingHeader, tail) % kLineBytes, 0u);
  EXPECT_EQ(offsetof(RingHeader, head) % kLineBytes, 0u);
  EXPECT_NE(offsetof(RingHeader, tail) / kLineBytes, offsetof(RingHeader, head) / kLineBytes);
  EXPECT_NE(offsetof(Doorbells, completion_futex) / kLineBytes,
            offsetof(Doorbells, client_waiting) / kLineBytes);
}

TEST(Layout, GeometryIsOrderedAlignedAndCoversTheArena) {
  for (uint32_t cap : {2u, 64u, 256u, 4096u}) {
    for (uint64_t arena : {uint64_t{4096}, uint64_t{1} << 20, (uint64_t{64} << 20) + 4096}) {
      const SegmentGeometry g = segment_geometry(cap, cap, arena);
      EXPECT_GE(g.doorbells_offset, sizeof(SegmentHeader));
      EXPECT_GE(g.submit_ring_offset, g.doorbells_offset + sizeof(Doorbells));
      EXPECT_GE(g.complete_ring_offset,
                g.submit_ring_offset + sizeof(RingHeader) + cap * sizeof(OpDescriptor));
      EXPECT_GE(g.arena_offset,
                g.complete_ring_offset + sizeof(RingHeader) + cap * sizeof(Completion));
      EXPECT_EQ(g.arena_offset % kArenaAlignment, 0u);
      EXPECT_EQ(g.submit_ring_offset % kLineBytes, 0u);
      EXPECT_EQ(g.complete_ring_offset % kLineBytes, 0u);
      EXPECT_GE(g.segment_bytes, g.arena_offset + arena);
    }
  }
}

}  // namespace
}  // namespace nodecomm::proto
