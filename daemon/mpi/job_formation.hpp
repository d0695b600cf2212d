// One job group's formation (part of the MPI job groups, job_groups_mpi.cpp), on a thread of
// its own: it waits on daemons that may arrive much later, and its MPI steps block.
//
// Every communicator creation of a formation happens under its daemon's creation lock
// (MpiRuntime::creation_lock), taken by every daemon involved before any of them calls MPI,
// or by none: a daemon that finds its lock taken by another formation says "busy", and the
// others let go and try again after a random pause. So two formations of the same daemons
// never each hold one half, and nobody waits inside MPI for a daemon that is not there.
//
// Rendezvous (rendezvous.hpp has the names): node 0 takes a free generation of the key and
// publishes one port per joiner (job_formation_node0.cpp). A joiner looks its port up and pings
// node 0 through the rendezvous server (job_formation_joiner.cpp); a thread of node 0 answers
// every ping, so a joiner tells a live node 0 from one that died without connecting to it.
// Node 0 calls the joiners that pinged lately one at a time ("go", holding its lock), the
// joiner takes its lock ("ack") and connects while node 0 accepts, both over MPI_COMM_SELF.
// The pair then greets over its intercommunicator without blocking calls (formation_link.hpp).
// Commit: once every joiner is in, node 0 asks all to take their locks (prepare); all ready,
// it commits, else all let go and it asks again later. A joiner whose job gave up says so
// instead (leave), and the formation fails everywhere.
// Group: holding the locks, node 0 adds the joiners in node order, each through a fresh port
// of its own (accepted by the growing group, MPI_Intercomm_merge); the group is ordered by
// node index (MPI_Comm_split), every member checks that all agree on the node count
// (MPI_Allgather), and the transport is made over it. Only these steps block on other
// daemons, and only on daemons that committed a moment before.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "mpi/formation_link.hpp"
#include "mpi/mpi_common.hpp"
#include "mpi/mpi_runtime.hpp"
#include "net/transport.hpp"

namespace nodecomm::daemon {

// Generations of one key tried before giving up, and how long a dead node 0's stale names are
// waited out (both sides of the rendezvous use them).
inline constexpr uint32_t kMaxGenerations = 1000;
inline constexpr uint64_t kFlushNs = 1000000000ULL;

struct FormationRequest {
  std::string key;
  uint32_t node = 0;
  uint32_t nodes = 2;
  uint32_t lanes = 1;
};

class JobFormation {
 public:
  JobFormation(std::shared_ptr<MpiRuntime> runtime, FormationRequest request);
  ~JobFormation();
  JobFormation(const JobFormation&) = delete;
  JobFormation& operator=(const JobFormation&) = delete;

  // The whole formation, on its own thread. Never throws: it keeps the transport or the error.
  void run();
  // The job gave up. The formation ends at its next wait (within exchange_timeout_s()), unless
  // it has committed, which it then completes.
  void cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  // True once run() has returned.
  bool done() const { return done_.load(std::memory_order_acquire); }
  // After done(): the job's transport, or throws the formation's TransportError.
  std::unique_ptr<Transport> take();

 private:
  using Names = std::vector<std::pair<std::string, std::string>>;
  using Links = std::vector<std::unique_ptr<FormationLink>>;

  // Node 0's side (job_formation_node0.cpp).
  std::unique_ptr<Transport> run_node0();
  // Until every joiner is in: empty then, else why not (the joiners in are told by the caller).
  std::string gather_joiners(const std::string& base, uint32_t generation,
                             const std::vector<std::string>& ports, Names& published, Links& links);
  // Whether the joiner, called after its ping `ping`, holds its creation lock and connects.
  bool joiner_acks(const std::string& base, uint32_t generation, uint32_t joiner, uint32_t ping);
  // Accepts the joiner that acked, lets `lock` go, and greets it: nullptr if that failed.
  std::unique_ptr<FormationLink> accept_joiner(uint32_t joiner, const std::string& port,
                                               uint64_t id,
                                               std::unique_lock<std::timed_mutex>& lock);
  void abort_joiners(Links& links, const std::string& why);
  std::unique_lock<std::timed_mutex> commit(Links& links);
  MPI_Comm grow(Links& links);
  // A joiner's side (job_formation_joiner.cpp).
  std::unique_ptr<Transport> run_joiner();
  std::unique_ptr<FormationLink> rendezvous_as_joiner(Names& pings);
  // Pings node 0 of `generation` through the rendezvous server: true once it answers, false
  // after one exchange timeout (it died) or once cancelled. Adds the ping to `pings` (names
  // this joiner published) and says its number in `ping`.
  bool ping_node0(const std::string& base, uint32_t generation, Names& pings, uint32_t& ping);
  std::unique_lock<std::timed_mutex> await_commit(FormationLink& link);
  MPI_Comm join_group(FormationLink& link);
  // Both (job_formation.cpp).
  std::unique_ptr<Transport> finish(MPI_Comm grown);
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }
  // TransportError "<what> on node <n> of job group <key>: <MPI's text>" unless MPI_SUCCESS.
  void check(int code, const char* what) const;
  [[noreturn]] void fail(const std::string& why) const;
  uint64_t timeout_ns() const;
  double elapsed_s() const;

  std::shared_ptr<MpiRuntime> runtime_;
  FormationRequest request_;
  std::string what_;  // "job group <key>", printable
  uint64_t started_ns_ = 0;
  // relaxed: the flag carries no data; the formation only has to see it at its next wait.
  std::atomic<bool> cancelled_{false};
  // release by run() once the result is stored, acquire by done(): the result is then visible.
  std::atomic<bool> done_{false};
  std::unique_ptr<Transport> transport_;
  std::string error_;
};

}  // namespace nodecomm::daemon
