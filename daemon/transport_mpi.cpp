// The only file of nodecomm's service that talks to MPI.
// The C API only: the deprecated C++ bindings would need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <fmt/format.h>
#include <mpi.h>

#include <atomic>
#include <memory>
#include <thread>
#include <unordered_map>
#include <vector>

#include "transport.hpp"

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

class MpiTransport final : public Transport {
 public:
  MpiTransport(int* argc, char*** argv) {
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
  }
  ~MpiTransport() override {
    for (auto& [handle, job] : group_jobs_) {
      // A creation still blocked in MPI (a peer died) must not hang the shutdown.
      if (job->done.load(std::memory_order_acquire)) {
        job->thread.join();
      } else {
        job->thread.detach();
      }
    }
    for (auto& [handle, pending] : requests_) MPI_Request_free(&pending.request);
    for (auto& [id, comm] : comms_) MPI_Comm_free(&comm);
    MPI_Finalize();
  }

  uint32_t node_index() const override { return rank_; }
  uint32_t node_count() const override { return size_; }
  std::string name() const override { return "mpi"; }

  TransportHandle start_allreduce(NodeComm comm, void* buffer, size_t count, proto::DType dtype,
                                  proto::RedOp op) override {
    Pending p;
    check(MPI_Iallreduce(MPI_IN_PLACE, buffer, checked_count(count), to_mpi(dtype), to_mpi(op),
                         handle_of(comm), &p.request),
          "MPI_Iallreduce");
    return remember(std::move(p));
  }

  TransportHandle start_reduce(NodeComm comm, void* buffer, size_t count, proto::DType dtype,
                               proto::RedOp op, uint32_t root_node) override {
    Pending p;
    const int me = rank_in(comm);
    const bool root = static_cast<int>(root_node) == me;
    check(MPI_Ireduce(root ? MPI_IN_PLACE : buffer, root ? buffer : nullptr, checked_count(count),
                      to_mpi(dtype), to_mpi(op), static_cast<int>(root_node), handle_of(comm),
                      &p.request),
          "MPI_Ireduce");
    return remember(std::move(p));
  }

  TransportHandle start_reduce_scatter(NodeComm comm, void* buffer, std::vector<int> node_counts,
                                       proto::DType dtype, proto::RedOp op) override {
    Pending p;
    p.a = std::move(node_counts);
    check(MPI_Ireduce_scatter(MPI_IN_PLACE, buffer, p.a.data(), to_mpi(dtype), to_mpi(op),
                              handle_of(comm), &p.request),
          "MPI_Ireduce_scatter");
    return remember(std::move(p));
  }

  TransportHandle start_broadcast(NodeComm comm, void* buffer, size_t bytes,
                                  uint32_t root_node) override {
    Pending p;
    check(MPI_Ibcast(buffer, checked_count(bytes), MPI_BYTE, static_cast<int>(root_node),
                     handle_of(comm), &p.request),
          "MPI_Ibcast");
    return remember(std::move(p));
  }

  TransportHandle start_allgatherv(NodeComm comm, void* buffer, std::vector<int> bytes,
                                   std::vector<int> displs) override {
    Pending p;
    p.a = std::move(bytes);
    p.b = std::move(displs);
    check(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buffer, p.a.data(), p.b.data(),
                          MPI_BYTE, handle_of(comm), &p.request),
          "MPI_Iallgatherv");
    return remember(std::move(p));
  }

  TransportHandle start_gatherv(NodeComm comm, void* buffer, std::vector<int> bytes,
                                std::vector<int> displs, uint32_t root_node) override {
    Pending p;
    p.a = std::move(bytes);
    p.b = std::move(displs);
    const int me = rank_in(comm);
    const bool root = static_cast<int>(root_node) == me;
    char* mine = static_cast<char*>(buffer) + p.b[me];
    check(
        MPI_Igatherv(root ? MPI_IN_PLACE : mine, p.a[me], MPI_BYTE, buffer, p.a.data(), p.b.data(),
                     MPI_BYTE, static_cast<int>(root_node), handle_of(comm), &p.request),
        "MPI_Igatherv");
    return remember(std::move(p));
  }

  TransportHandle start_scatterv(NodeComm comm, void* buffer, std::vector<int> bytes,
                                 std::vector<int> displs, uint32_t root_node) override {
    Pending p;
    p.a = std::move(bytes);
    p.b = std::move(displs);
    const int me = rank_in(comm);
    const bool root = static_cast<int>(root_node) == me;
    char* mine = static_cast<char*>(buffer) + p.b[me];
    check(
        MPI_Iscatterv(buffer, p.a.data(), p.b.data(), MPI_BYTE, root ? MPI_IN_PLACE : mine, p.a[me],
                      MPI_BYTE, static_cast<int>(root_node), handle_of(comm), &p.request),
        "MPI_Iscatterv");
    return remember(std::move(p));
  }

  TransportHandle start_alltoallv(NodeComm comm, const void* send, std::vector<int> sbytes,
                                  std::vector<int> sdispls, void* recv, std::vector<int> rbytes,
                                  std::vector<int> rdispls) override {
    Pending p;
    p.a = std::move(sbytes);
    p.b = std::move(sdispls);
    p.c = std::move(rbytes);
    p.d = std::move(rdispls);
    check(MPI_Ialltoallv(send, p.a.data(), p.b.data(), MPI_BYTE, recv, p.c.data(), p.d.data(),
                         MPI_BYTE, handle_of(comm), &p.request),
          "MPI_Ialltoallv");
    return remember(std::move(p));
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
      finished_groups_.emplace(handle, std::move(job->second->made));
      group_jobs_.erase(job);
      check(status, "MPI_Comm_split");
      return true;
    }
    auto it = requests_.find(handle);
    if (it == requests_.end()) throw TransportError(fmt::format("unknown handle {}", handle));
    int done = 0;
    check(MPI_Test(&it->second.request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done == 0) return false;
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
    job->thread = std::thread([job, parent_comm, parent_rank, include = std::move(include)] {
      for (bool in : include) {
        MPI_Comm created = MPI_COMM_NULL;
        job->status = MPI_Comm_split(parent_comm, in ? 0 : MPI_UNDEFINED, parent_rank, &created);
        if (job->status != MPI_SUCCESS) break;
        job->made.push_back(created);
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
    for (MPI_Comm c : it->second) {
      if (c == MPI_COMM_NULL) {
        ids.push_back(kAllNodes);
        continue;
      }
      MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
      ids.push_back(next_comm_);
      comms_.emplace(next_comm_++, c);
    }
    finished_groups_.erase(it);
    return ids;
  }

  void free_group(NodeComm comm) override {
    auto it = comms_.find(comm);
    if (it == comms_.end()) return;
    MPI_Comm_free(&it->second);
    comms_.erase(it);
  }

  size_t in_flight() const override { return requests_.size() + group_jobs_.size(); }

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
  };

  struct Pending {
    MPI_Request request = MPI_REQUEST_NULL;
    std::vector<int> a, b, c, d;
  };

  TransportHandle remember(Pending pending) {
    const TransportHandle handle = next_++;
    requests_.emplace(handle, std::move(pending));
    return handle;
  }

  MPI_Comm handle_of(NodeComm comm) const {
    if (comm == kAllNodes) return MPI_COMM_WORLD;
    auto it = comms_.find(comm);
    if (it == comms_.end()) throw TransportError(fmt::format("unknown node communicator {}", comm));
    return it->second;
  }
  int rank_in(NodeComm comm) const {
    int rank = 0;
    MPI_Comm_rank(handle_of(comm), &rank);
    return rank;
  }

  uint32_t rank_ = 0;
  NodeComm next_comm_ = 1;
  std::unordered_map<NodeComm, MPI_Comm> comms_;
  std::unordered_map<TransportHandle, std::shared_ptr<GroupJob>> group_jobs_;
  std::unordered_map<TransportHandle, std::vector<MPI_Comm>> finished_groups_;
  bool thread_multiple_ = false;
  uint32_t size_ = 1;
  TransportHandle next_ = 1;
  std::unordered_map<TransportHandle, Pending> requests_;
};

}  // namespace

std::unique_ptr<Transport> make_mpi_transport(int* argc, char*** argv) {
  return std::make_unique<MpiTransport>(argc, argv);
}

}  // namespace nodecomm::daemon
