// Process-shared futex doorbells on 32-bit words in a MAP_SHARED segment.
#pragma once

#include <atomic>
#include <cstdint>

namespace nodecomm::ipc {

// Sleeps while *word == expected, at most timeout_ns. Returns on wake, timeout, signal or
// value change; callers re-check their condition.
void futex_wait(uint32_t* word, uint32_t expected, uint64_t timeout_ns);
void futex_wake_all(uint32_t* word);

inline uint32_t load_word(const uint32_t& word, std::memory_order order) {
  return std::atomic_ref<const uint32_t>(word).load(order);
}
inline void store_word(uint32_t& word, uint32_t value, std::memory_order order) {
  std::atomic_ref<uint32_t>(word).store(value, order);
}
inline uint32_t exchange_word(uint32_t& word, uint32_t value, std::memory_order order) {
  return std::atomic_ref<uint32_t>(word).exchange(value, order);
}
inline uint32_t increment_word(uint32_t& word, std::memory_order order) {
  return std::atomic_ref<uint32_t>(word).fetch_add(1, order) + 1;
}
inline void store_u64(uint64_t& word, uint64_t value, std::memory_order order) {
  std::atomic_ref<uint64_t>(word).store(value, order);
}
inline uint64_t load_u64(const uint64_t& word, std::memory_order order) {
  return std::atomic_ref<const uint64_t>(word).load(order);
}

}  // namespace nodecomm::ipc
