// Failure notices between daemons over MPI (part of the MPI transport): a communicator of their
// own, so a notice never matches an operation's messages, one receive always posted, and sends
// that finish on their own time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mpi/mpi_common.hpp"

namespace nodecomm::daemon {

class MpiNotices {
 public:
  // Collective over `world` (duplicates it); the duplicate goes to `release` when destroyed.
  MpiNotices(MPI_Comm world, uint32_t rank, uint32_t size, CommRelease release);
  ~MpiNotices();
  MpiNotices(const MpiNotices&) = delete;
  MpiNotices& operator=(const MpiNotices&) = delete;

  // As PeerNotices::send_notice and poll_notice.
  void send(uint64_t tag, uint32_t rank, proto::Status status, const std::string& text);
  bool poll(uint64_t& tag, uint32_t& rank, proto::Status& status, std::string& text);

 private:
  struct Notice {
    uint64_t tag;
    uint32_t from;
    uint32_t rank;
    int32_t status;
    uint32_t reserved;
    char text[488];
  };
  struct SentNotice {
    Notice notice;
    MPI_Request request = MPI_REQUEST_NULL;
  };
  void post_receive();

  MPI_Comm comm_ = MPI_COMM_NULL;
  CommRelease release_;
  uint32_t rank_;
  uint32_t size_;
  MPI_Request receive_ = MPI_REQUEST_NULL;
  Notice incoming_{};
  std::vector<std::unique_ptr<SentNotice>> sent_;
};

}  // namespace nodecomm::daemon
