// Daemon-private staging buffers for inter-node operations: allocated on the daemon's NUMA
// node, pre-faulted once (first touch costs ~15 us a page on these machines) and reused.
//
// The pool serves every job and every user of the daemon, so it must never hand one job what
// another left in a buffer. Buffers carry the job they were acquired for (set_owner); once the
// job changes, cached buffers of the old one are unmapped rather than reused, and a buffer
// released by an old job is unmapped at once. Within a job buffers are reused without being
// cleared: every read of staging is bounded by what the same operation wrote, because the
// counts of every rank agree before any data moves (count_agreement.hpp, op_check.hpp) and a
// receive that may come back short lands in a buffer cleared first (collectives.cpp). Clearing
// only when the job changes keeps the hot allreduce path free of memsets.
//
// Caps (--max-staging, --max-staging-per-job): operations reserve the staging they will use
// when they become ready; a reservation over a cap is refused, and that operation fails with
// NC_ERR_NO_MEMORY instead of growing the daemon.
//
// A daemon serving several jobs at once gives each its own pool (no buffer ever passes between
// jobs, and none is unmapped because another job ran a pass); the pools of one daemon share a
// StagingLedger, so --max-staging still caps all of them together.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace nodecomm::daemon {

// Caps on reserved staging (StagingPool::reserve).
struct StagingLimits {
  size_t max_total = 0;    // reserved by every job together; 0: no cap
  size_t max_per_job = 0;  // reserved by one job; 0: no cap
};

// What the pools of one daemon have reserved together (StagingPool::reserve).
struct StagingLedger {
  size_t reserved = 0;
};

// The NUMA node staging is allocated on: `requested`, or (< 0) the node of the calling
// thread's CPU; 0 where libnuma does not work.
int staging_numa_node(int requested);

class StagingPool {
 public:
  using Limits = StagingLimits;
  struct Buffer {
    void* data = nullptr;
    size_t capacity = 0;
    uint64_t owner = 0;  // the job it was acquired for
  };

  // numa_node < 0: the node of the calling thread's CPU, if libnuma works here.
  // `shared`: the ledger of every pool of this daemon, which must outlive the pool; null:
  // this pool's own.
  explicit StagingPool(int numa_node = -1, size_t max_cached_bytes = size_t{1} << 30,
                       Limits limits = {}, StagingLedger* shared = nullptr);
  ~StagingPool();
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  // The job that the following acquisitions and reservations serve. A change drops every
  // cached buffer (their contents belong to another job) and that job's reservations.
  void set_owner(uint64_t owner);
  uint64_t owner() const { return owner_; }
  // A buffer of at least `bytes`, reused when one is free. Throws std::bad_alloc when the
  // memory cannot be had (mmap, libnuma or pre-faulting fails): never faults it in later.
  Buffer acquire(size_t bytes);
  void release(Buffer buffer);

  // Reserves `bytes` for the current owner against the caps: empty on success, otherwise why
  // not (which cap, what is reserved already).
  std::string reserve(size_t bytes);
  void unreserve(size_t bytes);
  size_t reserved_total() const { return ledger_->reserved; }
  size_t reserved_by_owner() const;
  const Limits& limits() const { return limits_; }

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
  Limits limits_;
  uint64_t owner_ = 0;
  std::map<uint64_t, size_t> reserved_;  // by owner
  StagingLedger own_ledger_;
  StagingLedger* ledger_;
};

}  // namespace nodecomm::daemon
