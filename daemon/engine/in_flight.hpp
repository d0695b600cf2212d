// Work in flight, counted by ownership: a token counts `amount` while it exists and uncounts it
// when destroyed or overwritten, and it moves with the work it stands for (an operation's
// transfer, a scheduled unit, a scheduling round). Whatever drops the work drops the count, so
// no path can forget a decrement or take one twice; an abandoned transfer gives its token up
// explicitly (the transfer stays, the engine no longer waits for it).
#pragma once

#include <cstddef>
#include <memory>
#include <utility>

namespace nodecomm::daemon {

class InFlightToken;

// The count itself. Tokens share ownership of it, so one that outlives its counter (a job torn
// down after its engine, in a test) is still safe to destroy.
class InFlightCounter {
 public:
  InFlightCounter() = default;
  InFlightCounter(const InFlightCounter&) = delete;
  InFlightCounter& operator=(const InFlightCounter&) = delete;

  size_t value() const { return *value_; }
  // A token for `amount` units of work (one transfer, or a unit's bytes).
  [[nodiscard]] InFlightToken acquire(size_t amount = 1);

 private:
  std::shared_ptr<size_t> value_ = std::make_shared<size_t>(0);
};

class InFlightToken {
 public:
  InFlightToken() = default;
  InFlightToken(const InFlightToken&) = delete;
  InFlightToken& operator=(const InFlightToken&) = delete;
  InFlightToken(InFlightToken&& other) noexcept
      : value_(std::move(other.value_)), amount_(std::exchange(other.amount_, 0)) {}
  InFlightToken& operator=(InFlightToken&& other) noexcept {
    if (this != &other) {
      release();
      value_ = std::move(other.value_);
      amount_ = std::exchange(other.amount_, 0);
    }
    return *this;
  }
  ~InFlightToken() { release(); }

  bool held() const { return value_ != nullptr; }
  size_t amount() const { return amount_; }
  // Uncounts now; afterwards the token holds nothing.
  void release() {
    if (value_ != nullptr) *value_ -= amount_;
    value_.reset();
    amount_ = 0;
  }

 private:
  friend class InFlightCounter;
  InFlightToken(std::shared_ptr<size_t> value, size_t amount)
      : value_(std::move(value)), amount_(amount) {
    *value_ += amount_;
  }

  std::shared_ptr<size_t> value_;
  size_t amount_ = 0;
};

inline InFlightToken InFlightCounter::acquire(size_t amount) {
  return {value_, amount};
}

}  // namespace nodecomm::daemon
