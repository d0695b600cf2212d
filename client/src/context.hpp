// The client side of one attachment to nodecommd: control socket, mapped segment, the
// client's ring ends (producer of submissions, consumer of completions), the arena
// allocator, and the table of requests in flight.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "arena.hpp"
#include "nodecomm.h"
#include "nodecomm/ipc/idle.hpp"
#include "nodecomm/ipc/ring.hpp"
#include "nodecomm/ipc/segment.hpp"
#include "nodecomm/ipc/socket.hpp"
#include "nodecomm/proto/abi.hpp"
#include "nodecomm/proto/control.hpp"
#include "nodecomm/proto/types.hpp"

namespace nodecomm::client {

// A status with the message that goes to nc_last_error().
struct Result {
  nc_status_t status = NC_OK;
  std::string message;
  static Result ok() { return {}; }
};

inline Result fail(nc_status_t status, std::string message) {
  return Result{status, std::move(message)};
}

struct Settings {
  std::string runtime_dir;
  std::string job;
  uint32_t local_rank = 0;
  uint32_t local_size = 0;
  // NODECOMM_NODE / NODECOMM_NODES: this rank's node in the job and the job's node count; 0
  // nodes: not given.
  uint32_t node_index = 0;
  uint32_t node_count = 0;
  uint64_t arena_bytes = 0;
  double timeout_sec = 300;
  double connect_timeout_sec = 10;
  // NODECOMM_PRIORITY_POLICY, NODECOMM_FUSION, NODECOMM_FUSION_THRESHOLD, NODECOMM_FUSION_CYCLE_US
  proto::JobTuning tuning{-1, -1, -1, -1, -1, 0};
};

// Resolves options, then the environment, then defaults.
Result resolve_settings(const nc_init_options_t* opts, Settings& s);

struct CollectiveArgs {
  proto::Collective collective;
  const void* send;
  void* recv;
  uint64_t count;
  proto::DType dtype;
  proto::RedOp op;
  uint32_t comm;
  uint32_t root;
  const nc_op_attr_t* attr;
  const uint64_t* aux = nullptr;  // allgatherv/alltoallv count arrays (proto::aux_entries long)
};

class Context {
 public:
  // Connects, attaches and waits for the job to form.
  static Result create(const Settings& settings, Context*& out);
  ~Context();

  Result finalize();
  Result alloc(size_t bytes, void** ptr);
  Result free(void* ptr);
  void arena_info(uint64_t* total, uint64_t* free_bytes) const;
  // Passes `fd` to the daemon, which maps [file_offset, +bytes) of it; the caller has the same
  // bytes mapped at `addr`. Buffers inside are then zero-copy (proto::region_offset).
  Result register_fd(int fd, uint64_t file_offset, uint64_t bytes, void* addr);
  Result post(const CollectiveArgs& args, nc_request_t* req);
  // NC_IN_PROGRESS, or the final status (and the request is released).
  Result test(nc_request_t id);
  Result wait(nc_request_t id);
  // Waits until one of the non-zero ids completes; *index says which.
  Result wait_any(const nc_request_t* ids, size_t n, size_t* index);

  // Collective over `parent`: this rank's new communicator (proto::kNoComm if color is
  // kUndefinedColor).
  Result split(uint32_t parent, int32_t color, int64_t key, uint32_t* child);
  Result free_comm(uint32_t comm);
  Result comm_info(uint32_t comm, uint32_t* rank, uint32_t* size) const;

  uint32_t world_rank() const { return world_rank_; }
  uint32_t world_size() const { return world_size_; }
  uint32_t node_index() const { return node_index_; }
  uint32_t node_count() const { return node_count_; }
  uint32_t local_rank() const { return settings_.local_rank; }
  uint32_t local_size() const { return settings_.local_size; }

 private:
  struct Request {
    uint64_t seq = 0;
    uint32_t comm = 0;
    proto::Collective collective = proto::Collective::kAllreduce;
    std::string name;
    bool done = false;
    nc_status_t status = NC_IN_PROGRESS;
    std::string message;
    // Copy path: the daemon works on arena blocks; results go back to the caller's buffer.
    uint64_t temp_send = kNoBlock;
    uint64_t temp_recv = kNoBlock;
    uint64_t recv_copy_from = 0;  // copy path: where the result is in the arena
    uint64_t temp_aux = kNoBlock;
    void* user_recv = nullptr;
    uint64_t recv_bytes = 0;
    // comm_split's answer.
    uint32_t new_comm = 0;
    uint32_t new_rank = 0;
    uint32_t new_size = 0;
  };
  struct CommInfo {
    uint32_t rank;
    uint32_t size;
  };
  // Posts a communicator operation and waits for it; the completion's split fields land in
  // *done.
  Result run_comm_op(proto::Collective collective, uint32_t comm, int32_t color, int64_t key,
                     Request* done);
  static constexpr uint64_t kNoBlock = UINT64_MAX;
  void release_temporaries(const Request& r);

  Context() = default;
  Result attach(const Settings& settings);
  // Drains the completion ring into the request table. Caller holds mutex_.
  Result drain_completions();
  // Releases a completed request and produces its result. Caller holds mutex_.
  Result retire(std::unordered_map<nc_request_t, Request>::iterator it);
  bool in_arena(const void* p, uint64_t bytes, uint64_t& offset) const;
  // The descriptor offset of [p, p + bytes): in the arena or inside one registered region.
  bool shared_offset(const void* p, uint64_t bytes, uint64_t& offset) const;
  std::string describe(const Request& r) const;
  Result daemon_lost(const std::string& during) const;
  // Writes the segment's client heartbeat while the context lives, so that the daemon can tell
  // a stopped or frozen process (no heartbeat) from a slow one (stall reports).
  void start_heartbeat();

  Settings settings_;
  ipc::Fd socket_;
  ipc::Segment segment_;
  ipc::RingProducer<proto::OpDescriptor> submissions_;
  ipc::RingConsumer<proto::Completion> completions_;
  ArenaAllocator arena_;
  // Registered regions, index = the daemon's region number; guarded by mutex_. Addresses and
  // sizes apart, because ipc::ValidationLimits takes the sizes as one array.
  std::vector<const uint8_t*> region_addrs_;
  std::vector<uint64_t> region_sizes_;
  mutable std::mutex mutex_;
  std::unordered_map<nc_request_t, Request> requests_;
  std::unordered_map<uint32_t, uint64_t> next_seq_;
  std::unordered_map<uint32_t, CommInfo> comms_;
  nc_request_t pending_comm_op_ = 0;  // the split/free being waited for
  Request last_comm_op_;              // its completed request
  nc_request_t next_request_ = 1;
  size_t in_flight_ = 0;
  bool daemon_gone_ = false;
  uint64_t last_liveness_check_ns_ = 0;
  ipc::IdleConfig idle_config_;
  uint32_t world_rank_ = 0;
  uint32_t world_size_ = 0;
  uint32_t node_index_ = 0;
  uint32_t node_count_ = 0;
  std::mutex heartbeat_mutex_;
  std::condition_variable_any heartbeat_cv_;
  std::jthread heartbeat_;  // last: stops before the segment is unmapped
};

}  // namespace nodecomm::client
