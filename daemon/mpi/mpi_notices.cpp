#include "mpi/mpi_notices.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <utility>

namespace nodecomm::daemon {

MpiNotices::MpiNotices(MPI_Comm world, uint32_t rank, uint32_t size, CommRelease release)
    : release_(std::move(release)), rank_(rank), size_(size) {
  // Its own communicator, so notices never match an operation's messages.
  check_mpi(MPI_Comm_dup(world, &comm_), "MPI_Comm_dup (notices)", rank_);
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  // A daemon alone in its world has no one to hear from: with no receive posted, poll() makes
  // no MPI call, which on a 1-node job was a progress-engine pass (and its poll syscalls) per
  // loop of the daemon's hot path.
  if (size_ > 1) post_receive();
}

MpiNotices::~MpiNotices() {
  if (receive_ != MPI_REQUEST_NULL) {
    MPI_Cancel(&receive_);
    MPI_Request_free(&receive_);
  }
  for (auto& sent : sent_) MPI_Request_free(&sent->request);
  sent_.clear();
  if (comm_ != MPI_COMM_NULL) release_(comm_);
}

void MpiNotices::send(uint64_t tag, uint32_t rank, proto::Status status, const std::string& text) {
  Notice n{};
  n.tag = tag;
  n.from = rank_;
  n.rank = rank;
  n.status = static_cast<int32_t>(status);
  std::snprintf(n.text, sizeof(n.text), "%s", text.c_str());
  // NOLINTBEGIN(clang-analyzer-optin.mpi.MPI-Checker): poll() tests every sent notice.
  for (uint32_t peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    auto sent = std::make_unique<SentNotice>();
    sent->notice = n;
    if (MPI_Isend(&sent->notice, sizeof(Notice), MPI_BYTE, static_cast<int>(peer),
                  reserved_tag(ReservedTag::kNotices), comm_, &sent->request) == MPI_SUCCESS) {
      sent_.push_back(std::move(sent));
    }
  }
  // NOLINTEND(clang-analyzer-optin.mpi.MPI-Checker)
}

bool MpiNotices::poll(uint64_t& tag, uint32_t& rank, proto::Status& status, std::string& text) {
  // Sends finish on their own time; forget them once they have.
  std::erase_if(sent_, [](const std::unique_ptr<SentNotice>& s) {
    int done = 0;
    MPI_Test(&s->request, &done, MPI_STATUS_IGNORE);
    return done != 0;
  });
  if (receive_ == MPI_REQUEST_NULL) return false;
  int done = 0;
  if (MPI_Test(&receive_, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done == 0) return false;
  tag = incoming_.tag;
  rank = incoming_.rank;
  status = static_cast<proto::Status>(incoming_.status);
  incoming_.text[sizeof(incoming_.text) - 1] = '\0';
  text = fmt::format("node {} reports: {}", incoming_.from, incoming_.text);
  post_receive();
  return true;
}

void MpiNotices::post_receive() {
  incoming_ = {};
  if (MPI_Irecv(&incoming_, sizeof(Notice), MPI_BYTE, MPI_ANY_SOURCE,
                reserved_tag(ReservedTag::kNotices), comm_, &receive_) != MPI_SUCCESS) {
    receive_ = MPI_REQUEST_NULL;
  }
}

}  // namespace nodecomm::daemon
