#include "session/client_session.hpp"

#include <atomic>

#include "config/log.hpp"
#include "nodecomm/ipc/futex.hpp"

namespace nodecomm::daemon {

void ClientSession::attach_segment(ipc::Segment segment) {
  segment_ = std::move(segment);
  submissions_ = ipc::RingConsumer<proto::OpDescriptor>(
      &segment_.submit_ring(), segment_.submit_slots(), segment_.submit_capacity());
  completions_ = ipc::RingProducer<proto::Completion>(
      &segment_.complete_ring(), segment_.complete_slots(), segment_.complete_capacity());
}

void ClientSession::complete(const proto::Completion& completion) {
  if (!has_segment() || state_ == State::kClosed) return;
  if (overflow_.empty() && !ring_broken_) {
    // The common case, straight into the ring: no queue entry (a 1 KiB copy and an allocation).
    const ipc::RingResult r =
        completions_.try_push(completion, proto::completion_bytes(completion));
    if (r == ipc::RingResult::kOk) {
      ++unannounced_;
      flush();
      return;
    }
  }
  overflow_.push_back(completion);
  flush();
}

size_t ClientSession::flush() {
  size_t published = 0;
  while (!overflow_.empty() && !ring_broken_) {
    const ipc::RingResult r =
        completions_.try_push(overflow_.front(), proto::completion_bytes(overflow_.front()));
    if (r == ipc::RingResult::kCorrupt) {
      // The client moved its consumer position impossibly; it gets no more completions and
      // will be dropped by the liveness check when it stops answering.
      NC_LOG(kWarn, "client {} (pid {}): completion ring head is corrupt; stopping delivery", id_,
             cred_.pid);
      ring_broken_ = true;
      break;
    }
    if (r != ipc::RingResult::kOk) break;
    overflow_.pop_front();
    ++published;
  }
  unannounced_ += published;
  if (unannounced_ > 0) {
    auto& bells = segment_.doorbells();
    // seq_cst: the bump must be ordered before reading client_waiting (Dekker with the
    // client's store of client_waiting then load of the futex word).
    ipc::increment_word(bells.completion_futex, std::memory_order_seq_cst);
    if (ipc::load_word(bells.client_waiting, std::memory_order_seq_cst) != 0) {
      ipc::futex_wake_all(&bells.completion_futex);
    }
    unannounced_ = 0;
  }
  return published;
}

void ClientSession::set_daemon_parked(bool parked) {
  if (!has_segment()) return;
  // seq_cst: pairs with the client's exchange after publishing a submission, so either the
  // daemon's re-check sees the submission or the client sees the flag and sends a wake.
  ipc::store_word(segment_.doorbells().daemon_parked, parked ? 1 : 0, std::memory_order_seq_cst);
}

void ClientSession::heartbeat(uint64_t now_ns) {
  if (!has_segment()) return;
  // relaxed: a liveness hint only; nothing else is published through it.
  ipc::store_u64(segment_.doorbells().daemon_heartbeat_ns, now_ns, std::memory_order_relaxed);
}

}  // namespace nodecomm::daemon
