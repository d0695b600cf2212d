// A daemon's own pauses are not its peers' silence (net/peer_silence.hpp): after a host-wide
// pause the daemon that runs first must not declare the others lost, while a peer that really
// died is still found one timeout of observed time later.
#include "net/peer_silence.hpp"

#include <gtest/gtest.h>

#include <cstdint>

namespace nodecomm::daemon {
namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kTimeout = 3000 * kMs;   // --peer-timeout-sec 3
constexpr uint64_t kStall = kTimeout / 10;  // the heartbeat interval

// Runs a daemon's checks every `step` from `from` to `to`, with a peer last heard at
// `heard`, and returns when (if ever) the daemon would declare the peer lost.
uint64_t lost_at(PeerSilenceClock& clock, uint64_t& heard, uint64_t from, uint64_t to,
                 uint64_t step) {
  for (uint64_t now = from; now <= to; now += step) {
    heard = forgive_unobserved(heard, clock.unobserved(now, kStall), now);
    if (now - heard > kTimeout) return now;
  }
  return 0;
}

TEST(PeerSilence, ADaemonThatKeepsCheckingForgivesNothing) {
  PeerSilenceClock clock;
  for (uint64_t now = 10 * kMs; now < 5000 * kMs; now += 10 * kMs)
    EXPECT_EQ(clock.unobserved(now, kStall), 0u) << now;
}

TEST(PeerSilence, ADeadPeerIsLostOneTimeoutAfterItsLastHeartbeat) {
  PeerSilenceClock clock;
  uint64_t heard = 1000 * kMs;
  EXPECT_EQ(lost_at(clock, heard, 1000 * kMs, 10000 * kMs, 10 * kMs), 4010 * kMs);
}

TEST(PeerSilence, AHostWidePauseDoesNotLoseThePeers) {
  PeerSilenceClock clock;
  uint64_t heard = 1000 * kMs;
  ASSERT_EQ(lost_at(clock, heard, 1000 * kMs, 1500 * kMs, 10 * kMs), 0u);
  // Everything paused for 6 s (the CI failure of 2026-12-06); this daemon runs first. Only
  // the 0.3 s of the gap within the heartbeat interval count against the peer, with the
  // 0.5 s before it.
  EXPECT_EQ(lost_at(clock, heard, 7500 * kMs, 7500 * kMs, 10 * kMs), 0u);
  EXPECT_EQ(heard, 1000 * kMs + (6000 * kMs - kStall));
  // The peer stays silent: it died during the pause. Found after a timeout of observed time.
  EXPECT_EQ(lost_at(clock, heard, 7510 * kMs, 20000 * kMs, 10 * kMs), 9710 * kMs);
}

TEST(PeerSilence, ForgivenessNeverMovesPastNow) {
  EXPECT_EQ(forgive_unobserved(100, 1000, 500), 500u);
  EXPECT_EQ(forgive_unobserved(100, 200, 500), 300u);
  PeerSilenceClock clock;
  EXPECT_EQ(clock.unobserved(5, kStall), 0u);  // the first check has no previous one
  EXPECT_EQ(clock.unobserved(4, kStall), 0u);  // a clock that went back forgives nothing
}

}  // namespace
}  // namespace nodecomm::daemon
