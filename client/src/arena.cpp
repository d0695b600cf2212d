#include "arena.hpp"

namespace nodecomm::client {

ArenaAllocator::ArenaAllocator(uint64_t bytes) : total_(bytes), free_bytes_(bytes) {
  if (bytes > 0) free_.emplace(0, bytes);
}

std::optional<uint64_t> ArenaAllocator::allocate(uint64_t bytes, uint64_t alignment) {
  if (bytes == 0) bytes = 1;
  bytes = (bytes + 63) / 64 * 64;  // whole cache lines: neighbours never share a line
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    const uint64_t start = it->first;
    const uint64_t size = it->second;
    const uint64_t aligned = (start + alignment - 1) & ~(alignment - 1);
    if (aligned - start > size || size - (aligned - start) < bytes) continue;
    free_.erase(it);
    if (aligned > start) free_.emplace(start, aligned - start);
    const uint64_t end = aligned + bytes;
    if (start + size > end) free_.emplace(end, start + size - end);
    used_.emplace(aligned, bytes);
    free_bytes_ -= bytes;
    return aligned;
  }
  return std::nullopt;
}

bool ArenaAllocator::release(uint64_t offset) {
  auto used = used_.find(offset);
  if (used == used_.end()) return false;
  uint64_t start = offset;
  uint64_t size = used->second;
  used_.erase(used);
  free_bytes_ += size;
  auto next = free_.lower_bound(start);
  if (next != free_.end() && start + size == next->first) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  free_.emplace(start, size);
  return true;
}

uint64_t ArenaAllocator::block_size(uint64_t offset) const {
  auto it = used_.find(offset);
  return it == used_.end() ? 0 : it->second;
}

}  // namespace nodecomm::client
