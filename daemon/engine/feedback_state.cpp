#include "engine/feedback_state.hpp"

#include <fmt/format.h>

#include "config/log.hpp"
#include "nodecomm/ipc/clock.hpp"

namespace nodecomm::daemon {

std::vector<float>* FeedbackState::find_or_add(uint32_t comm, const std::string& name,
                                               uint64_t count) {
  const uint64_t need = count * sizeof(float);
  if (count > max_bytes_ / sizeof(float)) return nullptr;
  // The count is part of the key: the same name with another size is another tensor.
  const std::string key = fmt::format("{}/{}/{}", comm, name, count);
  if (auto it = entries_.find(key); it != entries_.end()) {
    recent_.splice(recent_.begin(), recent_, it->second.recent);
    return &it->second.values;
  }
  size_t dropped = 0;
  while (!entries_.empty() && (entries_.size() >= max_tensors_ || bytes_ + need > max_bytes_)) {
    erase(entries_.find(recent_.back()));
    ++dropped;
  }
  recent_.push_front(key);
  Entry& e = entries_[key];
  e.comm = comm;
  e.values.assign(count, 0.0f);
  e.recent = recent_.begin();
  bytes_ += need;
  if (dropped > 0) {
    evicted_ += dropped;
    const uint64_t now = ipc::monotonic_ns();
    // At most one line a second: a job cycling names would otherwise flood the log.
    if (now - last_warning_ns_ >= 1'000'000'000ull) {
      last_warning_ns_ = now;
      NC_LOG(kWarn,
             "int8 error feedback: {} residuals ({} bytes) held, the limit is {} tensors and {} "
             "bytes (--max-feedback-tensors, --max-feedback-bytes); dropped the least recently "
             "used ({} dropped in all), their tensors restart from zero error",
             entries_.size(), bytes_, max_tensors_, max_bytes_, evicted_);
    }
  }
  return &e.values;
}

size_t FeedbackState::drop_comm(uint32_t comm) {
  size_t dropped = 0;
  for (auto it = entries_.begin(); it != entries_.end();) {
    auto next = std::next(it);
    if (it->second.comm == comm) {
      erase(it);
      ++dropped;
    }
    it = next;
  }
  return dropped;
}

void FeedbackState::erase(std::unordered_map<std::string, Entry>::iterator it) {
  bytes_ -= it->second.values.size() * sizeof(float);
  recent_.erase(it->second.recent);
  entries_.erase(it);
}

}  // namespace nodecomm::daemon
