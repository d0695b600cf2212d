#include "algorithms/recursive_doubling.hpp"

namespace nodecomm::daemon {

std::vector<DoublingStep> recursive_doubling_steps(uint32_t rank, uint32_t size, int tag_base) {
  using Kind = DoublingStep::Kind;
  uint32_t pow2 = 1;
  while (pow2 * 2 <= size) pow2 *= 2;
  const uint32_t extra = size - pow2;
  // The lowest real node of virtual rank v (v = pow2 gives the node count).
  const auto real_first = [extra](uint32_t v) { return v < extra ? 2 * v : v + extra; };
  int levels = 0;
  for (uint32_t m = 1; m < pow2; m <<= 1) ++levels;
  const int post_tag = tag_base + 1 + levels;
  std::vector<DoublingStep> steps;
  if (rank < 2 * extra && rank % 2 == 0) {
    steps.push_back({Kind::kSend, rank + 1, tag_base, 0, 0});
    steps.push_back({Kind::kReceive, rank + 1, post_tag, 0, 0});
    return steps;
  }
  if (rank < 2 * extra)
    steps.push_back({Kind::kReceiveAndCombine, rank - 1, tag_base, rank - 1, 1});
  const uint32_t me = rank < 2 * extra ? rank / 2 : rank - extra;
  int level = 0;
  for (uint32_t mask = 1; mask < pow2; mask <<= 1, ++level) {
    const uint32_t partner = me ^ mask;
    // Before this exchange the partner holds its group of `mask` virtual ranks; of a pair,
    // the odd node takes part.
    const uint32_t base = partner & ~(mask - 1);
    const uint32_t first = real_first(base);
    steps.push_back({Kind::kExchange, real_first(partner) + (partner < extra ? 1 : 0),
                     tag_base + 1 + level, first, real_first(base + mask) - first});
  }
  if (rank < 2 * extra) steps.push_back({Kind::kSend, rank - 1, post_tag, 0, 0});
  return steps;
}

}  // namespace nodecomm::daemon
