// Scheduling round records (wire_formats.hpp): a node's own, checked on receipt, and combined
// over disjoint sets of nodes. The combination is what makes the rounds scale: it is the same
// whichever way the records travel (all N to every node, or pairwise by recursive doubling),
// and the same bits on every node whichever of two records is passed first, because every
// choice in it is decided by node index (the lower lead node's record goes first).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "engine/wire_formats.hpp"

namespace nodecomm::daemon {

// Bytes of `r` that carry something: what is sent.
size_t round_record_bytes(const RoundRecord& r);

// The k-th announcement of `r` (k < r.announced).
Announcement announcement(const RoundRecord& r, size_t k);
// Appends `a`; announcements go in increasing seq order, at most kAnnouncePerRound.
void add_announcement(RoundRecord& r, const Announcement& a);
// Node `node`'s own announcement of what its ranks posted.
Announcement announce(const OpSummary& summary, uint32_t node);

// Empty when `r`, as received from another node of a communicator over `node_count` nodes, is
// well formed (counts, offsets, seq order, node indices); otherwise what is wrong.
std::string round_record_problem(const RoundRecord& r, uint32_t node_count);
const EagerEntry* find_eager(const RoundRecord& r, uint64_t seq);

// Calls f(i) for each window position i ready in `r`, in order. Only the set bits are visited:
// the window is 1024 seqs and a round typically has a few ready, and scanning every bit was
// the largest part of a small allreduce's round on the daemon's side.
template <class F>
void for_each_ready(const RoundRecord& r, F&& f) {
  for (size_t w = 0; w < kWindow / 64; ++w) {
    for (uint64_t bits = r.ready[w]; bits != 0; bits &= bits - 1) {
      f(w * 64 + static_cast<size_t>(std::countr_zero(bits)));
    }
  }
}

// Reduces `other` into `into` (`bytes` of one operation's eager part, in the wire type); false
// when this node cannot, as it did not carry that operation: the entry is dropped.
using EagerCombine =
    std::function<bool(uint64_t seq, uint8_t* into, const uint8_t* other, uint32_t bytes)>;

// The record of the nodes of `a` and `b` (disjoint sets) into `out` (neither of them):
// - ready bitmaps ANDed, rooms and floors at their least (floors also at their greatest),
//   announcements merged per seq (the lowest kAnnouncePerRound seqs kept), the malformed
//   node at its least, and the tuning of the record with the lower lead node;
// - eager parts kept only for operations both carry, with the same size, reduced with the
//   lower lead node's part first.
void merge_round_records(const RoundRecord& a, const RoundRecord& b, RoundRecord& out,
                         const EagerCombine& combine);
// The announcements of one seq by two disjoint sets of nodes, as merge_round_records.
Announcement merge_announcements(const Announcement& a, const Announcement& b);

// Whether `a`'s nodes posted the same operation (collective, dtype, op, count, root,
// compression, and for v-collectives counts that fit together).
bool same_submission(const Announcement& a);

}  // namespace nodecomm::daemon
