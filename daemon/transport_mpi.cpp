// The only file of nodecomm's service that talks to MPI.
// The C API only: the deprecated C++ bindings would need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <fmt/format.h>
#include <mpi.h>

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
    MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
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
    for (auto& [handle, pending] : requests_) MPI_Request_free(&pending.request);
    MPI_Finalize();
  }

  uint32_t node_index() const override { return rank_; }
  uint32_t node_count() const override { return size_; }
  std::string name() const override { return "mpi"; }

  TransportHandle start_allreduce(void* buffer, size_t count, proto::DType dtype,
                                  proto::RedOp op) override {
    Pending p;
    check(MPI_Iallreduce(MPI_IN_PLACE, buffer, checked_count(count), to_mpi(dtype), to_mpi(op),
                         MPI_COMM_WORLD, &p.request),
          "MPI_Iallreduce");
    return remember(std::move(p));
  }

  TransportHandle start_reduce(void* buffer, size_t count, proto::DType dtype, proto::RedOp op,
                               uint32_t root_node) override {
    Pending p;
    const bool root = root_node == rank_;
    check(MPI_Ireduce(root ? MPI_IN_PLACE : buffer, root ? buffer : nullptr, checked_count(count),
                      to_mpi(dtype), to_mpi(op), static_cast<int>(root_node), MPI_COMM_WORLD,
                      &p.request),
          "MPI_Ireduce");
    return remember(std::move(p));
  }

  TransportHandle start_reduce_scatter(void* buffer, std::vector<int> node_counts,
                                       proto::DType dtype, proto::RedOp op) override {
    Pending p;
    p.a = std::move(node_counts);
    check(MPI_Ireduce_scatter(MPI_IN_PLACE, buffer, p.a.data(), to_mpi(dtype), to_mpi(op),
                              MPI_COMM_WORLD, &p.request),
          "MPI_Ireduce_scatter");
    return remember(std::move(p));
  }

  TransportHandle start_broadcast(void* buffer, size_t bytes, uint32_t root_node) override {
    Pending p;
    check(MPI_Ibcast(buffer, checked_count(bytes), MPI_BYTE, static_cast<int>(root_node),
                     MPI_COMM_WORLD, &p.request),
          "MPI_Ibcast");
    return remember(std::move(p));
  }

  TransportHandle start_allgatherv(void* buffer, std::vector<int> bytes,
                                   std::vector<int> displs) override {
    Pending p;
    p.a = std::move(bytes);
    p.b = std::move(displs);
    check(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buffer, p.a.data(), p.b.data(),
                          MPI_BYTE, MPI_COMM_WORLD, &p.request),
          "MPI_Iallgatherv");
    return remember(std::move(p));
  }

  TransportHandle start_gatherv(void* buffer, std::vector<int> bytes, std::vector<int> displs,
                                uint32_t root_node) override {
    Pending p;
    p.a = std::move(bytes);
    p.b = std::move(displs);
    const bool root = root_node == rank_;
    char* mine = static_cast<char*>(buffer) + p.b[rank_];
    check(
        MPI_Igatherv(root ? MPI_IN_PLACE : mine, p.a[rank_], MPI_BYTE, buffer, p.a.data(),
                     p.b.data(), MPI_BYTE, static_cast<int>(root_node), MPI_COMM_WORLD, &p.request),
        "MPI_Igatherv");
    return remember(std::move(p));
  }

  TransportHandle start_scatterv(void* buffer, std::vector<int> bytes, std::vector<int> displs,
                                 uint32_t root_node) override {
    Pending p;
    p.a = std::move(bytes);
    p.b = std::move(displs);
    const bool root = root_node == rank_;
    char* mine = static_cast<char*>(buffer) + p.b[rank_];
    check(MPI_Iscatterv(buffer, p.a.data(), p.b.data(), MPI_BYTE, root ? MPI_IN_PLACE : mine,
                        p.a[rank_], MPI_BYTE, static_cast<int>(root_node), MPI_COMM_WORLD,
                        &p.request),
          "MPI_Iscatterv");
    return remember(std::move(p));
  }

  TransportHandle start_alltoallv(const void* send, std::vector<int> sbytes,
                                  std::vector<int> sdispls, void* recv, std::vector<int> rbytes,
                                  std::vector<int> rdispls) override {
    Pending p;
    p.a = std::move(sbytes);
    p.b = std::move(sdispls);
    p.c = std::move(rbytes);
    p.d = std::move(rdispls);
    check(MPI_Ialltoallv(send, p.a.data(), p.b.data(), MPI_BYTE, recv, p.c.data(), p.d.data(),
                         MPI_BYTE, MPI_COMM_WORLD, &p.request),
          "MPI_Ialltoallv");
    return remember(std::move(p));
  }

  TransportHandle start_barrier() override {
    Pending p;
    check(MPI_Ibarrier(MPI_COMM_WORLD, &p.request), "MPI_Ibarrier");
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
    auto it = requests_.find(handle);
    if (it == requests_.end()) throw TransportError(fmt::format("unknown handle {}", handle));
    int done = 0;
    check(MPI_Test(&it->second.request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done == 0) return false;
    requests_.erase(it);
    return true;
  }

  size_t in_flight() const override { return requests_.size(); }

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
  struct Pending {
    MPI_Request request = MPI_REQUEST_NULL;
    std::vector<int> a, b, c, d;
  };

  TransportHandle remember(Pending pending) {
    const TransportHandle handle = next_++;
    requests_.emplace(handle, std::move(pending));
    return handle;
  }

  uint32_t rank_ = 0;
  uint32_t size_ = 1;
  TransportHandle next_ = 1;
  std::unordered_map<TransportHandle, Pending> requests_;
};

}  // namespace

std::unique_ptr<Transport> make_mpi_transport(int* argc, char*** argv) {
  return std::make_unique<MpiTransport>(argc, argv);
}

}  // namespace nodecomm::daemon
