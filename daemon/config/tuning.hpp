// The tuning of every layer as plain structs: the leaf of the daemon's dependencies. The
// configuration (config.hpp) fills them; the layers that use them (algorithms, scheduler,
// engine) only read them, so one owner, the conductor, changes tuning at run time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "nodecomm/proto/control.hpp"
#include "nodecomm/proto/types.hpp"

namespace nodecomm::daemon {

enum class AllreduceAlgorithmKind : uint8_t { kAuto, kRing, kRecursiveDoubling, kMpi };

std::string algorithm_name(AllreduceAlgorithmKind kind);

// "auto", "ring", "rd" (or "recursive-doubling"), "mpi"; throws std::invalid_argument.
AllreduceAlgorithmKind parse_algorithm(const std::string& text);

// reduce_scatter, allgather(v), broadcast and reduce between nodes: our pipelined ring and
// chain algorithms (collective_algorithms.hpp), the transport's native collectives (mpi), or
// auto (native only for small buffers on three nodes or more).
enum class CollectiveAlgorithmKind : uint8_t { kAuto, kPipelined, kMpi };

std::string collective_algorithm_name(CollectiveAlgorithmKind kind);

// "auto", "pipelined", "mpi"; throws std::invalid_argument.
CollectiveAlgorithmKind parse_collective_algorithm(const std::string& text);

// --small-bytes auto: the switch comes from the cost model (allreduce_switch_bytes).
inline constexpr size_t kAutoSmallBytes = std::numeric_limits<size_t>::max();
// Under --small-bytes auto, allreduce's switch is at most this: in a training step the other
// allreduces keep the link busy, so recursive doubling's log2(N) times the bytes costs more
// than the ring's latencies, which overlap their transfers. The cost model's step simulation
// over the projected fabrics and workloads at 8-4096 nodes loses least with this cap
// (`tools/scale-model switch --steps`, docs/SCALING.md).
inline constexpr size_t kMaxAutoSwitchBytes = size_t{256} * 1024;
// Auto takes the ring at every size while the round finds other transfers on the network, on
// up to this many nodes (choose_allreduce): measured on 4 and 8. Beyond, the ring's 2 (N - 1)
// steps per operation would outweigh what recursive doubling's few steps wait behind the queue
// (about --sched-target-us each), and that is not measured.
inline constexpr uint32_t kLoadedRingMaxNodes = 8;
// Under --small-bytes auto, the other collectives' switch to the native ones (as before the
// model drove allreduce's).
inline constexpr size_t kAutoCollectiveSmallBytes = size_t{64} * 1024;

// Runtime parameters of the inter-node algorithms (MLSL's epNum is `endpoints`).
struct AlgorithmTuning {
  AllreduceAlgorithmKind allreduce = AllreduceAlgorithmKind::kAuto;
  CollectiveAlgorithmKind collectives = CollectiveAlgorithmKind::kAuto;
  // auto: allreduces of at most this many bytes use recursive doubling, larger ones the ring;
  // the other collectives' buffers of at most this many bytes the native collectives.
  // kAutoSmallBytes: the model's switch for the node count and latency_bytes.
  size_t small_bytes = kAutoSmallBytes;
  // The link's latency times its rate, in bytes: what one message step costs in bytes of
  // transfer. The model's recursive-doubling/ring switch scales with it (docs/SCALING.md).
  size_t latency_bytes = size_t{16} * 1024;
  // The ring moves each block in slices of about this many bytes.
  size_t chunk_bytes = size_t{512} * 1024;
  // Ring slices in flight at once on each node.
  uint32_t pipeline_depth = 8;
  // Lanes (endpoints) the slices are spread over, at most the transport's lanes().
  uint32_t endpoints = 2;
};

// The largest allreduce (bytes) that recursive doubling moves faster than the ring on `nodes`
// nodes, by the alpha-beta model of docs/SCALING.md (tools/scale_model/model.py,
// rd_switch_bytes: both read tests/data/rd_switch_points.json, so they cannot drift apart):
// where steps(N) alpha + busiest(N) S beta = 2 (N - 1) alpha + 2 (N - 1) / N S beta, with
// alpha / beta = latency_bytes. 0 on two nodes or fewer (the ring makes the same exchange).
size_t rd_switch_bytes(uint32_t nodes, size_t latency_bytes);

// The recursive-doubling limit auto uses on `nodes` nodes: --small-bytes, or the model's
// (at most kMaxAutoSwitchBytes).
size_t allreduce_switch_bytes(const AlgorithmTuning& tuning, uint32_t nodes);
// The other collectives' limit for their native (tree) algorithms under auto.
size_t collective_switch_bytes(const AlgorithmTuning& tuning);

// The most bytes (in the wire type) of one allreduce carried inside a scheduling round: the
// data area of a round record (engine/wire_formats.hpp) and the limit of --sched-eager-bytes.
inline constexpr size_t kMaxEagerBytes = 1024;
// --sched-gather-nodes: every daemon's first round of a communicator travels by this, before
// node 0's setting has reached the others.
inline constexpr uint32_t kDefaultGatherNodes = 8;
// --sched-hold-max-nodes: holding for an urgent operation leaves the links idle while its own
// message steps run (2 (N - 1) for the ring). tools/scale-model puts what the holds cost a
// ResNet-50 or BERT-large step (a stream held for at its end, kHoldStreamUs) at most 10 % on
// every fabric it models up to 128 nodes and 11.6-12 % beyond (docs/SCALING.md, "Streams and
// age"; `scale-model switch --steps` derives it). Holding for every operation in turn, as
// before the streams, cost 35 % at 64 nodes.
inline constexpr uint32_t kHoldMaxNodes = 128;
// --sched-hold-stream-us: a more urgent operation arriving while units are held for another
// suspends holding until this long passes without a newer one (SchedulerTuning::hold_stream_us).
// The window's own target delay: a hold saves the urgent operation at most that much queue, and
// within it the next arrival supersedes the hold. tools/scale_model mirrors it (workload.py).
inline constexpr uint32_t kHoldStreamUs = 2000;

struct SchedulerTuning {
  proto::PriorityPolicy policy = proto::PriorityPolicy::kDirect;
  bool fusion = true;
  // Largest fused transfer, as Horovod's HOROVOD_FUSION_THRESHOLD.
  size_t fusion_threshold_bytes = size_t{64} << 20;
  // Shortest time between the starts of two negotiation rounds (HOROVOD_CYCLE_TIME).
  uint32_t fusion_cycle_us = 0;
  // Largest unit a large allreduce is cut into: the granularity of overtaking. 0: adaptive,
  // a quarter of the window.
  size_t chunk_bytes = 0;
  // Scheduled bytes still on the network above which no new round starts. 0: adaptive, the
  // measured rate times target_delay_us, so that whatever is already queued on the way delays
  // a newly ready high-priority operation by about that much, at any link speed.
  size_t window_bytes = 0;
  uint32_t target_delay_us = 2000;
  // While an operation ready here is more urgent under the policy than others on the network
  // (higher priority under `direct`, newer under `lifo`), their units do not advance, so the
  // bytes already queued drain and no new ones join them ahead of it: until it completes here,
  // at most this long after it became ready here (the other nodes may post it much later, and
  // one that has waited this long is part of a backlog, not an urgent arrival). 0: never hold.
  uint32_t hold_us = 10000;
  // Communicators over more nodes than this never hold (kHoldMaxNodes). 0: never hold.
  uint32_t hold_max_nodes = kHoldMaxNodes;
  // A more urgent operation arriving while units are held for another starts a stream (a
  // training step's gradients, each more urgent than the last): nothing is held until this
  // long has passed without a newer more urgent one, and then only for the most urgent. Each
  // hold leaves the links idle while the urgent operation's message steps run, and in a
  // stream the next arrival supersedes the hold before it has paid. 0: hold for every one.
  uint32_t hold_stream_us = kHoldStreamUs;
  // Urgent mode, for a second after a communicator held units for a more urgent operation: the
  // auto window's target is adapted between this and target_delay_us, shrinking while the link
  // stays as busy with less queued and growing when it slows, so a job that uses priorities
  // gets as short a queue ahead of its urgent operations as this host can keep busy. 0: off.
  uint32_t urgent_target_us = 250;
  // Allreduces of at most this many bytes (in the wire type; at most kMaxEagerBytes) ride in
  // the scheduling round and complete with it. 0: never.
  size_t eager_bytes = kMaxEagerBytes;
  // Communicators over at most this many nodes exchange round records all-to-all (one step,
  // N-1 messages per daemon); larger ones combine them by recursive doubling (log2 N steps of
  // one message). Node 0's applies, from the round after it is set.
  uint32_t gather_nodes = kDefaultGatherNodes;

  // Without priorities or fusion, operations go out in sequence order and need no rounds.
  bool negotiated() const { return policy != proto::PriorityPolicy::kNone || fusion; }
};

// The daemon's tuning with a job's overrides applied.
SchedulerTuning with_job_overrides(SchedulerTuning tuning, const proto::JobTuning& job);

// "none", "direct", "lifo"; throws std::invalid_argument.
proto::PriorityPolicy parse_priority_policy(const std::string& text);

struct EngineLimits {
  uint64_t max_count = uint64_t{1} << 34;
  // An operation some rank has submitted and others have not, or that is still waiting on
  // other nodes: reported in the log after stall_sec, failed after op_timeout_sec (0: never).
  uint32_t stall_sec = 60;
  uint32_t op_timeout_sec = 600;
  // Operations one member may have in the daemon at once (submitted, not yet completed), over
  // all its communicators; one more fails with NC_ERR_QUEUE_FULL and poisons its communicator.
  // The library never has more than its ring capacity in flight, so this only stops a client
  // that posts far ahead of its peers from growing the daemon.
  uint32_t max_in_flight = 4096;
  // int8 error feedback: residuals kept per job (tensors and bytes); the least recently used
  // is dropped past either (feedback_state.hpp).
  uint32_t max_feedback_tensors = 4096;
  uint64_t max_feedback_bytes = uint64_t{4} << 30;
};

}  // namespace nodecomm::daemon
