// The daemon's view of one attached client: its control socket, its segment, and the two
// ring ends the daemon owns (consumer of submissions, producer of completions).
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>

#include "nodecomm/ipc/clock.hpp"
#include "nodecomm/ipc/ring.hpp"
#include "nodecomm/ipc/segment.hpp"
#include "nodecomm/ipc/socket.hpp"
#include "nodecomm/proto/abi.hpp"
#include "session/regions.hpp"

namespace nodecomm::daemon {

class Job;

class ClientSession {
 public:
  enum class State {
    kHello,    // connected, waiting for Hello
    kBacking,  // segment reserved; its pages are being backed a chunk per loop turn
    kMapping,  // segment created and passed, waiting for the client to say it mapped it
    kJoined,   // segment mapped; member of a job (forming or running)
    kClosed,   // socket gone or dropped; waiting to be reaped
  };

  ClientSession(uint32_t id, ipc::Fd fd, ipc::PeerCredentials cred)
      : id_(id), fd_(std::move(fd)), cred_(cred), state_since_ns_(ipc::monotonic_ns()) {}

  uint32_t id() const { return id_; }
  int fd() const { return fd_.get(); }
  // A dropped client's socket is closed at once (it sees EOF), not when its job ends.
  void close_socket() { fd_ = ipc::Fd(); }
  const ipc::PeerCredentials& cred() const { return cred_; }
  State state() const { return state_; }
  void set_state(State s) {
    state_ = s;
    state_since_ns_ = ipc::monotonic_ns();
  }
  // When it entered its state: the hello and mapping deadlines count from here.
  uint64_t state_since_ns() const { return state_since_ns_; }

  // The segment while it is being backed (kBacking): not attached, so nothing touches its
  // pages before they exist.
  ipc::Segment pending_segment;
  // Takes ownership of the created segment and attaches the daemon's ring ends.
  void attach_segment(ipc::Segment segment);
  const ipc::Segment& segment() const { return segment_; }
  ipc::Segment& segment() { return segment_; }
  bool has_segment() const { return segment_.base() != nullptr; }

  ipc::RingConsumer<proto::OpDescriptor>& submissions() { return submissions_; }

  // The client's registered regions (ControlType::kRegister), unmapped with the session.
  RegisteredRegions& regions() { return regions_; }
  const RegisteredRegions& regions() const { return regions_; }
  // The daemon's address of a validated descriptor offset: arena or registered region.
  uint8_t* address(uint64_t offset) const { return regions_.address(segment_.arena(), offset); }

  // Queues a completion: into the ring, or into a private overflow list if the client is not
  // draining its ring (never blocks the engine on a slow or hostile client).
  void complete(const proto::Completion& completion);
  // Moves overflowed completions into the ring and rings the doorbell if anything was
  // published since the last call. Returns the number published.
  size_t flush();
  // Completions the client has not made room for yet.
  size_t backlog() const { return overflow_.size(); }
  // Tells the client's library the daemon is about to sleep, so its next submit sends a wake.
  void set_daemon_parked(bool parked);
  void heartbeat(uint64_t now_ns);

  Job* job = nullptr;
  uint32_t local_rank = 0;
  uint32_t world_rank = 0;
  // Set when the client broke the shared-memory protocol; the daemon then drops it.
  std::string violation;
  // Next sequence number expected from this client on each communicator.
  std::unordered_map<uint32_t, uint64_t> next_seq;
  // Its operations filed in communicators and not yet completed (EngineLimits::max_in_flight).
  uint64_t in_flight = 0;

 private:
  uint32_t id_;
  ipc::Fd fd_;
  ipc::PeerCredentials cred_;
  State state_ = State::kHello;
  uint64_t state_since_ns_ = 0;
  ipc::Segment segment_;
  ipc::RingConsumer<proto::OpDescriptor> submissions_;
  ipc::RingProducer<proto::Completion> completions_;
  std::deque<proto::Completion> overflow_;
  RegisteredRegions regions_;
  size_t unannounced_ = 0;
  bool ring_broken_ = false;
};

}  // namespace nodecomm::daemon
