// libFuzzer target for everything nodecommd decodes from a client's shared memory: the
// submission ring positions and entries (ipc::RingConsumer, drained as Engine::drain does),
// the completion ring's client-owned consumer position (ipc::RingProducer, as
// ClientSession::flush pushes), and each descriptor with its count arrays
// (ipc::check_aux_range, ipc::validate_descriptor, then the daemon's describe_submission and
// describe_disagreement texts). The input encoding is in fuzz_input.hpp.
//
// Besides "no crash, no hang, no ASan/UBSan report", the target checks soundness with oracles
// computed independently in 128-bit arithmetic: a descriptor the validator accepts names only
// buffers and count arrays inside the arena, aligned, aliased only as its in-place convention
// allows; and a ring never hands out an entry that was not published, nor reports an
// impossible position as fine. An oracle failure aborts, which libFuzzer reports as a crash.
//
// Built by tests/fuzz/CMakeLists.txt (clang, -fsanitize=fuzzer,address,undefined; see
// tools/fuzz.sh) and, without libFuzzer, into the main build's fuzz_decoder_replay (the
// fuzz_corpus_replay test).
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <set>
#include <vector>

#include "engine/job.hpp"
#include "engine/submission_decode.hpp"
#include "fuzz_input.hpp"
#include "nodecomm/ipc/ring.hpp"
#include "nodecomm/ipc/validate.hpp"

namespace nodecomm::fuzz {
namespace {

using proto::Collective;
using proto::OpDescriptor;
using u128 = unsigned __int128;

[[noreturn]] void oracle_failed(const char* what, int line) {
  std::fprintf(stderr, "decoder_fuzz: oracle failed at line %d: %s\n", line, what);
  std::abort();
}
#define FUZZ_CHECK(cond)                         \
  do {                                           \
    if (!(cond)) oracle_failed(#cond, __LINE__); \
  } while (0)

// Arenas up to this size are allocated for real, so that the daemon's reads of an accepted
// descriptor's buffers and count arrays also go through ASan.
constexpr uint64_t kSimulatedArena = uint64_t{64} << 10;
// Vector collectives copy size * 2 or 4 count entries; keep one input's work small.
constexpr uint32_t kMaxVectorCommSize = 4096;
constexpr size_t kDrainBatch = 64;  // as Engine::drain

uint64_t send_recv_index(Collective c, uint64_t count, uint64_t rank, uint64_t root) {
  switch (c) {
    case Collective::kAllgather:
    case Collective::kReduceScatter:
      return rank * count;
    case Collective::kGather:
    case Collective::kScatter:
      return root * count;
    default:
      return 0;
  }
}

struct Elems {
  u128 send = 0;
  u128 recv = 0;
};

// An independent statement of nodecomm.h's per-rank buffer sizes.
Elems expected_elems(Collective c, u128 count, u128 size, bool root) {
  switch (c) {
    case Collective::kAllreduce:
      return {count, count};
    case Collective::kReduce:
      return {count, root ? count : 0};
    case Collective::kBroadcast:
      return {root ? count : 0, count};
    case Collective::kReduceScatter:
      return {count * size, count};
    case Collective::kAllgather:
      return {count, count * size};
    case Collective::kGather:
      return {count, root ? count * size : 0};
    case Collective::kScatter:
      return {root ? count * size : 0, count};
    case Collective::kAlltoall:
      return {count * size, count * size};
    default:
      return {0, 0};
  }
}

u128 extent(const uint64_t* counts, const uint64_t* displs, uint32_t size) {
  u128 end = 0;
  for (uint32_t r = 0; r < size; ++r) end = std::max(end, u128{displs[r]} + counts[r]);
  return end;
}

// [offset, +bytes) lies inside the arena, or inside one registered region.
bool inside_memory(const ipc::ValidationLimits& lim, uint64_t offset, u128 bytes) {
  const int64_t region = proto::region_of(offset);
  if (region < 0) return u128{offset} + bytes <= lim.arena_bytes;
  if (region >= lim.region_count) return false;
  return u128{offset & proto::kRegionOffsetMask} + bytes <= lim.region_bytes[region];
}

// What an accepted descriptor promises the daemon. `aux` is the daemon's private copy.
void check_accepted(const OpDescriptor& d, const ipc::ValidationLimits& lim,
                    const std::vector<uint8_t>* arena) {
  FUZZ_CHECK(d.collective < static_cast<uint16_t>(Collective::kCount));
  FUZZ_CHECK(d.dtype < static_cast<uint8_t>(proto::DType::kCount));
  FUZZ_CHECK(d.redop < static_cast<uint8_t>(proto::RedOp::kCount));
  FUZZ_CHECK(d.compression < static_cast<uint8_t>(proto::Compression::kCount));
  FUZZ_CHECK((d.flags & ~proto::kOpFlagInPlace) == 0);
  FUZZ_CHECK(d.reserved[0] == 0 && d.reserved[1] == 0 && d.reserved[2] == 0);
  FUZZ_CHECK(d.seq != 0);
  const auto c = static_cast<Collective>(d.collective);
  const auto dtype = static_cast<proto::DType>(d.dtype);
  const auto op = static_cast<proto::RedOp>(d.redop);
  const auto compression = static_cast<proto::Compression>(d.compression);
  if (op == proto::RedOp::kAvg) FUZZ_CHECK(proto::dtype_is_float(dtype));
  if (compression != proto::Compression::kNone) {
    FUZZ_CHECK(c == Collective::kAllreduce && dtype == proto::DType::kF32);
    FUZZ_CHECK(op != proto::RedOp::kProd);
    if (compression == proto::Compression::kInt8) {
      FUZZ_CHECK(op == proto::RedOp::kSum || op == proto::RedOp::kAvg);
    }
  }
  if (c == Collective::kCommSplit) return;  // no buffers
  FUZZ_CHECK(d.count <= lim.max_count);
  FUZZ_CHECK(lim.comm_size >= 1 && lim.comm_size <= ipc::kMaxCommSize);
  FUZZ_CHECK(lim.comm_rank < lim.comm_size);
  if (proto::collective_has_root(c)) FUZZ_CHECK(d.root < lim.comm_size);
  const u128 elem = proto::dtype_size(dtype);
  FUZZ_CHECK(elem > 0);
  const uint64_t entries = proto::aux_entries(c, lim.comm_size);
  Elems e;
  if (entries > 0) {
    FUZZ_CHECK(lim.aux != nullptr);
    FUZZ_CHECK((d.flags & proto::kOpFlagInPlace) == 0);
    FUZZ_CHECK(d.aux_offset % sizeof(uint64_t) == 0);
    FUZZ_CHECK(u128{d.aux_offset} + u128{entries} * sizeof(uint64_t) <= lim.arena_bytes);
    for (uint64_t i = 0; i < entries; ++i) FUZZ_CHECK(lim.aux[i] <= lim.max_count);
    const uint64_t* a = lim.aux;
    const uint32_t n = lim.comm_size;
    if (c == Collective::kAllgatherv) {
      FUZZ_CHECK(a[lim.comm_rank] == d.count);
      e = {d.count, extent(a, a + n, n)};
    } else {
      e = {extent(a, a + n, n), extent(a + size_t{2} * n, a + size_t{3} * n, n)};
    }
  } else {
    e = expected_elems(c, d.count, lim.comm_size, d.root == lim.comm_rank);
  }
  const u128 send_bytes = e.send * elem;
  const u128 recv_bytes = e.recv * elem;
  const u128 send = d.send_offset;
  const u128 recv = d.recv_offset;
  if (send_bytes > 0) {
    FUZZ_CHECK(inside_memory(lim, d.send_offset, send_bytes));
    FUZZ_CHECK(send % elem == 0);
  }
  if (recv_bytes > 0) {
    FUZZ_CHECK(inside_memory(lim, d.recv_offset, recv_bytes));
    FUZZ_CHECK(recv % elem == 0);
  }
  if (send_bytes > 0 && recv_bytes > 0) {
    if ((d.flags & proto::kOpFlagInPlace) != 0) {
      const u128 shift = u128{send_recv_index(c, d.count, lim.comm_rank, d.root)} * elem;
      switch (c) {
        case Collective::kAllreduce:
        case Collective::kReduce:
        case Collective::kBroadcast:
        case Collective::kAllgather:
        case Collective::kGather:
          FUZZ_CHECK(send == recv + shift);  // the send block lies inside the receive buffer
          break;
        case Collective::kReduceScatter:
        case Collective::kScatter:
          FUZZ_CHECK(recv == send + shift);  // the receive block lies inside the send buffer
          break;
        default:
          FUZZ_CHECK(!"in place accepted for a collective without an in-place form");
      }
    } else {
      FUZZ_CHECK(send + send_bytes <= recv || recv + recv_bytes <= send);
    }
  }
  if (arena != nullptr) {
    // The daemon's first and last access to each buffer (collectives.cpp send_ptr/recv_ptr).
    // Buffers in registered regions are not in the simulated arena; only arena ones are touched.
    volatile uint8_t sink = 0;
    if (send_bytes > 0 && proto::region_of(d.send_offset) < 0) {
      sink = sink + (*arena)[static_cast<size_t>(send)] +
             (*arena)[static_cast<size_t>(send + send_bytes - 1)];
    }
    if (recv_bytes > 0 && proto::region_of(d.recv_offset) < 0) {
      sink = sink + (*arena)[static_cast<size_t>(recv)] +
             (*arena)[static_cast<size_t>(recv + recv_bytes - 1)];
    }
    (void)sink;
  }
}

// Engine::accept's decoding of one descriptor (daemon::decode_submission, the engine's own
// code), with the oracles. `aux_source` supplies the count arrays when the arena is too large
// to simulate.
void decode_descriptor(const OpDescriptor& d, ipc::ValidationLimits lim, Input& aux_source,
                       const std::vector<uint8_t>* arena) {
  std::vector<uint64_t> aux;
  bool read = false;
  const ipc::Verdict verdict =
      daemon::decode_submission(d, lim, aux, [&](uint64_t offset, void* out, size_t bytes) {
        // Only ever after the range check passed, and only inside the arena.
        FUZZ_CHECK(u128{offset} + bytes <= lim.arena_bytes);
        FUZZ_CHECK(offset == d.aux_offset);
        read = true;
        if (arena != nullptr) {
          // The engine's memcpy out of the arena, through ASan.
          std::memcpy(out, arena->data() + offset, bytes);
        } else {
          aux_source.bytes(out, bytes);
        }
      });
  const uint64_t entries =
      d.collective < static_cast<uint16_t>(Collective::kCount)
          ? proto::aux_entries(static_cast<Collective>(d.collective), lim.comm_size)
          : 0;
  FUZZ_CHECK(aux.size() == (read ? entries : 0));
  if (read) lim.aux = aux.data();
  // The texts the daemon builds from what it decoded, whatever the fields hold.
  std::string text = fmt::format("{} seq {}: {}", daemon::describe_submission(d), d.seq,
                                 verdict.ok() ? std::string_view("ok") : verdict.message);
  FUZZ_CHECK(!text.empty());
  if (!verdict.ok()) {
    FUZZ_CHECK(!verdict.message.empty());
    FUZZ_CHECK(verdict.status != proto::Status::kOk);
    return;
  }
  check_accepted(d, lim, arena);
  // Matching against another member's (valid) submission of the same sequence number.
  daemon::CommLayout layout;
  layout.size = 2;
  layout.members = {0, 1};
  layout.member_ranks = {0, 1};
  daemon::Operation op;
  op.seq = d.seq;
  op.slots.resize(2);
  op.slots[0] = daemon::Submission{d, 0, aux};
  OpDescriptor other{};
  other.seq = d.seq;
  other.count = 1;
  op.slots[1] = daemon::Submission{other, 0, {}};
  (void)daemon::describe_disagreement(op, layout);
}

std::optional<std::vector<uint8_t>> simulated_arena(uint64_t bytes, Input& fill) {
  if (bytes > kSimulatedArena) return std::nullopt;
  std::vector<uint8_t> arena(static_cast<size_t>(bytes));
  fill.bytes(arena.data(), arena.size());
  return arena;
}

void fuzz_descriptor(Input& in) {
  const auto d = in.get<OpDescriptor>();
  ipc::ValidationLimits lim;
  lim.arena_bytes = in.get<uint64_t>();
  // The daemon's own limit is at most 2^40 (EngineLimits, the client's 2^40).
  lim.max_count = in.get<uint64_t>() % ((uint64_t{1} << 40) + 1);
  lim.comm_size = in.get<uint32_t>();
  lim.comm_rank = in.get<uint32_t>();
  // Registered regions, from bits the input already has (the corpus layout stays as it was).
  const uint64_t region_bytes[3] = {lim.arena_bytes, lim.arena_bytes / 2 + 3, 4096};
  lim.region_bytes = region_bytes;
  lim.region_count = static_cast<uint32_t>(lim.max_count & 3);
  if (d.collective < static_cast<uint16_t>(Collective::kCount) &&
      proto::aux_entries(static_cast<Collective>(d.collective), 1) > 0 &&
      lim.comm_size > kMaxVectorCommSize) {
    lim.comm_size = 1 + lim.comm_size % kMaxVectorCommSize;
  }
  // The rest of the input is the arena's contents (small arenas) or the count arrays.
  auto arena = simulated_arena(lim.arena_bytes, in);
  decode_descriptor(d, lim, in, arena ? &*arena : nullptr);
}

// A region laid out as a segment's ring: RingHeader, then exactly `capacity` slots, allocated
// to size so that any slot index past the end is an ASan report.
template <class T>
struct RingRegion {
  explicit RingRegion(uint32_t capacity)
      : bytes(sizeof(proto::RingHeader) + sizeof(T) * capacity),
        base(static_cast<uint8_t*>(::operator new (bytes, std::align_val_t{proto::kLineBytes}))) {
    std::memset(base, 0, bytes);
  }
  ~RingRegion() { ::operator delete (base, std::align_val_t{proto::kLineBytes}); }
  RingRegion(const RingRegion&) = delete;
  RingRegion& operator=(const RingRegion&) = delete;
  proto::RingHeader* header() { return reinterpret_cast<proto::RingHeader*>(base); }
  T* slots() { return reinterpret_cast<T*>(base + sizeof(proto::RingHeader)); }
  size_t bytes;
  uint8_t* base;
};

void fuzz_ring(Input& in) {
  const RingPrefix p = in.ring_prefix();
  const uint32_t capacity = 1u << (p.capacity_log2 % (kMaxCapacityLog2 + 1));
  RingRegion<OpDescriptor> submit(capacity);
  RingRegion<proto::Completion> complete(capacity);
  submit.header()->tail.value = p.tail;
  submit.header()->head.value = p.head;
  in.bytes(submit.slots(), sizeof(OpDescriptor) * capacity);
  complete.header()->head.value = p.completion_head;

  ipc::RingConsumer<OpDescriptor> consumer(submit.header(), submit.slots(), capacity, p.start);
  ipc::RingProducer<proto::Completion> producer(complete.header(), complete.slots(), capacity,
                                                p.start);
  ipc::ValidationLimits lim;
  lim.arena_bytes = p.arena_bytes;
  lim.max_count = uint64_t{1} << 34;  // EngineLimits' default
  lim.comm_size = std::max<uint32_t>(1, p.comm_size % 64);
  lim.comm_rank = p.comm_rank % lim.comm_size;
  Input no_aux(nullptr, 0);

  // Every value the client has ever published as its tail: the consumer may only ever cache
  // one of those (or its starting position).
  std::set<uint64_t> published{p.start, p.tail};
  bool dropped = false;  // the daemon drops a client whose ring is corrupt
  bool completions_broken = false;
  uint64_t last_position = consumer.position();

  for (size_t i = 0; i < kMaxEvents && !in.empty(); ++i) {
    const auto op = static_cast<EventOp>(in.get<uint8_t>() % static_cast<uint8_t>(EventOp::kCount));
    uint64_t& tail = submit.header()->tail.value;
    switch (op) {
      case EventOp::kTailDelta:
        tail = consumer.position() + static_cast<uint64_t>(int64_t{in.get<int8_t>()});
        published.insert(tail);
        break;
      case EventOp::kTailRaw:
        tail = in.get<uint64_t>();
        published.insert(tail);
        break;
      case EventOp::kHeadRaw:
        submit.header()->head.value = in.get<uint64_t>();
        break;
      case EventOp::kWriteSlot: {
        const uint8_t index = in.get<uint8_t>();
        in.bytes(&submit.slots()[index % capacity], sizeof(OpDescriptor));
        break;
      }
      case EventOp::kDrain: {
        if (dropped) break;
        OpDescriptor d;
        for (size_t taken = 0; taken < kDrainBatch; ++taken) {
          const uint64_t before = consumer.position();
          const uint64_t shared_tail = tail;
          OpDescriptor expected;
          std::memcpy(&expected, &submit.slots()[before & (capacity - 1)], sizeof(expected));
          const ipc::RingResult r = consumer.try_pop(d);
          if (r == ipc::RingResult::kEmpty) {
            FUZZ_CHECK(consumer.position() == before);
            FUZZ_CHECK(shared_tail == before);
            break;
          }
          if (r == ipc::RingResult::kCorrupt) {
            FUZZ_CHECK(consumer.position() == before);
            FUZZ_CHECK(shared_tail < before || shared_tail - before > capacity);
            dropped = true;
            break;
          }
          FUZZ_CHECK(r == ipc::RingResult::kOk);
          FUZZ_CHECK(consumer.position() == before + 1);
          FUZZ_CHECK(std::memcmp(&d, &expected, sizeof(d)) == 0);
          // Published, and by a position that was possible when the consumer took it.
          FUZZ_CHECK(consumer.position() <= consumer.published());
          FUZZ_CHECK(consumer.published() - before <= capacity);
          FUZZ_CHECK(published.count(consumer.published()) == 1);
          // The consumer's shared line says how far it read; the client must see progress.
          FUZZ_CHECK(submit.header()->head.value == consumer.position());
          decode_descriptor(d, lim, no_aux, nullptr);
        }
        break;
      }
      case EventOp::kMaybeNonempty:
        if (!dropped) (void)consumer.maybe_nonempty();
        FUZZ_CHECK(consumer.position() == last_position);
        break;
      case EventOp::kCompletionHead:
        complete.header()->head.value = in.get<uint64_t>();
        break;
      case EventOp::kCompletionConsume:
        complete.header()->head.value = producer.position() - in.get<uint8_t>();
        break;
      case EventOp::kPush: {
        const int n = in.get<uint8_t>() % 8 + 1;
        for (int k = 0; k < n && !completions_broken; ++k) {
          proto::Completion c{};
          c.seq = producer.position() + 1;
          std::snprintf(c.message, sizeof(c.message), "completion %llu",
                        static_cast<unsigned long long>(c.seq));
          const uint64_t before = producer.position();
          const uint64_t head = complete.header()->head.value;
          const ipc::RingResult r = producer.try_push(c);
          if (r == ipc::RingResult::kOk) {
            FUZZ_CHECK(producer.position() == before + 1);
            FUZZ_CHECK(complete.header()->tail.value == producer.position());
            FUZZ_CHECK(std::memcmp(&complete.slots()[before & (capacity - 1)], &c, sizeof(c)) == 0);
          } else if (r == ipc::RingResult::kFull) {
            FUZZ_CHECK(producer.position() == before);
            FUZZ_CHECK(head <= before && before - head == capacity);
          } else {
            FUZZ_CHECK(r == ipc::RingResult::kCorrupt);
            FUZZ_CHECK(producer.position() == before);
            FUZZ_CHECK(head > before || before - head > capacity);
            completions_broken = true;  // ClientSession stops delivering
          }
        }
        break;
      }
      case EventOp::kCount:
        break;
    }
    FUZZ_CHECK(consumer.position() >= last_position);
    last_position = consumer.position();
  }
}

}  // namespace
}  // namespace nodecomm::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nodecomm::fuzz;
  if (size == 0) return 0;
  Input in(data + 1, size - 1);
  if ((data[0] & 1) == kTargetDescriptor) {
    fuzz_descriptor(in);
  } else {
    fuzz_ring(in);
  }
  return 0;
}
