// libnodecomm C++ API: RAII over the C API in nodecomm.h (same implementation, same rules).
// Errors throw nodecomm::Error, which carries the status and the library's message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "nodecomm.h"

namespace nodecomm {

class Error : public std::runtime_error {
 public:
  Error(nc_status_t status, const std::string& what) : std::runtime_error(what), status_(status) {}
  nc_status_t status() const { return status_; }

 private:
  nc_status_t status_;
};

inline void check(nc_status_t status) {
  if (status != NC_OK) throw Error(status, nc_last_error());
}

// 16-bit floating types as stored bits (the library reduces them in f32 and rounds once).
struct f16 {
  uint16_t bits;
};
struct bf16 {
  uint16_t bits;
};

template <class T>
constexpr nc_dtype_t dtype_of() {
  if constexpr (std::is_same_v<T, float>) return NC_F32;
  if constexpr (std::is_same_v<T, double>) return NC_F64;
  if constexpr (std::is_same_v<T, int32_t>) return NC_I32;
  if constexpr (std::is_same_v<T, int64_t>) return NC_I64;
  if constexpr (std::is_same_v<T, int8_t>) return NC_I8;
  if constexpr (std::is_same_v<T, uint8_t>) return NC_U8;
  if constexpr (std::is_same_v<T, f16>) return NC_F16;
  if constexpr (std::is_same_v<T, bf16>) return NC_BF16;
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> ||
                    std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t> ||
                    std::is_same_v<T, int8_t> || std::is_same_v<T, uint8_t> ||
                    std::is_same_v<T, f16> || std::is_same_v<T, bf16>,
                "nodecomm supports float, double, int32_t, int64_t, int8_t, uint8_t, f16, bf16");
}

class Context;

// An operation in flight. Move-only. Destroying a request that was not waited for waits for
// it (ignoring its status), so buffers are never written after they go out of scope.
class Request {
 public:
  Request() = default;
  Request(Request&& o) noexcept
      : ctx_(std::exchange(o.ctx_, nullptr)), id_(std::exchange(o.id_, 0)) {}
  Request& operator=(Request&& o) noexcept {
    if (this != &o) {
      abandon();
      ctx_ = std::exchange(o.ctx_, nullptr);
      id_ = std::exchange(o.id_, 0);
    }
    return *this;
  }
  ~Request() { abandon(); }

  // True once complete; throws on failure.
  bool test() {
    if (id_ == 0) return true;
    const nc_status_t s = nc_test(ctx_, id_);
    if (s == NC_IN_PROGRESS) return false;
    id_ = 0;
    check(s);
    return true;
  }
  void wait() {
    if (id_ == 0) return;
    const nc_status_t s = nc_wait(ctx_, id_);
    if (s != NC_ERR_TIMEOUT) id_ = 0;
    check(s);
  }
  nc_request_t id() const { return id_; }

 private:
  friend class Context;
  Request(nc_context_t* ctx, nc_request_t id) : ctx_(ctx), id_(id) {}
  void abandon() noexcept {
    if (id_ != 0) (void)nc_wait(ctx_, id_);
    id_ = 0;
  }
  nc_context_t* ctx_ = nullptr;
  nc_request_t id_ = 0;
};

// A typed buffer in the shared arena (the zero-copy path). Move-only; freed on destruction.
template <class T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(Buffer&& o) noexcept
      : ctx_(std::exchange(o.ctx_, nullptr)),
        data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      release();
      ctx_ = std::exchange(o.ctx_, nullptr);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  ~Buffer() { release(); }

  T* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<T> span() const { return {data_, size_}; }
  T& operator[](size_t i) const { return data_[i]; }
  T* begin() const { return data_; }
  T* end() const { return data_ + size_; }

 private:
  friend class Context;
  Buffer(nc_context_t* ctx, T* data, size_t size) : ctx_(ctx), data_(data), size_(size) {}
  void release() noexcept {
    if (data_ != nullptr) (void)nc_free(ctx_, data_);
    data_ = nullptr;
  }
  nc_context_t* ctx_ = nullptr;
  T* data_ = nullptr;
  size_t size_ = 0;
};

// A communicator: NC_COMM_WORLD, or one made by Context::split / dup / distribution. Move-only.
// free() is collective over the communicator; the destructor calls it if you did not, so every
// rank must let its Comm objects go in the same order (or free them explicitly).
class Comm {
 public:
  Comm() = default;
  Comm(Comm&& o) noexcept
      : ctx_(std::exchange(o.ctx_, nullptr)), id_(std::exchange(o.id_, NC_COMM_NULL)) {}
  Comm& operator=(Comm&& o) noexcept {
    if (this != &o) {
      release();
      ctx_ = std::exchange(o.ctx_, nullptr);
      id_ = std::exchange(o.id_, NC_COMM_NULL);
    }
    return *this;
  }
  ~Comm() { release(); }

  nc_comm_t id() const { return id_; }
  bool valid() const { return id_ != NC_COMM_NULL; }  // false for ranks that opted out
  int rank() const {
    int r = -1;
    check(nc_comm_rank(ctx_, id_, &r));
    return r;
  }
  int size() const {
    int n = 0;
    check(nc_comm_size(ctx_, id_, &n));
    return n;
  }
  void free() {
    if (id_ != NC_COMM_NULL && id_ != NC_COMM_WORLD) check(nc_comm_free(ctx_, &id_));
    id_ = NC_COMM_NULL;
  }

 private:
  friend class Context;
  Comm(nc_context_t* ctx, nc_comm_t id) : ctx_(ctx), id_(id) {}
  void release() noexcept {
    if (ctx_ != nullptr && id_ != NC_COMM_NULL && id_ != NC_COMM_WORLD) {
      (void)nc_comm_free(ctx_, &id_);
    }
    id_ = NC_COMM_NULL;
  }
  nc_context_t* ctx_ = nullptr;
  nc_comm_t id_ = NC_COMM_NULL;
};

struct InitOptions {
  std::string runtime_dir;
  std::string instance;
  std::string job;
  int local_rank = -1;
  int local_size = 0;
  uint64_t arena_bytes = 0;
  double timeout_sec = 0;
};

// One attachment to the node's daemon. Finalizes on destruction.
class Context {
 public:
  explicit Context(const InitOptions& options = {}) {
    nc_init_options_t o;
    nc_init_options_default(&o);
    o.runtime_dir = options.runtime_dir.empty() ? nullptr : options.runtime_dir.c_str();
    o.instance = options.instance.empty() ? nullptr : options.instance.c_str();
    o.job = options.job.empty() ? nullptr : options.job.c_str();
    o.local_rank = options.local_rank;
    o.local_size = options.local_size;
    o.arena_bytes = options.arena_bytes;
    o.timeout_sec = options.timeout_sec;
    check(nc_init(&o, &ctx_));
  }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  ~Context() { nc_finalize(ctx_); }

  int world_rank() const { return nc_world_rank(ctx_); }
  int world_size() const { return nc_world_size(ctx_); }
  int node_index() const { return nc_node_index(ctx_); }
  int node_count() const { return nc_node_count(ctx_); }
  int local_rank() const { return nc_local_rank(ctx_); }
  int local_size() const { return nc_local_size(ctx_); }
  nc_context_t* handle() const { return ctx_; }

  template <class T>
  Buffer<T> alloc(size_t count) {
    void* p = nullptr;
    check(nc_alloc(ctx_, count * sizeof(T), &p));
    return Buffer<T>(ctx_, static_cast<T*>(p), count);
  }

  // nc_register_fd: memory the caller has mapped at `addr` from `fd` becomes zero-copy.
  void register_fd(int fd, uint64_t file_offset, size_t bytes, void* addr) {
    check(nc_register_fd(ctx_, fd, file_offset, bytes, addr));
  }

  // Collectives take spans; sizes are checked against the per-rank counts nodecomm.h
  // describes. `comm` is an nc_comm_t (NC_COMM_WORLD by default) or a Comm's id().
  template <class T>
  Request allreduce(std::span<const T> send, std::span<T> recv, nc_redop_t op = NC_SUM,
                    nc_comm_t comm = NC_COMM_WORLD, const char* name = nullptr) {
    same_size(send.size(), recv.size(), "allreduce");
    return post(name, [&](const nc_op_attr_t* a, nc_request_t* id) {
      return nc_allreduce(ctx_, send.data(), recv.data(), recv.size(), dtype_of<T>(), op, comm, a,
                          id);
    });
  }
  template <class T>  // in place
  Request allreduce(std::span<T> data, nc_redop_t op = NC_SUM, nc_comm_t comm = NC_COMM_WORLD,
                    const char* name = nullptr) {
    return post(name, [&](const nc_op_attr_t* a, nc_request_t* id) {
      return nc_allreduce(ctx_, data.data(), data.data(), data.size(), dtype_of<T>(), op, comm, a,
                          id);
    });
  }
  template <class T>  // recv is used at the root only (may be empty elsewhere)
  Request reduce(std::span<const T> send, std::span<T> recv, int root, nc_redop_t op = NC_SUM,
                 nc_comm_t comm = NC_COMM_WORLD, const char* name = nullptr) {
    return post(name, [&](const nc_op_attr_t* a, nc_request_t* id) {
      return nc_reduce(ctx_, send.data(), recv.data(), send.size(), dtype_of<T>(), op, root, comm,
                       a, id);
    });
  }
  template <class T>  // in place: the root sends `data`, everyone else receives into it
  Request broadcast(std::span<T> data, int root, nc_comm_t comm = NC_COMM_WORLD,
                    const char* name = nullptr) {
    return post(name, [&](const nc_op_attr_t* a, nc_request_t* id) {
      return nc_broadcast(ctx_, data.data(), data.data(), data.size(), dtype_of<T>(), root, comm, a,
                          id);
    });
  }
  template <class T>  // send holds recv.size() * comm size elements
  Request reduce_scatter(std::span<const T> send, std::span<T> recv, nc_redop_t op = NC_SUM,
                         nc_comm_t comm = NC_COMM_WORLD, const char* name = nullptr) {
    return post(name, [&](const nc_op_attr_t* a, nc_request_t* id) {
      return nc_reduce_scatter(ctx_, send.data(), recv.data(), recv.size(), dtype_of<T>(), op, comm,
                               a, id);
    });
  }
  template <class T>  // recv holds send.size() * comm size elements
  Request allgather(std::span<const T> send, std::span<T> recv, nc_comm_t comm = NC_COMM_WORLD,
                    const char* name = nullptr) {
    return post(name, [&](const nc_op_attr_t* a, nc_request_t* id) {
      return nc_allgather(ctx_, send.data(), recv.data(), send.size(), dtype_of<T>(), comm, a, id);
    });
  }
  template <class T>
  Request allgatherv(std::span<const T> send, std::span<T> recv,
                     std::span<const size_t> recv_counts, std::span<const size_t> displs,
                     nc_comm_t comm = NC_COMM_WORLD, const char* name = nullptr) {
    return post(name, [&](const nc_op_attr_t* a, nc_request_t* id) {
      return nc_allgatherv(ctx_, send.data(), send.size(), recv.data(), recv_counts.data(),
                           displs.data(), dtype_of<T>(), comm, a, id);
    });
  }
  template <class T>  // recv (root only) holds send.size() * comm size elements
  Request gather(std::span<const T> send, std::span<T> recv, int root,
                 nc_comm_t comm = NC_COMM_WORLD, const char* name = nullptr) {
    return post(name, [&](const nc_op_attr_t* a, nc_request_t* id) {
      return nc_gather(ctx_, send.data(), recv.data(), send.size(), dtype_of<T>(), root, comm, a,
                       id);
    });
  }
  template <class T>  // send (root only) holds recv.size() * comm size elements
  Request scatter(std::span<const T> send, std::span<T> recv, int root,
                  nc_comm_t comm = NC_COMM_WORLD, const char* name = nullptr) {
    return post(name, [&](const nc_op_attr_t* a, nc_request_t* id) {
      return nc_scatter(ctx_, send.data(), recv.data(), recv.size(), dtype_of<T>(), root, comm, a,
                        id);
    });
  }
  template <class T>  // send and recv hold count * comm size elements
  Request alltoall(std::span<const T> send, std::span<T> recv, size_t count,
                   nc_comm_t comm = NC_COMM_WORLD, const char* name = nullptr) {
    return post(name, [&](const nc_op_attr_t* a, nc_request_t* id) {
      return nc_alltoall(ctx_, send.data(), recv.data(), count, dtype_of<T>(), comm, a, id);
    });
  }
  template <class T>
  Request alltoallv(std::span<const T> send, std::span<const size_t> send_counts,
                    std::span<const size_t> send_displs, std::span<T> recv,
                    std::span<const size_t> recv_counts, std::span<const size_t> recv_displs,
                    nc_comm_t comm = NC_COMM_WORLD, const char* name = nullptr) {
    return post(name, [&](const nc_op_attr_t* a, nc_request_t* id) {
      return nc_alltoallv(ctx_, send.data(), send_counts.data(), send_displs.data(), recv.data(),
                          recv_counts.data(), recv_displs.data(), dtype_of<T>(), comm, a, id);
    });
  }
  Request barrier(nc_comm_t comm = NC_COMM_WORLD) {
    return post(nullptr, [&](const nc_op_attr_t* a, nc_request_t* id) {
      return nc_barrier(ctx_, comm, a, id);
    });
  }

  Comm world() const { return Comm(ctx_, NC_COMM_WORLD); }
  // Collective over `parent`; an invalid Comm for ranks whose color is NC_UNDEFINED.
  Comm split(int color, int key, nc_comm_t parent = NC_COMM_WORLD) {
    nc_comm_t id = NC_COMM_NULL;
    check(nc_comm_split(ctx_, parent, color, key, &id));
    return Comm(ctx_, id);
  }
  Comm dup(nc_comm_t comm = NC_COMM_WORLD) {
    nc_comm_t id = NC_COMM_NULL;
    check(nc_comm_dup(ctx_, comm, &id));
    return Comm(ctx_, id);
  }
  // MLSL's Distribution: {data group, model group}.
  std::pair<Comm, Comm> distribution(int data_parts, int model_parts) {
    nc_comm_t data = NC_COMM_NULL;
    nc_comm_t model = NC_COMM_NULL;
    check(nc_distribution(ctx_, data_parts, model_parts, &data, &model));
    return {Comm(ctx_, data), Comm(ctx_, model)};
  }

 private:
  static void same_size(size_t a, size_t b, const char* what) {
    if (a != b) throw Error(NC_ERR_INVALID_ARGUMENT, std::string(what) + ": spans differ in size");
  }
  // Posts through `call` with this operation's attributes; no shared state, so a Context may
  // post from several threads as the C API allows.
  template <class Call>
  Request post(const char* name, Call&& call) {
    const nc_op_attr_t attr{0, name, NC_COMPRESS_NONE};
    nc_request_t id = 0;
    check(call(&attr, &id));
    return Request(ctx_, id);
  }
  nc_context_t* ctx_ = nullptr;
};

}  // namespace nodecomm
