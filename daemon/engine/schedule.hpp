// How a multi-node communicator's ready operations are put on the network: the tuning, and
// the per-communicator state of the negotiated scheduler (engine_schedule.cpp).
//
// Every daemon must start inter-node operations in the same order. With priorities or
// fusion, which operations go next depends on which are ready on every node, so the daemons
// agree on it in rounds: in each round every node's record of what it has ready (a bitmap
// over a window of sequence numbers, with priorities) is combined into one (round_record.hpp),
// all-to-all on a few nodes and by recursive doubling on many, after which every daemon
// computes the same schedule from the same combined record. A round hands out at most chunk_bytes;
// large allreduces go out chunk by chunk, so a higher-priority operation that becomes ready
// overtakes at the next round. Small allreduces with the same dtype, op and compression are
// packed into one fused transfer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "config/tuning.hpp"
#include "engine/in_flight.hpp"
#include "engine/round_record.hpp"
#include "engine/staging.hpp"
#include "engine/wire_formats.hpp"
#include "nodecomm/proto/control.hpp"
#include "nodecomm/proto/types.hpp"

namespace nodecomm::daemon {

using TransportHandle = uint64_t;

// One transfer the daemons agreed on: a range of one allreduce, several small allreduces
// fused into one buffer, an int8 allreduce, a whole other collective, or a round.
struct ScheduledUnit {
  enum class Kind : uint8_t { kChunk, kFused, kInt8, kWhole };
  Kind kind = Kind::kWhole;
  TransportHandle handle = 0;
  std::vector<uint64_t> seqs;   // the operations it carries
  std::vector<size_t> offsets;  // kFused: first element of each operation in `buffer`
  size_t first = 0;             // kChunk: element range of the operation
  size_t count = 0;
  size_t bytes = 0;             // on the network, for the window
  bool link_loaded = false;     // kChunk, kFused: the round found bytes on the network
  StagingPool::Buffer buffer;   // kFused: the packed operations; kInt8: every node's blocks
  StagingPool::Buffer scratch;  // the algorithm's scratch
  InFlightToken on_network;     // one transfer in the engine's in-flight work, while started
  InFlightToken bytes_token;    // `bytes` in CommSchedule::bytes_in_flight, while started
  // One per seqs[k], in that operation's units_in_flight, while started.
  std::vector<InFlightToken> op_tokens;
};

// The adaptive window's bounds and the chunk's.
inline constexpr size_t kMinWindowBytes = size_t{256} << 10;
// In urgent mode: one least chunk, so that little is queued ahead of an urgent operation.
inline constexpr size_t kMinUrgentWindowBytes = size_t{64} << 10;
inline constexpr size_t kMaxWindowBytes = size_t{64} << 20;
inline constexpr size_t kMinChunkBytes = size_t{64} << 10;
inline constexpr size_t kMaxChunkBytes = size_t{4} << 20;
// How long after units were last held the window keeps the urgent target.
inline constexpr uint64_t kUrgentModeNs = 1'000'000'000;

struct CommSchedule {
  // Lowest sequence number not yet handed out in full, and those above it that are.
  uint64_t floor = 1;
  std::set<uint64_t> scheduled_ahead;
  std::deque<ScheduledUnit> units;  // started, in agreed order
  // Bytes of started units: each unit's bytes_token counts its own, for as long as it lives.
  InFlightCounter bytes_in_flight;
  // When units were last held for a more urgent operation (SchedulerTuning::hold_us); within
  // kUrgentModeNs the window aims at urgent_target_us, if set.
  uint64_t last_hold_ns = 0;
  bool urgent_mode = false;
  // The last pass held units (record_holds); the most urgent operation's urgency then, and
  // until when a stream of rising urgencies suspends holding (SchedulerTuning::hold_stream_us).
  bool holding = false;
  std::optional<int64_t> urgent_seen;
  uint64_t stream_until_ns = 0;
  // Urgent mode's target (us), adapted between urgent_target_us and target_delay_us: smaller
  // while the link completes as fast with less queued, larger when it slows (0: not yet set).
  double urgent_target = 0;
  // The highest recent rate sample, decaying, against which each sample is judged.
  double rate_peak = 0;
  double fresh_sample = 0;  // the last interval's rate, until adapt_urgent_target takes it
  double adapt_sum = 0;     // the intervals' rates adapt_urgent_target has summed so far
  int adapt_count = 0;
  TransportHandle round = 0;       // 0: no round in flight
  InFlightToken round_on_network;  // held while `round` is
  // The round's records: every node's (all-to-all), or this node's and a peer's (combined).
  std::vector<uint8_t> round_records;
  bool round_combined = false;  // the round in flight travels by recursive doubling
  // --sched-gather-nodes in effect: node 0's, from its last round record on.
  uint32_t gather_nodes = kDefaultGatherNodes;
  // What this node announced in the round in flight: an announcement the combined record
  // dropped (kAnnouncePerRound) is made again.
  std::vector<uint64_t> announced_in_round;
  // Reduces the eager parts this node carries in the round in flight, as records combine.
  EagerCombine round_eager;
  uint64_t last_round_ns = 0;  // when the round in flight (or the last one) started
  uint64_t rounds = 0;
  // How long a round takes from start to plan, smoothed: the bytes the window drains meanwhile
  // are handed out by the round itself, so the wire never waits for a plan.
  double round_ns = 0;
  // What the nodes' ranks posted for the sequence numbers announced in rounds, combined over
  // the rounds' records by seq: compared once every node's is in, before an operation is
  // handed out (op_check.hpp).
  std::map<uint64_t, Announcement> announced;
  // Sequence numbers each node had ready at the last round, for stall reports; empty when
  // the round's records were combined on the way (only the nodes' AND is known then).
  std::vector<std::set<uint64_t>> ready_by_node;
  // Rate at which scheduled bytes complete while units are in flight (bytes per second).
  double rate = 0;
  uint64_t interval_start_ns = 0;
  uint64_t last_completion_ns = 0;
  size_t interval_bytes = 0;
  // Every unit's bytes, cumulative: the job's rate against other jobs' (conductor/link_share).
  uint64_t completed_bytes = 0;

  // Scheduled bytes allowed on the network for a communicator over `nodes` nodes, and the
  // largest unit. A ring unit of B bytes keeps about B/N on each link at a time and completes
  // B per 2(N-1)/N link-bytes, so the window that queues target_delay_us of link time grows
  // with the node count: 2(N-1) x rate x target, rate in unit bytes per second. The target is
  // the adapted urgent_target in urgent mode (units held lately; if urgent_target_us is set),
  // else target_delay_us.
  size_t window(const SchedulerTuning& t, size_t nodes) const;
  size_t chunk(const SchedulerTuning& t, size_t nodes) const;
  // Bytes in flight now that are expected to have completed by the time a round started now
  // hands out its plan; in urgent mode at most half of `window`.
  size_t drained_during_round(size_t window) const;
  void record_round(uint64_t now);
  // Units were held (`held`) or not in the pass at `now`: urgent mode lasts kUrgentModeNs.
  void record_holds(bool held, uint64_t now);
  // Moves the urgent target by the last rate sample, if one came since (see urgent_target).
  void adapt_urgent_target(const SchedulerTuning& t);
  // A unit of `bytes` completed at `now`; `busy` if others are still in flight.
  void record_completion(size_t bytes, uint64_t now);

  bool fully_scheduled(uint64_t seq) const { return seq < floor || scheduled_ahead.count(seq) > 0; }
  void mark_scheduled(uint64_t seq) {
    scheduled_ahead.insert(seq);
    while (scheduled_ahead.erase(floor) > 0) ++floor;
  }
};

}  // namespace nodecomm::daemon
