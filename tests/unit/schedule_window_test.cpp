// Issue 18 point 2: the scheduler's window grows with the node count (a ring unit keeps only
// about 1/N of its bytes on each link), and a round is started early enough that the bytes
// draining while it is out are already handed out again when its plan arrives.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <functional>

#include "engine/schedule.hpp"

namespace nodecomm::daemon {
namespace {

SchedulerTuning auto_tuning(uint32_t target_us) {
  SchedulerTuning t;
  t.window_bytes = 0;
  t.chunk_bytes = 0;
  t.target_delay_us = target_us;
  return t;
}

// A steady completion rate: one 5 ms interval of `bytes_per_ms` each millisecond.
void run_at(CommSchedule& sched, size_t bytes_per_ms) {
  for (uint64_t ms = 1; ms <= 12; ++ms) sched.record_completion(bytes_per_ms, ms * 1'000'000);
}

TEST(ScheduleWindow, GrowsWithTheRingsLinkShare) {
  CommSchedule sched;
  run_at(sched, 100'000);  // 100 MB/s of unit bytes
  ASSERT_NEAR(sched.rate, 100e6, 1e6);
  const SchedulerTuning t = auto_tuning(2000);
  // 2(N-1) x rate x target: 2 nodes 0.4 MB, 4 nodes 1.2 MB, 8 nodes 2.8 MB.
  EXPECT_NEAR(static_cast<double>(sched.window(t, 2)), 400e3, 10e3);
  EXPECT_NEAR(static_cast<double>(sched.window(t, 4)), 1.2e6, 30e3);
  EXPECT_NEAR(static_cast<double>(sched.window(t, 8)), 2.8e6, 70e3);
  EXPECT_EQ(sched.chunk(t, 8), sched.window(t, 8) / 4);
  // A single node's communicator never reaches the scheduler, but the formula stays sane.
  EXPECT_EQ(sched.window(t, 1), sched.window(t, 2));
}

TEST(ScheduleWindow, BoundsAndFixedSettingsHold) {
  CommSchedule sched;  // nothing measured yet: the least window
  SchedulerTuning t = auto_tuning(2000);
  EXPECT_EQ(sched.window(t, 64), kMinWindowBytes);
  EXPECT_EQ(sched.chunk(t, 64), kMinChunkBytes);
  run_at(sched, 10'000'000);  // 10 GB/s
  EXPECT_EQ(sched.window(t, 4096), kMaxWindowBytes);
  EXPECT_EQ(sched.chunk(t, 4096), kMaxChunkBytes);
  t.window_bytes = 3 << 20;
  t.chunk_bytes = 1 << 20;
  EXPECT_EQ(sched.window(t, 4096), size_t{3} << 20);
  EXPECT_EQ(sched.chunk(t, 4096), size_t{1} << 20);
}

// A window that does not limit the lookahead.
constexpr size_t kWide = size_t{64} << 20;

TEST(ScheduleWindow, LookaheadIsWhatDrainsDuringARound) {
  CommSchedule sched;
  run_at(sched, 100'000);  // 100 MB/s
  InFlightToken on_network = sched.bytes_in_flight.acquire(1'000'000);
  EXPECT_EQ(sched.drained_during_round(kWide), 0u);  // no round measured yet
  sched.last_round_ns = 50'000'000;
  sched.record_round(52'000'000);  // a 2 ms round: 200 KB drain meanwhile
  EXPECT_NEAR(static_cast<double>(sched.drained_during_round(kWide)), 200e3, 5e3);
  // Quick to rise, slow to fall.
  sched.last_round_ns = 60'000'000;
  sched.record_round(61'000'000);
  EXPECT_GT(sched.round_ns, 1.5e6);
  sched.last_round_ns = 70'000'000;
  sched.record_round(85'000'000);
  EXPECT_DOUBLE_EQ(sched.round_ns, 15e6);
  // Never more than is in flight (15 ms at 100 MB/s would be 1.5 MB).
  EXPECT_EQ(sched.drained_during_round(kWide), 1'000'000u);
  // In urgent mode at most half the window: a round that waited for late nodes says nothing
  // of the link, and must not let the plans queue window after window.
  EXPECT_EQ(sched.drained_during_round(600'000), 1'000'000u);
  sched.record_holds(true, 90'000'000);
  EXPECT_EQ(sched.drained_during_round(600'000), 300'000u);
  on_network.release();
  EXPECT_EQ(sched.drained_during_round(kWide), 0u);
}

// Issue 18 point 4: for a second after units were held for a more urgent operation, the window
// aims at the adapted urgent target (between urgent_target_us and target_delay_us), down to one
// least chunk, so that little is queued ahead of the next urgent one; then it is the usual
// window again.
TEST(ScheduleWindow, UrgentModeShortensTheQueueForASecond) {
  CommSchedule sched;
  run_at(sched, 100'000);  // 100 MB/s
  SchedulerTuning t = auto_tuning(2000);
  t.urgent_target_us = 250;
  const size_t usual = sched.window(t, 4);
  EXPECT_NEAR(static_cast<double>(usual), 1.2e6, 30e3);
  sched.record_holds(false, 100'000'000);
  EXPECT_FALSE(sched.urgent_mode);
  sched.record_holds(true, 200'000'000);
  ASSERT_TRUE(sched.urgent_mode);
  EXPECT_EQ(sched.window(t, 4), usual);  // starts from the usual target
  sched.urgent_target = 250;             // as adapted down (next test)
  // 6 x 100 MB/s x 250 us = 150 KB; on 2 nodes 50 KB, raised to the urgent floor.
  EXPECT_NEAR(static_cast<double>(sched.window(t, 4)), 150e3, 5e3);
  EXPECT_EQ(sched.window(t, 2), kMinUrgentWindowBytes);
  EXPECT_EQ(sched.chunk(t, 2), kMinChunkBytes);
  t.urgent_target_us = 0;  // off
  EXPECT_EQ(sched.window(t, 4), usual);
  t.urgent_target_us = 250;
  sched.record_holds(false, 200'000'000 + kUrgentModeNs - 1);
  EXPECT_TRUE(sched.urgent_mode);
  sched.record_holds(false, 200'000'000 + kUrgentModeNs);
  EXPECT_FALSE(sched.urgent_mode);
  EXPECT_EQ(sched.window(t, 4), usual);
}

// The urgent target shrinks while the rate (judged over 20 ms) holds at its peak, and grows at
// once when the rate falls well below it (the daemon can no longer keep the shorter queue busy).
TEST(ScheduleWindow, UrgentTargetFollowsTheRate) {
  CommSchedule sched;
  SchedulerTuning t = auto_tuning(2000);
  t.urgent_target_us = 250;
  sched.record_holds(true, 1'000'000);
  uint64_t ms = 1;
  // One judged sample: four 5 ms intervals, adapting after every completion as the engine does.
  const auto interval_at = [&](size_t bytes_per_ms) {
    for (int k = 0; k < 20; ++k) {
      sched.record_completion(bytes_per_ms, ++ms * 1'000'000);
      sched.adapt_urgent_target(t);
    }
  };
  interval_at(100'000);
  EXPECT_DOUBLE_EQ(sched.urgent_target, 2000 * 0.9);  // the first sample is the peak
  interval_at(100'000);
  EXPECT_DOUBLE_EQ(sched.urgent_target, 2000 * 0.9 * 0.9);
  for (int k = 0; k < 40; ++k) interval_at(100'000);
  EXPECT_DOUBLE_EQ(sched.urgent_target, 250);  // at the floor, not below
  interval_at(70'000);                         // 70 % of the peak: too short a queue
  EXPECT_DOUBLE_EQ(sched.urgent_target, 375);
  interval_at(90'000);  // between: kept
  EXPECT_DOUBLE_EQ(sched.urgent_target, 375);
  for (int k = 0; k < 10; ++k) interval_at(10'000);
  EXPECT_DOUBLE_EQ(sched.urgent_target, 2000);  // never above the usual target
  // Out of urgent mode it starts again from the usual target.
  sched.record_holds(false, 5'000'000'000);
  interval_at(100'000);
  EXPECT_DOUBLE_EQ(sched.urgent_target, 2000);
}

}  // namespace
}  // namespace nodecomm::daemon
