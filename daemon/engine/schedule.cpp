#include "engine/schedule.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

namespace nodecomm::daemon {

size_t CommSchedule::window(const SchedulerTuning& t, size_t nodes) const {
  if (t.window_bytes != 0) return t.window_bytes;
  const double link_share = 2.0 * static_cast<double>(std::max<size_t>(nodes, 2) - 1);
  const bool urgent = urgent_mode && t.urgent_target_us != 0;
  const double target =
      urgent ? std::clamp(urgent_target == 0 ? t.target_delay_us : urgent_target,
                          static_cast<double>(std::min(t.urgent_target_us, t.target_delay_us)),
                          static_cast<double>(t.target_delay_us))
             : t.target_delay_us;
  const double bytes = rate * link_share * target / 1e6;
  return std::clamp(static_cast<size_t>(bytes), urgent ? kMinUrgentWindowBytes : kMinWindowBytes,
                    kMaxWindowBytes);
}

size_t CommSchedule::chunk(const SchedulerTuning& t, size_t nodes) const {
  if (t.chunk_bytes != 0) return t.chunk_bytes;
  return std::clamp(window(t, nodes) / 4, kMinChunkBytes, kMaxChunkBytes);
}

size_t CommSchedule::drained_during_round(size_t window) const {
  const double bytes = rate * round_ns / 1e9;
  // In urgent mode at most half the window. A round measured long because the other nodes
  // started theirs late (their ranks posted later, their daemon was off the CPU) says nothing
  // of the link; taken at its word it lets the plans hand out window after window, which on a
  // busy host keeps the link fuller (4 x 2 at 64 MiB: 0.91-0.93 of the link against 0.88-0.91
  // capped) but queues most of a large operation ahead of the next urgent one (the 4 x 2
  // priority probe waited 57-180 ms).
  const size_t drained = std::min(bytes_in_flight.value(), static_cast<size_t>(bytes));
  return urgent_mode ? std::min(drained, window / 2) : drained;
}

void CommSchedule::record_round(uint64_t now) {
  const double took = static_cast<double>(now - last_round_ns);
  // Quick to rise, so that a round slowed by queued bytes is covered by the next lookahead.
  round_ns = round_ns == 0 || took > round_ns ? took : 0.8 * round_ns + 0.2 * took;
}

void CommSchedule::record_holds(bool held, uint64_t now) {
  if (held) last_hold_ns = now;
  holding = held;
  urgent_mode = last_hold_ns != 0 && now - last_hold_ns < kUrgentModeNs;
}

void CommSchedule::adapt_urgent_target(const SchedulerTuning& t) {
  // Shrink while samples stay near the peak (the link is as busy with less queued), grow at
  // once when they fall well below it (the daemon no longer keeps it busy). Samples low for
  // want of work (a training step's gaps) also grow it, towards the usual target: the safe side.
  constexpr double kPeakDecay = 0.97;  // per sample (20 ms): the peak follows a slower link
  constexpr double kKeep = 0.95;
  constexpr double kSlow = 0.85;
  constexpr double kShrink = 0.9;
  constexpr double kGrow = 1.5;
  // Judged over several intervals: one interval sees a handful of unit completions, whose
  // granularity alone moves a sample by 20 %.
  constexpr int kIntervalsPerSample = 4;
  if (fresh_sample == 0) return;
  adapt_sum += std::exchange(fresh_sample, 0.0);
  if (++adapt_count < kIntervalsPerSample) return;
  const double sample = adapt_sum / adapt_count;
  adapt_sum = 0;
  adapt_count = 0;
  rate_peak = std::max(sample, rate_peak * kPeakDecay);
  const double high = t.target_delay_us;
  const double low = std::min<double>(t.urgent_target_us, high);
  if (urgent_target == 0 || !urgent_mode) urgent_target = high;
  if (!urgent_mode || t.urgent_target_us == 0) return;
  if (sample >= kKeep * rate_peak) {
    urgent_target = std::max(low, urgent_target * kShrink);
  } else if (sample < kSlow * rate_peak) {
    urgent_target = std::min(high, urgent_target * kGrow);
  }
}

void CommSchedule::record_completion(size_t bytes, uint64_t now) {
  constexpr uint64_t kIntervalNs = 5'000'000;
  constexpr uint64_t kIdleGapNs = 20'000'000;
  // After a pause the link was idle, not slow: start a new interval.
  if (now - last_completion_ns > kIdleGapNs) {
    interval_start_ns = now;
    interval_bytes = 0;
  }
  last_completion_ns = now;
  interval_bytes += bytes;
  completed_bytes += bytes;
  const uint64_t elapsed = now - interval_start_ns;
  if (elapsed < kIntervalNs) return;
  const double sample = static_cast<double>(interval_bytes) * 1e9 / static_cast<double>(elapsed);
  // Quick to rise (a small window under-measures a fast link), slow to fall.
  rate = rate == 0 || sample > rate ? sample : 0.8 * rate + 0.2 * sample;
  fresh_sample = sample;
  interval_start_ns = now;
  interval_bytes = 0;
}

}  // namespace nodecomm::daemon
