#include "engine/round_record.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <tuple>

#include "nodecomm/proto/types.hpp"

namespace nodecomm::daemon {

namespace {

bool is_alltoallv(const OpSummary& s) {
  return static_cast<proto::Collective>(s.collective) == proto::Collective::kAlltoallv;
}

// The fields every rank must pass alike, in a fixed order. alltoallv's count digests differ by
// node by design (they sum to zero), so they are summed apart instead of compared.
auto key(const OpSummary& s) {
  const bool digest_compared = !is_alltoallv(s);
  return std::make_tuple(s.collective, s.count, s.root, s.dtype, s.redop, s.compression,
                         digest_compared ? s.counts_digest[0] : 0,
                         digest_compared ? s.counts_digest[1] : 0);
}

size_t announcements_bytes(const RoundRecord& r) {
  return std::min<size_t>(r.announced, kAnnouncePerRound) * sizeof(Announcement);
}

}  // namespace

size_t round_record_bytes(const RoundRecord& r) {
  size_t end = announcements_bytes(r);
  for (uint32_t k = 0; k < std::min<uint32_t>(r.eager, kEagerOps); ++k) {
    end = std::max<size_t>(end, size_t{r.eager_ops[k].offset} + r.eager_ops[k].bytes);
  }
  return offsetof(RoundRecord, tail) + std::min(end, sizeof(r.tail));
}

Announcement announcement(const RoundRecord& r, size_t k) {
  Announcement a;
  std::memcpy(&a, r.tail + k * sizeof(Announcement), sizeof(a));
  return a;
}

void add_announcement(RoundRecord& r, const Announcement& a) {
  std::memcpy(r.tail + size_t{r.announced} * sizeof(Announcement), &a, sizeof(a));
  ++r.announced;
}

Announcement announce(const OpSummary& summary, uint32_t node) {
  Announcement a{};
  a.low = summary;
  a.high = summary;
  if (is_alltoallv(summary)) {
    a.counts_sum[0] = summary.counts_digest[0];
    a.counts_sum[1] = summary.counts_digest[1];
  }
  a.low_node = node;
  a.high_node = node;
  a.nodes = 1;
  a.lead_node = node;
  a.lead_priority = summary.priority;
  const bool refused = (summary.flags & kSummaryStagingRefused) != 0;
  a.refused = refused ? 1 : 0;
  a.refused_node = refused ? node : kNoNode;
  return a;
}

std::string round_record_problem(const RoundRecord& r, uint32_t node_count) {
  if (r.nodes == 0 || r.nodes > node_count || r.lead_node >= node_count) {
    return fmt::format("covers {} node(s) led by node {}, of {}", r.nodes, r.lead_node, node_count);
  }
  if (r.malformed_node != kNoNode && r.malformed_node >= node_count) {
    return fmt::format("names node {} as malformed, of {}", r.malformed_node, node_count);
  }
  if (r.announced > kAnnouncePerRound) {
    return fmt::format("{} announcements, at most {}", r.announced, kAnnouncePerRound);
  }
  if (r.eager > kEagerOps)
    return fmt::format("{} eager operations, at most {}", r.eager, kEagerOps);
  uint64_t previous_seq = 0;
  for (uint32_t k = 0; k < r.announced; ++k) {
    const Announcement a = announcement(r, k);
    if (a.low.seq != a.high.seq || (k > 0 && previous_seq >= a.low.seq)) {
      return fmt::format("announcement {} (seq {}) out of order", k, a.low.seq);
    }
    previous_seq = a.low.seq;
    if (a.nodes == 0 || a.nodes > r.nodes || a.refused > a.nodes ||
        std::max({a.low_node, a.high_node, a.lead_node}) >= node_count ||
        (a.refused_node != kNoNode && a.refused_node >= node_count)) {
      return fmt::format("announcement of seq {} names nodes beyond the record's", a.low.seq);
    }
  }
  const size_t data = announcements_bytes(r);
  size_t parts = 0;
  for (uint32_t k = 0; k < r.eager; ++k) {
    const EagerEntry& e = r.eager_ops[k];
    if (e.offset < data || e.offset % 8 != 0 || e.bytes > kEagerBytes ||
        size_t{e.offset} + e.bytes > sizeof(r.tail)) {
      return fmt::format("eager seq {}: {} bytes at offset {}, past the record's data area", e.seq,
                         e.bytes, e.offset);
    }
    if (k > 0 && r.eager_ops[k - 1].seq >= e.seq) {
      return fmt::format("eager seq {} out of order", e.seq);
    }
    parts += (size_t{e.bytes} + 7) / 8 * 8;
  }
  if (parts > kEagerBytes) {
    return fmt::format("{} bytes of eager parts, at most {}", parts, kEagerBytes);
  }
  return {};
}

const EagerEntry* find_eager(const RoundRecord& r, uint64_t seq) {
  for (uint32_t k = 0; k < std::min<uint32_t>(r.eager, kEagerOps); ++k) {
    if (r.eager_ops[k].seq == seq) return &r.eager_ops[k];
  }
  return nullptr;
}

Announcement merge_announcements(const Announcement& a, const Announcement& b) {
  Announcement out = a;
  // Ties go to the lower node, so the result does not depend on the order of a and b.
  const auto kb = key(b.low);
  const auto ka = key(a.low);
  if (kb < ka || (kb == ka && b.low_node < a.low_node)) {
    out.low = b.low;
    out.low_node = b.low_node;
  }
  const auto hb = key(b.high);
  const auto ha = key(a.high);
  if (ha < hb || (hb == ha && b.high_node < a.high_node)) {
    out.high = b.high;
    out.high_node = b.high_node;
  }
  // Wrapping sums: zero over every node when alltoallv's pairs agree.
  out.counts_sum[0] = a.counts_sum[0] + b.counts_sum[0];
  out.counts_sum[1] = a.counts_sum[1] + b.counts_sum[1];
  out.nodes = a.nodes + b.nodes;
  if (b.lead_node < a.lead_node) {
    out.lead_node = b.lead_node;
    out.lead_priority = b.lead_priority;
  }
  out.refused = a.refused + b.refused;
  out.refused_node = std::min(a.refused_node, b.refused_node);
  return out;
}

bool same_submission(const Announcement& a) {
  return key(a.low) == key(a.high) &&
         (!is_alltoallv(a.low) || (a.counts_sum[0] == 0 && a.counts_sum[1] == 0));
}

void merge_round_records(const RoundRecord& a, const RoundRecord& b, RoundRecord& out,
                         const EagerCombine& combine) {
  const RoundRecord& lo = a.lead_node <= b.lead_node ? a : b;
  const RoundRecord& hi = &lo == &a ? b : a;
  std::memset(&out, 0, offsetof(RoundRecord, tail));
  out.nodes = a.nodes + b.nodes;
  out.lead_node = lo.lead_node;
  out.malformed_node = std::min(a.malformed_node, b.malformed_node);
  out.gather_nodes = lo.gather_nodes;
  out.floor_low = std::min(a.floor_low, b.floor_low);
  out.floor_high = std::max(a.floor_high, b.floor_high);
  for (size_t w = 0; w < kWindow / 64; ++w) out.ready[w] = a.ready[w] & b.ready[w];
  out.policy = lo.policy;
  out.fusion = lo.fusion;
  out.fusion_threshold = lo.fusion_threshold;
  out.chunk_bytes = lo.chunk_bytes;
  out.room = std::min(a.room, b.room);
  out.staying = std::max(a.staying, b.staying);
  out.algorithm = lo.algorithm;
  // Announcements: both lists are in seq order; the lowest seqs are kept. A node whose
  // announcement does not survive sees its seq missing from the result and announces again.
  uint32_t i = 0;
  uint32_t j = 0;
  while ((i < lo.announced || j < hi.announced) && out.announced < kAnnouncePerRound) {
    const Announcement x = i < lo.announced ? announcement(lo, i) : Announcement{};
    const Announcement y = j < hi.announced ? announcement(hi, j) : Announcement{};
    if (j == hi.announced || (i < lo.announced && x.low.seq < y.low.seq)) {
      add_announcement(out, x);
      ++i;
    } else if (i == lo.announced || y.low.seq < x.low.seq) {
      add_announcement(out, y);
      ++j;
    } else {
      add_announcement(out, merge_announcements(x, y));
      ++i;
      ++j;
    }
  }
  // Eager parts that both carry, the lower lead node's first.
  size_t at = announcements_bytes(out);
  for (uint32_t k = 0; k < lo.eager; ++k) {
    const EagerEntry& e = lo.eager_ops[k];
    const EagerEntry* other = find_eager(hi, e.seq);
    if (other == nullptr || other->bytes != e.bytes) continue;
    if (at + e.bytes > sizeof(out.tail)) break;  // never for checked records
    uint8_t* into = out.tail + at;
    std::memcpy(into, lo.tail + e.offset, e.bytes);
    if (!combine(e.seq, into, hi.tail + other->offset, e.bytes)) continue;
    out.eager_ops[out.eager++] = {e.seq, static_cast<uint32_t>(at), e.bytes};
    const size_t padded = (size_t{e.bytes} + 7) / 8 * 8;
    std::memset(into + e.bytes, 0, padded - e.bytes);  // sent: nothing stale
    at += padded;
  }
}

}  // namespace nodecomm::daemon
