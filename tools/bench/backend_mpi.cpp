// The MPI backend: MPI's own collectives among all ranks of an `mpirun`, as the baseline
// nodecomm is compared with and the ground truth its results are checked against. This is
// the only file of the bench that includes mpi.h (the daemon includes it in its network layer).
// Only the C API: Open MPI's and MPICH's mpi.h otherwise pull in the deprecated C++
// bindings when compiled as C++, which need libmpi_cxx (MPI::MPI_C does not provide it).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <fmt/format.h>
#include <mpi.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend.hpp"
#include "baseline.hpp"
#include "check.hpp"
#include "host_reduce.hpp"
#include "launch_env.hpp"

namespace nodecomm::bench {
namespace {

// The MPI type of a dtype. MPI has no 16-bit floating-point type: f16 and bf16 travel as
// MPI_UINT16_T, and reductions on them use the operations of HalfOps.
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
    case NC_F16:
    case NC_BF16:
      return MPI_UINT16_T;
  }
  return MPI_DATATYPE_NULL;
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

// MPI's user operation for f16 and bf16 (inout = in OP inout).
template <nc_dtype_t Dtype, nc_redop_t Op>
void half_op(void* in, void* inout, int* len, MPI_Datatype*) {
  combine(Dtype, Op, inout, in, inout, static_cast<size_t>(*len));
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

// MPI's int counts and displacements from nodecomm's size_t ones.
std::vector<int> to_int(const std::vector<size_t>& values, std::string_view name) {
  std::vector<int> out;
  out.reserve(values.size());
  for (size_t v : values) {
    if (v > static_cast<size_t>(INT32_MAX)) {
      throw BackendError(fmt::format(
          "{}: a count or displacement of {} elements exceeds MPI's int limit of {} (the MPI "
          "baseline posts one call per collective; nodecomm itself carries larger ones)",
          name, v, INT32_MAX));
    }
    out.push_back(static_cast<int>(v));
  }
  return out;
}

class MpiBackend final : public BaselineBackend {
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
    // The node's name for node_index(): its first rank's world rank.
    node_index_ = rank_;
    MPI_Bcast(&node_index_, 1, MPI_INT, 0, node);
    MPI_Comm_free(&node);
    // One leader per shared-memory domain (node): counting the leaders counts the nodes.
    int leader = local_rank == 0 ? 1 : 0;
    MPI_Allreduce(&leader, &nodes_, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    // Under nodecomm-launch --backend mpi every simulated node is this one machine to MPI;
    // the launcher says how many nodes the ranks stand for, and that is what is reported
    // (and what the link efficiency divides by).
    if (const LaunchLayout layout = launch_layout(size_); layout.nodes > 0) {
      nodes_ = layout.nodes;
      local_size_ = layout.local_size;
      if (layout.node >= 0) node_index_ = layout.node;
    }
    // From here on errors are returned, so that the report can say which size and iteration
    // failed; finalize(false) then aborts the job so that no peer is left waiting.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    group_rank_ = rank_;
    group_size_ = size_;
  }

  ~MpiBackend() override { finalize(true); }

  std::string_view name() const override { return "mpi"; }
  int world_rank() const override { return rank_; }
  int world_size() const override { return size_; }
  int node_count() const override { return nodes_; }
  int local_size() const override { return local_size_; }
  int group_rank() const override { return group_rank_; }
  int group_size() const override { return group_size_; }

  void split(int color, int key) override {
    // The new communicator inherits MPI_ERRORS_RETURN from the world.
    check_mpi("MPI_Comm_split", MPI_Comm_split(MPI_COMM_WORLD, color, key, &group_));
    check_mpi("MPI_Comm_rank", MPI_Comm_rank(group_, &group_rank_));
    check_mpi("MPI_Comm_size", MPI_Comm_size(group_, &group_size_));
  }

  void run(const Call& c) override {
    const std::string_view name = collective_name(c.collective);
    const MPI_Datatype type = mpi_type(c.dtype);
    if (type == MPI_DATATYPE_NULL) {
      throw BackendError(fmt::format("{}: unsupported dtype {}", name, static_cast<int>(c.dtype)));
    }
    if (c.count > static_cast<size_t>(INT32_MAX)) {
      throw BackendError(fmt::format(
          "{}: {} elements exceed MPI's int limit of {} (the MPI baseline posts one call per "
          "collective; nodecomm itself carries larger ones)",
          name, c.count, INT32_MAX));
    }
    const int n = static_cast<int>(c.count);
    const size_t bytes = c.count * dtype_bytes(c.dtype);
    const MPI_Comm comm = c.in_group && group_ != MPI_COMM_NULL ? group_ : MPI_COMM_WORLD;
    const int comm_size = c.in_group ? group_size_ : size_;
    const bool root = (c.in_group ? group_rank_ : rank_) == c.root;
    MPI_Op op = MPI_OP_NULL;
    if (is_reducing(c.collective)) op = reduction(c.dtype, c.op);
    switch (c.collective) {
      case Collective::kAllreduce:
        check_mpi("MPI_Allreduce",
                  MPI_Allreduce(c.inplace ? MPI_IN_PLACE : c.send, c.recv, n, type, op, comm));
        if (c.op == NC_AVG) divide_average(c.recv, c.count, c.dtype, comm_size);
        break;
      case Collective::kReduce:
        // In place at the root only; elsewhere MPI ignores the receive buffer.
        check_mpi("MPI_Reduce",
                  MPI_Reduce(c.inplace && root ? MPI_IN_PLACE : c.send,
                             c.inplace && !root ? nullptr : c.recv, n, type, op, c.root, comm));
        if (c.op == NC_AVG && root) divide_average(c.recv, c.count, c.dtype, comm_size);
        break;
      case Collective::kBroadcast:
        // MPI broadcasts one buffer: out of place, the root first copies send into recv.
        if (root && c.send != c.recv) std::memcpy(c.recv, c.send, bytes);
        check_mpi("MPI_Bcast", MPI_Bcast(c.recv, n, type, c.root, comm));
        break;
      case Collective::kReduceScatter:
        if (c.inplace) {
          // MPI_IN_PLACE here would leave the result at the start of the buffer and overwrite
          // block 0 of the input, where NCCL leaves it at block `rank` and the input alone; a
          // scratch block keeps NCCL's layout.
          scratch_.resize(bytes);
          check_mpi("MPI_Reduce_scatter_block",
                    MPI_Reduce_scatter_block(c.send, scratch_.data(), n, type, op, comm));
          std::memcpy(c.recv, scratch_.data(), bytes);
        } else {
          check_mpi("MPI_Reduce_scatter_block",
                    MPI_Reduce_scatter_block(c.send, c.recv, n, type, op, comm));
        }
        if (c.op == NC_AVG) divide_average(c.recv, c.count, c.dtype, comm_size);
        break;
      case Collective::kAllgather:
        // In place, MPI takes each rank's contribution from its own block of recv, as NCCL.
        check_mpi("MPI_Allgather",
                  c.inplace
                      ? MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, c.recv, n, type, comm)
                      : MPI_Allgather(c.send, n, type, c.recv, n, type, comm));
        break;
      case Collective::kGather:
        check_mpi("MPI_Gather",
                  MPI_Gather(c.inplace && root ? MPI_IN_PLACE : c.send, n, type,
                             c.inplace && !root ? nullptr : c.recv, n, type, c.root, comm));
        break;
      case Collective::kScatter:
        check_mpi("MPI_Scatter",
                  MPI_Scatter(c.inplace && !root ? nullptr : c.send, n, type,
                              c.inplace && root ? MPI_IN_PLACE : c.recv, n, type, c.root, comm));
        break;
      case Collective::kAlltoall:
        check_mpi("MPI_Alltoall", MPI_Alltoall(c.send, n, type, c.recv, n, type, comm));
        break;
      case Collective::kBarrier:
        check_mpi("MPI_Barrier", MPI_Barrier(comm));
        break;
      case Collective::kAllgatherv: {
        if (c.vector == nullptr) throw BackendError("allgatherv: no counts");
        const std::vector<int> counts = to_int(c.vector->recv_counts, name);
        const std::vector<int> displs = to_int(c.vector->recv_displs, name);
        check_mpi("MPI_Allgatherv",
                  MPI_Allgatherv(c.send, static_cast<int>(c.vector->send_count), type, c.recv,
                                 counts.data(), displs.data(), type, comm));
        break;
      }
      case Collective::kAlltoallv: {
        if (c.vector == nullptr) throw BackendError("alltoallv: no counts");
        const std::vector<int> send_counts = to_int(c.vector->send_counts, name);
        const std::vector<int> send_displs = to_int(c.vector->send_displs, name);
        const std::vector<int> recv_counts = to_int(c.vector->recv_counts, name);
        const std::vector<int> recv_displs = to_int(c.vector->recv_displs, name);
        check_mpi("MPI_Alltoallv",
                  MPI_Alltoallv(c.send, send_counts.data(), send_displs.data(), type, c.recv,
                                recv_counts.data(), recv_displs.data(), type, comm));
        break;
      }
    }
  }

  // Allreduce only: what the workload, the probe and --batch need. Per-operation attributes
  // have no MPI equivalent and are ignored.
  Pending post(const Call& c) override {
    if (c.collective != Collective::kAllreduce) {
      throw BackendError(fmt::format("{}: only allreduce is posted non-blocking with MPI",
                                     collective_name(c.collective)));
    }
    const MPI_Datatype type = mpi_type(c.dtype);
    if (type == MPI_DATATYPE_NULL || c.count > static_cast<size_t>(INT32_MAX)) {
      throw BackendError(fmt::format(
          "allreduce: {} elements of dtype {} cannot be posted (an unsupported dtype, or more "
          "than MPI's int limit of {} elements)",
          c.count, static_cast<int>(c.dtype), INT32_MAX));
    }
    const MPI_Comm comm = c.in_group && group_ != MPI_COMM_NULL ? group_ : MPI_COMM_WORLD;
    size_t slot = 0;
    if (free_slots_.empty()) {
      slot = slots_.size();
      slots_.emplace_back();
    } else {
      slot = free_slots_.back();
      free_slots_.pop_back();
    }
    Slot& sl = slots_[slot];
    sl = Slot{};
    sl.recv = c.recv;
    sl.count = c.count;
    sl.dtype = c.dtype;
    sl.average = c.op == NC_AVG;
    sl.comm_size = c.in_group ? group_size_ : size_;
    const int rc =
        MPI_Iallreduce(c.inplace ? MPI_IN_PLACE : c.send, c.recv, static_cast<int>(c.count), type,
                       reduction(c.dtype, c.op), comm, &sl.request);
    if (rc != MPI_SUCCESS) {
      free_slots_.push_back(slot);
      throw BackendError(mpi_error("MPI_Iallreduce", rc));
    }
    return slot + 1;
  }

  bool test(Pending pending) override {
    Slot& sl = slot_of(pending);
    int done = 0;
    check_mpi("MPI_Test", MPI_Test(&sl.request, &done, MPI_STATUS_IGNORE));
    if (done != 0) finish(pending);
    return done != 0;
  }

  void wait(Pending pending) override {
    check_mpi("MPI_Wait", MPI_Wait(&slot_of(pending).request, MPI_STATUS_IGNORE));
    finish(pending);
  }

  void wait_all(std::span<Pending> pending) override {
    requests_.clear();
    for (Pending p : pending) {
      if (p != 0) requests_.push_back(slot_of(p).request);
    }
    check_mpi("MPI_Waitall", MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(),
                                         MPI_STATUSES_IGNORE));
    for (Pending& p : pending) {
      if (p == 0) continue;
      slot_of(p).request = MPI_REQUEST_NULL;
      finish(p);
      p = 0;
    }
  }

  int node_index() const override { return node_index_; }

  void sync() override { check_mpi("MPI_Barrier", MPI_Barrier(MPI_COMM_WORLD)); }

  void finalize(bool ok) noexcept override {
    if (!initialized_) return;
    initialized_ = false;
    // A rank that stops after a failure would leave the others in their next collective.
    if (!ok && size_ > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    if (group_ != MPI_COMM_NULL) MPI_Comm_free(&group_);
    for (MPI_Op& op : half_ops_) {
      if (op != MPI_OP_NULL) MPI_Op_free(&op);
    }
    MPI_Finalize();
  }

 private:
  // MPI's operation for a redop on a dtype; for f16/bf16 one of ours, created on first use.
  MPI_Op reduction(nc_dtype_t dtype, nc_redop_t op) {
    if (!is_half(dtype)) return mpi_op(op);
    const int which = (dtype == NC_BF16 ? 5 : 0) + static_cast<int>(op);
    MPI_Op& slot = half_ops_.at(static_cast<size_t>(which));
    if (slot == MPI_OP_NULL) {
      MPI_User_function* fn =
          dtype == NC_F16 ? half_function<NC_F16>(op) : half_function<NC_BF16>(op);
      check_mpi("MPI_Op_create", MPI_Op_create(fn, /*commute=*/1, &slot));
    }
    return slot;
  }

  template <nc_dtype_t Dtype>
  static MPI_User_function* half_function(nc_redop_t op) {
    switch (op) {
      case NC_SUM:
      case NC_AVG:  // divided afterwards, like the other types
        return &half_op<Dtype, NC_SUM>;
      case NC_PROD:
        return &half_op<Dtype, NC_PROD>;
      case NC_MIN:
        return &half_op<Dtype, NC_MIN>;
      case NC_MAX:
        return &half_op<Dtype, NC_MAX>;
    }
    throw BackendError(fmt::format("no MPI operation for redop {}", static_cast<int>(op)));
  }

  // One posted allreduce: its request and what completing it still has to do (avg).
  struct Slot {
    MPI_Request request = MPI_REQUEST_NULL;
    void* recv = nullptr;
    size_t count = 0;
    nc_dtype_t dtype = NC_F32;
    bool average = false;
    int comm_size = 1;
  };

  Slot& slot_of(Pending pending) {
    if (pending == 0 || pending > slots_.size()) {
      throw BackendError(fmt::format("no such pending operation {}", pending));
    }
    return slots_[pending - 1];
  }

  void finish(Pending pending) {
    Slot& sl = slots_[pending - 1];
    if (sl.average) divide_average(sl.recv, sl.count, sl.dtype, sl.comm_size);
    sl = Slot{};
    free_slots_.push_back(pending - 1);
  }

  bool initialized_ = false;
  int rank_ = 0;
  int node_index_ = 0;
  int size_ = 1;
  int nodes_ = 1;
  int local_size_ = 1;
  MPI_Comm group_ = MPI_COMM_NULL;  // split()'s, for Call::in_group; null: the world
  int group_rank_ = 0;
  int group_size_ = 1;
  std::array<MPI_Op, 10> half_ops_ = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL,
                                      MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL,
                                      MPI_OP_NULL, MPI_OP_NULL};  // [f16|bf16][redop]
  std::vector<unsigned char> scratch_;                            // in-place reduce_scatter
  std::vector<Slot> slots_;                                       // post()'s, by Pending - 1
  std::vector<size_t> free_slots_;
  std::vector<MPI_Request> requests_;  // wait_all's
};

}  // namespace

std::unique_ptr<Backend> make_mpi_backend() {
  return std::make_unique<MpiBackend>();
}

}  // namespace nodecomm::bench
