// The only file of nodecomm's service that talks to MPI.
// The C API only: the deprecated C++ bindings would need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <fmt/format.h>
#include <mpi.h>

#include <unordered_map>

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
    for (auto& [handle, request] : requests_) MPI_Request_free(&request);
    MPI_Finalize();
  }

  uint32_t node_index() const override { return rank_; }
  uint32_t node_count() const override { return size_; }
  std::string name() const override { return "mpi"; }

  TransportHandle start_allreduce(void* buffer, size_t count, proto::DType dtype,
                                  proto::RedOp op) override {
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Iallreduce(MPI_IN_PLACE, buffer, checked_count(count), to_mpi(dtype), to_mpi(op),
                         MPI_COMM_WORLD, &request),
          "MPI_Iallreduce");
    // The checker cannot see that test() completes the request through the handle.
    return remember(request);  // NOLINT(clang-analyzer-optin.mpi.MPI-Checker)
  }

  TransportHandle start_allgather(const void* send, size_t bytes, void* recv) override {
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Iallgather(send, checked_count(bytes), MPI_BYTE, recv, checked_count(bytes), MPI_BYTE,
                         MPI_COMM_WORLD, &request),
          "MPI_Iallgather");
    // The checker cannot see that test() completes the request through the handle.
    return remember(request);  // NOLINT(clang-analyzer-optin.mpi.MPI-Checker)
  }

  bool test(TransportHandle handle) override {
    auto it = requests_.find(handle);
    if (it == requests_.end()) throw TransportError(fmt::format("unknown handle {}", handle));
    int done = 0;
    check(MPI_Test(&it->second, &done, MPI_STATUS_IGNORE), "MPI_Test");
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
  TransportHandle remember(MPI_Request request) {
    const TransportHandle handle = next_++;
    requests_.emplace(handle, request);
    return handle;
  }

  uint32_t rank_ = 0;
  uint32_t size_ = 1;
  TransportHandle next_ = 1;
  std::unordered_map<TransportHandle, MPI_Request> requests_;
};

}  // namespace

std::unique_ptr<Transport> make_mpi_transport(int* argc, char*** argv) {
  return std::make_unique<MpiTransport>(argc, argv);
}

}  // namespace nodecomm::daemon
