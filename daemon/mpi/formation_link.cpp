#include "mpi/formation_link.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "net/transport.hpp"
#include "nodecomm/ipc/clock.hpp"

namespace nodecomm::daemon {
namespace {

// A send that completed, or failed (to a dead process): either way it is over.
bool send_over(std::pair<LinkMessage, MPI_Request>& sent) {
  int done = 0;
  if (MPI_Test(&sent.second, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS) return done != 0;
  if (sent.second != MPI_REQUEST_NULL) MPI_Request_free(&sent.second);
  return true;
}

}  // namespace

void LinkMessage::set_text(const std::string& s) {
  const size_t n = std::min(s.size(), sizeof(text) - 1);
  std::memcpy(text, s.data(), n);
  text[n] = '\0';
}

std::string LinkMessage::get_text() const {
  return std::string(text, strnlen(text, sizeof(text)));
}

FormationLink::FormationLink(MPI_Comm inter, uint64_t id, uint32_t node, std::string what)
    : inter_(inter), id_(id), node_(node), what_(std::move(what)) {
  MPI_Comm_set_errhandler(inter_, MPI_ERRORS_RETURN);
}

FormationLink::~FormationLink() {
  if (receive_ != MPI_REQUEST_NULL) {
    MPI_Cancel(&receive_);
    MPI_Request_free(&receive_);
  }
  for (auto& sent : sends_) {
    if (sent->second != MPI_REQUEST_NULL) MPI_Request_free(&sent->second);
  }
  // Local in Open MPI: nothing waits for the other side (MPI_Comm_disconnect would, forever).
  if (finished_) MPI_Comm_free(&inter_);
}

void FormationLink::check(int code, const char* what) const {
  if (code != MPI_SUCCESS) {
    throw TransportError(
        fmt::format("{} on node {} of {}: {}", what, node_, what_, mpi_error_text(code)));
  }
}

void FormationLink::send(LinkKind kind, uint32_t node, uint32_t nodes, const std::string& text) {
  auto sent = std::make_unique<std::pair<LinkMessage, MPI_Request>>();
  sent->first.link = id_;
  sent->first.kind = kind;
  sent->first.node = node;
  sent->first.nodes = nodes;
  sent->first.set_text(text);
  sent->second = MPI_REQUEST_NULL;
  // The other side is the remote group's only process, rank 0.
  check(MPI_Isend(&sent->first, sizeof(LinkMessage), MPI_BYTE, 0,
                  reserved_tag(ReservedTag::kFormation), inter_, &sent->second),
        "MPI_Isend (formation)");
  sends_.push_back(std::move(sent));
}

bool FormationLink::poll(LinkMessage& out) {
  // Finished sends are forgotten as the link goes on.
  std::erase_if(sends_, [](const auto& sent) { return send_over(*sent); });
  for (;;) {
    if (receive_ == MPI_REQUEST_NULL) {
      incoming_ = {};
      check(MPI_Irecv(&incoming_, sizeof(LinkMessage), MPI_BYTE, 0,
                      reserved_tag(ReservedTag::kFormation), inter_, &receive_),
            "MPI_Irecv (formation)");
    }
    int done = 0;
    check(MPI_Test(&receive_, &done, MPI_STATUS_IGNORE), "MPI_Test (formation)");
    if (done == 0) return false;
    if (incoming_.link != id_) continue;
    out = incoming_;
    out.text[sizeof(out.text) - 1] = '\0';
    return true;
  }
}

bool FormationLink::wait(LinkMessage& out, uint64_t deadline_ns,
                         const std::function<bool()>& stop) {
  // MPI progresses only inside its calls, so the wait tests, with sleeps that grow to 10 ms:
  // a joiner may wait minutes for the others, and each singleton's orted and the rendezvous
  // server, which do the formations' work, must not be starved of a loaded node's CPUs.
  auto pause = std::chrono::microseconds(100);
  for (;;) {
    if (poll(out)) return true;
    if (ipc::monotonic_ns() >= deadline_ns || (stop && stop())) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(10));
  }
}

bool FormationLink::flush(uint64_t deadline_ns) {
  for (;;) {
    std::erase_if(sends_, [](const auto& sent) { return send_over(*sent); });
    if (sends_.empty()) return true;
    if (ipc::monotonic_ns() >= deadline_ns) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace nodecomm::daemon
