// What every hostile_client attack shares: the world allreduce's values, and how the hostile
// rank checks what the daemon answers (an error completion, or being dropped). The attacks on
// registered memory live in hostile_regions.cpp.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "nodecomm/ipc/fixed_text.hpp"
#include "raw_client.hpp"

namespace hostile {

inline constexpr uint64_t kWorldCount = 1000;  // elements of the world allreduces

inline bool contains(const std::string& text, const std::string& words) {
  return text.find(words) != std::string::npos;
}

// Element i of world rank r's buffer in the world allreduces (exact in i64).
inline int64_t world_value(int64_t round, int64_t rank, int64_t i) {
  return (rank + 1) * 1000003 * round + i * 7 - round;
}
inline int64_t world_sum(int64_t round, int64_t size, int64_t i) {
  int64_t s = 0;
  for (int64_t r = 0; r < size; ++r) s += world_value(round, r, i);
  return s;
}

inline int hostile_fail(const RawClient& c, const std::string& what) {
  std::fprintf(stderr, "hostile_client (hostile rank %u): %s\n", c.world_rank, what.c_str());
  return 1;
}

// A correct world allreduce from the hostile rank (it must keep working where allowed).
inline int raw_world_allreduce(RawClient& c, int64_t round, uint64_t seq) {
  auto* buf = reinterpret_cast<int64_t*>(c.arena);
  for (uint64_t i = 0; i < kWorldCount; ++i) buf[i] = world_value(round, c.world_rank, i);
  OpDescriptor d =
      make_desc(Collective::kAllreduce, DType::kI64, RedOp::kSum, 0, seq, kWorldCount, 0, 0);
  d.flags = proto::kOpFlagInPlace;
  if (!c.post(d)) return hostile_fail(c, "cannot post a world allreduce");
  Completion done{};
  if (c.next(done, timeout_sec()) != RawClient::Next::kCompletion || done.status != 0) {
    return hostile_fail(c, fmt::format("world allreduce seq {} did not complete: {}", seq,
                                       ipc::bounded_text(done.message)));
  }
  for (uint64_t i = 0; i < kWorldCount; ++i) {
    if (buf[i] != world_sum(round, c.world_size, static_cast<int64_t>(i))) {
      return hostile_fail(c, fmt::format("world allreduce seq {} element {} is {}, expected {}",
                                         seq, i, buf[i], world_sum(round, c.world_size, i)));
    }
  }
  return 0;
}

// Collects `n` error completions, each with `status` and its text containing `words[k]`.
inline int expect_errors(RawClient& c,
                         const std::vector<std::pair<Status, std::string>>& expected) {
  for (const auto& [status, words] : expected) {
    Completion done{};
    const RawClient::Next n = c.next(done, timeout_sec());
    if (n != RawClient::Next::kCompletion) {
      return hostile_fail(c,
                          fmt::format("expected an error completion with '{}', got none", words));
    }
    const std::string text = ipc::bounded_text(done.message);
    if (done.status != static_cast<int32_t>(status) || !contains(text, words)) {
      return hostile_fail(c, fmt::format("expected status {} ({}) with '{}', got status {}: {}",
                                         static_cast<int>(status), proto::status_name(status),
                                         words, done.status, text));
    }
    std::printf("hostile_client: refused as expected (%s): %s\n",
                std::string(proto::status_name(status)).c_str(), text.c_str());
  }
  return 0;
}

inline int expect_dropped(RawClient& c, const char* after) {
  std::string why;
  if (!c.wait_dropped(timeout_sec(), why)) {
    return hostile_fail(c, fmt::format("after {} expected to be dropped, got {}", after, why));
  }
  std::printf("hostile_client: dropped by the daemon after %s\n", after);
  return 0;
}

// hostile_regions.cpp
int attack_regions(RawClient& c);
int attack_region_truncate(RawClient& c);

}  // namespace hostile
