// Issue 17 point 4: in-flight work is counted by owned tokens, never by hand.
#include "engine/in_flight.hpp"

#include <gtest/gtest.h>

#include <deque>
#include <utility>

namespace nodecomm::daemon {
namespace {

TEST(InFlight, TokenCountsWhileItLives) {
  InFlightCounter counter;
  {
    InFlightToken a = counter.acquire();
    InFlightToken b = counter.acquire(5);
    EXPECT_EQ(counter.value(), 6u);
  }
  EXPECT_EQ(counter.value(), 0u);
}

TEST(InFlight, MovingCarriesTheCountOnce) {
  InFlightCounter counter;
  std::deque<InFlightToken> units;
  InFlightToken op = counter.acquire();
  units.push_back(std::move(op));
  EXPECT_FALSE(op.held());  // NOLINT(bugprone-use-after-move): the point of the test
  EXPECT_EQ(counter.value(), 1u);
  op.release();  // releasing an empty token changes nothing
  EXPECT_EQ(counter.value(), 1u);
  units.clear();
  EXPECT_EQ(counter.value(), 0u);
}

TEST(InFlight, OverwritingReleasesTheOldCount) {
  InFlightCounter counter;
  InFlightToken t = counter.acquire(3);
  t = counter.acquire(2);
  EXPECT_EQ(counter.value(), 2u);
  t = InFlightToken{};
  EXPECT_EQ(counter.value(), 0u);
  t.release();
  t.release();
  EXPECT_EQ(counter.value(), 0u);
}

TEST(InFlight, TokenMayOutliveItsCounter) {
  InFlightToken t;
  {
    InFlightCounter counter;
    t = counter.acquire();
  }
  t.release();  // no counter left to touch; must not crash
  EXPECT_FALSE(t.held());
}

}  // namespace
}  // namespace nodecomm::daemon
