// Jobs' shares of the link (config/job_weights.hpp): the rules' grammar and which weight a
// job gets from its uid, its groups and what it asks for.
#include "config/job_weights.hpp"

#include <gtest/gtest.h>

#include <stdexcept>

namespace nodecomm::daemon {
namespace {

TEST(JobWeights, NoRuleGivesEveryJobOneAndCapsItThere) {
  EXPECT_EQ(job_weight({}, 1000, {100}, -1), 1u);
  EXPECT_EQ(job_weight({}, 1000, {100}, 5), 1u);
}

TEST(JobWeights, TheLargestMatchingRuleIsTheWeightAndTheCap) {
  const auto rules = parse_job_weights({"*=2", "uid:1000=3", "group:100=6", "uid:7=9"});
  EXPECT_EQ(job_weight(rules, 1000, {50}, -1), 3u);   // its uid
  EXPECT_EQ(job_weight(rules, 1000, {100}, -1), 6u);  // its group beats its uid
  EXPECT_EQ(job_weight(rules, 1001, {50}, -1), 2u);   // nobody in particular: *
  EXPECT_EQ(job_weight(rules, 1000, {50}, 1), 1u);    // asks for less: gets it
  EXPECT_EQ(job_weight(rules, 1000, {50}, 8), 3u);    // asks for more: capped
  EXPECT_EQ(job_weight(rules, 7, {}, 0), 9u);         // 0: asks for nothing
}

TEST(JobWeights, UserAndGroupNamesMatchTheirIds) {
  const auto rules = parse_job_weights({"uid:root=4", "group:root=5"});
  EXPECT_EQ(job_weight(rules, 0, {}, -1), 4u);
  EXPECT_EQ(job_weight(rules, 12345, {0}, -1), 5u);
  EXPECT_EQ(job_weight(rules, 12345, {}, -1), 1u);
}

TEST(JobWeights, BadRulesAreRefusedNamingTheEntry) {
  for (const char* bad : {"3", "uid:=3", "user:1=3", "*=0", "*=1001", "*=x", "group:g=-1"}) {
    try {
      parse_job_weights({bad});
      ADD_FAILURE() << bad << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace nodecomm::daemon
