// The counters segment: its layout constants, the latency buckets, the seqlock under a racing
// writer, a round trip from the daemon's publisher to nodecommctl's reader (several jobs, their
// clients and operations, a trace), and what the reader refuses or waits for.
#include "observe/counters.hpp"

#include <fcntl.h>
#include <fmt/format.h>
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

#include "engine/job.hpp"
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
  EXPECT_EQ(offsetof(proto::CountersSegment, params), 5632u);
  EXPECT_EQ(offsetof(proto::CountersSegment, jobs), 10784u);
  EXPECT_EQ(offsetof(proto::CountersSegment, clients), 19768u);
  EXPECT_EQ(offsetof(proto::CountersSegment, ops), 25424u);
  EXPECT_EQ(sizeof(proto::CountersSegment), 43904u);
  EXPECT_EQ(sizeof(proto::JobSlot), 280u);
  EXPECT_GE(proto::kCounterCollectives, static_cast<uint32_t>(proto::Collective::kCount));
  EXPECT_EQ(proto::kCounterJobs, 32u);  // nodecommd's default --max-jobs
  EXPECT_EQ(proto::kCountersLayoutVersion, 4u);
  // Version 4 took the last two reserved words of Totals; nothing else moved.
  EXPECT_EQ(offsetof(proto::Totals, sched_eager), 29u * 8);
  EXPECT_EQ(offsetof(proto::Totals, comms_retired), 30u * 8);
  EXPECT_EQ(offsetof(proto::Totals, late_messages_dropped), 31u * 8);
  EXPECT_EQ(proto::kTraceLayoutVersion, 2u);
  EXPECT_EQ(sizeof(proto::TraceEvent), 96u);
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

// A writer rewrites the operations table in bursts, every slot stamped with the same
// generation; the reader must never see two generations in one snapshot. The pauses between
// bursts stand for the publisher's period: without them, on two busy cores the reader's try
// budget can run out inside every rewrite, and the test would measure the machine's load.
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
      if (gen % 16 == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });
  auto out = std::make_unique<proto::OpsSection>();
  int consistent = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (int i = 0; (i < 20000 || consistent < 100) && std::chrono::steady_clock::now() < deadline;
       ++i) {
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
  EXPECT_GE(consistent, 100);
}

TEST(CountersSeqlock, ABusyWriterMakesTheReadFailNotTear) {
  auto shared = std::make_unique<proto::JobsSection>();
  shared->sequence = 7;  // odd: a writer died in the middle of a rewrite
  auto out = std::make_unique<proto::JobsSection>();
  EXPECT_FALSE(proto::seqlock_read(*shared, *out, 100));
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
    publisher.housekeeping(123'000'000'000ull, 122'000'000'000ull, {}, none, 60);
    s = view.read();
    EXPECT_EQ(s.param("chunk-size"), "64K");
    EXPECT_EQ(s.params.generation, 1u);
    EXPECT_EQ(s.totals.settings_changed, 1u);
    EXPECT_EQ(s.liveness.heartbeat, 1u);
    EXPECT_EQ(s.liveness.last_progress_monotonic_ns, 122'000'000'000ull);
    EXPECT_EQ(s.jobs.count, 0u);
    EXPECT_EQ(s.jobs.total, 0u);
    EXPECT_EQ(s.first_job(), nullptr);
    EXPECT_EQ(s.ops.total, 0u);

    daemon::algorithm_tally().count_ring(5);
    publisher.housekeeping(124'000'000'000ull, 124'000'000'000ull, {}, none, 60);
    s = view.read();
    EXPECT_GE(s.totals.ring_slices, 5u);
    EXPECT_GE(s.totals.ring_allreduces, 1u);

    // The groups this daemon left: a gauge and a counter, as the heartbeat pass hands them.
    EXPECT_EQ(s.totals.comms_retired, 0u);
    EXPECT_EQ(s.totals.late_messages_dropped, 0u);
    publisher.retired_comms(daemon::RetiredComms{3, 20});
    s = view.read();
    EXPECT_EQ(s.totals.comms_retired, 3u);
    EXPECT_EQ(s.totals.late_messages_dropped, 20u);
    publisher.retired_comms(daemon::RetiredComms{0, 20});
    s = view.read();
    EXPECT_EQ(s.totals.comms_retired, 0u);
    EXPECT_EQ(s.totals.late_messages_dropped, 20u);
  }
  // The publisher unlinks its segment when it goes.
  EXPECT_NE(::access(("/dev/shm" + name).c_str(), F_OK), 0);
  EXPECT_THROW(ctl::CountersView{name}, ctl::RuntimeError);
}

// A submission of an f32 allreduce of `count` elements as sequence number `seq`.
daemon::Submission allreduce(uint64_t seq, uint64_t count, uint64_t submitted_ns) {
  daemon::Submission sub;
  sub.desc = proto::OpDescriptor{};
  sub.desc.seq = seq;
  sub.desc.count = count;
  sub.desc.collective = static_cast<uint16_t>(proto::Collective::kAllreduce);
  sub.desc.dtype = static_cast<uint8_t>(proto::DType::kF32);
  sub.submitted_ns = submitted_ns;
  return sub;
}

// The world communicator of a job with `local` ranks on this one node.
std::unique_ptr<daemon::Communicator> world(uint32_t local) {
  daemon::CommLayout lay;
  lay.size = local;
  lay.node_sizes = {local};
  lay.node_offsets = {0};
  for (uint32_t r = 0; r < local; ++r) {
    lay.members.push_back(r);
    lay.member_ranks.push_back(r);
    lay.world_rank_of.push_back(r);
    lay.position.push_back(r);
    lay.rank_at.push_back(r);
  }
  return std::make_unique<daemon::Communicator>(0, std::move(lay));
}

// Two jobs at once: the jobs table lists both, oldest first, with their owners and their own
// completed operations; clients and operations name their job's slot; a job that ends leaves
// the table and its clients say no job; jobs_formed counts every job that ran; a trace names
// each event's job.
TEST(CountersSegment, EveryJobHasItsSlotAndItsClientsAndOperationsNameIt) {
  daemon::DaemonConfig config;
  config.instance = "ctl-unit-jobs-" + std::to_string(::getpid());
  const std::unique_ptr<daemon::Transport> transport = daemon::make_loopback_transport();
  daemon::CountersPublisher publisher;
  publisher.open(config, *transport, "/tmp/rt-" + config.instance, "/tmp/rt/nodecommd.sock");
  ASSERT_TRUE(publisher.active());
  ASSERT_EQ(
      publisher.trace().start(ipc::trace_shm_name(config.instance), config.instance, 0, 64, -1),
      "");

  daemon::Job a("a", 2);  // made first: the lower serial, so the first slot
  daemon::Job b("b", 1);
  daemon::CountersPublisher::ClientMap clients;
  const auto connect = [&](uint32_t id, uint32_t uid, daemon::Job* job, uint32_t rank) {
    auto c = std::make_unique<daemon::ClientSession>(
        id, ipc::Fd(), ipc::PeerCredentials{static_cast<pid_t>(100 + id), uid, uid});
    c->job = job;
    c->local_rank = rank;
    if (job != nullptr) job->members[rank] = c.get();
    clients[id] = std::move(c);
  };
  connect(1, 1000, &a, 1);  // rank 1 of a said hello first
  connect(2, 2000, &b, 0);
  connect(3, 0, nullptr, 0);  // nodecommctl, say
  const uint64_t t0 = 200'000'000'000ull;
  const std::vector<const daemon::Job*> both = {&b, &a};  // any order
  publisher.housekeeping(t0, t0, both, clients, 1);
  ctl::CountersView view(ipc::counters_shm_name(config.instance));
  ctl::Snapshot s = view.read();
  ASSERT_EQ(s.jobs.count, 2u);
  EXPECT_EQ(s.jobs.slots[0].owner_uid, 1000u);  // no rank 0 yet: the lowest rank that came
  connect(0, 1001, &a, 0);
  a.attached = 2;
  a.state = daemon::Job::State::kRunning;
  a.world_size = 2;
  a.comms[0] = world(2);
  b.comms[0] = world(1);
  // One allreduce of a completes; b's seq 1 (older) and a's seq 2 (rank 1 missing) wait.
  daemon::Operation done;
  done.seq = 1;
  done.slots = {allreduce(1, 256, t0), allreduce(1, 256, t0)};
  done.first_arrival_ns = t0;
  publisher.op_completed(a, *a.comms[0], done, proto::Status::kOk, t0 + 1000);
  b.comms[0]->add(0, allreduce(1, 8, t0 - 5'000'000'000ull));
  a.comms[0]->add(0, allreduce(2, 16, t0 - 1'000'000'000ull));
  publisher.op_completed(b, *b.comms[0], done, proto::Status::kTimeout, t0 + 2000);

  publisher.housekeeping(t0 + 200'000'000, t0, both, clients, 1);
  s = view.read();
  EXPECT_EQ(s.jobs.snapshot, s.clients.snapshot);
  EXPECT_EQ(s.jobs.snapshot, s.ops.snapshot);
  ASSERT_EQ(s.jobs.count, 2u);
  EXPECT_EQ(s.jobs.total, 2u);
  const proto::JobSlot& ja = s.jobs.slots[0];
  const proto::JobSlot& jb = s.jobs.slots[1];
  EXPECT_EQ(ipc::bounded_text(ja.name), "a");
  EXPECT_EQ(ja.serial, a.serial);
  EXPECT_EQ(ja.state, static_cast<uint32_t>(proto::CountersJobState::kRunning));
  EXPECT_EQ(ja.owner_uid, 1001u);  // local rank 0's
  EXPECT_EQ(ja.local_size, 2u);
  EXPECT_EQ(ja.attached, 2u);
  EXPECT_EQ(ja.world_size, 2u);
  EXPECT_EQ(ja.ops_completed, 1u);
  EXPECT_EQ(ja.ops_failed, 0u);
  EXPECT_EQ(ja.bytes_completed, 1024u);
  EXPECT_EQ(ja.ops_in_flight, 1u);
  EXPECT_GT(ja.started_realtime_ns, 0u);
  EXPECT_EQ(ipc::bounded_text(jb.name), "b");
  EXPECT_EQ(jb.serial, b.serial);
  EXPECT_EQ(jb.state, static_cast<uint32_t>(proto::CountersJobState::kAttaching));
  EXPECT_EQ(jb.owner_uid, 2000u);
  EXPECT_EQ(jb.ops_completed, 1u);
  EXPECT_EQ(jb.ops_failed, 1u);
  EXPECT_EQ(jb.bytes_completed, 0u);
  EXPECT_EQ(jb.ops_in_flight, 1u);
  EXPECT_EQ(s.totals.jobs_formed, 1u);  // b never ran
  EXPECT_EQ(s.totals.ops_completed, 2u);
  ASSERT_EQ(s.clients.count, 4u);
  for (uint32_t i = 0; i < s.clients.count; ++i) {
    const proto::ClientSlot& c = s.clients.slots[i];
    const uint32_t expected[] = {1, 1, 2, 0};  // clients 0, 1 (a), 2 (b), 3 (none)
    EXPECT_EQ(c.job, expected[c.client_id]) << "client " << c.client_id;
    EXPECT_EQ(c.ops_completed, c.client_id <= 1 ? 1u : c.client_id == 2 ? 1u : 0u);
  }
  ASSERT_EQ(s.ops.total, 2u);
  ASSERT_EQ(s.ops.count, 2u);
  EXPECT_EQ(s.ops.slots[0].job, 2u);  // b's, the oldest, first
  EXPECT_EQ(s.ops.slots[0].seq, 1u);
  EXPECT_EQ(s.ops.slots[0].stalled, 1u);
  EXPECT_EQ(s.ops.slots[1].job, 1u);
  EXPECT_EQ(s.ops.slots[1].seq, 2u);
  ASSERT_EQ(s.ops.slots[1].missing_count, 1u);
  EXPECT_EQ(s.ops.slots[1].missing_local_ranks[0], 1u);
  EXPECT_EQ(s.job_name(s.ops.slots[1].job), "a");

  // nodecommctl's --job: that job alone, renumbered as slot 1.
  const ctl::Snapshot only_b = ctl::only_job(s, "b");
  ASSERT_EQ(only_b.jobs.count, 1u);
  EXPECT_EQ(only_b.jobs.slots[0].serial, b.serial);
  ASSERT_EQ(only_b.clients.count, 1u);
  EXPECT_EQ(only_b.clients.slots[0].client_id, 2u);
  EXPECT_EQ(only_b.clients.slots[0].job, 1u);
  ASSERT_EQ(only_b.ops.count, 1u);
  EXPECT_EQ(only_b.ops.slots[0].job, 1u);
  EXPECT_EQ(ctl::only_job(s, "a").clients.count, 2u);
  try {
    ctl::only_job(s, "nosuch");
    ADD_FAILURE() << "a job that does not exist was found";
  } catch (const ctl::RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("no job 'nosuch'; its jobs: 'a', 'b'"), std::string::npos)
        << e.what();
  }

  // The trace: each event names its job, and the trace keeps the names.
  publisher.trace().stop();
  const ctl::TraceData trace = ctl::read_trace(ipc::trace_shm_name(config.instance));
  ASSERT_EQ(trace.events.size(), 2u);
  ASSERT_EQ(trace.jobs.size(), 2u);
  EXPECT_EQ(trace.events[0].job, static_cast<uint32_t>(a.serial));
  EXPECT_EQ(trace.events[1].job, static_cast<uint32_t>(b.serial));
  EXPECT_EQ(trace.job_name(trace.events[0].job), "a");
  EXPECT_EQ(trace.job_name(trace.events[1].job), "b");

  // a ends (its members leave it); b runs and is counted as formed too.
  for (daemon::ClientSession* member : a.members) member->job = nullptr;
  b.state = daemon::Job::State::kRunning;
  const std::vector<const daemon::Job*> only = {&b};
  publisher.housekeeping(t0 + 400'000'000, t0, only, clients, 1);
  s = view.read();
  ASSERT_EQ(s.jobs.count, 1u);
  EXPECT_EQ(s.jobs.total, 1u);
  EXPECT_EQ(s.jobs.slots[0].serial, b.serial);
  EXPECT_EQ(s.jobs.slots[0].ops_completed, 1u);  // its own, kept
  EXPECT_EQ(s.totals.jobs_formed, 2u);
  for (uint32_t i = 0; i < s.clients.count; ++i) {
    EXPECT_EQ(s.clients.slots[i].job, s.clients.slots[i].client_id == 2 ? 1u : 0u);
  }
  ASSERT_EQ(s.ops.count, 1u);
  EXPECT_EQ(s.ops.slots[0].job, 1u);
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
  // A daemon of the release before (layout 3, with Totals' last words reserved): both
  // versions are named.
  seg->header.layout_version = proto::kCountersLayoutVersion - 1;
  try {
    ctl::CountersView view(name);
    ADD_FAILURE() << "the layout before was accepted";
  } catch (const ctl::RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  fmt::format("has counters layout version {}, this nodecommctl reads version {}",
                              proto::kCountersLayoutVersion - 1, proto::kCountersLayoutVersion)),
              std::string::npos)
        << e.what();
  }
}

// Clients and operations name their job by its slot, so the reader takes the three tables of
// one housekeeping pass: while they disagree (a pass half published), it reads again.
TEST(CountersSegment, ReaderTakesJobsClientsAndOpsOfOneSnapshot) {
  const std::string name = "/nodecomm.ctl-unit-snap-" + std::to_string(::getpid()) + ".counters";
  const FakeSegment shm(name);
  ASSERT_NE(shm.get(), nullptr) << name << ": " << std::strerror(errno);
  proto::CountersSegment* seg = shm.get();
  seg->header.magic = proto::kCountersMagic;
  seg->header.segment_bytes = sizeof(proto::CountersSegment);
  seg->header.layout_version = proto::kCountersLayoutVersion;
  seg->daemon.pid = static_cast<uint64_t>(::getpid());
  seg->jobs.snapshot = 8;
  seg->clients.snapshot = 8;
  seg->ops.snapshot = 7;  // the pass before
  ctl::CountersView view(name);
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::atomic_ref<uint64_t>(seg->ops.snapshot).store(8, std::memory_order_release);
  });
  const auto t0 = std::chrono::steady_clock::now();
  ctl::Snapshot s;
  EXPECT_NO_THROW(s = view.read());
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(90));
  EXPECT_EQ(s.ops.snapshot, 8u);
  writer.join();
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
