// FeedbackState (daemon/engine/feedback_state.hpp): int8 error-feedback residuals stay within their
// tensor and byte limits, least recently used first, and go with their communicator.
#include "engine/feedback_state.hpp"

#include <gtest/gtest.h>

#include <string>

namespace nodecomm::daemon {
namespace {

TEST(FeedbackState, NewResidualsAreZeroAndKeptPerCommNameAndCount) {
  FeedbackState f;
  std::vector<float>* a = f.find_or_add(1, "w", 4);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(*a, std::vector<float>(4, 0.0f));
  (*a)[0] = 0.5f;
  EXPECT_EQ(f.find_or_add(1, "w", 4), a);  // the same tensor: the same residual
  EXPECT_EQ((*f.find_or_add(1, "w", 4))[0], 0.5f);
  EXPECT_NE(f.find_or_add(2, "w", 4), a);  // another communicator
  EXPECT_NE(f.find_or_add(1, "w", 8), a);  // another count
  EXPECT_EQ(f.tensors(), 3u);
  EXPECT_EQ(f.bytes(), (4 + 4 + 8) * sizeof(float));
}

TEST(FeedbackState, TensorLimitDropsTheLeastRecentlyUsed) {
  FeedbackState f;
  f.set_limits(3, 1 << 20);
  for (const char* name : {"a", "b", "c"}) (*f.find_or_add(0, name, 2))[0] = 1.0f;
  f.find_or_add(0, "a", 2);  // "b" is now the least recently used
  (*f.find_or_add(0, "d", 2))[0] = 1.0f;
  EXPECT_EQ(f.tensors(), 3u);
  EXPECT_EQ(f.evicted(), 1u);
  EXPECT_EQ((*f.find_or_add(0, "a", 2))[0], 1.0f);
  EXPECT_EQ((*f.find_or_add(0, "d", 2))[0], 1.0f);
  EXPECT_EQ((*f.find_or_add(0, "b", 2))[0], 0.0f);  // dropped: restarts from zero
  EXPECT_EQ(f.tensors(), 3u);
}

TEST(FeedbackState, ByteLimitHoldsForEveryNameAClientInvents) {
  FeedbackState f;
  f.set_limits(1 << 20, 1000 * sizeof(float));
  for (int i = 0; i < 100000; ++i) {
    ASSERT_NE(f.find_or_add(0, "t." + std::to_string(i), 300), nullptr);
    ASSERT_LE(f.bytes(), 1000 * sizeof(float));
  }
  EXPECT_EQ(f.tensors(), 3u);
  // One tensor larger than the whole limit is not kept at all.
  EXPECT_EQ(f.find_or_add(0, "huge", 1001), nullptr);
  EXPECT_LE(f.bytes(), 1000 * sizeof(float));
}

TEST(FeedbackState, CommFreeDropsItsResidualsOnly) {
  FeedbackState f;
  f.find_or_add(1, "a", 4);
  f.find_or_add(1, "b", 4);
  f.find_or_add(2, "a", 4);
  EXPECT_EQ(f.drop_comm(1), 2u);
  EXPECT_EQ(f.tensors(), 1u);
  EXPECT_EQ(f.bytes(), 4 * sizeof(float));
  EXPECT_EQ(f.drop_comm(1), 0u);
  EXPECT_EQ(f.drop_comm(2), 1u);
  EXPECT_EQ(f.bytes(), 0u);
}

}  // namespace
}  // namespace nodecomm::daemon
