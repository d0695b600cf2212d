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

template <class T>
constexpr nc_dtype_t dtype_of() {
  if constexpr (std::is_same_v<T, float>) return NC_F32;
  if constexpr (std::is_same_v<T, double>) return NC_F64;
  if constexpr (std::is_same_v<T, int32_t>) return NC_I32;
  if constexpr (std::is_same_v<T, int64_t>) return NC_I64;
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> ||
                    std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t>,
                "nodecomm supports float, double, int32_t and int64_t buffers");
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

  // Out of place: recv.size() must equal send.size().
  template <class T>
  Request allreduce(std::span<const T> send, std::span<T> recv, nc_redop_t op = NC_SUM,
                    nc_comm_t comm = NC_COMM_WORLD, const char* name = nullptr) {
    if (send.size() != recv.size()) {
      throw Error(NC_ERR_INVALID_ARGUMENT, "allreduce: send and receive spans differ in size");
    }
    return post(send.data(), recv.data(), recv.size(), dtype_of<T>(), op, comm, name);
  }
  // In place.
  template <class T>
  Request allreduce(std::span<T> data, nc_redop_t op = NC_SUM, nc_comm_t comm = NC_COMM_WORLD,
                    const char* name = nullptr) {
    return post(data.data(), data.data(), data.size(), dtype_of<T>(), op, comm, name);
  }

 private:
  Request post(const void* send, void* recv, size_t count, nc_dtype_t dtype, nc_redop_t op,
               nc_comm_t comm, const char* name) {
    nc_op_attr_t attr{0, name};
    nc_request_t id = 0;
    check(nc_allreduce(ctx_, send, recv, count, dtype, op, comm, &attr, &id));
    return Request(ctx_, id);
  }
  nc_context_t* ctx_ = nullptr;
};

}  // namespace nodecomm
