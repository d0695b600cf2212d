// The link's split between jobs (conductor/link_share.hpp) against a simulated link whose
// split does not follow the windows' ratio (as Open MPI's, which interleaves messages): the
// feedback must still bring each job to its weighted share, and a job that cannot use its
// share must leave it to the others.
#include "conductor/link_share.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace nodecomm::daemon {
namespace {

constexpr uint64_t kTickNs = 10'000'000;  // the daemon's heartbeat
constexpr double kLinkRate = 125e6;       // bytes per second
constexpr size_t kNominal = 512 << 10;

struct SimJob {
  LinkUser user;
  double demand = 1;  // the most of the link it can use
  LinkGrant grant;
  double rate = 0;  // over the last tick
};

// The link splits in proportion to the square root of the windows (a job with three times
// the window gets 1.7 times the bytes), each job capped by its demand; what one cannot use,
// the others get.
void run_link(std::vector<SimJob>& jobs) {
  double total = 0;
  for (const SimJob& j : jobs) {
    total += std::sqrt(static_cast<double>(j.grant.window ? j.grant.window : kNominal));
  }
  double left = kLinkRate;
  double free_weight = 0;
  for (SimJob& j : jobs) {
    const double want = kLinkRate *
                        std::sqrt(static_cast<double>(j.grant.window ? j.grant.window : kNominal)) /
                        total;
    j.rate = std::min(want, j.demand * kLinkRate);
    left -= j.rate;
    if (j.rate == want) free_weight += want;
  }
  for (SimJob& j : jobs) {
    if (j.rate < j.demand * kLinkRate && free_weight > 0) {
      j.rate = std::min(j.demand * kLinkRate, j.rate + left * j.rate / free_weight);
    }
  }
}

// Runs `seconds` of heartbeats; returns each job's share of the bytes over the last second.
std::vector<double> simulate(LinkSharer& sharer, std::vector<SimJob>& jobs, double seconds,
                             uint64_t& now) {
  std::vector<uint64_t> at_last_second(jobs.size());
  const auto ticks = static_cast<int>(seconds * 1e9 / kTickNs);
  for (int t = 0; t < ticks; ++t) {
    if (t == ticks - 100) {
      for (size_t i = 0; i < jobs.size(); ++i) at_last_second[i] = jobs[i].user.completed_bytes;
    }
    std::vector<LinkUser> users;
    users.reserve(jobs.size());
    for (const SimJob& j : jobs) users.push_back(j.user);
    const std::vector<LinkGrant> grants = sharer.share(now, users);
    for (size_t i = 0; i < jobs.size(); ++i) jobs[i].grant = grants[i];
    run_link(jobs);
    for (SimJob& j : jobs) {
      j.user.completed_bytes += static_cast<uint64_t>(j.rate * kTickNs / 1e9);
      // Backlogged: its window full; otherwise a little in flight.
      const size_t window = j.grant.window ? j.grant.window : kNominal;
      j.user.on_network = j.rate < j.demand * kLinkRate * 0.999 ? window : 32 << 10;
    }
    now += kTickNs;
  }
  std::vector<double> shares;
  double total = 0;
  for (size_t i = 0; i < jobs.size(); ++i)
    total += static_cast<double>(jobs[i].user.completed_bytes - at_last_second[i]);
  for (size_t i = 0; i < jobs.size(); ++i)
    shares.push_back(static_cast<double>(jobs[i].user.completed_bytes - at_last_second[i]) / total);
  return shares;
}

SimJob job(const char* name, uint32_t weight, double demand = 1) {
  SimJob j;
  j.user.name = name;
  j.user.weight = weight;
  j.user.nominal_window = kNominal;
  j.user.on_network = kNominal;
  j.demand = demand;
  return j;
}

TEST(LinkShare, EqualWeightsSplitEvenly) {
  LinkSharer sharer;
  uint64_t now = 1;
  std::vector<SimJob> jobs{job("a", 1), job("b", 1)};
  const auto shares = simulate(sharer, jobs, 3, now);
  EXPECT_NEAR(shares[0], 0.5, 0.02);
  EXPECT_NEAR(shares[1], 0.5, 0.02);
  EXPECT_EQ(jobs[0].grant.chunk, jobs[1].grant.chunk);  // one chunk size for all
}

TEST(LinkShare, WeightsThreeToOneGiveThreeQuartersDespiteTheLinksResponse) {
  LinkSharer sharer;
  uint64_t now = 1;
  std::vector<SimJob> jobs{job("heavy", 3), job("light", 1)};
  // Windows alone would give 0.63 here.
  const auto shares = simulate(sharer, jobs, 3, now);
  EXPECT_NEAR(shares[0], 0.75, 0.03);
  EXPECT_GT(sharer.scale("heavy"), sharer.scale("light"));
}

TEST(LinkShare, ThreeJobsByWeight) {
  LinkSharer sharer;
  uint64_t now = 1;
  std::vector<SimJob> jobs{job("a", 1), job("b", 2), job("c", 5)};
  const auto shares = simulate(sharer, jobs, 4, now);
  EXPECT_NEAR(shares[0], 1.0 / 8, 0.03);
  EXPECT_NEAR(shares[1], 2.0 / 8, 0.03);
  EXPECT_NEAR(shares[2], 5.0 / 8, 0.03);
}

TEST(LinkShare, WhatAJobCannotUseGoesToTheOthers) {
  LinkSharer sharer;
  uint64_t now = 1;
  // The heavy job can use a tenth of the link only: the light one gets the rest.
  std::vector<SimJob> jobs{job("heavy", 3, 0.1), job("light", 1)};
  const auto shares = simulate(sharer, jobs, 3, now);
  EXPECT_NEAR(shares[0], 0.1, 0.01);
  EXPECT_NEAR(shares[1], 0.9, 0.01);
  // The light job's window may take what the heavy one leaves.
  EXPECT_GE(jobs[1].grant.window, 2 * kNominal - (64 << 10));
}

TEST(LinkShare, ALoneJobKeepsItsOwnWindowAndAnIdleOneStopsSharing) {
  LinkSharer sharer;
  uint64_t now = 1;
  std::vector<SimJob> one{job("a", 3)};
  simulate(sharer, one, 0.5, now);
  EXPECT_EQ(one[0].grant.window, 0u);
  EXPECT_EQ(one[0].grant.chunk, 0u);

  std::vector<SimJob> two{job("a", 3), job("b", 1)};
  simulate(sharer, two, 1, now);
  EXPECT_NE(two[0].grant.window, 0u);
  // b stops moving data: after the linger, a has the link to itself again.
  std::vector<LinkUser> users{two[0].user, two[1].user};
  users[1].on_network = 0;
  std::vector<LinkGrant> grants;
  for (uint64_t t = 0; t <= LinkSharer::kLingerNs + kTickNs; t += kTickNs) {
    grants = sharer.share(now, users);
    now += kTickNs;
  }
  EXPECT_EQ(grants[0].window, 0u);
  EXPECT_EQ(sharer.scale("a"), 1);
  // A job that ended is forgotten.
  sharer.share(now, {users[0]});
  EXPECT_EQ(sharer.scale("b"), 1);
}

}  // namespace
}  // namespace nodecomm::daemon
