// The nodecomm backend: the daemon runs the collectives; this process only posts and waits.
// Uses the C API directly because the C++ wrapper is typed (float/double/int32/int64 only)
// and the benchmark must drive every dtype through untyped buffers.
#include <fmt/format.h>

#include <cstdlib>
#include <string>

#include "backend.hpp"
#include "nodecomm.h"

namespace nodecomm::bench {
namespace {

std::string describe_status(const char* call, nc_status_t status) {
  return fmt::format("{} failed: {} ({}): {}", call, nc_status_string(status),
                     static_cast<int>(status), nc_last_error());
}

class NodecommBackend final : public Backend {
 public:
  explicit NodecommBackend(const NodecommBackendOptions& options) : use_arena_(options.use_arena) {
    nc_init_options_t init;
    nc_init_options_default(&init);
    init.arena_bytes = options.arena_bytes;
    if (const nc_status_t s = nc_init(&init, &ctx_); s != NC_OK) {
      ctx_ = nullptr;
      throw BackendError(describe_status("nc_init", s));
    }
    // The sync operation gets its own arena word so that it is never confused with, or
    // slowed by, the copy path of the buffers under test.
    void* p = nullptr;
    if (const nc_status_t s = nc_alloc(ctx_, sizeof(double), &p); s != NC_OK) {
      const std::string msg = describe_status("nc_alloc (sync word)", s);
      nc_finalize(ctx_);
      ctx_ = nullptr;
      throw BackendError(msg);
    }
    sync_word_ = static_cast<double*>(p);
  }

  ~NodecommBackend() override { finalize(true); }

  std::string_view name() const override { return "nodecomm"; }
  int world_rank() const override { return nc_world_rank(ctx_); }
  int world_size() const override { return nc_world_size(ctx_); }
  int node_count() const override { return nc_node_count(ctx_); }
  int local_size() const override { return nc_local_size(ctx_); }
  int group_rank() const override {
    int rank = 0;
    return nc_comm_rank(ctx_, group_, &rank) == NC_OK ? rank : -1;
  }
  int group_size() const override {
    int size = 0;
    return nc_comm_size(ctx_, group_, &size) == NC_OK ? size : -1;
  }
  void split(int color, int key) override {
    if (const nc_status_t s = nc_comm_split(ctx_, NC_COMM_WORLD, color, key, &group_); s != NC_OK) {
      throw BackendError(describe_status("nc_comm_split", s));
    }
  }
  std::string buffer_kind() const override {
    return use_arena_ ? "nc_alloc (zero-copy)" : "malloc (copy path, --no-arena)";
  }

  // The library is the authority on which combinations are valid (avg on integers, for
  // instance, is its NC_ERR_INVALID_ARGUMENT to report), so nothing is rejected up front.
  std::optional<Rejection> reject(Collective, nc_dtype_t, nc_redop_t) const override {
    return std::nullopt;
  }

  void* alloc(size_t bytes) override {
    if (!use_arena_) {
      void* p = std::malloc(bytes);
      if (p == nullptr) throw BackendError(fmt::format("malloc of {} bytes failed", bytes));
      return p;
    }
    void* p = nullptr;
    if (const nc_status_t s = nc_alloc(ctx_, bytes, &p); s != NC_OK) {
      // Before any other nodecomm call: nc_last_error() is only valid until the next one.
      std::string msg = describe_status(fmt::format("nc_alloc of {} bytes", bytes).c_str(), s);
      uint64_t total = 0, free_bytes = 0;
      if (nc_arena_info(ctx_, &total, &free_bytes) == NC_OK) {
        msg += fmt::format(" (arena {} bytes, {} free)", total, free_bytes);
      }
      throw BackendError(msg);
    }
    return p;
  }

  void free(void* ptr) noexcept override {
    if (ptr == nullptr) return;
    if (use_arena_) {
      (void)nc_free(ctx_, ptr);
    } else {
      std::free(ptr);
    }
  }

  void run(const Call& c) override {
    const Pending req = post(c);
    if (req == 0) throw BackendError(queue_full_);  // nothing else is in flight: not expected
    if (const nc_status_t s = nc_wait(ctx_, req); s != NC_OK) {
      throw BackendError(describe_status(
          fmt::format("nc_wait (nc_{})", collective_name(c.collective)).c_str(), s));
    }
  }

  Pending post(const Call& c) override {
    nc_request_t req = 0;
    nc_status_t s = NC_OK;
    const char* call = "?";
    const nc_comm_t comm = c.in_group ? group_ : NC_COMM_WORLD;
    nc_op_attr_t attr_storage{};
    const nc_op_attr_t* attr = nullptr;
    if (c.attr != nullptr) {
      attr_storage.priority = c.attr->priority;
      attr_storage.name = c.attr->name;
      attr_storage.compress = c.attr->compress;
      attr = &attr_storage;
    }
    switch (c.collective) {
      case Collective::kAllreduce:
        call = "nc_allreduce";
        s = nc_allreduce(ctx_, c.send, c.recv, c.count, c.dtype, c.op, comm, attr, &req);
        break;
      case Collective::kReduce:
        call = "nc_reduce";
        s = nc_reduce(ctx_, c.send, c.recv, c.count, c.dtype, c.op, c.root, comm, attr, &req);
        break;
      case Collective::kBroadcast:
        call = "nc_broadcast";
        s = nc_broadcast(ctx_, c.send, c.recv, c.count, c.dtype, c.root, comm, attr, &req);
        break;
      case Collective::kReduceScatter:
        call = "nc_reduce_scatter";
        s = nc_reduce_scatter(ctx_, c.send, c.recv, c.count, c.dtype, c.op, comm, attr, &req);
        break;
      case Collective::kAllgather:
        call = "nc_allgather";
        s = nc_allgather(ctx_, c.send, c.recv, c.count, c.dtype, comm, attr, &req);
        break;
      case Collective::kGather:
        call = "nc_gather";
        s = nc_gather(ctx_, c.send, c.recv, c.count, c.dtype, c.root, comm, attr, &req);
        break;
      case Collective::kScatter:
        call = "nc_scatter";
        s = nc_scatter(ctx_, c.send, c.recv, c.count, c.dtype, c.root, comm, attr, &req);
        break;
      case Collective::kAlltoall:
        call = "nc_alltoall";
        s = nc_alltoall(ctx_, c.send, c.recv, c.count, c.dtype, comm, attr, &req);
        break;
      case Collective::kBarrier:
        call = "nc_barrier";
        s = nc_barrier(ctx_, comm, attr, &req);
        break;
      case Collective::kAllgatherv:
        call = "nc_allgatherv";
        if (c.vector == nullptr) throw BackendError("nc_allgatherv: no counts");
        s = nc_allgatherv(ctx_, c.send, c.vector->send_count, c.recv, c.vector->recv_counts.data(),
                          c.vector->recv_displs.data(), c.dtype, comm, attr, &req);
        break;
      case Collective::kAlltoallv:
        call = "nc_alltoallv";
        if (c.vector == nullptr) throw BackendError("nc_alltoallv: no counts");
        s = nc_alltoallv(ctx_, c.send, c.vector->send_counts.data(), c.vector->send_displs.data(),
                         c.recv, c.vector->recv_counts.data(), c.vector->recv_displs.data(),
                         c.dtype, comm, attr, &req);
        break;
    }
    if (s == NC_ERR_QUEUE_FULL) {
      queue_full_ = describe_status(call, s);  // for run(), which has nothing else in flight
      return 0;
    }
    if (s != NC_OK) throw BackendError(describe_status(call, s));
    return req;
  }

  bool test(Pending req) override {
    const nc_status_t s = nc_test(ctx_, req);
    if (s == NC_IN_PROGRESS) return false;
    if (s != NC_OK) throw BackendError(describe_status("nc_test", s));
    return true;
  }

  void wait(Pending req) override {
    if (const nc_status_t s = nc_wait(ctx_, req); s != NC_OK) {
      throw BackendError(describe_status("nc_wait", s));
    }
  }

  void wait_all(std::span<Pending> reqs) override {
    static_assert(sizeof(Pending) == sizeof(nc_request_t));
    if (const nc_status_t s = nc_wait_all(ctx_, reqs.size(), reqs.data(), nullptr); s != NC_OK) {
      throw BackendError(describe_status("nc_wait_all", s));
    }
  }

  int node_index() const override { return nc_node_index(ctx_); }

  void sync() override {
    *sync_word_ = 0.0;
    try {
      allreduce(sync_word_, sync_word_, 1, NC_F64, NC_SUM);
    } catch (const BackendError& e) {
      throw BackendError(fmt::format("sync: {}", e.what()));
    }
  }

  void finalize(bool /*ok*/) noexcept override {
    // nc_finalize abandons anything in flight and releases the arena, sync word included;
    // peers blocked on us learn of it from their daemons (NC_ERR_PEER_LOST).
    if (ctx_ != nullptr) (void)nc_finalize(ctx_);
    ctx_ = nullptr;
    sync_word_ = nullptr;
  }

 private:
  bool use_arena_;
  nc_context_t* ctx_ = nullptr;
  double* sync_word_ = nullptr;
  nc_comm_t group_ = NC_COMM_WORLD;  // split()'s, for Call::in_group
  std::string queue_full_;           // post()'s message when it returned 0
};

}  // namespace

std::unique_ptr<Backend> make_nodecomm_backend(const NodecommBackendOptions& options) {
  return std::make_unique<NodecommBackend>(options);
}

}  // namespace nodecomm::bench
