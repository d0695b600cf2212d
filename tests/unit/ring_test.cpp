// SPSC ring: wrap-around, full and empty, hostile positions, and a two-process stress test
// over a real MAP_SHARED mapping.
#include "nodecomm/ipc/ring.hpp"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <thread>
#include <vector>

namespace nodecomm::ipc {
namespace {

struct Entry {
  uint64_t seq;
  uint64_t check;
};

struct Shared {
  proto::RingHeader header;
  Entry slots[8];
};

// Consumes `total` entries, counting any out of order or corrupted. Gives up after 60 s.
struct Drained {
  uint64_t received = 0;
  uint64_t bad = 0;
};
template <class Check>
Drained drain_all(RingConsumer<Entry>& consumer, uint64_t total, Check expected_check) {
  Drained d;
  Entry e{};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (d.received < total && std::chrono::steady_clock::now() < deadline) {
    const RingResult r = consumer.try_pop(e);
    if (r == RingResult::kEmpty) {
      std::this_thread::yield();
      continue;
    }
    if (r != RingResult::kOk || e.seq != d.received || e.check != expected_check(d.received)) {
      ++d.bad;
    }
    ++d.received;
  }
  return d;
}

TEST(Ring, WrapsAroundManyTimesInOrder) {
  Shared s{};
  RingProducer<Entry> producer(&s.header, s.slots, 8);
  RingConsumer<Entry> consumer(&s.header, s.slots, 8);
  uint64_t next_in = 0;
  uint64_t next_out = 0;
  for (int round = 0; round < 1000; ++round) {
    const int burst = 1 + round % 8;
    for (int i = 0; i < burst; ++i) {
      ASSERT_EQ(producer.try_push(Entry{next_in, ~next_in}), RingResult::kOk);
      ++next_in;
    }
    Entry e{};
    for (int i = 0; i < burst; ++i) {
      ASSERT_EQ(consumer.try_pop(e), RingResult::kOk);
      EXPECT_EQ(e.seq, next_out);
      EXPECT_EQ(e.check, ~next_out);
      ++next_out;
    }
    EXPECT_EQ(consumer.try_pop(e), RingResult::kEmpty);
  }
  EXPECT_GT(next_in, 8u * 100);  // positions went far past the capacity
}

// A completion-like entry published and read only as far as it is used: the first field
// always, the second only when the first says so; the slot's unused bytes keep what they
// held, and the consumer never copies them.
TEST(Ring, PrefixPushAndPopCopyOnlyWhatIsUsed) {
  Shared shared{};
  RingProducer<Entry> producer(&shared.header, shared.slots, 8);
  RingConsumer<Entry> consumer(&shared.header, shared.slots, 8);
  const auto length = [](const Entry& head) { return head.seq % 2 == 0 ? sizeof(Entry) : 8; };
  for (uint64_t i = 0; i < 40; ++i) {
    ASSERT_EQ(producer.try_push(Entry{i, 100 + i}, i % 2 == 0 ? sizeof(Entry) : 8),
              RingResult::kOk);
    Entry out{0, 7};
    ASSERT_EQ(consumer.try_pop(out, 8, length), RingResult::kOk);
    EXPECT_EQ(out.seq, i);
    EXPECT_EQ(out.check, i % 2 == 0 ? 100 + i : 7) << "entry " << i;
    // Odd entries fall in odd slots, which only ever get their first field written.
    if (i % 2 == 1) {
      EXPECT_EQ(shared.slots[i % 8].check, 0u);
    }
  }
}

TEST(Ring, ReportsFullAtCapacity) {
  Shared s{};
  RingProducer<Entry> producer(&s.header, s.slots, 8);
  RingConsumer<Entry> consumer(&s.header, s.slots, 8);
  for (uint64_t i = 0; i < 8; ++i) ASSERT_EQ(producer.try_push(Entry{i, 0}), RingResult::kOk);
  EXPECT_EQ(producer.try_push(Entry{8, 0}), RingResult::kFull);
  Entry e{};
  ASSERT_EQ(consumer.try_pop(e), RingResult::kOk);
  EXPECT_EQ(producer.try_push(Entry{8, 0}), RingResult::kOk);
}

TEST(Ring, ProducerRunningAheadIsCorrupt) {
  Shared s{};
  RingConsumer<Entry> consumer(&s.header, s.slots, 8);
  s.header.tail.value = 9;  // more entries than slots
  Entry e{};
  EXPECT_EQ(consumer.try_pop(e), RingResult::kCorrupt);
}

TEST(Ring, ProducerGoingBackwardsIsCorrupt) {
  Shared s{};
  RingProducer<Entry> producer(&s.header, s.slots, 8);
  RingConsumer<Entry> consumer(&s.header, s.slots, 8);
  Entry e{};
  for (uint64_t i = 0; i < 4; ++i) ASSERT_EQ(producer.try_push(Entry{i, 0}), RingResult::kOk);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(consumer.try_pop(e), RingResult::kOk);
  s.header.tail.value = 2;
  EXPECT_EQ(consumer.try_pop(e), RingResult::kCorrupt);
}

TEST(Ring, ConsumerPositionScribbledIsCorruptForProducer) {
  Shared s{};
  RingProducer<Entry> producer(&s.header, s.slots, 8);
  for (uint64_t i = 0; i < 8; ++i) ASSERT_EQ(producer.try_push(Entry{i, 0}), RingResult::kOk);
  s.header.head.value = 1000;  // ahead of anything produced
  EXPECT_EQ(producer.try_push(Entry{8, 0}), RingResult::kCorrupt);
}

TEST(Ring, OwnPositionIsNeverReadBack) {
  Shared s{};
  RingProducer<Entry> producer(&s.header, s.slots, 8);
  RingConsumer<Entry> consumer(&s.header, s.slots, 8);
  ASSERT_EQ(producer.try_push(Entry{0, 0}), RingResult::kOk);
  Entry e{};
  ASSERT_EQ(consumer.try_pop(e), RingResult::kOk);
  s.header.head.value = 0;  // a peer rewinds the consumer's published position
  ASSERT_EQ(producer.try_push(Entry{1, 0}), RingResult::kOk);
  ASSERT_EQ(consumer.try_pop(e), RingResult::kOk);
  EXPECT_EQ(e.seq, 1u);  // the consumer kept its private position
  EXPECT_EQ(consumer.position(), 2u);
}

// A forked producer pushes N entries through a 64-slot ring in shared memory while this
// process consumes them; every entry must arrive once, in order, intact.
TEST(Ring, TwoProcessStress) {
  constexpr uint32_t kCapacity = 64;
  constexpr uint64_t kEntries = 2'000'000;
  const size_t bytes = sizeof(proto::RingHeader) + kCapacity * sizeof(Entry);
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  std::memset(mem, 0, bytes);
  auto* header = static_cast<proto::RingHeader*>(mem);
  auto* slots = reinterpret_cast<Entry*>(static_cast<uint8_t*>(mem) + sizeof(proto::RingHeader));

  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    RingProducer<Entry> producer(header, slots, kCapacity);
    for (uint64_t i = 0; i < kEntries;) {
      const RingResult r = producer.try_push(Entry{i, i * 0x9E3779B97F4A7C15ULL});
      if (r == RingResult::kOk) {
        ++i;
      } else if (r == RingResult::kFull) {
        sched_yield();
      } else {
        _exit(3);
      }
    }
    _exit(0);
  }
  RingConsumer<Entry> consumer(header, slots, kCapacity);
  const Drained d =
      drain_all(consumer, kEntries, [](uint64_t i) { return i * 0x9E3779B97F4A7C15ULL; });
  // A consumer that gave up leaves the producer waiting on a full ring for good: a failure
  // then, not a hang (a loaded machine under ASan once took the whole test binary's time).
  if (d.received < kEntries) kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_EQ(d.received, kEntries) << "timed out after 60 s";
  EXPECT_EQ(d.bad, 0u);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  munmap(mem, bytes);
}

// The same contract between two threads, so ThreadSanitizer can check the memory orders
// (it cannot follow a fork).
TEST(Ring, TwoThreadStress) {
  constexpr uint32_t kCapacity = 16;
  constexpr uint64_t kEntries = 200'000;
  struct {
    proto::RingHeader header;
    Entry slots[kCapacity];
  } shared{};
  std::thread producer_thread([&] {
    RingProducer<Entry> producer(&shared.header, shared.slots, kCapacity);
    for (uint64_t i = 0; i < kEntries;) {
      if (producer.try_push(Entry{i, ~i}) == RingResult::kOk) {
        ++i;
      } else {
        std::this_thread::yield();
      }
    }
  });
  RingConsumer<Entry> consumer(&shared.header, shared.slots, kCapacity);
  const Drained d = drain_all(consumer, kEntries, [](uint64_t i) { return ~i; });
  producer_thread.join();
  EXPECT_EQ(d.received, kEntries) << "timed out after 60 s";
  EXPECT_EQ(d.bad, 0u);
}

}  // namespace
}  // namespace nodecomm::ipc
