#include "requests.hpp"

#include <algorithm>

namespace nodecomm::mlsl {

namespace {

bool requests_refused_for_room(nc_status_t status) {
  // Both come back before nodecomm takes a sequence number, so posting again later is safe.
  return status == NC_ERR_QUEUE_FULL || status == NC_ERR_NO_MEMORY;
}

// Tokens are multiples of 16 so that a program's CommReq* looks like an aligned pointer, and
// never reused so that a stale one is always recognised as stale.
CommReq* requests_token(uint64_t seq) {
  // A name, never dereferenced: no pointer provenance to lose.
  return reinterpret_cast<CommReq*>(  // NOLINT(performance-no-int-to-ptr)
      static_cast<uintptr_t>(seq * 16));
}
uint64_t requests_seq(const void* token) {
  return reinterpret_cast<uintptr_t>(token) / 16;
}

}  // namespace

Exchange::~Exchange() {
  if (in_flight_) Runtime::get().engine().forget(*this);
}

void* Exchange::scratch(size_t bytes) {
  scratch_.emplace_back(bytes);
  return scratch_.back().data();
}

void Exchange::set_attr(int32_t priority, std::string name, nc_compress_t compress) {
  name_ = std::move(name);
  attr_.priority = priority;
  attr_.name = name_.c_str();
  attr_.compress = compress;
}

void Engine::start(Exchange& x) {
  if (x.steps_.empty()) {
    x.done_ = true;
    if (x.hook_) x.hook_();
    return;
  }
  x.in_flight_ = true;
  in_flight_.push_back(&x);
  post(x);
}

void Engine::post(Exchange& x) {
  x.needs_post_ = false;
  for (;;) {
    nc_request_t req = 0;
    const nc_status_t status = x.steps_[x.next_](&x.attr_, &req);
    if (status == NC_OK) {
      x.current_ = req;
      ++x.next_;
      return;
    }
    if (requests_refused_for_room(status) && progress_one(&x)) continue;
    const std::string message = describe_nc(x.what_, status) +
                                (requests_refused_for_room(status)
                                     ? " (none of this process's exchanges is in flight to make "
                                       "room: raise NODECOMM_ARENA_BYTES or MLSL_HEAP_SIZE_GB)"
                                     : "");
    forget(x);
    throw Misuse(message);
  }
}

bool Engine::progress_one(const Exchange* except) {
  for (Exchange* y : in_flight_) {
    if (y == except || y->current_ == 0) continue;
    const nc_status_t status = nc_test(ctx_, y->current_);
    if (status == NC_IN_PROGRESS) continue;
    y->current_ = 0;
    finish_step(*y, status);
    return true;
  }
  for (Exchange* y : in_flight_) {
    if (y == except || y->current_ == 0) continue;
    const nc_status_t status = nc_wait(ctx_, y->current_);
    if (status == NC_ERR_TIMEOUT) return false;
    y->current_ = 0;
    finish_step(*y, status);
    return true;
  }
  return false;
}

void Engine::finish_step(Exchange& x, nc_status_t status) {
  if (status != NC_OK) {
    x.error_ = describe_nc(x.what_, status);
    x.done_ = true;
    forget(x);
    return;
  }
  if (x.next_ < x.steps_.size()) {
    // One try only: a refusal here would recurse into progress_one; the owner's next
    // test/wait posts it with the full retry.
    nc_request_t req = 0;
    const nc_status_t posted = x.steps_[x.next_](&x.attr_, &req);
    if (posted == NC_OK) {
      x.current_ = req;
      ++x.next_;
    } else if (requests_refused_for_room(posted)) {
      x.needs_post_ = true;
    } else {
      x.error_ = describe_nc(x.what_, posted);
      x.done_ = true;
      forget(x);
    }
    return;
  }
  forget(x);
  if (x.hook_) x.hook_();
  x.scratch_.clear();
  x.done_ = true;
}

void Engine::check(Exchange& x) const {
  if (!x.error_.empty()) throw Misuse(x.error_);
}

bool Engine::test(Exchange& x) {
  if (x.done_) {
    check(x);
    return true;
  }
  if (x.needs_post_) post(x);
  const nc_status_t status = nc_test(ctx_, x.current_);
  if (status == NC_IN_PROGRESS) return false;
  x.current_ = 0;
  finish_step(x, status);
  if (x.done_) check(x);
  return x.done_;
}

void Engine::complete(Exchange& x) {
  while (!x.done_) {
    if (x.needs_post_) post(x);
    const nc_status_t status = nc_wait(ctx_, x.current_);
    if (status == NC_ERR_TIMEOUT) {
      throw Misuse(describe_nc(x.what_, status) +
                   " (NODECOMM_TIMEOUT_SEC bounds each wait; 0 waits forever)");
    }
    x.current_ = 0;
    finish_step(x, status);
  }
}

void Engine::wait(Exchange& x) {
  complete(x);
  check(x);
}

void Engine::finish_owned_by(const void* owner) {
  // A copy: completing an exchange takes it off the list.
  const std::vector<Exchange*> in_flight(in_flight_.begin(), in_flight_.end());
  for (Exchange* x : in_flight) {
    if (x->owner_ == owner) complete(*x);
  }
}

void Engine::finish_all() {
  const std::vector<Exchange*> in_flight(in_flight_.begin(), in_flight_.end());
  for (Exchange* x : in_flight) complete(*x);
}

void Engine::forget(Exchange& x) {
  x.in_flight_ = false;
  in_flight_.remove(&x);
}

CommReq* Engine::issue(std::unique_ptr<Exchange> x) {
  const uint64_t seq = next_token_++;
  tokens_.emplace(seq, std::move(x));
  return requests_token(seq);
}

Exchange* Engine::find(CommReq* token) const {
  const auto it = tokens_.find(requests_seq(token));
  if (token == nullptr || reinterpret_cast<uintptr_t>(token) % 16 != 0 || it == tokens_.end()) {
    throw Misuse("request " + std::to_string(reinterpret_cast<uintptr_t>(token)) +
                 " not found: already completed by Wait or Test, or not a request");
  }
  return it->second.get();
}

void Engine::release(CommReq* token) {
  tokens_.erase(requests_seq(token));
}

bool Engine::token_live(const void* token) const {
  return token != nullptr && reinterpret_cast<uintptr_t>(token) % 16 == 0 &&
         tokens_.count(requests_seq(token)) != 0;
}

Persistent::~Persistent() {
  // The owner waits before it is destroyed; this only drops the bookkeeping.
  if (x_) Runtime::get().engine().forget(*x_);
}

void Persistent::start(std::unique_ptr<Exchange> x, void* result) {
  if (state_ == State::in_flight) {
    throw Misuse(what_ + " started again before it was waited");
  }
  x_ = std::move(x);
  result_ = result;
  started_ = true;
  state_ = State::in_flight;
  Runtime::get().engine().start(*x_);
}

void* Persistent::wait() {
  if (state_ == State::idle) {
    void* last = last_;
    last_ = nullptr;
    return last;
  }
  if (state_ == State::in_flight) Runtime::get().engine().wait(*x_);
  state_ = State::idle;
  last_ = nullptr;
  return result_;
}

void* Persistent::test(bool* completed) {
  if (state_ == State::idle) {
    *completed = started_;
    return last_;
  }
  if (state_ == State::in_flight) {
    if (!Runtime::get().engine().test(*x_)) {
      *completed = false;
      return nullptr;
    }
    state_ = State::complete;
    last_ = result_;
  }
  *completed = true;
  return result_;
}

void Persistent::forget_history() {
  settle();
  state_ = State::idle;
  started_ = false;
  result_ = nullptr;
  last_ = nullptr;
}

void Persistent::settle() {
  if (state_ != State::in_flight) return;
  Runtime::get().engine().wait(*x_);
  state_ = State::complete;
  last_ = result_;
}

}  // namespace nodecomm::mlsl
