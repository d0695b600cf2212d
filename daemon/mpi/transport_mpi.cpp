// The only file of nodecomm's service that talks to MPI.
// The C API only: the deprecated C++ bindings would need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <unordered_map>
#include <vector>

#include "algorithms/allreduce_algorithms.hpp"
#include "algorithms/chunked_transfers.hpp"
#include "nodecomm/ipc/clock.hpp"
#include "net/p2p.hpp"
#include "net/transport.hpp"
#include "net/transport_mpi_liveness.hpp"

namespace nodecomm::daemon {
namespace {

MPI_Datatype to_mpi(proto::DType t) {
  switch (t) {
    case proto::DType::kF32:
      return MPI_FLOAT;
    case proto::DType::kF64:
      return MPI_DOUBLE;
    case proto::DType::kI32:
      return MPI_INT32_T;
    case proto::DType::kI64:
      return MPI_INT64_T;
    case proto::DType::kI8:
      return MPI_INT8_T;
    case proto::DType::kU8:
      return MPI_UINT8_T;
    default:
      // f16/bf16 never reach the wire: the engine widens them to f32 first.
      throw TransportError(fmt::format("dtype {} has no MPI equivalent", proto::dtype_name(t)));
  }
}

MPI_Op to_mpi(proto::RedOp op) {
  switch (op) {
    case proto::RedOp::kSum:
      return MPI_SUM;
    case proto::RedOp::kProd:
      return MPI_PROD;
    case proto::RedOp::kMin:
      return MPI_MIN;
    case proto::RedOp::kMax:
      return MPI_MAX;
    default:
      // avg is a sum on the wire; the engine divides afterwards.
      throw TransportError(fmt::format("op {} has no MPI equivalent", proto::redop_name(op)));
  }
}

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, static_cast<size_t>(len));
}

void check_mpi(int code, const char* what, uint32_t node) {
  if (code != MPI_SUCCESS) {
    throw TransportError(fmt::format("{} on node {}: {}", what, node, mpi_error_text(code)));
  }
}

// Outstanding point-to-point requests of every group, advanced together by one
// MPI_Testsome per poll: one trip through Open MPI's progress engine, however many slices
// are in flight.
class RequestTable {
 public:
  explicit RequestTable(uint32_t node) : node_(node) {}
  ~RequestTable() {
    for (MPI_Request& r : active_) {
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
    }
  }
  RequestTable(const RequestTable&) = delete;
  RequestTable& operator=(const RequestTable&) = delete;

  P2pRequest add(MPI_Request request) {
    active_.push_back(request);
    ids_.push_back(next_);
    return next_++;
  }
  void poll() {
    if (active_.empty()) return;
    int completed = 0;
    indices_.resize(active_.size());
    check_mpi(MPI_Testsome(static_cast<int>(active_.size()), active_.data(), &completed,
                           indices_.data(), MPI_STATUSES_IGNORE),
              "MPI_Testsome", node_);
    if (completed == MPI_UNDEFINED || completed == 0) return;
    for (int i = 0; i < completed; ++i) finished_.push_back(ids_[static_cast<size_t>(indices_[i])]);
    completions_ += static_cast<uint64_t>(completed);
    // MPI set the finished entries to MPI_REQUEST_NULL: drop them, keeping the order.
    size_t kept = 0;
    for (size_t i = 0; i < active_.size(); ++i) {
      if (active_[i] == MPI_REQUEST_NULL) continue;
      active_[kept] = active_[i];
      ids_[kept++] = ids_[i];
    }
    active_.resize(kept);
    ids_.resize(kept);
  }
  bool done(P2pRequest id) {
    auto it = std::find(finished_.begin(), finished_.end(), id);
    if (it == finished_.end()) return false;
    *it = finished_.back();
    finished_.pop_back();
    return true;
  }
  size_t outstanding() const { return active_.size(); }
  uint64_t completions() const { return completions_; }

 private:
  uint32_t node_;
  P2pRequest next_ = 1;
  std::vector<MPI_Request> active_;
  std::vector<P2pRequest> ids_;
  std::vector<int> indices_;
  std::vector<P2pRequest> finished_;
  uint64_t completions_ = 0;
};

// Point-to-point over one node group: lane i is the group's i-th duplicated communicator.
class MpiPointToPoint final : public PointToPoint {
 public:
  MpiPointToPoint(RequestTable& table, std::vector<MPI_Comm> lanes, int max_tag, uint32_t node)
      : table_(table), lanes_(std::move(lanes)), max_tag_(max_tag), node_(node) {
    int rank = 0;
    int size = 1;
    MPI_Comm_rank(lanes_.front(), &rank);
    MPI_Comm_size(lanes_.front(), &size);
    rank_ = static_cast<uint32_t>(rank);
    size_ = static_cast<uint32_t>(size);
  }
  uint32_t rank() const override { return rank_; }
  uint32_t size() const override { return size_; }
  uint32_t lanes() const override { return static_cast<uint32_t>(lanes_.size()); }
  int max_tag() const override { return max_tag_; }
  P2pRequest isend(uint32_t lane, uint32_t peer, int tag, const void* data, size_t bytes) override {
    MPI_Request r = MPI_REQUEST_NULL;
    check_mpi(MPI_Isend(data, message_bytes(bytes), MPI_BYTE, static_cast<int>(peer), tag,
                        lanes_.at(lane), &r),
              "MPI_Isend", node_);
    // NOLINTNEXTLINE(clang-analyzer-optin.mpi.MPI-Checker): RequestTable::poll completes it.
    return table_.add(r);
  }
  P2pRequest irecv(uint32_t lane, uint32_t peer, int tag, void* data, size_t bytes) override {
    MPI_Request r = MPI_REQUEST_NULL;
    check_mpi(MPI_Irecv(data, message_bytes(bytes), MPI_BYTE, static_cast<int>(peer), tag,
                        lanes_.at(lane), &r),
              "MPI_Irecv", node_);
    // NOLINTNEXTLINE(clang-analyzer-optin.mpi.MPI-Checker): RequestTable::poll completes it.
    return table_.add(r);
  }
  void poll() override { table_.poll(); }
  bool done(P2pRequest request) override { return table_.done(request); }
  const std::vector<MPI_Comm>& lane_comms() const { return lanes_; }

 private:
  static int message_bytes(size_t bytes) {
    // MPI counts are int: the ring cuts messages into slices far below this.
    if (bytes > static_cast<size_t>(INT32_MAX)) {
      throw TransportError(fmt::format("message of {} bytes exceeds MPI's int range", bytes));
    }
    return static_cast<int>(bytes);
  }

  RequestTable& table_;
  std::vector<MPI_Comm> lanes_;
  int max_tag_;
  uint32_t node_;
  uint32_t rank_ = 0;
  uint32_t size_ = 1;
};

// MPI_Iallreduce on the whole buffer, kept selectable so comparisons with Open MPI's own
// algorithms stay honest.
class MpiAllreduce final : public AllreduceAlgorithm {
 public:
  MpiAllreduce(MPI_Comm comm, const AllreduceSpec& spec, const AllreduceHooks& hooks, uint32_t node)
      : spec_(spec), hooks_(hooks), node_(node) {
    if (spec.count > static_cast<size_t>(INT32_MAX)) {
      throw TransportError(fmt::format("count {} exceeds MPI's int range", spec.count));
    }
    if (spec.count > 0) hooks.prepare(0, spec.count);
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, spec.buffer, static_cast<int>(spec.count),
                             to_mpi(spec.dtype), to_mpi(spec.op), comm, &request_),
              "MPI_Iallreduce", node);
  }
  ~MpiAllreduce() override {
    if (request_ != MPI_REQUEST_NULL) MPI_Request_free(&request_);
  }
  MpiAllreduce(const MpiAllreduce&) = delete;
  MpiAllreduce& operator=(const MpiAllreduce&) = delete;
  bool progress() override {
    if (request_ == MPI_REQUEST_NULL) return true;
    int done = 0;
    check_mpi(MPI_Test(&request_, &done, MPI_STATUS_IGNORE), "MPI_Test (allreduce)", node_);
    if (done == 0) return false;
    if (spec_.count > 0) hooks_.done(0, spec_.count);
    return true;
  }

 private:
  AllreduceSpec spec_;
  AllreduceHooks hooks_;
  uint32_t node_;
  MPI_Request request_ = MPI_REQUEST_NULL;
};

class MpiTransport final : public Transport {
 public:
  MpiTransport(int* argc, char*** argv, uint32_t lanes) : lanes_(std::max<uint32_t>(lanes, 1)) {
    int provided = 0;
    // The engine thread makes every data call; communicator creation runs on short-lived
    // threads (see start_split_groups), which needs MPI_THREAD_MULTIPLE.
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    thread_multiple_ = provided >= MPI_THREAD_MULTIPLE;
    // Errors come back as codes so a lost peer becomes a TransportError, not an abort.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rank = 0;
    int size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    rank_ = static_cast<uint32_t>(rank);
    size_ = static_cast<uint32_t>(size);
    int* tag_ub = nullptr;
    int found = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, static_cast<void*>(&tag_ub), &found);
    max_tag_ = found != 0 && tag_ub != nullptr ? *tag_ub : 32767;
    // Exchanges (scheduling rounds, operation summaries) and transfers are two streams, each
    // started in the same order on every daemon, but not interleaved alike: a daemon may start
    // the next summary exchange before or after the previous transfer. Their tags come from
    // separate halves of the tag space so that one stream's messages never match the other's.
    tag_windows_ = std::max(1, (max_tag_ / kTagsPerOperation) / 2);
    // Test hook: a lower limit drives the large-count paths below with small payloads. Every
    // daemon of a job must see the same value (the launcher passes its environment on), since
    // both sides of a transfer cut it into messages alike.
    if (const char* v = std::getenv("NODECOMM_TEST_MPI_MAX_COUNT"); v != nullptr && *v != '\0') {
      char* end = nullptr;
      const unsigned long long n = std::strtoull(v, &end, 10);
      if (*end == '\0' && n >= 1 && n < max_count_) max_count_ = static_cast<size_t>(n);
    }
    requests_p2p_ = std::make_unique<RequestTable>(rank_);
    add_group(kAllNodes, MPI_COMM_WORLD, duplicate_lanes(MPI_COMM_WORLD, lanes_, &rank_));
    // Its own communicator, so notices never match an operation's messages.
    MPI_Comm_dup(MPI_COMM_WORLD, &notice_comm_);
    MPI_Comm_set_errhandler(notice_comm_, MPI_ERRORS_RETURN);
    post_notice_receive();
    liveness_ =
        std::make_unique<MpiPeerLiveness>(MPI_COMM_WORLD, rank_, size_, ipc::monotonic_ns());
  }

  std::vector<LostPeer> check_peers(uint64_t now_ns, uint64_t interval_ns,
                                    uint64_t timeout_ns) override {
    return liveness_->check(now_ns, interval_ns, timeout_ns);
  }

  void send_notice(uint64_t tag, uint32_t rank, proto::Status status,
                   const std::string& text) override {
    Notice n{};
    n.tag = tag;
    n.from = rank_;
    n.rank = rank;
    n.status = static_cast<int32_t>(status);
    std::snprintf(n.text, sizeof(n.text), "%s", text.c_str());
    for (uint32_t peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      auto sent = std::make_unique<SentNotice>();
      sent->notice = n;
      if (MPI_Isend(&sent->notice, sizeof(Notice), MPI_BYTE, static_cast<int>(peer), 0,
                    notice_comm_, &sent->request) == MPI_SUCCESS) {
        sent_notices_.push_back(std::move(sent));
      }
    }
  }

  bool poll_notice(uint64_t& tag, uint32_t& rank, proto::Status& status,
                   std::string& text) override {
    // Sends finish on their own time; forget them once they have.
    std::erase_if(sent_notices_, [](const std::unique_ptr<SentNotice>& s) {
      int done = 0;
      MPI_Test(&s->request, &done, MPI_STATUS_IGNORE);
      return done != 0;
    });
    if (notice_request_ == MPI_REQUEST_NULL) return false;
    int done = 0;
    if (MPI_Test(&notice_request_, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done == 0) {
      return false;
    }
    tag = incoming_notice_.tag;
    rank = incoming_notice_.rank;
    status = static_cast<proto::Status>(incoming_notice_.status);
    incoming_notice_.text[sizeof(incoming_notice_.text) - 1] = '\0';
    text = fmt::format("node {} reports: {}", incoming_notice_.from, incoming_notice_.text);
    post_notice_receive();
    return true;
  }
  struct Notice {
    uint64_t tag;
    uint32_t from;
    uint32_t rank;
    int32_t status;
    uint32_t reserved;
    char text[488];
  };
  struct SentNotice {
    Notice notice;
    MPI_Request request = MPI_REQUEST_NULL;
  };

  void post_notice_receive() {
    incoming_notice_ = {};
    if (MPI_Irecv(&incoming_notice_, sizeof(Notice), MPI_BYTE, MPI_ANY_SOURCE, 0, notice_comm_,
                  &notice_request_) != MPI_SUCCESS) {
      notice_request_ = MPI_REQUEST_NULL;
    }
  }

  ~MpiTransport() override {
    if (notice_request_ != MPI_REQUEST_NULL) {
      MPI_Cancel(&notice_request_);
      MPI_Request_free(&notice_request_);
    }
    for (auto& sent : sent_notices_) MPI_Request_free(&sent->request);
    sent_notices_.clear();
    if (notice_comm_ != MPI_COMM_NULL) MPI_Comm_free(&notice_comm_);
    const bool peer_lost = liveness_->any_lost();
    liveness_.reset();
    for (auto& [handle, job] : group_jobs_) {
      // A creation still blocked in MPI (a peer died) must not hang the shutdown.
      if (job->done.load(std::memory_order_acquire)) {
        job->thread.join();
      } else {
        job->thread.detach();
      }
    }
    for (auto& [handle, pending] : requests_) {
      if (pending.request != MPI_REQUEST_NULL) MPI_Request_free(&pending.request);
      for (MPI_Request& more : pending.more) {
        if (more != MPI_REQUEST_NULL) MPI_Request_free(&more);
      }
    }
    algorithms_.clear();
    requests_p2p_.reset();
    for (auto& [id, group] : groups_) free_lanes_and_comm(id, group);
    // MPI_Finalize waits for every process of the world, a lost one included: without it the
    // launcher reports this daemon as not finalized, which is what happened to the job.
    if (!peer_lost) MPI_Finalize();
  }

  uint32_t node_index() const override { return rank_; }
  uint32_t node_count() const override { return size_; }
  std::string name() const override { return "mpi"; }

  TransportHandle start_allreduce(NodeComm comm, void* buffer, size_t count, proto::DType dtype,
                                  proto::RedOp op, proto::Compression wire,
                                  const AllreduceHooks& hooks) override {
    Group& group = group_of(comm);
    const AllreduceSpec spec{buffer, count, dtype, op, wire};
    const size_t bytes = count * proto::dtype_size(dtype);
    // Tags are handed out in start order, which every daemon of the group shares.
    const int tag_base = static_cast<int>(group.started++ % tag_windows_) * kTagsPerOperation;
    std::unique_ptr<AllreduceAlgorithm> algorithm;
    // Compressed data goes around the ring, the only algorithm that re-encodes per step.
    AllreduceAlgorithmKind kind = spec.wire != proto::Compression::kNone
                                      ? AllreduceAlgorithmKind::kRing
                                      : choose_allreduce(tuning_, bytes, group.net->size());
    // Recursive doubling sends the whole buffer as one message and MPI_Iallreduce takes an int
    // count: beyond that the ring, whose slices stay far below it, carries the operation.
    if ((kind == AllreduceAlgorithmKind::kRecursiveDoubling && bytes > max_count_) ||
        (kind == AllreduceAlgorithmKind::kMpi && count > max_count_)) {
      kind = AllreduceAlgorithmKind::kRing;
    }
    switch (kind) {
      case AllreduceAlgorithmKind::kRecursiveDoubling:
        algorithm = make_recursive_doubling_allreduce(*group.net, tag_base, spec, hooks);
        break;
      case AllreduceAlgorithmKind::kMpi:
        algorithm = std::make_unique<MpiAllreduce>(group.comm, spec, hooks, rank_);
        break;
      default:
        algorithm = make_ring_allreduce(*group.net, tag_base, spec, hooks, tuning_);
        break;
    }
    const TransportHandle handle = next_++;
    algorithms_.emplace(handle, std::move(algorithm));
    // NOLINTNEXTLINE(clang-analyzer-optin.mpi.MPI-Checker): test() advances every request.
    return handle;
  }

  void begin_pass() override { pass_polled_ = false; }

  TransportHandle start_exchange(NodeComm comm, void* records, size_t bytes) override {
    Group& group = group_of(comm);
    const int tag_base =
        static_cast<int>(tag_windows_ + group.exchanges++ % tag_windows_) * kTagsPerOperation;
    const TransportHandle handle = next_++;
    algorithms_.emplace(handle, make_record_exchange(*group.net, tag_base, records, bytes));
    return handle;
  }

  // Reductions whose counts do not fit MPI's int go as several MPI_Ireduce calls of at most
  // max_count_ elements each (nonblocking collectives on one communicator match in start
  // order on every daemon); the rest go as they always did. Every daemon must take the same
  // path for an operation: each choice below depends only on sizes all of them know alike.
  TransportHandle start_reduce(NodeComm comm, void* buffer, size_t count, proto::DType dtype,
                               proto::RedOp op, uint32_t root_node) override {
    Pending p;
    post_reduce(p, comm, static_cast<uint8_t*>(buffer), count, dtype, op, root_node);
    return remember(std::move(p));
  }

  TransportHandle start_reduce_scatter(NodeComm comm, void* buffer, std::vector<size_t> node_counts,
                                       proto::DType dtype, proto::RedOp op) override {
    Pending p;
    if (fit(node_counts)) {
      p.a = to_int(node_counts);
      check(MPI_Ireduce_scatter(MPI_IN_PLACE, buffer, p.a.data(), to_mpi(dtype), to_mpi(op),
                                handle_of(comm), &p.request),
            "MPI_Ireduce_scatter");
      return remember(std::move(p));
    }
    // One reduction per node to that node, then this node's run moves to the start.
    auto* base = static_cast<uint8_t*>(buffer);
    const size_t elem = proto::dtype_size(dtype);
    const uint32_t me = comm_rank(comm);
    size_t offset = 0;
    size_t mine = 0;
    for (uint32_t n = 0; n < node_counts.size(); ++n) {
      if (n == me) mine = offset;
      post_reduce(p, comm, base + offset * elem, node_counts[n], dtype, op, n);
      offset += node_counts[n];
    }
    const size_t bytes = node_counts[me] * elem;
    p.finish = [base, mine, bytes, elem] {
      if (mine != 0 && bytes > 0) std::memmove(base, base + mine * elem, bytes);
    };
    return remember(std::move(p));
  }

  TransportHandle start_broadcast(NodeComm comm, void* buffer, size_t bytes,
                                  uint32_t root_node) override {
    if (bytes > max_count_) {
      // The root sends the whole block to every node.
      const uint32_t me = comm_rank(comm);
      std::vector<Transfer> sends;
      std::vector<Transfer> recvs;
      auto* data = static_cast<uint8_t*>(buffer);
      if (me == root_node) {
        for (uint32_t n = 0; n < comm_size(comm); ++n) {
          if (n != me) sends.push_back({n, data, bytes});
        }
      } else {
        recvs.push_back({root_node, data, bytes});
      }
      return start_chunked(comm, std::move(sends), std::move(recvs));
    }
    Pending p;
    check(MPI_Ibcast(buffer, checked_count(bytes), MPI_BYTE, static_cast<int>(root_node),
                     handle_of(comm), &p.request),
          "MPI_Ibcast");
    return remember(std::move(p));
  }

  TransportHandle start_allgatherv(NodeComm comm, void* buffer, std::vector<size_t> bytes,
                                   std::vector<size_t> displs) override {
    if (!fit(bytes) || !fit(displs)) {
      // Every node's block to every other node.
      const uint32_t me = comm_rank(comm);
      auto* base = static_cast<uint8_t*>(buffer);
      std::vector<Transfer> sends;
      std::vector<Transfer> recvs;
      for (uint32_t n = 0; n < bytes.size(); ++n) {
        if (n == me) continue;
        sends.push_back({n, base + displs[me], bytes[me]});
        recvs.push_back({n, base + displs[n], bytes[n]});
      }
      return start_chunked(comm, std::move(sends), std::move(recvs));
    }
    Pending p;
    p.a = to_int(bytes);
    p.b = to_int(displs);
    check(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buffer, p.a.data(), p.b.data(),
                          MPI_BYTE, handle_of(comm), &p.request),
          "MPI_Iallgatherv");
    return remember(std::move(p));
  }

  // gatherv (to_root) and scatterv beyond MPI's int counts: each node's block travels between
  // it and the root as chunked point-to-point messages.
  TransportHandle start_rooted_chunked(NodeComm comm, uint8_t* base,
                                       const std::vector<size_t>& bytes,
                                       const std::vector<size_t>& displs, uint32_t root_node,
                                       bool to_root) {
    const uint32_t me = comm_rank(comm);
    std::vector<Transfer> at_root;
    std::vector<Transfer> at_leaf;
    if (root_node == me) {
      for (uint32_t n = 0; n < bytes.size(); ++n) {
        if (n != me) at_root.push_back({n, base + displs[n], bytes[n]});
      }
    } else {
      at_leaf.push_back({root_node, base + displs[me], bytes[me]});
    }
    return to_root ? start_chunked(comm, std::move(at_leaf), std::move(at_root))
                   : start_chunked(comm, std::move(at_root), std::move(at_leaf));
  }

  TransportHandle start_gatherv(NodeComm comm, void* buffer, std::vector<size_t> bytes,
                                std::vector<size_t> displs, uint32_t root_node) override {
    const uint32_t me = comm_rank(comm);
    const bool root = root_node == me;
    auto* base = static_cast<uint8_t*>(buffer);
    if (!fit(bytes) || !fit(displs)) {
      return start_rooted_chunked(comm, base, bytes, displs, root_node, /*to_root=*/true);
    }
    Pending p;
    p.a = to_int(bytes);
    p.b = to_int(displs);
    uint8_t* mine = base + displs[me];
    check(
        MPI_Igatherv(root ? MPI_IN_PLACE : mine, p.a[me], MPI_BYTE, buffer, p.a.data(), p.b.data(),
                     MPI_BYTE, static_cast<int>(root_node), handle_of(comm), &p.request),
        "MPI_Igatherv");
    return remember(std::move(p));
  }

  TransportHandle start_scatterv(NodeComm comm, void* buffer, std::vector<size_t> bytes,
                                 std::vector<size_t> displs, uint32_t root_node) override {
    const uint32_t me = comm_rank(comm);
    const bool root = root_node == me;
    auto* base = static_cast<uint8_t*>(buffer);
    if (!fit(bytes) || !fit(displs)) {
      return start_rooted_chunked(comm, base, bytes, displs, root_node, /*to_root=*/false);
    }
    Pending p;
    p.a = to_int(bytes);
    p.b = to_int(displs);
    uint8_t* mine = base + displs[me];
    check(
        MPI_Iscatterv(buffer, p.a.data(), p.b.data(), MPI_BYTE, root ? MPI_IN_PLACE : mine, p.a[me],
                      MPI_BYTE, static_cast<int>(root_node), handle_of(comm), &p.request),
        "MPI_Iscatterv");
    return remember(std::move(p));
  }

  // Always point-to-point (chunked_transfers.hpp), never MPI_Ialltoallv: a node's send and
  // receive sizes are its own, so whether they fit an int is not something every daemon
  // could decide alike, and an MPI collective on some daemons facing point-to-point messages
  // on others would never match. Open MPI's alltoallv is pairwise messages too.
  TransportHandle start_alltoallv(NodeComm comm, const void* send, std::vector<size_t> sbytes,
                                  std::vector<size_t> sdispls, void* recv,
                                  std::vector<size_t> rbytes,
                                  std::vector<size_t> rdispls) override {
    // The send buffer is only read (Transfer's data is not const for the receives' sake).
    auto* out = const_cast<uint8_t*>(static_cast<const uint8_t*>(send));
    auto* in = static_cast<uint8_t*>(recv);
    std::vector<Transfer> sends;
    std::vector<Transfer> recvs;
    for (uint32_t n = 0; n < sbytes.size(); ++n) {
      sends.push_back({n, out + sdispls[n], sbytes[n]});
      recvs.push_back({n, in + rdispls[n], rbytes[n]});
    }
    return start_chunked(comm, std::move(sends), std::move(recvs));
  }

  TransportHandle start_barrier(NodeComm comm) override {
    Pending p;
    check(MPI_Ibarrier(handle_of(comm), &p.request), "MPI_Ibarrier");
    return remember(std::move(p));
  }

  TransportHandle start_allgather(const void* send, size_t bytes, void* recv) override {
    Pending p;
    check(MPI_Iallgather(send, checked_count(bytes), MPI_BYTE, recv, checked_count(bytes), MPI_BYTE,
                         MPI_COMM_WORLD, &p.request),
          "MPI_Iallgather");
    return remember(std::move(p));
  }

  bool test(TransportHandle handle) override {
    if (auto job = group_jobs_.find(handle); job != group_jobs_.end()) {
      // acquire: pairs with the creating thread's release of done.
      if (!job->second->done.load(std::memory_order_acquire)) return false;
      job->second->thread.join();
      const int status = job->second->status;
      finished_groups_.emplace(
          handle, FinishedGroups{std::move(job->second->made), std::move(job->second->lanes)});
      group_jobs_.erase(job);
      check(status, "MPI_Comm_split");
      return true;
    }
    if (auto algo = algorithms_.find(handle); algo != algorithms_.end()) {
      try {
        if (!pass_polled_) {
          requests_p2p_->poll();
          pass_polled_ = true;
        }
        if (!algo->second->progress()) return false;
      } catch (...) {
        // Its hooks must never run again: the engine fails and forgets the operation.
        algorithms_.erase(algo);
        throw;
      }
      algorithms_.erase(algo);
      return true;
    }
    auto it = requests_.find(handle);
    if (it == requests_.end()) throw TransportError(fmt::format("unknown handle {}", handle));
    int done = 0;
    check(MPI_Test(&it->second.request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done == 0) return false;
    // MPI_Test on a request that already completed (now MPI_REQUEST_NULL) reports it done.
    for (MPI_Request& more : it->second.more) {
      check(MPI_Test(&more, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (done == 0) return false;
    }
    if (it->second.finish) it->second.finish();
    requests_.erase(it);
    return true;
  }

  uint32_t comm_rank(NodeComm comm) const override { return static_cast<uint32_t>(rank_in(comm)); }
  uint32_t comm_size(NodeComm comm) const override {
    int size = 0;
    MPI_Comm_size(handle_of(comm), &size);
    return static_cast<uint32_t>(size);
  }

  TransportHandle start_split_groups(NodeComm parent, std::vector<bool> include) override {
    if (!thread_multiple_) {
      throw TransportError(
          "creating communicators needs MPI_THREAD_MULTIPLE, which this MPI "
          "library does not provide");
    }
    // Each creation runs on its own thread: creations for different communicators never wait
    // for each other, whatever order the daemons reach them in. Creations on one parent stay
    // ordered because the engine fences them in that parent's operation stream.
    auto job = std::make_shared<GroupJob>();
    const MPI_Comm parent_comm = handle_of(parent);
    const int parent_rank = rank_in(parent);
    const uint32_t lanes = lanes_;
    job->thread = std::thread([job, parent_comm, parent_rank, lanes, include = std::move(include)] {
      for (bool in : include) {
        MPI_Comm created = MPI_COMM_NULL;
        job->status = MPI_Comm_split(parent_comm, in ? 0 : MPI_UNDEFINED, parent_rank, &created);
        if (job->status != MPI_SUCCESS) break;
        job->made.push_back(created);
        job->lanes.emplace_back();
        if (created == MPI_COMM_NULL) continue;
        // The group's lanes are made here too: MPI_Comm_dup blocks like the split.
        for (uint32_t i = 0; i < lanes && job->status == MPI_SUCCESS; ++i) {
          MPI_Comm lane = MPI_COMM_NULL;
          job->status = MPI_Comm_dup(created, &lane);
          if (job->status == MPI_SUCCESS) job->lanes.back().push_back(lane);
        }
        if (job->status != MPI_SUCCESS) break;
      }
      // release: the results written above are visible to the engine once it sees done.
      job->done.store(true, std::memory_order_release);
    });
    const TransportHandle handle = next_++;
    group_jobs_.emplace(handle, std::move(job));
    return handle;
  }

  std::vector<NodeComm> take_groups(TransportHandle handle) override {
    auto it = finished_groups_.find(handle);
    if (it == finished_groups_.end()) throw TransportError("communicator creation not finished");
    std::vector<NodeComm> ids;
    for (size_t i = 0; i < it->second.comms.size(); ++i) {
      const MPI_Comm c = it->second.comms[i];
      if (c == MPI_COMM_NULL) {
        ids.push_back(kAllNodes);
        continue;
      }
      ids.push_back(next_comm_);
      add_group(next_comm_++, c, std::move(it->second.lanes[i]));
    }
    finished_groups_.erase(it);
    return ids;
  }

  void free_group(NodeComm comm) override {
    auto it = groups_.find(comm);
    if (it == groups_.end() || comm == kAllNodes) return;
    free_lanes_and_comm(comm, it->second);
    groups_.erase(it);
  }

  size_t in_flight() const override {
    return requests_.size() + group_jobs_.size() + algorithms_.size();
  }
  uint32_t lanes() const override { return lanes_; }
  uint64_t activity() const override { return requests_p2p_->completions(); }

 private:
  static int checked_count(size_t count) {
    // MPI 3 counts are int; larger messages would need derived datatypes.
    if (count > static_cast<size_t>(INT32_MAX)) {
      throw TransportError(fmt::format("count {} exceeds MPI's int range", count));
    }
    return static_cast<int>(count);
  }
  void check(int code, const char* what) const {
    if (code != MPI_SUCCESS) {
      throw TransportError(
          fmt::format("{} on node {} of {}: {}", what, rank_, size_, mpi_error_text(code)));
    }
  }
  // A request and the count arrays MPI reads until it completes.
  // A communicator creation running on its own thread.
  struct GroupJob {
    std::thread thread;
    std::atomic<bool> done{false};
    int status = MPI_SUCCESS;
    std::vector<MPI_Comm> made;
    std::vector<std::vector<MPI_Comm>> lanes;  // per entry of made
  };
  struct FinishedGroups {
    std::vector<MPI_Comm> comms;
    std::vector<std::vector<MPI_Comm>> lanes;
  };
  // The daemons of one NodeComm: the communicator for MPI collectives and the lanes (its
  // duplicates) for the point-to-point algorithms, so the two never match each other's
  // messages.
  struct Group {
    MPI_Comm comm = MPI_COMM_NULL;
    std::unique_ptr<MpiPointToPoint> net;
    uint64_t started = 0;    // point-to-point transfers started, for tags
    uint64_t exchanges = 0;  // exchanges started, for tags in the upper half
  };

  static std::vector<MPI_Comm> duplicate_lanes(MPI_Comm comm, uint32_t lanes,
                                               const uint32_t* node) {
    std::vector<MPI_Comm> made;
    for (uint32_t i = 0; i < lanes; ++i) {
      MPI_Comm lane = MPI_COMM_NULL;
      check_mpi(MPI_Comm_dup(comm, &lane), "MPI_Comm_dup (lanes)", *node);
      made.push_back(lane);
    }
    return made;
  }
  void add_group(NodeComm id, MPI_Comm comm, std::vector<MPI_Comm> lanes) {
    // Errors come back as codes so a lost peer becomes a TransportError, not an abort.
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    for (MPI_Comm lane : lanes) MPI_Comm_set_errhandler(lane, MPI_ERRORS_RETURN);
    Group g;
    g.comm = comm;
    g.net = std::make_unique<MpiPointToPoint>(*requests_p2p_, std::move(lanes), max_tag_, rank_);
    groups_.emplace(id, std::move(g));
  }
  static void free_lanes_and_comm(NodeComm id, Group& group) {
    if (group.net) {
      for (MPI_Comm lane : group.net->lane_comms()) MPI_Comm_free(&lane);
    }
    if (id != kAllNodes) MPI_Comm_free(&group.comm);
  }
  Group& group_of(NodeComm comm) {
    auto it = groups_.find(comm);
    if (it == groups_.end())
      throw TransportError(fmt::format("unknown node communicator {}", comm));
    return it->second;
  }

  struct Pending {
    MPI_Request request = MPI_REQUEST_NULL;
    std::vector<MPI_Request> more;  // the other calls of an operation cut into several
    std::vector<int> a, b;
    std::function<void()> finish;  // runs once every request has completed
  };

  // True when every value fits one MPI call's int count (or the test hook's lower limit).
  bool fit(const std::vector<size_t>& values) const {
    return std::all_of(values.begin(), values.end(), [this](size_t v) { return v <= max_count_; });
  }
  static std::vector<int> to_int(const std::vector<size_t>& values) {
    std::vector<int> out;
    out.reserve(values.size());
    for (const size_t v : values) out.push_back(checked_count(v));
    return out;
  }
  // MPI_Ireduce of `count` elements at `data` to root_node, as several calls of at most
  // max_count_ elements when it is larger: the first is p.request, the others p.more.
  void post_reduce(Pending& p, NodeComm comm, uint8_t* data, size_t count, proto::DType dtype,
                   proto::RedOp op, uint32_t root_node) {
    const bool root = root_node == comm_rank(comm);
    const size_t elem = proto::dtype_size(dtype);
    const size_t calls = std::max<size_t>(message_count(count, max_count_), 1);
    for (size_t i = 0; i < calls; ++i) {
      uint8_t* at = data + i * max_count_ * elem;
      const size_t n = message_bytes(count, max_count_, i);
      MPI_Request r = MPI_REQUEST_NULL;
      check(
          MPI_Ireduce(root ? MPI_IN_PLACE : at, root ? at : nullptr, checked_count(n),
                      to_mpi(dtype), to_mpi(op), static_cast<int>(root_node), handle_of(comm), &r),
          "MPI_Ireduce");
      if (i == 0) {
        p.request = r;
      } else {
        p.more.push_back(r);
      }
    }
  }
  // Point-to-point transfers of any size on the group's lanes (chunked_transfers.hpp), with a
  // tag window of their own like every other point-to-point operation.
  TransportHandle start_chunked(NodeComm comm, std::vector<Transfer> sends,
                                std::vector<Transfer> recvs) {
    Group& group = group_of(comm);
    const int tag = static_cast<int>(group.started++ % tag_windows_) * kTagsPerOperation;
    const TransportHandle handle = next_++;
    algorithms_.emplace(handle, make_chunked_transfers(*group.net, tag, std::move(sends),
                                                       std::move(recvs), max_count_));
    return handle;
  }

  TransportHandle remember(Pending pending) {
    const TransportHandle handle = next_++;
    requests_.emplace(handle, std::move(pending));
    return handle;
  }

  MPI_Comm handle_of(NodeComm comm) const {
    auto it = groups_.find(comm);
    if (it == groups_.end())
      throw TransportError(fmt::format("unknown node communicator {}", comm));
    return it->second.comm;
  }
  int rank_in(NodeComm comm) const {
    int rank = 0;
    MPI_Comm_rank(handle_of(comm), &rank);
    return rank;
  }

  uint32_t rank_ = 0;
  // The largest count one MPI call takes: int (NODECOMM_TEST_MPI_MAX_COUNT may lower it).
  size_t max_count_ = static_cast<size_t>(INT_MAX);
  NodeComm next_comm_ = 1;
  uint32_t lanes_ = 1;
  int max_tag_ = 32767;
  int tag_windows_ = 1;  // operations whose tag ranges can be told apart
  std::unique_ptr<RequestTable> requests_p2p_;
  std::unordered_map<NodeComm, Group> groups_;
  std::unordered_map<TransportHandle, std::unique_ptr<AllreduceAlgorithm>> algorithms_;
  bool pass_polled_ = false;  // the point-to-point requests were polled in this engine pass
  MPI_Comm notice_comm_ = MPI_COMM_NULL;
  std::unique_ptr<MpiPeerLiveness> liveness_;
  MPI_Request notice_request_ = MPI_REQUEST_NULL;
  Notice incoming_notice_{};
  std::vector<std::unique_ptr<SentNotice>> sent_notices_;
  std::unordered_map<TransportHandle, std::shared_ptr<GroupJob>> group_jobs_;
  std::unordered_map<TransportHandle, FinishedGroups> finished_groups_;
  bool thread_multiple_ = false;
  uint32_t size_ = 1;
  TransportHandle next_ = 1;
  std::unordered_map<TransportHandle, Pending> requests_;
};

}  // namespace

std::unique_ptr<Transport> make_mpi_transport(int* argc, char*** argv, uint32_t lanes) {
  return std::make_unique<MpiTransport>(argc, argv, lanes);
}

}  // namespace nodecomm::daemon
