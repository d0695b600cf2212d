#include "crossrank_engine.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstring>
#include <memory>

#include "session/client_session.hpp"
#include "crossrank_input.hpp"
#include "engine/engine.hpp"
#include "config/log.hpp"
#include "nodecomm/ipc/ring.hpp"
#include "engine/staging.hpp"
#include "net/transport.hpp"

namespace nodecomm::fuzz {
namespace {

constexpr uint32_t kRingCapacity = 4;
constexpr int kMaxPolls = 8;  // a split takes two passes; everything else one

// A client and the daemon's session for it. Made once per process (a segment costs syscalls)
// and reused by every input, ring positions carrying on, as one long-lived client would.
struct Client {
  daemon::ClientSession session;
  ipc::RingProducer<proto::OpDescriptor> submit;
  ipc::RingConsumer<proto::Completion> complete;

  explicit Client(uint32_t id)
      : session(id, ipc::Fd(), ipc::PeerCredentials{::getpid(), ::geteuid(), ::getegid()}) {
    ipc::SegmentSpec spec;
    spec.submit_capacity = kRingCapacity;
    spec.complete_capacity = kRingCapacity;
    spec.arena_bytes = kEngineArena;
    session.attach_segment(ipc::Segment::create(spec, id, id));
    session.set_state(daemon::ClientSession::State::kJoined);
    const ipc::Segment& seg = session.segment();
    submit = ipc::RingProducer<proto::OpDescriptor>(&seg.submit_ring(), seg.submit_slots(),
                                                    seg.submit_capacity());
    complete = ipc::RingConsumer<proto::Completion>(&seg.complete_ring(), seg.complete_slots(),
                                                    seg.complete_capacity());
  }
};

std::vector<std::unique_ptr<Client>>& clients() {
  static std::vector<std::unique_ptr<Client>> all = [] {
    daemon::Log::get().set_level(daemon::LogLevel::kError);  // refusals are the normal case
    std::vector<std::unique_ptr<Client>> made;
    for (uint32_t r = 0; r < kMaxRanks; ++r) made.push_back(std::make_unique<Client>(r));
    return made;
  }();
  return all;
}

// One pool for every input, as the daemon has one for every job: what an earlier operation
// left in it is what a delivery of unstaged bytes would leak. It starts out poisoned.
daemon::StagingPool& staging() {
  static daemon::StagingPool pool(-1, size_t{64} << 20);
  return pool;
}

}  // namespace

EngineOutcome run_on_engine(const std::vector<EngineRank>& ranks,
                            const std::function<void(const std::string&, int)>& fail) {
  static const bool poisoned = [] {
    daemon::StagingPool::Buffer b = staging().acquire(size_t{1} << 20);
    std::memset(b.data, 0xee, b.capacity);
    staging().release(b);
    return true;
  }();
  (void)poisoned;
  const auto n = static_cast<uint32_t>(ranks.size());
  auto transport = daemon::make_loopback_transport();
  daemon::Engine engine(*transport, staging());
  daemon::Job job("crossrankfuzz", n);
  job.state = daemon::Job::State::kRunning;
  job.world_size = n;
  daemon::CommLayout lay;
  lay.size = n;
  std::vector<uint32_t> all;
  for (uint32_t r = 0; r < n; ++r) {
    all.push_back(r);
    lay.members.push_back(r);
    lay.member_ranks.push_back(r);
    lay.world_rank_of.push_back(r);
  }
  lay.set_ranks_by_node({all});
  job.comms.emplace(0, std::make_unique<daemon::Communicator>(0, lay));

  for (uint32_t r = 0; r < n; ++r) {
    Client& c = *clients()[r];
    c.session.job = &job;
    c.session.local_rank = r;
    c.session.world_rank = r;
    c.session.next_seq.clear();
    c.session.violation.clear();
    std::memcpy(c.session.segment().arena(), ranks[r].arena.data(), kEngineArena);
    job.members[r] = &c.session;
    ++job.attached;
    if (c.submit.try_push(ranks[r].d) != ipc::RingResult::kOk)
      fail("submission ring full", __LINE__);
  }

  EngineOutcome out;
  out.completions.resize(n);
  std::vector<bool> done(n, false);
  uint32_t completed = 0;
  for (int pass = 0; pass < kMaxPolls && completed < n; ++pass) {
    engine.poll(job);
    for (uint32_t r = 0; r < n; ++r) {
      proto::Completion c;
      while (clients()[r]->complete.try_pop(c) == ipc::RingResult::kOk) {
        if (done[r]) fail(fmt::format("rank {} got a second completion", r), __LINE__);
        if (c.seq != ranks[r].d.seq)
          fail(fmt::format("rank {}: completion for seq {}", r, c.seq), __LINE__);
        out.completions[r] = c;
        done[r] = true;
        ++completed;
      }
    }
  }
  if (completed < n) {
    fail(fmt::format("{} of {} ranks got no completion after {} engine passes", n - completed, n,
                     kMaxPolls),
         __LINE__);
  }
  for (uint32_t r = 0; r < n; ++r) {
    const uint8_t* arena = clients()[r]->session.segment().arena();
    out.arenas.emplace_back(arena, arena + kEngineArena);
    clients()[r]->session.job = nullptr;
  }
  return out;
}

}  // namespace nodecomm::fuzz
