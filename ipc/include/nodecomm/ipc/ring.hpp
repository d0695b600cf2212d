// Single-producer single-consumer rings over proto::RingHeader.
//
// Each side keeps its own position in private memory and only publishes it to shared memory;
// it never reads its own position back, so a peer that scribbles on the shared line cannot
// move it. The peer's position is untrusted: every load is checked against the capacity, and
// a position that runs ahead or backwards reports kCorrupt instead of being used.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "nodecomm/proto/abi.hpp"

namespace nodecomm::ipc {

enum class RingResult { kOk, kEmpty, kFull, kCorrupt };

namespace detail {
inline uint64_t load_acquire(const uint64_t& shared) {
  // acquire: entries written before the peer's release-store of this position are visible.
  return std::atomic_ref<const uint64_t>(shared).load(std::memory_order_acquire);
}
inline void store_release(uint64_t& shared, uint64_t value) {
  // release: our entry writes (producer) or reads (consumer) happen-before the peer sees this.
  std::atomic_ref<uint64_t>(shared).store(value, std::memory_order_release);
}
static_assert(std::atomic_ref<uint64_t>::is_always_lock_free, "positions must be lock-free");
}  // namespace detail

template <class T>
class RingProducer {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  RingProducer() = default;
  // `start` is the position both sides agree on at attach time (0 for a new segment).
  RingProducer(proto::RingHeader* header, T* slots, uint32_t capacity, uint64_t start = 0)
      : header_(header), slots_(slots), capacity_(capacity), tail_(start), cached_head_(start) {}

  RingResult try_push(const T& entry) { return try_push(entry, sizeof(T)); }

  // Writes only the first `bytes` (at most sizeof(T)) of `entry`; the rest of the slot keeps
  // what it held. For entries whose tail is used rarely (a completion's error text): each
  // cache line written is one the consumer must fetch.
  RingResult try_push(const T& entry, size_t bytes) {
    if (tail_ - cached_head_ >= capacity_) {
      const uint64_t head = detail::load_acquire(header_->head.value);
      if (head > tail_ || tail_ - head > capacity_) return RingResult::kCorrupt;
      cached_head_ = head;
      if (tail_ - cached_head_ >= capacity_) return RingResult::kFull;
    }
    std::memcpy(&slots_[tail_ & (capacity_ - 1)], &entry, bytes < sizeof(T) ? bytes : sizeof(T));
    detail::store_release(header_->tail.value, ++tail_);
    return RingResult::kOk;
  }

  uint64_t position() const { return tail_; }
  uint32_t capacity() const { return capacity_; }

 private:
  proto::RingHeader* header_ = nullptr;
  T* slots_ = nullptr;
  uint64_t capacity_ = 0;
  uint64_t tail_ = 0;
  uint64_t cached_head_ = 0;
};

template <class T>
class RingConsumer {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  RingConsumer() = default;
  RingConsumer(proto::RingHeader* header, const T* slots, uint32_t capacity, uint64_t start = 0)
      : header_(header), slots_(slots), capacity_(capacity), head_(start), cached_tail_(start) {}

  // Copies the next entry out of shared memory, so later writes by the producer cannot change
  // what the caller validates and uses.
  RingResult try_pop(T& out) {
    return try_pop(out, sizeof(T), [](const T&) { return sizeof(T); });
  }

  // Copies the first `prefix` bytes of the next entry, then up to `length(out)` bytes (at most
  // sizeof(T)) as what was copied says, before releasing the slot: the counterpart of a
  // producer's partial try_push. Bytes of `out` beyond what was copied are left as they were.
  template <class Length>
  RingResult try_pop(T& out, size_t prefix, Length&& length) {
    if (head_ == cached_tail_) {
      const RingResult r = refresh();
      if (r != RingResult::kOk) return r;
      if (head_ == cached_tail_) return RingResult::kEmpty;
    }
    const auto* slot = reinterpret_cast<const unsigned char*>(&slots_[head_ & (capacity_ - 1)]);
    auto* into = reinterpret_cast<unsigned char*>(&out);
    prefix = prefix < sizeof(T) ? prefix : sizeof(T);
    std::memcpy(into, slot, prefix);
    const size_t total = length(static_cast<const T&>(out));
    if (total > prefix)
      std::memcpy(into + prefix, slot + prefix, (total < sizeof(T) ? total : sizeof(T)) - prefix);
    detail::store_release(header_->head.value, ++head_);
    return RingResult::kOk;
  }

  // Entries published and not yet consumed, or kCorrupt if the producer's position is
  // impossible.
  RingResult refresh() {
    const uint64_t tail = detail::load_acquire(header_->tail.value);
    if (tail < head_ || tail - head_ > capacity_) return RingResult::kCorrupt;
    cached_tail_ = tail;
    return RingResult::kOk;
  }

  bool maybe_nonempty() { return refresh() != RingResult::kOk || head_ != cached_tail_; }

  uint64_t position() const { return head_; }
  uint64_t published() const { return cached_tail_; }

 private:
  proto::RingHeader* header_ = nullptr;
  const T* slots_ = nullptr;
  uint64_t capacity_ = 0;
  uint64_t head_ = 0;
  uint64_t cached_tail_ = 0;
};

}  // namespace nodecomm::ipc
