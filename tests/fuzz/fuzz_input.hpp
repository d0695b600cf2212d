// The byte encoding of the decoder fuzzer's inputs, shared by the fuzz target
// (decoder_fuzz.cpp) and the seed corpus generator (make_corpus.cpp).
//
// Byte 0 picks the target: even = descriptor, odd = ring.
//
// Descriptor input: OpDescriptor (112 bytes), arena_bytes u64, max_count u64, comm_size u32,
// comm_rank u32, then the count arrays as u64 (zero-padded): what Engine::accept hands to
// ipc::check_aux_range and ipc::validate_descriptor.
//
// Ring input: RingPrefix, then capacity OpDescriptor slots, then events (EventOp byte +
// operands) applied to a submission ring the fuzzer's "client" controls completely, drained
// as Engine::drain does, and a completion ring whose consumer position the client scribbles.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "nodecomm/proto/abi.hpp"

namespace nodecomm::fuzz {

inline constexpr uint8_t kTargetDescriptor = 0;
inline constexpr uint8_t kTargetRing = 1;
inline constexpr uint32_t kMaxCapacityLog2 = 8;  // rings of 1..256 entries, as the daemon's
inline constexpr size_t kMaxEvents = 2048;

struct RingPrefix {
  uint8_t capacity_log2;     // % (kMaxCapacityLog2 + 1)
  uint64_t start;            // the position both ends agree on at attach
  uint64_t tail;             // the producer's shared position, as the client left it
  uint64_t head;             // the consumer's shared line (the client may scribble it too)
  uint64_t completion_head;  // the client's consumer position in the completion ring
  uint64_t arena_bytes;      // validation limits for the drained descriptors
  uint32_t comm_size;
  uint32_t comm_rank;
};

enum class EventOp : uint8_t {
  kTailDelta = 0,          // int8: tail = consumer position + delta
  kTailRaw = 1,            // u64: tail = value
  kHeadRaw = 2,            // u64: the client scribbles the consumer's own line
  kWriteSlot = 3,          // u8 index, OpDescriptor bytes
  kDrain = 4,              // pop and validate up to 64 entries, as Engine::drain
  kMaybeNonempty = 5,      // RingConsumer::maybe_nonempty()
  kCompletionHead = 6,     // u64: completion-ring head = value
  kCompletionConsume = 7,  // u8: completion-ring head = producer position - value
  kPush = 8,               // u8: push (value % 8) + 1 completions, as ClientSession::flush
  kCount
};

// Reads fixed-width little-endian fields; past the end every byte reads as zero.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  void bytes(void* out, size_t n) {
    auto* dst = static_cast<uint8_t*>(out);
    const size_t have = pos_ < size_ ? std::min(n, size_ - pos_) : 0;
    if (have > 0) std::memcpy(dst, data_ + pos_, have);
    if (have < n) std::memset(dst + have, 0, n - have);
    pos_ += have;
  }
  template <class T>
  T get() {
    T v{};
    bytes(&v, sizeof(T));
    return v;
  }
  bool empty() const { return pos_ >= size_; }
  size_t remaining() const { return pos_ < size_ ? size_ - pos_ : 0; }

  RingPrefix ring_prefix() {
    RingPrefix p{};
    p.capacity_log2 = get<uint8_t>();
    p.start = get<uint64_t>();
    p.tail = get<uint64_t>();
    p.head = get<uint64_t>();
    p.completion_head = get<uint64_t>();
    p.arena_bytes = get<uint64_t>();
    p.comm_size = get<uint32_t>();
    p.comm_rank = get<uint32_t>();
    return p;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Builds inputs in the same encoding (seed corpus, tests).
class Writer {
 public:
  template <class T>
  Writer& put(const T& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
    return *this;
  }
  Writer& ring_prefix(const RingPrefix& p) {
    return put(p.capacity_log2)
        .put(p.start)
        .put(p.tail)
        .put(p.head)
        .put(p.completion_head)
        .put(p.arena_bytes)
        .put(p.comm_size)
        .put(p.comm_rank);
  }
  Writer& event(EventOp op) { return put(static_cast<uint8_t>(op)); }
  std::vector<uint8_t> out;
};

}  // namespace nodecomm::fuzz
