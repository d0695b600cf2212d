// Running a check once per SIMD target that a Highway-dispatched kernel file was compiled for and
// this CPU supports, forced through hwy::SetSupportedTargetsForTest. Shared by the unit tests of
// daemon/kernels/reduce.cpp and daemon/kernels/wire_codec.cpp.
#pragma once

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace nodecomm::test {

// Restricts dispatch to `target` (0: every supported target again).
inline void SetTarget(int64_t target) {
  hwy::SetSupportedTargetsForTest(target);
  // Make the next HWY_DYNAMIC_DISPATCH pick from the (possibly mocked) set again.
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
}

// One representative target bit per distinct kernel the dispatcher can select on this CPU, with
// the name kTargetName() (the kernel file's own report of its dispatched target) gives it.
template <const char* (*kTargetName)()>
const std::vector<std::pair<int64_t, std::string>>& Targets() {
  static const auto* targets = [] {
    auto* out = new std::vector<std::pair<int64_t, std::string>>;
    std::set<std::string> seen;
    for (int64_t bits = hwy::SupportedTargets(); bits != 0; bits &= bits - 1) {
      const int64_t target = bits & -bits;
      SetTarget(target);
      std::string name = kTargetName();
      if (seen.insert(name).second) out->emplace_back(target, std::move(name));
    }
    SetTarget(0);
    return out;
  }();
  return *targets;
}

template <const char* (*kTargetName)(), class F>
void ForEachTarget(const F& f) {
  for (const auto& [target, name] : Targets<kTargetName>()) {
    SetTarget(target);
    SCOPED_TRACE("target " + name);
    f();
  }
  SetTarget(0);
}

}  // namespace nodecomm::test
