#include "work.hpp"

#include <fmt/format.h>

#include <stdexcept>

#include "completer.hpp"

namespace nodecomm::torch_backend {

NodecommWork::NodecommWork(c10d::OpType type, int rank, std::string what,
                           std::vector<at::Tensor> value, std::chrono::milliseconds timeout)
    : c10d::Work(rank, type),
      what_(std::move(what)),
      value_(std::move(value)),
      timeout_(timeout),
      deadline_(Clock::now() + timeout),
      // DDP reads an allreduce future's value with toTensorVector(): a List[Tensor].
      future_(
          c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
}

bool NodecommWork::isCompleted() {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_;
}

bool NodecommWork::isSuccess() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_ && !exception_;
}

std::exception_ptr NodecommWork::exception() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return exception_;
}

std::vector<at::Tensor> NodecommWork::result() {
  return value_;
}

c10::intrusive_ptr<c10::ivalue::Future> NodecommWork::getFuture() {
  return future_;
}

bool NodecommWork::wait(std::chrono::milliseconds timeout) {
  Completer::instance().waiter(1);
  std::unique_lock<std::mutex> lock(mutex_);
  // The completer fails the work at its deadline (the process group's timeout), so an
  // unbounded wait here still ends.
  if (timeout == ::kNoTimeout) {
    cv_.wait(lock, [&] { return completed_; });
  } else {
    cv_.wait_for(lock, timeout, [&] { return completed_; });
  }
  Completer::instance().waiter(-1);
  if (!completed_) {
    TORCH_CHECK(false, fmt::format("nodecomm: {}: not complete after Work.wait({} ms); the "
                                   "operation is still in flight",
                                   what_, timeout.count()));
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

void NodecommWork::add_request(nc_request_t req) {
  std::lock_guard<std::mutex> lock(requests_mu_);
  requests_.push_back(req);
}

void NodecommWork::posting_done(std::string error) {
  std::lock_guard<std::mutex> lock(requests_mu_);
  posting_done_ = true;
  post_error_ = std::move(error);
}

size_t NodecommWork::requests_posted() {
  std::lock_guard<std::mutex> lock(requests_mu_);
  return requests_.size();
}

NodecommWork::Progress NodecommWork::poll(nc_context_t* ctx, Clock::time_point now) {
  Progress progress;
  bool all_retired = true;
  bool done_posting = false;
  {
    std::lock_guard<std::mutex> lock(requests_mu_);
    for (auto& req : requests_) {
      if (req == 0) continue;
      const nc_status_t status = nc_test(ctx, req);
      if (status == NC_IN_PROGRESS) {
        all_retired = false;
        continue;
      }
      req = 0;
      ++progress.retired;
      if (status != NC_OK && error_.empty()) {
        // nc_last_error() is this thread's: read it right after the nc_test that failed.
        error_ = fmt::format("nodecomm: {}: {} ({}): {}", what_, nc_status_string(status),
                             static_cast<int>(status), nc_last_error());
      }
    }
    done_posting = posting_done_;
    if (done_posting && error_.empty() && !post_error_.empty()) error_ = post_error_;
  }
  if (all_retired && done_posting) {
    if (error_.empty() && !marked_.load(std::memory_order_acquire)) {
      try {
        for (auto& fn : copy_back_) fn();
      } catch (const std::exception& e) {
        error_ = fmt::format("nodecomm: {}: copying the result back: {}", what_, e.what());
      }
    }
    complete(error_);
    keep_.clear();
    copy_back_.clear();
    progress.finished = true;
    return progress;
  }
  if (!error_.empty() && done_posting) {
    // One piece failed: fail the future now; the other pieces keep their buffers until
    // they retire, because the daemon may still write into them.
    complete(error_);
  } else if (now > deadline_ && !marked_.load(std::memory_order_acquire)) {
    complete(
        fmt::format("nodecomm: {}: timed out: not complete after {} ms (the process "
                    "group's timeout); its ranks are out of step now, stop the job",
                    what_, timeout_.count()));
  }
  return progress;
}

void NodecommWork::abandon(const std::string& why) {
  complete(fmt::format("nodecomm: {}: {}", what_, why));
  keep_.clear();
  copy_back_.clear();
}

void NodecommWork::complete(const std::string& error) {
  // acq_rel: one caller wins; the loser sees the winner's state.
  if (marked_.exchange(true, std::memory_order_acq_rel)) return;
  std::exception_ptr eptr;
  if (!error.empty()) eptr = std::make_exception_ptr(std::runtime_error(error));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    completed_ = true;
    exception_ = eptr;
  }
  cv_.notify_all();
  // The future's callbacks (DDP's, Python's .then) run here, in this thread: no lock held.
  if (eptr) {
    future_->setError(eptr);
  } else {
    future_->markCompleted(c10::IValue(value_));
  }
}

}  // namespace nodecomm::torch_backend
