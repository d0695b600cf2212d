// Each job's share of a node's link against the other jobs that use it at the same time
// (--job-weights, NODECOMM_JOB_WEIGHT). A rule `WHO=W` gives the jobs of WHO the weight W and
// lets them ask for at most W: WHO is `uid:NAME|N`, `group:NAME|N` or `*` (everyone else).
// Without a matching rule a job's weight is 1. The job's own uid and groups are local rank 0's.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace nodecomm::daemon {

struct WeightRule {
  enum class Who { kAnyone, kUid, kGroup };
  Who who = Who::kAnyone;
  std::string name;  // user or group name, or number, as written
  uint32_t weight = 1;
};

// Parses the rules; throws std::invalid_argument naming the bad entry and the grammar.
std::vector<WeightRule> parse_job_weights(const std::vector<std::string>& entries);

// The weight of a job whose rank 0 runs as `uid` with `groups`, that asked for `requested`
// (<= 0: nothing): the largest weight of a rule for its uid or one of its groups, else the
// `*` rule's, else 1; what the job asks for, if less.
uint32_t job_weight(const std::vector<WeightRule>& rules, uid_t uid,
                    const std::vector<gid_t>& groups, int32_t requested);

}  // namespace nodecomm::daemon
