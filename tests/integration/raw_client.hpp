// The hostile rank's side of the protocol, spoken by hand with the proto/ipc headers (socket
// hello, segment, rings), so hostile_client.cpp can break any part of it on purpose.
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "nodecomm/ipc/fixed_text.hpp"
#include "nodecomm/ipc/futex.hpp"
#include "nodecomm/ipc/ring.hpp"
#include "nodecomm/ipc/segment.hpp"
#include "nodecomm/ipc/socket.hpp"
#include "nodecomm/proto/control.hpp"

namespace hostile {

using nodecomm::proto::Collective;
using nodecomm::proto::Completion;
using nodecomm::proto::DType;
using nodecomm::proto::OpDescriptor;
using nodecomm::proto::RedOp;
using nodecomm::proto::Status;
namespace ipc = nodecomm::ipc;
namespace proto = nodecomm::proto;
using Clock = std::chrono::steady_clock;

inline double timeout_sec() {
  const char* v = std::getenv("NODECOMM_TIMEOUT_SEC");
  const double t = v != nullptr ? std::atof(v) : 0;
  return t > 0 ? t : 20;
}

inline std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

class RawClient {
 public:
  std::string error;
  ipc::Fd segment_fd;  // the memfd that came with the hello reply (kept: attacks use it)
  uint64_t segment_bytes = 0;
  ipc::Fd fd;
  ipc::Segment segment;
  ipc::RingProducer<OpDescriptor> submissions;
  ipc::RingConsumer<Completion> completions;
  uint32_t world_rank = 0;
  uint32_t world_size = 0;
  uint32_t node_index = 0;
  uint32_t capacity = 0;
  uint64_t arena_bytes = 0;  // as the daemon laid it out, read before any scribbling
  uint8_t* arena = nullptr;
  OpDescriptor* submit_slots = nullptr;
  proto::RingHeader* submit_ring = nullptr;
  proto::RingHeader* complete_ring = nullptr;
  proto::Doorbells* bells = nullptr;  // resolved at attach: the header may be scribbled later

  // Connects, says hello, and receives the segment's descriptor.
  bool hello() {
    const std::string dir = env_or("NODECOMM_RUNTIME_DIR", "");
    const std::string path = dir + "/nodecommd.sock";
    fd = ipc::connect_unix(path, error);
    if (!fd.valid()) return false;
    proto::Hello h{};
    h.type = static_cast<uint32_t>(proto::ControlType::kHello);
    h.magic = proto::kControlMagic;
    h.layout_version = proto::kLayoutVersion;
    h.local_rank = static_cast<uint32_t>(std::atoi(env_or("NODECOMM_LOCAL_RANK", "0").c_str()));
    h.local_size = static_cast<uint32_t>(std::atoi(env_or("NODECOMM_LOCAL_SIZE", "1").c_str()));
    // As the library says them, so that a raw rank joins the same job as the library's ranks.
    h.node_count = static_cast<uint32_t>(std::atoi(env_or("NODECOMM_NODES", "0").c_str()));
    h.node_index = h.node_count == 0
                       ? 0
                       : static_cast<uint32_t>(std::atoi(env_or("NODECOMM_NODE", "0").c_str()));
    h.arena_bytes = 1 << 20;
    ipc::copy_text(h.job, env_or("NODECOMM_JOB", "default"));
    h.tuning = proto::JobTuning{-1, -1, -1, -1, -1, 0};
    if (ipc::send_message(fd.get(), &h, sizeof(h)) != ipc::IoResult::kOk) {
      error = "cannot send hello";
      return false;
    }
    proto::HelloReply reply{};
    size_t size = 0;
    if (ipc::recv_message_timed(fd.get(), &reply, sizeof(reply), size, ms(), &segment_fd) !=
            ipc::IoResult::kOk ||
        size != sizeof(reply)) {
      error = "no hello reply";
      return false;
    }
    if (reply.status != 0) {
      error = "refused: " + ipc::bounded_text(reply.message);
      return false;
    }
    segment_bytes = reply.segment_bytes;
    return true;
  }

  // Maps the segment, acknowledges it and waits for the job to form.
  bool join() {
    try {
      segment = ipc::Segment::open(segment_fd.get(), segment_bytes);
    } catch (const std::exception& e) {
      error = e.what();
      return false;
    }
    const proto::Mapped mapped{static_cast<uint32_t>(proto::ControlType::kMapped), 0};
    if (ipc::send_message(fd.get(), &mapped, sizeof(mapped)) != ipc::IoResult::kOk) {
      error = "cannot send mapped";
      return false;
    }
    const auto& h = segment.header();
    capacity = h.submit_capacity;
    arena_bytes = h.arena_bytes;
    arena = segment.arena();
    submit_slots = segment.submit_slots();
    submit_ring = &segment.submit_ring();
    complete_ring = &segment.complete_ring();
    bells = &segment.doorbells();
    submissions = ipc::RingProducer<OpDescriptor>(submit_ring, submit_slots, capacity);
    completions =
        ipc::RingConsumer<Completion>(complete_ring, segment.complete_slots(), h.complete_capacity);
    proto::JobReady ready{};
    size_t size = 0;
    if (ipc::recv_message_timed(fd.get(), &ready, sizeof(ready), size, ms()) !=
            ipc::IoResult::kOk ||
        size != sizeof(ready) || ready.status != 0) {
      error = "job did not form: " + ipc::bounded_text(ready.message);
      return false;
    }
    world_rank = ready.world_rank;
    world_size = ready.world_size;
    node_index = ready.node_index;
    return true;
  }

  // As the library does after publishing: a parked daemon is woken through the socket.
  void wake() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (ipc::exchange_word(bells->daemon_parked, 0, std::memory_order_seq_cst) != 0) {
      const proto::Wake w{static_cast<uint32_t>(proto::ControlType::kWake), 0};
      ipc::send_message(fd.get(), &w, sizeof(w));
    }
  }
  // Sends a wake regardless: after a raw scribble the parked flag may be garbage too.
  void force_wake() {
    const proto::Wake w{static_cast<uint32_t>(proto::ControlType::kWake), 0};
    ipc::send_message(fd.get(), &w, sizeof(w));
  }

  bool post(OpDescriptor d) {
    d.correlation_id = next_correlation++;
    if (submissions.try_push(d) != ipc::RingResult::kOk) return false;
    wake();
    return true;
  }

  // The producer position as published (ours until we scribble it).
  uint64_t tail() const { return ipc::detail::load_acquire(submit_ring->tail.value); }
  void set_tail(uint64_t value) { ipc::detail::store_release(submit_ring->tail.value, value); }

  enum class Next { kCompletion, kClosed, kTimeout, kCorrupt };
  Next next(Completion& c, double seconds) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < deadline) {
      const ipc::RingResult r = completions.try_pop(c);
      if (r == ipc::RingResult::kOk) return Next::kCompletion;
      if (r == ipc::RingResult::kCorrupt) return Next::kCorrupt;
      if (ipc::peer_closed(fd.get())) return Next::kClosed;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return Next::kTimeout;
  }

  // Waits for the daemon to close the connection (it does when the job ends), failing if a
  // completion arrives instead.
  bool wait_dropped(double seconds, std::string& why) {
    Completion c{};
    const Next n = next(c, seconds);
    if (n == Next::kClosed) return true;
    why = n == Next::kCompletion ? fmt::format("an unexpected completion (status {}, '{}')",
                                               c.status, ipc::bounded_text(c.message))
          : n == Next::kTimeout  ? "no disconnection within the timeout"
                                 : "a corrupt completion ring";
    return false;
  }

  void bye() {
    const proto::Bye b{static_cast<uint32_t>(proto::ControlType::kBye), 0};
    ipc::send_message(fd.get(), &b, sizeof(b));
  }

 private:
  static int ms() { return static_cast<int>(timeout_sec() * 1000); }
  uint64_t next_correlation = 1;
};

inline OpDescriptor make_desc(Collective c, DType t, RedOp op, uint32_t comm, uint64_t seq,
                              uint64_t count, uint64_t send, uint64_t recv) {
  OpDescriptor d{};
  d.collective = static_cast<uint16_t>(c);
  d.dtype = static_cast<uint8_t>(t);
  d.redop = static_cast<uint8_t>(op);
  d.comm_id = comm;
  d.seq = seq;
  d.count = count;
  d.send_offset = send;
  d.recv_offset = recv;
  std::snprintf(d.name, sizeof(d.name), "hostile.%llu", static_cast<unsigned long long>(seq));
  return d;
}

}  // namespace hostile
