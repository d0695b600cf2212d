// Node groups over MPI (part of the MPI transport): each NodeComm is a communicator for the
// native collectives plus `lanes` duplicates of it for point-to-point messages, so the two never
// match each other's messages. Groups are created on short-lived threads, since MPI's
// communicator creation blocks (see NodeGroups::start_split_groups).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <unordered_map>
#include <vector>

#include "mpi/mpi_common.hpp"
#include "mpi/mpi_p2p.hpp"
#include "net/transport.hpp"

namespace nodecomm::daemon {

class MpiGroups {
 public:
  // kAllNodes is a duplicate of `base` (MPI_COMM_WORLD, or a job's group in the service), with
  // `lanes` more duplicates for its point-to-point messages (collective over `base`). Every
  // communicator it made and used goes to `release` when freed.
  MpiGroups(MPI_Comm base, uint32_t rank, uint32_t lanes, int max_tag, bool thread_multiple,
            CommRelease release);
  // Waits for finished creations, leaves blocked ones behind (a peer died), frees every
  // request and releases every communicator it made (never `base`, which is its owner's).
  ~MpiGroups();
  MpiGroups(const MpiGroups&) = delete;
  MpiGroups& operator=(const MpiGroups&) = delete;

  MPI_Comm comm(NodeComm id) const;
  uint32_t rank(NodeComm id) const;
  uint32_t size(NodeComm id) const;
  MpiPointToPoint& p2p(NodeComm id);

  // Starts the creation that `handle` (the transport's) names.
  void start_split(TransportHandle handle, NodeComm parent, std::vector<bool> include);
  // Whether `handle` is a creation started here; if so, `done` says whether it has finished
  // (throws TransportError if it failed).
  bool test(TransportHandle handle, bool& done);
  std::vector<NodeComm> take(TransportHandle handle);
  void free(NodeComm id);

  size_t creations_in_flight() const { return jobs_.size(); }
  uint32_t lanes() const { return lanes_; }
  uint64_t completions() const { return table_->completions(); }

 private:
  // A communicator creation running on its own thread.
  struct Job {
    std::thread thread;
    std::atomic<bool> done{false};
    int status = MPI_SUCCESS;
    std::vector<MPI_Comm> made;
    std::vector<std::vector<MPI_Comm>> lanes;  // per entry of made
  };
  struct Finished {
    std::vector<MPI_Comm> comms;
    std::vector<std::vector<MPI_Comm>> lanes;
  };
  struct Group {
    MPI_Comm comm = MPI_COMM_NULL;
    std::unique_ptr<MpiPointToPoint> net;
  };
  void add(NodeComm id, MPI_Comm comm, std::vector<MPI_Comm> lanes);
  void release_lanes_and_comm(Group& group);
  const Group& group(NodeComm id) const;

  uint32_t rank_;
  uint32_t lanes_;
  int max_tag_;
  bool thread_multiple_;
  CommRelease release_;
  NodeComm next_comm_ = 1;
  std::unique_ptr<RequestTable> table_;
  std::unordered_map<NodeComm, Group> groups_;
  std::unordered_map<TransportHandle, std::shared_ptr<Job>> jobs_;
  std::unordered_map<TransportHandle, Finished> finished_;
};

}  // namespace nodecomm::daemon
