// A job as one daemon sees it: the job's ranks on this node, their placement in the world,
// and the per-communicator operation tables that match submissions by sequence number.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/feedback_state.hpp"
#include "engine/in_flight.hpp"
#include "engine/schedule.hpp"
#include "engine/staging.hpp"
#include "net/transport.hpp"
#include "nodecomm/proto/abi.hpp"

namespace nodecomm::daemon {

class ClientSession;

struct Submission {
  proto::OpDescriptor desc;  // the daemon's validated private copy
  uint64_t submitted_ns = 0;
  std::vector<uint64_t> aux;  // allgatherv/alltoallv: private copy of the count arrays
};

// One collective, identified by (communicator, seq), from first submission to delivery.
struct Operation {
  enum class Phase { kGathering, kReady, kInterNode, kDone };

  uint64_t seq = 0;
  std::vector<std::optional<Submission>> slots;  // by local rank
  uint32_t arrived = 0;
  Phase phase = Phase::kGathering;
  proto::Status status = proto::Status::kOk;
  std::string error;
  uint64_t first_arrival_ns = 0;
  uint64_t last_arrival_ns = 0;
  TransportHandle handle = 0;
  // Held while its summary exchange (`check`) or its own transfer (`handle`) is on the network,
  // so the engine keeps polling (Engine::has_inter_node_work). The negotiated scheduler moves it
  // into the unit that carries the operation.
  InFlightToken on_network;
  StagingPool::Buffer staging;
  StagingPool::Buffer staging2;  // a second buffer for collectives that repack (alltoall)
  // comm_split: what each member gets back (new communicator, its rank and size there).
  struct SplitResult {
    uint32_t comm = proto::kNoComm;
    uint32_t rank = 0;
    uint32_t size = 0;
  };
  std::vector<SplitResult> split_results;
  // Negotiated scheduling: elements handed out to units so far, and finished.
  size_t scheduled_elems = 0;
  size_t finished_elems = 0;
  // Sequence-order path: the OpSummary exchange that precedes the transfer (op_check.hpp).
  TransportHandle check = 0;
  std::vector<OpSummary> check_records;
  // Staging reserved for it against the caps (StagingPool::reserve) once it is ready here,
  // given back when it completes; or, if refused, the bytes it needed and why.
  size_t staging_reserved_bytes = 0;
  std::string staging_refused;
  // Scheduled units on the network that use its buffers: each holds a token of this for it
  // (ScheduledUnit::op_tokens), so it is kept, and its staging too, until the last is gone.
  InFlightCounter units_in_flight;
  int split_step = 0;  // 1: exchanging records; 2: creating the daemons' groups
  bool stall_reported = false;
  // A member vanished while the transport was still reading or delivering its ranges.
  bool member_lost_midway = false;
  bool staged = false;      // stage_in ran
  bool advertised = false;  // offered to the other daemons in a round
  bool announced = false;   // its OpSummary went to the other daemons in a round
  bool cross_checked = false;
  bool staging_held = false;

  const proto::OpDescriptor& first() const;
};

// Where a communicator's ranks live. Staging buffers and network steps use "node-major"
// positions: the ranks of node 0 (in comm-rank order), then node 1's, and so on, so every
// node's part is one contiguous run. For the world communicator positions equal ranks.
struct CommLayout {
  uint32_t size = 0;               // ranks in the communicator
  NodeComm node_comm = kAllNodes;  // the daemons hosting its ranks
  uint32_t node_index = 0;         // this daemon within node_comm
  uint32_t node_count = 1;
  std::vector<uint32_t> node_sizes;     // ranks per node
  std::vector<uint32_t> node_offsets;   // first node-major position of each node
  std::vector<uint32_t> position;       // comm rank -> node-major position
  std::vector<uint32_t> rank_at;        // node-major position -> comm rank
  std::vector<uint32_t> members;        // job local ranks of this node's members, by comm rank
  std::vector<uint32_t> member_ranks;   // their comm ranks
  std::vector<uint32_t> world_rank_of;  // comm rank -> world rank (failure notices name these)
  bool identity = true;                 // position[r] == r for all r

  uint32_t first_position() const { return node_offsets[node_index]; }
  uint32_t node_of_rank(uint32_t rank) const;
  // Index of the member with this job local rank or comm rank, or -1.
  int member_of_local(uint32_t local_rank) const;
  int member_of_rank(uint32_t comm_rank) const;
  // Fills position/rank_at/identity from node_sizes and the comm ranks of every node's ranks.
  void set_ranks_by_node(const std::vector<std::vector<uint32_t>>& ranks_by_node);
};

// Matches the local members' submissions for one communicator. Operations start in sequence
// order, because the inter-node part must be started in the same order on every daemon.
class Communicator {
 public:
  Communicator(uint32_t id, CommLayout layout)
      : id_(id),
        local_size_(static_cast<uint32_t>(layout.members.size())),
        layout_(std::move(layout)) {}

  uint32_t id() const { return id_; }
  uint32_t local_size() const { return local_size_; }
  const CommLayout& layout() const { return layout_; }
  bool freed = false;     // a completed comm_free: dropped once its operations are gone
  CommSchedule schedule;  // negotiated scheduling state (multi-node communicators)
  // Files a submission; the operation is created on its first submission.
  Operation& add(uint32_t local_rank, const Submission& submission);
  std::map<uint64_t, Operation>& ops() { return ops_; }
  // After a failure the inter-node order can no longer be trusted: every later operation on
  // this communicator fails with the first failure's reason.
  void poison(proto::Status status, std::string reason) {
    if (poison_.empty()) {
      poison_status_ = status;
      poison_ = std::move(reason);
    }
  }
  bool poisoned() const { return !poison_.empty(); }
  proto::Status poison_status() const { return poison_status_; }
  const std::string& poison_reason() const { return poison_; }

 private:
  uint32_t id_;
  uint32_t local_size_;
  std::map<uint64_t, Operation> ops_;
  CommLayout layout_;
  std::string poison_;
  proto::Status poison_status_ = proto::Status::kOk;
};

// Non-empty when the members of a complete operation disagree: the text lists what each
// member submitted, naming it by comm rank.
std::string describe_disagreement(const Operation& op, const CommLayout& layout);
// "allreduce f32 sum count 7 'name'"
std::string describe_submission(const proto::OpDescriptor& d);
// A split or free: it creates or drops communicators, and nothing overtakes it.
bool is_comm_management(const Operation& op);

class Job {
 public:
  enum class State { kAttaching, kForming, kRunning, kFailed };

  Job(std::string name, uint32_t local_size)
      : name(std::move(name)), local_size(local_size), members(local_size, nullptr) {}

  // Unique among this daemon's jobs: what the staging pool tags buffers with, so that no job
  // ever reuses another's (StagingPool::set_owner).
  const uint64_t serial = next_serial();

  bool all_attached() const { return attached == local_size; }
  uint32_t world_rank_of(uint32_t local) const { return world_offset + local; }

  std::string name;
  uint32_t local_size;
  std::vector<ClientSession*> members;  // by local rank; null until that rank says hello
  uint32_t attached = 0;                // members whose segment is mapped
  State state = State::kAttaching;
  std::string failure;
  // Scheduling overrides from local rank 0's environment (NODECOMM_PRIORITY_POLICY, ...).
  proto::JobTuning requested{-1, -1, -1, -1, -1, 0};
  // int8 error feedback: each tensor's residual, by (comm, name, count), bounded.
  FeedbackState residuals;

  // What its ranks said of its nodes (Hello::node_index, node_count; 0 nodes: nothing).
  uint32_t asked_node = 0;
  uint32_t asked_nodes = 0;

  // Placement, known once the daemons have exchanged their local counts.
  uint32_t node_index = 0;
  uint32_t node_count = 1;
  uint32_t world_offset = 0;
  uint32_t world_size = 0;

  // Formation exchange with the other daemons.
  struct NodeRecord {
    uint64_t job_hash;
    uint32_t local_size;
    uint32_t node_index;
  };
  NodeRecord mine{};
  std::vector<NodeRecord> gathered;
  TransportHandle formation = 0;

  // Communicators by id; 0 is the world, created when the job forms.
  std::map<uint32_t, std::unique_ptr<Communicator>> comms;
  uint32_t next_comm_id = 1;
  Communicator* find_comm(uint32_t id) {
    auto it = comms.find(id);
    return it == comms.end() ? nullptr : it->second.get();
  }

 private:
  static uint64_t next_serial();
};

}  // namespace nodecomm::daemon
