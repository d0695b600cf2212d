#include "observe/trace.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "nodecomm/ipc/clock.hpp"
#include "nodecomm/ipc/fixed_text.hpp"

namespace nodecomm::daemon {

int reader_group_id(const std::string& group) {
  if (group.empty()) return -1;
  if (group.find_first_not_of("0123456789") == std::string::npos && group.size() < 10) {
    return std::stoi(group);
  }
  const struct group* named = ::getgrnam(group.c_str());
  return named != nullptr ? static_cast<int>(named->gr_gid) : -1;
}

std::string TraceRecorder::start(const std::string& shm_name, const std::string& instance,
                                 uint32_t node_index, uint64_t capacity, int reader_gid) {
  if (recording()) {
    return fmt::format("a trace is already being recorded ({} events so far); stop it first",
                       count_);
  }
  capacity = std::clamp<uint64_t>(capacity, 1, kMaxEvents);
  header_ = nullptr;
  jobs_ = nullptr;
  events_ = nullptr;
  const size_t bytes = sizeof(proto::TraceHeader) + proto::kTraceJobs * sizeof(proto::TraceJob) +
                       capacity * sizeof(proto::TraceEvent);
  if (std::string error = shm_.create(shm_name, bytes, reader_gid); !error.empty()) return error;
  header_ = static_cast<proto::TraceHeader*>(shm_.data());
  jobs_ = reinterpret_cast<proto::TraceJob*>(header_ + 1);
  events_ = reinterpret_cast<proto::TraceEvent*>(jobs_ + proto::kTraceJobs);
  capacity_ = capacity;
  count_ = 0;
  dropped_ = 0;
  unit_begin_.clear();
  jobs_seen_.clear();
  header_->magic = proto::kTraceMagic;
  header_->state = 1;
  header_->capacity = capacity;
  header_->start_monotonic_ns = ipc::monotonic_ns();
  header_->start_realtime_ns = realtime_ns();
  header_->node_index = node_index;
  header_->pid = static_cast<uint32_t>(::getpid());
  ipc::copy_text(header_->instance, instance);
  // release: a reader that sees the version sees the initialised header.
  std::atomic_ref<uint32_t>(header_->layout_version)
      .store(proto::kTraceLayoutVersion, std::memory_order_release);
  recording_ = true;
  return {};
}

void TraceRecorder::stop() {
  if (!recording()) return;
  recording_ = false;
  unit_begin_.clear();
  proto::counter_store(header_->stop_monotonic_ns, ipc::monotonic_ns());
  proto::counter_store(header_->dropped, dropped_);
  // release: the final count and the stop time are visible with the stopped state.
  std::atomic_ref<uint32_t>(header_->state).store(2, std::memory_order_release);
}

void TraceRecorder::record(proto::TraceEvent event, uint64_t job, const std::string& job_name) {
  if (!recording()) return;
  event.job = static_cast<uint32_t>(job);
  if (jobs_seen_.insert(job).second) {
    const uint32_t n = header_->jobs;
    if (n < proto::kTraceJobs) {
      proto::TraceJob entry{};
      entry.serial = job;
      ipc::copy_text(entry.name, job_name);
      jobs_[n] = entry;
      // release: the entry is visible before the count that includes it.
      std::atomic_ref<uint32_t>(header_->jobs).store(n + 1, std::memory_order_release);
    } else {
      std::atomic_ref<uint32_t>(header_->jobs_dropped)
          .store(header_->jobs_dropped + 1, std::memory_order_relaxed);
    }
  }
  if (count_ == capacity_) {
    ++dropped_;
    proto::counter_store(header_->dropped, dropped_);
    return;
  }
  events_[count_] = event;
  ++count_;
  // release: the event's bytes are visible before the count that includes it.
  std::atomic_ref<uint64_t>(header_->count).store(count_, std::memory_order_release);
}

uint64_t TraceRecorder::take_unit_begin(uint64_t job, uint64_t handle) {
  const auto it = unit_begin_.find({job, handle});
  if (it == unit_begin_.end()) return 0;
  const uint64_t begin = it->second;
  unit_begin_.erase(it);
  return begin;
}

}  // namespace nodecomm::daemon
