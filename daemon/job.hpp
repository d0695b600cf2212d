// A job as one daemon sees it: the job's ranks on this node, their placement in the world,
// and the per-communicator operation tables that match submissions by sequence number.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "nodecomm/proto/abi.hpp"
#include "staging.hpp"
#include "transport.hpp"

namespace nodecomm::daemon {

class ClientSession;

struct Submission {
  proto::OpDescriptor desc;  // the daemon's validated private copy
  uint64_t submitted_ns = 0;
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
  uint64_t last_arrival_ns = 0;
  TransportHandle handle = 0;
  StagingPool::Buffer staging;
  StagingPool::Buffer staging2;  // a second buffer for collectives that repack (alltoall)

  const proto::OpDescriptor& first() const;
};

// Matches the local members' submissions for one communicator. Operations start in sequence
// order, because the inter-node part must be started in the same order on every daemon.
class Communicator {
 public:
  Communicator(uint32_t id, uint32_t local_size) : id_(id), local_size_(local_size) {}

  uint32_t id() const { return id_; }
  uint32_t local_size() const { return local_size_; }
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
  std::string poison_;
  proto::Status poison_status_ = proto::Status::kOk;
};

// Non-empty when the members of a complete operation disagree: the text lists what each
// local rank submitted, with world ranks computed as world_offset + local rank.
std::string describe_disagreement(const Operation& op, uint32_t world_offset);
// "allreduce f32 sum count 7 'name'"
std::string describe_submission(const proto::OpDescriptor& d);

class Job {
 public:
  enum class State { kAttaching, kForming, kRunning, kFailed };

  Job(std::string name, uint32_t local_size)
      : name(std::move(name)),
        local_size(local_size),
        members(local_size, nullptr),
        world(0, local_size) {}

  bool all_attached() const { return attached == local_size; }
  uint32_t world_rank_of(uint32_t local) const { return world_offset + local; }

  std::string name;
  uint32_t local_size;
  std::vector<ClientSession*> members;  // by local rank; null until that rank says hello
  uint32_t attached = 0;                // members whose segment is mapped
  State state = State::kAttaching;
  std::string failure;

  // Placement, known once the daemons have exchanged their local counts.
  uint32_t node_index = 0;
  uint32_t node_count = 1;
  uint32_t world_offset = 0;
  uint32_t world_size = 0;
  // Ranks per node and each node's first world rank (world ranks of a node are contiguous).
  std::vector<uint32_t> node_sizes;
  std::vector<uint32_t> node_offsets;
  uint32_t node_of(uint32_t world_rank) const {
    uint32_t n = 0;
    while (n + 1 < node_offsets.size() && node_offsets[n + 1] <= world_rank) ++n;
    return n;
  }

  // Formation exchange with the other daemons.
  struct NodeRecord {
    uint64_t job_hash;
    uint32_t local_size;
    uint32_t node_index;
  };
  NodeRecord mine{};
  std::vector<NodeRecord> gathered;
  TransportHandle formation = 0;

  Communicator world;
};

}  // namespace nodecomm::daemon
