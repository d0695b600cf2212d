// int8 error feedback state of one job: one residual per (communicator, tensor name, count),
// what this node's rounding lost at the tensor's last step. Clients choose the names, so the
// table is bounded (tensors and bytes, least recently used dropped first) and a communicator's
// entries go with its comm_free. A dropped residual only makes that tensor restart from zero
// error, as at its first step: the residual is this node's own, no other node depends on it.
#pragma once

#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

namespace nodecomm::daemon {

class FeedbackState {
 public:
  void set_limits(uint32_t max_tensors, uint64_t max_bytes) {
    max_tensors_ = max_tensors;
    max_bytes_ = max_bytes;
  }
  // The residual of this tensor, zero-filled when new; marks it most recently used and drops
  // the least recently used others to stay within the limits. Null when one residual of this
  // count alone would exceed the byte limit: the caller then uses zeros it does not keep.
  std::vector<float>* find_or_add(uint32_t comm, const std::string& name, uint64_t count);
  // comm_free: the communicator's residuals are freed.
  size_t drop_comm(uint32_t comm);

  size_t tensors() const { return entries_.size(); }
  uint64_t bytes() const { return bytes_; }
  uint64_t evicted() const { return evicted_; }

 private:
  struct Entry {
    uint32_t comm = 0;
    std::vector<float> values;
    std::list<std::string>::iterator recent;
  };
  void erase(std::unordered_map<std::string, Entry>::iterator it);

  uint32_t max_tensors_ = 4096;
  uint64_t max_bytes_ = uint64_t{4} << 30;
  std::unordered_map<std::string, Entry> entries_;
  std::list<std::string> recent_;  // keys, most recently used first
  uint64_t bytes_ = 0;
  uint64_t evicted_ = 0;
  uint64_t last_warning_ns_ = 0;
};

}  // namespace nodecomm::daemon
