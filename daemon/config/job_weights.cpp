#include "config/job_weights.hpp"

#include <fmt/format.h>
#include <grp.h>
#include <pwd.h>

#include <algorithm>
#include <charconv>
#include <stdexcept>

#include "nodecomm/proto/control.hpp"

namespace nodecomm::daemon {

namespace {

bool parse_number(const std::string& text, uint32_t& out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, out);
  return ec == std::errc() && ptr == end && !text.empty();
}

bool is_uid(const std::string& name, uid_t uid) {
  uint32_t number = 0;
  if (parse_number(name, number)) return number == uid;
  const passwd* user = ::getpwnam(name.c_str());
  return user != nullptr && user->pw_uid == uid;
}

bool in_group(const std::string& name, const std::vector<gid_t>& groups) {
  uint32_t number = 0;
  gid_t gid = 0;
  if (parse_number(name, number)) {
    gid = number;
  } else if (const group* g = ::getgrnam(name.c_str()); g != nullptr) {
    gid = g->gr_gid;
  } else {
    return false;
  }
  return std::find(groups.begin(), groups.end(), gid) != groups.end();
}

}  // namespace

std::vector<WeightRule> parse_job_weights(const std::vector<std::string>& entries) {
  std::vector<WeightRule> rules;
  for (const std::string& entry : entries) {
    const size_t eq = entry.rfind('=');
    WeightRule rule;
    const std::string who = eq == std::string::npos ? entry : entry.substr(0, eq);
    const bool weight_ok = eq != std::string::npos &&
                           parse_number(entry.substr(eq + 1), rule.weight) && rule.weight >= 1 &&
                           rule.weight <= proto::kMaxJobWeight;
    if (who == "*") {
      rule.who = WeightRule::Who::kAnyone;
    } else if (who.rfind("uid:", 0) == 0 && who.size() > 4) {
      rule.who = WeightRule::Who::kUid;
      rule.name = who.substr(4);
    } else if (who.rfind("group:", 0) == 0 && who.size() > 6) {
      rule.who = WeightRule::Who::kGroup;
      rule.name = who.substr(6);
    } else {
      throw std::invalid_argument(
          fmt::format("job weight '{}': expected uid:USER=W, group:GROUP=W or *=W (W 1..{})", entry,
                      proto::kMaxJobWeight));
    }
    if (!weight_ok) {
      throw std::invalid_argument(
          fmt::format("job weight '{}': the weight must be 1..{}", entry, proto::kMaxJobWeight));
    }
    rules.push_back(rule);
  }
  return rules;
}

uint32_t job_weight(const std::vector<WeightRule>& rules, uid_t uid,
                    const std::vector<gid_t>& groups, int32_t requested) {
  uint32_t own = 0;     // the largest rule for this uid or its groups
  uint32_t anyone = 0;  // the * rule
  for (const WeightRule& rule : rules) {
    switch (rule.who) {
      case WeightRule::Who::kAnyone:
        anyone = std::max(anyone, rule.weight);
        break;
      case WeightRule::Who::kUid:
        if (is_uid(rule.name, uid)) own = std::max(own, rule.weight);
        break;
      case WeightRule::Who::kGroup:
        if (in_group(rule.name, groups)) own = std::max(own, rule.weight);
        break;
    }
  }
  const uint32_t cap = own != 0 ? own : anyone != 0 ? anyone : 1;
  return requested > 0 ? std::min(cap, static_cast<uint32_t>(requested)) : cap;
}

}  // namespace nodecomm::daemon
