// The counters segment: its layout constants, the latency buckets, the seqlock under a racing
// writer, and a round trip from the daemon's publisher to nodecommctl's reader.
#include "observe/counters.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "net/transport.hpp"
#include "nodecomm/ipc/runtime_paths.hpp"
#include "nodecomm/proto/counters.hpp"
#include "reader.hpp"
#include "session/client_session.hpp"

namespace nodecomm {
namespace {

TEST(CountersLayout, SectionsSitWhereReadersExpectThem) {
  EXPECT_EQ(offsetof(proto::CountersSegment, header), 0u);
  EXPECT_EQ(offsetof(proto::CountersSegment, daemon), 128u);
  EXPECT_EQ(offsetof(proto::CountersSegment, liveness), 640u);
  EXPECT_EQ(offsetof(proto::CountersSegment, totals), 768u);
  EXPECT_EQ(offsetof(proto::CountersSegment, collectives), 1024u);
  EXPECT_EQ(sizeof(proto::CountersSegment), 35200u);
  EXPECT_GE(proto::kCounterCollectives, static_cast<uint32_t>(proto::Collective::kCount));
  EXPECT_EQ(proto::kCountersLayoutVersion, 2u);
}

TEST(CountersLayout, LatencyBucketsAreLog2Microseconds) {
  EXPECT_EQ(proto::latency_bucket(0), 0u);
  EXPECT_EQ(proto::latency_bucket(999), 0u);   // < 1 us
  EXPECT_EQ(proto::latency_bucket(1000), 1u);  // [1, 2) us
  EXPECT_EQ(proto::latency_bucket(1999), 1u);
  EXPECT_EQ(proto::latency_bucket(2000), 2u);        // [2, 4) us
  EXPECT_EQ(proto::latency_bucket(1'000'000), 10u);  // 1 ms: [512, 1024) us
  EXPECT_EQ(proto::latency_bucket(UINT64_MAX), proto::kLatencyBuckets - 1);
  for (uint32_t b = 0; b + 1 < proto::kLatencyBuckets; ++b) {
    // Every bucket's limit is the first value of the next bucket.
    EXPECT_EQ(proto::latency_bucket(proto::latency_bucket_limit_us(b) * 1000), b + 1);
  }
  EXPECT_EQ(proto::latency_bucket_limit_us(proto::kLatencyBuckets - 1), 0u);
}

// A writer rewrites the operations table as fast as it can, every slot stamped with the same
// generation; the reader must never see two generations in one snapshot.
TEST(CountersSeqlock, ReadersNeverSeeATornSection) {
  auto shared = std::make_unique<proto::OpsSection>();
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    auto value = std::make_unique<proto::OpsSection>();
    for (uint64_t gen = 1; !stop.load(std::memory_order_relaxed); ++gen) {
      value->count = static_cast<uint32_t>(gen % proto::kCounterOps);
      value->total = static_cast<uint32_t>(gen);
      for (proto::OpSlot& slot : value->slots) {
        slot.seq = gen;
        slot.bytes = gen * 3;
      }
      proto::seqlock_write(*shared, *value);
    }
  });
  auto out = std::make_unique<proto::OpsSection>();
  int consistent = 0;
  for (int i = 0; i < 20000; ++i) {
    if (!proto::seqlock_read(*shared, *out)) continue;
    ASSERT_EQ(out->sequence % 2, 0u);
    const uint64_t gen = out->slots[0].seq;
    ASSERT_EQ(out->total, static_cast<uint32_t>(gen));
    for (const proto::OpSlot& slot : out->slots) {
      ASSERT_EQ(slot.seq, gen);
      ASSERT_EQ(slot.bytes, gen * 3);
    }
    ++consistent;
  }
  stop = true;
  writer.join();
  EXPECT_GT(consistent, 0);
}

TEST(CountersSeqlock, ABusyWriterMakesTheReadFailNotTear) {
  auto shared = std::make_unique<proto::JobSection>();
  shared->sequence = 7;  // odd: a writer died in the middle of a rewrite
  proto::JobSection out{};
  EXPECT_FALSE(proto::seqlock_read(*shared, out, 100));
}

TEST(CountersSegment, PublisherToReaderRoundTrip) {
  daemon::DaemonConfig config;
  config.instance = "ctl-unit-" + std::to_string(::getpid());
  const std::unique_ptr<daemon::Transport> transport = daemon::make_loopback_transport();
  const std::string name = ipc::counters_shm_name(config.instance);
  {
    daemon::CountersPublisher publisher;
    publisher.open(config, *transport, "/tmp/rt-" + config.instance, "/tmp/rt/nodecommd.sock");
    ASSERT_TRUE(publisher.active());
    struct stat st {};
    ASSERT_EQ(::stat(("/dev/shm" + name).c_str(), &st), 0);
    // Counters name other users' jobs: 0600 without an admin-group (issue 16, point 7).
    EXPECT_EQ(st.st_mode & 0777, 0600u);

    ctl::CountersView view(name);
    ctl::Snapshot s = view.read();
    EXPECT_EQ(s.instance(), config.instance);
    EXPECT_EQ(s.daemon.pid, static_cast<uint64_t>(::getpid()));
    EXPECT_TRUE(s.alive);
    EXPECT_EQ(s.param("chunk-size"), "512K");
    EXPECT_EQ(s.param("agreed-chunk-size"), "512K");
    EXPECT_EQ(s.param("sched-chunk-size"), "auto");
    EXPECT_EQ(s.params.generation, 0u);

    config.tuning.chunk_bytes = 64 << 10;
    publisher.publish_params(config, true);
    daemon::CountersPublisher::ClientMap none;
    publisher.housekeeping(123'000'000'000ull, 122'000'000'000ull, nullptr, none, 60);
    s = view.read();
    EXPECT_EQ(s.param("chunk-size"), "64K");
    EXPECT_EQ(s.params.generation, 1u);
    EXPECT_EQ(s.totals.settings_changed, 1u);
    EXPECT_EQ(s.liveness.heartbeat, 1u);
    EXPECT_EQ(s.liveness.last_progress_monotonic_ns, 122'000'000'000ull);
    EXPECT_EQ(s.job.state, 0u);
    EXPECT_EQ(s.ops.total, 0u);

    daemon::algorithm_tally().count_ring(5);
    publisher.housekeeping(124'000'000'000ull, 124'000'000'000ull, nullptr, none, 60);
    s = view.read();
    EXPECT_GE(s.totals.ring_slices, 5u);
    EXPECT_GE(s.totals.ring_allreduces, 1u);
  }
  // The publisher unlinks its segment when it goes.
  EXPECT_NE(::access(("/dev/shm" + name).c_str(), F_OK), 0);
  EXPECT_THROW(ctl::CountersView{name}, ctl::RuntimeError);
}

// A zeroed counters segment under `name`, mapped read-write as the daemon maps its own, and
// unlinked when the test is done with it. get() is null if it could not be made.
class FakeSegment {
 public:
  explicit FakeSegment(std::string name) : name_(std::move(name)) {
    const int fd = ::shm_open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0644);
    if (fd < 0) return;
    if (::ftruncate(fd, sizeof(proto::CountersSegment)) == 0) {
      void* p = ::mmap(nullptr, sizeof(proto::CountersSegment), PROT_READ | PROT_WRITE, MAP_SHARED,
                       fd, 0);
      if (p != MAP_FAILED) seg_ = static_cast<proto::CountersSegment*>(p);
    }
    ::close(fd);
  }
  ~FakeSegment() {
    if (seg_ != nullptr) ::munmap(seg_, sizeof(proto::CountersSegment));
    ::shm_unlink(name_.c_str());
  }
  FakeSegment(const FakeSegment&) = delete;
  FakeSegment& operator=(const FakeSegment&) = delete;
  proto::CountersSegment* get() const { return seg_; }

 private:
  std::string name_;
  proto::CountersSegment* seg_ = nullptr;
};

TEST(CountersSegment, ReaderRefusesOtherLayouts) {
  const std::string name = "/nodecomm.ctl-unit-bad-" + std::to_string(::getpid()) + ".counters";
  const FakeSegment shm(name);
  ASSERT_NE(shm.get(), nullptr) << name << ": " << std::strerror(errno);
  proto::CountersSegment* seg = shm.get();
  try {
    ctl::CountersView view(name);
    ADD_FAILURE() << "a zeroed segment was accepted";
  } catch (const ctl::RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("bad magic"), std::string::npos) << e.what();
  }
  seg->header.magic = proto::kCountersMagic;
  seg->header.segment_bytes = sizeof(proto::CountersSegment);
  seg->header.layout_version = proto::kCountersLayoutVersion + 1;
  try {
    ctl::CountersView view(name);
    ADD_FAILURE() << "a newer layout was accepted";
  } catch (const ctl::RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("layout version"), std::string::npos) << e.what();
  }
}

// A writer descheduled in the middle of a rewrite (a loaded machine) makes the reader wait for
// it rather than fail; a writer that died there makes it fail at once, naming the pid.
TEST(CountersSegment, ReaderWaitsForADescheduledWriterAndNamesADeadOne) {
  const std::string name = "/nodecomm.ctl-unit-busy-" + std::to_string(::getpid()) + ".counters";
  const FakeSegment shm(name);
  ASSERT_NE(shm.get(), nullptr) << name << ": " << std::strerror(errno);
  proto::CountersSegment* seg = shm.get();
  seg->header.magic = proto::kCountersMagic;
  seg->header.segment_bytes = sizeof(proto::CountersSegment);
  seg->header.layout_version = proto::kCountersLayoutVersion;
  seg->daemon.pid = static_cast<uint64_t>(::getpid());
  std::atomic_ref<uint64_t> ops_seq(seg->ops.sequence);
  ops_seq.store(3, std::memory_order_release);  // odd: mid-rewrite
  ctl::CountersView view(name);
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ops_seq.store(4, std::memory_order_release);
  });
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_NO_THROW(view.read());
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(90));
  writer.join();

  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  seg->daemon.pid = static_cast<uint64_t>(child);
  ops_seq.store(5, std::memory_order_release);
  const auto t1 = std::chrono::steady_clock::now();
  try {
    view.read();
    ADD_FAILURE() << "a half-written section was read";
  } catch (const ctl::RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("died"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::to_string(child)), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t1, std::chrono::seconds(1));
}

}  // namespace
}  // namespace nodecomm
