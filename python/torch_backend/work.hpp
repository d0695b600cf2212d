// One torch.distributed operation in flight on the nodecomm backend: the c10d::Work that
// Python and DDP hold, and the nodecomm requests (one per piece) behind it. The posting thread
// appends requests; only the Completer's thread tests them (a request is released by the
// nc_test that completes it, so no second thread may touch it).
#pragma once

#include <ATen/core/ivalue.h>
#include <nodecomm.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

namespace nodecomm::torch_backend {

using Clock = std::chrono::steady_clock;

class NodecommWork final : public c10d::Work {
 public:
  // `value`: what the future completes with (torch's convention: the tensors the caller gets
  // back). `what`: "rank 1/4: allreduce of (1000 x f32, sum) on group 'default'", used in
  // every error.
  NodecommWork(c10d::OpType type, int rank, std::string what, std::vector<at::Tensor> value,
               std::chrono::milliseconds timeout);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  bool wait(std::chrono::milliseconds timeout = ::kNoTimeout) override;
  void synchronize() override {}
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  const std::string& what() const { return what_; }

  // ---- posting thread ----
  void add_request(nc_request_t req);
  // Keeps `t` alive until every request has retired (the daemon may write into it until then).
  void keep(at::Tensor t) { keep_.push_back(std::move(t)); }
  // Run once every request succeeded, before the future completes: copies from staging
  // buffers back into the caller's tensors.
  void on_success(std::function<void()> fn) { copy_back_.push_back(std::move(fn)); }
  // No more requests will be added; `error` (may be empty) is why posting stopped early.
  void posting_done(std::string error = {});
  size_t requests_posted();

  // ---- completer thread ----
  struct Progress {
    size_t retired = 0;     // requests that completed in this call
    bool finished = false;  // every request retired: drop the work
  };
  Progress poll(nc_context_t* ctx, Clock::time_point now);
  // nodecomm.finalize() with the work in flight (its requests die with the context).
  void abandon(const std::string& why);

 private:
  // Completes the c10d::Work and the future, once; `error` empty means success.
  void complete(const std::string& error);

  const std::string what_;
  const std::vector<at::Tensor> value_;
  const std::chrono::milliseconds timeout_;
  const Clock::time_point deadline_;
  const c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::vector<at::Tensor> keep_;
  std::vector<std::function<void()>> copy_back_;

  std::mutex requests_mu_;  // requests_, posting_done_, post_error_: poster and completer
  std::vector<nc_request_t> requests_;
  bool posting_done_ = false;
  std::string post_error_;

  std::string error_;                // completer thread only: the first failure
  std::atomic<bool> marked_{false};  // complete() ran
  friend class Completer;
};

}  // namespace nodecomm::torch_backend
