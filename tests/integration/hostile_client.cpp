// A hostile client against a real nodecommd, next to well-behaved ranks doing real
// allreduces. Run under nodecomm-launch (node 0 needs at least 2 ranks):
//
//   hostile_client MODE
//
// Node 0's last local rank is the hostile one. It speaks the protocol itself with the proto/ipc
// headers (socket hello, segment, rings), takes part correctly in a world allreduce and in a
// split that leaves it out, and then attacks its node's daemon through its own segment:
//
//   garbage          random bytes in submission ring entries, published with a valid tail
//   ring-ahead       producer position more than the capacity ahead of the consumer
//   ring-backwards   producer position moved back below what the daemon consumed
//   offsets          send/receive buffers and count arrays outside its arena, wrapping offsets
//   bad-fields       unknown dtype, op, collective, flags, reserved bytes, compression; bad root,
//                    count, alignment, aliasing; then a repeated sequence number
//   bad-comm         communicators that do not exist or that it is not a member of, then a
//                    valid allreduce (the daemon must still serve it, exactly)
//   completion-head  scribbles its completion ring's consumer position, then floods the daemon
//                    with failing operations so that the completion ring fills
//   header           scribbles on its segment header and doorbells (sizes, offsets, magic,
//                    capacities), then posts the world allreduce on a buffer past its real
//                    arena (inside the arena the header now claims)
//   header-arena     only arena_bytes, then that allreduce (a reproducer; run it on 1 node)
//   header-doorbells only doorbells_offset, then a valid world allreduce (a reproducer)
//   regions          registration requests the daemon must refuse (no descriptor, a pipe, a
//                    range past the file, an unaligned offset), then a good memfd region it
//                    takes part in the world allreduce from (exactly), then a buffer in a
//                    region it never registered
//   region-truncate  registers a memfd, truncates it, and posts the world allreduce from it:
//                    the daemon must survive the SIGBUS and drop it, naming the shrunken region
//   flood            up to 50000 failing operations without ever consuming a completion:
//                    expects the daemon to stop taking them after about three rings' worth
//                    (backpressure or a drop), not a growing backlog
//
// For each it expects an error completion naming the problem, or to be dropped (the daemon
// closes its connection when the job ends). The good ranks meanwhile allreduce on a
// communicator without the hostile rank, before and after the attack, and check every
// element. Node 0's good ranks also post a world allreduce after the attack: it must fail with
// NC_ERR_PEER_LOST naming the hostile rank and the problem (or succeed exactly in the modes
// where the hostile rank is not dropped), never hang. Finally they check that their daemon is
// still running. Every wait has a timeout (NODECOMM_TIMEOUT_SEC, default here 20 s).
//
// Two stand-alone modes serve the second-uid test (second_uid.sh):
//   hostile_client segment-perms [HOLD_FILE]   checks that this client's segment came as a
//       sealed, anonymous memfd it cannot resize, optionally waits while HOLD_FILE exists (with
//       the descriptor's /proc path in it, for a third uid to try) before mapping it
//   hostile_client join STATUS TEXT           expects nc_init to fail with STATUS (permission,
//       no-memory, queue-full, invalid) and a message containing TEXT
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "hostile_attacks.hpp"
#include "nodecomm.h"
#include "nodecomm/ipc/fixed_text.hpp"
#include "nodecomm/ipc/futex.hpp"
#include "nodecomm/ipc/ring.hpp"
#include "nodecomm/ipc/segment.hpp"
#include "nodecomm/ipc/socket.hpp"
#include "nodecomm/proto/control.hpp"
#include "raw_client.hpp"

namespace {

using namespace hostile;

int attack_garbage(RawClient& c) {
  std::mt19937_64 rng(0x6e6f6465636f6d6dULL);
  const uint64_t pos = c.tail();
  for (uint64_t k = 0; k < 4; ++k) {
    OpDescriptor g{};
    auto* bytes = reinterpret_cast<uint64_t*>(&g);
    for (size_t w = 0; w < sizeof(g) / sizeof(uint64_t); ++w) bytes[w] = rng();
    // The first three name communicators that do not exist; the last one the world, so
    // that its garbage sequence number is a protocol violation.
    g.comm_id = k < 3 ? (g.comm_id | 0x40000000u) : 0;
    std::memcpy(&c.submit_slots[(pos + k) & (c.capacity - 1)], &g, sizeof(g));
  }
  c.set_tail(pos + 4);
  c.force_wake();
  // "communicator N does not exist here".
  std::vector<std::pair<Status, std::string>> errors(3,
                                                     {Status::kInvalidArgument, "communicator "});
  if (int bad = expect_errors(c, errors)) return bad;
  return expect_dropped(c, "garbage with a wrong sequence number");
}

int attack_ring_position(RawClient& c, bool ahead) {
  const uint64_t pos = c.tail();
  c.set_tail(ahead ? pos + c.capacity + 1 : pos - 1);
  c.force_wake();
  return expect_dropped(
      c, ahead ? "running its producer position ahead" : "moving its producer position backwards");
}

int attack_offsets(RawClient& c) {
  const uint64_t a = c.arena_bytes;
  std::vector<OpDescriptor> descs;
  uint64_t seq = 3;
  descs.push_back(make_desc(Collective::kAllreduce, DType::kF32, RedOp::kSum, 0, seq++, 16, a, 0));
  descs.push_back(
      make_desc(Collective::kAllreduce, DType::kF32, RedOp::kSum, 0, seq++, 16, 0, a - 32));
  descs.push_back(make_desc(Collective::kAllreduce, DType::kF32, RedOp::kSum, 0, seq++, 16,
                            ~uint64_t{63}, 0));  // offset + bytes wraps around 2^64
  OpDescriptor huge = make_desc(Collective::kAllreduce, DType::kF64, RedOp::kSum, 0, seq++,
                                uint64_t{1} << 33, 0, 0);  // 64 GiB from offset 0
  huge.flags = proto::kOpFlagInPlace;
  descs.push_back(huge);
  OpDescriptor agv =
      make_desc(Collective::kAllgatherv, DType::kF32, RedOp::kSum, 0, seq++, 1, 0, 4096);
  agv.aux_offset = a;  // count arrays past the end
  descs.push_back(agv);
  OpDescriptor a2av =
      make_desc(Collective::kAlltoallv, DType::kF32, RedOp::kSum, 0, seq++, 1, 0, 4096);
  a2av.aux_offset = a - 8;  // count arrays straddling the end
  descs.push_back(a2av);
  for (const OpDescriptor& d : descs) {
    if (!c.post(d)) return hostile_fail(c, "cannot post");
  }
  std::vector<std::pair<Status, std::string>> errors;
  errors.emplace_back(Status::kOutOfRange, fmt::format("send buffer [offset {}, +64 bytes) lies "
                                                       "outside the {}-byte arena",
                                                       a, a));
  // The first refusal disconnects it: a client that wrote such a descriptor cannot be
  // trusted with its memory any more. The others stay unread in its ring (each field's check
  // and message is covered by the unit tests, tests/unit/validate_test.cpp).
  if (int bad = expect_errors(c, errors)) return bad;
  return expect_dropped(c, "a buffer outside its arena");
}

int attack_bad_fields(RawClient& c) {
  struct Bad {
    Status status;
    std::string words;
    void (*edit)(OpDescriptor&);
  };
  // A count over the daemon's limit is refused without more (a correct client can ask for
  // it); the first field no correct client writes disconnects it, so the rest stay unread.
  const std::vector<Bad> bad = {
      {Status::kInvalidArgument, "exceeds the limit",
       [](OpDescriptor& d) { d.count = uint64_t{1} << 40; }},
      {Status::kInvalidArgument, "unknown dtype 99", [](OpDescriptor& d) { d.dtype = 99; }},
      {Status::kInvalidArgument, "unknown reduction op 42", [](OpDescriptor& d) { d.redop = 42; }},
      {Status::kInvalidArgument, "unknown collective 777",
       [](OpDescriptor& d) { d.collective = 777; }},
      {Status::kInvalidArgument, "unknown flags 0x10", [](OpDescriptor& d) { d.flags = 0x10; }},
      {Status::kInvalidArgument, "non-zero reserved bytes",
       [](OpDescriptor& d) { d.reserved[1] = 5; }},
      {Status::kInvalidArgument, "avg needs a floating dtype",
       [](OpDescriptor& d) {
         d.dtype = static_cast<uint8_t>(DType::kI32);
         d.redop = static_cast<uint8_t>(RedOp::kAvg);
       }},
      {Status::kInvalidArgument, "unknown compression 200",
       [](OpDescriptor& d) { d.compression = 200; }},
      {Status::kUnsupported, "for f32 allreduce only",
       [](OpDescriptor& d) {
         d.dtype = static_cast<uint8_t>(DType::kF64);
         d.compression = static_cast<uint8_t>(proto::Compression::kInt8);
       }},
      {Status::kInvalidArgument, "root 50 is not a rank",
       [](OpDescriptor& d) {
         d.collective = static_cast<uint16_t>(Collective::kReduce);
         d.root = 50;
       }},
      {Status::kInvalidArgument, "not aligned to the 8-byte element",
       [](OpDescriptor& d) {
         d.dtype = static_cast<uint8_t>(DType::kF64);
         d.send_offset = 4;
       }},
      {Status::kInvalidArgument, "overlap without the in-place flag",
       [](OpDescriptor& d) { d.recv_offset = 32; }},
      {Status::kInvalidArgument, "do not alias",
       [](OpDescriptor& d) { d.flags = proto::kOpFlagInPlace; }},
  };
  uint64_t seq = 3;
  std::vector<std::pair<Status, std::string>> errors;
  for (const Bad& b : bad) {
    OpDescriptor d =
        make_desc(Collective::kAllreduce, DType::kF32, RedOp::kSum, 0, seq++, 16, 0, 4096);
    b.edit(d);
    if (!c.post(d)) return hostile_fail(c, "cannot post");
    if (errors.size() < 2) errors.emplace_back(b.status, b.words);
  }
  if (int failed = expect_errors(c, errors)) return failed;
  return expect_dropped(c, "an unknown dtype");
}

int attack_bad_comm(RawClient& c) {
  if (!c.post(make_desc(Collective::kAllreduce, DType::kF32, RedOp::kSum, 0xdeadbeef, 1, 16, 0,
                        4096)) ||
      !c.post(make_desc(Collective::kAllreduce, DType::kF32, RedOp::kSum, 1, 1, 16, 0, 4096))) {
    return hostile_fail(c, "cannot post");
  }
  if (int bad =
          expect_errors(c, {{Status::kInvalidArgument,
                             "communicator 3735928559 does not "
                             "exist here"},
                            {Status::kInvalidArgument, "communicator 1 does not exist here"}})) {
    return bad;
  }
  // Refusals used no sequence numbers: the next world allreduce is seq 3, and it is exact.
  if (int bad = raw_world_allreduce(c, 3, 3)) return bad;
  c.bye();
  return 0;
}

int attack_completion_head(RawClient& c) {
  // The client owns the completion ring's head: move it somewhere impossible.
  ipc::detail::store_release(c.complete_ring->head.value, ~uint64_t{0} - 5);
  // The daemon reads the head only when the ring looks full: fill it with failures (a
  // communicator that does not exist), never consuming a completion.
  const uint64_t total = uint64_t{c.capacity} + 16;
  for (uint64_t k = 0; k < total; ++k) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_sec());
    while (!c.post(make_desc(Collective::kAllreduce, DType::kF32, RedOp::kSum, 0xbad0000, k + 1, 16,
                             0, 4096))) {
      if (Clock::now() >= deadline) return hostile_fail(c, "the daemon stopped draining");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  std::printf("hostile_client: %llu failing operations posted past a corrupt completion head\n",
              static_cast<unsigned long long>(total));
  // The daemon still serves this client's submissions: a correct world allreduce completes for
  // the good ranks (this client cannot see its own completion any more).
  auto* buf = reinterpret_cast<int64_t*>(c.arena);
  for (uint64_t i = 0; i < kWorldCount; ++i) buf[i] = world_value(3, c.world_rank, i);
  OpDescriptor d =
      make_desc(Collective::kAllreduce, DType::kI64, RedOp::kSum, 0, 3, kWorldCount, 0, 0);
  d.flags = proto::kOpFlagInPlace;
  // The submission ring may still hold the last failures: the daemon drains it at its own pace
  // (slowly under ASan on a busy machine), so wait for room as the flood above does.
  const auto post_deadline = Clock::now() + std::chrono::duration<double>(timeout_sec());
  while (!c.post(d)) {
    if (Clock::now() >= post_deadline) return hostile_fail(c, "cannot post the world allreduce");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Its result still lands in the arena, exact.
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_sec());
  while (Clock::now() < deadline) {
    bool done = true;
    for (uint64_t i = 0; i < kWorldCount && done; ++i) {
      done = std::atomic_ref<int64_t>(buf[i]).load(std::memory_order_acquire) ==
             world_sum(3, c.world_size, static_cast<int64_t>(i));
    }
    if (done) {
      std::printf("hostile_client: world allreduce result delivered into the arena\n");
      c.bye();
      return 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return hostile_fail(c, "the world allreduce result never arrived in the arena");
}

int attack_header(RawClient& c, bool arena_fields, bool doorbell_offset, bool everything) {
  auto& h = c.segment.header();
  auto& bells = *c.bells;
  const uint64_t real_arena = c.arena_bytes;
  if (everything) {
    std::mt19937_64 rng(42);
    h.magic = 0;
    h.layout_version = 0xdead;
    h.header_bytes = 7;
    h.segment_bytes = rng();
    h.submit_ring_offset = rng();
    h.complete_ring_offset = rng();
    h.submit_capacity = 3;
    h.complete_capacity = 0;
    h.client_id = 999;
    h.local_rank = 77;
    std::memset(h.reserved, 0xee, sizeof(h.reserved));
    bells.completion_futex = 0xffffffffu;
    bells.client_waiting = 0x7fffffffu;
    bells.client_heartbeat_ns = rng();
    bells.daemon_heartbeat_ns = rng();
  }
  if (arena_fields || everything) h.arena_bytes = uint64_t{1} << 50;
  if (everything) h.arena_offset = uint64_t{1} << 44;
  if (doorbell_offset || everything) h.doorbells_offset = uint64_t{1} << 45;
  c.force_wake();
  if (!arena_fields && !everything) {
    // Only the doorbells moved: the daemon's next heartbeat or completion must not use them.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    if (int bad = raw_world_allreduce(c, 3, 3)) return bad;
    c.bye();
    return 0;
  }
  // The world allreduce the good ranks post, in place on a buffer past the real arena but
  // inside the one the header now claims: the daemon must judge it by the arena it created.
  OpDescriptor d = make_desc(Collective::kAllreduce, DType::kI64, RedOp::kSum, 0, 3, kWorldCount,
                             real_arena + 4096, real_arena + 4096);
  d.flags = proto::kOpFlagInPlace;
  if (!c.post(d)) return hostile_fail(c, "cannot post");
  Completion done{};
  const RawClient::Next n = c.next(done, timeout_sec());
  if (n == RawClient::Next::kClosed) {
    std::printf("hostile_client: dropped after scribbling on its segment header\n");
    return 0;
  }
  const std::string text = ipc::bounded_text(done.message);
  if (n != RawClient::Next::kCompletion ||
      done.status != static_cast<int32_t>(Status::kOutOfRange) ||
      !contains(text, fmt::format("outside the {}-byte arena", real_arena))) {
    return hostile_fail(c, fmt::format("after scribbling on the header, expected an out-of-range "
                                       "error against the real {}-byte arena or a disconnection; "
                                       "got status {}: {}",
                                       real_arena, done.status, text));
  }
  std::printf("hostile_client: refused as expected after header scribbles: %s\n", text.c_str());
  return 0;
}

long daemon_rss_kib(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return -1;
}

long daemon_pid() {
  std::ifstream in(env_or("NODECOMM_RUNTIME_DIR", "") + "/nodecommd.ready");
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const size_t at = text.find("\"pid\":");
  return at == std::string::npos ? -1 : std::strtol(text.c_str() + at + 6, nullptr, 10);
}

// Never consumes a completion while posting failing operations: the daemon owes it ever more
// completions. The daemon must stop taking its operations (backpressure, or a drop) once about
// a completion ring's worth is owed, rather than hold an unbounded backlog for it.
int attack_flood(RawClient& c) {
  constexpr uint64_t kFlood = 50000;
  const long pid = daemon_pid();
  const long before = daemon_rss_kib(pid);
  uint64_t posted = 0;
  bool stalled = false;
  while (posted < kFlood && !stalled) {
    const auto deadline = Clock::now() + std::chrono::seconds(2);
    while (!c.post(make_desc(Collective::kAllreduce, DType::kF32, RedOp::kSum, 0xbad0000,
                             posted + 1, 16, 0, 4096))) {
      if (Clock::now() >= deadline) {
        stalled = true;  // the daemon stopped taking this client's operations
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (!stalled) ++posted;
  }
  const long after = daemon_rss_kib(pid);
  std::printf(
      "hostile_client: posted %llu failing operations without consuming a completion; "
      "nodecommd RSS %ld KiB -> %ld KiB\n",
      static_cast<unsigned long long>(posted), before, after);
  // What may be in flight: the submission ring, the completion ring and a backlog of one more
  // completion ring, plus two drain batches of slack.
  const uint64_t bound = 3 * uint64_t{c.capacity} + 128;
  if (!stalled || posted > bound) {
    return hostile_fail(c, fmt::format("the daemon took {} operations from a client that "
                                       "consumed none of their completions (RSS {} -> {} KiB); "
                                       "expected it to stop by {} (backpressure or a drop)",
                                       posted, before, after, bound));
  }
  std::printf("hostile_client: the daemon stopped taking operations after %llu\n",
              static_cast<unsigned long long>(posted));
  return 0;  // exits: the daemon then drops it for closing its socket
}

struct Mode {
  const char* name;
  bool world_op_succeeds;  // the world allreduce after the attack completes exactly everywhere
  const char* good_sees;   // otherwise: words of the NC_ERR_PEER_LOST node 0's good ranks get
  // The world allreduce may also complete: the daemon read the hostile rank's buffer before it
  // dropped the rank, and its contribution (zeros) is its own business, like any bad data.
  bool world_op_may_complete = false;
};

// good_sees holds words from the end of the text the good ranks get: the daemon's text nests
// the failed operation, the culprit and its operation before the reason, and the reason must
// arrive whole (the completion message holds 975 bytes).
const Mode kModes[] = {
    {"garbage", false, "protocol violation"},
    {"ring-ahead", false, "the producer position ran ahead or backwards"},
    {"ring-backwards", false, "the producer position ran ahead or backwards"},
    {"offsets", false, "send buffer [offset"},
    {"bad-fields", false, "exceeds the limit"},
    {"bad-comm", true, ""},
    {"completion-head", true, ""},
    {"header", false, ""},
    {"header-arena", false, ""},
    {"header-doorbells", true, ""},
    {"flood", false, ""},
    {"regions", true, ""},
    {"region-truncate", false, "shrank under the daemon", true},
};

int hostile_main(const Mode& mode) {
  RawClient c;
  if (!c.hello() || !c.join()) {
    std::fprintf(stderr, "hostile_client (hostile): attach failed: %s\n", c.error.c_str());
    return 1;
  }
  // Well-behaved first: a world allreduce, and a split that leaves this rank out.
  if (int bad = raw_world_allreduce(c, 1, 1)) return bad;
  OpDescriptor split =
      make_desc(Collective::kCommSplit, DType::kU8, RedOp::kSum, 0, 2, c.world_rank, 0, 0);
  split.root = static_cast<uint32_t>(proto::kUndefinedColor);
  if (!c.post(split)) return hostile_fail(c, "cannot post the split");
  Completion done{};
  if (c.next(done, timeout_sec()) != RawClient::Next::kCompletion || done.status != 0 ||
      done.new_comm_id != proto::kNoComm) {
    return hostile_fail(c, fmt::format("split: {}", ipc::bounded_text(done.message)));
  }
  std::printf("hostile_client: rank %u attacks with '%s'\n", c.world_rank, mode.name);
  const std::string m = mode.name;
  if (m == "garbage") return attack_garbage(c);
  if (m == "ring-ahead") return attack_ring_position(c, true);
  if (m == "ring-backwards") return attack_ring_position(c, false);
  if (m == "offsets") return attack_offsets(c);
  if (m == "bad-fields") return attack_bad_fields(c);
  if (m == "bad-comm") return attack_bad_comm(c);
  if (m == "completion-head") return attack_completion_head(c);
  if (m == "header") return attack_header(c, false, false, true);
  if (m == "header-arena") return attack_header(c, true, false, false);
  if (m == "header-doorbells") return attack_header(c, false, true, false);
  if (m == "flood") return attack_flood(c);
  if (m == "regions") return attack_regions(c);
  if (m == "region-truncate") return attack_region_truncate(c);
  return hostile_fail(c, "unknown mode");
}

// ---------------------------------------------------------------------------------------------
// The good ranks: libnodecomm, every element checked.

int good_fail(int rank, const std::string& what) {
  std::fprintf(stderr, "hostile_client (good rank %d): %s\n", rank, what.c_str());
  return 1;
}

template <class T>
int allreduce_checked(nc_context_t* ctx, nc_comm_t comm, nc_dtype_t dtype, nc_redop_t op,
                      size_t count, int world_rank, const char* phase) {
  int rank = 0;
  int size = 0;
  nc_comm_rank(ctx, comm, &rank);
  nc_comm_size(ctx, comm, &size);
  T* buf = nullptr;
  if (nc_alloc(ctx, count * sizeof(T), reinterpret_cast<void**>(&buf)) != NC_OK) {
    return good_fail(world_rank, nc_last_error());
  }
  auto value = [](int r, size_t i) {
    return static_cast<T>(int64_t{r + 1} * 3 + static_cast<int64_t>(i % 13));
  };
  for (size_t i = 0; i < count; ++i) buf[i] = value(rank, i);
  nc_request_t req = 0;
  nc_status_t s = nc_allreduce(ctx, buf, buf, count, dtype, op, comm, nullptr, &req);
  if (s == NC_OK) s = nc_wait(ctx, req);
  if (s != NC_OK) {
    const std::string text = nc_last_error();
    nc_free(ctx, buf);
    return good_fail(world_rank,
                     fmt::format("{}: allreduce of {} on comm {}: {}", phase, count, comm, text));
  }
  int bad = 0;
  for (size_t i = 0; i < count && bad == 0; ++i) {
    T expected = value(0, i);
    for (int r = 1; r < size; ++r) {
      expected =
          op == NC_MAX ? std::max(expected, value(r, i)) : static_cast<T>(expected + value(r, i));
    }
    if (buf[i] != expected) {
      bad = good_fail(world_rank, fmt::format("{}: element {} of {} on comm {} is {}, expected {}",
                                              phase, i, count, comm, static_cast<double>(buf[i]),
                                              static_cast<double>(expected)));
    }
  }
  nc_free(ctx, buf);
  return bad;
}

int world_allreduce_good(nc_context_t* ctx, int64_t round, int rank, int size, nc_status_t& s,
                         std::string& message, bool check = true) {
  int64_t* buf = nullptr;
  if (nc_alloc(ctx, kWorldCount * sizeof(int64_t), reinterpret_cast<void**>(&buf)) != NC_OK) {
    return good_fail(rank, nc_last_error());
  }
  for (uint64_t i = 0; i < kWorldCount; ++i) buf[i] = world_value(round, rank, i);
  nc_request_t req = 0;
  s = nc_allreduce(ctx, buf, buf, kWorldCount, NC_I64, NC_SUM, NC_COMM_WORLD, nullptr, &req);
  if (s == NC_OK) s = nc_wait(ctx, req);
  message = s == NC_OK ? "" : nc_last_error();
  int bad = 0;
  if (s == NC_OK && check) {
    for (uint64_t i = 0; i < kWorldCount && bad == 0; ++i) {
      if (buf[i] != world_sum(round, size, static_cast<int64_t>(i))) {
        bad = good_fail(rank, fmt::format("world allreduce round {} element {} is {}, expected {}",
                                          round, i, buf[i], world_sum(round, size, i)));
      }
    }
  }
  nc_free(ctx, buf);
  return bad;
}

// The daemon's pid from its ready file, and whether it is still running (not a zombie).
int check_daemon_alive(int rank) {
  const std::string path = env_or("NODECOMM_RUNTIME_DIR", "") + "/nodecommd.ready";
  std::ifstream in(path);
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const size_t at = text.find("\"pid\":");
  if (at == std::string::npos) return good_fail(rank, "no pid in " + path);
  const long pid = std::strtol(text.c_str() + at + 6, nullptr, 10);
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string pid_field, comm, state;
  stat >> pid_field >> comm >> state;
  if (pid <= 0 || ::kill(static_cast<pid_t>(pid), 0) != 0 || state.empty() || state == "Z") {
    return good_fail(rank, fmt::format("nodecommd pid {} is not running (state '{}')", pid, state));
  }
  return 0;
}

int good_main(const Mode& mode) {
  nc_init_options_t opts;
  nc_init_options_default(&opts);
  opts.timeout_sec = timeout_sec();
  nc_context_t* ctx = nullptr;
  if (nc_init(&opts, &ctx) != NC_OK) {
    std::fprintf(stderr, "hostile_client (good): nc_init: %s\n", nc_last_error());
    return 1;
  }
  const int rank = nc_world_rank(ctx);
  const int size = nc_world_size(ctx);
  const bool hostile_node = nc_node_index(ctx) == 0;
  const int hostile_rank = nc_local_size(ctx) - 1;  // on node 0, world ranks start at 0
  int bad = 0;
  nc_status_t s = NC_OK;
  std::string message;
  // Round 1, with the hostile rank still behaving.
  bad += world_allreduce_good(ctx, 1, rank, size, s, message);
  if (s != NC_OK) bad += good_fail(rank, "world allreduce round 1: " + message);
  nc_comm_t good = NC_COMM_NULL;
  if (nc_comm_split(ctx, NC_COMM_WORLD, 0, rank, &good) != NC_OK) {
    return good_fail(rank, std::string("split: ") + nc_last_error());
  }
  int good_size = 0;
  nc_comm_size(ctx, good, &good_size);
  if (good_size != size - 1)
    bad += good_fail(rank, fmt::format("good comm has {} ranks", good_size));
  // Round A: while the hostile rank attacks.
  bad += allreduce_checked<float>(ctx, good, NC_F32, NC_SUM, 4099, rank, "round A");
  bad += allreduce_checked<int32_t>(ctx, good, NC_I32, NC_MAX, 7, rank, "round A");
  // The world allreduce after the attack: an error naming the hostile rank, not a hang.
  if (mode.world_op_succeeds) {
    bad += world_allreduce_good(ctx, 3, rank, size, s, message);
    if (s != NC_OK) bad += good_fail(rank, "world allreduce after the attack: " + message);
  } else if (hostile_node || mode.world_op_may_complete) {
    // Unchecked where it may complete: with the hostile rank's zeros in the sum.
    bad += world_allreduce_good(ctx, 3, rank, size, s, message, !mode.world_op_may_complete);
    const std::string culprit = fmt::format("rank {} ", hostile_rank);
    if (mode.world_op_may_complete && s == NC_OK) {
      std::printf("hostile_client (good rank %d): the world allreduce completed\n", rank);
    } else if (!hostile_node && s == NC_ERR_PEER_LOST) {
      std::printf("hostile_client (good rank %d): as expected: %s\n", rank, message.c_str());
    } else if (s != NC_ERR_PEER_LOST || !contains(message, culprit) ||
               !contains(message, mode.good_sees)) {
      bad += good_fail(rank, fmt::format("world allreduce after the attack: expected "
                                         "NC_ERR_PEER_LOST naming '{}' and '{}', got {}: {}",
                                         culprit, mode.good_sees, nc_status_string(s), message));
    } else {
      std::printf("hostile_client (good rank %d): as expected: %s\n", rank, message.c_str());
    }
  }
  // Round B: the daemon still serves the good ranks, exactly, across both nodes.
  bad += allreduce_checked<float>(ctx, good, NC_F32, NC_SUM, 1, rank, "round B");
  bad += allreduce_checked<double>(ctx, good, NC_F64, NC_SUM, 65539, rank, "round B");
  bad += allreduce_checked<int32_t>(ctx, good, NC_I32, NC_SUM, 4099, rank, "round B");
  bad += allreduce_checked<int64_t>(ctx, good, NC_I64, NC_MAX, 7, rank, "round B");
  bad += check_daemon_alive(rank);
  if (nc_comm_free(ctx, &good) != NC_OK) bad += good_fail(rank, nc_last_error());
  if (bad == 0) {
    std::printf("hostile_client %s: good rank %d got exact results; its daemon is alive\n",
                mode.name, rank);
  }
  nc_finalize(ctx);
  return bad == 0 ? 0 : 1;
}

// ---------------------------------------------------------------------------------------------
// Stand-alone modes for the second-uid test.

int segment_perms(const char* hold_file) {
  RawClient c;
  if (!c.hello()) {
    std::fprintf(stderr, "hostile_client segment-perms: %s\n", c.error.c_str());
    return 1;
  }
  // The segment came as a descriptor: an anonymous memfd, sealed, that this uid cannot resize.
  const std::string fd_path = fmt::format("/proc/{}/fd/{}", ::getpid(), c.segment_fd.get());
  char target[256] = {};
  const ssize_t n = ::readlink(fd_path.c_str(), target, sizeof(target) - 1);
  const int seals = ::fcntl(c.segment_fd.get(), F_GET_SEALS);
  std::printf(
      "hostile_client segment-perms: segment descriptor %s -> %s, seals %#x (client uid "
      "%u)\n",
      fd_path.c_str(), n > 0 ? target : "?", seals, ::geteuid());
  if (n <= 0 || std::string(target).rfind("/memfd:", 0) != 0 ||
      (seals & ipc::kSegmentSeals) != ipc::kSegmentSeals) {
    std::fprintf(stderr, "hostile_client segment-perms: expected a sealed memfd\n");
    return 1;
  }
  if (::ftruncate(c.segment_fd.get(), 0) == 0 || errno != EPERM) {
    std::fprintf(stderr,
                 "hostile_client segment-perms: ftruncate of the segment was not "
                 "refused with EPERM\n");
    return 1;
  }
  if (hold_file != nullptr) {
    const std::string tmp = std::string(hold_file) + ".tmp";
    {
      std::ofstream out(tmp);
      out << fd_path << "\n";
    }
    std::rename(tmp.c_str(), hold_file);
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_sec());
    while (::access(hold_file, F_OK) == 0) {
      if (Clock::now() >= deadline) {
        std::fprintf(stderr, "hostile_client segment-perms: %s was never removed\n", hold_file);
        return 1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  if (!c.join()) {
    std::fprintf(stderr, "hostile_client segment-perms: %s\n", c.error.c_str());
    return 1;
  }
  if (c.world_size == 1) {
    if (int bad = raw_world_allreduce(c, 1, 1)) return bad;
  }
  c.bye();
  std::printf("hostile_client segment-perms: ok (a sealed memfd, no name)\n");
  return 0;
}

int join_refused(const std::string& status_name, const std::string& words) {
  const std::pair<const char*, nc_status_t> names[] = {{"permission", NC_ERR_PERMISSION},
                                                       {"no-memory", NC_ERR_NO_MEMORY},
                                                       {"queue-full", NC_ERR_QUEUE_FULL},
                                                       {"invalid", NC_ERR_INVALID_ARGUMENT}};
  nc_status_t expected = NC_OK;
  for (const auto& [name, status] : names) {
    if (status_name == name) expected = status;
  }
  if (expected == NC_OK) {
    std::fprintf(stderr, "hostile_client join: unknown status %s\n", status_name.c_str());
    return 2;
  }
  nc_init_options_t opts;
  nc_init_options_default(&opts);
  opts.timeout_sec = timeout_sec();
  nc_context_t* ctx = nullptr;
  const nc_status_t s = nc_init(&opts, &ctx);
  if (s == NC_OK) {
    std::fprintf(stderr, "hostile_client join: uid %u joined; expected %s\n", ::geteuid(),
                 nc_status_string(expected));
    nc_finalize(ctx);
    return 1;
  }
  const std::string text = nc_last_error();
  if (s != expected || !contains(text, words)) {
    std::fprintf(stderr, "hostile_client join: expected %s with '%s', got %s: %s\n",
                 nc_status_string(expected), words.c_str(), nc_status_string(s), text.c_str());
    return 1;
  }
  std::printf("hostile_client join: uid %u refused as expected (%s): %s\n", ::geteuid(),
              nc_status_string(s), text.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "segment-perms") == 0) {
    return segment_perms(argc >= 3 ? argv[2] : nullptr);
  }
  if (argc == 4 && std::strcmp(argv[1], "join") == 0) return join_refused(argv[2], argv[3]);
  const Mode* mode = nullptr;
  for (const Mode& m : kModes) {
    if (argc == 2 && std::strcmp(argv[1], m.name) == 0) mode = &m;
  }
  if (mode == nullptr) {
    std::fprintf(stderr,
                 "usage: hostile_client MODE | segment-perms [HOLD_FILE] | join STATUS "
                 "TEXT\nmodes:");
    for (const Mode& m : kModes) std::fprintf(stderr, " %s", m.name);
    std::fprintf(stderr, "\n");
    return 2;
  }
  const int local_rank = std::atoi(env_or("NODECOMM_LOCAL_RANK", "0").c_str());
  const int local_size = std::atoi(env_or("NODECOMM_LOCAL_SIZE", "1").c_str());
  if (env_or("NODECOMM_NODE", "0") == "0" && local_size < 2) {
    std::fprintf(stderr, "hostile_client: node 0 needs at least 2 ranks (one hostile)\n");
    return 2;
  }
  const bool hostile = env_or("NODECOMM_NODE", "0") == "0" && local_rank == local_size - 1;
  return hostile ? hostile_main(*mode) : good_main(*mode);
}
