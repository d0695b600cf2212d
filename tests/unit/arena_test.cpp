#include "arena.hpp"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace nodecomm::client {
namespace {

TEST(Arena, AllocatesAlignedDisjointBlocksAndCoalesces) {
  ArenaAllocator a(1 << 20);
  const auto x = a.allocate(100, 64);
  const auto y = a.allocate(70000, 4096);
  const auto z = a.allocate(1, 64);
  ASSERT_TRUE(x && y && z);
  EXPECT_EQ(*x % 64, 0u);
  EXPECT_EQ(*y % 4096, 0u);
  EXPECT_TRUE(*x + 100 <= *y || *y + 70000 <= *x);
  EXPECT_TRUE(a.release(*y));
  EXPECT_FALSE(a.release(*y));  // double free is refused
  EXPECT_TRUE(a.release(*x));
  EXPECT_TRUE(a.release(*z));
  EXPECT_EQ(a.free_bytes(), a.total());
  EXPECT_TRUE(a.allocate(1 << 20, 64).has_value());  // fully coalesced again
}

TEST(Arena, FailsCleanlyWhenFull) {
  ArenaAllocator a(4096);
  EXPECT_TRUE(a.allocate(4096, 64).has_value());
  EXPECT_FALSE(a.allocate(64, 64).has_value());
}

TEST(Arena, RandomAllocFreeKeepsAccounting) {
  ArenaAllocator a(8 << 20);
  std::mt19937 rng(7);
  std::vector<std::pair<uint64_t, uint64_t>> live;
  for (int i = 0; i < 20000; ++i) {
    if (live.empty() || rng() % 3 != 0) {
      const uint64_t bytes = 1 + rng() % 20000;
      if (auto off = a.allocate(bytes, (rng() & 1) ? 64 : 4096)) live.emplace_back(*off, bytes);
    } else {
      const size_t k = rng() % live.size();
      ASSERT_TRUE(a.release(live[k].first));
      live.erase(live.begin() + static_cast<long>(k));
    }
  }
  std::sort(live.begin(), live.end());
  for (size_t i = 1; i < live.size(); ++i) {
    ASSERT_LE(live[i - 1].first + live[i - 1].second, live[i].first) << "blocks overlap";
  }
  for (auto& [off, bytes] : live) ASSERT_TRUE(a.release(off));
  EXPECT_EQ(a.free_bytes(), a.total());
}

}  // namespace
}  // namespace nodecomm::client
