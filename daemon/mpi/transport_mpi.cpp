// The MPI transport: MPI's own collectives on each node group's communicator, composed with the
// groups and their point-to-point messaging (mpi_groups.hpp, mpi_p2p.hpp), failure notices
// (mpi_notices.hpp) and liveness (transport_mpi_liveness.hpp).
#include "mpi/transport_mpi.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "mpi/mpi_common.hpp"
#include "mpi/mpi_groups.hpp"
#include "mpi/mpi_notices.hpp"
#include "mpi/transport_mpi_liveness.hpp"
#include "net/transport.hpp"
#include "nodecomm/ipc/clock.hpp"

namespace nodecomm::daemon {
namespace {

class MpiTransport final : public Transport {
 public:
  MpiTransport(std::shared_ptr<MpiRuntime> runtime, MPI_Comm base, BaseComm ownership,
               uint32_t lanes)
      : runtime_(std::move(runtime)), base_(base), owns_base_(ownership == BaseComm::kOwned) {
    MPI_Comm_set_errhandler(base_, MPI_ERRORS_RETURN);
    int rank = 0;
    int size = 1;
    MPI_Comm_rank(base_, &rank);
    MPI_Comm_size(base_, &size);
    rank_ = static_cast<uint32_t>(rank);
    size_ = static_cast<uint32_t>(size);
    // The algorithms' tags stay below those kept for messages that may outlive their
    // communicator (mpi_common.hpp).
    const int max_tag = mpi_tag_ub() - kReservedTags;
    // Test hook: a lower limit drives the large-count paths (here and the runner's chunked
    // transfers) with small payloads. Every daemon of a job must see the same value (the
    // launcher passes its environment on), since both sides of a transfer cut it into
    // messages alike.
    if (const char* v = std::getenv("NODECOMM_TEST_MPI_MAX_COUNT"); v != nullptr && *v != '\0') {
      char* end = nullptr;
      const unsigned long long n = std::strtoull(v, &end, 10);
      if (*end == '\0' && n >= 1 && n < max_count_) max_count_ = static_cast<size_t>(n);
    }
    // Peers may still be sending in a communicator this daemon is done with (they have not
    // noticed yet that its job ended here): retired, not freed (comm_retirement.hpp).
    const CommRelease release = [this](MPI_Comm& comm) { retire(comm); };
    groups_ = std::make_unique<MpiGroups>(base_, rank_, std::max<uint32_t>(lanes, 1), max_tag,
                                          runtime_->thread_multiple(), release);
    notices_ = std::make_unique<MpiNotices>(base_, rank_, size_, release);
    liveness_ =
        std::make_unique<MpiPeerLiveness>(base_, rank_, size_, ipc::monotonic_ns(), release);
  }

  ~MpiTransport() override {
    notices_.reset();
    // MPI_Finalize waits for every process this one is connected to, a lost one included:
    // without it the launcher reports this daemon as not finalized, which is what happened to
    // the job.
    if (liveness_ && liveness_->any_lost()) runtime_->skip_finalize();
    liveness_.reset();
    for (auto& [handle, pending] : requests_) free_requests(pending);
    requests_.clear();
    groups_.reset();
    if (owns_base_) retire(base_);
  }
  MpiTransport(const MpiTransport&) = delete;
  MpiTransport& operator=(const MpiTransport&) = delete;

  std::string name() const override { return "mpi"; }

  // NodeGroups.
  uint32_t comm_rank(NodeComm comm) const override { return groups_->rank(comm); }
  uint32_t comm_size(NodeComm comm) const override { return groups_->size(comm); }
  TransportHandle start_split_groups(NodeComm parent, std::vector<bool> include) override {
    const TransportHandle handle = next_++;
    groups_->start_split(handle, parent, std::move(include));
    return handle;
  }
  std::vector<NodeComm> take_groups(TransportHandle handle) override {
    return groups_->take(handle);
  }
  void free_group(NodeComm comm) override { groups_->free(comm); }
  PointToPoint& p2p(NodeComm comm) override { return groups_->p2p(comm); }
  uint32_t lanes() const override { return groups_->lanes(); }

  // PeerNotices.
  void send_notice(uint64_t tag, uint32_t rank, proto::Status status,
                   const std::string& text) override {
    notices_->send(tag, rank, status, text);
  }
  bool poll_notice(uint64_t& tag, uint32_t& rank, proto::Status& status,
                   std::string& text) override {
    return notices_->poll(tag, rank, status, text);
  }
  std::vector<LostPeer> check_peers(uint64_t now_ns, uint64_t interval_ns,
                                    uint64_t timeout_ns) override {
    timeout_ns_ = timeout_ns;
    return liveness_->check(now_ns, interval_ns, timeout_ns);
  }
  RetiredComms tend(uint64_t now_ns) override { return runtime_->retirement().tend(now_ns); }

  // NativeCollectives. Counts beyond MPI's int go as several calls where the operation allows
  // it (reductions: nonblocking collectives on one communicator match in start order on every
  // daemon); the caller carries the others itself beyond max_count().
  size_t max_count() const override { return max_count_; }

  TransportHandle start_allreduce(NodeComm comm, void* buffer, size_t count, proto::DType dtype,
                                  proto::RedOp op) override {
    Pending p;
    p.test_what = "MPI_Test (allreduce)";
    check(MPI_Iallreduce(MPI_IN_PLACE, buffer, checked_count(count), to_mpi(dtype),
                         to_mpi(op, dtype), groups_->comm(comm), &p.request),
          "MPI_Iallreduce");
    return remember(std::move(p));
  }

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
      check(MPI_Ireduce_scatter(MPI_IN_PLACE, buffer, p.a.data(), to_mpi(dtype), to_mpi(op, dtype),
                                groups_->comm(comm), &p.request),
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
    Pending p;
    check(MPI_Ibcast(buffer, checked_count(bytes), MPI_BYTE, static_cast<int>(root_node),
                     groups_->comm(comm), &p.request),
          "MPI_Ibcast");
    return remember(std::move(p));
  }

  TransportHandle start_allgatherv(NodeComm comm, void* buffer, std::vector<size_t> bytes,
                                   std::vector<size_t> displs) override {
    Pending p;
    p.a = to_int(bytes);
    p.b = to_int(displs);
    check(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buffer, p.a.data(), p.b.data(),
                          MPI_BYTE, groups_->comm(comm), &p.request),
          "MPI_Iallgatherv");
    return remember(std::move(p));
  }

  TransportHandle start_gatherv(NodeComm comm, void* buffer, std::vector<size_t> bytes,
                                std::vector<size_t> displs, uint32_t root_node) override {
    const uint32_t me = comm_rank(comm);
    const bool root = root_node == me;
    Pending p;
    p.a = to_int(bytes);
    p.b = to_int(displs);
    uint8_t* mine = static_cast<uint8_t*>(buffer) + displs[me];
    check(
        MPI_Igatherv(root ? MPI_IN_PLACE : mine, p.a[me], MPI_BYTE, buffer, p.a.data(), p.b.data(),
                     MPI_BYTE, static_cast<int>(root_node), groups_->comm(comm), &p.request),
        "MPI_Igatherv");
    return remember(std::move(p));
  }

  TransportHandle start_scatterv(NodeComm comm, void* buffer, std::vector<size_t> bytes,
                                 std::vector<size_t> displs, uint32_t root_node) override {
    const uint32_t me = comm_rank(comm);
    const bool root = root_node == me;
    Pending p;
    p.a = to_int(bytes);
    p.b = to_int(displs);
    uint8_t* mine = static_cast<uint8_t*>(buffer) + displs[me];
    check(
        MPI_Iscatterv(buffer, p.a.data(), p.b.data(), MPI_BYTE, root ? MPI_IN_PLACE : mine, p.a[me],
                      MPI_BYTE, static_cast<int>(root_node), groups_->comm(comm), &p.request),
        "MPI_Iscatterv");
    return remember(std::move(p));
  }

  TransportHandle start_barrier(NodeComm comm) override {
    Pending p;
    check(MPI_Ibarrier(groups_->comm(comm), &p.request), "MPI_Ibarrier");
    return remember(std::move(p));
  }

  bool test(TransportHandle handle) override {
    if (bool done = false; groups_->test(handle, done)) return done;
    auto it = requests_.find(handle);
    if (it == requests_.end()) throw TransportError(fmt::format("unknown handle {}", handle));
    Pending& p = it->second;
    try {
      int done = 0;
      check(MPI_Test(&p.request, &done, MPI_STATUS_IGNORE), p.test_what);
      if (done == 0) return false;
      // MPI_Test on a request that already completed (now MPI_REQUEST_NULL) reports it done.
      for (MPI_Request& more : p.more) {
        check(MPI_Test(&more, &done, MPI_STATUS_IGNORE), "MPI_Test");
        if (done == 0) return false;
      }
    } catch (...) {
      // The engine fails and forgets the operation: so does the transport.
      free_requests(p);
      requests_.erase(it);
      throw;
    }
    if (p.finish) p.finish();
    requests_.erase(it);
    return true;
  }

  size_t in_flight() const override { return requests_.size() + groups_->creations_in_flight(); }
  uint64_t activity() const override { return groups_->completions(); }

 private:
  // A request and the count arrays MPI reads until it completes.
  struct Pending {
    MPI_Request request = MPI_REQUEST_NULL;
    std::vector<MPI_Request> more;  // the other calls of an operation cut into several
    std::vector<int> a, b;
    std::function<void()> finish;  // runs once every request has completed
    const char* test_what = "MPI_Test";
  };

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
  static void free_requests(Pending& p) {
    if (p.request != MPI_REQUEST_NULL) MPI_Request_free(&p.request);
    for (MPI_Request& more : p.more) {
      if (more != MPI_REQUEST_NULL) MPI_Request_free(&more);
    }
  }
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
    // As chunked_transfers' message_count: every call but the last is full.
    const size_t calls = std::max<size_t>((count + max_count_ - 1) / max_count_, 1);
    // NOLINTBEGIN(clang-analyzer-optin.mpi.MPI-Checker): test() advances every request.
    for (size_t i = 0; i < calls; ++i) {
      uint8_t* at = data + i * max_count_ * elem;
      const size_t n = std::min(max_count_, count - std::min(count, i * max_count_));
      MPI_Request r = MPI_REQUEST_NULL;
      check(MPI_Ireduce(root ? MPI_IN_PLACE : at, root ? at : nullptr, checked_count(n),
                        to_mpi(dtype), to_mpi(op, dtype), static_cast<int>(root_node),
                        groups_->comm(comm), &r),
            "MPI_Ireduce");
      if (i == 0) {
        p.request = r;
      } else {
        p.more.push_back(r);
      }
    }
    // NOLINTEND(clang-analyzer-optin.mpi.MPI-Checker)
  }
  // A retired communicator is freed once quiet for twice the peers' timeout: a live peer sends a
  // heartbeat every tenth of it, and stops within one timeout of this daemon's last. At least
  // kMinQuietNs, which also covers the peers' messages that were in flight.
  void retire(MPI_Comm& comm) const {
    static constexpr uint64_t kMinQuietNs = 2'000'000'000;
    runtime_->retirement().retire(comm, ipc::monotonic_ns(),
                                  std::max(2 * timeout_ns_, kMinQuietNs));
  }

  TransportHandle remember(Pending pending) {
    const TransportHandle handle = next_++;
    requests_.emplace(handle, std::move(pending));
    return handle;
  }

  // Declared first, destroyed last: every MPI call of the members below precedes finalize.
  std::shared_ptr<MpiRuntime> runtime_;
  MPI_Comm base_;
  bool owns_base_;
  uint32_t rank_ = 0;
  uint32_t size_ = 1;
  // The largest count one MPI call takes: int (NODECOMM_TEST_MPI_MAX_COUNT may lower it).
  size_t max_count_ = static_cast<size_t>(INT_MAX);
  // The peers' timeout, as check_peers was last given it. Before the members that retire
  // communicators through retire(), which reads it, also when a throwing constructor unwinds.
  uint64_t timeout_ns_ = 0;
  std::unique_ptr<MpiGroups> groups_;
  std::unique_ptr<MpiNotices> notices_;
  std::unique_ptr<MpiPeerLiveness> liveness_;
  TransportHandle next_ = 1;
  std::unordered_map<TransportHandle, Pending> requests_;
};

}  // namespace

std::unique_ptr<Transport> make_mpi_transport_over(std::shared_ptr<MpiRuntime> runtime,
                                                   MPI_Comm base, BaseComm ownership,
                                                   uint32_t lanes) {
  try {
    return std::make_unique<MpiTransport>(std::move(runtime), base, ownership, lanes);
  } catch (...) {
    // A constructor that throws runs no destructor: its members let go of what they made,
    // and an owned base is freed here.
    if (ownership == BaseComm::kOwned) MPI_Comm_free(&base);
    throw;
  }
}

std::unique_ptr<Transport> make_mpi_transport(int* argc, char*** argv, uint32_t lanes) {
  return make_mpi_transport_over(MpiRuntime::acquire(argc, argv), MPI_COMM_WORLD,
                                 BaseComm::kBorrowed, lanes);
}

}  // namespace nodecomm::daemon
