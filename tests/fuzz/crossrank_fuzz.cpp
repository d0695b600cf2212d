// libFuzzer target for what the daemons decide about one operation from all of its ranks'
// submissions together: 1 to 4 ranks on 1 to 4 nodes, each with its own arena, descriptor and
// count arrays (encoding in crossrank_input.hpp). Each rank goes through the intake the engine
// runs (daemon::decode_submission: ipc::check_aux_range, the copy of its count arrays out of
// its arena, ipc::validate_descriptor); each node's members are matched as Engine::accept matches
// them (daemon::Communicator::add, daemon::describe_disagreement, the allgatherv count check); the
// nodes' submissions are compared as Engine::cross_check compares them (daemon::summarize,
// daemon::cross_node_disagreement).
//
// The oracle: the operation is either refused (some rank's status is not OK, with a message),
// or every rank submitted the same operation and every byte the daemons would move fits:
//   - the fields every rank must share agree across all ranks and nodes (collective, dtype,
//     and for fixed-count collectives count, root, op and compression);
//   - every buffer the daemon reads or writes for a rank lies inside that rank's arena, with
//     the counts the daemon uses (for allgatherv, its node's first member's array);
//   - every transfer from rank s to rank d is as long on both sides: what the daemon stages
//     from s's buffer for d equals what d's daemon delivers into d's buffer from s. A longer
//     delivery hands d bytes this operation never staged (staging of an earlier job), a
//     shorter one leaves part of d's buffer stale.
// Then the same submissions go through a real daemon::Engine, all ranks on one node
// (crossrank_engine.cpp: real ClientSessions and segments, the loopback transport, one staging
// pool for every input, poisoned at first): either every rank's completion is an error and no
// arena changed, or every rank's completion is OK, the fields agree, and every arena holds
// exactly what a reference computed from the arenas before (the moved blocks; reduction
// results are not computed) and nothing else changed. This part runs whatever checks
// Engine::accept has, with no change here.
// The count agreement of issue 16, point 2 (alltoallv send_i[j] == recv_j[i];
// allgatherv counts equal on every node) is enforced by the daemon
// (daemon/engine/count_agreement.cpp), so a violation is fatal; NODECOMM_FUZZ_COUNT_AGREEMENT=0
// makes it a note, to study an input.
// Before the daemon checked counts, an alltoallv whose counts disagreed was accepted and the
// receiver got bytes from the staging pool (0xee, its poison, or what an earlier input left).
//
// Built by tests/fuzz/CMakeLists.txt (clang, libFuzzer, ASan, UBSan; tools/fuzz.sh SECONDS
// crossrank) and, without libFuzzer, into the main build's fuzz_crossrank_replay (the
// fuzz_crossrank_corpus_replay test).
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "crossrank_engine.hpp"
#include "crossrank_input.hpp"
#include "engine/count_agreement.hpp"
#include "engine/job.hpp"
#include "engine/op_check.hpp"
#include "engine/submission_decode.hpp"
#include "fuzz_input.hpp"
#include "nodecomm/ipc/validate.hpp"

namespace nodecomm::fuzz {
namespace {

using proto::Collective;
using proto::OpDescriptor;
using u128 = unsigned __int128;

// The daemon enforces count agreement (issue 16, point 2), so an accepted operation whose
// transfers disagree is a bug.
constexpr bool kCountAgreementFatal = true;
constexpr uint64_t kMaxCount = uint64_t{1} << 34;  // EngineLimits' default

[[noreturn]] void oracle_failed(const std::string& what, int line) {
  std::fprintf(stderr, "crossrank_fuzz: oracle failed at line %d: %s\n", line, what.c_str());
  std::abort();
}
#define FUZZ_CHECK(cond)                         \
  do {                                           \
    if (!(cond)) oracle_failed(#cond, __LINE__); \
  } while (0)

bool count_agreement_fatal() {
  static const bool fatal = [] {
    const char* env = std::getenv("NODECOMM_FUZZ_COUNT_AGREEMENT");
    return env != nullptr ? std::strcmp(env, "0") != 0 : kCountAgreementFatal;
  }();
  return fatal;
}

// A transfer whose two sides disagree: fatal once the daemon checks counts, noted until then.
void count_violation(const std::string& what, int line) {
  if (count_agreement_fatal()) oracle_failed("count agreement: " + what, line);
  static bool noted = false;
  if (!noted) {
    noted = true;
    std::fprintf(stderr,
                 "crossrank_fuzz: note: accepted an operation whose counts disagree (%s); not "
                 "fatal until the daemon checks count agreement "
                 "(NODECOMM_FUZZ_COUNT_AGREEMENT=1 makes it fatal)\n",
                 what.c_str());
  }
}

struct Rank {
  OpDescriptor d{};
  uint32_t node = 0;
  std::vector<uint8_t> arena;
  std::vector<uint64_t> aux;  // the daemon's private copy of the count arrays
  ipc::Verdict verdict;
};

struct Setup {
  uint32_t size = 0;
  uint32_t node_count = 0;
  std::vector<Rank> ranks;                           // by comm rank
  std::vector<std::vector<uint32_t>> ranks_by_node;  // comm ranks, ascending
};

// The arenas' contents besides the count arrays: different at every byte and for every rank,
// so that a block delivered from the wrong place or rank shows.
const std::vector<uint8_t>& pattern(size_t rank) {
  static const std::vector<std::vector<uint8_t>> patterns = [] {
    std::vector<std::vector<uint8_t>> all(kMaxRanks, std::vector<uint8_t>(kEngineArena));
    for (size_t r = 0; r < kMaxRanks; ++r) {
      for (size_t i = 0; i < kEngineArena; ++i) {
        all[r][i] = static_cast<uint8_t>(r * 67 + i * 13 + i / 251 + 5);
      }
    }
    return all;
  }();
  return patterns[rank];
}

Setup decode(Input& in) {
  Setup s;
  CrossRankPrefix p{};
  in.bytes(&p, sizeof(p));
  s.size = 1 + p.size % kMaxRanks;
  const uint32_t nodes = 1 + p.nodes % s.size;
  // Nodes numbered by first appearance; a node without ranks does not exist.
  std::vector<int> renumber(nodes, -1);
  s.ranks.resize(s.size);
  for (uint32_t r = 0; r < s.size; ++r) {
    const uint32_t raw = p.node_of[r] % nodes;
    if (renumber[raw] < 0) {
      renumber[raw] = static_cast<int>(s.ranks_by_node.size());
      s.ranks_by_node.emplace_back();
    }
    s.ranks[r].node = static_cast<uint32_t>(renumber[raw]);
    s.ranks_by_node[s.ranks[r].node].push_back(r);
  }
  s.node_count = static_cast<uint32_t>(s.ranks_by_node.size());
  for (Rank& rank : s.ranks) {
    in.bytes(&rank.d, sizeof(rank.d));
    rank.d.seq = 1;
    rank.d.comm_id = 0;
    rank.arena = pattern(static_cast<size_t>(&rank - s.ranks.data()));
    const uint64_t entries =
        rank.d.collective < static_cast<uint16_t>(Collective::kCount)
            ? proto::aux_entries(static_cast<Collective>(rank.d.collective), s.size)
            : 0;
    std::vector<uint64_t> counts(entries);
    in.bytes(counts.data(), counts.size() * sizeof(uint64_t));
    const u128 end = u128{rank.d.aux_offset} + u128{entries} * sizeof(uint64_t);
    if (entries > 0 && end <= rank.arena.size()) {
      std::memcpy(rank.arena.data() + rank.d.aux_offset, counts.data(), entries * sizeof(uint64_t));
    }
  }
  return s;
}

// Engine::accept's intake of one rank's descriptor.
void intake(Rank& rank, uint32_t size, uint32_t comm_rank) {
  const OpDescriptor& d = rank.d;
  const ipc::ValidationLimits lim{rank.arena.size(), kMaxCount, size, comm_rank};
  rank.verdict =
      daemon::decode_submission(d, lim, rank.aux, [&](uint64_t offset, void* out, size_t bytes) {
        std::memcpy(out, rank.arena.data() + offset, bytes);
      });
  const std::string text = fmt::format("{} seq {}: {}", daemon::describe_submission(d), d.seq,
                                       rank.verdict.ok() ? "ok" : rank.verdict.message);
  FUZZ_CHECK(!text.empty());
  if (!rank.verdict.ok()) {
    FUZZ_CHECK(!rank.verdict.message.empty());
    FUZZ_CHECK(rank.verdict.status != proto::Status::kOk);
  }
}

// One node's view of the communicator, as the daemons build it when the job forms.
daemon::CommLayout layout_of(const Setup& s, uint32_t node) {
  daemon::CommLayout lay;
  lay.size = s.size;
  lay.node_comm = s.node_count > 1 ? 1 : daemon::kAllNodes;
  lay.node_index = node;
  lay.node_count = s.node_count;
  lay.set_ranks_by_node(s.ranks_by_node);
  const auto& mine = s.ranks_by_node[node];
  for (uint32_t k = 0; k < mine.size(); ++k) {
    lay.members.push_back(k);
    lay.member_ranks.push_back(mine[k]);
  }
  for (uint32_t r = 0; r < s.size; ++r) lay.world_rank_of.push_back(r);
  return lay;
}

// Engine::accept's check of a node's complete operation: describe_disagreement, then the
// count agreement among the node's members (daemon/engine/count_agreement.hpp), as
// Engine::local_counts_disagreement calls it.
std::string local_agreement(const daemon::Operation& op, const daemon::CommLayout& lay) {
  std::string diff = daemon::describe_disagreement(op, lay);
  const auto c = static_cast<Collective>(op.first().collective);
  if (diff.empty() && proto::aux_entries(c, lay.size) > 0) {
    std::vector<daemon::MemberCounts> members;
    for (size_t k = 0; k < op.slots.size(); ++k) {
      members.push_back({lay.member_ranks[k], op.slots[k]->desc.count, op.slots[k]->aux.data()});
    }
    diff = daemon::local_count_disagreement(c, op.seq, lay.size, members);
  }
  return diff;
}

// [offset, offset + elems * elem) inside the rank's arena; the daemon's first and last byte of
// it are read through ASan.
void check_extent(const Rank& rank, uint64_t offset, u128 elems, size_t elem, const char* what,
                  uint32_t comm_rank) {
  const u128 bytes = elems * elem;
  if (bytes == 0) return;
  if (u128{offset} + bytes > rank.arena.size()) {
    oracle_failed(
        fmt::format("rank {}'s {} [{}, +{} elements of {} bytes) leaves its {}-byte arena",
                    comm_rank, what, offset, static_cast<uint64_t>(elems), elem, rank.arena.size()),
        __LINE__);
  }
  volatile uint8_t sink = rank.arena[offset];
  sink = sink + rank.arena[static_cast<size_t>(offset + bytes - 1)];
  (void)sink;
}

// Every buffer extent the daemons touch and every transfer, for an accepted operation; the
// daemon stages allgatherv by each node's first member's count arrays. Returns whether every
// transfer is as long on both sides.
bool check_accepted(const Setup& s) {
  const OpDescriptor& ref = s.ranks[0].d;
  const auto c = static_cast<Collective>(ref.collective);
  for (const Rank& rank : s.ranks) FUZZ_CHECK(rank.d.collective == ref.collective);
  if (c == Collective::kCommSplit || c == Collective::kCommFree || c == Collective::kBarrier) {
    return true;  // no buffers
  }
  const size_t elem = proto::dtype_size(static_cast<proto::DType>(ref.dtype));
  for (const Rank& rank : s.ranks) FUZZ_CHECK(rank.d.dtype == ref.dtype);
  const uint32_t n = s.size;
  bool agree = true;
  if (c == Collective::kAllgatherv) {
    for (uint32_t d = 0; d < n; ++d) {
      // Delivery into d uses d's node's first member's counts and d's own displacements.
      const Rank& receiver = s.ranks[d];
      const std::vector<uint64_t>& counts = s.ranks[s.ranks_by_node[receiver.node][0]].aux;
      for (uint32_t src = 0; src < n; ++src) {
        check_extent(receiver, receiver.d.recv_offset + receiver.aux[n + src] * elem, counts[src],
                     elem, "allgatherv receive block", d);
        // Staged from src: its node's count for it, which validation tied to src's own count.
        const Rank& sender = s.ranks[src];
        const uint64_t staged = s.ranks[s.ranks_by_node[sender.node][0]].aux[src];
        FUZZ_CHECK(staged == sender.d.count);  // same node: the arrays agree (checked above)
        check_extent(sender, sender.d.send_offset, staged, elem, "allgatherv send buffer", src);
        if (staged != counts[src]) {
          agree = false;
          count_violation(fmt::format("allgatherv: rank {} (node {}) sends {} elements, rank {} "
                                      "(node {}) receives {} from it",
                                      src, sender.node, staged, d, receiver.node, counts[src]),
                          __LINE__);
        }
      }
    }
    return agree;
  }
  if (c == Collective::kAlltoallv) {
    for (uint32_t src = 0; src < n; ++src) {
      const Rank& sender = s.ranks[src];
      for (uint32_t d = 0; d < n; ++d) {
        const Rank& receiver = s.ranks[d];
        const uint64_t sent = sender.aux[d];
        const uint64_t expected = receiver.aux[size_t{2} * n + src];
        check_extent(sender, sender.d.send_offset + sender.aux[n + d] * elem, sent, elem,
                     "alltoallv send block", src);
        check_extent(receiver, receiver.d.recv_offset + receiver.aux[size_t{3} * n + src] * elem,
                     expected, elem, "alltoallv receive block", d);
        if (sent != expected) {
          agree = false;
          count_violation(fmt::format("alltoallv: rank {} (node {}) sends {} elements to rank {} "
                                      "(node {}), which receives {} from it",
                                      src, sender.node, sent, d, receiver.node, expected),
                          __LINE__);
        }
      }
    }
    return agree;
  }
  // Fixed-count collectives: every rank's block is the same, so is the root and the reduction.
  for (uint32_t r = 0; r < n; ++r) {
    const OpDescriptor& d = s.ranks[r].d;
    FUZZ_CHECK(d.count == ref.count);
    if (proto::collective_has_root(c)) FUZZ_CHECK(d.root == ref.root && d.root < n);
    if (proto::collective_reduces(c)) FUZZ_CHECK(d.redop == ref.redop);
    FUZZ_CHECK(d.compression == ref.compression);
    const proto::BufferElems e = proto::buffer_elems(c, d.count, n, d.root == r);
    const bool in_place = (d.flags & proto::kOpFlagInPlace) != 0;
    // In place, the send block lies inside the receive buffer (or the other way round), and
    // validation checked the larger one.
    if (!in_place || e.recv == 0) check_extent(s.ranks[r], d.send_offset, e.send, elem, "send", r);
    if (!in_place || e.send == 0) check_extent(s.ranks[r], d.recv_offset, e.recv, elem, "recv", r);
  }
  return true;
}

// What every rank's arena holds after an operation the engine accepted, computed from the
// arenas before it (the daemon reads every input before it writes an output). `unknown` lists
// the bytes whose value this oracle does not compute (reduction results): rank, offset, bytes.
struct Expected {
  struct Range {
    uint32_t rank;
    uint64_t offset;
    uint64_t bytes;
  };
  std::vector<std::vector<uint8_t>> arenas;
  std::vector<Range> unknown;
};

Expected expected_after(const Setup& s) {
  Expected e;
  for (const Rank& rank : s.ranks) e.arenas.push_back(rank.arena);
  const OpDescriptor& ref = s.ranks[0].d;
  const auto c = static_cast<Collective>(ref.collective);
  const size_t elem = proto::dtype_size(static_cast<proto::DType>(ref.dtype));
  const uint32_t n = s.size;
  const size_t block = ref.count * elem;
  // Offsets and lengths were checked against the arenas (check_accepted) before this runs.
  const auto copy = [&](uint32_t dst, uint64_t dst_offset, uint32_t src, uint64_t src_offset,
                        uint64_t bytes) {
    if (bytes > 0) {
      std::memcpy(e.arenas[dst].data() + dst_offset, s.ranks[src].arena.data() + src_offset, bytes);
    }
  };
  const auto& rk = s.ranks;
  switch (c) {
    case Collective::kBroadcast:
      for (uint32_t d = 0; d < n; ++d)
        copy(d, rk[d].d.recv_offset, ref.root, rk[ref.root].d.send_offset, block);
      break;
    case Collective::kGather:
      for (uint32_t src = 0; src < n; ++src) {
        copy(ref.root, rk[ref.root].d.recv_offset + src * block, src, rk[src].d.send_offset, block);
      }
      break;
    case Collective::kScatter:
      for (uint32_t d = 0; d < n; ++d) {
        copy(d, rk[d].d.recv_offset, ref.root, rk[ref.root].d.send_offset + d * block, block);
      }
      break;
    case Collective::kAllgather:
      for (uint32_t d = 0; d < n; ++d) {
        for (uint32_t src = 0; src < n; ++src) {
          copy(d, rk[d].d.recv_offset + src * block, src, rk[src].d.send_offset, block);
        }
      }
      break;
    case Collective::kAlltoall:
      for (uint32_t d = 0; d < n; ++d) {
        for (uint32_t src = 0; src < n; ++src) {
          copy(d, rk[d].d.recv_offset + src * block, src, rk[src].d.send_offset + d * block, block);
        }
      }
      break;
    case Collective::kAllgatherv:
      for (uint32_t d = 0; d < n; ++d) {
        for (uint32_t src = 0; src < n; ++src) {
          copy(d, rk[d].d.recv_offset + rk[d].aux[n + src] * elem, src, rk[src].d.send_offset,
               rk[0].aux[src] * elem);
        }
      }
      break;
    case Collective::kAlltoallv:
      for (uint32_t d = 0; d < n; ++d) {
        for (uint32_t src = 0; src < n; ++src) {
          copy(d, rk[d].d.recv_offset + rk[d].aux[size_t{3} * n + src] * elem, src,
               rk[src].d.send_offset + rk[src].aux[n + d] * elem, rk[src].aux[d] * elem);
        }
      }
      break;
    case Collective::kAllreduce:
    case Collective::kReduce:
    case Collective::kReduceScatter:
      for (uint32_t r = 0; r < n; ++r) {
        const uint64_t bytes = proto::buffer_elems(c, ref.count, n, ref.root == r).recv * elem;
        e.unknown.push_back({r, rk[r].d.recv_offset, bytes});
      }
      break;
    default:
      break;
  }
  return e;
}

// The same operation through the real engine, every rank on one node: it is refused for every
// rank and moves no data, or it completes for every rank with exactly the expected bytes in
// every arena (and nothing else changed).
void check_engine(const Setup& s) {
  std::vector<EngineRank> ranks;
  for (const Rank& rank : s.ranks) ranks.push_back({rank.d, rank.arena});
  const EngineOutcome out =
      run_on_engine(ranks, [](const std::string& what, int line) { oracle_failed(what, line); });
  uint32_t ok = 0;
  for (const proto::Completion& c : out.completions) {
    if (c.status == static_cast<int32_t>(proto::Status::kOk)) {
      ++ok;
    } else {
      FUZZ_CHECK(c.message[0] != '\0');
    }
  }
  if (ok < s.size) {
    FUZZ_CHECK(ok == 0);  // no rank completes an operation another rank's daemon refused
    for (uint32_t r = 0; r < s.size; ++r) FUZZ_CHECK(out.arenas[r] == s.ranks[r].arena);
    return;
  }
  for (const Rank& rank : s.ranks) FUZZ_CHECK(rank.verdict.ok());
  Setup one = s;
  one.node_count = 1;
  one.ranks_by_node.assign(1, {});
  for (uint32_t r = 0; r < s.size; ++r) {
    one.ranks[r].node = 0;
    one.ranks_by_node[0].push_back(r);
  }
  // Transfers of different lengths on the two sides cannot deliver the expected bytes; the
  // count agreement oracle has reported them.
  if (!check_accepted(one)) return;
  Expected e = expected_after(one);
  for (const Expected::Range& u : e.unknown) {
    std::memcpy(e.arenas[u.rank].data() + u.offset, out.arenas[u.rank].data() + u.offset, u.bytes);
  }
  for (uint32_t r = 0; r < s.size; ++r) {
    if (out.arenas[r] == e.arenas[r]) continue;
    for (size_t i = 0; i < kEngineArena; ++i) {
      if (out.arenas[r][i] != e.arenas[r][i]) {
        oracle_failed(fmt::format("{} on {} ranks: rank {}'s arena byte {} is {:#04x} after the "
                                  "operation, expected {:#04x} (before: {:#04x})",
                                  daemon::describe_submission(s.ranks[r].d), s.size, r, i,
                                  out.arenas[r][i], e.arenas[r][i], s.ranks[r].arena[i]),
                      __LINE__);
      }
    }
  }
}

// The daemons' decision from every node's point of view, and its oracle.
void check_model(Setup& s) {
  bool accepted = true;
  for (uint32_t r = 0; r < s.size; ++r) {
    intake(s.ranks[r], s.size, r);
    accepted = accepted && s.ranks[r].verdict.ok();
  }
  // A rank the validator refused fails the operation for everyone (the communicator is
  // poisoned); nothing is matched.
  if (!accepted) return;
  std::vector<std::optional<daemon::OpSummary>> by_node(s.node_count);
  daemon::CommLayout first_layout;
  for (uint32_t node = 0; node < s.node_count; ++node) {
    daemon::CommLayout lay = layout_of(s, node);
    daemon::Communicator comm(0, lay);
    daemon::Operation* op = nullptr;
    for (uint32_t k = 0; k < lay.members.size(); ++k) {
      const Rank& rank = s.ranks[lay.member_ranks[k]];
      op = &comm.add(k, daemon::Submission{rank.d, 0, rank.aux});
    }
    FUZZ_CHECK(op != nullptr && op->arrived == lay.members.size());
    const std::string diff = local_agreement(*op, lay);
    if (!diff.empty()) {
      // Engine::accept completes the operation with NC_ERR_MISMATCH and this text.
      FUZZ_CHECK(diff.find("seq 1") != std::string::npos);
      accepted = false;
    }
    // The daemon summarizes only an operation its node agreed on (Operation::Phase::kReady);
    // a node that failed it locally never sends a summary.
    if (diff.empty()) by_node[node] = daemon::summarize(*op, lay);  // with its count digest
    if (node == 0) first_layout = lay;
  }
  if (s.node_count > 1) {
    const std::string cross = daemon::cross_node_disagreement(0, 1, by_node, first_layout);
    if (!cross.empty()) {
      FUZZ_CHECK(cross.find("between nodes") != std::string::npos);
      accepted = false;
    }
    // A node that never got its summary in (failed first): the text names it.
    by_node.back().reset();
    FUZZ_CHECK(!daemon::cross_node_disagreement(0, 1, by_node, first_layout).empty());
  }
  if (accepted) check_accepted(s);
}

void fuzz_operation(Input& in) {
  Setup s = decode(in);
  check_model(s);
  check_engine(s);
}

}  // namespace
}  // namespace nodecomm::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nodecomm::fuzz::Input in(data, size);
  nodecomm::fuzz::fuzz_operation(in);
  return 0;
}
