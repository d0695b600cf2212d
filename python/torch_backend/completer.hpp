// The torch backend's per-process state: the nodecomm context it shares with the Python
// package (one attach per process; nodecomm.init() made it), and one thread that tests every
// in-flight request and completes the Works. A poll loop, not one blocking nc_wait per
// operation: operations complete out of order under priorities, and the loop can stop at once
// when nodecomm.finalize() comes (which must not race with any other call on the context).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "work.hpp"

namespace nodecomm::torch_backend {

class Completer {
 public:
  static Completer& instance();

  // The context of nodecomm.init() (Python's _core._ctx.handle). A new context after a
  // finalize replaces the old one; process groups made before it then refuse to post.
  void attach(nc_context_t* ctx);
  // The attached context, or throws "nodecomm is finalized" when there is none.
  nc_context_t* context();
  bool attached_to(const nc_context_t* ctx);

  // Takes `work` into the poll loop (starting the thread on first use, so a fork before the
  // first collective leaves no dead thread behind).
  void add(const c10::intrusive_ptr<NodecommWork>& work);
  // Waits until some request retires or `until` passes; for posts refused with
  // NC_ERR_QUEUE_FULL or NC_ERR_NO_MEMORY while earlier ones still hold the slots/arena.
  void wait_for_retirement(Clock::time_point until);
  size_t in_flight();
  // A thread blocked in Work::wait(): the loop polls without sleeping meanwhile.
  void waiter(int delta) { waiters_.fetch_add(delta, std::memory_order_relaxed); }

  // Arena memory for staging, freed through the context it came from (or not at all once
  // that context is finalized: its mapping is gone). Empty tensor when the arena is full.
  at::Tensor arena_empty(int64_t numel, c10::ScalarType dtype);

  // nodecomm.finalize(): fails every Work still in flight, stops the thread, detaches.
  void shutdown();

 private:
  void run();

  std::mutex mu_;                       // pending_, retired_, stopping_, thread_
  std::condition_variable work_cv_;     // work added, or shutdown
  std::condition_variable retired_cv_;  // a request retired
  std::vector<c10::intrusive_ptr<NodecommWork>> pending_;
  uint64_t retired_ = 0;
  bool stopping_ = false;
  std::thread thread_;
  // Its own lock: staging tensors are freed (and so take it) from any thread, including the
  // completer's while it drops finished Works.
  std::mutex ctx_mu_;
  nc_context_t* ctx_ = nullptr;  // guarded by ctx_mu_
  // Relaxed: a hint for the poll loop's pacing, not a synchronization point.
  std::atomic<int> waiters_{0};
  bool backoff_only_ = false;  // NODECOMM_IDLE=backoff: never spin (oversubscribed cores)
};

}  // namespace nodecomm::torch_backend
