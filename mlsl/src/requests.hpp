// Requests of the MLSL layer over nodecomm's. An Exchange is what one MLSL call starts: one or
// more nodecomm collectives posted in turn (steps), the temporaries they use and a hook that
// finishes MLSL's conventions (moving an in-place result, say) once the last step completed.
// The Engine posts them, retries posts nodecomm refuses for a full queue or arena by completing
// older exchanges first, and completes them. One-shot exchanges (Distribution collectives) are
// named by never-reused CommReq* tokens; persistent ones (activations, parameter sets) by the
// Persistent slot of their owner.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime.hpp"

namespace nodecomm::mlsl {

class Exchange {
 public:
  using Step = std::function<nc_status_t(const nc_op_attr_t* attr, nc_request_t* req)>;

  explicit Exchange(std::string what) : what_(std::move(what)) {}
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;
  ~Exchange();

  void add_step(Step step) { steps_.push_back(std::move(step)); }
  void on_done(std::function<void()> hook) { hook_ = std::move(hook); }
  // Temporaries freed when the exchange completes.
  void* scratch(size_t bytes);
  void set_attr(int32_t priority, std::string name, nc_compress_t compress = NC_COMPRESS_NONE);
  void set_owner(const void* owner) { owner_ = owner; }
  const void* owner() const { return owner_; }
  const std::string& what() const { return what_; }
  bool done() const { return done_; }

 private:
  friend class Engine;
  std::string what_;
  std::vector<Step> steps_;
  std::function<void()> hook_;
  std::vector<Scratch> scratch_;
  std::string name_;
  nc_op_attr_t attr_{};
  const void* owner_ = nullptr;
  size_t next_ = 0;           // the step to post next
  nc_request_t current_ = 0;  // nodecomm's request of the step in flight
  bool needs_post_ = false;   // a step finished while another post was retrying
  bool in_flight_ = false;    // listed in the Engine
  bool done_ = false;
  std::string error_;  // failure found while completing it for someone else
};

class Engine {
 public:
  explicit Engine(nc_context_t* ctx) : ctx_(ctx) {}
  // Posts the first step; throws Misuse if nodecomm refuses it and nothing of ours can free room.
  void start(Exchange& x);
  // True once every step completed and the hook ran; throws Misuse if it failed.
  bool test(Exchange& x);
  void wait(Exchange& x);
  // Completes every exchange whose owner is `owner` (results kept for their Wait).
  void finish_owned_by(const void* owner);
  void finish_all();
  void forget(Exchange& x);

  // One-shot requests: the token is the only name a program holds.
  CommReq* issue(std::unique_ptr<Exchange> x);
  Exchange* find(CommReq* token) const;
  void release(CommReq* token);
  bool token_live(const void* token) const;
  size_t unwaited() const { return tokens_.size(); }

 private:
  void post(Exchange& x);
  // Waits until every step is done; a failure stays in `x` for its owner's Wait or Test.
  void complete(Exchange& x);
  void finish_step(Exchange& x, nc_status_t status);
  bool progress_one(const Exchange* except);
  void check(Exchange& x) const;

  nc_context_t* ctx_;
  std::list<Exchange*> in_flight_;  // oldest first
  std::map<uint64_t, std::unique_ptr<Exchange>> tokens_;
  uint64_t next_token_ = 1;
};

// The request of one activation direction or one parameter-set exchange: started and waited
// again every iteration. Waiting one never started (or already waited) returns NULL at once, as
// MLSL's programs expect (docs/MLSL.md, "Requests").
class Persistent {
 public:
  explicit Persistent(std::string what) : what_(std::move(what)) {}
  ~Persistent();
  // `result` is what Wait returns once `x` completes. Starting one still in flight is misuse.
  void start(std::unique_ptr<Exchange> x, void* result);
  void* wait();
  void* test(bool* completed);
  bool in_flight() const { return state_ == State::in_flight; }
  // Completes an exchange in flight, keeping its result for the next Wait.
  void settle();
  // Back to never started (after Commit's isolation runs, which the program did not start).
  void forget_history();

 private:
  enum class State { idle, in_flight, complete };
  std::string what_;
  std::unique_ptr<Exchange> x_;
  State state_ = State::idle;
  bool started_ = false;
  void* result_ = nullptr;
  void* last_ = nullptr;
};

}  // namespace nodecomm::mlsl
