// What node 0 of a forming job group and one joiner tell each other over the intercommunicator
// of their rendezvous, before the group exists (part of the job formations,
// job_formation.hpp). Only non-blocking point-to-point calls, tested with sleeps in between:
// a peer that is dead (or a stale port's long-dead owner, with which Open MPI still
// "connects") never answers, and a blocking call would wait for it forever.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mpi/mpi_common.hpp"

namespace nodecomm::daemon {

enum class LinkKind : uint32_t {
  kHello = 1,  // node 0 -> joiner, first: its node count
  kReply,      // joiner -> node 0: the joiner's node index and node count
  kPrepare,    // node 0 -> joiner: every joiner is in, and node 0 holds its creation lock
  kReady,      // joiner -> node 0: so does this joiner, and it stays for kCommit or kStop
  kBusy,       // joiner -> node 0: its creation lock is taken (another formation builds)
  kLeave,      // joiner -> node 0, at any time before kReady: its job gave up
  kStop,       // node 0 -> joiner: not this time (someone was busy); let the lock go
  kCommit,     // node 0 -> joiner: the group is made now, in node order
  kAbort,      // node 0 -> joiner: the formation failed; `text` says why
  kPort,       // node 0 -> joiner: connect to the port in `text` now
};

struct LinkMessage {
  uint64_t link = 0;  // the link's id: anything else is a message of an older link, dropped
  LinkKind kind = LinkKind::kHello;
  uint32_t node = 0;
  uint32_t nodes = 0;
  uint32_t reserved = 0;
  char text[MPI_MAX_PORT_NAME] = {};

  void set_text(const std::string& s);
  std::string get_text() const;
};

class FormationLink {
 public:
  // Takes `inter` (node 0 and one joiner, over which both use `id`: rendezvous.hpp's link_id).
  FormationLink(MPI_Comm inter, uint64_t id, uint32_t node, std::string what);
  // Cancels the receive and lets unfinished sends go: they may be to a dead process. Frees
  // the intercommunicator only once finished() was called: until both sides have said all,
  // a message may still come, and Open MPI hands a message for a freed communicator to the
  // next one given its context id. A link dropped early is left allocated (a few kB).
  ~FormationLink();
  FormationLink(const FormationLink&) = delete;
  FormationLink& operator=(const FormationLink&) = delete;

  void send(LinkKind kind, uint32_t node, uint32_t nodes, const std::string& text = {});
  // A message if one has arrived (posting the receive the first time). Throws TransportError.
  bool poll(LinkMessage& out);
  // Waits, testing every millisecond, for a message until `deadline_ns` (monotonic) or until
  // `stop` says so; false then.
  bool wait(LinkMessage& out, uint64_t deadline_ns, const std::function<bool()>& stop);
  // Waits, up to `deadline_ns`, for every send to complete (an abort should arrive before the
  // link goes); false if some did not.
  bool flush(uint64_t deadline_ns);
  // Both sides have received every message the other sent on it, and will send no more.
  void finished() { finished_ = true; }

 private:
  void check(int code, const char* what) const;

  MPI_Comm inter_;
  uint64_t id_;
  bool finished_ = false;
  uint32_t node_;
  std::string what_;  // "job group <key>", for errors
  MPI_Request receive_ = MPI_REQUEST_NULL;
  LinkMessage incoming_{};
  // The sends in flight: each buffer stays put until its request completes.
  std::vector<std::unique_ptr<std::pair<LinkMessage, MPI_Request>>> sends_;
};

}  // namespace nodecomm::daemon
