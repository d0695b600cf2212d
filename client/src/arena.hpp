// First-fit allocator over the client's arena. It hands out offsets; the arena's memory and
// the bookkeeping are both the client's own, so the daemon never trusts or reads this state.
#pragma once

#include <cstdint>
#include <map>
#include <optional>

namespace nodecomm::client {

class ArenaAllocator {
 public:
  ArenaAllocator() = default;
  explicit ArenaAllocator(uint64_t bytes);

  // Offset of a block of at least `bytes`, aligned to `alignment` (a power of two).
  std::optional<uint64_t> allocate(uint64_t bytes, uint64_t alignment);
  // False if `offset` is not the start of a live block.
  bool release(uint64_t offset);
  uint64_t total() const { return total_; }
  uint64_t free_bytes() const { return free_bytes_; }
  // Size of the live block starting at `offset`, or 0.
  uint64_t block_size(uint64_t offset) const;

 private:
  uint64_t total_ = 0;
  uint64_t free_bytes_ = 0;
  std::map<uint64_t, uint64_t> free_;  // offset -> size, coalesced
  std::map<uint64_t, uint64_t> used_;  // offset -> size
};

}  // namespace nodecomm::client
