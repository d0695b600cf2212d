// libFuzzer target for the daemon's side of a client's segment when the client scribbles on
// everything it can write: the segment header, the doorbells, both rings' position lines and
// the submission slots. Each input gets a real segment (ipc::Segment::create, as the daemon
// makes them) attached to a real daemon::ClientSession, and drives it as nodecommd does:
// heartbeats, parking flags, draining and validating submissions as Engine::accept does
// (daemon::decode_submission with limits from the session's segment, count arrays copied out
// of its arena), failing them
// with completions and flushing.
//
// The oracles: whatever the header says, the daemon's view of the segment (arena, arena size,
// doorbells) is the one it created, and an accepted descriptor's buffers lie in the real arena.
// Input: a sequence of events, see Event below. Run with tools/fuzz.sh SECONDS session; the
// main build replays tests/fuzz/corpus-session with fuzz_session_replay.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "config/log.hpp"
#include "engine/submission_decode.hpp"
#include "fuzz_input.hpp"
#include "nodecomm/ipc/fixed_text.hpp"
#include "nodecomm/ipc/validate.hpp"
#include "session/client_session.hpp"

namespace nodecomm::fuzz {
namespace {

using u128 = unsigned __int128;

[[noreturn]] void oracle_failed(const char* what, int line) {
  std::fprintf(stderr, "session_fuzz: oracle failed at line %d: %s\n", line, what);
  std::abort();
}
#define FUZZ_CHECK(cond)                         \
  do {                                           \
    if (!(cond)) oracle_failed(#cond, __LINE__); \
  } while (0)

constexpr uint32_t kCapacity = 4;
constexpr uint64_t kArena = 4096;

enum class Event : uint8_t {
  kHeaderBytes = 0,   // u8 offset, u8 length, bytes: anywhere in the 128-byte header
  kControlBytes = 1,  // u16 offset, u8 length, bytes: doorbells and ring lines and slots
  kSlot = 2,          // u8 index, OpDescriptor
  kTail = 3,          // int8: submit tail = consumed + delta
  kDaemonPass = 4,    // u8 flags: one pass of the daemon's loop over this client
  kCount
};

void daemon_pass(daemon::ClientSession& session, const proto::SegmentGeometry& g, uint8_t* base,
                 uint8_t flags) {
  const ipc::Segment& seg = session.segment();
  // The daemon's view must be the segment it created, not what the header says now.
  FUZZ_CHECK(seg.arena() == base + g.arena_offset);
  FUZZ_CHECK(seg.arena_bytes() == kArena);
  FUZZ_CHECK(reinterpret_cast<uint8_t*>(&seg.doorbells()) == base + g.doorbells_offset);
  session.heartbeat(12345 + flags);
  session.set_daemon_parked((flags & 1) != 0);
  proto::OpDescriptor d;
  for (int taken = 0; taken < 64; ++taken) {
    const ipc::RingResult r = session.submissions().try_pop(d);
    if (r != ipc::RingResult::kOk) {
      if (r == ipc::RingResult::kCorrupt) {
        // Engine::drain formats this from the header before the daemon drops the client.
        (void)fmt::format("capacity {}", seg.header().submit_capacity);
      }
      break;
    }
    // Engine::accept on a communicator of (flags >> 1) % 4 + 1 ranks.
    const uint32_t comm_size = (flags >> 1) % 4 + 1;
    const ipc::ValidationLimits lim{seg.arena_bytes(), uint64_t{1} << 34, comm_size, 0};
    std::vector<uint64_t> aux;
    const ipc::Verdict v =
        daemon::decode_submission(d, lim, aux, [&](uint64_t offset, void* out, size_t bytes) {
          std::memcpy(out, seg.arena() + offset, bytes);
        });
    const uint64_t entries = aux.size();
    if (v.ok() && static_cast<proto::Collective>(d.collective) != proto::Collective::kCommSplit) {
      const uint64_t elem = proto::dtype_size(static_cast<proto::DType>(d.dtype));
      proto::BufferElems e = proto::buffer_elems(static_cast<proto::Collective>(d.collective),
                                                 d.count, comm_size, d.root == 0);
      if (entries > 0) {
        FUZZ_CHECK(ipc::vector_extents(static_cast<proto::Collective>(d.collective), aux.data(),
                                       comm_size, 0, d.count, uint64_t{1} << 34, e)
                       .ok());
      }
      if (e.send > 0) FUZZ_CHECK(u128{d.send_offset} + u128{e.send} * elem <= kArena);
      if (e.recv > 0) FUZZ_CHECK(u128{d.recv_offset} + u128{e.recv} * elem <= kArena);
    }
    proto::Completion c{};
    c.correlation_id = d.correlation_id;
    c.seq = d.seq;
    c.status = static_cast<int32_t>(v.status);
    c.new_comm_id = proto::kNoComm;
    ipc::copy_text(c.message, v.message);
    session.complete(c);
  }
  session.flush();
}

}  // namespace
}  // namespace nodecomm::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nodecomm;
  using namespace nodecomm::fuzz;
  static const bool quiet = (daemon::Log::get().set_level(daemon::LogLevel::kError), true);
  (void)quiet;
  static const proto::SegmentGeometry g = proto::segment_geometry(kCapacity, kCapacity, kArena);
  ipc::SegmentSpec spec;
  spec.submit_capacity = kCapacity;
  spec.complete_capacity = kCapacity;
  spec.arena_bytes = kArena;
  daemon::ClientSession session(1, ipc::Fd(),
                                ipc::PeerCredentials{::getpid(), ::geteuid(), ::getegid()});
  session.attach_segment(ipc::Segment::create(spec, 1, 0));
  session.set_state(daemon::ClientSession::State::kJoined);
  auto* base = static_cast<uint8_t*>(session.segment().base());
  const uint64_t writable = g.arena_offset;  // the client may write the whole segment; the
                                             // arena itself is data and not interpreted
  Input in(data, size);
  for (size_t i = 0; i < kMaxEvents && !in.empty(); ++i) {
    const auto op = static_cast<Event>(in.get<uint8_t>() % static_cast<uint8_t>(Event::kCount));
    switch (op) {
      case Event::kHeaderBytes: {
        const size_t offset = in.get<uint8_t>() % sizeof(proto::SegmentHeader);
        const size_t len =
            std::min<size_t>(in.get<uint8_t>() % 16 + 1, sizeof(proto::SegmentHeader) - offset);
        in.bytes(base + offset, len);
        break;
      }
      case Event::kControlBytes: {
        const size_t offset = sizeof(proto::SegmentHeader) +
                              in.get<uint16_t>() % (writable - sizeof(proto::SegmentHeader));
        const size_t len = std::min<size_t>(in.get<uint8_t>() % 16 + 1, writable - offset);
        in.bytes(base + offset, len);
        break;
      }
      case Event::kSlot: {
        auto* slots = reinterpret_cast<proto::OpDescriptor*>(base + g.submit_ring_offset +
                                                             sizeof(proto::RingHeader));
        in.bytes(&slots[in.get<uint8_t>() % kCapacity], sizeof(proto::OpDescriptor));
        break;
      }
      case Event::kTail: {
        auto* ring = reinterpret_cast<proto::RingHeader*>(base + g.submit_ring_offset);
        ring->tail.value =
            session.submissions().position() + static_cast<uint64_t>(int64_t{in.get<int8_t>()});
        break;
      }
      case Event::kDaemonPass:
        daemon_pass(session, g, base, in.get<uint8_t>());
        break;
      case Event::kCount:
        break;
    }
  }
  return 0;
}
