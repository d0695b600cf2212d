// Daemon-private staging buffers for inter-node operations: allocated on the daemon's NUMA
// node, pre-faulted once (first touch costs ~15 us a page on these machines) and reused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace nodecomm::daemon {

class StagingPool {
 public:
  struct Buffer {
    void* data = nullptr;
    size_t capacity = 0;
  };

  // numa_node < 0: the node of the calling thread's CPU, if libnuma works here.
  explicit StagingPool(int numa_node = -1, size_t max_cached_bytes = size_t{1} << 30);
  ~StagingPool();
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  // A buffer of at least `bytes`, reused when one is free. Throws std::bad_alloc.
  Buffer acquire(size_t bytes);
  void release(Buffer buffer);
  int numa_node() const { return numa_node_; }
  size_t cached_bytes() const { return cached_bytes_; }

 private:
  void* allocate(size_t bytes);
  void deallocate(Buffer buffer);

  int numa_node_ = -1;
  bool use_numa_ = false;
  size_t max_cached_bytes_;
  size_t cached_bytes_ = 0;
  std::vector<Buffer> free_;
};

}  // namespace nodecomm::daemon
