// The MPI backend: MPI_Allreduce among all ranks of an `mpirun`, as the baseline nodecomm is
// compared with. This is the only file that includes mpi.h.
// Only the C API: Open MPI's and MPICH's mpi.h otherwise pull in the deprecated C++
// bindings when compiled as C++, which need libmpi_cxx (MPI::MPI_C does not provide it).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <fmt/format.h>
#include <mpi.h>

#include <cstdlib>
#include <string>

#include "backend.hpp"

namespace nodecomm::bench {
namespace {

bool is_integer(nc_dtype_t dtype) {
  return dtype == NC_I32 || dtype == NC_I64 || dtype == NC_I8 || dtype == NC_U8;
}

// MPI_DATATYPE_NULL for types MPI cannot reduce (it has no 16-bit floating-point type).
MPI_Datatype mpi_type(nc_dtype_t dtype) {
  switch (dtype) {
    case NC_F32:
      return MPI_FLOAT;
    case NC_F64:
      return MPI_DOUBLE;
    case NC_I32:
      return MPI_INT32_T;
    case NC_I64:
      return MPI_INT64_T;
    case NC_I8:
      return MPI_INT8_T;
    case NC_U8:
      return MPI_UINT8_T;
    default:
      return MPI_DATATYPE_NULL;
  }
}

MPI_Op mpi_op(nc_redop_t op) {
  switch (op) {
    case NC_SUM:
      return MPI_SUM;
    case NC_PROD:
      return MPI_PROD;
    case NC_MIN:
      return MPI_MIN;
    case NC_MAX:
      return MPI_MAX;
    case NC_AVG:
      return MPI_SUM;  // divided afterwards: MPI has no average
  }
  return MPI_OP_NULL;
}

template <class T>
void divide(void* data, size_t count, int n) {
  T* p = static_cast<T*>(data);
  const T divisor = static_cast<T>(n);
  for (size_t i = 0; i < count; ++i) p[i] /= divisor;
}

std::string mpi_error(const char* call, int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
  return fmt::format("{} failed: {}", call, len > 0 ? std::string(text, len) : "unknown error");
}

void check_mpi(const char* call, int code) {
  if (code != MPI_SUCCESS) throw BackendError(mpi_error(call, code));
}

class MpiBackend final : public Backend {
 public:
  MpiBackend() {
    // argc/argv are not needed: mpirun passes everything MPI needs through the environment,
    // and CLI11 has already consumed the command line.
    if (const int rc = MPI_Init(nullptr, nullptr); rc != MPI_SUCCESS) {
      throw BackendError(mpi_error("MPI_Init", rc));
    }
    initialized_ = true;
    // Setup runs under MPI's default fatal error handler: a failure here aborts the whole job
    // with MPI's own message, which is all there is to say about it.
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Comm node = MPI_COMM_NULL;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
    int local_rank = 0;
    MPI_Comm_rank(node, &local_rank);
    MPI_Comm_size(node, &local_size_);
    MPI_Comm_free(&node);
    // One leader per shared-memory domain (node): counting the leaders counts the nodes.
    int leader = local_rank == 0 ? 1 : 0;
    MPI_Allreduce(&leader, &nodes_, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    // From here on errors are returned, so that the report can say which size and iteration
    // failed; finalize(false) then aborts the job so that no peer is left waiting.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  }

  ~MpiBackend() override { finalize(true); }

  std::string_view name() const override { return "mpi"; }
  int world_rank() const override { return rank_; }
  int world_size() const override { return size_; }
  int node_count() const override { return nodes_; }
  int local_size() const override { return local_size_; }
  std::string buffer_kind() const override { return "malloc"; }

  std::optional<Rejection> reject(nc_dtype_t dtype, nc_redop_t op) const override {
    if (mpi_type(dtype) == MPI_DATATYPE_NULL) {
      return Rejection{fmt::format("--dtype {} is not supported by --backend mpi (MPI has no "
                                   "16-bit floating-point type); use f32 f64 i32 i64 i8 or u8",
                                   nc_dtype_name(dtype) ? nc_dtype_name(dtype) : "?"),
                       2};
    }
    // Mirrors nodecomm, which rejects avg on integers with NC_ERR_INVALID_ARGUMENT (an
    // integer average would have to pick a rounding), so both backends fail alike.
    if (op == NC_AVG && is_integer(dtype)) {
      return Rejection{fmt::format("--redop avg is only defined for floating-point types, not "
                                   "{} (nodecomm rejects it too)",
                                   nc_dtype_name(dtype)),
                       1};
    }
    return std::nullopt;
  }

  void* alloc(size_t bytes) override {
    // Page alignment, like nc_alloc for large buffers, so both backends see equally aligned
    // memory.
    void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (p == nullptr) throw BackendError(fmt::format("aligned_alloc of {} bytes failed", bytes));
    return p;
  }

  void free(void* ptr) noexcept override { std::free(ptr); }

  void allreduce(const void* send, void* recv, size_t count, nc_dtype_t dtype,
                 nc_redop_t op) override {
    const MPI_Datatype type = mpi_type(dtype);
    if (type == MPI_DATATYPE_NULL || mpi_op(op) == MPI_OP_NULL) {
      throw BackendError(fmt::format("MPI_Allreduce: unsupported dtype {} / op {}",
                                     static_cast<int>(dtype), static_cast<int>(op)));
    }
    if (count > static_cast<size_t>(INT32_MAX)) {
      throw BackendError(fmt::format("MPI_Allreduce: {} elements exceed MPI's int count", count));
    }
    check_mpi("MPI_Allreduce",
              MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, static_cast<int>(count), type,
                            mpi_op(op), MPI_COMM_WORLD));
    if (op == NC_AVG) {
      if (dtype == NC_F32) divide<float>(recv, count, size_);
      if (dtype == NC_F64) divide<double>(recv, count, size_);
    }
  }

  void sync() override { check_mpi("MPI_Barrier", MPI_Barrier(MPI_COMM_WORLD)); }

  void finalize(bool ok) noexcept override {
    if (!initialized_) return;
    initialized_ = false;
    // A rank that stops after a failure would leave the others in their next collective.
    if (!ok && size_ > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Finalize();
  }

 private:
  bool initialized_ = false;
  int rank_ = 0;
  int size_ = 1;
  int nodes_ = 1;
  int local_size_ = 1;
};

}  // namespace

std::unique_ptr<Backend> make_mpi_backend() {
  return std::make_unique<MpiBackend>();
}

}  // namespace nodecomm::bench
