#include "completer.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace nodecomm::torch_backend {

namespace {
constexpr auto kMinPause = std::chrono::microseconds(20);
constexpr auto kMaxPause = std::chrono::microseconds(1000);
}  // namespace

Completer& Completer::instance() {
  // Never destroyed: its thread and the arena deleters may outlive static destruction order.
  static auto* completer = new Completer();
  return *completer;
}

void Completer::attach(nc_context_t* ctx) {
  std::lock_guard<std::mutex> lock(ctx_mu_);
  ctx_ = ctx;
  const char* idle = std::getenv("NODECOMM_IDLE");
  backoff_only_ = idle != nullptr && std::strcmp(idle, "backoff") == 0;
}

nc_context_t* Completer::context() {
  std::lock_guard<std::mutex> lock(ctx_mu_);
  TORCH_CHECK(ctx_ != nullptr,
              "nodecomm is finalized (or not initialized): the process "
              "group cannot post");
  return ctx_;
}

bool Completer::attached_to(const nc_context_t* ctx) {
  std::lock_guard<std::mutex> lock(ctx_mu_);
  return ctx_ != nullptr && ctx_ == ctx;
}

void Completer::add(const c10::intrusive_ptr<NodecommWork>& work) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!thread_.joinable()) {
    stopping_ = false;
    thread_ = std::thread([this] { run(); });
  }
  pending_.push_back(work);
  work_cv_.notify_one();
}

void Completer::wait_for_retirement(Clock::time_point until) {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t seen = retired_;
  retired_cv_.wait_until(lock, until, [&] { return retired_ != seen || stopping_; });
}

size_t Completer::in_flight() {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_.size();
}

void Completer::run() {
  auto pause = kMinPause;
  std::vector<c10::intrusive_ptr<NodecommWork>> batch;
  std::vector<c10::intrusive_ptr<NodecommWork>> finished;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
      if (stopping_) return;
      batch = pending_;
    }
    nc_context_t* ctx = nullptr;
    {
      std::lock_guard<std::mutex> lock(ctx_mu_);
      ctx = ctx_;
    }
    size_t retired = 0;
    const auto now = Clock::now();
    for (auto& work : batch) {
      const auto progress = work->poll(ctx, now);
      retired += progress.retired;
      if (progress.finished) finished.push_back(work);
    }
    if (retired > 0 || !finished.empty()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        retired_ += retired;
        for (const auto& work : finished) {
          // Not there if shutdown() took the pending list meanwhile.
          const auto it = std::find(pending_.begin(), pending_.end(), work);
          if (it != pending_.end()) pending_.erase(it);
        }
      }
      retired_cv_.notify_all();
    }
    // Dropped outside mu_: the last reference frees staging tensors, whose deleters lock.
    batch.clear();
    finished.clear();
    if (retired > 0) {
      pause = kMinPause;
    } else if (waiters_.load(std::memory_order_relaxed) > 0 && !backoff_only_) {
      std::this_thread::yield();  // someone blocks on a result: keep latency low
    } else {
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, kMaxPause);
    }
  }
}

at::Tensor Completer::arena_empty(int64_t numel, c10::ScalarType dtype) {
  const size_t bytes = std::max<size_t>(1, static_cast<size_t>(numel) * c10::elementSize(dtype));
  nc_context_t* ctx = nullptr;
  void* ptr = nullptr;
  {
    std::lock_guard<std::mutex> lock(ctx_mu_);
    if (ctx_ == nullptr || nc_alloc(ctx_, bytes, &ptr) != NC_OK) return {};
    ctx = ctx_;
  }
  return at::from_blob(
      ptr, {numel},
      [this, ctx](void* p) {
        std::lock_guard<std::mutex> lock(ctx_mu_);
        if (ctx_ == ctx) nc_free(ctx, p);  // else finalized: the mapping is gone already
      },
      at::TensorOptions().dtype(dtype));
}

void Completer::shutdown() {
  std::vector<c10::intrusive_ptr<NodecommWork>> left;
  std::thread thread;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    left.swap(pending_);
    thread.swap(thread_);
  }
  work_cv_.notify_all();
  retired_cv_.notify_all();
  if (thread.joinable()) thread.join();
  for (auto& work : left) {
    work->abandon("nodecomm.finalize() while the operation was in flight");
  }
  left.clear();
  std::lock_guard<std::mutex> lock(ctx_mu_);
  ctx_ = nullptr;
}

}  // namespace nodecomm::torch_backend
